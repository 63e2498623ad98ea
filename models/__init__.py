"""The dynamic-network zoo: small CIFAR-sized versions of the model families DyCL evaluated.

Each module defines `MODELS` (name -> factory returning `(model, example_inputs)`) and `SAMPLES`
(name -> function returning a list of input tuples that together take every path); what they
share (sample images, seeded construction, BatchNorm calibration, CIFAR ResNet blocks) lives in
`models.common`. This package collects them so tests and benchmarks can walk the whole zoo:

>>> from models import ZOO, parameter_count
>>> model, example_inputs = ZOO["ranet"].build()
>>> parameter_count(model) > 0
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from torch import nn

from . import blockdrop, captioning, ranet, shallow_deep, skipnet, transformer

ZOO_MODULES: tuple[ModuleType, ...] = (shallow_deep, skipnet, blockdrop, captioning, ranet, transformer)


@dataclass(frozen=True)
class ZooEntry:
    """One zoo model: its factory, its verification samples, and where the CLI finds it."""

    name: str
    build: Callable[[], tuple[nn.Module, tuple]]
    samples: Callable[[], list[tuple]]
    source_file: Path

    @property
    def cli_target(self) -> str:
        """`FILE.py:FACTORY` as `python -m dycl_iree export` takes it."""
        return f"{self.source_file}:{self.build.__name__}"


def _collect() -> dict[str, ZooEntry]:
    entries: dict[str, ZooEntry] = {}
    for module in ZOO_MODULES:
        for name, factory in module.MODELS.items():
            if name in entries:
                raise ValueError(f"zoo model {name!r} is defined twice")
            entries[name] = ZooEntry(name, factory, module.SAMPLES[name], Path(module.__file__))
    return entries


ZOO: dict[str, ZooEntry] = _collect()
MODELS: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {name: entry.build for name, entry in ZOO.items()}
SAMPLES: dict[str, Callable[[], list[tuple]]] = {name: entry.samples for name, entry in ZOO.items()}


def parameter_count(model: nn.Module) -> int:
    """Number of parameters (shared ones counted once), the size measure the zoo's docs quote."""
    return sum(parameter.numel() for parameter in model.parameters())


def parameter_counts() -> dict[str, int]:
    """Parameter count of every zoo model, by name (builds each model once)."""
    return {name: parameter_count(entry.build()[0]) for name, entry in ZOO.items()}
