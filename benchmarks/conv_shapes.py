"""GFLOP/s of one convolution per shape of ResNet-18/50 and MobileNetV2, as dycl_iree compiles it for
AVX-512 and for AVX2 CPUs, next to PyTorch, ONNX Runtime and this machine's single-thread SGEMM.

    python benchmarks/conv_shapes.py [--rounds 5] [--shapes stem,layer3_3x3] [--columns "AVX2 im2col,..."]

Each shape is one `Conv2d` (+ ReLU) exported by `dycl_iree.export`, batch 1, with input and output
in NHWC order (the model permutes them), as the convolution sits between channels-last neighbours
in a network, where the exporter's transposes cancel. Columns, all one thread, timed alternating
in one process (median over rounds of the process's CPU time per call: the machine is shared, and
wall time counts the other jobs too):

- `torch`: PyTorch eager (oneDNN);
- `onnxruntime`: the same Conv2d + ReLU in NCHW through the TorchScript ONNX exporter, ONNX
  Runtime's CPU provider (it picks its own layout);
- `AVX-512 as exported`: the flags `llvm-cpu` gets on an AVX-512 host (direct channels-last
  convolution; a 1x1 convolution's matmul data-tiled where `dycl_iree.data_tiling` picks it), code
  for this machine's CPU;
- `AVX-512, no data tiling`: the same without data tiling, the form before it;
- `AVX2 direct`: the same flags with code for an AVX2 CPU (`znver3`), which this machine runs too;
- `AVX2 as exported`: code for `znver3` from the graph the exporter makes on a CPU without AVX-512
  (`decompositions._im2col_wins`: im2col + matmul for many channels, Winograd's F(2x2, 3x3) for
  those of them that are 3x3 with stride 1, `winograd.output_tile`) with the AVX2 matmul rule
  (`data_tiling.compile_flags(avx512=False)`: data tiling of the matmuls with few rows and a large
  weight, a 6 x 16 register tile for the other large ones), what an AVX2 host gets;
- `AVX2 with IREE's matmul tiles`: the same without that rule (the form before it);
- `AVX2 data-tiled` / `+ ukernels`: every matmul data-tiled (`--iree-opt-data-tiling`), with
  IREE's mmt4d ukernels too (`--iree-llvmcpu-enable-ukernels=all`), measured and not taken;
- `AVX2 im2col`: the same without Winograd (the form before it); `AVX-512 direct`: the AVX-512
  column without Winograd;
- `... Winograd F(2x2)` / `F(4x4)`: every 3x3 stride-1 convolution as Winograd with that output
  tile (`winograd.convolution_with_transformed_filter`), whatever `output_tile` would pick;
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["DYCL_IREE_EXPORT_CACHE"] = "0"

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import dycl_iree  # noqa: E402
from dycl_iree import compile as compile_flags  # noqa: E402
from dycl_iree import cpu_features, data_tiling, winograd  # noqa: E402

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
    "layer3_3x3s2_128_256": (128, 256, 28, 3, 2, 1, 1),
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
}
AVX2_CPU = "znver3"


class ChannelsLastConvolution(nn.Module):
    """NHWC in, NHWC out: a convolution between channels-last neighbours."""

    def __init__(self, convolution: nn.Conv2d) -> None:
        super().__init__()
        self.convolution = convolution

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.convolution(x.permute(0, 3, 1, 2))).permute(0, 2, 3, 1)


def _variants() -> dict[str, tuple[list[str], bool, bool, int | None]]:
    """The `llvm-cpu` flags of each compiled column, whether the exporter sees AVX-512, whether
    `data_tiling`'s rule applies (AVX-512's or AVX2's, as the exporter sees the CPU), and the
    Winograd output tile every 3x3 stride-1 convolution takes (0: none; None: `winograd.output_tile`'s
    choice)."""
    base = [flag for flag in compile_flags.TARGETS["llvm-cpu"] if not flag.startswith("--iree-llvmcpu-target-cpu=")]
    avx2 = base + [f"--iree-llvmcpu-target-cpu={AVX2_CPU}"]
    return {
        "AVX-512 as exported": (base + ["--iree-llvmcpu-target-cpu=host"], True, True, None),
        "AVX-512, no data tiling": (base + ["--iree-llvmcpu-target-cpu=host"], True, False, None),
        "AVX-512 direct": (base + ["--iree-llvmcpu-target-cpu=host"], True, True, 0),
        "AVX-512 Winograd F(2x2)": (base + ["--iree-llvmcpu-target-cpu=host"], True, True, 2),
        "AVX-512 Winograd F(4x4)": (base + ["--iree-llvmcpu-target-cpu=host"], True, True, 4),
        "AVX2 direct": (avx2, True, False, 0),
        "AVX2 as exported": (avx2, False, True, None),
        "AVX2 with IREE's matmul tiles": (avx2, False, False, None),
        "AVX2 im2col": (avx2, False, False, 0),
        "AVX2 data-tiled": (avx2 + ["--iree-opt-data-tiling"], False, False, None),
        "AVX2 data-tiled + ukernels": (
            avx2 + ["--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=all"], False, False, None),
        "AVX2 Winograd F(2x2)": (avx2, False, False, 2),
        "AVX2 Winograd F(4x4)": (avx2, False, False, 4),
    }


def _export(
    model: nn.Module, example: torch.Tensor, variant: tuple[list[str], bool, bool, int | None], folder: Path, name: str
):
    """A compiled-host runner of `model` built with exactly these flags, by an exporter that sees (or
    not) AVX-512, data-tiles (or not) and takes the given Winograd tile (the target table, the probe,
    the data-tiling flags and the Winograd rule are patched for the call; the whole-export cache is
    off, since its key does not see the probe)."""
    flags, avx512, tiled, tile = variant
    saved, saved_probe, saved_tiling, saved_tile = (
        compile_flags.TARGETS["llvm-cpu"],
        cpu_features.has_avx512,
        data_tiling.compile_flags,
        winograd.output_tile,
    )
    compile_flags.TARGETS["llvm-cpu"] = flags
    cpu_features.has_avx512 = lambda: avx512
    if not tiled:
        data_tiling.compile_flags = lambda **rule: []
    if tile is not None:
        winograd.output_tile = lambda *shape: tile
    try:
        bundle = dycl_iree.export(model, (example,))
    finally:
        compile_flags.TARGETS["llvm-cpu"] = saved
        cpu_features.has_avx512 = saved_probe
        data_tiling.compile_flags = saved_tiling
        winograd.output_tile = saved_tile
    return dycl_iree.load(bundle.save(folder / f"{name}.dycl"), device="local-sync")


def _onnxruntime(convolution: nn.Conv2d, example: torch.Tensor):
    """A call of the convolution + ReLU in NCHW on ONNX Runtime, one thread; checked against PyTorch."""
    import io
    import warnings

    import onnxruntime

    plain = nn.Sequential(convolution, nn.ReLU()).eval()
    nchw = example.permute(0, 3, 1, 2).contiguous()
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
        torch.onnx.export(plain, (nchw,), buffer, dynamo=False)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(buffer.getvalue(), options, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: nchw.numpy()}
    with torch.no_grad():
        np.testing.assert_allclose(session.run(None, feed)[0], plain(nchw).numpy(), rtol=1e-4, atol=1e-4)
    return lambda: session.run(None, feed)


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
        torch.manual_seed(0)
        model = ChannelsLastConvolution(nn.Conv2d(channels, features, kernel, stride, padding, groups=groups)).eval()
        example = torch.randn(1, size, size, channels)
        with torch.no_grad():
            expected = model(example).numpy()
            exact = copy.deepcopy(model).double()(example.double()).numpy()
        errors = {"torch": _relative_error(expected, exact)}
        out_size = expected.shape[1]
        flops = 2 * features * out_size * out_size * (channels // groups) * kernel * kernel
        patches = torch.randn(out_size * out_size, kernel * kernel * channels // groups)
        weights = torch.randn(kernel * kernel * channels // groups, features)
        calls = {"torch": lambda: model(example), "onnxruntime": _onnxruntime(model.convolution, example)}
        for variant, flags in variants.items():
            run = _export(model, example, flags, folder, f"{name}-{len(calls)}")
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
        rates = {key: flops / statistics.median(values) / 1e9 for key, values in times.items()}
        print(f"| {name} | " + " | ".join(f"{rate:.1f}" for rate in rates.values()) + " |", flush=True)
        print("  largest error / largest output: " + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shape names (default: all)")
    parser.add_argument("--columns", help="comma-separated compiled columns (default: all)")
    arguments = parser.parse_args()
    main(arguments.shapes.split(","), arguments.rounds, arguments.columns.split(",") if arguments.columns else None)
