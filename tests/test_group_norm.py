"""GroupNorm over sizes known only at run time (`decompositions.group_norm_of_run_time_size`).

Before, `F.group_norm`'s own batch check (`[N * C // G, G] + list(x.size()[2:])`) failed the
export with a TypeError inside the exporter, and past it PyTorch's decomposition (a view to
[N, G, 1, H * W]) was lowered with its input typed [N, C, 1, W]: both hosts failed every call.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from .conftest import check_hosts, export_compiled
from .published import torchaudio_wav2vec2_components


class ResBlock(nn.Module):
    """A diffusion U-Net's residual block (GroupNorm, SiLU, convolution, twice), skipped where the
    input is already small, over run-time heights and widths."""

    def __init__(self, channels: int = 8, groups: int = 4) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.GroupNorm(groups, channels), nn.GroupNorm(groups, channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor, threshold: float) -> torch.Tensor:
        if float(x.abs().mean()) < threshold:
            return x
        h = self.conv1(nn.functional.silu(self.norm1(x)))
        return x + self.conv2(nn.functional.silu(self.norm2(h)))


class FeatureEncoder(nn.Module):
    """wav2vec 2.0's feature encoder as torchaudio writes it (`ConvLayerBlock` with
    `layer_norm=GroupNorm(C, C)` on its first layer), at small sizes, over a run-time length."""

    def __init__(self) -> None:
        super().__init__()
        self.conv0 = nn.Conv1d(1, 8, 10, stride=5, bias=False)
        self.norm0 = nn.GroupNorm(8, 8, affine=True)
        self.conv1 = nn.Conv1d(8, 8, 3, stride=2, bias=False)

    def forward(self, waveform: torch.Tensor) -> torch.Tensor:
        x = nn.functional.gelu(self.norm0(self.conv0(waveform.unsqueeze(1))))
        return nn.functional.gelu(self.conv1(x)).transpose(1, 2)


def test_residual_block_over_run_time_sizes(tmp_path) -> None:
    torch.manual_seed(0)
    model = ResBlock().eval()
    with torch.no_grad():  # affine parameters that are not the identity
        for norm in (model.norm1, model.norm2):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    example = (torch.randn(1, 8, 6, 6), 0.0)
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "resblock", [{2: "h", 3: "w"}, None])
    for height, width in ((6, 6), (5, 9), (12, 3)):
        x = torch.randn(1, 8, height, width)
        for threshold in (0.0, 10.0):
            check_hosts(scripted, [compiled, python], (x, threshold))
    # The threshold's test went each way at each size (F.group_norm's batch check is a decision too).
    assert {True: 3, False: 3} in [dict(counts) for counts in python.decisions.values()], python.decisions


def test_feature_encoder_over_run_time_lengths(tmp_path) -> None:
    torch.manual_seed(1)
    model = FeatureEncoder().eval()
    example = (torch.randn(2, 400),)
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "features", [{1: "samples"}])
    for samples in (400, 123, 1000):
        check_hosts(scripted, [compiled, python], (torch.randn(2, samples),))


@pytest.mark.published
def test_published_wav2vec2_feature_extractor_over_run_time_lengths(tmp_path) -> None:
    """torchaudio's own wav2vec 2.0 feature extractor (`_get_feature_extractor("group_norm", ...)`,
    its Base architecture's layers at fewer channels), with the lengths of a padded batch of two.
    Its one GroupNorm (a group per channel over [N, C, T]) met the batch check's list add (a
    TypeError inside the exporter before); its view keeps T whole, so it never met the 2-D view."""
    components = torchaudio_wav2vec2_components()
    torch.manual_seed(2)
    shapes = [(16, 10, 5), (16, 3, 2), (16, 3, 2), (16, 2, 2)]
    model = components._get_feature_extractor("group_norm", shapes, bias=False).eval()
    example = (torch.randn(2, 800), torch.tensor([800, 600]))
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "wav2vec2", [{1: "samples"}, None])
    for samples, lengths in ((800, [800, 600]), (321, [321, 100]), (1600, [1200, 1600])):
        check_hosts(scripted, [compiled, python], (torch.randn(2, samples), torch.tensor(lengths)))
