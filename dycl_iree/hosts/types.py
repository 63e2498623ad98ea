"""The compiled host's MLIR types: the torch dialect type of each Program type, and the refusal of
those `main` cannot carry (`CompiledHostUnsupported`, after which the bundle uses the Python host)."""

from __future__ import annotations

from ..program import ListType, ScalarType, TensorType, Type

INT64_MAX = 9223372036854775807

# torch's ScalarType codes, as `torch.aten.zeros` takes its dtype.
DTYPE_CODES = {
    "uint8": 0,
    "int8": 1,
    "int16": 2,
    "int32": 3,
    "int64": 4,
    "float16": 5,
    "float32": 6,
    "float64": 7,
    "bool": 11,
    "bfloat16": 15,
}

MLIR_DTYPE = {
    "float32": "f32",
    "float64": "f64",
    "float16": "f16",
    "bfloat16": "bf16",
    "int64": "si64",
    "int32": "si32",
    "int16": "si16",
    "int8": "si8",
    "uint8": "ui8",
    "bool": "i1",
}


class CompiledHostUnsupported(Exception):
    """The Program uses something the compiled host cannot express; the reason says what and where."""


def mlir_type(type_: Type) -> str:
    if isinstance(type_, TensorType):
        dims = ",".join("?" if d is None else str(d) for d in type_.shape)
        if type_.dtype not in MLIR_DTYPE:
            raise CompiledHostUnsupported(f"tensors of dtype {type_.dtype}")
        return f"!torch.vtensor<[{dims}],{MLIR_DTYPE[type_.dtype]}>"
    if isinstance(type_, ScalarType):
        return {"int": "!torch.int", "float": "!torch.float", "bool": "!torch.bool"}[type_.kind]
    if isinstance(type_, ListType) and type_.element == "int":
        # A list of ints that grows at run time lives on the device as a 1-D int64 tensor.
        return INT_LIST
    if isinstance(type_, ListType) and type_.element == "float":
        # A list of floats as a 1-D float64 tensor: TorchScript's floats are doubles (`lists.py`).
        return FLOAT_LIST
    raise CompiledHostUnsupported(f"lists of {type_.element} that change at run time (they need the Python host)")


INT_LIST = "!torch.vtensor<[?],si64>"
FLOAT_LIST = "!torch.vtensor<[?],f64>"
