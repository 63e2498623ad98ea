"""Specialize's lists of tensors that differ in size along one dim (`RaggedList`s).

A list of run-time length whose tensors all have one shape is stacked (`TensorList`). Lists that
segment a sequence at data-dependent boundaries (`chunks.append(x[start:i])`), collect per-row
outputs of different lengths, or keep a memory of pieces of different sizes cannot be stacked;
they are read by `torch.cat(xs, dim)`. Such a list is carried as its tensors concatenated along
that dim, with the size of each along it in a 1-D int64 tensor: both are ordinary tensors, so the
list crosses branches, loops and segment boundaries as two values with dynamic dims, on both hosts.

Which form a list takes is decided by its tensors' types where it meets control flow or grows
(`list_layout`): one shape, stacked; shapes that differ (or are dynamic, for a list that starts
empty) in one dim, concatenated along it; one that starts empty with tensors dynamic in several
dims (Emformer's mask blocks) is concatenated along one and takes the others from its first append
(`first_sized_join`). `torch.stack` of a concatenated list, and `torch.cat`
along another dim, work as in PyTorch when its tensors have one size at run time and raise
PyTorch's error otherwise (`ragged_stacked`).

Example (what the Program does for `torch.cat(chunks, 0)` after `chunks.append(x[a:b])` in a loop):
    value = cat([value, x[a:b]], 0); sizes = cat([sizes, tensor([b - a])], 0); result = value
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch

from ..errors import SpecializeError, UnsupportedOpError
from ..guards import CHECK_INDEX
from ..program import Block, Constant, HostOp, If, ListArg, ScalarType, TensorOp, TensorType, Value
from .schemas import overload_of, torch_dtype
from .values import INT64_MAX, RaggedList, TensorList, element_type, hint_of, tensor_type_of


class RaggedLists:
    """Lists of tensors concatenated along one dim, with their sizes (a mixin of the specializer)."""

    @contextmanager
    def laying_out(self, ts_value: torch._C.Value | None, appended: torch._C.Value | None = None) -> Iterator[None]:
        """`list_layout` decides the form of the model's list `ts_value` meanwhile (None: unknown);
        `appended`: the output of the `xs.append(x)` that grows it (`observed.observed_join`)."""
        saved = self.layout_list, self.appended
        self.layout_list, self.appended = None if ts_value is None else ts_value.unique(), appended
        try:
            yield
        finally:
            self.layout_list, self.appended = saved

    def dims_of_list(self) -> set[int]:
        """The dims `torch.cat` joins the list being laid out along, where every use of it the
        graph shows is such a `cat` (`list_concatenation_dims`); else those of every list."""
        known = self.list_dims.get(self.layout_list) if self.layout_list is not None else None
        return known if known is not None else self.concatenation_dims

    def list_may_be_stacked(self) -> bool:
        """Whether `torch.stack` may read the list being laid out: from its own uses where the graph
        shows them (`list_concatenation_dims`, None where one is a `stack`), else whether the model
        stacks any list. A model that stacks its per-row outputs (`torch.stack(rows)`) and joins
        pieces of a data-dependent width (`torch.cat(pieces + [h], 1)`) stacks only the rows: the
        pieces, stacked too, came back as wide as the example's (fuzzer seed 95110)."""
        if self.layout_list is not None and self.layout_list in self.list_dims:
            return self.list_dims[self.layout_list] is None
        return self.stacks_lists

    def list_layout(self, entries: list, source: str) -> int | None:
        """How lists of tensors that meet (two paths' lists, a list and what is appended or added to
        it) are carried: None when stacked (every tensor has one shape), else the dim they are
        concatenated along.

        A list whose tensors differ in a dim cannot be stacked. Nor can one that starts empty and
        grows by tensors with a dynamic dim, unless a tensor the loop starts from has their shape
        (`size_witness`: the empty form's sizes); with none, the list is concatenated along the dim
        every `torch.cat` that reads the loop's lists joins them along (`dims_read_along`), else
        along its one dynamic dim (its empty form is 0 there, every other size static), else along
        the dim the model concatenates such lists along or the first: then its empty form is 0 in
        every dynamic dim, sized by its first append (`first_sized_join`). `torch.stack` of it
        checks at run time that the sizes agree (`ragged_stacked`).
        """
        ragged = {entry.dim for entry in entries if isinstance(entry, RaggedList)}
        if len(ragged) > 1:
            raise SpecializeError(
                f"a list of tensors is concatenated along dims {sorted(ragged)} on different paths ({source})"
            )
        if ragged:
            return ragged.pop()
        types = [t for entry in entries for t in self.list_element_type(entry)]
        if not types:
            return None
        first = types[0]
        for other in types[1:]:
            if other.dtype != first.dtype or other.rank != first.rank:
                raise SpecializeError(
                    f"a list of tensors whose length changes at run time holds {first.dtype}{list(first.shape)} "
                    f"and {other.dtype}{list(other.shape)} ({source}): its tensors must share dtype and rank"
                )
        starts_empty = any(isinstance(entry, ListArg) and not entry.items for entry in entries)
        dynamic = [d for d in range(first.rank) if any(t.shape[d] is None for t in types)]
        differing = [d for d in range(first.rank) if len({t.shape[d] for t in types}) > 1]
        if not differing and not dynamic:
            return None
        # A dynamic dim the model concatenates such lists along can differ from tensor to tensor
        # (`pieces.append(h[:, :w])`, w read from the data: fuzzer seed 80031): concatenated along
        # it, even when the list starts with a tensor, and not stacked (whose appends must match).
        # Where the model concatenates lists along several of its dynamic dims, which is this
        # list's is not known here: stacked, as before.
        concatenated = self.dims_of_list()
        along = set(dynamic) & concatenated
        if not differing and not starts_empty and (self.list_may_be_stacked() or len(along) != 1):
            return None
        # The dims the `torch.cat`s that read the lists this loop grows join them along, or those
        # this list reaches, also through list additions (`torch.cat(rows + summaries)`).
        read_along = self.read_along or self.list_dims.get(self.layout_list) or set()
        if not differing and len(read_along) == 1 and self.size_witness(element_type(types, source)) is None:
            # Every `torch.cat` that reads the list joins it along one dim (Emformer's mask blocks,
            # `torch.cat(mask)`): kept concatenated along it, their other sizes from the first
            # append where they are dynamic (`first_sized_join`).
            (read,) = read_along
            if 0 <= read < first.rank:
                return read
        if not differing and (self.list_may_be_stacked() or not set(dynamic) & concatenated):
            if self.size_witness(element_type(types, source)) is not None:
                return None  # stacked, its empty form sized at run time (`tensor_lists.empty_stacked`)
            if len(dynamic) > 1:
                # Several dynamic dims and no tensor to take them from (Emformer's mask blocks:
                # rows per segment, as wide as the utterance): concatenated along the one the
                # model concatenates such lists along, or the first (torch.cat's default dim 0);
                # its other sizes come with the first append (`first_sized_join`).
                return _kept_along(dynamic, concatenated)
            # No tensor to take the dynamic size from: kept concatenated along that dim, whose
            # empty form is fully static (0 there); `torch.stack` checks the sizes agree.
            return dynamic[0]
        candidates = differing or dynamic
        if starts_empty and not differing and len(candidates) > 1:
            return _kept_along(candidates, concatenated)
        if len(candidates) > 1:
            # Several dims vary: the one the model concatenates these lists along, if it says.
            preferred = [d for d in candidates if d in concatenated]
            candidates = preferred if len(preferred) == 1 else candidates
        if len(candidates) > 1:
            shapes = sorted({str(list(t.shape)).replace("None", "?") for t in types})
            raise SpecializeError(
                f"a list of tensors of run-time length holds tensors of sizes {', '.join(shapes)} ({source}): "
                f"they vary in dims {candidates}, and a list can vary in one (the dim it is concatenated along)"
            )
        return candidates[0]

    def ragged_element(self, entries: list, dim: int, source: str) -> TensorType:
        """The type every tensor of the list fits: `dim` dynamic, every other dim agreed on."""
        types = [t for entry in entries for t in self.list_element_type(entry)]
        first = types[0]
        shape: list = []
        for d in range(first.rank):
            sizes = {t.shape[d] for t in types}
            if d == dim or None in sizes:
                shape.append(None)
            elif len(sizes) > 1:
                raise SpecializeError(
                    f"a list of tensors concatenated along dim {dim} holds tensors of sizes {sorted(sizes)} "
                    f"in dim {d} ({source}): torch.cat needs them equal in every other dim"
                )
            else:
                shape.append(first.shape[d])
        hint = tuple(max(t.hint[d] for t in types) for d in range(first.rank))
        return TensorType(first.dtype, tuple(shape), hint)

    def ragged_list(self, entry: Any, dim: int, element: TensorType, source: str) -> RaggedList:
        """`entry` (a fixed-length list, a TensorList or a RaggedList) as a RaggedList along `dim`
        (ops appended to `self.nodes`)."""
        if isinstance(entry, RaggedList):
            return entry
        cat = overload_of("aten::cat.default")
        if isinstance(entry, TensorList):
            # [n, ...] stacked -> the n tensors side by side along `dim`; each has the same size there.
            stacked = entry.value
            moved = stacked
            if dim != 0:
                movedim = overload_of("aten::movedim.int")
                (moved,) = self.emit_tensor_op(movedim, [stacked, Constant(0), Constant(dim)], [], source)
            flatten = overload_of("aten::flatten.using_ints")
            (value,) = self.emit_tensor_op(
                flatten, [moved, Constant(dim), Constant(dim + 1)], [], source, name="ragged"
            )
            count = self.list_length(entry, source)
            size = self.size_of(stacked, dim + 1, source)
            full = overload_of("aten::full.default")
            kwargs = [("dtype", Constant(torch.int64))]
            (sizes,) = self.emit_tensor_op(full, [ListArg((count,)), size], kwargs, source, name="sizes")
            return RaggedList(value, sizes, dim)
        items = [self.materialize(item, source) for item in entry.items]
        if not items:
            if any(d is None for i, d in enumerate(element.shape) if i != dim):
                # Pieces of a run-time width and a dynamic batch (`pieces.append(h[:, :w])`): the
                # empty list takes the other sizes from a tensor the loop starts from (`h`), and
                # every append checks its piece has them (`check_other_sizes`).
                witness = self.size_witness(element, skip=dim)
                if witness is None:
                    # None either (Emformer's mask blocks, as wide as the utterance): 0 in those
                    # dims too, until the first append gives them (`first_sized_join`).
                    shape = tuple(0 if d is None else d for d in element.shape)
                    empty = torch.zeros(shape, dtype=torch_dtype(element.dtype))
                    nothing = torch.zeros((0,), dtype=torch.int64)
                    value = self.materialize(Constant(empty), source)
                    return RaggedList(value, self.materialize(Constant(nothing), source), dim, True)
                sizes = [Constant(0) if i == dim else self.size_of(witness, i, source) for i in range(element.rank)]
                zeros = overload_of("aten::zeros.default")
                options = [("dtype", Constant(torch_dtype(element.dtype)))]
                (empty,) = self.emit_tensor_op(zeros, [ListArg(tuple(sizes))], options, source, name="ragged")
                nothing = self.materialize(Constant(torch.zeros((0,), dtype=torch.int64)), source)
                return RaggedList(empty, nothing, dim)
            shape = tuple(0 if i == dim else d for i, d in enumerate(element.shape))
            empty = torch.zeros(shape, dtype=torch_dtype(element.dtype))
            nothing = torch.zeros((0,), dtype=torch.int64)
            return RaggedList(
                self.materialize(Constant(empty), source), self.materialize(Constant(nothing), source), dim
            )
        if len(items) == 1:
            value = items[0]
        else:
            (value,) = self.emit_tensor_op(cat, [ListArg(tuple(items)), Constant(dim)], [], source, name="ragged")
        return RaggedList(value, self.sizes_tensor([self.size_of(item, dim, source) for item in items], source), dim)

    def sizes_tensor(self, sizes: list, source: str) -> Value:
        """A 1-D int64 tensor of `sizes` (constants or host ints)."""
        if all(isinstance(size, Constant) for size in sizes):
            return self.materialize(Constant(torch.tensor([s.value for s in sizes], dtype=torch.int64)), source)
        parts = []
        for size in sizes:
            if isinstance(size, Constant):
                parts.append(self.materialize(Constant(torch.tensor([size.value], dtype=torch.int64)), source))
                continue
            full = overload_of("aten::full.default")
            kwargs = [("dtype", Constant(torch.int64))]
            (row,) = self.emit_tensor_op(full, [Constant([1]), size], kwargs, source, name="size")
            parts.append(row)
        if len(parts) == 1:
            return parts[0]
        (joined,) = self.emit_tensor_op(
            overload_of("aten::cat.default"), [ListArg(tuple(parts)), Constant(0)], [], source
        )
        return joined

    def join_ragged(self, left: RaggedList, right: RaggedList, source: str, checked: Value | None = None) -> RaggedList:
        """`left + right`: values and sizes each concatenated (`checked`: the one tensor `right`
        holds, whose other sizes are checked against `left`'s before)."""
        cat = overload_of("aten::cat.default")
        first_sizes = left.first_sizes or right.first_sizes
        if first_sizes:
            value = self.first_sized_join(left, right, source, checked)
        else:
            if checked is not None:
                self.check_other_sizes(left, checked, source)
            pair = ListArg((left.value, right.value))
            observed = self.observed_join(left.dim)
            (value,) = self.emit_tensor_op(
                cat, [pair, Constant(left.dim)], [], source, name="ragged", observed=[observed] if observed else None
            )
        (sizes,) = self.emit_tensor_op(cat, [ListArg((left.sizes, right.sizes)), Constant(0)], [], source, name="sizes")
        return RaggedList(value, sizes, left.dim, first_sizes)

    def first_sized_join(self, left: RaggedList, right: RaggedList, source: str, checked: Value | None) -> Value:
        """The values of `left + right` where a list may still be in its empty form, 0 in every
        dynamic dim (`RaggedList.first_sizes`): such a list's value cannot be concatenated with
        another's (their other sizes differ), so a list that holds no tensor gives the other's
        value as it is, by an `if` on its length (a shape read, no device sync); where both hold
        tensors, the other sizes are checked and the values concatenated, as `torch.cat` does."""
        tests = []  # (whether the list holds no tensor, the other list), inner `if` first
        for items, other in ((right, left), (left, right)):
            if items.first_sizes:
                empty = self.emit_host("aten::eq.int", (self.ragged_length(items, source), Constant(0)), "bool", source)
                if isinstance(empty, Constant) and empty.value:
                    return other.value  # known empty (no cat: its sizes would not match)
                if not isinstance(empty, Constant):
                    tests.append((empty, other))
        cat = overload_of("aten::cat.default")
        outer, self.nodes = self.nodes, []
        if checked is not None:
            self.check_other_sizes(left, checked, source)
        (joined,) = self.emit_tensor_op(cat, [ListArg((left.value, right.value)), Constant(left.dim)], [], source)
        value, nodes = joined, self.nodes
        self.nodes = outer
        for empty, other in tests:
            types = (value.type, other.value.type)
            shape = tuple(a if a == b else None for a, b in zip(*(t.shape for t in types)))
            hint = tuple(max(a, b) for a, b in zip(*(t.hint for t in types)))
            joined = self.new_value(TensorType(value.type.dtype, shape, hint), "ragged")
            label = f"if{next(self.labels)}"
            taken, passed = Block((), (), (other.value,)), Block((), tuple(nodes), (value,))
            value, nodes = joined, [If(empty, taken, passed, (joined,), label, source)]
        self.nodes.extend(nodes)
        return value

    def append_to_ragged(self, items: RaggedList, item: Any, source: str) -> RaggedList:
        item = self.materialize(item, source)
        if tensor_type_of(item) is None:
            raise SpecializeError(f"appending a non-tensor to a list of tensors ({source})")
        element = self.ragged_element([items, ListArg((item,))], items.dim, source)  # refuses what cat would
        piece = self.ragged_list(ListArg((item,)), items.dim, element, source)
        return self.join_ragged(items, piece, source, checked=item)

    def check_other_sizes(self, items: RaggedList, item: Value, source: str) -> None:
        """A host check (shape reads, no device sync) that `item` has the list's sizes in its
        dynamic dims other than the one the list is concatenated along, as `torch.cat` needs."""
        for dim in range(item.type.rank):
            if dim != items.dim and (item.type.shape[dim] is None or items.value.type.shape[dim] is None):
                want, have = self.size_of(items.value, dim, source), self.size_of(item, dim, source)
                message = Constant(
                    f"RuntimeError: Sizes of tensors must match except in dimension {items.dim}: a tensor of "
                    f"another size in dim {dim} was appended to a list joined along dim {items.dim} ({source})"
                )
                upper = self.emit_host("aten::add.int", (want, Constant(1)), "int", source)
                self.nodes.append(HostOp(CHECK_INDEX, (have, want, upper, message), (), source))

    def check_list_index(self, length: Any, index: Any, source: str) -> None:
        """Raise as PyTorch does for `xs[i]` past either end of a list of run-time length (a
        `select` past the end of the tensor that holds it would read outside its buffer)."""
        if isinstance(length, Constant) and isinstance(index, Constant) and -length.value <= index.value < length.value:
            return
        low = self.emit_host("aten::mul.int", (length, Constant(-1)), "int", source)
        message = Constant(f"RuntimeError: list index out of range ({source})")
        self.nodes.append(HostOp(CHECK_INDEX, (index, low, length, message), (), source))

    def index_for_example(self, length: Any, index: Any, source: str) -> Any:
        """`index` (checked against `length`), or where its example value lies outside the example
        list, the same index modulo the length, whose example value lies inside: result types come
        from meta runs at the example values, and an index read back from a tensor (one a sort
        chose: `[hyps[idx] for idx in sorted_idx]`) has a default example value that the example
        list may not have ("select(): index 1 out of range for tensor of size [1, ...]")."""
        if not isinstance(index, Value):
            return index
        count, example = hint_of(length), index.type.hint
        if isinstance(count, int) and isinstance(example, int) and -count <= example < count:
            return index
        return self.emit_host("aten::remainder.int", (index, length), "int", source)

    def ragged_length(self, items: RaggedList, source: str) -> Any:
        return self.size_of(items.sizes, 0, source)

    def read_int(self, tensor: Value, hint: int, source: str) -> Value:
        """A 0-d int tensor read back to the host (a device sync)."""
        value = self.new_value(ScalarType("int", hint), "offset")
        self.nodes.append(HostOp("aten::Int.Tensor", (tensor,), (value,), source))
        return value

    def ragged_span(self, items: RaggedList, before: Value, kept: Value, source: str) -> Value:
        """The tensors whose sizes are `kept`, after those whose sizes are `before`: a `narrow`."""
        total = overload_of("aten::sum.default")
        (offset,) = self.emit_tensor_op(total, [before], [], source, name="offset")
        (length,) = self.emit_tensor_op(total, [kept], [], source, name="length")
        # Hints a meta run can narrow with: the start at 0, the length within the example's size.
        start = self.read_int(offset, 0, source)
        count = self.read_int(length, _item_hint(items), source)
        # Typed here: a meta run with the offsets perturbed can run past the example's size, and
        # would leave every dim dynamic; only the list's dim changes.
        type_ = items.value.type
        shape = tuple(None if d == items.dim else size for d, size in enumerate(type_.shape))
        hint = tuple(count.type.hint if d == items.dim else size for d, size in enumerate(type_.hint))
        piece = self.new_value(TensorType(type_.dtype, shape, hint), "item")
        args = (items.value, Constant(items.dim), start, count)
        self.nodes.append(TensorOp("aten::narrow.default", args, (), (piece,), source))
        return piece

    def ragged_item(self, items: RaggedList, index: Any, source: str) -> Value:
        """`xs[i]`: the values from the sum of the sizes before i, as many as the i-th size."""
        length = self.ragged_length(items, source)
        self.check_list_index(length, index, source)
        index = self.index_for_example(length, index, source)
        slice_, select = overload_of("aten::slice.Tensor"), overload_of("aten::select.int")
        (before,) = self.emit_tensor_op(
            slice_, [items.sizes, Constant(0), Constant(None), index, Constant(1)], [], source
        )
        (own,) = self.emit_tensor_op(select, [items.sizes, Constant(0), index], [], source)
        return self.ragged_span(items, before, own, source)

    def ragged_slice(self, items: RaggedList, start: Any, end: Any, step: Any, source: str) -> RaggedList:
        """`xs[a:b]` (step 1): the sizes sliced, the values narrowed to the tensors kept."""
        if not (isinstance(step, Constant) and step.value in (None, 1)):
            raise UnsupportedOpError(
                "aten::slice", source, detail="a step on a list of tensors of different sizes (only xs[a:b])"
            )
        start = Constant(0) if isinstance(start, Constant) and start.value is None else start
        slice_ = overload_of("aten::slice.Tensor")
        (kept,) = self.emit_tensor_op(
            slice_, [items.sizes, Constant(0), start, end, Constant(1)], [], source, name="sizes"
        )
        (before,) = self.emit_tensor_op(
            slice_, [items.sizes, Constant(0), Constant(None), start, Constant(1)], [], source
        )
        return RaggedList(self.ragged_span(items, before, kept, source), kept, items.dim)

    def ragged_concatenation(self, kind: str, items: RaggedList, entries: list, source: str) -> Value:
        """`torch.cat(xs, dim)` along the dim the list is kept along: the value itself. `torch.stack`,
        or `torch.cat` along another dim, needs the tensors of one size along it, as PyTorch does:
        checked at run time, then the value is cut back into the tensors stacked (`ragged_stacked`)."""
        rank = items.value.type.rank
        dim = entries[1].value if len(entries) > 1 and isinstance(entries[1], Constant) else 0
        if not isinstance(dim, int):
            raise UnsupportedOpError(kind, source, detail="a run-time dim for a list of run-time length")
        if kind == "aten::stack" or (-rank <= dim < rank and dim % rank != items.dim):
            stacked = self.ragged_stacked(kind, items, dim, source)
            return self.stacked_concatenation(kind, stacked, entries, source)
        if not -rank <= dim < rank:
            raise UnsupportedOpError(kind, source, detail=f"dim {dim} on a list of tensors of rank {rank}")
        length = self.ragged_length(items, source)
        if not isinstance(length, Constant):
            # PyTorch refuses to concatenate an empty list; the concatenated form would be empty.
            message = "RuntimeError: torch.cat(): expected a non-empty list of Tensors"
            check = (length, Constant(1), Constant(INT64_MAX), Constant(f"{message} ({source})"))
            self.nodes.append(HostOp(CHECK_INDEX, check, (), source))
        return items.value

    def ragged_stacked(self, kind: str, items: RaggedList, dim: int, source: str) -> Value:
        """The list's tensors stacked on dim 0, after PyTorch's checks for `torch.stack(xs, dim)` or
        `torch.cat(xs, dim)` along a dim other than the list's: the list is not empty, and its
        tensors have one size s along the list's dim. Tensor k is then the values at k * s + j
        (j < s) along that dim: a gather, not a reshape of [.., n * s, ..] into [.., n, s, ..],
        which torch.export types only where it can prove n * s equal to that size (it cannot:
        both come from the host, and it specialized them to the examples instead).

        n, s and the number of sizes other than s are read back from the device (one sync, three
        reads). n is a shape read elsewhere, but not here: IREE 3.13 sizes a tensor made after a
        loop with an exit from the shape of the sizes the loop carried wrongly (`torch.stack` of a
        list grown in a `while` loop corrupted the heap, or gave 12 tensors for 2)."""
        value, along = items.value, items.dim
        length = self.ragged_length(items, source)
        if not isinstance(length, Constant):
            check = (length, Constant(1), Constant(INT64_MAX), Constant(f"{EMPTY_LIST_ERRORS[kind]} ({source})"))
            self.nodes.append(HostOp(CHECK_INDEX, check, (), source))
        total, largest = overload_of("aten::sum.default"), overload_of("aten::max.default")
        # n counted on the device: no size is -1, so every element of `sizes != -1` counts one tensor.
        (present,) = self.emit_tensor_op(overload_of("aten::ne.Scalar"), [items.sizes, Constant(-1)], [], source)
        (number,) = self.emit_tensor_op(total, [present], [], source, name="count")
        (widest,) = self.emit_tensor_op(largest, [items.sizes], [], source, name="size")
        (differs,) = self.emit_tensor_op(overload_of("aten::ne.Tensor"), [items.sizes, widest], [], source)
        (mismatches,) = self.emit_tensor_op(total, [differs], [], source)
        count = self.read_int(number, max(hint_of(length), 2), source)
        size = self.read_int(widest, max(value.type.hint[along] // max(hint_of(length), 1), 2), source)
        if kind == "aten::stack":
            message = "RuntimeError: stack expects each tensor to be equal size"
        else:
            message = f"RuntimeError: Sizes of tensors must match except in dimension {dim % value.type.rank}"
        check = (self.read_int(mismatches, 0, source), Constant(0), Constant(1), Constant(f"{message} ({source})"))
        self.nodes.append(HostOp(CHECK_INDEX, check, (), source))
        arange, mul = overload_of("aten::arange.default"), overload_of("aten::mul.Scalar")
        unsqueeze, add = overload_of("aten::unsqueeze.default"), overload_of("aten::add.Tensor")
        int64 = [("dtype", Constant(torch.int64))]
        (rows,) = self.emit_tensor_op(arange, [count], int64, source, name="rows")
        (starts,) = self.emit_tensor_op(mul, [rows, size], [], source, name="starts")
        (starts,) = self.emit_tensor_op(unsqueeze, [starts, Constant(1)], [], source, name="starts")
        (offsets,) = self.emit_tensor_op(arange, [size], int64, source, name="offsets")
        (index,) = self.emit_tensor_op(add, [starts, offsets], [], source, name="index")
        movedim = overload_of("aten::movedim.int")
        moved = value
        if along != 0:
            (moved,) = self.emit_tensor_op(movedim, [value, Constant(along), Constant(0)], [], source)
        gather = overload_of("aten::index.Tensor")
        (stacked,) = self.emit_tensor_op(gather, [moved, ListArg((index,))], [], source, name="stacked")
        if along != 0:
            (stacked,) = self.emit_tensor_op(movedim, [stacked, Constant(1), Constant(along + 1)], [], source)
        return stacked


def _item_hint(items: RaggedList) -> int:
    """The example size of one tensor of `items` along its dim: their example size over their
    example number, where that is at least 2 (a list of tensors as long as the batch, appended
    once per step and concatenated along the batch: each is added to the batch's rows again), else
    2 at most (within the example's size). `fit_ragged_hint` keeps the two in step."""
    total = items.value.type.hint[items.dim]
    _, each, _ = _example_split(total, tensor_type_of(items.sizes))
    return each if each >= 2 else min(2, total)


def _example_split(total: int, sizes: Any) -> tuple[int, int, bool]:
    """A ragged list's example number of tensors (the example of its 1-D `sizes`, else 0), the
    example size of each along the list's dim out of their `total`, and whether they divide it
    evenly. `_item_hint` and `fit_ragged_hint` both take an item's size so, to agree on it."""
    count = sizes.hint[0] if sizes is not None and sizes.rank == 1 else 0
    if count <= 0:
        return count, 0, True
    return count, total // count, total % count == 0


def ragged_positions(structure: Any) -> dict[int, tuple[int, int]]:
    """For each RaggedList of a flattened structure (`structured.flatten_entries`): the position of
    its value among the leaves -> (the position of its sizes, the dim it is concatenated along)."""
    found: dict[int, tuple[int, int]] = {}
    position = 0

    def walk(node: Any) -> None:
        nonlocal position
        if node == "leaf":
            position += 1
            return
        kind, items, meta = node
        if kind == "ragged_list":
            found[position] = (position + 1, meta[0])
        position += {"ragged_list": 2, "ragged_ints": 2, "tensor_list": 1, "optional": 1, "key": 1}.get(kind, 0)
        for item in items:
            walk(item)

    for node in structure:
        walk(node)
    return found


def fit_ragged_hint(type_: Any, position: int, raggeds: dict[int, tuple[int, int]], sides: list) -> Any:
    """`type_`, the join of a RaggedList's values on several paths (each path's leaves in `sides`),
    with its example size along the list's dim as many tensors long as the join of their numbers,
    where every path's tensors have one example size along it.

    The join of an empty list and a list of one tensor n long is 2 tensors (the least example size
    torch.export keeps dynamic) but n long: an item then took the example size n / 2, and adding it
    back to the n rows it came from failed to type (fuzzer seeds 95023, 95112, 95114, 95122)."""
    if position not in raggeds or not isinstance(type_, TensorType):
        return type_
    sizes_position, dim = raggeds[position]
    if type_.shape[dim] is not None:
        return type_
    each, counts = set(), []
    for leaves in sides:
        value, sizes = tensor_type_of(leaves[position]), tensor_type_of(leaves[sizes_position])
        if value is None or sizes is None or sizes.rank != 1:
            continue
        count, one, even = _example_split(value.hint[dim], sizes)
        counts.append(count)
        if count > 0:
            if not even:
                return type_
            each.add(one)
    if len(each) != 1 or min(each) < 2:
        return type_
    count = counts[0] if len(set(counts)) == 1 else max(*counts, 2)  # as `values.join_types` joins them
    hint = tuple(min(each) * count if d == dim else h for d, h in enumerate(type_.hint))
    return TensorType(type_.dtype, type_.shape, hint)


def _kept_along(dims: list[int], concatenation_dims: set[int]) -> int:
    """The dim a list that starts empty is kept concatenated along, of its tensors' dynamic `dims`:
    the one the model concatenates lists along, else the first (torch.cat's default, dim 0)."""
    preferred = [d for d in dims if d in concatenation_dims]
    return preferred[0] if len(preferred) == 1 else min(preferred or dims)


# PyTorch's errors for `torch.stack` / `torch.cat` of an empty list.
EMPTY_LIST_ERRORS = {
    "aten::stack": "RuntimeError: stack expects a non-empty TensorList",
    "aten::cat": "RuntimeError: torch.cat(): expected a non-empty list of Tensors",
}


def dims_read_along(lists: list[torch._C.Value]) -> set[int]:
    """The dims of the `torch.cat`s that read `lists`, directly or as items of a list of lists
    (Emformer's `[torch.cat(mask) for mask in masks_to_concat]`); -1 for one that is not a
    constant dim or is negative, so that such a read makes the set ambiguous."""
    dims: set[int] = set()
    pending, seen = list(lists), set()
    while pending:
        value = pending.pop()
        if value.unique() in seen:
            continue
        seen.add(value.unique())
        for use in value.uses():
            kind, inputs = use.user.kind(), list(use.user.inputs())
            if kind == "aten::cat" and use.offset == 0:
                dim = inputs[1].toIValue() if len(inputs) > 1 and inputs[1].node().kind() == "prim::Constant" else None
                dims.add(dim if isinstance(dim, int) and dim >= 0 else -1)
            elif kind == "aten::stack" and use.offset == 0:
                dims.add(-1)  # stacked: the dim its tensors agree in is not the model's to say here
            elif kind == "prim::ListConstruct" or (kind == "aten::__getitem__" and use.offset == 0):
                if kind == "prim::ListConstruct" or use.user.output().type().kind() == "ListType":
                    pending.append(use.user.output())
    return dims


def concatenation_dims(graph: torch._C.Graph, mutated_lists: set[int]) -> tuple[set[int], bool]:
    """The constant dims `torch.cat` joins lists built at run time along (not literals such as
    `torch.cat([x, h], 1)`), and whether `torch.stack` stacks any such list: where a list's
    tensors vary in several dims, the dim the model concatenates along is the list's dim; a list
    whose tensors only have a dynamic dim is concatenated along it only if the model concatenates
    along that dim and stacks no list (Tacotron2 stacks its `alignments`, as wide as the encoder's
    steps: those are stacked, see `tensor_lists.empty_stacked`)."""
    dims: set[int] = set()
    stacks = False
    for kind in ("aten::cat", "aten::stack"):
        for node in graph.findAllNodes(kind):
            inputs = list(node.inputs())
            literal = inputs[0].node().kind() == "prim::ListConstruct" and inputs[0].unique() not in mutated_lists
            if literal or len(inputs) < 2:
                continue
            if kind == "aten::stack":
                stacks = True
                continue
            dim = inputs[1].toIValue() if inputs[1].node().kind() == "prim::Constant" else None
            if isinstance(dim, int) and dim >= 0:
                dims.add(dim)
    return dims, stacks


def list_concatenation_dims(graph: torch._C.Graph) -> dict[int, set[int] | None]:
    """For each list value that reaches a `torch.cat` or `torch.stack` of a list (through list
    additions, slices and copies: `torch.cat(pieces + [h], 1)`), the dims it is concatenated along,
    or None where one of those is a `stack` or a dim not known before the run. A model that joins
    one list along its width and another along its batch, both dynamic, has both dims in
    `concatenation_dims`; each list's own is known only from here (fuzzer seed 80023)."""
    dims: dict[int, set[int] | None] = {}

    def reach(value: torch._C.Value, dim: int | None, seen: set[int]) -> None:
        if value.unique() in seen:
            return
        seen.add(value.unique())
        known = dims.setdefault(value.unique(), set())
        if known is not None:
            if dim is None:
                dims[value.unique()] = None
            else:
                known.add(dim)
        producer = value.node()
        if producer.kind() in ("aten::add", "aten::slice", "aten::list", "aten::copy"):
            for operand in producer.inputs():
                if operand.type().kind() == "ListType":
                    reach(operand, dim, seen)
        elif producer.kind() in ("prim::Loop", "prim::If"):  # `xs = xs + [x]` in a loop or a branch
            position = value.offset()
            if producer.kind() == "prim::Loop":
                reach(producer.inputsAt(position + 2), dim, seen)
            for block in producer.blocks():
                reach(list(block.outputs())[position + (producer.kind() == "prim::Loop")], dim, seen)

    for kind in ("aten::cat", "aten::stack"):
        for node in graph.findAllNodes(kind):
            inputs = list(node.inputs())
            if len(inputs) < 2 or inputs[0].type().kind() != "ListType":
                continue
            dim = inputs[1].toIValue() if inputs[1].node().kind() == "prim::Constant" else None
            along = dim if kind == "aten::cat" and isinstance(dim, int) and dim >= 0 else None
            reach(inputs[0], along, set())
    return dims
