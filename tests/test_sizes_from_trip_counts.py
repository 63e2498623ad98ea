"""Sizes that a loop makes from the number of its iterations, combined with the sizes they must
agree with: a list appended to once per row stacked and added to the rows, a mask built from the
loop index, a tensor grown by a `cat` per step. Each is typed at one example size per dynamic dim;
these failed to type where the loop's result took another example size than the batch it came
from (fuzzer seeds 95014, 95023, 95030, 95112, 95114, 95122). Both hosts against PyTorch, every
branch side and trip counts of 0, 1 and several."""

from __future__ import annotations

from typing import List

import pytest
import torch
from torch import Tensor, nn

from tests.conftest import check_hosts, check_hosts_raise, export_compiled


class _UpperTriangle(nn.Module):
    """A causal mask written row by row (`zeros(1, s)` then `ones(1, T - s)`), added to the frames'
    Gram matrix. Each row is T wide, so the stacked rows are T by T."""

    def forward(self, frames: Tensor) -> Tensor:
        T = frames.size(0)
        rows: List[Tensor] = []  # noqa: UP006  (TorchScript's spelling in most models)
        for s in range(T):
            rows.append(torch.cat([torch.zeros(1, s), torch.ones(1, T - s)], 1))
        return torch.cat(rows) + frames @ frames.t()


def test_a_mask_made_from_the_loop_index_is_as_wide_as_the_frames(tmp_path) -> None:
    generator = torch.Generator().manual_seed(0)
    example = torch.randn(5, 5, generator=generator)
    _, scripted, compiled, python = export_compiled(
        tmp_path, _UpperTriangle(), (example,), "triangle", dynamic_shapes=({0: "T"},)
    )
    for frames in (1, 2, 3, 5, 8):
        check_hosts(scripted, [compiled, python], (torch.randn(frames, 5, generator=generator),))
    trips = {count for counts in python.trip_counts.values() for count in counts}
    assert {1, 2, 8} <= trips, python.trip_counts
    # No frame: no row, and `torch.cat` of no rows raises as PyTorch does.
    check_hosts_raise(scripted, [compiled, python], (torch.randn(0, 5),), "expected a non-empty list")


class _RefineLargeRows(nn.Module):
    """Rows far from zero are refined one at a time and averaged with what they were; the refined
    rows are a stack of a list grown over the batch, which must be as long as the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: Tensor) -> Tensor:
        h = x
        if float(h.abs().mean()) > 1.0:
            rows: List[Tensor] = []  # noqa: UP006
            for t in range(h.shape[0]):
                rows.append(torch.tanh(self.proj(h[t])) * 2.0)
            h = torch.stack(rows, 0) * 0.5 + h * 0.5
        return h


@pytest.mark.parametrize("batch", [3, 2])
def test_a_stack_over_the_batch_in_a_branch_the_example_does_not_take(tmp_path, batch: int) -> None:
    torch.manual_seed(0)
    model = _RefineLargeRows().eval()
    example = torch.full((batch, 8), 0.1)  # small rows: the branch is not taken
    _, scripted, compiled, python = export_compiled(
        tmp_path, model, (example,), f"refine{batch}", dynamic_shapes={"x": {0: "batch"}}
    )
    generator = torch.Generator().manual_seed(1)
    for rows in (1, 2, 3, 5):
        check_hosts(scripted, [compiled, python], (torch.randn(rows, 8, generator=generator) * 3.0,))
        check_hosts(scripted, [compiled, python], (torch.full((rows, 8), 0.2),))
    (decisions,) = python.decisions.values()
    assert decisions[True] == 4 and decisions[False] == 4, python.decisions
    trips = {count for counts in python.trip_counts.values() for count in counts}
    assert {1, 2, 5} <= trips, python.trip_counts


class _TwoRowsPerRow(nn.Module):
    """As `_RefineLargeRows`, but two rows appended per row of the batch, stacked and added to the
    batch concatenated with itself: the stack is twice as long as the batch."""

    def forward(self, x: Tensor) -> Tensor:
        h = x
        if float(h.abs().mean()) > 1.0:
            rows: List[Tensor] = []  # noqa: UP006
            for t in range(h.shape[0]):
                rows.append(h[t] * 2.0)
                rows.append(torch.tanh(h[t]))
            h = torch.stack(rows, 0) * 0.5 + torch.cat([h, h]) * 0.5
        return h


def test_a_stack_of_two_rows_per_row_of_the_batch(tmp_path) -> None:
    example = torch.full((3, 8), 0.1)  # small rows: the branch is not taken
    _, scripted, compiled, python = export_compiled(
        tmp_path, _TwoRowsPerRow(), (example,), "two_rows", dynamic_shapes={"x": {0: "batch"}}
    )
    generator = torch.Generator().manual_seed(2)
    for rows in (1, 2, 5):
        doubled = check_hosts(scripted, [compiled, python], (torch.randn(rows, 8, generator=generator) * 3.0,))
        assert doubled.shape == (2 * rows, 8)
        check_hosts(scripted, [compiled, python], (torch.full((rows, 8), 0.2),))
    (decisions,) = python.decisions.values()
    assert decisions[True] == 3 and decisions[False] == 3, python.decisions


class _RowsUntilSmall(nn.Module):
    """Rows are collected until one is small: the list is shorter than the batch by a number of
    rows only the data decides. Its stack meets the batch only through a reduction."""

    def forward(self, x: Tensor):
        rows: List[Tensor] = []  # noqa: UP006
        for t in range(x.size(0)):
            if float(x[t].abs().sum()) < 1.0:
                break
            rows.append(x[t] * 2.0)
        kept = torch.cat([torch.stack(rows + [x[0]]), x], 0)
        return kept, kept.sum(0) + x[0]


def test_a_list_cut_short_by_a_break_keeps_its_own_length(tmp_path) -> None:
    generator = torch.Generator().manual_seed(3)
    example = torch.randn(4, 6, generator=generator) + 3.0
    _, scripted, compiled, python = export_compiled(
        tmp_path, _RowsUntilSmall(), (example,), "until", dynamic_shapes={"x": {0: "batch"}}
    )
    inputs = []
    for rows, small_at in ((3, 0), (3, 1), (4, 2), (5, 5), (1, 1)):
        x = torch.randn(rows, 6, generator=generator) + 3.0
        if small_at < rows:
            x[small_at] = 0.01
        inputs.append(x)
    for x in inputs:
        check_hosts(scripted, [compiled, python], (x,))
    lengths = {len(scripted(x)[0]) - x.shape[0] - 1 for x in inputs}
    assert lengths == {0, 1, 2, 5}, lengths  # a break at once, after one, after several, and none


class _RefineWithHistory(nn.Module):
    """Each step keeps its update, and the next one adds up every update kept so far, until the
    rows are confident. The updates are kept in a list whose length only the data decides, each
    as long as the batch; their sum is added back to the rows."""

    def forward(self, x: Tensor):
        h = x
        history: List[Tensor] = []  # noqa: UP006
        for _ in range(3):
            if float(torch.softmax(h, 1).max()) > 0.9:
                break
            history.append(torch.tanh(h))
            total = torch.zeros_like(h)
            for past in history:
                total = total + past
            h = h + total * 0.5
        return h, len(history)


def test_a_list_of_batch_long_tensors_grown_until_confident_is_summed_into_the_batch(tmp_path) -> None:
    _, scripted, compiled, python = export_compiled(
        tmp_path, _RefineWithHistory(), (torch.randn(3, 6),), "history", dynamic_shapes={"x": {0: "batch"}}
    )
    lengths = set()
    for rows, large in ((3, 5.0), (2, 3.7), (4, 3.0), (1, 1.0), (5, 2.0)):
        x = torch.zeros(rows, 6)
        x[:, 0] = large
        lengths.add(check_hosts(scripted, [compiled, python], (x,))[1])
    assert lengths == {0, 1, 2, 3}, lengths  # confident at once, after one step, two, never
