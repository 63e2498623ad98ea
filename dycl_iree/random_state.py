"""The random state as an explicit value of the Program: every random op reads it and returns the next.

PyTorch's random ops read and advance a generator hidden in the process; torch-mlir models it as a
module global, which iree-compile 3.13 cannot take inside the compiled host's branches and loops
(README's traps). Here the generator's state becomes one more value of the Program, a tensor of two
int32 words (seed word, draw counter) threaded like any other:

* every random `TensorOp` becomes its `dycl::` counterpart (`random_ops.py`), which takes the state
  as its last argument and returns the draw and the next state;
* an `if` whose either side draws returns the state as one more output (the side that does not draw
  returns the state it was given); a loop whose body draws carries it as one more value;
* the Program takes the initial state as its last input and returns the final state as its last
  result (`Program.random_state`). Neither is a model input or output: the runtime keeps the state
  between calls and seeds it (`host_runtime/random_state.py`).

Partitioning then makes the state a parameter and a result of each segment that draws, and both
hosts carry it as they carry every tensor; nothing in either host knows it is random.

A dropout whose `training` flag is a run-time bool is rewritten too: its `dycl::` op draws and then
selects the draw or the input. Random ops not listed in `_REWRITES` (`F.rrelu` in training mode,
`x.random_()` without bounds) keep torch-mlir's global: they compile outside the compiled host's
branches and loops only, and the compiled host refuses them inside, naming the op and its line
(`global_seed_draws`).

Example:
    >>> program = thread_random_state(specialize(capture(model), example_inputs))   # doctest: +SKIP
    >>> program.random_state, program.inputs[-1].name                              # doctest: +SKIP
    (True, 'random_state')
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Iterator

from . import random_ops, random_sampling  # noqa: F401  (register the dycl:: ops)
from .program import (
    Arg,
    Block,
    Constant,
    If,
    Loop,
    Node,
    Program,
    Segment,
    TensorOp,
    TensorType,
    Value,
    iter_nodes,
    sub_blocks,
)
from .specialize.schemas import overload_of

STATE_TYPE = TensorType("int32", (2,), (2,))  # (seed word, draw counter): see random_ops.py
STATE_NAME = "random_state"


def _keyword(node: TensorOp, name: str) -> Arg | None:
    return next((arg for key, arg in node.kwargs if key == name), None)


def _dtype_only(node: TensorOp) -> tuple[tuple[str, Arg], ...]:
    dtype = _keyword(node, "dtype")
    return (("dtype", dtype),) if dtype is not None else ()


def _train_flag(node: TensorOp) -> Arg:
    return node.args[2] if len(node.args) > 2 else _keyword(node, "train")


def _trained(node: TensorOp) -> bool:
    """A dropout that is on: its `train` flag is the constant True or a run-time bool (a `Value`; the
    `dycl::` op then selects between the draw and its input). One that is constantly off is the identity."""
    train = _train_flag(node)
    return isinstance(train, Value) or (isinstance(train, Constant) and train.value is True)


def _run_time_train(node: TensorOp) -> tuple[tuple[str, Arg], ...]:
    train = _train_flag(node)
    return (("train", train),) if isinstance(train, Value) else ()


def _bounded(node: TensorOp) -> bool:
    """`x.random_(low, high)` with a bound: without one it draws the dtype's whole range (not rewritten)."""
    return not (isinstance(node.args[2], Constant) and node.args[2].value is None)


# aten target -> (whether this use draws, the dycl:: target, its arguments before the state, its keywords).
_Rewrite = tuple[Callable[[TensorOp], bool], str, Callable[[TensorOp], tuple], Callable[[TensorOp], tuple]]
_ALWAYS = lambda node: True  # noqa: E731
_NONE = lambda node: ()  # noqa: E731
_REWRITES: dict[str, _Rewrite] = {
    "aten::rand.default": (_ALWAYS, "dycl::uniform", lambda n: n.args[:1], _dtype_only),
    "aten::randn.default": (_ALWAYS, "dycl::normal", lambda n: n.args[:1], _dtype_only),
    "aten::rand_like.default": (_ALWAYS, "dycl::uniform_like", lambda n: n.args[:1], _dtype_only),
    "aten::randn_like.default": (_ALWAYS, "dycl::normal_like", lambda n: n.args[:1], _dtype_only),
    "aten::uniform.default": (_ALWAYS, "dycl::uniform_between", lambda n: n.args[:3], _NONE),
    "aten::normal.Tensor_Tensor": (_ALWAYS, "dycl::normal_around", lambda n: n.args[:2], _NONE),
    "aten::normal.Tensor_float": (_ALWAYS, "dycl::normal_around_float", lambda n: n.args[:2], _NONE),
    "aten::normal.float_Tensor": (_ALWAYS, "dycl::normal_from_float", lambda n: n.args[:2], _NONE),
    "aten::normal.float_float": (_ALWAYS, "dycl::normal_sized", lambda n: n.args[:3], _dtype_only),
    "aten::normal_functional.default": (_ALWAYS, "dycl::normal_shaped", lambda n: n.args[:3], _NONE),
    "aten::log_normal.default": (_ALWAYS, "dycl::log_normal", lambda n: n.args[:3], _NONE),
    "aten::exponential.default": (_ALWAYS, "dycl::exponential", lambda n: n.args[:2], _NONE),
    "aten::geometric.default": (_ALWAYS, "dycl::geometric", lambda n: n.args[:2], _NONE),
    "aten::cauchy.default": (_ALWAYS, "dycl::cauchy", lambda n: n.args[:3], _NONE),
    "aten::randint.default": (_ALWAYS, "dycl::randint", lambda n: n.args[:2], _dtype_only),
    "aten::randint.low": (_ALWAYS, "dycl::randint_low", lambda n: n.args[:3], _dtype_only),
    "aten::randint_like.default": (_ALWAYS, "dycl::randint_like", lambda n: n.args[:2], _dtype_only),
    "aten::randint_like.low_dtype": (_ALWAYS, "dycl::randint_like_low", lambda n: n.args[:3], _dtype_only),
    "aten::random.from": (_bounded, "dycl::random_between", lambda n: n.args[:3], _NONE),
    "aten::random.to": (_ALWAYS, "dycl::random_between", lambda n: (n.args[0], Constant(0), n.args[1]), _NONE),
    "aten::randperm.default": (_ALWAYS, "dycl::randperm", lambda n: n.args[:1], _dtype_only),
    "aten::multinomial.default": (_ALWAYS, "dycl::multinomial", lambda n: n.args[:3], _NONE),
    "aten::poisson.default": (_ALWAYS, "dycl::poisson", lambda n: n.args[:1], _NONE),
    "aten::bernoulli.default": (_ALWAYS, "dycl::bernoulli", lambda n: n.args[:1], _NONE),
    "aten::bernoulli.p": (_ALWAYS, "dycl::bernoulli_p", lambda n: n.args[:2], _NONE),
    "aten::bernoulli.Tensor": (_ALWAYS, "dycl::bernoulli_tensor", lambda n: n.args[:2], _NONE),
    "aten::dropout.default": (_trained, "dycl::dropout", lambda n: n.args[:2], _run_time_train),
    "aten::feature_dropout.default": (_trained, "dycl::feature_dropout", lambda n: n.args[:2], _run_time_train),
    "aten::alpha_dropout.default": (_trained, "dycl::alpha_dropout", lambda n: n.args[:2], _run_time_train),
    "aten::feature_alpha_dropout.default": (
        _trained,
        "dycl::feature_alpha_dropout",
        lambda n: n.args[:2],
        _run_time_train,
    ),
}
SUPPORTED = tuple(_REWRITES)


def global_seed_draws(segment: Segment) -> list[TensorOp]:
    """The ops of `segment` that still draw from torch-mlir's global seed: random ops (an aten op with a
    `Generator?` argument) that no `dycl::` op replaces, such as `x.random_()` without bounds or
    `randint_like` of a tensor bound. They compile at the top level of `main` only (README's traps)."""
    found = []
    for node in segment.nodes:
        if isinstance(node, TensorOp) and node.target.startswith("aten::") and _has_generator(node.target):
            found.append(node)
    return found


@functools.cache
def _has_generator(target: str) -> bool:
    try:
        schema = overload_of(target)._schema
    except AttributeError:
        return False
    return any(str(argument.type) == "Optional[Generator]" for argument in schema.arguments)


def draws(node: Node) -> bool:
    """Whether `node` is a random op that the state replaces."""
    if not isinstance(node, TensorOp) or node.target not in _REWRITES:
        return False
    return _REWRITES[node.target][0](node)


def _block_draws(block: Block) -> bool:
    return any(draws(node) for node in iter_nodes(block))


def thread_random_state(program: Program) -> Program:
    """`program` with its random ops reading and advancing an explicit state (the module docstring);
    a Program without random ops comes back unchanged."""
    if program.random_state or not _block_draws(program.body):
        return program
    ids = itertools.count(_largest_id(program) + 1)
    state = Value(next(ids), STATE_TYPE, STATE_NAME)
    body, final = _Threader(ids).block(program.body, state)
    body = Block(body.params + (state,), body.nodes, body.results + (final,))
    return program.replace(body=body, random_state=True)


class _Threader:
    def __init__(self, ids: Iterator[int]) -> None:
        self.ids = ids

    def new_state(self) -> Value:
        return Value(next(self.ids), STATE_TYPE, STATE_NAME)

    def block(self, block: Block, state: Value) -> tuple[Block, Value]:
        """The block rewritten with `state` on entry, and the state it leaves."""
        nodes: list[Node] = []
        for node in block.nodes:
            if draws(node):
                _, target, arguments, keywords = _REWRITES[node.target]
                following = self.new_state()
                nodes.append(
                    TensorOp(
                        target,
                        tuple(arguments(node)) + (state,),
                        tuple(keywords(node)),
                        (node.outputs[0], following),
                        node.source,
                        "tuple",
                    )
                )
                state = following
            elif isinstance(node, If) and any(_block_draws(b) for b in sub_blocks(node)):
                then_block, then_state = self.block(node.then_block, state)
                else_block, else_state = self.block(node.else_block, state)
                state = self.new_state()
                nodes.append(
                    dataclasses.replace(
                        node,
                        then_block=_returning(then_block, then_state),
                        else_block=_returning(else_block, else_state),
                        outputs=node.outputs + (state,),
                    )
                )
            elif isinstance(node, Loop) and _block_draws(node.body):
                carried = self.new_state()
                body, after_body = self.block(node.body, carried)
                body = Block(body.params + (carried,), body.nodes, body.results + (after_body,))
                following = self.new_state()
                initial, outputs = node.initial + (state,), node.outputs + (following,)
                nodes.append(dataclasses.replace(node, initial=initial, body=body, outputs=outputs))
                state = following
            else:
                nodes.append(node)
        return Block(block.params, tuple(nodes), block.results), state


def _returning(block: Block, state: Value) -> Block:
    return Block(block.params, block.nodes, block.results + (state,))


def _largest_id(program: Program) -> int:
    largest = max((value.id for value in program.body.params), default=0)
    for node in iter_nodes(program.body):
        values = list(node.outputs)
        for block in sub_blocks(node):
            values += block.params
        largest = max([largest, *(value.id for value in values)])
    return largest


__all__ = ["thread_random_state", "draws", "global_seed_draws", "SUPPORTED", "STATE_TYPE", "STATE_NAME"]
