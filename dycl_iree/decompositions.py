"""How `lower` decomposes aten ops: torch-mlir's table, plus rewrites of ops that IREE's CPU backend
compiles badly at the sizes dynamic networks use (depthwise and 1x1 convolutions, poolings, bilinear
upsampling), into forms it handles well (fused element-wise ops, matmuls, reductions), channels-last
where they sit next to the convolutions IREE runs channels-last. Each rewrite returns
`NotImplemented` for the cases it does not cover, which keeps the op as it is.

Example:
    >>> table = decomposition_table()
    >>> table[torch.ops.aten.convolution.default] is convolution_channels_last
    True
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import torch

from . import counted_orders, cpu_features, data_tiling, special_functions
from .index_clamping import IN_RANGE
from .nan_keeping import KEEPING_NAN
from .winograd import outgrows_direct

aten = torch.ops.aten


def decomposition_table() -> dict[Any, Any]:
    """torch-mlir's decompositions for `ExportedProgram.run_decompositions`, with ours on top."""
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    table = dict(get_decomposition_table())  # a copy: torch-mlir returns its own cached dict
    table[aten.convolution.default] = convolution_channels_last
    table[aten.upsample_bilinear2d.default] = upsample_bilinear_as_matmul
    table[aten.upsample_bilinear2d.vec] = _upsample_bilinear_vec
    for dims in ("1d", "2d", "3d"):  # the rewrites of each rank's op, given a flag and the op's own one
        for name, overload, rewrite, flag in _of_each_rank():
            op = getattr(getattr(aten, name + dims), overload)
            table[op] = rewrite(flag, table.get(op))
    table[aten.avg_pool2d.default] = avg_pool_as_reduction
    table[aten.max_pool2d_with_indices.default] = max_pool_channels_last
    table[aten.group_norm.default] = group_norm_of_run_time_size(table.get(aten.group_norm.default))
    for op in (aten.adaptive_max_pool1d.default, aten.adaptive_max_pool2d.default):
        table[op] = adaptive_max_pool_of_uneven_windows(table.get(op))
    for op, fill_value in ((aten.zeros.default, 0.0), (aten.ones.default, 1.0), (aten.full.default, None)):
        table[op] = _filled_unless_static(table.get(op), fill_value)
    table.update(KEEPING_NAN)
    table[aten.nonzero_static.default] = nonzero_static_by_scatter
    table[aten.sort.default] = _without_reentry(sort_reading_its_values, table.get(aten.sort.default))
    table[aten.topk.default] = _without_reentry(topk_reading_its_values, table.get(aten.topk.default))
    table.update(special_functions.TABLE)  # before the float64 forms, which call its float32 ones
    for op in special_functions.ODD:
        table[op] = _without_reentry(special_functions.odd_by_magnitude(op), table.get(op))
    table[torch.ops.prims.scalar_tensor.default] = scalar_tensor_as_full
    for op in _FLOAT32_IN_FLOAT64:
        table[op] = _in_float32_for_float64(op, table.get(op))
    table[aten._native_multi_head_attention.default] = multi_head_attention_as_its_python_path
    table[aten.log2.default] = _logarithm_in_base(2.0)
    table[aten.log10.default] = _logarithm_in_base(10.0)
    table[aten.fmod.Tensor] = fmod_of_float32_in_float64
    table[aten.roll.default] = roll_of_the_flattened
    table[aten.masked_scatter.default] = masked_scatter_by_gather
    table[aten.repeat_interleave.Tensor] = repeat_interleave_of_output_size
    table.update(counted_orders.TABLE)
    for op, with_tensor in (*_SCALAR_COMPARISONS.items(), *_SCALAR_OPERANDS.items()):
        table[op] = with_number_in_its_dtype(with_tensor)
    for op, rewrite in IN_RANGE.items():
        table[op] = _without_reentry(rewrite, table.get(op))
    return table


# Ops of every rank (`name` + "1d", "2d", "3d", `overload`) and their rewrite, made by `rewrite(flag,
# the op's own decomposition)` (`decomposition_table`).
def _of_each_rank() -> tuple:
    return (
        ("upsample_nearest", "vec", upsample_nearest_of_run_time_size, False),
        ("_upsample_nearest_exact", "vec", upsample_nearest_of_run_time_size, True),
        ("reflection_pad", "default", edge_pad_of_run_time_size, True),
        ("replication_pad", "default", edge_pad_of_run_time_size, False),
    )


def multi_head_attention_as_its_python_path(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    embed_dim: int,
    num_heads: int,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor,
    proj_weight: torch.Tensor,
    proj_bias: torch.Tensor,
    mask: torch.Tensor | None = None,
    need_weights: bool = True,
    average_attn_weights: bool = True,
    mask_type: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`nn.MultiheadAttention`'s fast path (`torch._native_multi_head_attention`, which it takes in
    inference with `batch_first`, even heads and self-attention) as its own other path,
    `F.multi_head_attention_forward`: torch-mlir has no lowering of the fused op, and torch no
    decomposition. The fast path's inputs are batch first; its mask is `merge_masks`'s (type 1 a
    key padding mask [B, S], type 2 a merged one [B, H, L, S], else an attention mask [L, S]).

    >>> attention = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    >>> x = torch.randn(2, 5, 8)
    >>> with torch.no_grad():
    ...     want, _ = attention(x, x, x, need_weights=False)
    >>> got, _ = multi_head_attention_as_its_python_path(x, x, x, 8, 2, attention.in_proj_weight,
    ...     attention.in_proj_bias, attention.out_proj.weight, attention.out_proj.bias, need_weights=False)
    >>> torch.allclose(got, want, atol=1e-5)
    True
    """
    padding = attention = None
    if mask is not None and mask_type == 1:
        padding = mask
    elif mask is not None and mask_type == 2:
        attention = mask.reshape(-1, mask.shape[-2], mask.shape[-1])
    else:
        attention = mask
    out, weights = torch.nn.functional.multi_head_attention_forward(
        query.transpose(0, 1),
        key.transpose(0, 1),
        value.transpose(0, 1),
        embed_dim,
        num_heads,
        qkv_weight,
        qkv_bias,
        None,
        None,
        False,
        0.0,
        proj_weight,
        proj_bias,
        training=False,
        key_padding_mask=padding,
        need_weights=need_weights,
        attn_mask=attention,
        average_attn_weights=average_attn_weights,
    )
    return out.transpose(0, 1), weights if weights is not None else query.new_empty(0)


def _filled_unless_static(original: Any, fill_value: float | None) -> Any:
    """`torch.zeros / ones` (`fill_value` given) or `full`: torch-mlir's decomposition (`original`)
    when the size is static, `filled_of_run_time_size` when it is not."""

    def decompose(size: Sequence[Any], *args: Any, **options: Any) -> torch.Tensor:
        if all(isinstance(dim, int) for dim in size):
            return original(size, *args, **options) if original is not None else NotImplemented
        return filled_of_run_time_size(size, fill_value if fill_value is not None else args[0], **options)

    return decompose


def filled_of_run_time_size(
    size: Sequence[Any],
    fill_value: Any,
    *,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
) -> torch.Tensor:
    """`torch.zeros / ones / full` whose size is only known at run time, as a broadcast scalar made
    contiguous.

    PyTorch's decomposition allocates with `empty_strided(size, contiguous strides)`, and the
    stride of a leading dim of size 1 is `torch.sym_max(n, 1) * ...`, which torch-mlir's importer
    cannot import ("Unimplemented call_function: sym_max"): `torch.zeros(1, x.size(0), hidden)`,
    the initial state of every RNN, failed for a dynamic batch.

    >>> filled_of_run_time_size([2, 3], 1.0).tolist()
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """
    if dtype is None:
        dtype = torch.get_default_dtype() if isinstance(fill_value, float) else torch.int64
        dtype = torch.bool if isinstance(fill_value, bool) else dtype
    scalar = aten.scalar_tensor.default(fill_value, dtype=dtype, device=device)
    return aten.clone.default(aten.expand.default(scalar, list(size)), memory_format=torch.contiguous_format)


def convolution_channels_last(
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
    """The convolutions IREE runs badly even channels-last, rewritten (a 1-D one as the 2-D one of
    height 1, `convolution_1d_as_2d`; a grouped one of run-time size one per group,
    `grouped_convolution_split`): 2-D depthwise ones as taps,
    1x1 ones without padding as a matmul, and, unless the CPU has AVX-512, those with many channels
    as im2col + matmul (`_im2col_wins`; those with a constant 3x3 filter and stride 1 the exporter
    has already written as Winograd's F(2x2, 3x3), `lower._segment_graph`). Every other convolution
    is left to IREE
    (`NotImplemented` keeps the op), which converts it to channels-last and runs it as a direct
    convolution (`compile.py`). Both rewrites work in NHWC, so that the transposes around them
    cancel against those of the neighbouring channels-last convolutions, and both read the weight
    as `permute(weight, [2, 3, 1, 0])`: `lower._segment_graph` stores filters HWCF and permutes
    them back, so that view is the stored constant itself."""
    if input.dim() == 3 and weight.dim() == 3:
        return convolution_1d_as_2d(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    depthwise = not transposed and weight.shape[1] == 1 and weight.shape[0] == groups
    if groups > 1 and not depthwise and not all(isinstance(size, int) for size in input.shape[2:]):
        return grouped_convolution_split(
            input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
        )
    if transposed or input.dim() != 4 or weight.dim() != 4:
        return NotImplemented
    out_channels, group_channels, kernel_h, kernel_w = weight.shape
    if not all(isinstance(size, int) for size in weight.shape):
        return NotImplemented
    if groups > 1 and group_channels == 1 and out_channels == groups:
        if not depthwise_as_taps(out_channels, input.shape[2:], stride, kernel_h * kernel_w):
            return NotImplemented
        return depthwise_convolution_as_taps(input, weight, bias, stride, padding, dilation)
    if groups == 1 and (kernel_h, kernel_w) == (1, 1) and not any(padding):
        return pointwise_convolution_as_matmul(input, weight, bias, stride)
    if groups == 1 and input.dim() == 4 and _im2col_wins(group_channels, input.shape[2:], stride):
        return convolution_as_im2col_matmul(input, weight, bias, stride, padding, dilation)
    return NotImplemented


def convolution_1d_as_2d(
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
    """A 1-D convolution (transposed or not) as the 2-D one of height 1 it is, which then takes the
    form the 2-D convolutions take (depthwise as taps, 1x1 as a matmul, many channels as im2col +
    matmul, the rest IREE's direct channels-last one).

    IREE 3.13's own 1-D convolution is slow and, over a run-time length, fragile. Tacotron2's
    512-channel, 5-tap convolutions over 40 and 100 frames ran at 3.7 GFLOP/s, 14-19x slower than
    PyTorch; as im2col + matmul at 78-88 GFLOP/s, ahead of it (one thread, AMD Zen 4; README,
    performance). And its conversion to channels-last (`compile.py` asks for it) breaks a 1-D
    convolution of a run-time length over a batch of 1: iree-compile fails with "exceeded stack
    allocation limit" or "'memref.alloca' op stack allocation size overflows 64 bits" for every
    kernel size, stride, dilation or channel count (README's traps; a batch of 2 compiles). Speech
    models run one utterance at a time, over inputs of any length.

    >>> x, w = torch.randn(1, 4, 9), torch.randn(6, 4, 3)
    >>> out = convolution_1d_as_2d(x, w, None, [2], [1], [1], False, [0], 1)
    >>> torch.allclose(out, torch.nn.functional.conv1d(x, w, stride=2, padding=1), atol=1e-5)
    True
    """
    out = aten.convolution.default(
        aten.unsqueeze.default(input, 2),
        aten.unsqueeze.default(weight, 2),
        bias,
        [1, *stride],
        [0, *padding],
        [1, *dilation],
        transposed,
        [0, *output_padding],
        groups,
    )
    return aten.squeeze.dim(out, 2)


def grouped_convolution_split(
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
    """A grouped convolution (not depthwise) as one convolution per group, concatenated along the
    channels.

    IREE 3.13 fails to compile a grouped convolution of run-time spatial size over a batch of 1
    ("'linalg.generic' op write affecting operations on global resources are restricted to
    workgroup distributed contexts"; README's traps): with a static size, or a batch of 2, it
    compiles.

    >>> x, w = torch.randn(1, 8, 9), torch.randn(4, 4, 3)
    >>> out = grouped_convolution_split(x, w, None, [1], [1], [1], False, [0], 2)
    >>> torch.allclose(out, torch.nn.functional.conv1d(x, w, padding=1, groups=2), atol=1e-5)
    True
    """
    inputs = input.shape[1] // groups
    # A transposed convolution's weight is [in, out / groups, ...]; another's [out, in / groups, ...].
    weights = weight.shape[0] // groups
    outputs = weight.shape[1] if transposed else weights
    parts = []
    for group in range(groups):
        part = aten.convolution.default(
            aten.slice.Tensor(input, 1, group * inputs, (group + 1) * inputs),
            aten.slice.Tensor(weight, 0, group * weights, (group + 1) * weights),
            None if bias is None else aten.slice.Tensor(bias, 0, group * outputs, (group + 1) * outputs),
            stride,
            padding,
            dilation,
            transposed,
            output_padding,
            1,
        )
        parts.append(part)
    return aten.cat.default(parts, 1)


def depthwise_as_taps(channels: int, spatial: Sequence[Any], stride: Sequence[int], taps: int) -> bool:
    """Whether a depthwise convolution of `taps` filter taps becomes taps rather than IREE's own,
    which it runs in NCHW (4-6x slower at every MobileNetV2 shape: README, performance).

    Not one of more than `RUN_TIME_TAPS` taps over a run-time size: IREE 3.13 fuses the taps into
    one dispatch that takes each tap's run-time sizes as push constants, and a dispatch of more
    than 64 fails when the module loads ("dispatch requiring 101 constants exceeds limit of 64":
    Conformer's 31-tap depthwise convolution over a run-time number of frames; ConvNeXt's 7x7 over
    a run-time image size). Its own runs those at PyTorch's speed or better (31 taps over 144
    channels and 200 frames: 377 us against PyTorch's 631, one thread, AMD Zen 4)."""
    return taps <= RUN_TIME_TAPS or all(isinstance(size, int) for size in spatial)


# The most taps a depthwise convolution of run-time size takes as taps: 25 (5x5, and 1-D up to 27)
# loaded; 31 (1-D) and 49 (7x7) did not (`depthwise_as_taps`).
RUN_TIME_TAPS = 25


def _im2col_wins(in_channels: int, spatial: Sequence[Any], stride: Sequence[int]) -> bool:
    """Whether a convolution runs faster as im2col + matmul than as IREE's direct channels-last
    convolution on the processor the export is for (`cpu_features.direct_convolutions_fast`).

    On an x86 CPU without AVX-512, IREE 3.13 tiles a direct convolution with 8 or more input
    channels as 4 output pixels x 4 output channels, and it runs at 1-24 GFLOP/s; as im2col +
    matmul the same convolution runs at 19-46 (code for znver3, one thread, `benchmarks/
    conv_shapes.py`: ResNet-18's layer3 0.9 -> 19.0 GFLOP/s, layer2 23.8 -> 45.8, layer1 13.3 ->
    22.2). IREE's own im2col of every convolution made SDN-ResNet-56 (8-32 channels at 8x8-32x32)
    1.7x slower, so only large convolutions take it (`winograd.outgrows_direct`: from 128 input
    channels, 64 at 14x14 output pixels, 32 at 28x28). No convolution of the zoo does. With
    AVX-512 the direct convolution had measured 1.1-1.3x faster than im2col at each of ResNet's
    shapes on an AMD Zen 4, but on an Intel Xeon it is the slower form (layer3's strided 3x3 109 ->
    138 GFLOP/s as im2col in the wide register tile), so every CPU target takes these forms now
    (`cpu_features.direct_convolutions_fast`). On aarch64 (NEON) IREE tiles the direct convolution as 2 pixels x 2
    channels x 16 input channels, the same kind of choice as for AVX2: im2col there too, unmeasured
    (README, performance). A 1-D convolution comes here as the 2-D one of height 1
    (`convolution_1d_as_2d`), and takes im2col + matmul at every size: IREE's direct convolution
    of height 1 ran 80 -> 512 channels (Tacotron2's postnet) at 7 GFLOP/s over 100 and 400 frames,
    as im2col 51-54, and 32 channels at 13-18 against 19-33; 16 channels the same in both forms
    (one thread, AMD Zen 4).
    """
    if cpu_features.direct_convolutions_fast():
        return False
    if spatial[0] == 1:
        return True
    height, width = (_example_size(size) for size in spatial)
    return outgrows_direct(in_channels, (height // stride[0]) * (width // stride[1]))


def _example_size(size: Any) -> int:
    """A size, or for one known only at run time (a 1-D convolution over a run-time number of
    frames) the example's, which torch.export traces with: read without a guard, so the size stays
    dynamic."""
    return size if isinstance(size, int) else size.node.hint


def convolution_as_im2col_matmul(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
) -> torch.Tensor:
    """A 2-D convolution without groups as one matmul: the kernel taps of the padded NHWC input,
    each a strided slice, concatenated along the channels ([N, OH, OW, KH*KW*C]), times the filter
    read as [KH*KW*C, F] (the HWCF constant `lower._segment_graph` stores, so no transpose).

    Slices and a concatenation are copies IREE vectorizes, unlike im2col's gather through
    `(h + kh, w + kw)` indices (README, traps).

    >>> x, w = torch.randn(1, 4, 7, 7), torch.randn(8, 4, 3, 3)
    >>> out = convolution_as_im2col_matmul(x, w, None, [2, 2], [1, 1], [1, 1])
    >>> torch.allclose(out, torch.nn.functional.conv2d(x, w, stride=2, padding=1), atol=1e-5)
    True
    """
    out_channels, channels, kernel_h, kernel_w = weight.shape
    taps, out_h, out_w = _channels_last_taps(input, kernel_h, kernel_w, stride, padding, dilation, 0.0)
    patches = aten.cat(taps, 3)
    batch = patches.shape[0]
    depth = kernel_h * kernel_w * channels
    matrix = aten.permute(weight, [2, 3, 1, 0]).reshape(depth, out_channels)
    out = _matmul_with_bias(patches.reshape(batch * out_h * out_w, depth), matrix, bias)
    return _nchw(out.reshape(batch, out_h, out_w, out_channels))


def _channels_last_taps(
    input: torch.Tensor,
    kernel_h: int,
    kernel_w: int,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    fill: float,
    padded_input: bool = False,
) -> tuple[list[torch.Tensor], int, int]:
    """The kernel's taps of an NCHW input as strided NHWC slices of the input padded with `fill`
    (row-major over the kernel), and the output's height and width. With `padded_input` the input
    is that padded NHWC tensor already (`pointwise_convolution_padded`)."""
    (stride_h, stride_w), (pad_h, pad_w), (dilation_h, dilation_w) = stride, padding, dilation
    if padded_input:
        padded, height, width = input, input.shape[1] - 2 * pad_h, input.shape[2] - 2 * pad_w
    else:
        _, _, height, width = input.shape
        nhwc = aten.permute(input, [0, 2, 3, 1])
        padded = aten.constant_pad_nd(nhwc, [0, 0, pad_w, pad_w, pad_h, pad_h], fill) if pad_h or pad_w else nhwc
    out_h = (height + 2 * pad_h - dilation_h * (kernel_h - 1) - 1) // stride_h + 1
    out_w = (width + 2 * pad_w - dilation_w * (kernel_w - 1) - 1) // stride_w + 1
    taps = []
    for i in range(kernel_h):
        rows = aten.slice(padded, 1, i * dilation_h, i * dilation_h + stride_h * (out_h - 1) + 1, stride_h)
        for j in range(kernel_w):
            taps.append(aten.slice(rows, 2, j * dilation_w, j * dilation_w + stride_w * (out_w - 1) + 1, stride_w))
    return taps, out_h, out_w


def pointwise_convolution_as_matmul(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int]
) -> torch.Tensor:
    """A 1x1 convolution without padding or groups (any stride) as one matmul of the NHWC input
    (strided first when the stride is not 1) by the [C, F] filter.

    IREE's channels-last 1x1 convolution with a stride is a generic reduction it runs at ~1.5
    GFLOP/s (WRN-SDN's projection shortcut, 32 -> 64 channels at 8x8: 84 us).

    >>> x, w = torch.randn(1, 4, 6, 6), torch.randn(8, 4, 1, 1)
    >>> out = pointwise_convolution_as_matmul(x, w, None, [2, 2])
    >>> torch.allclose(out, torch.nn.functional.conv2d(x, w, stride=2), atol=1e-5)
    True
    """
    out_channels, channels = weight.shape[:2]
    nhwc = aten.permute(input, [0, 2, 3, 1])
    stride_h, stride_w = stride
    if stride_h != 1:
        nhwc = aten.slice(nhwc, 1, 0, None, stride_h)
    if stride_w != 1:
        nhwc = aten.slice(nhwc, 2, 0, None, stride_w)
    batch, height, width, _ = nhwc.shape
    matrix = aten.permute(weight, [2, 3, 1, 0]).reshape(channels, out_channels)
    out = _matmul_with_bias(nhwc.reshape(batch * height * width, channels), matrix, bias)
    return _nchw(out.reshape(batch, height, width, out_channels))


def one_row_linear(input_type: Any, weight: torch.Tensor) -> Any:
    """`linear_of_one_row` for a linear layer with a constant float32 `weight` [out, in] whose input
    (a Program `TensorType`) is one row, of static size, and whose weight has 2^18 elements or more
    (it streams from memory at every call), with AVX2 and without AVX-512; else None. With AVX-512
    (an Intel Xeon, one thread, one `Linear` alone, 200 calls, median of 7 rounds) the data-tiled
    matmul reads the weight twice as fast: 1280 -> 1000 0.419 -> 0.207 ms, 2048 -> 1000 0.651 ->
    0.326 (ONNX Runtime 0.209 and 0.329)."""
    rows = getattr(input_type, "shape", (None, None))[:-1]
    if not all(isinstance(size, int) for size in rows) or math.prod(rows) != 1 or weight.dtype != torch.float32:
        return None
    large = weight.numel() >= 1 << data_tiling.AVX2_MIN_WEIGHT_LOG2
    avx2_only = cpu_features.register_tile_rule() and not cpu_features.has_avx512()
    return linear_of_one_row if large and avx2_only else None


def linear_of_one_row(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """A linear layer of one row as the dot products of the input with the weight's rows, as stored:
    one reduction IREE tiles 8 weight rows at a time, read side by side, where the matmul, data-tiled
    below 48 rows, reads the packed weight one panel of 16 columns at a time. Four layers in a row,
    weights read from memory (AVX2, one thread, IREE's profile, 3 rounds, ms): 2048 -> 1000 1.20 ->
    1.11-1.15, 8192 -> 1000 4.69-5.18 -> 4.14-4.44, 16384 -> 1000 9.43-11.33 -> 8.62-8.80. With
    AVX-512 it is the slower form (`one_row_linear`).

    >>> x, w, b = torch.randn(1, 6), torch.randn(4, 6), torch.randn(4)
    >>> torch.allclose(linear_of_one_row(x, w, b), torch.nn.functional.linear(x, w, b), atol=1e-6)
    True
    """
    out = aten.sum.dim_IntList(aten.mul.Tensor(weight, aten.unsqueeze(input, -2)), [-1])
    return out if bias is None else out + bias


def _matmul_with_bias(rows: torch.Tensor, matrix: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`rows @ matrix (+ bias)`; under the AVX2 matmul rule a weight whose rows lie a multiple of
    1 KiB apart is stored with zero columns more (`data_tiling.padded_columns`: a constant IREE
    evaluates at compile time) and read through a slice of its true columns (`PADDED_WEIGHT_VIEW`)."""
    columns = matrix.shape[1]
    padded = columns
    if cpu_features.register_tile_rule():
        padded = data_tiling.padded_columns(rows.shape[0], matrix.shape[0], columns, wide=cpu_features.has_avx512())
    if padded != columns and PADDED_WEIGHT_VIEW:
        stored = aten.constant_pad_nd(matrix, [0, padded - columns])
        return _with_bias(aten.mm(rows, aten.slice(stored, 1, 0, columns)), bias)
    if padded != columns:
        matrix = aten.constant_pad_nd(matrix, [0, padded - columns])
        bias = aten.constant_pad_nd(bias, [0, padded - columns]) if bias is not None else None
    out = _with_bias(aten.mm(rows, matrix), bias)
    return aten.slice(out, 1, 0, columns) if padded != columns else out


def _with_bias(out: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return out + bias if bias is not None else out


# Whether a padded weight (`data_tiling.padded_columns`) is read through a slice of its true
# columns, rather than multiplied whole with its result sliced after the bias. IREE 3.13 clones the
# weight's slice into the matmul's dispatch (a load of 2048 of the stored 2064 columns: the rows stay
# 2064 floats apart, so the L1 sets stay apart too) and keeps the slice out of constant evaluation,
# while a slice of the matmul's result keeps every element-wise op after it out of the matmul's
# dispatch (Known traps): a 2048 -> 512 -> 2048 bottleneck with its residual ran 5 dispatches with
# the result sliced, 3 with the weight sliced (the bias, residual add and ReLU in the matmul's).
PADDED_WEIGHT_VIEW = True


# Whether the taps' weights are divided by their channel's largest magnitude and the sum multiplied
# by it: the same to a few ulps, but IREE 3.13 then fuses every tap into one dispatch, where it
# split a plain sum of 3x3 taps in two (one tap alone writing a whole tensor the other eight read).
# MobileNetV2's depthwise blocks, AVX2, one thread (`benchmarks/conv_shapes.py`): 1.2-1.5x.
SCALED_TAPS = True


def depthwise_convolution_as_taps(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    activation: tuple[Any, ...] = (),
    padded_input: bool = False,
) -> torch.Tensor:
    """A depthwise 2-D convolution (any stride, padding, dilation) as each kernel tap times its
    per-channel weights, summed element-wise in NHWC order (the weights scaled per channel and the
    sum scaled back, `SCALED_TAPS`), then `activation` (an element-wise op and its scalar arguments,
    `depthwise_convolution_activated`) in NHWC too. With `padded_input`, `input` is the NHWC input
    padded by `padding` already (`pointwise_convolution_padded`).

    IREE's own depthwise convolution runs at ~2 GFLOP/s in NCHW and is slower than this in NHWC
    too; the taps fuse into one element-wise dispatch, each tap reading whole channel vectors and
    each tap's weights one contiguous row (SDN-MobileNet: the same taps in NCHW order cost 65 us
    per dispatch next to channels-last convolutions, with strided weight columns 29 us, as here
    2.9 us).

    >>> x, w = torch.randn(1, 3, 8, 8), torch.randn(3, 1, 3, 3)
    >>> out = depthwise_convolution_as_taps(x, w, None, [1, 1], [1, 1], [1, 1])
    >>> torch.allclose(out, torch.nn.functional.conv2d(x, w, padding=1, groups=3), atol=1e-5)
    True
    """
    return _nchw(depthwise_taps_nhwc(input, weight, bias, stride, padding, dilation, activation, padded_input))


def depthwise_taps_nhwc(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    activation: tuple[Any, ...] = (),
    padded_input: bool = False,
) -> torch.Tensor:
    """`depthwise_convolution_as_taps` with its result left in NHWC."""
    out_channels, _, kernel_h, kernel_w = weight.shape
    taps, _, _ = _channels_last_taps(input, kernel_h, kernel_w, stride, padding, dilation, 0.0, padded_input)
    tap_weights = aten.permute(weight, [2, 3, 1, 0]).reshape(kernel_h * kernel_w, out_channels)
    scale = None
    if SCALED_TAPS:
        scale = aten.amax(aten.abs(tap_weights), [0])
        scale = aten.where.self(aten.gt(scale, 0.0), scale, aten.ones_like(scale))
        tap_weights = tap_weights / scale
    out = None
    for index, tap in enumerate(taps):
        term = tap * aten.select(tap_weights, 0, index)
        out = term if out is None else out + term
    out = out * scale if scale is not None else out
    if bias is not None:
        out = out + bias
    if activation:
        out = activation[0](out, *activation[1:])
    return out


# The activations the depthwise and padded-expansion rewrites take, by the name `lower` gives them.
ACTIVATION_OPS = {"hardtanh": aten.hardtanh.default, "relu": aten.relu.default}


def depthwise_convolution_activated(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    activation: str,
    *scalars: float,
) -> torch.Tensor:
    """`conv2d` (depthwise) then `activation` ("hardtanh", ReLU6's op, or "relu") with its `scalars`,
    on the taps' NHWC side where the convolution becomes taps (`lower._segment_graph` writes
    MobileNetV2's conv + ReLU6 so): after `_nchw`, IREE ran taps, transpose and ReLU6 as one
    dispatch iterating in NCHW order. Measured neutral on MobileNetV2 (README, performance).

    >>> x, w, b = torch.randn(1, 3, 8, 8), torch.randn(3, 1, 3, 3), torch.randn(3)
    >>> out = depthwise_convolution_activated(x, w, b, [2, 2], [1, 1], [1, 1], "hardtanh", 0.0, 6.0)
    >>> torch.allclose(out, torch.nn.functional.relu6(torch.nn.functional.conv2d(x, w, b, 2, 1, 1, 3)), atol=1e-5)
    True
    """
    op = ACTIVATION_OPS[activation]
    taps = weight.shape[2] * weight.shape[3]
    if input.dim() != 4 or not depthwise_as_taps(weight.shape[0], input.shape[2:], stride, taps):
        return op(aten.conv2d.default(input, weight, bias, stride, padding, dilation, weight.shape[0]), *scalars)
    return depthwise_convolution_as_taps(input, weight, bias, stride, padding, dilation, (op, *scalars))


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
    rows = _interpolation_matrix(height, out_h, align_corners, scales_h, input.dtype)
    columns = _interpolation_matrix(width, out_w, align_corners, scales_w, input.dtype)
    if rows is None or columns is None:
        return NotImplemented
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
        output_size = [scaled_size(size, scale) for size, scale in zip(input.shape[2:], scale_factors)]
        if None in output_size:
            return NotImplemented
    scales = list(scale_factors) if scale_factors else [None, None]
    return upsample_bilinear_as_matmul(input, output_size, align_corners, *scales)


def scaled_size(size: Any, scale: float) -> Any:
    """PyTorch's output size of an upsampling by `scale`, floor(size * scale) in float64; for a size
    known only at run time in int arithmetic, (size * p) // q with scale = p / q (q a power of two,
    as every float is), which is that floor wherever size * p < 2^53; None for a scale of more
    than 20 significant bits (0.3), where the float product rounds and the two may differ.

    Written with floats, a run-time size becomes a `sym_float` that torch-mlir cannot import.

    >>> scaled_size(7, 1.5), scaled_size(7, 0.5), scaled_size(10, 0.3)
    (10, 3, 3)
    """
    if isinstance(size, int):
        return math.floor(size * scale)
    numerator, denominator = float(scale).as_integer_ratio()
    if numerator >= 1 << 20:
        return None
    return (size * numerator) // denominator


def upsample_nearest_of_run_time_size(exact: bool, original: Any) -> Any:
    """`upsample_nearest*d.vec` (`exact`: nearest-exact's) by scale factors of an input whose size is
    known only at run time (F.interpolate(x, scale_factor=2.0) with a dynamic height): the sizes
    from `scaled_size`, each spatial dim gathered at PyTorch's source indices (`_nearest_sources`).
    Other calls go to `original` (torch-mlir's decomposition, if any).

    torch-mlir's lowering of the op given output sizes and scales picks the wrong rows where the
    sizes are dynamic (a downsampling by 0.5 gave rows 0, 1, 2 of 6, not 0, 2, 4), and PyTorch's
    decomposition makes a `sym_float` it cannot import.
    """

    def rewrite(input: torch.Tensor, output_size: Any, scale_factors: Any) -> Any:
        spatial = input.shape[2:]
        if output_size is None and scale_factors is not None and not all(isinstance(s, int) for s in spatial):
            sizes = [scaled_size(size, scale) for size, scale in zip(spatial, scale_factors)]
            if None not in sizes:
                out = input
                for dim, (size, out_size, scale) in enumerate(zip(spatial, sizes, scale_factors)):
                    out = aten.index_select(out, dim + 2, _nearest_sources(size, out_size, scale, exact))
                return out
        return original(input, output_size, scale_factors) if original is not None else NotImplemented

    rewrite.__name__ = "upsample_nearest_exact_of_run_time_size" if exact else "upsample_nearest_of_run_time_size"
    return rewrite


# The nearest upsamplings given output sizes, and whether each is nearest-exact: given scales too,
# `lower._segment_graph` writes them as `upsample_nearest_by_given_scales`.
NEAREST_BY_SIZES = {
    **{getattr(aten, f"upsample_nearest{dims}").default: False for dims in ("1d", "2d", "3d")},
    **{getattr(aten, f"_upsample_nearest_exact{dims}").default: True for dims in ("1d", "2d", "3d")},
}


def upsample_nearest_by_given_scales(exact: bool, input: torch.Tensor, output_size: Any, *scales: Any) -> torch.Tensor:
    """`upsample_nearest*d` (`exact`: nearest-exact's) given output sizes and scales
    (`torch._C._nn.upsample_nearest2d(y, [3, 5], 0.5, 0.5)`), each spatial dim gathered at the
    source indices PyTorch computes from its scale (`_nearest_sources`). torch-mlir's lowering of
    the op read rows 0, 1, 2 of 6 there, where PyTorch reads 0, 2, 4; torch.export does not pass
    the op to a decomposition table, so the segment's graph calls this instead.

    >>> y = torch.arange(12.0).reshape(1, 1, 6, 2)
    >>> upsample_nearest_by_given_scales(False, y, [3, 2], 0.5, None)[0, 0, :, 0].tolist()
    [0.0, 4.0, 8.0]
    """
    out = input
    for dim, (size, out_size, scale) in enumerate(zip(input.shape[2:], output_size, scales)):
        out = aten.index_select(out, dim + 2, _nearest_sources(size, out_size, scale, exact))
    return out


def _nearest_sources(in_size: Any, out_size: Any, scale: float | None, exact: bool) -> torch.Tensor:
    """The input index each output index of a nearest (`exact`: nearest-exact) upsampling by `scale`
    reads, as PyTorch's kernels compute it: floor(o * (float)(1 / scale)), or floor((o + 0.5) * ...)
    for nearest-exact, in float32 (without a scale, the step is in_size / out_size in float32), at
    most in_size - 1; nearest's own shortcuts (the index itself where the sizes are equal, o / 2
    where the output is twice the input) kept.

    >>> _nearest_sources(6, 3, 0.5, False).tolist(), _nearest_sources(4, 4, 1.2, False).tolist()
    ([0, 2, 4], [0, 1, 2, 3])
    """
    positions = torch.arange(out_size, dtype=torch.float32)
    if scale is not None and scale > 0:
        step: Any = 1.0 / scale
    else:
        sizes = (aten.scalar_tensor(size, dtype=torch.float32) for size in (in_size, out_size))
        step = aten.div(*sizes)
    # At most in_size - 1, as PyTorch's kernels take it: the gather's own clamp (`index_clamping`).
    source = aten.floor((positions + 0.5 if exact else positions) * step).to(torch.int64)
    if exact:
        return source
    index = torch.arange(out_size, dtype=torch.int64)
    same = aten.scalar_tensor(out_size, dtype=torch.int64) == aten.scalar_tensor(in_size, dtype=torch.int64)
    double = aten.scalar_tensor(out_size, dtype=torch.int64) == aten.scalar_tensor(2 * in_size, dtype=torch.int64)
    return aten.where.self(same, index, aten.where.self(double, index // 2, source))


def _interpolation_matrix(
    in_size: Any, out_size: Any, align_corners: bool, scale: float | None, dtype: torch.dtype
) -> torch.Tensor | None:
    """[out_size, in_size]: row o holds the weights of the input positions output o mixes, computed
    as PyTorch's upsampling kernels do (source index, clamped, weight of the upper neighbour). A
    size known only at run time gives a matrix of run-time size, its step a float32 tensor (the
    kernels' own float division) where the sizes set it; None where a size is neither."""
    static = isinstance(in_size, int) and isinstance(out_size, int)
    if not static and not all(isinstance(size, (int, torch.SymInt)) for size in (in_size, out_size)):
        return None
    if not static and (align_corners or scale is None or scale <= 0):
        before, after = (in_size - 1, out_size - 1) if align_corners else (in_size, out_size)
        denominator = aten.scalar_tensor(after, dtype=torch.float32)
        ratio = aten.div(aten.scalar_tensor(before, dtype=torch.float32), denominator)
        step: Any = aten.where.self(denominator > 0, ratio, aten.zeros_like(ratio))
    elif align_corners:
        step = (in_size - 1.0) / (out_size - 1.0) if out_size > 1 else 0.0
    else:
        step = 1.0 / scale if scale is not None and scale > 0 else in_size / out_size
    position = torch.arange(out_size, dtype=torch.float32)
    source = step * position if align_corners else step * (position + 0.5) - 0.5
    source = source.clamp(min=0.0)
    lower = source.to(torch.int64)
    upper = aten.minimum(lower + 1, aten.scalar_tensor(in_size - 1, dtype=torch.int64))
    weight = (source - lower).clamp(0.0, 1.0)
    index = torch.arange(in_size).reshape(1, in_size)
    matrix = (index == lower.reshape(-1, 1)) * (1.0 - weight).reshape(-1, 1)
    matrix = matrix + (index == upper.reshape(-1, 1)) * weight.reshape(-1, 1)
    return matrix.to(dtype)


def _tiling_windows(
    input: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Any,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> tuple[int, int] | None:
    """(kernel_h, kernel_w) when a 2-D pooling's windows tile its input, or its input without the
    last rows and columns no window reads: stride equal to the kernel, no padding or dilation,
    static sizes at least the kernel's, and sizes divisible by the kernel unless `ceil_mode` is off
    (SDN's classifier pools 14x14 by 3 into 4x4, and row 13 and column 13 are read by none); else
    None."""
    if input.dim() != 4 or not all(isinstance(size, int) for size in input.shape[2:]):
        return None

    def pair(value: Any) -> list[int]:  # aten takes an int, [n] or [h, w]
        return [value, value] if isinstance(value, int) else list(value) * (2 // len(value))

    kernel = pair(kernel_size)
    stride = pair(stride) if stride else kernel
    if stride != kernel or any(pair(padding)) or pair(dilation) != [1, 1]:
        return None
    height, width = input.shape[2:]
    if height < kernel[0] or width < kernel[1]:
        return None
    if ceil_mode and (height % kernel[0] or width % kernel[1]):
        return None
    return kernel[0], kernel[1]


def _unit_strides(kernel_size: Any, stride: Any) -> bool:
    """Whether a pooling moves one step at a time: `ceil_mode` then changes nothing (the windows'
    count, (L + 2p - k) / 1 + 1, is whole, and the last window starts inside the input)."""
    steps = stride if stride else kernel_size
    return all(step == 1 for step in ([steps] if isinstance(steps, int) else steps))


def _nchw(nhwc: torch.Tensor) -> torch.Tensor:
    """An NHWC result back in NCHW order AND contiguous, as the op it replaces returns it.

    A bare permute would leave NHWC strides, and the model's own ops after the rewrite see them:
    `out.view(out.size(0), -1)` after a pooling or a 1x1 convolution then fails in torch.export
    ("Cannot view a tensor with shape [1, 8, 4, 4] and strides (128, 1, 32, 8)"), and `flatten`,
    `reshape` or `stride()` would take other paths than in PyTorch. A rewrite must not change what
    the graph around it sees. IREE's tensors have no strides: the copy is a transpose it fuses with
    its neighbours, as it did with the bare permute."""
    return aten.permute(nhwc, [0, 3, 1, 2]).contiguous()


def _windows_nhwc(input: torch.Tensor, kernel_h: int, kernel_w: int) -> torch.Tensor:
    """The windows of `_tiling_windows` as [N, H / kh, kh, W / kw, kw, C], without the rows and
    columns past the last whole window."""
    batch, channels, height, width = input.shape
    out_h, out_w = height // kernel_h, width // kernel_w
    nhwc = aten.permute(input, [0, 2, 3, 1])
    if height % kernel_h:
        nhwc = aten.slice(nhwc, 1, 0, out_h * kernel_h)
    if width % kernel_w:
        nhwc = aten.slice(nhwc, 2, 0, out_w * kernel_w)
    return nhwc.reshape(batch, out_h, kernel_h, out_w, kernel_w, channels)


def avg_pool_as_reduction(
    input: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> torch.Tensor:
    """An average pooling whose windows tile the input as a reshape and a mean, in NHWC.

    IREE's channels-last pooling ops were slow at SDN's classifier sizes (10-13 us for 16 channels
    pooled 8x8); as reductions next to the channels-last convolutions, WRN-SDN went 1.02 -> 0.95 ms
    and SDN-MobileNet 0.22 -> 0.18 ms (with the max pooling below).

    The mean is taken over the window's columns, then its rows: as one reduction over both, IREE
    ran the channels as its outer loop and read the input across them. The early-exit ResNet-50's
    first classifier (256 channels at 56x56 pooled 14x14, next to its max pooling) 0.275 -> 0.110
    ms in IREE's profile (AVX2, one thread), 512 at 28x28 by 7x7 0.119 -> 0.085, 64 at 32x32 by 8x8
    0.012 -> 0.006; 1024 at 14x14 by 3x3 0.048 -> 0.055.

    >>> x = torch.randn(1, 2, 4, 6)
    >>> torch.allclose(avg_pool_as_reduction(x, [2, 2]), torch.nn.functional.avg_pool2d(x, 2))
    True
    """
    if ceil_mode and _unit_strides(kernel_size, stride):
        # ceil_mode changes nothing here, and over a run-time length torch-mlir and IREE got it
        # wrong: a window of 1 gave wrong values or one row too many (README, "Known traps";
        # Emformer's memory pooling with a segment of one frame). `avg_pool1d` comes here too.
        return aten.avg_pool2d.default(input, kernel_size, stride, padding, False, count_include_pad, divisor_override)
    kernel = _tiling_windows(input, kernel_size, stride, padding, ceil_mode=ceil_mode)
    if kernel is None or divisor_override is not None:
        return NotImplemented
    return _nchw(aten.mean.dim(aten.mean.dim(_windows_nhwc(input, *kernel), [4]), [2]))


def group_norm_of_run_time_size(original: Any) -> Any:
    """`group_norm` of an input whose sizes past the channels are known only at run time, as
    `group_norm_by_channel_groups`; other calls go to `original` (torch-mlir's decomposition).

    PyTorch's decomposition views the input [N, C, H, W] as [N, G, 1, H * W]; over a run-time H and W,
    that view's lowering (torch-mlir's, in IREE 3.13's input conversion) typed its input as
    [N, C, 1, W], and both hosts failed every call ("tensor shape dimension 2 mismatch; expected 1
    but have 3")."""

    def rewrite(
        input: torch.Tensor,
        num_groups: int,
        weight: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        eps: float = 1e-5,
        cudnn_enabled: bool = True,
    ) -> Any:
        channels, rest = input.shape[1], input.shape[2:]
        if all(isinstance(size, int) for size in rest) or not isinstance(channels, int) or channels % num_groups:
            args = (input, num_groups, weight, bias, eps, cudnn_enabled)
            return original(*args) if original is not None else NotImplemented
        return group_norm_by_channel_groups(input, num_groups, weight, bias, eps)

    rewrite.__name__ = "group_norm_of_run_time_size"
    return rewrite


def group_norm_by_channel_groups(
    input: torch.Tensor, num_groups: int, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """`group_norm` with the channels split into [groups, channels per group] (static sizes), the
    mean and biased variance over a group's channels and every size after them, then the
    per-channel affine: no view joins a run-time size with another.

    >>> x, w, b = torch.randn(2, 6, 3, 5), torch.randn(6), torch.randn(6)
    >>> out = group_norm_by_channel_groups(x, 3, w, b, 1e-5)
    >>> torch.allclose(out, torch.nn.functional.group_norm(x, 3, w, b), atol=1e-5)
    True
    """
    batch, channels, *rest = input.shape
    grouped = input.reshape(batch, num_groups, channels // num_groups, *rest)
    dims = list(range(2, grouped.dim()))
    mean = aten.mean.dim(grouped, dims, True)
    centered = grouped - mean
    variance = aten.mean.dim(centered * centered, dims, True)
    out = (centered * aten.rsqrt(variance + eps)).reshape(input.shape)
    shape = [1, channels] + [1] * len(rest)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def adaptive_max_pool_of_uneven_windows(original: Any) -> Any:
    """`adaptive_max_pool1d` / `2d` of a static size that the output size does not divide: each
    output element the max of its window, PyTorch's [floor(i * L / n), ceil((i + 1) * L / n)), taken
    one spatial dim after the other (the max of a rectangle is the max of its rows' maxima); the
    indices, where anything reads them, one window at a time (`_window_indices`). Other calls go to
    `original` (torch-mlir's decomposition, if any).

    torch-mlir lowers such a pooling to a kernel that checks at run time that every window has one
    size: the bundle exported and then failed every call ("FAILED_PRECONDITION; unimplemented: only
    support cases with fixed stride size").

    >>> x = torch.randn(1, 2, 15, 7)
    >>> values, indices = adaptive_max_pool_of_uneven_windows(None)(x, [4, 3])
    >>> expected = torch.nn.functional.adaptive_max_pool2d(x, (4, 3), return_indices=True)
    >>> torch.equal(values, expected[0]), torch.equal(indices, expected[1])
    (True, True)
    """

    def rewrite(input: torch.Tensor, output_size: Sequence[int]) -> Any:
        spatial = list(input.shape[input.dim() - len(output_size) :])
        uneven = any(size % out for size, out in zip(spatial, output_size))
        if not uneven or not all(isinstance(size, int) for size in spatial) or not input.dtype.is_floating_point:
            return original(input, output_size) if original is not None else NotImplemented
        first = input.dim() - len(spatial)
        windows = [_adaptive_windows(size, out) for size, out in zip(spatial, output_size)]
        values = input
        for dim, bounds in enumerate(windows, first):
            pieces = [aten.amax(aten.slice(values, dim, start, end), [dim], True) for start, end in bounds]
            values = aten.cat(pieces, dim)
        return values, _window_indices(input, windows)

    rewrite.__name__ = "adaptive_max_pool_of_uneven_windows"
    return rewrite


def _adaptive_windows(size: int, out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive pooling windows: output i reads [floor(i * size / out), ceil((i + 1) * size / out))."""
    return [((i * size) // out, -((-(i + 1) * size) // out)) for i in range(out)]


def _window_indices(input: torch.Tensor, windows: list[list[tuple[int, int]]]) -> torch.Tensor:
    """The flat spatial index of each window's max, as PyTorch's kernel picks it: the first max, or
    the last NaN where the window holds one (it moves to every NaN it meets)."""
    first = input.dim() - len(windows)
    spatial = input.shape[first:]
    cells = []
    for corner in itertools.product(*windows):
        window = input
        for dim, (start, end) in enumerate(corner, first):
            window = aten.slice(window, dim, start, end)
        flat = window.flatten(first)
        length = flat.shape[-1]
        nan = aten.isnan(flat)
        last_nan = (length - 1) - aten.argmax(aten.flip(nan.to(torch.int32), [-1]), -1)
        local = aten.where.self(nan.any(-1), last_nan, aten.argmax(flat, -1))
        lengths = [end - start for start, end in corner]
        index = 0
        for dim, ((start, _), size) in enumerate(zip(corner, spatial)):  # unravel in the window, ravel in the input
            index = index * size + start + (local // math.prod(lengths[dim + 1 :])) % lengths[dim]
        cells.append(index)
    return aten.stack(cells, -1).reshape(*input.shape[:first], *(len(bounds) for bounds in windows))


def max_pool_channels_last(
    input: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    dilation: Sequence[int] = (1,),
    ceil_mode: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A 2-D max pooling in NHWC: as a reduction where its windows tile the input
    (`max_pool_as_reduction`), else as the running maximum of its taps (`max_pool_as_taps`)."""
    result = max_pool_as_reduction(input, kernel_size, stride, padding, dilation, ceil_mode)
    if result is NotImplemented:
        result = max_pool_as_taps(input, kernel_size, stride, padding, dilation, ceil_mode)
    return result


def max_pool_as_reduction(
    input: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    dilation: Sequence[int] = (1,),
    ceil_mode: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A max pooling whose windows tile the input as a reshape and an amax, in NHWC (see
    `avg_pool_as_reduction`), with the indices `max_pool2d_with_indices` returns."""
    kernel = _tiling_windows(input, kernel_size, stride, padding, dilation, ceil_mode)
    if kernel is None or not input.dtype.is_floating_point:
        return NotImplemented
    kernel_h, kernel_w = kernel
    windows = _windows_nhwc(input, kernel_h, kernel_w)
    values = _nchw(aten.amax(windows, [2, 4]))
    # The flat input index of each maximum, as max_pool2d_with_indices returns it (unused by
    # inference graphs, whose consumers drop it; kept exact for any that read it).
    batch, channels, height, width = input.shape
    out_h, out_w = height // kernel_h, width // kernel_w
    flat = aten.permute(windows, [0, 5, 1, 3, 2, 4]).reshape(batch, channels, out_h, out_w, kernel_h * kernel_w)
    position = aten.argmax(flat, -1)
    rows = torch.arange(out_h).reshape(out_h, 1) * kernel_h + position // kernel_w
    columns = torch.arange(out_w).reshape(1, out_w) * kernel_w + position % kernel_w
    return values, rows * width + columns


def max_pool_as_taps(
    input: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = (0,),
    dilation: Sequence[int] = (1,),
    ceil_mode: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A max pooling with overlapping or padded windows (ResNet's 3x3, stride 2, padding 1) as the
    running maximum of its kernel taps, strided NHWC slices of the input padded with -inf, with the
    indices `max_pool2d_with_indices` returns.

    IREE runs the pooling torch-mlir makes of it in NCHW, between channels-last convolutions: on
    ResNet-50 at 224x224 (64 channels, 112x112 -> 56x56) that one dispatch took 2.4% of the run, as
    much as a 3x3 convolution of layer1; as taps it is one element-wise dispatch. A tap replaces
    the maximum where it is greater or NaN, PyTorch's own rule (so NaN propagates, and of equal
    values the first keeps its index); a padding tap (-inf) never replaces it, and the index starts
    at the window's first position inside the input, as PyTorch's does.

    >>> x = torch.randn(1, 3, 9, 9)
    >>> values, indices = max_pool_as_taps(x, [3, 3], [2, 2], [1, 1])
    >>> want = torch.nn.functional.max_pool2d(x, 3, 2, 1, return_indices=True)
    >>> torch.equal(values, want[0]), torch.equal(indices, want[1])
    (True, True)
    """
    if input.dim() != 4 or not input.dtype.is_floating_point or ceil_mode:
        return NotImplemented
    if not all(isinstance(size, int) for size in input.shape[2:]):
        return NotImplemented

    def pair(value: Any, default: list[int]) -> list[int]:  # aten takes an int, [], [n] or [h, w]
        if isinstance(value, int):
            return [value, value]
        return list(value) * (2 // len(value)) if value else default

    kernel_h, kernel_w = pair(kernel_size, [])
    stride_hw = pair(stride, [kernel_h, kernel_w])
    padding_hw, dilation_hw = pair(padding, [0, 0]), pair(dilation, [1, 1])
    taps, out_h, out_w = _channels_last_taps(input, kernel_h, kernel_w, stride_hw, padding_hw, dilation_hw, -math.inf)
    width = input.shape[3]
    rows = torch.arange(out_h).reshape(1, out_h, 1, 1) * stride_hw[0] - padding_hw[0]
    columns = torch.arange(out_w).reshape(1, 1, out_w, 1) * stride_hw[1] - padding_hw[1]
    # The first row and column of each window inside the input (dilation steps over padding).
    first_row = rows + ((-rows).clamp(min=0) + dilation_hw[0] - 1) // dilation_hw[0] * dilation_hw[0]
    first_column = columns + ((-columns).clamp(min=0) + dilation_hw[1] - 1) // dilation_hw[1] * dilation_hw[1]
    values = aten.full_like(taps[0], -math.inf)
    indices = (first_row * width + first_column).expand(taps[0].shape)
    for position, tap in enumerate(taps):
        i, j = divmod(position, kernel_w)
        replaces = aten.logical_or(aten.gt(tap, values), aten.ne(tap, tap))
        values = aten.where.self(replaces, tap, values)
        index = (rows + i * dilation_hw[0]) * width + columns + j * dilation_hw[1]
        indices = aten.where.self(replaces, index, indices)
    return _nchw(values), _nchw(indices)


def nonzero_static_by_scatter(input: torch.Tensor, *, size: Any, fill_value: int = -1) -> torch.Tensor:
    """`nonzero_static(input, size=n)`: the indices of the first `n` nonzero elements, in row-major
    order, padded with `fill_value` (torch-mlir does not lower the op; IREE then fails on it).

    Specialize rewrites `nonzero(mask)` into this with `n` the count the host read
    (`specialize/selections.py`), so `n` is a run-time int and the result's dim 0 is dynamic. Each
    selected element's row is the running count of selected elements before it (a cumsum), every
    other element goes to a spare row `n`, and one scatter writes the coordinates: linear work, no
    sort and no data-dependent shape inside the segment.

    >>> nonzero_static_by_scatter(torch.tensor([[0, 3], [5, 0]]), size=2).tolist()
    [[0, 1], [1, 0]]
    """
    rank = input.dim()
    if rank == 0:
        return NotImplemented
    flat = aten.reshape.default(input, [-1])
    selected = aten.ne.Scalar(flat, 0)
    row = aten.sub.Tensor(aten.cumsum.default(selected, 0, dtype=torch.int64), 1)
    row = aten.where.ScalarOther(selected, row, size)
    # Each element's coordinates, as aranges broadcast over the mask's shape (no division by a
    # run-time size: torch decomposes it into a `div.Tensor_mode` by an int, which torch-mlir rejects).
    coordinates = []
    for dim in range(rank):
        shape = [1] * rank
        shape[dim] = -1
        along = aten.view.default(aten.arange.default(input.shape[dim], dtype=torch.int64), shape)
        coordinates.append(aten.reshape.default(aten.expand.default(along, list(input.shape)), [-1]))
    spare = aten.full.default([size + 1, rank], fill_value, dtype=torch.int64)
    written = aten.index_put.default(spare, [row], aten.stack.default(coordinates, 1))
    return aten.slice.Tensor(written, 0, 0, size)


def sort_reading_its_values(
    input: torch.Tensor, dim: int = -1, descending: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """`sort` along a dynamic dim, with indices that read the sorted values.

    IREE 3.13 fails to compile a sort of a dynamic size whose sorted values nothing reads ("'memref.alloca'
    op expected no unbounded stack allocations": the dispatch keeps them in a stack buffer of the run-time
    size), and that is SSD's `_, idx = scores.sort(0)`. The indices pass through a `where` on a condition
    that is never true but that the compiler cannot fold (`v != v and v == v`), so the values leave the
    sort's dispatch. The same sort with a static size, or with its values used, compiles as it is.

    >>> [t.tolist() for t in sort_reading_its_values(torch.tensor([2.0, 1.0]))]
    [[1.0, 2.0], [1, 0]]
    """
    values, indices = aten.sort.default(input, dim, descending)
    if isinstance(input.shape[dim], int):
        return values, indices
    never = aten.logical_and.default(aten.ne.Tensor(values, values), aten.eq.Tensor(values, values))
    return values, aten.where.ScalarSelf(never, -1, indices)


def topk_reading_its_values(
    input: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """`topk` along a dynamic dim, with indices that read the top values: the trap of
    `sort_reading_its_values`, for a top-k whose values nothing reads (RNNTBeamSearch's
    `_, sorted_idx = scores.topk(beam_width)`), whether k is known at export or not.

    >>> [t.tolist() for t in topk_reading_its_values(torch.tensor([2.0, 1.0, 3.0]), 2)]
    [[3.0, 2.0], [2, 0]]
    """
    values, indices = aten.topk.default(input, k, dim, largest, sorted)
    if isinstance(input.shape[dim], int):
        return values, indices
    never = aten.logical_and.default(aten.ne.Tensor(values, values), aten.eq.Tensor(values, values))
    return values, aten.where.ScalarSelf(never, -1, indices)


# --- Indices kept inside their tensor --------------------------------------------------------------
# IREE has no error inside a kernel: a gather at an index past the end reads outside its buffer (a
# crash or garbage). The host checks the indices it knows (`guards.py`); an index computed on the
# device is clamped into range here, so a bundle never reads outside a buffer; the segment also
# says whether it was in range (`guards.check_device_indices`) and the host raises as PyTorch does.
# Each rewrite calls the op it rewrites, with clamped indices: `_clamping` sends that inner call to
# the op's own decomposition instead of the rewrite (none: NotImplemented keeps the op).
_clamping = False


# IREE 3.13's CPU backend has no float64 form of these: they lower to libm calls iree-lld cannot
# resolve ("undefined symbol: sin", also cos, tan, tanh, asin, acos, atan) or to a
# `math.erf` it marks illegal (erf, gelu). In float64 they compute in float32 and widen back: float32
# precision for these functions only, the rest of a float64 program keeps float64 (exp, log, sqrt,
# pow, sigmoid, the hyperbolic sine and cosine and their inverses have float64 forms).
_FLOAT32_IN_FLOAT64 = (
    aten.sin.default,
    aten.cos.default,
    aten.tan.default,
    aten.tanh.default,
    aten.asin.default,
    aten.acos.default,
    aten.atan.default,
    aten.erf.default,
    aten.gelu.default,
)


_SCALAR_COMPARISONS = {
    aten.lt.Scalar: aten.lt.Tensor,
    aten.le.Scalar: aten.le.Tensor,
    aten.gt.Scalar: aten.gt.Tensor,
    aten.ge.Scalar: aten.ge.Tensor,
    aten.eq.Scalar: aten.eq.Tensor,
    aten.ne.Scalar: aten.ne.Tensor,
}
# Ops with a number that torch-mlir has no lowering of ("failed to legalize operation
# 'torch.constant.float'"), taken as the op with a 0-d tensor of the tensor's dtype, as PyTorch
# casts the number: `torch.fmod(x, 0.3)`.
_SCALAR_OPERANDS = {aten.fmod.Scalar: aten.fmod.Tensor}


def scalar_tensor_as_full(value: Any, *, dtype: Any = None, device: Any = None, **rest: Any) -> torch.Tensor:
    """`prims.scalar_tensor`, which PyTorch's decompositions make of an op's number (`xlogy(q, 0.5)`,
    `special.xlog1py(q, 0.5)`) and torch-mlir does not lower ("failed to legalize operation
    'torch.operator'"), as the 0-d `aten.full` of the value.

    >>> scalar_tensor_as_full(0.5, dtype=torch.float32)
    tensor(0.5000)
    """
    return aten.full([], value, dtype=dtype, device=device)


def with_number_in_its_dtype(with_tensor: Any) -> Any:
    """An op of a float tensor and a number (`aten.gt.Scalar` and its kind, `aten.fmod.Scalar`) as
    the op `with_tensor` with a 0-d tensor of the tensor's dtype, as PyTorch casts the number.

    torch-mlir widens the tensor to float64 to compare it with a number, where PyTorch compares in
    the tensor's dtype: `torch.tensor([0.1]) > 0.1` is False in PyTorch and was True in a bundle
    (float32's 0.1 is 0.100000001...), so a mask or a decision at such a threshold came out the
    other way. It has no lowering of `fmod.Scalar` at all. Other tensors, and numbers that are not
    Python ints, floats or bools (a traced host float), keep the op.

    >>> gt = with_number_in_its_dtype(aten.gt.Tensor)
    >>> gt(torch.tensor([0.1, 0.2]), 0.1).tolist(), gt(torch.tensor([1, 2]), 1)
    ([False, True], NotImplemented)
    """

    def rewrite(input: torch.Tensor, other: Any) -> Any:
        if not input.dtype.is_floating_point or type(other) not in (int, float, bool):
            return NotImplemented
        return with_tensor(input, aten.scalar_tensor(other, dtype=input.dtype, device=input.device))

    rewrite.__name__ = f"{with_tensor.__name__.split('.')[0]}_with_number_in_its_dtype"
    return rewrite


def edge_pad_of_run_time_size(reflect: bool, original: Any) -> Any:
    """Reflection (`reflect`) or replication padding of an input whose padded sizes are known only at
    run time, as `edge_padded`; other calls go to `original` (torch-mlir's decomposition).

    That decomposition subtracts an index tensor from the size, which the importer wrote as
    `aten.sub.Tensor` of an int (an invalid op; the compiled host's inlining failed on it), and
    torch-mlir's own kernel of the op failed to compile over run-time sizes."""

    def rewrite(input: torch.Tensor, padding: Sequence[int]) -> Any:
        padded = input.shape[input.dim() - len(padding) // 2 :]
        if all(isinstance(size, int) for size in padded) or not all(isinstance(pad, int) for pad in padding):
            return original(input, padding) if original is not None else NotImplemented
        return edge_padded(input, padding, reflect)

    rewrite.__name__ = "reflection_pad_of_run_time_size" if reflect else "replication_pad_of_run_time_size"
    return rewrite


def edge_padded(input: torch.Tensor, padding: Sequence[int], reflect: bool) -> torch.Tensor:
    """`input` padded by reflection (`reflect`) or replication: each padded dim gathered at the
    indices the mode reads, computed with the dim's size as a 0-d tensor. Replication is the clamp
    every gather's index gets (`index_clamping.index_select_in_range`, which the table applies to
    the gather here too); a reflection by at least the size, which PyTorch refuses, is refused on
    the host before the segment runs (`guards.py`).

    >>> x = torch.arange(5.0).reshape(1, 1, 5)
    >>> edge_padded(x, [2, 1], True).tolist(), torch.nn.functional.pad(x, (2, 1), mode="reflect").tolist()
    ([[[2.0, 1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 3.0]]], [[[2.0, 1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 3.0]]])
    """
    out = input
    for axis in range(len(padding) // 2):  # padding is (last dim's before, after, the dim before it's, ...)
        before, after = padding[2 * axis], padding[2 * axis + 1]
        dim = input.dim() - 1 - axis
        size = input.shape[dim]
        last = aten.scalar_tensor(size - 1, dtype=torch.int64)
        index = torch.arange(-before, size + after, dtype=torch.int64)
        if reflect:
            index = last - aten.abs(last - aten.abs(index))
        out = aten.index_select(out, dim, index)  # replication: clamped to the dim, as every gather is
    return out


def roll_of_the_flattened(input: torch.Tensor, shifts: Sequence[int], dims: Sequence[int] = ()) -> Any:
    """`torch.roll(x, k)` without dims rolls the flattened tensor: as that roll, on dim 0 of the
    flattened tensor, viewed back. torch-mlir lowers only a roll with one dim per shift ("list sizes
    of shifts and dims are not the same"); a roll with dims keeps the op.

    >>> x = torch.arange(6).reshape(2, 3)
    >>> roll_of_the_flattened(x, [2]).tolist() == torch.roll(x, 2).tolist()
    True
    """
    if len(dims) or len(shifts) != 1:
        return NotImplemented
    return aten.roll(input.reshape(-1), list(shifts), [0]).reshape(input.shape)


def repeat_interleave_of_output_size(repeats: torch.Tensor, output_size: Any = None) -> Any:
    """`torch.repeat_interleave(repeats, output_size=n)`: each position's index, counted as the starts
    of the repeats at or before it (a scatter of ones at the starts, then a running sum). PyTorch's
    decomposition searches the running sum (`searchsorted`), which torch-mlir does not lower. Without
    an output size the op keeps its own form (the exporter gives every data-made one a size:
    `specialize/selections.py`).

    >>> repeat_interleave_of_output_size(torch.tensor([2, 0, 3, 1]), 6).tolist()
    [0, 0, 2, 2, 2, 3]
    """
    if output_size is None or repeats.dim() != 1:
        return NotImplemented
    ends = aten.cumsum(repeats, 0)
    starts = ends - repeats
    marks = aten.zeros([output_size + 1], dtype=torch.int64, device=repeats.device)
    marks = aten.scatter_add(marks, 0, starts.to(torch.int64), aten.ones_like(starts, dtype=torch.int64))
    return aten.cumsum(aten.slice(marks, 0, 0, output_size), 0) - 1


def masked_scatter_by_gather(input: torch.Tensor, mask: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """`input.masked_scatter(mask, source)` (a vision-language model's image features written into
    its token embeddings at the image tokens): the source element each selected position takes is
    the count of selected positions before it, a running sum of the flat mask; a gather and a
    `where` write them. torch-mlir has no lowering of the op. Where the source has fewer elements
    than the mask selects, which PyTorch refuses, the last ones repeat.

    >>> x, m = torch.zeros(2, 3), torch.tensor([[True, False, True], [False, True, False]])
    >>> masked_scatter_by_gather(x, m, torch.arange(1.0, 7.0).reshape(2, 3)).tolist()
    [[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]
    """
    flat_mask = aten.expand(mask, list(input.shape)).reshape(-1)
    flat_source = source.reshape(-1)
    positions = aten.cumsum(flat_mask.to(torch.int64), 0) - 1  # clamped to the source by the gather
    picked = aten.index_select(flat_source, 0, positions)
    return aten.where.self(flat_mask, picked, input.reshape(-1)).reshape(input.shape)


def fmod_of_float32_in_float64(input: torch.Tensor, other: torch.Tensor) -> Any:
    """`fmod` of float32 tensors, computed in float64 and rounded back. IREE 3.13 computes a float
    remainder as a - b * trunc(a / b) in the operands' type, where a / b may round to the next
    integer: `torch.fmod(3.0, 0.3)` gave -1.2e-7, PyTorch (C's fmod, exact) 0.2999999. Of float32
    operands, the float64 quotient is exact enough for trunc wherever |a / b| < 2^29, and b times it
    and the difference are exact. Other dtypes keep the op.

    >>> fmod_of_float32_in_float64(torch.tensor([3.0, -3.0]), torch.tensor([0.3, 0.3])).tolist()
    [0.2999998927116394, -0.2999998927116394]
    """
    if input.dtype != torch.float32 or not isinstance(other, torch.Tensor) or other.dtype != torch.float32:
        return NotImplemented
    return aten.fmod.Tensor(input.to(torch.float64), other.to(torch.float64)).to(torch.float32)


def _in_float32_for_float64(op: Any, original: Any) -> Any:
    """`op` of a float64 tensor as `op` of it in float32, widened; other dtypes as before."""

    def decompose(x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if x.dtype != torch.float64:
            return original(x, *args, **kwargs) if original is not None else NotImplemented
        return op(x.to(torch.float32), *args, **kwargs).to(torch.float64)

    return decompose


def _logarithm_in_base(base: float) -> Any:
    """`log2` / `log10` as the natural log times a constant: IREE lowers them to libm's `log2`,
    `log10` and `log10f`, which iree-lld cannot resolve; its `log` is inline code, in float64 too."""
    scale = 1.0 / math.log(base)

    def decompose(x: torch.Tensor) -> torch.Tensor:
        if not x.dtype.is_floating_point:
            return NotImplemented
        return aten.mul.Scalar(aten.log.default(x), scale)

    return decompose


def _without_reentry(rewrite: Any, original: Any) -> Any:
    """`rewrite` as a table entry; the op it calls inside goes to `original` (the op's own decomposition, if any)."""

    def rewritten(*args: Any, **kwargs: Any) -> Any:
        global _clamping
        if _clamping:
            return original(*args, **kwargs) if original is not None else NotImplemented
        _clamping = True
        try:
            return rewrite(*args, **kwargs)
        finally:
            _clamping = False

    rewritten.__name__ = rewrite.__name__
    rewritten.__doc__ = rewrite.__doc__
    return rewritten
