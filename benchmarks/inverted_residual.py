"""Milliseconds of MobileNetV2's inverted-residual blocks at their 224x224 shapes, as dycl_iree
exports them with and without its rewrites for them, next to PyTorch and ONNX Runtime.

    python benchmarks/inverted_residual.py [--rounds 7] [--blocks 16_96_24_112s2,24_144_24_56]

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
from models.imagenet import InvertedResidual  # noqa: E402

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
# column: (REGISTER_TILE_MIN_SIZE, whether the expansion pads the depthwise input)
COLUMNS = {
    "as exported": (None, True),
    "padding copied": (None, False),
    "tile from 64": (64, True),
    "before": (64, False),
}


def _block(name: str) -> torch.nn.Module:
    channels, features, size, stride, expansion = BLOCKS[name]
    torch.manual_seed(0)
    block = InvertedResidual(channels, features, stride, expansion).eval()
    with torch.no_grad():  # statistics as a trained network's, so that BN is not the identity
        for module in block.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
                module.bias.uniform_(-0.5, 0.5)
    return block


def _export(block: torch.nn.Module, example: torch.Tensor, column: str, folder: Path):
    """A compiled-host runner of `block` exported with the column's rules patched in."""
    tile_from, padded = COLUMNS[column]
    saved = data_tiling.REGISTER_TILE_MIN_SIZE, padded_expansion.Expansions.padded_input
    if tile_from is not None:
        data_tiling.REGISTER_TILE_MIN_SIZE = tile_from
    if not padded:
        padded_expansion.Expansions.padded_input = lambda *args: None
    try:
        bundle = dycl_iree.export(block, (example,))
    finally:
        data_tiling.REGISTER_TILE_MIN_SIZE, padded_expansion.Expansions.padded_input = saved
    assert bundle.host == "compiled"
    return dycl_iree.load(bundle.save(folder / f"{len(list(folder.iterdir()))}.dycl"), device="local-sync")


def main(names: list[str], rounds: int) -> None:
    torch.set_num_threads(1)
    folder = Path(tempfile.mkdtemp(prefix="dycl-inverted-residual-"))
    print("| block (in_expanded_out_size, stride) | PyTorch eager | ONNX Runtime | " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---|" * (len(COLUMNS) + 2))
    for name in names:
        block = _block(name)
        example = torch.randn(1, BLOCKS[name][0], BLOCKS[name][2], BLOCKS[name][2])
        with torch.no_grad():
            expected = block(example).numpy()
        calls = {"torch": lambda: block(example), "onnxruntime": onnxruntime_call(block, example)}
        for column in COLUMNS:
            run = _export(block, example, column, folder)
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
