"""Specialize's PackedSequence: `nn.utils.rnn.pack_padded_sequence`, a recurrent layer over it,
`pad_packed_sequence`, as seq2seq encoders write them (Tacotron2's encoder, the PyTorch tutorials).

A PackedSequence's `data` holds the valid steps of a batch interleaved, and its `batch_sizes` how
many sequences are still running at each step: both have sizes that depend on the lengths'
values. Here a PackedSequence is a value kind of its own instead: the padded batch, time-major,
and the lengths (`PackedData`, `BatchSizes`). `aten::_pack_padded_sequence` checks the lengths
as PyTorch does and keeps the batch; `aten::lstm.data` (and `gru`, `rnn_tanh`, `rnn_relu`)
becomes the padded op of `padded_rnn`, which computes exactly what the packed layer computes;
`aten::_pad_packed_sequence` cuts the padded output to the longest length, a size read from the
lengths at run time (or to `total_length`). What else reads a PackedSequence is refused by name.

`enforce_sorted=False` needs nothing more: torch's own code sorts the batch and restores its
order with ordinary ops around the packed ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..errors import UnsupportedOpError
from ..guards import CHECK_INDEX
from ..padded_rnn import PADDED_OPS
from ..program import Constant, HostOp, ListArg, ScalarType, Value
from .schemas import DTYPE_CODES, overload_of, resolve_overload, source_of, torch_dtype
from .values import tensor_type_of


@dataclass(frozen=True)
class PackedData:
    """`PackedSequence.data`, kept padded: `padded` is [T, B, *] (time-major), zero past each
    length once a recurrent layer made it; `lengths` is the int64 [B] tensor it was packed with."""

    padded: Value
    lengths: Any


@dataclass(frozen=True)
class BatchSizes:
    """`PackedSequence.batch_sizes`: known from the lengths; `batch` is the batch's size (a
    constant, or a host int for a dynamic batch)."""

    lengths: Any
    batch: Any


PACKED_KINDS = (PackedData, BatchSizes)

# Nodes that only move a PackedSequence's parts around (torch's own `PackedSequence` NamedTuple).
_STRUCTURAL = {
    "prim::TupleConstruct",
    "prim::TupleUnpack",
    "prim::TupleIndex",
    "prim::unchecked_cast",
    "aten::__is__",
    "aten::__isnot__",
}

_NOT_POSITIVE = (
    "RuntimeError: Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0"
)
_NOT_SORTED = (
    "RuntimeError: `lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You can pass "
    "`enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep this requirement if you do "
    "not need ONNX exportability."
)


class PackedSequences:
    """PackedSequence values (a mixin of the specializer)."""

    def reads_packed(self, node: torch._C.Node) -> bool:
        """Whether `node` reads a PackedSequence's parts in a way that needs their meaning."""
        if not self.packed_seen or node.kind() in _STRUCTURAL:
            return False
        return any(isinstance(self.env.get(v.unique()), PACKED_KINDS) for v in node.inputs())

    def visit_pack_padded_sequence(self, node: torch._C.Node) -> None:
        """`aten::_pack_padded_sequence(input, lengths, batch_first)`: the padded batch, time-major,
        after PyTorch's checks of the lengths (each a host check with PyTorch's message)."""
        source = source_of(node)
        input_, lengths, batch_first = (self.entry(v) for v in node.inputs())
        if tensor_type_of(input_) is None or tensor_type_of(lengths) is None or not isinstance(batch_first, Constant):
            raise UnsupportedOpError(node.kind(), source, detail="a PackedSequence of a constant batch")
        input_, lengths = self.materialize(input_, source), self.materialize(lengths, source)
        padded = input_
        if batch_first.value:
            (padded,) = self.emit_tensor_op(
                overload_of("aten::transpose.int"), [input_, Constant(0), Constant(1)], [], source, name="padded"
            )
        steps = padded.type.shape[0]
        if steps is None:
            raise UnsupportedOpError(
                node.kind(),
                _caller_line(self.captured, "pack_padded_sequence") or source,
                detail="a PackedSequence needs a padded length known at export time (its recurrent layer is "
                "unrolled over the padded steps, as nn.LSTM is): export with the padded length fixed; the "
                "lengths may still change at run time",
            )
        last = self._packed_op("aten::select.int", [lengths, Constant(0), Constant(-1)], source)
        self._check_zero(self._packed_op("aten::le.Scalar", [last, Constant(0)], source), _NOT_POSITIVE, source)
        later = self._packed_op("aten::slice.Tensor", [lengths, Constant(0), Constant(1), Constant(None)], source)
        earlier = self._packed_op("aten::slice.Tensor", [lengths, Constant(0), Constant(0), Constant(-1)], source)
        self._check_zero(self._packed_op("aten::gt.Tensor", [later, earlier], source), _NOT_SORTED, source)
        # PyTorch reads past the batch here (its result is garbage or a later error): refuse.
        longer = self._packed_op("aten::gt.Scalar", [lengths, Constant(steps)], source)
        message = f"RuntimeError: a length is longer than the padded batch's {steps} steps ({source})"
        self._check_zero(longer, message, source)
        batch = padded.type.shape[1]
        batch_entry = Constant(batch) if batch is not None else self.size_of(padded, 1, source)
        data, batch_sizes = node.outputs()
        self.bind(data, PackedData(padded, lengths))
        self.bind(batch_sizes, BatchSizes(lengths, batch_entry))
        self.packed_seen = True

    def visit_packed_use(self, node: torch._C.Node) -> None:
        """A node that reads a PackedSequence's data or batch sizes."""
        kind, source = node.kind(), source_of(node)
        entries = [self.entry(v) for v in node.inputs()]
        subject = entries[0]
        overload = resolve_overload(node)
        target = f"{kind}.{overload._overloadname}" if overload is not None else kind
        if target in PADDED_OPS and isinstance(subject, PackedData) and isinstance(entries[1], BatchSizes):
            return self.visit_packed_rnn(node, target, entries, source)
        if kind == "aten::_pad_packed_sequence" and isinstance(subject, PackedData):
            return self.visit_pad_packed_sequence(node, entries, source)
        answer: Any = None
        if isinstance(subject, BatchSizes):
            index = [e.value if isinstance(e, Constant) else None for e in entries[1:]]
            if kind == "aten::size" and index == [0]:
                answer = self._longest(subject.lengths, source)  # one step per step of the longest
            elif kind == "aten::select" and index == [0, 0]:
                # Every sequence runs at the first step (the pack checked the lengths are positive).
                batch = subject.batch
                answer = Constant(torch.tensor(batch.value)) if isinstance(batch, Constant) else None
                if answer is None:
                    (answer,) = self.emit_tensor_op(
                        overload_of("aten::scalar_tensor.default"), [batch], [("dtype", Constant(torch.int64))], source
                    )
            elif kind in ("prim::device", "prim::dtype", "aten::dim"):
                answer = Constant({"prim::device": torch.device("cpu"), "prim::dtype": 4, "aten::dim": 1}[kind])
        elif isinstance(subject, PackedData) and kind in ("prim::device", "prim::dtype", "aten::dim", "aten::size"):
            padded = subject.padded
            if kind == "aten::size" and len(entries) == 2 and isinstance(entries[1], Constant):
                # The packed data is [sum(lengths), *features]: its dim d >= 1 is the padded batch's d + 1.
                dim = entries[1].value % (padded.type.rank - 1)
                answer = self.size_of(padded, dim + 1, source) if dim >= 1 else None
            elif kind == "aten::dim":
                answer = Constant(padded.type.rank - 1)
            elif kind == "prim::device":
                answer = Constant(torch.device("cpu"))  # a bundle keeps every tensor on its one device
            elif kind == "prim::dtype":
                answer = Constant(DTYPE_CODES.get(torch_dtype(padded.type.dtype), 6))
        if answer is None:
            what = "data" if isinstance(subject, PackedData) else "batch_sizes"
            raise UnsupportedOpError(
                kind,
                source,
                detail=f"reads a PackedSequence's {what}: a PackedSequence can be packed with "
                "pack_padded_sequence, run through nn.LSTM / nn.GRU / nn.RNN and unpacked with "
                "pad_packed_sequence; apply other ops to the padded tensor pad_packed_sequence returns",
            )
        self.bind(node.output(), answer)
        return None

    def visit_packed_rnn(self, node: torch._C.Node, target: str, entries: list, source: str) -> None:
        """`aten::lstm.data(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train,
        bidirectional)` (and gru / rnn_tanh / rnn_relu): the padded op, which computes the same."""
        data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional = entries
        if not all(isinstance(e, Constant) for e in (has_biases, num_layers, dropout, train, bidirectional)):
            raise UnsupportedOpError(target, source, detail="a recurrent layer configured at run time")
        if train.value and dropout.value > 0 and num_layers.value > 1:
            raise UnsupportedOpError(
                target, source, detail="dropout between recurrent layers in training mode: export the model in eval()"
            )
        hx = ListArg(tuple(self.materialize(h, source) for h in hx.items)) if isinstance(hx, ListArg) else hx
        args = [data.padded, data.lengths, hx, params, has_biases, num_layers, bidirectional]
        outputs = self.emit_tensor_op(overload_of(PADDED_OPS[target]), args, [], source, "tuple", "rnn")
        output, *states = node.outputs()
        self.bind(output, PackedData(outputs[0], data.lengths))
        for ts_value, value in zip(states, outputs[1:]):
            self.bind(ts_value, value)

    def visit_pad_packed_sequence(self, node: torch._C.Node, entries: list, source: str) -> None:
        """`aten::_pad_packed_sequence(data, batch_sizes, batch_first, padding_value, total_length)`:
        the padded batch with `padding_value` past each length, cut to `total_length` steps (the
        longest length unless the model passes one)."""
        data, _, batch_first, padding_value, total_length = entries
        padded, lengths = data.padded, data.lengths
        steps = padded.type.shape[0]
        if not isinstance(padding_value, Constant) or not isinstance(batch_first, Constant):
            raise UnsupportedOpError(node.kind(), source, detail="a padding value or layout chosen at run time")
        if padding_value.value != 0:
            time = Constant(torch.arange(steps).unsqueeze(1))
            past = self._packed_op("aten::ge.Tensor", [time, lengths], source)
            past = self._packed_op("aten::unsqueeze.default", [past, Constant(2)], source)
            padded = self._packed_op("aten::masked_fill.Scalar", [padded, past, padding_value], source)
        if isinstance(total_length, Constant) and total_length.value > steps:
            pad = [0, 0] * (padded.type.rank - 1) + [0, total_length.value - steps]
            padded = self._packed_op("aten::constant_pad_nd.default", [padded, Constant(pad), padding_value], source)
        elif not (isinstance(total_length, Constant) and total_length.value == steps):
            if not isinstance(total_length, Constant):
                message = f"RuntimeError: total_length is longer than the padded batch's {steps} steps ({source})"
                check = (total_length, Constant(0), Constant(steps + 1), Constant(message))
                self.nodes.append(HostOp(CHECK_INDEX, check, (), source))
            padded = self._packed_op("aten::narrow.default", [padded, Constant(0), Constant(0), total_length], source)
        if batch_first.value:
            padded = self._packed_op("aten::transpose.int", [padded, Constant(0), Constant(1)], source)
        output, lengths_out = node.outputs()
        self.bind(output, padded)
        self.bind(lengths_out, lengths)

    # -- helpers -------------------------------------------------------------------------------
    def _packed_op(self, target: str, args: list, source: str) -> Value:
        (value,) = self.emit_tensor_op(overload_of(target), args, [], source, name="packed")
        return value

    def _check_zero(self, flags: Value, message: str, source: str) -> None:
        """A host check that no element of the bool tensor `flags` is set (one device read)."""
        count = self._packed_op("aten::sum.default", [flags], source)
        read = self.new_value(ScalarType("int", 0), "count")
        self.nodes.append(HostOp("aten::Int.Tensor", (count,), (read,), source))
        self.nodes.append(HostOp(CHECK_INDEX, (read, Constant(0), Constant(1), Constant(message)), (), source))

    def _longest(self, lengths: Any, source: str) -> Value:
        """max(lengths), read to the host: the padded output's number of steps."""
        longest = self._packed_op("aten::max.default", [lengths], source)
        read = self.new_value(ScalarType("int", 1), _name_or(lengths, "longest"))
        self.nodes.append(HostOp("aten::Int.Tensor", (longest,), (read,), source))
        return read


def _caller_line(captured: Any, function: str) -> str:
    """The model's own line that calls the TorchScript function `function` (torch's code is inlined
    in the frozen graph, which keeps only torch's lines), or "" if it is not found."""
    for child in captured.scripted.modules():  # the model itself first, then its submodules
        try:
            graph = child.graph
        except (AttributeError, RuntimeError):
            continue
        for node in graph.findAllNodes("prim::CallFunction"):
            callee = node.inputsAt(0).node()
            if callee.kind() == "prim::Constant" and function in str(callee):
                return source_of(node)
    return ""


def _name_or(entry: Any, default: str) -> str:
    return entry.name if isinstance(entry, Value) and entry.name else default
