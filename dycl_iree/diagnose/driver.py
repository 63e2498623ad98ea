"""Diagnose code TorchScript rejects: every problem, at the user's line, with what to change.

`torch.jit.script` stops at the first error, names the pattern in its own terms, and for an error
inside torch's own code points at torch's file. `diagnose` scripts the model again and again: after
each error it finds the user's function that holds it and marks that function `@torch.jit.unused`
for the next try (restored afterwards), so that the next error surfaces, until the model scripts.
Each error becomes a `Problem` whose location is the user's line (the first frame of TorchScript's
call chain outside torch, or the user's call into the torch function that failed) and whose fix
names the pattern: try blocks, ModuleLists indexed by a variable, ModuleDicts indexed by a variable,
training-only code, untyped `tolist()`, untyped empty lists, set comprehensions, generators, calls
that make TorchScript compile torch code it cannot (`flatten_parameters()`).

TorchScript caches a module class's type before compiling its methods; after a failed compile that
half-built type makes the next `torch.jit.script` of the class fail with "Can't redefine method:
forward". `forget_half_compiled_types` drops those types so the next attempt reports the real error.

Example:
    >>> problems = diagnose(model)                                  # doctest: +SKIP
    >>> print(problems[0])                                          # doctest: +SKIP
    model.py:11: a ModuleList indexed by a variable
        x = self.blocks[i](x)
      fix: iterate over the modules: `for block in self.blocks: x = block(x)` ...
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from .patterns import Problem, explain
from .source import UserCode

_MAX_ROUNDS = 50


def format_problems(name: str, problems: list[Problem]) -> str:
    """The text of a CaptureError: every problem, numbered, with its fix."""
    count = f"{len(problems)} problem" + ("s" if len(problems) != 1 else "")
    lines = [f"TorchScript could not script {name} ({count}):"]
    for number, problem in enumerate(problems, 1):
        lines.append(f"{number}. " + str(problem).replace("\n", "\n   "))
    return "\n".join(lines)


def forget_half_compiled_types() -> None:
    """Drop the module types TorchScript cached but failed to compile methods for.

    torch.jit._recursive's `concrete_type_store` keeps, per module class, the types it built; a type
    whose methods compiled is in `methods_compiled`. A failed compile leaves its type in the store
    without that mark, and the next script of the class reuses it and fails with "Can't redefine
    method: forward on class" (torch 2.13). Without the half-built type, the class compiles afresh.
    """
    store = torch.jit._recursive.concrete_type_store
    for module_class, known in list(store.type_store.items()):
        kept = [concrete_type for concrete_type in known if concrete_type in store.methods_compiled]
        if kept:
            store.type_store[module_class] = kept
        else:
            del store.type_store[module_class]


def script_quietly(model: torch.nn.Module) -> torch.jit.ScriptModule:
    """`torch.jit.script` without torch 2.13's deprecation warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        return torch.jit.script(model)


def diagnose(model: torch.nn.Module, first_error: BaseException | None = None) -> list[Problem]:
    """Every problem TorchScript finds in `model` ([] when it scripts), each with its fix.

    `first_error` is the error of a `torch.jit.script(model)` already tried, to save one attempt.
    The model is not changed; functions silenced between attempts are restored before returning.

    >>> diagnose(torch.nn.Linear(2, 2))
    []
    """
    code = UserCode(model)
    problems: list[Problem] = []
    silenced: list[Callable[..., Any]] = []
    store = torch.jit._recursive.concrete_type_store
    forget_half_compiled_types()
    saved_store = ({key: list(value) for key, value in store.type_store.items()}, set(store.methods_compiled))
    saved_modifiers: dict[Callable[..., Any], Any] = {}
    try:
        error = first_error
        for _ in range(_MAX_ROUNDS):
            if error is None:
                try:
                    script_quietly(model)
                    break
                except Exception as raised:  # TorchScript raises several types (RuntimeError, FrontendError, ...)
                    error = raised
            found, culprit = explain(error, code, silenced)
            # One problem per line and pattern: the code-reading scan may have told one that TorchScript reaches later.
            told = {(problem.file, problem.line, problem.title) for problem in problems}
            problems.extend(problem for problem in found if (problem.file, problem.line, problem.title) not in told)
            if culprit is None or culprit in silenced:
                break  # nothing left to silence: the problems found so far are all that can be told
            saved_modifiers.setdefault(culprit, getattr(culprit, "_torchscript_modifier", None))
            culprit._torchscript_modifier = torch._jit_internal.FunctionModifiers.UNUSED  # type: ignore[attr-defined]
            silenced.append(culprit)
            # Types compiled with a silenced function must not be reused by a later, real script.
            store.type_store.clear()
            store.type_store.update({key: list(value) for key, value in saved_store[0].items()})
            error = None
    finally:
        for function, modifier in saved_modifiers.items():
            if modifier is None:
                del function._torchscript_modifier  # type: ignore[attr-defined]
            else:
                function._torchscript_modifier = modifier  # type: ignore[attr-defined]
        store.type_store.clear()
        store.type_store.update(saved_store[0])
        store.methods_compiled.clear()
        store.methods_compiled.update(saved_store[1])
    return sorted(problems, key=lambda problem: (problem.file, problem.line))
