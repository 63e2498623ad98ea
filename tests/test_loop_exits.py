"""A value a loop carries at another size on the path that breaks than on the paths that go on.

TorchScript yields the carried values from the `prim::If` that breaks: on the breaking side as they
are at the `break`, on the other as the body gives them back. Where the body changes a carried
value's size and gives it back only after the `break` (torchaudio's Tacotron2 decoder: the prenet
makes the 80-wide frame 256 wide, `decoder_input = mel_spec` comes after the exits), the next
iteration must be typed by the side that goes on; the loop's result holds both sizes
(`specialize/loop_exits.py`). Typed by the join of both, the next iteration's `Linear(4, 6)` failed
to type ("a and b must have same reduction dim").
"""

from __future__ import annotations

import torch
from torch import nn

from dycl_iree.program import REFINE, HostOp, Loop, TensorType, iter_nodes
from tests.conftest import check_hosts, export_compiled


class _WidenThenBreak(nn.Module):
    """`x` is 6 wide between `self.a` and `x = y`; a `break` in between leaves the loop with it so."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.b = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor, limit: float):
        out = torch.zeros_like(x)
        steps = 0
        for _ in range(5):
            x = self.a(x)
            y = self.b(x)
            out = out + y
            steps += 1
            if float(y.abs().sum()) > limit:
                break
            x = y
        return out, x, steps


class _StopInsideAStop(nn.Module):
    """A `while True` decoder in the style of text-to-speech ones: the frame goes through a wider
    prenet, and two nested conditions (the gate, then a length cap) stop it before the frame is
    fed back."""

    def __init__(self) -> None:
        super().__init__()
        self.prenet = nn.Linear(3, 8)
        self.project = nn.Linear(8, 3)
        self.gate = nn.Linear(8, 1)

    def forward(self, frame: torch.Tensor, cap: int):
        frames = [frame]
        while True:
            frame = torch.relu(self.prenet(frame))
            gate = torch.sigmoid(self.gate(frame)).min()
            mel = torch.tanh(self.project(frame))
            frames.append(mel)
            if bool(gate > 0.5):
                if len(frames) > 1:
                    break
            if len(frames) > cap:
                break
            frame = mel
        return torch.stack(frames), frame


# Break at steps 1, 2, 3 and 4, and not at all, on the test's input (its step sums: 1.89, 2.24, 2.29,
# 2.31, 2.32).
LIMITS = (1.0, 2.0, 2.25, 2.3, 3.0)


def _loop(bundle) -> Loop:
    (loop,) = [node for node in iter_nodes(bundle.program.body) if isinstance(node, Loop)]
    return loop


def _refines(loop: Loop) -> list[HostOp]:
    return [node for node in loop.body.nodes if isinstance(node, HostOp) and node.target == REFINE]


def test_a_value_a_break_leaves_wider_is_carried_at_its_going_on_size(tmp_path) -> None:
    torch.manual_seed(0)
    bundle, scripted, compiled, python = export_compiled(
        tmp_path, _WidenThenBreak(), (torch.randn(2, 4), 10.0), "widen"
    )
    loop = _loop(bundle)
    (refine,) = _refines(loop)
    # The loop carries `x` 4 or 6 wide; the body reads it 4 wide, as every path that goes on gives it.
    assert refine.args[0].type.shape == (2, None) and refine.outputs[0].type.shape == (2, 4)
    assert refine.args[0] in loop.body.params
    steps, widths = set(), set()
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    for limit in LIMITS:
        want = check_hosts(scripted, [compiled, python], (x, limit))
        steps.add(want[2])
        widths.add((want[2], want[1].shape[1]))
    assert steps == {1, 2, 3, 4, 5}, steps  # a break at each step, and none
    assert (5, 4) in widths and any(w == 6 for _, w in widths), widths  # both sizes leave the loop
    (label,) = [label for label in python.trip_counts]
    assert set(python.trip_counts[label]) == steps, python.trip_counts


def test_nested_stops_in_a_while_true_decoder(tmp_path) -> None:
    torch.manual_seed(4)
    bundle, scripted, compiled, python = export_compiled(
        tmp_path, _StopInsideAStop(), (torch.randn(1, 3), 4), "decoder"
    )
    (refine,) = _refines(_loop(bundle))
    assert isinstance(refine.outputs[0].type, TensorType) and refine.outputs[0].type.shape == (1, 3)
    lengths, widths = set(), set()
    for seed in range(12):
        frame = torch.randn(1, 3, generator=torch.Generator().manual_seed(seed)) * 3.0
        for cap in (1, 3, 6):
            frames, last = check_hosts(scripted, [compiled, python], (frame, cap))
            lengths.add((len(frames) - 1, cap))
            widths.add(last.shape[1])
    # The gate stopped some runs before their cap (after one frame or more), the cap others.
    assert any(n < cap for n, cap in lengths) and any(n == cap for n, cap in lengths), lengths
    assert widths == {8}, widths  # both breaks come before the frame is fed back
