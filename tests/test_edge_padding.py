"""Reflection and replication padding over run-time sizes (`decompositions.edge_pad_of_run_time_size`).

torch-mlir's decomposition of these pads subtracts an index tensor from the size, which the importer
wrote as an invalid op (`aten.sub.Tensor` of an int); the compiled host's inlining then failed with a
bare MLIRError. The lowering now verifies each imported function, so such an op is reported as the
model's op that made it.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import dycl_iree
from dycl_iree import decompositions

from .conftest import check_hosts, check_hosts_raise, export_compiled


class ResidualStack(nn.Module):
    """A HiFi-GAN generator's shape at small sizes: reflection-padded 1-D convolutions over a
    run-time number of frames, a replication-padded one, and an upsampling transposed convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Sequential(nn.ReflectionPad1d(3), nn.Conv1d(4, 8, 7))
        self.up = nn.ConvTranspose1d(8, 4, 4, stride=2, padding=1)
        self.post = nn.Sequential(nn.ReplicationPad1d((2, 1)), nn.Conv1d(4, 1, 4))

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        h = nn.functional.leaky_relu(self.pre(mel), 0.1)
        return torch.tanh(self.post(nn.functional.leaky_relu(self.up(h), 0.1)))


class StyleBlock(nn.Module):
    """A style-transfer network's residual block (reflection padding, convolution, instance norm),
    skipped where the input is flat, over run-time heights and widths."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.ReflectionPad2d(1),
            nn.Conv2d(3, 3, 3),
            nn.InstanceNorm2d(3),
            nn.ReLU(),
            nn.ReplicationPad2d((1, 1, 1, 1)),
            nn.Conv2d(3, 3, 3),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x.std()) < 0.5:
            return x
        return x + self.body(x)


def test_vocoder_over_run_time_lengths(tmp_path) -> None:
    torch.manual_seed(0)
    model = ResidualStack().eval()
    _, scripted, compiled, python = export_compiled(
        tmp_path, model, (torch.randn(1, 4, 10),), "vocoder", [{2: "frames"}]
    )
    for frames in (10, 4, 23):
        check_hosts(scripted, [compiled, python], (torch.randn(1, 4, frames),))
    # A reflection by at least the size: PyTorch's error on both hosts.
    check_hosts_raise(scripted, [compiled, python], (torch.randn(1, 4, 3),), "Padding size should be less than")


def test_style_block_over_run_time_sizes(tmp_path) -> None:
    torch.manual_seed(1)
    model = StyleBlock().eval()
    _, scripted, compiled, python = export_compiled(
        tmp_path, model, (torch.randn(1, 3, 6, 7),), "style", [{2: "h", 3: "w"}]
    )
    for height, width in ((6, 7), (3, 9), (11, 4)):
        for scale in (1.0, 0.1):  # the block runs, and is skipped
            check_hosts(scripted, [compiled, python], (torch.randn(1, 3, height, width) * scale,))
    # The flatness test went each way at each size (instance norm's own checks are decisions too).
    assert {True: 3, False: 3} in [dict(counts) for counts in python.decisions.values()], python.decisions


def test_an_invalid_op_from_a_decomposition_is_reported_at_the_models_op(monkeypatch) -> None:
    """With torch-mlir's own decomposition of the pad, the importer's invalid op is caught at import
    and blamed on F.pad, where it was a bare MLIRError from a later pass."""
    monkeypatch.setattr(decompositions, "edge_pad_of_run_time_size", lambda reflect, original: original)
    model = nn.Sequential(nn.ReflectionPad1d(2), nn.Conv1d(2, 2, 3)).eval()
    with pytest.raises(dycl_iree.UnsupportedOpError) as caught:
        dycl_iree.export(model, (torch.randn(1, 2, 8),), dynamic_shapes=[{2: "frames"}])
    message = str(caught.value)
    assert message.startswith(("cannot lower aten::pad", "cannot lower aten::reflection_pad1d")), message
    assert "aten.sub.Tensor" in message, message
