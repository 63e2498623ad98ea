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

from ..program import ListArg
from .schemas import mutates_first_argument, resolve_overload, returns_view
from .values import TupleEntry


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


# `del xs[i]` (`aten::Delete`) too: it has no torch.ops overload whose schema would say so, and a
# `del` inside a branch or loop that is not carried out of it is lost.
LIST_MUTATORS = {
    "aten::append",
    "aten::_set_item",
    "aten::insert",
    "aten::pop",
    "aten::clear",
    "aten::extend",
    "aten::Delete",
}


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


def note_inner_lists(spec: Any, node: torch._C.Node) -> None:
    """Remember where a list or tuple built by `node` holds a list that is mutated somewhere
    (`masks = [rows, columns]`, then `rows.append(...)`), so `follow_inner_list` keeps it current."""
    for position, item in enumerate(node.inputs()):
        if item.unique() in spec.mutated_lists:
            spec.inner_lists.setdefault(item.unique(), []).append((node.output(), position))


def follow_inner_list(spec: Any, ts_value: torch._C.Value, entry: Any) -> None:
    """`ts_value`, a mutable list, is now `entry`: every list or tuple that holds it holds `entry`.

    A TorchScript list is a reference, and a list of lists holds the lists themselves; an entry is
    a value, so the holder is rebuilt (and its own holders, in turn). Without it, a list that grew
    after it was put in another list read as it was then: Emformer's `masks_to_concat = [rows,
    columns]` came out empty ("torch.cat(): expected a non-empty list"), and with a first item the
    concatenation was silently short."""
    for holder, position in spec.inner_lists.get(ts_value.unique(), ()):
        held = spec.env.get(holder.unique())
        if isinstance(held, ListArg) and position < len(held.items):
            spec.bind(holder, ListArg(held.items[:position] + (entry,) + held.items[position + 1 :]))
        elif isinstance(held, TupleEntry) and position < len(held.items):
            spec.bind(holder, TupleEntry(held.items[:position] + (entry,) + held.items[position + 1 :]))
