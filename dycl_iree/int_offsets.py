"""Which int parameters of a segment the host program computes from one another by a constant offset.

torch.export ties two int inputs when the examples make a size derived from them 1: with the
examples 0 and 1, `x[start:end]` made `end` the symbol `start + 1`, and the exported slice keeps one
row whatever the bounds. Whether such a tie is a coincidence of the examples
(a segmenter's loop-carried `start` and the loop's index `i`) or holds on every run (a decoder's
`positions[step : step + count]` with `count == 1`: the host computes `end` as `step + 1`) cannot be
told from the export, but it can from the Program: a tie is real when, at every call of the segment,
the host computes one argument from the other by adding a constant (`aten::add.int` / `sub.int` with a
constant, a multiplication by 1) or both are constants with that difference.

`lower` keeps an export whose ties are all real, and exports a segment with coincidental ties again
with examples that break them but keep the real offsets (`lower.py: _export_segment`).

Example:
    >>> offsets = IntOffsets(program)                        # doctest: +SKIP
    >>> # end = step + 1 at every call
    >>> offsets.between("seg10", 7, 6)                       # doctest: +SKIP
    1
"""

from __future__ import annotations

from typing import Any

from .program import Arg, Constant, HostOp, Program, SegmentCall, Value, iter_nodes

# A root of an offset chain: a Value the host does not compute from another int by a constant offset
# (a loop index, a carried value, a size read), or the marker for a constant argument.
_CONSTANT = "constant"


class IntOffsets:
    """For each segment call, each int argument as (root, offset): its value is root + offset."""

    def __init__(self, program: Program) -> None:
        self._defined: dict[Value, tuple[Value, int]] = {}
        self._calls: dict[str, list[tuple[Arg, ...]]] = {}
        for node in iter_nodes(program.body):
            if isinstance(node, HostOp) and len(node.outputs) == 1:
                step = _offset_step(node)
                if step is not None:
                    self._defined[node.outputs[0]] = step
            elif isinstance(node, SegmentCall):
                self._calls.setdefault(node.segment, []).append(node.args)

    def root(self, arg: Arg) -> tuple[Any, int] | None:
        """`arg` as (root, offset), or None when it is not an int."""
        if isinstance(arg, Constant):
            return (_CONSTANT, int(arg.value)) if isinstance(arg.value, (int, bool)) else None
        if not isinstance(arg, Value):
            return None
        offset = 0
        while arg in self._defined:
            arg, step = self._defined[arg]
            offset += step
        return arg, offset

    def between(self, segment: str, position: int, other: int) -> int | None:
        """The constant d with `param[position] == param[other] + d` at every call of `segment`, or None
        when some call computes them independently (or the Program never calls the segment)."""
        calls = self._calls.get(segment, [])
        found: set[int] = set()
        for args in calls:
            this, that = self.root(args[position]), self.root(args[other])
            if this is None or that is None or this[0] != that[0]:
                return None
            found.add(this[1] - that[1])
        return found.pop() if len(found) == 1 else None


def _offset_step(node: HostOp) -> tuple[Value, int] | None:
    """(operand, d) when `node` computes its int output as operand + d with d a constant."""
    args = node.args
    if len(args) != 2:
        return None
    constants = [a.value for a in args if isinstance(a, Constant) and isinstance(a.value, int)]
    values = [a for a in args if isinstance(a, Value)]
    if len(constants) != 1 or len(values) != 1:
        return None
    (constant,), (value,) = constants, values
    if node.target == "aten::add.int":
        return value, constant
    if node.target == "aten::sub.int" and isinstance(args[1], Constant):
        return value, -constant
    if node.target == "aten::mul.int" and constant == 1:
        return value, 0
    return None
