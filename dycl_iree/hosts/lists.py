"""Host lists of ints and floats of run-time length in the compiled host: 1-D tensors in `main`.

A `List[int]` is an int64 tensor (`INT_LIST`), a `List[float]` a float64 one (`FLOAT_LIST`):
TorchScript's floats are doubles, so a score summed, compared or read back on the compiled host is
the same double the Python host and PyTorch compute. Appending is a concatenation, `len` a size,
`xs[i]` a select, `xs[a:b]` a tensor slice (which clamps and wraps as Python's does), `xs * n` a
repeat, and
`torch.tensor(xs)` the tensor itself, converted to the dtype asked for.

Example:
    >>> sorted(LIST_OPS)[:2]
    ['aten::__getitem__.t', 'aten::add.t']
"""

from __future__ import annotations

from typing import Any

from ..program import Constant, HostOp, ListArg, ListType, ScalarType, TensorType, Value
from .list_search import SEARCH_OPS
from .types import DTYPE_CODES, FLOAT_LIST, INT64_MAX, INT_LIST, MLIR_DTYPE, CompiledHostUnsupported, mlir_type

# The element kinds a run-time list of the compiled host holds: (its list type, its 0-d tensor type,
# its scalar type).
_ELEMENTS = {
    "int": (INT_LIST, "!torch.vtensor<[],si64>", "!torch.int"),
    "float": (FLOAT_LIST, "!torch.vtensor<[],f64>", "!torch.float"),
}
_DTYPES = {INT_LIST: ("int64", "si64"), FLOAT_LIST: ("float64", "f64")}


def _element_of(type_: Any, source: str) -> str:
    """The element kind of a list type the compiled host carries, else CompiledHostUnsupported."""
    mlir_type(type_)  # names the element kinds it refuses
    if not isinstance(type_, ListType) or type_.element not in _ELEMENTS:
        raise CompiledHostUnsupported(f"a list operation on a {type_} ({source})")
    return type_.element


def _list_operand(emitter: Any, arg: Any, source: str) -> tuple[str, str]:
    """The SSA name and element kind of a run-time list argument, or of a constant list of ints or
    of floats (folded from a literal: `[0] * n`), built here."""
    if isinstance(arg, Constant) and isinstance(arg.value, list) and arg.value:
        kinds = {type(item).__name__ for item in arg.value}
        if len(kinds) == 1 and kinds <= set(_ELEMENTS):
            (element,) = kinds
            result = emitter.fresh()
            emitter.scalar_list(tuple(Constant(item) for item in arg.value), element, result)
            return result, element
    if not isinstance(arg, Value):
        raise CompiledHostUnsupported(f"a list built on the host ({source})")
    element = _element_of(arg.type, source)
    return emitter.operand(arg, _ELEMENTS[element][0])[0], element


def _list_construct(emitter: Any, node: HostOp, result: str) -> str:
    element = _element_of(node.outputs[0].type, node.source)
    emitter.scalar_list(node.args, element, result)
    return _ELEMENTS[element][0]


def _list_append(emitter: Any, node: HostOp, result: str) -> str:
    element = _element_of(node.outputs[0].type, node.source)
    list_type = _ELEMENTS[element][0]
    items, _ = emitter.operand(node.args[0], list_type)
    row = emitter.fresh()
    one_row = f"!torch.vtensor<[1],{_DTYPES[list_type][1]}>"
    emitter.of_unknown_length(emitter.element_row(node.args[1], element), one_row, 1, row, list_type)
    emitter.concatenate([items, row], [list_type, list_type], result, list_type)
    return list_type


def _list_length(emitter: Any, node: HostOp, result: str) -> str:
    items, element = _list_operand(emitter, node.args[0], node.source)
    zero = emitter.constant(0, None)[0]
    list_type = _ELEMENTS[element][0]
    emitter.emit(f"{result} = torch.aten.size.int {items}, {zero} : {list_type}, !torch.int -> !torch.int")
    return "!torch.int"


def _list_to_tensor(emitter: Any, node: HostOp, result: str) -> str:
    """`torch.tensor(list)`: the list already is that tensor, converted to the dtype asked for (a list
    of floats gives float32 unless told otherwise, as PyTorch does)."""
    data, dtype = node.args
    want = mlir_type(node.outputs[0].type)
    if isinstance(data, Value) and isinstance(data.type, ScalarType):
        return _scalar_to_tensor(emitter, data, dtype.value, want, result)
    if isinstance(data, ListArg):
        kinds = {item.type.kind if isinstance(item, Value) else type(item.value).__name__ for item in data.items}
        if not data.items or not kinds <= {"int", "float"} or (dtype.value == "int64" and kinds != {"int"}):
            raise CompiledHostUnsupported(f"torch.tensor of a list of {', '.join(sorted(kinds)) or 'nothing'}")
        element = "int" if kinds == {"int"} else "float"
        items = emitter.fresh()
        emitter.scalar_list(data.items, element, items)
    elif isinstance(data, Value) and isinstance(data.type, ListType):
        items, element = _list_operand(emitter, data, node.source)
    else:
        raise CompiledHostUnsupported("torch.tensor of a host value that is neither a scalar nor a list")
    have = _ELEMENTS[element][0]
    if element == "int" and dtype.value != "int64" or element == "float" and "float" not in dtype.value:
        raise CompiledHostUnsupported(f"torch.tensor of a run-time list of {element} as {dtype.value}")
    if element == "float":
        # TorchScript builds the tensor in float32 and converts it after: `torch.tensor(xs,
        # dtype=torch.float64)` of [1/3] gives 0.3333333432674408, not Python's 1/3.
        single = "!torch.vtensor<[?],f32>"
        items, have = emitter.to_dtype(items, have, "float32", single), single
        if dtype.value != "float32":
            wide = f"!torch.vtensor<[?],{MLIR_DTYPE[dtype.value]}>"
            items, have = emitter.to_dtype(items, have, dtype.value, wide), wide
    emitter.emit(f"{result} = torch.tensor_static_info_cast {items} : {have} to {want}")
    return want


def _scalar_to_tensor(emitter: Any, data: Value, dtype: str, want: str, result: str) -> str:
    """`torch.tensor(i)` of a host int or float (a counter, a value read back): a 0-d tensor."""
    operand, have = emitter.operand(data)
    if data.type.kind == "int" and dtype == "int64":
        emitter.emit(f"{result} = torch.prim.NumToTensor.Scalar {operand} : !torch.int -> {want}")
        return want
    if data.type.kind == "float" and dtype == "float64":
        emitter.emit(f"{result} = torch.prim.NumToTensor.Scalar {operand} : !torch.float -> {want}")
        return want
    if data.type.kind in ("int", "float") and dtype == "float32":
        narrow = emitter.cast(emitter.operand(data, "!torch.float")[0], "!torch.float", want)
        emitter.emit(f"{result} = torch.tensor_static_info_cast {narrow} : {want} to {want}")
        return want
    raise CompiledHostUnsupported(f"torch.tensor of a host {data.type.kind} as {dtype}")


def _list_join(emitter: Any, node: HostOp, result: str) -> str:
    """`xs + ys` of two lists of ints or of floats: one concatenation."""
    list_type = _ELEMENTS[_element_of(node.outputs[0].type, node.source)][0]
    parts = [emitter.operand(arg, list_type)[0] for arg in node.args]
    emitter.concatenate(parts, [list_type, list_type], result, list_type)
    return list_type


def _list_item(emitter: Any, node: HostOp, result: str) -> str:
    """`xs[i]` of a list of ints or floats, after Python's check (-len <= i < len: a `select` past
    either end would read outside the buffer): a select at i, plus len where i is negative.

    Not a select of the list twice over at i + len: that copies the list on every read (a `for`
    over a list is quadratic), and where the list was a loop's result that a later append extends,
    the compiled host failed with OUT_OF_RANGE at `hal.device.queue.execute` (IREE 3.13; README,
    Known traps)."""
    output = node.outputs[0].type
    if not (isinstance(output, ScalarType) and output.kind in _ELEMENTS and output.kind == node.args[0].type.element):
        raise CompiledHostUnsupported(f"an item of a list of {output} ({node.source})")
    items, element = _list_operand(emitter, node.args[0], node.source)
    list_type, item_type, scalar_type = _ELEMENTS[element]
    index, _ = emitter.operand(node.args[1], "!torch.int")
    zero, minus_one = emitter.constant(0, None)[0], emitter.constant(-1, None)[0]
    length, low, above, below, inside, shifted, item = (emitter.fresh() for _ in range(7))
    emitter.emit(f"{length} = torch.aten.size.int {items}, {zero} : {list_type}, !torch.int -> !torch.int")
    emitter.emit(f"{low} = torch.aten.mul.int {length}, {minus_one} : !torch.int, !torch.int -> !torch.int")
    emitter.emit(f"{above} = torch.aten.ge.int {index}, {low} : !torch.int, !torch.int -> !torch.bool")
    emitter.emit(f"{below} = torch.aten.lt.int {index}, {length} : !torch.int, !torch.int -> !torch.bool")
    emitter.emit(f"{inside} = torch.aten.__and__.bool {above}, {below} : !torch.bool, !torch.bool -> !torch.bool")
    message = emitter.message_text("IndexError: list index out of range", node.source)
    emitter.emit(f'torch.runtime.assert {inside}, "{message}"')
    negative, wraps, offset = emitter.fresh(), emitter.fresh(), emitter.fresh()
    emitter.emit(f"{negative} = torch.aten.lt.int {index}, {zero} : !torch.int, !torch.int -> !torch.bool")
    emitter.emit(f"{wraps} = torch.aten.Int.bool {negative} : !torch.bool -> !torch.int")
    emitter.emit(f"{offset} = torch.aten.mul.int {length}, {wraps} : !torch.int, !torch.int -> !torch.int")
    emitter.emit(f"{shifted} = torch.aten.add.int {index}, {offset} : !torch.int, !torch.int -> !torch.int")
    emitter.emit(
        f"{item} = torch.aten.select.int {items}, {zero}, {shifted} : "
        f"{list_type}, !torch.int, !torch.int -> {item_type}"
    )
    read = "Int" if element == "int" else "Float"
    emitter.emit(f"{result} = torch.aten.{read}.Tensor {item} : {item_type} -> {scalar_type}")
    return scalar_type


def _list_slice(emitter: Any, node: HostOp, result: str) -> str:
    """`xs[a:b]` (step 1): a tensor slice, which clamps and wraps as Python's does."""
    items_arg, start_arg, end_arg, step = node.args
    if not (isinstance(step, Constant) and step.value == 1):
        raise CompiledHostUnsupported(f"a slice of a list with a step other than 1 ({node.source})")
    items, element = _list_operand(emitter, items_arg, node.source)
    list_type = _ELEMENTS[element][0]
    # An omitted bound (`xs[a:]`, `xs[:b]`) is None: from the start, to past the end.
    bounds = [
        Constant(default) if isinstance(arg, Constant) and arg.value is None else arg
        for arg, default in ((start_arg, 0), (end_arg, INT64_MAX))
    ]
    start, end = (emitter.operand(arg, "!torch.int")[0] for arg in bounds)
    zero, one = emitter.constant(0, None)[0], emitter.constant(1, None)[0]
    emitter.emit(
        f"{result} = torch.aten.slice.Tensor {items}, {zero}, {start}, {end}, {one} : "
        f"{list_type}, !torch.int, !torch.int, !torch.int, !torch.int -> {list_type}"
    )
    return list_type


def _list_repeat(emitter: Any, node: HostOp, result: str) -> str:
    """`xs * n` of a list of ints or floats: the tensor repeated max(n, 0) times (Python's empty list
    for n <= 0, where `repeat` would refuse a negative count)."""
    items, element = _list_operand(emitter, node.args[0], node.source)
    list_type = _ELEMENTS[element][0]
    count, _ = emitter.operand(node.args[1], "!torch.int")
    zero = emitter.constant(0, None)[0]
    times, counts = emitter.fresh(), emitter.fresh()
    emitter.emit(f"{times} = torch.prim.max.int {count}, {zero} : !torch.int, !torch.int -> !torch.int")
    emitter.emit(f"{counts} = torch.prim.ListConstruct {times} : (!torch.int) -> !torch.list<int>")
    emitter.emit(f"{result} = torch.aten.repeat {items}, {counts} : {list_type}, !torch.list<int> -> {list_type}")
    return list_type


def _add_to_ints(emitter: Any, node: HostOp, result: str) -> str:
    """Every int of a list moved by one amount: a tensor add of the scalar."""
    items, _ = emitter.operand(node.args[0], INT_LIST)
    delta, _ = emitter.operand(node.args[1], "!torch.int")
    one = emitter.constant(1, None)[0]
    emitter.emit(
        f"{result} = torch.aten.add.Scalar {items}, {delta}, {one} : {INT_LIST}, !torch.int, !torch.int -> {INT_LIST}"
    )
    return INT_LIST


# Host ops on run-time lists, emitted as tensor ops in `main`.
LIST_OPS = {
    **SEARCH_OPS,
    "dycl::add_to_ints": _add_to_ints,
    "prim::ListConstruct": _list_construct,
    "aten::append.t": _list_append,
    "aten::len.t": _list_length,
    "aten::tensor": _list_to_tensor,
    "aten::add.t": _list_join,
    "aten::__getitem__.t": _list_item,
    "aten::slice.t": _list_slice,
    "aten::mul.left_t": _list_repeat,
}


class ScalarLists:
    """The emitter's part that builds run-time lists (mixed into the compiled host's emitter)."""

    def element_row(self, arg: Any, element: str) -> str:
        """A one-element tensor holding an int (int64) or a float (float64)."""
        scalar, _ = self.operand(arg, _ELEMENTS[element][2])
        return self.scalar_row(scalar, element)

    def scalar_row(self, scalar: str, element: str) -> str:
        """A one-element tensor holding the emitted `!torch.int` or `!torch.float` `scalar`."""
        _, item_type, scalar_type = _ELEMENTS[element]
        zero = self.constant(0, None)[0]
        item, row = self.fresh(), self.fresh()
        row_type = item_type.replace("[]", "[1]")
        self.emit(f"{item} = torch.prim.NumToTensor.Scalar {scalar} : {scalar_type} -> {item_type}")
        self.emit(f"{row} = torch.aten.unsqueeze {item}, {zero} : {item_type}, !torch.int -> {row_type}")
        return row

    def scalar_list(self, items: tuple, element: str, result: str) -> None:
        """`result` = the tensor of `items` (each an int or float Value or Constant).

        Its length, and that of each element appended, is hidden behind an optimization barrier:
        torch-mlir would otherwise refine a list appended to on one side of an `if` to a static
        `tensor<2xi64>`, which no longer matches the `scf.if`'s `tensor<?xi64>` result ("successor
        operand type ... should match"), or a static row inside a dynamic list ("'flow.tensor.update'
        op value set has 0 dynamic dimensions but only 1 dimension values are attached").
        """
        list_type, item_type, _ = _ELEMENTS[element]
        if not items:
            self.empty_list(list_type, result)
            return
        built = self.fresh()
        rows = [self.element_row(item, element) for item in items]
        self.concatenate(rows, [item_type.replace("[]", "[1]")] * len(rows), built, list_type)
        self.of_unknown_length(built, list_type, len(items), result, list_type)

    def empty_list(self, list_type: str, result: str) -> None:
        """`result` = an empty list: `zeros` of a length behind a barrier (`_Emitter.zeros`). Not a
        slice of an empty literal: IREE clamps such a slice to the literal's known size, 0, and kept
        that size for the buffers of the values it flows into: a list returned from inside nested
        loops, where the path that did not return passed such an empty list on, was copied into a
        packed buffer sized as if the list were empty (OUT_OF_RANGE at every call; README, "Known
        traps")."""
        self.zeros(TensorType(_DTYPES[list_type][0], (None,), (0,)), result)

    def of_unknown_length(self, tensor: str, type_text: str, length: int, result: str, list_type: str) -> None:
        """`result` = `tensor` (1-D, `length` long) sliced to a length that only the run time knows."""
        opaque = self.opaque_int(length)
        zero, one = self.constant(0, None)[0], self.constant(1, None)[0]
        self.emit(
            f"{result} = torch.aten.slice.Tensor {tensor}, {zero}, {zero}, {opaque}, {one} : "
            f"{type_text}, !torch.int, !torch.int, !torch.int, !torch.int -> {list_type}"
        )

    def concatenate(self, parts: list[str], types: list[str], result: str, list_type: str) -> None:
        zero = self.constant(0, None)[0]
        listed = self.fresh()
        self.emit(
            f"{listed} = torch.prim.ListConstruct {', '.join(parts)} : ({', '.join(types)}) -> !torch.list<vtensor>"
        )
        self.emit(f"{result} = torch.aten.cat {listed}, {zero} : !torch.list<vtensor>, !torch.int -> {list_type}")

    def to_dtype(self, name: str, have: str, dtype: str, want: str) -> str:
        """`torch.aten.to.dtype` of tensor `name` (type `have`) to `dtype`, typed `want`."""
        code, false, none, result = self.fresh(), self.fresh(), self.fresh(), self.fresh()
        self.emit(f"{code} = torch.constant.int {DTYPE_CODES[dtype]}")
        self.emit(f"{false} = torch.constant.bool false")
        self.emit(f"{none} = torch.constant.none")
        self.emit(
            f"{result} = torch.aten.to.dtype {name}, {code}, {false}, {false}, {none} : "
            f"{have}, !torch.int, !torch.bool, !torch.bool, !torch.none -> {want}"
        )
        return result
