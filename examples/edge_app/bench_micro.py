"""What one call and one data-dependent decision cost from C, against the Python hosts.

The pair `python -m dycl_iree bench --micro` times: `if x.sum() > 0: x + 1 else: x - 1` against
`x + 1`, x of 4 floats, alternating positive and negative x so both sides run. Each is exported,
built into the edge app against an installed runtime and timed with its `--bench N` (per call:
input copy, checks, `main`, result copy); the Python hosts (`host_runtime`) are timed in this
process on the same bundles. decision = decide - plain.

    python examples/edge_app/bench_micro.py --prefix build/c-runtime/x86_64/install
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from dycl_iree.bench.micro import Decide, NoDecision  # the models `bench --micro` times

ROOT = Path(__file__).resolve().parents[2]


def build_app(bundle: Path, build_dir: Path, prefix: Path) -> Path:
    cmake = Path(sys.executable).parent / "cmake"
    subprocess.run(
        [str(cmake), "-S", str(ROOT / "examples" / "edge_app"), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
         f"-DCMAKE_PREFIX_PATH={prefix}", f"-DEDGE_APP_BUNDLE={bundle}", f"-DDYCL_PYTHON={sys.executable}"],
        check=True, capture_output=True)
    subprocess.run([str(cmake), "--build", str(build_dir)], check=True, capture_output=True)
    return build_dir / "edge_app"


def c_per_call(app: Path, inputs: list[Path], calls: int, rounds: int, device: str) -> tuple[float, float]:
    """Medians over rounds of the app's mean per-call wall and CPU time (us), alternating inputs."""
    wall, cpu = [], []
    for index in range(rounds * len(inputs)):
        output = subprocess.run([str(app), "--device", device, "--bench", str(calls), str(inputs[index % len(inputs)])],
                                check=True, capture_output=True, text=True).stdout
        line = next(line for line in output.splitlines() if line.startswith("bench "))
        figures = dict(part.split("=") for part in line.split()[1:])
        wall.append(float(figures["us_per_call"]))
        cpu.append(float(figures["cpu_us_per_call"]))
    return statistics.median(wall), statistics.median(cpu)


def python_per_call(bundle: Path, host: str, arrays: list[np.ndarray], calls: int, rounds: int) -> tuple[float, float]:
    import host_runtime

    run = host_runtime.load(bundle, device="local-sync", host=host)
    wall, cpu = [], []
    for _ in range(rounds):
        for array in arrays:
            start, cpu_start = time.perf_counter(), time.process_time()
            for _ in range(calls):
                run(array)
            wall.append(1e6 * (time.perf_counter() - start) / calls)
            cpu.append(1e6 * (time.process_time() - cpu_start) / calls)
    return statistics.median(wall), statistics.median(cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prefix", default=str(ROOT / "build" / "c-runtime" / "x86_64" / "install"))
    parser.add_argument("--out", default=str(ROOT / "build" / "bench-micro"))
    parser.add_argument("--calls", type=int, default=100000)
    parser.add_argument("--python-calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import dycl_iree

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    positive = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    arrays = [positive, -positive]
    inputs = []
    for index, array in enumerate(arrays):
        inputs.append(out / f"x{index}.npy")
        np.save(inputs[-1], array)
    apps, bundles = {}, {}
    for name, model in (("decide", Decide()), ("plain", NoDecision())):
        bundles[name] = dycl_iree.export(model, (torch.from_numpy(positive),)).save(out / f"{name}.dycl")
        apps[name] = build_app(bundles[name], out / f"app-{name}", Path(args.prefix))
    rows = []
    for device in ("local-sync", "local-task"):
        decide = c_per_call(apps["decide"], inputs, args.calls, args.rounds, device)
        plain = c_per_call(apps["plain"], inputs, args.calls, args.rounds, device)
        rows.append((f"C (edge app), {device}", decide, plain))
    for host in ("compiled", "python"):
        decide = python_per_call(bundles["decide"], host, arrays, args.python_calls, args.rounds)
        plain = python_per_call(bundles["plain"], host, arrays, args.python_calls, args.rounds)
        rows.append((f"Python host_runtime, host={host}, local-sync", decide, plain))
    print("| host | call with a decision (us, wall / CPU) | call without | one decision |")
    print("|---|---|---|---|")
    for label, decide, plain in rows:
        cells = [f"{d:.2f} / {c:.2f}" for d, c in (decide, plain, (decide[0] - plain[0], decide[1] - plain[1]))]
        print(f"| {label} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
