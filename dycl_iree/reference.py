"""The reference interpreter: runs a Program with PyTorch eager ops and records every decision.

It checks the front half of the compiler without IREE (a specialized or partitioned Program must
compute what the scripted model computes), and it is how `verify` learns which branch sides and
loop exits an input takes.

Example:
    >>> interpreter = ReferenceInterpreter(program)                    # doctest: +SKIP
    >>> outputs = interpreter.run(torch.randn(1, 8))                   # doctest: +SKIP
    >>> interpreter.decisions                                          # doctest: +SKIP
    {'if0': {True: 1}}
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from host_runtime import scalar_ops
from host_runtime.errors import ModelRaised
from host_runtime.random_state import DEFAULT_SEED, initial_state
from host_runtime.runner import build_outputs

from . import random_ops, random_sampling  # noqa: F401  (register the dycl:: ops that a Program may call)
from .guards import CHECK_INDEX
from .program import REFINE, STAND_IN, Block, HostOp, If, Loop, Program, SegmentCall, TensorOp, Walker
from .specialize.schemas import overload_of


class ReferenceInterpreter(Walker):
    def __init__(self, program: Program) -> None:
        super().__init__()
        self.program = program
        self.segments = {s.name: s for s in program.segments}
        # decisions[label][side] counts how often each side of a branch was taken;
        # trips[label] lists the trip counts of every run of a loop.
        self.decisions: dict[str, dict[bool, int]] = defaultdict(lambda: defaultdict(int))
        self.trips: dict[str, list[int]] = defaultdict(list)
        self.segment_calls = 0

    def run(self, *inputs: Any, seed: int = DEFAULT_SEED) -> Any:
        """The model's outputs on `inputs`; a Program with random ops draws from `seed`'s stream, as a
        freshly loaded bundle does (`host_runtime/random_state.py`)."""
        arguments = list(inputs)
        if self.program.random_state:
            arguments.append(torch.from_numpy(initial_state(seed)))
        results = self.run_block(self.program.body, arguments)
        if self.program.random_state:
            results = results[:-1]
        return build_outputs(self.program.output_tree, results)

    def tensor_op(self, node: TensorOp) -> list:
        overload = overload_of(node.target)
        result = overload(*[self.read(a) for a in node.args], **{k: self.read(a) for k, a in node.kwargs})
        if node.returns == "single":
            return [result]
        return list(result)

    def host_op(self, node: HostOp) -> list:
        args = [self.read(a) for a in node.args]
        target = node.target
        if target == "aten::Bool.Tensor":
            return [bool(args[0].item())]
        if target == "aten::Int.Tensor":
            return [int(args[0].item())]
        if target == "aten::Float.Tensor":
            return [float(args[0].item())]
        if target == "aten::size.int":
            return [int(args[0].shape[args[1]])]
        if target == "aten::tensor":
            return [torch.tensor(args[0], dtype=getattr(torch, args[1]))]
        if target == "prim::RaiseException":
            raise ModelRaised(f"{args[0]} ({node.source})")
        if target == STAND_IN:
            return [None]  # never read on this path
        if target == REFINE:
            return [args[0]]
        if target == CHECK_INDEX:
            index, low, high, message = args
            if not low <= index < high:
                raise ModelRaised(message)
            return []
        return [scalar_ops.lookup(target).function(*args)]

    def segment_call(self, node: SegmentCall) -> list:
        self.segment_calls += 1
        segment = self.segments[node.segment]
        inner = ReferenceInterpreter(self.program)
        block = Block(segment.params, segment.nodes, segment.results)
        return inner.run_block(block, [self.read(a) for a in node.args])

    def if_(self, node: If) -> list:
        taken = bool(self.env[node.condition])
        self.decisions[node.label][taken] += 1
        return self.run_block(node.then_block if taken else node.else_block, ())

    def loop(self, node: Loop) -> list:
        trip_count = self.read(node.trip_count)
        go = bool(self.read(node.condition))
        carried = [self.read(a) for a in node.initial]
        index = 0
        while go and index < trip_count:
            results = self.run_block(node.body, [index, *carried])
            go, carried = bool(results[0]), results[1:]
            index += 1
        self.trips[node.label].append(index)
        return carried
