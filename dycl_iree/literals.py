"""Weights into MLIR without a detour through Python lists.

torch-mlir's FX importer turns each constant tensor into its MLIR literal as
`np.array(tensor.tolist())`, since the tensors it is given may be fake ones (no `.numpy()` under a
`FakeTensorMode`). For the real weights of a frozen model that is one Python float per element: the
early-exit ResNet-50's 54M weights took 8 of the 30 s (CPU) of its lowering that way, 0.05 s
through `.numpy()`. The importer looks every literal up in its `RefTracker` (by tensor id) before
it converts one, so a tracker that fills in the literal of a real tensor when it is first asked
for it skips the detour; the literal is the one the importer would make (same bytes, same blob
name, the importer's own splat for a one-element tensor).

Example:
    >>> from torch_mlir.extras.fx_importer import FxImporter                   # doctest: +SKIP
    >>> importer = FxImporter(context=context, py_attr_tracker=WeightTracker(context))  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch_mlir.extras.fx_importer import TORCH_DTYPE_TO_NPY_TYPE, RefTracker, create_mlir_tensor_type

# The dtypes whose tensors `.numpy()` reads as the importer's own conversion does (bfloat16 and the
# float8 kinds go through ml_dtypes there, and stay on the importer's path).
_NUMPY_DTYPES = {
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.float32,
    torch.float64,
    torch.bool,
    torch.complex64,
    torch.complex128,
}


class WeightTracker(RefTracker):
    """The importer's `RefTracker`, which converts a real (not fake) tensor's data itself."""

    def __init__(self, context: Any) -> None:
        super().__init__()
        self.context = context

    def track(self, referrent: Any) -> Any:
        # The importer keys its literals by id() and never checks that the tensor is still alive:
        # a bool constant is imported through a uint8 copy made for the moment (`_import_literal`),
        # whose id a later weight could reuse and then import as that copy's literal (an MLIRError
        # where the types differ, the wrong weights where they agree). A dead entry is dropped.
        existing = self._refs.get(id(referrent))
        weak = getattr(existing, "_referrent", None)
        if callable(weak) and weak() is not referrent:
            del self._refs[id(referrent)]
        mapping = super().track(referrent)
        if mapping.is_empty and _real_tensor(referrent):
            mapping.value = tensor_literal(referrent, self.context)
        return mapping


def _real_tensor(value: Any) -> bool:
    # Exactly a Tensor or a Parameter: FakeTensor and FunctionalTensor are subclasses with no data.
    return (
        type(value) in (torch.Tensor, torch.nn.Parameter)
        and value.dtype in _NUMPY_DTYPES
        and value.device.type == "cpu"
        and value.numel() > 1  # one element: the importer's splat
    )


def tensor_literal(tensor: torch.Tensor, context: Any) -> Any:
    """The DenseResourceElementsAttr that torch-mlir's `_make_vtensor_literal_op` makes of `tensor`."""
    from torch_mlir.ir import DenseResourceElementsAttr, Location

    npy_dtype = TORCH_DTYPE_TO_NPY_TYPE[tensor.dtype]
    # A copy of its own: the blob outlives the import, whatever becomes of the tensor.
    array = np.array(tensor.detach().contiguous().numpy(), dtype=npy_dtype, copy=True)
    shape = "_".join(str(size) for size in tensor.shape)
    with context, Location.unknown(context):
        return DenseResourceElementsAttr.get_from_buffer(
            array.view(npy_dtype), f"torch_tensor_{shape}_{tensor.dtype}", create_mlir_tensor_type(tensor)
        )
