"""Generate a random scriptable dynamic program from a seed.

A program is a `torch.nn.Module` subclass named `Program`, written as Python source, plus what is
needed to call it: its inputs (a float tensor `x` of shape [batch, features], and optionally an int
loop cap `n`, an int index `k`, a float `s` and a bool `flag`) and whether its batch dim is dynamic.
The running tensor is `h` (same shape as `x`); constructs read and rewrite it, and may add outputs
(a counter, a list, a growing tensor).

Every decision is a `Condition` whose threshold is left open (`__C0__` in the source) until
`calibrate.calibrate` measures the values the condition sees and picks their median.

Example:
    >>> program = generate(3)
    >>> "class Program(nn.Module)" in program.render()
    True
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

INDENT = "    "


@dataclass
class Condition:
    """A decision: `template` with `{t}` for the threshold; `value` evaluates to a number in eager mode."""

    template: str
    value: str
    op: str
    kind: str  # "float", "int" or "bool" (a bool input: nothing to calibrate)
    threshold: float | int = 0

    def render(self) -> str:
        return self.template.format(t=repr(self.threshold))

    def probe(self, index: int) -> str:
        """The eager-mode form that records the value and decides with the current threshold."""
        if self.kind == "bool":
            return self.render()
        return f"self._probe({index}, {self.value}, {self.op!r})"


@dataclass
class Program:
    seed: int
    features: int
    batch: int
    dynamic_batch: bool
    inputs: list[str]  # names in forward order: "x", then any of "n", "k", "s", "flag"
    body: list[str]  # forward's lines, conditions as __C<i>__
    init: list[str]  # __init__'s lines after super().__init__()
    conditions: list[Condition]
    outputs: list[str]
    constructs: list[str]
    imports: set[str] = field(default_factory=set)

    def render(self, probe: bool = False) -> str:
        """The program's source; `probe=True` gives the calibration form of every condition."""
        signature = {"x": "x: torch.Tensor", "n": "n: int", "k": "k: int", "s": "s: float", "flag": "flag: bool"}
        lines = ["import torch", "import torch.nn.functional as F", "from torch import nn"]
        lines += ["from typing import Dict, List"] if self.imports else []
        lines += ["", "", "class Program(nn.Module):", f"{INDENT}def __init__(self) -> None:"]
        lines += [f"{INDENT * 2}super().__init__()"] + [f"{INDENT * 2}{line}" for line in self.init]
        lines += ["", f"{INDENT}def forward(self, {', '.join(signature[name] for name in self.inputs)}):"]
        returned = ", ".join(self.outputs)
        for line in self.body:
            line = line.replace("__RETURN__", returned)
            for index, condition in enumerate(self.conditions):
                marker = f"__C{index}__"
                if marker in line:
                    line = line.replace(marker, condition.probe(index) if probe else condition.render())
            lines.append(INDENT * 2 + line)
        lines.append(f"{INDENT * 2}return {returned}")
        return "\n".join(lines) + "\n"


class Builder:
    """What a construct writes into: forward's lines at the current indent, __init__'s lines, conditions."""

    def __init__(self, rng: random.Random, features: int, inputs: list[str], budget: int) -> None:
        self.rng = rng
        self.features = features
        self.inputs = inputs
        self.body: list[str] = []
        self.init: list[str] = []
        self.prologue: list[str] = []  # declarations before the first construct (a counter, a list)
        self.conditions: list[Condition] = []
        self.outputs: list[str] = ["h"]
        self.constructs: list[str] = []
        self.imports: set[str] = set()
        self.declared: set[str] = set()
        self.level = 0
        self.loop_depth = 0
        self.budget = budget
        self._names = 0

    def emit(self, line: str) -> None:
        self.body.append(INDENT * self.level + line)

    @contextmanager
    def indent(self) -> Iterator[None]:
        self.level += 1
        yield
        self.level -= 1

    @contextmanager
    def loop(self) -> Iterator[None]:
        self.loop_depth += 1
        with self.indent():
            yield
        self.loop_depth -= 1

    def fresh(self, prefix: str) -> str:
        self._names += 1
        return f"{prefix}{self._names}"

    def layer(self, declaration: str) -> str:
        """A submodule attribute built by `declaration`; returns `self.<name>`."""
        name = self.fresh("layer")
        self.init.append(f"self.{name} = {declaration}")
        return f"self.{name}"

    def declare(self, name: str, line: str, output: bool = True) -> None:
        """A variable initialized once before the program's constructs (and returned, if `output`)."""
        if name not in self.declared:
            self.declared.add(name)
            self.prologue.append(line)
            if output:
                self.outputs.append(name)

    def condition(self, in_while: bool = False) -> str:
        """A new decision on the running tensor or a scalar input; returns its marker for the source."""
        forms = [
            ("h.sum() > {t}", "float(h.sum())", ">", "float"),
            ("bool(h.mean() < {t})", "float(h.mean())", "<", "float"),
            ("float(h.max()) > {t}", "float(h.max())", ">", "float"),
            ("float(h.sum()) < {t}", "float(h.sum())", "<", "float"),
            ("bool(h.norm() > {t})", "float(h.norm())", ">", "float"),
            ("int(h.argmax()) > {t}", "int(h.argmax())", ">", "int"),
        ]
        if in_while:  # `while` needs a bool, not a tensor
            forms[0] = ("bool(h.sum() > {t})", "float(h.sum())", ">", "float")
        if "n" in self.inputs:
            forms.append(("n > {t}", "n", ">", "int"))
        if "s" in self.inputs:
            forms.append(("s < {t}", "s", "<", "float"))
        if "flag" in self.inputs and not in_while:
            forms.append(("flag", "flag", "", "bool"))
        template, value, op, kind = self.rng.choice(forms)
        self.conditions.append(Condition(template, value, op, kind, 0.0 if kind == "float" else 0))
        return f"__C{len(self.conditions) - 1}__"

    def block(self, depth: int) -> None:
        """A body: one to three statements or constructs, nested constructs only while `depth` allows."""
        from .constructs import pick_construct, simple_statement

        for _ in range(self.rng.randint(1, 3)):
            if depth > 0 and self.budget > 0 and self.rng.random() < 0.35:
                self.budget -= 1
                construct = pick_construct(self)
                self.constructs.append(construct.__name__)
                construct(self, depth - 1)
            else:
                simple_statement(self)


def generate(seed: int) -> Program:
    """A random program from `seed` (conditions not yet calibrated)."""
    from .constructs import pick_construct

    rng = random.Random(seed)
    features = rng.choice([4, 6, 8])
    inputs = ["x"]
    for name, chance in (("n", 0.6), ("k", 0.25), ("s", 0.3), ("flag", 0.2)):
        if rng.random() < chance:
            inputs.append(name)
    builder = Builder(rng, features, inputs, budget=rng.randint(2, 5))
    builder.emit("h = x")
    top = rng.randint(1, 3)
    for _ in range(top):
        construct = pick_construct(builder)
        builder.constructs.append(construct.__name__)
        construct(builder, 2)
    body = builder.body[:1] + builder.prologue + builder.body[1:]
    dynamic = rng.random() < 0.25
    return Program(
        seed=seed,
        features=features,
        batch=rng.randint(2, 3) if dynamic else rng.randint(1, 3),  # torch.export specializes a size-1 dim
        dynamic_batch=dynamic,
        inputs=inputs,
        body=body,
        init=builder.init,
        conditions=builder.conditions,
        outputs=builder.outputs,
        constructs=builder.constructs,
        imports=builder.imports,
    )
