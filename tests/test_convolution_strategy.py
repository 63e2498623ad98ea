"""Which form each convolution takes on which CPU (`decompositions._im2col_wins`,
`winograd.output_tile`), and that the im2col and Winograd forms match PyTorch, alone and through the
whole exporter.

The form depends on this machine's CPU (`cpu_features.has_avx512`); the tests set the answer, so both
forms are checked on any machine.
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import dycl_iree
from dycl_iree import cpu_features, winograd
from dycl_iree.winograd import convolution_as_winograd
from tests.conftest import check_hosts, export_compiled


def _lowered_ops(model: nn.Module, example: torch.Tensor, dynamic_shapes: Any = None) -> set[str]:
    """The torch ops of the model's MLIR as the exporter lowers it (`lower` writes Winograd's form
    for a constant filter, the decompositions the others)."""
    from dycl_iree.capture import capture
    from dycl_iree.lower import lower
    from dycl_iree.partition import partition
    from dycl_iree.specialize import specialize

    text = str(lower(partition(specialize(capture(model), (example,), dynamic_shapes))).module)
    return set(re.findall(r"torch\.aten\.[a-z_0-9.]+", text))


@pytest.mark.parametrize(
    ("channels", "size", "kernel", "stride", "avx512", "form"),
    [
        (128, 14, 3, 1, False, "winograd"),  # many channels, 3x3, stride 1, no AVX-512: F(2x2, 3x3)
        (128, 14, 3, 2, False, "im2col"),  # strided: im2col + matmul
        (128, 14, 5, 1, False, "im2col"),  # not 3x3: im2col + matmul
        (64, 56, 3, 2, False, "im2col"),  # ResNet-18's layer2: 64 channels at 28x28 output
        (64, 56, 3, 1, False, "winograd"),  # ResNet's layer1: 64 channels at 56x56
        (64, 14, 3, 1, False, "winograd"),  # 64 channels from 14x14
        (64, 12, 3, 1, False, "direct"),
        (32, 28, 3, 1, False, "winograd"),  # 32 channels from 28x28
        (32, 56, 3, 2, False, "im2col"),
        (32, 26, 3, 1, False, "direct"),
        (64, 8, 3, 1, False, "direct"),  # the zoo's sizes stay direct: 64 channels at 8x8, 32-48 at 16x16
        (48, 16, 3, 1, False, "direct"),
        (16, 32, 3, 1, False, "direct"),
        (128, 14, 3, 1, True, "winograd"),  # with AVX-512 too (IREE's direct convolution is slow there)
        (64, 28, 3, 2, True, "im2col"),
    ],
)
def test_the_form_of_a_convolution_follows_its_shape_and_the_cpu(
    channels: int, size: int, kernel: int, stride: int, avx512: bool, form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu_features, "has_avx512", lambda: avx512)
    model = nn.Conv2d(channels, 8, kernel, stride, kernel // 2).eval()
    ops = _lowered_ops(model, torch.randn(1, channels, size, size))
    assert ("torch.aten.convolution" in ops) == (form == "direct"), ops
    # F(4x4, 3x3) has matmuls besides its batch matmul (`winograd._input_transform_by_matmuls`)
    assert ("torch.aten.mm" in ops and "torch.aten.bmm" not in ops) == (form == "im2col"), ops
    assert ("torch.aten.bmm" in ops) == (form == "winograd"), ops


@pytest.mark.parametrize(
    ("channels", "frames", "dynamic", "form"),
    [
        (512, 40, False, "im2col"),  # Tacotron2's encoder convolutions, 40 symbols
        (512, 100, True, "im2col"),  # its postnet over a run-time number of frames
        (80, 200, True, "im2col"),  # its postnet's first, on the mel channels
        (16, 40, False, "im2col"),  # IREE's direct form of height 1 is never faster
        (16, 40, True, "im2col"),
    ],
)
def test_a_1d_convolution_takes_the_form_of_the_2d_one_of_height_1(
    channels: int, frames: int, dynamic: bool, form: str
) -> None:
    """IREE's own 1-D convolution ran Tacotron2's 512-channel ones at 3.7 GFLOP/s, as im2col +
    matmul they run at 78-88 (README, performance), and its direct one of height 1 is slower than
    im2col at every channel count measured, over a static or a run-time length."""
    model = nn.Conv1d(channels, 32, 5, padding=2).eval()
    ops = _lowered_ops(model, torch.randn(1, channels, frames), ({2: "frames"},) if dynamic else None)
    assert ("torch.aten.convolution" in ops) == (form == "direct"), ops
    assert ("torch.aten.mm" in ops) == (form == "im2col"), ops


@pytest.mark.parametrize(
    ("target", "avx512", "form"),
    [
        # (this machine's CPU, "llvm-cpu", is the test above)
        ("llvm-cpu:aarch64-linux-gnu", True, "winograd"),  # a cross build: the target's CPU, not this one's
        ("llvm-cpu:x86_64-linux-gnu", True, "winograd"),  # a generic x86-64: no AVX-512
        ("vulkan", False, "direct"),  # GPUs keep the convolution for IREE's GPU code generation
    ],
)
def test_the_form_follows_the_target_not_the_exporting_machine(
    target: str, avx512: bool, form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu_features, "has_avx512", lambda: avx512)
    model = nn.Conv2d(128, 8, 3, 1, 1).eval()
    with cpu_features.exporting_for(target):
        ops = _lowered_ops(model, torch.randn(1, 128, 14, 14))
    assert ("torch.aten.convolution" in ops) == (form == "direct"), ops
    assert ("torch.aten.bmm" in ops) == (form == "winograd"), ops


def test_an_export_chooses_forms_for_its_first_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """`export` lowers once for all its targets, with the forms of the first one; ranges known at
    export become literals only where every target is a CPU (`constant_ranges.py`)."""
    from dycl_iree import pipeline

    seen = []

    def stop(program: Any, progress: Any = None, fold_ranges: bool = True, observed: Any = None) -> None:
        seen.append((cpu_features.direct_convolutions_fast(), fold_ranges))
        raise RuntimeError("stop after choosing")

    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")
    monkeypatch.setattr(pipeline, "lower", stop)
    model = nn.Conv2d(128, 8, 3, 1, 1).eval()
    for targets in (("vulkan", "llvm-cpu"), ("llvm-cpu", "vulkan"), ("llvm-cpu",)):
        with pytest.raises(RuntimeError, match="stop after choosing"):
            dycl_iree.export(model, (torch.randn(1, 128, 14, 14),), targets=targets)
    assert seen == [(True, False), (False, False), (False, True)]
    assert not cpu_features.direct_convolutions_fast()  # the host's choice again after the export


@pytest.mark.parametrize("output_tile", [2, 4])
@pytest.mark.parametrize(
    ("channels", "features", "height", "width", "padding", "bias"),
    [
        (8, 16, 9, 9, [1, 1], True),  # an odd size: the last tile is cropped
        (3, 5, 10, 7, [0, 0], False),  # no padding, height and width differ
        (4, 6, 7, 6, [2, 1], True),  # padding wider than the filter's reach on one side
        (16, 8, 3, 3, [1, 1], False),  # one tile
    ],
)
def test_winograd_equals_pytorch_convolution(
    output_tile: int, channels: int, features: int, height: int, width: int, padding: list[int], bias: bool
) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, channels, height, width, dtype=torch.float64)
    weight = torch.randn(features, channels, 3, 3, dtype=torch.float64)
    offset = torch.randn(features, dtype=torch.float64) if bias else None
    expected = torch.nn.functional.conv2d(x, weight, offset, padding=padding)
    out = convolution_as_winograd(x, weight, offset, padding, output_tile)
    assert out.shape == expected.shape and out.is_contiguous()
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


# Lavin and Gray's F(4x4, 3x3), at the points 0, 1, -1, 2, -2: the exporter's points are chosen
# against these (`winograd.TRANSFORMS`).
LAVIN_F4 = (
    [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0]]
    + [[0, 4, 0, -5, 0, 1]],
    [
        [Fraction(1, 4), 0, 0],
        [Fraction(-1, 6), Fraction(-1, 6), Fraction(-1, 6)],
        [Fraction(-1, 6), Fraction(1, 6), Fraction(-1, 6)],
        [Fraction(1, 24), Fraction(1, 12), Fraction(1, 6)],
        [Fraction(1, 24), Fraction(-1, 12), Fraction(1, 6)],
        [0, 0, 1],
    ],
    [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
)


def _float32_error(channels: int, size: int, output_tile: int) -> float:
    """The largest error of Winograd in float32 against the float64 convolution, relative to the
    largest output, on a ResNet shape: a ReLU's output in, a He-initialized filter."""
    torch.manual_seed(0)
    x = torch.relu(torch.randn(1, channels, size, size))
    weight = torch.randn(channels, channels, 3, 3) * (2 / (9 * channels)) ** 0.5
    exact = torch.nn.functional.conv2d(x.double(), weight.double(), padding=1)
    out = convolution_as_winograd(x, weight, None, [1, 1], output_tile)
    return float((out.double() - exact).abs().max() / exact.abs().max())


@pytest.mark.parametrize(
    ("channels", "size", "output_tile"),
    [(256, 14, 2), (64, 56, 4), (128, 28, 4)],  # the tiles `output_tile` gives ResNet's layers 3, 1 and 2
)
def test_winograd_in_float32_stays_within_the_contract(channels: int, size: int, output_tile: int) -> None:
    """Near the direct convolution's own float32 error (0.8-2.2e-6 on these shapes; F(4x4, 3x3)'s
    2.6-3.1e-6 on an AMD Zen 3 and an Intel Xeon), far from the 1e-5 contract."""
    assert _float32_error(channels, size, output_tile) < 4e-6


def test_f4_points_are_more_accurate_than_lavin_and_grays(monkeypatch: pytest.MonkeyPatch) -> None:
    """The premise of `winograd.TRANSFORMS[4]`: Lavin and Gray's points lose 2-3x the accuracy (at
    56x56 5.3e-6 of the largest output against 2.6e-6, with the input transform as matmuls; 7.2e-6
    as sums of slices, near the contract)."""
    ours = _float32_error(64, 56, 4)
    monkeypatch.setitem(winograd.TRANSFORMS, 4, LAVIN_F4)
    lavin = _float32_error(64, 56, 4)
    assert ours < lavin / 1.5, (ours, lavin)


@pytest.mark.parametrize(
    ("channels", "size", "tile"),
    [(64, 56, 4), (128, 28, 4), (32, 28, 4), (256, 14, 2), (512, 7, 2), (64, 14, 2), (64, 8, 0), (32, 26, 0)],
)
def test_the_winograd_tile_grows_with_the_pixels(
    channels: int, size: int, tile: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F(4x4, 3x3) from 28x28 pixels, F(2x2, 3x3) below, the direct form where Winograd does not pay,
    with AVX2 or AVX-512; no Winograd for a GPU."""
    for avx512 in (False, True):
        monkeypatch.setattr(cpu_features, "has_avx512", lambda: avx512)
        assert winograd.output_tile(channels, channels, [size, size]) == tile
    with cpu_features.exporting_for("vulkan"):
        assert winograd.output_tile(channels, channels, [size, size]) == 0


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


class WinogradBlock(nn.Module):
    """3x3 stride-1 convolutions with many channels (with and without padding and bias) on both sides
    of a branch."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv2d(128, 128, 3, 1, 1)
        self.second = nn.Conv2d(128, 128, 3, 1, 0, bias=False)
        self.third = nn.Conv2d(128, 64, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.first(x))
        if x.mean() > 0.3:
            return self.second(x)
        return self.third(x)


def test_winograd_convolutions_match_pytorch_on_both_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_features, "has_avx512", lambda: False)
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")  # the whole-export key does not see the probe
    torch.manual_seed(0)
    model = WinogradBlock().eval()
    samples = [torch.randn(1, 128, 11, 11) + shift for shift in (0.0, 2.0)]
    assert "torch.aten.bmm" in _lowered_ops(model, samples[0])
    _, scripted, compiled, python = export_compiled(tmp_path, model, (samples[0],), "block")
    for sample in samples:
        check_hosts(scripted, (compiled, python), (sample,))
    (label,) = python.decisions  # the one branch, both sides taken
    assert dict(python.decisions[label]) == {True: 1, False: 1}, python.decisions


@pytest.mark.parametrize(
    ("channels", "size", "output_tile"),
    [(128, 6, 2), (32, 28, 4)],  # F(4x4, 3x3)'s input transform is matmuls (`winograd._input_transform_by_matmuls`)
)
def test_winograd_convolutions_take_a_batch_that_varies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, channels: int, size: int, output_tile: int
) -> None:
    monkeypatch.setattr(cpu_features, "has_avx512", lambda: False)
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(channels, 32, 3, 1, 1), nn.ReLU()).eval()
    example = torch.randn(2, channels, size, size)
    assert winograd.output_tile(channels, 32, [size, size]) == output_tile
    assert "torch.aten.bmm" in _lowered_ops(model, example, ({0: "batch"},))
    bundle = dycl_iree.export(model, (example,), dynamic_shapes=({0: "batch"},))
    assert bundle.host == "compiled"
    run = dycl_iree.load(bundle.save(tmp_path / "batch.dycl"))
    with torch.no_grad():
        for batch in (1, 3):
            sample = torch.randn(batch, channels, size, size)
            expected = model(sample).numpy()
            np.testing.assert_allclose(run(sample), expected, rtol=0, atol=1e-5 * np.abs(expected).max())


class DepthwiseBlock(nn.Module):
    """MobileNet's depthwise convolutions: + ReLU6 (stride 1, with BN, which capture folds into the
    filter), + ReLU (stride 2, dilated), one whose output a residual add reads besides its ReLU6,
    and one with no activation; on both sides of a branch."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.second = nn.Conv2d(16, 16, 3, 2, 2, dilation=2, groups=16)
        self.third = nn.Conv2d(16, 16, 3, 1, 1, groups=16)
        self.fourth = nn.Conv2d(16, 16, 3, 1, 1, groups=16)
        with torch.no_grad():  # BN statistics as a trained network's
            self.first[1].running_mean.uniform_(-0.5, 0.5)
            self.first[1].running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.first(x)
        if x.mean() > 1.0:
            return torch.relu(self.second(h))
        y = self.third(h)
        return nn.functional.relu6(y) + y + self.fourth(h)


def test_depthwise_activations_fuse_into_the_taps_and_match_pytorch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ReLU6 / ReLU after a depthwise convolution is applied on the taps' NHWC side
    (`decompositions.depthwise_convolution_activated`), and the
    outputs match PyTorch on both sides of the branch, NaN included."""
    from dycl_iree import lower

    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")
    activations = []

    def recording(*args: Any) -> torch.Tensor:
        activations.append(args[6])
        return lower_activated(*args)

    lower_activated = lower.depthwise_convolution_activated
    monkeypatch.setattr(lower, "depthwise_convolution_activated", recording)
    torch.manual_seed(0)
    model = DepthwiseBlock().eval()
    nan = torch.randn(1, 16, 10, 10)
    nan[0, 3, 4, 5] = float("nan")
    samples = [torch.randn(1, 16, 10, 10), torch.randn(1, 16, 10, 10) + 3.0, nan]
    _, scripted, compiled, python = export_compiled(tmp_path, model, (samples[0],), "depthwise")
    # Each activated convolution at least once (a segment may be traced more than once).
    assert set(activations) == {"hardtanh", "relu"} and activations.count("hardtanh") >= 2, activations
    for sample in samples:
        check_hosts(scripted, (compiled, python), (sample,))
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 2}, python.decisions


class InvertedResidual(nn.Module):
    """MobileNetV2's block (1x1 expansion + BN + ReLU6, depthwise 3x3 + BN + ReLU6, 1x1 projection +
    BN, residual add), strided on one side of a branch; and a block whose expansion's ReLU6 a
    second op reads too (the sum after it), which must keep its padding copy."""

    def __init__(self) -> None:
        super().__init__()

        def unit(conv: nn.Conv2d, activation: bool) -> nn.Sequential:
            norm = nn.BatchNorm2d(conv.out_channels)
            with torch.no_grad():  # statistics as a trained network's, so that BN is not the identity
                norm.running_mean.uniform_(-0.5, 0.5)
                norm.running_var.uniform_(0.5, 2.0)
                norm.bias.uniform_(-0.5, 0.5)
            return nn.Sequential(conv, norm, nn.ReLU6()) if activation else nn.Sequential(conv, norm)

        self.expand = unit(nn.Conv2d(8, 48, 1, bias=False), True)
        self.depthwise = unit(nn.Conv2d(48, 48, 3, 1, 1, groups=48, bias=False), True)
        self.strided = unit(nn.Conv2d(48, 48, 3, 2, 1, groups=48, bias=False), True)
        self.project = unit(nn.Conv2d(48, 8, 1, bias=False), False)
        self.shared = unit(nn.Conv2d(8, 40, 1), True)
        self.plain = nn.Conv2d(40, 40, 3, 1, 1, groups=40)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.mean() > 1.0:
            return self.project(self.strided(self.expand(x)))
        y = x + self.project(self.depthwise(self.expand(x)))
        s = self.shared(y)
        return self.plain(s).sum() + s.sum() + y


def test_inverted_residual_pads_its_expansion_in_the_matmul_and_matches_pytorch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The depthwise convolution after a 1x1 convolution's ReLU6 that nothing else reads takes the
    padded tensor the 1x1 convolution's matmul writes (`padded_expansion`), on both sides of the
    branch, strided or not; the one whose input another op reads keeps its own padding. The hosts
    match PyTorch, NaN included."""
    from dycl_iree import padded_expansion

    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")
    paddings = []

    def recording(*args: Any) -> torch.Tensor:
        paddings.append((tuple(args[1].shape), tuple(args[3])))
        return lower_padded(*args)

    lower_padded = padded_expansion.pointwise_convolution_padded
    monkeypatch.setattr(padded_expansion, "pointwise_convolution_padded", recording)
    torch.manual_seed(0)
    model = InvertedResidual().eval()
    nan = torch.randn(1, 8, 56, 56)  # the least size that takes the form (`padded_expansion.MIN_SIZE`)
    nan[0, 3, 4, 5] = float("nan")
    samples = [torch.randn(1, 8, 56, 56), torch.randn(1, 8, 56, 56) + 3.0, nan]
    _, scripted, compiled, python = export_compiled(tmp_path, model, (samples[0],), "inverted_residual")
    # The expansion before either depthwise convolution (a segment may be traced more than once),
    # never the shared one (8 -> 40); export_compiled checks that the compiled host was taken.
    assert set(paddings) == {((48, 8, 1, 1), (1, 1))} and len(paddings) >= 2, paddings
    for sample in samples:
        check_hosts(scripted, (compiled, python), (sample,))
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 2}, python.decisions


class StemAndDepthwise(nn.Module):
    """MobileNetV2's stem (3 -> 16 channels, 3x3, stride 2, BN, ReLU6) and the depthwise convolution
    after it, on one side of a branch; on the other a stem whose ReLU6 a second op reads too (the
    sum), which keeps the depthwise convolution's own padding."""

    def __init__(self) -> None:
        super().__init__()

        def unit(conv: nn.Conv2d) -> nn.Sequential:
            norm = nn.BatchNorm2d(conv.out_channels)
            with torch.no_grad():  # statistics as a trained network's, so that BN is not the identity
                norm.running_mean.uniform_(-0.5, 0.5)
                norm.running_var.uniform_(0.5, 2.0)
                norm.bias.uniform_(-0.5, 0.5)
            return nn.Sequential(conv, norm, nn.ReLU6())

        self.stem = unit(nn.Conv2d(3, 16, 3, 2, 1, bias=False))
        self.depthwise = unit(nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False))
        self.strided = unit(nn.Conv2d(16, 16, 3, 2, 1, groups=16, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.mean() > 1.0:
            return self.strided(self.stem(x))
        s = self.stem(x)
        return self.depthwise(s) + s.sum()


def test_stem_writes_the_padded_input_of_the_depthwise_convolution_and_matches_pytorch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A depthwise convolution after the ReLU6 of a narrow convolution (MobileNetV2's stem) that
    nothing else reads takes the padded tensor the stem's own dispatch writes
    (`padded_expansion.convolution_padded`), strided or not; the one whose input the sum reads too
    keeps its own padding. The hosts match PyTorch, NaN and the ReLU6's bounds included."""
    from dycl_iree import padded_expansion

    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")
    paddings = []

    def recording(*args: Any) -> torch.Tensor:
        paddings.append((tuple(args[1].shape), tuple(args[3]), tuple(map(tuple, args[6]))))
        return convolution_padded(*args)

    convolution_padded = padded_expansion.convolution_padded
    monkeypatch.setattr(padded_expansion, "convolution_padded", recording)
    torch.manual_seed(0)
    model = StemAndDepthwise().eval()
    nan = torch.randn(1, 3, 113, 113)  # odd: the stem's stride leaves the last row out
    nan[0, 1, 7, 9] = float("nan")
    samples = [torch.randn(1, 3, 113, 113), 4.0 * torch.randn(1, 3, 113, 113) + 3.0, nan]
    _, scripted, compiled, python = export_compiled(tmp_path, model, (samples[0],), "stem_and_depthwise")
    # Only the stem before the strided depthwise convolution (a segment may be traced more than once).
    assert set(paddings) == {((16, 3, 3, 3), (1, 1), ((2, 2), (1, 1), (1, 1)))} and paddings, paddings
    for sample in samples:
        check_hosts(scripted, (compiled, python), (sample,))
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 2}, python.decisions


class BandedBlocks(nn.Module):
    """MobileNetV2's inverted residuals at 56x56 (an expansion to 48 channels, ReLU6, a depthwise
    convolution of stride 1 with the residual, or of stride 2), one on each side of a branch; the
    depthwise convolutions followed by ReLU6 as in MobileNetV2, or (`activated=False`) by their
    batch norm only, as MobileNeXt's sandglass block ends (expansion, ReLU6, linear depthwise)."""

    def __init__(self, activated: bool = True) -> None:
        super().__init__()

        def unit(conv: nn.Conv2d, activated: bool = True) -> nn.Sequential:
            norm = nn.BatchNorm2d(conv.out_channels)
            norm.running_mean.uniform_(-1, 1)
            norm.running_var.uniform_(0.5, 2)
            return nn.Sequential(conv, norm, *([nn.ReLU6()] if activated else []))

        self.expand = unit(nn.Conv2d(8, 48, 1, bias=False))
        self.depthwise = unit(nn.Conv2d(48, 48, 3, 1, 1, groups=48, bias=False), activated)
        self.project = unit(nn.Conv2d(48, 8, 1, bias=False), activated=False)
        self.expand_strided = unit(nn.Conv2d(8, 48, 1, bias=False))
        self.strided = unit(nn.Conv2d(48, 48, 3, 2, 1, groups=48, bias=False), activated)
        self.project_strided = unit(nn.Conv2d(48, 16, 1, bias=False), activated=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.mean() > 0.5:
            return self.project_strided(self.strided(self.expand_strided(x)))
        return x + self.project(self.depthwise(self.expand(x)))


@pytest.mark.parametrize("activated", [True, False], ids=["relu6", "linear"])
def test_expansions_larger_than_the_budget_run_in_bands_written_in_place_and_match_pytorch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, activated: bool
) -> None:
    """With a budget of 128 KiB (`padded_expansion.BAND_BYTES`) from 512 KiB (`BANDED_FROM`), both
    blocks' expansions (58x58x48 padded, 646 KB) run in bands: stride 1 in 7 bands of 8 output
    rows, stride 2 in 6 of 5 (the last 3). IREE writes each band's taps into its rows of one buffer
    (no copy of a band, no copy dispatch) and runs one expansion per band. Both hosts match PyTorch
    on each side of the branch, with an activation after the depthwise convolutions or without
    (`lower._segment_graph` takes the bands either way)."""
    from dycl_iree import padded_expansion
    from tests.test_data_tiling import _compiled

    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")
    monkeypatch.setattr(padded_expansion, "BAND_BYTES", 128 * 1024)
    monkeypatch.setattr(padded_expansion, "BANDED_FROM", 512 * 1024)
    torch.manual_seed(0)
    model = BandedBlocks(activated).eval()
    example = torch.randn(1, 8, 56, 56)
    stream = _compiled(model, (example,), "stream")
    assert "slow_memcpy" not in stream and "stream.cmd.copy" not in stream
    expansions = re.findall(r"stream\.cmd\.dispatch @\S+_matmul_(\d+)x48x8_f32", stream)
    taps = re.findall(r"stream\.cmd\.dispatch @\S+_elementwise_(\d+)x(\d+)x48_f32", stream)
    assert sorted(expansions) == sorted(["580"] * 7 + ["638"] * 5 + ["406"]), expansions  # padded rows x 58
    assert sorted(taps) == sorted([("8", "56")] * 7 + [("5", "28")] * 5 + [("3", "28")]), taps
    nan = torch.randn(1, 8, 56, 56)
    nan[0, 3, 20, 30] = float("nan")
    samples = [example, 0.3 * torch.randn(1, 8, 56, 56) + 1.0, nan]
    _, scripted, compiled, python = export_compiled(tmp_path, model, (example,), "banded_blocks")
    for sample in samples:
        check_hosts(scripted, (compiled, python), (sample,))
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 2}, python.decisions


class SpeechConvolutions(nn.Module):
    """1-D convolutions of every form over a run-time number of frames, as speech models run them
    one utterance at a time: IREE's channels-last conversion failed to compile each with a batch
    of 1 (`decompositions.convolution_1d_as_2d`), and a grouped one of run-time size, 1-D or 2-D
    (`decompositions.grouped_convolution_split`). A depthwise one of many taps over a run-time
    size, 1-D or 2-D, compiled as taps but failed to load (`decompositions.depthwise_as_taps`)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [
                nn.Conv1d(8, 8, 5, padding=2),  # Tacotron2's postnet
                nn.Conv1d(8, 8, 3, stride=2, padding=1),
                nn.Conv1d(8, 8, 3, padding=2, dilation=2),
                nn.Conv1d(8, 8, 3, padding=1, groups=2),
                nn.Conv1d(8, 8, 3, padding=1, groups=8),
                nn.Conv1d(8, 8, 31, padding=15, groups=8),  # Conformer's depthwise convolution
                nn.Conv1d(8, 8, 1),
                nn.ConvTranspose1d(8, 8, 4, stride=2, padding=1),  # an upsampler
                nn.ConvTranspose1d(8, 8, 3, padding=1, groups=2),
                nn.Conv1d(8, 8, 3),
            ]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


class GroupedImage(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.grouped = nn.Conv2d(8, 6, 3, padding=1, groups=2)
        self.up = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, groups=2)
        self.depthwise = nn.Conv2d(4, 4, 7, padding=3, groups=4)  # ConvNeXt's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.depthwise(self.up(torch.relu(self.grouped(x))))


@pytest.mark.parametrize(
    ("model", "example", "dims", "samples"),
    [
        (SpeechConvolutions, (1, 8, 12), {2: "frames"}, [(1, 8, 12), (1, 8, 5), (1, 8, 33), (1, 8, 64)]),
        (GroupedImage, (1, 8, 6, 7), {2: "height", 3: "width"}, [(1, 8, 6, 7), (1, 8, 3, 11), (1, 8, 16, 4)]),
    ],
)
def test_convolutions_of_run_time_size_over_a_batch_of_one(
    tmp_path: Path, model: type, example: tuple, dims: dict, samples: list
) -> None:
    torch.manual_seed(0)
    bundle, scripted, compiled, python = export_compiled(
        tmp_path, model(), (torch.randn(*example),), model.__name__, dynamic_shapes=[dims]
    )
    for shape in samples:
        check_hosts(scripted, (compiled, python), (torch.randn(*shape),))
