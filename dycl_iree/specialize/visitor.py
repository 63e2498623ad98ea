"""Specialize: type a frozen TorchScript graph by the example inputs and fold all it decides.

This stage is an abstract interpreter over the TorchScript graph. Each TorchScript value maps to
one *entry*: a `Constant` (known at export time), a typed `Value` (known only at run time), a
`ListArg` (a fixed-length list) or a `TupleEntry`. Walking the graph with these entries folds everything
the input types decide: `aten::dim`, static `aten::size`, dtype and device queries, `is None` on a
value that cannot be None, and with them every `prim::If` whose condition became a constant (the
rank checks of `nn.GRUCell` and friends, and the `prim::RaiseException` they guard). What is left
is the truly data-dependent control flow, emitted as a `Program` with inline `TensorOp`s.

Shapes come from running each tensor op on meta tensors of the example ("hint") sizes. A dim is
dynamic (`None`) when the user declares it, when it differs between the two sides of a branch or
between loop iterations, or when it changes if the dynamic dims and run-time ints it depends on
change (two more meta runs with those perturbed, by +1 and to 2h + 1).

TorchScript mutates lists (`aten::append`) and tensors (`add_`) in place; the Program is SSA, so a
mutation rebinds the TorchScript value to a new Program value, and values mutated inside a branch
or loop become extra outputs or loop-carried values.

The walk is split by what it handles: `control` (branches and loops), `tensor_lists` (lists of
tensors of run-time length), `host_ops` (sizes and host scalars), `mutation` (writes through views),
`selections` (sizes made by data: `nonzero`, boolean masks), `list_tensors` (`torch.tensor` of lists).

Example:
    >>> program = specialize(capture(model), (torch.randn(1, 8),))     # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import re
from typing import Any, Callable, Iterable, Sequence

import torch

from ..capture import CapturedModel
from ..errors import DyclError, SpecializeError, UnsupportedOpError
from ..program import (
    Block,
    Constant,
    HostOp,
    ListArg,
    ListType,
    Node,
    Program,
    ScalarType,
    TensorOp,
    TensorType,
    Type,
    Value,
)
from .aliasing import collect_mutated_lists, follow_inner_list, note_inner_lists
from .control import ControlFlow
from .host_ops import SYNC_OPS, HostScalars, without_unread_known_lists
from .list_tensors import ListTensors
from .mutation import SEVERAL, StaleView, ViewLink, fresh_view, mark_stale, view_chain, write_back
from .observed import ObservedSizes
from .packed import PackedSequences
from .ragged_lists import RaggedLists, concatenation_dims, list_concatenation_dims
from .recurrent import RECURRENT_OPS, check_weights, layers_graph, time_dim_is_dynamic
from .schemas import (
    DTYPE_CODES,
    call_overload,
    convert_args,
    convert_kwargs,
    dtype_name,
    functional_overload,
    mutates_first_argument,
    overload_of,
    resolve_overload,
    result_tensors,
    returns_view,
    schema_touches_tensors,
    source_of,
    torch_dtype,
    unknown_sizes,
)
from .selections import Selections
from .structured import (
    STRUCTURED_HANDLERS,
    OptionalEntry,
    RecordEntry,
    StructuredValues,
    flatten_entries,
    output_tree,
    unflatten_entries,
)
from .tensor_lists import STRUCTURAL_LIST_OPS, TensorLists
from .tuple_lists import TupleLists
from .values import (
    INT64_MAX,
    UNINITIALIZED,
    RaggedList,
    TensorList,
    TupleEntry,
    hint_of,
    input_types,
    is_dynamic,
    is_none,
    list_element_kind,
    none_inputs,
    real_value,
    scalar_list_kind,
    split_arguments,
    tensor_type_of,
    value_name,
    walk_args,
)

# Ops whose result is random: never folded at export time.
_NONDETERMINISTIC = re.compile(
    r"rand|normal|bernoulli|dropout|multinomial|uniform|poisson|exponential|geometric|cauchy"
)


class _Specializer(
    ControlFlow,
    TupleLists,
    StructuredValues,
    TensorLists,
    RaggedLists,
    HostScalars,
    PackedSequences,
    Selections,
    ListTensors,
    ObservedSizes,
):
    """The abstract interpreter: an environment from TorchScript values to entries, and the Program's
    nodes so far. Control flow, structured values (Optionals, dicts, NamedTuples, objects), lists of
    run-time length (stacked or ragged), host scalars, PackedSequences and sizes made by data
    (`selections`) are its mixins."""

    def __init__(self, captured: CapturedModel) -> None:
        self.captured = captured
        self.env: dict[int, Any] = {}
        self.ids = itertools.count()
        self.nodes: list[Node] = []
        self.raised = False
        # TorchScript values made as views (by their unique): how each was made from its base. See
        # `mutation`.
        self.views: dict[int, ViewLink] = {}
        self.unlinked_views: set[Any] = set()  # the entries of those views made several at once
        self.labels = itertools.count()
        self.meta_cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id -> (constant, meta tensor)
        # (tensor, dim) -> the run-time int it was created with (`torch.zeros(1, n, h)`), so that
        # reading that size back gives the same value: `hx.size() != (1, n, h)` then folds.
        self.dim_sources: dict[tuple[Value, int], Value] = {}
        # Lists that some node appends to: they live on the host as run-time values.
        self.mutated_lists = collect_mutated_lists(captured.graph)
        # A host list made of constants and appended constants in straight-line code (a list
        # comprehension TorchScript unrolled): its items (`host_ops.visit_host_op` folds reads).
        self.known_lists: dict[Value, tuple] = {}
        self.inner_lists: dict[int, list] = {}  # a mutable list -> the lists holding it (`aliasing`)
        self.concatenation_dims, self.stacks_lists = concatenation_dims(captured.graph, self.mutated_lists)
        self.list_dims = list_concatenation_dims(captured.graph)  # each list's own (`laying_out`)
        self.layout_list: int | None = None
        self.size_witnesses: list = []  # see `tensor_lists.empty_stacked`
        self.read_along: set[int] = set()  # see `ragged_lists.dims_read_along`
        self.packed_seen = False  # whether a PackedSequence was made: `packed` then watches its reads
        self.raised_hints = 0  # dynamic dims of size 0 or 1 at the examples, typed 2 (`control.visit_loop`)

    # -- values -----------------------------------------------------------------------------
    def new_value(self, type_: Type, name: str = "") -> Value:
        return Value(next(self.ids), type_, name)

    def entry(self, ts_value: torch._C.Value) -> Any:
        try:
            entry = self.env[ts_value.unique()]
        except KeyError:
            raise SpecializeError(f"internal: TorchScript value %{ts_value.debugName()} has no entry") from None
        if isinstance(entry, StaleView):
            # A view read after a write into its tensor shows the written values: take it again.
            entry = fresh_view(self, entry, value_name(ts_value) or "a view")
            self.bind(ts_value, entry)
        return entry

    def bind(self, ts_value: torch._C.Value, entry: Any) -> None:
        self.env[ts_value.unique()] = entry
        follow_inner_list(self, ts_value, entry)

    def materialize(self, entry: Any, source: str) -> Any:
        """A constant tensor that crosses control flow needs a device buffer: copy it in a segment."""
        if isinstance(entry, Constant) and isinstance(entry.value, torch.Tensor):
            type_ = tensor_type_of(entry)
            value = self.new_value(type_, "const")
            self.nodes.append(TensorOp("aten::clone.default", (entry,), (), (value,), source))
            return value
        return entry

    # -- walking ----------------------------------------------------------------------------
    def visit_nodes(self, nodes: Iterable[torch._C.Node]) -> None:
        for node in nodes:
            if self.raised:
                # Code after a raise in the same block never runs.
                break
            self.visit(node)

    def visit(self, node: torch._C.Node) -> None:
        kind = node.kind()
        handler = _HANDLERS.get(kind)
        if self.reads_packed(node):
            self.visit_packed_use(node)
        elif handler is not None:
            handler(self, node)
        elif kind.startswith("aten::") or kind.startswith("prim::"):
            self.visit_op(node)
        else:
            raise UnsupportedOpError(kind, source_of(node), detail="custom or unknown operator")

    def sub_block(
        self, block: torch._C.Block, params: Sequence[Any], mutated: Sequence[torch._C.Value]
    ) -> tuple[list[Node], list[Any], bool]:
        """Visit `block` into a fresh node list; return its nodes, results and whether it raised."""
        saved_nodes, saved_raised, saved_dims = self.nodes, self.raised, dict(self.dim_sources)
        self.nodes, self.raised = [], False
        for ts_param, entry in zip(block.inputs(), params):
            self.bind(ts_param, entry)
        # In a loop body the tensors the loop writes are carried values: views of them taken before
        # the loop are taken again from those when read (in a branch, from the same tensors).
        mark_stale(self, list(mutated), "", keep={value.unique() for value in mutated})
        self.visit_nodes(block.nodes())
        if self.raised:
            # The block's results are never read: a raise may have cut off the nodes that make them.
            results = [Constant(UNINITIALIZED)] * (len(list(block.outputs())) + len(mutated))
        else:
            results = [self.entry(v) for v in block.outputs()] + [self.entry(m) for m in mutated]
            leaves, structure = flatten_entries(results)
            results = unflatten_entries(structure, [self.materialize(leaf, "") for leaf in leaves])
        nodes, raised = self.nodes, self.raised
        # Sizes read inside the block are values of the block: reading them again after it reads anew.
        self.nodes, self.raised, self.dim_sources = saved_nodes, saved_raised, saved_dims
        return nodes, results, raised

    # -- prim ops ----------------------------------------------------------------------------
    def visit_constant(self, node: torch._C.Node) -> None:
        output = node.output()
        if output.type().kind() == "NoneType":
            self.bind(output, Constant(None))
            return
        value = output.toIValue()
        if value == [] and output.type().kind() == "ListType" and scalar_list_kind(output.type()) is None:
            # An empty list of tuples or tensors that TorchScript folded into a constant
            # (`new_hypos: List[Hypothesis] = []`): the empty list a `[]` of that type makes.
            self.bind(output, ListArg(()))
            return
        self.bind(output, Constant(value))

    def visit_tuple_unpack(self, node: torch._C.Node) -> None:
        tuple_entry = self.entry(node.input())
        structural = isinstance(tuple_entry, (TupleEntry, RecordEntry))
        items = tuple_entry.items if structural else tuple_entry.value
        for output, item in zip(node.outputs(), items):
            self.bind(output, item if structural else Constant(item))

    def visit_tuple_index(self, node: torch._C.Node) -> None:
        tuple_entry, index = (self.entry(v) for v in node.inputs())
        if isinstance(tuple_entry, Constant):
            # A tuple TorchScript folded into one constant (`(zeros, zeros)` as an RNN's state).
            self.bind(node.output(), Constant(tuple_entry.value[index.value]))
        else:
            self.bind(node.output(), tuple_entry.items[index.value])

    def visit_list_construct(self, node: torch._C.Node) -> None:
        items = tuple(self.entry(v) for v in node.inputs())
        output = node.output()
        if output.unique() in self.mutated_lists and scalar_list_kind(output.type()) is not None:
            element = list_element_kind(output.type(), source_of(node))
            value = self.new_value(ListType(element, tuple(hint_of(i) for i in items)), value_name(output))
            self.nodes.append(HostOp("prim::ListConstruct", items, (value,), source_of(node)))
            self.bind(output, value)
            if all(isinstance(i, Constant) for i in items):
                self.known_lists[value] = tuple(i.value for i in items)
        elif scalar_list_kind(output.type()) is not None and all(
            isinstance(i, Constant) and not isinstance(i.value, torch.Tensor) for i in items
        ):
            self.bind(output, Constant([i.value for i in items]))
        else:
            # Lists holding tensors stay structural, so that each tensor is handled on its own.
            self.bind(output, ListArg(items))
            note_inner_lists(self, node)

    def visit_list_unpack(self, node: torch._C.Node) -> None:
        list_entry = self.entry(node.input())
        if isinstance(list_entry, ListArg):
            items = list_entry.items
        elif isinstance(list_entry, Constant):
            items = tuple(Constant(v) for v in list_entry.value)
        else:
            raise SpecializeError(f"unpacking a list whose length is only known at run time ({source_of(node)})")
        for output, item in zip(node.outputs(), items):
            self.bind(output, item)
            if node.input().unique() in self.views:  # `first, second = x.unbind(0)`
                self.views[output.unique()] = self.views[node.input().unique()]

    def visit_isinstance(self, node: torch._C.Node) -> None:
        """`isinstance(x, T)`: TorchScript knows x's type, and this stage knows whether an Optional is
        None (torch's own `pack_padded_sequence` asks `isinstance(lengths, Tensor)`)."""
        subject, entry = node.input(), self.entry(node.input())
        types = node.tys("types")
        if isinstance(entry, OptionalEntry) and not isinstance(entry.present, Constant):
            # An Optional decided at run time: a test for its value's type is its flag.
            wants_none = any(str(t) == "NoneType" for t in types)
            wants_value = any(str(t) == str(subject.type()).rstrip("?") for t in types)
            if wants_none == wants_value:
                self.bind(node.output(), Constant(wants_none))
            elif wants_value:
                self.bind(node.output(), entry.present)
            else:
                unset = self.emit_host("aten::__not__.bool", (entry.present,), "bool", source_of(node))
                self.bind(node.output(), unset)
            return
        if isinstance(entry, OptionalEntry):
            entry = entry.value if entry.present.value else Constant(None)
        if is_none(entry):
            answer = any(str(t) == "NoneType" for t in types)
        elif any(subject.type().isSubtypeOf(t) for t in types):
            answer = True
        elif str(subject.type()).endswith("?") or "Union" in str(subject.type()) or str(subject.type()) == "Any":
            # A set Optional: its value's type is TorchScript's type without the "?".
            answer = any(str(t) == str(subject.type()).rstrip("?") for t in types)
        else:
            answer = False
        self.bind(node.output(), Constant(answer))

    def visit_recurrent(self, node: torch._C.Node) -> None:
        """`nn.LSTM` / `nn.GRU` / `nn.RNN` over a sequence of run-time length: their loop over time
        steps (`recurrent`); over a fixed length, the op itself (torch.export unrolls it)."""
        entries = [self.entry(v) for v in node.inputs()]
        if not time_dim_is_dynamic(entries):
            return self.visit_op(node)
        kind, paired = RECURRENT_OPS[node.kind()]
        x, hx, params, has_biases, layers, _dropout, _train, bidirectional, batch_first = entries
        h0, c0 = hx.items if paired else (hx, hx)
        check_weights(kind, params, has_biases.value, layers.value, 2 if bidirectional.value else 1, source_of(node))
        arguments = [Constant(kind), x, h0, c0, params, has_biases, layers, bidirectional, batch_first]
        try:
            output, h_n, c_n = self.visit_function(layers_graph(), arguments).items
        except DyclError as error:
            where = f"in the loop over time steps of {node.kind()} at {source_of(node)}"
            raise SpecializeError(f"{error} ({where})") from error
        for ts_value, entry in zip(node.outputs(), (output, h_n, c_n) if paired else (output, h_n)):
            self.bind(ts_value, entry)

    def visit_function(self, graph: torch._C.Graph, arguments: list) -> Any:
        """Visit a TorchScript function's graph with `arguments` bound to its inputs; its result.

        The graph's values are numbered apart from the model's, so it gets its own environment."""
        saved = (self.env, self.views, self.unlinked_views, self.mutated_lists, self.inner_lists, self.list_dims)
        self.env, self.views, self.unlinked_views, self.inner_lists = {}, {}, set(), {}
        loop_indices, self.loop_indices = self.loop_indices, None  # the observed run is the model's graph's
        self.mutated_lists = collect_mutated_lists(graph)
        self.list_dims = list_concatenation_dims(graph)
        try:
            for ts_value, entry in zip(graph.inputs(), arguments):
                self.bind(ts_value, entry)
            with self.laying_out(None):
                self.visit_nodes(graph.nodes())
            return self.entry(next(graph.outputs()))
        finally:
            self.env, self.views, self.unlinked_views, self.mutated_lists, self.inner_lists, self.list_dims = saved
            self.loop_indices = loop_indices

    def visit_uninitialized(self, node: torch._C.Node) -> None:
        self.bind(node.output(), Constant(UNINITIALIZED))

    def visit_raise(self, node: torch._C.Node) -> None:
        message = self.entry(node.inputsAt(0))
        text = message.value if isinstance(message, Constant) else "model raised"
        self.nodes.append(HostOp("prim::RaiseException", (Constant(str(text)),), (), source_of(node)))
        self.raised = True

    def visit_ignored(self, node: torch._C.Node) -> None:
        """Warnings and other side effects that do not change the result."""

    def visit_type_query(self, node: torch._C.Node) -> None:
        kind = node.kind()
        subject = self.entry(node.inputsAt(0))
        tensor_type = tensor_type_of(subject)
        if tensor_type is None:
            raise SpecializeError(f"{kind} on a non-tensor ({source_of(node)})")
        dtype = torch_dtype(tensor_type.dtype)
        answers = {
            "aten::dim": len(tensor_type.shape),
            "prim::dtype": DTYPE_CODES.get(dtype, 6),
            "prim::device": torch.device("cpu"),
            "prim::layout": 0,
            "prim::is_cuda": False,
            "prim::is_mps": False,
            "prim::is_xpu": False,
            "prim::is_sparse": False,
            "prim::is_quantized": False,
            "prim::is_meta": False,
            "prim::is_nested": False,
            "prim::requires_grad": False,
            "aten::is_floating_point": dtype.is_floating_point,
            "aten::is_complex": dtype.is_complex,
        }
        self.bind(node.output(), Constant(answers[kind]))

    def visit_is(self, node: torch._C.Node) -> None:
        left, right = (self.entry(v) for v in node.inputs())
        if self.optional_test(node, left, right):
            return
        negate = node.kind() == "aten::__isnot__"
        if isinstance(left, Constant) and isinstance(right, Constant):
            same = left.value is right.value or (left.value is None and right.value is None)
        elif is_none(left) or is_none(right):
            same = False  # a run-time value is never None (an Optional decided at run time is an OptionalEntry)
        elif isinstance(left, Value) and isinstance(right, Value) and tensor_type_of(left) and tensor_type_of(right):
            # Two tensors: the same value is the same tensor, and values that different ops made,
            # or two inputs, are taken for different ones (nn.MultiheadAttention asks `query is
            # key` to pick a packed projection that computes the same; README, Correctness).
            same = left is right
        else:
            raise SpecializeError(f"`is` between two run-time values ({source_of(node)})")
        self.bind(node.output(), Constant(same != negate))

    def visit_device_move(self, node: torch._C.Node) -> None:
        """`.cpu()`, `.cuda()`, `.to(device)`: a bundle keeps every tensor on its one device, so a
        move is the tensor itself (Tacotron2's `lengths.cpu()`); a dtype change in the same call
        (`x.to(device, torch.float64)`) stays, as `to(dtype)`. Meta runs cannot move a tensor to
        the CPU ("Cannot copy out of meta tensor")."""
        entries = [self.entry(v) for v in node.inputs()]
        overload = resolve_overload(node)
        name = overload._overloadname if overload is not None else ""
        dtype: Any = Constant(None)
        if node.kind() == "aten::to":
            if name in ("device", "prim_Device"):
                dtype = entries[2] if len(entries) > 2 else Constant(None)
            elif name == "dtype_layout":
                dtype = entries[1]
            else:
                return self.visit_op(node)
        if is_none(dtype):
            self.bind(node.output(), entries[0])
            self.views[node.output().unique()] = ViewLink(node.inputsAt(0), "", ())
            return
        self.visit_tensor_op(node, overload_of("aten::to.dtype"), [entries[0], dtype], source_of(node))

    def visit_num_to_tensor(self, node: torch._C.Node) -> None:
        scalar = self.entry(node.input())
        if isinstance(scalar, Constant):
            self.bind(node.output(), Constant(torch.scalar_tensor(scalar.value)))
            return
        kind = scalar.type.kind
        dtype = {"int": torch.int64, "float": torch.float64, "bool": torch.bool}[kind]
        output = self.new_value(TensorType(dtype_name(dtype), (), ()), value_name(node.output()))
        self.nodes.append(
            TensorOp(
                "aten::scalar_tensor.default",
                (scalar,),
                (("dtype", Constant(dtype)),),
                (output,),
                source_of(node),
            )
        )
        self.bind(node.output(), output)

    # -- schema ops --------------------------------------------------------------------------
    def visit_op(self, node: torch._C.Node) -> None:
        kind = node.kind()
        entries = [self.entry(v) for v in node.inputs()]
        source = source_of(node)
        if self.refuse_structured(node, entries, source):
            return
        overload = resolve_overload(node)
        if kind in SYNC_OPS and entries and tensor_type_of(entries[0]) is not None:
            return self.visit_sync(node, entries, source)
        if kind == "aten::append":
            return self.visit_append(node, entries, source)
        run_time_list = (TensorList, RaggedList)
        if (kind in ("aten::stack", "aten::cat") and entries and isinstance(entries[0], run_time_list)) or (
            kind in STRUCTURAL_LIST_OPS and any(isinstance(e, (ListArg, *run_time_list)) for e in entries)
        ):
            return self.visit_structural_list_op(node, entries, source)
        has_tensor = overload is not None and schema_touches_tensors(overload._schema)
        if not has_tensor:
            return self.visit_host_op(node, overload, entries, source)
        if overload is None:
            raise UnsupportedOpError(kind, source, detail="no matching aten overload")
        # A host list of known items (`[scale_factor for _ in range(dim)]`, F.interpolate's, which
        # TorchScript builds by appends) is read as those items, as host ops read it.
        known = self.known_lists
        entries = [Constant(list(known[e])) if isinstance(e, Value) and e in known else e for e in entries]
        return self.visit_tensor_op(node, overload, entries, source)

    def visit_tensor_op(self, node: torch._C.Node, overload: Any, entries: list, source: str) -> None:
        schema = overload._schema
        mutated_input = None
        if mutates_first_argument(schema):
            functional = functional_overload(overload)
            if functional is None:
                raise UnsupportedOpError(
                    str(schema.name) + "." + overload._overloadname,
                    source,
                    detail="in-place op without a functional variant",
                )
            mutated_input = node.inputsAt(0)
            if entries[0] in self.unlinked_views:
                self.views[mutated_input.unique()] = ViewLink(mutated_input, SEVERAL, ())
            view_chain(self.views, mutated_input, source)  # refuses views that cannot be written back
            overload = functional
            schema = overload._schema
        args, kwargs = split_arguments(schema, entries)
        target = f"{schema.name}.{overload._overloadname}"
        outputs_ts = list(node.outputs())
        if not any("Tensor" in str(r.type) for r in schema.returns):
            return self.visit_tensor_query(node, overload, args, kwargs, target, source)
        if mutated_input is None and _whole_slice(target, args):
            # `x[idx, :]`: a slice of a whole dim is the tensor itself (IREE 3.13 failed to compile
            # the Switch router's `out[idx, :] = expert(x[idx, :])` written back through it).
            self.bind(node.output(), entries[0])
            self.views[node.output().unique()] = ViewLink(node.inputsAt(0), "", ())
            return
        returns_list = len(schema.returns) == 1 and str(schema.returns[0].type).startswith("List[")
        returns = "list" if returns_list else ("tuple" if len(schema.returns) > 1 else "single")
        values_in = [e for e in walk_args(args + [a for _, a in kwargs]) if isinstance(e, Value)]
        if not values_in and not _NONDETERMINISTIC.search(target):
            result = call_overload(overload, args, kwargs, lambda a: real_value(a), source, target)
            self._bind_results(outputs_ts, returns, result, fold=True)
        else:
            name = value_name(outputs_ts[0]) if returns == "single" else "t"
            outputs = self.emit_selection(target, args, kwargs, source, name, outputs_ts[0])
            if outputs is None:
                observed = outputs_ts if returns != "list" else None
                outputs = self.emit_tensor_op(overload, args, kwargs, source, returns, name, observed)
            self._bind_results(outputs_ts, returns, outputs, fold=False)
        if mutated_input is not None:
            # The result is the mutated tensor's new value, and that of every tensor it views.
            written = self.entry(outputs_ts[0])
            self.bind(mutated_input, written)
            write_back(self, mutated_input, written, source)
        elif returns_view(schema):
            if target.startswith(("aten::to.", "aten::type_as")):
                # A conversion is the tensor itself when the dtype does not change, else a copy.
                same = tensor_type_of(self.entry(outputs_ts[0])) == tensor_type_of(entries[0])
                if same:
                    self.views[outputs_ts[0].unique()] = ViewLink(node.inputsAt(0), "", ())
            elif returns == "single" and node.inputsAt(0).type().kind() == "TensorType":
                self.views[outputs_ts[0].unique()] = ViewLink(node.inputsAt(0), target, tuple(args[1:]))
            else:
                # unbind / split / chunk: their results are views, often unpacked from a list.
                self.views.update((output.unique(), ViewLink(node.inputsAt(0), SEVERAL, ())) for output in outputs_ts)
                self.unlinked_views.update(walk_args(self.entry(output) for output in outputs_ts))

    def emit_tensor_op(
        self,
        overload: Any,
        args: list,
        kwargs: list,
        source: str,
        returns: str = "single",
        name: str = "t",
        observed: list | None = None,
    ) -> list[Value]:
        """Append a TensorOp; its result types come from meta runs at the example sizes and perturbed,
        its hints from the observed run of the model's values `observed` where a hint was raised."""
        target = f"{overload._schema.name}.{overload._overloadname}"
        values_in = [e for e in walk_args(args + [a for _, a in kwargs]) if isinstance(e, Value)]
        try:
            meta_a = call_overload(overload, args, kwargs, lambda a: self.meta(a), source, target)
        except UnsupportedOpError as error:
            if not re.search(r"broadcast|must match", str(error)):
                raise
            narrowed = self.narrow_to_static(values_in, [*args, *(a for _, a in kwargs)], source)
            if not narrowed:
                raise
            args = [_substitute(arg, narrowed) for arg in args]
            kwargs = [(key, _substitute(arg, narrowed)) for key, arg in kwargs]
            return self.emit_tensor_op(overload, args, kwargs, source, returns, name, observed)
        results_a = result_tensors(meta_a, returns)
        perturbed: list[list[tuple]] = []
        if any(is_dynamic(v) for v in values_in):
            for perturbation in _PERTURBATIONS:
                # Where the run-time ints grown past their examples fail the op (an index past the
                # tensor's end), they are one less instead (0 becomes -1, an index from the back).
                failures = []
                for ints in (perturbation, lambda hint: hint - 1):
                    try:
                        meta_b = overload(
                            *convert_args(args, lambda a, p=perturbation, i=ints: self.meta(a, p, i)),
                            **dict(convert_kwargs(kwargs, lambda a, p=perturbation, i=ints: self.meta(a, p, i))),
                        )
                        perturbed.append([tuple(t.shape) for t in result_tensors(meta_b, returns)])
                        break
                    except Exception as error:
                        failures.append(error)
                        continue
                else:
                    broadcast = _broadcast_shape(args, results_a, returns, failures)
                    perturbed.append([broadcast or unknown_sizes(target, args, t) for t in results_a])
        outputs: list[Value] = []
        clamped = self.clamped_dim(overload, target, args, kwargs, results_a, returns)
        for position, tensor in enumerate(results_a):
            shape_a = tuple(int(d) for d in tensor.shape)
            shape = tuple(
                d if all(shapes[position][dim] == d for shapes in perturbed) and dim != clamped else None
                for dim, d in enumerate(shape_a)
            )
            hint = tuple(d if s is not None else max(d, 2) for d, s in zip(shape_a, shape))
            self.raised_hints += sum(1 for d, s in zip(shape_a, shape) if s is None and d < 2)
            hint = self.observed_hint(observed[position] if observed else None, shape, hint)
            outputs.append(self.new_value(TensorType(dtype_name(tensor.dtype), shape, hint), name))
        if target in _EMPTY_MADE_HERE and _static_empty(outputs[0].type):
            # torch-mlir drops a cat's empty inputs, and iree-compile then refuses a concat of none
            # ("'tensor.concat' op requires at least one input"): Emformer's right context of
            # length 0; and a flatten of [?, 0, ...] (that context's blocks stacked, over a run-time
            # number of segments) crashed ConvertTorchToLinalg with SIGFPE. An empty result of
            # static shape holds nothing but its shape: made so here.
            empty = torch.zeros(outputs[0].type.shape, dtype=torch_dtype(outputs[0].type.dtype))
            target, args, kwargs = "aten::clone.default", [Constant(empty)], []
        elif target == "aten::cat.default" and (first := _empty_along(args)) is not None:
            # The same, where the other dims are known only at run time (Emformer's right-context
            # rows of its mask, 0 by the utterance's length): the first input has the result's shape.
            target, args, kwargs = "aten::clone.default", [first], []
        self.nodes.append(TensorOp(target, tuple(args), tuple(kwargs), tuple(outputs), source, returns))
        arguments = overload._schema.arguments
        if arguments and arguments[0].name == "size" and args and isinstance(args[0], ListArg):
            # A factory (zeros, ones, full, empty, rand...): its shape is the size list itself.
            for dim, item in enumerate(args[0].items):
                if isinstance(item, Value):
                    self.dim_sources[(outputs[0], dim)] = item
        return outputs

    def clamped_dim(
        self, overload: Any, target: str, args: list, kwargs: list, results: list, returns: str
    ) -> int | None:
        """The dim a slice with a run-time bound past the dim's end at the example cuts, where it is
        as wide as the bounds make it below the end (dynamic, whatever the other meta runs say);
        None otherwise. Those perturb ints upward, and a bound past the end clamps to it: `x[:, :n]`
        of a 6-wide `x` at an example n of 6 or more was 6 wide at every perturbation and typed
        static, and both hosts returned all 6 columns where n was smaller. The bounds are moved
        down together until each is below the end: a window that moves with its start
        (`x[end : end + R]` at the last segment) keeps its width."""
        bounds = [bound for bound in args[2:4] if _run_time_int(bound)] if target == "aten::slice.Tensor" else []
        if not bounds or not isinstance(args[1], Constant):
            return None
        dim = args[1].value % len(results[0].shape)
        input_type = tensor_type_of(args[0])
        if input_type is None:
            return None
        # The dim's own size read back (`x[T:]` with `T = x.size(0)`) is its end at every size.
        bounds = [bound for bound in bounds if self.dim_sources.get((args[0], dim)) is not bound]
        if not bounds:
            return None
        size = input_type.hint[dim]
        shift = max(bound.type.hint - size + 1 for bound in bounds)
        if shift <= 0:
            return None  # no bound at or past the end: the other meta runs tell
        try:
            moved = overload(
                *convert_args(args, lambda a: self.meta(a, _UNMOVED, lambda hint: hint - shift)),
                **dict(convert_kwargs(kwargs, lambda a: self.meta(a, _UNMOVED, lambda hint: hint - shift))),
            )
        except Exception:
            return None
        width = tuple(result_tensors(moved, returns)[0].shape)[dim]
        return dim if width != results[0].shape[dim] else None

    def bind_constants(self, node: torch._C.Node, result: Any) -> None:
        """Bind a node's outputs to a result known at export time (a tuple for several outputs)."""
        outputs = list(node.outputs())
        if len(outputs) == 1:
            self.bind(outputs[0], Constant(result))
        else:
            for output, item in zip(outputs, result):
                self.bind(output, Constant(item))

    def _bind_results(self, outputs_ts: list, returns: str, result: Any, fold: bool) -> None:
        if returns == "single":
            self.bind(outputs_ts[0], Constant(result) if fold else result[0])
        elif returns == "tuple":
            for output, item in zip(outputs_ts, result):
                self.bind(output, Constant(item) if fold else item)
        else:
            items = tuple(Constant(t) for t in result) if fold else tuple(result)
            self.bind(outputs_ts[0], ListArg(items))

    def meta(self, arg: Any, perturb: Callable[[int], int] | None = None, ints: Callable | None = None) -> Any:
        """A stand-in for `arg` in a meta run: example sizes, or with the dynamic ones (and run-time
        ints, by `ints` where given) perturbed."""
        if isinstance(arg, Value):
            type_ = arg.type
            if isinstance(type_, TensorType):
                shape = [perturb(h) if perturb and d is None else h for h, d in zip(type_.hint, type_.shape)]
                return torch.empty(shape, dtype=torch_dtype(type_.dtype), device="meta")
            if isinstance(type_, ScalarType):
                if type_.kind == "int" and perturb:
                    return (ints or perturb)(type_.hint)
                return type_.hint
            return list(type_.hint)
        if isinstance(arg, Constant):
            return self.meta_constant(arg.value)
        if isinstance(arg, ListArg):
            return [self.meta(item, perturb, ints) for item in arg.items]
        raise SpecializeError(f"internal: cannot stand in for {arg!r}")

    def meta_constant(self, value: Any) -> Any:
        """A constant with every tensor in it on the meta device: also inside lists and tuples, such as
        the `_flat_weights` list `nn.LSTM` / `nn.GRU` / `nn.RNN` pass to `aten::lstm`, whose meta
        kernel refuses weights on another device than its input."""
        if isinstance(value, torch.Tensor):
            if id(value) not in self.meta_cache:  # kept with it: freed, its id could name another constant
                self.meta_cache[id(value)] = (value, value.to("meta"))
            return self.meta_cache[id(value)][1]
        if isinstance(value, torch.device):
            return torch.device("meta")
        if isinstance(value, (list, tuple)) and any(isinstance(item, (torch.Tensor, list, tuple)) for item in value):
            return type(value)(self.meta_constant(item) for item in value)
        return value


def _UNMOVED(hint: int) -> int:
    """The perturbation that leaves tensors' sizes as they are (`clamped_dim` moves ints alone)."""
    return hint


def _run_time_int(arg: Any) -> bool:
    return isinstance(arg, Value) and isinstance(arg.type, ScalarType) and arg.type.kind == "int"


# The perturbations of the second and third meta runs. +1 alone misses floor divisions by more than
# one: avg_pool2d(x, 2) maps heights 10 and 11 both to 5, and that output height was typed static
# (the compiled host then returned the example's size). 2h + 1 changes floor(h / k) whenever h >= k.
def _broadcast_shape(args: list, results: list, returns: str, failures: list) -> tuple | None:
    """The result's sizes of an element-wise op whose perturbed meta runs all failed to broadcast
    (None: not such an op). A dim that an input has at a known size other than 1 is that size
    wherever the op runs at all (PyTorch raises at the others), so it stays known: `sums / sizes`
    of a `[2, 6]` and a `[n, 1]` whose n only the run time knows (a `bincount` meeting its groups)
    is `[2, 6]`, not `[?, ?]`. A dim that only dynamic and size-1 inputs have stays dynamic."""
    if returns != "single" or len(results) != 1 or not failures:
        return None
    if not all(re.search(r"must match the size|broadcast", str(error)) for error in failures):
        return None
    rank = results[0].dim()
    shapes = []
    for arg in args:
        if isinstance(arg, Value) and isinstance(arg.type, TensorType):
            shapes.append(tuple(arg.type.shape))
        elif isinstance(arg, Constant) and isinstance(arg.value, torch.Tensor):
            shapes.append(tuple(arg.value.shape))
    if not shapes or max(len(shape) for shape in shapes) != rank:
        return None
    sizes = []
    for dim in range(rank):
        known = {shape[dim - rank] for shape in shapes if len(shape) >= rank - dim} - {None}
        dynamic = any(shape[dim - rank] is None for shape in shapes if len(shape) >= rank - dim)
        wide = known - {1}
        sizes.append(wide.pop() if len(wide) == 1 else None if dynamic or len(wide) > 1 else 1)
    return tuple(sizes) if all(s is None or s == d for s, d in zip(sizes, results[0].shape)) else None


_PERTURBATIONS: tuple[Callable[[int], int], ...] = (lambda hint: hint + 1, lambda hint: 2 * hint + 1)


def specialize(
    captured: CapturedModel, example_inputs: tuple, dynamic_shapes: Any = None, observe_ints: bool = False
) -> Program:
    """Type the captured graph by the example inputs and fold what the types decide; with
    `observe_ints`, each int the graph reads from data takes its value at the examples as its
    example (`observed.observed_int`).

    Where the sizes of the observed run (`observed`) fail to type some op, the graph is typed again
    by the meta runs alone, as before there were any: those may still type it, and where they do
    not, the refusal is theirs."""
    types = input_types(captured, tuple(example_inputs), dynamic_shapes)
    spec = _Specializer(captured)
    spec.observe_at(tuple(example_inputs), types, ints=observe_ints)
    try:
        return _specialized(spec, captured, types)
    except DyclError:
        if not spec.observed:
            raise
    spec = _Specializer(captured)
    spec.observe_at(tuple(example_inputs), types, observing=False, ints=observe_ints)
    return _specialized(spec, captured, types)


def _specialized(spec: _Specializer, captured: CapturedModel, types: list) -> Program:
    ts_self, *ts_inputs = list(captured.graph.inputs())
    # What freezing left as attribute reads (MultiheadAttention's Optional `in_proj_bias` and
    # `in_proj_weight`, read under `is not None`) reads the frozen module (`visit_get_attr`).
    spec.bind(ts_self, Constant(captured.frozen))
    bound = [Constant(None) if t is None else spec.new_value(t, name) for t, name in zip(types, captured.input_names)]
    for ts_value, entry in zip(ts_inputs, bound):
        spec.bind(ts_value, entry)
    params = tuple(entry for entry in bound if isinstance(entry, Value))
    spec.input_witnesses = params  # `tensor_lists.size_witness`
    spec.visit_nodes(captured.graph.nodes())
    if spec.raised:
        raising = [n for n in spec.nodes if isinstance(n, HostOp) and n.target == "prim::RaiseException"]
        detail = f": {raising[-1].args[0].value} ({raising[-1].source})" if raising else ""
        raise SpecializeError(f"{captured.name} always raises on inputs of the example's types{detail}")
    outputs = [_constant_structure(spec.entry(v)) for v in captured.graph.outputs()]
    leaves, structure = flatten_entries(outputs)
    # The manifest's output tree (`structured.output_tree`); an Optional decided at export is no flag.
    tree, leaves = output_tree(structure[0], leaves, captured.name)
    leaves = [spec.materialize(leaf, "") for leaf in leaves]
    for leaf in leaves:
        if isinstance(leaf, Constant) and not isinstance(leaf.value, (bool, int, float, torch.Tensor)):
            raise SpecializeError(
                f"{captured.name} returns a {type(leaf.value).__name__}: "
                "outputs must be tensors, scalars or tuples of them"
            )
    body = without_unread_known_lists(Block(params, tuple(spec.nodes), tuple(leaves)), spec.known_lists)
    return Program(captured.input_names, body, tree, (), captured.name, none_inputs=none_inputs(captured, types))


_HANDLERS = {
    "prim::Constant": _Specializer.visit_constant,
    "prim::TupleUnpack": _Specializer.visit_tuple_unpack,
    "prim::TupleIndex": _Specializer.visit_tuple_index,
    "prim::ListConstruct": _Specializer.visit_list_construct,
    "prim::ListUnpack": _Specializer.visit_list_unpack,
    "prim::Uninitialized": _Specializer.visit_uninitialized,
    "prim::RaiseException": _Specializer.visit_raise,
    "aten::warn": _Specializer.visit_ignored,
    "prim::If": _Specializer.visit_if,
    "prim::Loop": _Specializer.visit_loop,
    "aten::dim": _Specializer.visit_type_query,
    "prim::dtype": _Specializer.visit_type_query,
    "prim::device": _Specializer.visit_type_query,
    "prim::layout": _Specializer.visit_type_query,
    "prim::is_cuda": _Specializer.visit_type_query,
    "prim::is_mps": _Specializer.visit_type_query,
    "prim::is_xpu": _Specializer.visit_type_query,
    "prim::is_sparse": _Specializer.visit_type_query,
    "prim::is_quantized": _Specializer.visit_type_query,
    "prim::is_meta": _Specializer.visit_type_query,
    "prim::is_nested": _Specializer.visit_type_query,
    "prim::requires_grad": _Specializer.visit_type_query,
    "aten::is_floating_point": _Specializer.visit_type_query,
    "aten::is_complex": _Specializer.visit_type_query,
    "aten::__is__": _Specializer.visit_is,
    "aten::__isnot__": _Specializer.visit_is,
    "aten::size": _Specializer.visit_size,
    "aten::len": _Specializer.visit_len,
    "aten::__getitem__": _Specializer.visit_getitem,
    "prim::isinstance": _Specializer.visit_isinstance,
    "aten::_pack_padded_sequence": _Specializer.visit_pack_padded_sequence,
    "aten::cpu": _Specializer.visit_device_move,
    "aten::cuda": _Specializer.visit_device_move,
    "aten::to": _Specializer.visit_device_move,
    "prim::NumToTensor": _Specializer.visit_num_to_tensor,
    "aten::tensor": _Specializer.visit_list_to_tensor,
    **STRUCTURED_HANDLERS,
    **{kind: _Specializer.visit_recurrent for kind in RECURRENT_OPS},
}


_EMPTY_MADE_HERE = ("aten::cat.default", "aten::flatten.using_ints")


def _empty_along(args: list) -> Value | None:
    """The first tensor of `aten::cat(tensors, dim)` where every one is empty along `dim` (static 0)."""
    tensors, dim = (args + [Constant(0)])[:2]
    if not isinstance(tensors, ListArg) or not isinstance(dim, Constant) or not tensors.items:
        return None
    types = [tensor_type_of(item) for item in tensors.items]
    if any(t is None or not t.rank or t.shape[dim.value % t.rank] != 0 for t in types):
        return None
    first = tensors.items[0]
    return first if isinstance(first, Value) and types[0].rank == max(t.rank for t in types) else None


def _static_empty(type_: TensorType) -> bool:
    return all(d is not None for d in type_.shape) and 0 in type_.shape


def _whole_slice(target: str, args: list) -> bool:
    """`aten::slice.Tensor(x, dim, None or 0, None or past the end, 1)` of a run-time tensor."""
    if target != "aten::slice.Tensor" or len(args) != 5 or not isinstance(args[0], Value):
        return False
    if not all(isinstance(arg, Constant) for arg in args[1:]):
        return False
    dim, start, end, step = (arg.value for arg in args[1:])
    size = args[0].type.shape[dim] if isinstance(dim, int) and -args[0].type.rank <= dim < args[0].type.rank else -1
    past_end = end is None or end >= INT64_MAX or (size is not None and size >= 0 and end >= size)
    return step == 1 and start in (None, 0) and past_end


def _substitute(entry: Any, replaced: dict[Value, Value]) -> Any:
    if isinstance(entry, ListArg):
        return ListArg(tuple(_substitute(item, replaced) for item in entry.items))
    return replaced.get(entry, entry) if isinstance(entry, Value) else entry


def _constant_structure(entry: Any) -> Any:
    """A returned list or tuple known at export time (`x.size()` of static dims) as one leaf per item."""
    if isinstance(entry, Constant) and isinstance(entry.value, (list, tuple)):
        items = tuple(_constant_structure(Constant(item)) for item in entry.value)
        return ListArg(items) if isinstance(entry.value, list) else TupleEntry(items)
    if isinstance(entry, (ListArg, TupleEntry)):
        items = tuple(_constant_structure(item) for item in entry.items)
        return type(entry)(items)
    return entry
