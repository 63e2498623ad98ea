"""Specialize's lists of lists of ints whose length is known only at run time (`RaggedInts`).

A beam search keeps hypotheses `(tokens, score)` whose token lists differ in length, in a list
that grows, is indexed and returned at run time (torchaudio's `RNNTBeamSearch`). As an element of
such a list of tuples (`tuple_lists`), each hypothesis's `List[int]` is one slice of a host list
that holds every list's ints one after another (`values`), cut at the ints of a second host list
(`bounds`: where each list starts, then where the last ends). Both are host lists of ints, so the
kind crosses branches, loops and segment boundaries as any host list does, on both hosts; the
manifest's `{"ragged_ints": [values, bounds]}` rebuilds the Python lists.

- `xs[i]`: PyTorch's index check, then `values[bounds[i]:bounds[i + 1]]`;
- `xs.append(item)`: `values + item`, and the new length of `values` appended to `bounds`;
- `len(xs)`: `len(bounds) - 1`.

The same kind carries a list of int lists that is a value of its own, grown in a loop or by a
comprehension over a list of run-time length (`[[token] for token in tokens]`). Where every list
appended has a length known at export, and the same one (`width`), `torch.tensor` of the lists is
`values` uploaded and viewed as (n, width) (`list_tensors`).

The compiled host holds a host list of ints as a 1-D int64 tensor: `bounds[i]` is a `select`
(after the same index check) read back as an int, the slice a tensor slice and the `+` a `cat`, so
the kind stays on the compiled host. A fixed-length list of tuples indexed by a value known only at
run time (`hyps[int(idx)]`) becomes a TupleList there and then (`tuple_lists.tuple_list`).
"""

from __future__ import annotations

from typing import Any

import torch

from host_runtime import scalar_ops

from ..errors import SpecializeError
from ..program import Constant, HostOp, ListArg, ListType, ScalarType, Value
from .schemas import source_of
from .values import RaggedInts, describe_entry, hint_of, is_unset_list


def is_int_list(entry: Any) -> bool:
    """Whether `entry` is one `List[int]`: a host list of ints, a constant list of ints, or a
    fixed-length list of int scalars (`[token]`)."""
    if isinstance(entry, Value):
        return isinstance(entry.type, ListType) and entry.type.element == "int"
    if isinstance(entry, Constant):
        return isinstance(entry.value, list) and all(type(item) is int for item in entry.value)
    if isinstance(entry, ListArg):
        return all(_is_int(item) for item in entry.items)
    return False


def holds_int_lists(entry: Any) -> bool:
    """A RaggedInts, or a fixed-length list of at least one `List[int]` (`is_int_list`)."""
    if isinstance(entry, RaggedInts):
        return True
    return isinstance(entry, ListArg) and bool(entry.items) and all(is_int_list(item) for item in entry.items)


# `ragged_ints`'s default width: the one the lists themselves have.
_OWN = object()


def row_width(entry: Any) -> int | None:
    """The length of one `List[int]` where export knows it (a literal `[token]`), else None."""
    if isinstance(entry, ListArg):
        return len(entry.items)
    if isinstance(entry, Constant) and isinstance(entry.value, list):
        return len(entry.value)
    return None


def joined_width(*entries: Any) -> int | None:
    """The one length of every list that `entries` (lists of `List[int]`s, or RaggedInts) hold,
    where export knows it; None where a length is known only at run time or two differ. An empty
    fixed-length list holds no list and so imposes no length."""
    widths = set()
    for entry in entries:
        if isinstance(entry, RaggedInts):
            widths.add(entry.width)
        elif isinstance(entry, ListArg):
            widths.update(row_width(item) for item in entry.items)
    return widths.pop() if len(widths) == 1 else None


def _lists_of_ints(a: Any, b: Any) -> bool:
    """Two paths' lists of `List[int]`s (one may be empty) that cannot stay fixed-length lists."""
    if isinstance(a, ListArg) and isinstance(b, ListArg) and len(a.items) == len(b.items):
        return False  # item by item, as a fixed-length list
    if not (holds_int_lists(a) or holds_int_lists(b)):
        return False
    return all(holds_int_lists(entry) or (isinstance(entry, ListArg) and not entry.items) for entry in (a, b))


def _is_int(entry: Any) -> bool:
    if isinstance(entry, Value):
        return isinstance(entry.type, ScalarType) and entry.type.kind == "int"
    return isinstance(entry, Constant) and type(entry.value) is int


class RaggedIntLists:
    """Lists of lists of ints of run-time length (a mixin of the specializer, after the dicts keyed
    by them and before the lists of tensors)."""

    def reconcile(self, a: Any, b: Any, nodes_a: list, nodes_b: list, source: str) -> tuple[Any, Any]:
        """Two paths' lists of `List[int]`s whose lengths differ (a comprehension's rows before and
        after its loop) become RaggedInts on both paths."""
        if is_unset_list(a) or is_unset_list(b) or not _lists_of_ints(a, b):
            return super().reconcile(a, b, nodes_a, nodes_b, source)
        return self.reconcile_ragged_ints(a, b, nodes_a, nodes_b, source)

    def refuse_structured(self, node: torch._C.Node, entries: list, source: str) -> bool:
        """An op on a RaggedInts other than `xs.append(list)` (every list's, `values.append_to_list`),
        `del xs[i]` and `xs.pop(i)` (`list_deletion`'s) is refused, naming it."""
        items, kind = entries[0] if entries else None, node.kind()
        if not isinstance(items, RaggedInts) or (kind == "aten::append" and is_int_list(entries[1])):
            return super().refuse_structured(node, entries, source)
        raise SpecializeError(
            f"{kind} on {describe_entry(items)} ({source}): append of a list of ints, xs[i], len, `for`, "
            "`del xs[i]`, `xs.pop(i)` and torch.tensor work on it"
        )

    def visit_getitem(self, node: torch._C.Node) -> None:
        """`xs[i]` of a RaggedInts, or of a fixed-length list of `List[int]`s at an index known only
        at run time."""
        subject, index = self.entry(node.inputsAt(0)), self.entry(node.inputsAt(1))
        if holds_int_lists(subject) and not (isinstance(subject, ListArg) and isinstance(index, Constant)):
            items = self.ragged_ints(subject, source_of(node))
            self.bind(node.output(), self.ragged_ints_item(items, index, source_of(node)))
            return None
        return super().visit_getitem(node)

    def visit_len(self, node: torch._C.Node) -> None:
        subject = self.entry(node.input())
        if not isinstance(subject, RaggedInts):
            return super().visit_len(node)
        self.bind(node.output(), self.ragged_ints_length(subject, source_of(node)))
        return None

    def emit_list(self, target: str, args: tuple, source: str, name: str = "items", element: str = "int") -> Value:
        """A host op whose result is a list of ints (or of `element`), its hint computed from its
        arguments' hints."""
        try:
            hint = tuple(scalar_ops.lookup(target).function(*(hint_of(arg) for arg in args)))
        except Exception:
            hint = ()
        value = self.new_value(ListType(element, hint), name)
        self.nodes.append(HostOp(target, args, (value,), source))
        return value

    def int_list_value(self, entry: Any, source: str) -> Value:
        """One `List[int]` as a host list value (a constant or literal list is built on the host)."""
        if isinstance(entry, Value):
            return entry
        items = tuple(Constant(item) for item in entry.value) if isinstance(entry, Constant) else entry.items
        return self.emit_list("prim::ListConstruct", items, source)

    def ragged_ints(self, entry: Any, source: str, width: Any = _OWN) -> RaggedInts:
        """`entry` (a fixed-length list of `List[int]`s) as a RaggedInts, built in `self.nodes`, of
        `width` where given (else the lists' own, `joined_width`)."""
        if isinstance(entry, RaggedInts):
            return entry if width is _OWN or width == entry.width else RaggedInts(entry.values, entry.bounds, width)
        values = self.emit_list("prim::ListConstruct", (), source, "values")
        bounds: list[Any] = [Constant(0)]
        for item in entry.items:
            values = self.emit_list("aten::add.t", (values, self.int_list_value(item, source)), source, "values")
            bounds.append(self.emit_host("aten::len.t", (values,), "int", source))
        bounds_list = self.emit_list("prim::ListConstruct", tuple(bounds), source, "bounds")
        return RaggedInts(values, bounds_list, joined_width(entry) if width is _OWN else width)

    def ragged_ints_length(self, items: RaggedInts, source: str) -> Any:
        count = self.emit_host("aten::len.t", (items.bounds,), "int", source)
        return self.emit_host("aten::sub.int", (count, Constant(1)), "int", source)

    def ragged_ints_item(self, items: RaggedInts, index: Any, source: str) -> Value:
        """`xs[i]`: the ints between bounds i and i + 1, after PyTorch's index check."""
        length = self.ragged_ints_length(items, source)
        self.check_list_index(length, index, source)
        if not (isinstance(index, Constant) and index.value >= 0):
            # -len <= i < len after the check: i % len is the index from the front.
            index = self.emit_host("aten::remainder.int", (index, length), "int", source)
        start = self.emit_host("aten::__getitem__.t", (items.bounds, index), "int", source)
        after = self.emit_host("aten::add.int", (index, Constant(1)), "int", source)
        end = self.emit_host("aten::__getitem__.t", (items.bounds, after), "int", source)
        return self.emit_list("aten::slice.t", (items.values, start, end, Constant(1)), source, "tokens")

    def append_to_ragged_ints(self, items: RaggedInts, item: Any, source: str) -> RaggedInts:
        values = self.emit_list("aten::add.t", (items.values, self.int_list_value(item, source)), source, "values")
        end = self.emit_host("aten::len.t", (values,), "int", source)
        width = items.width if row_width(item) == items.width else None
        return RaggedInts(values, self.emit_list("aten::append.t", (items.bounds, end), source, "bounds"), width)

    def reconcile_ragged_ints(self, a: Any, b: Any, nodes_a: list, nodes_b: list, source: str) -> tuple[Any, Any]:
        """Two paths' lists of `List[int]`s whose lengths differ, as RaggedInts on both paths, of the
        width both paths' lists share (`joined_width`)."""
        width = joined_width(a, b)
        with self.emitting_into(nodes_a):
            a = self.ragged_ints(a, source, width)
        with self.emitting_into(nodes_b):
            b = self.ragged_ints(b, source, width)
        return a, b
