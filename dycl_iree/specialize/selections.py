"""Specialize's sizes made by data: `nonzero`, boolean-mask indexing, `masked_select`, `torch.where(c)`,
`repeat_interleave`, `bincount`, `unique` and `unique_consecutive`.

How many elements a mask selects is a decision the device makes, like a branch: DyCL's answer
applies. `nonzero(mask)` becomes a count read to the host (`int(mask.sum())`, a sync point as
`.item()` is) and `nonzero_static(mask, size=count)`, an op whose size is that host int. What follows
runs with that dim dynamic (a run-time int is perturbed in the meta runs like a dynamic dim, so it
is never frozen to the example's count), and a segment that takes the count gets it as an int
parameter, as it gets any size read with `.item()`. Zero selected rows is an ordinary size.

Boolean indices are rewritten into what PyTorch itself runs for them: `x[mask]` with a k-d mask is
`x[i_1, ..., i_k]` with the k columns of `mask.nonzero()`; `masked_select(x, mask)` is the flat
broadcast `x` indexed by the flat broadcast mask; `torch.where(mask)` the columns. A write through a
mask that needs no count (`x[mask] = v` with one value per selected element's trailing dims) stays
a `where` (`index_clamping._masked_write`); one whose values are a selection (`x[m] += 1`) takes the
indices too.

Without this, torch's meta kernel of `nonzero` refuses to compute a size it cannot know.
`decompositions.nonzero_static_by_scatter` is how the segment computes the indices.

Example:
    >>> class Router(nn.Module):                                           # doctest: +SKIP
    ...     def forward(self, choice): return (choice == 0).nonzero().squeeze(1)
    >>> print(format_program(specialize(capture(Router()), (torch.tensor([0, 1, 0]),))))  # doctest: +SKIP
    ...  %5 = aten::Int.Tensor(%4)   # the count, read to the host
    ...  %6 = aten::nonzero_static.default(%3, size=%5, fill_value=-1)
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..errors import UnsupportedOpError
from ..guards import CHECK_INDEX
from ..program import Constant, HostOp, ListArg, ScalarType, TensorOp, TensorType, Value
from .schemas import overload_of
from .values import is_none, real_value, tensor_type_of, walk_args

# torch.repeat_interleave with a repeats tensor: its size is the repeats' total.
_REPEATS = ("aten::repeat_interleave.self_Tensor", "aten::repeat_interleave.Tensor")
# torch.unique and torch.unique_consecutive: sizes made by how many values differ.
_UNIQUE = ("aten::_unique2.default", "aten::unique_dim.default", "aten::unique_consecutive.default")
# The mask dtypes PyTorch indexes with (uint8 masks are deprecated there but still work).
_MASK_DTYPES = ("bool", "uint8")


def _is_mask(entry: Any) -> bool:
    type_ = tensor_type_of(entry)
    return type_ is not None and type_.dtype in _MASK_DTYPES


class Selections:
    """Sizes made by data (a mixin of the specializer)."""

    def emit_selection(
        self, target: str, args: list, kwargs: list, source: str, name: str, ts_output: Any = None
    ) -> list | None:
        """The outputs of `target` when it makes a size from data (rewritten here), else None.
        `ts_output` is the model's value of the (first) result."""
        if target in ("aten::nonzero.default", "aten::argwhere.default"):
            return [self.nonzero(args[0], source, name)]
        if target == "aten::where.default" and len(args) == 1:
            return self.nonzero_columns(args[0], source)
        if target == "aten::masked_select.default":
            return [self.masked_select(args[0], args[1], source, name)]
        if target in _REPEATS and is_none(dict(kwargs).get("output_size", Constant(None))):
            return self.repeat_interleave(target, args, source, name, ts_output)
        if target == "aten::bincount.default" and not isinstance(args[0], Constant):
            return [self.bincount(args, source, name, ts_output)]
        if target == "aten::linspace.default" and len(args) > 2 and isinstance(args[2], Value):
            return self.linspace(args, dict(kwargs), source, name)
        if target in _UNIQUE and not isinstance(args[0], Constant):
            # Along a dim of a 1-D tensor is of the whole tensor; other dims are refused (no meta kernel).
            dims = {"aten::unique_dim.default": 1, "aten::unique_consecutive.default": 3}
            dim = args[dims[target]] if dims.get(target, len(args)) < len(args) else Constant(None)
            if not (is_none(dim) or (isinstance(dim, Constant) and dim.value in (0, -1) and args[0].type.rank == 1)):
                return None
            if target == "aten::unique_consecutive.default":
                return self.unique_consecutive(args[0], source, name, ts_output)
            return self.unique(args[0], source, name, ts_output)
        if target == "aten::index.Tensor" and isinstance(args[1], ListArg) and any(map(_is_mask, args[1].items)):
            tensor, indices = self.flatten_under_mask(args[0], args[1], source)
            indices = self.mask_indices(tensor, indices, source, check=tensor is args[0])
            return [self.apply("aten::index.Tensor", [tensor, indices], [], source, name)]
        if target == "aten::index_put.default" and isinstance(args[1], ListArg) and self.needs_count(*args[:3]):
            indices = self.mask_indices(args[0], args[1], source)
            return [self.apply("aten::index_put.default", [args[0], indices, *args[2:]], kwargs, source, name)]
        return None

    # -- the building blocks -------------------------------------------------------------------
    def apply(self, target: str, args: list, kwargs: list, source: str, name: str = "t") -> Any:
        """One tensor op: folded when every argument is known at export time, else emitted."""
        overload = overload_of(target)
        if not any(isinstance(entry, Value) for entry in walk_args(args + [a for _, a in kwargs])):
            return Constant(overload(*(real_value(a) for a in args), **{k: real_value(a) for k, a in kwargs}))
        (output,) = self.emit_tensor_op(overload, args, kwargs, source, name=name)
        return output

    def nonzero(self, mask: Any, source: str, name: str = "nonzero") -> Any:
        """`mask.nonzero()`: the count of nonzero elements read to the host, then the indices of that
        many rows. The count is the result's dim 0: a later `idx.size(0)` or `idx.numel()` reads it
        without asking the buffer."""
        if isinstance(mask, Constant):
            return Constant(torch.nonzero(mask.value))
        type_ = mask.type
        if type_.rank == 0:
            raise UnsupportedOpError(
                "aten::nonzero",
                source,
                detail="a 0-d mask selects all or nothing, a size no op here makes: branch with `if bool(mask):`, "
                "or index with a 1-d mask, `x.unsqueeze(0)[mask.reshape(1)]` for `x[mask]`",
            )
        flags = mask if type_.dtype == "bool" else self.apply("aten::ne.Scalar", [mask, Constant(0)], [], source)
        dtype = [("dtype", Constant(torch.int64))]
        total = self.apply("aten::sum.default", [flags], dtype, source, "selected")
        # The example of the count is "all selected", which is what torch's own meta kernel assumes
        # when asked to (never 0 or 1: torch.export specializes those).
        count = self.new_value(ScalarType("int", max(2, math.prod(type_.hint))), "count")
        self.nodes.append(HostOp("aten::Int.Tensor", (total,), (count,), source))
        size = [("size", count), ("fill_value", Constant(-1))]
        indices = self.apply("aten::nonzero_static.default", [mask], size, source, name)
        self.dim_sources[(indices, 0)] = count
        return indices

    def repeat_interleave(self, target: str, args: list, source: str, name: str, ts_output: Any) -> list | None:
        """`torch.repeat_interleave(x, repeats, dim)` (or of `repeats` alone) with a repeats tensor
        known only at run time: the total read to the host (a sync, as `.item()` is), then the op
        given that output size (`decompositions.repeat_interleave_of_output_size` computes its
        indices). The total is the result's size along `dim` (or its length), its example the size
        in the observed run at the example inputs (a graph's nodes, counted by the repeats, meet the
        node features' rows). None for constant repeats, which fold."""
        if target == "aten::repeat_interleave.Tensor":
            tensor, repeats, dim = None, args[0], 0
        else:
            tensor, repeats = args[0], args[1]
            dim = args[2] if len(args) > 2 else Constant(None)
            if not isinstance(dim, Constant):
                raise UnsupportedOpError(target, source, detail="a dim known only at run time")
            dim = dim.value
        repeats_type = tensor_type_of(repeats)
        if isinstance(repeats, Constant) or repeats_type is None:
            return None
        if tensor is not None and (repeats_type.rank == 0 or repeats_type.shape == (1,)):
            # One count for every element: times the size along dim (the flattened size without one).
            shape = self.shape_of(tensor, source)
            if dim is not None:
                along = shape[dim % len(shape)]
            elif all(isinstance(size, Constant) for size in shape):
                along = Constant(math.prod(size.value for size in shape))
            else:
                along = self.numel_of(tensor, source)  # of the flattened tensor
            single = self.apply("aten::reshape.default", [repeats, Constant([1])], [], source)
            total = self.apply("aten::mul.Tensor", [single, self.as_tensor(along, source)], [], source)
        else:
            total = repeats
        dtype = [("dtype", Constant(torch.int64))]
        summed = self.apply("aten::sum.default", [total], dtype, source, "repeated")
        axis = 0 if dim is None or tensor is None else dim % tensor_type_of(tensor).rank
        count = self.new_value(ScalarType("int", self.observed_total(ts_output, axis)), "count")
        self.nodes.append(HostOp("aten::Int.Tensor", (summed,), (count,), source))
        output = self.apply(target, args, [("output_size", count)], source, name)
        self.dim_sources[(output, axis)] = count
        return [output]

    def bincount(self, args: list, source: str, name: str, ts_output: Any) -> Any:
        """`torch.bincount(x, weights, minlength)`: its length, max(x) + 1 or `minlength` if more,
        read to the host (a sync, as `.item()` is; `minlength` alone for an empty x), then a
        `scatter_add` of ones (or of the weights) into zeros of that length. Its example is the
        length in the observed run. Of an empty x with weights, PyTorch returns int64 zeros; here
        they are of the weights' dtype, as for any other x."""
        values = args[0]
        weights = args[1] if len(args) > 1 else Constant(None)
        minlength = args[2] if len(args) > 2 else Constant(0)
        largest = self.apply("aten::amax.default", [values, Constant([]), Constant(False)], [], source, "largest")
        read = self.new_value(ScalarType("int", self.observed_total(ts_output, 0) - 1), "largest")
        self.nodes.append(HostOp("aten::Int.Tensor", (largest,), (read,), source))
        length = self.emit_host("aten::add.int", (read, Constant(1)), "int", source)
        length = self.emit_host("prim::max.int", (length, minlength), "int", source)
        if is_none(weights):
            dtype, counted = torch.int64, self.apply("aten::ones_like.default", [values], [], source)
        else:
            dtype = torch.float32 if tensor_type_of(weights).dtype == "float32" else torch.float64
            counted = self.apply("aten::to.dtype", [weights, Constant(dtype)], [], source)
        zeros = self.apply("aten::zeros.default", [ListArg((length,))], [("dtype", Constant(dtype))], source)
        output = self.apply("aten::scatter_add.default", [zeros, Constant(0), values, counted], [], source, name)
        self.dim_sources[(output, 0)] = length
        return output

    def unique(self, tensor: Any, source: str, name: str, ts_output: Any) -> list:
        """`torch.unique(x, sorted, return_inverse, return_counts)` (without `dim`): the values in
        ascending order, each element's place among them, and how many of each. Element i is the
        first of its value where no earlier element equals it, and its place is how many first
        elements are smaller (NaN after every number, each NaN a value of its own); the count of
        first elements is read to the host (a sync, as `.item()` is) and sizes the values and the
        counts. PyTorch's CPU kernel sorts whether `sorted` is asked or not, and so does this.

        Each element is compared with every other: n^2 compares over n elements (fused into
        reductions, never an n x n tensor), and no sort, whose order of NaN torch-mlir does not keep
        (README, Known traps). Which of several NaN maps to which NaN value follows their order here,
        and PyTorch's sort there."""
        self.check_unique_dtype(tensor, "aten::_unique2", source)

        def op(target: str, *args: Any) -> Any:
            return self.apply(target, list(args), [], source)

        flat = op("aten::reshape.default", tensor, Constant([-1]))
        column, row = op("aten::unsqueeze.default", flat, Constant(1)), op("aten::unsqueeze.default", flat, Constant(0))
        positions = self.positions(flat, source)
        earlier = op(  # [i, j]: j < i
            "aten::lt.Tensor",
            op("aten::unsqueeze.default", positions, Constant(0)),
            op("aten::unsqueeze.default", positions, Constant(1)),
        )
        repeats = op("aten::logical_and.default", op("aten::eq.Tensor", column, row), earlier)  # NaN equals nothing
        first = op("aten::logical_not.default", op("aten::any.dim", repeats, Constant(1), Constant(False)))
        smaller = op("aten::lt.Tensor", row, column)  # [i, j]: x_j < x_i
        if tensor_type_of(tensor).dtype in ("float32", "float64"):
            nan = op("aten::isnan.default", flat)
            nan_i = op("aten::unsqueeze.default", nan, Constant(1))
            nan_j = op("aten::unsqueeze.default", nan, Constant(0))
            after_numbers = op("aten::logical_and.default", nan_i, op("aten::logical_not.default", nan_j))
            after_nans = op("aten::logical_and.default", op("aten::logical_and.default", nan_i, nan_j), earlier)
            smaller = op("aten::logical_or.default", op("aten::logical_or.default", smaller, after_numbers), after_nans)
        below = op("aten::logical_and.default", smaller, op("aten::unsqueeze.default", first, Constant(0)))
        dtype = [("dtype", Constant(torch.int64))]
        places = self.apply("aten::sum.dim_IntList", [below, Constant([1]), Constant(False)], dtype, source)
        count = self.read_count(first, ts_output, source)
        firsts = self.indices_of(first, count, source)
        zeros = op("aten::new_zeros.default", flat, ListArg((count,)))
        picked = [op("aten::index_select.default", value, Constant(0), firsts) for value in (places, flat)]
        values = self.apply("aten::scatter.src", [zeros, Constant(0), *picked], [], source, name)
        return self.with_counts(values, places, tensor, count, source)

    def unique_consecutive(self, tensor: Any, source: str, name: str, ts_output: Any) -> list:
        """`torch.unique_consecutive(x, return_inverse, return_counts)` (without `dim`): element i
        starts a run where it is the first or differs from the one before it (NaN from everything,
        as in PyTorch); the number of runs is read to the host and sizes the values and counts, and
        an element's run is the running count of starts less one."""
        self.check_unique_dtype(tensor, "aten::unique_consecutive", source)

        def op(target: str, *args: Any) -> Any:
            return self.apply(target, list(args), [], source)

        flat = op("aten::reshape.default", tensor, Constant([-1]))
        head = op("aten::slice.Tensor", flat, Constant(0), Constant(0), Constant(1), Constant(1))
        but_last = op("aten::slice.Tensor", flat, Constant(0), Constant(0), Constant(-1), Constant(1))
        differs = op("aten::ne.Tensor", flat, op("aten::cat.default", ListArg((head, but_last)), Constant(0)))
        at_start = op("aten::eq.Scalar", self.positions(flat, source), Constant(0))
        starts = op("aten::logical_or.default", differs, at_start)
        runs = self.apply("aten::cumsum.default", [starts, Constant(0)], [("dtype", Constant(torch.int64))], source)
        places = op("aten::sub.Tensor", runs, Constant(torch.tensor(1)))
        count = self.read_count(starts, ts_output, source)
        firsts = self.indices_of(starts, count, source)
        values = self.apply("aten::index_select.default", [flat, Constant(0), firsts], [], source, name)
        return self.with_counts(values, places, tensor, count, source)

    def linspace(self, args: list, kwargs: dict, source: str, name: str) -> list | None:
        """`torch.linspace(start, end, steps)` with `steps` known only at run time (a sampler's steps,
        the frames of an input): as PyTorch's CPU kernel computes it, the first half from `start`
        up and the second from `end` down by a step of (end - start) / (steps - 1) in the result's
        dtype. torch's own decomposition branches on `steps == 1`, so torch.export fixed the steps
        at the example's; here the length is the host int `steps`. None (the op as it is) where a
        bound is known only at run time or the dtype is not a float's."""
        start, end, steps = args[:3]
        dtype_arg = args[3] if len(args) > 3 else kwargs.get("dtype", Constant(None))
        dtype = dtype_arg.value if isinstance(dtype_arg, Constant) else None
        dtype = torch.get_default_dtype() if dtype is None else dtype
        if not (isinstance(start, Constant) and isinstance(end, Constant)) or not dtype.is_floating_point:
            return None

        def op(target: str, *operands: Any, **keywords: Any) -> Any:
            return self.apply(target, list(operands), [(k, Constant(v)) for k, v in keywords.items()], source)

        index = op("aten::arange.default", steps, dtype=torch.int64)
        count = op("aten::scalar_tensor.default", steps, dtype=dtype)
        gaps = op("aten::clamp_min.default", op("aten::sub.Scalar", count, Constant(1.0)), Constant(1.0))
        bounds = [Constant(torch.tensor(bound.value, dtype=dtype)) for bound in (start, end)]
        step = op("aten::div.Tensor", op("aten::sub.Tensor", bounds[1], bounds[0]), gaps)
        ahead = op("aten::to.dtype", index, Constant(dtype))
        last = op("aten::scalar_tensor.default", self.emit_host("aten::sub.int", (steps, Constant(1)), "int", source))
        behind = op(
            "aten::to.dtype",
            op("aten::sub.Tensor", op("aten::to.dtype", last, Constant(torch.int64)), index),
            Constant(dtype),
        )
        from_start = op("aten::add.Tensor", bounds[0], op("aten::mul.Tensor", step, ahead))
        from_end = op("aten::sub.Tensor", bounds[1], op("aten::mul.Tensor", step, behind))
        # PyTorch fills a single step with `start`: the first half is that one step then.
        halfway = self.emit_host("aten::floordiv.int", (steps, Constant(2)), "int", source)
        halfway = self.emit_host("prim::max.int", (halfway, Constant(1)), "int", source)
        first_half = op("aten::lt.Tensor", index, op("aten::scalar_tensor.default", halfway, dtype=torch.int64))
        output = self.apply("aten::where.self", [first_half, from_start, from_end], [], source, name)
        self.dim_sources[(output, 0)] = steps
        return [output]

    def indices_of(self, flags: Any, count: Any, source: str) -> Any:
        """The indices of the `count` true elements of the 1-D `flags`, in order."""
        size = [("size", count), ("fill_value", Constant(-1))]
        found = self.apply("aten::nonzero_static.default", [flags], size, source)
        return self.apply("aten::squeeze.dim", [found, Constant(1)], [], source)

    def with_counts(self, values: Any, places: Any, tensor: Any, count: Any, source: str) -> list:
        """unique's three results: the `count` values, each element's place (`places`, flat) in the
        shape of `tensor`, and how many elements have each place."""
        shape = ListArg(tuple(self.shape_of(tensor, source)))
        inverse = self.apply("aten::reshape.default", [places, shape], [], source)
        zeros = self.apply("aten::zeros.default", [ListArg((count,))], [("dtype", Constant(torch.int64))], source)
        ones = self.apply("aten::ones_like.default", [places], [], source)
        counts = self.apply("aten::scatter_add.default", [zeros, Constant(0), places, ones], [], source, "counts")
        for output in (values, counts):
            if isinstance(count, Value):
                self.dim_sources[(output, 0)] = count
        return [values, inverse, counts]

    def check_unique_dtype(self, tensor: Any, op: str, source: str) -> None:
        dtype = tensor_type_of(tensor).dtype
        if dtype not in ("float32", "float64", "int64", "int32", "int16", "int8", "uint8"):
            raise UnsupportedOpError(op, source, detail=f"the unique values of a {dtype} tensor")

    def positions(self, flat: Any, source: str) -> Any:
        """0, 1, ... n - 1 as int64, for a 1-D tensor `flat` of n elements (n known or not)."""
        ones = self.apply("aten::ones_like.default", [flat], [("dtype", Constant(torch.int64))], source)
        counted = self.apply("aten::cumsum.default", [ones, Constant(0)], [], source)
        return self.apply("aten::sub.Tensor", [counted, Constant(torch.tensor(1))], [], source)

    def read_count(self, flags: Any, ts_output: Any, source: str) -> Any:
        """The number of true `flags`, read to the host; its example the size of the model's result in
        the observed run. Of at most one flag, known to be that many (the first element is always a
        first): a count of one element that only the run time knows made IREE 3.13 fail to compile
        the writes it sizes ("'memref.alloca' op expected no unbounded stack allocations")."""
        size = tensor_type_of(flags).shape[0]
        if size is not None and size <= 1:
            return Constant(size)
        total = self.apply("aten::sum.default", [flags], [("dtype", Constant(torch.int64))], source, "distinct")
        count = self.new_value(ScalarType("int", self.observed_total(ts_output, 0)), "count")
        self.nodes.append(HostOp("aten::Int.Tensor", (total,), (count,), source))
        return count

    def observed_total(self, ts_output: Any, axis: int) -> int:
        """The size along `axis` of `ts_output` in the observed run (at the example inputs, at the
        iteration typed), where it is 2 or more; else 2 (torch.export fixes sizes of 0 and 1)."""
        if ts_output is None or self.loop_indices is None:
            return 2
        sizes = self.observed_sizes().get((ts_output.unique(), tuple(self.loop_indices)))
        size = sizes[axis] if isinstance(sizes, tuple) and axis < len(sizes) else None
        return size if isinstance(size, int) and size >= 2 else 2

    def as_tensor(self, size: Any, source: str) -> Any:
        """A size (a Constant or a host int) as a 0-d int64 tensor."""
        if isinstance(size, Constant):
            return Constant(torch.tensor(size.value))
        return self.apply("aten::scalar_tensor.default", [size], [("dtype", Constant(torch.int64))], source)

    def nonzero_columns(self, mask: Any, source: str) -> list:
        """`torch.where(mask)`: one index tensor per dim of the mask."""
        indices = self.nonzero(mask, source)
        rank = tensor_type_of(mask).rank
        return [self.apply("aten::select.int", [indices, Constant(1), Constant(d)], [], source) for d in range(rank)]

    def mask_indices(self, tensor: Any, indices: ListArg, source: str, check: bool = True) -> ListArg:
        """`indices` with each mask replaced by the index tensors of its nonzero elements, one per dim
        it covers, as PyTorch runs a boolean index. A mask must have the sizes of the dims it covers
        (PyTorch's IndexError otherwise): checked on the host where a size is only known then."""
        shape = self.shape_of(tensor, source) if check else []
        expanded: list = []
        position = 0
        for item in indices.items:
            if not _is_mask(item):
                expanded.append(item)
                position += 1
                continue
            # The count first: its sum joins the segment that made the mask, before the checks.
            expanded.extend(self.nonzero_columns(item, source))
            mask_shape = self.shape_of(item, source)
            for offset in range(len(mask_shape)):
                if position + offset < len(shape):
                    self.check_mask_size(mask_shape, shape, position, offset, source)
            position += len(mask_shape)
        return ListArg(tuple(expanded))

    def check_mask_size(self, mask_shape: list, shape: list, position: int, offset: int, source: str) -> None:
        mask_size, size = mask_shape[offset], shape[position + offset]
        if isinstance(mask_size, Constant) and isinstance(size, Constant) and mask_size.value == size.value:
            return
        if isinstance(mask_size, Value) and mask_size == size:
            return
        message = (
            f"IndexError: The shape of the mask at index {offset} does not match the shape of the indexed "
            f"tensor at index {position + offset} ({source})"
        )
        high = self.emit_host("aten::add.int", (size, Constant(1)), "int", source)
        self.nodes.append(HostOp(CHECK_INDEX, (mask_size, size, high, Constant(message)), (), source))

    def shape_of(self, tensor: Any, source: str) -> list:
        """Each dim's size: a Constant, or the host int that holds it."""
        if isinstance(tensor, Constant):
            return [Constant(int(size)) for size in tensor.value.shape]
        return [self.size_of(tensor, dim, source) for dim in range(tensor.type.rank)]

    def flatten_under_mask(self, tensor: Any, indices: ListArg, source: str) -> tuple[Any, ListArg]:
        """`x[mask]` with a k-d mask (k > 1, after full slices only) as `x.flatten(p, p + k - 1)[mask.reshape(-1)]`:
        one index tensor instead of k. torch-mlir cannot lower `index.Tensor` with several index
        tensors on a tensor with a dynamic dim ("failed to legalize 'torch.aten.index.Tensor_hacked_twin'").
        The mask's sizes are checked against the dims it covers before they are merged."""
        items = list(indices.items)
        masks = [position for position, item in enumerate(items) if _is_mask(item)]
        if len(masks) != 1 or any(not is_none(item) for item in items if not _is_mask(item)):
            return tensor, indices
        (position,) = masks
        mask = items[position]
        rank = tensor_type_of(mask).rank
        if rank < 2:
            return tensor, indices
        shape, mask_shape = self.shape_of(tensor, source), self.shape_of(mask, source)
        for offset in range(rank):
            if position + offset < len(shape):
                self.check_mask_size(mask_shape, shape, position, offset, source)
        dims = [Constant(position), Constant(position + rank - 1)]
        flat = self.apply("aten::flatten.using_ints", [tensor, *dims], [], source)
        flat_mask = self.apply("aten::reshape.default", [mask, Constant([-1])], [], source)
        return flat, ListArg((*items[:position], flat_mask))

    def masked_select(self, tensor: Any, mask: Any, source: str, name: str) -> Any:
        """`torch.masked_select(x, mask)`: the flat broadcast `x` at the flat broadcast mask's elements."""
        if tensor_type_of(tensor).shape != tensor_type_of(mask).shape or None in tensor_type_of(mask).shape:
            overload = overload_of("aten::broadcast_tensors.default")
            tensor, mask = self.emit_tensor_op(overload, [ListArg((tensor, mask))], [], source, returns="list")
        flat = [Constant([-1])]
        flat_tensor = self.apply("aten::reshape.default", [tensor, *flat], [], source)
        flat_mask = self.apply("aten::reshape.default", [mask, *flat], [], source)
        indices = ListArg(tuple(self.nonzero_columns(flat_mask, source)))
        return self.apply("aten::index.Tensor", [flat_tensor, indices], [], source, name)

    def needs_count(self, tensor: Any, indices: ListArg, values: Any) -> bool:
        """Whether a write through a mask needs the selected elements' indices: its values are one per
        selected element. One mask after full slices whose values broadcast to the dims after it
        (`x[mask] = 0.0`, `x[m] = row`) is a `where` and needs no count."""
        items = list(indices.items)
        if not any(map(_is_mask, items)):
            return False
        leading = 0
        while leading < len(items) and is_none(items[leading]):
            leading += 1
        if leading == len(items) or not _is_mask(items[leading]) or any(not is_none(i) for i in items[leading + 1 :]):
            return True
        values_type, tensor_type = tensor_type_of(values), tensor_type_of(tensor)
        if values_type is None:
            return False  # a scalar
        trailing = tensor_type.rank - leading - tensor_type_of(items[leading]).rank
        if values_type.rank <= trailing:
            return False
        return not (None not in values_type.shape and math.prod(values_type.shape) == 1)

    def narrow_to_static(self, values_in: list[Value], args: list, source: str) -> dict[Value, Value]:
        """The op's tensors whose dynamic dims broadcast against a static size, each narrowed to it
        after a host check that it has that size (empty if there are none).

        A size read from data meets a size fixed at export: Tacotron2's padding mask,
        `torch.arange(0, lengths.max().item())`, against the attention scores of the `T` encoder
        steps in `alignment.masked_fill(mask, -inf)`. The meta run at the example hints fails to
        broadcast them, and PyTorch raises at run time unless they agree: so the host checks that
        the dim has the static size, and a `narrow` to that size (the tensor itself, once checked)
        gives the op a static operand, which torch.export broadcasts without fixing the dynamic
        dim to the example's size. A dynamic dim of 1, which PyTorch would also broadcast, is
        refused by that check with PyTorch's message.
        """
        tensors = [tensor_type_of(arg) for arg in walk_args(args) if tensor_type_of(arg) is not None]
        narrowed: dict[Value, Value] = {}
        for value in dict.fromkeys(values_in):
            type_ = value.type
            if not isinstance(type_, TensorType):
                continue
            current = value
            for dim, size in enumerate(type_.shape):
                from_right = type_.rank - dim
                static = {
                    other.shape[other.rank - from_right]
                    for other in tensors
                    if other.rank >= from_right and other.shape[other.rank - from_right] not in (None, 1)
                }
                if size is not None or len(static) != 1:
                    continue
                (expected,) = static
                read = self.size_of(value, dim, source)
                message = (
                    f"RuntimeError: The size of tensor a must match the size of tensor b ({expected}) at "
                    f"non-singleton dimension {dim}: a size read from data meets one fixed at export ({source})"
                )
                check = (read, Constant(expected), Constant(expected + 1), Constant(message))
                self.nodes.append(HostOp(CHECK_INDEX, check, (), source))
                # Typed here: a meta run at the example hint would find the dim too short.
                shape = tuple(expected if d == dim else s for d, s in enumerate(current.type.shape))
                hint = tuple(expected if d == dim else h for d, h in enumerate(current.type.hint))
                narrowed_value = self.new_value(TensorType(type_.dtype, shape, hint), value.name)
                args_ = (current, Constant(dim), Constant(0), Constant(expected))
                self.nodes.append(TensorOp("aten::narrow.default", args_, (), (narrowed_value,), source))
                current = narrowed_value
            if current is not value:
                narrowed[value] = current
        return narrowed
