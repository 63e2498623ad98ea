"""TorchScript schemas and torch.ops overloads: which overload a node calls, what it does to its arguments.

A TorchScript node names its operator by schema text; the FX graphs `lower` builds call
`torch.ops.<ns>.<name>.<overload>`, so the overload is found by matching schemas (ENVIRONMENT.md).
TorchScript also stores dtypes, memory formats and layouts as int codes: the tables here turn
them back into torch enums.

Example:
    >>> overload_of("aten::linear.default")                             # doctest: +SKIP
    <OpOverload(op='aten.linear', overload='default')>
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import torch

from ..errors import UnsupportedOpError
from ..program import Constant, ListArg

# c10::ScalarType codes as TorchScript stores them in int constants.
SCALAR_TYPE_CODES = {
    0: torch.uint8,
    1: torch.int8,
    2: torch.int16,
    3: torch.int32,
    4: torch.int64,
    5: torch.float16,
    6: torch.float32,
    7: torch.float64,
    11: torch.bool,
    15: torch.bfloat16,
}
DTYPE_CODES = {dtype: code for code, dtype in SCALAR_TYPE_CODES.items()}
MEMORY_FORMAT_CODES = {
    0: torch.contiguous_format,
    1: torch.preserve_format,
    2: torch.channels_last,
    3: torch.channels_last_3d,
}
LAYOUT_CODES = {0: torch.strided}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def overload_of(target: str) -> Any:
    """ "aten::linear.default" -> torch.ops.aten.linear.default."""
    namespace, _, rest = target.partition("::")
    name, _, overload_name = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), name), overload_name or "default")


def convert_args(args: list, convert: Any) -> list:
    return [convert(a) for a in args]


def convert_kwargs(kwargs: list, convert: Any) -> list:
    return [(k, convert(a)) for k, a in kwargs]


def call_overload(overload: Any, args: list, kwargs: list, convert: Any, source: str, target: str) -> Any:
    try:
        return overload(*convert_args(args, convert), **dict(convert_kwargs(kwargs, convert)))
    except Exception as error:
        raise UnsupportedOpError(target, source, detail=f"cannot compute its result type: {error}") from error


# Ops whose second argument is the result's shape.
_SHAPED_BY_ARGUMENT = ("aten::reshape.default", "aten::view.default")


def unknown_sizes(target: str, args: list, tensor: torch.Tensor) -> tuple:
    """The sizes of a result that no perturbed meta run could compute (None: dynamic): every dim,
    but those a `reshape` or `view` is given as constants. A reshape of `[1, T, 8]` to `[1, T // 2,
    16]` fails where T and the int T // 2 are perturbed apart (the product no longer matches), and
    its batch and width, made dynamic, sent the RNN-T's padding-mask branch (`if B == 1`) both ways."""
    if target in _SHAPED_BY_ARGUMENT and len(args) > 1 and isinstance(args[1], ListArg):
        given = [item.value if isinstance(item, Constant) else None for item in args[1].items]
        if len(given) == tensor.dim():
            return tuple(d if isinstance(g, int) and g == d else None for g, d in zip(given, tensor.shape))
    return tuple(None for _ in tensor.shape)


def result_tensors(result: Any, returns: str) -> list[torch.Tensor]:
    if returns == "single":
        return [result]
    return list(result)


_SOURCE_LINE = re.compile(r'File "([^"]+)", line (\d+)')


def source_of(node: torch._C.Node) -> str:
    """ "file.py:12" of the TorchScript node, or "" when TorchScript kept no source."""
    try:
        text = node.sourceRange()
    except Exception:
        return ""
    match = _SOURCE_LINE.search(text or "")
    if not match:
        return ""
    where = f"{match.group(1)}:{match.group(2)}"
    if _inside_torch(match.group(1)):
        # Inside torch's own code (`F.embedding` of an `nn.Embedding`): TorchScript keeps only that
        # line, but the module path tells which of the model's submodules made the call.
        owner = _module_path(node)
        if owner:
            where += f" called by {owner}"
    return where


_TORCH_FOLDER = Path(torch.__file__).resolve().parent


@functools.lru_cache(maxsize=1024)
def _inside_torch(path: str) -> bool:
    """Whether a source file is torch's own (one `resolve` per file, not per node)."""
    return Path(path).resolve().is_relative_to(_TORCH_FOLDER)


def _module_path(node: torch._C.Node) -> str:
    """`self.blocks.3.conv (Conv2d)` from TorchScript's module hierarchy of an inlined node, or ""."""
    try:
        hierarchy = node.getModuleHierarchy()
    except Exception:
        return ""
    names, kind = [], ""
    for name, type_name in re.findall(r"([\w.]*?)\((\w+)\)", hierarchy):
        name = name.strip(".")
        if not name or name == "UNKNOWN_INSTANCE":
            break
        names.append(name)
        kind = type_name
    return f"self.{'.'.join(names)} ({kind})" if names else ""


_OVERLOAD_CACHE: dict[str, Any] = {}


def resolve_overload(node: torch._C.Node) -> Any:
    """The `torch.ops` overload whose schema is the node's schema (None for schema-less prim ops)."""
    try:
        schema_text = node.schema()
    except RuntimeError:
        return None
    if schema_text == "(no schema)":
        return None
    if schema_text in _OVERLOAD_CACHE:
        return _OVERLOAD_CACHE[schema_text]
    namespace, name = node.kind().split("::")
    packet = getattr(getattr(torch.ops, namespace, None), name, None)
    found = None
    if packet is not None:
        for overload_name in packet.overloads():
            overload = getattr(packet, overload_name)
            if str(overload._schema) == schema_text:
                found = overload
                break
    _OVERLOAD_CACHE[schema_text] = found
    return found


def schema_touches_tensors(schema: Any) -> bool:
    types = [str(a.type) for a in schema.arguments] + [str(r.type) for r in schema.returns]
    return any("Tensor" in t for t in types)


def mutates_first_argument(schema: Any) -> bool:
    if not schema.arguments:
        return False
    alias = schema.arguments[0].alias_info
    return alias is not None and alias.is_write and "Tensor" in str(schema.arguments[0].type)


def returns_view(schema: Any) -> bool:
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


# In-place ops whose functional form has another name: `x.normal_(mean, std)` has no `aten::normal`
# overload of its arguments (`normal.float_float` takes a size), but `normal_functional` is its twin.
_FUNCTIONAL_NAMES = {"normal_": "normal_functional"}


def functional_overload(overload: Any) -> Any:
    schema = overload._schema
    name = schema.name.split("::")[1]
    functional_name = _FUNCTIONAL_NAMES.get(name, name[:-1] if name.endswith("_") else name)
    packet = getattr(torch.ops.aten, functional_name, None)
    if packet is None:
        return None
    wanted = [str(a.type) for a in schema.arguments]
    for overload_name in packet.overloads():
        candidate = getattr(packet, overload_name)
        arguments = candidate._schema.arguments
        if [str(a.type) for a in arguments] == wanted and not mutates_first_argument(candidate._schema):
            if not any(a.alias_info is not None and a.alias_info.is_write for a in arguments):
                return candidate
    return None
