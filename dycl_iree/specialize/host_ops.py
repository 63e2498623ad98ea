"""Specialize's host scalars: sizes, lengths, reads of tensor data (`.item()`, `int(t)`), and the
int / float / bool ops on them, each a `HostOp` that the hosts run (`host_runtime.scalar_ops`,
`hosts.scalars`). Shape reads need no device sync: the host knows every buffer's shape.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator

import torch

from host_runtime import scalar_ops

from ..errors import UnsupportedOpError
from ..program import (
    Arg,
    Block,
    Constant,
    HostOp,
    ListArg,
    ScalarType,
    TensorType,
    Value,
    arg_values,
    iter_nodes,
    map_sub_blocks,
    node_inputs,
    sub_blocks,
)
from .aliasing import LIST_MUTATORS
from .ragged_ints import is_int_list
from .run_time_dicts import RuntimeText
from .schemas import call_overload, source_of, torch_dtype
from .structured import RecordEntry
from .values import (
    RaggedList,
    TensorList,
    fold_scalar,
    hint_of,
    is_dynamic,
    python_scalar,
    same_constant,
    tensor_type_of,
    type_from_ts,
    value_name,
    walk_args,
)

SYNC_OPS = {
    "aten::Bool": "bool",
    "aten::Int": "int",
    "aten::Float": "float",
    "aten::item": None,
    "aten::ScalarImplicit": None,
    "aten::IntImplicit": "int",
    "aten::FloatImplicit": "float",
}


# Conversions of a host scalar to its own kind, which leave it as it is.
_SCALAR_CONVERSIONS = {"aten::Int": "int", "aten::Float": "float", "aten::Bool": "bool"}


def _int_items(entry: Any) -> tuple | None:
    """The items of a list of ints (constant, or a fixed-length list with run-time items), else None."""
    if isinstance(entry, Constant) and isinstance(entry.value, list):
        values = entry.value
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return tuple(Constant(v) for v in values)
        return None
    if isinstance(entry, ListArg):
        for item in entry.items:
            is_int = isinstance(item, Constant) and isinstance(item.value, int) and not isinstance(item.value, bool)
            if not (is_int or (isinstance(item, Value) and item.type == ScalarType("int"))):
                return None
        return entry.items
    return None


def _dim_error(dim: int, rank: int) -> str:
    """PyTorch's message for `size(dim)` with a dim the tensor does not have."""
    if rank == 0:
        return f"IndexError: Dimension specified as {dim} but tensor has no dimensions"
    return f"IndexError: Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})"


class HostScalars:
    """Host scalars and shape reads (a mixin of the specializer)."""

    @contextlib.contextmanager
    def emitting_into(self, nodes: list) -> Iterator[None]:
        """Emit into `nodes`, the nodes of one path (a side of a branch, where two paths' lists are
        made to agree), then go back to the nodes of the walk.

        A size read on that path is a value of that path: it is no answer to a later read of the
        same size on another path or after the branch, so the sizes read meanwhile are forgotten
        (else the other side of the branch read a size defined only on the first, fuzzer seed 80136).
        """
        saved_nodes, saved_dims = self.nodes, dict(self.dim_sources)
        self.nodes = nodes
        try:
            yield
        finally:
            self.nodes, self.dim_sources = saved_nodes, saved_dims

    def visit_size(self, node: torch._C.Node) -> None:
        inputs = [self.entry(v) for v in node.inputs()]
        tensor = inputs[0]
        tensor_type = tensor_type_of(tensor)
        if tensor_type is None:
            return self.visit_op(node)
        if isinstance(tensor, Constant):
            size = list(tensor.value.shape)
            self.bind(node.output(), Constant(size if len(inputs) == 1 else size[inputs[1].value]))
            return
        dims = range(len(tensor_type.shape)) if len(inputs) == 1 else [inputs[1]]
        items = [self.size_of(tensor, dim, source_of(node)) for dim in dims]
        if len(inputs) == 1:
            all_constant = all(isinstance(i, Constant) for i in items)
            self.bind(node.output(), Constant([i.value for i in items]) if all_constant else ListArg(tuple(items)))
        else:
            self.bind(node.output(), items[0])

    def size_of(self, tensor: Value, dim: Any, source: str) -> Any:
        """`tensor.size(dim)`: a constant for a static dim, else a host int read from the buffer's shape."""
        tensor_type = tensor.type
        if isinstance(dim, Constant):
            dim = dim.value
        if isinstance(dim, int):
            rank = len(tensor_type.shape)
            if rank == 0 or not -rank <= dim < rank:
                # The rank is known here, so PyTorch raises on every input that reaches this line.
                self.nodes.append(HostOp("prim::RaiseException", (Constant(_dim_error(dim, rank)),), (), source))
                self.raised = True
                return Constant(0)
            dim = dim % rank
            if tensor_type.shape[dim] is not None:
                return Constant(tensor_type.shape[dim])
            if (tensor, dim) in self.dim_sources:
                return self.dim_sources[(tensor, dim)]
            dim_arg: Arg = Constant(dim)
            hint = tensor_type.hint[dim]
        else:
            dim_arg, hint = dim, 1
        # A shape read needs no device sync: the host knows every buffer's shape.
        value = self.new_value(ScalarType("int", hint), "size")
        self.nodes.append(HostOp("aten::size.int", (tensor, dim_arg), (value,), source))
        if isinstance(dim_arg, Constant):
            self.dim_sources[(tensor, dim_arg.value)] = value  # the next read is the same value
        return value

    def numel_of(self, tensor: Value, source: str) -> Any:
        """`tensor.numel()`: the product of its sizes, a host int when a dim is dynamic (NMS's
        `while idx.numel() > 0`), read from the buffer's shape like `size(d)`: no device sync."""
        total: Any = Constant(1)
        for dim in range(tensor.type.rank):
            size = self.size_of(tensor, dim, source)
            total = self.emit_host("aten::mul.int", (total, size), "int", source)
        return total

    def visit_len(self, node: torch._C.Node) -> None:
        subject = self.entry(node.input())
        if isinstance(subject, (ListArg, RecordEntry)):
            if isinstance(subject, RecordEntry):
                self.key_set_known(subject, "len()", source_of(node))
            self.bind(node.output(), Constant(len(subject.items)))
        elif isinstance(subject, TensorList):
            self.bind(node.output(), self.list_length(subject, source_of(node)))
        elif isinstance(subject, RaggedList):
            self.bind(node.output(), self.ragged_length(subject, source_of(node)))
        elif isinstance(subject, Value) and isinstance(subject.type, TensorType):
            if subject.type.shape[0] is not None:
                self.bind(node.output(), Constant(subject.type.shape[0]))
            else:
                value = self.new_value(ScalarType("int", subject.type.hint[0]), "len")
                self.nodes.append(HostOp("aten::size.int", (subject, Constant(0)), (value,), source_of(node)))
                self.bind(node.output(), value)
        else:
            self.visit_op(node)

    def visit_sync(self, node: torch._C.Node, entries: list, source: str) -> None:
        tensor = entries[0]
        output = node.output()
        if isinstance(tensor, Constant):
            self.bind(output, Constant(python_scalar(tensor.value, node.kind())))
            return
        kind = SYNC_OPS[node.kind()]
        if kind is None:
            kind = "float" if torch_dtype(tensor.type.dtype).is_floating_point else "int"
            if tensor.type.dtype == "bool":
                kind = "bool"
        hint = {"bool": True, "int": 1, "float": 1.0}[kind]
        if kind == "int":
            hint = self.observed_int(output) or hint
        value = self.new_value(ScalarType(kind, hint), value_name(output))
        target = {"bool": "aten::Bool.Tensor", "int": "aten::Int.Tensor", "float": "aten::Float.Tensor"}[kind]
        self.nodes.append(HostOp(target, (tensor,), (value,), source))
        self.bind(output, value)

    def visit_host_op(self, node: torch._C.Node, overload: Any, entries: list, source: str) -> None:
        kind = node.kind()
        if kind not in LIST_MUTATORS:
            # A read of a host list whose items are known folds (nn.MultiheadAttention's fast-path
            # test: `all([_check_arg_device(x) for x in tensor_args])`, unrolled by TorchScript).
            known = self.known_lists
            entries = [Constant(list(known[e])) if isinstance(e, Value) and e in known else e for e in entries]
        if kind == "aten::list" and len(entries) == 1:
            # `list(hx.size())` (nn.RNN's state check) copies a list. The Program's lists are values
            # (an append makes a new one), so the copy is the same entry; a constant one is copied
            # here, since the generic `aten::list.t` cannot be called from Python ("toIValue()
            # cannot handle converting to type: t").
            entry = entries[0]
            self.bind(node.output(), Constant(list(entry.value)) if isinstance(entry, Constant) else entry)
            return
        if all(isinstance(e, Constant) for e in entries) or kind in ("aten::format", "aten::str"):
            if kind == "aten::str" and not all(isinstance(e, Constant) for e in entries):
                # `str(tokens)`: a string the Program cannot carry; refused where it is used.
                # The text of one list of ints can key a dict (`run_time_dicts`).
                ints = entries[0] if len(entries) == 1 and is_int_list(entries[0]) else None
                self.bind(node.output(), RuntimeText(source, ints))
                return
            if not all(isinstance(e, Constant) for e in entries):
                # Only error messages are formatted from run-time values (or from tuples, as
                # nn.RNN's state-size check does); keep the template.
                self.bind(node.output(), Constant(str(entries[0].value)))
                return
            self.bind_constants(node, fold_scalar(kind, overload, [e.value for e in entries], source))
            return
        if kind in ("aten::eq", "aten::ne") and len(entries) == 2:
            left, right = (_int_items(entry) for entry in entries)
            if left is not None and right is not None:
                return self.visit_int_list_comparison(node, kind, left, right, source)
        if kind == "aten::__range_length":
            return self.visit_range_length(node, entries, source)
        if kind == "aten::__derive_index":
            # index -> start + index * step, with ops that IREE legalizes (it cannot lower __derive_index).
            index, start, step = entries
            scaled = self.emit_host("aten::mul.int", (index, step), "int", source)
            self.bind(node.output(), self.emit_host("aten::add.int", (start, scaled), "int", source))
            return
        scalar = entries[0] if len(entries) == 1 and isinstance(entries[0], Value) else None
        scalar = scalar if scalar is not None and isinstance(scalar.type, ScalarType) else None
        if scalar is not None and kind in _SCALAR_CONVERSIONS and _SCALAR_CONVERSIONS[kind] == scalar.type.kind:
            # int(i) of an int (`int(tok.item())`), float(f) of a float: the value itself.
            self.bind(node.output(), entries[0])
            return
        if scalar_ops.lookup(kind) is None:
            raise UnsupportedOpError(kind, source, detail="host operation on run-time values")
        target = kind + ("." + overload._overloadname if overload is not None else "")
        hints = [hint_of(e) for e in entries]
        try:
            hint = scalar_ops.lookup(kind).function(*hints)
        except Exception:
            hint = None
        output = node.output()
        type_ = type_from_ts(output.type(), hint, source)
        value = self.new_value(type_, value_name(output))
        self.nodes.append(HostOp(target, tuple(entries), (value,), source))
        self.bind(output, value)

    def visit_int_list_comparison(self, node: torch._C.Node, kind: str, left: tuple, right: tuple, source: str) -> None:
        """`a == b` / `a != b` on lists of ints (shape checks such as nn.RNN's `hx.size() != expected`),
        element by element: no list on the host (the compiled host has none to compare), and items
        that are the same value or equal constants fold away."""
        equal = kind == "aten::eq"
        if len(left) != len(right):
            self.bind(node.output(), Constant(not equal))
            return
        element, combine = ("aten::eq.int", "aten::__and__.bool") if equal else ("aten::ne.int", "aten::__or__.bool")
        result: Any = Constant(equal)
        for a, b in zip(left, right):
            if a is b or same_constant(a, b):
                continue
            item = self.emit_host(element, (a, b), "bool", source)
            result = item if isinstance(result, Constant) else self.emit_host(combine, (result, item), "bool", source)
            if isinstance(result, Constant) and result.value != equal:
                break  # one element decides
        self.bind(node.output(), result)

    def emit_host(self, target: str, args: tuple, kind: str, source: str) -> Any:
        if all(isinstance(a, Constant) for a in args):
            return Constant(scalar_ops.lookup(target).function(*(a.value for a in args)))
        try:
            hint = scalar_ops.lookup(target).function(*(hint_of(a) for a in args))
        except Exception:
            hint = 1
        value = self.new_value(ScalarType(kind, hint), "")
        self.nodes.append(HostOp(target, args, (value,), source))
        return value

    def visit_range_length(self, node: torch._C.Node, entries: list, source: str) -> None:
        low, high, step = entries
        if not (isinstance(step, Constant) and step.value > 0):
            raise UnsupportedOpError("range() with a run-time or negative step", source)
        # max(0, ceil((high - low) / step)) as (high - low + step - 1) // step, clamped at 0.
        span = self.emit_host("aten::sub.int", (high, low), "int", source)
        span = self.emit_host("aten::add.int", (span, Constant(step.value - 1)), "int", source)
        count = self.emit_host("aten::floordiv.int", (span, step), "int", source)
        self.bind(node.output(), self.emit_host("prim::max.int", (count, Constant(0)), "int", source))

    def visit_tensor_query(
        self, node: torch._C.Node, overload: Any, args: list, kwargs: list, target: str, source: str
    ) -> None:
        """An op that reads a tensor's metadata into a scalar (`numel`, `is_contiguous`, ...).

        The answer is known at export time when it does not depend on a dynamic dim.
        """
        values_in = [e for e in walk_args(args + [a for _, a in kwargs]) if isinstance(e, Value)]
        if target == "aten::numel.default" and isinstance(args[0], Value):
            self.bind(node.output(), self.numel_of(args[0], source))
            return
        if any(is_dynamic(v) for v in values_in):
            raise UnsupportedOpError(target, source, detail="reads a dynamic dim into a scalar; use x.size(d)")
        self.bind_constants(node, call_overload(overload, args, kwargs, lambda a: self.meta(a), source, target))


def without_unread_known_lists(block: Block, known: dict) -> Block:
    """`block` without the host ops that build a list of known items (`known_lists`) that nothing
    reads: where every read of such a list folded (nn.MultiheadAttention's fast-path test), its
    construction is left over, and a list of bools has no form in the compiled host."""
    if not known:
        return block
    removed = [0]

    def prune(inner: Block, read: set) -> Block:
        nodes = []
        for node in inner.nodes:
            if isinstance(node, HostOp) and node.outputs and all(v in known and v not in read for v in node.outputs):
                removed[0] += 1
                continue
            nodes.append(map_sub_blocks(node, lambda b: prune(b, read)))
        return dataclasses.replace(inner, nodes=tuple(nodes))

    while True:  # a list an append reads goes once the append has gone
        before = removed[0]
        block = prune(block, _values_read(block))
        if removed[0] == before:
            return block


def _values_read(block: Block) -> set[Value]:
    read = {v for r in block.results for v in arg_values(r)}
    for node in iter_nodes(block):
        read.update(node_inputs(node))
        for inner in sub_blocks(node):
            read.update(v for r in inner.results for v in arg_values(r))
    return read
