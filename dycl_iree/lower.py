"""Lower: every segment becomes one function of ONE MLIR module, through torch.export and torch-mlir.

torch-mlir's wheel has no TorchScript importer, so each segment is rebuilt as a `torch.fx` graph of
`torch.ops.aten` calls, exported with `torch.export` (which decomposes, functionalizes and keeps the
dynamic dims dynamic) and imported with torch-mlir's `FxImporter` under the segment's name. All
segments share one importer, and a weight is the same `torch.Tensor` object wherever it is used,
so the module stores its blob once however many segments read it.

Segment parameters that are host scalars need care, because `torch.export` bakes Python scalars
into the graph: an int becomes a `Dim.DYNAMIC` input (imported as `!torch.int`); a float cannot be
dynamic at all, so it travels as a 0-d float32 tensor and is read with `aten.item` inside the
segment (float32, not float64: IREE demotes f64 to f32 by default and a float64 buffer passed in
from the host is then misread); a bool travels as an int.

Example:
    >>> lowered = lower(partition(specialize(capture(model), example_inputs)))   # doctest: +SKIP
    >>> lowered.signatures["seg0"]                                                # doctest: +SKIP
    (['!torch.vtensor<[1,8],f32>'], ['!torch.vtensor<[1,8],f32>'])
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch.export import Dim

from . import winograd
from .constant_ranges import fold_ranges_in
from .decompositions import (
    NEAREST_BY_SIZES,
    decomposition_table,
    depthwise_convolution_activated,
    one_row_linear,
    upsample_nearest_by_given_scales,
)
from .errors import UnsupportedOpError
from .int_offsets import IntOffsets
from .observed_calls import ObservedCalls
from .one_trace import OVERRIDE, split_table
from .padded_expansion import (
    Expansions,
    depthwise_convolution_of_padded,
    depthwise_of_expansion_in_bands,
    in_bands,
    inside_mask,
    pointwise_convolution_padded,
)
from .padded_rnn import UNROLLED_OVER_TIME
from .program import Constant, ListArg, Program, ScalarType, Segment, TensorType, Value, format_value
from .size_ties import SizeTie, affine_tie, input_symbols
from .specialize.schemas import overload_of, torch_dtype


@dataclass
class LoweredModule:
    """The MLIR module of all segments, and each segment function's (param, result) MLIR types."""

    module: Any
    context: Any
    signatures: dict[str, tuple[list[str], list[str]]]
    ties: list[SizeTie] = field(default_factory=list)  # for the host to check (`size_ties.py`)
    observed: ObservedCalls | None = None  # what it was lowered with, to lower a segment again alike


def lower(
    program: Program,
    progress: Callable[[str], None] | None = None,
    only: Sequence[str] | None = None,
    exported: list[Any] | None = None,
    fold_ranges: bool = True,
    observed: ObservedCalls | None = None,
) -> LoweredModule:
    """Import every segment of `program` (or those named in `only`) into one MLIR module; `exported`,
    if given, receives each segment's `ExportedProgram` (`explain_compile_error` reads its nodes).
    With `fold_ranges` (CPU targets only: `constant_ranges.py`) an arange of bounds known at export
    is imported as its literal. A segment that fails to export at its hints is exported again at
    its inputs in a run of the examples, where `observed` has them (`observed_calls.py`)."""
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_dialect
    from torch_mlir.extras.fx_importer import FxImporter

    from .literals import WeightTracker

    context = ir.Context()
    torch_dialect.register_dialect(context)
    importer = FxImporter(context=context, py_attr_tracker=WeightTracker(context))
    decompositions = decomposition_table()
    constants: dict[Any, tuple[str, torch.Tensor]] = {}
    # The importer remembers every tensor it turned into a literal by id() for the whole import,
    # without checking that the tensor is still alive. torch.export hands it tensors of its own
    # (BlockDrop's blocks: an int64 [1, 16, 1, 1] each), which died with their ExportedProgram;
    # a later segment's tensor reusing the id then imported as the dead one's literal: an
    # MLIRError when the shapes differed, the wrong weights when they did not. So every
    # ExportedProgram lives until the end.
    exported_programs: list[Any] = []
    offsets = IntOffsets(program)
    ties: list[SizeTie] = []
    with _EXPORT_LOCK, OVERRIDE.kept():
        _import_segments(
            program,
            only,
            progress,
            importer,
            constants,
            offsets,
            decompositions,
            exported_programs,
            ties,
            fold_ranges,
            observed,
        )
    module = importer.module
    if exported is not None:
        exported.extend(exported_programs)
    return LoweredModule(module, context, _signatures(module), ties, observed)


def _import_segments(
    program: Program,
    only: Sequence[str] | None,
    progress: Callable[[str], None] | None,
    importer: Any,
    constants: dict,
    offsets: IntOffsets,
    decompositions: Any,
    exported_programs: list[Any],
    ties: list[SizeTie],
    fold_ranges: bool,
    observed: ObservedCalls | None,
) -> None:
    for segment in program.segments:
        if only is not None and segment.name not in only:
            continue
        if progress is not None:
            progress(segment.name)
        exported = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exported = _export_segment(segment, constants, offsets, decompositions, observed)
                ties.extend(_refuse_specialized_dims(segment, exported))
                importer.import_frozen_program(exported, func_name=segment.name)
                exported_programs.append(exported)
                function = _function(importer.module, segment.name)
                if function is not None:
                    # The importer can write an invalid op (`aten.sub.Tensor` of an int, from a
                    # decomposition's `size - index`), which otherwise failed a later pass with a
                    # bare MLIRError; raised here, the error names the op it came from (`_explain`).
                    function.verify()
                    if fold_ranges:
                        fold_ranges_in(function, importer.module.context)
        except UnsupportedOpError:
            raise
        except Exception as error:
            OVERRIDE.release()  # what explains the error runs with torch's own kernels
            raise _explain(segment, error, exported) from error


def _function(module: Any, name: str) -> Any:
    """The function `name` of the imported `module` (None if it has none)."""
    for operation in module.body.operations:
        if "sym_name" in operation.attributes and operation.attributes["sym_name"].value == name:
            return operation
    return None


def _export_segment(
    segment: Segment, constants: dict, offsets: IntOffsets, decompositions: Any, observed: ObservedCalls | None = None
) -> Any:
    """The segment exported at its hints, or, where that export ties or fixes what the Program keeps
    apart, exported again at spread examples.

    torch.export specializes a size derived from the examples that is 1 as it does an input of that
    size: `x[start:end]` with the examples 0 and 1 (a loop-carried start, the loop's index) made
    `end` the symbol `start + 1`, and the slice kept one row whatever the bounds; `mems[1:]` of a list
    of two stacked tensors fixed the list's length at 2. A tie the host program makes itself is
    kept: the translator's decoder step slices `positions[step : step + 1]` with `end` computed as
    `step + 1`, and exporting it with other examples made the slice's rows dynamic, which cost the
    static shape and gave the compiled host wrong tokens (README, "Known traps"). The spread examples
    (`_spread_hints`) keep those offsets and break every other tie.

    The spread export assumes the size is not 1 (the segmenter's guard `end - start != 1`, which
    torch-mlir does not import, so it is not checked): the broadcast that guard comes from
    (`segment - segment.mean(0, keepdim=True)`) gives the same result for one row. Checking the
    guards against the hints would therefore refuse the export that is right.

    Where the export at the hints fails, the segment is exported at its inputs in a run of the
    examples (`observed_calls.py`), and the spread examples spread those; where that fails too, or
    there is no such run, the first error stands."""
    graph_module, examples, dynamic = _segment_graph(segment, constants)
    base = None
    try:
        exported = _export(graph_module, examples, dynamic, decompositions)
    except Exception as error:
        base = observed.hints(segment) if observed is not None else None
        if base is None:
            raise
        first_error = error
    if base is not None:
        graph_module, examples, dynamic = _segment_graph(segment, constants, base)
        try:
            exported = _export(graph_module, examples, dynamic, decompositions)
        except Exception:
            raise first_error from None
    if not _coincidences(segment, exported, offsets):
        return exported
    fixed_at_hints, left_dynamic = set(_fixed_results(segment, exported)), set()
    for int_example in (lambda hint: 2 * hint + 1, lambda hint: hint // 2):
        hints = _spread_hints(segment, offsets, int_example, base)
        graph_module, examples, dynamic = _segment_graph(segment, constants, hints)
        try:
            spread = _export_once(graph_module, examples, dynamic, decompositions)
        except Exception:
            # The ops refuse the spread examples (an index into a dim of size 1).
            continue
        if not _coincidences(segment, spread, offsets):
            return spread
        # Other examples that left a result dynamic: its size at the hints was the examples' doing.
        left_dynamic |= fixed_at_hints - set(_fixed_results(segment, spread))
    if left_dynamic:
        raise _refused(
            segment,
            f"torch.export fixed the size of {format_value(min(left_dynamic, key=segment.results.index))} to "
            "the example's, although it changes at run time (a slice of one row at the example inputs): "
            "export with other example ints or sizes",
        )
    # The export at the hints stands: a result that every export fixes is one the ops (and the
    # host's offsets) fix; `_refuse_specialized_dims` still says when it fixed a dynamic input dim.
    return exported


def _refused(segment: Segment, reason: str) -> UnsupportedOpError:
    """The error for a segment torch.export cannot keep dynamic, at the segment's first op's line."""
    first = segment.nodes[0]
    return UnsupportedOpError(first.target, first.source, segment.name, reason)


def _coincidences(segment: Segment, exported: Any, offsets: IntOffsets) -> list[str]:
    """The segment inputs that `exported` fixes or ties although the Program keeps them apart: dynamic
    dims that became numbers, and ints that became a number or an expression of another input that
    the host program does not compute them by (`IntOffsets`)."""
    import sympy
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    values = _param_values(exported, len(segment.params))
    int_symbols = {
        value.node.expr: position
        for position, value in enumerate(values)
        if isinstance(value, torch.SymInt) and isinstance(value.node.expr, sympy.Symbol)
    }
    found = [format_value(result) for result in _fixed_results(segment, exported)]
    pinned = getattr(exported, "dycl_pinned", {})
    for position, (param, value) in enumerate(zip(segment.params, values)):
        if position in pinned:  # fixed as the ops need, and checked by the host (`_pinned_ties`)
            continue
        type_ = param.type
        if isinstance(type_, TensorType) and isinstance(value, torch.Tensor):
            if _fixed_or_derived_dims(type_, value):
                found.append(format_value(param))
        elif isinstance(type_, ScalarType) and type_.kind != "float":
            if not isinstance(value, torch.SymInt) or is_concrete_int(value):
                found.append(format_value(param))
            elif not isinstance(value.node.expr, sympy.Symbol):
                if not _tied_by_the_host(segment, position, value.node.expr, int_symbols, offsets):
                    found.append(format_value(param))
    return found


def _fixed_or_derived_dims(type_: TensorType, value: torch.Tensor) -> list[int]:
    """The dims that the Program types dynamic but `value` (torch.export's fake input) does not
    carry as a symbol of their own: a number (a size specialized to its example), or an expression
    of other inputs' symbols. The second comes from the first one step removed: `rows[start:]` of a
    list stacked to 2 rows, traced with start = 1, gave a slice of 1 row, which torch.export
    specialized by rewriting the list's length as `start + 1`; the function then returned one row
    whatever the list's length and start."""
    fixed = []
    for d, size in enumerate(type_.shape):
        dim = value.shape[d]
        if size is None and (not isinstance(dim, torch.SymInt) or not dim.node.expr.is_Symbol):
            fixed.append(d)
    return fixed


def _tied_by_the_host(segment: Segment, position: int, expression: Any, int_symbols: dict, offsets: IntOffsets) -> bool:
    """Whether `expression` (torch.export's value of int input `position`) is another int input plus
    the constant that the host adds to it at every call of the segment."""
    if len(expression.free_symbols) != 1:
        return False
    (symbol,) = expression.free_symbols
    other = int_symbols.get(symbol)
    difference = expression - symbol
    if other is None or not difference.is_Integer:
        return False
    return offsets.between(segment.name, position, other) == int(difference)


def _spread_hints(
    segment: Segment,
    offsets: IntOffsets,
    int_example: Callable[[int], int] = lambda hint: 2 * hint + 1,
    base: list | None = None,
) -> list:
    """Each parameter's example spread from its hint h (or its entry in `base` where that is not
    None) to 2h + 1 (a tensor's dynamic dims, an int), except an int the host computes from an
    earlier one, which keeps that offset.

    Spread the same way, the examples keep their order (a slice's bounds stay within its tensor),
    their differences are even (never the 1 that torch.export specializes), and specialize's meta
    runs have checked that the ops accept them (`_PERTURBATIONS`). `int_example` spreads the ints
    another way where that overshoots: `x[start:]` of 5 rows, traced with start = 4, is one row,
    and with start = 9 empty, both sizes that torch.export fixes; start = 2 leaves it dynamic."""
    hints: list = []
    anchors: dict[int, int] = {}
    for position, param in enumerate(segment.params):
        type_ = param.type
        known = base[position] if base is not None else None
        if known is not None:
            type_ = dataclasses.replace(type_, hint=known)
        if isinstance(type_, TensorType):
            hints.append(tuple(2 * h + 1 if size is None else h for h, size in zip(type_.hint, type_.shape)))
        elif isinstance(type_, ScalarType) and type_.kind != "float":
            offset = next(
                ((anchors[o], d) for o in anchors if (d := offsets.between(segment.name, position, o)) is not None),
                None,
            )
            if offset is None:
                anchors[position] = int_example(_int_example(type_))
                hints.append(anchors[position])
            else:
                hints.append(offset[0] + offset[1])
        else:
            hints.append(None)
    return hints


def _export(graph_module: fx.GraphModule, examples: list, dynamic: list, decompositions: Any) -> Any:
    """torch.export the segment with its dynamic dims and ints dynamic, decomposed by `decompositions`.

    torch.export fixes an int input marked `Dim.DYNAMIC` to its example silently when the example
    is 1 and the int sizes a tensor (`torch.arange(0, n)` with n = 1 became `arange(0, 1)`): the
    `.item()` of Tacotron2's padding mask has the example 1, so its mask kept one column whatever
    the lengths. Such an int is traced again with other examples. One that stays fixed whatever
    the example, or fails with every other, is one the ops admit one value of: one fixed at 0 or 1
    (an index into a dim of size 1, `h[0, k]` with one layer, where -1 is as good) stays as
    torch.export traced it; one fixed at 2 or more (a `bincount` length that a broadcast meets with
    a static size) is pinned, as where torch.export says so (`_ints_the_ops_pin`): the host checks
    it before each call, where the function would otherwise compute with the example's value."""
    exported = _export_once(graph_module, examples, dynamic, decompositions)
    fixed = _fixed_ints(exported, dynamic) - set(getattr(exported, "dycl_pinned", {}))
    for other in (2, 0, 3):
        if not fixed:
            break
        retried = [other if position in fixed else example for position, example in enumerate(examples)]
        try:
            candidate = _export_once(graph_module, retried, dynamic, decompositions)
        except Exception:
            continue
        if not _fixed_ints(candidate, dynamic) - set(getattr(candidate, "dycl_pinned", {})):
            return candidate
    pinned = {position: examples[position] for position in fixed if examples[position] >= 2}
    if pinned:
        exported.dycl_pinned = {**getattr(exported, "dycl_pinned", {}), **pinned}
    return exported


def _fixed_results(segment: Segment, exported: Any) -> list[Value]:
    """The segment's results that the Program types with a dynamic dim but `exported` returns with
    a number there: the function would return the example's size whatever its inputs."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    (output,) = [node for node in exported.graph.nodes if node.op == "output"]
    values = [node.meta.get("val") if isinstance(node, fx.Node) else node for node in output.args[0]]
    fixed = []
    for result, value in zip(segment.results, values[len(values) - len(segment.results) :]):
        if isinstance(result.type, TensorType) and isinstance(value, torch.Tensor):
            if any(size is None and is_concrete_int(value.shape[d]) for d, size in enumerate(result.type.shape)):
                fixed.append(result)
    return fixed


def _fixed_ints(exported: Any, dynamic: list) -> set[int]:
    """Positions of the int inputs marked dynamic that torch.export fixed to their example (a
    concrete value, or no input at all: torch.export drops an int input it made a constant)."""
    return {
        position
        for position, (value, spec) in enumerate(zip(_param_values(exported, len(dynamic)), dynamic))
        if spec is not None and not isinstance(spec, dict) and (value is None or _is_concrete(value))
    }


def _param_values(exported: Any, count: int) -> list:
    """The example value (a fake tensor, a SymInt or an int) of each of the segment's `count`
    parameters in `exported`, by its placeholder's name (`p0`, `p1`, ... as `_segment_graph` names
    them); None for one torch.export dropped (an int it made a constant), which would otherwise
    shift every later parameter onto the wrong value."""
    user_inputs = set(exported.graph_signature.user_inputs)
    values = {node.name: node.meta.get("val") for node in exported.graph.nodes if node.name in user_inputs}
    return [values.get(f"p{index}") for index in range(count)]


def _is_concrete(value: Any) -> bool:
    """An int, or a SymInt whose expression became a number (a specialized input)."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    return isinstance(value, (int, torch.SymInt)) and is_concrete_int(value)


# Held while a segment is exported: `_export_in_one_trace` swaps a function of torch's own module
# for the trace, and `torch.export.export` looks that function up at each call, so an export in
# another thread during the swap would trace with this segment's table, and two swaps that overlap
# would leave torch's module patched. Exports in this process take turns.
_EXPORT_LOCK = threading.RLock()  # re-entrant: `lower` holds it for all its segments


def _export_once(graph_module: fx.GraphModule, examples: list, dynamic: list, decompositions: Any) -> Any:
    with _EXPORT_LOCK:
        exported = _export_in_one_trace(graph_module, examples, dynamic, decompositions)
        if exported is not None:
            return exported
        OVERRIDE.release()  # the two-step path overrides the composite ops itself, where it should
        try:
            exported = torch.export.export(graph_module, tuple(examples), dynamic_shapes=tuple(dynamic), strict=False)
        except Exception as error:
            pinned = _ints_the_ops_pin(error, graph_module, dynamic)
            if pinned:
                # Exported with those ints at their examples; the host checks them (`_pinned_ties`).
                static = [None if position in pinned else spec for position, spec in enumerate(dynamic)]
                exported = _export_once(graph_module, examples, static, decompositions)
                ints = {position: examples[position] for position in pinned}
                exported.dycl_pinned = {**getattr(exported, "dycl_pinned", {}), **ints}
                return exported
            # Examples of size 0 or 1 make torch.export specialize; retrying with every dim dynamic
            # but AUTO lets it decide which dims the ops force to be static.
            relaxed = [
                {d: Dim.AUTO for d in range(e.dim())} if isinstance(e, torch.Tensor) and e.dim() else spec
                for e, spec in zip(examples, dynamic)
            ]
            exported = torch.export.export(graph_module, tuple(examples), dynamic_shapes=tuple(relaxed), strict=False)
        return exported.run_decompositions(decompositions)


def _ints_the_ops_pin(error: Exception, graph_module: fx.GraphModule, dynamic: list) -> set[int]:
    """Positions of the int inputs marked dynamic that torch.export refused to keep dynamic, as the
    segment's ops admit one value of each ("You marked L['p1'] as dynamic but your code specialized
    it to be a constant (2)"): a size made by data (`bincount`'s length) that meets a static size
    in a broadcast (`sums / sizes.unsqueeze(1)` over a `[2, 6]` sums) must be that size for the
    model to run at all."""
    names = [node.name for node in graph_module.graph.nodes if node.op == "placeholder"]
    pinned = set()
    specialized = r"You marked L\['(\w+)'\] as dynamic but your code specialized it to be a constant"
    for name in re.findall(specialized, str(error)):
        position = names.index(name) if name in names else None
        if position is not None and position < len(dynamic) and dynamic[position] is not None:
            if not isinstance(dynamic[position], dict):
                pinned.add(position)
    return pinned


def _export_in_one_trace(graph_module: fx.GraphModule, examples: list, dynamic: list, decompositions: Any) -> Any:
    """The segment exported and decomposed by one trace, or None where that fails (then the public
    two-step path, `torch.export.export` and `run_decompositions`, exports it and reports its errors).

    `torch.export.export` traces the graph once to pre-dispatch ATen ops and `run_decompositions`
    traces that again with the table: two traces of every node. torch.export's own ATen
    export (`_export` with `pre_dispatch=False`) traces once through the same AOT machinery that
    `run_decompositions` uses; the table reaches it through the `decomp_table` of the function it
    calls for that trace (`_export_to_aten_ir`), which `_export` takes from its module at each call.
    Both are private to torch 2.13 (pinned): where either is missing or differs, this returns None,
    as it does where the one trace fails (BlockDrop's `select` of a policy column at an int index,
    which the two-step path's retries fix; 3 of its 59 segments).

    The modules of both paths were the same bytes for ResNet-50, the early-exit ResNet-50, every
    program of `models/programs.py`, the SDN models of the zoo and RANet. The pre-dispatch trace also checks the dtype
    of a tensor it converts (`aten._assert_tensor_metadata` before `mask.float()`: SkipNet's gates,
    one in BlockDrop), which the one trace leaves out; with those checks removed, the modules were
    the same after canonicalization (tests/test_export_time.py).

    The swap is global state: callers hold `_EXPORT_LOCK` (`_export_once`), and it is undone
    whatever the trace does."""
    from torch.export import _trace
    from torch.export import exported_program as programs

    traced = getattr(_trace, "_export_to_aten_ir", None)
    export = getattr(_trace, "_export", None)
    split = getattr(programs, "_split_decomp_table_to_cia_and_python_decomp", None)
    override = getattr(programs, "_override_composite_implicit_decomp", None)
    if traced is None or export is None or split is None or override is None:
        return None
    # As `run_decompositions` does, the table's composite ops (bilinear upsampling's `.vec`) replace
    # their composite kernels for the trace. It also keeps every other composite op from being
    # decomposed, at a cost that took most of what the one trace saves (the early-exit ResNet-50,
    # lowering's CPU time, same process, alternating, busy machine: 14.5-16.2 s in two steps,
    # 15.1-15.4 in one with that, 11.2-13.8 without); the modules were the same without it (below).
    composite, table = split_table(decompositions, split)
    _trace._export_to_aten_ir = functools.partial(traced, decomp_table=table)
    try:
        with OVERRIDE.enter(override, composite):
            return export(graph_module, tuple(examples), None, tuple(dynamic), strict=False, pre_dispatch=False)
    except Exception:
        return None
    finally:
        _trace._export_to_aten_ir = traced


def _segment_graph(
    segment: Segment, constants: dict[Any, tuple[str, torch.Tensor]], hints: list | None = None
) -> tuple[fx.GraphModule, list, list]:
    """The segment as an fx graph, with its example inputs (at the Program's hints, or at `hints` where
    one is given per parameter) and their dynamic shapes."""
    graph = fx.Graph()
    root = torch.nn.Module()
    env: dict[Value, Any] = {}
    examples: list = []
    dynamic: list = []
    for index, param in enumerate(segment.params):
        placeholder = graph.placeholder(f"p{index}")
        type_ = param.type
        hint = hints[index] if hints is not None else None
        if isinstance(type_, TensorType):
            if hint is not None:
                type_ = dataclasses.replace(type_, hint=hint)
            examples.append(_example_tensor(_long_enough(type_, param, segment)))
            dims = {d: Dim.AUTO for d, size in enumerate(type_.shape) if size is None}
            dynamic.append(dims or None)
            env[param] = placeholder
        elif isinstance(type_, ScalarType) and type_.kind == "float":
            examples.append(torch.tensor(float(type_.hint), dtype=torch.float32))
            dynamic.append(None)
            env[param] = graph.call_function(torch.ops.aten.item.default, (placeholder,))
        else:
            # Ints of 0 and 1 stay dynamic under Dim.DYNAMIC (unlike tensor dims of size 0 and 1),
            # but sizes derived from them do not (`_export_segment`).
            examples.append(hint if hint is not None else _int_example(type_))
            dynamic.append(Dim.DYNAMIC)
            env[param] = placeholder

    def constant(key: Any, value: torch.Tensor) -> fx.Node:
        name, _ = constants.setdefault(key, (f"_const{len(constants)}", value))
        if not hasattr(root, name):
            # The same tensor object in every segment: the importer then stores one blob.
            setattr(root, name, constants[key][1])
        return graph.get_attr(name)

    def convert(arg: Any, in_list: bool = False) -> Any:
        if isinstance(arg, Value):
            return env[arg]
        if isinstance(arg, ListArg):
            return [convert(item, in_list=True) for item in arg.items]
        value = arg.value if isinstance(arg, Constant) else arg
        if isinstance(value, torch.Tensor):
            node = constant(id(value), value)
            if in_list:
                # import_frozen_program puts frozen constants into the op's arguments as literal
                # tensors, which it cannot import inside a list ("Heterogeneous lists are not
                # supported"); a copy makes the list element a computed value.
                node = graph.call_function(torch.ops.aten.clone.default, (node,))
            return node
        return value

    def stored_as(weight: torch.Tensor, order: list[int]) -> fx.Node:
        # Stored permuted by `order`, permuted back in the graph; keyed by the weight's id, alive for
        # the whole import, as the copy in `constants` (the importer caches literals by tensor id).
        stored = constant(("stored", tuple(order), id(weight)), weight.permute(order).contiguous())
        back = sorted(range(len(order)), key=order.__getitem__)
        return graph.call_function(torch.ops.aten.permute.default, (stored, back))

    depthwise: dict[Value, list] = {}  # a depthwise convolution's output: its arguments
    padded: set[Value] = set()  # those whose input is a padded expansion's (`padded_expansion`)
    banded: dict[Value, tuple] = {}  # those of them that run in bands: the expansion's arguments
    expansions = Expansions(segment)
    for position, op in enumerate(segment.nodes):
        overload = overload_of(op.target)
        args = [convert(a) for a in op.args]
        kwargs = {k: convert(a) for k, a in op.kwargs}
        tile, weight, linear = 0, None, None
        if overload is torch.ops.aten.linear.default and (matrix := _constant_weight(op.args[1], 2)) is not None:
            linear = one_row_linear(op.args[0].type if isinstance(op.args[0], Value) else None, matrix)
            if linear is None:
                args[1] = stored_as(matrix, [1, 0])  # [in, out], as IREE's matmuls read it
        if overload in _CONV2D and (weight := _constant_weight(op.args[1])) is not None:
            tile = _winograd_tile(overload, op.args[0], weight, args, kwargs)
            if not tile:
                args[1] = stored_as(weight, [2, 3, 1, 0])  # HWCF
                if _is_depthwise(overload, op, weight, args, kwargs):
                    if (found := expansions.padded_input(op, args)) is not None:
                        # A constant mask (static sizes): IREE then fuses the zeroed border into the
                        # matmul (or the stem's convolution) at full speed, where an iota-computed
                        # one made the matmul 1.8x slower.
                        function, expansion = found
                        mask = inside_mask(*op.args[0].type.shape[2:], expansion[3])
                        mask_node = constant(("inside", mask.shape, *expansion[3]), mask)
                        expansion = (*expansion[:4], mask_node, *expansion[5:])
                        args[0] = graph.call_function(function, expansion)
                        padded.add(op.outputs[0])
                        if function is pointwise_convolution_padded and in_bands(op.args[0].type.shape, weight, args):
                            banded[op.outputs[0]] = expansion
                    depthwise[op.outputs[0]] = args
        expansions.note(op, overload, args, kwargs, None if tile else weight)
        activated = _activated_depthwise(overload, op, args, kwargs, depthwise)
        if activated is not None:
            # The convolution's own node stays for any other user; torch.export drops it if none.
            if op.args[0] in banded:
                node = graph.call_function(depthwise_of_expansion_in_bands, (banded[op.args[0]], *activated[1:]))
            else:
                rewrite = depthwise_convolution_of_padded if op.args[0] in padded else depthwise_convolution_activated
                node = graph.call_function(rewrite, activated)
        elif op.outputs and op.outputs[0] in banded:
            node = graph.call_function(depthwise_of_expansion_in_bands, (banded[op.outputs[0]], *args[1:6]))
        elif op.outputs and op.outputs[0] in padded:
            node = graph.call_function(depthwise_convolution_of_padded, tuple(args[:6]))
        elif tile:
            # The filter transformed once, here, and stored as the constant (`winograd.transformed_filter`).
            transformed = constant(("winograd", tile, id(weight)), winograd.transformed_filter(weight, tile))
            padding = _winograd_padding(args, kwargs)
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            winograd_args = (args[0], transformed, bias, padding, tile)
            node = graph.call_function(winograd.convolution_with_transformed_filter, winograd_args)
        elif linear is not None:
            node = graph.call_function(linear, tuple(args), kwargs)
        elif (scales := _given_scales(overload, args, kwargs)) is not None:
            nearest = (NEAREST_BY_SIZES[overload], *args[:2], *scales)
            node = graph.call_function(upsample_nearest_by_given_scales, nearest)
        else:
            node = graph.call_function(overload, tuple(args), kwargs)
        # torch.export renames nodes but keeps "custom" metadata: how `_explain` finds the op.
        node.meta["custom"] = {"dycl_op": position}
        if op.returns == "single":
            env[op.outputs[0]] = node
        else:
            for position, output in enumerate(op.outputs):
                env[output] = graph.call_function(operator.getitem, (node, position))
    graph.output(tuple(env[r] for r in segment.results))
    return fx.GraphModule(root, graph), examples, dynamic


def _given_scales(overload: Any, args: list, kwargs: dict) -> list | None:
    """The scale arguments of a nearest upsampling given output sizes (`NEAREST_BY_SIZES`), those
    after its output size in order, where any is given; None otherwise."""
    if overload not in NEAREST_BY_SIZES:
        return None
    names = [argument.name for argument in overload._schema.arguments][2:]
    scales = [kwargs.get(name, args[2 + i] if 2 + i < len(args) else None) for i, name in enumerate(names)]
    return scales if any(scale is not None for scale in scales) else None


def _refuse_specialized_dims(segment: Segment, exported: Any) -> list[SizeTie]:
    """A dim the Program types dynamic must stay dynamic in the segment's function: when torch.export
    or its decompositions fixed it to the example's size (`Dim.AUTO` lets them), the function would
    refuse every other size at run time. Say which op forced it where we can tell (the recurrent
    layers, which torch unrolls over the time steps of the example). A dim tied to an integer
    combination of other inputs' dynamic sizes is kept: the host checks it (`size_ties.py`)."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    values = _param_values(exported, len(segment.params))
    symbols, ties = input_symbols(segment.params, values), _pinned_ties(segment, exported)
    for position, (param, value) in enumerate(zip(segment.params, values)):
        if not isinstance(param.type, TensorType) or not isinstance(value, torch.Tensor):
            continue
        # A specialized dim is still a SymInt, whose expression became a number or, where the
        # specialized size was derived from this dim and an int, an expression of that int.
        fixed = []
        for d in _fixed_or_derived_dims(param.type, value):
            tie = _size_tie(segment, position, d, value.shape[d], symbols)
            if tie is None:
                fixed.append(d)
            else:
                ties.append(tie)
        if not fixed:
            continue
        what = f"dim {fixed[0]} of segment input {position} ({format_value(param)})"
        dim = value.shape[fixed[0]]
        if not is_concrete_int(dim):
            raise _refused(
                segment,
                f"torch.export tied {what} to the other inputs ({dim.node.expr}) at the example's sizes, "
                "although it changes apart from them at run time",
            )
        example = int(dim)
        for op in segment.nodes:
            if op.target in UNROLLED_OVER_TIME:
                raise UnsupportedOpError(
                    op.target,
                    op.source,
                    segment.name,
                    f"{UNROLLED_OVER_TIME[op.target]} needs a sequence length known at export time (torch.export "
                    f"unrolls it over the example's {example} time steps), but {what} changes at run time: export "
                    "with a fixed sequence length, or step an nn.LSTMCell / nn.GRUCell / nn.RNNCell in a loop",
                )
        raise _refused(
            segment, f"torch.export fixed {what} to the example's size {example}, although it changes at run time"
        )
    return ties


def _pinned_ties(segment: Segment, exported: Any) -> list[SizeTie]:
    """A check of each int input the ops pinned to its example (`_ints_the_ops_pin`): the function
    computes with that value, so another one at run time raises, where PyTorch raises at the op
    (or, for a size of 1 that the op broadcasts, where it would not)."""
    ties = []
    for position, value in sorted(getattr(exported, "dycl_pinned", {}).items()):
        name = format_value(segment.params[position])
        expression = f"the run-time size {name} == {value}, which the ops after it need"
        ties.append(SizeTie(segment.name, position, None, (), value, expression, segment.nodes[0].source))
    return ties


def _size_tie(segment: Segment, position: int, dim: int, size: Any, symbols: dict) -> SizeTie | None:
    """The tie of input `position`'s `dim` to other inputs' sizes that the host can check, if it is one."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    if is_concrete_int(size) or not isinstance(size, torch.SymInt):
        return None
    # Only other tensors' dims: a tie to an int comes from a size torch.export specialized to 1 at
    # the examples (`rows[start:]` made the list's rows `start + 1`), which no host check can make right.
    others = {s: at for s, at in symbols.items() if at[0] != position and at[1] is not None}
    found = affine_tie(size.node.expr, others)
    if found is None:
        return None
    terms, constant = found

    def name(p: int, d: int | None) -> str:
        return format_value(segment.params[p]) + ("" if d is None else f".size({d})")

    named = [f"{c} * " * (c != 1) + name(p, d) for c, p, d in terms]
    expression = f"{name(position, dim)} == " + " + ".join([*named, *([str(constant)] if constant else [])])
    return SizeTie(segment.name, position, dim, terms, constant, expression, segment.nodes[0].source)


_CONV2D = (torch.ops.aten.conv2d.default, torch.ops.aten.conv2d.padding)  # padding=1 / padding="same"


def _conv2d_argument(args: list, kwargs: dict, index: int, name: str, default: Any) -> Any:
    """`aten::conv2d(input, weight, bias, stride, padding, dilation, groups)`'s argument, given or not."""
    return args[index] if len(args) > index else kwargs.get(name, default)


_ACTIVATIONS = {torch.ops.aten.hardtanh.default: "hardtanh", torch.ops.aten.relu.default: "relu"}


def _is_depthwise(overload: Any, op: Any, weight: torch.Tensor, args: list, kwargs: dict) -> bool:
    """Whether a conv2d of a constant filter is a depthwise one of a 4-D input, with every argument
    given and its stride, padding and dilation known at export."""
    if overload is not torch.ops.aten.conv2d.default or kwargs or len(args) != 7 or weight.dim() != 4:
        return False
    input = op.args[0]
    if not isinstance(input, Value) or not isinstance(input.type, TensorType) or len(input.type.shape) != 4:
        return False
    for setting in args[3:6]:  # stride, padding, dilation
        if not isinstance(setting, (list, tuple)) or not all(type(size) is int for size in setting):
            return False
    return weight.shape[1] == 1 and args[6] == weight.shape[0]


def _activated_depthwise(overload: Any, op: Any, args: list, kwargs: dict, depthwise: dict) -> tuple | None:
    """The arguments of `decompositions.depthwise_convolution_activated` for a ReLU6 (`hardtanh`) or
    ReLU of a depthwise convolution's output (`depthwise`), with constant bounds; None otherwise."""
    if overload not in _ACTIVATIONS or kwargs or not isinstance(op.args[0], Value) or op.args[0] not in depthwise:
        return None
    if not all(type(bound) in (int, float) for bound in args[1:]):
        return None
    return (*depthwise[op.args[0]][:6], _ACTIVATIONS[overload], *args[1:])


def _winograd_padding(args: list, kwargs: dict) -> list[int]:
    padding = _conv2d_argument(args, kwargs, 4, "padding", 0)
    return list(padding) * (2 // len(padding)) if isinstance(padding, (list, tuple)) else [padding, padding]


def _winograd_tile(overload: Any, input: Any, weight: torch.Tensor, args: list, kwargs: dict) -> int:
    """The Winograd output tile of a 2-D convolution of a constant filter (`winograd.output_tile`),
    or 0: only 3x3 filters with stride 1, no dilation, no groups, a padding of ints and a float32
    input whose height and width are known at export."""
    if overload is not torch.ops.aten.conv2d.default or tuple(weight.shape[2:]) != (3, 3):
        return 0
    if weight.dtype != torch.float32 or not isinstance(input, Value) or not isinstance(input.type, TensorType):
        return 0
    shape = input.type.shape
    settings = [_conv2d_argument(args, kwargs, index, name, 1) for index, name in ((3, "stride"), (5, "dilation"))]
    if any(not _all_ones(setting) for setting in settings) or _conv2d_argument(args, kwargs, 6, "groups", 1) != 1:
        return 0
    padding = _conv2d_argument(args, kwargs, 4, "padding", 0)
    if not all(isinstance(size, int) for size in (padding if isinstance(padding, (list, tuple)) else [padding])):
        return 0
    if len(shape) != 4 or not all(isinstance(size, int) for size in shape[2:]):
        return 0
    return winograd.output_tile(weight.shape[1], weight.shape[0], shape[2:])


def _all_ones(setting: Any) -> bool:
    return all(value == 1 for value in setting) if isinstance(setting, (list, tuple)) else setting == 1


def _constant_weight(arg: Any, rank: int = 4) -> torch.Tensor | None:
    """The weight of a convolution (`rank` 4) or of a linear layer (`rank` 2) when it is a frozen
    floating-point constant.

    Such a filter is stored in HWCF order and permuted back to FCHW in the graph. The CPU target
    converts convolutions to channels-last (`compile.py`), which transposes the filter to HWCF
    again: the two transposes cancel at compile time wherever the convolution is. Without this,
    a filter transpose inside a branch of the compiled host is not constant-folded (IREE 3.13
    folds the same transpose outside the branches) and the convolution becomes a generic op
    with a transposed filter operand that IREE does not vectorize (WRN-SDN's deepest path:
    57 ms instead of 1.45 ms).

    A linear layer's weight is stored [in, out], and `linear`'s own transpose cancels the one back:
    stored [out, in], IREE 3.13 multiplied by its transpose, 2.1x slower with AVX2, outside the
    register tile (`data_tiling`; 3136 rows by Linear(64, 256) + ReLU: 2.77 -> 1.30 ms a call)."""
    value = arg.value if isinstance(arg, Constant) else None
    if isinstance(value, torch.Tensor) and value.dim() == rank and value.is_floating_point():
        return value
    return None


def _long_enough(type_: TensorType, param: Value, segment: Segment) -> TensorType:
    """`type_` with a hint at least as long as the segment narrows `param` to in a dynamic dim.

    Specialize narrows a dynamic dim that must match a static size (Tacotron2's padding mask read
    from `lengths.max().item()`, against the encoder's steps) to that size, after a host check;
    torch.export cannot trace the narrow on an example shorter than that."""
    hint = list(type_.hint)
    for op in segment.nodes:
        if op.target == "aten::narrow.default" and op.args[0] == param:
            dim, start, length = (arg.value if isinstance(arg, Constant) else None for arg in op.args[1:])
            if isinstance(dim, int) and isinstance(start, int) and isinstance(length, int):
                if type_.shape[dim] is None:
                    hint[dim] = max(hint[dim], start + length + 1)
    return dataclasses.replace(type_, hint=tuple(hint))


def _int_example(type_: ScalarType) -> int:
    """An int (or bool) parameter's example: its hint, or 1 for a negative one.

    A negative example makes torch.export fail on an index (`h[0, k]` with k = -1: "Invalid ranges
    [0:-1]"); the graph must hold for every value anyway, so it traces with 1."""
    hint = int(type_.hint) if type_.hint is not None else 2
    return hint if hint >= 0 else 1


def _example_tensor(type_: TensorType) -> torch.Tensor:
    dtype = torch_dtype(type_.dtype)
    if dtype.is_floating_point:
        return torch.randn(type_.hint, dtype=dtype)
    return torch.zeros(type_.hint, dtype=dtype)


def explain_compile_error(
    program: Program, target: str, error: Exception, observed: ObservedCalls | None = None
) -> Exception:
    """Find the segment (and, where the message names it, the op) that iree-compile rejects.

    iree-compile reports errors at `<unknown>` locations for imported FX graphs, so compile the
    segments one by one until one fails. This runs only after a failure.
    """
    from .compile import compile_module
    from .errors import CompileError

    for segment in program.segments:
        exported: list[Any] = []
        fold = target.startswith("llvm-cpu")
        lowered = lower(program, only=[segment.name], exported=exported, fold_ranges=fold, observed=observed)
        try:
            compile_module(module_bytecode(lowered.module), target)
        except CompileError as segment_error:
            return _explain(segment, segment_error, exported[0] if exported else None, compiling=True)
    return error


def module_bytecode(module: Any) -> bytes:
    """The module as MLIR bytecode: what iree-compile reads (text would spell out every weight)."""
    import io

    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    return buffer.getvalue()


def _explain(segment: Segment, error: Exception, exported: Any = None, compiling: bool = False) -> UnsupportedOpError:
    """Name the op (and its source line) that the error is about, as well as we can tell.

    torch.export and its decompositions say which graph node they were executing when an op
    failed, and every node carries the position of its `TensorOp` (`_segment_graph`): that op is
    the one to blame, even when the error text also names the ops feeding it (a `view` that fails
    on what a pooling returned is the view's line, not torch's pooling.py)."""
    text = str(error)
    failed = _failed_node_op(segment, error, text, exported)
    if failed is not None:
        return UnsupportedOpError(failed.target, failed.source, segment.name, first_error_line(text))
    diagnosed = _diagnosed_op(segment, text, exported)
    if diagnosed is not None:
        op, name = diagnosed
        same = name.split(".")[1] if "." in name else name
        made = "" if same == op.target.split("::")[1].split(".")[0] else ", which its decomposition makes"
        return UnsupportedOpError(op.target, op.source, segment.name, f"{first_error_line(text)} ({name}{made})")
    # An op named in the text as `aten.x`, `aten::x` or `torch.aten.x`: a bare name matched words
    # of the tool's own output ("to" in "... in your environment to save all artifacts").
    for op in segment.nodes:
        name = op.target.split("::")[1].split(".")[0]
        if re.search(rf"\baten(?:\.|::){re.escape(name)}\b", text):
            return UnsupportedOpError(op.target, op.source, segment.name, first_error_line(text))
    if compiling and len(segment.nodes) > 1:
        # iree-compile named no op of the segment ("'memref.alloca' op expected no unbounded stack
        # allocations", or a constant an unlowered op reads): every op is a suspect, none is blamed.
        return UnsupportedOpError(_suspects(segment), "", segment.name, first_error_line(text))
    return _refused(segment, first_error_line(text))


def _suspects(segment: Segment, shown: int = 6) -> str:
    """ "one of aten::a (m.py:3), aten::b (m.py:4) and 5 more": a segment's ops, where an error names
    none of them."""
    listed = [f"{op.target} ({op.source})" if op.source else op.target for op in segment.nodes[:shown]]
    more = len(segment.nodes) - shown
    return "one of " + ", ".join(listed) + (f" and {more} more" if more > 0 else "")


def _diagnosed_op(segment: Segment, text: str, exported: Any) -> tuple[Any, str] | None:
    """The TensorOp whose exported nodes include the op an iree-compile diagnostic names, and that
    name (`aten.erfinv`, or a `torch.operator`'s: `prims.scalar_tensor`), or None.

    The diagnostic names the op torch-mlir could not convert, which a decomposition may have made
    (xlogy's makes `prims.scalar_tensor`); each exported node knows the op it came from. The name
    alone matched against the segment's ops found nothing there, and the error fell back to the
    segment's first op."""
    names = re.findall(r'name = "torch\.([\w.]+)"', text)
    names += re.findall(r"failed to legalize operation 'torch\.((?:aten|prims)\.[\w.]+)'", text)
    names += re.findall(r"'torch\.((?:aten|prims)\.[\w.]+)' op ", text)  # the verifier's
    # The importer's: torch.export wraps an op with side effects (`linalg.inv`'s check of its
    # result) in the higher-order op `with_effects`, which torch-mlir's FxImporter does not import.
    names += re.findall(r"Higher-order operation '(\w+)' not implemented", text)
    if not names or exported is None:
        return None
    name = names[0]
    for node in exported.graph.nodes:
        target = str(node.target) if node.op == "call_function" else ""
        position = node.meta.get("custom", {}).get("dycl_op")
        if (target == name or target.startswith(name + ".")) and isinstance(position, int):
            if position < len(segment.nodes):
                wrapped = node.args[1] if name == "with_effects" and len(node.args) > 1 else None
                return segment.nodes[position], f"{name} of {wrapped}" if wrapped is not None else name
    return None


def _failed_node_op(segment: Segment, error: BaseException, text: str, exported: Any) -> Any:
    """The TensorOp whose node torch was executing when `error` was raised, or None: the innermost
    `torch.fx.Interpreter.run_node` frame of the traceback, else the node that "While executing
    %name" names in the exported graph."""

    def op_of(node: Any) -> Any:
        position = node.meta.get("custom", {}).get("dycl_op") if isinstance(node, fx.Node) else None
        return segment.nodes[position] if isinstance(position, int) and position < len(segment.nodes) else None

    found = None
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code.co_name == "run_node":
            found = op_of(traceback.tb_frame.f_locals.get("n")) or found
        traceback = traceback.tb_next
    match = re.search(r"While executing %(\w+)", text)
    if found is None and match and exported is not None:
        named = [node for node in exported.graph.nodes if node.name == match.group(1)]
        found = op_of(named[0]) if named else None
    return found


def first_error_line(text: str) -> str:
    """The first `error:` line of a tool's output (or its first line). A `CompileError` already
    starts with its one-line summary (`compile.describe_failure`): a diagnostic, or a crash's signal,
    pass and frames, which has no `error:` of its own."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if lines and re.match(r"iree-compile failed for target \S+: \S", lines[0]):
        return lines[0][:400]
    for line in lines:
        if "error:" in line:
            return line[:400]
    return lines[0][:400] if lines else ""


def _signatures(module: Any) -> dict[str, tuple[list[str], list[str]]]:
    from torch_mlir import ir

    signatures: dict[str, tuple[list[str], list[str]]] = {}
    for op in module.body.operations:
        if op.operation.name != "func.func":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        function_type = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
        signatures[name] = ([str(t) for t in function_type.inputs], [str(t) for t in function_type.results])
    return signatures
