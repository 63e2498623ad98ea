"""The patterns of code TorchScript rejects, each with its fix: from one TorchScript error to the
problems it shows, at the user's line, and the user's function to silence to get past it.

Example:
    >>> problems, culprit = explain(error, UserCode(model), silenced=[])     # doctest: +SKIP
    >>> problems[0].title                                                     # doctest: +SKIP
    'a try/except block'
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .source import (
    TORCH_DIR,
    Frame,
    UserCode,
    called_name,
    class_attribute_line,
    code_of,
    enclosing_def,
    is_literal,
    nodes_on_line,
    parse_error,
    self_attribute,
    source_line,
    under_training_branch,
)

# What every TorchScript problem without a more precise fix is told.
GENERIC_ADVICE = (
    "TorchScript must be able to compile forward(): give non-tensor arguments type annotations "
    "(n: int, flag: bool), annotate empty lists (tokens: List[int] = []), avoid Python features it "
    "does not support (**kwargs, closures, non-tensor globals), and mark helper methods it should "
    "skip with @torch.jit.ignore."
)


@dataclass(frozen=True)
class Problem:
    """One thing that stops an export: where (the user's line), what the tool that found it said, and the fix."""

    title: str
    file: str
    line: int
    source: str
    message: str
    fix: str
    said_by: str = "TorchScript"

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.file else "(no source line)"

    def __str__(self) -> str:
        text = f"{self.where}: {self.title}"
        if self.source:
            text += f"\n    {self.source}"
        if self.message:
            text += f"\n  {self.said_by}: " + self.message.replace("\n", "\n  ")
        return text + f"\n  fix: {self.fix}"


def explain(
    error: BaseException, code: UserCode, silenced: list[Callable[..., Any]]
) -> tuple[list[Problem], Callable[..., Any] | None]:
    """The problems one TorchScript error shows, and the user's function to silence to get past it."""
    headline, message, frames = parse_error(error)
    frames = [code.real_frame(frame) for frame in frames]
    user_frames = [frame for frame in frames if not frame.in_torch]
    torch_frame = frames[0] if frames and frames[0].in_torch else None
    if torch_frame is not None:
        return _explain_torch_internal(headline, torch_frame, user_frames, code)
    if not user_frames:
        annotation = _string_annotation_problem(headline, code)
        if annotation is not None:
            return [annotation], None
        if "could not get source code" in headline or "requires source access" in headline:
            return [_no_source_problem(code, headline)], None
        problem = Problem("TorchScript rejected the model", "", 0, "", message, GENERIC_ADVICE)
        return [problem], None
    frame = user_frames[0]
    found = code.function_at(frame.file, frame.line)
    function, owner = found if found is not None else (None, None)
    if function is not None and _calls_silenced(frame, silenced, code):
        # This error only says that a function silenced in an earlier round is called here (its
        # stand-in returns a Tensor unless annotated); what the function surely holds is still told.
        return _scan(function, owner, code), function
    problem = _classify(headline, message, frame, frames, code, owner)
    problems = [problem]
    if function is not None and "training-only" not in problem.title:
        problems += [extra for extra in _scan(function, owner, code) if extra.line != problem.line]
    return problems, function


def _string_annotation_problem(headline: str, code: UserCode) -> Problem | None:
    """A class-level attribute annotation TorchScript cannot read because it is a string.

    torch 2.13 takes a module class's `__annotations__` as stored; under `from __future__ import
    annotations` they are strings, and it fails with "Unknown type annotation: 'List[Tensor]' at "
    and no source line.
    """
    found = re.match(r"Unknown type annotation: '(.+)' at\s*$", headline)
    # The same annotation, once TorchScript has typed a module of that class before (another model
    # in the process), reads "Expected inferred type to be interface type for 'layers'".
    interface = re.match(r"Expected inferred type to be interface type for '(\w+)'", headline)
    if found is None and interface is None:
        return None
    for module_class in code.instances:
        for owner in module_class.__mro__:
            for name, annotation in vars(owner).get("__annotations__", {}).items():
                module_type = isinstance(annotation, type) and issubclass(annotation, torch.nn.Module)
                if module_type and (
                    str(annotation) == (found and found.group(1)) or name == (interface and interface.group(1))
                ):
                    return _module_annotation_problem(owner, name, annotation, headline)
                if found is None or annotation != found.group(1):
                    continue
                file, line = class_attribute_line(owner, name)
                fix = (
                    f"this file has `from __future__ import annotations`, which turns the annotation of "
                    f"`{name}` into a string TorchScript cannot read: remove that import from the file, or move "
                    f"`{owner.__name__}` to a file without it."
                )
                return Problem(
                    f"the annotation of `{owner.__name__}.{name}` is a string",
                    file,
                    line,
                    source_line(file, line),
                    headline,
                    fix,
                )
    return None


def _calls_silenced(frame: Frame, silenced: list[Callable[..., Any]], code: UserCode) -> bool:
    names = {function.__name__ for function in silenced}
    for function in silenced:
        if function.__name__ == "forward":
            for module_class, instances in code.instances.items():
                if getattr(module_class, "forward", None) is function:
                    names.update(name for instance in instances for name in code.attribute_names[id(instance)])
    for node in nodes_on_line(frame.file, frame.line):
        if isinstance(node, ast.Call) and called_name(node) in names and node.lineno == frame.line:
            return True
    return False


def _problem(title: str, frame: Frame, message: str, fix: str, line: int | None = None) -> Problem:
    line = frame.line if line is None else line
    return Problem(title, frame.file, line, source_line(frame.file, line), message, fix)


def _classify(
    headline: str, message: str, frame: Frame, frames: list[Frame], code: UserCode, owner: type | None
) -> Problem:
    nodes = nodes_on_line(frame.file, frame.line)
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
    if "getattr's second argument must be a string literal" in headline:
        return _getattr_problem(frame, headline)
    if "Class Variable does not have an __init__" in headline:
        fix = "remove `Variable(...)` and use the tensor itself: since PyTorch 0.4 Variable returns its argument."
        return _problem("autograd.Variable", frame, headline, fix)
    if "can't take variable number of arguments" in headline:
        fix = "give the function fixed parameters, each with its type (`x: Tensor, n: int`), instead of *args/**kwargs."
        return _problem("*args or **kwargs", frame, headline, fix)
    if "no attribute or method 'new'" in headline:
        return _new_problem(frame, headline, nodes)
    if "else branches of for loops aren't supported" in headline or "else branches of while loops" in headline:
        return _loop_else_problem(frame, headline)
    if "Keyword argument as_tuple unknown" in message:
        return _nonzero_tuple_problem(frame, headline, nodes)
    returns = _tuple_returns_problem(frame, headline)
    if returns is not None:
        return returns
    conditional = _conditional_attribute_problem(headline, frame, code, owner)
    if conditional is not None:
        return conditional
    none_attribute = _none_attribute_problem(headline, frame, nodes)
    if none_attribute is not None:
        return none_attribute
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


def _getattr_problem(frame: Frame, headline: str) -> Problem:
    fix = (
        "TorchScript needs attribute names it can read in the source: register the layers in an "
        "nn.ModuleList (`self.layers = nn.ModuleList([...])`) and iterate over it "
        "(`for layer in self.layers: x = layer(x)`, with zip/enumerate when a second list or the index is needed)."
    )
    return _problem("getattr with a computed attribute name", frame, headline, fix)


def _none_attribute_problem(headline: str, frame: Frame, nodes: list[ast.AST]) -> Problem | None:
    found = re.search(r"Wrong type for attribute assignment\. Expected NoneType but got (.+)", headline)
    if found is None:
        return None
    assigned = next(
        (
            self_attribute(target)
            for node in nodes
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if self_attribute(target)
        ),
        "state",
    )
    fix = (
        f"`self.{assigned}` is None in __init__, so TorchScript types it NoneType for good: annotate it in the "
        f"class body (`{assigned}: Optional[{found.group(1)}]` above `__init__`; TorchScript ignores an annotation "
        "inside __init__, and a string one under `from __future__ import annotations`), or better pass the state "
        "into forward and return it, which keeps the model free of state between calls."
    )
    return _problem(f"the attribute `self.{assigned}` set to None in __init__ and assigned later", frame, headline, fix)


def _try_problem(frame: Frame, headline: str) -> Problem:
    return _problem(
        "a try/except block",
        frame,
        headline,
        "remove the try/except and keep the body of `try`; if the `except` handles a case that really "
        "happens, test for that case with an `if` before it can fail.",
    )


def _module_list_problem(frame: Frame, headline: str, nodes: list[ast.AST]) -> Problem:
    attribute = next(
        (name for node in nodes if isinstance(node, ast.Subscript) and (name := self_attribute(node.value))),
        "blocks",
    )
    item = "module"
    if attribute.endswith(("ches", "shes", "sses", "xes")):
        item = attribute[:-2]  # branches -> branch
    elif attribute.endswith("s") and len(attribute) > 2:
        item = attribute[:-1]  # blocks -> block
    fix = (
        f"iterate over the modules instead of indexing them with a variable: `for {item} in self.{attribute}: "
        f"x = {item}(x)`; use `for i, {item} in enumerate(self.{attribute})` when the index is needed, and "
        f"`zip(self.{attribute}, ...)` to walk two lists together."
    )
    return _problem(f"the ModuleList/Sequential `self.{attribute}` indexed by a variable", frame, headline, fix)


def _module_dict_problem(frame: Frame, headline: str, nodes: list[ast.AST]) -> Problem:
    subscript = next((node for node in nodes if isinstance(node, ast.Subscript) and self_attribute(node.value)), None)
    attribute = self_attribute(subscript.value) if subscript is not None else "heads"
    key = ast.unparse(subscript.slice) if subscript is not None else "key"
    loop_name = "name" if key != "name" else "key"
    fix = (
        f"a ModuleDict can only be indexed by a string literal; iterate and compare the key instead: "
        f"`for {loop_name}, module in self.{attribute}.items(): if {loop_name} == {key}: out = module(x)`."
    )
    return _problem(f"the ModuleDict `self.{attribute}` indexed by a variable", frame, headline, fix)


def _tolist_problem(frame: Frame, headline: str, nodes: list[ast.AST]) -> Problem:
    assignment = next((node for node in nodes if isinstance(node, ast.Assign) and len(node.targets) == 1), None)
    target = ast.unparse(assignment.targets[0]) if assignment is not None else "values"
    call = next((node for node in nodes if isinstance(node, ast.Call) and called_name(node) == "tolist"), None)
    value = ast.unparse(call) if call is not None else "t.tolist()"
    fix = (
        f"give the result its type in an annotated assignment: `{target}: List[float] = {value}` "
        "(List[int] for an integer tensor, one List per dimension: List[List[float]] for a 2-d tensor; "
        "`from typing import List`)."
    )
    return _problem("tolist() without a type annotation", frame, headline, fix)


def _generator_problem(frame: Frame, headline: str, nodes: list[ast.AST]) -> Problem:
    summed = any(isinstance(node, ast.Call) and called_name(node) == "sum" for node in nodes)
    if summed:
        fix = (
            "TorchScript reads a generator as a list and cannot sum() a list of tensors: add them in a loop "
            "(`total = xs[0]` then `for t in xs[1:]: total = total + t`), or `torch.stack([...]).sum(0)` "
            "when they have the same shape."
        )
    else:
        fix = "replace the generator with a list comprehension `[... for ...]` or a loop that fills a typed list."
    return _problem("a generator expression", frame, headline, fix)


def _empty_list_problem(headline: str, message: str, frame: Frame, nodes: list[ast.AST]) -> Problem | None:
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
    definition = enclosing_def(frame.file, frame.line)
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
        fix += f"; the list is filled at line {frame.line}: `{source_line(frame.file, frame.line)}`"
    return _problem("an empty list without a type annotation", frame, headline, fix + ".", empty_line)


def _container_attribute_problem(headline: str, frame: Frame, code: UserCode, owner: type | None) -> Problem | None:
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
            f"TorchScript cannot tell what an empty list attribute holds; annotate it in the class body: "
            f"`{name}: List[Tensor]` above `__init__` (or the element type it holds; `from typing import List`); "
            "TorchScript ignores an annotation inside __init__, and a string one under "
            "`from __future__ import annotations`."
        )
        return _problem(f"the empty list attribute `self.{name}` without a type annotation", frame, headline, fix)
    return None


def _training_problem(message: str, frame: Frame, frames: list[Frame], code: UserCode) -> Problem | None:
    if under_training_branch(frame.file, frame.line):
        fix = (
            "this code runs only in training (under `if self.training:`); move it into a method marked "
            "`@torch.jit.unused` and call that from the branch: TorchScript then compiles a stub, and the "
            "exported model runs in eval mode."
        )
        return _problem("training-only code TorchScript cannot compile", frame, message, fix)
    definition = enclosing_def(frame.file, frame.line)
    if definition is None:
        return None
    call_sites = [(other.file, other.line) for other in frames[1:] if not other.in_torch][:1]
    call_sites += [(file, call.lineno) for file, call in code.calls_to(definition.name)]
    for file, line in call_sites:
        if under_training_branch(file, line):
            fix = (
                f"`{definition.name}` runs only in training (called under `if self.training:` at {file}:{line}); "
                f"mark it `@torch.jit.unused` so that TorchScript compiles a stub instead of its body (the "
                "exported model runs in eval mode)."
            )
            return _problem(f"the training-only helper `{definition.name}`", frame, message, fix)
    return None


def _explain_torch_internal(
    headline: str, torch_frame: Frame, user_frames: list[Frame], code: UserCode
) -> tuple[list[Problem], Callable[..., Any] | None]:
    """An error inside torch's own code: point at the user's call that made TorchScript compile it."""
    definition = enclosing_def(torch_frame.file, torch_frame.line)
    torch_name = definition.name if definition is not None else "?"
    torch_where = f"{torch_frame.file.removeprefix(TORCH_DIR)}:{torch_frame.line}"
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
        Problem(title, file, line, source_line(file, line), headline, fix) for file, line in dict.fromkeys(sites)
    ]
    found = code.function_at(*sites[0])
    return problems, found[0] if found is not None else None


def _scan(function: Callable[..., Any], owner: type | None, code: UserCode) -> list[Problem]:
    """The other patterns TorchScript always rejects in a function it failed on, which its first
    error hides: every try block, set comprehension, untyped tolist(), computed getattr and variable
    module index.
    TorchScript has not said these yet, so they carry no message of its own."""
    file = code_of(function).co_filename
    definition = enclosing_def(file, code_of(function).co_firstlineno)
    if definition is None:
        return []
    annotated = {id(node.value) for node in ast.walk(definition) if isinstance(node, ast.AnnAssign)}
    problems = []
    for node in ast.walk(definition):
        frame = Frame(file, getattr(node, "lineno", 0))
        if frame.line and under_training_branch(file, frame.line):
            continue  # training-only code has one fix, told when TorchScript reaches it
        if isinstance(node, ast.Try):
            problems.append(_try_problem(frame, ""))
        elif isinstance(node, ast.SetComp):
            problems.append(_problem("a set comprehension", frame, "", _SET_FIX))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and not isinstance(node.args[1], ast.Constant)
        ):
            problems.append(_getattr_problem(frame, ""))
        elif isinstance(node, (ast.For, ast.While)) and node.orelse:
            problems.append(_loop_else_problem(frame, ""))
        elif _is_tensor_new(node):
            problems.append(_new_problem(frame, "", [node, *_parents_on_line(definition, node)]))
        elif _is_nonzero_tuple(node):
            problems.append(_nonzero_tuple_problem(frame, "", [node]))
        elif isinstance(node, ast.Call) and called_name(node) == "tolist" and id(node) not in annotated:
            assignments = [parent for parent in ast.walk(definition) if getattr(parent, "value", None) is node]
            problems.append(_tolist_problem(frame, "", [node, *assignments]))
        elif isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice) and not is_literal(node.slice):
            attribute = self_attribute(node.value)
            value = code.attribute(owner, attribute) if attribute else None
            if isinstance(value, (torch.nn.ModuleList, torch.nn.Sequential)):
                problems.append(_module_list_problem(frame, "", [node]))
            elif isinstance(value, torch.nn.ModuleDict) and not isinstance(node.slice, ast.Constant):
                problems.append(_module_dict_problem(frame, "", [node]))
    return sorted(problems, key=lambda problem: problem.line)


def _module_annotation_problem(owner: type, name: str, annotation: type, headline: str) -> Problem:
    """`layers: nn.ModuleList` in a class body: TorchScript types submodules from their values, and
    reads a class annotation as an attribute type it does not know (no source line in its message)."""
    file, line = class_attribute_line(owner, name)
    fix = (
        f"remove the class annotation `{name}: {annotation.__name__}`: TorchScript finds the type of a submodule "
        f"from the module assigned in __init__ (`self.{name} = nn.{annotation.__name__}(...)`), and cannot read "
        "a module class as an annotation."
    )
    return Problem(
        f"the class annotation `{owner.__name__}.{name}: {annotation.__name__}`",
        file,
        line,
        source_line(file, line),
        headline,
        fix,
    )


def _is_tensor_new(node: ast.AST) -> bool:
    """`x.new(...)` on something other than `self` (the legacy Tensor constructor)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "new"
        and not (isinstance(node.func.value, ast.Name) and node.func.value.id in ("self", "cls"))
    )


def _parents_on_line(definition: ast.AST, node: ast.AST) -> list[ast.AST]:
    """The nodes of `definition` that hold `node` directly (a call chained on it: `x.new(n).zero_()`)."""
    return [parent for parent in ast.walk(definition) if any(child is node for child in ast.iter_child_nodes(parent))]


def _new_problem(frame: Frame, headline: str, nodes: list[ast.AST]) -> Problem:
    """`scores.new(n).zero_()`, `boxes.new()`: the legacy constructor, which TorchScript does not have."""
    call = next((node for node in nodes if _is_tensor_new(node)), None)
    if call is None:
        fix = (
            "replace `x.new(...)` with `x.new_empty(size)`, `x.new_zeros(size)` or `torch.tensor(data, dtype=x.dtype)`."
        )
        return _problem("the legacy constructor `Tensor.new`", frame, headline, fix)
    receiver = ast.unparse(call.func.value)
    args = ", ".join(ast.unparse(arg) for arg in call.args)
    zeroed = any(
        isinstance(node, ast.Attribute) and node.attr == "zero_" and node.value is call
        for parent in nodes
        for node in ast.walk(parent)
    )
    if not call.args:
        rewrite, meaning = f"{receiver}.new_empty(0)", "an empty tensor of its dtype and device"
    elif len(call.args) == 1 and isinstance(call.args[0], (ast.List, ast.Tuple)):
        rewrite = f"torch.tensor({args}, dtype={receiver}.dtype, device={receiver}.device)"
        meaning = "a tensor of that data"
    elif zeroed:
        rewrite, meaning = f"{receiver}.new_zeros({args})", "zeros of its dtype and device"
    else:
        rewrite, meaning = f"{receiver}.new_empty({args})", "an uninitialized tensor of its dtype and device"
    fix = (
        f"TorchScript has no `Tensor.new`; `{ast.unparse(call)}` makes {meaning}: write "
        f"`{rewrite}`" + (" (and drop the `.zero_()`)" if zeroed and call.args else "") + "."
    )
    return _problem("the legacy constructor `Tensor.new`", frame, headline, fix)


def _tuple_returns_problem(frame: Frame, headline: str) -> Problem | None:
    """Two returns of tuples of different lengths (an early exit that returns fewer predictions)."""
    found = re.search(r"returned a value of type (Tuple\[.*\]) but this return statement returns a value of type "
                      r"(Tuple\[.*\])", headline)
    if found is None or _tuple_length(found.group(1)) == _tuple_length(found.group(2)):
        return None
    fix = (
        "TorchScript types a tuple's length, so every return must give a tuple of one length. Return a list "
        "instead, whose length may differ per exit: append each exit's prediction (`res: List[Tensor] = []`, "
        "`res.append(logits)`, or `List[Tuple[Tensor, Tensor]]` for one tuple per exit) and `return res`; the "
        "bundle returns it as PyTorch does. Or give every return the same length, with None (and an Optional "
        "annotation) where an exit has nothing."
    )
    return _problem("returns of tuples of different lengths", frame, headline, fix)


def _tuple_length(annotation: str) -> int:
    """How many elements `Tuple[...]` has: its top-level commas, plus one."""
    depth, commas = 0, 0
    for character in annotation[len("Tuple[") : -1]:
        depth += {"[": 1, "]": -1}.get(character, 0)
        commas += character == "," and depth == 0
    return commas + 1


def _loop_else_problem(frame: Frame, headline: str) -> Problem:
    fix = (
        "TorchScript has no `else` on a loop: set a flag before the loop (`found = False`), set it where the "
        "loop breaks (`found = True` before `break`), and run the else body after the loop under `if not found:`."
    )
    return _problem("an `else` on a loop", frame, headline, fix)


def _is_nonzero_tuple(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and called_name(node) == "nonzero"
        and any(
            k.arg == "as_tuple" and not (isinstance(k.value, ast.Constant) and not k.value.value) for k in node.keywords
        )
    )


def _nonzero_tuple_problem(frame: Frame, headline: str, nodes: list[ast.AST]) -> Problem:
    call = next((node for node in nodes if _is_nonzero_tuple(node)), None)
    if call is not None and isinstance(call.func, ast.Attribute) and called_name(call) == "nonzero":
        subject = ast.unparse(call.args[0]) if call.args else ast.unparse(call.func.value)
    else:
        subject = "mask"
    fix = (
        f"TorchScript's nonzero has no `as_tuple`: take the index matrix and its columns, "
        f"`nz = torch.nonzero({subject})` then `rows, cols = nz[:, 0], nz[:, 1]` (one column per dim)."
    )
    if headline.startswith("Arguments for call are not valid"):
        headline = "Arguments for call are not valid: keyword argument as_tuple unknown"
    return _problem("`nonzero(as_tuple=True)`", frame, headline, fix)


def _conditional_attribute_problem(headline: str, frame: Frame, code: UserCode, owner: type | None) -> Problem | None:
    """An attribute __init__ assigns only under a condition (`if gated: self.linear_v = ...`): on an
    instance built without it, TorchScript compiles forward's use of it and finds no attribute."""
    found = re.search(r"Module '(\w+)' has no attribute '(\w+)'", headline)
    if found is None or "exists on the Python module" in headline:
        return None
    class_name, name = found.groups()
    classes = [known for known in code.instances if known.__name__ == class_name] or ([owner] if owner else [])
    for module_class in classes:
        for klass in module_class.__mro__:
            init = vars(klass).get("__init__")
            assigned = _assigned_under_condition(init, name) if inspect.isfunction(init) else None
            if assigned is None:
                continue
            condition, where = assigned
            flag = _flag_read_around(frame) or "flag"
            fix = (
                f"`self.{name}` is set only when `{condition}` (at {where}); TorchScript compiles every line of "
                f"forward, so give it a value on every path of __init__: `else: self.{name} = nn.Identity()` (or "
                f"the same layer, unused), or declare the flag constant (`{flag}: Final[bool]` in the class body, "
                "`from typing import Final`) so that TorchScript skips the branch that reads it."
            )
            return _problem(f"the attribute `self.{name}` assigned only under a condition", frame, headline, fix)
    return None


def _assigned_under_condition(init: Callable[..., Any], name: str) -> tuple[str, str] | None:
    """(the condition, file:line) of an assignment `self.name = ...` inside an `if` of `init`, or None."""
    file = code_of(init).co_filename
    definition = enclosing_def(file, code_of(init).co_firstlineno + 1)
    for branch in ast.walk(definition) if definition is not None else ():
        if not isinstance(branch, ast.If):
            continue
        for node in ast.walk(branch):
            if isinstance(node, ast.Assign) and any(self_attribute(target) == name for target in node.targets):
                return ast.unparse(branch.test), f"{file}:{node.lineno}"
    return None


def _flag_read_around(frame: Frame) -> str | None:
    """The module flag of the innermost `if self.flag:` around the frame's line (`gated`), if any."""
    definition = enclosing_def(frame.file, frame.line)
    flag = None
    for node in ast.walk(definition) if definition is not None else ():
        if isinstance(node, ast.If) and node.lineno <= frame.line <= node.end_lineno:
            test = node.test.operand if isinstance(node.test, ast.UnaryOp) else node.test
            flag = self_attribute(test) or flag
    return flag


def _no_source_problem(code: UserCode, headline: str) -> Problem:
    """A module class whose source `inspect` cannot read: defined in `exec`, `python -c` or a REPL."""
    unreadable = []
    for module_class in code.instances:
        try:
            inspect.getsource(module_class)
        except (OSError, TypeError):
            unreadable.append(module_class.__qualname__)
    named = ", ".join(f"`{name}`" for name in unreadable) or "the model's classes"
    fix = (
        f"TorchScript compiles a module from its source text, and the source of {named} cannot be read "
        "(a class made by exec(), `python -c` or an interactive session): define it in a .py file and import it."
    )
    return Problem("the model's source code cannot be read", "", 0, "", headline, fix)


def swapped_forward_problems(code: UserCode) -> list[Problem]:
    """`self.forward = self.only_forward` in __init__ (the Shallow-Deep Networks' blocks without an
    internal classifier): TorchScript compiles the swapped method for those instances, so the same
    call in the caller's loop returns another type per block (`None` where the others return a
    tensor), and the caller fails, far from the cause."""
    problems = []
    for module_class, instances in code.instances.items():
        swapped = sorted({vars(instance)["forward"].__name__ for instance in instances if "forward" in vars(instance)})
        init = vars(module_class).get("__init__")
        if not swapped or not inspect.isfunction(init):
            continue
        file = code_of(init).co_filename
        definition = enclosing_def(file, code_of(init).co_firstlineno + 1)
        line = next(
            (
                node.lineno
                for node in (ast.walk(definition) if definition is not None else ())
                if isinstance(node, ast.Assign) and any(self_attribute(t) == "forward" for t in node.targets)
            ),
            code_of(init).co_firstlineno,
        )
        name = swapped[0]
        fix = (
            f"TorchScript compiles `{name}` as the forward of those `{module_class.__name__}` instances, so the "
            f"caller gets different types from different blocks; keep one forward and branch on a constant flag "
            f"instead: declare it `Final[bool]` in the class body (`from typing import Final`), call "
            f"`return self.{name}(x)` under `if` that flag, and give both the same return annotation, with "
            "`Optional[Tensor]` for a result that may be None (the caller then tests `is not None`)."
        )
        problems.append(
            Problem(
                f"`self.forward` replaced in __init__ of `{module_class.__name__}`",
                file,
                line,
                source_line(file, line),
                "",
                fix,
            )
        )
    return problems
