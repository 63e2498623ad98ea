"""Which models the benchmark runs: the repository's zoo by name, a group, or `FILE.py:FACTORY`.

Groups: `zoo` (the CIFAR-size dynamic networks of `models/`, the default) and `realistic` (the
deployment-size networks of `models/imagenet.py`: ResNet-18/50, MobileNetV2 and an early-exit
ResNet-50 at 224x224, a Transformer of width 512), whose every model is also known by its name.

A model is a `ModelEntry`: a factory returning `(model, example_inputs)` or `(model,
example_inputs, dynamic_shapes)`, as `python -m dycl_iree export` expects, and the samples to check
and time it on. `FILE.py:FACTORY` (or `package.module:FACTORY`) is loaded by `dycl_iree.loading`,
like every other command's model.

Example:
    >>> [entry.name for entry in select_entries(["sdn_resnet56"])]
    ['sdn_resnet56']
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..loading import find_factory, samples_of, split_spec
from .errors import BenchError

Inputs = tuple[Any, ...]
"""One call's positional inputs, in `forward` order: tensors and Python scalars."""

Factory = Callable[[], tuple[torch.nn.Module, Inputs]]
"""Builds a model and its example inputs, as `python -m dycl_iree export FILE.py:FACTORY` expects."""


@dataclass(frozen=True)
class ModelEntry:
    """A model to benchmark: its factory and the samples to time and check it on.

    `samples` may be a list of input tuples, a callable building one (so a zoo can defer building
    big inputs), or None for `[example_inputs]`. The factory is called once per benchmark, so
    every candidate sees the same weights even when the factory initializes them randomly.
    """

    name: str
    factory: Factory
    samples: Sequence[Inputs] | Callable[[], Sequence[Inputs]] | None = None


def resolve_samples(entry: ModelEntry, example_inputs: Inputs) -> list[Inputs]:
    """The entry's samples as a list of tuples; its example inputs when it names none."""
    samples = entry.samples() if callable(entry.samples) else entry.samples
    return [tuple(sample) for sample in samples] if samples else [tuple(example_inputs)]


def _import_zoo() -> Any:
    """Import the repository's `models` package, from the working directory or the checkout
    this file lives in (the zoo is a folder of the repository, not part of the installed package)."""
    try:
        return importlib.import_module("models")
    except ImportError:
        root = Path(__file__).resolve().parents[2]
        if not (root / "models").is_dir():
            raise
        sys.path.insert(0, str(root))
        return importlib.import_module("models")


def zoo_entries() -> dict[str, ModelEntry]:
    """Every model of the zoo, by name.

    Accepts the registry forms the zoo may take: `ZOO[name]` as an entry with `build` (or
    `factory`) and `samples`, as a `(factory, samples)` pair or dict, or as a bare factory with
    samples in `SAMPLES`; or `MODELS` (factories) with `SAMPLES`. Samples may be a list or a
    callable building one.
    """
    zoo = _import_zoo()
    registry = getattr(zoo, "ZOO", None)
    if registry is None:
        registry = getattr(zoo, "MODELS", None)
    if not isinstance(registry, dict):
        raise BenchError("models has no ZOO (or MODELS) registry; name a model as FILE.py:FACTORY")
    all_samples = getattr(zoo, "SAMPLES", {}) or {}
    entries = {}
    for name, value in registry.items():
        samples = all_samples.get(name)
        if isinstance(value, dict):
            factory, samples = value["factory"], value.get("samples", samples)
        elif isinstance(value, (tuple, list)):
            factory, samples = value[0], (value[1] if len(value) > 1 else samples)
        elif hasattr(value, "factory") or hasattr(value, "build"):
            factory = getattr(value, "factory", None) or value.build
            samples = getattr(value, "samples", samples)
        else:
            factory = value
        entries[name] = ModelEntry(name, factory, samples)
    return entries


def realistic_entries() -> dict[str, ModelEntry]:
    """The deployment-size models of `models/imagenet.py`, by name (not part of the zoo: building
    and exporting them takes tens of seconds each, so only the `realistic` group runs them)."""
    _import_zoo()
    imagenet = importlib.import_module("models.imagenet")
    return {name: ModelEntry(name, factory, imagenet.SAMPLES.get(name)) for name, factory in imagenet.MODELS.items()}


MODEL_GROUPS: dict[str, Callable[[], dict[str, ModelEntry]]] = {"zoo": zoo_entries, "realistic": realistic_entries}


def entry_from_spec(spec: str) -> ModelEntry:
    """`FILE.py:FACTORY` or `package.module:FACTORY` -> a ModelEntry named `stem.FACTORY`; its
    samples are the module's `SAMPLES[FACTORY]` if any, else the factory's example inputs."""
    module_part, _ = split_spec(spec)
    module, factory, factory_name = find_factory(spec)
    stem = Path(module_part).stem if module_part.endswith(".py") else module_part
    return ModelEntry(f"{stem}.{factory_name}", factory, samples_of(module, factory_name))


def select_entries(names: Sequence[str] | None) -> list[ModelEntry]:
    """Resolve `--models`: group names (`zoo`, `realistic`), model names of either group and
    `FILE.py:FACTORY` specs; None means the whole zoo.

    >>> [entry.name for entry in select_entries(["realistic"])][:2]
    ['resnet18', 'resnet50']
    """
    if not names:
        return list(zoo_entries().values())
    entries = []
    known: dict[str, ModelEntry] | None = None
    for name in names:
        if ":" in name:
            entries.append(entry_from_spec(name))
            continue
        if name in MODEL_GROUPS:
            entries.extend(MODEL_GROUPS[name]().values())
            continue
        if known is None:
            known = {**zoo_entries(), **realistic_entries()}
        if name not in known:
            raise BenchError(f"unknown model {name!r}; groups: {', '.join(MODEL_GROUPS)}; models: {', '.join(known)}")
        entries.append(known[name])
    return entries
