"""Ops that torch-mlir does not lower, written as comparisons counted along a dim (`searchsorted`, a
stable `sort` / `argsort(stable=True)`, `kthvalue`, `median`, `cummax` / `cummin`) or as the
differences they measure (`cdist`).

Where PyTorch searches or sorts, these compare each element with every other along the dim and
count: n^2 compares over n elements (m x n for a search of m values in n), which IREE fuses into
its reductions without an n x n tensor. That suits what models search and sort at run time (a
CDF's bins, a beam's candidates, a batch's scores: hundreds to thousands), exactly, with NaN
placed where PyTorch places it. `decompositions.decomposition_table` installs `TABLE`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

aten = torch.ops.aten


def searchsorted_by_counting(
    sorted_sequence: torch.Tensor,
    self: torch.Tensor,
    *,
    out_int32: bool = False,
    right: bool = False,
    side: str | None = None,
    sorter: torch.Tensor | None = None,
) -> Any:
    """`torch.searchsorted(seq, values)`: how many of the sequence's elements (of its last dim,
    per row where it has more dims) lie before each value: those not at least the value (`right`:
    not greater), as PyTorch's binary search decides it, so a NaN value goes after every element.
    For a sequence that holds NaN itself the binary search's answer depends on where it probes,
    which counting does not follow. A `sorter` keeps the op (refused, with its line).

    >>> seq = torch.tensor([0.1, 0.5, 0.9, 1.0])
    >>> searchsorted_by_counting(seq, torch.tensor([float("nan"), 0.5, -1.0, 2.0])).tolist()
    [4, 1, 0, 4]
    >>> searchsorted_by_counting(seq, torch.tensor([0.5]), right=True).tolist()
    [2]
    """
    if sorter is not None:
        return NotImplemented
    right = right or side == "right"
    if sorted_sequence.dim() == 1:
        elements = aten.reshape(sorted_sequence, [1] * self.dim() + [-1])
    else:
        elements = aten.unsqueeze(sorted_sequence, -2)  # [..., 1, n] against [..., m, 1]
    values = aten.unsqueeze(self, -1)
    reached = aten.gt.Tensor(elements, values) if right else aten.ge.Tensor(elements, values)
    before = aten.logical_not(reached)
    return aten.sum.dim_IntList(before, [-1], dtype=torch.int32 if out_int32 else torch.int64)


def searchsorted_of_a_number(
    sorted_sequence: torch.Tensor, self: Any, *, out_int32: bool = False, right: bool = False, **rest: Any
) -> Any:
    value = aten.scalar_tensor(self, dtype=sorted_sequence.dtype)
    return searchsorted_by_counting(sorted_sequence, value, out_int32=out_int32, right=right, **rest)


def stable_sort_by_counting(
    self: torch.Tensor, *, stable: bool | None = None, dim: int = -1, descending: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """`torch.sort(x, stable=True)` (and `argsort(stable=True)`, which makes it): each element's
    place is how many elements come before it, those ordered before it and the equal ones at
    smaller indices; NaN after every number (before, descending), in their order. The indices are
    the positions written at those places, the values gathered at the indices.

    torch-mlir lowers `sort` but not `sort.stable` ("failed to legalize operation
    'torch.operator'"), and its `sort` does not order NaN last (README, Known traps).

    >>> x = torch.tensor([3.0, float("nan"), 1.0, 3.0, -0.0, 0.0])
    >>> stable_sort_by_counting(x, stable=True)[1].tolist()
    [4, 5, 2, 0, 3, 1]
    >>> stable_sort_by_counting(x, stable=True, descending=True)[1].tolist()
    [1, 0, 3, 2, 4, 5]
    """
    dim = dim % max(self.dim(), 1)
    if self.dim() == 0:
        return self, aten.zeros_like(self, dtype=torch.int64)
    moved = aten.movedim(self, dim, -1)
    mine, others = aten.unsqueeze(moved, -1), aten.unsqueeze(moved, -2)  # [..., i, 1], [..., 1, j]
    positions = _positions(moved)
    earlier = aten.lt.Tensor(aten.unsqueeze(positions, -2), aten.unsqueeze(positions, -1))  # j < i
    if self.dtype.is_floating_point:
        nan_mine, nan_others = aten.isnan(mine), aten.isnan(others)
        ahead = aten.gt.Tensor(others, mine) if descending else aten.lt.Tensor(others, mine)
        nan_first = nan_others if descending else nan_mine
        number = aten.logical_not(nan_mine if descending else nan_others)
        ahead = aten.logical_or(ahead, aten.logical_and(nan_first, number))
        tie = aten.logical_or(aten.eq.Tensor(others, mine), aten.logical_and(nan_mine, nan_others))
    else:
        ahead = aten.gt.Tensor(others, mine) if descending else aten.lt.Tensor(others, mine)
        tie = aten.eq.Tensor(others, mine)
    before = aten.logical_or(ahead, aten.logical_and(tie, earlier))
    places = aten.sum.dim_IntList(before, [-1], dtype=torch.int64)
    last = moved.dim() - 1  # a negative dim crashes torch-mlir's scatter conversion (SIGSEGV)
    indices = aten.scatter.src(aten.zeros_like(positions), last, places, positions)
    values = aten.gather(moved, last, indices)
    return aten.movedim(values, -1, dim), aten.movedim(indices, -1, dim)


def _positions(tensor: torch.Tensor) -> torch.Tensor:
    """0, 1, ... along the last dim of `tensor` (of any size, known or not), as int64, broadcast to its shape."""
    ones = aten.ones_like(tensor, dtype=torch.int64)
    return aten.sub(aten.cumsum(ones, -1), 1)


def cdist_by_differences(
    x1: torch.Tensor, x2: torch.Tensor, p: float = 2.0, compute_mode: int | None = None
) -> torch.Tensor:
    """`torch.cdist(x1, x2, p)`: the p-norm of each pair of rows' difference. With p = 2 and more
    than 25 rows on either side (sizes known at export), or `compute_mode` asking it, PyTorch
    computes it from a matmul (`|a|^2 + |b|^2 - 2 a.b`, clamped, square root) and so does this;
    otherwise, and over run-time numbers of rows, from the differences themselves (PyTorch's other
    form; the two agree to rounding). torch-mlir's own decomposition reaches an op it does not
    lower.

    >>> a, b = torch.tensor([[0.0, 0.0], [1.0, 1.0]]), torch.tensor([[3.0, 4.0]])
    >>> cdist_by_differences(a, b).tolist()
    [[5.0], [3.605551242828369]]
    """
    rows = (x1.shape[-2], x2.shape[-2])
    large = all(isinstance(size, int) for size in rows) and max(rows) > 25
    if p == 2.0 and (compute_mode == 1 or (compute_mode in (None, 0) and large)):
        return _euclidean_by_matmul(x1, x2)
    differences = aten.abs(aten.sub(aten.unsqueeze(x1, -2), aten.unsqueeze(x2, -3)))  # [..., r1, r2, d]
    if p == 0.0:
        return aten.sum.dim_IntList(aten.ne.Scalar(differences, 0), [-1], dtype=x1.dtype)
    if math.isinf(p):
        return aten.amax(differences, [-1])
    if p == 1.0:
        return aten.sum.dim_IntList(differences, [-1])
    if p == 2.0:
        return aten.sqrt(aten.sum.dim_IntList(aten.mul(differences, differences), [-1]))
    return aten.pow.Tensor_Scalar(aten.sum.dim_IntList(aten.pow.Tensor_Scalar(differences, p), [-1]), 1.0 / p)


def _euclidean_by_matmul(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """PyTorch's matmul form of the Euclidean distances (its `_euclidean_dist`: |a|^2 + |b|^2 - 2 a.b,
    clamped to 1e-30, square root), with the norms added after the matmul rather than as two more
    columns of it: a constant `x2` (a codebook) made the concatenation a list of a constant and
    traced tensors, which torch-mlir's importer refuses ("Heterogeneous lists are not supported")."""
    norm1 = aten.sum.dim_IntList(aten.mul(x1, x1), [-1], True)
    norm2 = aten.sum.dim_IntList(aten.mul(x2, x2), [-1], True)
    products = aten.matmul(aten.mul(x1, -2.0), aten.transpose(x2, -2, -1))
    squared = aten.add(aten.add(products, norm1), aten.transpose(norm2, -2, -1))
    return aten.sqrt(aten.clamp_min(squared, 1e-30))


def kthvalue_by_counting(self: torch.Tensor, k: int, dim: int = -1, keepdim: bool = False) -> tuple:
    """`torch.kthvalue(x, k, dim)`: the element at place k - 1 of the stable sort along `dim`
    (`stable_sort_by_counting`; NaN after every number), and its index. Of equal values PyTorch's
    kernel (a selection, not a sort) may return another one's index; the value is the same.

    >>> kthvalue_by_counting(torch.tensor([3.0, 1.0, 2.0, 1.0, 5.0]), 2)
    (tensor(1.), tensor(3))
    """
    values, indices = stable_sort_by_counting(self, stable=True, dim=dim)
    dim = dim % max(self.dim(), 1)
    picked = [aten.select.int(t, dim, k - 1) if self.dim() else t for t in (values, indices)]
    if keepdim and self.dim():
        picked = [aten.unsqueeze(t, dim) for t in picked]
    return picked[0], picked[1]


def median_by_counting(self: torch.Tensor, dim: int = -1, keepdim: bool = False) -> tuple:
    """`x.median(dim)`: the lower median, the element at place (n - 1) // 2 of the stable sort; where
    the slice holds NaN, NaN and the index of its first NaN, as PyTorch returns them."""
    size = self.shape[dim % max(self.dim(), 1)] if self.dim() else 1
    value, index = kthvalue_by_counting(self, (size - 1) // 2 + 1, dim, keepdim)
    if not self.dtype.is_floating_point or not self.dim():
        return value, index
    nan = aten.isnan(self)
    dim = dim % self.dim()
    has_nan = aten.any.dim(nan, dim, keepdim)
    first_nan = aten.argmax(aten.to.dtype(nan, torch.int32), dim, keepdim)
    return aten.where.self(has_nan, aten.full_like(value, float("nan")), value), aten.where.self(
        has_nan, first_nan, index
    )


def median_of_all(self: torch.Tensor) -> torch.Tensor:
    """`x.median()`: the lower median of every element (`median_by_counting` of the flattened)."""
    return median_by_counting(aten.reshape(self, [-1]), 0)[0]


def nanmedian_by_counting(self: torch.Tensor, dim: int = -1, keepdim: bool = False) -> tuple:
    """`x.nanmedian(dim)`: the lower median of each slice's numbers, the element at place
    (numbers - 1) // 2 of the stable sort (whose NaN come after every number); NaN where the slice
    has none. Ints have no NaN: their `median_by_counting`. Of equal values, and of a slice of NaN
    only, PyTorch's selection may return another index; the value is the same.

    >>> x = torch.tensor([[3.0, float("nan"), 1.0, 2.0], [5.0, 4.0, float("nan"), float("nan")]])
    >>> [t.tolist() for t in nanmedian_by_counting(x, 1)] == [t.tolist() for t in torch.nanmedian(x, 1)]
    True
    """
    if not self.dtype.is_floating_point or not self.dim():
        return median_by_counting(self, dim, keepdim)
    dim = dim % self.dim()
    values, indices = stable_sort_by_counting(self, stable=True, dim=dim)
    numbers = aten.sum.dim_IntList(aten.logical_not(aten.isnan(self)), [dim], True, dtype=torch.int64)
    place = aten.clamp_min(aten.floor_divide(aten.sub(numbers, 1), 2), 0)
    picked = [aten.gather(t, dim, place) for t in (values, indices)]
    if not keepdim:
        picked = [aten.squeeze.dim(t, dim) for t in picked]
    return picked[0], picked[1]


def nanmedian_of_all(self: torch.Tensor) -> torch.Tensor:
    """`x.nanmedian()`: the lower median of every number (`nanmedian_by_counting` of the flattened)."""
    return nanmedian_by_counting(aten.reshape(self, [-1]), 0)[0]


def mode_by_counting(self: torch.Tensor, dim: int = -1, keepdim: bool = False) -> tuple:
    """`torch.mode(x, dim)`: each element counts the elements equal to it along `dim`; of the values
    counted most often the smallest, at its last index, as PyTorch's kernel gives them. Where a
    slice holds NaN PyTorch's answer follows no rule its sort keeps (the mode of [5, nan, 5, nan,
    3, nan, nan] is 3): NaN count as unequal to everything here, and such slices may differ.

    >>> x = torch.tensor([[3, 1, 3, 1, 2], [2, 2, 7, 7, 7]])
    >>> [t.tolist() for t in mode_by_counting(x, 1)] == [t.tolist() for t in torch.mode(x, 1)]
    True
    """
    if not self.dim():
        return self, aten.zeros_like(self, dtype=torch.int64)
    dim = dim % self.dim()
    moved = aten.movedim(self, dim, -1)
    counts = aten.sum.dim_IntList(aten.eq.Tensor(aten.unsqueeze(moved, -1), aten.unsqueeze(moved, -2)), [-1])
    most = aten.eq.Tensor(counts, aten.amax(counts, [-1], True))
    largest = float("inf") if self.dtype.is_floating_point else torch.iinfo(self.dtype).max
    value = aten.amin(aten.where.self(most, moved, aten.full_like(moved, largest)), [-1], True)
    positions = _positions(moved)
    at_value = aten.eq.Tensor(moved, value)
    index = aten.amax(aten.where.self(at_value, positions, aten.full_like(positions, -1)), [-1], True)
    picked = [aten.movedim(t, -1, dim) for t in (value, index)]
    if not keepdim:
        picked = [aten.squeeze.dim(t, dim) for t in picked]
    return picked[0], picked[1]


def cumulative_extreme(largest: bool) -> Any:
    """`torch.cummax` (`largest`) or `torch.cummin` along `dim`: element i's value is the extreme of
    the elements up to it, NaN from the first NaN on, and its index the last of those that equal it
    (the last NaN, from the first on), as PyTorch's kernel gives it.

    >>> cumulative_extreme(True)(torch.tensor([4.0, 4.0, 1.0, float("nan"), 0.0]), 0)[1].tolist()
    [0, 1, 1, 3, 3]
    """

    def rewritten(self: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.dim() == 0:
            return self, aten.zeros_like(self, dtype=torch.int64)
        dim = dim % self.dim()
        moved = aten.movedim(self, dim, -1)
        positions = _positions(moved)
        up_to = aten.le.Tensor(aten.unsqueeze(positions, -2), aten.unsqueeze(positions, -1))  # [..., i, j]: j <= i
        others = aten.unsqueeze(moved, -2)
        floating = self.dtype.is_floating_point
        if floating:
            bound = float("-inf") if largest else float("inf")
        else:
            info = torch.iinfo(self.dtype)
            bound = info.min if largest else info.max
        nan = aten.isnan(others) if floating else aten.zeros_like(others, dtype=torch.bool)
        numbers = aten.where.self(aten.logical_or(aten.logical_not(up_to), nan), aten.full_like(others, bound), others)
        extreme = aten.amax(numbers, [-1]) if largest else aten.amin(numbers, [-1])
        nan_before = aten.logical_and(up_to, nan)
        any_nan = aten.any.dim(nan_before, -1)
        value = aten.where.self(any_nan, aten.full_like(extreme, float("nan")), extreme) if floating else extreme
        matches = aten.logical_or(
            aten.logical_and(up_to, aten.eq.Tensor(others, aten.unsqueeze(extreme, -1))),
            nan_before,
        )
        matches = aten.where.self(aten.unsqueeze(any_nan, -1), nan_before, matches)
        candidates = aten.where.self(
            matches, aten.unsqueeze(positions, -2), aten.full_like(up_to, -1, dtype=torch.int64)
        )
        index = aten.amax(candidates, [-1])
        return aten.movedim(value, -1, dim), aten.movedim(index, -1, dim)

    return rewritten


TABLE = {
    aten.searchsorted.Tensor: searchsorted_by_counting,
    aten.searchsorted.Scalar: searchsorted_of_a_number,
    aten.sort.stable: stable_sort_by_counting,
    aten.kthvalue.default: kthvalue_by_counting,
    aten.median.dim: median_by_counting,
    aten.median.default: median_of_all,
    aten.nanmedian.dim: nanmedian_by_counting,
    aten.nanmedian.default: nanmedian_of_all,
    aten.mode.default: mode_by_counting,
    aten.cummax.default: cumulative_extreme(True),
    aten.cummin.default: cumulative_extreme(False),
    aten.cdist.default: cdist_by_differences,
}
