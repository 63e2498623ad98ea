"""Specialize's `torch.tensor(list)`: a tensor made from a list of ints, floats or bools.

A literal list (`torch.tensor([[7]])`, RNN-T's start token) is made at export time, as PyTorch
makes it. A list known only at run time (a host list, a fixed-length list of host scalars, one
host scalar) is uploaded from the host by an `aten::tensor` host op.
"""

from __future__ import annotations

import torch

from ..program import Constant, HostOp, ListArg, ListType, ScalarType, TensorType, Value
from .schemas import SCALAR_TYPE_CODES, dtype_name, source_of
from .values import holds_values, real_value, scalar_kind_of, value_name


class ListTensors:
    """`torch.tensor` of lists (a mixin of the specializer)."""

    def visit_list_to_tensor(self, node: torch._C.Node) -> None:
        """`torch.tensor(list)`: an upload from the host when the list is only known at run time."""
        inputs = [self.entry(v) for v in node.inputs()]
        data = inputs[0]
        dtype_code = inputs[1].value if len(inputs) > 1 and isinstance(inputs[1], Constant) else None
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
