"""Lower: the decompositions that replace PyTorch's (depthwise convolution, bilinear upsampling) match
PyTorch, in eager and after export through IREE; convolution filters reach IREE pre-transposed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dycl_iree
from dycl_iree.decompositions import decomposition_table, depthwise_convolution_as_taps, upsample_bilinear_as_matmul


def _rewrite(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    pair = lambda value: list(value) if isinstance(value, tuple) else [value, value]  # noqa: E731
    return depthwise_convolution_as_taps(
        x, weight, bias, pair(stride), pair(padding), pair(dilation), False, [0, 0], groups
    )


CASES = {
    # name: (input shape, weight shape, keyword arguments)
    "3x3 same": ((1, 6, 8, 8), (6, 1, 3, 3), {"padding": 1, "groups": 6}),
    "bias": ((1, 6, 8, 9), (6, 1, 3, 3), {"padding": 1, "groups": 6, "bias": True}),
    "stride 2 batch 2": ((2, 5, 9, 9), (5, 1, 3, 3), {"padding": 1, "stride": 2, "groups": 5}),
    "5x3 rectangular": ((1, 3, 10, 11), (3, 1, 5, 3), {"padding": (2, 1), "groups": 3}),
    "dilated": ((1, 2, 12, 12), (2, 1, 3, 3), {"padding": 2, "dilation": 2, "groups": 2}),
    "no padding, stride 2x1": ((1, 4, 7, 7), (4, 1, 3, 3), {"stride": (2, 1), "groups": 4}),
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


@pytest.mark.parametrize(
    "weight_shape, groups, stride",
    [((4, 4, 3, 3), 1, 1), ((4, 4, 1, 1), 1, 1), ((8, 2, 3, 3), 2, 1), ((8, 1, 3, 3), 4, 1), ((4, 4, 3, 3), 1, 2)],
    ids=["3x3", "1x1", "grouped", "depthwise with a channel multiplier", "strided"],
)
def test_other_convolutions_are_left_to_iree(weight_shape, groups, stride):
    x = torch.randn(1, 4, 6, 6)
    assert _rewrite(x, torch.randn(weight_shape), groups=groups, stride=stride) is NotImplemented
    weight = torch.randn(4, 1, 3, 3)
    assert depthwise_convolution_as_taps(x, weight, None, [1, 1], [1, 1], [1, 1], True, [0, 0], 4) is NotImplemented


def test_the_table_leaves_torch_mlirs_own_table_alone():
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    assert decomposition_table()[torch.ops.aten.convolution.default] is depthwise_convolution_as_taps
    assert torch.ops.aten.convolution.default not in get_decomposition_table()


class _ConvGate(nn.Module):
    """Convolutions of every kind behind a data-dependent branch: plain, strided, dilated and 1x1
    (channels-last in IREE, filters pre-transposed) and depthwise (rewritten as taps)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.strided = nn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False)
        self.dilated = nn.Conv2d(8, 8, 3, padding=2, dilation=2)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pointwise = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.stem(x))
        if bool(x.mean() > 0):
            y = self.dilated(y)
        else:
            y = self.depthwise(y)
        return self.pointwise(self.strided(y))


@pytest.mark.parametrize(
    "dynamic_shapes, shapes",
    [
        (({0: "batch"},), [(1, 3, 10, 12), (3, 3, 10, 12)]),
        # With dynamic sizes, the depthwise taps slice along dynamic dims: the segments must still be
        # inlined into the compiled host's branches (dycl_iree._inline_segments_into_main).
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


def test_convolutions_reach_iree_with_hwcf_filters_and_depthwise_ones_as_taps():
    from dycl_iree.capture import capture
    from dycl_iree.lower import lower
    from dycl_iree.partition import partition
    from dycl_iree.specialize import specialize

    model = _ConvGate().eval()
    program = partition(specialize(capture(model), (torch.randn(2, 3, 10, 10),), ({0: "batch"},)))
    text = str(lower(program).module)
    # stem, strided, dilated and pointwise stay convolutions; the depthwise one became taps.
    assert text.count("torch.aten.convolution") == 4
    for conv in (model.stem, model.strided, model.dilated, model.pointwise, model.depthwise):
        out_channels, in_channels, kernel_h, kernel_w = conv.weight.shape
        assert f"!torch.vtensor<[{kernel_h},{kernel_w},{in_channels},{out_channels}],f32>" in text, conv
    assert text.count("torch.aten.permute") >= 5 + 2  # five filters; the taps' input and output


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
