"""torchaudio's Conformer, Wav2Letter and WaveRNN (2.11.1, from PyPI) as their authors wrote them,
over a number of frames known only at run time, one utterance at a time and in padded batches.

The Conformer met four gaps on its way: its padding mask is sized by an int read from the lengths
(`max_length = int(torch.max(lengths).item())`, then `torch.arange(max_length).expand(batch_size,
max_length)`), typed with the example 1 until the observed run gave it the example's value
(`specialize/observed.py`); its `nn.MultiheadAttention` reads Optional attributes that freezing
leaves as attribute reads, and asks `query is key`; and its 31-tap depthwise convolution over the
frames loaded as taps into one dispatch of more constants than IREE allows
(`decompositions.depthwise_as_taps`). Wav2Letter's 1-D convolutions ran as IREE's own 1-D
convolution at a fraction of PyTorch's speed; they are 2-D ones of height 1 now
(`decompositions.convolution_1d_as_2d`). WaveRNN's `infer` samples each output in a loop over the
upsampled frames (`torch.multinomial`, a random op: `dycl_iree/random_sampling.py`).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import check_hosts, export_compiled

from .published import torchaudio_conformer, torchaudio_wav2letter, torchaudio_wavernn

pytestmark = pytest.mark.published


@pytest.mark.parametrize(
    ("batch", "samples"),
    [
        (1, [(50, [50]), (17, [17]), (120, [120]), (3, [3])]),
        (2, [(50, [50, 30]), (17, [17, 9]), (64, [64, 64]), (40, [12, 40])]),
    ],
)
def test_conformer_over_a_run_time_number_of_frames(tmp_path, batch: int, samples: list) -> None:
    torch.manual_seed(0)
    model = torchaudio_conformer().Conformer(
        input_dim=80, num_heads=4, ffn_dim=256, num_layers=2, depthwise_conv_kernel_size=31
    )
    example = (torch.randn(batch, 50, 80), torch.tensor(samples[0][1]))
    _, scripted, compiled, python = export_compiled(
        tmp_path, model, example, f"conformer{batch}", dynamic_shapes=({1: "frames"}, None)
    )
    for frames, lengths in samples:
        output, output_lengths = check_hosts(
            scripted, (compiled, python), (torch.randn(batch, frames, 80), torch.tensor(lengths))
        )
        assert output.shape == (batch, frames, 80) and output_lengths.tolist() == lengths


def test_wav2letter_over_a_run_time_number_of_frames(tmp_path) -> None:
    torch.manual_seed(0)
    model = torchaudio_wav2letter().Wav2Letter(num_classes=40, input_type="mfcc", num_features=13)
    _, scripted, compiled, python = export_compiled(
        tmp_path, model, (torch.randn(1, 13, 200),), "wav2letter", dynamic_shapes=({2: "frames"},)
    )
    for frames in (200, 57, 400):
        logits = check_hosts(scripted, (compiled, python), (torch.randn(1, 13, frames),))
        assert logits.shape == (1, 40, frames // 2 + 1)  # the output follows the run-time length


class _WaveRNNInfer(torch.nn.Module):
    """`WaveRNN.infer` as torchaudio's vocoder pipelines call it: a loop over the upsampled frames
    that samples each output with `torch.multinomial`."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, specgram: torch.Tensor) -> torch.Tensor:
        return self.model.infer(specgram)[0]


def test_wavernn_samples_its_waveform_over_a_run_time_number_of_frames(tmp_path) -> None:
    """Both hosts draw the same samples for a seed, and PyTorch running the exported Program with
    that generator (the reference interpreter) computes what the bundle does."""
    from dycl_iree.reference import ReferenceInterpreter

    torch.manual_seed(0)
    model = torchaudio_wavernn().WaveRNN(
        upsample_scales=[2, 2],
        n_classes=16,
        hop_length=4,
        n_res_block=2,
        n_rnn=32,
        n_fc=32,
        kernel_size=5,
        n_freq=8,
        n_hidden=16,
        n_output=16,
    )
    bundle, scripted, compiled, python = export_compiled(
        tmp_path, _WaveRNNInfer(model), (torch.randn(1, 8, 10),), "wavernn", dynamic_shapes=({2: "frames"},)
    )
    reference = ReferenceInterpreter(bundle.program)
    for seed, frames in enumerate((10, 6, 17)):
        specgram = torch.randn(1, 8, frames)
        compiled.seed(seed)
        python.seed(seed)
        got = compiled(specgram.numpy())
        with torch.no_grad():
            assert got.shape == tuple(scripted(specgram).shape)  # PyTorch's samples differ, not their number
        np.testing.assert_array_equal(got, python(specgram.numpy()))
        with torch.no_grad():
            np.testing.assert_allclose(got, reference.run(specgram, seed=seed).numpy(), rtol=1e-5, atol=1e-6)
