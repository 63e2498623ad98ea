"""`eager`: the model itself in PyTorch, the baseline every speedup and every check is relative to.

With `bench --device cuda` it runs on the GPU (outputs copied back, as the other candidates'
are); PyTorch has no Vulkan device, so with `--device vulkan` it stays on the CPU.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ..models import Inputs
from .base import ModelContext, Peer, torch_call


class Eager(Peer):
    """PyTorch eager under `no_grad`, on the benchmark's torch thread count or on CUDA."""

    name = "eager"
    description = "PyTorch eager (the baseline)"
    devices = ("cpu", "cuda", "vulkan")

    def prepare(self, context: ModelContext) -> None:
        self.device = "cuda" if context.device == "cuda" else "cpu"
        if self.device == "cuda":
            # TF32 would make convolutions and matmuls ~1e-3 off: compare float32 with float32.
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
            self.model = copy.deepcopy(context.model).to("cuda")
            self.note = f"on {torch.cuda.get_device_name()}, TF32 off"
        else:
            self.model = context.model
            self.note = "on the CPU (PyTorch has no Vulkan device)" if context.device == "vulkan" else ""

    def convert(self, inputs: Inputs) -> Inputs:
        return tuple(_to(value, self.device) for value in inputs)

    def run(self, inputs: Inputs) -> Any:
        outputs = torch_call(self.model, inputs)
        return outputs if self.device == "cpu" else _to(outputs, "cpu")


def _to(value: Any, device: str) -> Any:
    """A tensor (or the tensors in a tuple / list) on `device`; anything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_to(item, device) for item in value)
    return value
