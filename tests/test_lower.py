"""Lower: the decompositions that replace PyTorch's (depthwise and 1x1 convolutions, tiling poolings,
bilinear upsampling) match PyTorch, in eager and after export through IREE; convolution filters
reach IREE pre-transposed."""

from __future__ import annotations

import re
from typing import Any, List

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dycl_iree
from dycl_iree.decompositions import (
    avg_pool_as_reduction,
    convolution_channels_last,
    decomposition_table,
    max_pool_as_reduction,
    max_pool_as_taps,
    upsample_bilinear_as_matmul,
)


def _pair(value):
    return list(value) if isinstance(value, tuple) else [value, value]


def _rewrite(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    args = (_pair(stride), _pair(padding), _pair(dilation), False, [0, 0], groups)
    return convolution_channels_last(x, weight, bias, *args)


CASES = {
    # name: (input shape, weight shape, keyword arguments)
    "depthwise 3x3 same": ((1, 6, 8, 8), (6, 1, 3, 3), {"padding": 1, "groups": 6}),
    "depthwise bias": ((1, 6, 8, 9), (6, 1, 3, 3), {"padding": 1, "groups": 6, "bias": True}),
    "depthwise stride 2 batch 2": ((2, 5, 9, 9), (5, 1, 3, 3), {"padding": 1, "stride": 2, "groups": 5}),
    "depthwise 5x3 rectangular": ((1, 3, 10, 11), (3, 1, 5, 3), {"padding": (2, 1), "groups": 3}),
    "depthwise dilated": ((1, 2, 12, 12), (2, 1, 3, 3), {"padding": 2, "dilation": 2, "groups": 2}),
    "depthwise no padding, stride 2x1": ((1, 4, 7, 7), (4, 1, 3, 3), {"stride": (2, 1), "groups": 4}),
    "1x1": ((1, 4, 5, 6), (7, 4, 1, 1), {}),
    "1x1 bias batch 3": ((3, 4, 5, 6), (7, 4, 1, 1), {"bias": True}),
    "1x1 stride 2 odd sizes": ((2, 4, 7, 9), (8, 4, 1, 1), {"stride": 2}),
    "1x1 stride 1x3": ((1, 3, 6, 7), (2, 3, 1, 1), {"stride": (1, 3), "bias": True}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rewrite_matches_conv2d(name):
    input_shape, weight_shape, options = CASES[name]
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(input_shape, generator=generator)
    weight = torch.randn(weight_shape, generator=generator)
    options = dict(options)
    bias = torch.randn(weight_shape[0], generator=generator) if options.pop("bias", False) else None
    expected = F.conv2d(x, weight, bias, **options)
    actual = _rewrite(x, weight, bias, **options)
    assert actual is not NotImplemented
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


ACTIVATIONS = {"relu6": ("hardtanh", (0.0, 6.0)), "hardtanh default": ("hardtanh", ()), "relu": ("relu", ())}


@pytest.mark.parametrize("form", ["scaled taps", "taps", "left to IREE"])
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize("name", sorted(name for name in CASES if name.startswith("depthwise")))
def test_activated_depthwise_matches_conv2d_then_the_activation(name, activation, form, monkeypatch):
    """`depthwise_convolution_activated`: the activation on the taps' NHWC side (their weights scaled
    per channel or not, `SCALED_TAPS`), or (where the taps are not taken) the convolution and the
    activation as they were."""
    from dycl_iree import decompositions

    monkeypatch.setattr(decompositions, "depthwise_as_taps", lambda *shape: form != "left to IREE")
    monkeypatch.setattr(decompositions, "SCALED_TAPS", form == "scaled taps")
    input_shape, weight_shape, options = CASES[name]
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(input_shape, generator=generator)
    x[0, 0, 1, 1] = float("nan")  # kept, as PyTorch keeps it
    weight = torch.randn(weight_shape, generator=generator)
    weight[0] = 0.0  # a channel of zero weights: its scale is 1, not 0
    options = dict(options)
    bias = torch.randn(weight_shape[0], generator=generator) if options.pop("bias", False) else None
    op, scalars = ACTIVATIONS[activation]
    function = {"hardtanh": F.hardtanh, "relu": F.relu}[op]
    expected = function(F.conv2d(x, weight, bias, **options), *scalars)
    settings = [_pair(options.get(key, default)) for key, default in (("stride", 1), ("padding", 0), ("dilation", 1))]
    actual = decompositions.depthwise_convolution_activated(x, weight, bias, *settings, op, *scalars)
    assert actual.is_contiguous()
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("form", ["taps", "left to IREE"])
@pytest.mark.parametrize("activation", ["relu6", "relu", None])
@pytest.mark.parametrize(
    "name", sorted(name for name in CASES if name.startswith("depthwise") and "no padding" not in name)
)
def test_padded_expansion_matches_the_pointwise_then_depthwise_convolution(name, activation, form, monkeypatch):
    """`padded_expansion`: a 1x1 convolution + ReLU6 (or ReLU) computed on the padded input with its
    border zeroed, then the depthwise convolution (+ its activation, or none) of that padded NHWC
    tensor, as taps or (where the taps are not taken) IREE's convolution without padding, equal
    conv2d, activation, conv2d, activation in PyTorch; a NaN in the input stays where PyTorch puts it."""
    from dycl_iree import decompositions
    from dycl_iree.padded_expansion import depthwise_convolution_of_padded, inside_mask, pointwise_convolution_padded

    monkeypatch.setattr(decompositions, "depthwise_as_taps", lambda *shape: form == "taps")
    input_shape, weight_shape, options = CASES[name]
    generator = torch.Generator().manual_seed(0)
    channels = weight_shape[0]
    x = torch.randn(input_shape[0], 5, *input_shape[2:], generator=generator)
    x[0, 2, 1, 1] = float("nan")
    expand_weight = torch.randn(channels, 5, 1, 1, generator=generator)
    expand_bias = torch.randn(channels, generator=generator) - 3.0  # ReLU6(bias) is 0 nowhere but some
    weight = torch.randn(weight_shape, generator=generator)
    options = dict(options)
    bias = torch.randn(channels, generator=generator) if options.pop("bias", False) else None
    expanded = F.relu6(F.conv2d(x, expand_weight, expand_bias))
    expected = F.conv2d(expanded, weight, bias, **options)
    settings = [_pair(options.get(key, default)) for key, default in (("stride", 1), ("padding", 0), ("dilation", 1))]
    mask = inside_mask(*input_shape[2:], settings[1]) if form == "taps" else None  # given, or computed
    padded = pointwise_convolution_padded(x, expand_weight, expand_bias, settings[1], mask, "hardtanh", 0.0, 6.0)
    assert padded.shape[1:3] == (input_shape[2] + 2 * settings[1][0], input_shape[3] + 2 * settings[1][1])
    scalars: tuple = ()
    if activation is not None:
        op, scalars = ("hardtanh", (0.0, 6.0)) if activation == "relu6" else ("relu", ())
        expected = {"hardtanh": F.hardtanh, "relu": F.relu}[op](expected, *scalars)
        actual = depthwise_convolution_of_padded(padded, weight, bias, *settings, op, *scalars)
    else:
        actual = depthwise_convolution_of_padded(padded, weight, bias, *settings)
    assert actual.is_contiguous() and torch.isnan(expected).any()
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, equal_nan=True)


BAND_CASES = {
    # name: (input shape, depthwise weight shape, stride, padding, dilation)
    "3x3": ((1, 6, 8, 8), (6, 1, 3, 3), [1, 1], [1, 1], [1, 1]),
    "3x3 stride 2, odd": ((1, 6, 9, 9), (6, 1, 3, 3), [2, 2], [1, 1], [1, 1]),
    "5x3 rectangular": ((1, 3, 10, 11), (3, 1, 5, 3), [1, 1], [2, 1], [1, 1]),
    "3x3 dilated": ((1, 2, 12, 12), (2, 1, 3, 3), [1, 1], [2, 2], [2, 2]),
    "3x3 stride 2x1": ((1, 4, 11, 10), (4, 1, 3, 3), [2, 1], [1, 1], [1, 1]),
}


@pytest.mark.parametrize("activation", ["relu6", None])
@pytest.mark.parametrize("name", sorted(BAND_CASES))
def test_expansion_in_bands_matches_the_pointwise_then_depthwise_convolution(name, activation, monkeypatch):
    """`padded_expansion.depthwise_of_expansion_in_bands`: the expansion and the depthwise convolution
    band by band (the budget set so that each case takes two bands or more, one of them shorter where
    the rows do not divide), equal to conv2d, ReLU6, conv2d (, ReLU6) in PyTorch, a NaN included."""
    from dycl_iree import padded_expansion
    from dycl_iree.padded_expansion import band_rows, depthwise_of_expansion_in_bands, inside_mask

    input_shape, weight_shape, stride, padding, dilation = BAND_CASES[name]
    generator = torch.Generator().manual_seed(0)
    channels = weight_shape[0]
    x = torch.randn(1, 5, *input_shape[2:], generator=generator)
    x[0, 2, 3, 1] = float("nan")
    expand_weight = torch.randn(channels, 5, 1, 1, generator=generator)
    expand_bias = torch.randn(channels, generator=generator) - 3.0
    weight = torch.randn(weight_shape, generator=generator)
    bias = torch.randn(channels, generator=generator)
    expected = F.conv2d(
        F.relu6(F.conv2d(x, expand_weight, expand_bias)), weight, bias, stride, padding, dilation, channels
    )
    padded_height, padded_width = input_shape[2] + 2 * padding[0], input_shape[3] + 2 * padding[1]
    kernel = dilation[0] * (weight_shape[2] - 1) + 1
    row_bytes = padded_width * channels * 4
    monkeypatch.setattr(padded_expansion, "BAND_BYTES", (kernel + stride[0]) * row_bytes)  # a band of 2 rows
    rows = band_rows(padded_height, row_bytes, stride[0], kernel)
    assert rows is not None and rows < expected.shape[2], rows
    mask = inside_mask(*input_shape[2:], padding)
    expansion = (x, expand_weight, expand_bias, padding, mask, "hardtanh", 0.0, 6.0)
    if activation is None:
        actual = depthwise_of_expansion_in_bands(expansion, weight, bias, stride, padding, dilation)
    else:
        expected = F.relu6(expected)
        actual = depthwise_of_expansion_in_bands(
            expansion, weight, bias, stride, padding, dilation, "hardtanh", 0.0, 6.0
        )
    assert actual.is_contiguous() and torch.isnan(expected).any()
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_bands_are_as_even_as_they_can_be_and_none_where_the_expansion_fits():
    from dycl_iree.padded_expansion import BAND_BYTES, band_rows

    row = 114 * 96 * 4  # MobileNetV2's first expansion, 16 -> 96 channels over 114x114 padded pixels
    assert band_rows(114, row, 2, 3) == 8  # 17 padded rows a band, 744 KB; 7 bands of 8 output rows
    assert band_rows(58, 58 * 144 * 4, 1, 3) == 19 and band_rows(58, 58 * 144 * 4, 2, 3) == 10
    assert band_rows(30, 30 * 192 * 4, 1, 3) is None  # 691 KB: whole
    for padded_rows, stride, kernel in [(114, 2, 3), (58, 1, 3), (60, 1, 5), (23, 2, 3)]:
        for budget in (row * 3, row * 9, row * 40):
            rows = band_rows(padded_rows, row, stride, kernel, budget)
            out_rows = (padded_rows - kernel) // stride + 1
            if rows is None:
                assert padded_rows * row <= budget or (budget // row - kernel) // stride + 1 >= out_rows
                continue
            bands = -(-out_rows // rows)
            assert bands > 1 and (stride * (rows - 1) + kernel) * row <= max(budget, kernel * row)
            assert out_rows - (bands - 1) * rows > 0 and rows - (out_rows - (bands - 1) * rows) < bands
    assert band_rows(10_000, 1, 1, 3) is None and BAND_BYTES >= 1 << 19


@pytest.mark.parametrize(
    "weight_shape, groups, stride, padding",
    [
        ((4, 4, 3, 3), 1, 1, 1),
        ((4, 4, 3, 3), 1, 2, 1),
        ((4, 4, 1, 1), 1, 1, 1),
        ((8, 2, 3, 3), 2, 1, 1),
        ((8, 2, 1, 1), 2, 1, 0),
        ((8, 1, 3, 3), 4, 1, 1),
    ],
    ids=["3x3", "strided 3x3", "padded 1x1", "grouped", "grouped 1x1", "depthwise with a channel multiplier"],
)
def test_other_convolutions_are_left_to_iree(weight_shape, groups, stride, padding):
    x = torch.randn(1, 4, 6, 6)
    assert _rewrite(x, torch.randn(weight_shape), groups=groups, stride=stride, padding=padding) is NotImplemented
    for weight in (torch.randn(4, 1, 3, 3), torch.randn(4, 4, 1, 1)):
        transposed = convolution_channels_last(x, weight, None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1)
        assert transposed is NotImplemented


@pytest.mark.parametrize("kernel", [2, 4, (2, 3), (1, 4)])
@pytest.mark.parametrize("shape", [(1, 3, 8, 12), (2, 5, 4, 12), (1, 3, 9, 13), (1, 4, 5, 6)])
def test_tiling_poolings_match_pytorch(kernel, shape):
    """Windows that tile the input, or the input without the rows and columns past the last whole
    window (9x13 by 2 or 4, SDN's classifier pooling 14x14 by 3), as a reshape and a reduction."""
    x = torch.randn(shape)
    kernel_size = _pair(kernel)
    torch.testing.assert_close(avg_pool_as_reduction(x, kernel_size, []), F.avg_pool2d(x, kernel))
    torch.testing.assert_close(avg_pool_as_reduction(x, kernel_size, kernel_size), F.avg_pool2d(x, kernel))
    values, indices = max_pool_as_reduction(x, kernel_size, [])
    want_values, want_indices = F.max_pool2d(x, kernel, return_indices=True)
    torch.testing.assert_close(values, want_values)
    assert torch.equal(indices, want_indices)


@pytest.mark.parametrize(
    "options",
    [{"stride": [1, 1]}, {"padding": [1, 1]}, {"ceil_mode": True, "size": 9}, {"size": 1}],
    ids=["overlapping", "padded", "ceil mode, a last window in part", "smaller than a window"],
)
def test_other_poolings_are_left_to_torch_mlir(options):
    options = dict(options)
    size = options.pop("size", 8)
    x = torch.randn(1, 2, size, size)
    assert avg_pool_as_reduction(x, [2, 2], **options) is NotImplemented
    assert max_pool_as_reduction(x, [2, 2], **options) is NotImplemented
    assert avg_pool_as_reduction(x, [2, 2], [], [0, 0], False, True, 3) is NotImplemented  # divisor_override
    assert max_pool_as_reduction(x.to(torch.int32), [2, 2], []) is NotImplemented


@pytest.mark.parametrize(
    "shape, kernel, stride, padding, dilation",
    [
        ((1, 64, 112, 112), 3, 2, 1, 1),  # ResNet's stem pooling
        ((2, 3, 9, 8), 3, 2, 1, 1),
        ((1, 4, 10, 7), (3, 2), (1, 2), (1, 1), 1),
        ((1, 2, 11, 11), 3, 2, 1, 2),  # dilated: a window's first position inside skips padding
        ((1, 3, 8, 8), 2, 1, 0, 1),  # overlapping, no padding
        ((1, 3, 7, 7), 5, 3, 2, 1),
        ((1, 2, 8, 8), 3, [], 1, 1),  # the stride defaults to the kernel
    ],
)
def test_overlapping_max_poolings_match_pytorch_with_their_indices(shape, kernel, stride, padding, dilation):
    torch.manual_seed(0)
    x = torch.randn(shape)
    x[0, 0, 1, 1] = float("nan")  # PyTorch propagates NaN (and takes its index)
    x[0, -1, 2, :] = -float("inf")
    x[-1, 1, 3:5, 3:5] = 0.5  # equal values: the first keeps its index
    values, indices = max_pool_as_taps(
        x, _pair(kernel), _pair(stride) if stride else [], _pair(padding), _pair(dilation)
    )
    want_values, want_indices = F.max_pool2d(x, kernel, stride or None, padding, dilation, return_indices=True)
    torch.testing.assert_close(values, want_values, equal_nan=True)
    assert torch.equal(indices, want_indices)
    assert values.is_contiguous() and indices.is_contiguous()


def test_a_pooling_window_all_minus_infinity_has_pytorchs_index():
    x = torch.full((1, 1, 4, 4), -float("inf"))
    values, indices = max_pool_as_taps(x, [3, 3], [2, 2], [1, 1])
    want_values, want_indices = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    assert torch.equal(values, want_values) and torch.equal(indices, want_indices)


def test_max_poolings_the_taps_leave_to_torch_mlir():
    x = torch.randn(1, 2, 9, 9)
    assert max_pool_as_taps(x, [3, 3], [2, 2], [1, 1], [1, 1], True) is NotImplemented  # ceil_mode
    assert max_pool_as_taps(x.to(torch.int32), [3, 3], [2, 2], [1, 1]) is NotImplemented


class _StemPool(nn.Module):
    """ResNet's stem: a strided convolution, then a 3x3 max pooling of stride 2 and padding 1."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 7, 2, 3)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.pool(torch.relu(self.stem(x))))


def test_resnets_stem_pooling_runs_as_taps_on_iree(tmp_path):
    from dycl_iree.capture import capture
    from dycl_iree.lower import lower
    from dycl_iree.partition import partition
    from dycl_iree.specialize import specialize

    torch.manual_seed(0)
    model = _StemPool().eval()
    x = torch.randn(1, 3, 30, 30)
    text = str(lower(partition(specialize(capture(model), (x,), None))).module)
    assert "pool" not in text  # taps, not torch-mlir's pooling
    run = dycl_iree.load(dycl_iree.export(model, (x,)).save(tmp_path / "stem.dycl"))
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(run(x.numpy()), want, rtol=1e-5, atol=1e-5)


class _MixedClassifierPool(nn.Module):
    """Shallow-Deep Networks' internal classifier pooling as its authors wrote it: a learned mix of
    max and average pooling down to 4x4, here from 14x14 by 3 (rows and columns 12-13 read by no
    window) and from 9x9 by 2."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = nn.Parameter(torch.tensor([0.3]))
        self.conv = nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        alpha = torch.sigmoid(self.mix)
        h = torch.relu(self.conv(x))
        pooled = alpha * F.max_pool2d(h, 3) + (1 - alpha) * F.avg_pool2d(h, 3)
        return pooled.flatten(1), F.avg_pool2d(y, 2) - F.max_pool2d(y, 2)


def test_poolings_whose_windows_leave_the_last_rows_out_run_as_reductions_on_iree(tmp_path):
    from dycl_iree.capture import capture
    from dycl_iree.lower import lower
    from dycl_iree.partition import partition
    from dycl_iree.specialize import specialize

    torch.manual_seed(0)
    model = _MixedClassifierPool().eval()
    examples = (torch.randn(1, 16, 14, 14), torch.randn(2, 8, 9, 9))
    text = str(lower(partition(specialize(capture(model), examples, None))).module)
    assert "pool" not in text  # reductions over the windows, not torch-mlir's NCHW pooling
    run = dycl_iree.load(dycl_iree.export(model, examples).save(tmp_path / "classifier_pool.dycl"))
    with torch.no_grad():
        wants = model(*examples)
    for got, want in zip(run(*[example.numpy() for example in examples]), wants):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


class _UnitPoolings(nn.Module):
    """Poolings of one step with `ceil_mode=True` over a length known only at run time: Emformer's
    memory (`AvgPool1d(segment_length, segment_length, ceil_mode=True)`) with a segment of one
    frame. IREE gave wrong values for the 1-D one (read past the input) and one row too many for the
    2-D one; `ceil_mode` changes nothing at a stride of 1, and is dropped. (A max pooling of one
    step in `ceil_mode` is refused: torch.export fixes the length it pools to the example's.)"""

    def __init__(self) -> None:
        super().__init__()
        self.memory = nn.AvgPool1d(1, 1, ceil_mode=True)
        self.plane = nn.AvgPool2d(1, 1, ceil_mode=True)
        self.wide = nn.AvgPool1d(3, 1, padding=1, ceil_mode=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        frames = x.permute(1, 2, 0)  # [T, 1, 8] -> [1, 8, T]
        return self.memory(frames), self.plane(x.unsqueeze(0)) * 2.0, self.wide(frames)


def test_poolings_of_one_step_in_ceil_mode_over_a_run_time_length(tmp_path):
    from .conftest import check_hosts, export_compiled

    generator = torch.Generator().manual_seed(3)
    example = torch.randn(7, 1, 8, generator=generator)
    _, scripted, compiled, python = export_compiled(
        tmp_path, _UnitPoolings(), (example,), "unit_pools", dynamic_shapes=({0: "T"},)
    )
    for length in (1, 2, 3, 6, 7, 12):
        check_hosts(scripted, [compiled, python], (torch.randn(length, 1, 8, generator=generator),))


def test_the_table_leaves_torch_mlirs_own_table_alone():
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    assert decomposition_table()[torch.ops.aten.convolution.default] is convolution_channels_last
    assert torch.ops.aten.convolution.default not in get_decomposition_table()


class _ConvGate(nn.Module):
    """Convolutions of every kind and both poolings behind a data-dependent branch: plain, strided
    and dilated convolutions (channels-last in IREE, filters pre-transposed), depthwise ones (taps),
    1x1 ones with stride 1 and 2 (matmuls), and average and max pooling (reductions at static
    sizes, left to torch-mlir at dynamic ones)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.strided = nn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False)
        self.dilated = nn.Conv2d(8, 8, 3, padding=2, dilation=2)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pointwise = nn.Conv2d(8, 4, 1)
        self.projection = nn.Conv2d(8, 4, 1, stride=2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        if bool(x.mean() > 0):
            y = self.dilated(y)
        else:
            y = self.depthwise(y)
        pooled = F.avg_pool2d(y, 2) + F.max_pool2d(y, 2)
        return self.pointwise(self.strided(pooled)) + self.projection(pooled)


@pytest.mark.parametrize(
    "dynamic_shapes, shapes",
    [
        (({0: "batch"},), [(1, 3, 10, 12), (3, 3, 10, 12)]),
        # With dynamic sizes, the depthwise taps slice along dynamic dims: the segments must still be
        # inlined into the compiled host's branches (dycl_iree.hosts.compiled.attach_main).
        (({0: "batch", 2: "height", 3: "width"},), [(1, 3, 8, 8), (3, 3, 14, 6)]),
    ],
    ids=["dynamic batch", "dynamic batch, height and width"],
)
def test_rewritten_convolutions_run_on_iree(tmp_path, dynamic_shapes, shapes):
    torch.manual_seed(0)
    model = _ConvGate().eval()
    bundle = dycl_iree.export(model, (torch.randn(2, 3, 10, 12),), dynamic_shapes=dynamic_shapes)
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / "convgate.dycl")
    run = dycl_iree.load(path, host="python", record=True)
    compiled = dycl_iree.load(path, host="compiled")
    scripted = torch.jit.script(model)
    # One sample per side of the branch, at sizes other than the example's.
    low, high = torch.randn(shapes[0]) - 1.0, torch.randn(shapes[1]) + 1.0
    assert float(low.mean()) < 0 < float(high.mean())
    for x in (low, high):
        with torch.no_grad():
            want = scripted(x).numpy()
        for host in (run, compiled):
            got = host(x.numpy())
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (label,) = run.decisions
    assert dict(run.decisions[label]) == {False: 1, True: 1}


def test_convolutions_reach_iree_with_hwcf_filters_and_the_others_rewritten():
    from dycl_iree.capture import capture
    from dycl_iree.lower import lower
    from dycl_iree.partition import partition
    from dycl_iree.specialize import specialize

    model = _ConvGate().eval()
    program = partition(specialize(capture(model), (torch.randn(2, 3, 10, 12),), ({0: "batch"},)))
    text = str(lower(program).module)
    # stem, strided and dilated stay convolutions; depthwise became taps, the 1x1 ones matmuls,
    # the poolings reductions.
    assert text.count("torch.aten.convolution") == 3
    assert text.count("torch.aten.mm") == 2
    assert "pool" not in text
    for conv in (model.stem, model.strided, model.dilated, model.depthwise, model.pointwise, model.projection):
        out_channels, in_channels, kernel_h, kernel_w = conv.weight.shape
        assert f"!torch.vtensor<[{kernel_h},{kernel_w},{in_channels},{out_channels}],f32>" in text, conv


@pytest.mark.parametrize(
    "size, out_size, align_corners, scale",
    [
        ((8, 8), (16, 16), False, 2.0),  # RaNet's case
        ((3, 5), (7, 11), False, None),  # odd sizes from output_size
        ((4, 6), (9, 13), True, None),
        ((6, 6), (3, 4), False, None),  # downsampling
        ((1, 4), (5, 8), True, None),  # a single row
        ((5, 5), (12, 12), False, 2.5),  # the scale wins over the sizes, as in PyTorch
    ],
)
def test_bilinear_upsampling_matches_pytorch(size, out_size, align_corners, scale):
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(1))
    scales = (scale, scale) if scale is not None else (None, None)
    expected = torch._C._nn.upsample_bilinear2d(x, list(out_size), align_corners, *scales)
    actual = upsample_bilinear_as_matmul(x, list(out_size), align_corners, *scales)
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def test_upsampling_of_integers_is_left_to_torch_mlir():
    x = torch.arange(16, dtype=torch.int64).reshape(1, 1, 4, 4)
    assert upsample_bilinear_as_matmul(x, [8, 8], False) is NotImplemented


class _Rolls(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.roll(x, 3), torch.roll(x, (1, -2), (0, 1))  # flattened, and per dim (Swin's)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_roll_without_dims_rolls_the_flattened_tensor(tmp_path, dynamic):
    """torch-mlir lowers a roll only with one dim per shift ("list sizes of shifts and dims are not
    the same"); without dims it is the roll of the flattened tensor (`roll_of_the_flattened`)."""
    from .conftest import check_hosts, export_compiled

    shapes = [{0: "rows", 1: "columns"}] if dynamic else None
    _, scripted, compiled, python = export_compiled(tmp_path, _Rolls(), (torch.randn(3, 5),), "rolls", shapes)
    for shape in [(3, 5), (4, 2), (1, 7)] if dynamic else [(3, 5)]:
        check_hosts(scripted, [compiled, python], (torch.randn(*shape),))


class _RollOnOneSide(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.sum() > 0):
            return torch.cat([x[:, 1:], x[:, :1]], 1) * 2.0
        return x - 1.0


def test_a_branch_that_slices_along_a_dynamic_dim_keeps_the_compiled_host(tmp_path):
    model = _RollOnOneSide()
    bundle = dycl_iree.export(model, (torch.randn(2, 8),), dynamic_shapes=({1: "n"},))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    run = dycl_iree.load(bundle.save(tmp_path / "roll.dycl"), host="compiled")
    for x in (torch.randn(2, 5).abs(), -torch.randn(2, 11).abs()):
        np.testing.assert_allclose(run(x.numpy()), model(x).numpy(), rtol=1e-6)


def test_no_tensor_the_importer_tracks_dies_during_the_import(monkeypatch):
    """torch-mlir's importer maps tensors to literals by id() and never checks that the tensor is
    still alive. torch.export makes tensors of its own per segment (BlockDrop's blocks: int64
    [1, 16, 1, 1]); had they died, a later segment's tensor reusing an id imported as the dead
    one's literal (an MLIRError, or silently the wrong weights)."""
    import gc

    from torch_mlir.extras.fx_importer import FxImporter

    from dycl_iree.capture import capture
    from dycl_iree.lower import lower
    from dycl_iree.partition import partition
    from dycl_iree.specialize import specialize
    from models.blockdrop import build_blockdrop

    dead_after_import: list[int] = []
    tracked_after_import: list[int] = []
    import_frozen_program = FxImporter.import_frozen_program

    def counting(self, *args, **kwargs):
        result = import_frozen_program(self, *args, **kwargs)
        gc.collect()
        weak_refs = [getattr(ref, "_referrent", None) for ref in self._py_attr_tracker._refs.values()]
        weak_refs = [weak for weak in weak_refs if callable(weak)]
        tracked_after_import.append(len(weak_refs))
        dead_after_import.append(sum(1 for weak in weak_refs if weak() is None))
        return result

    monkeypatch.setattr(FxImporter, "import_frozen_program", counting)
    model = build_blockdrop(depth=8).eval()
    program = partition(specialize(capture(model), (torch.randn(1, 3, 32, 32),)))
    lower(program)
    assert len(dead_after_import) == len(program.segments) > 4
    # The count means something only if the importer's tracker was found (it is torch-mlir's private
    # RefTracker): the weights of every segment so far are in it.
    assert min(tracked_after_import) > 0 and tracked_after_import[-1] > tracked_after_import[0]
    assert max(dead_after_import) == 0


class _BranchConvolutions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(16, 16, 3, padding=1)
        self.b = nn.Conv2d(16, 16, 3, padding="same")  # scripts to the aten::conv2d.padding overload

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.sum() > 0):
            return self.a(x)
        return self.b(x)


def test_convolutions_inside_the_compiled_hosts_branches_keep_their_hwcf_filters(monkeypatch, tmp_path):
    """Inside main's branches IREE does not constant-fold the filter transpose of its channels-last
    conversion; unless the filter arrives pre-transposed, the convolution becomes a generic op with
    the filter dims last (`conv_32x32x16x16x3x3`), which IREE does not vectorize (~40x slower)."""
    import importlib

    import iree.compiler

    import dycl_iree.compile as compile_module

    # The driver holds its own reference to compile_module: record the modules it compiles there.
    driver = importlib.import_module("dycl_iree.pipeline")
    modules: list[bytes] = []
    original = compile_module.compile_module

    def keep(bytecode: bytes, target: str, cpu_threads: int = 1, **options: Any) -> bytes:
        modules.append(bytecode)
        return original(bytecode, target, cpu_threads, **options)

    monkeypatch.setattr(driver, "compile_module", keep)
    torch.manual_seed(0)
    model = _BranchConvolutions().eval()
    bundle = dycl_iree.export(model, (torch.randn(1, 16, 32, 32),))
    assert bundle.host == "compiled"
    path = bundle.save(tmp_path / "branches.dycl")
    compiled, python = dycl_iree.load(path, host="compiled"), dycl_iree.load(path, host="python", record=True)
    for x in (torch.rand(1, 16, 32, 32), -torch.rand(1, 16, 32, 32)):
        with torch.no_grad():
            want = model(x).numpy()
        for host in (compiled, python):
            np.testing.assert_allclose(host(x.numpy()), want, rtol=1e-5, atol=1e-5)
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 1}
    flow = iree.compiler.compile_str(
        modules[-1],
        input_type="torch",
        extra_args=[*compile_module.target_flags("llvm-cpu"), "--compile-to=flow"],
    ).decode()
    dispatches = re.findall(r"flow\.executable\.export public @(\S+)", flow)
    convolutions = [name for name in dispatches if "_conv_" in name]
    # The module holds each segment as a function (for the Python host) and main (the compiled
    # host), where the same convolutions sit inside the branch.
    assert len(convolutions) >= 2, dispatches
    assert all(name.endswith("conv_32x32x16x3x3x16_f32") for name in convolutions), convolutions


class _Cut(nn.Module):
    """Rows `start` to `end` of `x`: two ints the host does not compute from one another."""

    def forward(self, x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        return x[start:end] * 2.0


class _OneRow(nn.Module):
    """Row `start` of `x` as a slice: `end` is computed on the host as `start + 1`."""

    def forward(self, x: torch.Tensor, start: int) -> torch.Tensor:
        return x[start : start + 1] * 2.0


def _slice_result_types(model: nn.Module, example: tuple) -> list[str]:
    from dycl_iree.capture import capture
    from dycl_iree.lower import lower
    from dycl_iree.partition import partition
    from dycl_iree.specialize import specialize

    program = partition(specialize(capture(model), example, ({0: "rows"}, None, None)[: len(example)]))
    lowered = lower(program)
    return [result for _, results in lowered.signatures.values() for result in results]


def test_ints_whose_examples_are_0_and_1_stay_apart_unless_the_host_ties_them():
    """torch.export ties `end` to `start + 1` when the examples make the slice one row long, and the
    imported function then keeps one row whatever the bounds (README, "Known traps"). Such a segment
    is exported again at spread examples; a tie the host program makes (`end = start + 1`) stays,
    and with it the slice's static size."""
    assert _slice_result_types(_Cut(), (torch.randn(7, 4), 0, 1)) == ["!torch.vtensor<[?,4],f32>"]
    assert _slice_result_types(_OneRow(), (torch.randn(7, 4), 0)) == ["!torch.vtensor<[1,4],f32>"]


class _Tail(nn.Module):
    """Rows grown in a loop, returned from a run-time start (`rows[start:]`)."""

    def forward(self, x: torch.Tensor, n: int, start: int) -> List[torch.Tensor]:  # noqa: UP006 (TorchScript)
        rows: List[torch.Tensor] = [x[0] * 1.0]  # noqa: UP006
        for i in range(n):
            rows.append(x[i % 3] * 2.0)
        return rows[start:]


def _lower_tail() -> None:
    from dycl_iree.capture import capture
    from dycl_iree.lower import lower
    from dycl_iree.partition import partition
    from dycl_iree.specialize import specialize

    # The list is 3 rows long at the examples (its first and 2 appends), so `rows[2:]` is one row.
    lower(partition(specialize(capture(_Tail()), (torch.randn(3, 4), 2, 2), None)))


def test_a_slice_length_fixed_only_at_the_examples_is_refused_when_no_export_keeps_it_dynamic(monkeypatch):
    """At the examples the slice is one row, which torch.export fixes (and ties the list's rows to
    `start + 1`); the spread examples leave it dynamic. Where no export is free of other ties (here
    made so), the export at the examples must not stand: the function would return one row always."""
    import dycl_iree.lower as lower_module
    from dycl_iree.errors import UnsupportedOpError

    _lower_tail()  # the spread export is free of ties: it stands
    real = lower_module._coincidences
    monkeypatch.setattr(lower_module, "_coincidences", lambda *args: real(*args) or ["a tie"])
    with pytest.raises(UnsupportedOpError, match=r"test_lower\.py:\d+.*fixed the size of %\w+ to the example's"):
        _lower_tail()


def test_an_input_dim_left_as_an_expression_of_an_int_is_refused(monkeypatch):
    """The same export at the examples seen from its input: the list's rows became `start + 1`. With
    no other export to take (here made so), that tie is refused, not carried into the function."""
    import dycl_iree.lower as lower_module
    from dycl_iree.errors import UnsupportedOpError

    monkeypatch.setattr(lower_module, "_coincidences", lambda *args: ["a tie"])
    monkeypatch.setattr(lower_module, "_fixed_results", lambda *args: [])
    with pytest.raises(UnsupportedOpError, match=r"test_lower\.py:\d+.*tied dim 0 of segment input 0 .*\(s\d+ \+ 1\)"):
        _lower_tail()


def _silu_module() -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output((graph.call_function(torch.ops.aten.silu.default, (x,)),))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _targets(exported: Any) -> set[str]:
    return {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}


def test_two_threads_exporting_at_once_each_trace_with_their_own_table(monkeypatch):
    """The one-trace export swaps a function of torch's module for its trace: a second thread that
    exports during the first one's trace waits, so each gets its own decompositions, and torch's
    module is as it was afterwards."""
    import threading
    import time

    from torch._decomp import get_decompositions
    from torch.export import _trace

    from dycl_iree import lower as lower_stage

    original, export = _trace._export_to_aten_ir, _trace._export
    first_tracing, one_trace = threading.Event(), []

    def slow_first_trace(*args: Any, **kwargs: Any) -> Any:
        # The first thread's trace starts while the second one's export is under way: without
        # turns, it would read the second one's swap.
        name = threading.current_thread().name
        one_trace.append(name)
        first_tracing.set()
        time.sleep(0.5 if name == "decomposing" else 1.0)
        return export(*args, **kwargs)

    monkeypatch.setattr(_trace, "_export", slow_first_trace)
    results: dict[str, Any] = {}

    def run(name: str, table: dict) -> None:
        if name == "keeping":
            first_tracing.wait(timeout=30)
        results[name] = lower_stage._export_once(_silu_module(), [torch.randn(3, 4)], [None], table)

    tables = {"decomposing": get_decompositions([torch.ops.aten.silu.default]), "keeping": {}}
    threads = [threading.Thread(target=run, args=(name, table), name=name) for name, table in tables.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(one_trace) == ["decomposing", "keeping"], one_trace  # both took the one trace
    assert _targets(results["decomposing"]) == {"aten.sigmoid.default", "aten.mul.Tensor"}, results
    assert _targets(results["keeping"]) == {"aten.silu.default"}, results
    assert _trace._export_to_aten_ir is original


def test_the_one_trace_undoes_its_swap_when_the_trace_raises(monkeypatch):
    from torch.export import _trace

    from dycl_iree import lower as lower_stage

    original = _trace._export_to_aten_ir
    seen = []

    def failing_trace(*args: Any, **kwargs: Any) -> Any:
        seen.append(_trace._export_to_aten_ir)
        raise RuntimeError("a trace that fails")

    monkeypatch.setattr(_trace, "_export", failing_trace)
    assert lower_stage._export_in_one_trace(_silu_module(), [torch.randn(2)], [None], {}) is None
    assert seen and seen[0] is not original  # swapped during the trace
    assert _trace._export_to_aten_ir is original


class _RowsTiedToASum(nn.Module):
    """Emformer's step in small: the mask's rows come out of a loop (a dim of their own in the
    Program), and meet `torch.cat([right_context, utterance])`, whose rows are the sum of two, so
    torch.export ties the mask's rows to that sum. `extra` makes the loop run past it."""

    def forward(self, utterance: torch.Tensor, right_context: torch.Tensor, extra: int) -> torch.Tensor:
        rows = []
        for i in range(utterance.size(0) + right_context.size(0) + extra):
            rows.append(torch.ones(1) * i)
        mask = torch.cat(rows)
        return torch.cat([right_context, utterance]) * mask[:, None]


def test_an_input_dim_tied_to_a_sum_of_other_input_dims_is_checked_by_the_host(tmp_path):
    """The tie is kept and the host checks it before the call: both hosts give PyTorch's results
    wherever the sizes agree, and raise where PyTorch does. Without the check both returned a
    result there (IREE does not check a dynamic input dim against the sum it was tied to)."""
    from .conftest import check_hosts, check_hosts_raise, export_compiled

    _, scripted, compiled, python = export_compiled(
        tmp_path,
        _RowsTiedToASum(),
        (torch.randn(5, 4), torch.randn(2, 4), 0),
        "tied_sum",
        ({0: "T"}, {0: "R"}, None),
    )
    for rows, right in [(5, 2), (3, 1), (8, 4), (1, 0), (0, 3), (2, 5)]:
        check_hosts(scripted, [compiled, python], (torch.randn(rows, 4), torch.randn(right, 4), 0))
    trips = {count for counts in python.trip_counts.values() for count in counts}
    assert {7, 4, 12, 1, 3} <= trips, python.trip_counts
    for extra in (1, -1):
        check_hosts_raise(
            scripted,
            [compiled, python],
            (torch.randn(5, 4), torch.randn(2, 4), extra),
            r"The size of tensor a \(7\) must match the size of tensor b",
            r"the sizes of the tensors must match: %\w+\.size\(0\) == %\w+\.size\(0\) \+ %\w+\.size\(0\) "
            r"does not hold \(.*test_lower\.py:\d+\)",
        )
