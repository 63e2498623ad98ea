"""Rewrites that keep indexed reads and writes inside their tensors: every index is clamped to its
dim's range (negatives wrapped first where PyTorch wraps them), since a read or write past the end
in IREE touches memory outside the buffer. Where an index is out of range the checks of
`guards.py` raise as PyTorch does (a segment that computes its own indices returns the position of
its first one out of range, which the host checks); the clamping keeps the kernel in bounds.
`decompositions.decomposition_table` installs `IN_RANGE`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

aten = torch.ops.aten


def _clamped(index: torch.Tensor, size: Any, wrap_negative: bool) -> torch.Tensor:
    if wrap_negative:
        index = aten.where.self(aten.lt(index, 0), aten.add(index, size), index)
    return aten.clamp(index, 0, size - 1)


def embedding_in_range(weight: torch.Tensor, indices: torch.Tensor, *rest: Any) -> torch.Tensor:
    """`embedding` with its indices clamped to the table's rows.

    >>> embedding_in_range(torch.eye(3), torch.tensor([1, 7])).tolist()
    [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    return aten.embedding(weight, _clamped(indices, weight.shape[0], False), *rest)


def _nonnegative(dim: int, input: torch.Tensor) -> int:
    """`dim` counted from the front: torch-mlir's scatter conversion crashes (SIGSEGV in
    ConvertAtenScatterOp) on `x.scatter(-1, i, src)`."""
    return dim % input.dim() if input.dim() else dim


def index_select_in_range(input: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    dim = _nonnegative(dim, input)
    return aten.index_select(input, dim, _clamped(index, input.shape[dim], False))


def gather_in_range(input: torch.Tensor, dim: int, index: torch.Tensor, sparse_grad: bool = False) -> torch.Tensor:
    dim = _nonnegative(dim, input)
    return aten.gather(input, dim, _clamped(index, input.shape[dim], False), sparse_grad=sparse_grad)


def index_in_range(input: torch.Tensor, indices: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """`x[i]` with index tensors: negatives wrap as in PyTorch, then every index is clamped."""
    kept = [
        index if index is None or index.dtype == torch.bool else _clamped(index, input.shape[dim], True)
        for dim, index in enumerate(indices)
    ]
    return aten.index.Tensor(input, kept)


def index_put_in_range(
    input: torch.Tensor, indices: Sequence[torch.Tensor | None], values: torch.Tensor, accumulate: bool = False
) -> torch.Tensor:
    """`x[i] = v` with index tensors: negatives wrap as in PyTorch, then every index is clamped.

    A 0-d index (`remaining[i] = 0.0` with `i = scores.argmax()`, as in non-maximum suppression)
    becomes a 1-element one: torch-mlir's TorchToTMTensor crashes on a 0-d index of
    `index_put.hacked_twin` (iree-compile exits with SIGSEGV in ConvertAtenIndexPutHackedTwinOp).
    Indices broadcast together, and the values broadcast to the indexed shape, so the write is the
    same.

    >>> index_put_in_range(torch.zeros(3), [torch.tensor(1)], torch.tensor(5.0)).tolist()
    [0.0, 5.0, 0.0]
    """
    masked = _masked_write(input, indices, values, accumulate)
    if masked is not None:
        return masked
    kept = [
        index if index is None or index.dtype == torch.bool else _clamped(index, input.shape[dim], True)
        for dim, index in enumerate(indices)
    ]
    kept = [aten.reshape(index, [1]) if index is not None and index.dim() == 0 else index for index in kept]
    index = next((index for index in kept if index is not None), None)
    return aten.index_put.default(_unshared(input, index), kept, values, accumulate)


def _unshared(input: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    """`input`, computed from the write's own index (less a 0.0 made from it), for the write to go
    into: IREE 3.13 writes a scatter in place into its destination, and where that destination is a
    fill (`torch.zeros(n, 4)`: every fill of that value and shape is one tensor to IREE) that is also
    a result or the destination of another write, it did not copy it first. A segment that returned
    `z` and `z.index_add(0, i, h)` returned them swapped, and of two `zeros(...).index_add` the
    second started from the first's sums. Subtracting 0.0 keeps every value (-0.0, NaN and infinities
    too); made from the index at run time, IREE cannot fold it away.

    >>> _unshared(torch.tensor([-0.0, 1.5]), torch.tensor([1])).tolist()
    [-0.0, 1.5]
    """
    if index is None:
        return input
    zero = aten.mul(aten.sum(aten.to.dtype(index, torch.float32)), 0.0)
    if input.dtype == torch.bool:
        return aten.logical_or(input, aten.lt(zero, 0.0))
    return aten.sub.Tensor(input, aten.to.dtype(zero, input.dtype))


def _masked_write(
    input: torch.Tensor, indices: Sequence[torch.Tensor | None], values: torch.Tensor, accumulate: bool
) -> torch.Tensor | None:
    """`x[mask] = v` (or `x[:, mask] += v`) with one value for every selected element, as a `where`;
    None for other writes.

    torch-mlir lowers a boolean index through `nonzero`, whose result it pads to the mask's size
    with index 0: with no element selected, `scores[finished] = 0.0` zeroed `scores[0]` (a wrong
    result, not an error). A `where` selects nothing then, and needs no data-dependent size.

    >>> _masked_write(torch.ones(3), [torch.tensor([False, True, False])], torch.tensor(5.0), False).tolist()
    [1.0, 5.0, 1.0]
    """
    leading = 0
    while leading < len(indices) and indices[leading] is None:
        leading += 1
    if leading == len(indices) or any(index is not None for index in indices[leading + 1 :]):
        return None
    mask = indices[leading]
    if mask.dtype != torch.bool:
        return None
    trailing = input.dim() - leading - mask.dim()
    if values.dim() > trailing:
        if values.numel() != 1:
            return None
        values = aten.reshape(values, [])
    shape = [1] * leading + list(mask.shape) + [1] * trailing
    mask = aten.reshape(mask, shape)
    values = aten.to.dtype(values, input.dtype)
    if accumulate:
        return aten.where.self(mask, aten.add.Tensor(input, values), input)
    return aten.where.self(mask, values, input)


def _writes_in_range(overload: Any, wrap_negative: bool) -> Any:
    """A rewrite of `overload(input, dim, index, ...)` (a scatter or an indexed write) with its index
    clamped, into a destination of its own (`_unshared`)."""

    def rewritten(input: torch.Tensor, dim: int, index: torch.Tensor, *rest: Any, **kwargs: Any) -> torch.Tensor:
        dim = _nonnegative(dim, input)
        index = _clamped(index, input.shape[dim], wrap_negative)
        return overload(_unshared(input, index), dim, index, *rest, **kwargs)

    rewritten.__name__ = f"{overload.__name__.replace('.', '_')}_in_range"
    return rewritten


def scatter_reduce_in_range(
    input: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str, *, include_self: bool = True
) -> torch.Tensor:
    """`scatter_reduce` with its index clamped (`_writes_in_range`); without `include_self`, the
    reduction over `src` alone into a tensor of the reduction's identity, kept where any index
    points and `input` elsewhere (a mean: the sums over the counts).

    torch-mlir's own form of `include_self=False`, the one PyTorch Geometric's max, min and mean
    aggregations take (`new_zeros(...).scatter_reduce_(0, index, src, "amax", include_self=False)`),
    fails in IREE 3.13 over a run-time number of rows ("exceeded stack allocation limit"), where the
    reduction with `include_self` compiles.

    >>> x, i = torch.full((3,), 5.0), torch.tensor([0, 0, 2])
    >>> scatter_reduce_in_range(x, 0, i, torch.tensor([1.0, -2.0, 3.0]), "amax", include_self=False).tolist()
    [1.0, 5.0, 3.0]
    """
    reduce_in_range = _writes_in_range(aten.scatter_reduce.two, False)
    floating = input.dtype.is_floating_point
    dim = _nonnegative(dim, input)
    if include_self or reduce not in _IDENTITIES or (reduce == "mean" and not floating):
        return reduce_in_range(input, dim, index, src, reduce, include_self=include_self)
    index = _clamped(index, input.shape[dim], False)
    ones = aten.ones_like(index, dtype=input.dtype)
    counts = _writes_in_range(aten.scatter_add.default, False)(aten.zeros_like(input), dim, index, ones)
    if reduce == "mean":
        sums = _writes_in_range(aten.scatter_add.default, False)(aten.zeros_like(input), dim, index, src)
        reduced = aten.div.Tensor(sums, aten.clamp(counts, 1))
    else:
        identity = _IDENTITIES[reduce](input.dtype)
        start = aten.full_like(input, identity)
        reduced = reduce_in_range(start, dim, index, src, reduce, include_self=True)
    return aten.where.self(aten.gt(counts, 0), reduced, input)


def _extreme(dtype: torch.dtype, lowest: bool) -> float | int:
    if dtype.is_floating_point:
        return float("-inf") if lowest else float("inf")
    info = torch.iinfo(dtype) if dtype != torch.bool else None
    return (info.min if lowest else info.max) if info is not None else (not lowest)


# The value a reduction starts from when `include_self` leaves the destination's value out.
_IDENTITIES = {
    "sum": lambda dtype: 0,
    "prod": lambda dtype: 1,
    "amax": lambda dtype: _extreme(dtype, True),
    "amin": lambda dtype: _extreme(dtype, False),
    "mean": lambda dtype: 0,
}

_INDEX_FILLS = (aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
IN_RANGE = {
    aten.embedding.default: embedding_in_range,
    aten.index_select.default: index_select_in_range,
    aten.gather.default: gather_in_range,
    aten.index.Tensor: index_in_range,
    aten.index_put.default: index_put_in_range,
    # A write past the end would write outside the buffer.
    **{
        overload: _writes_in_range(overload, False)
        for overload in (
            aten.scatter.src,
            aten.scatter.value,
            aten.scatter_add.default,
            aten.index_add.default,
            aten.index_copy.default,
        )
    },
    aten.scatter_reduce.two: scatter_reduce_in_range,
    **{overload: _writes_in_range(overload, True) for overload in _INDEX_FILLS},
}
