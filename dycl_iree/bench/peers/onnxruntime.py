"""`onnxruntime`: the TorchScript ONNX exporter's graph (with ONNX `If`/`Loop`) on onnxruntime's CPU
provider: the DyCL paper's backend, but with control flow inside the graph."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..models import Inputs
from .base import ModelContext, Peer
from .onnx_graph import export_onnx, onnx_signature

# onnxruntime's own log lines (severity 0 verbose .. 4 fatal) go to stderr, even for errors that it
# also raises: only fatal ones are printed, since a failure reaches the report through the exception.
LOG_SEVERITY_FATAL = 4


class OnnxRuntime(Peer):
    name = "onnxruntime"
    description = "TorchScript ONNX export (If/Loop), onnxruntime CPU"
    needs = ("onnx", "onnxruntime")

    def prepare(self, context: ModelContext) -> None:
        import onnxruntime

        # Samples of other sizes than the example (a run-time number of frames) need the graph
        # with dynamic dims: the static one refuses them ("Got invalid dimensions for input").
        examples = context.example_inputs
        dynamic = any(_shape(a) != _shape(e) for sample in context.samples for a, e in zip(sample, examples))
        key = "onnx-dynamic" if dynamic else "onnx"
        path, export_s = context.shared(key, lambda: export_onnx(context, dynamic_dims=dynamic))
        self.signature = onnx_signature(path)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = context.threads
        options.inter_op_num_threads = 1
        options.log_severity_level = LOG_SEVERITY_FATAL
        # onnxruntime as it is deployed: its workers spin between ops by default. Turning that off
        # (session.intra_op.allow_spinning=0) made it ~1.6x slower at batch 1 (WRN-SDN 1.23 -> 0.75 ms
        # with it on); the pause before each turn (timing.SETTLE_S) lets the spinning threads go
        # idle before the next candidate runs.
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.size_bytes = path.stat().st_size
        self.note = f"onnx export {export_s:.2f} s"

    def convert(self, inputs: Inputs) -> dict[str, np.ndarray]:
        return dict(zip(self.signature.names, self.signature.arrays(inputs)))

    def run(self, feed: dict[str, np.ndarray]) -> Any:
        return self.session.run(None, feed)


def _shape(value: Any) -> tuple | None:
    return tuple(value.shape) if hasattr(value, "shape") else None
