"""Capture: script and freeze a model, so that weights become constants and submodules inline.

Example:
    >>> captured = capture(torch.nn.Linear(4, 2))
    >>> [name for name in captured.input_names]
    ['input']
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from .errors import CaptureError


@dataclass(frozen=True)
class CapturedModel:
    """A frozen TorchScript module and its forward graph (TorchScript's passes mutate it in place)."""

    scripted: torch.jit.ScriptModule
    frozen: torch.jit.ScriptModule
    graph: torch._C.Graph
    input_names: tuple[str, ...]
    name: str


_SCRIPT_ADVICE = (
    "TorchScript must be able to compile forward(): give non-tensor arguments type annotations "
    "(n: int, flag: bool), annotate empty lists (tokens: List[int] = []), avoid Python features it "
    "does not support (**kwargs, closures, non-tensor globals), and mark helper methods it should "
    "skip with @torch.jit.ignore."
)


def capture(model: torch.nn.Module) -> CapturedModel:
    """Script (unless already scripted) and freeze `model` in eval mode."""
    if not isinstance(model, torch.nn.Module):
        raise CaptureError(f"expected a torch.nn.Module, got {type(model).__name__}")
    name = type(model).__name__
    if model.training:
        # Freezing requires eval mode, and inference is what gets deployed.
        model = model.eval()
    if isinstance(model, torch.jit.ScriptModule):
        scripted = model
        name = getattr(model, "original_name", name)
    else:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.simplefilter("ignore", FutureWarning)
                scripted = torch.jit.script(model)
        except Exception as error:  # TorchScript raises several types (RuntimeError, NotSupportedError, ...)
            raise CaptureError(f"TorchScript could not script {name}:\n{error}\n{_SCRIPT_ADVICE}") from error
    try:
        frozen = torch.jit.freeze(scripted.eval())
    except Exception as error:
        raise CaptureError(f"TorchScript could not freeze {name}: {error}") from error
    graph = frozen.graph
    inputs = list(graph.inputs())[1:]  # the first input is `self`
    input_names = tuple(_clean_name(v.debugName()) for v in inputs)
    return CapturedModel(scripted, frozen, graph, input_names, name)


def _clean_name(debug_name: str) -> str:
    # TorchScript appends ".1" style suffixes to debug names.
    return debug_name.split(".")[0]
