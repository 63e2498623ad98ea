"""The 1-D convolutions of published speech models at their sizes, for `python -m dycl_iree bench`.

    python -m dycl_iree bench --threads 1 --candidates eager,onnxruntime,dycl \\
        --models benchmarks/speech_convolutions.py:tacotron2_encoder \\
        --models benchmarks/speech_convolutions.py:tacotron2_postnet \\
        --models benchmarks/speech_convolutions.py:conformer_depthwise

Each factory is one block of the model as published, batch 1 (one utterance at a time, as
torchaudio's pipelines run them):

- `tacotron2_encoder`: Tacotron2's encoder convolution, 512 -> 512 channels, 5 taps, batch norm
  and ReLU, over 40 symbols (fixed at export);
- `tacotron2_postnet`: its postnet's first two convolutions, 80 -> 512 -> 512 channels, 5 taps,
  batch norm and tanh, over a number of frames known only at run time (timed at 100 and 400);
- `conformer_depthwise`: the Conformer's convolution module core, a 31-tap depthwise convolution
  over 144 channels between two 1x1 ones, over a run-time number of frames (200 and 800).

`decompositions.convolution_1d_as_2d` writes each as the 2-D convolution of height 1; README,
performance, "1-D convolutions", has the figures.
"""

from __future__ import annotations

import torch
from torch import nn


def _with_trained_statistics(model: nn.Module) -> nn.Module:
    """Batch-norm statistics as a trained network's (capture folds them into the filters)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm1d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
    return model.eval()


def tacotron2_encoder():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(512, 512, 5, padding=2), nn.BatchNorm1d(512), nn.ReLU())
    return _with_trained_statistics(model), (torch.randn(1, 512, 40),)


def tacotron2_postnet():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv1d(80, 512, 5, padding=2),
        nn.BatchNorm1d(512),
        nn.Tanh(),
        nn.Conv1d(512, 512, 5, padding=2),
        nn.BatchNorm1d(512),
        nn.Tanh(),
    )
    return _with_trained_statistics(model), (torch.randn(1, 80, 100),), ({2: "frames"},)


def conformer_depthwise():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv1d(144, 288, 1),
        nn.GLU(dim=1),
        nn.Conv1d(144, 144, 31, padding=15, groups=144),
        nn.BatchNorm1d(144),
        nn.SiLU(),
        nn.Conv1d(144, 144, 1),
    )
    return _with_trained_statistics(model), (torch.randn(1, 144, 200),), ({2: "frames"},)


SAMPLES = {
    "tacotron2_postnet": lambda: [(torch.randn(1, 80, 100),), (torch.randn(1, 80, 400),)],
    "conformer_depthwise": lambda: [(torch.randn(1, 144, 200),), (torch.randn(1, 144, 800),)],
}
