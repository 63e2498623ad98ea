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

The compiled host holds a host list of ints as a 1-D int64 tensor: `bounds[i]` is a `select`
(after the same index check) read back as an int, the slice a tensor slice and the `+` a `cat`, so
the kind stays on the compiled host. A fixed-length list of tuples indexed by a value known only at
run time (`hyps[int(idx)]`) becomes a TupleList there and then (`tuple_lists.tuple_list`).
"""

from __future__ import annotations

from typing import Any

from host_runtime import scalar_ops

from ..program import Constant, HostOp, ListArg, ListType, ScalarType, Value
from .values import RaggedInts, hint_of


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


def _is_int(entry: Any) -> bool:
    if isinstance(entry, Value):
        return isinstance(entry.type, ScalarType) and entry.type.kind == "int"
    return isinstance(entry, Constant) and type(entry.value) is int


class RaggedIntLists:
    """Lists of lists of ints of run-time length (a mixin of the specializer)."""

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

    def ragged_ints(self, entry: Any, source: str) -> RaggedInts:
        """`entry` (a fixed-length list of `List[int]`s) as a RaggedInts, built in `self.nodes`."""
        if isinstance(entry, RaggedInts):
            return entry
        values = self.emit_list("prim::ListConstruct", (), source, "values")
        bounds: list[Any] = [Constant(0)]
        for item in entry.items:
            values = self.emit_list("aten::add.t", (values, self.int_list_value(item, source)), source, "values")
            bounds.append(self.emit_host("aten::len.t", (values,), "int", source))
        return RaggedInts(values, self.emit_list("prim::ListConstruct", tuple(bounds), source, "bounds"))

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
        return RaggedInts(values, self.emit_list("aten::append.t", (items.bounds, end), source, "bounds"))

    def reconcile_ragged_ints(self, a: Any, b: Any, nodes_a: list, nodes_b: list, source: str) -> tuple[Any, Any]:
        """Two paths' lists of `List[int]`s whose lengths differ, as RaggedInts on both paths."""
        with self.emitting_into(nodes_a):
            a = self.ragged_ints(a, source)
        with self.emitting_into(nodes_b):
            b = self.ragged_ints(b, source)
        return a, b
