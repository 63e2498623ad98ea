"""Sizes observed in one run of the scripted model at the example inputs: the hints of sizes that the
meta runs' examples cannot give.

Specialize types each op by a meta run at one example size ("hint") per dynamic dim; a dynamic dim
whose example is 0 or 1 is typed with the example 2 (torch.export fixes dims of 0 and 1). Sizes
made from such a dim then no longer add up: Emformer's mask block joins column groups whose widths
are differences of ints made from the loop's index, and one of them (the memory, `seg_idx -
m_start`, or the right context of length 0) is empty at every segment. Typed 2 wide, it made the
block 2 wider than the frames, and the joined mask failed to meet the attention scores, which no
one example of the index avoids (`control.visit_loop`).

So once a hint has been raised, each op's dynamic dims take the sizes its result had in one run of
the scripted model at the example inputs, at the iteration that specialize types each enclosing
loop's body at (its index's example, `control.visit_loop`; each iteration of a loop it unrolls):
the sizes of one run agree with each other as the sizes at run time do. Only hints change:
which dims are dynamic stays as the meta runs decided; a size of 0 or 1 stays typed 2; a run whose
static sizes differ from the op's type (another path, another iteration) gives nothing. A hint
is only an example: each segment is traced by torch.export at its inputs' hints, which derives the
sizes inside it from them, so a hint that disagrees with the others fails that trace or a meta run
(a refusal; `tests/test_observed_sizes.py` feeds every observed size plus one).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import torch

from ..program import TensorType
from .aliasing import mutated_outer
from .structured import flatten_entries
from .values import RaggedList, TensorList

# The run records each tensor's sizes through this op, inserted after every op of a copy of the
# graph; it returns its tensor, so that the graph's later reads keep it alive (an op whose result
# nothing reads is removed by TorchScript before it runs).
_LIBRARY = torch.library.Library("dycl_observe", "DEF")
_LIBRARY.define("record(Tensor(a) x, int id, int[] loops) -> Tensor(a)")
# A list's sizes after the loop that grows it: declared to write the list, which keeps it from
# being removed (it returns nothing).
_LIBRARY.define("record_list(Tensor(a!)[] xs, int id, int[] loops) -> ()")
# An int read from a tensor's data (`int(lengths.max().item())`): its value.
_LIBRARY.define("record_int(Scalar x, int id, int[] loops) -> Scalar")
_RECORDING = threading.local()


def _record(x: torch.Tensor, id: int, loops: list[int]) -> torch.Tensor:
    sizes = getattr(_RECORDING, "sizes", None)
    if sizes is not None:
        sizes.setdefault((id, tuple(loops)), tuple(x.shape))
    return x


def _record_list(xs: list[torch.Tensor], id: int, loops: list[int]) -> None:
    sizes = getattr(_RECORDING, "sizes", None)
    if sizes is not None:
        sizes.setdefault((id, tuple(loops)), tuple(tuple(x.shape) for x in xs))


def _record_int(x: Any, id: int, loops: list[int]) -> Any:
    sizes = getattr(_RECORDING, "sizes", None)
    if sizes is not None and isinstance(x, int) and not isinstance(x, bool):
        sizes.setdefault((id, tuple(loops)), x)
    return x


_LIBRARY.impl("record", _record, "CompositeExplicitAutograd")
_LIBRARY.impl("record_int", _record_int, "CompositeExplicitAutograd")
_LIBRARY.impl("record_list", _record_list, "CompositeExplicitAutograd")

Observed = dict  # (TorchScript value's unique, indices of its enclosing loops) -> its sizes (an int's value)

# The ops that read an int from a tensor's data (`specialize.host_ops.SYNC_OPS`), whose values the
# run records.
_INT_READS = ("aten::Int", "aten::item", "aten::IntImplicit")


def observe(captured: Any, example_inputs: tuple) -> Observed:
    """Each tensor the scripted model makes in one run at `example_inputs`, by the value's unique in
    `captured.graph` and the indices of the loops around it, at each one's first run: its sizes;
    by `(loop, list)` (the uniques of the loop's index and of the list) the sizes of each tensor
    of each list of tensors that a loop grows or returns, after it; by the output of each
    `xs.append(x)` on a list of tensors, the sizes of each tensor of `xs` after it; and each int
    read from a tensor's data, its value. Empty where the run fails (the model raises at its
    examples): it is then typed by meta runs only."""
    graph = captured.graph.copy()
    tensors: list[tuple[torch._C.Value, torch._C.Value, list[torch._C.Value]]] = []
    ints: list[tuple[torch._C.Value, torch._C.Value, list[torch._C.Value]]] = []
    loops_run: list[tuple[torch._C.Node, torch._C.Node, list[torch._C.Value]]] = []
    appends: list[tuple[torch._C.Node, torch._C.Node, list[torch._C.Value]]] = []
    copies: dict[int, torch._C.Value] = {}

    def pair(original: torch._C.Block, copy: torch._C.Block, loops: list[torch._C.Value]) -> None:
        for value, copied in zip(original.inputs(), copy.inputs()):
            copies[value.unique()] = copied
        for node, copied in zip(original.nodes(), copy.nodes()):
            inner = loops
            if node.kind() == "prim::Loop":
                inner = [*loops, next(iter(list(copied.blocks())[0].inputs()))]
                loops_run.append((node, copied, loops))
            if node.kind() == "aten::append" and _tensor_list(node.inputsAt(0)):
                appends.append((node, copied, loops))
            for block, copied_block in zip(node.blocks(), copied.blocks()):
                pair(block, copied_block, inner)
            for output, copied_output in zip(node.outputs(), copied.outputs()):
                copies[output.unique()] = copied_output
                if copied_output.type().kind() == "TensorType":
                    tensors.append((output, copied_output, loops))
                elif node.kind() in _INT_READS and copied_output.type().kind() in ("IntType", "NumberType"):
                    ints.append((output, copied_output, loops))

    pair(captured.graph.block(), graph.block(), [])
    keys: list = []
    for op, values in (("record", tensors), ("record_int", ints)):
        for output, copied, loops in values:
            record = _insert(graph, op, copied, len(keys), loops, copied.node())
            record.output().setType(copied.type())
            copied.replaceAllUsesWith(record.output())
            record.replaceInput(0, copied)
            keys.append(output.unique())
    for node, copied, loops in loops_run:
        index = next(iter(list(node.blocks())[0].inputs())).unique()
        grown = [*mutated_outer(list(node.blocks())), *node.outputs()]
        for value in dict.fromkeys(v for v in grown if _tensor_list(v)):
            _insert(graph, "record_list", copies[value.unique()], len(keys), loops, copied)
            keys.append((index, value.unique()))
    for node, copied, loops in appends:
        _insert(graph, "record_list", copied.inputsAt(0), len(keys), loops, copied)
        keys.append(node.output().unique())
    try:
        function = torch._C._create_function_from_graph(f"{captured.name}_observed", graph)
        with _recording() as sizes, torch.no_grad(), torch.random.fork_rng(devices=[]):
            with torch.jit.optimized_execution(False):
                function(captured.frozen._c, *example_inputs)
    except Exception:
        return {}
    return {(keys[number], loops): shape for (number, loops), shape in sizes.items()}


def _insert(
    graph: torch._C.Graph, op: str, value: torch._C.Value, number: int, loops: list, after: torch._C.Node
) -> torch._C.Node:
    """`dycl_observe::<op>(value, number, [loop indices])`, inserted after `after`."""
    indices = graph.create("prim::ListConstruct", loops)
    indices.output().setType(torch._C.ListType.ofInts())
    arguments = [value, graph.insertConstant(number), indices.output()]
    record = graph.create(f"dycl_observe::{op}", arguments, int(op in ("record", "record_int")))
    record.insertAfter(after)
    indices.insertBefore(record)
    record.inputsAt(1).node().moveBefore(indices)
    return record


def _tensor_list(value: torch._C.Value) -> bool:
    type_ = value.type()
    return type_.kind() == "ListType" and type_.getElementType().kind() == "TensorType"


@contextlib.contextmanager
def _recording() -> Iterator[dict]:
    sizes: dict = {}
    _RECORDING.sizes = sizes
    try:
        yield sizes
    finally:
        _RECORDING.sizes = None


class ObservedSizes:
    """The specializer's use of `observe` (a mixin): `observed_hint` and the loop iterations."""

    observed: Observed | None = None  # computed at the first raised hint
    observing_ints = False  # `observed_int`
    # The iteration that each enclosing loop's body is typed at; None inside a graph of its own
    # (`visit_function`), whose values the run does not see.
    loop_indices: list[int] | None = None
    appended: torch._C.Value | None = None  # the output of the `xs.append(x)` being visited (`laying_out`)

    @contextlib.contextmanager
    def at_iteration(self, index: int) -> Iterator[None]:
        if self.loop_indices is None:
            yield
            return
        self.loop_indices.append(index)
        try:
            yield
        finally:
            self.loop_indices.pop()

    def observed_hint(self, ts_value: torch._C.Value | tuple | None, shape: tuple, hint: tuple) -> tuple:
        """`hint` (a result's example sizes) with each dynamic dim of 2 or more in the run at its
        iteration set to that size, once some hint was raised from 0 or 1 (until then the meta
        runs' sizes are the run's). `ts_value` is the model's value whose sizes these are, or the
        sizes themselves (`observed_join`)."""
        if ts_value is None or self.loop_indices is None or not self.raised_hints or None not in shape:
            return hint
        sizes = ts_value
        if not isinstance(ts_value, tuple):
            sizes = self.observed_sizes().get((ts_value.unique(), tuple(self.loop_indices)))
        if sizes is None or len(sizes) != len(shape):
            return hint
        if any(s is not None and s != size for s, size in zip(shape, sizes)):
            return hint  # another path than the one typed here
        return tuple(size if s is None and size >= 2 else h for s, size, h in zip(shape, sizes, hint))

    def observed_int(self, ts_value: torch._C.Value) -> int | None:
        """The value the observed run read into `ts_value` (an int read from a tensor's data) at
        its iteration, where it is 2 or more (else None: 0 and 1 keep their hint of 1).

        An int read from data is typed with the example 1 otherwise. Where it sizes a tensor that
        another one sized by it meets (`max_length = int(torch.max(lengths).item())`, then
        `torch.arange(max_length).expand(batch_size, max_length)`: torchaudio's Conformer and
        wav2vec2 make their padding masks so), the tensor's dim of 1 was typed 2, as torch.export
        fixes dims of 1, and the two no longer met. The run's value is the size the example has.

        Only where the graph is typed with those (`observing_ints`, which `pipeline.export` asks
        for where an export with the example 1 fails): a larger example can hide what depends on
        it, and the lists a loop grows take their forms from their tensors' types (a piece
        `h[:, : int(...) % 8 + 1]` of an 8-wide `h` at a run's value of 7 is as wide as `h`)."""
        if self.loop_indices is None or not self.observing_ints:
            return None
        value = self.observed_sizes().get((ts_value.unique(), tuple(self.loop_indices)))
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 2 else None

    def observed_sizes(self) -> Observed:
        """The observed run's sizes, run at the first hint that needs them."""
        if self.observed is None:
            self.observed = observe(self.captured, self.example_inputs) if self.examples_are_hints else {}
        return self.observed

    def observe_at(self, example_inputs: tuple, types: list, observing: bool = True, ints: bool = False) -> None:
        """Observe at `example_inputs` (where a hint is needed), if the inputs' hints are their sizes:
        a dynamic dim of 0 or 1 is typed 2, and a run at 1 would agree with nothing typed at 2.
        With `ints`, the ints read from data take their values in the run (`observed_int`)."""
        self.example_inputs, self.loop_indices, self.observed = example_inputs, [], None
        self.observing_ints = ints
        self.examples_are_hints = observing and all(
            not isinstance(example, torch.Tensor) or tuple(example.shape) == tuple(type_.hint)
            for example, type_ in zip(example_inputs, types)
            if type_ is not None
        )

    def observed_join(self, dim: int) -> tuple | None:
        """The sizes of the list being appended to (`laying_out`), joined along `dim`, after the
        append in the observed run; None where no hint was raised or the run does not say. A list
        grown by pieces of one row is typed by pieces of two (a dim of 1 is typed 2), and summing
        those hints would type Emformer's right context (one row per segment) 4 rows long where
        the run has 3, and its sum with the utterance no longer that of the attention's rows."""
        if self.appended is None or self.loop_indices is None or not self.raised_hints:
            return None
        items = self.observed_sizes().get((self.appended.unique(), tuple(self.loop_indices)))
        return _joined(items, dim) if items else None

    def observed_after_loop(self, node: torch._C.Node, ts_values: list, entries: list, kept: list, types: list) -> list:
        """`types` (a loop's results, the leaves of `entries` in `kept`) with the lists of tensors among
        `entries` (for `ts_values`, the loop's results and the lists it grows) hinted by their sizes
        after the loop in the observed run: a list grown by a block per segment is as long as the
        frames, also where the last segment is shorter than the one the body is typed at."""
        if self.loop_indices is None or not self.raised_hints:
            return types
        observed = self.observed_sizes()
        index = next(iter(list(node.blocks())[0].inputs())).unique()
        types, leaf = list(types), 0
        for ts_value, entry in zip(ts_values, entries):
            first = leaf
            leaf += len(flatten_entries([entry])[0])
            items = observed.get(((index, ts_value.unique()), tuple(self.loop_indices)))
            if not items or first not in kept or not isinstance(entry, (TensorList, RaggedList)):
                continue
            position = kept.index(first)
            if isinstance(entry, TensorList):
                sizes = (len(items), *items[0]) if len(set(items)) == 1 else None
            else:
                sizes = _joined(items, entry.dim)
                if first + 1 in kept and sizes is not None:
                    types[kept.index(first + 1)] = _with_sizes(types[kept.index(first + 1)], (len(items),))
            if sizes is not None:
                types[position] = _with_sizes(types[position], sizes)
        return types


def _joined(items: tuple, dim: int) -> tuple | None:
    """The sizes of `torch.cat` of tensors of sizes `items` along `dim` (None where it fails)."""
    others = {item[:dim] + item[dim + 1 :] for item in items}
    if len(others) != 1 or not all(len(item) > dim for item in items):
        return None
    return (*items[0][:dim], sum(item[dim] for item in items), *items[0][dim + 1 :])


def _with_sizes(type_: Any, sizes: tuple) -> Any:
    """`type_` with the hints of its dynamic dims set to `sizes`, where they are 2 or more and its
    static dims are theirs (else `type_` as it is)."""
    if not isinstance(type_, TensorType) or len(sizes) != type_.rank:
        return type_
    if any(s is not None and s != size for s, size in zip(type_.shape, sizes)):
        return type_
    hint = tuple(size if s is None and size >= 2 else h for s, size, h in zip(type_.shape, sizes, type_.hint))
    return TensorType(type_.dtype, type_.shape, hint)


def reads_ints(graph: torch._C.Graph) -> bool:
    """Whether the graph reads an int from a tensor's data (`observed_int` would have something)."""

    def scan(block: Any) -> bool:
        return any(node.kind() in _INT_READS or any(scan(inner) for inner in node.blocks()) for node in block.nodes())

    return scan(graph)
