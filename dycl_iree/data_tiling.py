"""Which matmuls IREE data-tiles on an x86 CPU with AVX2 (those with few rows and a large weight), and
the register tile of the others (wider with AVX-512).

IREE's data tiling (`--iree-opt-data-tiling`) packs a matmul's operands into tiles its mmt4d code
reads in order; a constant weight is packed at compile time, the activations at each call. Turned
on for a whole module it made ResNet-50 at 224x224 12% faster (one thread, CPU time, same process,
alternating: 114.8 -> 100.6 ms) but MobileNetV2 10% slower (11.8 -> 13.0 ms) and left ResNet-18
unchanged (45.2 / 45.3 ms). Per matmul (one `x @ w` + ReLU, same measurement, AVX-512, Zen 4):
with at most 196 rows (a 1x1 convolution at 14x14 or 7x7, batch 1) and a weight of 2^19 elements
(2 MiB, twice Zen 4's L2) or more, data tiling is 1.14-1.63x faster (ResNet-50's 49x1024 by
1024x2048: 38 -> 62 GFLOP/s, 196x512 by 512x1024: 63 -> 88); with more rows, or a smaller weight,
it is 0.73-1.04x (49x320 by 320x1280: 0.73x; 3136x64 by 64x64: 0.86x), since packing the
activations costs more than the packed weight saves.

With AVX2 only (measured on a Zen 3 EPYC without AVX-512, code for the host, one thread, CPU time, same
process, alternating, 5 rounds; README, performance) the same holds from half the weight, 2^18
elements (1 MiB, twice Zen 3's 512 KiB L2): ResNet-50's 196x256 by 256x1024 20.5 -> 42.3 GFLOP/s,
196x512 by 512x1024 22.4 -> 45.1, 49x2048 by 2048x512 18.0 -> 31.4, its classifier (1x2048 by
2048x1000) 1.5 -> 8.9; at 3136 and 784 rows data tiling was 0.72-1.13x. That was against IREE's
own tiles; against the 6 x 16 register tile (below) it loses from 48 rows up once the weight's rows
are padded apart and deep reductions run in cache blocks (`AVX2_MAX_ROWS`, `padded_columns`,
`REGISTER_TILE_BLOCKED_FROM`; ResNet-50's late 1x1 convolutions 1.0-1.4x, README), so with AVX2
only the matmuls of fewer than 48 rows are data-tiled (and, by their weight alone, those whose rows
are known only at run time: `DYNAMIC_ROWS`). The other matmuls IREE
tiles in registers as 8 rows x 8 columns: 8 of AVX2's 16 vector registers accumulate, and each
step of the reduction loads one vector of the weight for 8 broadcasts of the activations. Those
of at least 48 rows and 16 columns and depth, and the batch matmuls of 16 rows or more and that
size (Winograd's, `winograd.py`), get 6 rows x 16 columns instead (12 accumulators, two weight
vectors for 6 broadcasts, as BLAS kernels for AVX2 do), through a `compilation_info` on the op:
3136x256 by 256x64 30.3 -> 35.7 GFLOP/s, 3136x64 by 64x256 35.0 -> 40.5, 784x512 by 512x128
35.8 -> 40.8, 196x1024 by 1024x256 29.4 -> 48.8 (PyTorch 31.3, 34.5, 42.1, 53.3), Winograd's
16 x 49x256 by 256x256 28.9 -> 38.1 (PyTorch 36.5). The bound on columns and depth was 64; from
16 it takes MobileNetV2's 1x1 convolutions of 16-32 channels at 112x112 to 28x28 too, where IREE's
8 x 8 tile ran 0.76-0.99x as fast as 6 x 16 (12544x16 by 16x96 26.9 -> 32.7 GFLOP/s, 3136x24 by
24x144 30.0 -> 39.3, 784x192 by 192x32 50.3 -> 63.4; 4 x 16 within 10% of it, 8 x 8, 12 x 8 and
4 x 24 slower; `benchmarks/conv_shapes.py`). Smaller matmuls keep IREE's choice. Of the
register-tiled ones, those with a large weight read it as panels of 16 columns (`reads_panels`),
which the spec packs; the rest read it as stored, padded where its rows would share L1 sets.

The spec is a transform-dialect script, run by IREE's preprocessing
(`--iree-preprocessing-transform-spec-filename`, or with AVX2 in the preprocessing pipeline, ahead
of the pass that turns the panels' unpacks into reshapes): it marks the matmuls to data-tile with IREE's
`iree.opt.data_tiling` hint, and marks every function too: IREE's own hint pass
(`iree-dispatch-creation-annotate-data-tiling-hints`) leaves a function alone once any op in it
carries the hint, instead of marking all its matmuls. The weight size is matched as "K >= 2^a and
N >= 2^(19-a)" (18 with AVX2) for some a, since the spec can compare sizes but not multiply them:
a weight of 2^19 elements or more whose sides are powers of two always matches, others may not.

With AVX-512 (32 vector registers of 16 floats) the same rule holds with wider register tiles:
4 rows x 64 columns for matmuls whose columns are a multiple of 64, 6 x 32 for the other multiples
of 32, 6 x 16 for the rest, and 7 rows in place of 6 where 7 divides the rows and a workgroup
(`WIDE_REGISTER_TILES`, `DIVIDING_WORKGROUP_ROWS`); weights are read as panels from 2^15 elements
and 32 columns, odd multiples of 32 by the 7 x 32 tile (`WIDE_PANEL_COLUMNS`,
`WIDE_ODD_PANEL_TILES`), and every reduction over panels is whole (`panel_blocks`: cache blocks
measured slower since the tiles above). That rule replaced AVX-512's own, which
data-tiled the matmuls of at most 196 rows and a weight of 2^19 elements or more (the numbers
above, measured on an AMD Zen 4) and left the rest, and the convolutions, to IREE: on an Intel
Xeon (Sapphire Rapids, one thread, `benchmarks/convolution_forms.py --compare avx512`, CPU time, 9
rounds) ResNet-18 ran 60.06 -> 31.85 ms with the convolutions as Winograd and im2col and the 6 x 16
tile, 22.75 with the wide tiles; ResNet-50 99.94 -> 71.80 -> 54.89, MobileNetV2 6.11 -> 7.16 -> 6.13
(README, performance, "AVX-512 on an Intel Xeon"; Zen 4 not measured again).

Only for `llvm-cpu` on this machine's x86 CPU (`compile.target_flags`), where it was measured;
cross-compiled targets keep their flags.

Example:
    >>> flags = compile_flags()
    >>> flags[0]
    '--iree-opt-data-tiling'
    >>> spec = flags[1].split("transform-spec-path=", 1)[1].split("}", 1)[0]
    >>> "linalg.matmul" in Path(spec).read_text()
    True
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

MAX_ROWS = 196  # a 1x1 convolution at 14x14, batch 1
MIN_WEIGHT_LOG2 = 19  # 2^19 float32 elements: 2 MiB, twice Zen 4's L2
AVX2_MIN_WEIGHT_LOG2 = 18  # 1 MiB, twice Zen 3's L2
HINT = "iree.opt.data_tiling"
FLAG = "--iree-opt-data-tiling"
# The register tile: per op and row range (M), the rows each workgroup takes (every row at once up
# to 96, so that 49 rows are not 48 and a workgroup of one row; 48 from there), then 6 x 16 in
# registers with a reduction step of 8, through IREE's own pipeline. Batch matmuls from 16 rows:
# Winograd's at 7x7 (16 x 16x512 by 512x512) 24.5 -> 28.6 GFLOP/s (7 rounds).
REGISTER_TILE_ROWS = {
    "linalg.matmul": {(48, 96): 96, (97, None): 48},
    "linalg.batch_matmul": {(16, 96): 96, (97, None): 48},
}
# A matmul of more rows than one workgroup takes whose rows are a multiple of one of these takes
# workgroups of that many rows instead (the first that divides them and holds whole register tiles),
# so that no workgroup is a partial one, whose rows IREE peels: ImageNet maps have 2^a x 7^2 pixels
# (12544, 3136, 784, 196), which 48 never divides. Per matmul + residual + ReLU (AVX-512, 4 x 64,
# `iree-benchmark-module`, ms), workgroups of 48 -> 56 rows: 784x128 by 128x512 0.859 -> 0.809,
# 3136x64 by 64x256 0.948 -> 0.919, 784x32 by 32x192 0.081 -> 0.072, the others even; whole models
# as alternating processes (median ratio of pairs): ResNet-50 0.988 and 0.990, MobileNetV2 0.996,
# the early-exit ResNet-50 1.000 and 0.996; 28 rows for 14x14 maps then ResNet-50 0.994 and 0.992
# (even). 49 serves 7-row tiles (`WIDE_REGISTER_TILES`) on rows that 7 x 7 divides and 28 does not.
# A 6-row tile keeps 48: in 56 rows it peels 2 in every workgroup (AVX2, 6 x 16: 3136x256 by 256x64
# 0.905 -> 0.962 ms, 12544x16 by 16x96 0.743 -> 0.787).
DIVIDING_WORKGROUP_ROWS = (56, 28, 49)
REGISTER_TILE_OPS = {"linalg.matmul": 0, "linalg.batch_matmul": 1}  # op: its leading batch dims
REGISTER_TILE_MIN_SIZE = 16  # the least depth (K) and columns (N) that take the register tile
REGISTER_TILE = (6, 16)  # rows x columns in registers
REDUCTION_STEP = 8  # the depth (K) of one step of the register tile's reduction
# With AVX-512 (32 vector registers of 16 floats) a matmul takes the first of these tiles whose
# columns its columns are a multiple of (a 16-column tile: any), and whose rows its rows and
# workgroups divide (`workgroup_rows`: a 7-row tile only where 7 does); the others REGISTER_TILE. A
# tile of 7 rows where 7 divides the rows, against 6 (`iree-benchmark-module`, ms, MobileNetV2's
# shapes with a ReLU): 49x960 by 960x160 0.130-0.153 -> 0.119, 196x576 by 576x96 0.149-0.156 ->
# 0.140-0.142, 784x192 by 192x32 0.071-0.076 -> 0.068, 3136x96 by 96x24 (7 x 16) 0.177-0.183 ->
# 0.151-0.153, 12544x16 by 16x96 0.691-0.707 -> 0.644-0.701; MobileNetV2 0.971 and 0.957 the time
# (alternating processes, 10 pairs each), ResNet-50 (no such matmul) 1.007 and 0.992, the early-exit
# ResNet-50 0.996 and 1.001.
WIDE_REGISTER_TILES = ((4, 64), (7, 32), (6, 32), (7, 16))
# The columns (N) of a workgroup of a register-tiled matmul: 32 was 0.87-1.10x as fast on ResNet-50's
# 1x1 shapes, 128 and 256 0.81-1.01x, and iree-compile rejects them with blocked reductions ("large
# vector sizes"), `benchmarks/conv_shapes.py`.
REGISTER_TILE_WORKGROUP_COLUMNS = 64
# With AVX2 only the matmuls below the register tile's least rows (48) are data-tiled (its
# classifier, 1x2048 by 2048x1000: 1.5 -> 8.9 GFLOP/s): from 48 rows the 6 x 16 register tile over
# the weight as stored, padded where its rows would share L1 sets (`padded_columns`) and with deep
# reductions in cache blocks, beat IREE's data tiling and its 8 x 8 tile on every late 1x1
# convolution of ResNet-50 but one, where they are even (README, "ResNet-50's late 1x1
# convolutions with AVX2"; the rule before data-tiled up to 196 rows).
AVX2_MAX_ROWS = 47
# A register-tiled reduction of this depth (K) or more runs in cache blocks of REGISTER_TILE_DEPTH,
# so that a workgroup's block of the weight (256 x 64 floats, 64 KiB) stays in L2 across its rows
# (49x2048 by 2048x512: 37.6 -> 44-47 GFLOP/s). 0: never blocked.
REGISTER_TILE_BLOCKED_FROM = 1024
REGISTER_TILE_DEPTH = 256
# With AVX2 the exporter stores a matmul weight whose rows lie a multiple of this many floats (1 KiB)
# apart with 16 zero columns more (`padded_columns`), and reads its true columns through a slice
# (`decompositions.PADDED_WEIGHT_VIEW`): the rows then fall in different L1 sets, and the register
# tile over the padded weight beats data tiling (49x512 by 512x2048: 45.5 -> 64.3 GFLOP/s,
# data-tiled 61.9). From rows 2 KiB apart it was, while the result was sliced instead (a copy, and
# the epilogue out of the matmul's dispatch); read through a slice, rows 1 KiB apart gain too
# (196x1024 by 1024x256 53.5 -> 58.6 GFLOP/s, 784x512 by 512x256 62.5 -> 67.3, 3136x64 by 64x256
# 50.2 -> 52.4, MobileNetV2's 49x320 by 320x1280 53.5 -> 59.1; README). 0: never padded.
PADDED_STRIDE = 256
PADDING = 16  # one register tile's columns
# With AVX2 only, a register-tiled matmul (from 48 rows) whose weight has a multiple of
# REGISTER_TILE_WORKGROUP_COLUMNS columns, at most PANELS_MAX_COLUMNS, and 2^17 elements or more reads
# it as panels of 16 columns, [N / 16, K, 16], each panel's rows one after the other: the spec packs
# the weight (`transform.structured.pack` of N by 16, a constant IREE packs at compile time), and the
# result, [M, N / 16, 16], is the [M, N] it replaces (`iree-global-opt-simplify-pack-unpack` makes
# the unpack a reshape, and PANEL_EPILOGUES keeps the element-wise ops after the matmul in its
# dispatch). A weight read so is not padded (`padded_columns`): its panels share no L1 sets. Per
# shape (Conv2d + ReLU, one thread, AVX2, 7 rounds, GFLOP/s, the weight as stored or padded
# before): 196x1024 by 1024x256 60.4 -> 68.1, 49x512 by 512x2048 76.1 -> 88.0, 49x1024 by
# 1024x2048 63.4 -> 76.0, 49x320 by 320x1280 64.6 -> 75.9, 784x128 by 128x512 67.7 -> 72.3; smaller
# weights or columns that are not a multiple of the workgroup's were slower (3136x256 by 256x64
# 67.8 -> 65.8, 49x960 by 960x160 76.3 -> 54.1; README, "Weight panels").
PANEL = 16
PANELS_MIN_WEIGHT_LOG2 = 17  # 0: no weight is read as panels
PANELS_MAX_COLUMNS = 4096  # the spec matches each multiple of the workgroup's columns up to this
# With AVX-512 a matmul's weight (not a batch matmul's) is read as panels from 2^15 elements and
# from columns that are a multiple of 32, the 7 x 32 tile's: one of a multiple of 64 columns takes
# the 4 x 64 tile over its panels, one of an odd multiple of 32 the first of WIDE_ODD_PANEL_TILES
# whose rows divide its own and its workgroup's (`workgroup_rows`), in workgroups of 64 columns (the
# last of 32). Per matmul in the models' profiles (AVX-512, AMD Zen 4, one thread, ms a call, median
# of 3 profiles in one process, the rule before -> this one): MobileNetV2's 49x960 by 960x160 (two
# of them) 0.361 -> 0.313 (the 4 x 64 tile over its panels: 0.321), 49x576 by 576x160 0.109 ->
# 0.098, 196x384 by 384x96 0.137 -> 0.130, 196x96 by 96x576 (three) 0.620 -> 0.594, 196x576 by
# 576x96 (two) 0.410 -> 0.392; ResNet-50's 784x128 by 128x512 (2^16, four) 2.935 -> 2.856. Whole
# models, wall ms alternating in one process: MobileNetV2 6.632 -> 6.584, ResNet-50 64.62 -> 64.42,
# ResNet-18 21.41 -> 21.57 (its one changed matmul 0.126 -> 0.120; the rest noise). From 2^14 only
# MobileNetV2's 196x64 by 64x384 gained (0.367 -> 0.356). The 7 x 32 tile over panels of a multiple
# of 64 columns was slower (49x320 by 320x1280 0.387 -> 0.420), hence 4 x 64 there. With AVX2 the
# rule above stands (49x960 by 960x160 read as panels was slower).
WIDE_PANEL_COLUMNS = 32
WIDE_PANELS_MIN_WEIGHT_LOG2 = 15
WIDE_ODD_PANEL_TILES = ((7, 32), (6, 32))
# The least weight per batch (each of Winograd's tile positions, `winograd.py`) of a register-tiled
# batch matmul that reads it as panels, [B, N / 16, K, 16], as a matmul's weight is: ResNet's 3x3
# convolutions as Winograd from 64 channels. The filters stream from memory as 4 contiguous panels
# at a time instead of rows 2 KiB apart. Whole models, one thread, CPU time, 9 rounds, on an Intel
# Xeon with AVX-512: ResNet-18 22.30 -> 19.46 ms (ratio 0.884), ResNet-50 55.90 -> 54.70 (0.974);
# code for `znver3` (AVX2) on the same machine, ResNet-18 34.51 -> 28.93 (0.836, 7 rounds). 0: none.
BATCH_PANELS_MIN_WEIGHT_LOG2 = 12
# Whether a matmul whose rows are known only at run time (a decoder's steps so far, a dynamic batch)
# is data-tiled when its weight is as large as the rule's (2^18 elements), as a matmul of few rows
# is: the register tile and the panels need static rows, and IREE 3.13's own tile for them (8 x 8,
# rows peeled) ran the Transformer decoder's (d 512, a few rows a step) at 2-10 GFLOP/s. Measured
# with AVX2 (Zen 3, one thread): the zoo's Transformer at d 512, 6 + 6 layers, 258 -> 151 ms a call
# (`iree-benchmark-module`, greedy decoding of one sentence, median of 3); its matmuls of the steps'
# rows 226 -> 54 ms in IREE's profile. With AVX-512 (an Intel Xeon) the same model went 228.8 ->
# 160.8 ms when AVX-512 took this rule (README, "AVX-512 on an Intel Xeon").
DYNAMIC_ROWS = True
# The least depth whose reduction over panels runs in blocks of REGISTER_TILE_DEPTH; 0: never, as
# measured: a workgroup's panels stay in L2 whole (196x1152 by 1152x256 from im2col 49.0 -> 64.9
# GFLOP/s without blocks, 196x1024 by 1024x512 70.4 -> 76.5; none slower beyond the noise).
PANELS_BLOCKED_FROM = 0
# With AVX-512 (the wide tiles) a reduction over panels could run in blocks of WIDE_PANEL_DEPTH
# from the depth given here, by how many workgroups take the rows (0: never), so that a block's
# panels (32 x 64 floats, 8 KiB) stay in L1 while the workgroup's register tiles pass over them.
# It did, from 256 with one workgroup (at most 96 rows) and from 1024 with several, after a profile
# of ResNet-50 on this Zen 4 machine (blocks of 32 from 256, ms: Winograd's 16 x 16x512 by 512x512
# 3.83 -> 2.89, 49x4608 by 4608x512 2.29 -> 1.73, 49x2048 by 2048x512 1.85 -> 1.50, 196x2304 by
# 2304x256 1.89 -> 1.59; 196x256 by 256x1024 3.58 -> 4.06, hence 1024 with several workgroups).
# Measured again with the tiles since (the 7-row tiles, workgroups that divide the rows, 4 x 64 over
# panels; profiles in the models, ms a call, median of 2-3, one thread, blocks -> whole), every
# reduction ran faster whole: Winograd's 16 x 16x512 by 512x512 3.364 -> 3.087 (ResNet-50) and
# 5.059 -> 4.645 (ResNet-18), 16 x 49x256 by 256x256 5.275 -> 5.127 and 3.161 -> 3.103; ResNet-50's
# 49x4608 by 4608x512 2.339 -> 2.219, 49x2048 by 2048x512 2.094 -> 1.935, 49x1024 by 1024x2048
# 2.195 -> 2.006, 49x512 by 512x2048 (three) 1.067 -> 1.014, 196x1024 by 1024x256 4.691 -> 4.519,
# 196x2304 by 2304x256 2.104 -> 2.033, 196x1024 by 1024x512 1.876 -> 1.808; MobileNetV2's 49x960
# by 960x160 (two) 0.322 -> 0.287, 49x960 by 960x320 0.302 -> 0.283, 49x576 by 576x160 0.099 ->
# 0.087, 49x320 by 320x1280 0.407 -> 0.393. Whole models, wall ms alternating in one process:
# ResNet-18 20.71 -> 19.98 and ResNet-50 63.09 -> 62.24 (Winograd's whole; the matmuls' already),
# ResNet-50 63.10 -> 62.82 (the matmuls' of several workgroups whole; one workgroup's already).
WIDE_PANELS_BLOCKED_FROM = {"one workgroup": 0, "several workgroups": 0}
WIDE_PANEL_DEPTH = 32


def reads_panels(rows: object, depth: int, columns: int, op: str = "linalg.matmul", wide: bool = False) -> bool:
    """Whether the register-tile rule reads the weight of a `rows` x `depth` by `depth` x `columns`
    matmul (`op`; or each batch's of a batch matmul) as panels of 16 columns
    (`PANELS_MIN_WEIGHT_LOG2`, `BATCH_PANELS_MIN_WEIGHT_LOG2`; with AVX-512, `wide`, a matmul's from
    `WIDE_PANELS_MIN_WEIGHT_LOG2` and `WIDE_PANEL_COLUMNS`); a size known only at run time never is.

    >>> reads_panels(196, 1024, 256), reads_panels(49, 960, 160), reads_panels(3136, 256, 64)
    (True, False, False)
    >>> reads_panels(47, 2048, 512), reads_panels(49, 512, 2048)
    (False, True)
    >>> reads_panels(49, 960, 160, wide=True), reads_panels(784, 128, 512, wide=True)
    (True, True)
    """
    least_rows = min(REGISTER_TILE_ROWS[op])[0]
    least_log2, multiple = _panel_bounds(op, wide)
    return (
        bool(least_log2)
        and isinstance(rows, int)
        and rows >= least_rows
        and depth >= REGISTER_TILE_MIN_SIZE
        and columns % multiple == 0
        and columns <= PANELS_MAX_COLUMNS
        and depth * columns >= 1 << least_log2
    )


def _panel_bounds(op: str, wide: bool) -> tuple[int, int]:
    """The least weight (log2 of its elements; 0: none) and the multiple of columns of an `op` whose
    weight is read as panels (`reads_panels`)."""
    if op != "linalg.matmul":
        return BATCH_PANELS_MIN_WEIGHT_LOG2, REGISTER_TILE_WORKGROUP_COLUMNS
    if wide and PANELS_MIN_WEIGHT_LOG2:
        return WIDE_PANELS_MIN_WEIGHT_LOG2, WIDE_PANEL_COLUMNS
    return PANELS_MIN_WEIGHT_LOG2, REGISTER_TILE_WORKGROUP_COLUMNS


def panel_tiles(op: str, wide: bool) -> list[tuple[int, tuple[int, int]]]:
    """(multiple of columns, register tile) of the matmuls `op` whose weight is read as panels, in the
    order the spec tries them: with AVX-512 (`wide`) the 4 x 64 tile for a multiple of 64 columns,
    then, for a matmul's odd multiples of 32 (`WIDE_PANEL_COLUMNS`), `WIDE_ODD_PANEL_TILES`;
    otherwise 6 x 16 for a multiple of the workgroup's columns.

    >>> panel_tiles("linalg.matmul", wide=True)
    [(64, (4, 64)), (32, (7, 32)), (32, (6, 32))]
    >>> panel_tiles("linalg.batch_matmul", wide=True), panel_tiles("linalg.matmul", wide=False)
    ([(64, (4, 64))], [(64, (6, 16))])
    """
    step = REGISTER_TILE_WORKGROUP_COLUMNS
    if not (wide and WIDE_REGISTER_TILES):
        return [(step, REGISTER_TILE)]
    tiles = [(step, WIDE_REGISTER_TILES[0])]
    _, multiple = _panel_bounds(op, wide)
    if multiple < step:
        tiles += [(multiple, tile) for tile in WIDE_ODD_PANEL_TILES]
    return tiles


def padded_columns(rows: object, depth: int, columns: int, op: str = "linalg.matmul", wide: bool = False) -> int:
    """The columns a `depth` x `columns` weight of a matmul (`op`; or each batch's of a
    `linalg.batch_matmul`, Winograd's transformed filter) is stored with under the register-tile
    rule (wider with AVX-512, `wide`), for `rows` rows (a static size from the register tile's least
    rows of that op up: those with fewer, or a size known only at run time, keep IREE's tiles or are
    data-tiled, and read it as it is; a weight read as panels, `reads_panels`, is not padded either).

    >>> padded_columns(3136, 64, 256), padded_columns(49, 512, 2048), padded_columns(1, 64, 256)
    (272, 2048, 256)
    >>> padded_columns(784, 128, 512), padded_columns(784, 128, 512, wide=True)  # 2^16: panels with AVX-512
    (528, 512)
    >>> padded_columns(16, 512, 512, "linalg.batch_matmul"), padded_columns(16, 512, 8192, "linalg.batch_matmul")
    (512, 8208)
    """
    least_rows = min(REGISTER_TILE_ROWS[op])[0]
    if reads_panels(rows, depth, columns, op, wide):
        return columns
    if PADDED_STRIDE and isinstance(rows, int) and rows >= least_rows and columns % PADDED_STRIDE == 0:
        return columns + PADDING
    return columns


def workgroup_rows(op: str, tile_rows: int) -> list[tuple[tuple[int, int | None], int, int]]:
    """Per row range of `op` in REGISTER_TILE_ROWS: (the range, a multiple its rows must be or 0, the
    rows a workgroup takes), in the order the spec tries them: a range of several workgroups first
    with each of DIVIDING_WORKGROUP_ROWS that its rows are a multiple of (those that hold whole
    register tiles of `tile_rows`), then with its own. A tile whose rows do not divide a range's own
    workgroup (7) takes only the matmuls that it and a workgroup divide, or, where one workgroup takes
    every row, whose rows it divides.

    >>> workgroup_rows("linalg.matmul", 4)
    [((48, 96), 0, 96), ((97, None), 56, 56), ((97, None), 28, 28), ((97, None), 0, 48)]
    >>> workgroup_rows("linalg.matmul", 6)
    [((48, 96), 0, 96), ((97, None), 0, 48)]
    >>> workgroup_rows("linalg.matmul", 7)
    [((48, 96), 7, 96), ((97, None), 56, 56), ((97, None), 28, 28), ((97, None), 49, 49)]
    """
    rules = []
    for rows, workgroup in REGISTER_TILE_ROWS[op].items():
        whole_tiles = workgroup % tile_rows == 0
        if rows[0] > workgroup:  # several workgroups
            rules += [(rows, divisor, divisor) for divisor in DIVIDING_WORKGROUP_ROWS if divisor % tile_rows == 0]
            rules += [(rows, 0, workgroup)] if whole_tiles else []
        else:  # one workgroup of every row: of whole tiles where the tile's rows divide them
            rules.append((rows, 0 if whole_tiles else tile_rows, workgroup))
    return rules


def register_tile_info(rows: int, batch_dims: int, tile: tuple[int, int] = REGISTER_TILE, depth: int = 0) -> str:
    """The `compilation_info` of a matmul (`batch_dims` 0) or batch matmul (1) whose workgroups take
    `rows` rows each, with the 6 x 16 register tile, and the reduction in blocks of `depth` (0: whole).

    >>> "vector_common_parallel = [1, 6, 16, 0]" in register_tile_info(96, batch_dims=1)
    True
    """

    def sizes(batch: int, *inner: int) -> str:
        return "[" + ", ".join(str(size) for size in [*[batch] * batch_dims, *inner]) + "]"

    return _compilation_info(
        workgroup=sizes(1, rows, REGISTER_TILE_WORKGROUP_COLUMNS, 0),
        registers=sizes(1, *tile, 0),
        reduction_step=sizes(0, 0, 0, REDUCTION_STEP),
        reduction_block=sizes(0, 0, 0, depth) if depth else None,
    )


def _compilation_info(workgroup: str, registers: str, reduction_step: str, reduction_block: str | None) -> str:
    """A `compilation_info` of IREE's CPU matmul pipeline from its tile sizes, one per loop: the
    workgroup's, the register tile's, the reduction's step and (None: whole) its cache blocks."""
    block = f"cache_reduction = {reduction_block}, " if reduction_block else ""
    return (
        "#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<"
        f"cache_parallel = {workgroup}, {block}distribution = {workgroup}, "
        f"vector_common_parallel = {registers}, vector_reduction = {reduction_step}>, "
        "translation_info = #iree_codegen.translation_info<"
        "pipeline = #iree_cpu.pipeline<DoubleTilingExpert>, {enable_loop_peeling}>>"
    )


def spec_text(
    max_rows: int = MAX_ROWS, min_weight_log2: int = MIN_WEIGHT_LOG2, register_tile: bool = False, wide: bool = False
) -> str:
    """The transform-dialect spec that marks functions and the matmuls to data-tile, and, with
    `register_tile`, gives the other large matmuls their register tile, 6 x 16 or (`wide`) the
    widest of `WIDE_REGISTER_TILES` their columns are a multiple of (first match wins).

    >>> "transform.named_sequence @__transform_main" in spec_text()
    True
    >>> "compilation_info" in spec_text(register_tile=True)
    True
    """
    # Few rows (or, `DYNAMIC_ROWS`, rows known only at run time) and a large weight: data-tiled.
    row_ranges = {"wide": (1, max_rows), **({"dynamic": (None, None)} if DYNAMIC_ROWS else {})}
    matchers = [
        _matmul_matcher(f"@{kind}_matmul_k{k_log2}", rows, 1 << k_log2, 1 << (min_weight_log2 - k_log2))
        for kind, rows in row_ranges.items()
        for k_log2 in range(4, min_weight_log2 - 3)
    ]
    pairs = ["@function -> @hint", *(f"{name} -> @hint" for name, _ in matchers)]
    actions = []
    if register_tile and PANELS_MIN_WEIGHT_LOG2:
        panel_matchers, panel_pairs, actions = _panel_rules(wide)
        matchers += panel_matchers
        pairs += panel_pairs
    # The wide tiles first (`wide`: AVX-512), each for columns a multiple of its own (a tile of one
    # panel's columns for any); then the narrow one for every matmul from REGISTER_TILE_MIN_SIZE columns.
    wide_tiles = WIDE_REGISTER_TILES if wide else ()
    tiles = [*((tile, tile[1] if tile[1] > PANEL else 0) for tile in wide_tiles), (REGISTER_TILE, 0)]
    for tile, multiple in tiles if register_tile else []:
        for op, batch_dims in REGISTER_TILE_OPS.items():
            for rows, rows_multiple, workgroup in workgroup_rows(op, tile[0]):
                # The deep reductions first, in cache blocks; then the rest, whole.
                depths = [(REGISTER_TILE_BLOCKED_FROM, REGISTER_TILE_DEPTH)] if REGISTER_TILE_BLOCKED_FROM else []
                for min_depth, depth in [*depths, (REGISTER_TILE_MIN_SIZE, 0)]:
                    suffix = f"{op.split('.')[1]}_{rows[0]}" + (f"_m{rows_multiple}" if rows_multiple else "")
                    suffix += (f"_k{min_depth}" if depth else "") + f"_{tile[0]}x{tile[1]}"
                    least = (rows, min_depth, multiple or REGISTER_TILE_MIN_SIZE)
                    matchers.append(
                        _matmul_matcher(
                            f"@large_{suffix}", *least, op, columns_multiple_of=multiple, rows_multiple_of=rows_multiple
                        )
                    )
                    pairs.append(f"@large_{suffix} -> @register_tile_{suffix}")
                    info = register_tile_info(workgroup, batch_dims, tile, depth)
                    actions.append(f"""  transform.named_sequence @register_tile_{suffix}(
      %op: !transform.any_op {{transform.readonly}}) {{
    %info = transform.param.constant {info} -> !transform.any_param
    transform.annotate %op "compilation_info" = %info : !transform.any_op, !transform.any_param
    transform.yield
  }}""")
    body = "\n".join([*(text for _, text in matchers), *actions])
    return f"""module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @function(%op: !transform.any_op {{transform.readonly}}) -> !transform.any_op {{
    transform.match.operation_name %op ["util.func", "func.func"] : !transform.any_op
    transform.yield %op : !transform.any_op
  }}
{body}
  transform.named_sequence @hint(%op: !transform.any_op {{transform.readonly}}) {{
    transform.annotate %op "{HINT}" : !transform.any_op
    transform.yield
  }}
  transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.consumed}}) {{
    transform.foreach_match in %root {", ".join(pairs)} : (!transform.any_op) -> (!transform.any_op)
    transform.yield
  }}
}}
"""


def panel_info(rows: int, depth: int = 0, tile: tuple[int, int] = REGISTER_TILE, batch_dims: int = 0) -> str:
    """The `compilation_info` of a matmul (or, `batch_dims` 1, a batch matmul) packed into weight
    panels, whose loops are then ([B,] M, N / 16, 16, K): workgroups of `rows` rows and
    REGISTER_TILE_WORKGROUP_COLUMNS columns, the register `tile` (6 rows x one panel, or as many
    panels as its columns span) in registers, the reduction in blocks of `depth` (0: whole)."""

    def sizes(batch: int, *inner: int) -> str:
        return "[" + ", ".join(str(size) for size in [*[batch] * batch_dims, *inner]) + "]"

    return _compilation_info(
        workgroup=sizes(1, rows, REGISTER_TILE_WORKGROUP_COLUMNS // PANEL, PANEL, 0),
        registers=sizes(1, tile[0], max(1, tile[1] // PANEL), PANEL, 0),
        reduction_step=sizes(0, 0, 0, 0, REDUCTION_STEP),
        reduction_block=sizes(0, 0, 0, 0, depth) if depth else None,
    )


def panel_blocks(rows: tuple[int, int | None], workgroup: int, wide: bool = False) -> list[tuple[int, int]]:
    """(least depth, block depth) of the reductions over panels that run in cache blocks, for the
    matmuls of a row range `rows` (`REGISTER_TILE_ROWS`) whose workgroups take `workgroup` rows:
    with the wide tiles (`wide`: AVX-512) WIDE_PANELS_BLOCKED_FROM by whether one workgroup takes
    every row, otherwise PANELS_BLOCKED_FROM; none where that is 0 (as now, with either).

    >>> panel_blocks((16, 96), 96, wide=True), panel_blocks((97, None), 28, wide=True), panel_blocks((97, None), 48)
    ([], [], [])
    """
    if not wide:
        return [(PANELS_BLOCKED_FROM, REGISTER_TILE_DEPTH)] if PANELS_BLOCKED_FROM else []
    least = WIDE_PANELS_BLOCKED_FROM["several workgroups" if rows[0] > workgroup else "one workgroup"]
    return [(least, WIDE_PANEL_DEPTH)] if least else []


def _panel_rules(wide: bool = False) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """The matchers of the matmuls `reads_panels` picks (`_panel_matchers`), their pairs, and the
    actions that pack their weights and give them their register tile (`panel_tiles`; and, `wide`,
    the cache blocks of `panel_blocks`)."""
    matchers, pairs, actions = [], [], []
    for op, batch_dims in REGISTER_TILE_OPS.items():
        least_log2, _ = _panel_bounds(op, wide)
        if not least_log2:
            continue
        for step, tile in panel_tiles(op, wide):
            for rows, rows_multiple, workgroup in workgroup_rows(op, tile[0]):
                for min_depth, depth in [*panel_blocks(rows, workgroup, wide), (REGISTER_TILE_MIN_SIZE, 0)]:
                    action = f"@panels_{tile[0]}x{tile[1]}_{op.split('.')[1]}_{rows[0]}"
                    action += (f"_m{rows_multiple}" if rows_multiple else "") + (f"_k{min_depth}" if depth else "")
                    found = _panel_matchers(action, op, rows, rows_multiple, min_depth, least_log2, step)
                    matchers += found
                    pairs += [f"{name} -> {action}" for name, _ in found]
                    actions.append(_panel_action(action, batch_dims, panel_info(workgroup, depth, tile, batch_dims)))
    return matchers, pairs, actions


def _panel_matchers(
    action: str, op: str, rows: tuple, rows_multiple: int, min_depth: int, least_log2: int, step: int
) -> list[tuple[str, str]]:
    """The matchers of one panel `action`: one per column count (a multiple of `step`) while the
    weight's bound asks more depth of it than `min_depth`, as the spec compares sizes but cannot
    multiply them; then one for every multiple of `step` from there. A tile of 32 columns leaves the
    counts that are multiples of 64 to the 4 x 64 tile's actions, which the spec tries first."""
    matchers = []
    for columns in range(step, PANELS_MAX_COLUMNS + 1, step):
        least_depth = max(min_depth, -(-(1 << least_log2) // columns))
        name = f"{action}_n{columns}"
        if least_depth == min_depth:  # from here every multiple of the tile's columns up to the most
            every = {"columns_multiple_of": step, "max_n": PANELS_MAX_COLUMNS, "rows_multiple_of": rows_multiple}
            matchers.append(_matmul_matcher(name, rows, min_depth, columns, op, **every))
            break
        if columns % REGISTER_TILE_WORKGROUP_COLUMNS or step == REGISTER_TILE_WORKGROUP_COLUMNS:
            exact = {"exact_columns": True, "rows_multiple_of": rows_multiple}
            matchers.append(_matmul_matcher(name, rows, least_depth, columns, op, **exact))
    return matchers


def _panel_action(action: str, batch_dims: int, info: str) -> str:
    """The action that packs a matched (batch) matmul's weight into panels of 16 columns, orders its
    loops with the reduction last and gives it the `compilation_info` `info`."""
    lead = list(range(batch_dims))  # the batch dim keeps its place in every permutation
    outer = [*lead, batch_dims + 1, batch_dims]  # the weight [B, K, N / 16] to [B, N / 16, K]
    order = [*lead, *(batch_dims + index for index in (0, 1, 3, 2))]  # K last
    packed_sizes = [0] * batch_dims + [0, PANEL, 0]
    return f"""  transform.named_sequence {action}(%op: !transform.any_op {{transform.consumed}}) {{
    %packed = transform.structured.pack %op packed_sizes = {packed_sizes}
        : (!transform.any_op) -> !transform.op<"linalg.generic">
    %weight = transform.get_producer_of_operand %packed[1]
        : (!transform.op<"linalg.generic">) -> !transform.op<"linalg.pack">
    %panels, %pack, %unpack = transform.structured.pack_transpose %weight with_compute_op(%packed) outer_perm = {outer}
        : (!transform.op<"linalg.pack">, !transform.op<"linalg.generic">)
        -> (!transform.op<"linalg.generic">, !transform.op<"linalg.pack">, !transform.any_op)
    %ordered = transform.structured.interchange %panels iterator_interchange = {order}
        : (!transform.op<"linalg.generic">) -> !transform.op<"linalg.generic">
    %info = transform.param.constant {info} -> !transform.any_param
    transform.annotate %ordered "compilation_info" = %info : !transform.op<"linalg.generic">, !transform.any_param
    transform.yield
  }}"""


def _matmul_matcher(
    name: str,
    rows: tuple[int, int | None],
    min_k: int,
    min_n: int,
    op: str = "linalg.matmul",
    exact_columns: bool = False,
    columns_multiple_of: int = 0,
    max_n: int | None = None,
    rows_multiple_of: int = 0,
) -> tuple[str, str]:
    """A matcher of `op` (`linalg.matmul`, or `linalg.batch_matmul`, whose dims follow the batch) with
    rows[0]..rows[1] rows (M; rows[1] None: no upper bound; rows[0] None: M dynamic, which the
    match gives as a negative size), K >= min_k and N >= min_n (N == min_n with `exact_columns`;
    N <= max_n if given), N a multiple of `columns_multiple_of` and M of `rows_multiple_of` if given
    (IREE's `dim_is_multiple_of` on the result)."""
    first = REGISTER_TILE_OPS[op]
    upper = [(0, "le", rows[1])] if rows[1] is not None else []
    lower = [(0, "ge", rows[0])] if rows[0] is not None else [(0, "lt", 0)]  # None: a dynamic M
    bounds = [*lower, *upper, (2, "ge", min_k), (1, "eq" if exact_columns else "ge", min_n)]
    bounds += [(1, "le", max_n)] if max_n is not None else []
    lines = []
    for index, (dim, predicate, value) in enumerate(bounds):
        lines.append(
            f"    %bound{index} = transform.param.constant {value} : i64 -> !transform.param<i64>\n"
            f"    transform.match.param.cmpi {predicate} %dim{dim}, %bound{index} : !transform.param<i64>"
        )
    text = f"""  transform.named_sequence {name}(%op: !transform.any_op {{transform.readonly}}) -> !transform.any_op {{
    transform.match.operation_name %op ["{op}"] : !transform.any_op
    %dim0, %dim1, %dim2 = transform.match.structured %op
        : (!transform.any_op) -> (!transform.param<i64>, !transform.param<i64>, !transform.param<i64>) {{
    ^bb0(%s: !transform.any_op):
      %m = transform.match.structured.dim %s[{first}] : (!transform.any_op) -> !transform.param<i64>
      %n = transform.match.structured.dim %s[{first + 1}] : (!transform.any_op) -> !transform.param<i64>
      %k = transform.match.structured.dim %s[{first + 2}] : (!transform.any_op) -> !transform.param<i64>
      transform.match.structured.yield %m, %n, %k : !transform.param<i64>, !transform.param<i64>, !transform.param<i64>
    }}
{chr(10).join(lines)}
{_multiple_of({first + 1: columns_multiple_of, first: rows_multiple_of})}    transform.yield %op : !transform.any_op
  }}"""
    return name, text


def _multiple_of(factors: dict[int, int]) -> str:
    """The matcher lines that ask the op's result to be a multiple of `factor` along each `dim` of
    `factors` (none for a factor 0)."""
    checks = [(dim, factor) for dim, factor in factors.items() if factor]
    if not checks:
        return ""
    lines = ["    %result = transform.get_operand %op[-1] : (!transform.any_op) -> !transform.any_value\n"]
    for dim, factor in checks:
        lines.append(f"    transform.iree.match.dim_is_multiple_of %result[{dim}], {factor} : !transform.any_value\n")
    return "".join(lines)


def compile_flags(preprocessing: tuple[str, ...] = (), wide: bool = False) -> list[str]:
    """The iree-compile flags that data-tile the matmuls `spec_text` marks, set the register tile of
    the other large matmuls (the wide tiles too with `wide`: AVX-512) and pack weights into panels:
    a whole preprocessing pipeline, the target's own passes (`preprocessing`), the spec, then the
    pass that makes the panels' unpacks reshapes.
    The spec is written to the temp folder (not the compile cache's, whose entries `cache clear`
    and the size bound remove), named by its content, so a changed rule is a changed flag and a
    changed cache key; it is written again if missing when the next compile asks for it."""
    text = spec_text(AVX2_MAX_ROWS, AVX2_MIN_WEIGHT_LOG2, register_tile=True, wide=wide)
    path = written_spec(text)
    if not PANELS_MIN_WEIGHT_LOG2:
        return [FLAG, f"--iree-preprocessing-transform-spec-filename={path}"]
    # The spec runs in the preprocessing pipeline, so that the unpacks it makes become reshapes after it.
    passes = [*preprocessing, f"iree-preprocessing-transform-interpreter{{transform-spec-path={path}}}", _SIMPLIFY]
    return [FLAG, f"{PIPELINE_FLAG}builtin.module({','.join(passes)})", PANEL_EPILOGUES]


PIPELINE_FLAG = "--iree-preprocessing-pass-pipeline="
_SIMPLIFY = "util.func(iree-global-opt-simplify-pack-unpack)"
# A packed matmul's result reaches the ops after it through a reshape ([M, N / 16, 16] to [M, N]),
# and then the model's own ([M, N] to [1, H, W, N]); IREE 3.13 moves a collapse across an expand only
# with this flag, and without it keeps the element-wise ops after a matmul out of its dispatch
# (ResNet-50: 10 dispatches more, the bias, residual add and ReLU of its packed matmuls).
PANEL_EPILOGUES = "--iree-dispatch-creation-propagate-collapse-across-expands"


def written_spec(text: str, kind: str = "data-tiling") -> Path:
    """The spec `text` in the temp folder, named by its `kind` and content."""
    folder = Path(tempfile.gettempdir()) / "dycl_iree-specs"
    path = folder / f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.mlir"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        partial.replace(path)  # atomic: another process may be reading it
    return path
