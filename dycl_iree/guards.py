"""Index guards: check on the host, before a segment runs, every index it takes from a host int.

IREE has no error inside a kernel: a gather or a slice at an index past the end reads outside its
buffer (a crash, or garbage: `nn.Embedding(7, 4)` looked up at 10**9 killed the process; at 7 it
returned 1e27). PyTorch raises IndexError. Where a segment's index comes from a host int (`x[i]`,
`x.select(d, k)`, `embedding(torch.tensor([k]))`, `index_select(x, d, torch.tensor([k]))`), the
bounds are known on the host when the segment is called (a static size, or the size of a buffer
it is passed), so a `dycl::check_index` host op goes in front of the call. The Python host raises
`ModelRaised`; the compiled host asserts (`torch.runtime.assert`), which IREE's VM turns into a
failed call that the runtime raises as `ModelRaised` too. No device sync is added.

Indices computed on the device (an argmax fed to an embedding) are not checked here.

Example:
    >>> guarded = guard_indices(program)                                   # doctest: +SKIP
    >>> [n.target for n in guarded.body.nodes if isinstance(n, HostOp)]    # doctest: +SKIP
    ['aten::tensor', 'dycl::check_index']
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Iterator

from .program import (
    Arg,
    Block,
    Constant,
    HostOp,
    ListArg,
    Program,
    ScalarType,
    Segment,
    SegmentCall,
    TensorType,
    Value,
    iter_nodes,
    map_sub_blocks,
)

CHECK_INDEX = "dycl::check_index"  # args: (index, low, high, message); raises unless low <= index < high


def guard_indices(program: Program) -> Program:
    """The program with a `dycl::check_index` before each segment call, for each index it takes from the host."""
    built = {value: node for node in iter_nodes(program.body) if isinstance(node, HostOp) for value in node.outputs}
    segments = {segment.name: segment for segment in program.segments}
    fresh = itertools.count(_largest_id(program) + 1)

    def rewrite(block: Block) -> Block:
        nodes: list = []
        for node in block.nodes:
            node = map_sub_blocks(node, rewrite)
            if isinstance(node, SegmentCall):
                nodes.extend(_checks(segments[node.segment], node, built, fresh))
            nodes.append(node)
        return dataclasses.replace(block, nodes=tuple(nodes))

    return program.replace(body=rewrite(program.body))


def _checks(segment: Segment, call: SegmentCall, built: dict[Value, HostOp], fresh: Iterator[int]) -> list[HostOp]:
    on_host = dict(zip(segment.params, call.args))
    checks: list[HostOp] = []

    def size_of(tensor: Arg, dim: int) -> Arg | None:
        """The size of `tensor`'s dim as the host knows it: a constant, or a shape read of a buffer."""
        if isinstance(tensor, Constant) and hasattr(tensor.value, "shape"):
            return Constant(int(tensor.value.shape[dim]))
        if not isinstance(tensor, Value) or not isinstance(tensor.type, TensorType):
            return None
        size = tensor.type.shape[dim]
        if size is not None:
            return Constant(size)
        buffer = on_host.get(tensor)
        if not isinstance(buffer, Value):
            return None
        read = Value(next(fresh), ScalarType("int"))
        checks.append(HostOp("aten::size.int", (buffer, Constant(dim)), (read,), ""))
        return read

    def check(index: Arg, low: Arg, high: Arg, message: str, source: str) -> None:
        checks.append(HostOp(CHECK_INDEX, (index, low, high, Constant(f"{message} ({source})")), (), source))

    for op in segment.nodes:
        if op.target == "aten::select.int":
            tensor, dim, index = op.args
            index = on_host.get(index) if isinstance(index, Value) else None
            if index is None or not isinstance(dim, Constant) or not isinstance(tensor, Value):
                continue
            dim = dim.value % len(tensor.type.shape)
            size = size_of(tensor, dim)
            if size is None:
                continue
            low = Value(next(fresh), ScalarType("int"))
            checks.append(HostOp("aten::mul.int", (size, Constant(-1)), (low,), op.source))
            check(index, low, size, f"IndexError: index out of range in select (dim {dim})", op.source)
        elif op.target in ("aten::embedding.default", "aten::index_select.default"):
            if op.target == "aten::embedding.default":
                table, indices, dim, name = op.args[0], op.args[1], 0, "embedding"
            else:
                table, dim, indices, name = op.args[0], op.args[1], op.args[2], "index_select"
                if not isinstance(dim, Constant):
                    continue
                dim = dim.value % len(_shape(table))
            items = _host_ints(on_host.get(indices) if isinstance(indices, Value) else None, built)
            if items is None:
                continue
            size = size_of(table, dim)
            if size is None:
                continue
            source = built[on_host[indices]].source or op.source
            for item in items:
                check(item, Constant(0), size, f"IndexError: index out of range in {name}", source)
    return checks


def _host_ints(tensor: Any, built: dict[Value, HostOp]) -> tuple[Arg, ...] | None:
    """The host ints an index tensor was built from (`torch.tensor([k, ...])` or `torch.tensor(k)`), if so."""
    node = built.get(tensor) if isinstance(tensor, Value) else None
    if node is None or node.target != "aten::tensor":
        return None
    data = node.args[0]
    items = data.items if isinstance(data, ListArg) else (data,)
    ints = tuple(item for item in items if isinstance(item, Value) and item.type == ScalarType("int"))
    return ints or None


def _shape(tensor: Arg) -> tuple:
    if isinstance(tensor, Constant):
        return tuple(tensor.value.shape)
    return tensor.type.shape


def _largest_id(program: Program) -> int:
    largest = -1

    def visit(item: Any) -> None:
        nonlocal largest
        if isinstance(item, Value):
            largest = max(largest, item.id)
        elif isinstance(item, ListArg):
            for inner in item.items:
                visit(inner)
        elif isinstance(item, Block):
            for value in (*item.params, *item.results):
                visit(value)
        elif isinstance(item, tuple):
            for inner in item:
                visit(inner)

    blocks = [program.body]
    for node in iter_nodes(program.body):
        for field in dataclasses.fields(node):
            visit(getattr(node, field.name))
    for block in blocks:
        visit(block)
    for segment in program.segments:
        visit(segment.params)
        visit(segment.results)
        for op in segment.nodes:
            visit(op.outputs)
            visit(op.args)
    return largest
