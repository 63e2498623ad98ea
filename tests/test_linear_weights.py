"""A linear layer's constant weight reaches IREE stored [in, out] (`lower._constant_weight`), so its
matmul reads it as the convolutions' matmuls read theirs: not as a transposed operand, which IREE
3.13 ran 2.1x slower with AVX2, outside the register tile (`data_tiling`). A classifier's one row
by a large weight is the exception: dot products with the weight's rows as stored
(`decompositions.linear_of_one_row`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from dycl_iree import lower
from tests.conftest import check_hosts, export_compiled
from tests.test_data_tiling import _compiled, _set_cpu

# linalg.matmul's map of a transposed right operand, [out, in] read as [in, out].
TRANSPOSED_WEIGHT = "affine_map<(d0, d1, d2) -> (d1, d2)>"


class GatedFeedForward(nn.Module):
    """A Transformer block's feed-forward half over a sequence of tokens, written as Hugging Face's
    models write it, skipped for a sequence whose activations are small (an adaptive-depth gate)."""

    def __init__(self, hidden_size: int = 64, intermediate_size: int = 256) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(hidden_size)
        self.up_proj = nn.Linear(hidden_size, intermediate_size)
        self.down_proj = nn.Linear(intermediate_size, hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        residual = hidden_states
        if hidden_states.abs().mean() > 1.0:
            hidden_states = self.down_proj(F.gelu(self.up_proj(self.layer_norm(hidden_states))))
        return residual + hidden_states


def _matmul_maps(model: nn.Module, example: torch.Tensor) -> list[str]:
    sources = _compiled(model, (example,), "executable-sources")
    return re.findall(r"linalg\.matmul(?: indexing_maps = \[([^\]]*)\])?", sources)


def test_linear_weights_are_read_untransposed(monkeypatch: pytest.MonkeyPatch) -> None:
    _set_cpu(monkeypatch, False, True)
    torch.manual_seed(0)
    model, example = GatedFeedForward().eval(), torch.randn(1, 196, 64)
    maps = _matmul_maps(model, example)
    assert len(maps) == 2 and not any(TRANSPOSED_WEIGHT in found for found in maps), maps
    # The premise: a weight stored as the layer holds it, [out, in], is read transposed.
    monkeypatch.setattr(lower, "_constant_weight", lambda arg, rank=4: None)
    before = _matmul_maps(model, example)
    assert len(before) == 2 and all(TRANSPOSED_WEIGHT in found for found in before), before


def test_linear_layers_match_pytorch_on_both_sides_of_the_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")  # the whole-export key does not see the CPU probe
    _set_cpu(monkeypatch, False, True)
    torch.manual_seed(0)
    model = GatedFeedForward().eval()
    samples = [torch.randn(1, 196, 64) * scale for scale in (2.0, 0.5)]
    _, scripted, compiled, python = export_compiled(tmp_path, model, (samples[0],), "ffn")
    for sample in samples:
        check_hosts(scripted, (compiled, python), (sample,))
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 1}, python.decisions


class GatedClassifier(nn.Module):
    """A CNN's classifier as torchvision writes it (pool, flatten, `fc`), with a second, wider head
    for the images whose features are weak (an early-exit network's choice, reversed)."""

    def __init__(self, features: int = 512, classes: int = 1000) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, features, 3, padding=1)
        self.fc = nn.Linear(features, classes)
        self.wide = nn.Linear(features * 4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv(x))
        if x.mean() > 0.3:
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
        return self.wide(torch.flatten(F.adaptive_avg_pool2d(x, 2), 1))


@pytest.mark.parametrize(("batch", "avx512", "matmuls"), [(1, False, 0), (2, False, 2), (1, True, 2)])
def test_one_row_by_a_large_weight_is_dot_products_with_avx2(
    batch: int, avx512: bool, matmuls: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One row and a weight of 2^18 elements or more, with AVX2: no matmul, but the product and sum
    IREE runs as one reduction; two rows, or AVX-512 (data-tiled), keep both matmuls."""
    _set_cpu(monkeypatch, avx512, True)
    torch.manual_seed(0)
    assert len(_matmul_maps(GatedClassifier().eval(), torch.randn(batch, 3, 8, 8))) == matmuls


def test_one_row_classifiers_match_pytorch_on_both_sides_of_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")  # the whole-export key does not see the CPU probe
    _set_cpu(monkeypatch, False, True)
    torch.manual_seed(0)
    model = GatedClassifier().eval()
    samples = [torch.randn(1, 3, 8, 8) * scale for scale in (3.0, 0.01)]
    _, scripted, compiled, python = export_compiled(tmp_path, model, (samples[0],), "classifier")
    for sample in samples:
        check_hosts(scripted, (compiled, python), (sample,))
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 1}, python.decisions
