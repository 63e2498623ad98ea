"""Whether the exporter's Winograd convolutions, its AVX2 matmul rule, its depthwise activations or
IREE's ukernels make the deployment-size models faster on one thread, and keep them right.

    python benchmarks/convolution_forms.py [--models resnet18,resnet50] [--rounds 9] [--cpu znver3]
        [--compare winograd|winograd-f4|winograd-matmuls|one-row-linear|average-pooling|dynamic-rows
                   |linear-weights|matmuls|depthwise|scaled-taps|small-matmuls|padded-expansion|stem-padding
                   |inverted-residuals|panels|tap-tiles|convolution-bounds|winograd-padding|late-matmuls
                   |late-matmuls-unpadded|padded-weight-view|winograd-panels|avx512
                   |avx512-before|ukernels]

Each model of `models/imagenet.py` (or of the zoo, by its name: `--models sdn_mobilenet`) is
exported twice by `dycl_iree.export` (compiled host, the flags `llvm-cpu` gets on this machine):
once as the exporter writes it (`winograd.output_tile` picks the 3x3 convolutions written as
Winograd's F(2x2, 3x3)), once with every convolution in the form it had before (`output_tile`
patched to 0: IREE's direct convolution, or im2col + matmul without AVX-512). With `--compare
matmuls` the two exports differ instead in the AVX2 matmul rule
(`data_tiling.compile_flags(avx512=False)`: data tiling of the matmuls with few rows and a large
weight, the 6 x 16 register tile for the other large ones), off (`cpu_features.has_avx2` patched to
False: IREE's own choice for every matmul) or on as exported; it is measured on an AVX2 machine
only. `--compare depthwise`: a depthwise convolution's ReLU6 / ReLU applied after the taps'
transpose back to NCHW (`lower._activated_depthwise` patched to None) or on their NHWC side, as
exported. `--compare scaled-taps`: depthwise taps with their weights divided by the channel's
largest and the sum multiplied by it (`decompositions.SCALED_TAPS`), or not. `--compare
small-matmuls`: the AVX2 rule's register tile for matmuls of 64 or more channels in and out
(`data_tiling.REGISTER_TILE_MIN_SIZE` patched to 64, the rule before) or of 16 or more, as exported
(MobileNetV2's 1x1 convolutions of 16-32 channels). `--compare padded-expansion`: a depthwise
convolution after the ReLU6 of a 1x1 one padding that activation (`constant_pad_nd`, the form
before: `padded_expansion.Expansions.padded_input` patched to None) or reading the padded tensor
the 1x1 convolution's matmul writes, as exported (`dycl_iree/padded_expansion.py`). `--compare
stem-padding`: MobileNetV2's stem padding nothing (`padded_expansion.MAX_CONVOLUTION_CHANNELS` 0: the
taps pad its activation, which IREE fuses into the stem's dispatch as a scalar store) or writing
the depthwise convolution's padded input itself, as exported. `--compare
inverted-residuals`: both of these before (register tile from 64, padding copied) and as exported.
`--compare late-matmuls`: the AVX2 rule before (data tiling up to 196 rows, unpadded weights, every
reduction whole: `data_tiling.AVX2_MAX_ROWS` 196, `PADDED_STRIDE` and `REGISTER_TILE_BLOCKED_FROM`
0) or as exported (the register tile from 48 rows over padded weights, deep reductions in blocks);
`--compare late-matmuls-unpadded` adds the rule as exported without the padded weights.
`--compare padded-weight-view`: weights padded from rows 2 KiB apart multiplied whole with the
result sliced after the bias (`decompositions.PADDED_WEIGHT_VIEW` False, `data_tiling.PADDED_STRIDE`
512: the form before), the same weights read through a slice of their true columns, so that the
ops after the matmul fuse into its dispatch, and that with weights padded from rows 1 KiB apart
(as exported).
`--compare panels`: large matmul weights as stored (or padded) before, or read as panels of 16
columns, as exported (`data_tiling.reads_panels`; `PANELS_MIN_WEIGHT_LOG2` 0 before).
`--compare convolution-bounds`: im2col and Winograd from 128 input channels or 64 at 56x56 output
pixels (before), or from 128, 64 at 14x14 and 32 at 28x28, as exported (`winograd.outgrows_direct`).
`--compare winograd-padding`: Winograd's transformed filter as stored, or padded by 16 columns where
its rows lie a multiple of 1 KiB apart and read through a slice, as exported (`winograd._padded_view`).
`--compare winograd-f4`: 3x3 stride-1 convolutions as F(2x2, 3x3) at every size (before), or as
F(4x4, 3x3) from 28x28 pixels, as exported (`winograd.F4_MIN_PIXELS`).
`--compare winograd-matmuls`: F(4x4, 3x3)'s input transform as sums of strided slices (before), or
as two matmuls by B^T, as exported (`winograd._input_transform_by_matmuls`).
`--compare one-row-linear`: a linear layer of one row by a weight of 2^18 elements or more as a
data-tiled matmul (before), or as dot products with the weight's rows, as exported
(`decompositions.one_row_linear`). `--compare average-pooling`: an average pooling whose windows tile
its input as one mean over both window dims (before), or over the columns then the rows, as exported.
`--compare dynamic-rows`: matmuls whose rows are known only at run time in IREE's own tile (before),
or data-tiled when their weight is large, as exported (`data_tiling.DYNAMIC_ROWS`).
`--compare linear-weights`: linear layers' constant weights as the layer stores them, [out, in]
(before), or stored [in, out], as exported (`lower._constant_weight`).
`--compare tap-tiles`: depthwise taps in IREE's tile of 1 pixel x 8 channels (`tap_tiles.compile_flags`
patched to give no flag), in a row of up to 8 pixels x 8 channels, or as exported (16 channels with
AVX-512; `dycl_iree/tap_tiles.py`).
`--compare winograd-panels`: Winograd's transformed filter read by its batch matmul as stored
(padded where its rows are 1 KiB apart), or as panels of 16 columns, as exported
(`data_tiling.BATCH_PANELS_MIN_WEIGHT_LOG2`).
`--compare avx512`: with AVX-512, the convolutions in IREE's direct form (`cpu_features.
direct_convolutions_fast` patched to True), or as Winograd and im2col with the 6 x 16 register
tile only (`data_tiling.WIDE_REGISTER_TILES` empty), or with the wide register tiles, as exported.
`--compare avx512-before`: with AVX-512, the forms before AVX-512 took the AVX2 ones (IREE's direct
convolutions and its own matmul and depthwise tiles: `cpu_features.has_avx2` patched to False, which
also drops the data tiling that then took only weights of 2^19 elements, none in the zoo), or as
exported.
`--compare ukernels`:
the data-tiled matmuls with or without IREE's ukernels (`--iree-llvmcpu-enable-ukernels=all` added
to `data_tiling.compile_flags`). Both are checked against PyTorch eager on every sample and timed
alternating in this one process on `local-sync`, as CPU time per call (`compile_flags.check` and
`compile_flags.time_alternating`, the same rules), with PyTorch eager (one thread) in the same
alternation. `--cpu znver3` exports as for an AVX2 host on an AVX-512 machine
(`compile_flags.exporting_for`). ONNX Runtime (the `bench` peer, one thread) runs in the same
alternation, for reference (checked by `bench`, not here; its ratio is to the form without baseline
form too), and so does the first form's bundle loaded a second time from files of its own
(`compile_flags.CONTROL`): identical builds in one process differed by up to 6% on a 2-core Xeon.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ["DYCL_IREE_EXPORT_CACHE"] = "0"

import torch  # noqa: E402
from compile_flags import CONTROL, check, control_copy, exporting_for, realistic_model, time_alternating  # noqa: E402

import dycl_iree  # noqa: E402
from dycl_iree import cpu_features, data_tiling, decompositions, lower, padded_expansion, tap_tiles, winograd  # noqa: E402
from dycl_iree.bench.outputs import Float64Reference  # noqa: E402
from dycl_iree.bench.peers.base import ModelContext  # noqa: E402
from dycl_iree.bench.peers.onnxruntime import OnnxRuntime  # noqa: E402

_TILING_FLAGS = data_tiling.compile_flags


def _with_all_ukernels(*preprocessing: tuple[str, ...], **rule: bool) -> list[str]:
    """The data-tiling rule's flags with IREE's ukernels for the matmuls it data-tiles."""
    return [*_TILING_FLAGS(*preprocessing, **rule), "--iree-llvmcpu-enable-ukernels=all"]


_CONSTANT_WEIGHT = lower._constant_weight  # the exporter's own, kept: `--compare linear-weights` patches it


def _filters_only(arg, rank: int = 4):
    """`lower._constant_weight` for convolution filters only: linear weights stay as stored."""
    return None if rank == 2 else _CONSTANT_WEIGHT(arg, rank)


def _average_in_one_step(input, kernel_size, stride=(), padding=(0,), ceil_mode=False, *rest):
    """`decompositions.avg_pool_as_reduction` as it was: one mean over both window dims."""
    kernel = decompositions._tiling_windows(input, kernel_size, stride, padding, ceil_mode=ceil_mode)
    tiling = kernel is not None and not (ceil_mode and decompositions._unit_strides(kernel_size, stride))
    if not tiling or (len(rest) > 1 and rest[1] is not None):  # rest: count_include_pad, divisor_override
        return _AVERAGE_IN_TWO_STEPS(input, kernel_size, stride, padding, ceil_mode, *rest)
    windows = decompositions._windows_nhwc(input, *kernel)
    return decompositions._nchw(torch.ops.aten.mean.dim(windows, [2, 4]))


_AVERAGE_IN_TWO_STEPS = decompositions.avg_pool_as_reduction


def _bounds_before(in_channels: int, pixels: int) -> bool:
    """`winograd.outgrows_direct` before 32-channel and 14x14 convolutions were measured."""
    return in_channels >= 128 or (in_channels >= 64 and pixels >= 56 * 56)


# Per comparison, its forms: the baseline first, each as (module, attribute, value patched in, or
# None to keep it), or a list of those.
COMPARISONS = {
    "winograd": {
        "without Winograd": (winograd, "output_tile", lambda *shape: 0),
        "as exported (Winograd where picked)": (winograd, "output_tile", None),
    },
    "matmuls": {
        "IREE's matmul tiles": (cpu_features, "has_avx2", lambda: False),
        "as exported (AVX2 matmul rule)": (cpu_features, "has_avx2", None),
    },
    "depthwise": {
        "activation after the taps' transpose": (lower, "_activated_depthwise", lambda *args: None),
        "as exported (activation on the taps' NHWC side)": (lower, "_activated_depthwise", None),
    },
    "scaled-taps": {
        "unscaled taps": (decompositions, "SCALED_TAPS", False),
        "as exported (scaled taps)": (decompositions, "SCALED_TAPS", None),
    },
    "small-matmuls": {
        "register tile from 64 channels": (data_tiling, "REGISTER_TILE_MIN_SIZE", 64),
        "as exported (register tile from 16 channels)": (data_tiling, "REGISTER_TILE_MIN_SIZE", None),
    },
    "padded-expansion": {
        "depthwise input padded by a copy": (padded_expansion.Expansions, "padded_input", lambda *args: None),
        "as exported (padded by the 1x1 convolution)": (padded_expansion.Expansions, "padded_input", None),
    },
    "stem-padding": {
        "stem's output padded by the depthwise taps": (padded_expansion, "MAX_CONVOLUTION_CHANNELS", 0),
        "as exported (the stem writes the padded tensor)": (padded_expansion, "MAX_CONVOLUTION_CHANNELS", None),
    },
    "inverted-residuals": {
        "before both": [
            (data_tiling, "REGISTER_TILE_MIN_SIZE", 64),
            (padded_expansion.Expansions, "padded_input", lambda *args: None),
        ],
        "as exported (register tile from 16, padded expansions)": (data_tiling, "REGISTER_TILE_MIN_SIZE", None),
    },
    "late-matmuls": {
        "AVX2 rule before (data tiling up to 196 rows, no padded weights or reduction blocks)": [
            (data_tiling, "AVX2_MAX_ROWS", 196),
            (data_tiling, "REGISTER_TILE_BLOCKED_FROM", 0),
            (data_tiling, "PADDED_STRIDE", 0),
        ],
        "as exported (register tile from 48 rows, padded weights, reduction blocks)": (
            data_tiling,
            "AVX2_MAX_ROWS",
            None,
        ),
    },
    "late-matmuls-unpadded": {
        "AVX2 rule before (data tiling up to 196 rows, no padded weights or reduction blocks)": [
            (data_tiling, "AVX2_MAX_ROWS", 196),
            (data_tiling, "REGISTER_TILE_BLOCKED_FROM", 0),
            (data_tiling, "PADDED_STRIDE", 0),
        ],
        "register tile from 48 rows, reduction blocks, unpadded weights": (data_tiling, "PADDED_STRIDE", 0),
        "as exported (the same with padded weights)": (data_tiling, "PADDED_STRIDE", None),
    },
    "padded-weight-view": {
        "weights padded from rows 2 KiB apart, multiplied whole, result sliced after the bias (before)": [
            (decompositions, "PADDED_WEIGHT_VIEW", False),
            (data_tiling, "PADDED_STRIDE", 512),
        ],
        "the same weights read through a slice": (data_tiling, "PADDED_STRIDE", 512),
        "as exported (padded from rows 1 KiB apart, read through a slice)": (data_tiling, "PADDED_STRIDE", None),
    },
    "panels": {
        "weights as stored or padded (before)": (data_tiling, "PANELS_MIN_WEIGHT_LOG2", 0),
        "as exported (large weights read as panels of 16 columns)": (data_tiling, "PANELS_MIN_WEIGHT_LOG2", None),
    },
    "convolution-bounds": {
        "im2col and Winograd from 128 channels, or 64 at 56x56 (before)": [
            (decompositions, "outgrows_direct", _bounds_before),
            (winograd, "outgrows_direct", _bounds_before),
        ],
        "as exported (from 128 channels, 64 at 14x14, 32 at 28x28)": (winograd, "outgrows_direct", None),
    },
    "winograd-padding": {
        "Winograd's filter as stored": (winograd, "_padded_view", lambda transformed, tiles: transformed),
        "as exported (padded where its rows are 1 KiB apart)": (winograd, "_padded_view", None),
    },
    "winograd-f4": {
        "F(2x2, 3x3) at every size (before)": (winograd, "F4_MIN_PIXELS", 1 << 40),
        "as exported (F(4x4, 3x3) from 28x28)": (winograd, "F4_MIN_PIXELS", None),
    },
    "winograd-matmuls": {
        "F(4x4, 3x3)'s input transform as sums of slices (before)": (
            winograd,
            "_input_transform_by_matmuls",
            winograd._input_transform_by_slices,
        ),
        "as exported (as matmuls)": (winograd, "_input_transform_by_matmuls", None),
    },
    "one-row-linear": {
        "one row by a large weight as a data-tiled matmul (before)": (lower, "one_row_linear", lambda *args: None),
        "as exported (dot products with the weight's rows)": (lower, "one_row_linear", None),
    },
    "average-pooling": {
        "average pooling as one reduction over the window (before)": (
            decompositions,
            "avg_pool_as_reduction",
            _average_in_one_step,
        ),
        "as exported (the window's columns, then its rows)": (decompositions, "avg_pool_as_reduction", None),
    },
    "dynamic-rows": {
        "matmuls of run-time rows in IREE's tile (before)": (data_tiling, "DYNAMIC_ROWS", False),
        "as exported (data-tiled when their weight is large)": (data_tiling, "DYNAMIC_ROWS", None),
    },
    "linear-weights": {
        "linear weights as stored, [out, in] (before)": (lower, "_constant_weight", _filters_only),
        "as exported (stored [in, out])": (lower, "_constant_weight", None),
    },
    "tap-tiles": {
        "IREE's tile of the depthwise taps (1 pixel x 8 channels)": (tap_tiles, "compile_flags", lambda *_: []),
        "up to 8 pixels of a row x 8 channels": (tap_tiles, "AVX512_CHANNELS", tap_tiles.CHANNELS),
        "as exported (up to 8 pixels of a row x 8 channels, 16 with AVX-512)": (tap_tiles, "compile_flags", None),
    },
    "winograd-panels": {
        "Winograd's filter read as stored (or padded)": (data_tiling, "BATCH_PANELS_MIN_WEIGHT_LOG2", 0),
        "as exported (read as panels of 16 columns)": (data_tiling, "BATCH_PANELS_MIN_WEIGHT_LOG2", None),
    },
    "avx512-before": {
        "AVX-512's forms before (IREE's direct convolutions and tiles, no tap tile)": [
            (cpu_features, "direct_convolutions_fast", lambda: True),
            (cpu_features, "has_avx2", lambda: False),
        ],
        "as exported": (cpu_features, "has_avx2", None),
    },
    "avx512": {
        "IREE's direct convolutions (before), register tiles as exported": (
            cpu_features,
            "direct_convolutions_fast",
            lambda: True,
        ),
        "Winograd and im2col, the 6 x 16 register tile only": (data_tiling, "WIDE_REGISTER_TILES", ()),
        "as exported (Winograd and im2col, wide register tiles)": (data_tiling, "WIDE_REGISTER_TILES", None),
    },
    "ukernels": {
        "as exported": (data_tiling, "compile_flags", None),
        "data-tiled matmuls with IREE's ukernels": (data_tiling, "compile_flags", _with_all_ukernels),
    },
}


def export_forms(
    model, example: tuple, dynamic_shapes, folder: Path, forms: dict
) -> tuple[dict[str, object], dict[str, str], Path]:
    """A compiled-host runner of `model` per form (`COMPARISONS`: a rule patched, or not), the
    size of its saved bundle in MiB (the filters Winograd transforms are stored transformed: 16/9
    of their size) and the export's wall seconds, as text; and where the first form's bundle is."""
    runs: dict[str, object] = {}
    sizes: dict[str, str] = {}
    paths: list[Path] = []
    for name, patch in forms.items():
        patches = patch if isinstance(patch, list) else [patch]
        saved = [(owner, attribute, getattr(owner, attribute)) for owner, attribute, _ in patches]
        for owner, attribute, rule in patches:
            if rule is not None:
                setattr(owner, attribute, rule)
        start = time.perf_counter()
        try:
            bundle = dycl_iree.export(model, example, dynamic_shapes=dynamic_shapes, cache=False)
        finally:
            for owner, attribute, value in saved:
                setattr(owner, attribute, value)
        if bundle.host != "compiled":
            raise SystemExit("the export took the Python host; its convolutions are not what is measured here")
        path = bundle.save(folder / f"form-{len(runs)}.dycl")
        paths.append(Path(path))
        runs[name] = dycl_iree.load(str(path), device="local-sync", host="compiled")
        size = sum(file.stat().st_size for file in Path(path).rglob("*") if file.is_file())
        sizes[name] = f"{size / 2**20:.1f} | {time.perf_counter() - start:.0f}"
    return runs, sizes, paths[0]


def onnxruntime_call(model_name: str, model, example: tuple, samples: list[tuple], folder: Path):
    """A call of ONNX Runtime on one thread on the first sample, as `bench` runs it."""
    peer = OnnxRuntime()
    peer.prepare(ModelContext(model_name, model, example, samples, folder, threads=1))
    feed = peer.convert(samples[0])
    return lambda *inputs: peer.run(feed)


def eager_call(model):
    """A call of the model in PyTorch eager on the sample's numpy inputs, without autograd."""

    def call(*inputs):
        with torch.no_grad():
            return model(*[torch.from_numpy(value) if hasattr(value, "dtype") else value for value in inputs])

    return call


def main(model_names: list[str], rounds: int, cpu: str | None, compare: str = "winograd") -> None:
    torch.set_num_threads(1)
    forms = COMPARISONS[compare]
    baseline = next(iter(forms))
    print(f"load average at start: {os.getloadavg()[0]:.1f}; {rounds} rounds; CPU ms per call, one thread")
    print(
        "| model | form | median ms | min-max ms | ratio to without (median, min-max) | max abs error "
        "| within contract | bundle MiB | export s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for model_name in model_names:
        model, example, dynamic_shapes, samples, expected = realistic_model(model_name)
        with tempfile.TemporaryDirectory(prefix="dycl-convolution-forms-") as folder:
            with exporting_for(cpu):
                runs, sizes, first = export_forms(model, example, dynamic_shapes, Path(folder), forms)
            # The first form's bundle again from files of its own: the spread of identical builds in
            # one process (`compile_flags.CONTROL`).
            runs[CONTROL], _ = control_copy(first, Path(folder))
            exact = Float64Reference(model)
            errors = {name: check(run, samples, expected, exact) for name, run in runs.items()}
            try:
                ort = onnxruntime_call(model_name, model, example, samples, Path(folder))
                ort()
                runs["onnxruntime"], errors["onnxruntime"] = ort, (float("nan"), None)
            except Exception as error:  # the ONNX export or ONNX Runtime fails on some decoders (README, peers)
                print(f"| {model_name} | onnxruntime | failed: {str(error).splitlines()[0][:160]} | | | | | | |")
            runs["PyTorch eager"] = eager_call(model)
            errors["PyTorch eager"] = (float("nan"), None)
            times = time_alternating(runs, samples[0], rounds)
        for name, series in times.items():
            ratios = [value / reference for value, reference in zip(series, times[baseline])]
            worst, reason = errors[name]
            size = sizes.get(name, "- | -")
            print(
                f"| {model_name} | {name} | {statistics.median(series) * 1e3:.2f} | "
                f"{min(series) * 1e3:.2f}-{max(series) * 1e3:.2f} | "
                f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) | {worst:.2e} | "
                f"{'yes' if reason is None else 'NO: ' + reason} | {size} |",
                flush=True,
            )
        print(f"(load average after {model_name}: {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,resnet50", help="models of models/imagenet.py")
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds (default 9)")
    parser.add_argument("--cpu", help="export and compile as on a host with this CPU and no AVX-512 (e.g. znver3)")
    parser.add_argument("--compare", choices=list(COMPARISONS), default="winograd", help="which rule's forms")
    arguments = parser.parse_args()
    main(arguments.models.split(","), arguments.rounds, arguments.cpu, arguments.compare)
