"""Reading the user's source for `diagnose`: TorchScript's error text, and the functions, lines and
ASTs of the model's own code (everything outside torch's installation).

Example:
    >>> headline, message, frames = parse_error(error)            # doctest: +SKIP
    >>> frames[0].file, frames[0].line, frames[0].in_torch           # doctest: +SKIP
    ('model.py', 11, False)
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


# TorchScript's message


@dataclass(frozen=True)
class Frame:
    file: str
    line: int

    @property
    def in_torch(self) -> bool:
        return os.path.abspath(self.file).startswith(TORCH_DIR)


def parse_error(error: BaseException) -> tuple[str, str, list[Frame]]:
    """(headline, whole message, frames innermost first) of a TorchScript error."""
    message = str(error).strip()
    frames = [Frame(file, int(line)) for file, line in re.findall(r'File "([^"]+)", line (\d+)', message)]
    headline = getattr(error, "msg", None) or message.split('  File "')[0]
    headline = headline.strip().rstrip(":").strip()
    if headline.startswith("Arguments for call are not valid"):
        # The full list of overloads says little; the first mismatch says what went wrong.
        mismatch = re.search(r"Expected a value of type .*", message)
        headline = "Arguments for call are not valid: " + (mismatch.group(0) if mismatch else "")
    return headline, message, frames


def source_line(file: str, line: int) -> str:
    return linecache.getline(file, line).strip()


# The user's code: the functions TorchScript compiles, their ASTs, the modules' attributes


def file_tree(file: str) -> ast.Module | None:
    """The parsed source of `file` (None when it cannot be read or parsed), reparsed when the file changes."""
    linecache.checkcache(file)
    try:
        stamp = os.stat(file).st_mtime_ns
    except OSError:
        stamp = 0
    return _parsed(file, stamp)


@functools.lru_cache(maxsize=64)
def _parsed(file: str, stamp: int) -> ast.Module | None:
    text = "".join(linecache.getlines(file))
    try:
        return ast.parse(text) if text else None
    except SyntaxError:
        return None


def enclosing_def(file: str, line: int) -> ast.FunctionDef | None:
    """The innermost `def` of `file` whose lines hold `line`."""
    tree = file_tree(file)
    best = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= node.end_lineno:
            if best is None or node.lineno >= best.lineno:
                best = node
    return best


class UserCode:
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
                if owner in (object, torch.nn.Module) or is_torch_object(owner):
                    continue
                for value in vars(owner).values():
                    self._add(value, module_class, seen)
                for value in vars(sys.modules.get(owner.__module__, object)).values():
                    self._add(value, None, seen)

    def _add(self, value: Any, owner: type | None, seen: set[int]) -> None:
        function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        if inspect.isfunction(function) and not is_torch_object(function) and id(function) not in seen:
            seen.add(id(function))
            self.functions.append((function, owner))

    def function_at(self, file: str, line: int) -> tuple[Callable[..., Any], type | None] | None:
        """The user's function whose `def` holds file:line, and the module class it belongs to."""
        node = enclosing_def(file, line)
        if node is None:
            return None
        first = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
        for function, owner in self.functions:
            code = code_of(function)
            same_file = os.path.abspath(code.co_filename) == os.path.abspath(file)
            if same_file and first <= code.co_firstlineno <= node.lineno:
                return function, owner
        if self._add_module_of(file):  # a function of a file none of the model's classes live in
            return self.function_at(file, line)
        return None

    def _add_module_of(self, file: str) -> bool:
        """Add the functions of the imported module whose source is `file`; whether any were new."""
        count = len(self.functions)
        seen = {id(function) for function, _ in self.functions}
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if path and os.path.abspath(path) == os.path.abspath(file):
                for value in vars(module).values():
                    self._add(value, None, seen)
        return len(self.functions) > count

    def callees(self, function: Callable[..., Any]) -> tuple[list[Callable[..., Any]], list[Callable[..., Any]]]:
        """The user's methods (`self.name(...)`) and free functions (`name(...)`) that `function` calls,
        outside training-only branches."""
        owner = next((owner for known, owner in self.functions if known is function), None)
        file = code_of(function).co_filename
        definition = enclosing_def(file, code_of(function).co_firstlineno)
        methods: list[Callable[..., Any]] = []
        functions: list[Callable[..., Any]] = []
        for call in ast.walk(definition) if definition is not None else ():
            if not isinstance(call, ast.Call) or under_training_branch(file, call.lineno):
                continue
            name = self_attribute(call.func)
            if name is not None and owner is not None:
                value = inspect.getattr_static(owner, name, None)
                if inspect.isfunction(value) and not is_torch_object(value) and value not in methods:
                    methods.append(value)
            elif isinstance(call.func, ast.Name):
                value = function.__globals__.get(call.func.id)
                if inspect.isfunction(value) and not is_torch_object(value) and value not in functions:
                    functions.append(value)
        return methods, functions

    def calls_to(self, name: str) -> Iterator[tuple[str, ast.Call]]:
        """(file, call) for every call `name(...)` or `something.name(...)` in the user's functions."""
        for function, owner in self.functions:
            if owner is None:
                continue  # module-level functions: the file may hold anything, tests included
            file = code_of(function).co_filename
            node = enclosing_def(file, code_of(function).co_firstlineno)
            for call in ast.walk(node) if node is not None else ():
                if isinstance(call, ast.Call) and called_name(call) == name:
                    yield file, call

    def real_frame(self, frame: Frame) -> Frame:
        """`frame` in the file that holds its line.

        For a function under a decorator (`functools.wraps`), TorchScript compiles the wrapped
        function's source but names the wrapper's file: `util.py:8` for line 8 of `model.py`.
        """
        for function, _ in self.functions:
            real, named = code_of(function), function.__code__.co_filename
            if real is function.__code__ or os.path.abspath(named) != os.path.abspath(frame.file):
                continue
            definition = enclosing_def(real.co_filename, frame.line)
            while definition is not None:
                # The def that holds the line, or one around it, is the wrapped function.
                first = min([definition.lineno] + [decorator.lineno for decorator in definition.decorator_list])
                if first == real.co_firstlineno:
                    return Frame(real.co_filename, frame.line)
                definition = enclosing_def(real.co_filename, first - 1) if first > 1 else None
        return frame

    def attribute(self, owner: type | None, name: str) -> Any:
        """The value of `self.name` on an instance of `owner` in the model, or None."""
        for instance in self.instances.get(owner, []) if owner is not None else []:
            if name in instance._modules:
                return instance._modules[name]
            return getattr(instance, name, None)
        return None


def code_of(function: Callable[..., Any]) -> Any:
    """The code of `function` itself, under any decorators that wrap it (`functools.wraps`)."""
    return inspect.unwrap(function).__code__


def class_attribute_line(owner: type, name: str) -> tuple[str, int]:
    """(file, line) of the annotation `name: ...` in the body of class `owner` (its `class` line if none)."""
    try:
        lines, first = inspect.getsourcelines(owner)
        file = inspect.getsourcefile(owner) or ""
    except (OSError, TypeError):
        return "", 0
    tree = file_tree(file)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.ClassDef) and node.name == owner.__name__ and node.lineno >= first:
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and getattr(statement.target, "id", None) == name:
                    return file, statement.lineno
    return file, first


def is_torch_object(value: Any) -> bool:
    try:
        file = inspect.getsourcefile(value)
    except TypeError:
        return True  # builtins and C extensions: nothing of the user's to point at
    return file is None or os.path.abspath(file).startswith(TORCH_DIR)


def called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    if isinstance(call.func, ast.Name):
        return call.func.id
    return None


def self_attribute(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def is_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant)


def nodes_on_line(file: str, line: int) -> list[ast.AST]:
    node = enclosing_def(file, line)
    found = []
    for child in ast.walk(node) if node is not None else ():
        if getattr(child, "lineno", None) is not None and child.lineno <= line <= (child.end_lineno or child.lineno):
            found.append(child)
    return found


def under_training_branch(file: str, line: int) -> bool:
    """Whether file:line runs only when `self.training` is true (`if self.training:` or the else of `not`)."""
    node = enclosing_def(file, line)
    for branch in ast.walk(node) if node is not None else ():
        if not isinstance(branch, ast.If):
            continue
        test = branch.test
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        if self_attribute(test.operand if negated else test) != "training":
            continue
        body = branch.orelse if negated else branch.body
        if body and body[0].lineno <= line <= body[-1].end_lineno:
            return True
    return False
