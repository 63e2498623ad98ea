"""Searching run-time lists of ints in the compiled host, with no loop: tensor ops over all items at once.

A dict keyed by `str(tokens)` logs its keys' int lists as one list `values` cut at `bounds`
(`specialize.run_time_dicts`); `dycl::rfind_int_list(values, bounds, key)` is the index of the last
logged list equal to `key`, or -1. In `main` every logged list k is read at once: the ints at
`bounds[k] + j` for j < len(key), beside its length; list k matches where its length is len(key) and
every one of those ints equals key's. The largest k that matches, or -1 (one more candidate), is the
answer. A list shorter than the key reads past its end, into the next list or a spare int after
`values`, which its length already rules out. `a == b` of two int lists is the same search among one.
`min(xs)` and `max(xs)` of a list of ints are reductions, after PyTorch's check that xs is not empty.

Example:
    >>> sorted(SEARCH_OPS)[:3]
    ['aten::eq.int_list', 'aten::ne.int_list', 'dycl::rfind_int_list']
"""

from __future__ import annotations

from typing import Any

from ..program import HostOp, ListArg, Value
from .types import DTYPE_CODES, INT64_MAX, INT_LIST, CompiledHostUnsupported

_BOOLS = "!torch.vtensor<[?],i1>"
_TABLE = "!torch.vtensor<[?,?],si64>"
_ROW = "!torch.vtensor<[1],si64>"


def _arange(emitter: Any, end: str) -> str:
    """0, 1, ..., end - 1 as int64."""
    result, code, none = emitter.fresh(), emitter.fresh(), emitter.fresh()
    emitter.emit(f"{code} = torch.constant.int {DTYPE_CODES['int64']}")
    emitter.emit(f"{none} = torch.constant.none")
    emitter.emit(
        f"{result} = torch.aten.arange {end}, {code}, {none}, {none}, {none} : "
        f"!torch.int, !torch.int, !torch.none, !torch.none, !torch.none -> {INT_LIST}"
    )
    return result


def _slice(emitter: Any, items: str, start: str, end: str) -> str:
    result, zero, one = emitter.fresh(), emitter.constant(0, None)[0], emitter.constant(1, None)[0]
    emitter.emit(
        f"{result} = torch.aten.slice.Tensor {items}, {zero}, {start}, {end}, {one} : "
        f"{INT_LIST}, !torch.int, !torch.int, !torch.int, !torch.int -> {INT_LIST}"
    )
    return result


def _unsqueeze(emitter: Any, items: str, dim: int, result_type: str) -> str:
    result, at = emitter.fresh(), emitter.constant(dim, None)[0]
    emitter.emit(f"{result} = torch.aten.unsqueeze {items}, {at} : {INT_LIST}, !torch.int -> {result_type}")
    return result


def last_match(emitter: Any, values: str, starts: str, lengths: str, key: str, result: str) -> None:
    """`result` = the `!torch.int` index of the last list k (the ints of `values` from `starts[k]`, `lengths[k]`
    long) equal to `key`, or -1; all four are int64 tensors, `starts` and `lengths` equally long."""
    width, spare_at = emitter.tensor_size(key, INT_LIST, 0), emitter.tensor_size(values, INT_LIST, 0)
    one = emitter.constant(1, None)[0]
    # Every list read at its start plus 0..width-1, kept inside `values` and one spare int after it.
    column = _unsqueeze(emitter, starts, 1, "!torch.vtensor<[?,1],si64>")
    offsets = _unsqueeze(emitter, _arange(emitter, width), 0, "!torch.vtensor<[1,?],si64>")
    at, inside, spare, padded = emitter.fresh(), emitter.fresh(), emitter.fresh(), emitter.fresh()
    emitter.emit(
        f"{at} = torch.aten.add.Tensor {column}, {offsets}, {one} : "
        f"!torch.vtensor<[?,1],si64>, !torch.vtensor<[1,?],si64>, !torch.int -> {_TABLE}"
    )
    emitter.emit(f"{inside} = torch.aten.clamp_max {at}, {spare_at} : {_TABLE}, !torch.int -> {_TABLE}")
    spare = emitter.scalar_row(emitter.constant(0, None)[0], "int")
    emitter.concatenate([values, spare], [INT_LIST, _ROW], padded, INT_LIST)
    indices, read, same, row_same = emitter.fresh(), emitter.fresh(), emitter.fresh(), emitter.fresh()
    emitter.emit(f"{indices} = torch.prim.ListConstruct {inside} : ({_TABLE}) -> !torch.list<optional<vtensor>>")
    emitter.emit(
        f"{read} = torch.aten.index.Tensor {padded}, {indices} : {INT_LIST}, !torch.list<optional<vtensor>> -> {_TABLE}"
    )
    key_row = _unsqueeze(emitter, key, 0, "!torch.vtensor<[1,?],si64>")
    emitter.emit(
        f"{same} = torch.aten.eq.Tensor {read}, {key_row} : "
        f"{_TABLE}, !torch.vtensor<[1,?],si64> -> !torch.vtensor<[?,?],i1>"
    )
    false = emitter.constant(False, None)[0]
    # An empty key reads nothing: `all` of no ints is true, and only the empty lists match.
    emitter.emit(
        f"{row_same} = torch.aten.all.dim {same}, {one}, {false} : "
        f"!torch.vtensor<[?,?],i1>, !torch.int, !torch.bool -> {_BOOLS}"
    )
    long_enough, match, candidates, ranked, best = (emitter.fresh() for _ in range(5))
    emitter.emit(f"{long_enough} = torch.aten.eq.Scalar {lengths}, {width} : {INT_LIST}, !torch.int -> {_BOOLS}")
    emitter.emit(f"{match} = torch.aten.logical_and {row_same}, {long_enough} : {_BOOLS}, {_BOOLS} -> {_BOOLS}")
    minus_one = emitter.constant(-1, None)[0]
    indices_of_lists = _arange(emitter, emitter.tensor_size(starts, INT_LIST, 0))
    emitter.emit(
        f"{candidates} = torch.aten.where.ScalarOther {match}, {indices_of_lists}, "
        f"{minus_one} : {_BOOLS}, {INT_LIST}, !torch.int -> {INT_LIST}"
    )
    # -1 among the candidates: the answer where nothing matches, or where nothing was logged.
    emitter.concatenate([emitter.scalar_row(minus_one, "int"), candidates], [_ROW, INT_LIST], ranked, INT_LIST)
    emitter.emit(f"{best} = torch.aten.max {ranked} : {INT_LIST} -> !torch.vtensor<[],si64>")
    emitter.emit(f"{result} = torch.aten.Int.Tensor {best} : !torch.vtensor<[],si64> -> !torch.int")


def _rfind_int_list(emitter: Any, node: HostOp, result: str) -> str:
    """`dycl::rfind_int_list(values, bounds, key)`: list k is `values[bounds[k]:bounds[k + 1]]`."""
    values, bounds, key = (emitter.operand(arg, INT_LIST)[0] for arg in node.args)
    zero, minus_one, one = (emitter.constant(v, None)[0] for v in (0, -1, 1))
    starts = _slice(emitter, bounds, zero, minus_one)
    ends = _slice(emitter, bounds, one, emitter.constant(INT64_MAX, None)[0])
    lengths = emitter.fresh()
    emitter.emit(
        f"{lengths} = torch.aten.sub.Tensor {ends}, {starts}, {one} : {INT_LIST}, {INT_LIST}, !torch.int -> {INT_LIST}"
    )
    last_match(emitter, values, starts, lengths, key, result)
    return "!torch.int"


def _equal_int_lists(emitter: Any, node: HostOp, result: str, op: str) -> str:
    """`a == b` (or `!=`) of two int lists: is `b` list 0 of a log holding `a` alone."""
    first, second = (emitter.operand(arg, INT_LIST)[0] for arg in node.args)
    # Rows of a length hidden from the compiler: one it could see would be refined to static shapes
    # that the [?] ones after them no longer match ("unresolved target materialization").
    starts, lengths = emitter.fresh(), emitter.fresh()
    emitter.of_unknown_length(emitter.scalar_row(emitter.constant(0, None)[0], "int"), _ROW, 1, starts, INT_LIST)
    length = emitter.tensor_size(first, INT_LIST, 0)
    emitter.of_unknown_length(emitter.scalar_row(length, "int"), _ROW, 1, lengths, INT_LIST)
    found = emitter.fresh()
    last_match(emitter, first, starts, lengths, second, found)
    zero = emitter.constant(0, None)[0]
    emitter.emit(f"{result} = torch.aten.{op}.int {found}, {zero} : !torch.int, !torch.int -> !torch.bool")
    return "!torch.bool"


def _extreme(emitter: Any, node: HostOp, result: str, op: str) -> str:
    """`min(xs)` / `max(xs)` of a run-time list of ints, after PyTorch's check that it is not empty (a
    reduction of nothing has no value to give). Not of floats: `torch.aten.min` propagates a NaN,
    TorchScript's `min` of a list compares with `<` and may not."""
    (items_arg,) = node.args
    if isinstance(items_arg, ListArg) and items_arg.items:
        # A list built where it is read (`for i, h in enumerate(hs)` runs min([len(hs)]) times).
        items = [emitter.operand(item, "!torch.int")[0] for item in items_arg.items]
        so_far, others = items[0], items[1:] or items[:1]
        for k, item in enumerate(others):
            name = result if k == len(others) - 1 else emitter.fresh()
            emitter.emit(f"{name} = torch.prim.{op}.int {so_far}, {item} : !torch.int, !torch.int -> !torch.int")
            so_far = name
        return "!torch.int"
    if not isinstance(items_arg, Value):
        raise CompiledHostUnsupported(f"{op}() of a list built on the host ({node.source})")
    list_type, item_type = INT_LIST, "!torch.vtensor<[],si64>"
    items = emitter.operand(items_arg, list_type)[0]
    size, nonempty, extreme = emitter.fresh(), emitter.fresh(), emitter.fresh()
    zero = emitter.constant(0, None)[0]
    emitter.emit(f"{size} = torch.aten.size.int {items}, {zero} : {list_type}, !torch.int -> !torch.int")
    emitter.emit(f"{nonempty} = torch.aten.gt.int {size}, {zero} : !torch.int, !torch.int -> !torch.bool")
    message = emitter.message_text(f"RuntimeError: {op}() arg is an empty sequence", node.source)
    emitter.emit(f'torch.runtime.assert {nonempty}, "{message}"')
    emitter.emit(f"{extreme} = torch.aten.{op} {items} : {list_type} -> {item_type}")
    emitter.emit(f"{result} = torch.aten.Int.Tensor {extreme} : {item_type} -> !torch.int")
    return "!torch.int"


SEARCH_OPS = {
    "prim::min.self_int": lambda emitter, node, result: _extreme(emitter, node, result, "min"),
    "prim::max.self_int": lambda emitter, node, result: _extreme(emitter, node, result, "max"),
    "dycl::rfind_int_list": _rfind_int_list,
    "aten::eq.int_list": lambda emitter, node, result: _equal_int_lists(emitter, node, result, "eq"),
    "aten::ne.int_list": lambda emitter, node, result: _equal_int_lists(emitter, node, result, "ne"),
}
