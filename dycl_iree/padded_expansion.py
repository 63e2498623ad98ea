"""A 1x1 convolution whose activated output feeds a padded depthwise convolution, written so that the
matmul's own dispatch writes the padded tensor the depthwise taps read (MobileNetV2's expansion and
depthwise convolution; chosen by `lower._segment_graph`); and the same for a convolution of few
input channels (MobileNetV2's stem, `convolution_padded`).

Written as the model does, the depthwise taps (`decompositions.depthwise_convolution_as_taps`) pad
the expansion's output with `constant_pad_nd`, which IREE 3.13 runs as a copy of the whole expanded
activation into a padded buffer (`slow_memcpy`, 7-8% of MobileNetV2's time with AVX2). Here the
expansion's input is padded instead (6x narrower in MobileNetV2), the matmul runs over the padded
pixels and its border is set to zero after the activation, fused into the matmul's dispatch.
Where that padded expansion is much larger than the cache (`BANDED_FROM`: MobileNetV2's first, 5 MB),
the expansion and the depthwise convolution run together in bands of output rows whose expansion
fits it (`BAND_BYTES`, `depthwise_of_expansion_in_bands`).

Example:
    >>> x, w, b = torch.randn(1, 4, 6, 6), torch.randn(8, 4, 1, 1), torch.randn(8)
    >>> padded = pointwise_convolution_padded(x, w, b, [1, 1], inside_mask(6, 6, [1, 1]), "relu")
    >>> tuple(padded.shape)
    (1, 8, 8, 8)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch

from .decompositions import ACTIVATION_OPS, depthwise_as_taps, depthwise_convolution_as_taps, depthwise_taps_nhwc
from .program import ListArg, Segment, Value

aten = torch.ops.aten


def depthwise_convolution_of_padded(
    padded: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    activation: str = "",
    *scalars: float,
) -> torch.Tensor:
    """`conv2d` (depthwise, with `padding`), then `activation` if one is named, of the NHWC tensor
    `padded` that holds the convolution's input padded by `padding` already
    (`pointwise_convolution_padded`); the result in NCHW.

    >>> x, w, b = torch.randn(1, 3, 8, 8), torch.randn(3, 1, 3, 3), torch.randn(3)
    >>> padded = torch.nn.functional.pad(x.permute(0, 2, 3, 1), (0, 0, 1, 1, 1, 1))
    >>> out = depthwise_convolution_of_padded(padded, w, b, [2, 2], [1, 1], [1, 1], "relu")
    >>> torch.allclose(out, torch.relu(torch.nn.functional.conv2d(x, w, b, 2, 1, 1, 3)), atol=1e-5)
    True
    """
    op = ACTIVATION_OPS.get(activation)
    activated = (op, *scalars) if op is not None else ()
    if not depthwise_as_taps(weight.shape[0], padded.shape[1:3], stride, weight.shape[2] * weight.shape[3]):
        nchw = aten.permute(padded, [0, 3, 1, 2])
        out = aten.conv2d.default(nchw, weight, bias, stride, [0, 0], dilation, weight.shape[0])
        return op(out, *scalars) if op is not None else out
    return depthwise_convolution_as_taps(padded, weight, bias, stride, padding, dilation, activated, padded_input=True)


def pointwise_convolution_padded(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    padding: Sequence[int],
    inside: torch.Tensor | None,
    activation: str,
    *scalars: float,
) -> torch.Tensor:
    """A 1x1 convolution (stride 1, no groups) then `activation` ("hardtanh" or "relu"), as NHWC
    padded by `padding` with zeros: the input of a depthwise convolution after it
    (`depthwise_convolution_of_padded`; MobileNetV2's expansion, then its depthwise convolution).
    `inside` is the padded input's [1, H, W, 1] mask of the pixels inside the input (`inside_mask`),
    given as a constant (None: computed here); the zeroed border follows it.

    The matmul runs over the padded input's pixels and the border is set to zero after the
    activation (the border's matmul rows are the bias, which the activation need not keep at zero),
    so IREE writes the padded tensor from the matmul's own dispatch. A `constant_pad_nd` of the
    matmul's result instead becomes a copy of the whole expanded activation into a padded buffer
    (`slow_memcpy`), 7-8% of MobileNetV2's time with AVX2; this pads the 6x narrower input instead.

    >>> x, w, b = torch.randn(1, 4, 6, 6), torch.randn(8, 4, 1, 1), torch.randn(8)
    >>> out = pointwise_convolution_padded(x, w, b, [1, 1], None, "hardtanh", 0.0, 6.0)
    >>> expected = torch.nn.functional.relu6(torch.nn.functional.conv2d(x, w, b))
    >>> torch.allclose(out, torch.nn.functional.pad(expected.permute(0, 2, 3, 1), (0, 0, 1, 1, 1, 1)), atol=1e-5)
    True
    """
    padded = _padded_rows(input, padding)
    batch, height, width, _ = padded.shape
    if inside is None:
        pad_h, pad_w = padding
        rows, columns = torch.arange(height), torch.arange(width)
        inside_rows = ((rows >= pad_h) & (rows < height - pad_h)).reshape(1, height, 1, 1)
        inside_columns = ((columns >= pad_w) & (columns < width - pad_w)).reshape(1, 1, width, 1)
        inside = inside_rows & inside_columns
    out = _expanded(padded.reshape(batch * height * width, padded.shape[3]), weight, bias, activation, *scalars)
    return aten.where.ScalarOther(inside, out.reshape(batch, height, width, -1), 0.0)


def _padded_rows(input: torch.Tensor, padding: Sequence[int]) -> torch.Tensor:
    """The NCHW `input` as NHWC, padded by `padding` with zeros."""
    pad_h, pad_w = padding
    return aten.constant_pad_nd(aten.permute(input, [0, 2, 3, 1]), [0, 0, pad_w, pad_w, pad_h, pad_h], 0.0)


def _expanded(
    pixels: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str, *scalars: float
) -> torch.Tensor:
    """The 1x1 convolution `weight` of the [P, C] `pixels`, then `activation`: [P, F]."""
    op = ACTIVATION_OPS[activation]
    out_channels, channels = weight.shape[:2]
    matrix = aten.permute(weight, [2, 3, 1, 0]).reshape(channels, out_channels)
    out = aten.mm(pixels, matrix)
    if bias is not None:
        out = out + bias
    return op(out, *scalars)


def depthwise_of_expansion_in_bands(
    expansion: Sequence[Any],
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    activation: str = "",
    *scalars: float,
) -> torch.Tensor:
    """`depthwise_convolution_of_padded` of `pointwise_convolution_padded(*expansion)`, computed in
    bands of output rows (`band_rows`): each band's expansion covers the padded rows the band's taps
    read (the rows between bands twice), so that it stays in the cache for the taps, and each band's
    taps write their rows of the result. Batch 1, sizes known at export (`in_bands` picks it).

    MobileNetV2's first expansion (16 -> 96 channels over the 114x114 padded grid, 5 MB) went to
    memory and back whole; in bands of 8 output rows (744 KB) it stays in L2. The result is
    written band after band into an empty tensor, each band's rows once (`slice_scatter`), which
    IREE 3.13 turns into the taps' dispatches writing their rows of one buffer in place (bands
    joined by a concatenation had measured no faster; README, "Expansions in bands").

    >>> x, w, b = torch.randn(1, 4, 9, 9), torch.randn(8, 4, 1, 1), torch.randn(8)
    >>> dw, db = torch.randn(8, 1, 3, 3), torch.randn(8)
    >>> expansion = (x, w, b, [1, 1], inside_mask(9, 9, [1, 1]), "hardtanh", 0.0, 6.0)
    >>> out = depthwise_of_expansion_in_bands(expansion, dw, db, [2, 2], [1, 1], [1, 1], "hardtanh", 0.0, 6.0)
    >>> relu6, conv2d = torch.nn.functional.relu6, torch.nn.functional.conv2d
    >>> want = relu6(conv2d(relu6(conv2d(x, w, b)), dw, db, 2, 1, 1, 8))
    >>> torch.allclose(out, want, atol=1e-5)
    True
    """
    input, expansion_weight, expansion_bias, expansion_padding, inside, expansion_activation, *bounds = expansion
    padded = _padded_rows(input, expansion_padding)
    _, height, width, channels = padded.shape
    out_channels = expansion_weight.shape[0]
    flat = padded.reshape(height * width, channels)
    kernel = dilation[0] * (weight.shape[2] - 1) + 1  # padded rows one output row reads
    out_rows = (height - kernel) // stride[0] + 1
    out_columns = (width - dilation[1] * (weight.shape[3] - 1) - 1) // stride[1] + 1
    rows = band_rows(height, width * out_channels * padded.element_size(), stride[0], kernel) or out_rows
    op = ACTIVATION_OPS.get(activation)
    activated = (op, *scalars) if op is not None else ()
    result = aten.empty.memory_format([1, out_rows, out_columns, weight.shape[0]], dtype=input.dtype)
    for first in range(0, out_rows, rows):
        last = min(out_rows, first + rows)
        top, bottom = stride[0] * first, stride[0] * (last - 1) + kernel  # the padded rows the band reads
        pixels = aten.slice(flat, 0, top * width, bottom * width)
        band = _expanded(pixels, expansion_weight, expansion_bias, expansion_activation, *bounds)
        band = band.reshape(1, bottom - top, width, out_channels)
        band = aten.where.ScalarOther(aten.slice(inside, 1, top, bottom), band, 0.0)
        taps = depthwise_taps_nhwc(band, weight, bias, stride, padding, dilation, activated, padded_input=True)
        result = aten.slice_scatter(result, taps, 1, first, last)
    return aten.permute(result, [0, 3, 1, 2]).contiguous()


def in_bands(shape: Sequence[Any], weight: torch.Tensor, args: Sequence[Any]) -> bool:
    """Whether a depthwise convolution (`args`, of `weight`) of a padded expansion of NCHW `shape`
    (`pointwise_convolution_padded`) runs in bands (`depthwise_of_expansion_in_bands`): batch 1,
    taps (`depthwise_as_taps`), and an expansion of BANDED_FROM bytes or more."""
    stride, padding, dilation = (list(setting) for setting in args[3:6])
    batch, channels, height, width = shape
    if batch != 1 or not depthwise_as_taps(channels, shape[2:], stride, weight.shape[2] * weight.shape[3]):
        return False
    kernel = dilation[0] * (weight.shape[2] - 1) + 1
    padded_height, padded_width = height + 2 * padding[0], width + 2 * padding[1]
    row_bytes = padded_width * channels * weight.element_size()
    if padded_height * row_bytes < BANDED_FROM:
        return False
    return band_rows(padded_height, row_bytes, stride[0], kernel) is not None


# The most bytes of expanded activation a band holds (`band_rows`): three quarters of the 1 MiB L2
# cache of AMD Zen 4 (Intel's cores have 1.25-2 MiB), room left for the band's input and taps.
BAND_BYTES = 768 * 1024
# The least padded expansion that runs in bands (`in_bands`): MobileNetV2's first (5 MB) ran faster
# in bands, its 56x56 ones (1.9 MB, in 3 bands with 2-3 rows read twice) no faster (README,
# "Expansions in bands").
BANDED_FROM = 4 << 20


def band_rows(padded_rows: int, row_bytes: int, stride: int, kernel: int, budget: int | None = None) -> int | None:
    """Output rows per band of a padded expansion of `padded_rows` rows of `row_bytes` bytes each,
    read by a depthwise convolution of `kernel` rows (dilated) and `stride`: as many as keep a
    band's expanded rows within `budget` (None: BAND_BYTES), the bands as even as can be; None where
    the whole expansion fits (one band).

    >>> band_rows(114, 114 * 96 * 4, 2, 3)  # MobileNetV2's first expansion: 7 bands of 8 rows
    8
    >>> band_rows(58, 58 * 144 * 4, 1, 3), band_rows(58, 58 * 144 * 4, 2, 3)  # 3 bands each
    (19, 10)
    >>> band_rows(30, 30 * 192 * 4, 1, 3) is None  # 691 KB: whole
    True
    """
    budget = BAND_BYTES if budget is None else budget
    if padded_rows * row_bytes <= budget:
        return None
    out_rows = (padded_rows - kernel) // stride + 1
    most = max(1, (budget // row_bytes - kernel) // stride + 1)
    bands = -(-out_rows // most)
    return -(-out_rows // bands) if bands > 1 else None


def convolution_padded(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    padding: Sequence[int],
    inside: torch.Tensor | None,
    activation: str,
    convolution: Sequence[Sequence[int]],
    *scalars: float,
) -> torch.Tensor:
    """A convolution without groups (`convolution`: its stride, padding and dilation) then
    `activation`, as NHWC padded by `padding` with zeros, like `pointwise_convolution_padded`: the
    convolution runs over the padded output's pixels (its input padded that much more) and the
    border is set to zero after the activation (`inside`, as there).

    MobileNetV2's stem (3 -> 32 channels, 3x3, stride 2) feeds the first depthwise convolution.
    Written as the model does, IREE 3.13 fuses the taps' padding into the stem's dispatch as a store
    into the inside of the padded buffer, and that store (an `iree_linalg_ext.map_store` of the
    result with its batch dim folded) is a scalar copy per element: the stem's dispatch took 0.75 ms
    instead of 0.46 (README, Known traps). Here the dispatch writes the whole padded tensor.

    >>> x, w, b = torch.randn(1, 3, 9, 9), torch.randn(8, 3, 3, 3), torch.randn(8)
    >>> out = convolution_padded(x, w, b, [1, 1], None, "hardtanh", [[2, 2], [1, 1], [1, 1]], 0.0, 6.0)
    >>> expected = torch.nn.functional.relu6(torch.nn.functional.conv2d(x, w, b, 2, 1))
    >>> torch.allclose(out, torch.nn.functional.pad(expected.permute(0, 2, 3, 1), (0, 0, 1, 1, 1, 1)), atol=1e-5)
    True
    """
    op = ACTIVATION_OPS[activation]
    stride, conv_padding, dilation = convolution
    pads = []
    for size, kernel, step, before, spread, border in zip(
        input.shape[2:], weight.shape[2:], stride, conv_padding, dilation, padding
    ):
        out_size = (size + 2 * before - spread * (kernel - 1) - 1) // step + 1
        # Output pixel o reads input rows step * o - before + spread * k; o runs from -border to
        # out_size - 1 + border.
        last = step * (out_size - 1 + border) - before + spread * (kernel - 1)
        pads.append((before + step * border, last - (size - 1)))
    (top, bottom), (left, right) = pads
    padded = aten.constant_pad_nd(input, [left, right, top, bottom], 0.0)
    out = op(aten.conv2d.default(padded, weight, bias, list(stride), [0, 0], list(dilation), 1), *scalars)
    out = aten.permute(out, [0, 2, 3, 1])
    if inside is None:
        inside = inside_mask(out.shape[1] - 2 * padding[0], out.shape[2] - 2 * padding[1], padding)
    return aten.where.ScalarOther(inside, out, 0.0)


def inside_mask(height: int, width: int, padding: Sequence[int]) -> torch.Tensor:
    """The [1, height + 2 pad_h, width + 2 pad_w, 1] mask of the pixels of a padded NHWC tensor that
    lie inside the unpadded one."""
    pad_h, pad_w = padding
    inside = torch.zeros(1, height + 2 * pad_h, width + 2 * pad_w, 1, dtype=torch.bool)
    inside[:, pad_h : pad_h + height, pad_w : pad_w + width] = True
    return inside


_ACTIVATIONS = {op: name for name, op in ACTIVATION_OPS.items()}
# The least height and width of the expansion's output that takes this form: the matmul also runs
# over the border's pixels, 7% more rows at 56x56 but 15% at 28x28 and 31% at 14x14, where MobileNetV2's
# blocks measured no faster or slower than with the padding copy (`benchmarks/inverted_residual.py`).
MIN_SIZE = 56
# The most input channels of a convolution with a larger filter that takes this form: IREE's direct
# convolution of so few channels (MobileNetV2's stem: 3) vectorizes over the output channels and
# pixels; wider ones take other forms (`decompositions._im2col_wins`, Winograd) or other tiles,
# not measured here.
MAX_CONVOLUTION_CHANNELS = 4


class Expansions:
    """Finds, walking a segment's ops in order, the depthwise convolutions whose input is the ReLU6
    (or ReLU) of a 1x1 convolution, or of a narrow one (`_narrow_convolution`), read by nothing else:
    `lower._segment_graph` calls the function `padded_input` names on its arguments and gives the
    depthwise convolution that padded tensor.

    Only the rewrite's own conditions are checked here: a 1x1 convolution with stride 1, no
    padding, dilation or groups and every argument given, or a narrow one; bounds of the activation that are
    constants; a depthwise convolution with a padding of ints (`lower._is_depthwise` checks the rest)
    of an input of at least `MIN_SIZE` x `MIN_SIZE`, known at export.
    """

    def __init__(self, segment: Segment) -> None:
        self.uses: Counter[Value] = Counter()
        for op in segment.nodes:
            for arg in (*op.args, *(arg for _, arg in op.kwargs)):
                self.uses.update(_values(arg))
        self.uses.update(segment.results)
        self.convolutions: dict[Value, list] = {}  # a 1x1 convolution's output: its arguments
        self.activated: dict[Value, tuple] = {}  # its activation's output: (arguments, activation, bounds)

    def note(self, op: Any, overload: Any, args: list, kwargs: dict, weight: torch.Tensor | None) -> None:
        """Remember a 1x1 convolution of the constant filter `weight`, or the activation of one."""
        if weight is not None and overload is aten.conv2d.default and not kwargs:
            if _pointwise(args, weight):
                self.convolutions[op.outputs[0]] = (pointwise_convolution_padded, args, ())
            elif _narrow_convolution(args, weight):
                self.convolutions[op.outputs[0]] = (convolution_padded, args, ([list(s) for s in args[3:6]],))
        elif overload in _ACTIVATIONS and not kwargs and op.args and self._single_use(op.args[0], self.convolutions):
            if all(type(bound) in (int, float) for bound in args[1:]):
                self.activated[op.outputs[0]] = (self.convolutions[op.args[0]], _ACTIVATIONS[overload], *args[1:])

    def padded_input(self, op: Any, args: list) -> tuple | None:
        """The function that writes the padded input of the depthwise convolution `op` (`args`),
        `pointwise_convolution_padded` or `convolution_padded`, and its arguments (the mask, at
        index 4, None); None where its input is not such an activation or it has no padding."""
        padding, shape = args[4], op.args[0].type.shape
        if not self._single_use(op.args[0], self.activated) or not any(padding):
            return None
        if not all(type(size) is int and size >= MIN_SIZE for size in shape[2:]):
            return None
        (function, convolution, settings), activation, *bounds = self.activated[op.args[0]]
        return function, (*convolution[:3], list(padding), None, activation, *settings, *bounds)

    def _single_use(self, value: Any, found: dict) -> bool:
        return isinstance(value, Value) and value in found and self.uses[value] == 1


def _pointwise(args: list, weight: torch.Tensor) -> bool:
    """Whether conv2d's arguments are a 1x1 filter with stride 1, no padding, no dilation, no groups."""
    if len(args) != 7 or tuple(weight.shape[2:]) != (1, 1):
        return False
    stride, padding, dilation, groups = args[3:7]
    settings = (stride, padding, dilation)
    if not all(isinstance(setting, (list, tuple)) and len(setting) == 2 for setting in settings):
        return False
    return list(stride) == [1, 1] and list(padding) == [0, 0] and list(dilation) == [1, 1] and groups == 1


def _narrow_convolution(args: list, weight: torch.Tensor) -> bool:
    """Whether conv2d's arguments are a filter larger than 1x1 of at most `MAX_CONVOLUTION_CHANNELS`
    input channels, without groups, with int stride, padding and dilation."""
    if len(args) != 7 or weight.dim() != 4 or weight.shape[1] > MAX_CONVOLUTION_CHANNELS or args[6] != 1:
        return False
    settings = args[3:6]
    if not all(isinstance(setting, (list, tuple)) and len(setting) == 2 for setting in settings):
        return False
    return all(type(size) is int for setting in settings for size in setting) and tuple(weight.shape[2:]) != (1, 1)


def _values(arg: Any) -> list[Value]:
    if isinstance(arg, Value):
        return [arg]
    if isinstance(arg, ListArg):
        return [value for item in arg.items for value in _values(item)]
    return []
