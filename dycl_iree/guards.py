"""Index guards: check on the host, before a segment runs, every index it takes from a host int,
and that a reflection pad over a run-time size is narrower than the size.

IREE has no error inside a kernel: a gather or a slice at an index past the end reads outside its
buffer (a crash, or garbage: `nn.Embedding(7, 4)` looked up at 10**9 killed the process; at 7 it
returned 1e27). PyTorch raises IndexError. Where a segment's index comes from a host int (`x[i]`,
`x.select(d, k)`, `embedding(torch.tensor([k]))`, `index_select(x, d, torch.tensor([k]))`), the
bounds are known on the host when the segment is called (a static size, or the size of a buffer
it is passed), so a `dycl::check_index` host op goes in front of the call. The Python host raises
`ModelRaised`; the compiled host asserts (`torch.runtime.assert`), which IREE's VM turns into a
failed call that the runtime raises as `ModelRaised` too. No device sync is added.

Indices computed on the device (an argmax fed to an embedding) cannot be checked before the call:
`check_device_indices` makes their segment return which lookup was out of range, and checks that
after the call.

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
    TensorOp,
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
        elif (reflection := _reflection_padding(op)) is not None:
            # A reflection by at least a run-time size: PyTorch refuses it; the gather would clamp.
            tensor, padding = reflection
            for axis in range(len(padding) // 2):
                dim = len(_shape(tensor)) - 1 - axis
                size = size_of(tensor, dim) if _shape(tensor)[dim] is None else None
                if size is not None:
                    widest = Constant(max(padding[2 * axis], padding[2 * axis + 1]))
                    check(widest, Constant(0), size, _REFLECTION_TOO_WIDE, op.source)
    return checks


_REFLECTION_TOO_WIDE = (
    "RuntimeError: Argument #4: Padding size should be less than the corresponding input dimension"
)


def _reflection_padding(op: TensorOp) -> tuple[Arg, list[int]] | None:
    """(input, padding) of a reflection pad (`F.pad(x, p, "reflect")`, `reflection_pad*d`) whose
    padding is constant, or None."""
    if op.target == "aten::pad.default" and len(op.args) > 2:
        if not (isinstance(op.args[2], Constant) and op.args[2].value == "reflect"):
            return None
    elif not op.target.startswith("aten::reflection_pad"):
        return None
    padding = op.args[1]
    if isinstance(padding, ListArg) and all(isinstance(item, Constant) for item in padding.items):
        return op.args[0], [item.value for item in padding.items]
    if isinstance(padding, Constant) and isinstance(padding.value, (list, tuple)):
        return op.args[0], list(padding.value)
    return None


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


# --- Indices computed on the device ----------------------------------------------------------------
# The lowering clamps them (`index_clamping.py`), so no kernel reads or writes outside its buffer;
# to raise where PyTorch raises, the segment also returns a 0-d int64, the position of its first
# lookup with an index out of range (or their count), which the host reads after the call and
# checks like a host index. That read is a device sync, paid only by segments that look up or
# write at indices they computed themselves.
_DEVICE_LOOKUPS = {
    "aten::embedding.default": "IndexError: index out of range in embedding",
    "aten::index_select.default": "RuntimeError: index out of range in index_select",
    "aten::gather.default": "RuntimeError: index out of range in gather",
    "aten::index.Tensor": "IndexError: index out of range in indexing",
    "aten::index_put.default": "IndexError: index out of range in index_put",
    "aten::scatter.src": "RuntimeError: index out of range in scatter",
    "aten::scatter.value": "RuntimeError: index out of range in scatter",
    "aten::scatter_add.default": "RuntimeError: index out of range in scatter_add",
    "aten::scatter_reduce.two": "RuntimeError: index out of range in scatter_reduce",
    "aten::index_add.default": "RuntimeError: index out of range in index_add",
    "aten::index_copy.default": "IndexError: index out of range in index_copy",
    "aten::index_fill.int_Scalar": "IndexError: index out of range in index_fill",
    "aten::index_fill.int_Tensor": "IndexError: index out of range in index_fill",
    "aten::index_reduce.default": "IndexError: index out of range in self",
}
# Negative indices wrap (as in x[-1]) in these; the others raise on them.
_WRAPPING = (
    "aten::index.Tensor",
    "aten::index_put.default",
    "aten::index_fill.int_Scalar",
    "aten::index_fill.int_Tensor",
)
_INDEX_DTYPES = ("int64", "int32", "int16", "int8", "uint8")


def check_device_indices(program: Program) -> Program:
    """The program whose segments also say whether each index they computed was in range, checked after each call."""
    built = {value: node for node in iter_nodes(program.body) if isinstance(node, HostOp) for value in node.outputs}
    calls: dict[str, list[SegmentCall]] = {}
    for node in iter_nodes(program.body):
        if isinstance(node, SegmentCall):
            calls.setdefault(node.segment, []).append(node)
    fresh = itertools.count(_largest_id(program) + 1)
    segments: list[Segment] = []
    flags: dict[str, list[tuple[str, str]]] = {}  # segment -> (message, source) of each flag it returns
    for segment in program.segments:
        ops: list[TensorOp] = list(segment.nodes)
        in_range: list[Value] = []
        for op in segment.nodes:
            for tensor, dim, index, wrap in _lookups(op):
                guarded = op.target in ("aten::embedding.default", "aten::index_select.default")
                if guarded and _from_host_ints(index, segment, calls.get(segment.name, []), built):
                    continue  # checked before the call (`guard_indices`)
                in_range.append(_in_range_flag(tensor, dim, index, wrap, op.source, fresh, ops))
                flags.setdefault(segment.name, []).append((_DEVICE_LOOKUPS[op.target], op.source))
        if in_range:
            code = _first_failure(in_range, fresh, ops)
            segment = dataclasses.replace(segment, nodes=tuple(ops), results=(*segment.results, code))
        segments.append(segment)
    if not flags:
        return program

    def rewrite(block: Block) -> Block:
        nodes: list = []
        for node in block.nodes:
            node = map_sub_blocks(node, rewrite)
            if isinstance(node, SegmentCall) and node.segment in flags:
                code = Value(next(fresh), TensorType("int64", (), ()))
                nodes.append(dataclasses.replace(node, outputs=(*node.outputs, code)))
                first = Value(next(fresh), ScalarType("int"))
                nodes.append(HostOp("aten::Int.Tensor", (code,), (first,), flags[node.segment][0][1]))
                for position, (message, source) in enumerate(flags[node.segment]):
                    # Exactly one check fails, that of the first lookup out of range, in whatever order they run.
                    passed = Value(next(fresh), ScalarType("bool"))
                    nodes.append(HostOp("aten::ne.int", (first, Constant(position)), (passed,), source))
                    check = (passed, Constant(1), Constant(2), Constant(f"{message} ({source})"))
                    nodes.append(HostOp(CHECK_INDEX, check, (), source))
                continue
            nodes.append(node)
        return dataclasses.replace(block, nodes=tuple(nodes))

    return program.replace(body=rewrite(program.body), segments=tuple(segments))


def _lookups(op: TensorOp) -> list[tuple[Arg, int, Value, bool]]:
    """(tensor, dim, index tensor, negatives wrap) of each index tensor `op` looks up, where the device computes it."""
    if op.target not in _DEVICE_LOOKUPS:
        return []
    wrap = op.target in _WRAPPING
    if op.target == "aten::embedding.default":
        found = [(op.args[0], Constant(0), op.args[1], wrap)]
    elif op.target in ("aten::index.Tensor", "aten::index_put.default"):
        items = op.args[1].items if isinstance(op.args[1], ListArg) else ()
        if any(isinstance(item, Value) and item.type.dtype not in _INDEX_DTYPES for item in items):
            return []  # a boolean mask: nothing to check, and it shifts the dims the others index
        found = [(op.args[0], Constant(dim), item, wrap) for dim, item in enumerate(items)]
    else:  # (input, dim, index, ...)
        found = [(op.args[0], op.args[1], op.args[2], wrap)]
    kept = []
    for tensor, dim, index, wrap in found:
        if not (isinstance(index, Value) and isinstance(index.type, TensorType) and isinstance(dim, Constant)):
            continue
        if index.type.dtype not in _INDEX_DTYPES:
            continue
        shape = _shape(tensor)
        kept.append((tensor, dim.value % max(len(shape), 1), index, wrap))
    return kept


def _from_host_ints(index: Value, segment: Segment, calls: list[SegmentCall], built: dict[Value, HostOp]) -> bool:
    if index not in segment.params or not calls:
        return False
    position = segment.params.index(index)
    return all(_host_ints(call.args[position], built) is not None for call in calls)


def _emitter(ops: list[TensorOp], fresh: Iterator[int], source: str) -> Any:
    def op(target: str, args: tuple, type_: Any) -> Value:
        out = Value(next(fresh), type_)
        ops.append(TensorOp(target, args, (), (out,), source))
        return out

    return op


def _in_range_flag(
    tensor: Arg, dim: int, index: Value, wrap: bool, source: str, fresh: Iterator[int], ops: list[TensorOp]
) -> Value:
    """A 0-d bool (appended to `ops`): every element of `index` lies in [-size, size) if `wrap`, else [0, size).

    Each bound is reduced on its own and the two 0-d results are and-ed: over an index that
    broadcasts a run-time number of rows (`g.unsqueeze(1).expand_as(h)`, the index of graph code's
    `scatter_add`), IREE 3.13 fails to compile `all` of the two comparisons and-ed element-wise
    ("'func.func' op exceeded stack allocation limit of 32768 bytes"; README, Known traps)."""
    shape, hint = index.type.shape, index.type.hint
    op = _emitter(ops, fresh, source)

    size: Arg = Constant(_shape(tensor)[dim])
    if size.value is None:
        size = op("aten::sym_size.int", (tensor, Constant(dim)), ScalarType("int"))
    mask = TensorType("bool", shape, hint)
    low = op("aten::add.Scalar", (index, size), index.type) if wrap else index
    flag = TensorType("bool", (), ())
    above = op("aten::all.default", (op("aten::ge.Scalar", (low, Constant(0)), mask),), flag)
    below = op("aten::all.default", (op("aten::lt.Scalar", (index, size), mask),), flag)
    return op("aten::logical_and.default", (above, below), flag)


def _first_failure(in_range: list[Value], fresh: Iterator[int], ops: list[TensorOp]) -> Value:
    """A 0-d int64: the position of the first False among `in_range`, or its length when all are True."""
    op = _emitter(ops, fresh, "")
    scalar = TensorType("int64", (), ())
    last = len(in_range) - 1
    code = op("aten::where.Scalar", (in_range[last], Constant(last + 1), Constant(last)), scalar)
    for position in range(last - 1, -1, -1):
        code = op("aten::where.ScalarOther", (in_range[position], code, Constant(position)), scalar)
    return code
