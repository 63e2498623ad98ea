"""The type a loop-carried tensor has on the paths of the body that go on to another iteration.

TorchScript lowers a `break` to a flag: the `prim::If` that breaks yields False on that side and
the loop's condition is `index < trip_count and flag`. Its other outputs are the loop's carried
values, yielded on the breaking side as they are at the `break`. Where a carried value changes size
inside the body and gets it back only after the `break` (torchaudio's Tacotron2 decoder: the
prenet makes the 80-wide frame 256 wide, and `decoder_input = mel_spec` comes after the exits),
the breaking side yields it at the other size. That value only leaves the loop; the next
iteration never sees it. So the next iteration is typed by the sides that go on, and the loop
carries the join of both, refined to the going-on type at the top of the body (`REFINE`).

Example:
    >>> going_on([x, out], condition, body_nodes, source)    # doctest: +SKIP
    [TensorType(dtype='float32', shape=(2, 4), hint=(2, 4)), TensorType(...)]
"""

from __future__ import annotations

from typing import Any

from ..program import Arg, Block, Constant, HostOp, If, TensorType, Value, iter_nodes
from .values import join_types

# The value never reaches another iteration: every path that yields it leaves the loop.
NEVER = object()


def going_on(leaves: list, condition: Arg, nodes: list | tuple, source: str) -> list:
    """The type of each of `leaves` (the carried results of a loop body made of `nodes`, whose
    continue condition is `condition`) on the paths where `condition` can hold; `NEVER` where it
    holds on none. Where the paths cannot be told apart, the leaf's own type; None for a leaf that
    is no tensor value."""
    producers = {output: node for node in iter_nodes(Block((), tuple(nodes), ())) for output in node.outputs}
    return [
        _going_on(leaf, condition, producers, source)
        if isinstance(leaf, Value) and isinstance(leaf.type, TensorType)
        else None
        for leaf in leaves
    ]


def _going_on(leaf: Value, condition: Arg, producers: dict, source: str) -> Any:
    if isinstance(condition, Constant) and condition.value is False:
        return NEVER
    if not isinstance(condition, Value):
        return leaf.type
    producer = producers.get(condition)
    if isinstance(producer, HostOp) and producer.target == "aten::__and__.bool":
        # Goes on only where both hold: each operand's paths are a sound bound, so take the tighter.
        a, b = (_going_on(leaf, operand, producers, source) for operand in producer.args)
        return _meet(a, b)
    if isinstance(producer, If) and leaf in producer.outputs:
        # TorchScript's exits yield a flag and the values from the same `prim::If`, nested as deep
        # as the `break`s are, and (after an exit inside another `if`) chosen by a later `prim::If`
        # on whether the body exited: each side is followed into the `If` that made its values.
        position, flag_position = producer.outputs.index(leaf), producer.outputs.index(condition)
        joined: Any = NEVER
        for block in (producer.then_block, producer.else_block):
            flag, value = block.results[flag_position], block.results[position]
            if not (isinstance(value, Value) and isinstance(value.type, TensorType)):
                return leaf.type  # a constant yielded: its type is the If's own
            side = _going_on(value, flag, producers, source)
            joined = side if joined is NEVER else (join_types(joined, side, source) if side is not NEVER else joined)
        return joined
    return leaf.type


def _meet(a: Any, b: Any) -> Any:
    """The tighter of two bounds on the same paths' type: a dim static in either is static."""
    if a is NEVER or b is NEVER:
        return NEVER
    if not (isinstance(a, TensorType) and isinstance(b, TensorType)) or a.rank != b.rank:
        return a
    shape = tuple(x if x is not None else y for x, y in zip(a.shape, b.shape))
    hint = tuple(x if x is not None else (y if y is not None else h) for x, y, h in zip(a.shape, b.shape, a.hint))
    return TensorType(a.dtype, shape, hint)
