"""Winograd's minimal filtering for 3x3 stride-1 convolutions, F(2x2, 3x3) and F(4x4, 3x3), written
as aten ops IREE compiles well: strided slices, and adds or small matmuls, for the input and output
transforms, one batched matmul for the products.

For output tiles of m x m pixels and a 3x3 filter, each (m + 2) x (m + 2) input tile d becomes
`V = B^T d B`, each filter g becomes `U = G g G^T` (a constant: the exporter computes it),
the product is `M[a, b] = V[a, b] @ U[a, b]` over the channels for each of the (m + 2)^2 tile
positions (a batched matmul [(m+2)^2] x [tiles, C] x [C, F]), and the output tile is `A^T M A`:
(m + 2)^2 / 9 of the direct convolution's multiplications per output pixel (F(2x2, 3x3): 16 for 36,
F(4x4, 3x3): 36 for 144) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2015).

Example:
    >>> x, w = torch.randn(1, 8, 9, 9), torch.randn(16, 8, 3, 3)
    >>> out = convolution_as_winograd(x, w, None, [1, 1], output_tile=2)
    >>> torch.allclose(out, torch.nn.functional.conv2d(x, w, padding=1), atol=1e-4)
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import torch

from . import cpu_features, data_tiling

aten = torch.ops.aten

# (B^T, G, A^T) for output tiles of 2 and 4 pixels and a 3-tap filter. F(2x2, 3x3) is Lavin and
# Gray's. F(4x4, 3x3) interpolates at 0, 1, -1, 1/2, -2 and infinity, not at Lavin and Gray's 0, 1,
# -1, 2, -2: the Cook-Toom matrices of those points (each row of B^T scaled to small integers and G
# divided by the same factor, since the exporter applies G in float64), as Barabasz, Anderson,
# Soodhalter and Gregg found most accurate ("Error analysis and improving the accuracy of Winograd
# convolution for deep neural networks", ACM TOMS 2020). Measured in float32 against the float64
# convolution, largest error over the largest output, on ResNet's shapes (64 channels at 56x56, 128
# at 28x28, 256 at 14x14): 2.6, 2.5 and 2.3e-6 against 7.2, 5.9 and 5.4e-6 with Lavin and Gray's
# points, so on the level of F(2x2, 3x3) and of the direct convolution (0.8-2.2e-6), where Lavin
# and Gray's reached the 1e-5 contract (`test_convolution_strategy`). Those are with the transforms as
# sums of slices; with the input transform as matmuls (`_input_transform_by_matmuls`), in PyTorch:
# 2.6, 2.9 and 1.8e-6 against 5.3, 6.9 and 5.6e-6.
TRANSFORMS: dict[int, tuple[list[list[Fraction]], list[list[Fraction]], list[list[Fraction]]]] = {
    2: (
        [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [
            [1, 0, 0],
            [Fraction(1, 2), Fraction(1, 2), Fraction(1, 2)],
            [Fraction(1, 2), Fraction(-1, 2), Fraction(1, 2)],
            [0, 0, 1],
        ],
        [[1, 1, 1, 0], [0, 1, -1, -1]],
    ),
    4: (
        [
            [2, -3, -4, 3, 2, 0],
            [0, -2, 1, 5, 2, 0],
            [0, 2, -5, 1, 2, 0],
            [0, -2, -1, 2, 1, 0],
            [0, 1, -2, -1, 2, 0],
            [0, 2, -3, -4, 3, 2],
        ],
        [
            [Fraction(1, 2), 0, 0],
            [Fraction(1, 6), Fraction(1, 6), Fraction(1, 6)],
            [Fraction(-1, 6), Fraction(1, 6), Fraction(-1, 6)],
            [Fraction(-16, 15), Fraction(-8, 15), Fraction(-4, 15)],
            [Fraction(1, 30), Fraction(-1, 15), Fraction(2, 15)],
            [0, 0, Fraction(1, 2)],
        ],
        [
            [1, 1, 1, 1, 1, 0],
            [0, 1, -1, Fraction(1, 2), -2, 0],
            [0, 1, 1, Fraction(1, 4), 4, 0],
            [0, 1, -1, Fraction(1, 8), -8, 1],
        ],
    ),
}


def _combination(coefficients: Sequence[Fraction | int], terms: Sequence[torch.Tensor]) -> torch.Tensor:
    """sum(c * t), skipping zero coefficients and multiplying only where |c| != 1."""
    out = None
    for coefficient, term in zip(coefficients, terms, strict=True):
        if coefficient == 0:
            continue
        if out is None:
            out = term if coefficient == 1 else term * float(coefficient)
        elif coefficient == 1:
            out = out + term
        elif coefficient == -1:
            out = out - term
        else:
            out = out + term * float(coefficient)
    assert out is not None
    return out


def transformed_filter(weight: torch.Tensor, output_tile: int) -> torch.Tensor:
    """`G g G^T` of every [F, C, 3, 3] filter, as [(m+2)^2, C, F], computed in float64 and returned
    in the filter's dtype: one matmul of the Kronecker product of G with itself by the filter read
    as [9, C * F].

    The exporter computes it once (`lower._segment_graph`) and stores the result as the constant:
    written as aten ops on the filter, IREE hoists and evaluates only the parts that grow by less
    than 1 MiB (`--iree-opt-const-expr-max-size-increase-threshold`), and then copies them into
    one tensor at every call, besides storing 5 of the filter's 9 taps (ResNet-18's bundle 44.7 ->
    91.5 MiB, its export 27 -> 162 s).

    >>> transformed_filter(torch.ones(8, 4, 3, 3), 2).shape
    torch.Size([16, 4, 8])
    """
    out_channels, channels = weight.shape[:2]
    _, g, _ = TRANSFORMS[output_tile]
    g64 = torch.tensor([[float(value) for value in row] for row in g], dtype=torch.float64)
    hwcf = weight.detach().to(torch.float64).permute(2, 3, 1, 0).reshape(9, channels * out_channels)
    products = torch.kron(g64, g64) @ hwcf
    return products.reshape(len(g) * len(g), channels, out_channels).to(weight.dtype).contiguous()


def convolution_as_winograd(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    padding: Sequence[int],
    output_tile: int = 2,
) -> torch.Tensor:
    """A 3x3 stride-1 convolution without groups or dilation as Winograd's F(m x m, 3 x 3), m =
    `output_tile` (2 or 4): `convolution_with_transformed_filter` of the transformed `weight`."""
    transformed = transformed_filter(weight, output_tile)
    return convolution_with_transformed_filter(input, transformed, bias, padding, output_tile)


def convolution_with_transformed_filter(
    input: torch.Tensor,
    transformed: torch.Tensor,
    bias: torch.Tensor | None,
    padding: Sequence[int],
    output_tile: int,
) -> torch.Tensor:
    """A 3x3 stride-1 convolution of an NCHW input without groups or dilation as Winograd's
    F(m x m, 3 x 3), m = `output_tile` (2 or 4), from the filter `transformed_filter` made, in NHWC
    order, returning NCHW (contiguous) like the op it replaces. `lower._segment_graph` calls it in
    place of a convolution, and torch.export traces it into aten ops.

    The input is padded to whole tiles; tile (t, u)'s row i is the padded input's row t*m + i, so
    each of the m+2 rows of every tile is one strided slice (stride m) of the padded input, and
    each of its columns one of the columns. Both transforms go one direction at a time. The input
    transform is sums of those slices for F(2x2, 3x3), two matmuls by B^T for F(4x4, 3x3)
    (`_input_transform_by_matmuls`); the output transform is sums, but for F(4x4, 3x3)'s rows, a
    matmul by A^T (`_output_transform`).
    """
    batch, channels, height, width = input.shape
    m = output_tile
    pad_h, pad_w = padding
    out_h, out_w = height + 2 * pad_h - 2, width + 2 * pad_w - 2
    tiles_h, tiles_w = -(-out_h // m), -(-out_w // m)
    nhwc = aten.permute(input, [0, 2, 3, 1])
    bottom, right = tiles_h * m + 2 - height - pad_h, tiles_w * m + 2 - width - pad_w
    padded = aten.constant_pad_nd(nhwc, [0, 0, pad_w, right, pad_h, bottom], 0.0)
    transform = _input_transform_by_matmuls if m == 4 else _input_transform_by_slices
    positions = transform(padded, m, tiles_h, tiles_w)  # [(m+2)^2, tiles, C]
    products = aten.bmm(positions, _padded_view(transformed, positions.shape[1]))  # [(m+2)^2, tiles, F]
    out = _output_transform(products, m, batch, tiles_h, tiles_w)  # [N, tiles_h * m, tiles_w * m, F]
    out = aten.slice(aten.slice(out, 1, 0, out_h), 2, 0, out_w)
    if bias is not None:
        out = out + bias
    return aten.permute(out, [0, 3, 1, 2]).contiguous()


def _input_transform_by_slices(padded: torch.Tensor, m: int, tiles_h: int, tiles_w: int) -> torch.Tensor:
    """`B^T d B` of every tile of the padded NHWC input, [(m+2)^2, tiles, C], as sums of strided
    slices: the rows' slices, then their columns'. Copies and adds IREE fuses and vectorizes, where
    unfolding tiles by index would be a gather; F(2x2, 3x3)'s take 2 terms a sum."""
    batch, channels = padded.shape[0], padded.shape[3]
    b_t = TRANSFORMS[m][0]
    alpha = m + 2
    rows = _tile_slices(padded, 1, m, tiles_h)
    positions = []
    for a in range(alpha):
        row = _combination(b_t[a], rows)  # [N, tiles_h, padded width, C]
        columns = _tile_slices(row, 2, m, tiles_w)
        for b in range(alpha):
            positions.append(_combination(b_t[b], columns).reshape(1, batch * tiles_h * tiles_w, channels))
    return aten.cat(positions, 0)


def _input_transform_by_matmuls(padded: torch.Tensor, m: int, tiles_h: int, tiles_w: int) -> torch.Tensor:
    """`B^T d B` of every tile of the padded NHWC input, [(m+2)^2, tiles, C], as two matmuls by B^T:
    the columns' strided slices stacked, times B^T, then the result's rows' slices stacked, times B^T.

    F(4x4, 3x3)'s sums take 5 terms, and IREE splits the slices-and-sums form into about 75
    dispatches a convolution, the slices copied out one at a time; this form is 15. With the output
    transform's, their time in one convolution between two 1x1 ones, AVX2 (znver3, one thread,
    IREE's profile, 3 rounds): 64 channels at 56x56 0.83-1.01 -> 0.67-0.78 ms, 128 at 28x28
    0.64-0.66 -> 0.45-0.48 ms. F(2x2, 3x3)'s sums take 2 terms; with both its transforms as
    matmuls it was slower (256 at 14x14 0.17-0.25 -> 0.24-0.27 ms, 512 at 7x7 0.10-0.16 -> 0.16-0.21)."""
    batch, height, channels = padded.shape[0], padded.shape[1], padded.shape[3]
    b_t = _matrix(TRANSFORMS[m][0], padded.dtype)
    alpha = m + 2
    columns = aten.stack(_tile_slices(padded, 2, m, tiles_w), 0)
    by_columns = aten.mm(b_t, columns.reshape(alpha, -1)).reshape(alpha, batch, height, tiles_w, channels)
    rows = aten.stack(_tile_slices(by_columns, 2, m, tiles_h), 0)
    return aten.mm(b_t, rows.reshape(alpha, -1)).reshape(alpha * alpha, batch * tiles_h * tiles_w, channels)


def _output_transform(products: torch.Tensor, m: int, batch: int, tiles_h: int, tiles_w: int) -> torch.Tensor:
    """`A^T M A` of the products of every tile position, as the output [N, tiles_h * m, tiles_w * m,
    F]: the positions' products combined over the tile's rows (F(4x4, 3x3): one matmul by A^T;
    F(2x2, 3x3): sums of 2 terms), then sums over its columns, each output pixel stacked into place.

    The columns' sums stay sums: as a second matmul by A^T the pixels need a transpose into place
    after it, which IREE did not cancel against the NCHW transpose after the convolution: in
    ResNet-18, where one Winograd convolution feeds the next, two dispatches then wrote their
    output both NHWC and NCHW (1.08 and 0.84 ms in IREE's profile), and the model was 1.019x the
    time of the sums (`benchmarks/convolution_forms.py`, 11 rounds). The rows' matmul against their
    sums, whole processes of `iree-benchmark-module`, 7 alternating pairs, median ratio: one
    convolution between two 1x1 ones 0.955 (64 channels at 56x56) and 0.972 (128 at 28x28),
    ResNet-18 0.988."""
    a_t = TRANSFORMS[m][2]
    alpha, channels = m + 2, products.shape[2]
    if m == 4:
        by_rows = aten.mm(_matrix(a_t, products.dtype), products.reshape(alpha, -1))
        by_rows = by_rows.reshape(m, alpha, batch, tiles_h, tiles_w, channels)
        partial = [aten.select(by_rows, 0, p) for p in range(m)]
    else:
        products = products.reshape(alpha, alpha, batch, tiles_h, tiles_w, channels)
        partial = [_combination(a_t[p], [aten.select(products, 0, a) for a in range(alpha)]) for p in range(m)]
    out_rows = []
    for p in range(m):
        pixels = [_combination(a_t[q], [aten.select(partial[p], 0, b) for b in range(alpha)]) for q in range(m)]
        out_rows.append(aten.stack(pixels, 3))  # [N, tiles_h, tiles_w, m, F]
    return aten.stack(out_rows, 2).reshape(batch, tiles_h * m, tiles_w * m, channels)


def _tile_slices(tensor: torch.Tensor, dim: int, m: int, tiles: int) -> list[torch.Tensor]:
    """The m + 2 strided slices of `tensor` along `dim` (stride m) whose slice i holds position i of
    every tile: tile t's position i is `tensor`'s index t * m + i."""
    return [aten.slice(tensor, dim, i, i + m * (tiles - 1) + 1, m) for i in range(m + 2)]


def _matrix(rows: list[list[Fraction]], dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor([[float(value) for value in row] for row in rows], dtype=dtype)


def output_tile(in_channels: int, out_channels: int, spatial: Sequence[Any]) -> int:
    """The Winograd output tile (2 or 4) a 3x3 stride-1 convolution without groups or dilation, of
    a constant filter, takes on the CPU `llvm-cpu` compiles for (this machine's), or 0 for the form
    `decompositions.convolution_channels_last` picks otherwise (`lower._segment_graph` asks).

    Without AVX-512, where `decompositions._im2col_wins` writes ResNet's 3x3 convolutions as
    im2col + matmul, F(2x2, 3x3) runs them 1.7-2.7x faster over two runs (code for znver3, one thread,
    `benchmarks/conv_shapes.py`, as GFLOP/s of the direct convolution's operations: layer1 49 ->
    89, layer2 42 -> 106, layer3 37 -> 101, layer4 24 -> 52), with a largest error of 4-8e-7 of
    the largest output where the direct convolution's is 0.8-2.2e-6. It takes the same shapes as
    im2col (`outgrows_direct`), so the zoo's convolutions (at most 64 channels at 8x8) keep their
    direct form: there one convolution measured faster too (64 channels at 8x8: 19 -> 53), but not
    whole models.

    From 28x28 pixels (`F4_MIN_PIXELS`) the tile is 4. One convolution alone, F(2x2, 3x3) against
    F(4x4, 3x3) at these points (`benchmarks/conv_shapes.py --rounds 7`, GFLOP/s as above): layer1
    95 -> 125, layer2 98 -> 139, layer3 (14x14) 134 -> 161, layer4 (7x7) 88 -> 63. In ResNet-50,
    F(4x4, 3x3) from 14x14 measured no faster than from 28x28 (whole processes of
    `iree-benchmark-module`, 7 alternating pairs, median ratio 1.016, 0.86-1.05): at 14x14 its batch
    matmul has 16 rows, a quarter of F(2x2, 3x3)'s. Whole models, F(4x4, 3x3) from 28x28 against
    F(2x2, 3x3) everywhere (`benchmarks/convolution_forms.py --compare winograd-f4`, CPU time, 9
    rounds, median ratios): ResNet-18 0.933, ResNet-50 0.970, the early-exit ResNet-50 0.948; their
    largest error against the float64 model 1.28e-6 and 1.32e-5 for ResNet-18 and -50, against
    0.97e-6 and 1.17e-5 before (PyTorch's own float32 error 1.07e-6 and 8.3e-6). With AVX-512 (an
    Intel Xeon, one thread, in the wide register tiles of `data_tiling`) the same tiles run layer2-4
    at 300, 240 and 161 GFLOP/s where IREE's direct convolution ran 139, 64 and 38 (README,
    performance), so AVX-512 takes them too.

    >>> output_tile(256, 256, [14, 14]) == (0 if cpu_features.direct_convolutions_fast() else 2)
    True
    >>> output_tile(64, 64, [56, 56]) == (0 if cpu_features.direct_convolutions_fast() else 4)
    True
    >>> output_tile(64, 64, [8, 8])
    0
    """
    if cpu_features.direct_convolutions_fast() or not all(isinstance(size, int) for size in spatial):
        return 0
    pixels = spatial[0] * spatial[1]
    if not outgrows_direct(in_channels, pixels):
        return 0
    return 4 if pixels >= F4_MIN_PIXELS else 2


# The least pixels a convolution has for F(4x4, 3x3) (`output_tile`).
F4_MIN_PIXELS = 28 * 28


def _padded_view(transformed: torch.Tensor, tiles: int) -> torch.Tensor:
    """The transformed filter [alpha^2, C, F] as the batch matmul reads it: under the AVX2 matmul rule,
    stored with zero columns more where its rows lie a multiple of 1 KiB apart and read through a
    slice of its F true columns, as matmul weights are (`data_tiling.padded_columns`,
    `decompositions._matmul_with_bias`): the rows then fall in different L1 sets. ResNet-18, AVX2,
    one thread, ms per call of its batch matmuls (IREE's profile, two runs each): 16 x 16x512 by 512x512
    (layer4) 7.27 / 7.62 -> 6.34 / 6.23, 16 x 49x256 by 256x256 (layer3) 3.97 / 4.11 -> 3.49 / 3.45;
    the whole model 34.8 / 35.1 -> 33.4 / 32.6 ms. A filter the batch matmul reads as panels
    (`data_tiling.reads_panels`: ResNet's, since) is not padded: its panels share no L1 sets."""
    channels, columns = transformed.shape[1], transformed.shape[2]
    if not cpu_features.register_tile_rule():
        return transformed
    padded = data_tiling.padded_columns(tiles, channels, columns, "linalg.batch_matmul")
    if padded == columns:
        return transformed
    return aten.slice(aten.constant_pad_nd(transformed, [0, padded - columns]), 2, 0, columns)


def outgrows_direct(in_channels: int, pixels: int) -> bool:
    """Whether a convolution of `in_channels` input channels and `pixels` output pixels takes
    Winograd (3x3, stride 1) or im2col + matmul (`decompositions._im2col_wins`) on a CPU where IREE's
    direct convolution is slow (AVX2 without AVX-512): from 128 input channels, from 64 at 14x14
    pixels, from 32 at 28x28.

    At every shape measured the direct form lost (`benchmarks/conv_shapes.py`, AVX2, one thread,
    GFLOP/s, direct / im2col + matmul / Winograd F(2x2, 3x3)): 64 -> 128 channels, stride 2, 28x28
    out (ResNet-18's layer2) 19.7 / 73.3 / -; 64 at 28x28 24.1 / 73.3 / 109.5; 64 at 14x14 4.2 /
    67.2 / 98.5; 32 at 56x56 24.1 / 63.6 / 85.5; 32 at 28x28 23.4 / 61.1 / 75.5; and at the zoo's
    sizes too (64 at 8x8 22.7 / 58.5, 32 at 16x16 22.5 / 50.6 / 58.3, 16 at 32x32 22.4 / 41.3 /
    41.4). The bounds stop short of the zoo's convolutions (at most 64 channels at 8x8, 32-48 at
    16x16), whose whole models were not measured in the other forms; IREE's own im2col of every
    convolution made SDN-ResNet-56 1.7x slower.

    >>> outgrows_direct(64, 28 * 28), outgrows_direct(64, 8 * 8), outgrows_direct(32, 16 * 16)
    (True, False, False)
    """
    return in_channels >= 128 or (in_channels >= 64 and pixels >= 14 * 14) or (in_channels >= 32 and pixels >= 28 * 28)
