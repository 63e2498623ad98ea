"""Partition: segments, liveness, dedup; checked with the reference interpreter (no IREE)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dycl_iree.capture import capture
from dycl_iree.partition import partition
from dycl_iree.program import Constant, If, ScalarType, SegmentCall, iter_nodes
from dycl_iree.reference import ReferenceInterpreter
from dycl_iree.specialize import specialize
from models import programs

from .conftest import assert_matches, make, scripted


def _partitioned(model: nn.Module, example_inputs: tuple, dynamic_shapes=None):
    return partition(specialize(capture(model), example_inputs, dynamic_shapes))


@pytest.mark.parametrize("name", sorted(programs.MODELS))
def test_partitioned_program_computes_what_the_scripted_model_does(name: str) -> None:
    model, example_inputs, dynamic_shapes = make(name)
    program = _partitioned(model, example_inputs, dynamic_shapes)
    decisions: dict[str, set] = {}
    for sample in programs.SAMPLES[name]():
        interpreter = ReferenceInterpreter(program)
        with torch.no_grad():
            assert_matches(_to_numpy(interpreter.run(*sample)), scripted(model)(*sample), name)
        for label, sides in interpreter.decisions.items():
            decisions.setdefault(label, set()).update(sides)
    for node in iter_nodes(program.body):
        if isinstance(node, If):
            assert decisions.get(node.label) == {True, False}, node.label


def _to_numpy(outputs):
    if isinstance(outputs, tuple):
        return tuple(_to_numpy(o) for o in outputs)
    return outputs.numpy() if isinstance(outputs, torch.Tensor) else outputs


def test_segments_produce_tensors_and_constants_stay_on_the_host() -> None:
    """DyCL's graph optimization: a constant output (the exit index) never goes through a segment."""
    model, example_inputs, _ = make("early_exit")
    program = _partitioned(model, example_inputs)
    for segment in program.segments:
        assert not any(isinstance(v.type, ScalarType) for v in segment.results)
    (branch,) = [n for n in iter_nodes(program.body) if isinstance(n, If)]
    assert isinstance(branch.then_block.results[1], Constant) and branch.then_block.results[1].value == 0
    assert isinstance(branch.else_block.results[1], Constant) and branch.else_block.results[1].value == 1


class _SharedBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(6, 6), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        w = x * 2.0
        if y.sum() > 0:
            z = self.block(y)
        else:
            z = self.block(w)  # the same code and weights as the other side, on another value
        return z


def test_identical_segments_are_emitted_once() -> None:
    torch.manual_seed(0)
    program = _partitioned(_SharedBlock().eval(), (torch.randn(1, 6),))
    calls = [n for n in iter_nodes(program.body) if isinstance(n, SegmentCall)]
    assert len(calls) == 3
    assert len(program.segments) == 2
    (branch,) = [n for n in iter_nodes(program.body) if isinstance(n, If)]
    (then_call,), (else_call,) = branch.then_block.nodes, branch.else_block.nodes
    assert then_call.segment == else_call.segment


def test_gates_that_differ_only_in_their_index_share_one_segment() -> None:
    model, example_inputs, _ = make("policy_blocks")
    program = _partitioned(model, example_inputs)
    calls = [n for n in iter_nodes(program.body) if isinstance(n, SegmentCall)]
    by_segment: dict[str, list] = {}
    for call in calls:
        by_segment.setdefault(call.segment, []).append(call)
    shared = [name for name, uses in by_segment.items() if len(uses) >= 15]
    assert len(shared) == 1, "the 15 gate reads after the first should share one segment"
    indices = sorted(call.args[-1].value for call in by_segment[shared[0]])
    assert indices == list(range(1, 16))
    # 16 blocks, one shared gate, the policy (with the first gate) and the head.
    assert len(program.segments) == 19
