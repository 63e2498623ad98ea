"""The ONNX graph that `onnxruntime` and `iree-onnx` share (not a peer itself).

The graph comes from the TorchScript ONNX exporter, the one that keeps `If`/`Loop` in the graph
(the dynamo exporter fails on data-dependent control flow). Inputs are named by position,
because that exporter drops inputs the graph never reads, and the position is what maps a graph
input back to a sample's value: `OnnxSignature` does that mapping.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..models import Inputs
from .base import ModelContext
from .torchscript import script


def input_names(count: int) -> list[str]:
    """`input_0`, `input_1`, ...: one name per position of `forward`."""
    return [f"input_{index}" for index in range(count)]


def export_onnx(context: ModelContext, dynamic_dims: bool) -> Path:
    """Export the scripted model to ONNX; with `dynamic_dims`, every tensor dim is dynamic.

    A fresh scripted copy is exported because the exporter runs its passes on the graph it is given.
    """
    path = context.folder / ("model.dynamic.onnx" if dynamic_dims else "model.onnx")
    names = input_names(len(context.example_inputs))
    dynamic_axes = None
    if dynamic_dims:
        dynamic_axes = {
            name: {dim: f"{name}_dim{dim}" for dim in range(value.dim())}
            for name, value in zip(names, context.example_inputs)
            if isinstance(value, torch.Tensor) and value.dim() > 0
        }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
        torch.onnx.export(
            script(context.model),
            tuple(context.example_inputs),
            str(path),
            dynamo=False,
            input_names=names,
            dynamic_axes=dynamic_axes,
        )
    return path


@dataclass(frozen=True)
class OnnxSignature:
    """Which sample positions the ONNX graph reads, and as what numpy dtype."""

    positions: tuple[int, ...]
    names: tuple[str, ...]
    dtypes: tuple[np.dtype, ...]

    def arrays(self, inputs: Inputs) -> list[np.ndarray]:
        """The sample's values the graph reads, as contiguous arrays of the graph's dtypes."""
        arrays = []
        for position, dtype in zip(self.positions, self.dtypes):
            value = inputs[position]
            array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
            arrays.append(np.ascontiguousarray(array, dtype=dtype))
        return arrays


def onnx_signature(path: Path) -> OnnxSignature:
    """Read the graph's inputs (initializers are not inputs a sample feeds)."""
    import onnx
    from onnx import helper

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {tensor.name for tensor in graph.initializer}
    inputs = [value for value in graph.input if value.name not in initializers]
    return OnnxSignature(
        positions=tuple(int(value.name.rsplit("_", 1)[1]) for value in inputs),
        names=tuple(value.name for value in inputs),
        dtypes=tuple(np.dtype(helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)) for value in inputs),
    )
