"""`torch-compile`: `torch.compile(model)` (inductor, graph breaks allowed).

Its export time is the first call on every sample: inductor compiles (and recompiles per path or
per Python int value) on first use. Dynamo's graph-break and recompilation warnings are silenced
while the benchmark runs (`dycl_iree.bench.quiet`); a failure still raises and is reported.
"""

from __future__ import annotations

from typing import Any

import torch

from ..models import Inputs
from .base import ModelContext, Peer, torch_call


class TorchCompile(Peer):
    name = "torch-compile"
    description = "torch.compile(model), inductor, graph breaks allowed"

    def prepare(self, context: ModelContext) -> None:
        self.compiled = torch.compile(context.model)
        for sample in context.samples:
            torch_call(self.compiled, sample)

    def run(self, inputs: Inputs) -> Any:
        return torch_call(self.compiled, inputs)
