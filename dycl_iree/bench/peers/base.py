"""What every peer is: a `Peer` (prepare, convert, run) and the `ModelContext` it prepares from.

A peer is one way of running a model (PyTorch eager, ONNX Runtime, a dycl_iree host, ...). The
benchmark makes a fresh one per model, so a peer keeps what it built on `self`:

    class MyPeer(Peer):
        name = "my-peer"
        description = "what runs, in one line"
        needs = ("my_runtime",)          # modules it imports; missing ones fail it with a hint

        def prepare(self, context):     # export, compile, load: timed as the export time
            self.session = my_runtime.load(...)
            self.size_bytes = ...        # the artifact that would ship, if there is one

        def run(self, inputs):           # the call that is timed; returns host values
            return self.session(*inputs)

`convert` (by default: the sample as it is) turns one sample into what `run` takes, once per
sample before timing, so that only the call itself is timed. `devices` says where a peer runs;
the context's `device` is the one being benchmarked ("cpu" today).
"""

from __future__ import annotations

import importlib.util
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from ..models import Inputs

T = TypeVar("T")


class ModelContext:
    """What peers share for one model: the model, its inputs, a folder and built artifacts.

    Several peers start from the same artifact (the ONNX graph feeds onnxruntime and IREE; a
    dycl_iree bundle feeds both hosts on one driver, its CPU code split for that driver's threads).
    `shared` builds each once, and remembers a failure so that every peer depending on it reports
    the same error.
    """

    def __init__(
        self,
        name: str,
        model: torch.nn.Module,
        example_inputs: Inputs,
        samples: list[Inputs],
        folder: Path,
        threads: int,
        dynamic_shapes: Any = None,
        device: str = "cpu",
    ) -> None:
        self.name = name
        self.model = model
        self.example_inputs = example_inputs
        self.samples = samples
        self.folder = folder
        self.threads = threads
        self.dynamic_shapes = dynamic_shapes
        self.device = device
        self._shared: dict[str, tuple[Any, float, BaseException | None]] = {}
        self.reused_s = 0.0
        """Build time of the shared artifacts the current peer reused rather than built."""

    def shared(self, key: str, build: Callable[[], T]) -> tuple[T, float]:
        """Return `(artifact, seconds it took to build)`, building it on the first request.

        A peer that reuses an artifact is still charged its build time (through `reused_s`), so
        each export time is what that peer would cost on its own.
        """
        if key not in self._shared:
            start = time.perf_counter()
            try:
                value, error = build(), None
            except Exception as exc:  # reported per peer, not swallowed
                value, error = None, exc
            self._shared[key] = (value, time.perf_counter() - start, error)
        else:
            self.reused_s += self._shared[key][1]
        value, seconds, error = self._shared[key]
        if error is not None:
            raise error
        return value, seconds


class Peer:
    """One way of running a model. Making one does no work: `prepare` does it, once per model.

    Class attributes say what the peer is: `name` (in the report and `--candidates`),
    `description`, `group` (the `--candidates` group it belongs to), `needs` (modules it imports)
    and `devices` (where it runs). After `prepare`, `size_bytes` is the size of the artifact that
    would ship (None when there is none) and `note` anything the report should add.
    """

    name: str = ""
    description: str = ""
    group: str = "peers"
    needs: tuple[str, ...] = ()
    devices: tuple[str, ...] = ("cpu",)

    def __init__(self) -> None:
        self.size_bytes: int | None = None
        self.note = ""

    def missing(self) -> list[str]:
        """The modules of `needs` that cannot be imported here."""
        return [module for module in self.needs if importlib.util.find_spec(module) is None]

    def prepare(self, context: ModelContext) -> None:
        """Make the model runnable (export, compile, load); raising means this peer failed."""
        raise NotImplementedError

    def convert(self, inputs: Inputs) -> Any:
        """One sample in the form `run` takes (numpy arrays, a feed dict, ...); not timed."""
        return inputs

    def run(self, converted: Any) -> Any:
        """Run the model once on converted inputs and return its outputs on the host."""
        raise NotImplementedError


def torch_call(model: Callable[..., Any], inputs: Inputs) -> Any:
    """Call a PyTorch model on one sample without autograd, as every torch peer times it."""
    with torch.no_grad():
        return model(*inputs)


def remove(path: Path) -> None:
    """Delete a file or folder left by an earlier run, if there is one."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def path_size(path: Path) -> int:
    """Bytes in a file, or in every file under a folder."""
    if path.is_dir():
        return sum(item.stat().st_size for item in path.rglob("*") if item.is_file())
    return path.stat().st_size
