"""Which form each convolution takes on which CPU (`decompositions._im2col_wins`), and that the
im2col form matches PyTorch through the whole exporter.

The form depends on this machine's CPU (`cpu_features.has_avx512`); the tests set the answer, so both
forms are checked on any machine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import dycl_iree
from dycl_iree import cpu_features
from dycl_iree.decompositions import decomposition_table


def _ops_after_decomposition(model: nn.Module, example: torch.Tensor) -> set[str]:
    exported = torch.export.export(model, (example,)).run_decompositions(decomposition_table())
    return {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}


@pytest.mark.parametrize(
    ("channels", "size", "stride", "avx512", "im2col"),
    [
        (128, 14, 1, False, True),  # many channels, no AVX-512: im2col + matmul
        (64, 56, 2, False, False),  # 64 channels at 28x28 output: too few pixels to pay for the copy
        (64, 56, 1, False, True),  # ResNet's layer1: 64 channels at 56x56
        (32, 32, 1, False, False),  # the zoo's sizes stay direct
        (128, 14, 1, True, False),  # with AVX-512 IREE's direct convolution wins at every size
    ],
)
def test_the_form_of_a_convolution_follows_its_shape_and_the_cpu(
    channels: int, size: int, stride: int, avx512: bool, im2col: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu_features, "has_avx512", lambda: avx512)
    model = nn.Conv2d(channels, 8, 3, stride, 1).eval()
    ops = _ops_after_decomposition(model, torch.randn(1, channels, size, size))
    assert ("aten.convolution.default" not in ops) == im2col, ops
    assert ("aten.mm.default" in ops) == im2col, ops


class StridedBlock(nn.Module):
    """A strided, dilated and a plain 3x3 convolution with many channels, and a branch between them."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv2d(128, 128, 3, 2, 1)
        self.second = nn.Conv2d(128, 128, 3, 1, 2, dilation=2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.first(x))
        if x.mean() > 0.3:
            return self.second(x)
        return x


def test_im2col_convolutions_match_pytorch_on_both_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_features, "has_avx512", lambda: False)
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")  # the whole-export key does not see the probe
    torch.manual_seed(0)
    model = StridedBlock().eval()
    samples = [torch.randn(1, 128, 12, 12) + shift for shift in (0.0, 2.0)]
    bundle = dycl_iree.export(model, (samples[0],))
    assert bundle.host == "compiled"
    run = dycl_iree.load(bundle.save(tmp_path / "block.dycl"))
    taken = set()
    with torch.no_grad():
        for sample in samples:
            taken.add(bool(torch.relu(model.first(sample)).mean() > 0.3))
            np.testing.assert_allclose(run(sample), model(sample).numpy(), rtol=1e-4, atol=1e-4)
    assert taken == {True, False}
