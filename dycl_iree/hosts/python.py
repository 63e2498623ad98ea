"""The Python host: readable Python source that carries the control flow and calls the segments.

This is DyCL's host program. The generated module defines `bind(rt)`, which looks every segment
function up once and returns `main(*inputs)`. Tensors stay `iree.runtime` device arrays between
segment calls; only the scalars a decision needs are read back (`to_bool`, `to_int`,
`to_float`); shape reads use the buffer's shape and need no sync. `rt.decide` and `rt.trips`
count which branch sides and how many loop iterations ran when the caller asks for it (`verify`).

The generated code imports nothing but `math`, so it runs wherever `host_runtime` runs.

Example:
    >>> print(synthesize_python(program))      # doctest: +SKIP
"""

from __future__ import annotations

import keyword
import math
from typing import Any

from host_runtime import scalar_ops

from ..guards import CHECK_INDEX
from ..program import (
    REFINE,
    STAND_IN,
    Arg,
    Emitter,
    HostOp,
    If,
    ListArg,
    Loop,
    Program,
    ScalarType,
    SegmentCall,
    TensorType,
    Value,
)
from ..sources import relative_sources

# TorchScript's reads of a one-element tensor as a host scalar, and the runtime service for each.
_READ_BACKS = {"aten::Bool.Tensor": "to_bool", "aten::Int.Tensor": "to_int", "aten::Float.Tensor": "to_float"}


class _Writer(Emitter):
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[Value, str] = {}
        self.used: set[str] = set()
        self.depth = 2

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def name(self, value: Value) -> str:
        existing = self.names.get(value)
        if existing is not None:
            return existing
        base = value.name if value.name and value.name.isidentifier() else "v"
        name = f"{base}{value.id}"
        if keyword.iskeyword(name):
            name += "_"
        self.names[value] = name
        return name

    def expr(self, arg: Arg) -> str:
        if isinstance(arg, Value):
            return self.name(arg)
        if isinstance(arg, ListArg):
            return "[" + ", ".join(self.expr(a) for a in arg.items) + "]"
        value = arg.value
        if isinstance(value, (bool, int, float, str)) or value is None:
            return _literal(value)
        if isinstance(value, list) and all(isinstance(v, (bool, int, float)) for v in value):
            return "[" + ", ".join(_literal(v) for v in value) + "]"
        return "None"  # an uninitialized placeholder on a path that raised

    def targets(self, values: tuple[Value, ...]) -> str:
        if len(values) == 1:
            return self.name(values[0]) + ","
        return ", ".join(self.name(v) for v in values)

    def segment_call(self, node: SegmentCall) -> None:
        args = []
        for arg in node.args:
            text = self.expr(arg)
            kind = arg.type.kind if isinstance(arg, Value) and isinstance(arg.type, ScalarType) else None
            if kind == "float":
                text = f"float_arg({text})"  # floats enter segments as 0-d float32 tensors
            elif kind == "bool":
                text = f"int({text})"
            args.append(text)
        self.emit(f"{self.targets(node.outputs)} = {node.segment}({', '.join(args)})")

    def host_op(self, node: HostOp) -> None:
        target = node.target
        args = [self.expr(a) for a in node.args]
        out = self.name(node.outputs[0]) if node.outputs else ""
        source = f"    # {node.source}" if node.source else ""
        if target in _READ_BACKS:
            self.emit(f"{out} = {_READ_BACKS[target]}({args[0]}){source}")
        elif target == "aten::size.int":
            self.emit(f"{out} = {args[0]}.shape[{args[1]}]{source}")
        elif target == "aten::tensor":
            self.emit(f"{out} = to_array({args[0]}, {args[1]}){source}")
        elif target == CHECK_INDEX:
            index, low, high, message = args
            self.emit(f"if not {low} <= {index} < {high}:")
            self.emit(f"    raise ModelRaised({message})")
        elif target == "prim::RaiseException":
            self.emit(f"raise ModelRaised({args[0]} + {' (' + node.source + ')'!r})")
        elif target == "aten::__getitem__.t":
            # Python's IndexError past either end would escape the host bare: raise as PyTorch does.
            items, index = args
            message = relative_sources(f"IndexError: list index out of range ({node.source})".replace("\\", "/"))
            self.emit(f"if not -len({items}) <= {index} < len({items}):")
            self.emit(f"    raise ModelRaised({message!r})")
            self.emit(f"{out} = {items}[{index}]{source}")
        elif target == REFINE:
            self.emit(f"{out} = {args[0]}    # the size every path that goes on gives it{source}")
        elif target == STAND_IN:
            type_ = node.outputs[0].type
            if isinstance(type_, TensorType) and type_.dtype in _STAND_IN_DTYPES and len(type_.hint) == type_.rank:
                # Never read on this path for its values, but a segment may still take it: the
                # rows of a list returned from inside a loop and the list the other path built are
                # stacked in one call after the join (fuzzer seed 90062), and iree.runtime refuses
                # None. Zeros of the example's shape, as the compiled host's stand-in.
                count, shape = math.prod(type_.hint), tuple(type_.hint)
                self.emit(
                    f"{out} = to_array(0, {type_.dtype!r}).repeat({count}).reshape({shape!r})"
                    f"    # never read on this path{source}"
                )
            else:
                self.emit(f"{out} = None    # never read on this path{source}")
        else:
            self.emit(f"{out} = {scalar_ops.render(target, args)}{source}")

    def assign(self, values: tuple[Value, ...], args: tuple[Arg, ...]) -> None:
        if values:
            self.emit(f"{', '.join(self.name(v) for v in values)} = {', '.join(self.expr(a) for a in args)}")

    def if_(self, node: If) -> None:
        self.emit(f"if decide({self.expr(node.condition)}, {node.label!r}):    # {node.source}")
        for index, block in enumerate((node.then_block, node.else_block)):
            if index == 1:
                self.emit("else:")
            self.depth += 1
            start = len(self.lines)
            self.block(block)
            self.assign(node.outputs, block.results)
            if len(self.lines) == start:
                self.emit("pass")
            self.depth -= 1

    def loop(self, node: Loop) -> None:
        index, *carried = node.body.params
        self.assign(tuple(carried), node.initial)
        go = f"go{index.id}"
        self.emit(f"{self.name(index)} = 0")
        self.emit(f"{go} = {self.expr(node.condition)}")
        trip = self.expr(node.trip_count)
        self.emit(f"while {go} and {self.name(index)} < {trip}:    # {node.label} {node.source}")
        self.depth += 1
        self.block(node.body)
        self.emit(f"{go} = {self.expr(node.body.results[0])}")
        self.assign(tuple(carried), node.body.results[1:])
        self.emit(f"{self.name(index)} += 1")
        self.depth -= 1
        self.emit(f"trips({node.label!r}, {self.name(index)})")
        self.assign(node.outputs, tuple(carried))


def synthesize_python(program: Program) -> str:
    """The source of the Python host of `program` (see the module docstring)."""
    writer = _Writer()
    params = [writer.name(v) for v in program.inputs]
    writer.block(program.body)
    results = [writer.expr(r) for r in program.body.results]
    segments = "\n".join(f"    {s.name} = rt.segment({s.name!r})" for s in program.segments)
    header = [
        f'"""Host program of {program.name}, generated by dycl_iree: the control flow of the model,',
        "calling its compiled segments through iree.runtime. Regenerate it instead of editing it.",
        '"""',
        "import math  # noqa: F401  (used by some scalar ops)",
        "",
        "",
        "def bind(rt):",
        segments,
        "    to_bool, to_int, to_float = rt.to_bool, rt.to_int, rt.to_float",
        "    to_array, float_arg = rt.to_array, rt.float_arg",
        "    decide, trips, ModelRaised = rt.decide, rt.trips, rt.ModelRaised",
        "",
        f"    def main({', '.join(params)}):",
    ]
    footer = [f"        return ({', '.join(results)}{',' if len(results) == 1 else ''})", "", "    return main", ""]
    return "\n".join(header + writer.lines + footer)


# The dtypes the runtime's `to_array` makes.
_STAND_IN_DTYPES = {"float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool"}


def _literal(value: Any) -> str:
    """A constant as Python source: `repr`, but for the floats whose repr is no Python expression
    (`-float("inf")`, a beam search's first bound, is `-inf`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)
