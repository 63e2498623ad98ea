"""What specialize knows about each TorchScript value: its *entry*, and the entries' types.

An entry is a `Constant` (known at export time), a typed `Value` (known only at run time), a
`ListArg` (a fixed-length list), a `TupleEntry`, a `TensorList`, or one of the structured kinds of
`structured` (Optionals, dicts, NamedTuples, objects). This module holds what the visitor asks of
entries (their types, the join of two paths' types, flattening for outputs) and the types of the
graph inputs from the example inputs and the dims declared dynamic.

Example:
    >>> join_types(TensorType("float32", (1, 4), (1, 4)), TensorType("float32", (1, 5), (1, 5)), "")  # doctest: +SKIP
    TensorType(dtype='float32', shape=(1, None), hint=(1, 5))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import torch

from host_runtime import scalar_ops

from ..capture import CapturedModel
from ..errors import SpecializeError, UnsupportedOpError
from ..program import Constant, HostOp, ListArg, ListType, ScalarType, TensorType, Type, Value
from .schemas import LAYOUT_CODES, MEMORY_FORMAT_CODES, SCALAR_TYPE_CODES, dtype_name

UNINITIALIZED = object()
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class TupleEntry:
    items: tuple


@dataclass(frozen=True)
class TensorList:
    """A `List[Tensor]` whose length is only known at run time, kept as its tensors stacked on dim 0.

    A list of tensors whose appends all happen in straight-line code stays a `ListArg`, one value
    per tensor. Once its length depends on the path taken (an early exit returns it, a loop with
    `break` appends to it), it becomes this: `value` is the stacked tensor (dim 0 dynamic), an
    append is a `cat`, `len` a shape read, `xs[i]` a `select`, and `torch.stack(xs)` the value
    itself. The elements must share dtype and shape, as `torch.stack` requires; both hosts hand
    it back as a Python list.
    """

    value: Value


@dataclass(frozen=True)
class RaggedList:
    """A `List[Tensor]` of run-time length whose tensors differ in size along one dim, `dim`: kept
    as the tensors concatenated along that dim (`value`, that dim dynamic) and the size of each
    along it (`sizes`, a 1-D int64 tensor with one item per tensor).

    Lists that segment a sequence (`chunks.append(x[start:i])`), collect per-row outputs of
    different lengths, or keep a memory of pieces of different sizes are read by
    `torch.cat(xs, dim)`: in this form that is `value` itself, an append is a `cat` of the value
    and one of the sizes, `len` a shape read of `sizes`, and `xs[i]` a `narrow` at the sum of the
    sizes before it. The tensors must agree in dtype, rank and every other dim, as `torch.cat`
    requires; both hosts hand the list back as a Python list. See `ragged_lists`.

    `first_sizes`: the list started empty with its tensors' other sizes unknown until its first
    append (a mask block per segment, as wide as the utterance): the empty form is 0 in those
    dims too, and an append to a list that holds no tensor yet takes the tensor itself.
    """

    value: Value
    sizes: Value
    dim: int
    first_sizes: bool = False


@dataclass(frozen=True)
class TupleList:
    """A `List[Tuple[Tensor, ...]]` whose length is only known at run time, kept as one list of
    run-time length per tuple element (`fields`: TensorLists or RaggedLists of equal length).

    An early exit that returns its predictions so far, each a tuple (`preds.append((logits,
    confidence))`), makes lists of tuples whose length depends on the path: in this form each
    element is an ordinary list of tensors, so an append is an append to each, `xs[i]` a tuple of
    each list's item, `len` the first list's length, and both hosts hand it back as a Python list
    of tuples. See `tuple_lists`.

    With `lists` set, the items are fixed-length lists instead of tuples: a hypothesis's recurrent
    state, a `List[List[Tensor]]` of one list per layer, is a list of run-time length (one state per
    hypothesis) of lists whose lengths the model fixes; each such list is carried as a tuple is, and
    `xs[i]` is a list.
    """

    fields: tuple
    lists: bool = False


@dataclass(frozen=True)
class RaggedInts:
    """A `List[List[int]]` whose length is only known at run time, its lists of different lengths:
    kept as two host lists of ints, `values` (every list's ints, one list after another) and
    `bounds` (where each list starts, then where the last ends: one item more than there are lists).

    A decoder's hypotheses hold their tokens so far (`(tokens, score)` tuples in a beam): kept in a
    list of run-time length, each hypothesis's tokens are one slice of `values`, `xs[i]` is
    `values[bounds[i]:bounds[i + 1]]`, an append extends `values` and appends its new length to
    `bounds`, and `len` is one less than `bounds`'s. See `ragged_ints`.

    `width` is the one length of every list, where export knows it (a comprehension's rows,
    `[[token] for token in tokens]`), else None: `torch.tensor` of the lists needs it.
    """

    values: Value
    bounds: Value
    width: int | None = None


def is_unset_list(entry: Any) -> bool:
    """Whether `entry` is the stand-in of a list of run-time length that one path leaves unset (a
    `return` slot of an iteration that did not return: `structured.unset_like`), never read."""
    if isinstance(entry, (TensorList, RaggedList)):
        return isinstance(entry.value, Constant) and entry.value.value is UNINITIALIZED
    if isinstance(entry, RaggedInts):
        return isinstance(entry.values, Constant) and entry.values.value is UNINITIALIZED
    if isinstance(entry, TupleList):
        return all(is_unset_list(field) for field in entry.fields)
    return False


def real_value(arg: Any) -> Any:
    if isinstance(arg, Constant):
        return arg.value
    if isinstance(arg, ListArg):
        return [real_value(a) for a in arg.items]
    raise SpecializeError("internal: folding a run-time value")


def walk_args(args: Iterable[Any]) -> Iterable[Any]:
    for arg in args:
        if isinstance(arg, ListArg):
            yield from walk_args(arg.items)
        else:
            yield arg


def is_dynamic(value: Value) -> bool:
    type_ = value.type
    if isinstance(type_, TensorType):
        return any(d is None for d in type_.shape)
    return isinstance(type_, (ScalarType, ListType)) and getattr(type_, "kind", "int") == "int"


def value_name(ts_value: torch._C.Value) -> str:
    name = ts_value.debugName().split(".")[0]
    return name if not name.isdigit() else ""


def split_arguments(schema: Any, entries: list) -> tuple[list, list]:
    """Positional and keyword arguments, with TorchScript's int codes turned into torch enums."""
    args: list = []
    kwargs: list = []
    for argument, entry in zip(schema.arguments, entries):
        real = str(argument.real_type)
        if isinstance(entry, Constant) and entry.value is not None:
            if "ScalarType" in real and isinstance(entry.value, int):
                entry = Constant(SCALAR_TYPE_CODES[entry.value])
            elif "MemoryFormat" in real and isinstance(entry.value, int):
                entry = Constant(MEMORY_FORMAT_CODES[entry.value])
            elif "Layout" in real and isinstance(entry.value, int):
                entry = Constant(LAYOUT_CODES[entry.value])
        if isinstance(entry, TupleEntry):
            entry = ListArg(tuple(entry.items))
        if argument.kwarg_only:
            kwargs.append((argument.name, entry))
        else:
            args.append(entry)
    return args, kwargs


def scalar_list_kind(ts_type: Any) -> str | None:
    """ "int" / "float" / "bool" for a TorchScript list of scalars, None for other lists."""
    text = str(ts_type)
    for kind in ("int", "float", "bool"):
        if text == f"List[{kind}]" or text == f"{kind}[]":
            return kind
    return None


def holds_only_tensors(entry: Any) -> bool:
    """A TensorList or RaggedList, or a ListArg whose items are all tensors (an empty one included)."""
    if isinstance(entry, (TensorList, RaggedList)):
        return True
    return isinstance(entry, ListArg) and all(tensor_type_of(item) is not None for item in entry.items)


def element_type(types: list[TensorType], source: str) -> TensorType:
    """The one type of a run-time list's tensors: they must agree, as `torch.stack` requires."""
    first = types[0]
    for other in types[1:]:
        if other.dtype != first.dtype or other.rank != first.rank:
            raise SpecializeError(
                f"a list of tensors whose length changes at run time holds {first.dtype}{list(first.shape)} "
                f"and {other.dtype}{list(other.shape)} ({source}): its tensors must share dtype and shape"
            )
    shape = []
    for dims in zip(*(t.shape for t in types)):
        if None in dims:
            shape.append(None)
        elif len(set(dims)) > 1:
            raise SpecializeError(
                f"a list of tensors whose length changes at run time holds tensors of sizes "
                f"{sorted(set(dims))} in one dim ({source}): its tensors must share dtype and shape"
            )
        else:
            shape.append(dims[0])
    hint = tuple(max(t.hint[d] for t in types) for d in range(first.rank))
    return TensorType(first.dtype, tuple(shape), hint)


def list_element_kind(ts_type: Any, source: str = "") -> str:
    text = str(ts_type)
    for kind in ("int", "float", "bool"):
        if text == f"List[{kind}]" or text == f"{kind}[]":
            return kind
    where = f" ({source})" if source else ""
    raise SpecializeError(
        f"a run-time value of type {text}{where}: a list whose items are lists, tuples, dicts or objects "
        "cannot change at run time; lists of int, float, bool or tensors can"
    )


def type_from_ts(ts_type: Any, hint: Any, source: str = "") -> Type:
    text = str(ts_type)
    if text in ("int", "float", "bool"):
        default = {"int": 1, "float": 1.0, "bool": True}[text]
        return ScalarType(text, hint if hint is not None else default)
    if text in ("Scalar", "number"):
        kind = "float" if isinstance(hint, float) else "int"
        return ScalarType(kind, hint if hint is not None else 1)
    if text.startswith("List[") or text.endswith("[]"):
        return ListType(list_element_kind(ts_type, source), tuple(hint or ()))
    where = f" ({source})" if source else ""
    raise SpecializeError(f"a run-time value of type {text} on the host is not supported{where}")


def fold_scalar(kind: str, overload: Any, values: list, source: str) -> Any:
    if kind == "aten::str" and len(values) == 1:  # messages of `raise`: its schema's `t` takes no int
        return str(values[0])
    op = scalar_ops.lookup(kind)
    if op is not None:
        try:
            return op.function(*values)
        except Exception as error:
            raise SpecializeError(f"{kind} fails on the example values ({source}): {error}") from error
    if overload is not None:
        try:
            return overload(*values)
        except Exception as error:
            raise SpecializeError(f"cannot evaluate {kind} at export time ({source}): {error}") from error
    raise UnsupportedOpError(kind, source, detail="cannot be evaluated at export time")


def python_scalar(tensor: torch.Tensor, kind: str) -> Any:
    item = tensor.item()
    if kind == "aten::Bool":
        return bool(item)
    if kind in ("aten::Int", "aten::IntImplicit"):
        return int(item)
    if kind in ("aten::Float", "aten::FloatImplicit"):
        return float(item)
    return item


# ---------------------------------------------------------------------------------------------
# Entries and their types


def is_none(entry: Any) -> bool:
    return isinstance(entry, Constant) and entry.value is None


def tensor_type_of(entry: Any) -> TensorType | None:
    if isinstance(entry, Value) and isinstance(entry.type, TensorType):
        return entry.type
    if isinstance(entry, Constant) and isinstance(entry.value, torch.Tensor):
        shape = tuple(entry.value.shape)
        return TensorType(dtype_name(entry.value.dtype), shape, shape)
    return None


def scalar_kind_of(entry: Any) -> str:
    if isinstance(entry, Value) and isinstance(entry.type, ScalarType):
        return entry.type.kind
    if isinstance(entry, Constant):
        return {bool: "bool", int: "int", float: "float"}.get(type(entry.value), "int")
    return "int"


def holds_values(entry: Any) -> bool:
    if isinstance(entry, Value):
        return True
    if isinstance(entry, ListArg):
        return any(holds_values(i) for i in entry.items)
    return False


def hint_of(entry: Any) -> Any:
    if isinstance(entry, Constant):
        return entry.value
    if isinstance(entry, Value):
        return entry.type.hint
    if isinstance(entry, ListArg):
        return [hint_of(i) for i in entry.items]
    return None


def same_constant(a: Any, b: Any) -> bool:
    if not (isinstance(a, Constant) and isinstance(b, Constant)):
        return False
    if isinstance(a.value, torch.Tensor) or isinstance(b.value, torch.Tensor):
        return a.value is b.value
    return type(a.value) is type(b.value) and a.value == b.value


def type_of(entry: Any, source: str) -> Type | None:
    if isinstance(entry, Value):
        return entry.type
    if isinstance(entry, Constant):
        value = entry.value
        if value is UNINITIALIZED:
            return None
        if isinstance(value, bool):
            return ScalarType("bool", value)
        if isinstance(value, int):
            return ScalarType("int", value)
        if isinstance(value, float):
            return ScalarType("float", value)
        if isinstance(value, torch.Tensor):
            return tensor_type_of(entry)
        if isinstance(value, list) and all(isinstance(v, (int, float, bool)) for v in value):
            kind = scalar_kind_of(Constant(value[0])) if value else "int"
            return ListType(kind, tuple(value))
        if value is None:
            raise SpecializeError(
                f"a value that is None on one path and set on another ({source}): Optional values "
                "cannot cross data-dependent control flow; give it a default (e.g. a zero tensor)"
            )
    raise SpecializeError(
        f"{_described(entry)} cannot change inside data-dependent control flow ({source}): a value a "
        "data-dependent loop or branch sets must be a tensor, an int, float or bool, or a list of "
        "those; keep this one outside the loop or branch, or hold it in a tensor"
    )


def _described(entry: Any) -> str:
    """What `entry` holds, for an error: `a List[List[int]] ([[0]])`, `a ListArg of 2 items`."""
    value = entry.value if isinstance(entry, Constant) else None
    if isinstance(value, (list, tuple)):
        inner = {type(v).__name__ for v in value}
        kinds = {"list": "List", "tuple": "Tuple", "Tensor": "Tensor"}
        inner_text = ", ".join(sorted(kinds.get(k, k) for k in inner)) or "..."
        if value and all(isinstance(v, list) for v in value):
            items = {type(i).__name__ for v in value for i in v} or {"int"}
            inner_text = f"List[{', '.join(sorted(items))}]"
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        return f"a {kinds[type(value).__name__]}[{inner_text}] ({shown})"
    if isinstance(entry, Constant):
        return f"a {type(value).__name__} ({value!r:.40})"
    if isinstance(entry, ListArg):
        return f"a list of {len(entry.items)} items"
    return f"a {type(entry).__name__}"


def join_types(a: Type | None, b: Type | None, source: str) -> Type | None:
    """The least type that holds both (dims that differ become dynamic)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        if a.dtype != b.dtype:
            raise SpecializeError(f"a tensor is {a.dtype} on one path and {b.dtype} on another ({source})")
        if a.rank != b.rank:
            raise SpecializeError(f"a tensor has rank {a.rank} on one path and {b.rank} on another ({source})")
        shape = tuple(x if x == y else None for x, y in zip(a.shape, b.shape))
        hint = tuple(h if s is not None else max(h, g, 2) for h, g, s in zip(a.hint, b.hint, shape))
        return TensorType(a.dtype, shape, hint)
    if isinstance(a, ScalarType) and isinstance(b, ScalarType):
        if a.kind != b.kind:
            if {a.kind, b.kind} == {"int", "float"}:
                return ScalarType("float", float(a.hint))
            raise SpecializeError(f"a value is {a.kind} on one path and {b.kind} on another ({source})")
        return a
    if isinstance(a, ListType) and isinstance(b, ListType):
        return ListType(a.element, a.hint if len(a.hint) >= len(b.hint) else b.hint)
    raise SpecializeError(f"a value changes kind between paths ({source})")


def tuple_items(entry: Any) -> tuple | None:
    """The items of a tuple entry, or of a tuple TorchScript folded into a constant; None otherwise."""
    if isinstance(entry, TupleEntry):
        return entry.items
    if isinstance(entry, Constant) and isinstance(entry.value, tuple):
        return tuple(Constant(item) for item in entry.value)
    return None


def literal_list(entry: Any) -> Any:
    """A list folded into a constant (`[0] * 2`, `[1, 2]`) as the literal list of its items (what a
    write to one of its items makes it); another entry as it is."""
    if isinstance(entry, Constant) and isinstance(entry.value, list):
        return ListArg(tuple(Constant(item) for item in entry.value))
    return entry


def tuples_of_constants(entry: Any) -> Any:
    """A tuple TorchScript folded into one constant (`(zeros, zeros)` as a state) as a TupleEntry of
    constants, so that it lines up with the other side's tuple of run-time values."""
    if isinstance(entry, Constant) and isinstance(entry.value, tuple):
        return TupleEntry(tuple(tuples_of_constants(Constant(item)) for item in entry.value))
    if isinstance(entry, TupleEntry):
        return TupleEntry(tuple(tuples_of_constants(item) for item in entry.items))
    if isinstance(entry, ListArg):  # a list of such tuples (`hyps = [([blank], 0.0)]`)
        return ListArg(tuple(tuples_of_constants(item) for item in entry.items))
    return entry


def describe_entry(entry: Any) -> str:
    """What a value is, in a user's words (for a refusal that compares two paths)."""
    if isinstance(entry, TupleEntry):
        return f"a tuple of {len(entry.items)}"
    if isinstance(entry, ListArg):
        return f"a list of {len(entry.items)}"
    if isinstance(entry, TensorList):
        return "a list of tensors of run-time length"
    if isinstance(entry, RaggedList):
        return f"a list of tensors of run-time length concatenated along dim {entry.dim}"
    if isinstance(entry, TupleList):
        return f"a list of run-time length of tuples of {len(entry.fields)}"
    if isinstance(entry, RaggedInts):
        return "a list of run-time length of lists of ints"
    tensor_type = tensor_type_of(entry)
    if tensor_type is not None:
        return f"a tensor {tensor_type.dtype}{list(tensor_type.shape)}".replace("None", "?")
    if isinstance(entry, Value):
        kind = getattr(entry.type, "kind", None) or f"list of {getattr(entry.type, 'element', '?')}"
        return f"an {kind}" if kind == "int" else f"a {kind}"
    if isinstance(entry, Constant):
        if entry.value is None:
            return "None"
        if entry.value is UNINITIALIZED:
            return "unset"
        name = type(entry.value).__name__
        return f"{'an' if name == 'int' else 'a'} {name} ({entry.value!r})"
    return f"a {type(entry).__name__}"


def _kind(entry: Any) -> str:
    """The kind two paths' values must share: "tensor", "number", "bool", "None", or the collection."""
    if isinstance(entry, (TupleEntry, ListArg, TensorList, RaggedList, TupleList, RaggedInts)):
        return describe_entry(entry)
    if tensor_type_of(entry) is not None:
        return "tensor"
    if isinstance(entry, Constant) and entry.value is UNINITIALIZED:
        return "unset"
    if isinstance(entry, Constant):
        value = entry.value
        if value is None:
            return "None"
        if isinstance(value, list):
            return "list of scalars"  # host lists of any length join (`ListType`)
        return "bool" if isinstance(value, bool) else ("number" if isinstance(value, (int, float)) else repr(value))
    if isinstance(entry, Value) and isinstance(entry.type, ScalarType):
        return "bool" if entry.type.kind == "bool" else "number"
    if isinstance(entry, Value) and isinstance(entry.type, ListType):
        return "list of scalars"
    return describe_entry(entry)


def structure_difference(a: list, b: list, names: list[str]) -> str:
    """Where two paths' values first differ in structure or kind, e.g. "result 0 is a tuple of 2 on
    one side and a tuple of 3 on the other", or "" where they agree."""

    def walk(x: Any, y: Any, path: str) -> str:
        if isinstance(x, (TupleEntry, ListArg)) and type(x) is type(y) and len(x.items) == len(y.items):
            noun = "element" if isinstance(x, TupleEntry) else "item"
            for index, (p, q) in enumerate(zip(x.items, y.items)):
                found = walk(p, q, f"{path}, {noun} {index}")
                if found:
                    return found
            return ""
        if _kind(x) == _kind(y) or {"unset", "None"} & {_kind(x), _kind(y)}:
            # The same kind of value (their types are joined), one never read, or an Optional
            # (`type_of` says what it needs).
            return ""
        return f"{path} is {describe_entry(x)} on one side and {describe_entry(y)} on the other"

    for x, y, name in zip(a, b, names):
        found = walk(x, y, name)
        if found:
            return found
    return ""


# ---------------------------------------------------------------------------------------------
# Entry point


def input_types(captured: CapturedModel, example_inputs: tuple, dynamic_shapes: Any = None) -> list[Type | None]:
    """Types of the graph inputs, from the example inputs and the dims declared dynamic.

    An `Optional` input whose example is None has no type (None): the export specializes to it
    being None, as it specializes to the example's dtype and rank, since a None example says
    nothing of the tensor or scalar it could be. An `Optional` input with a tensor or scalar
    example is typed by it, as set."""
    ts_inputs = list(captured.graph.inputs())[1:]
    if len(example_inputs) != len(ts_inputs):
        raise SpecializeError(
            f"{captured.name}.forward takes {len(ts_inputs)} inputs "
            f"({', '.join(captured.input_names)}) but {len(example_inputs)} example inputs were given"
        )
    dynamic = dynamic_dims(captured, dynamic_shapes)
    types: list[Type] = []
    for name, ts_value, example, dims in zip(captured.input_names, ts_inputs, example_inputs, dynamic):
        declared = str(ts_value.type())
        if example is None:
            if not declared.startswith("Optional["):
                raise SpecializeError(
                    f"example input {name!r} is None, but {captured.name}.forward declares it {declared}: "
                    "only an Optional input may be None"
                )
            types.append(None)
            continue
        if declared.startswith("Optional["):
            declared = declared[len("Optional[") : -1]  # set in the example: typed as set
        if isinstance(example, torch.Tensor):
            if "Tensor" not in declared:
                raise SpecializeError(f"input {name!r} is declared {declared} but the example is a tensor")
            shape = tuple(None if d in dims else int(s) for d, s in enumerate(example.shape))
            hint = tuple(max(int(s), 2) if d in dims else int(s) for d, s in enumerate(example.shape))
            types.append(TensorType(dtype_name(example.dtype), shape, hint))
        elif isinstance(example, bool):
            types.append(ScalarType("bool", example))
        elif isinstance(example, int):
            types.append(ScalarType("int", example))
        elif isinstance(example, float):
            types.append(ScalarType("float", example))
        else:
            raise SpecializeError(
                f"example input {name!r} is a {type(example).__name__}: inputs must be tensors, "
                "Python int, float or bool, or None for an Optional input"
            )
        if isinstance(example, (bool, int, float)) and declared not in ("int", "float", "bool"):
            raise SpecializeError(
                f"input {name!r} is declared {declared} but the example is a {type(example).__name__}"
            )
    return types


def none_inputs(captured: CapturedModel, types: list[Type | None]) -> tuple[tuple[str, str, bool], ...]:
    """The inputs exported as None (`input_types` gave them no type): (name, declared type, whether
    `forward` defaults it to None, so that a call may leave it out), for the Program and manifest."""
    arguments = captured.scripted.forward.schema.arguments[1:]  # the first is `self`
    ts_inputs = list(captured.graph.inputs())[1:]
    found = []
    for name, type_, argument, ts_value in zip(captured.input_names, types, arguments, ts_inputs):
        if type_ is None:
            defaults_none = argument.has_default_value() and argument.default_value is None
            found.append((name, str(ts_value.type()), defaults_none))
    return tuple(found)


def dynamic_dims(captured: CapturedModel, dynamic_shapes: Any) -> list[set[int]]:
    count = len(captured.input_names)
    if dynamic_shapes is None:
        return [set() for _ in range(count)]
    if isinstance(dynamic_shapes, dict):
        unknown = set(dynamic_shapes) - set(captured.input_names)
        if unknown:
            raise SpecializeError(
                f"dynamic_shapes names unknown inputs {sorted(unknown)}; inputs are {list(captured.input_names)}"
            )
        per_input = [dynamic_shapes.get(name) for name in captured.input_names]
    else:
        per_input = list(dynamic_shapes)
        if len(per_input) != count:
            raise SpecializeError(f"dynamic_shapes has {len(per_input)} entries for {count} inputs")
    dims: list[set[int]] = []
    for spec in per_input:
        if spec is None:
            dims.append(set())
        elif isinstance(spec, dict):
            dims.append({int(d) for d in spec})
        else:
            dims.append({d for d, s in enumerate(spec) if s is not None})
    return dims


# -- appending to and reading an item of a list of any kind -------------------------------------
# One dispatch on the list kinds above, shared by every construct that appends to a list or reads
# an item of it at a run-time index (`xs.append`, a list of tuples' element lists, a dict keyed at
# run time's log): a new list kind is handled where it is added. `specializer` is the specializer
# (its mixins emit each kind's nodes).


def append_to_list(specializer: Any, items: Any, item: Any, source: str, name: str = "items") -> Any:
    """`items` with `item` appended: a fixed-length list stays one (straight-line code), a list of
    run-time length grows as its kind does, a host list by a host `append` (its value named `name`).

    Example:
        >>> append_to_list(specializer, ListArg((x,)), y, "m.py:3")  # doctest: +SKIP
        ListArg(items=(x, y))
    """
    if isinstance(items, ListArg):
        return ListArg((*items.items, item))
    if isinstance(items, TupleList):
        return specializer.append_to_tuple_list(items, item, source)
    if isinstance(items, RaggedInts):
        return specializer.append_to_ragged_ints(items, item, source)
    if isinstance(items, RaggedList):
        return specializer.append_to_ragged(items, item, source)
    if isinstance(items, TensorList):
        return specializer.append_to_tensor_list(items, item, source)
    if isinstance(items, Value) and isinstance(items.type, ListType):
        value = specializer.new_value(ListType(items.type.element, (*items.type.hint, hint_of(item))), name)
        specializer.nodes.append(HostOp("aten::append.t", (items, item), (value,), source))
        if items in specializer.known_lists and isinstance(item, Constant):
            specializer.known_lists[value] = (*specializer.known_lists[items], item.value)
        return value
    raise SpecializeError(f"append to a list that was not created as a run-time list ({source})")


def list_item(specializer: Any, items: Any, index: Any, source: str) -> Any:
    """`items[index]`, `index` known only at run time (PyTorch's index check included): a
    fixed-length list of tuples is read as a TupleList, one of tensors as a TensorList (a
    RaggedList where its tensors differ in one dim), a host list by a host `__getitem__`.

    Example:
        >>> list_item(specializer, TensorList(stacked), i, "m.py:3")  # doctest: +SKIP
        Value(name='item', ...)
    """
    if isinstance(items, ListArg) and items.items and all(is_tuple_entry(entry) for entry in items.items):
        items = specializer.tuple_list(items, source)
    elif isinstance(items, ListArg):
        dim = specializer.list_layout([items], source) if holds_only_tensors(items) else None
        if dim is None:
            items = specializer.tensor_list(items, None, source)
        else:  # tensors of different sizes in one dim
            items = specializer.ragged_list(items, dim, specializer.ragged_element([items], dim, source), source)
    if isinstance(items, TupleList):
        return specializer.tuple_list_item(items, index, source)
    if isinstance(items, RaggedInts):
        return specializer.ragged_ints_item(items, index, source)
    if isinstance(items, RaggedList):
        return specializer.ragged_item(items, index, source)
    if isinstance(items, TensorList):
        return specializer.tensor_list_item(items, index, source)
    if isinstance(items, Value) and isinstance(items.type, ListType):  # Python's IndexError past either end
        return specializer.emit_host("aten::__getitem__.t", (items, index), items.type.element, source)
    raise SpecializeError(f"indexing {describe_entry(items)} at run time ({source}): it is not a list")


def is_tuple_entry(entry: Any) -> bool:
    """A tuple: its entry, or one TorchScript folded into a constant."""
    return isinstance(entry, TupleEntry) or (isinstance(entry, Constant) and isinstance(entry.value, tuple))
