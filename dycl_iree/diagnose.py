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

import ast
import functools
import inspect
import linecache
import os
import re
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

# What every TorchScript problem without a more precise fix is told.
GENERIC_ADVICE = (
    "TorchScript must be able to compile forward(): give non-tensor arguments type annotations "
    "(n: int, flag: bool), annotate empty lists (tokens: List[int] = []), avoid Python features it "
    "does not support (**kwargs, closures, non-tensor globals), and mark helper methods it should "
    "skip with @torch.jit.ignore."
)

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_MAX_ROUNDS = 50


@dataclass(frozen=True)
class Problem:
    """One thing TorchScript rejects: where (the user's line), what TorchScript said, and the fix."""

    title: str
    file: str
    line: int
    source: str
    message: str
    fix: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.file else "(no source line)"

    def __str__(self) -> str:
        text = f"{self.where}: {self.title}"
        if self.source:
            text += f"\n    {self.source}"
        if self.message:
            text += "\n  TorchScript: " + self.message.replace("\n", "\n  ")
        return text + f"\n  fix: {self.fix}"


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
    code = _UserCode(model)
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
            found, culprit = _explain(error, code, silenced)
            problems.extend(problem for problem in found if problem not in problems)
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


# ---------------------------------------------------------------------------------------------
# TorchScript's message


@dataclass(frozen=True)
class _Frame:
    file: str
    line: int

    @property
    def in_torch(self) -> bool:
        return os.path.abspath(self.file).startswith(_TORCH_DIR)


def _parse(error: BaseException) -> tuple[str, str, list[_Frame]]:
    """(headline, whole message, frames innermost first) of a TorchScript error."""
    message = str(error).strip()
    frames = [_Frame(file, int(line)) for file, line in re.findall(r'File "([^"]+)", line (\d+)', message)]
    headline = getattr(error, "msg", None) or message.split('  File "')[0]
    headline = headline.strip().rstrip(":").strip()
    if headline.startswith("Arguments for call are not valid"):
        # The full list of overloads says little; the first mismatch says what went wrong.
        mismatch = re.search(r"Expected a value of type .*", message)
        headline = "Arguments for call are not valid: " + (mismatch.group(0) if mismatch else "")
    return headline, message, frames


def _source_line(file: str, line: int) -> str:
    return linecache.getline(file, line).strip()


# ---------------------------------------------------------------------------------------------
# The user's code: the functions TorchScript compiles, their ASTs, the modules' attributes


@functools.lru_cache(maxsize=64)
def _file_tree(file: str) -> ast.Module | None:
    text = "".join(linecache.getlines(file))
    try:
        return ast.parse(text) if text else None
    except SyntaxError:
        return None


def _enclosing_def(file: str, line: int) -> ast.FunctionDef | None:
    """The innermost `def` of `file` whose lines hold `line`."""
    tree = _file_tree(file)
    best = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= node.end_lineno:
            if best is None or node.lineno >= best.lineno:
                best = node
    return best


class _UserCode:
    """The Python functions of the model outside torch: methods of its module classes and the
    module-level functions next to them, found by file and line."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.instances: dict[type, list[torch.nn.Module]] = {}
        self.attribute_names: dict[int, list[str]] = {}
        for name, module in model.named_modules():
            self.instances.setdefault(type(module), []).append(module)
            self.attribute_names.setdefault(id(module), []).append(name.rpartition(".")[2])
        self.functions: list[tuple[Callable[..., Any], type | None]] = []
        seen: set[int] = set()
        for module_class in self.instances:
            for owner in module_class.__mro__:
                if owner in (object, torch.nn.Module) or _is_torch_object(owner):
                    continue
                for value in vars(owner).values():
                    self._add(value, module_class, seen)
                for value in vars(sys.modules.get(owner.__module__, object)).values():
                    self._add(value, None, seen)

    def _add(self, value: Any, owner: type | None, seen: set[int]) -> None:
        function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        if inspect.isfunction(function) and not _is_torch_object(function) and id(function) not in seen:
            seen.add(id(function))
            self.functions.append((function, owner))

    def function_at(self, file: str, line: int) -> tuple[Callable[..., Any], type | None] | None:
        """The user's function whose `def` holds file:line, and the module class it belongs to."""
        node = _enclosing_def(file, line)
        if node is None:
            return None
        first = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
        for function, owner in self.functions:
            code = function.__code__
            same_file = os.path.abspath(code.co_filename) == os.path.abspath(file)
            if same_file and first <= code.co_firstlineno <= node.lineno:
                return function, owner
        return None

    def calls_to(self, name: str) -> Iterator[tuple[str, ast.Call]]:
        """(file, call) for every call `name(...)` or `something.name(...)` in the user's functions."""
        for function, owner in self.functions:
            if owner is None:
                continue  # module-level functions: the file may hold anything, tests included
            file = function.__code__.co_filename
            node = _enclosing_def(file, function.__code__.co_firstlineno)
            for call in ast.walk(node) if node is not None else ():
                if isinstance(call, ast.Call) and _called_name(call) == name:
                    yield file, call

    def attribute(self, owner: type | None, name: str) -> Any:
        """The value of `self.name` on an instance of `owner` in the model, or None."""
        for instance in self.instances.get(owner, []) if owner is not None else []:
            if name in instance._modules:
                return instance._modules[name]
            return getattr(instance, name, None)
        return None


def _is_torch_object(value: Any) -> bool:
    try:
        file = inspect.getsourcefile(value)
    except TypeError:
        return True  # builtins and C extensions: nothing of the user's to point at
    return file is None or os.path.abspath(file).startswith(_TORCH_DIR)


def _called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    if isinstance(call.func, ast.Name):
        return call.func.id
    return None


def _is_self_attribute(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _is_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant)


def _nodes_on_line(file: str, line: int) -> list[ast.AST]:
    node = _enclosing_def(file, line)
    found = []
    for child in ast.walk(node) if node is not None else ():
        if getattr(child, "lineno", None) is not None and child.lineno <= line <= (child.end_lineno or child.lineno):
            found.append(child)
    return found


def _under_training_branch(file: str, line: int) -> bool:
    """Whether file:line runs only when `self.training` is true (`if self.training:` or the else of `not`)."""
    node = _enclosing_def(file, line)
    for branch in ast.walk(node) if node is not None else ():
        if not isinstance(branch, ast.If):
            continue
        test = branch.test
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        if _is_self_attribute(test.operand if negated else test) != "training":
            continue
        body = branch.orelse if negated else branch.body
        if body and body[0].lineno <= line <= body[-1].end_lineno:
            return True
    return False


# ---------------------------------------------------------------------------------------------
# From one error to problems


def _explain(
    error: BaseException, code: _UserCode, silenced: list[Callable[..., Any]]
) -> tuple[list[Problem], Callable[..., Any] | None]:
    """The problems one TorchScript error shows, and the user's function to silence to get past it."""
    headline, message, frames = _parse(error)
    user_frames = [frame for frame in frames if not frame.in_torch]
    torch_frame = frames[0] if frames and frames[0].in_torch else None
    if torch_frame is not None:
        return _explain_torch_internal(headline, torch_frame, user_frames, code)
    if not user_frames:
        problem = Problem("TorchScript rejected the model", "", 0, "", message, GENERIC_ADVICE)
        return [problem], None
    frame = user_frames[0]
    found = code.function_at(frame.file, frame.line)
    function, owner = found if found is not None else (None, None)
    if function is not None and _calls_silenced(frame, silenced, code):
        # This error only says that a function silenced in an earlier round is called here.
        return [], function
    problem = _classify(headline, message, frame, frames, code, owner)
    problems = [problem]
    if function is not None:
        problems += [extra for extra in _scan(function, owner, code) if extra.line != problem.line]
    return problems, function


def _calls_silenced(frame: _Frame, silenced: list[Callable[..., Any]], code: _UserCode) -> bool:
    names = {function.__name__ for function in silenced}
    for function in silenced:
        if function.__name__ == "forward":
            for module_class, instances in code.instances.items():
                if getattr(module_class, "forward", None) is function:
                    names.update(name for instance in instances for name in code.attribute_names[id(instance)])
    for node in _nodes_on_line(frame.file, frame.line):
        if isinstance(node, ast.Call) and _called_name(node) in names and node.lineno == frame.line:
            return True
    return False


def _problem(title: str, frame: _Frame, message: str, fix: str, line: int | None = None) -> Problem:
    line = frame.line if line is None else line
    return Problem(title, frame.file, line, _source_line(frame.file, line), message, fix)


def _classify(
    headline: str, message: str, frame: _Frame, frames: list[_Frame], code: _UserCode, owner: type | None
) -> Problem:
    nodes = _nodes_on_line(frame.file, frame.line)
    training = _training_problem(headline, frame, frames, code)
    if training is not None:
        return training
    if "try blocks aren't supported" in headline:
        return _try_problem(frame, headline)
    if "SetComp aren't supported" in headline:
        return _problem("a set comprehension", frame, headline, _SET_FIX)
    if "ModuleList/Sequential indexing is only supported" in headline:
        return _module_list_problem(frame, headline, nodes)
    if "ModuleDict indexing is only supported" in headline:
        return _module_dict_problem(frame, headline, nodes)
    if "Expected type hint for result of tolist()" in headline:
        return _tolist_problem(frame, headline, nodes)
    generator = next((node for node in nodes if isinstance(node, ast.GeneratorExp)), None)
    if generator is not None:
        return _generator_problem(frame, headline, nodes)
    empty = _empty_list_problem(headline, message, frame, nodes)
    if empty is not None:
        return empty
    attribute = _container_attribute_problem(headline, frame, code, owner)
    if attribute is not None:
        return attribute
    return _problem("TorchScript rejects this line", frame, message, GENERIC_ADVICE)


_SET_FIX = (
    "TorchScript has no sets: build a list instead (`[k for k in ...]`) and test membership with `in`, "
    "or count distinct values with a `Dict[int, bool]`."
)


def _try_problem(frame: _Frame, headline: str) -> Problem:
    return _problem(
        "a try/except block",
        frame,
        headline,
        "remove the try/except and keep the body of `try`; if the `except` handles a case that really "
        "happens, test for that case with an `if` before it can fail.",
    )


def _module_list_problem(frame: _Frame, headline: str, nodes: list[ast.AST]) -> Problem:
    attribute = next(
        (name for node in nodes if isinstance(node, ast.Subscript) and (name := _is_self_attribute(node.value))),
        "blocks",
    )
    item = attribute[:-1] if attribute.endswith("s") and len(attribute) > 1 else "module"
    fix = (
        f"iterate over the modules instead of indexing them with a variable: `for {item} in self.{attribute}: "
        f"x = {item}(x)`; use `for i, {item} in enumerate(self.{attribute})` when the index is needed, and "
        f"`zip(self.{attribute}, ...)` to walk two lists together."
    )
    return _problem(f"the ModuleList/Sequential `self.{attribute}` indexed by a variable", frame, headline, fix)


def _module_dict_problem(frame: _Frame, headline: str, nodes: list[ast.AST]) -> Problem:
    subscript = next(
        (node for node in nodes if isinstance(node, ast.Subscript) and _is_self_attribute(node.value)), None
    )
    attribute = _is_self_attribute(subscript.value) if subscript is not None else "heads"
    key = ast.unparse(subscript.slice) if subscript is not None else "key"
    loop_name = "name" if key != "name" else "key"
    fix = (
        f"a ModuleDict can only be indexed by a string literal; iterate and compare the key instead: "
        f"`for {loop_name}, module in self.{attribute}.items(): if {loop_name} == {key}: out = module(x)`."
    )
    return _problem(f"the ModuleDict `self.{attribute}` indexed by a variable", frame, headline, fix)


def _tolist_problem(frame: _Frame, headline: str, nodes: list[ast.AST]) -> Problem:
    assignment = next((node for node in nodes if isinstance(node, ast.Assign) and len(node.targets) == 1), None)
    target = ast.unparse(assignment.targets[0]) if assignment is not None else "values"
    call = next((node for node in nodes if isinstance(node, ast.Call) and _called_name(node) == "tolist"), None)
    value = ast.unparse(call) if call is not None else "t.tolist()"
    fix = (
        f"give the result its type in an annotated assignment: `{target}: List[float] = {value}` "
        "(List[int] for an integer tensor, one List per dimension: List[List[float]] for a 2-d tensor; "
        "`from typing import List`)."
    )
    return _problem("tolist() without a type annotation", frame, headline, fix)


def _generator_problem(frame: _Frame, headline: str, nodes: list[ast.AST]) -> Problem:
    summed = any(isinstance(node, ast.Call) and _called_name(node) == "sum" for node in nodes)
    if summed:
        fix = (
            "TorchScript reads a generator as a list and cannot sum() a list of tensors: add them in a loop "
            "(`total = xs[0]` then `for t in xs[1:]: total = total + t`), or `torch.stack([...]).sum(0)` "
            "when they have the same shape."
        )
    else:
        fix = "replace the generator with a list comprehension `[... for ...]` or a loop that fills a typed list."
    return _problem("a generator expression", frame, headline, fix)


def _empty_list_problem(headline: str, message: str, frame: _Frame, nodes: list[ast.AST]) -> Problem | None:
    mismatch = re.search(r"previously matched to type Tensor is matched to type (.+?)\.?$", message, re.MULTILINE)
    if mismatch is None and "Empty lists default to List[Tensor]" not in message:
        return None
    element = mismatch.group(1).strip() if mismatch else "int"
    names = {
        node.func.value.id
        for node in nodes
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.attr in ("append", "insert", "extend")
    }
    definition = _enclosing_def(frame.file, frame.line)
    empty_line = None
    for node in ast.walk(definition) if definition is not None else ():
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.List)
            and not node.value.elts
            and any(isinstance(target, ast.Name) and target.id in names for target in node.targets)
            and node.lineno <= frame.line
            and (empty_line is None or node.lineno > empty_line)
        ):
            empty_line = node.lineno
    name = next(iter(sorted(names)), "items")
    fix = (
        f"TorchScript takes an empty list for a List[Tensor]; annotate it with its element type: "
        f"`{name}: List[{element}] = []` (`from typing import List`)"
    )
    if empty_line is not None and empty_line != frame.line:
        fix += f"; the list is filled at line {frame.line}: `{_source_line(frame.file, frame.line)}`"
    return _problem("an empty list without a type annotation", frame, headline, fix + ".", empty_line)


def _container_attribute_problem(headline: str, frame: _Frame, code: _UserCode, owner: type | None) -> Problem | None:
    found = re.search(r"has no attribute '(\w+)' \(This attribute exists on the Python module", headline)
    if found is None:
        return None
    name = found.group(1)
    value = code.attribute(owner, name)
    if isinstance(value, dict) and any(isinstance(item, torch.nn.Module) for item in value.values()):
        fix = f"register the modules: `self.{name} = nn.ModuleDict({{...}})` instead of a plain dict."
        return _problem(f"a dict of modules `self.{name}`", frame, headline, fix)
    if isinstance(value, (list, tuple)) and any(isinstance(item, torch.nn.Module) for item in value):
        fix = f"register the modules: `self.{name} = nn.ModuleList([...])` instead of a plain {type(value).__name__}."
        return _problem(f"a list of modules `self.{name}`", frame, headline, fix)
    if isinstance(value, list) and not value:
        fix = (
            f"TorchScript cannot tell what an empty list attribute holds; annotate it in __init__: "
            f"`self.{name}: List[Tensor] = []` (or the element type it holds; `from typing import List`)."
        )
        return _problem(f"the empty list attribute `self.{name}` without a type annotation", frame, headline, fix)
    return None


def _training_problem(message: str, frame: _Frame, frames: list[_Frame], code: _UserCode) -> Problem | None:
    if _under_training_branch(frame.file, frame.line):
        fix = (
            "this code runs only in training (under `if self.training:`); move it into a method marked "
            "`@torch.jit.unused` and call that from the branch: TorchScript then compiles a stub, and the "
            "exported model runs in eval mode."
        )
        return _problem("training-only code TorchScript cannot compile", frame, message, fix)
    definition = _enclosing_def(frame.file, frame.line)
    if definition is None:
        return None
    call_sites = [(other.file, other.line) for other in frames[1:] if not other.in_torch][:1]
    call_sites += [(file, call.lineno) for file, call in code.calls_to(definition.name)]
    for file, line in call_sites:
        if _under_training_branch(file, line):
            fix = (
                f"`{definition.name}` runs only in training (called under `if self.training:` at {file}:{line}); "
                f"mark it `@torch.jit.unused` so that TorchScript compiles a stub instead of its body (the "
                "exported model runs in eval mode)."
            )
            return _problem(f"the training-only helper `{definition.name}`", frame, message, fix)
    return None


def _explain_torch_internal(
    headline: str, torch_frame: _Frame, user_frames: list[_Frame], code: _UserCode
) -> tuple[list[Problem], Callable[..., Any] | None]:
    """An error inside torch's own code: point at the user's call that made TorchScript compile it."""
    definition = _enclosing_def(torch_frame.file, torch_frame.line)
    torch_name = definition.name if definition is not None else "?"
    torch_where = f"{torch_frame.file.removeprefix(_TORCH_DIR)}:{torch_frame.line}"
    sites = [(frame.file, frame.line) for frame in user_frames[:1]]
    if not sites:
        sites = [(file, call.lineno) for file, call in code.calls_to(torch_name)]
    if torch_name == "flatten_parameters":
        fix = (
            "remove the `flatten_parameters()` call from forward: it only re-packs the weights for cuDNN, "
            "which an exported model does not use (call it once after moving the model to the GPU instead)."
        )
    else:
        fix = (
            f"TorchScript cannot compile torch's `{torch_name}`: call it outside forward (in __init__, or in a "
            "method marked @torch.jit.ignore that an exported model does not need), or use an equivalent "
            "TorchScript supports."
        )
    title = f"this call makes TorchScript compile torch's `{torch_name}` ({torch_where}), which it cannot"
    if not sites:
        problem = Problem(title, torch_frame.file, torch_frame.line, "", headline, fix)
        return [problem], None
    problems = [
        Problem(title, file, line, _source_line(file, line), headline, fix) for file, line in dict.fromkeys(sites)
    ]
    found = code.function_at(*sites[0])
    return problems, found[0] if found is not None else None


def _scan(function: Callable[..., Any], owner: type | None, code: _UserCode) -> list[Problem]:
    """The other patterns TorchScript always rejects in a function it failed on, which its first
    error hides: every try block, set comprehension, untyped tolist() and variable module index.
    TorchScript has not said these yet, so they carry no message of its own."""
    file = function.__code__.co_filename
    definition = _enclosing_def(file, function.__code__.co_firstlineno)
    if definition is None:
        return []
    annotated = {id(node.value) for node in ast.walk(definition) if isinstance(node, ast.AnnAssign)}
    problems = []
    for node in ast.walk(definition):
        frame = _Frame(file, getattr(node, "lineno", 0))
        if isinstance(node, ast.Try):
            problems.append(_try_problem(frame, ""))
        elif isinstance(node, ast.SetComp):
            problems.append(_problem("a set comprehension", frame, "", _SET_FIX))
        elif isinstance(node, ast.Call) and _called_name(node) == "tolist" and id(node) not in annotated:
            assignments = [parent for parent in ast.walk(definition) if getattr(parent, "value", None) is node]
            problems.append(_tolist_problem(frame, "", [node, *assignments]))
        elif isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice) and not _is_literal(node.slice):
            attribute = _is_self_attribute(node.value)
            value = code.attribute(owner, attribute) if attribute else None
            if isinstance(value, (torch.nn.ModuleList, torch.nn.Sequential)):
                problems.append(_module_list_problem(frame, "", [node]))
            elif isinstance(value, torch.nn.ModuleDict) and not isinstance(node.slice, ast.Constant):
                problems.append(_module_dict_problem(frame, "", [node]))
    return sorted(problems, key=lambda problem: problem.line)
