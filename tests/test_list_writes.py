"""`xs[i] = v` on lists, and `[v] * n` of a run-time n, as other people's code writes them: a
stacked RNN's states replaced layer by layer, a slot of a buffer of steps, per-row counts that
start as `[0] * batch`, per-step scores, the best of a list of `(score, state)` pairs; both hosts
against PyTorch, and PyTorch's error past either end (`specialize.list_deletion`,
`specialize.tensor_lists.repeated_scalar_list`)."""

from __future__ import annotations

from typing import List, Tuple

import torch
from torch import nn

from dycl_iree.program import Constant
from tests.conftest import check_hosts, check_hosts_raise, export_compiled


class StackedCells(nn.Module):
    """Two GRU cells stacked, their states kept in a list and replaced layer by layer; the top
    state is also written at a slot the step chooses, and the loop stops when it settles."""

    def __init__(self) -> None:
        super().__init__()
        self.cells = nn.ModuleList([nn.GRUCell(4, 4), nn.GRUCell(4, 4)])

    def forward(self, x: torch.Tensor, n: int) -> Tuple[List[torch.Tensor], List[torch.Tensor], int]:  # noqa: UP006
        states = [torch.zeros_like(x), torch.zeros_like(x)]
        slots = [x * 0.0, x * 0.0, x * 0.0]
        steps = 0
        for step in range(n):
            inp = x
            for layer, cell in enumerate(self.cells):
                states[layer] = cell(inp, states[layer])
                inp = states[layer]
            slots[step % 3] = inp
            steps += 1
            if float((states[1] - states[0]).abs().max()) < 0.3:
                break
        return states, slots, steps


def test_states_replaced_layer_by_layer_and_a_slot_chosen_at_run_time(tmp_path):
    torch.manual_seed(0)
    model = StackedCells().eval()
    _, scripted, compiled, python = export_compiled(tmp_path, model, (torch.randn(2, 4), 4), "cells")
    generator = torch.Generator().manual_seed(1)
    counts = set()
    for scale, n in ((1.0, 0), (1.0, 1), (1.0, 5), (4.0, 7), (0.1, 4), (2.0, 2)):
        counts.add(check_hosts(scripted, [compiled, python], (torch.randn(2, 4, generator=generator) * scale, n))[2])
    assert {0, 1} <= counts and max(counts) >= 4, counts  # every slot written, and an early stop
    (sides,) = (set(s) for s in python.decisions.values())
    assert sides == {True, False}, python.decisions


class Buffer(nn.Module):
    """A buffer of steps grown at run time, one step overwritten at an index from the input."""

    def forward(self, x: torch.Tensor, n: int, at: int) -> torch.Tensor:
        steps: List[torch.Tensor] = []  # noqa: UP006
        for i in range(n):
            steps.append(x * float(i))
        steps[at] = x - 1.0
        return torch.stack(steps)


def test_a_step_of_a_grown_buffer_is_overwritten(tmp_path):
    _, scripted, compiled, python = export_compiled(tmp_path, Buffer(), (torch.randn(3), 4, 1), "buffer")
    x = torch.arange(3.0)
    for n, at in ((4, 1), (1, 0), (5, -1), (3, -3), (6, 5)):
        check_hosts(scripted, [compiled, python], (x, n, at))
    for n, at in ((0, 0), (3, 3), (2, -3)):
        check_hosts_raise(scripted, [compiled, python], (x, n, at), "list index out of range")


class RowCounts(nn.Module):
    """Per-row counts that start as `[0] * batch`, counted up while a row stays positive, and the
    mean at each step kept in `[0.0] * n`."""

    def forward(self, x: torch.Tensor, n: int) -> Tuple[List[int], List[float]]:  # noqa: UP006
        lengths: List[int] = [0] * x.size(0)  # noqa: UP006
        means: List[float] = [0.0] * n  # noqa: UP006
        h = x
        for step in range(n):
            h = h * 0.5 + 0.25
            for b in range(x.size(0)):
                if float(h[b].sum()) > 0.0:
                    lengths[b] = lengths[b] + 1
            means[step] = float(h.mean())
        return lengths, means


def test_per_row_counts_and_per_step_means_in_lists_made_by_repetition(tmp_path):
    batch = {"x": {0: "batch"}}
    _, scripted, compiled, python = export_compiled(tmp_path, RowCounts(), (torch.randn(3, 4), 2), "rows", batch)
    generator = torch.Generator().manual_seed(2)
    seen = set()
    for rows, n in ((3, 2), (1, 0), (5, 4), (2, 1)):
        x = torch.randn(rows, 4, generator=generator) * 2.0 - 1.0
        lengths, means = check_hosts(scripted, [compiled, python], (x, n))
        assert len(lengths) == rows and len(means) == max(n, 0)
        seen.update(lengths)
    assert len(seen) >= 3, seen  # rows counted up different numbers of times
    (sides,) = (set(s) for s in python.decisions.values())
    assert sides == {True, False}, python.decisions


class BestPair(nn.Module):
    """`(score, state)` pairs; each step's pair replaces the worst one where it scores higher."""

    def forward(self, x: torch.Tensor, n: int) -> List[Tuple[torch.Tensor, torch.Tensor]]:  # noqa: UP006
        beams: List[Tuple[torch.Tensor, torch.Tensor]] = [(x.sum(), x), (x.sum() - 1.0, x - 1.0)]  # noqa: UP006
        h = x
        for _ in range(n):
            h = torch.sin(h * 1.3 + 0.2)
            score = h.sum()
            worst = 0 if float(beams[0][0]) < float(beams[1][0]) else 1
            if float(score) > float(beams[worst][0]):
                beams[worst] = (score, h)
        return beams


def test_the_worst_of_a_list_of_pairs_is_replaced(tmp_path):
    _, scripted, compiled, python = export_compiled(tmp_path, BestPair(), (torch.randn(3), 3), "best_pair")
    generator = torch.Generator().manual_seed(3)
    for scale, n in ((1.0, 0), (1.0, 3), (3.0, 6), (0.3, 2), (1.0, 8)):
        check_hosts(scripted, [compiled, python], (torch.randn(3, generator=generator) * scale, n))
    for level in (2.0, -2.0):  # scores every step's pair is below, and above
        check_hosts(scripted, [compiled, python], (torch.full((3,), level), 4))
    decisions = {label: set(sides) for label, sides in python.decisions.items()}
    assert all(sides == {True, False} for sides in decisions.values()), decisions


class CountsOverAStaticBatch(nn.Module):
    """Per-row counts over a static batch, in a loop of 3 passes (fuzzer seed 10237 with its list
    edits, cut down). Unrolled, `counts[t] += 1` on one side of the row's decision failed (a write
    into `[0]` folded into a constant), and the unrolling, undone, left the walk in that branch's
    node list: the slots made before the loop were lost (an exporter defect, "%2 is read by the
    program's outputs where it is not defined"). Now the write takes the constant as its literal
    list, the branch's sides join item by item, and an unrolling undone restores the node list."""

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, List[int], List[torch.Tensor]]:  # noqa: UP006
        h = x
        counts: List[int] = [0] * x.size(0)  # noqa: UP006
        slots = [x * 0.0, x * 0.0]
        for _ in range(3):
            h = torch.tanh(h * 1.5) + 0.2
            for t in range(h.size(0)):
                if float(h[t].sum()) > 0.5:
                    counts[t] += 1
            slots[1] = h
        return h, counts, slots


def test_row_counts_in_unrolled_passes_over_a_static_batch(tmp_path):
    for rows in (1, 2):
        model = CountsOverAStaticBatch()
        _, scripted, compiled, python = export_compiled(tmp_path, model, (torch.randn(rows, 4),), f"static{rows}")
        generator = torch.Generator().manual_seed(rows)
        seen = set()
        for scale in (0.1, 1.0, 3.0, 10.0):
            x = torch.randn(rows, 4, generator=generator) * scale
            _, counts, _ = check_hosts(scripted, [compiled, python], (x,))
            seen.update(counts)
        assert len(seen) >= 2, seen  # rows counted on some passes and not on others
        assert not python.trip_counts, python.trip_counts  # both loops unrolled: the sides joined


def test_an_unrolling_undone_inside_a_branch_keeps_what_came_before(tmp_path, monkeypatch):
    """The write refused at an index known at export (as it was): the loop over the rows is not
    unrolled, and the Program keeps every node made before it."""
    from dycl_iree.errors import SpecializeError
    from dycl_iree.specialize.list_deletion import ListDeletion

    with_item = ListDeletion.with_item

    def refusing(self, items, index, item, source):
        if isinstance(index, Constant):
            raise SpecializeError("refused for the test")
        return with_item(self, items, index, item, source)

    monkeypatch.setattr(ListDeletion, "with_item", refusing)
    _, scripted, compiled, python = export_compiled(tmp_path, CountsOverAStaticBatch(), (torch.randn(1, 4),), "undone")
    for scale in (0.1, 3.0):
        check_hosts(scripted, [compiled, python], (torch.randn(1, 4) * scale,))
    assert python.trip_counts, "the loop over the rows stays a loop"


class CountsBesideAnEarlyReturn(nn.Module):
    """Per-row counts over a static batch written after a loop that may return them early (fuzzer
    seed 137006, cut down): the return inside the loop carries the list as a host list, the end of
    `forward` as the literal list its writes made ("result 1 is a list of int on one side and a list
    of 2 on the other"); both are host lists now."""

    def forward(self, x: torch.Tensor, n: int) -> Tuple[torch.Tensor, List[int]]:  # noqa: UP006
        h = x
        counts: List[int] = [0] * x.size(0)  # noqa: UP006
        for _ in range(n):
            h = torch.tanh(h * 1.5) + 0.2
            if float(h.mean()) < -0.5:
                return h, counts
        if n > 1:
            for t in range(h.size(0)):
                if float(h[t].sum()) > 0.5:
                    counts[t] += 1
        return h, counts


def test_counts_written_after_a_loop_that_may_return_them_early(tmp_path):
    model = CountsBesideAnEarlyReturn()
    _, scripted, compiled, python = export_compiled(tmp_path, model, (torch.randn(2, 4), 2), "early_counts")
    generator = torch.Generator().manual_seed(5)
    seen = set()
    for scale, n in ((1.0, 0), (1.0, 1), (1.0, 3), (3.0, 3), (0.2, 2)):
        _, counts = check_hosts(scripted, [compiled, python], (torch.randn(2, 4, generator=generator) * scale, n))
        seen.add(tuple(counts))
    check_hosts(scripted, [compiled, python], (torch.full((2, 4), -3.0), 2))  # the early return
    for first in (1.0, -1.0):  # one row counted, the other not
        rows = torch.tensor([[first] * 4, [-first] * 4])
        seen.add(tuple(check_hosts(scripted, [compiled, python], (rows, 2))[1]))
    assert len(seen) >= 3, seen
    decisions = {label: set(sides) for label, sides in python.decisions.items()}
    assert all(sides == {True, False} for sides in decisions.values()), decisions


class CountsBesideAReturn(nn.Module):
    """Per-row picks over a static batch of one, returned early as they started, or after the
    rows' writes (fuzzer seed 137022, cut down): the returned tuples held `[0]` folded into a
    constant on one side and the literal list of the writes on the other ("a list ([0]) on one
    side and a list of 1 on the other")."""

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, List[int]]:  # noqa: UP006
        h = x
        picks: List[int] = [0] * x.size(0)  # noqa: UP006
        if float(h.sum()) > 3.0:
            return h, picks
        for t in range(h.size(0)):
            picks[t] = int(h[t].argmax()) + 1
        return h * 2.0, picks


def test_picks_returned_early_as_they_started_or_after_their_writes(tmp_path):
    _, scripted, compiled, python = export_compiled(tmp_path, CountsBesideAReturn(), (torch.zeros(1, 4),), "returned")
    seen = set()
    for row in ([1.0, 1.0, 1.0, 1.0], [0.0, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.5]):  # returned early; written
        seen.add(tuple(check_hosts(scripted, [compiled, python], (torch.tensor([row]),))[1]))
    assert seen == {(0,), (2,), (4,)}, seen
    (sides,) = (set(s) for s in python.decisions.values())
    assert sides == {True, False}, python.decisions


class PicksOfTwoLengths(nn.Module):
    """A literal list of ints whose length depends on the branch taken: a host list on both sides."""

    def forward(self, x: torch.Tensor) -> List[int]:  # noqa: UP006
        picks = [int(x.argmax()), 0]
        if float(x.sum()) > 0.0:
            picks = [int(x.argmin()), 1, 2]
        return picks


def test_a_literal_list_of_ints_of_a_length_that_depends_on_the_branch(tmp_path):
    _, scripted, compiled, python = export_compiled(tmp_path, PicksOfTwoLengths(), (torch.randn(4),), "two_lengths")
    lengths = {len(check_hosts(scripted, [compiled, python], (torch.arange(4.0) * sign,))) for sign in (1.0, -1.0)}
    assert lengths == {2, 3}, lengths
