"""Tuples whose parts differ between the two sides of a data-dependent branch.

A state that one side sets to a literal (`(torch.zeros(1, 4), torch.ones(1, 4))`, which TorchScript
folds into one constant tuple) lines up item by item with the other side's tuple; parts whose sizes
differ between the sides become dynamic dims. Where the structures truly differ, the refusal names
the part and says how it differs, at the model's line.

TorchScript types a tuple's length (`return (a,)` on one side and `return (a, b)` on the other does
not script), so what an early exit makes shorter is a list of tuples: RaNet-style code appends
`(logits, confidence)` at each exit and returns the list from the exit it takes, a decode loop with
`break` collects one tuple per step. Such a list is carried as one list of run-time length per tuple
element (`specialize/tuple_lists.py`) and comes back as a list of tuples of PyTorch's length.
"""

# The models keep the published code's idioms (`typing.List`, `typing.Tuple`).
# ruff: noqa: UP006, UP045

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import pytest
import torch
import torch.nn as nn

import dycl_iree
from dycl_iree.emit_c import describe_bundle, header
from dycl_iree.errors import SpecializeError, UnsupportedOpError
from dycl_iree.program import ScalarType, TensorType, Value
from dycl_iree.specialize.values import TupleEntry, structure_difference
from tests.conftest import check_hosts, export_compiled


class ResetState(nn.Module):
    """A recurrent-style state reset to a literal tuple when the input is quiet."""

    def forward(self, x):
        if bool(x.sum() > 0):
            state = (x * 2.0, x * 3.0)
        else:
            state = (torch.zeros(1, 4), torch.ones(1, 4))
        return state[0] + state[1]


class CropEither(nn.Module):
    """Returns a pair whose parts are cropped differently on each side (detection heads that keep
    a different number of columns per branch)."""

    def forward(self, x):
        if bool(x.sum() > 0):
            pair = (x, x[:, :2])
        else:
            pair = (x[:, :3], x)
        return pair


def _hosts(tmp_path, model, name):
    bundle = dycl_iree.export(model.eval(), (torch.randn(1, 4),))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / f"{name}.dycl")
    return bundle, dycl_iree.load(path, host="compiled"), dycl_iree.load(path, host="python", record=True)


def test_a_literal_tuple_on_one_side_lines_up_with_the_other(tmp_path):
    bundle, compiled, python = _hosts(tmp_path, ResetState(), "reset")
    scripted = torch.jit.script(ResetState())
    for x in (torch.ones(1, 4), -torch.ones(1, 4)):
        want = scripted(x).numpy()
        for host in (compiled, python):
            np.testing.assert_allclose(host(x.numpy()), want)
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 1}


def test_tuple_parts_of_different_sizes_are_joined_into_dynamic_dims(tmp_path):
    bundle, compiled, python = _hosts(tmp_path, CropEither(), "crop")
    # Each part's second dim differs between the sides: both leave the branch dynamic there.
    assert [leaf.type.shape for leaf in bundle.program.body.results] == [(1, None), (1, None)]
    scripted = torch.jit.script(CropEither())
    for x, widths in ((torch.ones(1, 4), (4, 2)), (-torch.ones(1, 4), (3, 4))):
        want = scripted(x)
        for host in (compiled, python):
            got = host(x.numpy())
            assert isinstance(got, tuple) and tuple(np.shape(g)[1] for g in got) == widths
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w.numpy())
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 1}


@pytest.mark.parametrize(
    "then_items, else_items, expected",
    [
        (2, 3, "result 0 is a tuple of 2 on one side and a tuple of 3 on the other"),
        ("int", "tensor", "result 0, element 1 is an int on one side and a tensor float32[1, 4] on the other"),
    ],
)
def test_a_refusal_names_the_part_that_differs_and_how(then_items, else_items, expected):
    tensor = Value(0, TensorType("float32", (1, 4), (1, 4)), "x")
    count = Value(1, ScalarType("int", 1), "n")

    def made(items):
        if items == "int":
            return TupleEntry((tensor, count))
        if items == "tensor":
            return TupleEntry((tensor, tensor))
        return TupleEntry((tensor,) * items)

    assert structure_difference([made(then_items)], [made(else_items)], ["result 0"]) == expected
    assert structure_difference([made(2)], [made(2)], ["result 0"]) == ""


# ---------------------------------------------------------------------------------------------
# Lists of tuples whose length depends on the exit taken
# ---------------------------------------------------------------------------------------------


class ExitPredictions(nn.Module):
    """Three classifiers, coarse to fine, as RaNet's authors return them: each exit appends its
    `(logits, confidence)` and the list is returned from the exit taken (one to three tuples)."""

    def __init__(self, dim: int = 8, classes: int = 3, threshold: float = 0.4) -> None:
        super().__init__()
        self.stage1, self.stage2, self.stage3 = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.head1, self.head2, self.head3 = nn.Linear(dim, classes), nn.Linear(dim, classes), nn.Linear(dim, classes)
        self.threshold = threshold

    def forward(self, x: torch.Tensor) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        res: List[Tuple[torch.Tensor, torch.Tensor]] = []
        h = torch.relu(self.stage1(x))
        logits = self.head1(h)
        res.append((logits, torch.softmax(logits, 1).max(1)[0]))
        if bool(res[-1][1].min() > self.threshold):
            return res
        h = torch.relu(self.stage2(h))
        logits = self.head2(h)
        res.append((logits, torch.softmax(logits, 1).max(1)[0]))
        if bool(res[-1][1].min() > self.threshold):
            return res
        h = torch.relu(self.stage3(h))
        logits = self.head3(h)
        res.append((logits, torch.softmax(logits, 1).max(1)[0]))
        return res


class GrowingFeatures(nn.Module):
    """Each exit returns its prediction with its features, wider at each stage (8, 16, 24 columns):
    the features' list is concatenated along the width, with their widths."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.stage1, self.stage2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, 3 * dim)
        self.head1, self.head2 = nn.Linear(2 * dim, 2), nn.Linear(3 * dim, 2)

    def forward(self, x: torch.Tensor) -> Tuple[List[Tuple[torch.Tensor, torch.Tensor]], int]:
        res: List[Tuple[torch.Tensor, torch.Tensor]] = [(x.sum(1, keepdim=True).repeat(1, 2), x)]
        h = torch.tanh(self.stage1(x))
        res.append((self.head1(h), h))
        if bool(h.sum() > 0):
            return res, len(res)
        h = torch.tanh(self.stage2(h))
        res.append((self.head2(h), h))
        return res, len(res)


class StepScores(nn.Module):
    """A decode loop with `break` that collects `(scores, state)` per step; after it, the last
    step's scores are read back from the list (`steps[-1][0]`) and the steps iterated."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.cell = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, n: int) -> Tuple[List[Tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
        steps: List[Tuple[torch.Tensor, torch.Tensor]] = []
        state = x
        for _ in range(n):
            state = torch.tanh(self.cell(state) + x)
            steps.append((state.sum(1), state))
            if bool(state.abs().max() > 0.9):
                break
        total = torch.zeros(1)
        for scores, _ in steps:
            total = total + scores
        if len(steps) > 0:
            total = total + steps[-1][0] * 10.0
        return steps, total



def test_an_early_exit_returns_its_list_of_prediction_tuples(tmp_path):
    torch.manual_seed(0)
    bundle, scripted, compiled, python = export_compiled(tmp_path, ExitPredictions(), (torch.randn(1, 8),), "exits")
    assert bundle.manifest["outputs"]["tree"] == {"zip": [{"unstack": 0}, {"unstack": 1}]}
    lengths = set()
    for scale in (0.3, 3.0, 10.0):
        for seed in range(6):
            x = torch.randn(1, 8, generator=torch.Generator().manual_seed(seed)) * scale
            want = check_hosts(scripted, (compiled, python), (x,))
            assert all(isinstance(item, tuple) and len(item) == 2 for item in want)
            lengths.add(len(want))
    assert lengths == {1, 2, 3}, lengths
    assert all(set(sides) == {True, False} for sides in python.decisions.values()), python.decisions
    # One output per tuple element, stacked: what `--output` writes and the C function returns.
    x = torch.randn(1, 8)
    leaves = compiled.flatten_outputs(compiled(x.numpy()))
    assert [np.shape(leaf)[1:] for leaf in leaves] == [(1, 3), (1,)]
    described = describe_bundle(tmp_path / "exits.dycl")
    assert "//   list(zip(list(output0), list(output1)))" in header(described)


class NestedPredictions(nn.Module):
    """Tuples of tuples: each exit appends `(logits, (probabilities, confidence))`."""

    def forward(self, x: torch.Tensor) -> List[Tuple[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]]:
        res: List[Tuple[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]] = []
        res.append((x, (torch.softmax(x, 1), x.max(1)[0])))
        if bool(x.sum() > 0):
            return res
        logits, (_, confidence) = res[0]
        res.append((logits * 2.0, (torch.softmax(logits * 2.0, 1), confidence * 2.0)))
        return res


def test_tuples_of_tuples_are_carried_element_by_element(tmp_path):
    bundle, scripted, compiled, python = export_compiled(tmp_path, NestedPredictions(), (torch.randn(1, 3),), "nested")
    assert bundle.manifest["outputs"]["tree"] == {"zip": [{"unstack": 0}, {"zip": [{"unstack": 1}, {"unstack": 2}]}]}
    lengths = {len(check_hosts(scripted, (compiled, python), (x,))) for x in (torch.ones(1, 3), -torch.ones(1, 3))}
    assert lengths == {1, 2}


def test_tuple_elements_of_different_widths_are_concatenated_with_their_widths(tmp_path):
    torch.manual_seed(1)
    bundle, scripted, compiled, python = export_compiled(
        tmp_path, GrowingFeatures(), (torch.randn(1, 8),), "features"
    )
    ((features,), count) = bundle.manifest["outputs"]["tree"][0]["zip"][1:], bundle.manifest["outputs"]["tree"][1]
    assert "ragged" in features and isinstance(count, int)
    lengths = set()
    for seed in range(12):
        x = torch.randn(1, 8, generator=torch.Generator().manual_seed(seed))
        want = check_hosts(scripted, (compiled, python), (x,))
        lengths.add(len(want[0]))
        assert [item[1].shape[1] for item in want[0]] == [8, 16, 24][: len(want[0])]
    assert lengths == {2, 3}, lengths


def test_a_decode_loop_collects_a_tuple_per_step_and_reads_them_back(tmp_path):
    torch.manual_seed(2)
    _, scripted, compiled, python = export_compiled(tmp_path, StepScores(), (torch.randn(1, 4), 3), "steps")
    lengths = set()
    for n, scale in ((0, 0.1), (1, 0.1), (5, 0.05), (6, 3.0)):
        x = torch.randn(1, 4, generator=torch.Generator().manual_seed(n)) * scale
        steps, _ = check_hosts(scripted, (compiled, python), (x, n))
        lengths.add(len(steps))
    assert 0 in lengths and len(lengths) >= 3, lengths
    trips = [count for counts in python.trip_counts.values() for count in counts]
    assert 0 in trips and max(trips) > 1


class ReturnFromLoop(nn.Module):
    """A loop over stages that returns its predictions so far from inside the loop (`return res`
    at the first confident stage), and the full list after it."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.stage = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, stages: int) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        res: List[Tuple[torch.Tensor, torch.Tensor]] = []
        h = x
        for _ in range(stages):
            h = torch.tanh(self.stage(h) + h)
            res.append((h, h.abs().max()))
            if bool(res[-1][1] > 0.9):
                return res
        return res


class TensorsReturnedFromLoop(nn.Module):
    """The same with a list of tensors: `return res` inside the loop."""

    def forward(self, x: torch.Tensor, stages: int) -> Tuple[List[torch.Tensor], int]:
        res: List[torch.Tensor] = []
        h = x
        for i in range(stages):
            h = torch.tanh(h * 1.5 + 0.1)
            res.append(h)
            if bool(h.max() > 0.9):
                return res, i
        return res, -1


@pytest.mark.parametrize("model_class", [ReturnFromLoop, TensorsReturnedFromLoop])
def test_a_list_returned_from_inside_a_loop(tmp_path, model_class):
    torch.manual_seed(4)
    _, scripted, compiled, python = export_compiled(
        tmp_path, model_class(), (torch.randn(1, 4), 3), model_class.__name__
    )
    lengths, returned_early = set(), set()
    for stages, scale in ((0, 0.1), (1, 0.01), (6, 0.01), (6, 0.2), (6, 3.0)):
        x = torch.randn(1, 4, generator=torch.Generator().manual_seed(stages)) * scale
        want = check_hosts(scripted, (compiled, python), (x, stages))
        result = want if model_class is ReturnFromLoop else want[0]
        lengths.add(len(result))
        returned_early.add(len(result) < stages)
    assert 0 in lengths and len(lengths) >= 3, lengths
    assert returned_early == {True, False}


class ReturnFromNestedLoop(nn.Module):
    """`return res` from a loop inside a loop: both loops carry whether it returned, and the list."""

    def forward(self, x: torch.Tensor, n: int) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        res: List[Tuple[torch.Tensor, torch.Tensor]] = []
        for _ in range(n):
            for _ in range(2):
                x = torch.tanh(x * 1.6 + 0.05)
                res.append((x, x.max()))
                if bool(x.max() > 0.9):
                    return res
        return res


def test_a_list_returned_from_inside_a_nested_loop(tmp_path):
    _, scripted, compiled, python = export_compiled(tmp_path, ReturnFromNestedLoop(), (torch.randn(1, 4), 2), "nest")
    lengths = set()
    for scale, n in ((0.01, 0), (0.01, 1), (0.3, 5), (0.01, 5)):
        lengths.add(len(check_hosts(scripted, (compiled, python), (torch.ones(1, 4) * scale, n))))
    # No step, one outer step (two inner ones), and returns at inner steps 2 and 1 of outer steps 3 and 5.
    assert lengths == {0, 2, 6, 9}


class ExitIndexInTuple(nn.Module):
    """Each exit appends `(logits, the exit's index)`: the ints are a host list of run-time length."""

    def forward(self, x: torch.Tensor) -> List[Tuple[torch.Tensor, int]]:
        res: List[Tuple[torch.Tensor, int]] = [(x, 0)]
        if bool(x.sum() > 0):
            return res
        res.append((x * 2.0, 1))
        return res


def test_an_int_element_is_a_host_list_beside_the_stacked_tensors(tmp_path):
    bundle, scripted, compiled, python = export_compiled(tmp_path, ExitIndexInTuple(), (torch.randn(1, 4),), "index")
    assert bundle.manifest["outputs"]["tree"] == {"zip": [{"unstack": 0}, 1]}
    assert bundle.manifest["outputs"]["leaves"][1] == {"kind": "list", "element": "int"}
    lengths = {len(check_hosts(scripted, (compiled, python), (x,))) for x in (torch.ones(1, 4), -torch.ones(1, 4))}
    assert lengths == {1, 2}


class StepLog(nn.Module):
    """A decode loop that logs `(state, step, score)` per step and reads the last step back."""

    def forward(self, x: torch.Tensor, n: int) -> Tuple[List[Tuple[torch.Tensor, int, float]], int]:
        log: List[Tuple[torch.Tensor, int, float]] = []
        for i in range(n):
            x = torch.tanh(x * 2.0)
            log.append((x, i, float(x.sum())))
            if bool(x.sum() > 1):
                break
        last = log[-1][1] if len(log) > 0 else -1
        return log, last


def test_scalar_elements_read_back_run_on_both_hosts(tmp_path):
    """The log's float scores are a host list of floats (f64 on the compiled host), its steps one of
    ints: both hosts carry them through the loop's exits and give PyTorch's log."""
    bundle = dycl_iree.export(StepLog().eval(), (torch.randn(1, 4), 3))
    assert bundle.host == "compiled", bundle.manifest.get("compiled_host_unsupported")
    path = bundle.save(tmp_path / "log.dycl")
    hosts = tuple(dycl_iree.load(path, host=host, record=True) for host in ("compiled", "python"))
    scripted = torch.jit.script(StepLog().eval())
    lengths = set()
    for n, scale in ((4, 0.01), (0, 0.01), (4, 1.0)):
        log, _ = check_hosts(scripted, hosts, (torch.ones(1, 4) * scale, n))
        lengths.add(len(log))
    assert lengths == {0, 1, 4}


class OptionalInTuple(nn.Module):
    def forward(self, x: torch.Tensor) -> List[Tuple[torch.Tensor, Optional[torch.Tensor]]]:
        res: List[Tuple[torch.Tensor, Optional[torch.Tensor]]] = [(x, None)]
        if bool(x.sum() > 0):
            return res
        res.append((x * 2.0, x))
        return res


class SlicedPredictions(nn.Module):
    def forward(self, x: torch.Tensor) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        res: List[Tuple[torch.Tensor, torch.Tensor]] = [(x, x)]
        if bool(x.sum() > 0):
            res.append((x * 2.0, x))
        return res[1:]


def test_a_list_of_tuples_is_refused_where_its_element_or_operation_cannot_be_carried():
    with pytest.raises(SpecializeError, match=r"holds None as element 1 of its tuples .*a list of its own"):
        dycl_iree.export(OptionalInTuple().eval(), (torch.randn(1, 4),))
    with pytest.raises(UnsupportedOpError, match=r"aten::slice.*list of tuples whose length is known only at run"):
        dycl_iree.export(SlicedPredictions().eval(), (torch.randn(1, 4),))
