"""Specialize's `del xs[i]`, `xs.pop(i)` and `xs[i] = v` on lists, the index known at export or only at run time.

A beam search drops a hypothesis it merges into another (torchaudio's `_remove_hypo`:
`del hypo_list[i]`). The Program's lists are values, so a deletion makes a new list that the name
then means, as an append does:

- a fixed-length list with a constant index: the list without that item;
- a list of tensors of run-time length (stacked): the rows before i and after it, concatenated;
- a host list: `xs[:i] + xs[i + 1:]`;
- a list of tuples of run-time length: each element's list without item i.

`xs.pop(i)` (`i` -1 where not given: a window of the last states, `history.pop(0)`, or a queue)
is `xs[i]`, then `del xs[i]`; an empty list raises PyTorch's "pop from empty list" first.

`xs[i] = v` (a layer's state replaced in a list of states, a per-row count, a slot of a buffer of
steps) makes the list with item i replaced, after the same index check:

- a fixed-length list with a constant index: that item is `v`;
- a fixed-length list of tensors of one shape at a run-time index: stacked, item i scattered in
  (`select_scatter`), and read back item by item, so the list keeps its length and form;
- a list of tensors of run-time length (stacked): item i scattered in, `v` checked to have the
  list's sizes as an append is;
- a host list of ints or floats (a fixed-length one is made one): `xs[:i] + [v] + xs[i + 1:]`;
- a list of tuples of run-time length: each element's list at item i;
- a list of tensors of different sizes in one dim (concatenated along it): the tensors before i,
  `v`, and those after it, joined (`v`'s other sizes checked as an append's are).

PyTorch's IndexError past either end is checked first. A list of tensors of different sizes
(concatenated) loses the tensors of item i (a slice before it joined with one after it). A list
of lists of ints (`RaggedInts`) loses the ints of
list i, and the bounds after it move back by its length. Host lists of
floats (a beam's scores) lose an item on the Python host, which carries them.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import SpecializeError
from ..guards import CHECK_INDEX
from ..program import Constant, HostOp, ListArg, ListType, ScalarType, Value
from .schemas import overload_of
from .values import (
    RaggedInts,
    RaggedList,
    TensorList,
    TupleEntry,
    TupleList,
    describe_entry,
    element_type,
    list_item,
    literal_list,
    tensor_type_of,
    tuple_items,
)

# The host op that adds one int to every int of a list (`host_runtime.scalar_ops`).
ADD_TO_INTS = "dycl::add_to_ints"


class ListDeletion:
    """`del xs[i]` (a mixin of the specializer)."""

    def visit_delete(self, node: torch._C.Node, entries: list, source: str) -> None:
        items, index = entries
        self.bind(node.inputsAt(0), self.without_item(literal_list(items), index, source))

    def visit_pop(self, node: torch._C.Node, entries: list, source: str) -> None:
        """`xs.pop(i)`: item i, and the list without it."""
        items, index = literal_list(entries[0]), entries[1] if len(entries) > 1 else Constant(-1)
        if not (isinstance(items, ListArg) and isinstance(index, Constant)):
            items = self.as_run_time_list(items, source)
            length = self.length_of_list(items, source)
            if length is not None:
                message = Constant(f"RuntimeError: pop from empty list ({source})")
                self.nodes.append(HostOp(CHECK_INDEX, (Constant(0), Constant(0), length, message), (), source))
        elif not items.items:
            raise SpecializeError(f"pop from empty list ({source})")
        rest = self.without_item(items, index, source)  # checks the index first
        if isinstance(items, ListArg) and isinstance(index, Constant):
            self.bind(node.output(), items.items[index.value])
        else:
            self.bind(node.output(), list_item(self, items, index, source))
        self.bind(node.inputsAt(0), rest)

    def visit_set_list_item(self, node: torch._C.Node, entries: list, source: str) -> None:
        """`xs[i] = v`: the list with item i replaced; the list's name means it from now on."""
        items, index, item = entries
        self.bind(node.inputsAt(0), self.with_item(literal_list(items), index, item, source))

    def with_item(self, items: Any, index: Any, item: Any, source: str) -> Any:
        if isinstance(items, ListArg) and isinstance(index, Constant):
            if not -len(items.items) <= index.value < len(items.items):
                raise SpecializeError(
                    f"list index {index.value} out of range for a list of {len(items.items)} ({source})"
                )
            replaced = list(items.items)
            replaced[index.value] = item
            return ListArg(tuple(replaced))
        if isinstance(items, ListArg) and items.items and all(tensor_type_of(entry) for entry in items.items):
            # Stacked for the write and read back item by item: the list keeps its fixed length.
            stacked = self.with_item(self.tensor_list(items, None, source), index, item, source)
            select = overload_of("aten::select.int")
            rows = [self.emit_tensor_op(select, [stacked.value, Constant(0), Constant(k)], [], source, name="item")[0]
                    for k in range(len(items.items))]  # fmt: skip
            return ListArg(tuple(rows))
        element = scalar_list_kind(items) if isinstance(items, ListArg) else None
        if element is not None:
            items = self.host_list(items, element, self.nodes, source)
        items = self.as_run_time_list(items, source)
        length = self.length_of_list(items, source)
        if length is None or isinstance(items, RaggedInts):
            raise SpecializeError(
                f"`xs[i] = v` on {describe_entry(items)} ({source}): a fixed-length list, a list of tensors, a "
                "host list of ints or floats and a list of tuples of those can have an item replaced"
            )
        self.check_list_index(length, index, source)
        return self.with_checked(items, self.index_from_front(length, index, source), item, source)

    def with_checked(self, items: Any, index: Any, item: Any, source: str) -> Any:
        """`items` with item `index` (checked, from the front) replaced by `item`."""
        if isinstance(items, TupleList):
            fields = tuple_items(item)
            if fields is None or len(fields) != len(items.fields):
                raise SpecializeError(
                    f"`xs[i] = v` of {describe_entry(item)} in a list of tuples of {len(items.fields)} ({source})"
                )
            return TupleList(
                tuple(self.with_checked(f, index, v, source) for f, v in zip(items.fields, fields)), items.lists
            )
        if isinstance(items, TensorList):
            item = self.materialize(item, source)
            type_ = tensor_type_of(item)
            if type_ is None:
                raise SpecializeError(f"`xs[i] = v` of a non-tensor in a list of tensors ({source})")
            element_type([self.list_element_type(items)[0], type_], source)  # refuses tensors that differ
            unsqueeze, scatter = overload_of("aten::unsqueeze.default"), overload_of("aten::select_scatter.default")
            (row,) = self.emit_tensor_op(unsqueeze, [item, Constant(0)], [], source, name="row")
            self.check_same_sizes(items.value, row, source)
            args = [items.value, item, Constant(0), index]
            (written,) = self.emit_tensor_op(scatter, args, [], source, name="stacked")
            return TensorList(written)
        if isinstance(items, RaggedList):
            before, after = self.ragged_apart(items, index, source)
            return self.join_ragged(self.append_to_ragged(before, item, source), after, source)
        if isinstance(items, Value) and isinstance(items.type, ListType):
            kind = items.type.element
            after = self.emit_host("aten::add.int", (index, Constant(1)), "int", source)
            length = self.host_length(items, source)
            before = self.emit_list("aten::slice.t", (items, Constant(0), index, Constant(1)), source, element=kind)
            rest = self.emit_list("aten::slice.t", (items, after, length, Constant(1)), source, element=kind)
            single = self.emit_list("prim::ListConstruct", (item,), source, element=kind)
            joined = self.emit_list("aten::add.t", (before, single), source, element=kind)
            return self.emit_list("aten::add.t", (joined, rest), source, element=kind)
        raise SpecializeError(
            f"`xs[i] = v` on a list of tuples whose elements include {describe_entry(items)} ({source}): "
            "lists of tensors of one shape and of ints or floats can have an item replaced"
        )

    def length_of_list(self, items: Any, source: str) -> Any:
        """The length of a list `without_item` takes (None for another entry, which it refuses)."""
        if isinstance(items, TupleList):
            return self.tuple_list_length(items, source)
        if isinstance(items, TensorList):
            return self.list_length(items, source)
        if isinstance(items, Value) and isinstance(items.type, ListType):
            return self.host_length(items, source)
        if isinstance(items, RaggedInts):
            return self.ragged_ints_length(items, source)
        if isinstance(items, RaggedList):
            return self.ragged_length(items, source)
        return None

    def as_run_time_list(self, items: Any, source: str) -> Any:
        """A fixed-length list of tuples or of tensors as the list of run-time length it reads as at
        a run-time index (a TupleList, a TensorList); another entry as it is."""
        if isinstance(items, ListArg) and items.items and all(_is_tuple(item) for item in items.items):
            return self.tuple_list(items, source)
        if isinstance(items, ListArg) and items.items and all(tensor_type_of(item) for item in items.items):
            return self.tensor_list(items, None, source)
        return items

    def without_item(self, items: Any, index: Any, source: str) -> Any:
        if isinstance(items, ListArg) and isinstance(index, Constant):
            if not -len(items.items) <= index.value < len(items.items):
                raise SpecializeError(
                    f"list index {index.value} out of range for a list of {len(items.items)} ({source})"
                )
            kept = list(items.items)
            del kept[index.value]
            return ListArg(tuple(kept))
        items = self.as_run_time_list(items, source)
        if isinstance(items, (RaggedInts, RaggedList)):
            length = self.length_of_list(items, source)
            self.check_list_index(length, index, source)
            return self.without_checked(items, self.index_from_front(length, index, source), source)
        if isinstance(items, TupleList):
            length = self.tuple_list_length(items, source)
            self.check_list_index(length, index, source)
            index = self.index_from_front(length, index, source)
            return TupleList(tuple(self.without_checked(field, index, source) for field in items.fields), items.lists)
        if isinstance(items, (TensorList, Value)):
            length = (
                self.list_length(items, source) if isinstance(items, TensorList) else self.host_length(items, source)
            )
            self.check_list_index(length, index, source)
            return self.without_checked(items, self.index_from_front(length, index, source), source)
        raise SpecializeError(
            f"`del xs[i]` or `xs.pop(i)` on {describe_entry(items)} ({source}): a fixed-length list, a list of "
            "tensors of one shape, a host list of scalars and a list of tuples of those can lose an item"
        )

    def host_length(self, items: Value, source: str) -> Any:
        return self.emit_host("aten::len.t", (items,), "int", source)

    def index_from_front(self, length: Any, index: Any, source: str) -> Any:
        """A checked index (-len <= i < len) as the index from the front."""
        if isinstance(index, Constant) and index.value >= 0:
            return index
        return self.emit_host("aten::remainder.int", (index, length), "int", source)

    def ragged_apart(self, items: RaggedList, index: Any, source: str) -> tuple[RaggedList, RaggedList]:
        """The tensors of `items` before item `index` (checked, from the front), and those after it."""
        after = self.emit_host("aten::add.int", (index, Constant(1)), "int", source)
        before = self.ragged_slice(items, Constant(0), index, Constant(1), source)
        return before, self.ragged_slice(items, after, Constant(None), Constant(1), source)

    def without_checked(self, items: Any, index: Any, source: str) -> Any:
        """`items` without item `index` (checked, from the front)."""
        if isinstance(items, RaggedList):
            return self.join_ragged(*self.ragged_apart(items, index, source), source)
        after = self.emit_host("aten::add.int", (index, Constant(1)), "int", source)
        if isinstance(items, TupleList):
            return TupleList(tuple(self.without_checked(field, index, source) for field in items.fields), items.lists)
        if isinstance(items, TensorList):
            # The rows kept, gathered: row k of the result is row k + (k >= i). (Slices at run-time
            # bounds, `xs[:i]` and `xs[i + 1:]` concatenated, read back wrong from their segment.)
            stacked, length = items.value, self.list_length(items, source)
            count = self.emit_host("aten::sub.int", (length, Constant(1)), "int", source)
            # The index check before made the length at least 1; a list that the example leaves
            # empty has the example count -1, for which a meta `arange` cannot type its rows.
            count = self.emit_host("prim::max.int", (count, Constant(0)), "int", source)
            arange, ge = overload_of("aten::arange.default"), overload_of("aten::ge.Scalar")
            add, gather = overload_of("aten::add.Tensor"), overload_of("aten::index_select.default")
            (rows,) = self.emit_tensor_op(arange, [count], [("dtype", Constant(torch.int64))], source, name="rows")
            (later,) = self.emit_tensor_op(ge, [rows, index], [], source)
            (taken,) = self.emit_tensor_op(add, [rows, later], [], source, name="taken")
            (kept,) = self.emit_tensor_op(gather, [stacked, Constant(0), taken], [], source, name="stacked")
            return TensorList(kept)
        if isinstance(items, Value) and isinstance(items.type, ListType):
            length, kind = self.host_length(items, source), items.type.element
            before = self.emit_list("aten::slice.t", (items, Constant(0), index, Constant(1)), source, element=kind)
            rest = self.emit_list("aten::slice.t", (items, after, length, Constant(1)), source, element=kind)
            return self.emit_list("aten::add.t", (before, rest), source, element=kind)
        if isinstance(items, RaggedInts):
            # The ints of list i cut out of `values`; the bounds after it move back by its length.
            start = self.emit_host("aten::__getitem__.t", (items.bounds, index), "int", source)
            end = self.emit_host("aten::__getitem__.t", (items.bounds, after), "int", source)
            total, count = self.host_length(items.values, source), self.host_length(items.bounds, source)
            head = self.emit_list("aten::slice.t", (items.values, Constant(0), start, Constant(1)), source)
            tail = self.emit_list("aten::slice.t", (items.values, end, total, Constant(1)), source)
            values = self.emit_list("aten::add.t", (head, tail), source, "values")
            kept = self.emit_list("aten::slice.t", (items.bounds, Constant(0), after, Constant(1)), source)
            second = self.emit_host("aten::add.int", (after, Constant(1)), "int", source)
            later = self.emit_list("aten::slice.t", (items.bounds, second, count, Constant(1)), source)
            back = self.emit_host("aten::sub.int", (start, end), "int", source)
            moved = self.emit_list(ADD_TO_INTS, (later, back), source)
            return RaggedInts(values, self.emit_list("aten::add.t", (kept, moved), source, "bounds"), items.width)
        raise SpecializeError(
            f"`del xs[i]` on a list of tuples whose elements include {describe_entry(items)} ({source}): "
            "lists of tensors of one shape and of ints can lose an item"
        )


def is_list(entry: Any) -> bool:
    """A list `del xs[i]`, `xs.pop(i)` and `xs[i] = v` may take (another entry keeps the op's usual
    refusal)."""
    if isinstance(entry, Constant):
        return isinstance(entry.value, list)
    return isinstance(entry, (ListArg, TensorList, TupleList, RaggedInts, RaggedList)) or (
        isinstance(entry, Value) and isinstance(entry.type, ListType)
    )


def is_scalar(entry: Any, kind: str) -> bool:
    """A host scalar of `kind` ("int" or "float"): a scalar value or a constant."""
    if isinstance(entry, Value):
        return isinstance(entry.type, ScalarType) and entry.type.kind == kind
    return isinstance(entry, Constant) and type(entry.value).__name__ == kind


def scalar_list_kind(entry: Any) -> str | None:
    """"int" or "float" for a list of ints or of floats (a host list, a constant list or a literal
    list of scalars), else None."""
    if isinstance(entry, Value):
        element = getattr(entry.type, "element", None)
        return element if element in ("int", "float") else None
    if isinstance(entry, Constant) and isinstance(entry.value, list):
        items = tuple(Constant(value) for value in entry.value)
    elif isinstance(entry, ListArg):
        items = entry.items
    else:
        return None
    kinds = [kind for kind in ("int", "float") if items and all(is_scalar(item, kind) for item in items)]
    return kinds[0] if kinds else None


def _is_tuple(entry: Any) -> bool:
    return isinstance(entry, TupleEntry) or (isinstance(entry, Constant) and isinstance(entry.value, tuple))
