"""`iree-onnx`: the ONNX graph through torch-mlir's ONNX importer and `iree-compile`, run on IREE's
`local-task` driver: IREE without dycl_iree.

The ONNX graph as exported is tried first. IREE 3.13 rejects every ONNX `Loop` whose carried
tensor has a static shape ("failed to legalize unresolved materialization from [4] to [?]": the
exporter types loop results as dynamic), so when the static graph fails the export with every
tensor dim dynamic is tried as well, and the note says so.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ..errors import PeerError, first_line
from ..outputs import flatten_outputs
from .base import ModelContext, Peer
from .iree_config import IREE_CPU_FLAGS, limit_iree_threads
from .onnx_graph import export_onnx, onnx_signature


class OnnxImportError(PeerError):
    """torch-mlir's ONNX importer rejected the graph (its last stderr line says why)."""


def onnx_to_vmfb(onnx_path: Path) -> Path:
    """ONNX -> torch-dialect MLIR (torch-mlir's importer, as its command line) -> vmfb."""
    import iree.compiler

    mlir_path = onnx_path.with_suffix(".mlir")
    process = subprocess.run(
        [sys.executable, "-m", "torch_mlir.tools.import_onnx", str(onnx_path), "-o", str(mlir_path)],
        capture_output=True,
        text=True,
        check=False,  # the importer's stderr makes a better message than CalledProcessError
    )
    if process.returncode != 0:
        lines = [line for line in process.stderr.splitlines() if line.strip()]
        raise OnnxImportError(lines[-1] if lines else f"exit status {process.returncode}")
    vmfb_path = onnx_path.with_suffix(".vmfb")
    iree.compiler.compile_file(
        str(mlir_path), input_type="onnx", extra_args=list(IREE_CPU_FLAGS), output_file=str(vmfb_path)
    )
    return vmfb_path


class IreeOnnx(Peer):
    name = "iree-onnx"
    description = "same ONNX graph, torch-mlir import, iree-compile, local-task"
    needs = ("onnx", "iree.compiler", "iree.runtime")

    def prepare(self, context: ModelContext) -> None:
        import iree.runtime

        onnx_path, export_s = context.shared("onnx", lambda: export_onnx(context, dynamic_dims=False))
        start = time.perf_counter()
        note = ""
        try:
            vmfb_path = onnx_to_vmfb(onnx_path)
        except Exception as static_error:  # retried below, reported if that fails too
            try:
                onnx_path, export_s = context.shared("onnx-dynamic", lambda: export_onnx(context, dynamic_dims=True))
                start = time.perf_counter()
                vmfb_path = onnx_to_vmfb(onnx_path)
            except Exception as dynamic_error:
                raise PeerError(
                    f"static dims: {first_line(static_error)}; all dims dynamic: {first_line(dynamic_error)}"
                ) from dynamic_error
            note = f"static-dim graph failed ({first_line(static_error)}); ran the all-dims-dynamic export"
        compile_s = time.perf_counter() - start
        self.signature = onnx_signature(onnx_path)
        limit_iree_threads(context.threads)
        system = iree.runtime.SystemContext(config=iree.runtime.Config("local-task"))
        system.add_vm_module(iree.runtime.VmModule.copy_buffer(system.instance, vmfb_path.read_bytes()))
        self.function = system.modules.module["main_graph"]
        self.size_bytes = vmfb_path.stat().st_size
        prefix = f"{note}; " if note else ""
        self.note = f"{prefix}onnx export {export_s:.2f} s, import+compile {compile_s:.2f} s"

    def convert(self, inputs: tuple) -> list[np.ndarray]:
        return self.signature.arrays(inputs)

    def run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        return flatten_outputs(self.function(*arrays))
