"""A list of tensors that starts empty and grows in a loop with an exit, on a path the example did
not take in the first step (fuzzer seed 75127), against PyTorch on both hosts."""

from __future__ import annotations

from typing import List, Tuple

import numpy as np
import pytest
import torch
from torch import nn

import dycl_iree
from tests.conftest import check_hosts, export_compiled


class _KeepRefined(nn.Module):
    """Refine the rows until they are small; each refinement (an inner search with a `break`) is kept
    and returned concatenated with the final rows (seed 75127, cut down). With a batch other than the
    example's, the compiled host failed with OUT_OF_RANGE ("attempted to access an address outside
    of the valid buffer range ... buffer byte_length=64") once the list had more than one piece: the
    list's buffer was sized as if it could not grow. A list that starts empty in a loop with an exit
    now passes a barrier with its sizes at the top of the body."""

    def forward(self, x: torch.Tensor):
        h = x
        kept: List[torch.Tensor] = []  # noqa: UP006  (the spelling the fuzzer writes)
        for _ in range(5):
            h = h * torch.softmax(h, -1).max()
            if not bool(h.norm() > 0.16):
                h = h + h[0, 1] * 0.25
                break
            else:
                for _ in range(5):
                    h = torch.relu(h) - 0.25
                    h = h * torch.softmax(h, -1).max()
                    if (h > -0.052).any().item():
                        break
                kept.append(h * 0.5)
                h = h + h[0, 1] * 0.25
        return h, torch.cat(kept + [h], 0)


def test_a_list_that_starts_empty_grows_in_a_loop_with_a_break(tmp_path) -> None:
    torch.manual_seed(0)
    model = _KeepRefined().eval()
    generator = torch.Generator().manual_seed(5)
    example = torch.randn(3, 4, generator=generator)
    bundle = dycl_iree.export(model, (example,), dynamic_shapes={"x": {0: "batch"}})
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / "kept.dycl")
    inputs = [example] + [torch.randn(1 + i % 4, 4, generator=generator) * (0.5 + i) for i in range(10)]
    inputs.append(torch.full((2, 4), 0.01))  # small rows: the `break` at the first step
    pieces = {model(x)[1].shape[0] // x.shape[0] - 1 for x in inputs}
    assert 0 in pieces and max(pieces) >= 2, pieces  # the break at once, and a list of several pieces
    for host in ("compiled", "python"):
        run = dycl_iree.load(path, host=host)
        for x in inputs:
            want_h, want_all = model(x)
            got_h, got_all = run(x.numpy())
            np.testing.assert_allclose(got_h, want_h.numpy(), rtol=1e-5, atol=1e-6, err_msg=host)
            np.testing.assert_allclose(got_all, want_all.numpy(), rtol=1e-5, atol=1e-6, err_msg=host)


class _CollectWhileLarge(nn.Module):
    """While any value is large, shrink the rows and collect them in an inner search that stops at
    a small sum (fuzzer seed 80004, cut down). The list starts empty and is appended only inside
    the inner loop, a `for` with a `break`: the compiled host failed with OUT_OF_RANGE ("buffer
    byte_length=0"), whatever the example did, as IREE wrote the appended rows into the buffer of
    the list's size before the loops. A loop inside another loop with an exit now passes what a
    concatenation in its body grows through a barrier with its sizes (`control_flow.concatenations`)."""

    def forward(self, x: torch.Tensor):
        h = x
        preds: List[torch.Tensor] = []  # noqa: UP006
        j = 0
        while (h > 2.6).any().item() and j < 3:
            h = h * 0.75 + 0.125
            for _ in range(3):
                if h.sum() > 2.05:
                    break
                preds.append(h * 1.0)
            j += 1
        preds.append(h * 1.0)
        return h, preds


def _one_large_value(values: tuple) -> list[torch.Tensor]:
    """Rows of -1 with one value of each size in `values` (the loops run while some value is large)."""
    inputs = []
    for large in values:
        x = torch.full((3, 6), -1.0)
        x[0, 0] = large
        inputs.append(x)
    return inputs


def _check_every_input(tmp_path, model: nn.Module, inputs: list, name: str):
    """Export `model` (with an example that never enters its loops) and check both hosts against the
    scripted model on `inputs`; returns the Python host, which records the trip counts."""
    _, scripted, compiled, python = export_compiled(tmp_path, model, (torch.zeros(3, 6),), name)
    for x in inputs:
        check_hosts(scripted, [compiled, python], (x,))
    return python


def test_a_list_appended_only_in_a_loop_inside_a_loop_with_an_exit(tmp_path) -> None:
    model = _CollectWhileLarge().eval()
    # No step; one step of three appends; several steps; a step whose inner search stops at once.
    inputs = _one_large_value((0.0, 3.0, 5.0, 9.0)) + [torch.full((3, 6), 3.0)]
    lengths = {len(model(x)[1]) for x in inputs}
    assert {1, 4} <= lengths and max(lengths) >= 7, lengths
    python = _check_every_input(tmp_path, model, inputs, "collect")
    trips = [count for counts in python.trip_counts.values() for count in counts]
    assert 0 in trips and 3 in trips, python.trip_counts  # loops skipped, and run to their cap


class _CollectPairsWhileLarge(nn.Module):
    """`_CollectWhileLarge` with a list of tuples (fuzzer seed 80004): each entry holds the rows and
    their largest softmax weights. The list travels as two stacked tensors that one segment appends
    to with `aten::cat` (`specialize.tuple_lists`), and the compiled host still failed with
    OUT_OF_RANGE ("buffer byte_length=192") once the inner loop had appended: IREE sized the buffer
    that holds both stacks after the final append as if the loops had left them empty. The outer
    loop now passes what a concatenation grows on through barriers with its sizes."""

    def forward(self, x: torch.Tensor):
        h = x
        preds: List[Tuple[torch.Tensor, torch.Tensor]] = []  # noqa: UP006
        j = 0
        while (h > 2.6).any().item() and j < 3:
            h = h * 0.75 + 0.125
            for _ in range(3):
                if h.sum() > 2.05:
                    break
                preds.append((h * 1.0, torch.softmax(h, 1).max(1)[0]))
            j += 1
        preds.append((h * 1.0, torch.softmax(h, 1).max(1)[0]))
        return h, preds


def test_a_list_of_tuples_appended_only_in_a_loop_inside_a_loop_with_an_exit(tmp_path) -> None:
    model = _CollectPairsWhileLarge().eval()
    inputs = _one_large_value((0.0, 3.0, 5.0, 9.0)) + [torch.full((3, 6), 3.0)]
    lengths = [len(model(x)[1]) for x in inputs]
    assert 1 in lengths and 4 in lengths and max(lengths) >= 7, lengths
    run = _check_every_input(tmp_path, model, inputs, "pairs")
    # The Python host's record: the outer loop ran once per input, the inner one once per step.
    outer, inner = sorted(run.trip_counts.values(), key=len)
    assert len(outer) == len(inputs) and {0, 1, 3} <= set(outer), run.trip_counts  # none, one, several
    assert {1, 3} <= set(inner), run.trip_counts  # stopped by the `break` at once, and run to its cap


class _CollectPairsWhileLargeFlat(nn.Module):
    """The same without the inner loop: a list of tuples appended in a `while` and once more after
    it failed the same way (OUT_OF_RANGE) once the loop had run."""

    def forward(self, x: torch.Tensor):
        h = x
        preds: List[Tuple[torch.Tensor, torch.Tensor]] = []  # noqa: UP006
        j = 0
        while (h > 2.6).any().item() and j < 4:
            h = h * 0.75 + 0.125
            preds.append((h * 1.0, torch.softmax(h, 1).max(1)[0]))
            j += 1
        preds.append((h * 1.0, torch.softmax(h, 1).max(1)[0]))
        return h, preds


def test_a_list_of_tuples_appended_in_a_loop_with_an_exit_and_after_it(tmp_path) -> None:
    inputs = _one_large_value((0.0, 3.0, 5.0, 9.0))  # no step; one step; several; the cap
    run = _check_every_input(tmp_path, _CollectPairsWhileLargeFlat().eval(), inputs, "pairs_flat")
    (trips,) = run.trip_counts.values()  # the Python host's record
    assert trips[:2] == [0, 1] and len(set(trips)) == len(inputs), trips  # none, one, several, the cap


class _BestOfInts(nn.Module):
    """A host list of ints grown in a loop (with a `break` where `breaks`), returned with the index of
    its best entry and the slice from it. With the `break`, the compiled host crashed the process
    ("double free or corruption") or failed with OUT_OF_RANGE in `hal.buffer_view.create`: IREE packed
    the slice and the index into one buffer after the loop, and its integer arithmetic optimization
    folded that buffer's size to the index's alone, so the slice was copied past its end (README,
    "Known traps"). `breaks` is a constant of the scripted module: without it the loop has no exit."""

    __constants__ = ["breaks"]

    def __init__(self, breaks: bool) -> None:
        super().__init__()
        self.breaks = breaks

    def forward(self, x: torch.Tensor, n: int) -> Tuple[List[int], int, List[int]]:  # noqa: UP006  (TorchScript reads the annotations)
        scores: List[int] = [1]  # noqa: UP006  (TorchScript reads the annotations)
        best = 0
        for i in range(n):
            row = x[i % x.shape[0]]
            scores.append(scores[int(row.argmax()) % len(scores) - len(scores)] + int(row.max() * 10))
            if scores[-1] > scores[best]:
                best = len(scores) - 1
            if self.breaks and float(row.sum()) > 2.0:
                break
        return scores, best, scores[best:-1]


class _BestOfFloats(nn.Module):
    """`_BestOfInts` on a list of floats (there: OUT_OF_RANGE, offset equal to the buffer's length)."""

    __constants__ = ["breaks"]

    def __init__(self, breaks: bool) -> None:
        super().__init__()
        self.breaks = breaks

    def forward(self, x: torch.Tensor, n: int) -> Tuple[List[float], int, List[float]]:  # noqa: UP006  (TorchScript reads the annotations)
        scores: List[float] = [0.5]  # noqa: UP006  (TorchScript reads the annotations)
        best = 0
        for i in range(n):
            row = x[i % x.shape[0]]
            scores.append(scores[int(row.argmax()) % len(scores) - len(scores)] + float(row.max()))
            if scores[-1] > scores[best]:
                best = len(scores) - 1
            if self.breaks and float(row.sum()) > 2.0:
                break
        return scores, best, scores[best:-1]


@pytest.mark.parametrize(
    "model, breaks",
    [(_BestOfInts, True), (_BestOfInts, False), (_BestOfFloats, True), (_BestOfFloats, False)],
)
def test_a_host_list_grown_in_a_loop_returned_with_a_slice_of_it(tmp_path, model, breaks) -> None:
    bundle, scripted, compiled, python = export_compiled(tmp_path, model(breaks), (torch.randn(3, 4), 4), "best")
    assert bundle.host == "compiled"
    rising = torch.tensor([[0.1, 0.2, 0.1, 0.0], [0.2, 0.4, 0.3, 0.0], [0.3, 0.9, 0.9, 0.4]])
    falling = rising.flip(0)
    exits, slices = set(), set()
    for x in (torch.full((3, 4), 0.5), rising, falling, -rising):
        for n in (0, 1, 2, 3, 7):
            scores, best, tail = check_hosts(scripted, (compiled, python), (x, n))
            exits.add(len(scores) - 1 < n)
            slices.add(len(tail) > 0)
    assert slices == {True, False}, slices  # empty slices (best the last entry, or none) and others
    assert exits == ({True, False} if breaks else {False}), exits  # the `break` taken, and not


class _SortedCopiesInAWhile(nn.Module):
    """A `for` without an exit, in a `while` with a `break`, copies a host list of floats that
    `torch.tensor` of the copy and a sort read after it: IREE folded the allocation of the f32
    tensor and the sort's indices to 0 bytes, and the call corrupted the heap ("free(): invalid
    pointer"; README, "Known traps"). RNNTBeamSearch's `torch.tensor([score(h) for h in
    b_hypos]).sort()` in its `while a_hypos:` does this."""

    def forward(self, x: torch.Tensor, n: int) -> Tuple[torch.Tensor, int]:  # noqa: UP006  (TorchScript reads the annotations)
        base: List[float] = []  # noqa: UP006  (TorchScript reads the annotations)
        for i in range(n):
            base.append(float(x[i % x.shape[0]].sum()) + 0.01 * i)
        order = torch.zeros(0, dtype=torch.long)
        k = 0
        while k < 3:
            copied = [base[i] for i in range(len(base))]
            _, order = torch.tensor(copied).sort()
            k += 1
            if len(base) > 0 and base[int(order[0])] < -1.0:
                break
            base.append(float(k))
        return order, k


def test_a_host_list_copied_in_a_for_inside_a_while_then_sorted(tmp_path) -> None:
    bundle, scripted, compiled, python = export_compiled(
        tmp_path, _SortedCopiesInAWhile(), (torch.randn(3, 4), 4), "sorted_copies"
    )
    assert bundle.host == "compiled"
    torch.manual_seed(3)
    steps, sizes = set(), set()
    for scale in (0.1, 1.0, 3.0):
        for n in (0, 1, 4, 9):
            order, k = check_hosts(scripted, (compiled, python), (torch.randn(3, 4) * scale, n))
            steps.add(k)
            sizes.add(len(order))
    assert 3 in steps and min(steps) < 3, steps  # the `while` ran to its end, and left by its `break`
    assert 1 in sizes and max(sizes) >= 9, sizes  # one score, many (n = 0 copies none in its first step)


class _ArgmaxesSummedThenAppended(nn.Module):
    """On one side of an `if`, a loop with a `break` appends ints to a list; a `for` over the list
    sums it, and one more item is appended after it (fuzzer seed 124001, cut down). Each read was a
    select of the list twice over at i + len: the compiled host failed with OUT_OF_RANGE ("offset=64
    ... buffer byte_length=64") at `hal.device.queue.execute`, and only where all three were there
    (README, Known traps). A read now selects at i, plus len if i < 0."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, n: int) -> Tuple[torch.Tensor, List[int]]:  # noqa: UP006
        h = x
        li: List[int] = []  # noqa: UP006  (the spelling the fuzzer writes)
        if float(h.abs().mean()) < 1.29:
            h = h + 1.0
        else:
            for _ in range(n):
                h = torch.softmax(self.layer(h), 1) + h * 0.5
                li.append(int(h.argmax()))
                if n > 4:
                    break
        total = 0
        for v in li:
            total += v
        h = h + float(total) * 0.01
        li.append(int(h.argmax()))
        return h, li


def test_a_host_list_read_in_a_for_after_a_loop_with_a_break_then_appended(tmp_path) -> None:
    bundle, scripted, compiled, python = export_compiled(
        tmp_path, _ArgmaxesSummedThenAppended(), (torch.randn(3, 4) * 3, 5), "argmaxes"
    )
    torch.manual_seed(4)
    lengths = set()
    for scale in (0.01, 3.0):
        for n in (0, 2, 4, 5, 9):
            _, li = check_hosts(scripted, (compiled, python), (torch.randn(3, 4) * scale, n))
            lengths.add((scale, n, len(li)))
    # The `if` side (one item), the loop to its end (n + 1), and its `break` at once (2 items).
    assert {(0.01, n, 1) for n in (0, 2, 4, 5, 9)} <= lengths, lengths
    assert {(3.0, 0, 1), (3.0, 2, 3), (3.0, 4, 5), (3.0, 5, 2), (3.0, 9, 2)} <= lengths, lengths
