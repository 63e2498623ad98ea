"""Recurrent layers over a sequence whose length is known only at run time.

`nn.LSTM`, `nn.GRU` and `nn.RNN` call one aten op over the whole sequence (`aten::lstm.input`),
which torch.export unrolls over the example's time steps: the segment then only takes sequences of
the example's length. When the time dim is dynamic, the op is visited instead as the TorchScript
loop below that computes it step by step with the cell ops (`lstm_cell`, `gru_cell`,
`rnn_tanh_cell`, `rnn_relu_cell`), the way `nn.LSTM`'s own reference semantics define it: per
layer, per direction (the reverse one walks the steps backwards), each step's hidden state written
into the layer's output, the layers chained. The loop over time is data-dependent to this stage,
so it becomes a Program loop of the compiled host like any `for t in range(x.size(0))` of the
user; the loops over layers and directions are constant and unroll.

Inference only: the dropout between layers applies in training, which an export never is.
"""

# TorchScript compiles `_layers` and `_cell` from their source, with typing's generics.
# ruff: noqa: UP006, UP045

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch
from torch import Tensor

from ..errors import UnsupportedOpError
from .values import tensor_type_of

# The number of weight tensors per layer and direction, with biases: w_ih, w_hh, b_ih, b_hh.
_WEIGHTS = 4


def _cell(
    kind: str,
    x: Tensor,
    h: Tensor,
    c: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Optional[Tensor],
    b_hh: Optional[Tensor],
) -> Tuple[Tensor, Tensor]:
    if kind == "lstm":
        return torch.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh)
    if kind == "gru":
        return torch.gru_cell(x, h, w_ih, w_hh, b_ih, b_hh), c
    if kind == "rnn_tanh":
        return torch.rnn_tanh_cell(x, h, w_ih, w_hh, b_ih, b_hh), c
    return torch.rnn_relu_cell(x, h, w_ih, w_hh, b_ih, b_hh), c


def _layers(
    kind: str,
    x: Tensor,
    h0: Tensor,
    c0: Tensor,
    params: List[Tensor],
    has_biases: bool,
    num_layers: int,
    bidirectional: bool,
    batch_first: bool,
) -> Tuple[Tensor, Tensor, Tensor]:
    if batch_first:
        x = x.transpose(0, 1)
    directions = 2 if bidirectional else 1
    stride = 4 if has_biases else 2
    steps = x.size(0)
    hs: List[Tensor] = []
    cs: List[Tensor] = []
    for layer in range(num_layers):
        outputs: List[Tensor] = []
        for direction in range(directions):
            index = layer * directions + direction
            base = index * stride
            w_ih = params[base]
            w_hh = params[base + 1]
            b_ih: Optional[Tensor] = None
            b_hh: Optional[Tensor] = None
            if has_biases:
                b_ih = params[base + 2]
                b_hh = params[base + 3]
            h = h0[index]
            c = c0[index]
            out = torch.zeros([steps, h.size(0), h.size(1)], dtype=h.dtype)
            for step in range(steps):
                t = steps - 1 - step if direction == 1 else step
                h, c = _cell(kind, x[t], h, c, w_ih, w_hh, b_ih, b_hh)
                out[t] = h
            outputs.append(out)
            hs.append(h)
            cs.append(c)
        x = torch.cat(outputs, 2) if directions == 2 else outputs[0]
    if batch_first:
        x = x.transpose(0, 1)
    return x, torch.stack(hs), torch.stack(cs)


_SCRIPTED: list[Any] = []


def layers_graph() -> torch._C.Graph:
    """The TorchScript graph of `_layers`, calls inlined (scripted once, on first use)."""
    if not _SCRIPTED:
        scripted = torch.jit.script(_layers)
        graph = scripted.graph.copy()
        torch._C._jit_pass_inline(graph)
        _SCRIPTED.append(graph)
    return _SCRIPTED[0]


# aten op -> (cell kind, whether hx is [h0, c0] rather than h0).
RECURRENT_OPS = {
    "aten::lstm": ("lstm", True),
    "aten::gru": ("gru", False),
    "aten::rnn_tanh": ("rnn_tanh", False),
    "aten::rnn_relu": ("rnn_relu", False),
}


def time_dim_is_dynamic(entries: list) -> bool:
    """Whether the sequence dim of a recurrent op's input (`aten::lstm.input` and friends) is dynamic."""
    input_type = tensor_type_of(entries[0])
    if input_type is None or len(entries) != 9 or input_type.rank != 3:
        return False  # the packed overloads (`lstm.data`), or an unbatched input
    batch_first = entries[8].value if hasattr(entries[8], "value") else False
    return input_type.shape[1 if batch_first else 0] is None


def check_weights(kind: str, params: Any, has_biases: bool, layers: int, directions: int, source: str) -> None:
    """Refuse what the loop does not compute: LSTM projections (`proj_size`) add a weight per layer."""
    count = len(params.items) if hasattr(params, "items") else len(params.value)
    expected = layers * directions * (_WEIGHTS if has_biases else 2)
    if count != expected:
        raise UnsupportedOpError(
            f"aten::{kind}",
            source,
            detail=f"{count} weight tensors where {expected} were expected (an nn.LSTM with proj_size?) over a "
            "sequence whose length changes at run time; export with a fixed sequence length",
        )
