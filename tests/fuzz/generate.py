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
    negated: bool = False  # written as `not <marker>`: the probe decides the inner comparison

    def render(self) -> str:
        text = self.template.format(t=repr(self.threshold))
        return f"({text})" if self.negated and " " in text else text

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
        lines = ["import math"] if "math" in self.imports else []
        lines += ["import torch", "import torch.nn.functional as F", "from torch import nn"]
        lines += ["from typing import Dict, List, Optional, Tuple"] if self.imports - {"math"} else []
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


# Features of a program's source that the campaign's table counts, beside its constructs: (name, pattern).
_FEATURES = [
    ("softmax", r"softmax\("),
    ("reduction (max/sum/mean/norm)", r"\.(max|sum|mean|norm)\(\)"),
    ("element read h[i, j]", r"h\[0, 1\]"),
    ("and/or condition", r"^\s*(if|while) .*\b(and|or)\b(?! \w+ < )"),
    ("not condition", r"\bnot\b"),
    (".any().item()", r"\.any\(\)\.item\(\)"),
    ("host float (.item(), math, float arithmetic)", r"\.item\(\)|math\.|\bv\d+ = "),
    ("random op", r"rand_like|randn_like|bernoulli|dropout"),
    ("break", r"^\s*break$"),
    ("return inside a loop", r"^\s*return "),
    ("loop over the batch's rows", r"^\s*for \w+ in range\((x|h)\.(size\(0\)|shape\[0\])\):"),
    ("loop over a list", r"^\s*for [\w, ]+ in (?!range\()"),
    ("list pop", r"\.pop\("),
    ("list item written", r"^\s*\w+\[[^\]]+\] \+?= "),
    (
        "special function (lgamma, erfinv, hypot, histc, ...)",
        r"torch\.(lgamma|digamma|erfinv|erfc|hypot|copysign|signbit|xlogy|asinh|isfinite|histc)\(|log_ndtr|index_reduce\(",
    ),
]


def source_features(program: Program) -> list[str]:
    """The features of `program`'s forward, each also as "<feature> in a loop" where it lies in a loop
    body (what makes a carried value of it), plus "nested loops", "dynamic batch" and its scalar inputs."""
    import re

    found: set[str] = set()
    loops: list[int] = []  # indents of the enclosing `for`/`while` headers
    depth = 0
    for line in program.body:
        line = re.sub(r"__C(\d+)__", lambda m: program.conditions[int(m.group(1))].render(), line)
        indent = len(line) - len(line.lstrip())
        while loops and indent <= loops[-1]:
            loops.pop()
        for name, pattern in _FEATURES:
            if re.search(pattern, line):
                in_loop = bool(loops)
                if name == "return inside a loop":
                    if not in_loop:
                        continue
                    found.add(name + (" (nested loops)" if len(loops) > 1 else ""))
                    continue
                found.add(name)
                if in_loop:
                    found.add(f"{name} in a loop")
        if re.match(r"\s*(for|while) ", line):
            loops.append(indent)
            depth = max(depth, len(loops))
    if depth > 1:
        found.add("nested loops")
    if program.dynamic_batch:
        found.add("dynamic batch")
    scalars = (("n", "int"), ("s", "float"), ("flag", "bool"))
    found.update(f"input {name}: {kind}" for name, kind in scalars if name in program.inputs)
    return sorted(found)


class Builder:
    """What a construct writes into: forward's lines at the current indent, __init__'s lines, conditions."""

    def __init__(
        self,
        rng: random.Random,
        features: int,
        inputs: list[str],
        budget: int,
        structured: random.Random | None = None,
        idioms: random.Random | None = None,
        functions: random.Random | None = None,
        edits: random.Random | None = None,
    ) -> None:
        self.rng = rng
        # The second stream: structured values and data-dependent sizes (`constructs.maybe_structured`).
        self.structured = structured or random.Random(0)
        # The third stream: loops over the batch's rows and over grown lists (`idioms.maybe_idiom`).
        # Those draw names, layers and conditions of their own, so that a program of an earlier seed
        # keeps every name, weight and condition it had; it only gains the idioms' lines.
        self.idioms = idioms or random.Random(0)
        self.idioms_on = self.idioms.random() < 0.5
        # The fourth stream: element-wise functions on the running tensor (`functions.maybe_function`).
        self.functions = functions or random.Random(0)
        self.functions_on = self.functions.random() < 0.4
        # The fifth stream: lists edited in place, `pop`, `xs[i] = v`, `[0] * n` (`list_edits.maybe_edit`).
        self.edits = edits or random.Random(0)
        self.edits_on = self.edits.random() < 0.4
        self.late_init: list[str] = []  # the idioms' layers, made after the others' (same weights)
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
        self._idiom_names = 0
        self._edit_names = 0

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

    def fresh_idiom(self, prefix: str) -> str:
        """A name for an idiom's variable, counted apart from `fresh` (which the other streams use)."""
        self._idiom_names += 1
        return f"{prefix}_{self._idiom_names}"

    def fresh_edit(self, prefix: str) -> str:
        """A name for a list edit's variable (`list_edits`), counted apart from the other streams'."""
        self._edit_names += 1
        return f"{prefix}_e{self._edit_names}"

    def late_layer(self, declaration: str) -> str:
        """An idiom's submodule: `layer`, but made after every other one, so that theirs keep their weights."""
        name = self.fresh_idiom("row_layer")
        self.late_init.append(f"self.{name} = {declaration}")
        return f"self.{name}"

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
        """A new decision on the running tensor or a scalar input; returns its marker for the source.

        Sometimes two decisions joined by `and` / `or`, or one negated with `not`, as real code writes
        them; a condition inside `while` is always a bool (the loop adds `and j < cap`)."""
        roll = self.rng.random()
        if roll < 0.2:
            joiner = self.rng.choice([" and ", " or "])
            return "(" + self._one_condition(True) + joiner + self._one_condition(True) + ")"
        if roll < 0.3:
            return self._one_condition(True, negate=True)
        return self._one_condition(in_while)

    def _one_condition(self, want_bool: bool, negate: bool = False) -> str:
        # (template, calibration value, op, kind, is a bool in TorchScript)
        forms = [
            ("h.sum() > {t}", "float(h.sum())", ">", "float", False),
            ("bool(h.mean() < {t})", "float(h.mean())", "<", "float", True),
            ("float(h.max()) > {t}", "float(h.max())", ">", "float", True),
            ("float(h.sum()) < {t}", "float(h.sum())", "<", "float", True),
            ("bool(h.norm() > {t})", "float(h.norm())", ">", "float", True),
            ("int(h.argmax()) > {t}", "int(h.argmax())", ">", "int", True),
            # reductions, element reads and softmax of the running (in a loop: carried) tensor
            ("float(h.abs().sum()) > {t}", "float(h.abs().sum())", ">", "float", True),
            ("float(h[0, 1]) > {t}", "float(h[0, 1])", ">", "float", True),
            ("float(torch.softmax(h, 1).max()) > {t}", "float(torch.softmax(h, 1).max())", ">", "float", True),
            # host floats: `.item()`, `math` functions
            ("float(h.mean().item()) < {t}", "float(h.mean().item())", "<", "float", True),
            ("math.exp(-float(h.abs().mean())) > {t}", "math.exp(-float(h.abs().mean()))", ">", "float", True),
            ("math.sqrt(float(h.abs().mean())) > {t}", "math.sqrt(float(h.abs().mean()))", ">", "float", True),
            # ACT's halting test: `.any().item()` of a comparison (decides like the max)
            ("(h > {t}).any().item()", "float(h.max())", ">", "float", True),
        ]
        if "n" in self.inputs:
            forms.append(("n > {t}", "n", ">", "int", True))
        if "s" in self.inputs:
            forms.append(("s < {t}", "s", "<", "float", True))
            forms.append(("s * 2.0 + 0.5 < {t}", "s * 2.0 + 0.5", "<", "float", True))
        if "flag" in self.inputs and not want_bool:
            forms.append(("flag", "flag", "", "bool", True))
        if want_bool or negate:
            forms = [form for form in forms if form[4]]
        template, value, op, kind, _ = self.rng.choice(forms)
        if "math." in template:
            self.imports.add("math")
        self.conditions.append(Condition(template, value, op, kind, 0.0 if kind == "float" else 0, negate))
        marker = f"__C{len(self.conditions) - 1}__"
        return f"not {marker}" if negate else marker

    def block(self, depth: int) -> None:
        """A body: one to three statements or constructs, nested constructs only while `depth` allows."""
        from .constructs import maybe_structured, pick_construct, simple_statement
        from .functions import maybe_function
        from .idioms import maybe_idiom
        from .list_edits import maybe_edit

        for _ in range(self.rng.randint(1, 3)):
            maybe_structured(self)
            maybe_idiom(self)
            maybe_function(self)
            maybe_edit(self)
            if depth > 0 and self.budget > 0 and self.rng.random() < 0.35:
                self.budget -= 1
                construct = pick_construct(self)
                self.constructs.append(construct.__name__)
                construct(self, depth - 1)
            else:
                simple_statement(self)


def generate(seed: int) -> Program:
    """A random program from `seed` (conditions not yet calibrated)."""
    from .constructs import maybe_structured, pick_construct
    from .idioms import maybe_idiom
    from .list_edits import maybe_edit

    rng = random.Random(seed)
    features = rng.choice([4, 6, 8])
    inputs = ["x"]
    for name, chance in (("n", 0.6), ("k", 0.25), ("s", 0.3), ("flag", 0.2)):
        if rng.random() < chance:
            inputs.append(name)
    streams = {
        "structured": random.Random(f"structured {seed}"),
        "idioms": random.Random(f"idioms {seed}"),
        "functions": random.Random(f"functions {seed}"),
        "edits": random.Random(f"edits {seed}"),
    }
    builder = Builder(rng, features, inputs, budget=rng.randint(2, 5), **streams)
    builder.emit("h = x")
    top = rng.randint(1, 3)
    for _ in range(top):
        maybe_structured(builder)
        maybe_idiom(builder)
        maybe_edit(builder)
        construct = pick_construct(builder)
        builder.constructs.append(construct.__name__)
        construct(builder, 2)
    body = builder.body[:1] + builder.prologue + builder.body[1:]
    dynamic = rng.random() < 0.4
    return Program(
        seed=seed,
        features=features,
        batch=rng.randint(2, 3) if dynamic else rng.randint(1, 3),  # torch.export specializes a size-1 dim
        dynamic_batch=dynamic,
        inputs=inputs,
        body=body,
        init=builder.init + builder.late_init,
        conditions=builder.conditions,
        outputs=builder.outputs,
        constructs=builder.constructs,
        imports=builder.imports,
    )
