"""The constructs a fuzzed program is made of: one function each, same shape, registered by `@construct`.

A construct takes the `Builder` and how deep it may still nest, and writes lines through it (it may
declare a submodule, a condition, a variable that becomes an output). Adding a construct is adding a
function here. `simple_statement` is the straight-line filler between them; its entries are one line
each and keep the running tensor `h` at shape [batch, features].
"""

from __future__ import annotations

from typing import Callable

from .generate import Builder

Construct = Callable[[Builder, int], None]
CONSTRUCTS: list[tuple[Construct, float, Callable[[Builder], bool]]] = []


def construct(weight: float, when: Callable[[Builder], bool] = lambda b: True) -> Callable[[Construct], Construct]:
    def register(function: Construct) -> Construct:
        CONSTRUCTS.append((function, weight, when))
        return function

    return register


def pick_construct(b: Builder) -> Construct:
    choices = [(function, weight) for function, weight, when in CONSTRUCTS if when(b)]
    return b.rng.choices([c for c, _ in choices], weights=[w for _, w in choices])[0]


def simple_statement(b: Builder) -> None:
    """One straight-line statement on `h` (or on a variable another construct declared)."""
    f = b.features
    statements: list[Callable[[], str]] = [
        lambda: "h = torch.tanh(h)",
        lambda: "h = torch.relu(h) - 0.25",
        lambda: "h = h * 0.75 + 0.125",
        lambda: "h = torch.sigmoid(h) * 2.0 - 1.0",
        lambda: "h = torch.abs(h) - 0.5",
        lambda: "h = h - h.mean()",
        lambda: "h = torch.clamp(h, -1.0, 1.0) + h * 0.5",
        lambda: f"h = {b.layer(f'nn.Linear({f}, {f})')}(h)",
        lambda: "h = h + h.argmax(1, keepdim=True).to(h.dtype) * 0.1",
        # reductions, softmax and element reads of the running tensor (carried, inside a loop)
        lambda: "h = torch.softmax(h, 1) * 2.0 - 0.5",
        lambda: "h = h - h.max() * 0.5",
        lambda: "h = h / (h.abs().sum() + 1.0) * 4.0",
        lambda: "h = h + h[0, 1] * 0.25",
        lambda: "h = h * torch.softmax(h, -1).max()",
        lambda: "h = F.log_softmax(h, 1) * 0.5",
    ]
    if "n" in b.inputs:
        statements.append(lambda: "h = h + float(n) * 0.1")
    if "s" in b.inputs:
        statements.append(lambda: "h = h * 0.5 + s")
        statements.append(lambda: "h = h + min(s * s, 2.0) - s * 0.5")
    if "c" in b.declared:
        statements += [lambda: "c += 1", lambda: "h = h + torch.tensor(float(c)) * 0.01"]
    if "li" in b.declared:
        statements.append(lambda: "li.append(int(h.argmax()))")
    if "ts" in b.declared:
        statements.append(lambda: "ts.append(h * 0.5)")
    if "acc" in b.declared:
        statements.append(lambda: "acc = torch.cat([acc, h], 0)")
    b.emit(b.rng.choice(statements)())


# --- straight-line constructs that add state or reach for a specific op ---------------------------


@construct(1.0)
def counter(b: Builder, depth: int) -> None:
    """An int counter, incremented where the construct stands (and by later statements), returned."""
    b.declare("c", "c = 0")
    b.emit("c += 1")


@construct(1.0)
def list_of_ints(b: Builder, depth: int) -> None:
    """A `List[int]` that grows at run time (a decoder's tokens), returned."""
    b.imports.add("typing")
    b.declare("li", "li: List[int] = []")
    b.emit("li.append(int(h.argmax()))")


@construct(0.7)
def list_of_tensors(b: Builder, depth: int) -> None:
    """A `List[torch.Tensor]` that grows at run time, concatenated into an output."""
    b.imports.add("typing")
    if "ts" not in b.declared:
        b.declared.add("ts")
        b.prologue.append("ts: List[torch.Tensor] = []")
        b.outputs.append("torch.cat(ts + [h], 0)")
    b.emit("ts.append(h * 0.5)")


@construct(1.0)
def growing_tensor(b: Builder, depth: int) -> None:
    """A tensor concatenated to along dim 0, so its first dim differs between paths and iterations."""
    b.declare("acc", "acc = h")
    b.emit("acc = torch.cat([acc, h], 0)")


@construct(0.8, lambda b: "k" in b.inputs)
def index_by_input(b: Builder, depth: int) -> None:
    """An int input used as an index: PyTorch raises IndexError when it is out of range."""
    f = b.features
    forms = [
        lambda: "h = h + h[:, k].unsqueeze(1)",
        lambda: "h = h * h[0, k]",
        lambda: "h = h + torch.index_select(h, 1, torch.tensor([k]))",
        lambda: "h = h + torch.gather(h, 1, torch.zeros_like(h, dtype=torch.long) + k)",
        lambda: f"h = h + {b.layer(f'nn.Embedding({f}, {f})')}(torch.tensor([k]))",
        lambda: "h = h + h.select(1, k).unsqueeze(1)",
    ]
    b.emit(b.rng.choice(forms)())


@construct(0.6)
def pooled_view(b: Builder, depth: int) -> None:
    """A pooling whose result is viewed back to [batch, features] (a view after pooling)."""
    forms = [
        "h = F.avg_pool1d(h.unsqueeze(1), 2).view(h.size(0), -1).repeat(1, 2)",
        "h = F.max_pool1d(h.unsqueeze(1), 2).view(h.size(0), -1).repeat(1, 2)",
        "h = F.adaptive_avg_pool1d(h.unsqueeze(1), 1).view(-1, 1) + h",
    ]
    b.emit(b.rng.choice(forms))


@construct(0.5)
def recurrent(b: Builder, depth: int) -> None:
    """An nn.GRU or nn.LSTM over the batch rows as a sequence."""
    f = b.features
    if b.rng.random() < 0.5:
        b.emit(f"h = {b.layer(f'nn.GRU({f}, {f}, batch_first=True)')}(h.unsqueeze(0))[0].squeeze(0)")
    else:
        b.emit(f"h = {b.layer(f'nn.LSTM({f}, {f})')}(h.unsqueeze(1))[0].squeeze(1)")


@construct(0.5)
def dict_constant(b: Builder, depth: int) -> None:
    """A module attribute that is a dict of floats (a constant object after freezing)."""
    if "self.scales" not in b.declared:
        b.declared.add("self.scales")
        b.imports.add("typing")
        b.init.append('self.scales: Dict[str, float] = {"up": 1.25, "down": 0.5}')
    b.emit(f"h = h * self.scales[{b.rng.choice(['up', 'down'])!r}]")


# --- control flow --------------------------------------------------------------------------------


@construct(3.0)
def if_else(b: Builder, depth: int) -> None:
    b.emit(f"if {b.condition()}:")
    with b.indent():
        b.block(depth)
    b.emit("else:")
    with b.indent():
        b.block(depth)


@construct(1.5)
def if_only(b: Builder, depth: int) -> None:
    b.emit(f"if {b.condition()}:")
    with b.indent():
        b.block(depth)


@construct(1.0)
def nested_if(b: Builder, depth: int) -> None:
    b.emit(f"if {b.condition()}:")
    with b.indent():
        if_else(b, max(depth - 1, 0))
    b.emit("else:")
    with b.indent():
        b.block(depth)


@construct(1.5, lambda b: "n" in b.inputs)
def for_range(b: Builder, depth: int) -> None:
    """`for i in range(n)` with n an int input."""
    b.emit(f"for {b.fresh('i')} in range(n):")
    with b.loop():
        b.block(depth)


@construct(0.7)
def for_constant(b: Builder, depth: int) -> None:
    """A loop with a constant trip count (unrolled or not, it must run exactly that often)."""
    b.emit(f"for {b.fresh('i')} in range({b.rng.randint(1, 4)}):")
    with b.loop():
        b.block(depth)


@construct(2.0)
def for_break(b: Builder, depth: int) -> None:
    """A `for` loop left early by a data-dependent `break` (before or after the body's work)."""
    cap = "n" if "n" in b.inputs and b.rng.random() < 0.7 else str(b.rng.randint(2, 6))
    b.emit(f"for {b.fresh('i')} in range({cap}):")
    with b.loop():
        early = b.rng.random() < 0.4
        if not early:
            b.block(depth)
        b.emit(f"if {b.condition()}:")
        with b.indent():
            if b.rng.random() < 0.3:
                simple_statement(b)
            b.emit("break")
        if early:
            b.block(depth)


@construct(0.8)
def two_breaks(b: Builder, depth: int) -> None:
    """Two data-dependent `break`s in one loop."""
    cap = "n" if "n" in b.inputs else str(b.rng.randint(2, 6))
    b.emit(f"for {b.fresh('i')} in range({cap}):")
    with b.loop():
        b.emit(f"if {b.condition()}:")
        with b.indent():
            b.emit("break")
        b.block(0)
        b.emit(f"if {b.condition()}:")
        with b.indent():
            b.emit("break")


@construct(1.5)
def while_cap(b: Builder, depth: int) -> None:
    """`while <condition> and j < cap:` with the counter advanced at the end of the body."""
    counter = b.fresh("j")
    cap = "n" if "n" in b.inputs and b.rng.random() < 0.6 else str(b.rng.randint(2, 6))
    b.emit(f"{counter} = 0")
    b.emit(f"while {b.condition(in_while=True)} and {counter} < {cap}:")
    with b.loop():
        b.block(depth)
        b.emit(f"{counter} += 1")


@construct(0.8, lambda b: b.loop_depth == 0 and b.level == 0)
def early_return(b: Builder, depth: int) -> None:
    """`if <condition>: return ...` before the end (the outputs are those of the final return)."""
    b.emit(f"if {b.condition()}:")
    with b.indent():
        simple_statement(b)
        b.emit("return __RETURN__")


# --- what real dynamic code does: nested loops, exits from loops, host floats, random ops ----------


@construct(1.2, lambda b: "n" in b.inputs)
def nested_for(b: Builder, depth: int) -> None:
    """`for i in range(n): for j in range(...)`: the inner trip count is n, i + 1 or a constant."""
    outer, inner = b.fresh("i"), b.fresh("j")
    b.emit(f"for {outer} in range(n):")
    with b.loop():
        b.emit(f"for {inner} in range({b.rng.choice(['n', f'{outer} + 1', str(b.rng.randint(1, 3))])}):")
        with b.loop():
            b.block(depth)
        if b.rng.random() < 0.5:
            simple_statement(b)


@construct(1.5)
def break_in_branch(b: Builder, depth: int) -> None:
    """`if <c>: <work>; break` / `else: <work>` inside a loop (a decoder's stop test), sometimes one
    `if` deeper."""
    cap = "n" if "n" in b.inputs and b.rng.random() < 0.7 else str(b.rng.randint(2, 6))
    b.emit(f"for {b.fresh('i')} in range({cap}):")
    with b.loop():
        simple_statement(b)
        b.emit(f"if {b.condition()}:")
        with b.indent():
            if b.rng.random() < 0.4:
                b.emit(f"if {b.condition()}:")
                with b.indent():
                    simple_statement(b)
                    b.emit("break")
                simple_statement(b)
            else:
                simple_statement(b)
                b.emit("break")
        b.emit("else:")
        with b.indent():
            b.block(depth)


@construct(1.5)
def return_in_loop(b: Builder, depth: int) -> None:
    """An early `return` from inside a loop (an image captioner's decode loop returns its sequence)."""
    cap = "n" if "n" in b.inputs and b.rng.random() < 0.7 else str(b.rng.randint(2, 5))
    b.emit(f"for {b.fresh('i')} in range({cap}):")
    with b.loop():
        b.block(depth)
        b.emit(f"if {b.condition()}:")
        with b.indent():
            if b.rng.random() < 0.5:
                simple_statement(b)
            b.emit("return __RETURN__")
        if b.rng.random() < 0.5:
            simple_statement(b)


@construct(0.8)
def return_in_nested_loop(b: Builder, depth: int) -> None:
    """An early `return` from the inner of two nested loops (RaNet's exits, a beam's stop)."""
    outer_cap = "n" if "n" in b.inputs else str(b.rng.randint(2, 4))
    b.emit(f"for {b.fresh('i')} in range({outer_cap}):")
    with b.loop():
        simple_statement(b)
        b.emit(f"for {b.fresh('j')} in range({b.rng.randint(1, 3)}):")
        with b.loop():
            simple_statement(b)
            b.emit(f"if {b.condition()}:")
            with b.indent():
                b.emit("return __RETURN__")
        if b.rng.random() < 0.5:
            b.block(max(depth - 1, 0))


@construct(1.2)
def host_float(b: Builder, depth: int) -> None:
    """Host float arithmetic: a float read off the tensor (`float(x.item())`), `math` functions,
    `min`/`abs`, then used to scale the tensor (what a temperature or a step size does)."""
    b.imports.add("math")
    v = b.fresh("v")
    # `abs` of a host float is an export error today (no host form): one read in six
    reads = ["float(h.abs().mean().item())", "float(h.abs().max())", "float(h.norm())"]
    read = b.rng.choice(reads * 2 + ["abs(float(h.sum()))"])
    b.emit(f"{v} = {read}")
    b.emit(
        b.rng.choice(
            [
                f"{v} = math.sqrt({v}) * 0.5 + 0.25",
                f"{v} = math.exp(-{v}) + 0.5",
                f"{v} = math.tanh({v}) * 2.0",  # the exporter has no host tanh: an export error
                f"{v} = min({v}, 2.0) * 0.5 + math.log(1.0 + {v}) * 0.1",
                f"{v} = {v} / ({v} + 1.0) + float(int({v} * 2.0)) * 0.1",
            ]
        )
    )
    b.emit(f"h = h * {v}")


@construct(1.0)
def random_op(b: Builder, depth: int) -> None:
    """A random op (PonderNet's `bernoulli`, Tacotron2's always-on dropout, noise): exactly where
    real code puts them, but written so that the randomness cancels, since PyTorch's and IREE's
    generators cannot be seeded alike. `0.0 * dropout(tanh(h))` is 0 wherever h is not NaN (dropout
    of h itself is not: a dropped inf is inf * 0 = NaN); a bernoulli of ones is ones, of zeros is
    zeros; uniform and normal noise are finite. The random op stays in the program (a float
    multiply by 0.0 does not fold), so the compiler sees it; the outputs can be compared exactly
    (tests/test_fuzz_smoke.py checks each form under several generator states)."""
    b.emit(
        b.rng.choice(
            [
                "h = h + 0.0 * F.dropout(torch.tanh(h), 0.1, True)",
                "h = h + 0.0 * torch.rand_like(h)",
                "h = h + 0.0 * torch.randn_like(h)",
                "h = h * torch.bernoulli(torch.ones_like(h))",
                "h = h + torch.bernoulli(torch.zeros_like(h))",
                "h = h + 0.0 * torch.bernoulli(torch.full_like(h, 0.5))",
            ]
        )
    )


@construct(1.5)
def decode_loop(b: Builder, depth: int) -> None:
    """A decoder's loop: a layer and a softmax per step, the argmax appended, stop on a condition
    of the carried state (by `break` or by returning from inside the loop)."""
    f = b.features
    cap = "n" if "n" in b.inputs and b.rng.random() < 0.7 else str(b.rng.randint(2, 6))
    b.emit(f"for {b.fresh('i')} in range({cap}):")
    with b.loop():
        b.emit(f"h = torch.softmax({b.layer(f'nn.Linear({f}, {f})')}(h), 1) + h * 0.5")
        if b.rng.random() < 0.4:
            random_op(b, 0)
        if b.rng.random() < 0.5:
            b.imports.add("typing")
            b.declare("li", "li: List[int] = []")
            b.emit("li.append(int(h.argmax()))")
        b.emit(f"if {b.condition()}:")
        with b.indent():
            b.emit(b.rng.choice(["break", "return __RETURN__"]))


# --- structured values and data-dependent sizes -----------------------------------------------------
# Drawn from the builder's second random stream (`Builder.structured`), between the constructs above,
# so that adding them left the programs of earlier seeds' constructs and conditions as they were.

STRUCTURED: list[Construct] = []


def structured(function: Construct) -> Construct:
    STRUCTURED.append(function)
    return function


def maybe_structured(b: Builder) -> None:
    """Now and then, one of the constructs below, chosen by the second stream."""
    if b.structured.random() < 0.2:
        construct = b.structured.choice(STRUCTURED)
        b.constructs.append(construct.__name__)
        construct(b, 0)


@structured
def optional_state(b: Builder, depth: int) -> None:
    """A state that starts as None and is set where it is first used (a decoder's or an RNN's
    state), returned: None on the paths that never reach it."""
    b.imports.add("typing")
    b.declare("st", "st: Optional[torch.Tensor] = None")
    b.emit("if st is None:")
    with b.indent():
        b.emit(b.structured.choice(["st = torch.tanh(h)", "st = torch.zeros_like(h)", "st = h * 0.5"]))
    b.emit("else:")
    with b.indent():
        b.emit("st = st * 0.5 + torch.tanh(h) * 0.5")
    b.emit("h = h + st * 0.25")


@structured
def dict_of_outputs(b: Builder, depth: int) -> None:
    """A dict of named outputs whose keys are set where the construct stands (a detection head's
    `out["scores"] = ...`), returned with the keys of the path taken."""
    b.imports.add("typing")
    b.declare("out", "out: Dict[str, torch.Tensor] = {}")
    # One form per key, as code writes it (a key whose dtype differed by path would be refused).
    forms = {"logits": "torch.softmax(h, 1)", "scores": "h.sum(1)", "features": "h * 1.0", "labels": "h.argmax(1)"}
    key = b.structured.choice(sorted(forms))
    b.emit(f'out["{key}"] = {forms[key]}')


@structured
def ragged_pieces(b: Builder, depth: int) -> None:
    """Pieces of a width the data decides (segmenting, routing), collected in a list and
    concatenated along that width."""
    f = b.features
    b.imports.add("typing")
    if "pieces" not in b.declared:
        b.declared.add("pieces")
        b.prologue.append("pieces: List[torch.Tensor] = []")
        b.outputs.append("torch.cat(pieces + [h], 1)")
    width = b.structured.choice([f"int(h.argmax(1).max()) % {f} + 1", f"int((h > 0.0).sum()) % {f} + 1"])
    b.emit(f"pieces.append(h[:, :{width}] * 0.5)")


@structured
def list_of_tuples(b: Builder, depth: int) -> None:
    """A prediction and its confidence per step (RaNet's exits), returned as a list of tuples."""
    b.imports.add("typing")
    b.declare("preds", "preds: List[Tuple[torch.Tensor, torch.Tensor]] = []")
    b.emit("preds.append((h * 1.0, torch.softmax(h, 1).max(1)[0]))")


@structured
def masked_rows(b: Builder, depth: int) -> None:
    """A size only the data decides: rows or elements picked by a mask (NMS's kept boxes, a router's
    tokens per expert), reduced back onto the running tensor."""
    b.emit(
        b.structured.choice(
            [
                "h = h + h[h[:, 0] > 0.0].sum(0, keepdim=True) * 0.1",
                "h = h + h.masked_select(h > 0.5).sum() * 0.1",
                "h = h + torch.nonzero(h > 0.0).size(0) * 0.01",
                "h = h * (1.0 + 0.01 * h[h.abs() > 0.25].numel())",
            ]
        )
    )


@structured
def inplace_write(b: Builder, depth: int) -> None:
    """Writes into a tensor: a fresh buffer filled column by column, a clamp through a mask, an
    update of a slice (what decoders and NMS do instead of functional ops)."""
    forms = [
        ["buf = torch.zeros_like(h)", "buf[:, 0] = h[:, 1] * 0.5", "h = h + buf"],
        ["h = h.clone()", "h[h > 1.0] = 1.0"],
        ["h = h.clone()", "h[0] = h[0] * 0.5"],
        ["h = h.clone()", "h[:, :2] += 0.25"],
    ]
    for line in b.structured.choice(forms):
        b.emit(line)
