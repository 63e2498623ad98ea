"""Lists edited in place as real programs edit them: a window of the last states that pops its
oldest (`history.pop(0)`), a work queue (`while len(queue) > 0: t = queue.pop(0)`), slots written at
an index the data or a counter chooses (`slots[i] = h`, a stacked RNN's `states[layer] = ...`),
per-row counts that start as `[0] * x.size(0)` (`counts[t] += 1`), and a decoder's last token taken
back (`li.pop()`).

Drawn from the builder's fifth random stream (`Builder.edits`), in 40% of the programs, with names
(`Builder.fresh_edit`) and conditions of their own, so that a program of an earlier seed keeps every construct, name,
weight and condition it had and only gains these lines.
"""

from __future__ import annotations

import random
from typing import Callable

from .generate import Builder, Condition

Edit = Callable[[Builder], None]


def maybe_edit(b: Builder) -> None:
    """In 40% of the programs, now and then, one of the edits below, chosen by the fifth stream."""
    if not (b.edits_on and b.edits.random() < 0.25):
        return
    choices: list[tuple[Edit, float]] = [(window, 1.0), (work_queue, 0.6), (slots, 1.0), (row_counts, 0.8)]
    if "li" in b.declared:
        choices.append((take_back, 1.0))
    function = b.edits.choices([f for f, _ in choices], weights=[w for _, w in choices])[0]
    b.constructs.append(function.__name__)
    function(b)


def _condition(b: Builder, value: str, r: random.Random) -> str:
    """A decision on the tensor `value`; returns its marker."""
    forms = [
        (f"float({value}.sum()) > {{t}}", f"float({value}.sum())", ">", "float"),
        (f"float({value}.max()) > {{t}}", f"float({value}.max())", ">", "float"),
        (f"bool({value}.mean() < {{t}})", f"float({value}.mean())", "<", "float"),
    ]
    template, probed, op, kind = r.choice(forms)
    b.conditions.append(Condition(template, probed, op, kind, 0.0))
    return f"__C{len(b.conditions) - 1}__"


def window(b: Builder) -> None:
    """The running tensor kept in a window of the last 2 or 3, read back as their mean or an end."""
    r = b.edits
    b.imports.add("typing")
    history = b.fresh_edit("history")
    b.declare(history, f"{history}: List[torch.Tensor] = []", output=r.random() < 0.5)
    b.emit(f"{history}.append(h)")
    b.emit(f"if len({history}) > {r.choice([2, 3])}:")
    with b.indent():
        b.emit(f"{history}.pop(0)")
    b.emit(r.choice([f"h = torch.stack({history}).mean(0)", f"h = h * 0.5 + {history}[0] * 0.5",
                     f"h = h + {history}[-1] * 0.1"]))  # fmt: skip


def work_queue(b: Builder) -> None:
    """States split while a decision holds, breadth first, at most 6 steps; the finished ones averaged in."""
    r = b.edits
    b.imports.add("typing")
    queue, done, steps, item = (b.fresh_edit(name) for name in ("queue", "done", "steps", "q"))
    b.emit(f"{queue}: List[torch.Tensor] = [h]")
    b.emit(f"{done}: List[torch.Tensor] = []")
    b.emit(f"{steps} = 0")
    b.emit(f"while len({queue}) > 0 and {steps} < {r.choice([4, 6])}:")
    with b.loop():
        b.emit(f"{item} = {queue}.pop(0)")
        b.emit(f"{steps} += 1")
        b.emit(f"if {_condition(b, item, r)}:")
        with b.indent():
            b.emit(f"{queue}.append({item} * 0.5)")
            b.emit(f"{queue}.append(torch.tanh({item}))")
        b.emit("else:")
        with b.indent():
            b.emit(f"{done}.append({item})")
    b.emit(f"if len({done}) > 0:")
    with b.indent():
        b.emit(f"h = h * 0.5 + torch.stack({done}).mean(0) * 0.5")


def slots(b: Builder) -> None:
    """A fixed number of slots, one written at an index known at export, from an input or from the
    data, and one read back."""
    r = b.edits
    name, count = b.fresh_edit("slots"), r.choice([2, 3])
    b.declare(name, f"{name} = [{', '.join(['x * 0.0'] * count)}]", output=True)
    indices = [str(r.randrange(count)), f"int(h.argmax()) % {count}"]
    indices += [f"n % {count}"] if "n" in b.inputs else []
    indices += [f"abs(k) % {count}"] if "k" in b.inputs else []
    b.emit(f"{name}[{r.choice(indices)}] = {r.choice(['h * 0.5', 'torch.tanh(h)', 'h - h.mean()'])}")
    b.emit(f"h = h + {name}[{r.randrange(count)}] * 0.1")


def row_counts(b: Builder) -> None:
    """Per-row counts that start as `[0] * x.size(0)`, counted up where a row passes a decision."""
    b.imports.add("typing")
    counts, row = b.fresh_edit("counts"), b.fresh_edit("t")
    b.declare(counts, f"{counts}: List[int] = [0] * x.size(0)", output=True)
    b.emit(f"for {row} in range(h.size(0)):")
    with b.loop():
        b.emit(f"if {_condition(b, f'h[{row}]', b.edits)}:")
        with b.indent():
            b.emit(f"{counts}[{row}] += 1")


def take_back(b: Builder) -> None:
    """The decoder's last token taken back where a decision holds, its value added to the state."""
    b.emit(f"if len(li) > 1 and {_condition(b, 'h', b.edits)}:")
    with b.indent():
        b.emit("h = h + float(li.pop()) * 0.01")
