"""Partition: cut the Program's tensor code into condition-free segments (DyCL's program rewriting).

Within every block, maximal runs of `TensorOp`s become one segment. Host operations that do not
read the running segment's results (scalar arithmetic on inputs, list bookkeeping) are hoisted in
front of it, so they do not cut it; a sync point, a shape read of one of its results, an `if` or a
loop ends it. Liveness over the whole Program then gives each segment its parameters (values it
reads from outside) and its results (values read outside it); constants stay inside, and values
that are only passed along never enter a segment (DyCL's graph optimization). Segments with the
same ops, constants and signature are emitted once and called from every place they occur.

Example:
    >>> program = partition(specialize(capture(model), example_inputs))   # doctest: +SKIP
    >>> [segment.name for segment in program.segments]                    # doctest: +SKIP
    ['seg0', 'seg1']
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from .errors import SpecializeError
from .program import (
    Block,
    Constant,
    HostOp,
    ListArg,
    ListType,
    Node,
    Program,
    ScalarType,
    Segment,
    SegmentCall,
    TensorOp,
    Value,
    arg_values,
    map_sub_blocks,
    node_inputs,
    sub_blocks,
)
from .random_state import thread_random_state


@dataclass(frozen=True, eq=False)
class _Group:
    """A run of tensor ops, before liveness gives it a signature."""

    index: int
    ops: tuple[TensorOp, ...]

    @property
    def outputs(self) -> tuple[Value, ...]:
        return ()


def partition(program: Program) -> Program:
    """Replace runs of TensorOps by SegmentCalls and collect the segments.

    Random ops first get their generator's state as an explicit value (`random_state.py`), so that
    liveness makes it a parameter and a result of every segment that draws."""
    program = thread_random_state(program)
    groups: list[_Group] = []
    body = _group_block(program.body, groups)
    reads_outside = _reads_outside_groups(body)
    signed = [_signature(group, reads_outside) for group in groups]
    # Segments that differ only in a constant index (`policy[0, i]` in an unrolled loop) share
    # one function with the index as a parameter, when at least two places would use it.
    lifted = [_lift_indices(ops, params, results) for ops, params, results in signed]
    lifted_uses: dict[Any, int] = {}
    for lifted_form in lifted:
        if lifted_form is not None:
            key = _segment_key(*lifted_form[:3])
            lifted_uses[key] = lifted_uses.get(key, 0) + 1
    segments: dict[Any, Segment] = {}
    calls: dict[int, SegmentCall | None] = {}
    for group, (ops, params, results), lifted_form in zip(groups, signed, lifted):
        if not results:
            calls[group.index] = None  # dead code
            continue
        args: list[Any] = list(params)
        if lifted_form is not None and lifted_uses[_segment_key(*lifted_form[:3])] > 1:
            ops, params, results, indices = lifted_form
            args += indices
        key = _segment_key(ops, params, results)
        segment = segments.get(key)
        if segment is None:
            segment = Segment(f"seg{len(segments)}", tuple(params), tuple(ops), tuple(results))
            segments[key] = segment
        calls[group.index] = SegmentCall(segment.name, tuple(args), tuple(results))
    body = _replace_groups(body, calls)
    return program.replace(body=body, segments=tuple(segments.values()))


def _signature(group: _Group, reads_outside: set[Value]) -> tuple[list[TensorOp], list[Value], list[Value]]:
    """Liveness: a group's parameters (read from outside) and results (read outside it)."""
    defined = [v for op in group.ops for v in op.outputs]
    defined_set = set(defined)
    params: list[Value] = []
    for op in group.ops:
        for value in node_inputs(op):
            if value not in defined_set and value not in params:
                if isinstance(value.type, ListType):
                    where = f"{op.target} reads a run-time list ({op.source})"
                    raise SpecializeError(f"{where}; turn it into a tensor first")
                params.append(value)
    return list(group.ops), params, [v for v in defined if v in reads_outside]


# Ops whose int argument at this position may become a run-time parameter without changing any
# result shape: `aten::select.int(self, dim, index)`.
_LIFTABLE_INDEX = {"aten::select.int": 2}


def _lift_indices(
    ops: list[TensorOp], params: list[Value], results: list[Value]
) -> tuple[list[TensorOp], list[Value], list[Value], list[Constant]] | None:
    lifted_ops: list[TensorOp] = []
    new_params: list[Value] = []
    constants: list[Constant] = []
    next_id = -1 - max((v.id for v in params), default=0)
    for op in ops:
        position = _LIFTABLE_INDEX.get(op.target)
        if position is None or not _is_index_constant(op.args[position]):
            lifted_ops.append(op)
            continue
        constant = op.args[position]
        # Negative ids never clash with the Program's own values.
        index = Value(next_id - len(new_params), ScalarType("int", constant.value), "index")
        new_params.append(index)
        constants.append(constant)
        args = op.args[:position] + (index,) + op.args[position + 1 :]
        lifted_ops.append(dataclasses.replace(op, args=args))
    if not new_params:
        return None
    return lifted_ops, params + new_params, results, constants


def _is_index_constant(arg: Any) -> bool:
    return isinstance(arg, Constant) and type(arg.value) is int and arg.value >= 0


def _group_block(block: Block, groups: list[_Group]) -> Block:
    nodes: list[Any] = []
    running: list[TensorOp] = []
    running_outputs: set[Value] = set()
    hoisted: list[Node] = []

    def close() -> None:
        nonlocal running, running_outputs, hoisted
        nodes.extend(hoisted)
        if running:
            group = _Group(len(groups), tuple(running))
            groups.append(group)
            nodes.append(group)
        running, running_outputs, hoisted = [], set(), []

    for node in block.nodes:
        if isinstance(node, TensorOp):
            running.append(node)
            running_outputs.update(node.outputs)
        elif isinstance(node, HostOp) and not (set(node_inputs(node)) & running_outputs):
            (hoisted if running else nodes).append(node)
        else:
            close()
            nodes.append(map_sub_blocks(node, lambda inner: _group_block(inner, groups)))
    close()
    return Block(block.params, tuple(nodes), block.results)


def _reads_outside_groups(block: Block) -> set[Value]:
    """Values read by anything that is not a tensor op of the group that defines them."""
    reads: set[Value] = set()

    def visit(inner: Block) -> None:
        for node in inner.nodes:
            if isinstance(node, _Group):
                defined = {v for op in node.ops for v in op.outputs}
                for op in node.ops:
                    reads.update(v for v in node_inputs(op) if v not in defined)
                continue
            reads.update(node_inputs(node))
            for nested in sub_blocks(node):
                visit(nested)
        for result in inner.results:
            reads.update(arg_values(result))

    visit(block)
    return reads


def _replace_groups(block: Block, calls: dict[int, SegmentCall | None]) -> Block:
    nodes: list[Node] = []
    for node in block.nodes:
        if isinstance(node, _Group):
            call = calls[node.index]
            if call is not None:
                nodes.append(call)
        else:
            nodes.append(map_sub_blocks(node, lambda inner: _replace_groups(inner, calls)))
    return Block(block.params, tuple(nodes), block.results)


def _segment_key(ops: list[TensorOp] | tuple[TensorOp, ...], params: list[Value], results: list[Value]) -> Any:
    """Structural identity: same ops on the same constants (weights by identity) and signature."""
    local: dict[Value, str] = {v: f"p{i}" for i, v in enumerate(params)}
    for op in ops:
        for value in op.outputs:
            local[value] = f"o{len(local)}"

    def canon(arg: Any) -> Any:
        if isinstance(arg, Value):
            return local[arg]
        if isinstance(arg, ListArg):
            return ("list", tuple(canon(a) for a in arg.items))
        value = arg.value if isinstance(arg, Constant) else arg
        if isinstance(value, torch.Tensor):
            return ("tensor", id(value))
        return ("const", type(value).__name__, repr(value))

    return (
        tuple(v.type for v in params),
        tuple(
            (op.target, op.returns, tuple(canon(a) for a in op.args), tuple((k, canon(a)) for k, a in op.kwargs))
            for op in ops
        ),
        tuple(local[v] for v in results),
    )
