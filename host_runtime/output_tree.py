"""The manifest's output tree: how a model's outputs are rebuilt from `main`'s flat results.

A bundle's `main` (and the Python host) returns a flat list of *leaves*: tensors and scalars. The
tree says what the model returned:

* an int: leaf i;
* a JSON list: a tuple of subtrees; `{"list": [...]}`: a list of subtrees;
* `{"unstack": i}`: a list of tensors of run-time length, leaf i holding them stacked on dim 0;
* `{"ragged": [i, j, d]}`: a list of tensors of run-time length that differ in size along dim d,
  leaf i holding them concatenated along d and leaf j their sizes along it;
* `{"ragged_ints": [i, j]}`: a list of lists of ints of run-time length, leaf i holding their ints
  one list after another and leaf j where each starts (and where the last ends);
* `{"zip": [subtree, ...]}`: a list of tuples of run-time length, the k-th subtree (a list of
  run-time length, or leaf i holding a list of scalars) holding element k of every tuple;
  `{"zip_lists": [...]}` the same where the items are fixed-length lists instead of tuples;
* `{"optional": [i, subtree]}`: an Optional decided at run time, leaf i its flag (the value's
  leaves hold a stand-in where the flag is false; the model's output is then None);
* `{"dict": [[key, subtree], ...]}`: a dict with keys known at export, in insertion order;
* `{"namedtuple": [name, [[field, subtree], ...]]}`: a NamedTuple;
* null: None.

Example:
    >>> build_outputs([0, {"optional": [1, 2]}, {"dict": [["logits", 3]]}], ["a", False, "stand-in", "b"])
    ('a', None, {'logits': 'b'})
    >>> leaf_labels({"dict": [["logits", 0]]}, 1)
    ['output0_logits']
"""

from __future__ import annotations

import collections
import functools
import re
from typing import Any

import numpy as np


class TreeProblem(ValueError):
    """A malformed output tree (the manifest check turns it into a BundleError)."""


def build_outputs(tree: Any, leaves: list) -> Any:
    """Rebuild the model's output structure from the tree (see the module docstring)."""
    if tree is None:
        return None
    if isinstance(tree, int):
        return leaves[tree]
    if isinstance(tree, dict):
        if "unstack" in tree:
            return list(leaves[tree["unstack"]])
        if "ragged" in tree:
            values, sizes, dim = leaves[tree["ragged"][0]], leaves[tree["ragged"][1]], tree["ragged"][2]
            bounds = np.cumsum([0, *(int(size) for size in sizes)])
            return [np.take(values, np.arange(start, end), axis=dim) for start, end in zip(bounds[:-1], bounds[1:])]
        if "ragged_ints" in tree:
            values, bounds = (leaves[leaf] for leaf in tree["ragged_ints"])
            ends = [int(bound) for bound in bounds]
            return [[int(value) for value in values[start:end]] for start, end in zip(ends[:-1], ends[1:])]
        if "zip" in tree:
            return [tuple(items) for items in zip(*(build_outputs(t, leaves) for t in tree["zip"]))]
        if "zip_lists" in tree:
            return [list(items) for items in zip(*(build_outputs(t, leaves) for t in tree["zip_lists"]))]
        if "optional" in tree:
            flag, subtree = tree["optional"]
            return build_outputs(subtree, leaves) if leaves[flag] else None
        if "dict" in tree:
            # [key, subtree, flag]: a key the dict holds where leaf `flag` is true.
            held = [entry for entry in tree["dict"] if len(entry) == 2 or leaves[entry[2]]]
            return {entry[0]: build_outputs(entry[1], leaves) for entry in held}
        if "namedtuple" in tree:
            name, fields = tree["namedtuple"]
            return _namedtuple(name, tuple(f for f, _ in fields))(*(build_outputs(t, leaves) for _, t in fields))
        return [build_outputs(t, leaves) for t in tree["list"]]
    return tuple(build_outputs(t, leaves) for t in tree)


@functools.cache
def _namedtuple(name: str, fields: tuple[str, ...]) -> type:
    return collections.namedtuple(name if name.isidentifier() else "Outputs", fields)


def flatten_outputs(tree: Any, outputs: Any) -> list:
    """The leaves of what a call returned, in leaf order (inverse of `build_outputs`); a list of run-time
    length is one stacked array, an Optional's flag is a bool and an unset value None."""
    if tree is None:
        return []
    if isinstance(tree, int):
        return [outputs]
    if isinstance(tree, dict):
        if "unstack" in tree:
            return [np.stack(outputs) if len(outputs) else np.zeros((0,))]
        if "ragged" in tree:
            dim = tree["ragged"][2]
            sizes = np.array([np.shape(output)[dim] for output in outputs], dtype=np.int64)
            return [np.concatenate(outputs, axis=dim) if len(outputs) else np.zeros((0,)), sizes]
        if "ragged_ints" in tree:
            bounds = np.cumsum([0, *(len(output) for output in outputs)])
            return [[int(value) for output in outputs for value in output], [int(bound) for bound in bounds]]
        if "zip" in tree or "zip_lists" in tree:
            subtrees = tree.get("zip", tree.get("zip_lists"))
            return [leaf for k, t in enumerate(subtrees) for leaf in flatten_outputs(t, [o[k] for o in outputs])]
        if "optional" in tree:
            _, subtree = tree["optional"]
            value = flatten_outputs(subtree, outputs) if outputs is not None else [None] * _count(subtree)
            return [outputs is not None, *value]
        if "dict" in tree:
            leaves = []
            for entry in tree["dict"]:
                key, subtree = entry[0], entry[1]
                value = outputs.get(key)
                leaves += flatten_outputs(subtree, value) if key in outputs else [None] * _count(subtree)
                if len(entry) == 3:
                    leaves.append(key in outputs)
            return leaves
        if "namedtuple" in tree:
            return [leaf for (_, t), o in zip(tree["namedtuple"][1], outputs) for leaf in flatten_outputs(t, o)]
        return [leaf for t, o in zip(tree["list"], outputs) for leaf in flatten_outputs(t, o)]
    return [leaf for t, o in zip(tree, outputs) for leaf in flatten_outputs(t, o)]


def _count(tree: Any) -> int:
    """How many leaves a subtree has."""
    if tree is None:
        return 0
    if isinstance(tree, int):
        return 1
    return sum(_count(child) for _, child in _children(tree))


def _children(tree: Any) -> list[tuple[str, Any]]:
    """A node's subtrees, each with the suffix its leaves' labels get ("" for none)."""
    if isinstance(tree, list):
        return [("", t) for t in tree]
    if "list" in tree:
        return [("", t) for t in tree["list"]]
    if "dict" in tree:
        children = []
        for entry in tree["dict"]:
            children.append((str(entry[0]), entry[1]))
            if len(entry) == 3:
                children.append((f"{entry[0]}_has_value", entry[2]))
        return children
    if "namedtuple" in tree:
        return [(str(field), t) for field, t in tree["namedtuple"][1]]
    if "optional" in tree:
        flag, subtree = tree["optional"]
        return [("has_value", flag), ("", subtree)]
    if "ragged" in tree:
        return [("", tree["ragged"][0]), ("sizes", tree["ragged"][1])]
    if "ragged_ints" in tree:
        return [("", tree["ragged_ints"][0]), ("bounds", tree["ragged_ints"][1])]
    if "zip" in tree or "zip_lists" in tree:
        return [("", t) for t in tree.get("zip", tree.get("zip_lists"))]
    return [("", tree["unstack"])]


def leaf_labels(tree: Any, count: int) -> list[str]:
    """A name per leaf: `output<i>` (i the leaf's index), with the dict key, NamedTuple field or
    `has_value` (an Optional's flag) that holds it appended: `output0_logits`, `output1_has_value`."""
    labels = [f"output{index}" for index in range(count)]

    def walk(node: Any, suffix: str) -> None:
        if node is None:
            return
        if isinstance(node, int):
            if suffix:
                labels[node] = f"output{node}_{re.sub(r'[^0-9A-Za-z_]', '_', suffix)}"
            return
        for child_suffix, child in _children(node):
            walk(child, child_suffix or suffix)

    walk(tree, "")
    return labels[:count]


def describe_tree(tree: Any, labels: list[str]) -> str:
    """The output structure as Python-like text over the leaves' labels (for the C header):
    `(output0, output2 if output1_has_value else None, {"logits": output3_logits})`."""
    if tree is None:
        return "None"
    if isinstance(tree, int):
        return labels[tree]
    if isinstance(tree, list):
        inner = ", ".join(describe_tree(t, labels) for t in tree)
        return f"({inner}{',' if len(tree) == 1 else ''})"
    if "list" in tree:
        return "[" + ", ".join(describe_tree(t, labels) for t in tree["list"]) + "]"
    if "unstack" in tree:
        return f"list({labels[tree['unstack']]})"
    if "ragged" in tree:
        values, sizes, dim = tree["ragged"]
        return f"split({labels[values]}, {labels[sizes]}, dim={dim})"
    if "ragged_ints" in tree:
        values, bounds = tree["ragged_ints"]
        return f"split({labels[values]}, at={labels[bounds]})"
    if "zip" in tree:
        return "list(zip(" + ", ".join(describe_tree(t, labels) for t in tree["zip"]) + "))"
    if "zip_lists" in tree:
        return "list(map(list, zip(" + ", ".join(describe_tree(t, labels) for t in tree["zip_lists"]) + ")))"
    if "optional" in tree:
        flag, subtree = tree["optional"]
        return f"{describe_tree(subtree, labels)} if {labels[flag]} else None"
    if "dict" in tree:
        items = []
        for entry in tree["dict"]:
            held = f" (if {labels[entry[2]]})" if len(entry) == 3 else ""
            items.append(f"{entry[0]!r}: {describe_tree(entry[1], labels)}{held}")
        return "{" + ", ".join(items) + "}"
    name, fields = tree["namedtuple"]
    return f"{name}(" + ", ".join(f"{field}={describe_tree(t, labels)}" for field, t in fields) + ")"


def check_tree(tree: Any, leaf_count: int, where: str) -> None:
    """Raise TreeProblem naming the first malformed node."""
    if tree is None:
        return
    if type(tree) is int:
        if not 0 <= tree < leaf_count:
            raise TreeProblem(f"{where} names leaf {tree}, but there are {leaf_count}")
        return
    if isinstance(tree, list):
        for index, item in enumerate(tree):
            check_tree(item, leaf_count, f"{where}[{index}]")
        return
    if not isinstance(tree, dict) or len(tree) != 1:
        raise TreeProblem(f"{where} must be a leaf index, a list, null or a dict with one key")
    (kind, body), = tree.items()
    if kind == "unstack" or kind == "list":
        if kind == "unstack" and type(body) is not int:
            raise TreeProblem(f"{where}.unstack must be a leaf index")
        check_tree(body, leaf_count, f"{where}.{kind}")
    elif kind == "ragged":
        if not (isinstance(body, list) and len(body) == 3 and all(type(item) is int for item in body)):
            raise TreeProblem(f"{where}.ragged must be [values leaf, sizes leaf, dim]")
        check_tree(body[0], leaf_count, f"{where}.ragged[0]")
        check_tree(body[1], leaf_count, f"{where}.ragged[1]")
    elif kind == "ragged_ints":
        if not (isinstance(body, list) and len(body) == 2 and all(type(item) is int for item in body)):
            raise TreeProblem(f"{where}.ragged_ints must be [values leaf, bounds leaf]")
        check_tree(body[0], leaf_count, f"{where}.ragged_ints[0]")
        check_tree(body[1], leaf_count, f"{where}.ragged_ints[1]")
    elif kind in ("zip", "zip_lists"):
        lists = ("unstack", "ragged", "ragged_ints", "zip", "zip_lists")
        runtime_lists = [type(t) is int or (isinstance(t, dict) and set(t) <= set(lists)) for t in body or [None]]
        if not (isinstance(body, list) and all(runtime_lists)):
            raise TreeProblem(f"{where}.{kind} must list the subtrees of lists of run-time length, one per element")
        for index, item in enumerate(body):
            check_tree(item, leaf_count, f"{where}.{kind}[{index}]")
    elif kind == "optional":
        if not (isinstance(body, list) and len(body) == 2 and type(body[0]) is int):
            raise TreeProblem(f"{where}.optional must be [flag leaf, subtree]")
        check_tree(body[0], leaf_count, f"{where}.optional[0]")
        check_tree(body[1], leaf_count, f"{where}.optional[1]")
    elif kind in ("dict", "namedtuple"):
        pairs = body if kind == "dict" else (body[1] if isinstance(body, list) and len(body) == 2 else None)
        if kind == "namedtuple" and not (pairs is not None and isinstance(body[0], str)):
            raise TreeProblem(f"{where}.namedtuple must be [name, [[field, subtree], ...]]")
        sizes = (2, 3) if kind == "dict" else (2,)
        if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) in sizes for p in pairs):
            raise TreeProblem(f"{where}.{kind} must list [key, subtree] pairs (or [key, subtree, flag leaf])")
        for entry in pairs:
            check_tree(entry[1], leaf_count, f"{where}.{kind}[{entry[0]!r}]")
            if len(entry) == 3:
                if type(entry[2]) is not int:
                    raise TreeProblem(f"{where}.{kind}[{entry[0]!r}] flag must be a leaf index")
                check_tree(entry[2], leaf_count, f"{where}.{kind}[{entry[0]!r}][2]")
    else:
        raise TreeProblem(
            f"{where} is a dict with key {kind!r}; expected 'list', 'unstack', 'ragged', 'ragged_ints', 'zip', "
            "'zip_lists', 'optional', 'dict' or 'namedtuple'"
        )
