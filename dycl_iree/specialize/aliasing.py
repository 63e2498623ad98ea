"""Which TorchScript values a graph mutates in place (lists and tensors).

The Program is SSA; TorchScript mutates lists (`aten::append`) and tensors (`add_`) in place. The
visitor rebinds a mutated value to a new Program value, and a value defined outside a branch or
loop but mutated inside it becomes an extra output or a loop-carried value: this module finds them.

Example:
    >>> mutated_outer([then_block, else_block])                          # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import torch

from .schemas import mutates_first_argument, resolve_overload, returns_view


def mutated_outer(blocks: list) -> list:
    """TorchScript values defined outside `blocks` that nodes inside them mutate in place."""
    defined: set[int] = set()
    mutated: list = []
    seen: set[int] = set()

    def collect(block: Any) -> None:
        for param in block.inputs():
            defined.add(param.unique())
        for node in block.nodes():
            for output in node.outputs():
                defined.add(output.unique())
            for inner in node.blocks():
                collect(inner)

    def scan(block: Any) -> None:
        for node in block.nodes():
            if node_mutates_first_input(node):
                # A write into a view also writes every tensor it views (`out[:, t] = h`: `out`).
                for target in view_bases(node.inputsAt(0)):
                    if target.unique() not in defined and target.unique() not in seen:
                        seen.add(target.unique())
                        mutated.append(target)
            for inner in node.blocks():
                scan(inner)

    for block in blocks:
        collect(block)
    for block in blocks:
        scan(block)
    return mutated


def view_bases(value: torch._C.Value) -> list:
    """`value`, and while it was made by a view op, the tensor it views, up to the owner of the memory."""
    chain = [value]
    while True:
        node = value.node()
        if node.kind() in ("aten::cpu", "aten::cuda") or (node.kind() == "aten::to" and node.inputsSize() > 0):
            value = node.inputsAt(0)  # a device move is the tensor itself (`visitor.visit_device_move`)
        elif node.kind().startswith("aten::") and node.outputsSize() == 1 and node.inputsSize() > 0:
            overload = resolve_overload(node)
            if overload is None or not returns_view(overload._schema):
                return chain
            value = node.inputsAt(0)
        else:
            return chain
        if value.type().kind() != "TensorType":
            return chain
        chain.append(value)


LIST_MUTATORS = {"aten::append", "aten::_set_item", "aten::insert", "aten::pop", "aten::clear", "aten::extend"}


def node_mutates_first_input(node: torch._C.Node) -> bool:
    if node.kind() in LIST_MUTATORS or node.kind() == "prim::SetAttr":  # a dict write is `_set_item`
        return True
    if not node.kind().startswith("aten::") or node.inputsSize() == 0:
        return False
    overload = resolve_overload(node)
    return overload is not None and mutates_first_argument(overload._schema)


def collect_mutated_lists(graph: torch._C.Graph) -> set[int]:
    mutated: set[int] = set()

    def scan(block: Any) -> None:
        for node in block.nodes():
            if node.kind() in LIST_MUTATORS:
                mutated.add(node.inputsAt(0).unique())
            for inner in node.blocks():
                scan(inner)

    scan(graph)
    return mutated
