"""PackedSequence: `pack_padded_sequence` -> nn.LSTM / nn.GRU / nn.RNN -> `pad_packed_sequence`.

Written as seq2seq encoders write them (the PyTorch tutorials' encoder, Tacotron2's): a batch of
padded sequences of different lengths, packed, run through a recurrent layer, unpacked. Both hosts
are compared with the scripted model on outputs, final states and lengths, on batches whose
longest length differs (the unpacked output is that long) and whose order PyTorch sorts or must
find sorted; a length PyTorch refuses raises PyTorch's message.
"""

# The models keep the published code's idioms (`super(Class, self)`).
# ruff: noqa: UP008

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

import dycl_iree
from tests.conftest import check_hosts_raise, export_compiled


def _check(scripted, hosts, inputs):
    with torch.no_grad():
        want = scripted(*inputs)
    for host in hosts:
        got = host(*(i.numpy() for i in inputs))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert np.shape(g) == tuple(w.shape), (np.shape(g), w.shape)
            assert np.asarray(g).dtype == w.numpy().dtype
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)
    return want


class BidirectionalEncoder(nn.Module):
    """A seq2seq encoder: embedding, pack (sorted lengths, batch first), a two-layer bidirectional
    LSTM, unpack; the final states are each sequence's last step (backward: its first)."""

    def __init__(self, vocabulary=12, hidden=5):
        super(BidirectionalEncoder, self).__init__()
        self.embedding = nn.Embedding(vocabulary, 4)
        self.lstm = nn.LSTM(4, hidden, num_layers=2, batch_first=True, bidirectional=True)

    def forward(self, tokens, lengths):
        embedded = self.embedding(tokens)
        packed = nn.utils.rnn.pack_padded_sequence(embedded, lengths.cpu(), batch_first=True)
        outputs, (hidden, cell) = self.lstm(packed)
        outputs, output_lengths = nn.utils.rnn.pad_packed_sequence(outputs, batch_first=True)
        return outputs, hidden, cell, output_lengths


@pytest.fixture(scope="module")
def bilstm(tmp_path_factory):
    """The encoder exported once for the tests of this file: (bundle, scripted, compiled, python)."""
    torch.manual_seed(0)
    example = (torch.randint(0, 12, (3, 6)), torch.tensor([6, 4, 2]))
    return export_compiled(tmp_path_factory.mktemp("bilstm"), BidirectionalEncoder(), example, "bilstm")


def test_a_bidirectional_lstm_over_a_packed_batch_matches_pytorch(bilstm):
    bundle, scripted, compiled, python = bilstm
    targets = {op.target for segment in bundle.program.segments for op in segment.nodes}
    assert "dycl::padded_lstm.default" in targets, targets
    generator = torch.Generator().manual_seed(1)
    for lengths in ([6, 4, 2], [5, 5, 1], [3, 2, 2], [1, 1, 1]):
        tokens = torch.randint(0, 12, (3, 6), generator=generator)
        outputs, *_ = _check(scripted, (compiled, python), (tokens, torch.tensor(lengths)))
        assert outputs.shape[1] == lengths[0]  # padded to the longest length, read at run time


def test_pytorchs_checks_of_the_lengths_raise_its_messages(bilstm):
    _, scripted, compiled, python = bilstm
    tokens = torch.randint(0, 12, (3, 6), generator=torch.Generator().manual_seed(2))
    for lengths, message in (([4, 6, 2], "must be sorted in decreasing order"), ([6, 4, 0], "greater than 0")):
        check_hosts_raise(scripted, (compiled, python), (tokens, torch.tensor(lengths)), message)
    for host in (compiled, python):  # PyTorch reads past the batch here; both hosts refuse
        with pytest.raises(dycl_iree.ModelRaised, match="longer than the padded batch's 6 steps"):
            host(tokens.numpy(), np.array([7, 4, 2]))


class PackedEncoder(nn.Module):
    """A seq2seq encoder as the PyTorch tutorials write it: pack unsorted lengths, run the GRU, unpack."""

    def __init__(self):
        super(PackedEncoder, self).__init__()
        self.gru = nn.GRU(4, 4, batch_first=True)

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        outputs, hidden = self.gru(packed)
        outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs, batch_first=True, padding_value=-1.0)
        return outputs, hidden


def test_unsorted_lengths_are_sorted_and_restored_around_a_gru(tmp_path):
    torch.manual_seed(0)
    _, scripted, compiled, python = export_compiled(
        tmp_path, PackedEncoder(), (torch.randn(3, 5, 4), torch.tensor([3, 5, 2])), "gru"
    )
    for lengths in ([3, 5, 2], [2, 2, 4], [1, 5, 5]):
        _check(scripted, (compiled, python), (torch.randn(3, 5, 4), torch.tensor(lengths)))


class TotalLength(nn.Module):
    """`pad_packed_sequence(..., total_length=T)`, as DataParallel models write it; a plain RNN."""

    def __init__(self, total_length):
        super(TotalLength, self).__init__()
        self.rnn = nn.RNN(4, 3, bidirectional=True)
        self.total_length = total_length

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths)
        outputs, hidden = self.rnn(packed)
        outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs, total_length=self.total_length)
        return outputs, hidden


@pytest.mark.parametrize("total_length", [5, 7])
def test_a_total_length_pads_to_it(tmp_path, total_length):
    torch.manual_seed(0)
    _, scripted, compiled, python = export_compiled(
        tmp_path, TotalLength(total_length), (torch.randn(5, 2, 4), torch.tensor([5, 3])), f"total{total_length}"
    )
    for lengths in ([5, 3], [2, 2]):
        _check(scripted, (compiled, python), (torch.randn(5, 2, 4), torch.tensor(lengths)))


class PackedDataRead(nn.Module):
    def __init__(self):
        super(PackedDataRead, self).__init__()
        self.gru = nn.GRU(4, 4)

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths)
        return packed.data * 2


def test_other_reads_of_a_packed_sequence_are_refused_with_what_works():
    with pytest.raises(dycl_iree.DyclError, match=r"reads a PackedSequence's data.*pad_packed_sequence"):
        dycl_iree.export(PackedDataRead(), (torch.randn(5, 2, 4), torch.tensor([5, 3])))


def test_a_padded_length_that_changes_at_run_time_is_refused_with_what_works():
    """The layer runs over the padded steps, unrolled like nn.LSTM over a fixed length; refused at
    the model's line."""
    example = (torch.randint(0, 12, (3, 6)), torch.tensor([6, 4, 2]))
    dims = {"tokens": {1: "steps"}, "lengths": None}
    message = r"_pack_padded_sequence \(from .*test_packed_sequence.py:\d+\).*a PackedSequence needs a padded length"
    with pytest.raises(dycl_iree.DyclError, match=message):
        dycl_iree.export(BidirectionalEncoder().eval(), example, dynamic_shapes=dims)
