"""The peers: every way of running a model that the benchmark compares, one module each.

| candidate | module | what runs |
|---|---|---|
| `eager` | `eager` | the model in PyTorch: the baseline |
| `torchscript` | `torchscript` | `torch.jit.freeze(torch.jit.script(model))` |
| `torch-compile` | `torch_compile` | `torch.compile(model)` (inductor) |
| `onnxruntime` | `onnxruntime` | the TorchScript ONNX export on onnxruntime's CPU provider |
| `iree-onnx` | `iree_onnx` | the same ONNX graph through torch-mlir and `iree-compile` |
| `dycl-<host>-<driver>` | `dycl` | `dycl_iree.export` + `load`, compiled or Python host (GPU drivers with `--device`) |

`base` says what a peer is; `onnx_graph` and `iree_config` hold what several peers share. A new
peer is a new module with a `Peer` subclass, added to `PEERS` below (from Python, `benchmark`'s
`candidates=` also takes a Peer class directly). `dycl_iree.bench.candidates` turns `--candidates`
into peers.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from .base import ModelContext, Peer
from .dycl import DRIVERS, GPU_DRIVERS, HOSTS, Dycl
from .eager import Eager
from .iree_onnx import IreeOnnx
from .onnxruntime import OnnxRuntime
from .torch_compile import TorchCompile
from .torchscript import TorchScript

PEERS: list[Callable[[], Peer]] = [
    Eager,
    TorchScript,
    TorchCompile,
    OnnxRuntime,
    IreeOnnx,
    *(partial(Dycl, host, driver) for host in HOSTS for driver in DRIVERS),
    *(partial(Dycl, host, driver) for driver in GPU_DRIVERS for host in HOSTS),
]
"""Every built-in peer, in report order, eager first: each entry makes a fresh peer when called."""

__all__ = [
    "DRIVERS",
    "GPU_DRIVERS",
    "HOSTS",
    "PEERS",
    "Dycl",
    "Eager",
    "IreeOnnx",
    "ModelContext",
    "OnnxRuntime",
    "Peer",
    "TorchCompile",
    "TorchScript",
]
