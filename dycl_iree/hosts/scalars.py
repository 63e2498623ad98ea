"""Host scalar arithmetic in the compiled host, as ops on 0-d tensors.

TorchScript's scalar ops (`aten::add.int`, `aten::pow.int_float`, `aten::__not__`, `math.sqrt`,
`int(x.item())`, ...) mostly have no legal lowering from the torch dialect in IREE 3.13 (only the
handful in `compiled._LEGAL_HOST_OPS` do; `aten.__not__`, `aten.Int.Scalar`, float `lt` and most
float ops fail to legalize). The same arithmetic on 0-d tensors always lowers, and IREE folds it
into the host code of `main`: each operand becomes a 0-d tensor (int and bool as int64, float as
float64, as TorchScript computes them), one tensor op computes the result, and `aten.Int/Float/
Bool.Tensor` reads it back as a scalar. One table per kind of op; `SUPPORTED` lists them all (the
README's table and the tests read it).

Example:
    >>> "aten::__not__" in SUPPORTED and "aten::sqrt" in SUPPORTED
    True
"""

from __future__ import annotations

import math
from typing import Any

# Binary ops: TorchScript op -> the tensor op computing it. `mixed` ops compute in float64 when an
# operand (or the result) is a float, else in int64; `float` ops always compute in float64.
_BINARY = {
    "aten::add": ("aten.add.Tensor", "mixed"),
    "aten::sub": ("aten.sub.Tensor", "mixed"),
    "aten::mul": ("aten.mul.Tensor", "mixed"),
    "aten::div": ("aten.div.Tensor", "float"),  # `/` is true division: a float even of two ints
    "aten::floordiv": ("aten.floor_divide", "mixed"),
    "aten::remainder": ("aten.remainder.Tensor", "mixed"),
    "aten::pow": ("aten.pow.Tensor_Tensor", "mixed"),
    "prim::min": ("aten.minimum", "mixed"),
    "prim::max": ("aten.maximum", "mixed"),
    "aten::__and__": ("aten.bitwise_and.Tensor", "int"),
    "aten::__or__": ("aten.bitwise_or.Tensor", "int"),
    "aten::__xor__": ("aten.bitwise_xor.Tensor", "int"),
    "aten::__lshift__": ("aten.bitwise_left_shift.Tensor", "int"),
    "aten::__rshift__": ("aten.bitwise_right_shift.Tensor", "int"),
    "aten::lt": ("aten.lt.Tensor", "mixed"),
    "aten::le": ("aten.le.Tensor", "mixed"),
    "aten::gt": ("aten.gt.Tensor", "mixed"),
    "aten::ge": ("aten.ge.Tensor", "mixed"),
    "aten::eq": ("aten.eq.Tensor", "mixed"),
    "aten::ne": ("aten.ne.Tensor", "mixed"),
}
# Comparisons give a bool tensor; every other op gives a number.
_COMPARISONS = {"aten::lt", "aten::le", "aten::gt", "aten::ge", "aten::eq", "aten::ne"}
# Unary ops: TorchScript op -> (tensor op, the kind it computes in). `same` keeps the operand's kind.
_UNARY = {
    "aten::log10": ("aten.log", "float"),
    "aten::neg": ("aten.neg", "same"),
    "prim::abs": ("aten.abs", "same"),
    "aten::fabs": ("aten.abs", "float"),
    "aten::floor": ("aten.floor", "float"),  # math.floor / math.ceil of a float give an int
    "aten::ceil": ("aten.ceil", "float"),
    "aten::round": ("aten.round", "float"),
    "aten::isnan": ("aten.isnan", "float"),
    "aten::isinf": ("aten.isinf", "float"),
    **{
        f"aten::{name}": (f"aten.{name}", "float")
        for name in (
            "sqrt",
            "exp",
            "log",
            "log1p",
            "expm1",
            "sin",
            "cos",
            "tan",
            "tanh",
            "asin",
            "acos",
            "atan",
            "sinh",
            "cosh",
            "asinh",
            "acosh",
            "atanh",
            "erf",
        )
    },
}
# Conversions between kinds (`int(f)`, `float(i)`, `bool(i)`, `int(s.item())` of a Scalar).
_CONVERSIONS = {"aten::Int": "int", "aten::Float": "float", "aten::Bool": "bool"}
# Ops whose int form fails the call on a zero divisor, as TorchScript raises (it crashes the
# process for `%`; a bundle must not).
_DIVISIONS = {"aten::floordiv", "aten::remainder"}

SUPPORTED = sorted({*_BINARY, *_UNARY, *_CONVERSIONS, "aten::__not__"})

_TENSOR = {
    "int": "!torch.vtensor<[],si64>",
    "float": "!torch.vtensor<[],f64>",
    "bool": "!torch.vtensor<[],i1>",
    "float32": "!torch.vtensor<[],f32>",
}
_SCALAR = {"int": "!torch.int", "float": "!torch.float", "bool": "!torch.bool"}
_DTYPE_CODE = {"int": 4, "float": 7, "bool": 11, "float32": 6}
# Host floats are float64, as in Python (CPU targets keep float64: `compile._CPU`); IREE 3.13 has no
# float64 form of these (`decompositions._FLOAT32_IN_FLOAT64` says why), so they compute in float32.
_FLOAT32_ONLY = {f"aten::{name}" for name in ("sin", "cos", "tan", "tanh", "asin", "acos", "atan", "erf")}


def kind_of(arg: Any) -> str | None:
    """The scalar kind of an argument (a Value of ScalarType or a Python constant), else None."""
    type_ = getattr(arg, "type", None)
    if type_ is not None:
        return getattr(type_, "kind", None) if type(type_).__name__ == "ScalarType" else None
    value = getattr(arg, "value", None)
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return None


def emit_scalar_op(emitter: Any, key: str, args: tuple, output_kind: str, source: str, result: str) -> bool:
    """Emit `result` = the scalar op `key` ("aten::add") of `args`; False where this table has no form."""
    kinds = [kind_of(arg) for arg in args]
    if None in kinds or output_kind not in _SCALAR:
        return False
    if key in _BINARY and len(args) == 2:
        op, rule = _BINARY[key]
        if rule == "float" or (rule == "mixed" and "float" in (*kinds, output_kind)):
            compute = "float"
        else:
            compute = "int"
        left, right = (_as_tensor(emitter, arg, compute) for arg in args)
        if key in _DIVISIONS and compute == "int":
            right = _checked_divisor(emitter, args[1], right, source)
        tensor, have = emitter.fresh(), ("bool" if key in _COMPARISONS else compute)
        if key == "aten::pow" and compute == "float" and kinds[1] != "float":
            tensor = _power_of_an_integer(emitter, left, right, _as_tensor(emitter, args[1], "int"))
        elif key == "aten::remainder" and compute == "float":
            tensor = _float_remainder(emitter, left, right)
        elif op in ("aten.add.Tensor", "aten.sub.Tensor"):
            one = emitter.constant(1, None)[0]
            emitter.emit(
                f"{tensor} = torch.{op} {left}, {right}, {one} : "
                f"{_TENSOR[compute]}, {_TENSOR[compute]}, !torch.int -> {_TENSOR[have]}"
            )
        else:
            emitter.emit(
                f"{tensor} = torch.{op} {left}, {right} : {_TENSOR[compute]}, {_TENSOR[compute]} -> {_TENSOR[have]}"
            )
    elif key in _UNARY and len(args) == 1:
        op, rule = _UNARY[key]
        compute = kinds[0] if rule == "same" else rule
        compute = "int" if compute == "bool" else compute
        operand = _as_tensor(emitter, args[0], compute)
        have = "bool" if op in ("aten.isnan", "aten.isinf") else compute
        tensor = emitter.fresh()
        if key in _FLOAT32_ONLY:
            narrowed = _to_dtype(emitter, operand, "float", "float32")
            emitter.emit(f"{tensor} = torch.{op} {narrowed} : {_TENSOR['float32']} -> {_TENSOR['float32']}")
            tensor = _to_dtype(emitter, tensor, "float32", "float")
        else:
            emitter.emit(f"{tensor} = torch.{op} {operand} : {_TENSOR[compute]} -> {_TENSOR[have]}")
        if key == "aten::log10":
            # log(x) / ln(10): IREE's CPU code calls libm's log10f, which iree-lld cannot resolve
            # ("undefined symbol: log10f"); its log is an inline polynomial.
            scale, scaled = emitter.constant(1.0 / math.log(10.0), None)[0], emitter.fresh()
            emitter.emit(
                f"{scaled} = torch.aten.mul.Scalar {tensor}, {scale} : {_TENSOR[have]}, !torch.float -> {_TENSOR[have]}"
            )
            tensor = scaled
    elif key == "aten::__not__" and len(args) == 1:
        operand, have, tensor = _as_tensor(emitter, args[0], "int"), "bool", emitter.fresh()
        zero = emitter.constant(0, None)[0]
        emitter.emit(
            f"{tensor} = torch.aten.eq.Scalar {operand}, {zero} : {_TENSOR['int']}, !torch.int -> {_TENSOR['bool']}"
        )
    elif key in _CONVERSIONS and len(args) == 1:
        have = "float" if kinds[0] == "float" else "int"
        tensor = _as_tensor(emitter, args[0], have)
    else:
        return False
    _read_back(emitter, tensor, have, output_kind, result)
    return True


def _power_of_an_integer(emitter: Any, base: str, exponent: str, integer: str) -> str:
    """`base ** exponent` for an int exponent, a negative base included: |base| ** exponent, negated
    for an odd exponent of a negative base. IREE computes a float power as exp(y log x), which is NaN
    for a negative x ((-2.0) ** 3 came out NaN; TorchScript gives -8.0)."""
    f64, i64, i1 = _TENSOR["float"], _TENSOR["int"], _TENSOR["bool"]
    magnitude, power, negated = emitter.fresh(), emitter.fresh(), emitter.fresh()
    emitter.emit(f"{magnitude} = torch.aten.abs {base} : {f64} -> {f64}")
    emitter.emit(f"{power} = torch.aten.pow.Tensor_Tensor {magnitude}, {exponent} : {f64}, {f64} -> {f64}")
    emitter.emit(f"{negated} = torch.aten.neg {power} : {f64} -> {f64}")
    zero, two = emitter.constant(0, None)[0], emitter.constant(2, None)[0]
    parity, odd, below, flip, result = (emitter.fresh() for _ in range(5))
    emitter.emit(f"{parity} = torch.aten.remainder.Scalar {integer}, {two} : {i64}, !torch.int -> {i64}")
    emitter.emit(f"{odd} = torch.aten.ne.Scalar {parity}, {zero} : {i64}, !torch.int -> {i1}")
    emitter.emit(f"{below} = torch.aten.lt.Scalar {base}, {zero} : {f64}, !torch.int -> {i1}")
    emitter.emit(f"{flip} = torch.aten.logical_and {odd}, {below} : {i1}, {i1} -> {i1}")
    emitter.emit(f"{result} = torch.aten.where.self {flip}, {negated}, {power} : {i1}, {f64}, {f64} -> {f64}")
    return result


def _float_remainder(emitter: Any, left: str, right: str) -> str:
    """`left % right` of floats as `left - right * floor(left / right)`, Python's sign rule. IREE lowers
    a float64 remainder to libm's `fmod`, which iree-lld cannot resolve ("undefined symbol: fmod")."""
    f64 = _TENSOR["float"]
    quotient, floored, product, result = (emitter.fresh() for _ in range(4))
    one = emitter.constant(1, None)[0]
    emitter.emit(f"{quotient} = torch.aten.div.Tensor {left}, {right} : {f64}, {f64} -> {f64}")
    emitter.emit(f"{floored} = torch.aten.floor {quotient} : {f64} -> {f64}")
    emitter.emit(f"{product} = torch.aten.mul.Tensor {floored}, {right} : {f64}, {f64} -> {f64}")
    emitter.emit(f"{result} = torch.aten.sub.Tensor {left}, {product}, {one} : {f64}, {f64}, !torch.int -> {f64}")
    return result


def _as_tensor(emitter: Any, arg: Any, kind: str) -> str:
    """`arg` as a 0-d tensor of `kind` ("int": int64, bools as 0/1; "float": float64)."""
    have = kind_of(arg)
    name, type_text = emitter.operand(arg, _SCALAR["int"] if have == "bool" else _SCALAR[have])
    source_kind = "float" if have == "float" else "int"
    tensor = emitter.fresh()
    emitter.emit(f"{tensor} = torch.prim.NumToTensor.Scalar {name} : {type_text} -> {_TENSOR[source_kind]}")
    return _to_dtype(emitter, tensor, source_kind, kind)


def _to_dtype(emitter: Any, tensor: str, have: str, want: str) -> str:
    if have == want:
        return tensor
    code, false, none, converted = emitter.fresh(), emitter.fresh(), emitter.fresh(), emitter.fresh()
    emitter.emit(f"{code} = torch.constant.int {_DTYPE_CODE[want]}")
    emitter.emit(f"{false} = torch.constant.bool false")
    emitter.emit(f"{none} = torch.constant.none")
    emitter.emit(
        f"{converted} = torch.aten.to.dtype {tensor}, {code}, {false}, {false}, {none} : "
        f"{_TENSOR[have]}, !torch.int, !torch.bool, !torch.bool, !torch.none -> {_TENSOR[want]}"
    )
    return converted


def _read_back(emitter: Any, tensor: str, have: str, want: str, result: str) -> None:
    """`result` = the 0-d `tensor` (of kind `have`) as a scalar of kind `want`."""
    if want == "bool" and have != "bool":
        zero, nonzero = emitter.constant(0, None)[0], emitter.fresh()
        emitter.emit(
            f"{nonzero} = torch.aten.ne.Scalar {tensor}, {zero} : {_TENSOR[have]}, !torch.int -> {_TENSOR['bool']}"
        )
        tensor, have = nonzero, "bool"
    elif want != "bool":
        tensor = _to_dtype(emitter, tensor, "int" if have == "bool" else have, want)
        have = want
    op = {"int": "aten.Int.Tensor", "float": "aten.Float.Tensor", "bool": "aten.Bool.Tensor"}[want]
    emitter.emit(f"{result} = torch.{op} {tensor} : {_TENSOR[have]} -> {_SCALAR[want]}")


def _checked_divisor(emitter: Any, divisor: Any, tensor: str, source: str) -> str:
    """Fail the call on an int division by zero, with TorchScript's message (`a // 0`; TorchScript
    crashes the process on `a % 0`, a bundle must not), and divide by 1 instead: the division is
    computed whatever the assertion decides (IREE orders the two freely), and an int division by
    zero would stop the process with SIGFPE."""
    value = getattr(divisor, "value", None)
    if isinstance(value, int) and value != 0:
        return tensor
    i64, i1 = _TENSOR["int"], _TENSOR["bool"]
    zero, one = emitter.constant(0, None)[0], emitter.constant(1, None)[0]
    nonzero, safe, flag = emitter.fresh(), emitter.fresh(), emitter.fresh()
    emitter.emit(f"{nonzero} = torch.aten.ne.Scalar {tensor}, {zero} : {i64}, !torch.int -> {i1}")
    emitter.emit(f"{flag} = torch.aten.Bool.Tensor {nonzero} : {i1} -> !torch.bool")
    emitter.emit(f'torch.runtime.assert {flag}, "{emitter.message_text("RuntimeError: division by 0", source)}"')
    emitter.emit(f"{safe} = torch.aten.where.ScalarOther {nonzero}, {tensor}, {one} : {i1}, {i64}, !torch.int -> {i64}")
    return safe
