"""Each `arange` whose bounds are known at export, as the literal it is.

A decomposition's `arange` of sizes known at export (argmax's positions, `nan_keeping`; bilinear
upsampling's float grid) reaches IREE as a dispatch with no operands. (A model's own range of
constant bounds is a constant already: the specializer folds it.)
Where the compiled host's `main` runs such a segment on both sides of a branch and again in a loop
(fuzzer seed 129012), IREE 3.13 left one copy of that dispatch outside every execution region and
failed: "'stream.async.dispatch' op : streamable op expected to be in an execution region" (with
constant-expression hoisting, in the initializer it hoisted the dispatch to; README, Known traps).
As a literal, the range is a constant IREE stores in the module: no dispatch at all, nothing for
the host to run at each call, and the values are PyTorch's own (`torch.arange` at export).

Only where every target is a CPU (`lower(fold_ranges=...)`, `pipeline.export`): Vulkan's i64
emulation cannot materialize the int64 literal that IREE inlines into the dispatch that reads it
("failed to legalize unresolved target materialization from ('i64') to ('vector<2xi32>')"), so GPU
targets keep the range's dispatch and, where the trap above meets it, the compile's own workaround
(`compile.WORKAROUNDS`, aggressive fusion).

Example:
    >>> from torch_mlir import ir
    >>> from torch_mlir.dialects import torch as torch_dialect
    >>> context = ir.Context()
    >>> torch_dialect.register_dialect(context)
    >>> module = ir.Module.parse('''func.func @positions() -> !torch.vtensor<[4],si64> {
    ...   %none = torch.constant.none
    ...   %end = torch.constant.int 4
    ...   %0 = torch.aten.arange %end, %none, %none, %none, %none
    ...       : !torch.int, !torch.none, !torch.none, !torch.none, !torch.none -> !torch.vtensor<[4],si64>
    ...   return %0 : !torch.vtensor<[4],si64>
    ... }''', context)
    >>> fold_ranges_in(module.body.operations[0], context)
    1
    >>> "torch.vtensor.literal" in str(module), "arange" in str(module)
    (True, False)
"""

from __future__ import annotations

from typing import Any

import torch
from torch_mlir.extras.fx_importer import TORCH_DTYPE_TO_MLIR_TYPE_ASM

from .literals import tensor_literal

# The arange overloads and the positions of (start, end, step) among their operands (None: the default).
_OVERLOADS = {
    "torch.aten.arange": (None, 0, None),
    "torch.aten.arange.start": (0, 1, None),
    "torch.aten.arange.start_step": (0, 1, 2),
}
# The element types of the importer's own names whose ranges PyTorch makes: "si64" -> torch.int64.
_DTYPES = {
    name: dtype
    for dtype, name in TORCH_DTYPE_TO_MLIR_TYPE_ASM.items()
    if dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32, torch.float64)
}
MAX_ELEMENTS = 1 << 16  # a larger range stays a dispatch (256-512 KiB of literal in the module at most)


def fold_ranges_in(function: Any, context: Any) -> int:
    """Replace each arange op of `function` (an imported segment's `func.func`) whose bounds are
    `torch.constant.int` / `.float` ops and whose result has a static shape of at most
    MAX_ELEMENTS elements and a dtype of `_DTYPES` with the `torch.vtensor.literal` of its values.
    Returns how many it replaced."""
    from torch_mlir import ir

    replaced = 0
    for block in function.regions[0].blocks:
        for op in list(block.operations):
            positions = _OVERLOADS.get(op.operation.name)
            if positions is None:
                continue
            values = _range(op.operation, positions)
            if values is None:
                continue
            with context, ir.Location.unknown(context), ir.InsertionPoint(op):
                literal = ir.Operation.create(
                    "torch.vtensor.literal",
                    results=[op.results[0].type],
                    attributes={"value": tensor_literal(values, context)},
                )
            op.results[0].replace_all_uses_with(literal.results[0])
            op.operation.erase()
            replaced += 1
    return replaced


def _range(op: Any, positions: tuple) -> torch.Tensor | None:
    """The values of the arange `op` (PyTorch's), or None where a bound is not a constant, the result's
    shape is not static or too large, or its dtype is not one of `_DTYPES`."""
    text = str(op.results[0].type)  # !torch.vtensor<[4],si64>
    shape, _, dtype_name = text.removeprefix("!torch.vtensor<").removesuffix(">").rpartition(",")
    dtype = _DTYPES.get(dtype_name.strip())
    sizes = shape.strip("[]").split(",")
    if dtype is None or len(sizes) != 1 or not sizes[0].isdigit() or not 0 < int(sizes[0]) <= MAX_ELEMENTS:
        return None
    bounds = []
    for position, default in zip(positions, (0, None, 1)):
        if position is None:
            bounds.append(default)
            continue
        value = _constant(op.operands[position])
        if value is None:
            return None
        bounds.append(value)
    values = torch.arange(*bounds, dtype=dtype)
    return values if values.numel() == int(sizes[0]) else None


def _constant(value: Any) -> int | float | None:
    """The number a `torch.constant.int` / `torch.constant.float` op gives `value`, else None."""
    from torch_mlir import ir

    owner = getattr(value, "owner", None)
    name = getattr(getattr(owner, "operation", owner), "name", None)
    if name == "torch.constant.int":
        return ir.IntegerAttr(owner.attributes["value"]).value
    if name == "torch.constant.float":
        return ir.FloatAttr(owner.attributes["value"]).value
    return None
