"""torchaudio's Tacotron2 (2.11.1, from PyPI) as its authors wrote it, on a small configuration.

The model code comes from the installed package without running `torchaudio/__init__.py`, whose
C++ extension does not load with torch 2.13: `tests/published.py` loads `models/tacotron2.py` by
its file path with importlib. Nothing of the package is edited.

Its prenet applies dropout even in eval mode (`F.dropout(..., training=True)`), a random op in
the decode loop: the model is compared with that dropout replaced by an identity, as a user would
do it, by a `_Prenet` subclass whose `forward` leaves the dropout out, set on the model's prenet.

The encoder packs the padded batch (`pack_padded_sequence`), runs a bidirectional LSTM over it and
unpacks it (`specialize/packed.py`); the decoder's loop stops when every sequence's gate passes the
threshold or at `decoder_max_step`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dycl_iree

from .conftest import export_compiled
from .published import torchaudio_tacotron2

pytestmark = pytest.mark.published

# Few symbols, small embedding, encoder and decoder dims, few decoder steps.
SMALL = dict(
    n_mels=4,
    n_symbol=10,
    symbol_embedding_dim=8,
    encoder_embedding_dim=8,
    encoder_n_convolution=1,
    encoder_kernel_size=3,
    decoder_rnn_dim=8,
    decoder_max_step=10,
    attention_rnn_dim=8,
    attention_hidden_dim=4,
    attention_location_n_filter=2,
    attention_location_kernel_size=3,
    prenet_dim=6,  # not n_mels: the decoder input changes size inside the loop, as published (80 -> 256)
    postnet_n_convolution=1,
    postnet_kernel_size=3,
    postnet_embedding_dim=4,
)
TOKENS = 6  # the padded width of a batch of token sequences; the lengths vary below it


def _without_prenet_dropout(tacotron2):
    """`_Prenet` with its always-on dropout replaced by an identity."""

    class Prenet(tacotron2._Prenet):
        def forward(self, x):
            for linear in self.layers:
                x = F.relu(linear(x))
            return x

    return Prenet


class Infer(torch.nn.Module):
    """`Tacotron2.infer` as the module to export (torchaudio's pipelines call it the same way)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens, lengths):
        return self.model.infer(tokens, lengths)


@pytest.fixture(scope="module")
def tacotron2():
    module = torchaudio_tacotron2()
    # Initial weights whose gates stop the inputs below at steps 1, 3 and 9, and some at decoder_max_step.
    torch.manual_seed(21)
    model = module.Tacotron2(**SMALL).eval()
    model.decoder.prenet.__class__ = _without_prenet_dropout(module)
    return model


def _compare(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.shape(g) == tuple(w.shape), (np.shape(g), w.shape)
        assert np.asarray(g).dtype == w.numpy().dtype
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)


def test_the_published_encoder_packs_and_runs_on_the_compiled_host(tacotron2, tmp_path):
    """`_Encoder.forward` as published: conv, `lengths.cpu()`, `pack_padded_sequence` (sorted
    lengths), a bidirectional LSTM, `pad_packed_sequence` to the longest length."""
    encoder = tacotron2.encoder
    example = (torch.randn(2, 8, TOKENS), torch.tensor([TOKENS, 4]))
    bundle = dycl_iree.export(encoder, example)
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / "encoder.dycl")
    hosts = dycl_iree.load(path, host="compiled"), dycl_iree.load(path, host="python")
    scripted = torch.jit.script(encoder)
    for lengths in ([6, 4], [5, 5], [3, 1]):
        x = torch.randn(2, 8, TOKENS)
        with torch.no_grad():
            want = scripted(x, torch.tensor(lengths))
        assert want.shape[1] == lengths[0]
        for host in hosts:
            _compare([host(x.numpy(), np.array(lengths))], [want])


def test_infer_exports_with_the_compiled_host_and_stops_where_pytorch_stops(tacotron2, tmp_path):
    example = (torch.randint(0, 10, (2, TOKENS)), torch.tensor([TOKENS, 4]))
    _, scripted, *hosts = export_compiled(tmp_path, Infer(tacotron2), example, "tacotron2")
    stops = set()
    generator = torch.Generator().manual_seed(0)
    for lengths in ([6, 4], [5, 5], [3, 1], [6, 6], [2, 2], [4, 3]):
        tokens = torch.randint(0, 10, (2, TOKENS), generator=generator)
        with torch.no_grad():
            want = scripted(tokens, torch.tensor(lengths))
        for host in hosts:
            _compare(host(tokens.numpy(), np.array(lengths)), want)
        stops.add(tuple(want[1].tolist()))  # mel_specgram_lengths: the step each input stopped at
    assert len({step for stop in stops for step in stop}) >= 4, stops  # sequences stop at different steps
    assert any(SMALL["decoder_max_step"] in stop for stop in stops), stops  # and at the cap


def test_one_sentence_at_a_time_as_torchaudios_pipelines_run_it(tacotron2, tmp_path):
    """A batch of one: the postnet's 1-D convolutions then run over a run-time number of frames with
    a batch of 1, which IREE's channels-last conversion fails to compile
    (`decompositions.convolution_1d_as_2d`)."""
    example = (torch.randint(0, 10, (1, TOKENS)), torch.tensor([TOKENS]))
    _, scripted, *hosts = export_compiled(tmp_path, Infer(tacotron2), example, "one")
    stops = set()
    generator = torch.Generator().manual_seed(1)
    for _ in range(4):
        tokens = torch.randint(0, 10, (1, TOKENS), generator=generator)
        with torch.no_grad():
            want = scripted(tokens, torch.tensor([TOKENS]))
        for host in hosts:
            _compare(host(tokens.numpy(), np.array([TOKENS])), want)
        stops.add(int(want[1]))
    assert stops == {1, 6, SMALL["decoder_max_step"]}, stops  # at once, later, and at the cap


class _PrenetLoop(torch.nn.Module):
    """The published `_Prenet`, unchanged (dropout on, p = 0.5), stepped in a decode loop that stops
    on a gate: the random op the README's trap was about, inside `main`'s loop."""

    def __init__(self, prenet):
        super().__init__()
        self.prenet = prenet
        self.project = torch.nn.Linear(4, 4)
        self.gate = torch.nn.Linear(4, 1)

    def forward(self, frame, steps: int):
        frames = frame
        for _ in range(steps):
            frame = torch.tanh(self.project(self.prenet(frame)))
            frames = frames + frame
            if bool(torch.sigmoid(self.gate(frames)).min() > 0.5):
                break
        return frames


def test_the_published_prenets_always_on_dropout_runs_in_the_compiled_hosts_loop(tmp_path):
    """Both hosts draw the same dropout masks for a seed, and PyTorch running the exported Program
    with that generator (the reference interpreter) computes what the bundle does."""
    from dycl_iree.reference import ReferenceInterpreter

    module = torchaudio_tacotron2()
    torch.manual_seed(3)
    model = _PrenetLoop(module._Prenet(4, [4, 4])).eval()
    bundle = dycl_iree.export(model, (torch.zeros(2, 4), 3))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    assert {op.target for s in bundle.program.segments for op in s.nodes} >= {"dycl::dropout"}
    path = bundle.save(tmp_path / "prenet.dycl")
    compiled, python = dycl_iree.load(path, host="compiled"), dycl_iree.load(path, host="python")
    reference = ReferenceInterpreter(bundle.program)
    for seed, steps in enumerate((0, 1, 5, 10)):
        frame = torch.randn(2, 4)
        compiled.seed(seed)
        python.seed(seed)
        got = compiled(frame.numpy(), steps)
        np.testing.assert_array_equal(got, python(frame.numpy(), steps))
        with torch.no_grad():
            np.testing.assert_allclose(got, reference.run(frame, steps, seed=seed).numpy(), rtol=1e-5, atol=1e-6)
