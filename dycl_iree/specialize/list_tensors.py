"""Specialize's `torch.tensor(list)`: a tensor made from a list of ints, floats or bools.

A literal list (`torch.tensor([[7]])`, RNN-T's start token) is made at export time, as PyTorch
makes it. A list known only at run time (a host list, a fixed-length list of host scalars, one
host scalar) is uploaded from the host by an `aten::tensor` host op.

A list of n lists of ints, each of one length w known at export (`[[token] for token in tokens]`,
carried as `RaggedInts` once n is known only at run time), is its ints uploaded and viewed as
(n, w), an int64 tensor as TorchScript makes it (whose element type is int; eager PyTorch's is the
same for n > 0). For n = 0 TorchScript gives a tensor of shape (0,): its rank is not the rank of
the other lengths' tensors, which no one typed value can be, so that case raises at run time,
naming the line. Lists of lengths known only at run time are refused at the line.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import SpecializeError
from ..guards import CHECK_INDEX
from ..program import Constant, HostOp, ListArg, ListType, ScalarType, TensorOp, TensorType, Value
from .ragged_ints import holds_int_lists, joined_width
from .schemas import SCALAR_TYPE_CODES, dtype_name, overload_of, source_of
from .values import INT64_MAX, RaggedInts, hint_of, holds_values, real_value, scalar_kind_of, value_name


class ListTensors:
    """`torch.tensor` of lists (a mixin of the specializer)."""

    def visit_list_to_tensor(self, node: torch._C.Node) -> None:
        """`torch.tensor(list)`: an upload from the host when the list is only known at run time."""
        inputs = [self.entry(v) for v in node.inputs()]
        data = inputs[0]
        dtype_code = inputs[1].value if len(inputs) > 1 and isinstance(inputs[1], Constant) else None
        if isinstance(data, RaggedInts) or (holds_int_lists(data) and holds_values(data)):
            return self.int_rows_to_tensor(node, data, dtype_code)
        if not holds_values(data):
            # A literal (`torch.tensor([[7]])`, RNN-T's start token): made here, as PyTorch makes it.
            # torch.ops.aten.tensor cannot be called with a nested list ("Expected a value of type
            # 'List[t]'"), and the `device=` argument names the model's device, which is the bundle's.
            dtype = SCALAR_TYPE_CODES[dtype_code] if dtype_code is not None else None
            self.bind(node.output(), Constant(torch.tensor(real_value(data), dtype=dtype)))
            return
        element = data.type.element if isinstance(data, Value) and isinstance(data.type, ListType) else None
        if element is None and isinstance(data, ListArg):
            element = scalar_kind_of(data.items[0])
        if isinstance(data, Value) and isinstance(data.type, ScalarType):
            element = data.type.kind
        if dtype_code is not None:
            dtype = SCALAR_TYPE_CODES[dtype_code]
        else:
            dtype = {"int": torch.int64, "float": torch.float32, "bool": torch.bool}[element]
        if isinstance(data, ListArg):
            shape: tuple = (len(data.items),)
            hint: tuple = shape
        elif isinstance(data.type, ScalarType):
            shape = hint = ()
        else:
            shape, hint = (None,), (max(2, len(data.type.hint)),)
        output = self.new_value(TensorType(dtype_name(dtype), shape, hint), value_name(node.output()))
        self.nodes.append(HostOp("aten::tensor", (data, Constant(dtype_name(dtype))), (output,), source_of(node)))
        self.bind(node.output(), output)

    def int_rows_to_tensor(self, node: torch._C.Node, rows: Any, dtype_code: Any) -> None:
        """`torch.tensor(rows)` of lists of ints (a fixed-length list of them or a RaggedInts): the
        ints uploaded, viewed as (rows, width)."""
        source = source_of(node)
        width = joined_width(rows)
        if not width:
            raise SpecializeError(
                f"torch.tensor of a list of lists of ints whose lengths are not one length known at export "
                f"({source}): build each list with a fixed number of items (`[[a, b] for ...]`)"
            )
        dtype = SCALAR_TYPE_CODES[dtype_code] if dtype_code is not None else torch.int64
        if isinstance(rows, ListArg):
            ints = [item for row in rows.items for item in _row_items(row)]
            flat = self.new_value(TensorType(dtype_name(dtype), (len(ints),), (len(ints),)), "ints")
            self.nodes.append(
                HostOp("aten::tensor", (ListArg(tuple(ints)), Constant(dtype_name(dtype))), (flat,), source)
            )
            shape = ListArg((Constant(len(rows.items)), Constant(width)))
            (result,) = self.emit_tensor_op(overload_of("aten::view.default"), [flat, shape], [], source)
            self.bind(node.output(), result)
            return
        count = self.ragged_ints_length(rows, source)
        message = (
            f"RuntimeError: torch.tensor of an empty list of lists gives a tensor of shape [0], of another rank "
            f"than the [n, {width}] of n > 0 lists, which the exported tensor keeps ({source})"
        )
        self.nodes.append(HostOp(CHECK_INDEX, (count, Constant(1), Constant(INT64_MAX), Constant(message)), (), source))
        # Typed here, not by meta runs: a view of a dynamic size as (-1, width) would not be one
        # whose size the perturbed runs keep a multiple of the width.
        example = max(2, hint_of(count) if isinstance(hint_of(count), int) else 2)
        flat = self.new_value(TensorType(dtype_name(dtype), (None,), (example * width,)), "ints")
        self.nodes.append(HostOp("aten::tensor", (rows.values, Constant(dtype_name(dtype))), (flat,), source))
        result = self.new_value(
            TensorType(dtype_name(dtype), (None, width), (example, width)), value_name(node.output())
        )
        shape = ListArg((Constant(-1), Constant(width)))
        self.nodes.append(TensorOp("aten::view.default", (flat, shape), (), (result,), source))
        self.bind(node.output(), result)


def _row_items(row: Any) -> tuple:
    """The ints of one `List[int]` of a length known at export, as entries."""
    if isinstance(row, ListArg):
        return row.items
    return tuple(Constant(item) for item in row.value)
