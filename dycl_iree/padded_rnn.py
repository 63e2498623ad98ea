"""Recurrent layers over a padded batch with per-sequence lengths: what `nn.LSTM`, `nn.GRU` and
`nn.RNN` compute on a PackedSequence, written without one.

A PackedSequence stores the steps of a batch interleaved, so its sizes depend on the lengths'
values, and `aten::lstm.data` runs a batch that shrinks step by step; neither exists in a graph
of fixed-size tensors. `specialize/packed.py` keeps the padded batch instead, and calls these ops:

* the forward direction runs over the padded steps; past a sequence's length its state stays as
  it was and its output is zero, so the final state is the one at the sequence's last step;
* the backward direction runs over each sequence reversed within its own length (a gather with
  index `where(t < len, len - 1 - t, t)`, which leaves the padding in place), with the same
  freezing, and its outputs are reversed back with the same gather.

Those are PyTorch's packed results exactly, for lengths in any order. The ops are
`CompositeImplicitAutograd`, so meta runs and torch.export see the cell arithmetic of each step:
like `aten::lstm.input`, they unroll over the padded steps, which must be fixed at export.

>>> x, lengths = torch.randn(3, 2, 4), torch.tensor([3, 1])
>>> h0 = torch.zeros(1, 2, 5)
>>> lstm = torch.nn.LSTM(4, 5)
>>> out, h, c = torch.ops.dycl.padded_lstm(x, lengths, [h0, h0], lstm._flat_weights, True, 1, False)
>>> out[1:, 1].abs().max().item()
0.0
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

# The recurrent ops of a PackedSequence (`aten::<mode>.data`) and the padded op each becomes.
PADDED_OPS = {
    "aten::lstm.data": "dycl::padded_lstm.default",
    "aten::gru.data": "dycl::padded_gru.default",
    "aten::rnn_tanh.data": "dycl::padded_rnn_tanh.default",
    "aten::rnn_relu.data": "dycl::padded_rnn_relu.default",
}

# Ops that torch.export unrolls over their input's sequence dim (their decomposition is a Python
# loop over time steps), so that dim cannot stay dynamic.
UNROLLED_OVER_TIME = {
    "aten::lstm.input": "nn.LSTM",
    "aten::gru.input": "nn.GRU",
    "aten::rnn_tanh.input": "nn.RNN",
    "aten::rnn_relu.input": "nn.RNN",
    # A PackedSequence's layer over the padded batch (`padded_rnn`), unrolled the same way.
    "dycl::padded_lstm.default": "nn.LSTM over a PackedSequence",
    "dycl::padded_gru.default": "nn.GRU over a PackedSequence",
    "dycl::padded_rnn_tanh.default": "nn.RNN over a PackedSequence",
    "dycl::padded_rnn_relu.default": "nn.RNN over a PackedSequence",
}

_LIBRARY = torch.library.Library("dycl", "FRAGMENT")
_ARGS = "Tensor[] params, bool has_biases, int num_layers, bool bidirectional"
_LIBRARY.define(
    f"padded_lstm(Tensor input, Tensor lengths, Tensor[] hx, {_ARGS}) -> (Tensor, Tensor, Tensor)"
)
for _mode in ("gru", "rnn_tanh", "rnn_relu"):
    _LIBRARY.define(f"padded_{_mode}(Tensor input, Tensor lengths, Tensor hx, {_ARGS}) -> (Tensor, Tensor)")


def _cell(mode: str, x: Tensor, state: Any, weights: list[Tensor]) -> tuple[Tensor, Any]:
    """One step of one direction: (its output, its new state), with PyTorch's gate order."""
    w_ih, w_hh = weights[0], weights[1]
    b_ih, b_hh = (weights[2], weights[3]) if len(weights) in (4, 5) else (None, None)
    if mode == "lstm":
        h, c = state
        i, f, g, o = (F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh)).chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        if len(weights) in (3, 5):  # proj_size: the hidden state is projected
            h = F.linear(h, weights[-1])
        return h, (h, c)
    if mode == "gru":
        i_r, i_z, i_n = F.linear(x, w_ih, b_ih).chunk(3, 1)
        h_r, h_z, h_n = F.linear(state, w_hh, b_hh).chunk(3, 1)
        r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        h = (1 - z) * n + z * state
        return h, h
    pre = F.linear(x, w_ih, b_ih) + F.linear(state, w_hh, b_hh)
    h = torch.tanh(pre) if mode == "rnn_tanh" else torch.relu(pre)
    return h, h


def _keep(valid: Tensor, new: Any, old: Any) -> Any:
    """The new state where the step is valid, the old one past the sequence's length."""
    if isinstance(new, tuple):
        return tuple(torch.where(valid, n, o) for n, o in zip(new, old))
    return torch.where(valid, new, old)


def _direction(mode: str, x: Tensor, valid: Tensor, state: Any, weights: list[Tensor]) -> tuple[Tensor, Any]:
    """Run one direction over the padded steps of `x` ([T, B, I]); `valid` is [T, B, 1]."""
    outputs = []
    for t in range(x.shape[0]):
        out, new = _cell(mode, x[t], state, weights)
        state = _keep(valid[t], new, state)
        outputs.append(torch.where(valid[t], out, torch.zeros_like(out)))
    return torch.stack(outputs), state


def padded_rnn(
    mode: str,
    input: Tensor,
    lengths: Tensor,
    hx: Any,
    params: list[Tensor],
    num_layers: int,
    bidirectional: bool,
) -> tuple[Tensor, Any]:
    """The packed recurrent layer on `input` ([T, B, I], time-major) cut at `lengths`: the padded
    output (zero past each length) and the final state(s), [layers * directions, B, H] each."""
    steps = input.shape[0]
    time = torch.arange(steps, device=input.device).unsqueeze(1)
    lengths = lengths.to(device=input.device, dtype=torch.int64).unsqueeze(0)
    valid = (time < lengths).unsqueeze(2)
    # Each sequence reversed within its length; the padding stays in place. Its own inverse.
    reverse = torch.where(time < lengths, lengths - 1 - time, time.expand(steps, lengths.size(1)))
    directions = 2 if bidirectional else 1
    per_direction = len(params) // (num_layers * directions)
    finals: list[Any] = []
    layer_input = input
    for layer in range(num_layers):
        outputs = []
        for direction in range(directions):
            index = layer * directions + direction
            weights = params[index * per_direction : (index + 1) * per_direction]
            state = (hx[0][index], hx[1][index]) if mode == "lstm" else hx[index]
            if direction == 0:
                out, state = _direction(mode, layer_input, valid, state, weights)
            else:
                gather = reverse.unsqueeze(2).expand(steps, reverse.size(1), layer_input.size(2))
                out, state = _direction(mode, layer_input.gather(0, gather), valid, state, weights)
                out = out.gather(0, reverse.unsqueeze(2).expand(out.shape))
            outputs.append(out)
            finals.append(state)
        layer_input = torch.cat(outputs, 2) if directions == 2 else outputs[0]
    if mode == "lstm":
        return layer_input, (torch.stack([h for h, _ in finals]), torch.stack([c for _, c in finals]))
    return layer_input, torch.stack(finals)


@torch.library.impl(_LIBRARY, "padded_lstm", "CompositeImplicitAutograd")
def _padded_lstm(input, lengths, hx, params, has_biases, num_layers, bidirectional):  # noqa: ANN001
    output, (h, c) = padded_rnn("lstm", input, lengths, hx, params, num_layers, bidirectional)
    return output, h, c


def _register(mode: str) -> None:
    @torch.library.impl(_LIBRARY, f"padded_{mode}", "CompositeImplicitAutograd")
    def _padded(input, lengths, hx, params, has_biases, num_layers, bidirectional):  # noqa: ANN001
        return padded_rnn(mode, input, lengths, hx, params, num_layers, bidirectional)


for _mode in ("gru", "rnn_tanh", "rnn_relu"):
    _register(_mode)
