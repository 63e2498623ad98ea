"""How `lower` decomposes aten ops: torch-mlir's table, plus rewrites of ops that IREE's CPU backend
compiles badly at the sizes dynamic networks use, into forms it handles well (strided copies,
matmuls, fused element-wise ops). Each rewrite returns `NotImplemented` for the cases it does not
cover, which keeps the op as it is.

Example:
    >>> table = decomposition_table()
    >>> table[torch.ops.aten.convolution.default] is convolution_as_matmul
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

aten = torch.ops.aten


def decomposition_table() -> dict[Any, Any]:
    """torch-mlir's decompositions for `ExportedProgram.run_decompositions`, with ours on top."""
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    table = get_decomposition_table()
    table[aten.convolution.default] = convolution_as_matmul
    table[aten.upsample_bilinear2d.default] = upsample_bilinear_as_matmul
    table[aten.upsample_bilinear2d.vec] = _upsample_bilinear_vec
    return table


def convolution_as_matmul(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
) -> torch.Tensor:
    """A stride-1 2-D convolution with a kernel larger than 1x1 as one slice of the input per kernel
    tap, stacked and multiplied by the weight as one matmul; a depthwise convolution (any stride)
    as each tap times its weights, summed element-wise.

    IREE's CPU backend handles these convolutions badly at the small sizes dynamic networks use:
    its direct NCHW convolution is slow, and its own im2col (`--iree-global-opt-use-im2col-for-
    convs`) gathers through `(h + kh, w + kw)` indexing, which it vectorizes only with
    `--iree-llvmcpu-experimental-vectorize-to-transfer-gather` (without it those gathers took 65% of
    SDN-ResNet-56's time); its NCHW depthwise convolution runs at ~2 GFLOP/s. Each tap here is a
    plain copy, and the weight, stacked in the same channel-major order, needs only a reshape.
    Left to IREE (`NotImplemented` keeps the op): strided convolutions, where IREE's one vectorized
    gather beats nine strided copies (SkipNet-FF's strided gates: 1.85 -> 1.63 ms); 1x1
    convolutions, which im2col turns into plain matmuls; grouped ones with a channel multiplier;
    transposed, 1-D and 3-D ones.

    >>> x, w = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
    >>> out = convolution_as_matmul(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    >>> torch.allclose(out, torch.nn.functional.conv2d(x, w, padding=1), atol=1e-5)
    True
    """
    if transposed or input.dim() != 4 or weight.dim() != 4:
        return NotImplemented
    out_channels, group_channels, kernel_h, kernel_w = weight.shape
    if not all(isinstance(size, int) for size in weight.shape) or kernel_h * kernel_w == 1:
        return NotImplemented
    depthwise = groups > 1 and group_channels == 1 and out_channels == groups
    if (groups != 1 and not depthwise) or (not depthwise and list(stride) != [1, 1]):
        return NotImplemented
    batch, channels, height, width = input.shape
    (stride_h, stride_w), (pad_h, pad_w), (dilation_h, dilation_w) = stride, padding, dilation
    padded = aten.constant_pad_nd(input, [pad_w, pad_w, pad_h, pad_h], 0.0) if pad_h or pad_w else input
    out_h = (height + 2 * pad_h - dilation_h * (kernel_h - 1) - 1) // stride_h + 1
    out_w = (width + 2 * pad_w - dilation_w * (kernel_w - 1) - 1) // stride_w + 1
    taps = []
    for i in range(kernel_h):
        for j in range(kernel_w):
            rows = aten.slice(padded, 2, i * dilation_h, i * dilation_h + stride_h * (out_h - 1) + 1, stride_h)
            taps.append(aten.slice(rows, 3, j * dilation_w, j * dilation_w + stride_w * (out_w - 1) + 1, stride_w))
    if depthwise:
        # One fused element-wise dispatch: out[c] = sum over taps of tap[c] * weight[c, tap].
        tap_weights = weight.reshape(1, out_channels, kernel_h * kernel_w, 1)
        out = None
        for index, tap in enumerate(taps):
            term = tap * aten.select(tap_weights, 2, index).reshape(1, out_channels, 1, 1)
            out = term if out is None else out + term
    else:
        depth = channels * kernel_h * kernel_w
        columns = aten.stack(taps, 2).reshape(batch, depth, out_h * out_w)  # channel-major, like weight
        matrix = weight.reshape(out_channels, depth)
        if isinstance(batch, int) and batch == 1:
            out = aten.mm(matrix, columns.reshape(depth, out_h * out_w))
        else:
            out = aten.bmm(matrix.expand(batch, out_channels, depth), columns)
        out = out.reshape(batch, out_channels, out_h, out_w)
    return out if bias is None else out + bias.reshape(1, out_channels, 1, 1)


def upsample_bilinear_as_matmul(
    input: torch.Tensor,
    output_size: Sequence[int],
    align_corners: bool,
    scales_h: float | None = None,
    scales_w: float | None = None,
) -> torch.Tensor:
    """Bilinear upsampling of an NCHW tensor as two matmuls with interpolation matrices.

    PyTorch's decomposition gathers the four neighbours of every output pixel with computed
    indices; IREE does not vectorize those gathers (on RaNet, two 2x upsamplings were 39% of the
    time). Each output row (column) is a fixed mix of at most two input rows (columns), so the
    whole operation is `rows @ x @ columns.T`, with matrices built from `arange` on constants,
    which IREE computes at compile time.

    >>> x = torch.randn(1, 2, 3, 5)
    >>> out = upsample_bilinear_as_matmul(x, [6, 10], False, 2.0, 2.0)
    >>> torch.allclose(out, torch.nn.functional.interpolate(x, scale_factor=2.0, mode="bilinear"), atol=1e-6)
    True
    """
    if input.dim() != 4 or not input.dtype.is_floating_point:
        return NotImplemented
    batch, channels, height, width = input.shape
    out_h, out_w = output_size
    if not all(isinstance(size, int) for size in (height, width, out_h, out_w)):
        return NotImplemented
    rows = _interpolation_matrix(height, out_h, align_corners, scales_h, input.dtype)
    columns = _interpolation_matrix(width, out_w, align_corners, scales_w, input.dtype)
    planes = batch * channels
    across = aten.mm(input.reshape(planes * height, width), columns.t()).reshape(planes, height, out_w)
    out = aten.bmm(rows.expand(planes, out_h, height), across)
    return out.reshape(batch, channels, out_h, out_w)


def _upsample_bilinear_vec(
    input: torch.Tensor,
    output_size: Sequence[int] | None,
    align_corners: bool,
    scale_factors: Sequence[float] | None,
) -> torch.Tensor:
    if output_size is None:
        if scale_factors is None or input.dim() != 4:
            return NotImplemented
        # PyTorch's rule for the output size: floor(size * scale).
        output_size = [int(size * scale) for size, scale in zip(input.shape[2:], scale_factors)]
    scales = list(scale_factors) if scale_factors else [None, None]
    return upsample_bilinear_as_matmul(input, output_size, align_corners, *scales)


def _interpolation_matrix(
    in_size: int, out_size: int, align_corners: bool, scale: float | None, dtype: torch.dtype
) -> torch.Tensor:
    """[out_size, in_size]: row o holds the weights of the input positions output o mixes, computed
    as PyTorch's upsampling kernels do (source index, clamped, weight of the upper neighbour)."""
    if align_corners:
        step = (in_size - 1.0) / (out_size - 1.0) if out_size > 1 else 0.0
    else:
        step = 1.0 / scale if scale is not None and scale > 0 else in_size / out_size
    position = torch.arange(out_size, dtype=torch.float32)
    source = step * position if align_corners else step * (position + 0.5) - 0.5
    source = source.clamp(min=0.0)
    lower = source.to(torch.int64)
    upper = (lower + 1).clamp(max=in_size - 1)
    weight = (source - lower).clamp(0.0, 1.0)
    index = torch.arange(in_size).reshape(1, in_size)
    matrix = (index == lower.reshape(-1, 1)) * (1.0 - weight).reshape(-1, 1)
    matrix = matrix + (index == upper.reshape(-1, 1)) * weight.reshape(-1, 1)
    return matrix.to(dtype)
