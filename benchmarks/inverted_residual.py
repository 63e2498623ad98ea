"""Milliseconds of MobileNetV2's inverted-residual blocks at their 224x224 shapes, as dycl_iree
exports them with and without its rewrites for them, next to PyTorch and ONNX Runtime.

    python benchmarks/inverted_residual.py [--rounds 7] [--blocks 16_96_24_112s2,24_144_24_56]
    python benchmarks/inverted_residual.py --blocks stem_32_16_112

Each block is the model's (1x1 expansion + BN + ReLU6, depthwise 3x3 + BN + ReLU6, 1x1 projection +
BN; the residual add where the stride is 1 and the channels match), batch 1, NCHW in and out as
in the network. Columns, one thread each, timed alternating in one process (median over rounds of
the process's CPU time per call; the machine is shared):

- `as exported`: what the exporter does on this machine;
- `padding copied`: the depthwise convolution pads the expansion's activation itself (a copy into
  a padded buffer), the form before `padded_expansion` (`Expansions.padded_input` patched to None);
- `tile from 64`: the AVX2 matmul rule's register tile only for matmuls of 64 channels in and out or
  more (`data_tiling.REGISTER_TILE_MIN_SIZE` 64), the rule before;
- `before`: both, the exporter before these two changes.

`stem_32_16_112` is the network's stem (3 -> 32 channels, 3x3, stride 2, BN, ReLU6 at 224x224) and its
first block (depthwise 32 at 112x112, projection to 16), in the columns `as exported` and `stem
unpadded`: the depthwise taps pad the stem's activation themselves (`padded_expansion.
MAX_CONVOLUTION_CHANNELS` patched to 0), the form before the stem wrote that padded tensor.

Under each row the largest error of each column against PyTorch, over the largest output.
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

import numpy as np  # noqa: E402
import torch  # noqa: E402
from conv_shapes import onnxruntime_call  # noqa: E402

import dycl_iree  # noqa: E402
from dycl_iree import data_tiling, padded_expansion  # noqa: E402
from models.imagenet import InvertedResidual, conv_bn_relu6  # noqa: E402

# name: (in channels, out channels, input size, stride, expansion)
BLOCKS = {
    "16_96_24_112s2": (16, 24, 112, 2, 6),
    "24_144_24_56": (24, 24, 56, 1, 6),
    "24_144_32_56s2": (24, 32, 56, 2, 6),
    "32_192_32_28": (32, 32, 28, 1, 6),
    "32_192_64_28s2": (32, 64, 28, 2, 6),
    "64_384_64_14": (64, 64, 14, 1, 6),
    "96_576_160_14s2": (96, 160, 14, 2, 6),
    "160_960_160_7": (160, 160, 7, 1, 6),
}
STEM = "stem_32_16_112"  # the stem and the first block: (3, 224) in
# column: (REGISTER_TILE_MIN_SIZE, whether the expansion pads the depthwise input, whether the stem does)
COLUMNS = {
    "as exported": (None, True, True),
    "padding copied": (None, False, True),
    "tile from 64": (64, True, True),
    "before": (64, False, True),
}
STEM_COLUMNS = {"as exported": (None, True, True), "stem unpadded": (None, True, False)}


def _block(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == STEM:
        block = torch.nn.Sequential(conv_bn_relu6(3, 32, 3, 2), InvertedResidual(32, 16, 1, 1)).eval()
    else:
        channels, features, size, stride, expansion = BLOCKS[name]
        block = InvertedResidual(channels, features, stride, expansion).eval()
    with torch.no_grad():  # statistics as a trained network's, so that BN is not the identity
        for module in block.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
                module.bias.uniform_(-0.5, 0.5)
    return block


def _export(block: torch.nn.Module, example: torch.Tensor, rules: tuple, folder: Path):
    """A compiled-host runner of `block` exported with a column's rules patched in."""
    tile_from, padded, stem_padded = rules
    saved = (
        data_tiling.REGISTER_TILE_MIN_SIZE,
        padded_expansion.Expansions.padded_input,
        padded_expansion.MAX_CONVOLUTION_CHANNELS,
    )
    if tile_from is not None:
        data_tiling.REGISTER_TILE_MIN_SIZE = tile_from
    if not padded:
        padded_expansion.Expansions.padded_input = lambda *args: None
    if not stem_padded:
        padded_expansion.MAX_CONVOLUTION_CHANNELS = 0
    try:
        bundle = dycl_iree.export(block, (example,))
    finally:
        (
            data_tiling.REGISTER_TILE_MIN_SIZE,
            padded_expansion.Expansions.padded_input,
            padded_expansion.MAX_CONVOLUTION_CHANNELS,
        ) = saved
    assert bundle.host == "compiled"
    return dycl_iree.load(bundle.save(folder / f"{len(list(folder.iterdir()))}.dycl"), device="local-sync")


def main(names: list[str], rounds: int) -> None:
    torch.set_num_threads(1)
    folder = Path(tempfile.mkdtemp(prefix="dycl-inverted-residual-"))
    for name in names:
        columns = STEM_COLUMNS if name == STEM else COLUMNS
        print("| block (in_expanded_out_size, stride) | PyTorch eager | ONNX Runtime | " + " | ".join(columns) + " |")
        print("|---|" + "---|" * (len(columns) + 2))
        block = _block(name)
        shape = (1, 3, 224, 224) if name == STEM else (1, BLOCKS[name][0], BLOCKS[name][2], BLOCKS[name][2])
        example = torch.randn(*shape)
        with torch.no_grad():
            expected = block(example).numpy()
        calls = {"torch": lambda: block(example), "onnxruntime": onnxruntime_call(block, example)}
        for column, rules in columns.items():
            run = _export(block, example, rules, folder)
            calls[column] = lambda run=run: run(example.numpy())
        errors = {}
        with torch.no_grad():
            for key, call in calls.items():
                output = np.asarray(call())
                errors[key] = float(np.abs(output - expected).max() / np.abs(expected).max())
            times: dict[str, list[float]] = {key: [] for key in calls}
            for _ in range(rounds):
                for key, call in calls.items():
                    start = time.process_time()
                    for _ in range(10):
                        call()
                    times[key].append((time.process_time() - start) / 10)
        medians = [f"{statistics.median(times[key]) * 1e3:.3f}" for key in calls]
        print(f"| {name} | " + " | ".join(medians) + " |", flush=True)
        print("  largest error / largest output: " + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (default 7)")
    parser.add_argument("--blocks", default=",".join(BLOCKS), help="comma-separated block names (default: all)")
    arguments = parser.parse_args()
    main(arguments.blocks.split(","), arguments.rounds)
