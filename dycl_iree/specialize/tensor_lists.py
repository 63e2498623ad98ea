"""Specialize's lists of tensors whose length is known only at run time (`TensorList`s).

A list of tensors that grows in a loop, or whose length differs between the sides of a branch, is
carried as one tensor: its items stacked on dim 0. Appends become a `cat`, `xs[i]` a `select`,
`torch.stack(xs)` / `torch.cat(xs)` a view of the stacked tensor.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import SpecializeError, UnsupportedOpError
from ..guards import CHECK_INDEX
from ..program import Constant, HostOp, ListArg, ScalarType, TensorOp, TensorType, Value
from .list_deletion import is_scalar, scalar_list_kind
from .ragged_ints import is_int_list
from .ragged_lists import EMPTY_LIST_ERRORS
from .schemas import overload_of, source_of, torch_dtype
from .structured import RecordEntry, unset_like
from .values import (
    INT64_MAX,
    RaggedList,
    TensorList,
    TupleEntry,
    append_to_list,
    element_type,
    holds_only_tensors,
    is_unset_list,
    list_item,
    literal_list,
    tensor_type_of,
    value_name,
)


class TensorLists:
    """Lists of tensors of run-time length (a mixin of the specializer)."""

    def reconcile(self, a: Any, b: Any, nodes_a: list, nodes_b: list, source: str) -> tuple[Any, Any]:
        """Make two paths' entries for one value agree in structure: lists of tensors whose lengths
        differ become TensorLists on both paths (stacked at the end of each path's nodes)."""
        if is_unset_list(a) or is_unset_list(b):
            # A path that leaves the list unset never reads it: it takes the other path's structure.
            return (unset_like(b), b) if is_unset_list(a) else (a, unset_like(a))
        if isinstance(a, TupleEntry) and isinstance(b, TupleEntry) and len(a.items) == len(b.items):
            pairs = [self.reconcile(x, y, nodes_a, nodes_b, source) for x, y in zip(a.items, b.items)]
            return TupleEntry(tuple(x for x, _ in pairs)), TupleEntry(tuple(y for _, y in pairs))
        if isinstance(a, ListArg) or isinstance(b, ListArg):
            # A list folded into a constant meets the other path's literal list item by item
            # (`counts[t] += 1` on one side of a branch, over `[0] * 2` of a static batch).
            a, b = literal_list(a), literal_list(b)
        kind = scalar_list_kind(a)
        literals = [e for e in (a, b) if isinstance(e, ListArg)]
        if kind is not None and kind == scalar_list_kind(b) and literals:
            if len(literals) == 1 or len(a.items) != len(b.items):
                # A literal list of scalars (one with an item written: `counts[t] += 1` over `[0] *
                # 2`) against a host list, or one of another length, on the other path: a host list
                # on both.
                return self.host_list(a, kind, nodes_a, source), self.host_list(b, kind, nodes_b, source)
        if not (isinstance(a, _LISTS) and isinstance(b, _LISTS)):
            return a, b
        if isinstance(a, ListArg) and isinstance(b, ListArg) and len(a.items) == len(b.items):
            pairs = [self.reconcile(x, y, nodes_a, nodes_b, source) for x, y in zip(a.items, b.items)]
            return ListArg(tuple(x for x, _ in pairs)), ListArg(tuple(y for _, y in pairs))
        if not (holds_only_tensors(a) and holds_only_tensors(b)):
            raise SpecializeError(
                f"a list whose length depends on the path holds something other than tensors ({source}): "
                "only lists of tensors, ints, floats or bools can change length at run time"
            )
        types = [self.list_element_type(entry) for entry in (a, b)]
        known = [t for entry_types in types for t in entry_types]
        if not known:
            raise SpecializeError(f"a list of tensors that stays empty on every path changes structure ({source})")
        dim = self.list_layout([a, b], source)
        element = element_type(known, source) if dim is None else self.ragged_element([a, b], dim, source)
        with self.emitting_into(nodes_a):
            a = self.tensor_list(a, element, source) if dim is None else self.ragged_list(a, dim, element, source)
        with self.emitting_into(nodes_b):
            b = self.tensor_list(b, element, source) if dim is None else self.ragged_list(b, dim, element, source)
        if isinstance(a, RaggedList) and isinstance(b, RaggedList) and a.first_sizes != b.first_sizes:
            # One path's list may be in the empty form that its first append sizes: both are
            # appended to as such (`ragged_lists.first_sized_join`).
            a, b = (RaggedList(entry.value, entry.sizes, entry.dim, True) for entry in (a, b))
        return a, b

    @staticmethod
    def list_element_type(entry: Any) -> list[TensorType]:
        if isinstance(entry, RaggedList):
            type_ = entry.value.type
            shape = tuple(None if d == entry.dim else s for d, s in enumerate(type_.shape))
            return [TensorType(type_.dtype, shape, type_.hint)]
        if isinstance(entry, TensorList):
            type_ = entry.value.type
            return [TensorType(type_.dtype, type_.shape[1:], type_.hint[1:])]
        return [tensor_type_of(item) for item in entry.items]

    def tensor_list(self, entry: Any, element: TensorType | None, source: str) -> TensorList:
        """`entry` as a TensorList: its tensors stacked on dim 0 (in `self.nodes`)."""
        if isinstance(entry, TensorList):
            return entry
        items = [self.materialize(item, source) for item in entry.items]
        types = [tensor_type_of(item) for item in items] + ([element] if element is not None else [])
        if not types:
            raise SpecializeError(f"an empty list of tensors whose element type is unknown ({source})")
        element = element_type(types, source)
        if not items:
            if any(d is None for d in element.shape):
                return TensorList(self.empty_stacked(element, source))
            empty = torch.zeros((0, *element.shape), dtype=torch_dtype(element.dtype))
            return TensorList(self.materialize(Constant(empty), source))
        stack = overload_of("aten::stack.default")
        (stacked,) = self.emit_tensor_op(stack, [ListArg(tuple(items)), Constant(0)], [], source, name="stacked")
        return TensorList(stacked)

    def append_to_tensor_list(self, items: TensorList, item: Any, source: str) -> Any:
        item = self.materialize(item, source)
        type_ = tensor_type_of(item)
        if type_ is None:
            raise SpecializeError(f"appending a non-tensor to a list of tensors ({source})")
        dim = self.list_layout([items, ListArg((item,))], source)
        if dim is not None:
            # A tensor of another size than the list's: the list is concatenated from now on.
            element = self.ragged_element([items, ListArg((item,))], dim, source)
            return self.append_to_ragged(self.ragged_list(items, dim, element, source), item, source)
        element_type([self.list_element_type(items)[0], type_], source)  # refuses tensors that differ
        unsqueeze, cat = overload_of("aten::unsqueeze.default"), overload_of("aten::cat.default")
        (row,) = self.emit_tensor_op(unsqueeze, [item, Constant(0)], [], source, name="row")
        self.check_same_sizes(items.value, row, source)
        (grown,) = self.emit_tensor_op(cat, [ListArg((items.value, row)), Constant(0)], [], source, name="stacked")
        return TensorList(grown)

    def empty_stacked(self, element: TensorType, source: str) -> Value:
        """The stacked form of an empty list whose tensors will have a dynamic dim
        (`alignments: List[Tensor] = []` in Tacotron2's decode loop, whose tensors are as wide as
        the encoder's steps): [0, *sizes], each dynamic size read from a tensor of the same shape
        that the loop starts from (`size_witnesses`). Every append checks that its tensor has
        those sizes (`check_same_sizes`), so a wrong witness is an error, never a wrong result.

        The sizes cannot be 0 until the first append either: IREE 3.13 runs a loop that carries a
        tensor with no rows and a dynamic dim wrongly (OUT_OF_RANGE, or rows of garbage)."""
        witness = self.size_witness(element)
        if witness is None:
            # `list_layout` keeps such a list concatenated along its one dynamic dim instead, and
            # refuses one with several.
            raise SpecializeError(f"internal: an empty stacked list of tensors with no size witness ({source})")
        sizes = [Constant(0)] + [self.size_of(witness, dim, source) for dim in range(element.rank)]
        zeros = overload_of("aten::zeros.default")
        options = [("dtype", Constant(torch_dtype(element.dtype)))]
        (empty,) = self.emit_tensor_op(zeros, [ListArg(tuple(sizes))], options, source, name="stacked")
        return empty

    def size_witness(self, element: TensorType, skip: int | None = None) -> Value | None:
        """A tensor the loop starts from with the shape of `element`, static and dynamic dims alike,
        but for dim `skip` (`empty_stacked` reads the dynamic sizes of an empty list's tensors from
        it, `ragged_list` those but of the dim a list is concatenated along), or None. For the
        latter, where no loop starts (a list that an `if` leaves empty), the model's inputs too."""
        witnesses = [*self.size_witnesses, *(getattr(self, "input_witnesses", ()) if skip is not None else ())]
        for witness in witnesses:
            type_ = tensor_type_of(witness)
            if (
                isinstance(witness, Value)
                and type_ is not None
                and type_.rank == element.rank
                and all(
                    (a is None) == (b is None) and a == b
                    for d, (a, b) in enumerate(zip(type_.shape, element.shape))
                    if d != skip
                )
            ):
                return witness
        return None

    def check_same_sizes(self, stacked: Value, row: Value, source: str) -> None:
        """A host check (shape reads, no device sync) that `row` has the stacked tensors' sizes in
        its dynamic dims, as stacking them at the end needs."""
        for dim in range(1, row.type.rank):
            if row.type.shape[dim] is None or stacked.type.shape[dim] is None:
                want, have = self.size_of(stacked, dim, source), self.size_of(row, dim, source)
                message = Constant(
                    f"RuntimeError: the tensors of a list that grows at run time must have the same sizes; a tensor "
                    f"of another size in dim {dim - 1} was appended ({source})"
                )
                upper = self.emit_host("aten::add.int", (want, Constant(1)), "int", source)
                self.nodes.append(HostOp(CHECK_INDEX, (have, want, upper, message), (), source))

    def list_length(self, items: TensorList, source: str) -> Any:
        length = items.value.type.shape[0]
        if length is not None:
            return Constant(length)
        value = self.new_value(ScalarType("int", items.value.type.hint[0]), "len")
        self.nodes.append(HostOp("aten::size.int", (items.value, Constant(0)), (value,), source))
        return value

    def repeated_scalar_list(self, entries: list, source: str) -> Value | None:
        """`[v] * n` (or `n * [v]`) of ints or floats, `n` known only at run time (`[0] * batch`): a
        host list, empty where n <= 0 as in Python; None for another product."""
        counts = [e for e in entries if isinstance(e, Value) and is_scalar(e, "int")]
        lists = [(e, scalar_list_kind(e)) for e in entries if e not in counts]
        if len(counts) != 1 or len(lists) != 1 or lists[0][1] is None:
            return None
        (items, element), (count,) = lists[0], counts
        items = self.host_list(literal_list(items), element, self.nodes, source)
        return self.emit_list("aten::mul.left_t", (items, count), source, element=element)

    def visit_structural_list_op(self, node: torch._C.Node, entries: list, source: str) -> None:
        """List arithmetic on lists of tensors (`[x] + [y] * k`, slices) and `stack`/`cat` of a TensorList."""
        kind = node.kind()
        if kind in ("aten::stack", "aten::cat") and isinstance(entries[0], RaggedList):
            self.bind(node.output(), self.ragged_concatenation(kind, entries[0], entries, source))
            return
        if kind == "aten::slice" and isinstance(entries[0], (TensorList, RaggedList)):
            bounds = [entries[i] if i < len(entries) else Constant(None) for i in (1, 2, 3)]
            self.bind(node.output(), self.slice_run_time_list(entries[0], *bounds, source))
            return
        if kind in ("aten::stack", "aten::cat") and isinstance(entries[0], TensorList):
            stacked = entries[0].value
            length = self.list_length(entries[0], source)
            if not isinstance(length, Constant):
                # PyTorch refuses an empty list here; the stacked form would give an empty tensor.
                message = EMPTY_LIST_ERRORS[kind]
                check = (length, Constant(1), Constant(INT64_MAX), Constant(f"{message} ({source})"))
                self.nodes.append(HostOp(CHECK_INDEX, check, (), source))
            self.bind(node.output(), self.stacked_concatenation(kind, stacked, entries, source))
            return
        if kind == "aten::add" and any(isinstance(e, (TensorList, RaggedList)) for e in entries):
            with self.laying_out(node.output()):
                dim = self.list_layout(entries, source)
            if dim is not None:
                # Tensors of different sizes: both concatenated along `dim`, then joined.
                element = self.ragged_element(entries, dim, source)
                left, right = (self.ragged_list(e, dim, element, source) for e in entries)
                self.bind(node.output(), self.join_ragged(left, right, source))
                return
            # xs + [x] (or [x] + xs) with xs of run-time length: both stacked, then one cat.
            element = self.list_element_type(next(e for e in entries if isinstance(e, TensorList)))[0]
            left, right = (self.tensor_list(e, element, source) for e in entries)
            cat = overload_of("aten::cat.default")
            (joined,) = self.emit_tensor_op(cat, [ListArg((left.value, right.value)), Constant(0)], [], source)
            self.bind(node.output(), TensorList(joined))
            return
        if kind == "aten::add" and any(isinstance(e, Value) for e in entries) and all(map(is_int_list, entries)):
            # `tokens + [token]` with `tokens` a host list of run-time length: one host list.
            left, right = (self.int_list_value(e, source) for e in entries)
            self.bind(node.output(), self.emit_list("aten::add.t", (left, right), source, value_name(node.output())))
            return
        if kind == "aten::mul" and not any(isinstance(e, (TensorList, RaggedList)) for e in entries):
            repeated = self.repeated_scalar_list(entries, source)
            if repeated is not None:
                self.bind(node.output(), repeated)
                return
        if any(isinstance(e, (TensorList, RaggedList)) for e in entries) or not all(
            isinstance(e, (ListArg, Constant)) for e in entries
        ):
            raise UnsupportedOpError(kind, source, detail="on a list of tensors whose length is known only at run time")
        lists = [e if isinstance(e, ListArg) else e.value for e in entries]
        # A constant list's items as constants: `[n * c // g, g] + list(x.size()[2:])` (group_norm's
        # batch check) adds a list holding run-time sizes to one that may be all constants.
        items = [
            e.items if isinstance(e, ListArg) else tuple(map(Constant, e.value)) if isinstance(e.value, list) else None
            for e in entries
        ]
        if kind == "aten::add":
            result = items[0] + items[1]
        elif kind == "aten::mul":
            count, listed = (lists[1], items[0]) if items[0] is not None else (lists[0], items[1])
            result = listed * count
        elif kind == "aten::slice":
            bounds = [lists[i] if i < len(lists) else None for i in (1, 2, 3)]
            result = items[0][slice(*bounds)]
        else:
            raise UnsupportedOpError(kind, source, detail="on a list of tensors")
        self.bind(node.output(), ListArg(tuple(result)))

    def stacked_concatenation(self, kind: str, stacked: Value, entries: list, source: str) -> Value:
        """`torch.stack(xs, dim)` / `torch.cat(xs, dim)` of tensors stacked on dim 0 in `stacked`:
        the stack's dim moved to `dim` (and, for `cat`, flattened into the dim after it)."""
        rank = stacked.type.rank - (1 if kind == "aten::cat" else 0)
        dim = entries[1].value if len(entries) > 1 and isinstance(entries[1], Constant) else 0
        if not isinstance(dim, int):
            raise UnsupportedOpError(kind, source, detail="a run-time dim for a list of run-time length")
        if rank > 0 and not -rank <= dim < rank:
            raise UnsupportedOpError(kind, source, detail=f"dim {dim} out of range for a result of rank {rank}")
        dim %= max(rank, 1)
        result = stacked
        if dim != 0:
            movedim = overload_of("aten::movedim.int")
            (result,) = self.emit_tensor_op(movedim, [result, Constant(0), Constant(dim)], [], source)
        if kind == "aten::cat":
            flatten = overload_of("aten::flatten.using_ints")
            (result,) = self.emit_tensor_op(flatten, [result, Constant(dim), Constant(dim + 1)], [], source)
        return result

    def slice_run_time_list(self, items: Any, start: Any, end: Any, step: Any, source: str) -> Any:
        """`xs[a:b:k]` of a list of run-time length (Emformer's `mems[1:]`)."""
        if isinstance(items, RaggedList):
            return self.ragged_slice(items, start, end, step, source)
        step = Constant(1) if isinstance(step, Constant) and step.value is None else step
        if not (isinstance(step, Constant) and step.value > 0):
            raise UnsupportedOpError(
                "aten::slice", source, detail="a negative or run-time step on a list of run-time length"
            )
        slice_ = overload_of("aten::slice.Tensor")
        (kept,) = self.emit_tensor_op(slice_, [items.value, Constant(0), start, end, step], [], source, name="stacked")
        return TensorList(kept)

    def visit_append(self, node: torch._C.Node, entries: list, source: str) -> None:
        """`xs.append(x)`: a list of tensors (or of lists) appended in straight-line code stays one
        value per item, a TensorList or RaggedList grows by a `cat`, a host list by a host op
        (`values.append_to_list`). SSA: the list's TorchScript value now means the grown list."""
        items, item = entries
        with self.laying_out(node.inputsAt(0), appended=node.output()):
            grown = append_to_list(self, items, item, source, value_name(node.inputsAt(0)))
        self.bind(node.inputsAt(0), grown)
        self.bind(node.output(), grown)

    def visit_getitem(self, node: torch._C.Node) -> None:
        subject, index = (self.entry(v) for v in node.inputs())
        source = source_of(node)
        if isinstance(subject, RecordEntry):
            self.dict_getitem(node, subject, index)
        elif isinstance(subject, ListArg) and isinstance(index, Constant):
            if not -len(subject.items) <= index.value < len(subject.items):
                raise SpecializeError(
                    f"list index {index.value} out of range for a list of {len(subject.items)} ({source})"
                )
            self.bind(node.output(), subject.items[index.value])
        elif holds_only_tensors(subject):
            # A list of tensors indexed at run time (a fixed-length one of tensors of different
            # sizes is read as a RaggedList).
            self.bind(node.output(), list_item(self, subject, index, source))
        else:
            self.visit_op(node)

    def tensor_list_item(self, stacked: TensorList, index: Any, source: str) -> Value:
        """`xs[i]` of a TensorList: a `select` of the stacked tensor, after PyTorch's index check."""
        self.check_list_index(self.list_length(stacked, source), index, source)
        index = self.index_for_example(self.list_length(stacked, source), index, source)
        if isinstance(index, Constant) and index.value < 0:
            length = self.list_length(stacked, source)
            index = self.emit_host("aten::add.int", (length, index), "int", source)
        # Typed here, not by a meta run: a list that the example leaves empty (a dict's values before
        # its first set) has no row a meta `select` could read.
        type_ = stacked.value.type
        item = self.new_value(TensorType(type_.dtype, type_.shape[1:], type_.hint[1:]), "item")
        self.nodes.append(TensorOp("aten::select.int", (stacked.value, Constant(0), index), (), (item,), source))
        return item


_LISTS = (ListArg, TensorList, RaggedList)

# List ops that act on the structure of a list of tensors (or on a TensorList), not on run-time scalars.
STRUCTURAL_LIST_OPS = {"aten::add", "aten::mul", "aten::slice"}

