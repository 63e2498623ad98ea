"""Loops that real programs write around a dynamic size: over the batch's rows, and over a grown list.

`per_row_loop` works on each row of the running tensor in turn (`for t in range(x.size(0)): r = h[t]
...; rows.append(r)`) and puts the rows back together with `torch.stack` or `torch.cat` (or sums
them with a loop over the list): a trip count only the input's shape decides. `loop_over_list`
iterates over a list that grew at run time (`for o in outs: total = total + o`), the list being its
own `outs`, appended where the construct stands (in a loop: once per pass), or one another construct
grows (`ts`, `li`, `preds`, `pieces`). `group_aggregate` groups the rows by their values and
aggregates each group by indexed writes into zeros (or over the groups `torch.unique` finds), as
graph networks and mixtures of experts do.

They are drawn from the builder's third random stream (`Builder.idioms`) between the other
constructs, with names (`Builder.fresh_idiom`), layers (`Builder.late_layer`, made after all the
others) and row conditions of their own, so that a program of an earlier seed keeps its constructs,
names, weights and conditions and only gains the idioms' lines. Half the seeds get none.
"""

from __future__ import annotations

from typing import Callable

from .generate import Builder, Condition

Idiom = Callable[[Builder, int], None]
IDIOMS: list[tuple[Idiom, float]] = []


def idiom(weight: float) -> Callable[[Idiom], Idiom]:
    def register(function: Idiom) -> Idiom:
        IDIOMS.append((function, weight))
        return function

    return register


def maybe_idiom(b: Builder) -> None:
    """In half the programs, now and then, one of the idioms below, chosen by the third stream."""
    if b.idioms_on and b.idioms.random() < 0.3:
        function = b.idioms.choices([f for f, _ in IDIOMS], weights=[w for _, w in IDIOMS])[0]
        b.constructs.append(function.__name__)
        function(b, 0)


def _condition_on(b: Builder, value: str) -> str:
    """A decision on a 1-D tensor `value` (a row, an element of a list); returns its marker."""
    forms = [
        (f"float({value}.sum()) > {{t}}", f"float({value}.sum())", ">", "float"),
        (f"float({value}.max()) > {{t}}", f"float({value}.max())", ">", "float"),
        (f"bool({value}.mean() < {{t}})", f"float({value}.mean())", "<", "float"),
        (f"int({value}.argmax()) > {{t}}", f"int({value}.argmax())", ">", "int"),
    ]
    template, probed, op, kind = b.idioms.choice(forms)
    b.conditions.append(Condition(template, probed, op, kind, 0.0 if kind == "float" else 0))
    return f"__C{len(b.conditions) - 1}__"


def _row_statement(b: Builder, row: str, index: str) -> str:
    """One statement on a row (a 1-D tensor of `features` values) that keeps its shape."""
    f = b.features
    forms: list[Callable[[], str]] = [
        lambda: f"{row} = torch.tanh({row})",
        lambda: f"{row} = {row} * 0.5 + {row}.mean()",
        lambda: f"{row} = torch.softmax({row}, 0) * 2.0 - 0.5",
        lambda: f"{row} = {row} - {row}.max() * 0.5",
        lambda: f"{row} = torch.where({row} > 0.0, {row}, {row} * 0.1)",
        lambda: f"{row} = {row} + float({index}) * 0.1",  # the row's position as a value
        lambda: f"{row} = {b.late_layer(f'nn.Linear({f}, {f})')}({row})",
    ]
    return b.idioms.choice(forms)()


@idiom(1.0)
def per_row_loop(b: Builder, depth: int) -> None:
    """`for t in range(x.size(0))` over the rows of the running tensor, each row worked on (sometimes
    through a decision on the row, sometimes as a scan that carries the previous row), collected in a
    list and stacked or concatenated back to [batch, features], or summed by a loop over the list."""
    r = b.idioms
    b.imports.add("typing")
    rows, index, row = b.fresh_idiom("rows"), b.fresh_idiom("t"), b.fresh_idiom("r")
    previous = b.fresh_idiom("prev") if r.random() < 0.3 else None
    b.emit(f"{rows}: List[torch.Tensor] = []")
    if previous:
        b.emit(f"{previous} = torch.zeros_like(h[0])")
    b.emit(f"for {index} in range({r.choice(['x.size(0)', 'h.size(0)', 'h.shape[0]'])}):")
    with b.loop():
        b.emit(f"{row} = h[{index}]" + (f" + {previous} * 0.5" if previous else ""))
        for _ in range(r.randint(1, 2)):
            b.emit(_row_statement(b, row, index))
        if r.random() < 0.4:
            b.emit(f"if {_condition_on(b, row)}:")
            with b.indent():
                b.emit(_row_statement(b, row, index))
            if r.random() < 0.5:
                b.emit("else:")
                with b.indent():
                    b.emit(_row_statement(b, row, index))
        if previous:
            b.emit(f"{previous} = {row}")
        # what each row is appended as, and how the rows come back together
        form = r.choice(["stack", "stack mixed", "cat unsqueezed", "cat viewed", "sum"])
        appended = {"cat unsqueezed": f"{row}.unsqueeze(0)", "cat viewed": f"{row}.view(1, -1)"}.get(form, row)
        b.emit(f"{rows}.append({appended})")
    if form == "stack":
        b.emit(f"h = torch.stack({rows})")
    elif form == "stack mixed":
        b.emit(f"h = torch.stack({rows}, 0) * 0.5 + h * 0.5")
    elif form == "cat unsqueezed":
        b.emit(f"h = torch.cat({rows}, 0)")
    elif form == "cat viewed":
        b.emit(f"h = torch.cat({rows})")
    else:  # the list of rows read by a loop over it: a [features] total added to every row
        total, item = b.fresh_idiom("total"), b.fresh_idiom("o")
        b.emit(f"{total} = torch.zeros_like(h[0])")
        b.emit(f"for {item} in {rows}:")
        with b.loop():
            b.emit(f"{total} = {total} + {item}")
        b.emit(f"h = h + {total} * 0.1")


@idiom(1.0)
def loop_over_list(b: Builder, depth: int) -> None:
    """A `for` over a list that grew at run time: its own `outs` (appended here, then iterated, or
    only one of the two, so that the list grows in one place and is read in another), or a list
    another construct grows. The loop sums its elements, sometimes through a decision on each
    element, an `enumerate`, or a `break` out of the list."""
    r = b.idioms
    b.imports.add("typing")
    grown = [name for name in ("ts", "li", "preds", "pieces") if name in b.declared]
    other = r.random() < 0.4 and grown
    choice = r.choice(grown) if other else "outs"
    if choice == "outs":
        if "outs" not in b.declared:
            b.declared.add("outs")
            b.prologue.append("outs: List[torch.Tensor] = []")
            mode = "both"
        else:
            mode = r.choice(["append", "iterate", "both"])
        if mode in ("append", "both"):
            expression = r.choice(["h * 0.5", "torch.tanh(h)", "torch.softmax(h, 1)", "h - h.mean()"])
            b.emit(f"outs.append({expression})")
        if mode == "append":
            return
    total = b.fresh_idiom("total")
    if choice == "li":  # a List[int]: the tokens of a decoder
        item = b.fresh_idiom("v")
        b.emit(f"{total} = 0")
        b.emit(f"for {item} in li:")
        with b.loop():
            b.emit(f"{total} += {item}")
        b.emit(f"h = h + float({total}) * 0.01")
        return
    b.emit(f"{total} = {'torch.zeros_like(h[:, :1])' if choice == 'pieces' else 'torch.zeros_like(h)'}")
    if choice == "preds":  # a list of (prediction, confidence) tuples
        prediction, confidence = b.fresh_idiom("p"), b.fresh_idiom("c")
        b.emit(f"for {prediction}, {confidence} in preds:")
        with b.loop():
            b.emit(f"{total} = {total} + {prediction} * {confidence}.unsqueeze(1)")
        b.emit(f"h = h + {total} * 0.1")
        return
    item = b.fresh_idiom("o")
    position = b.fresh_idiom("e") if r.random() < 0.3 else None
    header = f"for {position}, {item} in enumerate({choice}):" if position else f"for {item} in {choice}:"
    b.emit(header)
    with b.loop():
        term = f"{item}.sum(1, keepdim=True)" if choice == "pieces" else item
        if position:
            term = f"{term} * float({position} + 1)"
        roll = r.random()
        if roll < 0.25:
            b.emit(f"if {_condition_on(b, item)}:")
            with b.indent():
                b.emit(f"{total} = {total} + {term}")
        else:
            b.emit(f"{total} = {total} + {term}")
        if 0.25 <= roll < 0.4:
            b.emit(f"if {_condition_on(b, item)}:")
            with b.indent():
                b.emit("break")
    scale = r.choice(["0.1", "0.5"])
    b.emit(f"h = h + {total} * {scale}")


@idiom(0.6)
def group_aggregate(b: Builder, depth: int) -> None:
    """The rows grouped by their values (each row's group an argmax over its first features) and
    aggregated per group as graph networks and mixtures of experts write it: the groups' sums by
    `index_add` or `scatter_add` into zeros, sometimes their sizes by `bincount` or by a second
    `index_add` into zeros of the same shape (one tensor to IREE), then each row given its group's
    sum (or mean) back by indexing. Or, a quarter of the time, only the groups present, found by
    `torch.unique` with each row's place among them and their sizes."""
    r = b.idioms
    groups = r.choice([2, 3])
    group, sums, sizes = b.fresh_idiom("g"), b.fresh_idiom("sums"), b.fresh_idiom("sizes")
    b.emit(f"{group} = h[:, :{groups}].argmax(1)")
    if r.random() < 0.25:
        present, place = b.fresh_idiom("present"), b.fresh_idiom("place")
        b.emit(f"{present}, {place}, {sizes} = torch.unique({group}, return_inverse=True, return_counts=True)")
        b.emit(f"{sums} = h.new_zeros({present}.size(0), h.size(1)).index_add(0, {place}, h)")
        b.emit(f"h = h + ({sums} / {sizes}.unsqueeze(1).to(h.dtype))[{place}] * 0.1")
        return
    if r.random() < 0.5:
        b.emit(f"{sums} = h.new_zeros({groups}, h.size(1)).index_add(0, {group}, h)")
    else:
        b.emit(f"{sums} = h.new_zeros({groups}, h.size(1)).scatter_add(0, {group}.unsqueeze(1).expand_as(h), h)")
    form = r.choice(["bincount", "index_add", "none"])
    if form == "bincount":
        b.emit(f"{sizes} = torch.bincount({group}, minlength={groups}).to(h.dtype)")
    elif form == "index_add":
        b.emit(f"{sizes} = h.new_zeros({groups}, h.size(1)).index_add(0, {group}, torch.ones_like(h))[:, 0]")
    if form != "none":
        b.emit(f"{sums} = {sums} / {sizes}.clamp(min=1.0).unsqueeze(1)")
    b.emit(f"h = h + {sums}[{group}] * 0.1")
