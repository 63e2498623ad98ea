"""GFLOP/s of one convolution per shape of ResNet-18/50 and MobileNetV2, as dycl_iree compiles it for
AVX-512 and for AVX2 CPUs, next to PyTorch, ONNX Runtime and this machine's single-thread SGEMM.

    python benchmarks/conv_shapes.py [--rounds 5] [--shapes stem,layer3_3x3] [--columns "AVX2 im2col;..."]

Each shape is one `Conv2d` (+ ReLU) exported by `dycl_iree.export`, batch 1, with input and output
in NHWC order (the model permutes them), as the convolution sits between channels-last neighbours
in a network, where the exporter's transposes cancel; a depthwise shape is MobileNetV2's block,
`Conv2d` + BN + ReLU6 (`DepthwiseBlock`; capture folds the BN into the filter). Columns, all one
thread, timed alternating in one process (median over rounds of the process's CPU time per call:
the machine is shared, and wall time counts the other jobs too):

- `torch`: PyTorch eager (oneDNN);
- `onnxruntime`: the same Conv2d + ReLU in NCHW through the TorchScript ONNX exporter, ONNX
  Runtime's CPU provider (it picks its own layout);
- `AVX-512 as exported`: the graph and flags `llvm-cpu` gets on an AVX-512 host (the forms of
  `AVX2 as exported`, below, with `dycl_iree.data_tiling`'s wide register tiles), code for this
  machine's CPU;
- `AVX-512, no data tiling`: the same without `data_tiling`'s rule (IREE's own tiles);
- `AVX-512 direct`: every convolution as IREE's direct channels-last convolution, the form AVX-512
  took before, with the rule;
- `AVX2 direct`: IREE's direct convolution, without the rule, with code for an AVX2 CPU (`znver3`),
  which this machine runs too;
- `AVX2 as exported`: code for `znver3` from the graph the exporter makes on a CPU without AVX-512
  (`decompositions._im2col_wins`: im2col + matmul for many channels, Winograd's F(2x2, 3x3) for
  those of them that are 3x3 with stride 1, F(4x4, 3x3) from 28x28 pixels, `winograd.output_tile`)
  with the AVX2 matmul rule (`data_tiling.compile_flags(avx512=False)`: data tiling of the matmuls
  with few rows and a large weight, a 6 x 16 register tile for the other large ones), what an AVX2
  host gets;
- `AVX2 with IREE's matmul tiles`: the same without that rule (the form before it);
- `AVX2 data-tiled` / `+ ukernels`: every matmul data-tiled (`--iree-opt-data-tiling`), with
  IREE's mmt4d ukernels too (`--iree-llvmcpu-enable-ukernels=all`), measured and not taken;
- `AVX2 im2col`: the same without Winograd (the form before it); `AVX-512 direct`: the AVX-512
  column without Winograd; `AVX2 im2col, forced` / `AVX2 direct, forced`: the AVX2 rule without
  Winograd and every convolution as im2col + matmul, or as IREE's direct convolution, whatever
  `decompositions._im2col_wins` would pick (where im2col and Winograd start); `AVX2 Winograd
  F(2x2), as exported otherwise`: every 3x3 stride-1 convolution as Winograd, with the AVX2 rule;
- `... Winograd F(2x2)` / `F(4x4)`: every 3x3 stride-1 convolution as Winograd with that output
  tile (`winograd.convolution_with_transformed_filter`), whatever `output_tile` would pick;
- `AVX2 as exported + mmt4d ukernel` / `+ all ukernels` / `+ dispatch-creation data tiling` /
  `+ inner-tiled`: the AVX2 rule's data-tiled matmuls with IREE's ukernels
  (`--iree-llvmcpu-enable-ukernels=mmt4d` or `all`), through IREE's other data-tiling path
  (`--iree-dispatch-creation-data-tiling` instead of `--iree-opt-data-tiling`), or with the packed
  matmul lowered as `inner_tiled` (`--iree-llvmcpu-enable-inner-tiled`, which iree-compile 3.13
  rejects on every 1x1 shape: the column says "fails");
- `AVX2 tile from 64`: the AVX2 rule with its 6 x 16 register tile only for matmuls of 64 or more
  channels in and out (the rule before; as exported it starts at 16, `data_tiling`); `AVX2 6x16`,
  `4x16`, `8x8`, `4x24`, `12x8 tile from 16`: other register tiles from 16 channels;
- `AVX2 rule before`: the AVX2 rule before ResNet-50's late 1x1 convolutions were measured (data
  tiling up to 196 rows, weights as stored, every reduction whole); `AVX2 padded weights,
  data-tiled`: padded weights (`data_tiling.padded_columns`) but data tiling up to 196 rows; `AVX2
  6x16, unpadded` (`K64` ... `K512`): the register tile from 48 rows over unpadded weights, every
  reduction whole (or in cache blocks of that depth); `AVX2 padded from 512 columns`: weights
  padded from rows 2 KiB apart only (the rule before; as exported from 1 KiB); `AVX2 workgroups of
  32` / `128` / `256 columns`: the register tile's workgroups that wide
  (`data_tiling.REGISTER_TILE_WORKGROUP_COLUMNS`; 64 as exported); `AVX2 no panels`: every weight
  read as stored or padded (`data_tiling.PANELS_MIN_WEIGHT_LOG2` 0; as exported the large ones are
  read as panels of 16 columns, `data_tiling.reads_panels`); `AVX2 panels in blocks from K1024`
  (`K2048`): reductions over panels that deep in cache blocks of 256 (`PANELS_BLOCKED_FROM`; as
  exported, none);
  `AVX2 padded weights, result sliced` (`AVX2 im2col, result sliced`): a padded weight multiplied
  whole and its result sliced after the bias (`decompositions.PADDED_WEIGHT_VIEW` False, the form
  before; as exported the weight is read through a slice and the ReLU fuses into the matmul);
- `AVX2 IREE depthwise`: depthwise convolutions left to IREE (`decompositions.depthwise_as_taps`
  patched to False), which runs them in NCHW; `AVX2 taps + padding fused`: the taps with
  `--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops`; `AVX2 taps + NHWC
  BN/ReLU6` (`+ padding fused`): the block written with BN and ReLU6 after its permute back to
  NHWC; `AVX2 taps + ReLU6 after the transpose`: the exporter's taps with the activation after
  their transpose back to NCHW (`lower._activated_depthwise` off, the form before it); `AVX2
  unscaled taps` (`+ ReLU6 after the transpose`): without `decompositions.SCALED_TAPS`;
- `SGEMM`: `torch.mm` of the convolution's im2col matrices ([pixels, k*k*C] by [k*k*C, F]).

Under each row, the largest error of each column against the float64 convolution, over the largest
output. `--columns` picks compiled columns by name (exports are the slow part). The header line
gives the machine's SGEMM peak (1024x1024 by 1024x1024, one thread). Running code for
AVX2 on an AVX-512 machine measures the code, not an AVX2 machine's clock and caches: compare
columns within one run, never absolute figures between machines.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["DYCL_IREE_EXPORT_CACHE"] = "0"

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import dycl_iree  # noqa: E402
from dycl_iree import compile as compile_flags  # noqa: E402
from dycl_iree import cpu_features, data_tiling, decompositions, lower, winograd  # noqa: E402

# name: (in channels, out channels, input size, kernel, stride, padding, groups)
SHAPES = {
    "stem_7x7s2_3_64": (3, 64, 224, 7, 2, 3, 1),
    "layer1_3x3_64": (64, 64, 56, 3, 1, 1, 1),
    "layer2_3x3_128": (128, 128, 28, 3, 1, 1, 1),
    "layer3_3x3_256": (256, 256, 14, 3, 1, 1, 1),
    "layer4_3x3_512": (512, 512, 7, 3, 1, 1, 1),
    "zoo_3x3_64_8": (64, 64, 8, 3, 1, 1, 1),
    "zoo_3x3_32_16": (32, 32, 16, 3, 1, 1, 1),
    "zoo_3x3_16_32": (16, 16, 32, 3, 1, 1, 1),
    # Where im2col and Winograd start (`decompositions._im2col_wins`): ResNet-18's layer2.0.conv1,
    # 64 channels at 28x28 and 14x14, 32 at 56x56
    "layer2_3x3s2_64_128": (64, 128, 56, 3, 2, 1, 1),
    "conv_3x3_64_28": (64, 64, 28, 3, 1, 1, 1),
    "conv_3x3_64_14": (64, 64, 14, 3, 1, 1, 1),
    "conv_3x3_32_56": (32, 32, 56, 3, 1, 1, 1),
    "conv_3x3_32_28": (32, 32, 28, 3, 1, 1, 1),
    "layer3_3x3s2_128_256": (128, 256, 28, 3, 2, 1, 1),
    "layer4_3x3s2_256_512": (256, 512, 14, 3, 2, 1, 1),
    "layer4_3x3s2_512_512": (512, 512, 14, 3, 2, 1, 1),
    "downsample_1x1s2_256_512": (256, 512, 14, 1, 2, 0, 1),
    "downsample_1x1s2_512_1024": (512, 1024, 28, 1, 2, 0, 1),
    "downsample_1x1s2_1024_2048": (1024, 2048, 14, 1, 2, 0, 1),
    "bottleneck_1x1_64_64": (64, 64, 56, 1, 1, 0, 1),
    "bottleneck_1x1_64_256": (64, 256, 56, 1, 1, 0, 1),
    "bottleneck_1x1_256_128": (256, 128, 56, 1, 1, 0, 1),
    "bottleneck_1x1_128_512": (128, 512, 28, 1, 1, 0, 1),
    "bottleneck_1x1_512_128": (512, 128, 28, 1, 1, 0, 1),
    "bottleneck_1x1_512_256": (512, 256, 28, 1, 1, 0, 1),
    "downsample_1x1s2_256_512_56": (256, 512, 56, 1, 2, 0, 1),
    "bottleneck_1x1_256_1024": (256, 1024, 14, 1, 1, 0, 1),
    "bottleneck_1x1_1024_512": (1024, 512, 14, 1, 1, 0, 1),
    "bottleneck_1x1_2048_512": (2048, 512, 7, 1, 1, 0, 1),
    "bottleneck_1x1_256_64": (256, 64, 56, 1, 1, 0, 1),
    "bottleneck_1x1_1024_256": (1024, 256, 14, 1, 1, 0, 1),
    "bottleneck_1x1_512_2048": (512, 2048, 7, 1, 1, 0, 1),
    "depthwise_3x3_144_56": (144, 144, 56, 3, 1, 1, 144),
    "depthwise_3x3s2_144_56": (144, 144, 56, 3, 2, 1, 144),
    "depthwise_3x3_960_7": (960, 960, 7, 3, 1, 1, 960),
    # MobileNetV2's other depthwise convolutions at 224x224 (each followed by BN and ReLU6, `Shape`)
    "depthwise_3x3_32_112": (32, 32, 112, 3, 1, 1, 32),
    "depthwise_3x3s2_96_112": (96, 96, 112, 3, 2, 1, 96),
    "depthwise_3x3_192_28": (192, 192, 28, 3, 1, 1, 192),
    "depthwise_3x3s2_192_28": (192, 192, 28, 3, 2, 1, 192),
    "depthwise_3x3_384_14": (384, 384, 14, 3, 1, 1, 384),
    "depthwise_3x3_576_14": (576, 576, 14, 3, 1, 1, 576),
    "depthwise_3x3s2_576_14": (576, 576, 14, 3, 2, 1, 576),
    # MobileNetV2's 1x1 convolutions with fewer than 64 input or output channels (matmul rows x
    # depth x columns: 12544x32x16, 12544x16x96, 3136x96x24, 3136x24x144, 3136x144x24, 784x144x32,
    # 784x32x192, 784x192x32)
    "mobilenet_1x1_32_16_112": (32, 16, 112, 1, 1, 0, 1),
    "mobilenet_1x1_16_96_112": (16, 96, 112, 1, 1, 0, 1),
    "mobilenet_1x1_96_24_56": (96, 24, 56, 1, 1, 0, 1),
    "mobilenet_1x1_24_144_56": (24, 144, 56, 1, 1, 0, 1),
    "mobilenet_1x1_144_24_56": (144, 24, 56, 1, 1, 0, 1),
    "mobilenet_1x1_144_32_28": (144, 32, 28, 1, 1, 0, 1),
    "mobilenet_1x1_32_192_28": (32, 192, 28, 1, 1, 0, 1),
    "mobilenet_1x1_192_32_28": (192, 32, 28, 1, 1, 0, 1),
    # MobileNetV2's 1x1 convolutions at 14x14 and 7x7 (196x96x576, 49x160x960, 49x960x320, 49x320x1280)
    "mobilenet_late_1x1_96_576_14": (96, 576, 14, 1, 1, 0, 1),
    "mobilenet_late_1x1_160_960_7": (160, 960, 7, 1, 1, 0, 1),
    "mobilenet_late_1x1_960_320_7": (960, 320, 7, 1, 1, 0, 1),
    "mobilenet_late_1x1_320_1280_7": (320, 1280, 7, 1, 1, 0, 1),
}
MOBILENET_SMALL_1X1 = [name for name in SHAPES if name.startswith("mobilenet_1x1_")]
MOBILENET_DEPTHWISE = [name for name in SHAPES if name.startswith("depthwise_")]
RESNET50_LATE_1X1 = [
    "bottleneck_1x1_1024_256",
    "bottleneck_1x1_256_1024",
    "downsample_1x1s2_512_1024",
    "bottleneck_1x1_2048_512",
    "bottleneck_1x1_512_2048",
    "downsample_1x1s2_1024_2048",
]
AVX2_CPU = "znver3"


class ChannelsLastConvolution(nn.Module):
    """NHWC in, NHWC out: a convolution between channels-last neighbours."""

    def __init__(self, convolution: nn.Conv2d) -> None:
        super().__init__()
        self.convolution = convolution

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.convolution(x.permute(0, 3, 1, 2))).permute(0, 2, 3, 1)


class DepthwiseBlock(nn.Module):
    """NHWC in, NHWC out: MobileNetV2's depthwise convolution + BN + ReLU6, as its blocks write them
    (in NCHW, between the channels-last 1x1 convolutions), or with BN and ReLU6 after the
    permute back (`epilogue_nhwc`), what a graph with them moved to the NHWC side would give."""

    def __init__(self, convolution: nn.Conv2d, epilogue_nhwc: bool = False) -> None:
        super().__init__()
        self.convolution = convolution
        self.norm = nn.BatchNorm2d(convolution.out_channels)
        with torch.no_grad():  # statistics as a trained network's, so that BN is not the identity
            self.norm.running_mean.uniform_(-0.5, 0.5)
            self.norm.running_var.uniform_(0.5, 2.0)
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)
        self.epilogue_nhwc = epilogue_nhwc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.convolution(x.permute(0, 3, 1, 2))
        if not self.epilogue_nhwc:
            return F.relu6(self.norm(y)).permute(0, 2, 3, 1)
        norm = self.norm
        scale = norm.weight / torch.sqrt(norm.running_var + norm.eps)
        return F.relu6(y.permute(0, 2, 3, 1) * scale + (norm.bias - norm.running_mean * scale))


def _model(name: str, epilogue_nhwc: bool = False) -> nn.Module:
    """The shape's module, in eval mode, with seed-0 weights."""
    channels, features, size, kernel, stride, padding, groups = SHAPES[name]
    torch.manual_seed(0)
    if groups == 1:
        return ChannelsLastConvolution(nn.Conv2d(channels, features, kernel, stride, padding)).eval()
    convolution = nn.Conv2d(channels, features, kernel, stride, padding, groups=groups, bias=False)
    return DepthwiseBlock(convolution, epilogue_nhwc).eval()


class Variant(NamedTuple):
    """A compiled column: the `llvm-cpu` flags, whether the exporter sees AVX-512, whether
    `data_tiling`'s rule applies (AVX-512's or AVX2's, as the exporter sees the CPU), the Winograd
    output tile every 3x3 stride-1 convolution takes (0: none; None: `winograd.output_tile`'s
    choice), whether depthwise convolutions are written as taps (False: IREE's own depthwise
    convolution, which it runs in NCHW), flags added after the data-tiling rule's (`tiling_extra`,
    and `opt_tiling`, the flag that turns on the data tiling the rule's spec marks), whether a
    depthwise block's BN + ReLU6 come after its permute back to NHWC (`DepthwiseBlock`), and
    whether the exporter applies a depthwise convolution's activation on the taps' NHWC side
    (`lower._activated_depthwise`; False: after their transpose, the form before), and the AVX2
    rule's register tile (`register_tile`: least depth and columns, rows, columns; None: the rule's
    own, `data_tiling.REGISTER_TILE_MIN_SIZE` and `REGISTER_TILE`), and whether a padded weight is
    read through a slice (`decompositions.PADDED_WEIGHT_VIEW`; False: its result sliced, the form
    before)."""

    flags: list[str]
    avx512: bool
    tiled: bool
    tile: int | None
    taps: bool = True
    tiling_extra: tuple[str, ...] = ()
    opt_tiling: str = "--iree-opt-data-tiling"
    epilogue_nhwc: bool = False
    activation_in_nhwc: bool = True
    scaled_taps: bool = True
    register_tile: tuple[int, int, int] | None = None
    rule: tuple[tuple[str, int], ...] = ()
    weight_view: bool = True
    im2col: bool | None = None


def _variants() -> dict[str, Variant]:
    """The compiled columns (`Variant`)."""
    base = [flag for flag in compile_flags.TARGETS["llvm-cpu"] if not flag.startswith("--iree-llvmcpu-target-cpu=")]
    host = base + ["--iree-llvmcpu-target-cpu=host"]
    avx2 = base + [f"--iree-llvmcpu-target-cpu={AVX2_CPU}"]
    fuse_padding = "--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops=true"
    ukernels = "--iree-llvmcpu-enable-ukernels="
    return {
        "AVX-512 as exported": Variant(host, True, True, None),
        "AVX-512, no data tiling": Variant(host, True, False, None),
        "AVX-512 direct": Variant(host, True, True, 0, im2col=False),
        "AVX-512 Winograd F(2x2)": Variant(host, True, True, 2),
        "AVX-512 Winograd F(4x4)": Variant(host, True, True, 4),
        "AVX2 direct": Variant(avx2, True, False, 0, im2col=False),
        "AVX2 as exported": Variant(avx2, False, True, None),
        "AVX2 with IREE's matmul tiles": Variant(avx2, False, False, None),
        "AVX2 im2col": Variant(avx2, False, False, 0),
        "AVX2 im2col, forced": Variant(avx2, False, True, 0, im2col=True),
        "AVX2 direct, forced": Variant(avx2, False, True, 0, im2col=False),
        "AVX2 Winograd F(2x2), as exported otherwise": Variant(avx2, False, True, 2),
        "AVX2 data-tiled": Variant(avx2 + ["--iree-opt-data-tiling"], False, False, None),
        "AVX2 data-tiled + ukernels": Variant(
            avx2 + ["--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=all"], False, False, None
        ),
        "AVX2 Winograd F(2x2)": Variant(avx2, False, False, 2),
        "AVX2 Winograd F(4x4)": Variant(avx2, False, False, 4),
        # The AVX2 rule's data-tiled matmuls (<= 196 rows, large weight) with IREE's ukernels, its
        # other data-tiling paths, or its inner-tiled lowering of the packed matmul.
        "AVX2 as exported + mmt4d ukernel": Variant(avx2, False, True, None, tiling_extra=(ukernels + "mmt4d",)),
        "AVX2 as exported + all ukernels": Variant(avx2, False, True, None, tiling_extra=(ukernels + "all",)),
        "AVX2 as exported + dispatch-creation data tiling": Variant(
            avx2, False, True, None, opt_tiling="--iree-dispatch-creation-data-tiling"
        ),
        "AVX2 as exported + global-opt data tiling": Variant(
            avx2, False, True, None, opt_tiling="--iree-global-opt-data-tiling"
        ),
        "AVX2 as exported + inner-tiled": Variant(
            avx2, False, True, None, tiling_extra=("--iree-llvmcpu-enable-inner-tiled",)
        ),
        # The AVX2 rule with the register tile from 64 channels (the rule before), and with other
        # register tiles from 16 (MobileNetV2's small 1x1 convolutions).
        "AVX2 tile from 64": Variant(avx2, False, True, None, register_tile=(64, 6, 16)),
        "AVX2 6x16 tile from 16": Variant(avx2, False, True, None, register_tile=(16, 6, 16)),
        "AVX2 4x16 tile from 16": Variant(avx2, False, True, None, register_tile=(16, 4, 16)),
        "AVX2 8x8 tile from 16": Variant(avx2, False, True, None, register_tile=(16, 8, 8)),
        "AVX2 4x24 tile from 16": Variant(avx2, False, True, None, register_tile=(16, 4, 24)),
        "AVX2 12x8 tile from 16": Variant(avx2, False, True, None, register_tile=(16, 12, 8)),
        # The AVX2 rule before the late 1x1 convolutions' rule (data tiling up to 196 rows, every
        # reduction whole, no padded weights), and parts of the rule alone: the padded weights with
        # data tiling up to 196 rows; the 6 x 16 register tile from 48 rows over unpadded weights,
        # with the reduction whole or in cache blocks of the given depth.
        "AVX2 rule before": Variant(
            avx2,
            False,
            True,
            None,
            rule=(("AVX2_MAX_ROWS", 196), ("REGISTER_TILE_BLOCKED_FROM", 0), ("PADDED_STRIDE", 0)),
        ),
        "AVX2 padded weights, data-tiled": Variant(avx2, False, True, None, rule=(("AVX2_MAX_ROWS", 196),)),
        "AVX2 6x16, unpadded": Variant(
            avx2, False, True, None, rule=(("REGISTER_TILE_BLOCKED_FROM", 0), ("PADDED_STRIDE", 0))
        ),
        **{
            f"AVX2 6x16 K{depth}, unpadded": Variant(
                avx2,
                False,
                True,
                None,
                rule=(("REGISTER_TILE_BLOCKED_FROM", 16), ("REGISTER_TILE_DEPTH", depth), ("PADDED_STRIDE", 0)),
            )
            for depth in (64, 128, 256, 512)
        },
        "AVX2 padded from 512 columns": Variant(avx2, False, True, None, rule=(("PADDED_STRIDE", 512),)),
        "AVX2 no panels": Variant(avx2, False, True, None, rule=(("PANELS_MIN_WEIGHT_LOG2", 0),)),
        **{
            f"AVX2 panels in blocks from K{depth}": Variant(
                avx2, False, True, None, rule=(("PANELS_BLOCKED_FROM", depth),)
            )
            for depth in (1024, 2048)
        },
        "AVX2 padded weights, result sliced": Variant(avx2, False, True, None, weight_view=False),
        "AVX2 im2col, result sliced": Variant(avx2, False, False, 0, weight_view=False),
        **{
            f"AVX2 workgroups of {columns} columns": Variant(
                avx2, False, True, None, rule=(("REGISTER_TILE_WORKGROUP_COLUMNS", columns),)
            )
            for columns in (16, 32, 128, 256)
        },
        # Depthwise forms: IREE's own depthwise convolution, the taps with the padding fused into
        # them, and the taps with BN + ReLU6 on their NHWC side (with and without that padding).
        "AVX2 IREE depthwise": Variant(avx2, False, True, None, taps=False),
        "AVX2 taps + ReLU6 after the transpose": Variant(avx2, False, True, None, activation_in_nhwc=False),
        "AVX2 unscaled taps + ReLU6 after the transpose": Variant(
            avx2, False, True, None, activation_in_nhwc=False, scaled_taps=False
        ),
        "AVX2 unscaled taps": Variant(avx2, False, True, None, scaled_taps=False),
        "AVX2 taps + padding fused": Variant(avx2 + [fuse_padding], False, True, None),
        "AVX2 taps + NHWC BN/ReLU6": Variant(avx2, False, True, None, epilogue_nhwc=True),
        "AVX2 taps + NHWC BN/ReLU6 + padding fused": Variant(
            avx2 + [fuse_padding], False, True, None, epilogue_nhwc=True
        ),
    }


def _export(model: nn.Module, example: torch.Tensor, variant: Variant, folder: Path, name: str):
    """A compiled-host runner of `model` built with exactly these flags, by an exporter that sees (or
    not) AVX-512, data-tiles (or not), takes the given Winograd tile and depthwise form (the target
    table, the probe, the data-tiling flags and the rules are patched for the call; the whole-export
    cache is off, since its key does not see the probe)."""
    saved, saved_probe, saved_tiling, saved_tile, saved_taps = (
        compile_flags.TARGETS["llvm-cpu"],
        cpu_features.has_avx512,
        data_tiling.compile_flags,
        winograd.output_tile,
        decompositions.depthwise_as_taps,
    )
    compile_flags.TARGETS["llvm-cpu"] = variant.flags
    cpu_features.has_avx512 = lambda: variant.avx512

    def tiling_flags(*preprocessing: tuple[str, ...], **rule: bool) -> list[str]:
        flags = saved_tiling(*preprocessing, **rule) if variant.tiled else []
        flags = [variant.opt_tiling if flag == "--iree-opt-data-tiling" else flag for flag in flags]
        return flags + list(variant.tiling_extra) if flags else flags

    data_tiling.compile_flags = tiling_flags
    if variant.tile is not None:
        winograd.output_tile = lambda *shape: variant.tile
    decompositions.depthwise_as_taps = lambda *shape: variant.taps
    saved_im2col = decompositions._im2col_wins
    if variant.im2col is not None:
        decompositions._im2col_wins = lambda *shape: variant.im2col
    saved_activated, saved_scaled = lower._activated_depthwise, decompositions.SCALED_TAPS
    saved_view = decompositions.PADDED_WEIGHT_VIEW
    decompositions.SCALED_TAPS = variant.scaled_taps
    decompositions.PADDED_WEIGHT_VIEW = variant.weight_view
    saved_register = data_tiling.REGISTER_TILE_MIN_SIZE, data_tiling.REGISTER_TILE
    if variant.register_tile is not None:
        data_tiling.REGISTER_TILE_MIN_SIZE, *tile = variant.register_tile
        data_tiling.REGISTER_TILE = tuple(tile)
    if not variant.activation_in_nhwc:
        lower._activated_depthwise = lambda *args: None
    saved_rule = {name: getattr(data_tiling, name) for name, _ in variant.rule}
    for name, value in variant.rule:
        setattr(data_tiling, name, value)
    try:
        bundle = dycl_iree.export(model, (example,))
    finally:
        compile_flags.TARGETS["llvm-cpu"] = saved
        cpu_features.has_avx512 = saved_probe
        data_tiling.compile_flags = saved_tiling
        winograd.output_tile = saved_tile
        decompositions.depthwise_as_taps = saved_taps
        decompositions._im2col_wins = saved_im2col
        lower._activated_depthwise = saved_activated
        decompositions.SCALED_TAPS = saved_scaled
        decompositions.PADDED_WEIGHT_VIEW = saved_view
        data_tiling.REGISTER_TILE_MIN_SIZE, data_tiling.REGISTER_TILE = saved_register
        for name, value in saved_rule.items():
            setattr(data_tiling, name, value)
    return dycl_iree.load(bundle.save(folder / f"{name}.dycl"), device="local-sync")


def onnxruntime_call(module: nn.Module, example: torch.Tensor) -> Callable[[], np.ndarray]:
    """A call of `module` on `example` through ONNX Runtime's CPU provider on one thread (intra- and
    inter-op), the module exported by the TorchScript ONNX exporter; the call returns its first
    output. The benchmarks of single blocks (`inverted_residual.py`) share it."""
    import io
    import warnings

    import onnxruntime

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
        torch.onnx.export(module, (example,), buffer, dynamo=False)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(buffer.getvalue(), options, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: example.numpy()}
    return lambda: session.run(None, feed)[0]


def _onnxruntime(model: nn.Module, example: torch.Tensor) -> Callable[[], np.ndarray]:
    """A call of the shape's convolution + ReLU (+ BN + ReLU6 for a depthwise one) in NCHW on ONNX
    Runtime, one thread; checked against PyTorch."""
    if isinstance(model, DepthwiseBlock):
        plain = nn.Sequential(model.convolution, model.norm, nn.ReLU6()).eval()
    else:
        plain = nn.Sequential(model.convolution, nn.ReLU()).eval()
    nchw = example.permute(0, 3, 1, 2).contiguous()
    call = onnxruntime_call(plain, nchw)
    with torch.no_grad():
        np.testing.assert_allclose(call(), plain(nchw).numpy(), rtol=1e-4, atol=1e-4)
    return call


def _relative_error(output: np.ndarray, exact: np.ndarray) -> float:
    """The largest error of `output` against the float64 result, over the largest output."""
    return float(np.abs(output - exact).max() / np.abs(exact).max())


def sgemm_peak() -> float:
    """Best of 5 rounds of torch.mm on 1024x1024 matrices, GFLOP/s, on the threads torch has."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    best = 0.0
    for _ in range(5):
        start = time.process_time()
        for _ in range(4):
            torch.mm(a, b)
        best = max(best, 4 * 2 * 1024**3 / (time.process_time() - start) / 1e9)
    return best


def main(names: list[str], rounds: int, columns: list[str] | None = None) -> None:
    torch.set_num_threads(1)
    folder = Path(tempfile.mkdtemp(prefix="dycl-conv-shapes-"))
    variants = {key: value for key, value in _variants().items() if columns is None or key in columns}
    print(f"single-thread SGEMM peak (torch.mm 1024^3): {sgemm_peak():.0f} GFLOP/s")
    print("| shape | torch | onnxruntime | " + " | ".join(variants) + " | SGEMM of its im2col |")
    print("|---|" + "---|" * (len(variants) + 3))
    for name in names:
        channels, features, size, kernel, stride, padding, groups = SHAPES[name]
        model = _model(name)
        example = torch.randn(1, size, size, channels)
        with torch.no_grad():
            expected = model(example).numpy()
            exact = copy.deepcopy(model).double()(example.double()).numpy()
        errors = {"torch": _relative_error(expected, exact)}
        out_size = expected.shape[1]
        flops = 2 * features * out_size * out_size * (channels // groups) * kernel * kernel
        patches = torch.randn(out_size * out_size, kernel * kernel * channels // groups)
        weights = torch.randn(kernel * kernel * channels // groups, features)
        calls = {"torch": lambda: model(example), "onnxruntime": _onnxruntime(model, example)}
        failed = {}
        for variant, flags in variants.items():
            exported = _model(name, epilogue_nhwc=True) if flags.epilogue_nhwc else model
            try:
                run = _export(exported, example, flags, folder, f"{name}-{len(calls)}")
            except dycl_iree.DyclError as error:  # a flag iree-compile rejects for this shape
                failed[variant] = str(error).split(": ", 1)[-1].splitlines()[0][:200]
                continue
            np.testing.assert_allclose(run(example), expected, rtol=1e-4, atol=1e-4, err_msg=variant)
            errors[variant] = _relative_error(run(example), exact)
            calls[variant] = lambda run=run: run(example)
        calls["SGEMM"] = lambda: torch.mm(patches, weights)
        repeats = {}
        with torch.no_grad():
            for key, function in calls.items():
                function()
                start = time.process_time()
                function()
                repeats[key] = max(2, int(0.1 / max(time.process_time() - start, 1e-6)))
            times: dict[str, list[float]] = {key: [] for key in calls}
            for _ in range(rounds):
                for key, function in calls.items():
                    start = time.process_time()
                    for _ in range(repeats[key]):
                        function()
                    times[key].append((time.process_time() - start) / repeats[key])
        rates = {key: f"{flops / statistics.median(values) / 1e9:.1f}" for key, values in times.items()}
        rates.update({variant: "fails" for variant in failed})
        columns = ["torch", "onnxruntime", *variants, "SGEMM"]
        print(f"| {name} | " + " | ".join(rates[key] for key in columns) + " |", flush=True)
        for variant, reason in failed.items():
            print(f"  {variant} fails: {reason}", flush=True)
        print("  largest error / largest output: " + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shape names (default: all)")
    parser.add_argument(
        "--columns",
        help="compiled columns, separated by commas, or by semicolons where a name holds a comma (default: all)",
    )
    arguments = parser.parse_args()
    # Column names may hold commas ("AVX-512, no data tiling"): give them separated by ";" then.
    columns = arguments.columns.split(";" if ";" in (arguments.columns or "") else ",") if arguments.columns else None
    main(arguments.shapes.split(","), arguments.rounds, columns)
