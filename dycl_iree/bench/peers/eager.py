"""`eager`: the model itself in PyTorch, the baseline every speedup and every check is relative to."""

from __future__ import annotations

from typing import Any

from ..models import Inputs
from .base import ModelContext, Peer, torch_call


class Eager(Peer):
    """PyTorch eager under `no_grad`, on the benchmark's torch thread count."""

    name = "eager"
    description = "PyTorch eager (the baseline)"

    def prepare(self, context: ModelContext) -> None:
        self.model = context.model

    def run(self, inputs: Inputs) -> Any:
        return torch_call(self.model, inputs)
