"""nn.LSTM, nn.GRU and nn.RNN over sequences whose length changes at run time, on both hosts.

Written as their authors write them: the PyTorch chatbot tutorial's encoder (embedding, a
two-layer bidirectional GRU, the two directions summed), a batch-first LSTM tagger that returns its
final states, and an Elman RNN (relu) given its initial state. Each is exported with its time dim
dynamic and run at lengths shorter and longer than the example's, against PyTorch; the time loop
is a loop of the compiled host, and the trip counts it ran are those lengths.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import dycl_iree
import host_runtime
from dycl_iree.errors import DyclError
from tests.conftest import assert_matches


class EncoderRNN(nn.Module):
    def __init__(self, hidden_size: int = 6, n_layers: int = 2) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(20, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, n_layers, bidirectional=True)

    def forward(self, input_seq: torch.Tensor):
        embedded = self.embedding(input_seq)
        outputs, hidden = self.gru(embedded)
        outputs = outputs[:, :, : self.hidden_size] + outputs[:, :, self.hidden_size :]
        return outputs, hidden


class LSTMTagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 5, batch_first=True)
        self.hidden2tag = nn.Linear(5, 3)

    def forward(self, sentence: torch.Tensor):
        lstm_out, (h_n, c_n) = self.lstm(sentence)
        return torch.log_softmax(self.hidden2tag(lstm_out), dim=2), h_n, c_n


class ElmanRNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.RNN(3, 4, nonlinearity="relu", bias=False)

    def forward(self, x: torch.Tensor, h0: torch.Tensor):
        out, h_n = self.rnn(x, h0)
        return out.sum(2), h_n


def _time(dim: int) -> dict:
    return {dim: torch.export.Dim("steps", min=1, max=256)}


CASES = {
    "encoder": (
        EncoderRNN,
        lambda t: (torch.randint(0, 20, (t, 1)),),
        lambda: (_time(0),),
    ),
    "tagger": (LSTMTagger, lambda t: (torch.randn(2, t, 4),), lambda: (_time(1),)),
    "elman": (ElmanRNN, lambda t: (torch.randn(t, 2, 3), torch.randn(1, 2, 4)), lambda: (_time(0), None)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_recurrent_layer_runs_over_any_length_on_both_hosts(name, tmp_path) -> None:
    build, inputs, dynamic = CASES[name]
    torch.manual_seed(0)
    model = build().eval()
    bundle = dycl_iree.export(model, inputs(5), dynamic_shapes=dynamic())
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / f"{name}.dycl")
    scripted = torch.jit.script(model)
    lengths = (1, 5, 2, 13)
    samples = [inputs(t) for t in lengths]
    for host in ("python", "compiled"):
        run = host_runtime.load(path, host=host)
        for sample in samples:
            expected = scripted(*sample)
            got = run(*[x.numpy() for x in sample])
            assert_matches(got, expected, f"{name} {host} length {sample[0].shape}")
    recorder = host_runtime.load(path, host="python", record=True)
    for sample in samples:
        recorder(*[x.numpy() for x in sample])
    # One time loop per layer and direction, each run once per call, for as many steps as the input has.
    loops = recorder.trip_counts
    assert loops and all(trips == list(lengths) for trips in loops.values()), loops


def test_a_fixed_length_keeps_the_unrolled_op(tmp_path) -> None:
    torch.manual_seed(0)
    bundle = dycl_iree.export(LSTMTagger().eval(), (torch.randn(2, 5, 4),))
    assert bundle.manifest["decisions"] == []  # no loop over time: torch.export unrolls the 5 steps


def test_an_lstm_with_projections_over_a_run_time_length_is_refused_with_the_way_out() -> None:
    class Projected(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(4, 6, proj_size=3)

        def forward(self, x: torch.Tensor):
            return self.lstm(x)[0]

    with pytest.raises(DyclError, match=r"proj_size.*export with a fixed sequence length"):
        dycl_iree.export(Projected().eval(), (torch.randn(5, 1, 4),), dynamic_shapes=(_time(0),))
