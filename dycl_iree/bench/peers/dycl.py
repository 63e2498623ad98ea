"""`dycl-<host>-<driver>`: `dycl_iree.export` + `load`, with the compiled or the Python host, on
IREE's `local-sync` or `local-task` driver, or on a GPU (`cuda`, `vulkan`: `bench --device`).

The exporter is looked up at prepare time (`dycl_module`), so a missing or broken one is a failed
candidate rather than a benchmark that cannot start, and a stand-in can be swapped in for tests.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path
from typing import Any

import torch

from ..errors import ExporterMissingError
from ..models import Inputs
from .base import ModelContext, Peer, path_size, remove
from .iree_config import limit_iree_threads

HOSTS = ("compiled", "python")
DRIVERS = ("local-sync", "local-task")
GPU_DRIVERS = ("cuda", "vulkan")
"""Drivers whose candidates run only when the benchmark's device is that driver; each exports for
the target of the same name (`cuda` is sm_80 PTX, which newer GPUs compile when they load it)."""


def dycl_module() -> Any:
    """The exporter, resolved at call time so that a missing or broken one is a failed candidate."""
    module = importlib.import_module("dycl_iree")
    for name in ("export", "load"):
        if not callable(getattr(module, name, None)):
            raise ExporterMissingError(f"dycl_iree.{name} is not available")
    return module


def export_bundle(context: ModelContext, cpu_threads: int, target: str = "llvm-cpu") -> Path:
    """Export and save the model for `target`, CPU code split for `cpu_threads` threads."""
    bundle = dycl_module().export(
        context.model,
        tuple(context.example_inputs),
        targets=(target,),
        dynamic_shapes=context.dynamic_shapes,
        cpu_threads=cpu_threads,
    )
    path = context.folder / (f"model-{cpu_threads}-threads.dycl" if target == "llvm-cpu" else f"model-{target}.dycl")
    remove(path)  # a bundle from an earlier run must not be measured (or refused by save)
    bundle.save(str(path))
    return path


class Dycl(Peer):
    """A dycl_iree bundle on one host and driver; both hosts on one driver share the bundle."""

    group = "dycl"

    def __init__(self, host: str, driver: str) -> None:
        super().__init__()
        self.host, self.driver = host, driver
        self.name = f"dycl-{host}-{driver}"
        self.description = f"dycl_iree bundle, {host} host, IREE {driver} driver"
        self.devices = (driver,) if driver in GPU_DRIVERS else ("cpu",)

    def prepare(self, context: ModelContext) -> None:
        # local-sync runs on one thread; local-task gets code split for its workers.
        cpu_threads = context.threads if self.driver == "local-task" else 1
        if self.driver in GPU_DRIVERS:
            path, export_s = context.shared(f"dycl-{self.driver}", lambda: export_bundle(context, 1, self.driver))
        else:
            path, export_s = context.shared(f"dycl-{cpu_threads}", lambda: export_bundle(context, cpu_threads))
        if self.driver == "local-task":
            limit_iree_threads(context.threads)
        start = time.perf_counter()
        self.runner = dycl_module().load(str(path), device=self.driver, host=self.host)
        load_s = time.perf_counter() - start
        self.size_bytes = path_size(path)
        self.note = f"export+save {export_s:.2f} s, load {load_s:.3f} s"

    def convert(self, inputs: Inputs) -> Inputs:
        # The host runtime takes numpy (it never imports torch); Python scalars pass through.
        return tuple(value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value for value in inputs)

    def run(self, inputs: Inputs) -> Any:
        return self.runner(*inputs)
