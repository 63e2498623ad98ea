"""Structured values: Optionals, records (dicts with keys known at export, NamedTuples, objects).

Each kind is an *entry* of the specializer whose run-time parts are ordinary Program values, so no
later stage (partition, lowering, either host) needs to know about it; only the manifest's output
tree says how to rebuild the model's outputs from the flat results.

* `OptionalEntry(present, value)`: an `Optional[T]` that is None on some paths and set on others.
  `present` is a host bool (a Constant where it is known at export); `value` is the value, or where
  it is unset a stand-in of its type (the Python host binds None, the compiled host zeros: see
  `control.stand_in`). `x is None` reads `not present`, `unchecked_cast(x)` (TorchScript's
  refinement after that test) reads `value`. An Optional that is None on every path stays the
  Constant None, and one that is set on every path its value: only a decision made at run time
  carries a flag. As an output it is `{"optional": [flag leaf, subtree]}`: the runtime returns None
  where the flag is false.
* `RecordEntry(kind, name, keys, items)`: one entry per field, like a tuple with names. `kind` is
  "dict" (a `Dict[str, T]` / `Dict[int, T]` whose keys are constants: `out["logits"] = ...`),
  "namedtuple" or "object" (a `@torch.jit.script` class: `prim::CreateObject`, `SetAttr`,
  `GetAttr`). A dict write or `SetAttr` rebinds the TorchScript value to a new record, as an
  `append` does for lists. As outputs a dict is `{"dict": [[key, subtree], ...]}` and a NamedTuple
  `{"namedtuple": [name, [[field, subtree], ...]]}`.
* `KeyEntry(present, value)`: a dict's item under a key the dict holds on some paths only (a head
  that returns its dict early, with fewer keys); `k in d` reads `present`, `d[k]` checks it (PyTorch
  raises KeyError), and as an output the key is `[key, subtree, flag leaf]`.
* `RuntimeText`: a string made from run-time values (`str(tokens)`), which the Program has no
  type for; a dict keyed by one is refused where it is used, naming both lines.

`with torch.no_grad():` (and the other grad modes) folds away: the exporter never records gradients.

How a kind crosses a branch or a loop: `reconcile` makes two paths' entries agree (None against a
value becomes two Optionals, a key one path lacks a KeyEntry), `conform` gives a loop body's
results the structure the loop carries, `unset_like` the stand-in for a side that leaves a value
unset, and `flatten_entries` / `unflatten_entries` turn entries into the Program values that cross.

Example:
    >>> flatten_entries([OptionalEntry(Constant(True), Constant(1.0))])[1]
    (('optional', ('leaf',), None),)
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import SpecializeError
from ..guards import CHECK_INDEX
from ..program import Constant, HostOp, ListArg
from .aliasing import note_inner_lists
from .run_time_dicts import RunTimeDict, RuntimeText
from .schemas import source_of
from .values import UNINITIALIZED, RaggedInts, RaggedList, TensorList, TupleEntry, TupleList, is_none


@dataclass(frozen=True)
class OptionalEntry:
    present: Any
    value: Any


@dataclass(frozen=True)
class KeyEntry:
    """A dict's item under a key that the dict holds on some paths only: `present` says whether it
    does (`k in d`), `value` is the item or a stand-in."""

    present: Any
    value: Any


@dataclass(frozen=True)
class RecordEntry:
    kind: str  # "dict", "namedtuple" or "object"
    name: str  # the class name of a NamedTuple or object
    keys: tuple
    items: tuple
    # The `prim::CreateObject` that made an object; 0 where unknown (after a join), SHARED where it
    # may or may not be the object another name holds, depending on the path.
    identity: int = 0

    def get(self, key: Any) -> Any:
        return self.items[self.keys.index(key)]

    def set(self, key: Any, item: Any) -> RecordEntry:
        if key in self.keys:
            items = tuple(item if k == key else old for k, old in zip(self.keys, self.items))
            return RecordEntry(self.kind, self.name, self.keys, items, self.identity)
        return RecordEntry(self.kind, self.name, (*self.keys, key), (*self.items, item), self.identity)

    def describe(self) -> str:
        return "a dict" if self.kind == "dict" else f"{self.kind} {self.name}"


# Context managers a `with` in `forward` may use that change nothing the exporter computes.
_GRAD_MODES = ("no_grad", "enable_grad", "inference_mode", "set_grad_enabled")


SHARED = -1


def _objects(entry: Any) -> list[RecordEntry]:
    """The objects an entry holds (itself, or inside tuples, lists, Optionals and records)."""
    if isinstance(entry, RecordEntry):
        own = [entry] if entry.kind == "object" else []
        return own + [inner for item in entry.items for inner in _objects(item)]
    if isinstance(entry, (TupleEntry, ListArg)):
        return [inner for item in entry.items for inner in _objects(item)]
    if isinstance(entry, (OptionalEntry, KeyEntry)):
        return _objects(entry.value)
    return []


def mark_shared(sides: list[list], joined: list) -> list:
    """`joined` (the entries after a branch or loop) with an object marked SHARED where, on one of
    the `sides` (the entries that flowed into the join, slot by slot), its slot held an object that
    another slot held too (`b = a` before a loop that may rebind `b`): after the join the two names
    are one object on some paths only, so a write through one of them cannot be followed."""
    shared = set()
    for entries in sides:
        seen: dict[int, int] = {}
        for slot, entry in enumerate(entries):
            for record in _objects(entry):
                if record.identity == SHARED:
                    shared.add(slot)
                elif record.identity and seen.setdefault(record.identity, slot) != slot:
                    shared.update((slot, seen[record.identity]))
    return [_mark(entry) if slot in shared else entry for slot, entry in enumerate(joined)]


def _mark(entry: Any) -> Any:
    if isinstance(entry, RecordEntry):
        items = tuple(_mark(item) for item in entry.items)
        identity = SHARED if entry.kind == "object" else entry.identity
        return RecordEntry(entry.kind, entry.name, entry.keys, items, identity)
    if isinstance(entry, (TupleEntry, ListArg)):
        return type(entry)(tuple(_mark(item) for item in entry.items))
    if isinstance(entry, OptionalEntry):
        return OptionalEntry(entry.present, _mark(entry.value))
    if isinstance(entry, KeyEntry):
        return KeyEntry(entry.present, _mark(entry.value))
    return entry


def unset_like(entry: Any) -> Any:
    """An entry of `entry`'s structure whose leaves are all uninitialized (a stand-in for a value
    that one path leaves unset; `control.stand_in` turns each leaf into a value of its type)."""
    if isinstance(entry, TupleEntry):
        return TupleEntry(tuple(unset_like(item) for item in entry.items))
    if isinstance(entry, ListArg):
        return ListArg(tuple(unset_like(item) for item in entry.items))
    if isinstance(entry, OptionalEntry):
        return OptionalEntry(Constant(UNINITIALIZED), unset_like(entry.value))
    if isinstance(entry, KeyEntry):
        return KeyEntry(Constant(UNINITIALIZED), unset_like(entry.value))
    if isinstance(entry, RecordEntry):
        items = tuple(unset_like(item) for item in entry.items)
        return RecordEntry(entry.kind, entry.name, entry.keys, items, entry.identity)
    if isinstance(entry, TensorList):
        return TensorList(Constant(UNINITIALIZED))
    if isinstance(entry, RaggedList):
        return RaggedList(Constant(UNINITIALIZED), Constant(UNINITIALIZED), entry.dim, entry.first_sizes)
    if isinstance(entry, RaggedInts):
        return RaggedInts(Constant(UNINITIALIZED), Constant(UNINITIALIZED), entry.width)
    if isinstance(entry, TupleList):
        return TupleList(tuple(unset_like(field) for field in entry.fields), entry.lists)
    if isinstance(entry, RunTimeDict):
        return RunTimeDict(unset_like(entry.keys), unset_like(entry.values), entry.source)
    return Constant(UNINITIALIZED)


def conform(entry: Any, like: Any) -> Any:
    """`entry` in the structure of `like` where only Optionals differ: a value where `like` is an
    Optional becomes a set Optional, and None an unset one (a loop body's results take the
    structure the loop carries)."""
    if isinstance(entry, Constant) and entry.value is UNINITIALIZED:
        return unset_like(like)  # never read (a `return` slot the iteration did not set)
    if isinstance(like, OptionalEntry):
        if isinstance(entry, OptionalEntry):
            return OptionalEntry(entry.present, conform(entry.value, like.value))
        if is_none(entry):
            return OptionalEntry(Constant(False), unset_like(like.value))
        return OptionalEntry(Constant(True), conform(entry, like.value))
    if isinstance(like, TupleEntry) and isinstance(entry, TupleEntry) and len(like.items) == len(entry.items):
        return TupleEntry(tuple(conform(e, k) for e, k in zip(entry.items, like.items)))
    if isinstance(like, RecordEntry) and isinstance(entry, RecordEntry) and set(entry.keys) <= set(like.keys):
        items = []
        for key, like_item in zip(like.keys, like.items):
            if key not in entry.keys:  # a key the loop's dict holds on some iterations only
                items.append(KeyEntry(Constant(False), unset_like(_item_value(like_item))))
                continue
            item = entry.get(key)
            if isinstance(like_item, KeyEntry):
                present = item.present if isinstance(item, KeyEntry) else Constant(True)
                items.append(KeyEntry(present, conform(_item_value(item), like_item.value)))
            else:
                items.append(conform(item, like_item))
        return RecordEntry(entry.kind, entry.name, like.keys, tuple(items), entry.identity)
    return entry


def _item_value(item: Any) -> Any:
    return item.value if isinstance(item, KeyEntry) else item


def flatten_entries(entries: list) -> tuple[list, Any]:
    """The leaves of `entries` (Values and Constants, in order) and their structure, which
    `unflatten_entries` rebuilds from other leaves: a structure node is "leaf" or
    (kind, items, meta). An Optional's flag is a leaf before its value's leaves; a TensorList is
    one leaf, a RaggedList two (values, sizes; its meta is the dim and `first_sizes`), a RaggedInts two (values,
    bounds; its meta is the width); a record's meta is (kind, name, keys)."""
    leaves: list = []

    def walk(entry: Any) -> Any:
        if isinstance(entry, TupleEntry):
            return ("tuple", tuple(walk(i) for i in entry.items), None)
        if isinstance(entry, ListArg):
            return ("list", tuple(walk(i) for i in entry.items), None)
        if isinstance(entry, TensorList):
            leaves.append(entry.value)
            return ("tensor_list", (), None)
        if isinstance(entry, RaggedList):
            leaves.extend((entry.value, entry.sizes))
            return ("ragged_list", (), (entry.dim, entry.first_sizes))
        if isinstance(entry, RaggedInts):
            leaves.extend((entry.values, entry.bounds))
            return ("ragged_ints", (), entry.width)
        if isinstance(entry, TupleList):
            return ("tuple_list", tuple(walk(field) for field in entry.fields), entry.lists)
        if isinstance(entry, RunTimeDict):
            return ("run_time_dict", (walk(entry.keys), walk(entry.values)), entry.source)
        if isinstance(entry, OptionalEntry):
            leaves.append(entry.present)
            return ("optional", (walk(entry.value),), None)
        if isinstance(entry, KeyEntry):
            leaves.append(entry.present)
            return ("key", (walk(entry.value),), None)
        if isinstance(entry, RecordEntry):
            return ("record", tuple(walk(i) for i in entry.items), (entry.kind, entry.name, entry.keys))
        leaves.append(entry)
        return "leaf"

    structure = tuple(walk(e) for e in entries)
    return leaves, structure


def unflatten_entries(structure: Any, leaves: list) -> list:
    iterator = iter(leaves)

    def build(node: Any) -> Any:
        if node == "leaf":
            return next(iterator)
        kind, items, meta = node
        if kind == "tensor_list":
            return TensorList(next(iterator))
        if kind == "ragged_list":
            return RaggedList(next(iterator), next(iterator), *meta)
        if kind == "ragged_ints":
            return RaggedInts(next(iterator), next(iterator), meta)
        if kind in ("optional", "key"):
            present = next(iterator)
            return (OptionalEntry if kind == "optional" else KeyEntry)(present, build(items[0]))
        built = tuple(build(i) for i in items)
        if kind == "tuple_list":
            return TupleList(built, meta)
        if kind == "run_time_dict":
            return RunTimeDict(*built, meta)
        if kind == "record":
            return RecordEntry(meta[0], meta[1], meta[2], built)
        return TupleEntry(built) if kind == "tuple" else ListArg(built)

    return [build(s) for s in structure]


def output_tree(structure: Any, leaves: list, model: str) -> tuple[Any, list]:
    """The manifest's output tree for one output `structure` (see `values.flatten_entries`), and the
    leaves it keeps: an Optional whose flag is known at export is its value or None, not a flag.

    A leaf is its index; a tuple a JSON list; `{"list": [...]}` a list; `{"unstack": i}` a list of
    run-time length (leaf i holds it stacked on dim 0); `{"ragged": [values, sizes, d]}` one whose
    tensors differ along dim d (concatenated along it); `{"ragged_ints": [values, bounds]}` a list of
    lists of ints of run-time length (leaf `values` holds them one after another, split at the ints
    of leaf `bounds`); `{"zip": [subtree, ...]}` a list of tuples
    of run-time length, one such list per tuple element (`{"zip_lists": ...}` where the
    items are fixed-length lists instead of tuples); `{"optional": [flag, subtree]}`;
    `{"dict": [[key, subtree], ...]}` (`[key, subtree, flag]` for a key the dict holds where leaf
    `flag` is true); `{"namedtuple": [name, [[field, subtree], ...]]}`; null for None.
    """
    iterator = iter(leaves)
    kept: list = []

    def keep(leaf: Any) -> int:
        kept.append(leaf)
        return len(kept) - 1

    def skip(node: Any) -> None:  # consume the leaves of a subtree that is not returned
        if node == "leaf":
            next(iterator)
            return
        kind, items, _ = node
        if kind in ("tensor_list", "optional", "key"):
            next(iterator)
        if kind in ("ragged_list", "ragged_ints"):
            next(iterator), next(iterator)
        for item in items:
            skip(item)

    def build(node: Any) -> Any:
        if node == "leaf":
            leaf = next(iterator)
            return None if is_none(leaf) else keep(leaf)
        kind, items, meta = node
        if kind == "tensor_list":
            return {"unstack": keep(next(iterator))}
        if kind == "ragged_list":  # values split along `dim` by the sizes
            return {"ragged": [keep(next(iterator)), keep(next(iterator)), meta[0]]}
        if kind == "ragged_ints":  # values split at the bounds
            return {"ragged_ints": [keep(next(iterator)), keep(next(iterator))]}
        if kind == "optional":
            flag = next(iterator)
            if isinstance(flag, Constant):
                if flag.value:
                    return build(items[0])
                skip(items[0])
                return None
            return {"optional": [keep(flag), build(items[0])]}
        if kind == "record" and meta[0] == "dict":
            pairs = []
            for key, item in zip(meta[2], items):
                if item == "leaf" or item[0] != "key":
                    pairs.append([key, build(item)])
                    continue
                flag = next(iterator)  # a key the dict holds on some paths only
                if not isinstance(flag, Constant):
                    pairs.append([key, build(item[1][0]), keep(flag)])
                elif flag.value:
                    pairs.append([key, build(item[1][0])])
                else:
                    skip(item[1][0])
            return {"dict": pairs}
        if kind == "run_time_dict":
            raise SpecializeError(
                f"{model} returns a dict keyed by run-time text (set at {meta}): it is carried as a log of its "
                "sets, which holds a key once per set; return the values it is read for instead"
            )
        subtrees = [build(i) for i in items]
        if kind == "tuple_list":  # the k-th list holds the k-th element of every tuple (or list)
            return {"zip_lists" if meta else "zip": subtrees}
        if kind == "list":
            return {"list": subtrees}
        if kind == "record":
            record_kind, name, keys = meta
            if record_kind == "namedtuple":
                return {"namedtuple": [name, [[key, subtree] for key, subtree in zip(keys, subtrees)]]}
            raise SpecializeError(
                f"{model} returns an object of class {name}: return its fields instead "
                "(a tuple, a NamedTuple or a Dict[str, Tensor])"
            )
        return subtrees

    return build(structure), kept


class StructuredValues:
    """Optionals, records and grad modes (a mixin of the specializer)."""

    object_ids = itertools.count(1)

    # -- Optional ----------------------------------------------------------------------------
    def optional_test(self, node: torch._C.Node, left: Any, right: Any) -> bool:
        """`x is None` / `x is not None` on an Optional decided at run time: its flag (False if `x`
        is no Optional)."""
        optional, other = (left, right) if isinstance(left, OptionalEntry) else (right, left)
        if not isinstance(optional, OptionalEntry) or not is_none(other):
            return False
        negate = node.kind() == "aten::__isnot__"
        present = optional.present
        if isinstance(present, Constant):
            self.bind(node.output(), Constant(bool(present.value) == negate))
        elif negate:
            self.bind(node.output(), present)
        else:
            self.bind(node.output(), self.emit_host("aten::__not__.bool", (present,), "bool", source_of(node)))
        return True

    def visit_unchecked_cast(self, node: torch._C.Node) -> None:
        """TorchScript's refinement of an Optional after `is not None` (or an `assert`): its value."""
        entry = self.entry(node.input())
        refined = str(node.output().type())
        if isinstance(entry, OptionalEntry) and not (refined.endswith("?") or refined.startswith("Optional")):
            entry = entry.value
        self.bind(node.output(), entry)

    # -- records -----------------------------------------------------------------------------
    def visit_dict_construct(self, node: torch._C.Node) -> None:
        inputs = [self.entry(v) for v in node.inputs()]
        record = RecordEntry("dict", "", (), ())
        for key, item in zip(inputs[0::2], inputs[1::2]):
            record = record.set(self.dict_key(key, "a dict literal", source_of(node)), item)
        self.bind(node.output(), record)

    def dict_key(self, key: Any, construct: str, source: str) -> Any:
        """The key of a dict operation, which must be known at export time."""
        if isinstance(key, Constant) and isinstance(key.value, (str, int, float, bool)):
            return key.value
        made = f", made at {key.source}" if isinstance(key, RuntimeText) and key.source else ""
        raise SpecializeError(
            f"{construct} with a key known only at run time ({source}{made}): dicts are carried as one "
            "value per key, so their keys must be known at export (string or int constants), or be the "
            "text of a list of ints (`str(tokens)`, a beam's hypotheses keyed by their tokens: carried "
            "as a log of its sets); key it one of those ways, or keep the values in tensors indexed by slot"
        )

    def visit_set_item(self, node: torch._C.Node) -> None:
        subject, key, item = (self.entry(v) for v in node.inputs())
        if self.run_time_dict_op(node, [subject, key, item], source_of(node)):
            return None
        if not isinstance(subject, RecordEntry):
            return self.visit_op(node)
        record = subject.set(self.dict_key(key, "`d[key] = value`", source_of(node)), item)
        self.bind(node.inputsAt(0), record)

    def dict_getitem(self, node: torch._C.Node, subject: RecordEntry, key: Any) -> None:
        source = source_of(node)
        key = self.dict_key(key, "`d[key]`", source)
        if key not in subject.keys:
            raise SpecializeError(f"KeyError: {key!r} is not in the dict on the example's path ({source})")
        item = subject.get(key)
        if isinstance(item, KeyEntry):
            # A key the dict holds on some paths only: PyTorch raises KeyError on the others.
            if isinstance(item.present, Constant):
                held = Constant(int(bool(item.present.value)))
            else:
                held = self.emit_host("aten::Int.bool", (item.present,), "int", source)
            message = Constant(f"RuntimeError: KeyError: {key!r}")
            self.nodes.append(HostOp(CHECK_INDEX, (held, Constant(1), Constant(2), message), (), source))
            item = item.value
        self.bind(node.output(), item)

    def key_set_known(self, subject: RecordEntry, construct: str, source: str) -> None:
        if any(isinstance(item, KeyEntry) for item in subject.items):
            held = [k for k, item in zip(subject.keys, subject.items) if isinstance(item, KeyEntry)]
            raise SpecializeError(
                f"{construct} on a dict that holds {', '.join(map(repr, held))} on some paths only ({source}): "
                "which keys it holds is decided at run time; read those keys one by one (`if k in d:`)"
            )

    def visit_dict_method(self, node: torch._C.Node) -> None:
        """`k in d`, `d.keys()`, `.values()`, `.items()`, `d.get(k)`, `d.pop(k)`, `dict(d)`, `d.copy()`."""
        entries = [self.entry(v) for v in node.inputs()]
        subject = entries[0] if entries else None
        kind = node.kind()
        if entries and self.run_time_dict_op(node, entries, source_of(node)):
            return
        if not (isinstance(subject, RecordEntry) and subject.kind == "dict"):
            return self.visit_op(node)
        source = source_of(node)
        if kind == "aten::__contains__":
            key = self.dict_key(entries[1], "`key in d`", source)
            item = subject.get(key) if key in subject.keys else None
            self.bind(node.output(), item.present if isinstance(item, KeyEntry) else Constant(key in subject.keys))
            return
        if kind == "aten::get" and (len(entries) < 3 or is_none(entries[2])):
            key = self.dict_key(entries[1], "`d.get(key)`", source)
            item = subject.get(key) if key in subject.keys else Constant(None)
            self.bind(node.output(), OptionalEntry(item.present, item.value) if isinstance(item, KeyEntry) else item)
            return
        self.key_set_known(subject, f"{kind[6:]}()", source)
        if kind == "aten::keys":
            self.bind(node.output(), ListArg(tuple(Constant(k) for k in subject.keys)))
        elif kind == "aten::values":
            self.bind(node.output(), ListArg(subject.items))
        elif kind == "aten::items":
            pairs = tuple(TupleEntry((Constant(k), v)) for k, v in zip(subject.keys, subject.items))
            self.bind(node.output(), ListArg(pairs))
        elif kind in ("aten::get", "aten::pop"):
            key = self.dict_key(entries[1], f"`d.{kind[6:]}(key)`", source)
            default = entries[2] if len(entries) > 2 else Constant(None)
            if key not in subject.keys and kind == "aten::pop" and len(entries) < 3:
                raise SpecializeError(f"KeyError: {key!r} is not in the dict on the example's path ({source})")
            self.bind(node.output(), subject.get(key) if key in subject.keys else default)
            if kind == "aten::pop" and key in subject.keys:
                index = subject.keys.index(key)
                keys, items = list(subject.keys), list(subject.items)
                del keys[index], items[index]
                self.bind(node.inputsAt(0), RecordEntry("dict", "", tuple(keys), tuple(items)))
        else:  # aten::dict, aten::copy: a copy is the same record (every write makes a new one)
            self.bind(node.output(), subject)

    def visit_tuple_construct(self, node: torch._C.Node) -> None:
        items = tuple(self.entry(v) for v in node.inputs())
        fields = _namedtuple_fields(node)
        if fields is None:
            self.bind(node.output(), TupleEntry(items))
            note_inner_lists(self, node)
        else:
            name = str(node.output().type()).split(".")[-1]
            self.bind(node.output(), RecordEntry("namedtuple", name, fields, items))

    # -- objects -----------------------------------------------------------------------------
    def visit_create_object(self, node: torch._C.Node) -> None:
        name = node.output().type().name()
        self.bind(node.output(), RecordEntry("object", name, (), (), next(self.object_ids)))

    def visit_set_attr(self, node: torch._C.Node) -> None:
        subject, item = (self.entry(v) for v in node.inputs())
        if not isinstance(subject, RecordEntry):
            return self.visit_op(node)
        if subject.identity == SHARED:
            # TorchScript gives an attribute write no line; the written value's is the same line.
            source = source_of(node) or source_of(node.inputsAt(1).node())
            raise SpecializeError(
                f"`.{node.s('name')} = ...` writes a {subject.name} object that another name may or may not "
                f"hold, depending on a decision made at run time ({source}): objects are carried "
                "as values, so such a write cannot follow the object; make a new object instead "
                f"(`x = {subject.name}(...)`) or copy it before giving it a second name"
            )
        updated = subject.set(node.s("name"), item)
        self.bind(node.inputsAt(0), updated)
        # Other names of the same object see the write (a record is a value: find them). A name is
        # the same object if it was made by the same `CreateObject`, or holds the very same field
        # values (after a join, which forgets where an object was made). An object kept inside a
        # list, tuple or dict is not found: its write is not seen there.
        for key, entry in list(self.env.items()):
            if isinstance(entry, RecordEntry) and entry.kind == "object":
                if entry == subject or (subject.identity and entry.identity == subject.identity):
                    self.env[key] = updated

    def visit_get_attr(self, node: torch._C.Node) -> None:
        subject = self.entry(node.input())
        if isinstance(subject, Constant) and isinstance(subject.value, (torch.nn.Module, torch._C.ScriptModule)):
            # An attribute freezing did not fold into a constant: torch.jit.freeze keeps the
            # reads of a submodule's Optional attributes (nn.MultiheadAttention's `in_proj_bias`
            # under `is not None`). The frozen module holds its value, constant as the others.
            module = subject.value._c if isinstance(subject.value, torch.nn.Module) else subject.value
            value = module.getattr(node.s("name"))
            self.bind(node.output(), Constant(value.detach() if isinstance(value, torch.Tensor) else value))
            return
        if not isinstance(subject, RecordEntry):
            return self.visit_op(node)
        field = node.s("name")
        if field not in subject.keys:
            raise SpecializeError(f"{subject.describe()} has no attribute {field!r} here ({source_of(node)})")
        self.bind(node.output(), subject.get(field))

    def visit_context(self, node: torch._C.Node) -> None:
        """`prim::Enter` / `prim::Exit` of a `with`: a grad mode changes nothing the exporter computes."""
        subject = self.entry(node.input())
        if not (isinstance(subject, RecordEntry) and subject.name in _GRAD_MODES):
            name = subject.name if isinstance(subject, RecordEntry) else type(subject).__name__
            raise SpecializeError(
                f"a `with` statement on {name} ({source_of(node)}): only torch.no_grad(), enable_grad(), "
                "inference_mode() and set_grad_enabled() fold away; call the context's methods yourself"
            )
        self.bind(node.output(), Constant(None))

    # -- joining two paths -------------------------------------------------------------------
    def reconcile(self, a: Any, b: Any, nodes_a: list, nodes_b: list, source: str) -> tuple[Any, Any]:
        """Make two paths' entries for one value agree in structure: None on one path and a value on
        the other become Optionals; records join field by field; lists as `TensorLists.reconcile` does."""
        def unset(entry: Any) -> bool:
            return isinstance(entry, Constant) and entry.value is UNINITIALIZED

        if is_none(a) and not (is_none(b) or unset(b)):
            a = OptionalEntry(Constant(False), unset_like(b.value if isinstance(b, OptionalEntry) else b))
        elif is_none(b) and not (is_none(a) or unset(a)):
            b = OptionalEntry(Constant(False), unset_like(a.value if isinstance(a, OptionalEntry) else a))
        if isinstance(a, OptionalEntry) and not isinstance(b, OptionalEntry) and not unset(b):
            b = OptionalEntry(Constant(True), b)
        elif isinstance(b, OptionalEntry) and not isinstance(a, OptionalEntry) and not unset(a):
            a = OptionalEntry(Constant(True), a)
        if isinstance(a, OptionalEntry) and isinstance(b, OptionalEntry):
            x, y = self.reconcile(a.value, b.value, nodes_a, nodes_b, source)
            return OptionalEntry(a.present, x), OptionalEntry(b.present, y)
        if isinstance(a, KeyEntry) and isinstance(b, KeyEntry):
            x, y = self.reconcile(a.value, b.value, nodes_a, nodes_b, source)
            return KeyEntry(a.present, x), KeyEntry(b.present, y)
        if isinstance(a, RecordEntry) and isinstance(b, RecordEntry) and a.kind == b.kind == "dict":
            a, b = _same_keys(a, b), _same_keys(b, a)
            b = RecordEntry(b.kind, b.name, a.keys, tuple(b.get(k) for k in a.keys), b.identity)
        if isinstance(a, RecordEntry) and isinstance(b, RecordEntry):
            if a.keys != b.keys or a.kind != b.kind:
                missing = sorted(set(map(str, a.keys)) ^ set(map(str, b.keys)))
                raise SpecializeError(
                    f"{a.describe()} holds different keys on the two paths of a decision ({source}): "
                    f"{', '.join(missing) or 'in another order'}; a record is carried as one value per key, "
                    "so set every key on both paths (e.g. to a default) in the same order"
                )
            pairs = [self.reconcile(x, y, nodes_a, nodes_b, source) for x, y in zip(a.items, b.items)]
            identity = a.identity if a.identity == b.identity else 0
            return (
                RecordEntry(a.kind, a.name, a.keys, tuple(x for x, _ in pairs), identity),
                RecordEntry(b.kind, b.name, b.keys, tuple(y for _, y in pairs), identity),
            )
        return super().reconcile(a, b, nodes_a, nodes_b, source)

    def refuse_structured(self, node: torch._C.Node, entries: list, source: str) -> bool:
        """An op that cannot take a structured value gets a message that names it. Returns True if the
        op makes a string from run-time text (bound to a new RuntimeText)."""
        for entry in entries:
            if isinstance(entry, RuntimeText):
                if node.outputsSize() == 1 and str(node.output().type()) == "str":
                    self.bind(node.output(), RuntimeText(entry.source or source))
                    return True
                raise SpecializeError(
                    f"{node.kind()} reads a string made from run-time values ({source}; made at {entry.source}): "
                    "the exporter carries no strings at run time"
                )
            if isinstance(entry, OptionalEntry):
                raise SpecializeError(
                    f"{node.kind()} reads an Optional that is None on some paths and set on others ({source}): "
                    "test it first (`if x is not None:`), so that the op reads its value"
                )
            if isinstance(entry, RecordEntry):
                raise SpecializeError(f"{node.kind()} on {entry.describe()} is not supported ({source})")
        return False


def _same_keys(record: RecordEntry, other: RecordEntry) -> RecordEntry:
    """`record` holding every key of `other` too: a key only one of them holds is held on some paths
    only (a KeyEntry, unset where missing)."""
    items = []
    for key, item in zip(record.keys, record.items):
        one_sided = key not in other.keys or isinstance(other.get(key), KeyEntry)
        items.append(KeyEntry(Constant(True), item) if one_sided and not isinstance(item, KeyEntry) else item)
    keys = list(record.keys)
    for key, item in zip(other.keys, other.items):
        if key not in record.keys:
            keys.append(key)
            items.append(KeyEntry(Constant(False), unset_like(_item_value(item))))
    return RecordEntry(record.kind, record.name, tuple(keys), tuple(items), record.identity)


def _namedtuple_fields(node: torch._C.Node) -> tuple | None:
    """The field names of a NamedTuple that `prim::TupleConstruct` makes (None for a plain tuple).

    Python sees no names on torch's TupleType; the node's printed form has them:
    `%3 : NamedTuple(logits : Tensor, steps : int) = prim::TupleConstruct(...)`."""
    match = re.search(r":\s*NamedTuple\((.*)\)\s*=\s*prim::TupleConstruct", str(node))
    if match is None:
        return None
    fields, depth, current = [], 0, ""
    for char in match.group(1) + ",":
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        if char == "," and depth == 0:
            fields.append(current.split(":")[0].strip())
            current = ""
        else:
            current += char
    return tuple(fields)


# The specializer's handlers for these kinds (merged into the visitor's table).
STRUCTURED_HANDLERS = {
    "prim::unchecked_cast": StructuredValues.visit_unchecked_cast,
    "prim::DictConstruct": StructuredValues.visit_dict_construct,
    "aten::_set_item": StructuredValues.visit_set_item,
    "aten::__contains__": StructuredValues.visit_dict_method,
    "aten::keys": StructuredValues.visit_dict_method,
    "aten::values": StructuredValues.visit_dict_method,
    "aten::items": StructuredValues.visit_dict_method,
    "aten::get": StructuredValues.visit_dict_method,
    "aten::pop": StructuredValues.visit_dict_method,
    "aten::dict": StructuredValues.visit_dict_method,
    "aten::copy": StructuredValues.visit_dict_method,
    "prim::TupleConstruct": StructuredValues.visit_tuple_construct,
    "prim::CreateObject": StructuredValues.visit_create_object,
    "prim::SetAttr": StructuredValues.visit_set_attr,
    "prim::GetAttr": StructuredValues.visit_get_attr,
    "prim::Enter": StructuredValues.visit_context,
    "prim::Exit": StructuredValues.visit_context,
}
