"""Specialize's dicts keyed by the text of a list of ints known only at run time (`RunTimeDict`).

A beam search finds a hypothesis by its tokens: torchaudio's `RNNTBeamSearch` keeps
`key_to_b_hypo: Dict[str, Hypothesis]` keyed by `str(tokens)`, asks `key in d`, reads `d[key]` and
sets `d[key] = hypothesis`. Such a key is no constant, so the dict cannot be one value per key
(`structured.RecordEntry`). It is carried as a log of what was set, in order: `keys`, the int lists
whose text each key is (a fixed-length list of them, or a `RaggedInts` once its length is decided at
run time), and `values`, the values set (a fixed-length list, or a list of run-time length of their
kind: `TupleList`, `TensorList`, ...). A key set again is found at its last set, so the log answers
as the dict does:

- `d[key] = value`: both appended;
- `key in d`: the last index whose int list equals the key's is not -1;
- `d[key]`: the value at that index, after the check PyTorch's KeyError makes.

`str(a) == str(b)` of two int lists is their equality. Finding a key is a host operation
(`dycl::rfind_int_list`), which both hosts run (the compiled host with tensor ops,
`hosts/list_search.py`). Other reads of such a dict (`len`, `keys()`, iteration) are refused at
their line: the log holds a key once per set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..errors import SpecializeError
from ..guards import CHECK_INDEX
from ..program import Constant, HostOp, ListArg, Value
from .ragged_ints import is_int_list
from .values import RaggedInts, append_to_list, list_item


@dataclass(frozen=True)
class RuntimeText:
    """A string made from values known only at run time; `source` is where. `ints` is the list of
    ints it is the text of (`str(tokens)`), where it is one: such text keys a `RunTimeDict`."""

    source: str
    ints: Any = None


@dataclass(frozen=True)
class RunTimeDict:
    """A dict keyed by text of int lists known only at run time: the keys' int lists and the values,
    one of each per `d[key] = value`, in order (see the module docstring); `source` is where it was
    first set with such a key."""

    keys: Any
    values: Any
    source: str = ""


# The host op that finds a key: the last index of an int list among int lists held as values cut at
# bounds, -1 if absent (`host_runtime.scalar_ops`).
RFIND_INT_LIST = "dycl::rfind_int_list"


class RunTimeDicts:
    """Dicts keyed by run-time text of int lists (a mixin of the specializer, before `StructuredValues`)."""

    def reconcile(self, a: Any, b: Any, nodes_a: list, nodes_b: list, source: str) -> tuple[Any, Any]:
        """Two paths' dicts, one of which is keyed at run time: the log of each, its keys and its
        values reconciled as lists are (an empty dict is an empty log)."""
        if not (isinstance(a, RunTimeDict) or isinstance(b, RunTimeDict)):
            return super().reconcile(a, b, nodes_a, nodes_b, source)
        a, b = _as_log(a, source), _as_log(b, source)
        if holds_keys(a.keys) or holds_keys(b.keys):
            keys = self.reconcile_ragged_ints(a.keys, b.keys, nodes_a, nodes_b, source)
        else:
            keys = (a.keys, b.keys)
        values = self.reconcile(a.values, b.values, nodes_a, nodes_b, source)
        made = a.source or b.source
        return RunTimeDict(keys[0], values[0], made), RunTimeDict(keys[1], values[1], made)

    def refuse_structured(self, node: torch._C.Node, entries: list, source: str) -> bool:
        """`str(a) == str(b)` (or `!=`) of two int lists: their equality, on the host."""
        kind = node.kind()
        if kind in ("aten::eq", "aten::ne") and len(entries) == 2 and all(_keyed(entry) for entry in entries):
            left, right = (self.int_list_value(entry.ints, source) for entry in entries)
            self.bind(node.output(), self.emit_host(f"{kind}.int_list", (left, right), "bool", source))
            return True
        if any(isinstance(entry, RunTimeDict) for entry in entries):
            raise SpecializeError(
                f"{kind} on a dict keyed by run-time text ({source}): `d[key] = value`, `key in d` and `d[key]` "
                "work on it; it holds a key once per set, so its length and keys are not read"
            )
        return super().refuse_structured(node, entries, source)

    def run_time_dict_op(self, node: torch._C.Node, entries: list, source: str) -> bool:
        """`d[key] = value`, `key in d` or `d[key]` on a dict keyed by run-time text (an empty dict
        becomes one at its first such set); False for another op, or another dict."""
        kind, subject = node.kind(), entries[0]
        keyed = len(entries) > 1 and _keyed(entries[1])
        if not (isinstance(subject, RunTimeDict) or (keyed and _empty(subject))):
            return False
        if not keyed:
            raise SpecializeError(
                f"{kind} on a dict keyed by run-time text with another key ({source}): its keys are all the text "
                "of a list of ints (`str(tokens)`)"
            )
        log = _as_log(subject, source)
        key = self.int_list_value(entries[1].ints, source)
        if kind == "aten::_set_item":
            keys = append_to_list(self, log.keys, key, source)
            grown = RunTimeDict(keys, append_to_list(self, log.values, entries[2], source), log.source or source)
            self.bind(node.inputsAt(0), grown)
            return True
        found = self.find_key(log, key, source)
        if kind == "aten::__contains__":
            self.bind(node.output(), self.emit_host("aten::ge.int", (found, Constant(0)), "bool", source))
            return True
        if kind == "aten::__getitem__":
            message = Constant(f"RuntimeError: KeyError: a key made at {entries[1].source}")
            self.nodes.append(HostOp(CHECK_INDEX, (found, Constant(0), Constant(2**63 - 1), message), (), source))
            self.bind(node.output(), list_item(self, log.values, found, source))
            return True
        raise SpecializeError(
            f"{kind} on a dict keyed by run-time text ({source}): `d[key] = value`, `key in d` and `d[key]` work on it"
        )

    def find_key(self, log: RunTimeDict, key: Value, source: str) -> Any:
        """The index of the last set of `key` in the log, or -1."""
        if isinstance(log.keys, ListArg) and not log.keys.items:
            return Constant(-1)
        keys = self.ragged_ints(log.keys, source)
        return self.emit_host(RFIND_INT_LIST, (keys.values, keys.bounds, key), "int", source)


def holds_keys(keys: Any) -> bool:
    return isinstance(keys, RaggedInts) or (isinstance(keys, ListArg) and bool(keys.items))


def _keyed(entry: Any) -> bool:
    return isinstance(entry, RuntimeText) and entry.ints is not None and is_int_list(entry.ints)


def _empty(entry: Any) -> bool:
    """An empty dict (`{}`: a record with no keys)."""
    return getattr(entry, "kind", None) == "dict" and not getattr(entry, "keys", None)


def _as_log(entry: Any, source: str) -> RunTimeDict:
    if isinstance(entry, RunTimeDict):
        return entry
    if _empty(entry):
        return RunTimeDict(ListArg(()), ListArg(()))
    raise SpecializeError(
        f"a dict is keyed by run-time text on one path and by constants on another ({source}): key it one way"
    )
