"""Defects the differential fuzzer found once it wrote structured values (Optionals, dicts, lists of
tuples) into its programs, each reduced to a small program and run on every path against PyTorch."""

# The models keep the idioms of the fuzzer's programs (`typing.Optional`, `typing.List`).
# ruff: noqa: UP006, UP007, UP045

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
import torch
from torch import nn

from host_runtime.errors import ModelRaised
from tests.conftest import check_hosts, export_compiled


def _piece_widths(scripted, hosts, cases) -> set:
    """Run every case on the hosts against the scripted model; the widths the pieces joined to
    `h` added (0 where the list held none)."""
    widths = set()
    for inputs in cases:
        h, joined = check_hosts(scripted, hosts, inputs)
        widths.add(joined.shape[1] - h.shape[1])
    return widths


class StateAndPredictionsReturnedFromAnUnrolledLoop(nn.Module):
    """An Optional state set on one side of a branch, a list of tuples appended on the other, both
    returned from inside a loop of constant trip count (which the exporter unrolls). The iterations
    that do not return leave the return slots unset, and joining an unset list of tuples with the
    set one crashed the export ("'Constant' object has no attribute 'type'", fuzzer seed 80014)."""

    def forward(self, x: torch.Tensor):
        h = x
        st: Optional[torch.Tensor] = None
        preds: List[Tuple[torch.Tensor, torch.Tensor]] = []
        if float(h.sum()) > 0.0:
            st = torch.tanh(h)
        else:
            preds.append((h * 1.0, torch.softmax(h, 1).max(1)[0]))
        for _ in range(4):
            h = h - 0.5
            if float(h.sum()) > 0.0:
                return h, st, preds
            h = torch.abs(h) - 0.5
        return h, st, preds


def test_an_optional_and_a_list_of_tuples_returned_from_an_unrolled_loop(tmp_path):
    model = StateAndPredictionsReturnedFromAnUnrolledLoop()
    _, scripted, compiled, python = export_compiled(tmp_path, model, (torch.randn(2, 4),), "unrolled")
    # x = 1 sets the state and returns in the first iteration; x = -2 appends a tuple and returns in
    # the second (|-2.5| - 0.5 - 0.5 > 0); x = -0.1 appends one and never turns positive, so it
    # returns at the end.
    inputs = [torch.full((2, 4), 1.0), torch.full((2, 4), -0.1), torch.full((2, 4), -2.0), torch.zeros(2, 4)]
    inputs += [torch.randn(2, 4, generator=torch.Generator().manual_seed(seed)) for seed in range(6)]
    returns = set()
    for x in inputs:
        h, st, preds = check_hosts(scripted, [compiled, python], (x,))
        returns.add((st is None, len(preds)))
    assert returns == {(False, 0), (True, 1)}, returns
    sides = [set(counts) for counts in python.decisions.values()]
    assert sides.count({True, False}) >= 2, python.decisions  # the first branch and a return test went both ways


class FeaturesSetInNestedLoops(nn.Module):
    """A dict of outputs set in the inner of two loops that may return from inside it, with a dynamic
    batch: iree-compile rejected the compiled host ("'scf.while' op ... region branch point has 12
    operands, but region successor needs 13 inputs", fuzzer seed 80010): the canonicalizer dropped
    the size of the dict's value that the inner loop passes on."""

    def forward(self, x: torch.Tensor, n: int):
        h = x
        out: Dict[str, torch.Tensor] = {}
        for _ in range(n):
            for _ in range(n):
                out["features"] = h * 2.0
                h = h - 0.25
                if n > 4:
                    return h, out
        return h, out


def test_a_dict_set_in_nested_loops_with_a_return_gets_the_compiled_host(tmp_path):
    model = FeaturesSetInNestedLoops()
    example = (torch.randn(3, 6), 1)
    dynamic = {"x": {0: "batch"}}
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "nested_dict", dynamic)
    keys = set()
    for batch, n in [(3, 1), (2, 0), (1, 3), (4, 5), (2, 2)]:
        x = torch.randn(batch, 6, generator=torch.Generator().manual_seed(batch * 10 + n))
        _, out = check_hosts(scripted, [compiled, python], (x, n))
        keys.add(tuple(out))
    assert keys == {(), ("features",)}
    trips = [count for counts in python.trip_counts.values() for count in counts]
    assert 0 in trips and max(trips) >= 3, python.trip_counts
    # `n > 4` (and the tests after each loop of whether it returned) went both ways: n = 5 returned
    # from inside, the others ran to the end.
    assert python.decisions and all(set(sides) == {True, False} for sides in python.decisions.values())


class LogitsKeptByAForLoop(nn.Module):
    """A dict value and a tensor the body sets from `h` while it changes `h`, in a `for` loop with
    no exit, dynamic batch: iree-compile rejected the compiled host ("'scf.while' op ... region
    branch point has 7 operands, but region successor needs 8 inputs", fuzzer seed 90058; with
    `last` too, "failed to legalize unresolved target materialization from ('i64')"). The
    sizes the loop passes on were all the batch read at the top of the body, one value, and the
    canonicalizer dropped one of them; passed through barriers, as in a loop with an exit, each
    stays the loop's own."""

    def forward(self, x: torch.Tensor, n: int):
        h = x
        out: Dict[str, torch.Tensor] = {}
        last = x
        for _ in range(n):
            h = torch.tanh(h)
            out["logits"] = torch.softmax(h, 1)
            last = h * 2.0
            h = h.mean(1, keepdim=True) + h
        return h, out, last


def test_values_a_for_loop_sets_from_its_carried_tensor_get_the_compiled_host(tmp_path):
    model = LogitsKeptByAForLoop()
    example, dynamic = (torch.randn(2, 6), 2), {"x": {0: "batch"}}
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "for_logits", dynamic)
    keys = set()
    for batch, n in [(2, 2), (3, 0), (1, 1), (4, 3)]:
        x = torch.randn(batch, 6, generator=torch.Generator().manual_seed(batch * 10 + n))
        _, out, _ = check_hosts(scripted, [compiled, python], (x, n))
        keys.add(tuple(out))
    assert keys == {(), ("logits",)}
    trips = {count for counts in python.trip_counts.values() for count in counts}
    assert {0, 1, 3} <= trips, python.trip_counts


class PredictionsReturnedFromNestedLoopsOnEitherSide(nn.Module):
    """A list of tuples appended on one side of a branch and returned from inside nested loops on
    both (fuzzer seed 90062, cut down). Where the sides join, the rows of the list the inner loop
    returns are stacked, also on the path that did not return, where they are stand-ins: the
    Python host passed None on, and the call raised ("'NoneType' object has no attribute
    'shape'"; "could not convert python value to VM: None" in the seed). The compiled host
    passes zeros there."""

    def forward(self, x: torch.Tensor, n: int, s: float):
        h = x
        preds: List[Tuple[torch.Tensor, torch.Tensor]] = []
        if float(h.sum()) > 0.0:
            for _ in range(n):
                for _ in range(3):
                    h = torch.softmax(h, 1) * 2.0 - 0.5
                    if bool(h.max() > 0.1):
                        return h, preds
        else:
            preds.append((h * 1.0, torch.softmax(h, 1).max(1)[0]))
            if float(h.abs().sum()) > 5.0:
                for _ in range(n):
                    h = torch.softmax(h, 1) * 2.0 - 0.5
                    for _ in range(1):
                        h = torch.softmax(h, 1) * 2.0 - 0.5
                        if s < 0.0295:
                            return h, preds
                    h = torch.abs(h) - 0.5
            else:
                h = torch.abs(h) - 0.5
        return h, preds


def test_stand_ins_of_a_list_returned_from_nested_loops_reach_a_segment_on_the_python_host(tmp_path):
    model = PredictionsReturnedFromNestedLoopsOnEitherSide()
    example, dynamic = (torch.randn(2, 8), 2, 0.5), {"x": {0: "batch"}}
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "nested_preds", dynamic)
    counts = set()
    for seed in range(6):
        x = torch.randn(1 + seed % 3, 8, generator=torch.Generator().manual_seed(seed)) * 2.0
        for n, s in [(3, 0.0), (3, 1.0), (0, 1.0)]:
            _, preds = check_hosts(scripted, [compiled, python], (x, n, s))
            counts.add(len(preds))
    check_hosts(scripted, [compiled, python], (torch.full((2, 8), -0.1), 2, 1.0))  # |h| sums to 1.6
    check_hosts(scripted, [compiled, python], (torch.full((2, 8), 0.5), 2, 1.0))  # uniform: never returns
    assert counts == {0, 1}, counts
    trips = {count for counts in python.trip_counts.values() for count in counts}
    assert {0, 1, 2, 3} <= trips, python.trip_counts  # no trip, a return, each loop to its end
    # Both sides, both tests of |h|, each return and not, and the tests after the loops of whether
    # they returned.
    assert all(set(sides) == {True, False} for sides in python.decisions.values()), python.decisions


class PiecesOfDataDependentWidth(nn.Module):
    """Pieces as wide as the data says, the first taken before the loop, the others in a loop with
    an exit, concatenated along their width (fuzzer seed 80031, cut down). The list started with a
    tensor, so it was stacked, and the second piece of another width raised "the tensors of a list
    that grows at run time must have the same sizes" where PyTorch concatenates them."""

    def forward(self, x: torch.Tensor):
        h = x
        pieces: List[torch.Tensor] = []
        pieces.append(h[:, : int(h.argmax(1).max()) % 8 + 1] * 0.5)
        j = 0
        while float(h[0, 1]) > 0.0 and j < 3:
            h = torch.clamp(h, -1.0, 1.0) - 0.25
            pieces.append(h[:, : int((h > 0.0).sum()) % 8 + 1] * 0.5)
            j += 1
        return h, torch.cat(pieces + [h], 1)


def test_pieces_of_data_dependent_width_from_a_list_that_starts_with_one(tmp_path):
    model = PiecesOfDataDependentWidth()
    _, scripted, compiled, python = export_compiled(tmp_path, model, (torch.randn(2, 8),), "pieces")
    cases = [(torch.randn(2, 8, generator=torch.Generator().manual_seed(seed)) * 2.0,) for seed in range(10)]
    for (x,) in cases[::3]:
        x[0, 1] = 5.0  # the loop runs to its cap
    widths = _piece_widths(scripted, [compiled, python], cases)
    assert len(widths) >= 4, widths  # lists of several lengths and widths
    trips = [count for counts in python.trip_counts.values() for count in counts]
    assert {0, 3} <= set(trips), python.trip_counts


class PiecesWithADynamicBatch(nn.Module):
    """Pieces of a width the data decides, collected from `[]` in a loop with a `break`, with a
    dynamic batch (fuzzer seeds 80053, 80142, 80156 and others): the empty list was refused, as its
    empty form needs the batch size. It is now kept concatenated along the width, its empty form
    taking the batch from `h`, and every append checks its piece has that batch."""

    def forward(self, x: torch.Tensor, n: int):
        h = x
        pieces: List[torch.Tensor] = []
        for _ in range(n):
            h = torch.tanh(h) + 0.1
            pieces.append(h[:, : int(h.argmax(1).max()) % 6 + 1] * 0.5)
            if float(h.sum()) > 3.0:
                break
        return h, torch.cat(pieces + [h], 1)


def test_pieces_of_data_dependent_width_with_a_dynamic_batch_from_an_empty_list(tmp_path):
    model = PiecesWithADynamicBatch()
    example, dynamic = (torch.randn(2, 6), 2), {"x": {0: "batch"}}
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "pieces_batch", dynamic)
    generators = [torch.Generator().manual_seed(seed) for seed in range(10)]
    cases = [(torch.randn(1 + seed % 3, 6, generator=g), seed % 4) for seed, g in enumerate(generators)]
    widths = _piece_widths(scripted, [compiled, python], cases)
    check_hosts(scripted, [compiled, python], (torch.full((3, 6), 2.0), 3))  # the break at once
    assert 0 in widths and len(widths) >= 4, widths
    (label,) = [label for label in python.decisions if label.startswith("if")]
    assert set(python.decisions[label]) == {True, False}, python.decisions


class PiecesThatABranchAppends(nn.Module):
    """A piece of a data-dependent width that only one side of a branch appends, dynamic batch
    (fuzzer seeds 80053, 80080, 80114 and others): no loop starts where the empty list meets the
    branch, so it takes its batch from the model's input."""

    def forward(self, x: torch.Tensor):
        h = x
        pieces: List[torch.Tensor] = []
        if float(h.mean()) < 0.0:
            pieces.append(h[:, : int(h.argmax(1).max()) % 4 + 1] * 0.5)
            h = torch.abs(h) - 0.5
        return h, torch.cat(pieces + [h], 1)


def test_a_piece_that_one_side_of_a_branch_appends_with_a_dynamic_batch(tmp_path):
    model = PiecesThatABranchAppends()
    example, dynamic = (torch.randn(2, 4),), {"x": {0: "batch"}}
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "branch_pieces", dynamic)
    cases = [(torch.randn(1 + seed % 3, 4, generator=torch.Generator().manual_seed(seed)),) for seed in range(8)]
    widths = _piece_widths(scripted, [compiled, python], cases)
    assert 0 in widths and len(widths) >= 3, widths
    (label,) = python.decisions
    assert set(python.decisions[label]) == {True, False}


class PiecesAndRowsJoinedAlongTheirOwnDims(nn.Module):
    """Pieces as wide as the data says joined along their width, and rows a branch in the same loop
    appends joined along the batch, which is dynamic (fuzzer seed 80023, cut down). The model
    concatenates lists along dims 0 and 1, both dynamic in the pieces, so which was the pieces'
    own was not known: they were stacked, and the second piece of another width raised "the
    tensors of a list that grows at run time must have the same sizes" where PyTorch joins them."""

    def forward(self, x: torch.Tensor, n: int):
        h = x
        pieces: List[torch.Tensor] = []
        rows: List[torch.Tensor] = []
        pieces.append(h[:, : int(h.argmax(1).max()) % 8 + 1] * 0.5)
        for _ in range(n):
            h = torch.tanh(h) + 0.1
            pieces.append(h[:, : int((h > 0.0).sum()) % 8 + 1] * 0.5)
            if float(h.sum()) > 3.0:
                rows.append(h * 0.5)
                break
        return h, torch.cat(pieces + [h], 1), torch.cat(rows + [h], 0)


def test_pieces_and_rows_joined_along_different_dynamic_dims_keep_their_own_layouts(tmp_path):
    model = PiecesAndRowsJoinedAlongTheirOwnDims()
    example, dynamic = (torch.randn(2, 8), 2), {"x": {0: "batch"}}
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "own_dims", dynamic)
    generators = [torch.Generator().manual_seed(seed) for seed in range(10)]
    cases = [(torch.randn(1 + seed % 3, 8, generator=g) * 2.0, seed % 4) for seed, g in enumerate(generators)]
    cases += [(torch.full((2, 8), 2.0), 3), (torch.full((3, 8), -2.0), 3)]  # the break at once; never
    shapes = set()
    for inputs in cases:
        h, joined, stacked = check_hosts(scripted, [compiled, python], inputs)
        shapes.add((joined.shape[1] - h.shape[1], stacked.shape[0] // h.shape[0]))
    assert len({width for width, _ in shapes}) >= 4, shapes  # pieces of several widths and counts
    assert {rows for _, rows in shapes} == {1, 2}, shapes  # without and with the row the break appends
    trips = {count for counts in python.trip_counts.values() for count in counts}
    assert {0, 1, 3} <= trips, python.trip_counts  # no trip, the break at once, the loop to its end
    (label,) = [label for label in python.decisions if label.startswith("if")]
    assert set(python.decisions[label]) == {True, False}, python.decisions


class PiecesBeforeALoopThatMayReturn(nn.Module):
    """A list that starts with a piece of a data-dependent width, returned (joined) from inside a
    loop, and grown by a second piece after the loop (fuzzer seed 80136, cut down). Making the list
    of the path that returned agree with the one of the path that went on read the first piece's
    width on the first path and reused that read on the second, where it is not defined: the
    Python host raised UnboundLocalError, and the compiled host fell back without a reason."""

    def forward(self, x: torch.Tensor, n: int):
        h = x
        pieces: List[torch.Tensor] = [h[:, : int((h > 0.0).sum()) % 4 + 1] * 0.5]
        for _ in range(n):
            h = torch.tanh(h) + 0.25
            if float(h.sum()) > 3.0:
                return h, torch.cat(pieces + [h], 1)
        pieces.append(h[:, : int(h.argmax(1).max()) % 4 + 1])
        return h, torch.cat(pieces + [h], 1)


def test_a_piece_width_read_on_the_path_that_returned_is_read_again_on_the_other(tmp_path):
    model = PiecesBeforeALoopThatMayReturn()
    example, dynamic = (torch.randn(2, 4), 2), {"x": {0: "batch"}}
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "returned_pieces", dynamic)
    # x = 2 returns in the first iteration, x = -2 in the fifth (tanh(h) + 0.25 climbs to > 3 / 8
    # per element), so n = 3 runs that one to the end; n = 0 never enters the loop.
    cases = [(torch.full((2, 4), 2.0), 3), (torch.full((2, 4), -2.0), 3), (torch.full((2, 4), -2.0), 6)]
    cases += [
        (torch.randn(1 + seed % 3, 4, generator=torch.Generator().manual_seed(seed)), seed % 4) for seed in range(8)
    ]
    widths = _piece_widths(scripted, [compiled, python], cases)
    assert len(widths) >= 4, widths
    trips = [count for counts in python.trip_counts.values() for count in counts]
    assert {0, 1, 3, 5} <= set(trips), python.trip_counts
    # The return inside the loop and the test after it of whether the loop returned went both ways.
    assert python.decisions and all(set(sides) == {True, False} for sides in python.decisions.values())


class StateAndOutputsReturnedFromALoop(nn.Module):
    """An Optional state that the first iteration sets and the later ones update, and a list of
    outputs that every iteration appends, both returned from inside the loop (fuzzer seed 80180, cut
    down). The loop's start took the structure of what the body returns without the type of the
    state it leaves unset, so the body's next visit could not type `st * 0.5` ("cannot compute its
    result type: 'NoneType' object has no attribute 'hint'") and the export was refused."""

    def forward(self, x: torch.Tensor, n: int):
        h = x
        st: Optional[torch.Tensor] = None
        outputs: List[torch.Tensor] = []
        for _ in range(n):
            if st is None:
                st = torch.zeros_like(h)
            else:
                st = st * 0.5 + torch.tanh(h) * 0.5
            h = h + st * 0.25 + 0.1
            outputs.append(h * 1.0)
            if float(h.sum()) > 2.0:
                return h, st, outputs
        return h, st, outputs


def test_an_optional_state_and_a_list_returned_from_inside_a_loop(tmp_path):
    model = StateAndOutputsReturnedFromALoop()
    example, dynamic = (torch.randn(2, 4), 3), {"x": {0: "batch"}}
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "returned_state", dynamic)
    lengths = set()
    cases = [(torch.zeros(2, 4), 0), (torch.full((2, 4), 1.0), 4), (torch.full((2, 4), -1.0), 2)]
    cases += [
        (torch.randn(1 + seed % 3, 4, generator=torch.Generator().manual_seed(seed)), seed % 5) for seed in range(8)
    ]
    for x, n in cases:
        _, st, outputs = check_hosts(scripted, [compiled, python], (x, n))
        lengths.add((st is None, len(outputs)))
    assert (True, 0) in lengths and len({length for _, length in lengths}) >= 3, lengths
    trips = [count for counts in python.trip_counts.values() for count in counts]
    assert 0 in trips and max(trips) >= 2, python.trip_counts
    # `st is None`, the return inside and the test after the loop of whether it returned went both ways.
    assert python.decisions and all(set(sides) == {True, False} for sides in python.decisions.values())


class ScoresRefinedAfterTheLabels(nn.Module):
    """A loop that may return early, then the labels and the scaled scores made by one segment, then
    a refinement of the scores for `n` steps, with a dynamic batch. The compiled host gave the loop
    wrong rows, silently (fuzzer seed 80047): IREE put the labels and the scores in one buffer, the
    scores at an offset the integer range analysis folded to 0 inside the loop, which then read the
    labels' bytes. The tensor now enters the loop behind a barrier, in a buffer of its own."""

    def forward(self, x: torch.Tensor, n: int):
        h = x
        for _ in range(4):
            h = h * 0.5 + 1.0
            if float(h[0, 1]) > 1.9:
                return h, h.argmax(1)
        labels = h.argmax(1)
        h = h * 2.0
        for _ in range(n):
            h = h * 0.75 + 0.125
        return h, labels


def test_scores_refined_in_a_loop_after_the_labels_keep_their_rows(tmp_path):
    model = ScoresRefinedAfterTheLabels()
    example, dynamic = (torch.randn(3, 8), 2), {"x": {0: "batch"}}
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "refined_scores", dynamic)
    # h[0, 1] moves halfway to 2 each step: 4.0 returns in the first step, 1.7 in the second
    # (1.85, then 1.925); from -1.0 it stays below 1.9 (1.81 after four steps), and the refinement
    # runs n times (0 included).
    for batch, n in [(3, 2), (2, 0), (1, 1), (4, 3)]:
        x = torch.randn(batch, 8, generator=torch.Generator().manual_seed(batch * 10 + n))
        x[0, 1] = -1.0
        check_hosts(scripted, [compiled, python], (x, n))
    for start in (4.0, 1.7):
        x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
        x[0, 1] = start
        check_hosts(scripted, [compiled, python], (x, 2))
    taken = sorted((dict(counts) for counts in python.decisions.values()), key=lambda counts: -counts[False])
    # The return test: 4 steps of each of the four inputs that never return, 2 steps of 1.7, 1 of 4.0;
    # then whether the loop returned.
    assert taken == [{False: 4 * 4 + 1, True: 2}, {False: 4, True: 2}], python.decisions


class ConfidentPredictionsInNestedBranches(nn.Module):
    """A list of (prediction, confidence) tuples appended only when two nested tests pass, with a
    dynamic batch (fuzzer seed 80098, cut down). Both fields of an empty list and the sizes of the
    two fields of an appended tuple are equal tensors, which IREE merges into one buffer; a side
    that passed it twice read a null ref ("INVALID_ARGUMENT; ref is null; while invoking native
    function hal.buffer_view.create") when the outer test passed and the inner one did not."""

    def forward(self, x: torch.Tensor):
        h = x
        preds: List[Tuple[torch.Tensor, torch.Tensor]] = []
        if float(h.mean()) < -1.0:
            if float(h.max()) > 0.5:
                preds.append((torch.tanh(h), torch.softmax(h, 1).max(1)[0]))
        return h, preds


def test_a_list_of_tuples_appended_in_nested_branches_passes_each_field_in_its_own_buffer(tmp_path):
    model = ConfidentPredictionsInNestedBranches()
    example, dynamic = (torch.randn(2, 4),), {"x": {0: "batch"}}
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "nested_tuples", dynamic)
    lengths = set()
    for batch in (1, 2, 3):
        low = torch.full((batch, 4), -2.0)  # the outer test passes, the inner one does not
        peaked = low.clone()
        peaked[0, 1] = 1.0  # both pass
        for x in (torch.full((batch, 4), -0.5), low, peaked):  # -0.5: the outer test fails
            _, preds = check_hosts(scripted, [compiled, python], (x,))
            lengths.add(len(preds))
    assert lengths == {0, 1}, lengths
    assert [set(sides) for sides in python.decisions.values()] == [{True, False}] * 2, python.decisions


class RefinementThatMayStopEarly(nn.Module):
    """A refinement that returns from inside its loop once the signal is strong enough, else sets
    a state and polishes in nested loops (fuzzer seed 80094, cut down). The state's stand-in and
    the history's, two zero tensors of one type, are one buffer to IREE; the branch that takes the
    `return`'s values on passed it twice, and the VM read a null ref ("INVALID_ARGUMENT; ref is
    null; while invoking native function hal.buffer.length") when the loop returned."""

    def forward(self, x: torch.Tensor, n: int):
        h = x
        steps = 0
        state: Optional[torch.Tensor] = None
        history = h
        if float(h.abs().sum()) < 6.0:
            for _ in range(n):
                steps += 1
                h = torch.relu(h) - 0.25
                h = torch.sigmoid(h) * 2.0 - 1.0
                if float(h.abs().mean()) > 0.24:
                    h = torch.tanh(h)
                    return h, steps, state, history
            if state is None:
                state = h * 0.5
            else:
                state = state * 0.5 + torch.tanh(h) * 0.5
            h = h + state * 0.25
        else:
            h = h * torch.softmax(h, -1).max()
        for i in range(n):
            for _ in range(i + 1):
                h = h * torch.softmax(h, -1).max()
                h = h * 0.75 + 0.125
                for _ in range(n):
                    h = h + torch.tensor(float(steps)) * 0.01
                    if not (float(h[0, 1]) > 0.38):
                        break
            h = h + float(n) * 0.1
        history = torch.cat([history, h], 0)
        return h, steps, state, history


def test_stand_ins_of_one_type_leave_a_return_inside_a_loop_in_buffers_of_their_own(tmp_path):
    model = RefinementThatMayStopEarly()
    example = (torch.tensor([[0.2, 0.7, 2.4, -2.3]]), 0)
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "stops_early")
    paths = set()
    inputs = [
        (torch.tensor([[-1.1, 2.5, 1.1, 0.8]]), 5),  # returns in the first iteration
        (torch.zeros(1, 4), 2),  # runs the loop out, sets the state and polishes
        (torch.zeros(1, 4), 0),  # no iteration
        (torch.full((1, 4), 3.0), 2),  # the other side
        (torch.tensor([[0.1, 2.0, -0.3, 0.2]]), 3),
    ]
    for x, n in inputs:
        h, steps, state, history = check_hosts(scripted, [compiled, python], (x, n))
        paths.add((state is None, history.shape[0]))
    assert paths == {(True, 1), (False, 2), (True, 2)}, paths  # returned; polished with and without the state
    trips = {label: set(counts) for label, counts in python.trip_counts.items()}
    assert any({1, 2} <= counts for counts in trips.values()), trips  # the first loop returned and ran out
    assert sum(set(sides) == {True, False} for sides in python.decisions.values()) >= 2, python.decisions


class PiecesStackedAfterALoop(nn.Module):
    """Pieces as wide as the data says, stacked after the loop that appends them: the list is kept
    stacked, and every append checks that its piece is as wide as the list's. On the compiled host
    IREE ran the concatenation of a wider piece before the check that refuses it (an assert is
    ordered among host ops only), wrote past the stack's buffer, and the process aborted ("double
    free or corruption", fuzzer seed 80023). PyTorch's `stack` refuses such pieces too."""

    def forward(self, x: torch.Tensor, n: int):
        pieces: List[torch.Tensor] = [x[:, : int((x > 0.0).sum()) % 8 + 1]]
        for _ in range(n):
            pieces.append(x[:, : int(x.argmax(1).max()) % 8 + 1] * 0.5)
        return torch.stack(pieces, 0)


# Run in a child process: a kernel that writes past its buffer may abort the process that runs it.
_CALL_IN_A_CHILD = """
import sys
import numpy as np
import dycl_iree
from host_runtime.errors import ModelRaised
runner = dycl_iree.load(sys.argv[1], host="compiled")
try:
    runner(np.load(sys.argv[2]), int(sys.argv[3]))
except ModelRaised as error:
    print("ModelRaised:", error)
"""


def _stacked_pieces(tmp_path):
    model = PiecesStackedAfterALoop()
    example, dynamic = (torch.randn(2, 8), 0), {"x": {0: "batch"}}
    bundle, scripted, compiled, python = export_compiled(tmp_path, model, example, "stacked_pieces", dynamic)
    negative = -torch.ones(2, 8)
    same_width = negative.clone()
    same_width[0, 4], same_width[1, :3] = 2.0, torch.tensor([3.0, 0.5, 0.5])  # 4 positives, argmax 4: 5 and 5
    narrower = torch.ones(2, 8)
    narrower[0, :2], narrower[1, 5] = -1.0, 2.0  # 14 positives, argmax 5: widths 7, then 6
    wider = -torch.ones(16, 8)
    wider[:, 7] = -0.5  # no positive, argmax 7: widths 1, then 8 (which wrote past the stack)
    for x, n in [(same_width, 0), (same_width, 2), (narrower, 0), (torch.randn(3, 8), 0)]:
        check_hosts(scripted, [compiled, python], (x, n))
    assert {0, 2} <= {count for counts in python.trip_counts.values() for count in counts}, python.trip_counts
    return bundle, scripted, python, narrower, wider


def test_pieces_stacked_after_a_loop_match_pytorch_and_a_wrong_width_raises_on_the_python_host(tmp_path):
    _, scripted, python, narrower, wider = _stacked_pieces(tmp_path)
    for x in (wider, narrower):
        with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
            scripted(x, 2)
        with pytest.raises(ModelRaised, match="must have the same sizes"):
            python(x.numpy(), 2)


def test_a_check_that_fails_stops_the_call_before_the_kernel_it_guards(tmp_path, monkeypatch):
    import subprocess
    import sys

    import numpy as np

    from dycl_iree import pipeline

    mains: list[str] = []
    synthesize = pipeline.synthesize_compiled
    monkeypatch.setattr(pipeline, "synthesize_compiled", lambda *args: mains.append(synthesize(*args)) or mains[-1])
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")
    bundle, scripted, python, narrower, wider = _stacked_pieces(tmp_path)
    assert_gate_keeps_the_sizes(mains[-1])
    root, bundle_path = Path(__file__).resolve().parent.parent, tmp_path / "stacked_pieces.dycl"
    assert bundle.host == "compiled" and bundle_path.exists()
    for x in (wider, narrower):
        np.save(tmp_path / "x.npy", x.numpy())
        child = subprocess.run(
            [sys.executable, "-c", _CALL_IN_A_CHILD, str(bundle_path), str(tmp_path / "x.npy"), "2"],
            capture_output=True,
            text=True,
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        assert child.returncode == 0, child.stderr[-2000:]
        assert "ModelRaised:" in child.stdout and "must have the same sizes" in child.stdout, child.stdout


def assert_gate_keeps_the_sizes(main: str) -> None:
    """The call after the checks reads its tensors out of an `scf.if` on them whose failing side
    asserts, tied again to `tensor.dim`s of the tensors from before the branch: sizes of their own
    after it made the zoo's translator wrong (README, "Known traps")."""
    lines = [line.strip() for line in main.splitlines()]
    fails = [i for i, line in enumerate(lines) if '"a check before this call failed"' in line]
    assert fails, "no call waits for a check"
    for fail in fails:
        opened = max(i for i in range(fail) if " = scf.if " in lines[i])
        assert " -> (tensor<" in lines[opened], lines[opened]
        gate = lines[opened].split()[0].split(":")[0]
        before = {line.split()[0] for line in lines[:opened] if '"tensor.dim"' in line}
        read = re.compile(rf'"flow\.tensor\.tie_shape"\({gate}(#\d+)?,')
        ties = [line for line in lines[fail:] if read.search(line)]
        assert ties, f"nothing reads {gate}"
        for tie in ties:
            sizes = tie.split("(", 1)[1].split(")")[0].split(", ")[1:]
            assert sizes and set(sizes) <= before, tie


class ListLeftEmptyByANestedBranch(nn.Module):
    """A list that one side of a nested `if` leaves empty and the others append to, concatenated
    after the branches (fuzzer seed 80038, cut down): the empty list's stand-in was a tensor the
    compiler knew to be empty, IREE gave it a zero-byte buffer, and the compiled host failed on
    that path with OUT_OF_RANGE ("buffer byte_length=0") while the Python host was right."""

    def forward(self, x: torch.Tensor):
        h = x
        ts: List[torch.Tensor] = []
        if float(h.abs().mean()) < 1.0:
            if float(h.sum()) < 0.0:
                h = h * 1.5
            else:
                ts.append(h * 0.5)
        else:
            ts.append(h * 0.5)
        return torch.cat(ts + [h], 0)


def test_a_list_left_empty_by_one_side_of_a_nested_branch(tmp_path):
    model = ListLeftEmptyByANestedBranch()
    _, scripted, compiled, python = export_compiled(tmp_path, model, (torch.full((3, 6), 0.5),), "left_empty")
    rows = set()
    for value in (-0.5, 0.5, 3.0, -3.0):
        rows.add(check_hosts(scripted, [compiled, python], (torch.full((3, 6), value),)).shape[0])
    assert rows == {3, 6}, rows  # the list empty (the inner then side) and with one tensor
    assert all(set(sides) == {True, False} for sides in python.decisions.values()), python.decisions


class PiecesBesideRowsStackedInABranch(nn.Module):
    """Pieces as wide as the data says, joined along their width, and a branch that appends one more
    and then transforms the batch's rows one by one and stacks them (fuzzer seed 95110, cut down),
    dynamic batch. The model stacks a list, so every list whose tensors vary only in dynamic dims
    was stacked, the pieces too: PyTorch's 13 columns came back as 12, or the call failed with
    OUT_OF_RANGE, on both hosts. Then the compiled host skipped the loop over the rows (the entry's
    `0 < rows` read from a register the loop's count had just overwritten) and raised "stack
    expects a non-empty TensorList"."""

    def forward(self, x: torch.Tensor):
        h = x
        pieces: List[torch.Tensor] = []
        pieces.append(h[:, : int(h.argmax(1).max()) % 6 + 1] * 0.5)
        if float(h[0, 1]) > 0.0:
            pieces.append(h[:, : int((h > 0.0).sum()) % 6 + 1] * 0.5)
            rows: List[torch.Tensor] = []
            for t in range(h.shape[0]):
                rows.append(h[t] * 2.0)
            h = torch.stack(rows)
        return h, torch.cat(pieces + [h], 1)


def test_pieces_keep_their_widths_beside_rows_stacked_in_a_branch(tmp_path):
    model = PiecesBesideRowsStackedInABranch()
    example = torch.randn(3, 6, generator=torch.Generator().manual_seed(0))
    example[0, 1] = -1.0  # the example takes the side without the second piece and the rows
    _, scripted, compiled, python = export_compiled(tmp_path, model, (example,), "rows_beside", {"x": {0: "batch"}})
    generators = [torch.Generator().manual_seed(seed) for seed in range(12)]
    cases = [(torch.randn(1 + seed % 4, 6, generator=g) * 2.0,) for seed, g in enumerate(generators)]
    widths = _piece_widths(scripted, [compiled, python], cases)
    assert len(widths) >= 4, widths  # pieces of several widths, one or two of them
    (label,) = python.decisions
    assert set(python.decisions[label]) == {True, False}, python.decisions
    trips = {count for counts in python.trip_counts.values() for count in counts}
    assert {1, 2, 3, 4} <= trips, python.trip_counts  # the loop over the rows at every batch


class RowsOfABranchBesideARandomOp(nn.Module):
    """A dict of named outputs, a branch that runs a `Linear` over the batch's rows one by one and
    concatenates them, a random op on its other side, then refinement steps with a `break` (fuzzer
    seed 95027, cut down), dynamic batch. The compiled host skipped the loop over the rows (the
    entry's `0 < rows` read from a register the loop's count had just overwritten) and raised
    "torch.cat(): expected a non-empty list of Tensors" where PyTorch returns."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 8)
        self.row_layer = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor):
        h = x
        out: Dict[str, torch.Tensor] = {}
        out["scores"] = h.sum(1)
        if math.sqrt(float(h.abs().mean())) > 1.16759 or float(h.max()) > 1.51864:
            rows: List[torch.Tensor] = []
            for t in range(h.shape[0]):
                r = torch.tanh(self.row_layer(h[t]))
                if float(r.max()) > 0.924381:
                    r = torch.softmax(r, 0) * 2.0 - 0.5
                rows.append(r.unsqueeze(0))
            h = torch.cat(rows, 0)
        else:
            h = h + 0.0 * torch.bernoulli(torch.full_like(h, 0.5))
        for _ in range(4):
            h = torch.softmax(self.layer(h), 1) + h * 0.5
            if math.exp(-float(h.abs().mean())) > 0.863421 and float(h[0, 1]) > 0.198265:
                break
        return h, out


def test_rows_of_a_branch_beside_a_random_op_run_on_the_compiled_host(tmp_path):
    torch.manual_seed(0)
    model = RowsOfABranchBesideARandomOp()
    example = (torch.randn(2, 8, generator=torch.Generator().manual_seed(1)),)
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "rows_random", {"x": {0: "batch"}})
    generators = [torch.Generator().manual_seed(seed) for seed in range(12)]
    cases = [(torch.randn(1 + seed % 4, 8, generator=g) * (0.3 + seed % 3),) for seed, g in enumerate(generators)]
    for inputs in cases:
        check_hosts(scripted, [compiled, python], inputs)
    assert all(set(sides) == {True, False} for sides in python.decisions.values()), python.decisions
    trips = {count for counts in python.trip_counts.values() for count in counts}
    assert {1, 2, 3, 4} <= trips, python.trip_counts  # the rows at every batch; refinement to its end


class ReturnBesideAListAndAnOptional(nn.Module):
    """A loop that appends to a list on one side of a branch, and on the other returns from inside
    the loop or sets an Optional state, reading it where it is set (fuzzer seed 135006, cut down).
    The tuple the `return` leaves unset held the list as it started (empty) where the body's held it
    grown, and that one difference left every unset leaf of the loop's start untyped: "cannot compute
    its result type" for `st * 0.5`; without the `else`, "the two sides of a branch give values of
    different structure". `decay` chooses between the two."""

    def __init__(self, decay: bool) -> None:
        super().__init__()
        self.decay = decay

    def forward(self, x: torch.Tensor, n: int):
        h = x
        preds: List[torch.Tensor] = []
        st: Optional[torch.Tensor] = None
        for _ in range(n):
            if float(h.max()) > 1.5:
                preds.append(h * 1.0)
                h = h * 0.5
            else:
                if not (float(h[0, 1]) > -1.0):
                    return h, preds, st
                if st is None:
                    st = torch.zeros_like(h) + 0.5
                elif self.decay:
                    st = st * 0.5 + torch.tanh(h) * 0.5
                h = h + st * 0.25 + 0.5
        return h, preds, st


@pytest.mark.parametrize("decay", [True, False], ids=["decayed", "set_once"])
def test_a_return_in_a_loop_beside_a_grown_list_and_an_optional(tmp_path, decay):
    model = ReturnBesideAListAndAnOptional(decay)
    example = (torch.zeros(2, 4), 2)
    batch = {"x": {0: "batch"}}
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "return_list_optional", batch)
    low = torch.zeros(3, 4)
    low[0, 1] = -2.0  # returns at the first step
    cases = [(torch.zeros(2, 4), n) for n in (0, 1, 2, 5)]  # st set, then grown past 1.5: appended
    cases += [(torch.full((1, 4), 4.0), 3), (low, 2), (low, 0), (torch.full((2, 4), 2.0), 4)]
    lengths, optional = set(), set()
    for inputs in cases:
        _, preds, st = check_hosts(scripted, [compiled, python], inputs)
        lengths.add(len(preds))
        optional.add(st is None)
    assert 0 in lengths and len(lengths) >= 3, lengths  # the list left empty and grown
    assert optional == {True, False}, optional  # the Optional left None and set
    assert all(set(sides) == {True, False} for sides in python.decisions.values()), python.decisions
