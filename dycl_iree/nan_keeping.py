"""Rewrites of the ops torch-mlir lowers with comparisons that drop NaN: clamp(NaN) gave the bound,
maximum and minimum the other operand, argmax/argmin (and max.dim's indices) the first index, where
PyTorch propagates NaN and takes a NaN as the extreme. The rewrites use ordered comparisons and
`where`, which IREE fuses into one element-wise kernel, and amax/amin, which propagate NaN. Integer
tensors have no NaN and keep the op (`NotImplemented`). `decompositions.decomposition_table`
installs `KEEPING_NAN`.
"""

from __future__ import annotations

from typing import Any

import torch

aten = torch.ops.aten


def clamp_keeping_nan(input: torch.Tensor, min: Any = None, max: Any = None) -> torch.Tensor:
    """`clamp` (Scalar or Tensor bounds) as two `where`s: a NaN fails both comparisons and stays.

    >>> x = torch.tensor([float("nan"), -3.0, 0.5, 3.0])
    >>> clamp_keeping_nan(x, -1.0, 1.0).tolist()[1:], clamp_keeping_nan(x, -1.0, 1.0).isnan()[0].item()
    ([-1.0, 0.5, 1.0], True)
    """
    if not input.dtype.is_floating_point:
        return NotImplemented
    out = input
    if min is not None:
        out = aten.where.self(aten.lt(out, min), _like(min, out), out)
    if max is not None:
        out = aten.where.self(aten.gt(out, max), _like(max, out), out)
    return out


def _like(bound: Any, input: torch.Tensor) -> torch.Tensor:
    if isinstance(bound, torch.Tensor):
        return bound.to(input.dtype)
    return aten.full_like(input, bound)


def hardtanh_keeping_nan(input: torch.Tensor, min_val: float = -1.0, max_val: float = 1.0) -> torch.Tensor:
    return clamp_keeping_nan(input, min_val, max_val)


def clamp_min_keeping_nan(input: torch.Tensor, min: Any) -> torch.Tensor:
    return clamp_keeping_nan(input, min, None)


def clamp_max_keeping_nan(input: torch.Tensor, max: Any) -> torch.Tensor:
    return clamp_keeping_nan(input, None, max)


def maximum_keeping_nan(input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """Element-wise max; NaN if either operand is NaN (PyTorch's `maximum`)."""
    return _extreme_keeping_nan(input, other, aten.gt)


def minimum_keeping_nan(input: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    return _extreme_keeping_nan(input, other, aten.lt)


def _extreme_keeping_nan(input: torch.Tensor, other: torch.Tensor, wins: Any) -> torch.Tensor:
    if not (input.dtype.is_floating_point and other.dtype.is_floating_point) or input.dtype != other.dtype:
        return NotImplemented
    picked = aten.where.self(wins(input, other), input, other)
    picked = aten.where.self(aten.ne(other, other), other, picked)
    return aten.where.self(aten.ne(input, input), input, picked)


def argmax_keeping_nan(input: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    """The first index of the maximum, a NaN counting as the maximum (PyTorch's `argmax`).

    >>> argmax_keeping_nan(torch.tensor([[1.0, float("nan"), 3.0], [1.0, 5.0, 5.0]]), 1).tolist()
    [1, 1]
    """
    return _first_index_of_extreme(input, dim, keepdim, aten.amax)


def argmin_keeping_nan(input: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    return _first_index_of_extreme(input, dim, keepdim, aten.amin)


def max_dim_keeping_nan(input: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    if not input.dtype.is_floating_point:
        return NotImplemented
    return aten.amax(input, [dim], keepdim), _first_index_of_extreme(input, dim, keepdim, aten.amax)


def min_dim_keeping_nan(input: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    if not input.dtype.is_floating_point:
        return NotImplemented
    return aten.amin(input, [dim], keepdim), _first_index_of_extreme(input, dim, keepdim, aten.amin)


def _first_index_of_extreme(input: torch.Tensor, dim: int | None, keepdim: bool, extreme: Any) -> torch.Tensor:
    """The first index along `dim` where `input` equals its `extreme` (amax or amin propagate NaN, so
    a NaN row's extreme is NaN and its first NaN is the answer), without argmax itself."""
    if not input.dtype.is_floating_point:
        return NotImplemented
    flat = dim is None
    values = input.reshape(-1) if flat else input
    axis = 0 if flat else dim % max(values.dim(), 1)
    if values.dim() == 0:
        return aten.zeros_like(values, dtype=torch.int64)
    target = extreme(values, [axis], True)
    hit = aten.logical_or(aten.eq(values, target), aten.logical_and(aten.ne(values, values), aten.ne(target, target)))
    size = values.shape[axis]
    shape = [1] * values.dim()
    shape[axis] = -1
    positions = aten.arange(size, dtype=torch.int64, device=values.device).reshape(shape)
    first = aten.amin(aten.where.self(hit, positions, aten.full_like(positions, size)), [axis], keepdim or flat)
    if flat:
        return first.reshape([1] * input.dim()) if keepdim else first.reshape([])
    return first


KEEPING_NAN = {
    aten.clamp.default: clamp_keeping_nan,
    aten.clamp.Tensor: clamp_keeping_nan,
    aten.clamp_min.default: clamp_min_keeping_nan,
    aten.clamp_max.default: clamp_max_keeping_nan,
    aten.hardtanh.default: hardtanh_keeping_nan,
    aten.maximum.default: maximum_keeping_nan,
    aten.minimum.default: minimum_keeping_nan,
    aten.argmax.default: argmax_keeping_nan,
    aten.argmin.default: argmin_keeping_nan,
    aten.max.dim: max_dim_keeping_nan,
    aten.min.dim: min_dim_keeping_nan,
}
