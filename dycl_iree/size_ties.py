"""Size ties: a segment input's dim that torch.export ties to a sum of other inputs' sizes.

Emformer's step concatenates `[right_context, utterance, summary]` and adds the attention mask to
the scores: torch.export then types the mask's rows as the right context's rows plus the
utterance's, while the Program types them as a dim of their own (the mask comes out of a loop).
The segment's function takes the mask with that expression for its rows, and IREE does not check
an input's dims against it: where the sizes disagree (a model error, which PyTorch raises at the
op), both hosts returned a result. So the lowering keeps such a tie (an integer combination of
other inputs' dynamic dims and ints, plus a constant) and the host checks it before each call of
the segment, with `dycl::check_index` (the size in [expected, expected + 1)), which both hosts
already raise as `ModelRaised` and before which the compiled host runs none of the segment's
kernels (`hosts/checks.py`).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any, Iterator

from .guards import CHECK_INDEX, _largest_id
from .program import Arg, Block, Constant, HostOp, Program, ScalarType, SegmentCall, TensorType, Value, map_sub_blocks


@dataclass(frozen=True)
class SizeTie:
    """Dim `dim` of input `position` of `segment` (or, `dim` None, that int input itself) is
    `constant` + the sum of coefficient * size over `terms`, each (coefficient, input position, dim,
    or None for an int input); `expression` says so with the Program's names, for the error."""

    segment: str
    position: int
    dim: int | None
    terms: tuple[tuple[int, int, int | None], ...]
    constant: int
    expression: str
    source: str


def input_symbols(params: list, values: list) -> dict:
    """torch.export's symbol of each dynamic dim of a tensor input and of each int input, by where it is."""
    import sympy

    symbols: dict = {}
    for position, (param, value) in enumerate(zip(params, values)):
        if isinstance(param.type, TensorType) and hasattr(value, "shape"):
            for d, size in enumerate(param.type.shape):
                expr = getattr(getattr(value.shape[d], "node", None), "expr", None)
                if size is None and isinstance(expr, sympy.Symbol):
                    symbols.setdefault(expr, (position, d))
        elif isinstance(param.type, ScalarType) and param.type.kind == "int":
            expr = getattr(getattr(value, "node", None), "expr", None)
            if isinstance(expr, sympy.Symbol):
                symbols.setdefault(expr, (position, None))
    return symbols


def affine_tie(expression: Any, symbols: dict) -> tuple[tuple, int] | None:
    """`expression` as (terms, constant) over `symbols`, or None where it is no integer combination of them."""
    import sympy

    terms, constant = [], 0
    for key, coefficient in expression.as_coefficients_dict().items():
        if not coefficient.is_Integer:
            return None
        if key == 1:
            constant = int(coefficient)
        elif isinstance(key, sympy.Symbol) and key in symbols:
            terms.append((int(coefficient), *symbols[key]))
        else:
            return None
    return (tuple(terms), constant) if terms else None


def check_size_ties(program: Program, ties: list[SizeTie]) -> Program:
    """The program with a check before each call of a segment with ties, that its inputs' sizes satisfy them."""
    if not ties:
        return program
    by_segment: dict[str, list[SizeTie]] = {}
    for tie in ties:
        by_segment.setdefault(tie.segment, []).append(tie)
    fresh = itertools.count(_largest_id(program) + 1)

    def rewrite(block: Block) -> Block:
        nodes: list = []
        for node in block.nodes:
            node = map_sub_blocks(node, rewrite)
            if isinstance(node, SegmentCall):
                for tie in by_segment.get(node.segment, ()):
                    nodes.extend(_check(tie, node.args, fresh))
            nodes.append(node)
        return dataclasses.replace(block, nodes=tuple(nodes))

    return program.replace(body=rewrite(program.body))


def _check(tie: SizeTie, args: tuple[Arg, ...], fresh: Iterator[int]) -> list[HostOp]:
    checks: list[HostOp] = []

    def emit(target: str, operands: tuple) -> Value:
        out = Value(next(fresh), ScalarType("int"))
        checks.append(HostOp(target, operands, (out,), tie.source))
        return out

    def size(position: int, dim: int | None) -> Arg:
        arg = args[position]
        if dim is None:
            return arg
        if isinstance(arg, Constant):
            return Constant(int(arg.value.shape[dim]))
        return emit("aten::size.int", (arg, Constant(dim)))

    expected: Arg = Constant(tie.constant)
    for coefficient, position, dim in tie.terms:
        term = size(position, dim)
        if coefficient != 1:
            term = emit("aten::mul.int", (term, Constant(coefficient)))
        expected = emit("aten::add.int", (expected, term))
    above = emit("aten::add.int", (expected, Constant(1)))
    message = f"RuntimeError: the sizes of the tensors must match: {tie.expression} does not hold ({tie.source})"
    tied = size(tie.position, tie.dim)
    checks.append(HostOp(CHECK_INDEX, (tied, expected, above, Constant(message)), (), tie.source))
    return checks
