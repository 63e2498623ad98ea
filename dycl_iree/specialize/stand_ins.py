"""Stand-ins for values a loop carries before they are set: the previous iteration's value instead.

TorchScript carries the value of a `return` inside a loop (and any value the loop sets but the
body never reads) uninitialized until the body sets it: on the side of each branch that does not
set it, the body yields a value that is never read. `visitor.stand_in` gives such a side a
`STAND_IN` (a zero tensor on the compiled host). Inside a loop body the loop's own parameter for
that slot serves the same purpose, costs nothing, and keeps the slot's size the one the loop
carries: a fresh zero tensor of the example's size in every iteration made IREE 3.13 size the
returned tensor wrongly (an OUT_OF_RANGE at run time when a loop that grows a tensor ran to its end
instead of returning it; README's traps).

Example:
    >>> body = reuse_parameters(body, carried=[slot_param], slots=[2])    # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses

from ..program import STAND_IN, Block, HostOp, If, Value, arg_values, iter_nodes, node_inputs, sub_blocks


def reuse_parameters(body: Block, results: list, params: list[Value]) -> tuple[Block, int]:
    """`body` with the stand-ins that become `results[k]` replaced by `params[k]` (same type only).

    `results` are the body's carried results (without the continue condition), `params` the
    parameters the body receives for them. Returns the new block and how many stand-ins it replaced.
    """
    replacements: dict[Value, Value] = {}
    for result, param in zip(results, params):
        if isinstance(result, Value) and isinstance(param, Value) and result.type == param.type:
            replacements[result] = param
    if not replacements:
        return body, 0
    count = 0
    nodes = []
    for node in body.nodes:
        wanted = (
            {i: replacements[v] for i, v in enumerate(node.outputs) if v in replacements}
            if isinstance(node, If)
            else {}
        )
        if wanted:
            node, replaced = _replace_in_if(node, wanted)
            count += replaced
        nodes.append(node)
    return dataclasses.replace(body, nodes=tuple(nodes)), count


def _replace_in_if(node: If, wanted: dict[int, Value]) -> tuple[If, int]:
    """The If with each side's yield at the positions of `wanted` replaced where it is a stand-in
    (or an inner If's output that is one, on that inner If's sides)."""
    count = 0
    sides = []
    for block in (node.then_block, node.else_block):
        stand_ins = {v for n in block.nodes if isinstance(n, HostOp) and n.target == STAND_IN for v in n.outputs}
        results = list(block.results)
        inner: dict[Value, Value] = {}
        for position, param in wanted.items():
            yielded = results[position]
            if yielded in stand_ins and yielded.type == param.type:
                results[position] = param
                count += 1
            elif isinstance(yielded, Value):
                inner[yielded] = param
        nodes = []
        for inner_node in block.nodes:
            if isinstance(inner_node, If):
                positions = {i: inner[v] for i, v in enumerate(inner_node.outputs) if v in inner}
                if positions:
                    inner_node, replaced = _replace_in_if(inner_node, positions)
                    count += replaced
            nodes.append(inner_node)
        used = {v for v in results if isinstance(v, Value)}
        for inner_node in iter_nodes(Block((), tuple(nodes), ())):
            used.update(node_inputs(inner_node))
            for inner_block in sub_blocks(inner_node):
                used.update(v for result in inner_block.results for v in arg_values(result))
        # A stand-in nothing reads any more is dropped (its zeros would be made for nothing).
        nodes = [
            n for n in nodes if not (isinstance(n, HostOp) and n.target == STAND_IN and not (set(n.outputs) & used))
        ]
        sides.append(dataclasses.replace(block, nodes=tuple(nodes), results=tuple(results)))
    return dataclasses.replace(node, then_block=sides[0], else_block=sides[1]), count
