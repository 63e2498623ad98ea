"""Specialize's lists of tuples whose length is known only at run time (`TupleList`s).

Early-exit networks return what they predicted so far, and a prediction is often a tuple: RaNet-style
code appends `(logits, confidence)` at each exit and returns the list from the exit it takes, so the
list has one tuple per exit taken; a decode loop with `break` collects `(token_scores, state)` per
step. TorchScript types a tuple's length, so two paths never return tuples of different lengths;
what differs per path is how many tuples such a list holds.

A list of tuples of run-time length is carried as a tuple of lists: element k of every tuple goes
into the k-th list, itself a list of run-time length of its own kind (`TensorList` when its tensors
share a shape, `RaggedList` when they differ in one dim, a `TupleList` again for tuples of tuples).
So the kind adds no representation of its own: each element crosses branches, loops and segment
boundaries as the lists of tensors do, on both hosts and in the compiled host, and comes back as a
Python list of tuples (the manifest's `{"zip": [subtree, ...]}`). An append is an append to each
list, `xs[i]` the tuple of each list's item (PyTorch's index check included), `len(xs)` the first
list's length; `for p in preds` is TorchScript's `len` and `__getitem__`. Other list operations on
it (slices, `+`) are refused at their line. An int, float or bool element (the index of the exit
taken) is a host list of run-time length, as a decoder's `List[int]` of tokens is: the compiled
host carries a list of ints that is appended to and returned, and reading an item of one takes the
Python host (the manifest says so). A `List[int]` element (a hypothesis's tokens) is a
`RaggedInts` (`ragged_ints`). A fixed-length list of tuples indexed by a value known only at run
time becomes a TupleList at that read. Another element (None, a string) is refused, naming it.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import SpecializeError, UnsupportedOpError
from ..program import Constant, HostOp, ListArg, ListType, ScalarType, Value
from .list_deletion import ListDeletion, is_list
from .ragged_ints import RaggedIntLists, holds_int_lists, is_int_list
from .run_time_dicts import RunTimeDicts
from .schemas import source_of
from .values import (
    RaggedInts,
    RaggedList,
    TupleEntry,
    TupleList,
    append_to_list,
    describe_entry,
    hint_of,
    is_unset_list,
    list_item,
    tensor_type_of,
    tuple_items,
)


class TupleLists(ListDeletion, RunTimeDicts, RaggedIntLists):
    """Lists of tuples of run-time length (a mixin of the specializer, before the other list kinds)."""

    def reconcile(self, a: Any, b: Any, nodes_a: list, nodes_b: list, source: str) -> tuple[Any, Any]:
        """Two paths' lists of tuples whose lengths differ become TupleLists on both paths: each
        element's lists are reconciled as lists of tensors are (stacked or concatenated)."""
        if is_unset_list(a) or is_unset_list(b):
            return super().reconcile(a, b, nodes_a, nodes_b, source)  # the other path's structure
        width = _tuple_list_width(a, b)
        if width is None:
            return super().reconcile(a, b, nodes_a, nodes_b, source)
        return self.reconcile_rows(a, b, width, False, nodes_a, nodes_b, source)

    def reconcile_rows(
        self, a: Any, b: Any, width: int, lists: bool, nodes_a: list, nodes_b: list, source: str
    ) -> tuple[TupleList, TupleList]:
        """Two paths' lists of tuples (of fixed-length lists, with `lists`), each of `width` elements,
        as TupleLists."""
        fields_a, fields_b = _fields(a, width), _fields(b, width)
        for index, (x, y) in enumerate(zip(fields_a, fields_b)):
            _check_element(x, index, source)
            _check_element(y, index, source)
        pairs = []
        for x, y in zip(fields_a, fields_b):
            kind = _scalar_kind(x) or _scalar_kind(y)
            if kind is not None:  # ints, floats or bools: a host list on each path
                pairs.append((self.host_list(x, kind, nodes_a, source), self.host_list(y, kind, nodes_b, source)))
            elif holds_int_lists(x) or holds_int_lists(y):  # a `List[int]` per tuple (a hypothesis's tokens)
                pairs.append(self.reconcile_ragged_ints(x, y, nodes_a, nodes_b, source))
            elif _holds_list_rows(x) or _holds_list_rows(y):  # a `List[List[Tensor]]` state per tuple
                row_width = _list_row_width([x, y], source)
                pairs.append(self.reconcile_rows(x, y, row_width, True, nodes_a, nodes_b, source))
            else:
                pairs.append(self.reconcile(x, y, nodes_a, nodes_b, source))
        return TupleList(tuple(x for x, _ in pairs), lists), TupleList(tuple(y for _, y in pairs), lists)

    def refuse_structured(self, node: torch._C.Node, entries: list, source: str) -> bool:
        """`xs.append(t)` on a TupleList appends each element to its list; another op on one is refused.
        `del xs[i]`, `xs.pop(i)` and `xs[i] = v` on any list are `list_deletion`'s."""
        if node.kind() == "aten::Delete" and entries and is_list(entries[0]):
            self.visit_delete(node, entries, source)
            return True
        if node.kind() == "aten::pop" and entries and is_list(entries[0]):
            self.visit_pop(node, entries, source)
            return True
        if node.kind() == "aten::_set_item" and entries and is_list(entries[0]):
            self.visit_set_list_item(node, entries, source)
            return True
        if not any(isinstance(entry, TupleList) for entry in entries):
            return super().refuse_structured(node, entries, source)
        if node.kind() == "aten::append" and isinstance(entries[0], TupleList):
            grown = self.append_to_tuple_list(entries[0], entries[1], source)
            self.bind(node.inputsAt(0), grown)
            self.bind(node.output(), grown)
            return True
        raise UnsupportedOpError(
            node.kind(),
            source,
            detail="on a list of tuples whose length is known only at run time (append, xs[i], len and `for` work)",
        )

    def host_list(self, field: Any, kind: str, nodes: list, source: str) -> Value:
        """A tuple element's ints, floats or bools as a host list (a `ListType` value, made in `nodes`)."""
        if isinstance(field, Value):
            return field
        hint = tuple(hint_of(item) for item in field.items)
        value = self.new_value(ListType(kind, hint), "items")
        nodes.append(HostOp("prim::ListConstruct", field.items, (value,), source))
        return value

    def append_to_tuple_list(self, items: TupleList, item: Any, source: str) -> TupleList:
        elements = _row_items(item)
        if elements is None or len(elements) != len(items.fields):
            width, noun = len(items.fields), "lists" if items.lists else "tuples"
            raise SpecializeError(f"appending {describe_entry(item)} to a list of {noun} of {width} ({source})")
        grown = []
        for index, (field, element) in enumerate(zip(items.fields, elements)):
            _check_element(ListArg((element,)), index, source)
            grown.append(append_to_list(self, field, element, source))
        return TupleList(tuple(grown), items.lists)

    def tuple_list_item(self, items: TupleList, index: Any, source: str) -> TupleEntry | ListArg:
        """`xs[i]`: the tuple (or fixed-length list) of each element's list's item i."""
        elements = [list_item(self, field, index, source) for field in items.fields]
        return ListArg(tuple(elements)) if items.lists else TupleEntry(tuple(elements))

    def tuple_list_length(self, items: TupleList, source: str) -> Any:
        field = items.fields[0]
        if isinstance(field, TupleList):
            return self.tuple_list_length(field, source)
        if isinstance(field, Value):
            return self.emit_host("aten::len.t", (field,), "int", source)
        if isinstance(field, RaggedList):
            return self.ragged_length(field, source)
        if isinstance(field, RaggedInts):
            return self.ragged_ints_length(field, source)
        return self.list_length(field, source)

    def tuple_list(self, entry: ListArg, source: str) -> TupleList:
        """A fixed-length list of tuples as a TupleList (in `self.nodes`), to be indexed at run time:
        each element's list takes the kind a list of run-time length of such elements has."""
        first = entry.items[0]
        width = len(_row_items(first))
        if isinstance(first, ListArg):
            width = _list_row_width([entry], source)
        fields = []
        for index, field in enumerate(_fields(entry, width)):
            _check_element(field, index, source, "indexed by a value known only at run time")
            kind = _scalar_kind(field)
            if kind is not None:
                fields.append(self.host_list(field, kind, self.nodes, source))
            elif holds_int_lists(field):
                fields.append(self.ragged_ints(field, source))
            elif all(_row_items(item) is not None for item in field.items):
                fields.append(self.tuple_list(field, source))
            else:
                dim = self.list_layout([field], source)
                if dim is None:
                    fields.append(self.tensor_list(field, None, source))
                else:
                    fields.append(self.ragged_list(field, dim, self.ragged_element([field], dim, source), source))
        return TupleList(tuple(fields), isinstance(first, ListArg))

    def visit_getitem(self, node: torch._C.Node) -> None:
        subject, index = self.entry(node.inputsAt(0)), self.entry(node.inputsAt(1))
        if self.run_time_dict_op(node, [subject, index], source_of(node)):
            return None
        if _indexed_at_run_time(subject, index):
            # `hyps[i]` with i known only at run time (an index a sort or top-k chose): the list's
            # tuples are carried as a TupleList, whose item i is read on the device or host.
            subject = self.tuple_list(subject, source_of(node))
        if not isinstance(subject, TupleList):
            return super().visit_getitem(node)
        self.bind(node.output(), self.tuple_list_item(subject, index, source_of(node)))
        return None

    def visit_len(self, node: torch._C.Node) -> None:
        subject = self.entry(node.input())
        if not isinstance(subject, TupleList):
            return super().visit_len(node)
        self.bind(node.output(), self.tuple_list_length(subject, source_of(node)))
        return None


def _indexed_at_run_time(subject: Any, index: Any) -> bool:
    """A fixed-length list of tuples (every item a tuple), indexed by a value known only at run time."""
    if isinstance(index, Constant) or not isinstance(subject, ListArg) or not subject.items:
        return False
    return all(tuple_items(item) is not None for item in subject.items)


def _tuple_list_width(a: Any, b: Any) -> int | None:
    """How many elements the tuples of two paths' lists have, where the two lists are lists of tuples
    that must become TupleLists (one already is, or their lengths differ); else None."""
    if not all(isinstance(entry, (ListArg, TupleList)) for entry in (a, b)):
        return None
    if isinstance(a, ListArg) and isinstance(b, ListArg) and len(a.items) == len(b.items):
        return None  # item by item, as a fixed-length list
    for entry in (a, b):
        if isinstance(entry, TupleList):
            return len(entry.fields)
        for item in entry.items:
            items = tuple_items(item)
            if items is not None:
                return len(items)
    return None


def _row_items(entry: Any) -> tuple | None:
    """The items of a tuple (`tuple_items`), or of a fixed-length list that is not a `List[int]` (a
    layer's state in a `List[List[Tensor]]`); None otherwise."""
    if isinstance(entry, ListArg) and entry.items and not is_int_list(entry):
        return entry.items
    return tuple_items(entry)


def _holds_list_rows(entry: Any) -> bool:
    """A TupleList of fixed-length lists, or a fixed-length list of such lists (of tensors or lists)."""
    if isinstance(entry, TupleList):
        return entry.lists
    return (
        isinstance(entry, ListArg)
        and bool(entry.items)
        and all(isinstance(item, ListArg) and _row_items(item) is not None for item in entry.items)
    )


def _list_row_width(entries: list, source: str) -> int:
    """The one length of the fixed-length lists that `entries` (lists of them, or TupleLists) hold."""
    widths = set()
    for entry in entries:
        if isinstance(entry, TupleList):
            widths.add(len(entry.fields))
        elif isinstance(entry, ListArg):
            widths.update(len(item.items) for item in entry.items)
    if len(widths) != 1:
        raise SpecializeError(
            f"a list of run-time length holds lists of lengths {sorted(widths)} ({source}): the lists a list "
            "of run-time length holds must all have one length"
        )
    return widths.pop()


def _fields(entry: Any, width: int) -> tuple:
    """A list of tuples (or of fixed-length lists) as one list per element (a TupleList's own lists)."""
    if isinstance(entry, TupleList):
        return entry.fields
    rows = [_row_items(item) for item in entry.items]
    return tuple(ListArg(tuple(row[index] for row in rows)) for index in range(width))


def _scalar_kind(field: Any) -> str | None:
    """"int", "float" or "bool" where a tuple element's list holds such scalars (or is a host list)."""
    if isinstance(field, Value) and isinstance(field.type, ListType):
        return field.type.element
    items = field.items if isinstance(field, ListArg) else ()
    for item in items:
        if isinstance(item, Value) and isinstance(item.type, ScalarType):
            return item.type.kind
        if isinstance(item, Constant) and type(item.value) in (bool, int, float):
            return type(item.value).__name__
    return None


def _check_element(field: Any, index: int, source: str, what: str = "whose length depends on the path") -> None:
    """A list of run-time length holds tensors, tuples of them, or scalars: refuse another element,
    naming it (`what` says why the list is one of run-time length)."""
    if not isinstance(field, ListArg):
        return
    for item in field.items:
        if (
            tensor_type_of(item) is None
            and _row_items(item) is None
            and _scalar_kind(ListArg((item,))) is None
            and not is_int_list(item)
        ):
            raise SpecializeError(
                f"a list of tuples {what} holds {describe_entry(item)} as element "
                f"{index} of its tuples ({source}): a list of run-time length holds tensors, ints, floats, "
                "bools or lists of ints, so keep that element in a list of its own"
            )
