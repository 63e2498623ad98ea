"""Inputs and outputs of `python -m dycl_iree run`, written the way `iree-run-module` takes them.

An input is one of:
    1x8xf32=0.5 1 2 3 4 5 6 7     shape, element type and values (one value fills the whole tensor)
    f32=2.5                        a 0-d tensor
    3, 2.5, true                   an int, float or bool input
    @x.npy                         a file holding one array
    @inputs.npz                    a file holding every input, keyed by the model's input names
                                   (or arg0, arg1, ... in forward order)
Outputs go to an `.npz` keyed by the runner's output names (`output0`, `output1`, ...).
This module imports numpy only (no torch, no IREE).

Example:
    >>> parse_input("2x2xi64=1 2 3 4", {"name": "x", "kind": "tensor", "dtype": "int64", "shape": [2, 2]}, 0)
    array([[1, 2],
           [3, 4]])
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from host_runtime.errors import InputError

# iree-run-module's element type names, and the numpy dtype of each.
ELEMENT_TYPES = {
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "i1": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "ui8": np.uint8,
    "u8": np.uint8,
}
_TYPED = re.compile(r"^(?:(?P<shape>(?:\d+x)*)(?P<type>[a-z]+\d+))=(?P<values>.*)$", re.S)
_SCALAR_KINDS = ("int", "float", "bool")


def element_type_name(dtype: str) -> str:
    """iree-run-module's spelling of a torch dtype name, for examples in messages."""
    names = {np.dtype(v).name: k for k, v in ELEMENT_TYPES.items() if k != "u8"}
    return names.get("bool" if dtype == "bool" else dtype, dtype)


def example_syntax(spec: dict[str, Any]) -> str:
    """How to write an input of this spec on the command line (`1x8xf32=...`, `3`)."""
    if spec["kind"] != "tensor":
        return {"int": "3", "float": "0.5", "bool": "true"}.get(spec["kind"], spec["kind"])
    dims = "x".join(str(1 if d is None else d) for d in spec["shape"])
    return f"{dims + 'x' if dims else ''}{element_type_name(spec['dtype'])}=..."


def parse_input(text: str, spec: dict[str, Any], position: int) -> Any:
    """One `--input` value for the input described by `spec` (a manifest entry)."""
    where = f"--input {position} ({spec['name']!r})"
    if text.startswith("@"):
        path = Path(text[1:])
        return _read_array_file(path, spec, where)
    match = _TYPED.match(text.strip())
    if match:
        type_name = match.group("type")
        if type_name not in ELEMENT_TYPES:
            raise InputError(f"{where}: unknown element type {type_name!r}; known: {', '.join(ELEMENT_TYPES)}")
        dtype = np.dtype(ELEMENT_TYPES[type_name])
        shape = tuple(int(d) for d in match.group("shape").split("x") if d)
        words = [w for w in re.split(r"[\s,\[\]]+", match.group("values")) if w]
        try:
            values = np.array([_word(w, dtype) for w in words], dtype=dtype)
        except ValueError as error:
            raise InputError(f"{where}: {error}") from error
        count = int(np.prod(shape)) if shape else 1
        if values.size == 1 and count != 1:
            values = np.full(count, values[0], dtype=dtype)
        if values.size != count:
            raise InputError(f"{where}: shape {list(shape)} holds {count} values, {values.size} given")
        return values.reshape(shape)
    kind = spec["kind"]
    if kind == "tensor":
        raise InputError(f"{where} is a tensor: write it as {example_syntax(spec)} or @FILE.npy")
    return scalar(text.strip(), spec, where)


def scalar(value: Any, spec: dict[str, Any], where: str) -> Any:
    """An int/float/bool input from text or a 0-d array."""
    kind = spec["kind"]
    try:
        if isinstance(value, str):
            if kind == "bool":
                lowered = value.lower()
                if lowered not in ("true", "false", "1", "0"):
                    raise ValueError(f"{value!r} is not true, false, 1 or 0")
                return lowered in ("true", "1")
            return int(value) if kind == "int" else float(value)
        array = np.asarray(value)
        if array.size != 1:
            raise ValueError(f"an array of shape {list(array.shape)} where one {kind} belongs")
        return {"int": int, "float": float, "bool": bool}[kind](array.reshape(()).item())
    except (ValueError, OverflowError) as error:
        raise InputError(f"{where} must be {'an' if kind == 'int' else 'a'} {kind}: {error}") from error


def read_inputs(texts: Sequence[str], specs: list[dict[str, Any]]) -> tuple:
    """The model's inputs from `--input` values: one per input, or one `@FILE.npz` holding them all."""
    if len(texts) == 1 and texts[0].startswith("@") and texts[0].endswith(".npz"):
        return read_npz(Path(texts[0][1:]), specs)
    if len(texts) != len(specs):
        wanted = " ".join(f"--input={example_syntax(spec)}" for spec in specs)
        names = ", ".join(spec["name"] for spec in specs)
        raise InputError(
            f"the model takes {len(specs)} input{'' if len(specs) == 1 else 's'} ({names}), {len(texts)} given; "
            f"e.g. {wanted}, or --input=@inputs.npz"
        )
    return tuple(parse_input(text, spec, index) for index, (text, spec) in enumerate(zip(texts, specs)))


def read_npz(path: Path, specs: list[dict[str, Any]]) -> tuple:
    """Every input from an `.npz`, keyed by the model's input names or by arg0, arg1, ..."""
    if path.suffix == ".npy":
        if len(specs) != 1:
            raise InputError(f"{path}: one array, but the model takes {len(specs)} inputs; give an .npz of them all")
        return (_read_array_file(path, specs[0], "input 0"),)
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError as error:
        raise InputError(f"{path}: no such file") from error
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise InputError(f"{path}: not an .npz archive ({error})") from error
    with archive as data:
        keys = set(data.files)
        values = []
        for index, spec in enumerate(specs):
            key = spec["name"] if spec["name"] in keys else f"arg{index}"
            if key not in keys:
                have = ", ".join(sorted(keys)) or "nothing"
                wanted = ", ".join(s["name"] for s in specs)
                raise InputError(
                    f"{path}: no array {spec['name']!r} (nor arg{index}); it holds {have}, the model takes {wanted}"
                )
            array = data[key]
            values.append(array if spec["kind"] == "tensor" else scalar(array, spec, f"{path}[{key!r}]"))
    return tuple(values)


def write_outputs(path: Path, names: Sequence[str], leaves: Sequence[Any]) -> None:
    """Write the outputs to an `.npz`, one array per output name (scalars as 0-d arrays); an unset
    Optional's value is left out (its `_has_value` flag is false)."""
    np.savez(path, **{name: np.asarray(value) for name, value in zip(names, leaves) if value is not None})


def _read_array_file(path: Path, spec: dict[str, Any], where: str) -> Any:
    if path.suffix == ".npz":
        raise InputError(f"{where}: {path} holds several arrays; give --input=@{path} alone for all inputs")
    try:
        array = np.load(path, allow_pickle=False)
    except FileNotFoundError as error:
        raise InputError(f"{where}: {path}: no such file") from error
    except (OSError, ValueError) as error:
        raise InputError(f"{where}: {path} is not an .npy file ({error})") from error
    return array if spec["kind"] == "tensor" else scalar(array, spec, where)


def _word(word: str, dtype: np.dtype) -> Any:
    if dtype == np.bool_:
        if word.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"{word!r} is not a bool (true, false, 1, 0)")
        return word.lower() in ("true", "1")
    if dtype.kind in "iu":
        return int(word)
    return float(word)
