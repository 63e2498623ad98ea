"""What each host-side scalar and list op means, in plain Python.

One table serves three readers: the exporter folds constants and computes example values with
it, the reference interpreter runs host nodes with it, and the generated Python host inlines its
expression templates. Keys are TorchScript op names without the overload ("aten::add"): Python's
own operators are already polymorphic over int, float and bool, and TorchScript's scalar ops follow
Python semantics (floor division and remainder round toward negative infinity).

Example:
    >>> SCALAR_OPS["aten::floordiv"].function(-7, 2)
    -4
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class ScalarOp:
    function: Callable[..., Any]
    # A Python expression with {0}, {1}, ... for the arguments, used by the generated host.
    template: str


def _append(items: list, item: Any) -> list:
    # Lists are values in the Program (SSA): append returns a new list.
    return [*items, item]


def _rfind_int_list(values: list, bounds: list, key: list) -> int:
    found = [k for k in range(len(bounds) - 1) if values[bounds[k] : bounds[k + 1]] == key]
    return found[-1] if found else -1


def _to_int(a: Any) -> int:
    return int(a) if math.isfinite(a) else -(2**63)


def _div(a: float, b: float) -> float:
    return a / b


SCALAR_OPS: dict[str, ScalarOp] = {
    "aten::add": ScalarOp(lambda a, b: a + b, "({0} + {1})"),
    "aten::sub": ScalarOp(lambda a, b: a - b, "({0} - {1})"),
    "aten::mul": ScalarOp(lambda a, b: a * b, "({0} * {1})"),
    "aten::div": ScalarOp(_div, "({0} / {1})"),
    "aten::floordiv": ScalarOp(lambda a, b: a // b, "({0} // {1})"),
    "aten::remainder": ScalarOp(lambda a, b: a % b, "({0} % {1})"),
    "aten::neg": ScalarOp(lambda a: -a, "(-{0})"),
    "aten::abs": ScalarOp(abs, "abs({0})"),
    "prim::abs": ScalarOp(abs, "abs({0})"),
    "aten::pow": ScalarOp(lambda a, b: a**b, "({0} ** {1})"),
    "prim::min": ScalarOp(min, "min({all})"),  # two ints, or one list (`prim::min.self_int`)
    "prim::max": ScalarOp(max, "max({all})"),
    "aten::lt": ScalarOp(lambda a, b: a < b, "({0} < {1})"),
    "aten::le": ScalarOp(lambda a, b: a <= b, "({0} <= {1})"),
    "aten::gt": ScalarOp(lambda a, b: a > b, "({0} > {1})"),
    "aten::ge": ScalarOp(lambda a, b: a >= b, "({0} >= {1})"),
    "aten::eq": ScalarOp(lambda a, b: a == b, "({0} == {1})"),
    "aten::ne": ScalarOp(lambda a, b: a != b, "({0} != {1})"),
    # Bitwise, as TorchScript's `&` and `|` of ints (`and`/`or` would give 3 for 7 & 3); on bools the same.
    "aten::__and__": ScalarOp(lambda a, b: a & b, "({0} & {1})"),
    "aten::__or__": ScalarOp(lambda a, b: a | b, "({0} | {1})"),
    "aten::__xor__": ScalarOp(lambda a, b: a ^ b, "({0} ^ {1})"),
    "aten::__not__": ScalarOp(lambda a: not a, "(not {0})"),
    "aten::__lshift__": ScalarOp(lambda a, b: a << b, "({0} << {1})"),
    "aten::__rshift__": ScalarOp(lambda a, b: a >> b, "({0} >> {1})"),
    # TorchScript's int() of a NaN or infinite float is INT64_MIN (the CPU's conversion), silently;
    # Python's raises. The hosts return what TorchScript returns.
    "aten::Int": ScalarOp(_to_int, "(int({0}) if math.isfinite({0}) else -9223372036854775808)"),
    "aten::Float": ScalarOp(float, "float({0})"),
    "aten::Bool": ScalarOp(bool, "bool({0})"),
    "aten::floor": ScalarOp(math.floor, "math.floor({0})"),
    "aten::ceil": ScalarOp(math.ceil, "math.ceil({0})"),
    "aten::sqrt": ScalarOp(math.sqrt, "math.sqrt({0})"),
    "aten::exp": ScalarOp(math.exp, "math.exp({0})"),
    "aten::log": ScalarOp(math.log, "math.log({0})"),
    # TorchScript's round of a float is a float (Python's is an int); both round half to even.
    "aten::round": ScalarOp(lambda a: float(round(a)), "float(round({0}))"),
    "aten::isnan": ScalarOp(math.isnan, "math.isnan({0})"),
    "aten::isinf": ScalarOp(math.isinf, "math.isinf({0})"),
    **{
        f"aten::{name}": ScalarOp(getattr(math, name), f"math.{name}({{0}})")
        for name in (
            "log10", "log1p", "expm1", "sin", "cos", "tan", "tanh", "asin", "acos", "atan",
            "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "fabs",
        )
    },  # fmt: skip
    "aten::len": ScalarOp(len, "len({0})"),
    "aten::append": ScalarOp(_append, "[*{0}, {1}]"),
    "aten::__getitem__": ScalarOp(lambda items, i: items[i], "{0}[{1}]"),
    # `xs[a:b]` of a host list (`aten::slice.t`), the step always 1 here.
    "aten::slice": ScalarOp(lambda items, start, end, step: items[start:end:step], "{0}[{1}:{2}:{3}]"),
    "aten::__contains__": ScalarOp(lambda items, x: x in items, "({1} in {0})"),
    "prim::ListConstruct": ScalarOp(lambda *items: list(items), "[{all}]"),
    # A dict keyed by the text of int lists (`str(tokens)`) finds a key as the last index of its int
    # list among the keys' int lists, held as values cut at bounds; -1 if absent.
    # Every int of a list moved by one amount (the bounds of a list of int lists after one is deleted).
    "dycl::add_to_ints": ScalarOp(lambda items, delta: [item + delta for item in items], "[v + {1} for v in {0}]"),
    "dycl::rfind_int_list": ScalarOp(
        _rfind_int_list, "max([k for k in range(len({1}) - 1) if {0}[{1}[k]:{1}[k + 1]] == {2}], default=-1)"
    ),
}


def op_key(target: str) -> str:
    """ "aten::add.int" -> "aten::add" (the table is keyed without overloads)."""
    namespace, _, name = target.partition("::")
    return namespace + "::" + name.split(".")[0]


# Int arithmetic that can leave the int64 range: TorchScript's ints are int64 and wrap around (as
# the compiled host's i64 ops do); Python's would grow.
_WRAPPING = frozenset(
    {"aten::add", "aten::sub", "aten::mul", "aten::neg", "aten::floordiv", "aten::abs", "prim::abs", "aten::__lshift__"}
)


def int64(value: Any) -> Any:
    """`value` wrapped into int64 as TorchScript computes it, if it is an int (bools and floats as they are).

    >>> int64(2**63), int64(-(2**63) - 1), int64(2.0**63)
    (-9223372036854775808, 9223372036854775807, 9.223372036854776e+18)
    """
    if type(value) is int:
        return (value + 2**63) % 2**64 - 2**63
    return value


def lookup(target: str) -> ScalarOp | None:
    key = op_key(target)
    op = SCALAR_OPS.get(key)
    if op is not None and key in _WRAPPING:
        return ScalarOp(lambda *args: int64(op.function(*args)), op.template)
    return op


def render(target: str, args: list[str]) -> str:
    """The Python expression of a host op applied to argument expressions."""
    op = SCALAR_OPS[op_key(target)]
    if "{all}" in op.template:
        return op.template.replace("{all}", ", ".join(args))
    text = op.template.format(*args)
    if op_key(target) in _WRAPPING and target.endswith(".int"):
        text = f"(({text} + {2**63}) % {2**64} - {2**63})"  # inline: a bundle's host needs no new helper
    return text
