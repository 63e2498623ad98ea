"""Capture: script and freeze a model, so that weights become constants and submodules inline.

Example:
    >>> captured = capture(torch.nn.Linear(4, 2))
    >>> [name for name in captured.input_names]
    ['input']
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .diagnose import GENERIC_ADVICE, diagnose, forget_half_compiled_types, format_problems, script_quietly
from .errors import CaptureError


@dataclass(frozen=True)
class CapturedModel:
    """A frozen TorchScript module and its forward graph (TorchScript's passes mutate it in place)."""

    scripted: torch.jit.ScriptModule
    frozen: torch.jit.ScriptModule
    graph: torch._C.Graph
    input_names: tuple[str, ...]
    name: str


def capture(model: torch.nn.Module) -> CapturedModel:
    """Script (unless already scripted) and freeze `model` in eval mode; the caller's model is left as it was."""
    if not isinstance(model, torch.nn.Module):
        raise CaptureError(f"expected a torch.nn.Module, got {type(model).__name__}")
    # Freezing requires eval mode, and inference is what gets deployed; but `model` is the caller's
    # object (they may go on training it), so every submodule gets its own mode back afterwards.
    modes = [(module, module.training) for module in model.modules()]
    try:
        return _capture_in_eval_mode(model.eval(), type(model).__name__)
    finally:
        for module, training in modes:  # parents first: `train` also sets the children, which follow
            module.train(training)


def _capture_in_eval_mode(model: torch.nn.Module, name: str) -> CapturedModel:
    if isinstance(model, torch.jit.ScriptModule):
        scripted = model
        name = getattr(model, "original_name", name)
    else:
        scripted = _script(model, name)
    try:
        frozen = torch.jit.freeze(scripted.eval())
    except Exception as error:
        raise CaptureError(f"TorchScript could not freeze {name}: {error}") from error
    graph = frozen.graph
    fold_unchanged_loop_values(graph)
    inputs = list(graph.inputs())[1:]  # the first input is `self`
    input_names = tuple(_clean_name(v.debugName()) for v in inputs)
    return CapturedModel(scripted, frozen, graph, input_names, name)


def _script(model: torch.nn.Module, name: str) -> torch.jit.ScriptModule:
    """`torch.jit.script`, or a CaptureError that lists every problem TorchScript finds, each with its fix."""
    # A failed script of this class earlier in the process (ours or the caller's) would otherwise
    # make this one fail with "Can't redefine method: forward", which names no file or line.
    forget_half_compiled_types()
    try:
        return script_quietly(model)
    except Exception as error:  # TorchScript raises several types (RuntimeError, FrontendError, ...)
        forget_half_compiled_types()
        problems = diagnose(model, first_error=error)
        if not problems:
            raise CaptureError(f"TorchScript could not script {name}:\n{error}\n{GENERIC_ADVICE}") from error
        raise CaptureError(format_problems(name, problems)) from error


def fold_unchanged_loop_values(graph: torch._C.Graph) -> None:
    """A loop-carried value that every iteration passes on as it got it is the value the loop starts
    with: its uses in the body and after the loop read that value, and the loop no longer carries it.

    TorchScript carries an Optional that the body refines (`if mask is not None: use(mask)`, where
    the branch yields the refined value on one side and the unrefined one on the other), although
    neither side changes it: Emformer's `s_cols_mask`, a constant list of bools, was carried through
    its mask loop as a list that changes at run time, which the compiled host cannot hold, and each
    column of the mask was chosen by a branch at run time."""
    _fold_in(graph.block())
    torch._C._jit_pass_dce(graph)  # the slots no longer read


def _fold_in(block: torch._C.Block) -> None:
    for node in block.nodes():
        for inner in node.blocks():
            _fold_in(inner)
        if node.kind() != "prim::Loop":
            continue
        body = next(iter(node.blocks()))
        params = list(body.inputs())[1:]
        returned = list(body.returnNode().inputs())[1:]
        for slot, (param, value) in enumerate(zip(params, returned)):
            if _passes_on(value, param):
                initial = node.inputsAt(2 + slot)
                param.replaceAllUsesWith(initial)
                node.outputsAt(slot).replaceAllUsesWith(initial)


def _passes_on(value: torch._C.Value, param: torch._C.Value) -> bool:
    """Whether `value` is `param` on every path: itself, refined (`prim::unchecked_cast`), or what
    each side of a branch yields."""
    if value.unique() == param.unique():
        return True
    node = value.node()
    if node.kind() == "prim::unchecked_cast":
        return _passes_on(node.inputsAt(0), param)
    if node.kind() == "prim::If":
        position = [output.unique() for output in node.outputs()].index(value.unique())
        return all(_passes_on(list(b.returnNode().inputs())[position], param) for b in node.blocks())
    return False


def _clean_name(debug_name: str) -> str:
    # TorchScript appends ".1" style suffixes to debug names.
    return debug_name.split(".")[0]
