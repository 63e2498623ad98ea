"""Where a realistic-size model's time goes, kernel by kernel: the exported bundle under IREE's
profiler next to the same model's ONNX graph under ONNX Runtime's, one thread each.

    python benchmarks/layer_profile.py [--models resnet50,mobilenet_v2] [--calls 20] [--top 25]

For each model of `models/imagenet.py` this exports the bundle (`dycl_iree.export`, cached like any
export) and prepares `bench`'s own `onnxruntime` candidate (the ONNX graph of the frozen
TorchScript module, its session options at one thread), then:

- runs the bundle's `main` in `iree-benchmark-module` on `local-sync` with the caching allocator the
  runner uses (`host_runtime.runner._BUFFER_CACHE`) and IREE's host-execution profiling, and reads
  each dispatch's time per call from `iree-profile statistics`;
- runs that graph in a session with the candidate's options and ONNX Runtime's profiler on, and reads
  each node's kernel time;
- times both without profiling, as `bench` times its candidates (`bench.timing.time_rounds`: 9
  rounds of alternating turns of `--calls` calls each; wall ms per call, the median over rounds),
  since profiling adds its own cost to each kernel.

It prints, per model, both sides' kernel time by kind (IREE's dispatch kinds: `matmul`,
`matmul_like` for data-tiled and batch matmuls, `conv`, `elementwise`, `slow_memcpy` for copies
IREE could not write as plain memcpys, ...; ONNX Runtime's op types) and the `--top` costliest
kernels of each. Neither side's kernels map one to one onto the other's: IREE fuses differently and
the exporter rewrites convolutions (`winograd.py`, `decompositions.py`), so the kinds and the tops
are read side by side, not row by row.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import dycl_iree  # noqa: E402
import host_runtime  # noqa: E402
from dycl_iree.bench.peers.base import ModelContext  # noqa: E402
from dycl_iree.bench.peers.onnx_graph import export_onnx  # noqa: E402
from dycl_iree.bench.peers.onnxruntime import OnnxRuntime  # noqa: E402
from dycl_iree.bench.results import CandidateResult, summarize  # noqa: E402
from dycl_iree.bench.timing import Timed, time_rounds  # noqa: E402
from dycl_iree.vm_remaps import runtime_tool  # noqa: E402
from host_runtime.runner import _BUFFER_CACHE  # noqa: E402
from models import imagenet  # noqa: E402

ROUNDS = 9


def _tool(name: str) -> str:
    found = runtime_tool(name)
    if found is None:
        raise SystemExit(f"{name} not found (it comes with iree-base-runtime)")
    return str(found)


def iree_kernels(bundle: Path, sample: Path, calls: int, work: Path) -> dict[str, float]:
    """ms per call of each dispatch of the bundle's `main` (IREE's host-execution profile)."""
    profile = work / "iree.ireeprof"
    command = [
        _tool("iree-benchmark-module"),
        f"--module={bundle / 'llvm-cpu.vmfb'}",
        "--function=main",
        "--device=local-sync",
        f"--device_allocator={_BUFFER_CACHE}",
        f"--input=@{sample}",
        f"--benchmark_min_time={calls}x",
        "--device_profiling_mode=host-execution",
        f"--device_profiling_output={profile}",
    ]
    _run(command)
    rows = _run([_tool("iree-profile"), "statistics", "--format=jsonl", str(profile)])
    kernels: dict[str, float] = defaultdict(float)
    for line in rows.splitlines():
        row = json.loads(line)
        if row.get("row_type") == "host_execution_function" and row.get("function_name"):
            # `seg0$async_dispatch_5_matmul_...`: a bundle of several segments numbers each one's
            # dispatches from 0, so the segment stays in the name.
            name = row["function_name"].replace("$async_", "/")
            kernels[name] += row["total_duration_ns"] / 1e6 / calls
    return dict(kernels)


def _run(command: list[str]) -> str:
    """A tool's standard output; its failure ends the script with the command and the tool's own words."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr.strip()[-2000:]}")
    return done.stdout


def onnx_peer(model: torch.nn.Module, example: torch.Tensor, work: Path) -> tuple[OnnxRuntime, ModelContext]:
    """`bench`'s `onnxruntime` candidate for the model at one thread (its ONNX graph, its session), with
    the context that holds the graph."""
    context = ModelContext("model", model, (example,), [(example,)], work, threads=1)
    peer = OnnxRuntime()
    peer.prepare(context)
    return peer, context


def onnx_kernels(peer: OnnxRuntime, context: ModelContext, calls: int) -> dict[str, tuple[str, float]]:
    """ms per call of each node's kernel, with its op type: the peer's graph in a session with the
    peer's options and ONNX Runtime's profiler on."""
    import onnxruntime

    graph, _ = context.shared("onnx", lambda: export_onnx(context, dynamic_dims=False))  # the peer's, built
    options = peer.session.get_session_options()
    options.enable_profiling = True
    options.profile_file_prefix = str(context.folder / "onnxruntime")
    session = onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    feed = peer.convert(context.example_inputs)
    for _ in range(calls):
        session.run(None, feed)
    events = json.loads(Path(session.end_profiling()).read_text())
    kernels: dict[str, tuple[str, float]] = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            name = event["name"].removesuffix("_kernel_time")
            op, total = kernels.get(name, (event["args"].get("op_name", "?"), 0.0))
            kernels[name] = (op, total + event["dur"] / 1e3 / calls)
    return kernels


def wall_times(runner, peer: OnnxRuntime, example: torch.Tensor, calls: int) -> tuple[float, float]:
    """Wall ms per call of the bundle and of ONNX Runtime, timed as `bench` times candidates
    (`bench.timing.time_rounds`: alternating turns of `calls` calls; the median over rounds)."""
    x = example.numpy()
    feed = peer.convert((example,))
    timed = [
        Timed(run=lambda _: runner(x), samples=[None], result=CandidateResult("dycl")),
        Timed(run=lambda _: peer.run(feed), samples=[None], result=CandidateResult("onnxruntime")),
    ]
    time_rounds(timed, rounds=ROUNDS, repeat=calls)
    for item in timed:
        summarize(item.result)
    return timed[0].result.latency_ms, timed[1].result.latency_ms


def dispatch_kind(name: str) -> str:
    """The kind IREE names a dispatch by: the words after its number, up to its shape or element types
    (`seg0/dispatch_12_matmul_like_16x49x16x16x256_f32` -> `matmul_like`, `dispatch_4_slow_memcpy`
    -> `slow_memcpy`); a function that is no dispatch keeps its name."""
    words = name.rsplit("/", 1)[-1].split("_")
    if len(words) < 3 or words[0] != "dispatch" or not words[1].isdigit():
        return name
    kind = []
    for word in words[2:]:
        if word[0].isdigit() or re.fullmatch(r"[a-z]+\d+(x[a-z]+\d+)*", word):
            break
        kind.append(word)
    return "_".join(kind) or name


@dataclass
class Profile:
    """One model's kernels on both sides (ms per call, by name; ONNX Runtime's with their op type) and
    the wall ms per call of each (`wall_times`)."""

    iree: dict[str, float]
    onnxruntime: dict[str, tuple[str, float]]
    iree_wall: float
    onnxruntime_wall: float

    def iree_kinds(self) -> dict[str, float]:
        kinds: dict[str, float] = defaultdict(float)
        for kernel, ms in self.iree.items():
            kinds[dispatch_kind(kernel)] += ms
        return dict(sorted(kinds.items(), key=lambda item: -item[1]))

    def onnxruntime_kinds(self) -> dict[str, float]:
        kinds: dict[str, float] = defaultdict(float)
        for op, ms in self.onnxruntime.values():
            kinds[op] += ms
        return dict(sorted(kinds.items(), key=lambda item: -item[1]))


def profile_model(model: torch.nn.Module, example: torch.Tensor, calls: int, work: Path) -> Profile:
    """Export `model` for `example` into `work`, profile both sides and time them (module docstring)."""
    bundle = dycl_iree.export(model, (example,)).save(work / "bundle")
    sample = work / "input.npy"
    np.save(sample, example.numpy())
    iree = iree_kernels(bundle, sample, calls, work)
    peer, context = onnx_peer(model, example, work)
    ort = onnx_kernels(peer, context, calls)
    iree_wall, ort_wall = wall_times(host_runtime.load(bundle), peer, example, calls)
    return Profile(iree, ort, iree_wall, ort_wall)


def _side_by_side(header: str, left: list[tuple[str, float]], right: list[tuple[str, float]]) -> list[str]:
    lines = [header, "|---|---|---|---|"]
    for index in range(max(len(left), len(right))):
        a = f"{left[index][0]} | {left[index][1]:.3f}" if index < len(left) else " | "
        b = f"{right[index][0]} | {right[index][1]:.3f}" if index < len(right) else " | "
        lines.append(f"| {a} | {b} |")
    return lines


def render(name: str, profile: Profile, top: int) -> str:
    """The model's section of the report, in Markdown."""
    iree_total = sum(profile.iree.values())
    ort_total = sum(ms for _, ms in profile.onnxruntime.values())
    lines = [
        f"## {name}",
        "",
        f"Wall ms per call, alternating turns: compiled bundle {profile.iree_wall:.3f}, ONNX Runtime "
        f"{profile.onnxruntime_wall:.3f} (ONNX Runtime / bundle {profile.onnxruntime_wall / profile.iree_wall:.3f}).",
        f"Kernel ms per call under the profilers: IREE {iree_total:.3f} in {len(profile.iree)} dispatch functions, "
        f"ONNX Runtime {ort_total:.3f} in {len(profile.onnxruntime)} nodes.",
        "",
    ]
    lines += _side_by_side(
        "| IREE dispatch kind | ms | ONNX Runtime op | ms |",
        list(profile.iree_kinds().items()),
        list(profile.onnxruntime_kinds().items()),
    )
    costliest = sorted(profile.iree.items(), key=lambda item: -item[1])[:top]
    nodes = sorted(profile.onnxruntime.items(), key=lambda item: -item[1][1])[:top]
    lines += [""] + _side_by_side(
        f"| IREE dispatch (top {top}) | ms | ONNX Runtime node (top {top}) | ms |",
        costliest,
        [(f"{node} ({op})", ms) for node, (op, ms) in nodes],
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,mobilenet_v2", help="models.imagenet builders, comma-separated")
    parser.add_argument("--calls", type=int, default=20, help="profiled calls, and timed calls per turn (default 20)")
    parser.add_argument("--top", type=int, default=25, help="costliest kernels listed per side (default 25)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"One thread each; IREE on local-sync, ONNX Runtime's CPU provider; {args.calls} calls profiled.")
    for name in args.models.split(","):
        model, (example,) = getattr(imagenet, name)()
        with tempfile.TemporaryDirectory(prefix=f"layer-profile-{name}-") as folder:
            profile = profile_model(model, example, args.calls, Path(folder))
        print("\n" + render(name, profile, args.top))


if __name__ == "__main__":
    main()
