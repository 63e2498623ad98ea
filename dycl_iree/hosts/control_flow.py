"""The compiled host's control flow: Program `If`s as `torch.prim.If`, `Loop`s as the while-like
`torch.prim.Loop` IREE 3.13 lowers right, with `util.optimization_barrier`s where IREE's conversions
of `scf.while` break (README, "Known traps": the loop-narrowing crash and the zero-tensor loop).
"""

from __future__ import annotations

from ..program import (
    REFINE,
    Arg,
    Block,
    Constant,
    HostOp,
    If,
    ListType,
    Loop,
    Program,
    SegmentCall,
    TensorType,
    Value,
    arg_values,
    iter_nodes,
    node_inputs,
    sub_blocks,
)
from .types import INT64_MAX, mlir_type


class ControlFlowEmitter:
    """Branches and loops of `main` (a mixin of the compiled host's emitter)."""

    def region_results(self, block: Block, types: list[str]) -> list[str]:
        return [self.operand(arg, want)[0] for arg, want in zip(block.results, types)]

    def if_(self, node: If) -> None:
        condition, _ = self.operand(node.condition, "!torch.bool")
        types = [mlir_type(v.type) for v in node.outputs]
        carriers = _carriers(types)
        result = self.fresh()
        count = len(types)
        prefix = "" if count == 0 else (f"{result} = " if count == 1 else f"{result}:{count} = ")
        self.emit(f"{prefix}torch.prim.If {condition} -> ({', '.join(carriers)}) {{")
        self.where.append(self.located(node.label, node.source))
        for index, block in enumerate((node.then_block, node.else_block)):
            if index == 1:
                self.emit("} else {")
            self.depth += 1
            saved = dict(self.names), dict(self.types)
            self.block(block)
            # A side that yields two tensors that may be one buffer (one value twice, or two stand-ins
            # IREE merges) gets a copy for the second: the VM moves the ref (`distinct`).
            yields = self.region_results(block, types)
            # Two tensors of one type on the side may be one buffer even where the `if` widens
            # one of them (fuzzer seed 121002: `h` and `torch.cat(ts + [h])` of an empty `ts`,
            # which IREE folds into `h`; the second result is as long as the other side's rows):
            # they are told apart by their own types.
            own = [_own_type(arg, want) for arg, want in zip(block.results, types)]
            yields = self.apart(self.distinct(self.widened(yields, types), types, keys=own), carriers, alone=True)
            suffix = f" {', '.join(yields)} : {', '.join(carriers)}" if types else ""
            self.emit(f"torch.prim.If.yield{suffix}")
            self.names, self.types = saved
            self.depth -= 1
        self.emit(f"}} loc({self.where.pop()})")
        for position, (value, type_text) in enumerate(zip(node.outputs, types)):
            self.define(value, self.narrowed(result if count == 1 else f"{result}#{position}", type_text), type_text)

    def loop(self, node: Loop) -> None:
        """A loop as `scf.if (start) { scf.while do-while }`, its carried values in builtin types.

        Written out here rather than as `torch.prim.Loop`: torch-mlir lowers that to an `scf.while`
        whose first argument is the carried condition, which IREE 3.13 lowers right in only some
        places; elsewhere its stream conversion shifts the other arguments by one ("failed to legalize
        unresolved target materialization from ('i64') to ('!stream.resource<*>', 'index')", about 8%
        of the fuzzer's programs, e.g. a `for` with a `break` inside an `if`). The do-while form, body
        in the `before` region and the condition computed there, is the one IREE handles everywhere,
        and an `scf.while` has none of `torch.prim.Loop`'s trip-count traps (ENVIRONMENT.md).
        """
        types = [mlir_type(v.type) for v in node.outputs]
        carried = ["!torch.int", *_carriers(types)]
        builtins = [_builtin_type(type_text) for type_text in carried]
        if None in builtins:
            return self.prim_loop(node)
        trip, _ = self.operand(node.trip_count, "!torch.int")
        initial = [self.operand(arg, want)[0] for arg, want in zip(node.initial, types)]
        # A for-like loop (no `break`): the tensors it grows pass barriers with their sizes (see
        # `barrier_all`); in a loop with an exit those barriers broke a list grown after a `return`.
        for_like = isinstance(node.body.results[0], Constant) and node.body.results[0].value is True
        # ... but not inside another loop: there the barrier on a tensor the body reads gave the
        # loop a zero tensor (`for i: if c: break; h = h + 0.1; for j: h = h * 0.5`, dynamic
        # batch, fuzzer seed 73004), the trap `barrier_all` describes.
        enclosing = self.enclosing_loops
        grows = for_like and enclosing == 0
        # In a loop with an exit, the tensors with a dynamic dim on entry (`_dynamic`).
        held = [not grows and enclosing == 0 and _dynamic(arg) for arg in node.initial]
        spare = _starts_without_rows(node)
        initial = [self.with_spare_row(n, t) if p in spare else n for p, (n, t) in enumerate(zip(initial, types))]
        initial = self.widened(initial, types)
        # A tensor that enters with data and a leading size the compiler knows gets a size IREE
        # cannot fold (`with_opaque_sizes`). Not one that enters empty (a list that starts as
        # `[]`): made opaque, the list of `test_a_list_grown_after_a_return_from_nested_loops` came
        # out of a buffer too small for it; nor one whose size is already a run-time one: made
        # opaque there, iree-compile rejected two fuzzer programs ("failed to legalize operation
        # 'tensor.cast'", "unresolved target materialization from ('index')").
        # Only in a loop with an exit: a for-like loop's grown tensors pass the barrier at the top of
        # the body (`barrier_all`), and there the copy made a Vulkan run of `growing_sequence` wrong
        # now and then.
        initial = [
            self.with_opaque_sizes(name, type_text) if not for_like and _enters_with_a_known_size(arg) else name
            for arg, name, type_text in zip(node.initial, initial, types)
        ]
        initial = self.distinct(initial, types)
        zero = self.constant(0, None)[0]
        # A tensor with a dynamic dim enters behind a barrier even when it is the only one: IREE's
        # stream passes may place it in a buffer shared with other results of the same dispatches,
        # at the offset `util.align(size of the one before, 64)`, and the integer range analysis
        # (`iree-util-optimize-int-arithmetic`) folds the loop argument carrying that offset to the
        # 0 the back edge passes, so the loop read the other result's rows (fuzzer seed 80047; README,
        # "Known traps"). Behind a barrier the tensor enters as a buffer of its own, at offset 0.
        initial = self.apart(initial, carried[1:], alone=True, sizes_too=grows)
        entry_values = [self.to_builtin(name, type_text) for name, type_text in zip([zero, *initial], carried)]
        listed = ", ".join(builtins)
        count = len(builtins)
        start_bit = self.edge_condition(zero, trip, node.condition)
        result, looped = self.fresh(), self.fresh()
        self.emit(f"{result}:{count} = scf.if {start_bit} -> ({listed}) {{")
        self.depth += 1
        arguments = [self.fresh() for _ in builtins]
        bindings = ", ".join(f"{a} = {v}" for a, v in zip(arguments, entry_values))
        self.emit(f"{looped}:{count} = scf.while ({bindings}) : ({listed}) -> ({listed}) {{")
        self.depth += 1
        self.where.append(self.located(node.label, node.source))
        saved = dict(self.names), dict(self.types)
        read = _values_read(node.body)
        unread = [False] + [param not in read for param in node.body.params[1:]]
        # ... and the values the body makes larger (`_grows`), in nested loops too.
        # A list of tensors that starts empty in a loop with an exit grows however the example went
        # (seed 75127: appended after an inner loop, on a path the example did not take).
        empty = [not for_like and enclosing == 0 and _starts_empty(arg) for arg in node.initial]
        # Inside another loop, a loop with an exit grows what a concatenation in its body makes
        # (a list of tensors appended to, `acc = torch.cat([acc, h])`), whatever the example did:
        # without the barrier, IREE wrote the appended rows into the buffer of the list's size
        # before the loops (OUT_OF_RANGE, "buffer byte_length=0": a list that starts empty,
        # appended in a `for` with a `break` inside a `while`, fuzzer seed 80004).
        concatenated = [
            not for_like and enclosing > 0 and isinstance(result, Value) and result in self.concatenated
            for result in node.body.results[1:]
        ]
        grown = [False] + [
            grows
            or starts_empty
            or by_concatenation
            or isinstance(param.type, ListType)
            or ((for_like or hold) and _grows(param, result))
            for param, result, hold, starts_empty, by_concatenation in zip(
                node.body.params[1:], node.body.results[1:], held, empty, concatenated
            )
        ]
        # A held tensor the body does not grow enters bare: behind a barrier of its own, a tensor
        # computed before the loop reached the body as zeros (`h = pool(h) + h`, then a loop with
        # a `break`, dynamic batch: fuzzer seed 75295). One the body reads only narrowed to static
        # sizes (`REFINE`: a slot a `break` yields at another size) passes its sizes through
        # barriers, the tensor bare: nothing else reads its dynamic size, and the canonicalizer
        # dropped it (SIGSEGV in `ScfWhileOpConversion`, as `barrier_all` says).
        refined = {n.args[0] for n in node.body.nodes if isinstance(n, HostOp) and n.target == REFINE}
        sized = [False] + [param in refined for param in node.body.params[1:]]
        kept = self.barrier_all(arguments, builtins, unread=unread, grown=grown, sized=sized)
        counter, *params = [self.from_builtin(a, type_text) for a, type_text in zip(kept, carried)]
        params = [self.narrowed(name, type_text) for name, type_text in zip(params, types)]
        params = [self.without_spare_row(n, t) if p in spare else n for p, (n, t) in enumerate(zip(params, types))]
        self.loop_carried.update(params)  # `checks.CheckedCalls.gated` leaves them alone
        self.enclosing_loops = enclosing + 1
        following, next_values, _ = self.loop_body(node, counter, params, types, trip)
        self.enclosing_loops = enclosing
        next_values = [
            self.with_spare_row(n, t) if p in spare else n for p, (n, t) in enumerate(zip(next_values, types))
        ]
        next_values = self.apart(self.distinct(self.widened(next_values, types), types, by_type=False), carried[1:])
        next_builtins = [self.to_builtin(n, t) for n, t in zip([following, *next_values], carried)]
        # Inside another loop, too, a tensor with a dynamic dim on entry passes its sizes on through
        # barriers: there the canonicalizer dropped the size of a dict's value that the inner loop
        # passes on (`for: for: d["k"] = h * 2.0; if c: return h, d`, dynamic batch), and the
        # loop's arguments no longer matched ("region branch point has 12 operands, but region
        # successor needs 13 inputs"). So in a for-like loop: there the sizes it passes on were all
        # the batch read at the top of the body, and the same was dropped of a dict's value or a
        # tensor the body sets from `h` (fuzzer seed 90058).
        passed_sized = [h or ((enclosing > 0 or grows) and _dynamic(arg)) for h, arg in zip(held, node.initial)]
        next_builtins = [
            self.builtin_barrier(n, b, sizes_too=h) for n, b, h in zip(next_builtins, builtins, [False, *passed_sized])
        ]
        go_bit = self.edge_condition(following, trip, node.body.results[0])
        self.emit(f"scf.condition({go_bit}) {', '.join(next_builtins)} : {listed}")
        self.names, self.types = saved
        self.depth -= 1
        after = [self.fresh() for _ in builtins]
        self.emit("} do {")
        self.emit(f"^bb0({', '.join(f'{a}: {t}' for a, t in zip(after, builtins))}):")
        self.emit(f"  scf.yield {', '.join(after)} : {listed}")
        self.emit(f"}} loc({self.where[-1]})")  # an error about the scf.while names the loop
        self.emit(f"scf.yield {', '.join(f'{looped}#{i}' for i in range(count))} : {listed}")
        self.depth -= 1
        self.emit("} else {")
        self.emit(f"  scf.yield {', '.join(entry_values)} : {listed}")
        self.emit(f"}} loc({self.where.pop()})")
        self.loops_done += 1
        # A loop passes what a concatenation grows (a host list appended to, too), and a segment or
        # a host op on the list reads after the loop, on with its sizes through barriers. Without
        # them IREE's integer arithmetic optimization (`iree-util-optimize-int-arithmetic`) folded
        # the `util.align` that packs two such values into one buffer after the loop (a list of
        # tuples, carried as stacks, appended once more) as if the loop had left them empty:
        # OUT_OF_RANGE, "buffer byte_length=192" (fuzzer seed 80004; README, "Known traps").
        # Barriers inside the `scf.if` that holds the loop do not stop the fold. A `for` without an
        # exit too: inside RNNTBeamSearch's `while`, `torch.tensor([_get_hypo_score(h) for h in
        # b_hypos]).sort()` got one allocation for the f32 scores and the sort's indices, folded to
        # 0 bytes ("free(): invalid pointer"). Not on a value only returned: there the barriers on a
        # search's best and latest tokens, which can be one buffer, made the call fail ("ref is
        # null" in `hal.buffer_view.create`,
        # `test_a_scripted_class_is_carried_field_by_field_through_a_loop`).
        leaving = [
            isinstance(arg, Value) and arg in self.concatenated and output in self.read_by_segments and "?" in builtin
            for arg, output, builtin in zip(node.body.results[1:], node.outputs, builtins[1:])
        ]
        for position, (value, type_text, carrier) in enumerate(zip(node.outputs, types, carried[1:])):
            out = f"{result}#{position + 1}"
            if leaving[position]:
                out = self.builtin_barrier(out, builtins[position + 1], sizes_too=True)
            name = self.narrowed(self.from_builtin(out, carrier), type_text)
            self.define(value, self.without_spare_row(name, type_text) if position in spare else name, type_text)

    def distinct(
        self, names: list[str], types: list[str], by_type: bool = True, keys: list[str] | None = None
    ) -> list[str]:
        """`names`, each tensor that may be another's buffer made a buffer of its own.

        IREE 3.13's VM register allocator breaks a branch that passes one buffer in two block
        arguments: where one of them keeps the register the value is in and the other is its last
        use, the VM moves the ref out of that register, and the block argument left in it reads a
        null buffer ("INVALID_ARGUMENT; ref is null; while invoking native function
        hal.buffer_view.create", or OUT_OF_RANGE in a copy; iree-org/iree#24753; a fix is
        proposed in iree-org/iree#24781). The barriers of `apart` do not part them: a barrier keeps
        the buffer. Equal names are not the only way there: IREE merges equal computations, and
        the tensors the compiled host makes itself are equal more often than not: the zeros that
        stand in for an unset Optional or a `return` that did not run (a `flow.tensor.splat` once
        their sizes fold), the empty data and sizes of lists that were never appended to, the
        sizes of two fields of a list of tuples appended together (fuzzer seeds 80094, 80098,
        80160). Tacotron2's attention weights and their running sum start as two
        `torch.zeros(n, t)` that TorchScript's freezing makes one value. So where tensors enter a
        loop or leave an `if`'s side, every tensor after the first of its type is copied
        (`copied`): equal computations cannot be told apart here. A loop's next values (`by_type`
        off) are copied only where one name comes twice: they are the body's parameters (parted on
        entry), the results of its `if`s (parted at their sides) or what its segments compute; a
        copy by type there cost an elementwise pass per carried state and iteration (an LSTM's `h`
        and `c` in `show_attend_tell`). `keys`, where given, are the types to compare instead (an
        `if`'s sides: each yielded value's own type, which the `if`'s result type may widen).
        """
        seen: set[str] = set()
        parted = []
        for position, (name, type_text) in enumerate(zip(names, types)):
            key = (keys[position] if keys is not None else type_text) if by_type else name
            if type_text.startswith("!torch.vtensor") and key in seen:
                name = self.copied(name, type_text)
            seen.add(key)
            parted.append(name)
        return parted

    def copied(self, name: str, type_text: str) -> str:
        """A copy of tensor `name` in a buffer of its own (see `distinct`).

        The copy adds a zero the compiler cannot see (`opaque_int`), one elementwise pass over the
        tensor; a bool tensor is compared with it instead (`x != 0` is `x`). A tensor with a
        dynamic leading dim is copied with a leading size the compiler cannot see instead
        (`with_opaque_sizes`): IREE folds any operation on a tensor it knows to be empty (a list
        never appended to) into one empty tensor of its type, and merges those again.
        """
        if type_text.startswith("!torch.vtensor<[?"):
            return self.with_opaque_sizes(name, type_text)
        zero, copy = self.opaque_int(0), self.fresh()
        if type_text.endswith(",i1>"):
            self.emit(f"{copy} = torch.aten.ne.Scalar {name}, {zero} : {type_text}, !torch.int -> {type_text}")
        else:
            one = self.constant(1, None)[0]
            self.emit(
                f"{copy} = torch.aten.add.Scalar {name}, {zero}, {one} : {type_text}, !torch.int, !torch.int -> "
                f"{type_text}"
            )
        return copy

    def with_opaque_sizes(self, name: str, type_text: str) -> str:
        """`name` with its dynamic leading size made opaque to IREE's integer range analysis (other
        tensors and scalars as they are): concatenated with an empty tensor whose length along dim
        0 is a barrier's 0, so the buffers IREE sizes from it are sized at run time. Only dim 0:
        along an inner dim the same concatenation failed in iree-compile ("failed to resolve
        workgroup count hint in terms of workload ordinals", Tacotron2's attention weights,
        `tests/test_lists_of_tensors.py`).

        A tensor that enters a loop with a size IREE knows (`acc = h` of a static `h`, grown by
        `torch.cat` in an `else` of the body) had that size folded into a buffer inside the loop
        (OUT_OF_RANGE once the `else` ran twice; README, "Known traps": a size folded inside a
        loop). A barrier on the tensor or a `flow.tensor.tie_shape` to barriered sizes does not
        help: IREE's stream conversion keeps the byte size the tensor was made with, and a slice
        to a barriered length is clamped to the known size again. The price is one copy of the
        tensor where the loop starts.
        """
        if not type_text.startswith("!torch.vtensor<[?"):
            return name
        dims = type_text[len("!torch.vtensor<[") :].split("]", 1)[0].split(",")
        sizes = [self.opaque_int(0)]
        for position, size in enumerate(dims[1:], start=1):
            if size == "?":
                index, length = self.constant(position, None)[0], self.fresh()
                self.emit(f"{length} = torch.aten.size.int {name}, {index} : {type_text}, !torch.int -> !torch.int")
                sizes.append(length)
            else:
                sizes.append(self.constant(int(size), None)[0])
        listed, none, empty = self.fresh(), self.fresh(), self.fresh()
        self.emit(f"{none} = torch.constant.none")
        self.emit(
            f"{listed} = torch.prim.ListConstruct {', '.join(sizes)} : "
            f"({', '.join(['!torch.int'] * len(sizes))}) -> !torch.list<int>"
        )
        self.emit(
            f"{empty} = torch.aten.new_zeros {name}, {listed}, {none}, {none}, {none}, {none} : {type_text}, "
            f"!torch.list<int>, !torch.none, !torch.none, !torch.none, !torch.none -> {type_text}"
        )
        parts, joined, zero = self.fresh(), self.fresh(), self.constant(0, None)[0]
        self.emit(
            f"{parts} = torch.prim.ListConstruct {name}, {empty} : ({type_text}, {type_text}) -> !torch.list<vtensor>"
        )
        self.emit(f"{joined} = torch.aten.cat {parts}, {zero} : !torch.list<vtensor>, !torch.int -> {type_text}")
        return joined

    def with_spare_row(self, name: str, type_text: str) -> str:
        """`name` with one row of zeros in front (see `_starts_without_rows`)."""
        rank = type_text.split("[", 1)[1].split("]", 1)[0].count(",") + 1
        pads = [self.constant(0, None)[0] for _ in range(2 * rank - 2)] + [self.constant(1, None)[0]]
        pads.append(self.constant(0, None)[0])
        listed, value, padded = self.fresh(), self.constant(0.0, None)[0], self.fresh()
        self.emit(
            f"{listed} = torch.prim.ListConstruct {', '.join(pads)} : ({', '.join(['!torch.int'] * len(pads))}) "
            "-> !torch.list<int>"
        )
        self.emit(
            f"{padded} = torch.aten.constant_pad_nd {name}, {listed}, {value} : {type_text}, !torch.list<int>, "
            f"!torch.float -> {type_text}"
        )
        return padded

    def without_spare_row(self, name: str, type_text: str) -> str:
        """`name` without its first row."""
        zero, one = self.constant(0, None)[0], self.constant(1, None)[0]
        end, sliced = self.constant(INT64_MAX, None)[0], self.fresh()
        self.emit(
            f"{sliced} = torch.aten.slice.Tensor {name}, {zero}, {one}, {end}, {one} : "
            f"{type_text}, !torch.int, !torch.int, !torch.int, !torch.int -> {type_text}"
        )
        return sliced

    def loop_condition(self, counter: str, trip: str, condition: Arg) -> str:
        """`counter < trip and condition` (the condition left out when it is the constant true)."""
        go = self.fresh()
        self.emit(f"{go} = torch.aten.lt.int {counter}, {trip} : !torch.int, !torch.int -> !torch.bool")
        if not (isinstance(condition, Constant) and condition.value is True):
            keep_going, _ = self.operand(condition, "!torch.bool")
            both = self.fresh()
            self.emit(f"{both} = torch.aten.__and__.bool {go}, {keep_going} : !torch.bool, !torch.bool -> !torch.bool")
            go = both
        return go

    def edge_condition(self, counter: str, trip: str, condition: Arg) -> str:
        """The i1 a loop's entry (`scf.if`) or back edge (`scf.condition`) branches on, `counter <
        trip and condition` as `counter < trip * condition`: compared last, from two ints behind
        barriers, so that where the condition crosses an edge it is 64 bits wide (`widened`).

        The entry and the back edge of the do-while form branch to the same two blocks. Where both
        wait for the device first (a tensor the loop carries, behind its barrier), IREE 3.13 ends
        each with a `hal.fence.await` and the canonicalizer merges the two blocks that follow, which
        hold only the branch: a condition computed before the wait becomes a block argument, an i1
        in a 32-bit register moved beside the register pairs of the sizes, one move after the
        other. In `iree-dump-module`: `^bb27(%i16->%i58, %i17->%i59, ..., %i18->%i60, %i19->%i61,
        %i60->%i16)`, the entry's `0 < rows` read from `i60` after the loop's count, 0, was written
        into `i60:61`. A loop over the rows of `h` in a branch that had read a piece's width from the
        device (`pieces.append(h[:, :int(w)])`, then `rows.append(h[t] * 2.0)`, fuzzer seed 95110)
        never ran, and `torch.stack(rows)` raised "stack expects a non-empty TensorList". Compared
        after the carried values' barriers, the comparison follows the wait into the merged block,
        whose arguments are then the two ints (barriers keep it from being merged with an earlier
        comparison of the same ints).
        """
        limit = trip
        if not (isinstance(condition, Constant) and condition.value is True):
            keep_going, _ = self.operand(condition, "!torch.bool")
            as_int, limit = self.fresh(), self.fresh()
            self.emit(f"{as_int} = torch.aten.Int.bool {keep_going} : !torch.bool -> !torch.int")
            self.emit(f"{limit} = torch.aten.mul.int {trip}, {as_int} : !torch.int, !torch.int -> !torch.int")
        low, high = self.barrier(counter, "!torch.int"), self.barrier(limit, "!torch.int")
        go = self.fresh()
        self.emit(f"{go} = torch.aten.lt.int {low}, {high} : !torch.int, !torch.int -> !torch.bool")
        return self.to_builtin(go, "!torch.bool")

    def loop_body(
        self, node: Loop, counter: str, params: list[str], types: list[str], trip: str
    ) -> tuple[str, list[str], str]:
        """One iteration: the body on (counter, *params); returns the next counter, the next carried
        values and whether to go on (`counter + 1 < trip and body_condition`)."""
        index_param, *carried_params = node.body.params
        self.define(index_param, counter, "!torch.int")
        for value, name, type_text in zip(carried_params, params, types):
            self.define(value, name, type_text)
        self.block(node.body)
        next_values = [self.operand(arg, want)[0] for arg, want in zip(node.body.results[1:], types)]
        one = self.constant(1, None)[0]
        following = self.fresh()
        self.emit(f"{following} = torch.aten.add.int {counter}, {one} : !torch.int, !torch.int -> !torch.int")
        return following, next_values, self.loop_condition(following, trip, node.body.results[0])

    def apart(self, names: list[str], types: list[str], alone: bool = False, sizes_too: bool = False) -> list[str]:
        """`names`, each tensor behind an optimization barrier where tensors cross a branch or loop edge.

        Two IREE 3.13 bugs. (1) IREE packs tensors made in one execution region into one
        allocation; a VM branch then passes that buffer twice, and its register allocator moves the
        ref out of one block argument into the other: the next copy reads a null buffer
        (OUT_OF_RANGE in `hal.command_buffer.copy_buffer`; iree-org/iree#24753). (2) An `scf.if`
        whose sides only yield values from outside it becomes an `arith.select` of tensors, which
        reads both with one side's shape: where the sides' dynamic sizes differ, the result is
        silently wrong (`h = x if c else y`, x and y of other batch sizes). A barrier gives each
        tensor its own ref and keeps the `scf.if`. (1) needs it where two or more tensors cross
        together, (2) on a tensor with a dynamic dim that leaves an `if` alone (`alone`; tensors of
        static shape have the same shape on both sides).
        """
        tensors = [type_text.startswith("!torch.vtensor") and _builtin_type(type_text) for type_text in types]
        if sum(map(bool, tensors)) < 2:
            tensors = [bool(alone and builtin and "?" in builtin) for builtin in tensors]
        return [
            self.barrier(name, kind, sizes_too) if builtin else name
            for name, kind, builtin in zip(names, types, tensors)
        ]

    def barrier_all(
        self,
        names: list[str],
        builtins: list[str],
        unread: list[bool] | None = None,
        grown: list[bool] | None = None,
        sized: list[bool] | None = None,
    ) -> list[str]:
        """`names` (builtin-typed), each through its own `util.optimization_barrier`.

        An `scf.while` must keep as many `before` arguments as results, of the same types: IREE
        3.13's stream conversion (`ScfWhileOpConversion`) converts both regions with the signature
        of the loop's operands, so a loop that MLIR's canonicalizer narrowed (a carried value the
        body overwrites without reading, like the value of a `return` inside the loop, loses its
        `before` argument; a value yielded twice or from outside the loop loses its result) makes
        iree-compile crash (SIGSEGV in `applySignatureConversion`) or fail ("failed to legalize
        unresolved materialization from () to ('index')"). Used at the top of the body (`unread`
        says which carried values the body never reads): every scalar and every tensor the body
        does not read goes through a barrier, a tensor's dynamic sizes too (IREE carries them as
        loop arguments of their own, which the canonicalizer drops when nothing reads them).
        With the barriers `loop` puts on every value the body passes on, nothing is left to narrow.
        One barrier per value: a barrier of several values must keep their types, which the stream
        conversion breaks (each tensor gets its own resource lifetime).
        """
        kept = []
        for position, (name, builtin) in enumerate(zip(names, builtins)):
            if (
                unread is not None
                and builtin.startswith("tensor<")
                and not unread[position]
                and not (grown is not None and grown[position] and "?" in builtin)
                and not (sized is not None and sized[position])
            ):
                # At the top of the body, only a tensor the body never reads goes through a
                # barrier (it would lose its argument). One the body reads keeps its argument,
                # and a barrier there made IREE hand the loop a zero tensor in place of a value
                # from an enclosing `if` or loop (three nested loops started from zeros; `h`
                # rewritten by an `if`, then a loop with a `break`). In a for-like loop (`grown`)
                # a tensor with a dynamic dim does go through one, its sizes too: without it IREE
                # sized the copy of a tensor the body grows (`acc = torch.cat([acc, x[i:i + k]])`)
                # by a size from before the loop (OUT_OF_RANGE at run time, "buffer byte_length=0");
                # in a loop with an exit the same barrier broke a list grown after a `return`
                # (`test_a_list_grown_after_a_return_from_nested_loops`).
                kept.append(name)
            elif unread is not None and not unread[position] and sized is not None and sized[position]:
                kept.append(self.builtin_barrier(name, builtin, sizes_too=True, tensor_too=False))
            else:
                kept.append(self.builtin_barrier(name, builtin, sizes_too=True))
        return kept

    def builtin_barrier(self, name: str, builtin: str, sizes_too: bool = False, tensor_too: bool = True) -> str:
        """A builtin-typed value through `util.optimization_barrier`, a tensor's dynamic dims tied again
        (iree-compile fails on a barrier of a dynamically shaped tensor otherwise: "'tensor.dim' op
        unexpected during shape cleanup"). With `tensor_too` off, only the sizes (`sizes_too`) pass
        a barrier, and the tensor is tied to them as it is."""
        dims = []
        sizes = builtin[len("tensor<") :].split("x")[:-1] if builtin.startswith("tensor<") else []
        for position, size in enumerate(sizes):
            if size == "?":
                index, dim = self.fresh(), self.fresh()
                self.emit(f'{index} = "arith.constant"() {{value = {position} : index}} : () -> index')
                self.emit(f'{dim} = "tensor.dim"({name}, {index}) : ({builtin}, index) -> index')
                # The size goes through the barrier too: IREE carries a dynamic dim of a loop-carried
                # tensor as a loop argument of its own (ExpandTensorShapes), which the canonicalizer
                # drops again when nothing in the body reads it, and the loop is narrowed anyway.
                if sizes_too:
                    kept_dim = self.fresh()
                    self.emit(f'{kept_dim} = "util.optimization_barrier"({dim}) : (index) -> index')
                    dim = kept_dim
                dims.append(dim)
        kept = name
        if tensor_too or not dims:
            kept = self.fresh()
            self.emit(f'{kept} = "util.optimization_barrier"({name}) : ({builtin}) -> {builtin}')
        if dims:
            tied = self.fresh()
            operands = ", ".join([kept, *dims])
            dim_types = ", ".join([builtin] + ["index"] * len(dims))
            self.emit(f'{tied} = "flow.tensor.tie_shape"({operands}) : ({dim_types}) -> {builtin}')
            kept = tied
        return kept

    def widened(self, names: list[str], types: list[str]) -> list[str]:
        """`names`, each bool as its int (0 or 1): the form in which a bool crosses a branch or loop edge.

        IREE 3.13's VM keeps an i1 in a 32-bit register and an i64 (an int, a tensor's size) in a
        pair of them, and a branch that moves both kinds in a cycle (the pair `i44:45` into `i46:47`,
        the bool `i46` into `i44`) makes the moves one after the other: the bool then reads half of
        the size that just overwrote it. Fuzzer seed 71029's loop took the size of a tensor (64) for
        its "returned" flag and returned the zeros standing in for the value of a `return` that
        never ran, silently, depending on how the registers fell. With every scalar that crosses an
        edge 64 bits wide (ints and sizes are; floats cross as f64), no move overlaps another's half.
        """
        widened = []
        for name, type_text in zip(names, types):
            if type_text == "!torch.bool":
                as_int = self.fresh()
                self.emit(f"{as_int} = torch.aten.Int.bool {name} : !torch.bool -> !torch.int")
                name = as_int
            widened.append(name)
        return widened

    def narrowed(self, name: str, type_text: str) -> str:
        """`name` back as a bool where `type_text` is one (`widened`), else as it is."""
        if type_text != "!torch.bool":
            return name
        as_bool = self.fresh()
        self.emit(f"{as_bool} = torch.aten.Bool.int {name} : !torch.int -> !torch.bool")
        return as_bool

    def barrier(self, name: str, type_text: str, sizes_too: bool = False) -> str:
        """`name` (a tensor, int or bool) through `util.optimization_barrier` (see `builtin_barrier`)."""
        builtin = _scalar_or_builtin(type_text)
        return self.from_builtin(self.builtin_barrier(self.to_builtin(name, type_text), builtin, sizes_too), type_text)

    def to_builtin(self, name: str, type_text: str) -> str:
        op = _TO_BUILTIN.get(type_text, "torch_c.to_builtin_tensor")
        return self.converted(op, name, type_text, _scalar_or_builtin(type_text))

    def from_builtin(self, name: str, type_text: str) -> str:
        op = _FROM_BUILTIN.get(type_text, "torch_c.from_builtin_tensor")
        return self.converted(op, name, _scalar_or_builtin(type_text), type_text)

    def converted(self, op: str, name: str, have: str, want: str) -> str:
        result = self.fresh()
        self.emit(f'{result} = "{op}"({name}) : ({have}) -> {want}')
        return result

    def prim_loop(self, node: Loop) -> None:
        """The loop as `torch.prim.Loop` (carried tensors of dtypes `_builtin_type` does not map)."""
        trip, _ = self.operand(node.trip_count, "!torch.int")
        types = [mlir_type(v.type) for v in node.outputs]
        initial = [self.operand(arg, want)[0] for arg, want in zip(node.initial, types)]
        zero = self.constant(0, None)[0]
        start = self.loop_condition(zero, trip, node.condition)
        # The barrier keeps the start condition from folding to a constant (IREE 3.13 loop trap).
        guarded = self.barrier(start, "!torch.bool")
        maximum = self.fresh()
        self.emit(f"{maximum} = torch.constant.int {INT64_MAX}")
        result = self.fresh()
        carried_types = ["!torch.int", *types]
        self.emit(
            f"{result}:{len(carried_types)} = torch.prim.Loop {maximum}, {guarded}, "
            f"init({', '.join([zero, *initial])}) {{"
        )
        index_name, counter = self.fresh(), self.fresh()
        params = [self.fresh() for _ in types]
        block_args = [f"{index_name}: !torch.int", f"{counter}: !torch.int"]
        block_args += [f"{p}: {t}" for p, t in zip(params, types)]
        self.emit(f"^bb0({', '.join(block_args)}):")
        self.depth += 1
        self.where.append(self.located(node.label, node.source))
        saved = dict(self.names), dict(self.types)
        enclosing = self.enclosing_loops
        self.enclosing_loops = enclosing + 1
        following, next_values, go = self.loop_body(node, counter, params, types, trip)
        self.enclosing_loops = enclosing
        self.emit(
            f"torch.prim.Loop.condition {go}, iter({', '.join([following, *next_values])} : {', '.join(carried_types)})"
        )
        self.names, self.types = saved
        self.depth -= 1
        self.emit(f"}} : (!torch.int, !torch.bool, {', '.join(carried_types)}) -> ({', '.join(carried_types)})")
        self.where.pop()
        self.loops_done += 1
        for position, (value, type_text) in enumerate(zip(node.outputs, types)):
            self.define(value, f"{result}#{position + 1}", type_text)


def _carriers(types: list[str]) -> list[str]:
    """The types in which `types` cross a branch or loop edge: a bool as an int (`widened`)."""
    return ["!torch.int" if type_text == "!torch.bool" else type_text for type_text in types]


def _dynamic(arg: Arg) -> bool:
    """Whether a loop's initial value is a tensor with a dynamic dim on entry (see `loop`'s `held`).

    In a loop with an exit, such a tensor goes through a barrier with its sizes at the top of the
    body and where the body passes it on (`scf.condition`), as every grown tensor of a for-like
    loop does at the top. Tacotron2's decode loop needs both for its attention weights and their
    running sum (`[B, T]`, `T` read at run time, unchanged by the loop): without the barriers on
    the sizes it passes on, MLIR's canonicalizer replaces the loop's copy of `T` by the value from
    before the loop in some places and not in others, and iree-compile fails ("failed to legalize
    unresolved target materialization from ('index') to ('!stream.resource<*>', 'index')" on the
    `scf.yield`, IREE 3.13's `ScfWhileOpConversion`); with those alone it compiles, but the call
    fails at run time with OUT_OF_RANGE on a buffer sized before the loop, as the grown tensors of
    a for-like loop did without the barrier at the top. A tensor that enters with static sizes
    and grows (a list of tensors that starts empty) gets neither: in a loop with an exit that
    broke `test_a_list_grown_after_a_return_from_nested_loops` (OUT_OF_RANGE, "buffer byte_length=0").
    """
    return isinstance(arg, Value) and isinstance(arg.type, TensorType) and None in arg.type.shape


def _starts_without_rows(node: Loop) -> set[int]:
    """Positions of the carried tensors that start with no rows and have another dynamic dim (a list
    of tensors that starts empty: `alignments: List[Tensor] = []` in Tacotron2's decode loop).

    IREE 3.13 runs a loop that carries such a tensor wrongly: OUT_OF_RANGE in
    `hal.device.queue.execute`, or rows of garbage (`acc = torch.zeros(0, n)`, then
    `acc = torch.cat([acc, w], 0)` in a loop with a `break`; with one row to start from it is
    right). So the loop carries them with one spare row of zeros in front, taken off at the top of
    the body and after the loop."""
    spare = set()
    for position, arg in enumerate(node.initial):
        shape = arg.type.shape if isinstance(arg, Value) and isinstance(arg.type, TensorType) else None
        if shape and shape[0] == 0 and None in shape[1:] and node.outputs[position].type.shape[0] is None:
            spare.add(position)
    return spare


def concatenations(program: Program) -> set[Value]:
    """The values that are a concatenation's result on some path: the outputs of segments that
    compute them with `aten::cat` (an append to a list of tensors, `torch.cat([acc, h])`), the host
    lists of ints or floats appended to or joined (`main` concatenates their tensors), and the
    outputs of the branches and loops that pass one on."""
    segments = {segment.name: segment for segment in program.segments}
    made = {
        name: {op.outputs[0] for op in segment.nodes if op.target.startswith("aten::cat")}
        for name, segment in segments.items()
    }
    found: set[Value] = set()

    def visit(block: Block) -> None:
        for node in block.nodes:
            for inner in sub_blocks(node):
                visit(inner)
            if isinstance(node, SegmentCall):
                results = segments[node.segment].results
                found.update(out for out, result in zip(node.outputs, results) if result in made[node.segment])
            elif isinstance(node, HostOp) and node.target in _LIST_GROWTHS:
                found.update(node.outputs)
            elif isinstance(node, If):
                pairs = zip(node.outputs, node.then_block.results, node.else_block.results)
                found.update(out for out, a, b in pairs if a in found or b in found)
            elif isinstance(node, Loop):
                found.update(out for out, result in zip(node.outputs, node.body.results[1:]) if result in found)

    visit(program.body)
    return found


_LIST_GROWTHS = ("aten::append.t", "aten::add.t")


def segment_inputs(program: Program) -> set[Value]:
    """The values that a segment call reads, anywhere in the program, and the host lists that a host
    op reads (`scores[best:-1]`: `main` slices or indexes their tensors as a kernel would)."""
    return {
        value
        for node in iter_nodes(program.body)
        if isinstance(node, SegmentCall) or isinstance(node, HostOp)
        for value in node_inputs(node)
        if isinstance(node, SegmentCall) or isinstance(value.type, ListType)
    }


def _grows(param: Value, result: Arg) -> bool:
    """Whether the loop body returns the tensor `param` bigger than it got it: its dynamic size was
    larger after one pass of the body over the example (`ts.append(h)` of a list of tensors carried
    stacked, `acc = torch.cat([acc, h])`)."""
    if not isinstance(param.type, TensorType) or not isinstance(result, Value):
        return False
    if not isinstance(result.type, TensorType) or None not in param.type.shape:
        return False
    return any(d is None and b > a for d, a, b in zip(param.type.shape, param.type.hint, result.type.hint))


def _starts_empty(arg: Arg) -> bool:
    """Whether a loop's initial value is a tensor empty in some dim (a list of tensors that starts as
    `[]`, carried stacked, or concatenated along any dim, or the sizes of its pieces). Not only dim 0:
    a list concatenated along dim 1 (`[2, 0, 3]`) grown by segments of run-time lengths in a `while`
    loop failed with OUT_OF_RANGE once it held two (`tests/test_ragged_stacks.py`)."""
    return isinstance(arg, Value) and isinstance(arg.type, TensorType) and 0 in arg.type.hint


def _enters_with_a_known_size(arg: Arg) -> bool:
    """Whether `arg`, a loop's initial value, is a tensor with data whose leading size the compiler
    knows (`acc = h` of a static `h`, carried with a dynamic dim 0): the size IREE folds."""
    if not (isinstance(arg, Value) and isinstance(arg.type, TensorType) and arg.type.shape):
        return False
    return arg.type.shape[0] is not None and 0 not in arg.type.shape


def _values_read(block: Block) -> set[Value]:
    """Every Value that `block` or a block nested in it reads (node inputs and block results)."""
    read: set[Value] = set()
    for node in iter_nodes(block):
        read.update(node_inputs(node))
        for inner in sub_blocks(node):
            for result in inner.results:
                read.update(arg_values(result))
    for result in block.results:
        read.update(arg_values(result))
    return read


_TO_BUILTIN = {"!torch.int": "torch_c.to_i64", "!torch.bool": "torch_c.to_i1", "!torch.float": "torch_c.to_f64"}


_FROM_BUILTIN = {"!torch.int": "torch_c.from_i64", "!torch.bool": "torch_c.from_i1", "!torch.float": "torch_c.from_f64"}


_BUILTIN_SCALARS = {"!torch.int": "i64", "!torch.bool": "i1", "!torch.float": "f64"}


_BUILTIN_ELEMENTS = {
    **{name: name for name in ("f32", "f64", "f16", "bf16", "i1")},
    **{f"si{bits}": f"i{bits}" for bits in (64, 32, 16, 8)},
}


def _scalar_or_builtin(type_text: str) -> str | None:
    """`_builtin_type`, scalars looked up first: a barrier on an int or bool needs no tensor mapping."""
    return _BUILTIN_SCALARS.get(type_text) or _builtin_type(type_text)


def _builtin_type(type_text: str) -> str | None:
    """The builtin MLIR type torch_c converts a torch type to (`!torch.vtensor<[1,?],f32>` ->
    `tensor<1x?xf32>`), or None where this host does not map it (unsigned tensors)."""
    if type_text in _BUILTIN_SCALARS:
        return _BUILTIN_SCALARS[type_text]
    if not type_text.startswith("!torch.vtensor<["):
        return None
    dims, element = type_text[len("!torch.vtensor<[") : -1].split("],")
    builtin = _BUILTIN_ELEMENTS.get(element)
    if builtin is None:
        return None
    shape = "x".join(dims.split(",")) if dims else ""
    return f"tensor<{shape}x{builtin}>" if shape else f"tensor<{builtin}>"


def _own_type(arg: Arg, want: str) -> str:
    """The MLIR type of the value a side of an `if` yields, before the `if`'s result type widens it."""
    if isinstance(arg, Value) and isinstance(arg.type, TensorType):
        return mlir_type(arg.type)
    return want
