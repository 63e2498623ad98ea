"""Wall time of a network's stages, each exported on its own, against ONNX Runtime: where the
bundle is ahead and where it is behind, measured as a caller sees it (unlike a profile, which charges
each dispatch its own cold misses and the profiler's cost).

    python benchmarks/stage_walls.py [--model mobilenet_v2] [--stages 0:2,2:4,...,head] [--cold]

A stage `a:b` is `model.features[a:b]` of a `models/imagenet.py` network with a `features`
sequence (MobileNetV2), fed what `features[:a]` makes of the model's example; `head` is the pooling
and the classifier after the features. Each stage is exported (`dycl_iree.export`, cached like any
export) and run on the Python host (`local-sync`, one thread) next to `bench`'s `onnxruntime`
candidate for the same stage, alternating turns in one process (`bench.timing.time_rounds`; wall ms
per call, the median over rounds). With `--cold` every call follows a write of 64 MiB, so that the
stage's weights and activations come from memory, as a stage's do when the rest of a network ran
in between; the sweep itself is not timed.

A stage's input and output are NCHW, so both sides pay a layout change at its ends that the whole
network does not have: the stages' sum is not the network's time, and a stage's ratio is only read
against the other stages'.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from layer_profile import onnx_peer  # noqa: E402
from torch import nn  # noqa: E402

import dycl_iree  # noqa: E402
import host_runtime  # noqa: E402
from dycl_iree.bench.results import CandidateResult, summarize  # noqa: E402
from dycl_iree.bench.timing import Timed, time_rounds  # noqa: E402
from models import imagenet  # noqa: E402

STAGES = "0:2,2:4,4:7,7:11,11:14,14:17,17:19,head"
SWEEP_BYTES = 64 << 20


class Head(nn.Module):
    """MobileNetV2's pooling and classifier, after its features."""

    def __init__(self, classifier: nn.Module) -> None:
        super().__init__()
        self.classifier = classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def stage(model: nn.Module, example: torch.Tensor, name: str) -> tuple[nn.Module, torch.Tensor]:
    """The stage `name` of `model` and its input (what the features before it make of `example`)."""
    features = list(model.features)
    start, end = (len(features), None) if name == "head" else map(int, name.split(":"))
    with torch.no_grad():
        for layer in features[:start]:
            example = layer(example)
    part = Head(model.classifier) if name == "head" else nn.Sequential(*features[start:end])
    return part.eval(), example.detach().clone()


def cold_medians(timed: list[Timed], rounds: int, repeat: int) -> dict[str, float]:
    """Median wall ms of one call of each candidate, every call after a write of SWEEP_BYTES."""
    sweep = np.zeros(SWEEP_BYTES // 4, dtype=np.float32)
    calls: dict[str, list[float]] = {item.result.candidate: [] for item in timed}
    for _ in range(rounds):
        for item in timed:
            for _ in range(repeat):
                np.add(sweep, 1.0, out=sweep)
                start = time.perf_counter()
                item.run(None)
                calls[item.result.candidate].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(values) for name, values in calls.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet_v2", help="a models.imagenet builder with `features`")
    parser.add_argument("--stages", default=STAGES, help=f"comma-separated a:b or head (default {STAGES})")
    parser.add_argument("--rounds", type=int, default=11, help="timed rounds (default 11)")
    parser.add_argument("--calls", type=int, default=20, help="calls per turn (default 20; 5 with --cold)")
    parser.add_argument("--cold", action="store_true", help="write 64 MiB before every call")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, (example,) = getattr(imagenet, args.model)()
    model = model.eval()
    calls = 5 if args.cold and args.calls == 20 else args.calls
    print(f"{args.model}, one thread, wall ms per call ({'cold' if args.cold else 'warm'}, {args.rounds} rounds)")
    print("| stage | compiled host | ONNX Runtime | ONNX Runtime / bundle |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="stage-walls-") as folder:
        for name in args.stages.split(","):
            part, x = stage(model, example, name)
            work = Path(folder) / name.replace(":", "-")
            work.mkdir()
            runner = host_runtime.load(dycl_iree.export(part, (x,)).save(work / "bundle"))
            peer, _ = onnx_peer(part, x, work)
            inputs, feed = x.numpy(), peer.convert((x,))
            timed = [
                Timed(run=lambda _, r=runner: r(inputs), samples=[None], result=CandidateResult("bundle")),
                Timed(run=lambda _, p=peer: p.run(feed), samples=[None], result=CandidateResult("onnxruntime")),
            ]
            if args.cold:
                medians = cold_medians(timed, args.rounds, calls)
            else:
                time_rounds(timed, rounds=args.rounds, repeat=calls)
                for item in timed:
                    summarize(item.result)
                medians = {item.result.candidate: item.result.latency_ms for item in timed}
            ours, theirs = medians["bundle"], medians["onnxruntime"]
            print(f"| {name} | {ours:.3f} | {theirs:.3f} | {theirs / ours:.2f} |", flush=True)


if __name__ == "__main__":
    main()
