"""Diagnose code TorchScript rejects: every problem, at the user's line, with what to change.

`torch.jit.script` stops at the first error, names the pattern in its own terms, and for an error
inside torch's own code points at torch's file. `diagnose` scripts the model again and again: after
each error it finds the user's function that holds it and marks that function `@torch.jit.unused`
for the next try, and what that function calls `@torch.jit.export` (free functions are scripted on
their own), so that the next error surfaces, until everything scripts; every mark is restored.
Each error becomes a `Problem` whose location is the user's line (the first frame of TorchScript's
call chain outside torch, or the user's call into the torch function that failed) and whose fix
names the pattern (`patterns` lists them).

TorchScript caches a module class's type before compiling its methods; after a failed compile that
half-built type makes the next `torch.jit.script` of the class fail with "Can't redefine method:
forward". `forget_half_compiled_types` drops those types so the next attempt reports the real error.

Example:
    >>> problems = diagnose(model)                                  # doctest: +SKIP
    >>> print(problems[0])                                          # doctest: +SKIP
    model.py:11: the ModuleList/Sequential `self.blocks` indexed by a variable
        x = self.blocks[i](x)
      TorchScript: Expected integer literal for index but got a variable or non-integer. ...
      fix: iterate over the modules instead of indexing them with a variable: `for block in self.blocks: ...`
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from .patterns import Problem, explain, swapped_forward_problems
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
    forget_half_compiled_types()
    with _Attempts(model) as attempts:
        error = first_error
        for _ in range(_MAX_ROUNDS):
            error = error or attempts.next_error()
            if error is None:
                break
            found, culprit = explain(error, code, attempts.silenced)
            # One problem per line and pattern: the code-reading scan may have told one that TorchScript reaches later.
            told = {(problem.file, problem.line, problem.title) for problem in problems}
            problems.extend(problem for problem in found if (problem.file, problem.line, problem.title) not in told)
            if culprit is None or culprit in attempts.silenced:
                break  # nothing left to silence: the problems found so far are all that can be told
            attempts.silence(culprit)
            # What the silenced function calls is compiled no more through it; compile it on its own.
            methods, functions = code.callees(culprit)
            attempts.reach(methods, functions)
            error = None
    if problems:
        # Told once the model fails: where the forwards of instances agree, the swap scripts.
        told = {(problem.file, problem.line) for problem in problems}
        problems.extend(p for p in swapped_forward_problems(code) if (p.file, p.line) not in told)
    return sorted(problems, key=lambda problem: (problem.file, problem.line))


class _Attempts:
    """Scripting the model again and again, with some of the user's functions silenced.

    A silenced function is marked `@torch.jit.unused` (TorchScript compiles a stub that raises).
    The methods it called are marked `@torch.jit.export` so that TorchScript still compiles them,
    and the free functions it called are scripted on their own. On exit every function gets its
    modifier back, and TorchScript's type store is as it was, so that no type compiled with a
    silenced function is reused by a later, real script.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.silenced: list[Callable[..., Any]] = []
        self.functions: list[Callable[..., Any]] = []
        self.saved_modifiers: dict[Callable[..., Any], Any] = {}
        self.store = torch.jit._recursive.concrete_type_store
        self.saved_types = {key: list(value) for key, value in self.store.type_store.items()}
        self.saved_compiled = set(self.store.methods_compiled)

    def __enter__(self) -> _Attempts:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for function, modifier in self.saved_modifiers.items():
            if modifier is None:
                del function._torchscript_modifier  # type: ignore[attr-defined]
            else:
                function._torchscript_modifier = modifier  # type: ignore[attr-defined]
        self._restore_types()
        self.store.methods_compiled.clear()
        self.store.methods_compiled.update(self.saved_compiled)

    def next_error(self) -> BaseException | None:
        """The error of the next attempt: the model first, then each free function reached; None if all script."""
        self._restore_types()
        try:
            script_quietly(self.model)
            for function in self.functions:
                if function not in self.silenced:
                    script_quietly(function)
        except Exception as error:  # TorchScript raises several types (RuntimeError, FrontendError, ...)
            return error
        return None

    def silence(self, function: Callable[..., Any]) -> None:
        self._set_modifier(function, torch._jit_internal.FunctionModifiers.UNUSED)
        self.silenced.append(function)

    def reach(self, methods: list[Callable[..., Any]], functions: list[Callable[..., Any]]) -> None:
        for method in methods:
            if getattr(method, "_torchscript_modifier", None) is None:  # not already ignored, unused or exported
                self._set_modifier(method, torch._jit_internal.FunctionModifiers.EXPORT)
        self.functions.extend(
            function
            for function in functions
            if function not in self.functions and getattr(function, "_torchscript_modifier", None) is None
        )

    def _set_modifier(self, function: Callable[..., Any], modifier: Any) -> None:
        self.saved_modifiers.setdefault(function, getattr(function, "_torchscript_modifier", None))
        function._torchscript_modifier = modifier  # type: ignore[attr-defined]

    def _restore_types(self) -> None:
        self.store.type_store.clear()
        self.store.type_store.update({key: list(value) for key, value in self.saved_types.items()})
