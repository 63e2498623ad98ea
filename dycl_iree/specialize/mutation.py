"""In-place writes through views, functionalized: `keep[count] = i`, `out[:, t] = step`, `x.view(-1)[0] = v`.

TorchScript writes `x[i] = v` as `aten::copy_(aten::select(x, 0, i), v)`: the write goes into a
view, and PyTorch's aliasing makes it visible in `x`. The Program is SSA, so the visitor computes
the written view functionally (`copy_` -> `copy`) and this module writes it back into each base
it was taken from, up to the tensor that owns the memory, with the scatter that inverts each view
(`select` -> `select_scatter`, `slice` -> `slice_scatter`, a reshape -> a reshape back, a
transpose -> the same transpose). The bases are rebound to the new values, so a write inside a
branch or a loop makes them outputs or loop-carried values like any other mutated value
(`aliasing.mutated_outer` walks the same chains).

A view taken before the write and read after it must show the written values: its entry is
replaced by a `StaleView`, and reading it takes the view again from its base's new value (so two
views of one tensor can be written in turn, in a loop too: views of a tensor that a loop or branch
writes are stale inside and after it). Views that cannot be written back or taken again (several
views at once from `unbind` / `split`, an `expand`) are refused at the write or read, with the
rewrite.

Example:
    >>> link = ViewLink(base_ts_value, "aten::select.int", (Constant(0), index))   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..errors import SpecializeError
from ..program import Constant, ListArg, Value
from .schemas import call_overload, overload_of
from .values import real_value, walk_args


@dataclass(frozen=True)
class ViewLink:
    """How a TorchScript value was made as a view of `base`: the view op and its other arguments."""

    base: torch._C.Value
    target: str  # "aten::select.int", ...; "" for the tensor itself (`.to(device)`, `.contiguous()`)
    args: tuple


@dataclass(frozen=True)
class StaleView:
    """A view whose base was written after it was taken: read, it is taken again (`fresh_view`)."""

    link: ViewLink
    source: str  # the line of the write


# Views whose inverse is a reshape of the written view to the base's shape.
_RESHAPES = {
    "aten::view.default",
    "aten::reshape.default",
    "aten::view_as.default",
    "aten::reshape_as.default",
    "aten::flatten.using_ints",
    "aten::unflatten.int",
    "aten::squeeze.default",
    "aten::squeeze.dim",
    "aten::squeeze.dims",
    "aten::unsqueeze.default",
    "aten::_reshape_alias.default",
}
# Views that are the tensor itself.
_IDENTITIES = {"", "aten::alias.default", "aten::detach.default", "aten::contiguous.default"}
# Views written back by the same op with the same arguments (they are their own inverse).
_SELF_INVERSE = {"aten::transpose.int", "aten::t.default", "aten::swapaxes.default", "aten::swapdims.default"}

# The target of views made several at once (`unbind`, `split`, `chunk`): neither written back nor
# taken again (which of them a list item is, is not tracked).
SEVERAL = "several views at once"

WRITABLE_VIEWS = (
    _RESHAPES
    | _IDENTITIES
    | _SELF_INVERSE
    | {
        "aten::select.int",
        "aten::slice.Tensor",
        "aten::narrow.default",
        "aten::diagonal.default",
        "aten::permute.default",
        "aten::movedim.int",
    }
)


def view_chain(views: dict[int, ViewLink], written: torch._C.Value, source: str) -> list[ViewLink]:
    """The links from `written` up to the tensor that owns its memory (empty if it is no view)."""
    chain: list[ViewLink] = []
    value = written
    while value.unique() in views:
        link = views[value.unique()]
        if link.target not in WRITABLE_VIEWS:
            what = "one of several views (unbind, split, chunk)" if link.target == SEVERAL else link.target
            raise SpecializeError(
                f"in-place write into {what} of another tensor ({source}): write the result "
                "with torch.where / index_put, or clone() the view first"
            )
        chain.append(link)
        value = link.base
    return chain


def write_back(spec: Any, written: torch._C.Value, new: Any, source: str) -> None:
    """After an in-place op made `new` the value of `written`, write it into every base of the view.

    `spec` is the visitor: this binds TorchScript values and emits the scatters through it."""
    chain = view_chain(spec.views, written, source)
    if not chain:
        return
    for link in chain:
        base = spec.entry(link.base)
        new = _scatter(spec, link, base, new, source)
        spec.bind(link.base, new)
    touched = {written.unique()} | {link.base.unique() for link in chain}
    mark_stale(spec, [chain[-1].base], source, keep=touched)


def mark_stale(spec: Any, written: list, source: str, keep: set[int] = frozenset()) -> None:
    """Every view (but those in `keep`) of the memory of the TorchScript values `written` shows
    old values now: its entry becomes a StaleView, taken again when read."""
    roots = {_root_of(spec.views, value.unique()) for value in written}
    for unique, link in list(spec.views.items()):
        if unique not in keep and unique in spec.env and _root_of(spec.views, unique) in roots:
            spec.env[unique] = StaleView(link, source)


def fresh_view(spec: Any, stale: StaleView, name: str) -> Any:
    """A stale view taken again from its base's current value (emitted where it is read)."""
    if stale.link.target == SEVERAL:
        raise SpecializeError(
            f"{name} is read after a write into the tensor it is a view of ({stale.source}), and it is one "
            "of several views made at once (unbind, split, chunk): index the tensor again after the write"
        )
    base = spec.entry(stale.link.base)
    if stale.link.target == "":
        return base
    return apply(spec, stale.link.target, [base, *stale.link.args], stale.source)


def _root_of(views: dict[int, ViewLink], unique: int) -> int:
    while unique in views and views[unique].base.unique() != unique:
        unique = views[unique].base.unique()
    return unique


def _scatter(spec: Any, link: ViewLink, base: Any, view: Any, source: str) -> Any:
    """`base` with `view` (the written value of `link`'s view of it) in its place."""
    target, args = link.target, link.args
    if target in _IDENTITIES:
        return view
    if target == "aten::select.int":
        dim, index = args
        if not (isinstance(index, Constant) and index.value >= 0):
            # `x[-1] = v`, or an index known only at run time: torch-mlir's select_scatter does not
            # wrap a negative index as `select` does. (index + size) % size, on the host.
            if isinstance(base, Constant):
                size = Constant(base.value.shape[dim.value])
            else:
                size = spec.size_of(base, dim, source)
            index = spec.emit_host("aten::add.int", (index, size), "int", source)
            index = spec.emit_host("aten::remainder.int", (index, size), "int", source)
        return apply(spec, "aten::select_scatter.default", [base, view, dim, index], source)
    if target == "aten::slice.Tensor":
        return apply(spec, "aten::slice_scatter.default", [base, view, *args], source)
    if target == "aten::narrow.default":
        dim, start, length = args
        end = spec.emit_host("aten::add.int", (start, length), "int", source)
        return apply(spec, "aten::slice_scatter.default", [base, view, dim, start, end, Constant(1)], source)
    if target == "aten::diagonal.default":
        return apply(spec, "aten::diagonal_scatter.default", [base, view, *args], source)
    if target in _RESHAPES:
        return apply(spec, "aten::reshape.default", [view, _sizes(spec, base, source)], source)
    if target in _SELF_INVERSE:
        return apply(spec, target, [view, *args], source)
    if target == "aten::permute.default":
        dims = [int(d) % len(real_value(args[0])) for d in real_value(args[0])]
        inverse = [dims.index(d) for d in range(len(dims))]
        return apply(spec, "aten::permute.default", [view, Constant(inverse)], source)
    if target == "aten::movedim.int":
        return apply(spec, "aten::movedim.int", [view, args[1], args[0]], source)
    raise SpecializeError(f"internal: no write-back for {target} ({source})")


def _sizes(spec: Any, tensor: Any, source: str) -> Any:
    if isinstance(tensor, Constant):
        return Constant(list(tensor.value.shape))
    return ListArg(tuple(spec.size_of(tensor, dim, source) for dim in range(tensor.type.rank)))


def apply(spec: Any, target: str, args: list, source: str) -> Any:
    """`target(*args)`: computed now when every argument is known at export time, else emitted."""
    overload = overload_of(target)
    if not any(isinstance(arg, Value) for arg in walk_args(args)):
        return Constant(call_overload(overload, args, [], real_value, source, target))
    (result,) = spec.emit_tensor_op(overload, args, [], source, name="written")
    return result
