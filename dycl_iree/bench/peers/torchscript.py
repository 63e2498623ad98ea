"""`torchscript`: `torch.jit.freeze(torch.jit.script(model))`, the graph dycl_iree starts from."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ..models import Inputs
from .base import ModelContext, Peer, torch_call


def script(model: torch.nn.Module) -> torch.jit.ScriptModule:
    """Script and freeze: the same capture dycl_iree starts from (DESIGN.md, stage 1)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.13 deprecates torch.jit.script; it still works
        return torch.jit.freeze(torch.jit.script(model.eval()))


class TorchScript(Peer):
    """The frozen TorchScript module, called from Python; its size is the saved `.pt` file."""

    name = "torchscript"
    description = "torch.jit.freeze(torch.jit.script(model))"

    def prepare(self, context: ModelContext) -> None:
        self.scripted = script(context.model)
        path = context.folder / "model.torchscript.pt"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit.save is deprecated too; the size is what we want
            torch.jit.save(self.scripted, str(path))
        self.size_bytes = path.stat().st_size

    def run(self, inputs: Inputs) -> Any:
        return torch_call(self.scripted, inputs)
