"""Specialize's control flow: data-dependent `prim::If` and `prim::Loop` become Program `If`s and
`Loop`s; those the types decide are folded, and loops whose every decision is known are unrolled.

What a branch or loop mutates becomes an extra result or carried value; a value TorchScript leaves
uninitialized on one side (the result of a `return` inside a loop) gets a stand-in of its type.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from ..errors import DyclError, SpecializeError
from ..program import (
    REFINE,
    STAND_IN,
    Arg,
    Block,
    Constant,
    HostOp,
    If,
    ListArg,
    ListType,
    Loop,
    ScalarType,
    TensorType,
    Type,
    Value,
)
from .aliasing import mutated_outer
from .loop_exits import NEVER, going_on
from .mutation import mark_stale
from .ragged_lists import dims_read_along, fit_ragged_hint, ragged_positions
from .schemas import source_of
from .stand_ins import reuse_parameters
from .structured import (
    OptionalEntry,
    RecordEntry,
    conform,
    flatten_entries,
    mark_shared,
    unflatten_entries,
    unset_like,
)
from .values import (
    INT64_MAX,
    UNINITIALIZED,
    RaggedInts,
    RaggedList,
    TensorList,
    TupleEntry,
    TupleList,
    is_none,
    join_types,
    same_constant,
    structure_difference,
    tensor_type_of,
    tuples_of_constants,
    type_of,
    value_name,
)


class ControlFlow:
    """Visiting `prim::If` and `prim::Loop` (a mixin of the specializer)."""

    def visit_if(self, node: torch._C.Node) -> None:
        condition = self.entry(node.input())
        then_block, else_block = node.blocks()
        if isinstance(condition, Constant):
            chosen = then_block if condition.value else else_block
            self.visit_nodes(chosen.nodes())
            if not self.raised:
                for output, result in zip(node.outputs(), chosen.outputs()):
                    self.bind(output, self.entry(result))
            return
        label = f"if{next(self.labels)}"
        mutated = mutated_outer([then_block, else_block])
        saved_env = dict(self.env)
        then_nodes, then_results, then_raised = self.sub_block(then_block, (), mutated)
        self.env = dict(saved_env)
        else_nodes, else_results, else_raised = self.sub_block(else_block, (), mutated)
        self.env = saved_env
        source = source_of(node)
        if not then_raised and not else_raised:
            then_results = self.constant_tuples_apart(then_results, then_nodes, source)
            else_results = self.constant_tuples_apart(else_results, else_nodes, source)
            pairs = [_uninitialized_like(a, b) for a, b in zip(then_results, else_results)]
            pairs = self.join_each(pairs, [*node.outputs(), *mutated], then_nodes, else_nodes, source)
            then_results, else_results = [a for a, _ in pairs], [b for _, b in pairs]
        then_leaves, structure = flatten_entries(then_results)
        else_leaves, else_structure = flatten_entries(else_results)
        if not then_raised and not else_raised:
            names = [f"result {k}" for k in range(len(list(node.outputs())))]
            names += [f"`{value_name(m) or m.debugName()}`" for m in mutated]
            difference = structure_difference(then_results, else_results, names)
            if difference or structure != else_structure:
                raise SpecializeError(
                    f"the two sides of a branch give values of different structure ({source}): "
                    f"{difference or 'their tuples and lists differ'}"
                )
        if then_raised:
            structure = else_structure
        outputs: list[Value] = []
        joined: list[Any] = []
        then_yield: list[Arg] = []
        else_yield: list[Arg] = []
        raggeds = ragged_positions(structure)
        sides = [then_leaves] * (not then_raised) + [else_leaves] * (not else_raised)
        for index in range(len(else_leaves if then_raised else then_leaves)):
            a = None if then_raised else then_leaves[index]
            b = None if else_raised else else_leaves[index]
            if a is not None and b is not None and same_constant(a, b):
                joined.append(a)
                continue
            if (is_none(a) and (b is None or _unset(b))) or (is_none(b) and (a is None or _unset(a))):
                joined.append(Constant(None))  # None where it is read, never read on the other side
                continue
            type_a = None if a is None else type_of(a, source)
            type_b = None if b is None else type_of(b, source)
            type_ = fit_ragged_hint(join_types(type_a, type_b, source), index, raggeds, sides)
            if type_ is None:
                joined.append(a if a is not None else b)
                continue
            value = self.new_value(type_, "r")
            outputs.append(value)
            joined.append(value)
            # A side that raised yields a stand-in too: the compiled host's `if` must yield a value.
            then_yield.append(self.stand_in(Constant(UNINITIALIZED) if a is None else a, type_, then_nodes, source))
            else_yield.append(self.stand_in(Constant(UNINITIALIZED) if b is None else b, type_, else_nodes, source))
        self.nodes.append(
            If(
                condition,
                Block((), tuple(then_nodes), tuple(then_yield)),
                Block((), tuple(else_nodes), tuple(else_yield)),
                tuple(outputs),
                label,
                source,
            )
        )
        if then_raised and else_raised:
            self.raised = True
            return
        sides = [then_results] * (not then_raised) + [else_results] * (not else_raised)
        rebuilt = mark_shared(sides, unflatten_entries(structure, joined))
        ts_outputs = list(node.outputs())
        for output, entry in zip(ts_outputs, rebuilt[: len(ts_outputs)]):
            self.bind(output, entry)
        for ts_value, entry in zip(mutated, rebuilt[len(ts_outputs) :]):
            self.bind(ts_value, entry)
        mark_stale(self, mutated, source, keep={value.unique() for value in mutated})

    def join_each(self, pairs: list, ts_values: list, nodes_a: list, nodes_b: list, source: str) -> list:
        """`join_paths` of each pair, the model's value it stands for (`ts_values`, in order) named to
        `list_layout`: which dims `torch.cat` joins that list along decides its form."""
        joined = []
        for (a, b), ts_value in zip(pairs, ts_values):
            with self.laying_out(ts_value):
                joined.append(self.join_paths(a, b, nodes_a, nodes_b, source))
        return joined

    def join_paths(self, a: Any, b: Any, nodes_a: list, nodes_b: list, source: str) -> tuple[Any, Any]:
        """`reconcile` two paths' entries, where a list one path leaves unset (what a `return xs`
        inside a loop returns, on a path that did not return) takes the other path's form instead."""
        a, b = _unset_list_like(a, b)
        if not (_unset_list(a) or _unset_list(b)):
            a, b = self.reconcile(a, b, nodes_a, nodes_b, source)
        return _unset_list_like(a, b)

    def constant_tuples_apart(self, results: list, nodes: list, source: str) -> list:
        """`results` with every tuple TorchScript folded into one constant (`(zeros, ones)` on one
        side of a branch) as a tuple of its items, each tensor copied in `nodes`: the other side's
        tuple of run-time values then lines up with it, item by item."""
        if not any(_holds_constant_tuple(entry) for entry in results):
            return results
        leaves, structure = flatten_entries([tuples_of_constants(entry) for entry in results])
        with self.emitting_into(nodes):
            leaves = [self.materialize(leaf, source) for leaf in leaves]
        return unflatten_entries(structure, leaves)

    def stand_in(self, entry: Any, type_: Type, nodes: list, source: str) -> Any:
        """`entry`, or where it is uninitialized a value of `type_` in its place (appended to `nodes`).

        TorchScript leaves a value uninitialized on the side of a branch after which it is never
        read (the results of a `return` inside a loop, on the side that did not return). The
        Python host passes None along; the compiled host's `torch.prim.If` must yield a value of
        the result's type, so it gets a zero (a `STAND_IN` host op: a constant tensor there made
        iree-compile reject the branch, '!stream.resource<constant>' against '<external>')."""
        if not (isinstance(entry, Constant) and entry.value is UNINITIALIZED):
            return entry
        if isinstance(type_, ScalarType) and type_.kind in ("int", "float", "bool"):
            return Constant({"int": 0, "float": 0.0, "bool": False}[type_.kind])
        if isinstance(type_, TensorType):
            value = self.new_value(type_, "unset")
            nodes.append(HostOp(STAND_IN, (), (value,), source))
            return value
        if isinstance(type_, ListType):
            # A list (the `List[int]` a decoder returns from inside its loop): an empty one.
            value = self.new_value(ListType(type_.element, ()), "unset")
            nodes.append(HostOp("prim::ListConstruct", (), (value,), source))
            return value
        return entry

    def unroll(self, node: torch._C.Node, trip_count: Any, condition: Any, carried: list) -> bool:
        """Unroll a loop whose every decision is known at export time; False (nothing emitted) if not.

        `for i in range(x.size(0))` over a static dim, or `while i < 3` over a constant `i`, decides
        nothing at run time: unrolled, each iteration sees its index as a constant, so a value that
        is None before the loop and set in it (torchaudio's emformer), a list that grows, or sizes
        computed from the index fold as they do in the literal `range(3)`, which TorchScript
        unrolls itself. A loop that exits on a run-time condition, or runs more than
        `UNROLL_LIMIT` iterations, stays a loop (the walk so far is undone).
        """
        if not (isinstance(condition, Constant) and isinstance(trip_count, Constant)):
            return False
        if UNROLL_LIMIT < trip_count.value < INT64_MAX:
            return False
        (body,) = node.blocks()
        label = next(self.labels)
        self.labels = itertools.count(label)
        # The node list itself too: a visit that fails inside a branch leaves `self.nodes` the
        # branch's list (`sub_block` restores it on success only).
        saved = (self.nodes, len(self.nodes), dict(self.env), dict(self.dim_sources), dict(self.views), self.raised)

        def undo() -> bool:
            self.nodes, length, self.env, self.dim_sources, self.views, self.raised = saved
            del self.nodes[length:]
            self.labels = itertools.count(label)  # the loop's labels are those it had not unrolled
            return False

        entries = list(carried)
        for index in itertools.count():
            if index == trip_count.value:
                break
            if index == UNROLL_LIMIT:
                return undo()
            for ts_param, entry in zip(body.inputs(), [Constant(index), *entries]):
                self.bind(ts_param, entry)
            try:
                with self.at_iteration(index):
                    self.visit_nodes(body.nodes())
            except DyclError:
                # Visited as a loop (index and carried values known only at run time), the body
                # may still export: the loop's own path decides.
                return undo()
            if self.raised:
                return True  # every input that reaches this iteration raises: nothing after it runs
            keep_going, *entries = [self.entry(v) for v in body.outputs()]
            if not isinstance(keep_going, Constant):
                return undo()
            if not keep_going.value:
                break
        for output, entry in zip(node.outputs(), entries):
            self.bind(output, entry)
        return True

    def visit_loop(self, node: torch._C.Node) -> None:
        inputs = [self.entry(v) for v in node.inputs()]
        trip_count, condition, carried = inputs[0], inputs[1], inputs[2:]
        ts_outputs = list(node.outputs())
        if (isinstance(condition, Constant) and not condition.value) or (
            isinstance(trip_count, Constant) and trip_count.value <= 0
        ):
            for output, entry in zip(ts_outputs, carried):
                self.bind(output, entry)
            return
        if self.unroll(node, trip_count, condition, carried):
            return
        # The index is typed at its first iteration (0); where that types some dim made from it
        # with an example of 0 or 1 (which torch.export would fix), raised to 2 (`zeros(1, i)`
        # next to `ones(1, n - i)`: the two no longer add up to n), at a later iteration if that
        # raises fewer. Sizes made from the index can be 0 or 1 at a later iteration alone
        # (Emformer's last segment, with no frame after it), so neither is always the better.
        later = _index_hint(_trip_hint(trip_count))
        label = next(self.labels)
        self.labels = itertools.count(label)
        # A visit that fails may leave the walk inside the body (`sub_block` restores on success).
        nodes, length, raised = self.nodes, len(self.nodes), self.raised
        saved = (dict(self.env), dict(self.dim_sources), dict(self.views), set(self.unlinked_views))
        inner_lists = {key: list(holders) for key, holders in self.inner_lists.items()}

        def visit_at(index_hint: int) -> int:
            """Visit the loop with the index's example `index_hint`; how many hints it raised."""
            self.env, self.dim_sources, self.views, self.unlinked_views = (
                dict(saved[0]),
                dict(saved[1]),
                dict(saved[2]),
                set(saved[3]),
            )
            self.inner_lists = {key: list(holders) for key, holders in inner_lists.items()}
            self.nodes, self.raised = nodes, raised
            del self.nodes[length:]
            self.labels = itertools.count(label)
            before = self.raised_hints
            self.visit_run_time_loop(node, trip_count, condition, carried, index_hint)
            return self.raised_hints - before

        if later == 0:
            return self.visit_run_time_loop(node, trip_count, condition, carried, 0)
        try:
            first = visit_at(0)
        except DyclError:
            try:
                visit_at(later)
                return
            except DyclError:
                pass
            visit_at(0)  # raises the first iteration's error
        if first == 0:
            return
        try:
            if visit_at(later) < first:
                return
        except DyclError:
            pass
        visit_at(0)

    def visit_run_time_loop(
        self, node: torch._C.Node, trip_count: Any, condition: Any, carried: list, index_hint: int
    ) -> None:
        """A loop that stays one in the Program, its index typed with the example `index_hint`."""
        (body,) = node.blocks()
        source = source_of(node)
        ts_outputs = list(node.outputs())
        label = f"loop{next(self.labels)}"
        mutated = mutated_outer([body])
        # A list of tuples TorchScript folded into constants (`hyps = [([blank], 0.0)]`) is carried
        # item by item, as the body's tuples of run-time values are.
        initial = self.constant_tuples_apart(list(carried) + [self.entry(m) for m in mutated], self.nodes, source)
        initial_leaves, structure = flatten_entries(initial)
        initial_leaves = [self.materialize(leaf, source) for leaf in initial_leaves]
        types = [_carried_type(leaf, source) for leaf in initial_leaves]
        trips = _trip_hint(trip_count)
        for _attempt in range(8):
            index = self.new_value(ScalarType("int", index_hint), "i")
            # A None the loop starts with is the constant None in the body until the body sets it.
            params = [Constant(None) if t is _NONE else self.new_value(t, "c") for t in types]
            saved_env = dict(self.env)
            entries = mark_shared([initial], unflatten_entries(structure, params))
            for ts_value, entry in zip(mutated, entries[len(carried) :]):
                self.bind(ts_value, entry)
            with self.at_iteration(index_hint):
                body_nodes, results, raised = self.sub_block(body, [index] + entries[: len(carried)], mutated)
            self.env = saved_env
            if raised:
                raise SpecializeError(f"a loop body that always raises ({source})")
            # An Optional the loop carries: the body's value or None is a set or unset Optional.
            results = [results[0], *(conform(r, like) for r, like in zip(results[1:], entries))]
            result_leaves, result_structure = flatten_entries(results[1:])
            set_in_body = result_structure == structure and any(
                t is _NONE and not is_none(leaf) for t, leaf in zip(types, result_leaves)
            )
            if result_structure != structure or set_in_body:
                # A `return` inside the loop: TorchScript carries the returned tuple, uninitialized
                # until the body returns; it takes the structure of what the body returns.
                adapted = [_unset_list_like(*_uninitialized_like(a, b))[0] for a, b in zip(initial, results[1:])]
                if flatten_entries(adapted)[1] != structure:
                    initial = adapted
                    initial_leaves, structure = flatten_entries(initial)
                    types = _adapted_types(initial, results[1:], source)
                    continue
                # A list of tensors that the body appends to: carry it as a TensorList; a None the
                # body sets: carry it as an Optional, typed by the value the body set. Visit again.
                # An empty list's tensors take their dynamic sizes from those the loop starts from.
                self.size_witnesses = initial_leaves
                self.read_along = dims_read_along(mutated)
                try:
                    pairs = self.join_each(
                        list(zip(initial, results[1:])), [*ts_outputs, *mutated], self.nodes, [], source
                    )
                finally:
                    self.size_witnesses, self.read_along = [], set()
                reconciled = [a for a, _ in pairs]
                if flatten_entries(reconciled)[1] == structure:
                    raise SpecializeError(f"a loop-carried tuple changes structure between iterations ({source})")
                initial = reconciled
                initial_leaves, structure = flatten_entries(initial)
                initial_leaves = [self.materialize(leaf, source) for leaf in initial_leaves]
                set_leaves = flatten_entries([b for _, b in pairs])[0]
                types = [
                    _carried_type(set_leaf if _unset(leaf) else leaf, source)
                    for leaf, set_leaf in zip(initial_leaves, set_leaves)
                ]
                continue
            # The next iteration sees what the paths that go on yield (`loop_exits`).
            going = going_on(result_leaves, results[0], body_nodes, source)
            new_types = [_join_carried(t, leaf, source, g) for t, leaf, g in zip(types, result_leaves, going)]
            raggeds = ragged_positions(structure)
            new_types = [
                fit_ragged_hint(t, position, raggeds, [params, result_leaves]) for position, t in enumerate(new_types)
            ]
            if trips is not None:
                # Each dim that grows by the same amount every iteration is typed in the body
                # at the size it has at the index's example iteration, not at the join of its
                # sizes so far: what the body reads of it (a list's items, its length) then
                # agrees with the sizes the index makes (`_index_hint`).
                new_types = [
                    _after_trips(t, first, param, last, index_hint)
                    for t, first, param, last in zip(new_types, initial_leaves, params, result_leaves)
                ]
            if new_types == types:
                break
            types = new_types
        else:
            raise SpecializeError(f"the types of loop-carried values do not settle ({source})")
        # A None the body never sets is no carried value: the loop's result is None.
        count, kept = len(types), [k for k, t in enumerate(types) if t is not _NONE]
        types, params = [types[k] for k in kept], [params[k] for k in kept]
        initial_leaves, result_leaves = [initial_leaves[k] for k in kept], [result_leaves[k] for k in kept]
        # A slot the body leaves unset (an Optional that an iteration does not set) keeps its value.
        result_leaves = [param if _unset(leaf) else leaf for leaf, param in zip(result_leaves, params)]
        # A slot a `break` yields at another size than the paths that go on: the loop carries the
        # join of both, narrowed to what the body was typed with at the top of the body.
        refined = []
        for position, (param, leaf) in enumerate(zip(params, result_leaves)):
            carried = _join_carried(types[position], leaf, source)
            if isinstance(carried, TensorType) and carried.shape != types[position].shape:
                params[position], types[position] = self.new_value(carried, "c"), carried
                refined.append(HostOp(REFINE, (params[position],), (param,), source))
        after = [
            _after_trips(t, first, param, last, trips)
            for t, first, param, last in zip(types, initial_leaves, params, result_leaves)
        ]
        after = self.observed_after_loop(node, [*ts_outputs, *mutated], initial, kept, after)
        outputs = tuple(self.new_value(t, "c") for t in after)
        # Inside the body, a slot's stand-ins are the slot's previous value (`stand_ins`).
        body_nodes = refined + list(reuse_parameters(Block((), tuple(body_nodes), ()), result_leaves, params)[0].nodes)
        # What the loop carries uninitialized (the value of a `return` inside it, until it returns)
        # starts as a stand-in of its type: the compiled host's loop must carry a value.
        initial_leaves = [self.stand_in(leaf, t, self.nodes, source) for leaf, t in zip(initial_leaves, types)]
        self.nodes.append(
            Loop(
                trip_count,
                condition,
                tuple(initial_leaves),
                Block((index, *params), tuple(body_nodes), (results[0], *result_leaves)),
                outputs,
                label,
                source,
            )
        )
        loop_results = iter(outputs)
        leaves = [next(loop_results) if k in kept else Constant(None) for k in range(count)]
        rebuilt = mark_shared([initial, results[1:]], unflatten_entries(structure, leaves))
        for output, entry in zip(ts_outputs, rebuilt[: len(ts_outputs)]):
            self.bind(output, entry)
        for ts_value, entry in zip(mutated, rebuilt[len(ts_outputs) :]):
            self.bind(ts_value, entry)
        mark_stale(self, mutated, source, keep={value.unique() for value in mutated})


# Loops whose every decision is known at export time are unrolled up to this many iterations (each
# iteration's ops are emitted again; a longer loop stays a loop).
UNROLL_LIMIT = 64


def _trip_hint(trip_count: Any) -> int | None:
    """The example number of iterations of a loop that runs a known number of times (`range(n)`,
    its hint where n is known only at run time), or None for a loop that runs while a condition
    holds."""
    if isinstance(trip_count, Constant):
        hint = trip_count.value
    elif isinstance(trip_count, Value) and isinstance(trip_count.type, ScalarType):
        hint = trip_count.type.hint
    else:
        return None
    return hint if isinstance(hint, int) and 0 <= hint < INT64_MAX else None


def _index_hint(trips: int | None) -> int:
    """The later iteration a loop's index may be typed at (`visit_loop`): 2 where the loop runs more
    than twice, so that sizes made from it (`torch.zeros(1, i)`, `n - i`) have examples of at least
    2 on both sides. At the index 0, `torch.cat([zeros(1, i), ones(1, n - i)], 1)` was typed n + 2
    wide (the empty side's dim typed dynamic with the example 2, as torch.export fixes dims of 0
    and 1) where it is n wide, and adding it to an n-wide tensor failed to type."""
    return 0 if trips is None else max(0, min(2, trips - 1))


def _after_trips(type_: Any, first: Any, param: Any, last: Any, trips: int | None) -> Any:
    """`type_` (what a loop carries), with each dynamic dim that grows by the same amount every
    iteration given the example size it has after `trips` iterations (its first size plus that
    many steps): the loop's example number of them for its result, the index's example in the body.

    A list appended to once per row of the batch (`for t in range(h.shape[0]): rows.append(h[t])`)
    is as long as the batch: typed by the join of its first sizes (0, then 1) it was 2 long, and
    `torch.stack(rows) + h` failed to type wherever the batch's example was not 2. The step is
    the body's result size less its parameter's; a dim that shrinks or does not change keeps the
    carried hint. Only hints change: which dims are dynamic stays as the loop's join decided."""
    if trips is None or not isinstance(type_, TensorType):
        return type_
    first_type, param_type, last_type = (tensor_type_of(entry) for entry in (first, param, last))
    if first_type is None or param_type is None or last_type is None:
        return type_
    if not first_type.rank == param_type.rank == last_type.rank == type_.rank:
        return type_
    hint = list(type_.hint)
    for dim, size in enumerate(type_.shape):
        step = last_type.hint[dim] - param_type.hint[dim]
        # Measured from a parameter of run-time size: from the loop's first sizes, a dim that only
        # its first append sizes (a list's tensors as wide as the frames, empty before) would seem
        # to grow by that size every iteration.
        if size is None and param_type.shape[dim] is None and step > 0:
            hint[dim] = max(2, first_type.hint[dim] + step * trips)
    return TensorType(type_.dtype, type_.shape, tuple(hint))


def _holds_constant_tuple(entry: Any) -> bool:
    if isinstance(entry, Constant):
        return isinstance(entry.value, tuple)
    return isinstance(entry, (TupleEntry, ListArg)) and any(_holds_constant_tuple(item) for item in entry.items)


def _uninitialized_like(a: Any, b: Any) -> tuple[Any, Any]:
    """An uninitialized value takes the structure of the other side's entry. TorchScript yields
    one (`prim::Uninitialized`) on the side of a branch that does not `return`; when the returned
    value is a tuple (`return output, output_id` inside SDN's loop over blocks), an Optional or a
    record, the other side's entry is one."""

    def like(entry: Any, other: Any) -> Any:
        if isinstance(entry, Constant) and entry.value is UNINITIALIZED:
            if isinstance(other, (TupleEntry, OptionalEntry, RecordEntry)):
                return unset_like(other)
        elif isinstance(entry, TupleEntry) and isinstance(other, TupleEntry) and len(entry.items) == len(other.items):
            return TupleEntry(tuple(like(e, o) for e, o in zip(entry.items, other.items)))
        elif isinstance(entry, OptionalEntry) and isinstance(other, OptionalEntry):
            return OptionalEntry(entry.present, like(entry.value, other.value))
        return entry

    return like(a, b), like(b, a)


def _unset_list_like(a: Any, b: Any) -> tuple[Any, Any]:
    """A list that one side of a branch leaves uninitialized (what a `return xs` inside a loop
    returns, on the side that did not return) takes the structure of the other side's list, once
    that is reconciled (a list of run-time length by then, in the loop's later visits)."""
    if isinstance(a, TupleEntry) and isinstance(b, TupleEntry) and len(a.items) == len(b.items):
        pairs = [_unset_list_like(x, y) for x, y in zip(a.items, b.items)]
        return TupleEntry(tuple(x for x, _ in pairs)), TupleEntry(tuple(y for _, y in pairs))
    lists = (ListArg, TensorList, RaggedList, TupleList, RaggedInts)
    if _wholly_unset(a) and isinstance(b, lists) and not _wholly_unset(b):
        return unset_like(b), b
    if _wholly_unset(b) and isinstance(a, lists) and not _wholly_unset(a):
        return a, unset_like(a)
    return a, b


def _unset_list(entry: Any) -> bool:
    """An unset list, or a tuple of unset values (what a `return` inside a loop leaves unset): it has
    nothing to reconcile with the other side, whose structure it takes (`_unset_list_like`)."""
    lists = (ListArg, TensorList, RaggedList, TupleList, RaggedInts, TupleEntry)
    return isinstance(entry, lists) and _wholly_unset(entry)


def _wholly_unset(entry: Any) -> bool:
    """Uninitialized, or a list whose every part is (the stand-in of an unset list)."""
    if isinstance(entry, (ListArg, TupleEntry)):
        return bool(entry.items) and all(_wholly_unset(item) for item in entry.items)
    if isinstance(entry, TensorList):
        return _unset(entry.value)
    if isinstance(entry, RaggedList):
        return _unset(entry.value)
    if isinstance(entry, RaggedInts):
        return _unset(entry.values)
    if isinstance(entry, TupleList):
        return all(_wholly_unset(field) for field in entry.fields)
    return _unset(entry)


def _carried_type(leaf: Any, source: str) -> Any:
    """The type a loop carries a leaf with; `_NONE` for a None (carried as the constant until the
    body sets it, then as an Optional)."""
    return _NONE if is_none(leaf) else type_of(leaf, source)


def _adapted_types(initial: list, results: list, source: str) -> list:
    """The carried types of the leaves of `initial`, where the loop's start takes the structure of
    what the body returns. A leaf the start leaves unset takes the type of the body's leaf in its
    place, in each entry (or tuple item) that has the body's structure: an Optional that the body
    sets and that the start leaves unset (`st` in `if st is None: st = zeros_like(h) else: st = st
    * 0.5`) is read in the body's next visit, which needs its type (fuzzer seed 80180: "cannot
    compute its result type" for `st * 0.5`). Entry by entry, since another entry can differ while
    the loop still reconciles it: the tuple a `return` inside the loop leaves unset holds the list
    as it started (empty) where the body's holds it grown (fuzzer seed 135006)."""
    types: list = []
    for entry, result in zip(initial, results):
        types.extend(_adapted_entry_types(entry, result, source))
    return types


def _adapted_entry_types(entry: Any, result: Any, source: str) -> list:
    leaves, structure = flatten_entries([entry])
    set_leaves, set_structure = flatten_entries([result])
    if set_structure == structure:
        return [_carried_type(set_leaf if _unset(leaf) else leaf, source) for leaf, set_leaf in zip(leaves, set_leaves)]
    if isinstance(entry, TupleEntry) and isinstance(result, TupleEntry) and len(entry.items) == len(result.items):
        return _adapted_types(list(entry.items), list(result.items), source)
    return [_carried_type(leaf, source) for leaf in leaves]


def _join_carried(a: Any, b: Any, source: str, b_type: Any = None) -> Any:
    """The type a loop carries after an iteration that yields `b` (of type `b_type` where given:
    the type on the paths that go on, or `NEVER` where none does)."""
    if a is _NONE or (a is None and is_none(b)):  # None, or unset until the body sets it to None
        return _NONE if is_none(b) or _unset(b) else type_of(b, source)
    if b_type is NEVER:
        return a
    return join_types(a, None if is_none(b) else b_type or type_of(b, source), source)


_NONE = object()


def _unset(leaf: Any) -> bool:
    return isinstance(leaf, Constant) and leaf.value is UNINITIALIZED
