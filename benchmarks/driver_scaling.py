"""How much IREE's multi-threaded `local-task` driver gains over `local-sync`, by workload shape.

    python benchmarks/driver_scaling.py [--rounds 9]

Exports four straight-line models with dycl_iree, twice each (CPU code for one thread, run on
local-sync; for every core, run on local-task), and times them alternating in one process (median
over rounds, ms per call):

- `one_matmul`: a 512x1024 by 1024x1024 matmul (one large dispatch of many tiles), where the
  driver is known to scale;
- `one_convolution`: one 64-channel 3x3 convolution at 32x32 (one dispatch of ~0.5 ms);
- `six_convolutions`: six of them in a row (six dispatches, each waiting for the one before);
- `wrn_sized_convolutions`: ten 16-channel 3x3 convolutions at 32x32, the size of most
  convolutions in the zoo's CIFAR networks (~30 us each on one core).

The ratio column is local-sync / local-task: above 1 the second core helps. On the 2-core
development machine (IREE 3.13) only the matmul gained clearly; the README's traps give figures.
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

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import dycl_iree  # noqa: E402


def convolution_chain(channels: int, count: int) -> nn.Module:
    """`count` 3x3 convolutions with ReLU, `channels` in and out, padding 1."""
    layers: list[nn.Module] = []
    for _ in range(count):
        layers += [nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU()]
    return nn.Sequential(*layers).eval()


WORKLOADS = {  # name: (model, input shape)
    "one_matmul": (lambda: nn.Linear(1024, 1024, bias=False).eval(), (512, 1024)),
    "one_convolution": (lambda: convolution_chain(64, 1), (1, 64, 32, 32)),
    "six_convolutions": (lambda: convolution_chain(64, 6), (1, 64, 32, 32)),
    "wrn_sized_convolutions": (lambda: convolution_chain(16, 10), (1, 16, 32, 32)),
}


def main(rounds: int) -> None:
    torch.manual_seed(0)
    folder = Path(tempfile.mkdtemp(prefix="dycl-driver-scaling-"))
    print("| workload | local-sync ms | local-task ms | local-sync / local-task |")
    print("|---|---|---|---|")
    for name, (build, shape) in WORKLOADS.items():
        model = build()
        example = torch.randn(*shape)
        runners = {}
        for device, cpu_threads in (("local-sync", 1), ("local-task", os.cpu_count() or 1)):
            bundle = dycl_iree.export(model, (example,), cpu_threads=cpu_threads)
            runners[device] = dycl_iree.load(bundle.save(folder / f"{name}-{device}.dycl"), device=device)
        expected = model(example).detach().numpy()
        for device, run in runners.items():
            np.testing.assert_allclose(run(example), expected, rtol=1e-4, atol=1e-4, err_msg=device)
        calls = max(3, int(0.05 / _seconds_per_call(runners["local-sync"], example)))
        times: dict[str, list[float]] = {device: [] for device in runners}
        for _ in range(rounds):
            for device, run in runners.items():
                start = time.perf_counter()
                for _ in range(calls):
                    run(example)
                times[device].append((time.perf_counter() - start) / calls * 1e3)
        sync, task = (statistics.median(times[device]) for device in ("local-sync", "local-task"))
        print(f"| {name} | {sync:.3f} | {task:.3f} | {sync / task:.2f}x |", flush=True)


def _seconds_per_call(run, example: torch.Tensor) -> float:
    run(example)
    start = time.perf_counter()
    run(example)
    return max(time.perf_counter() - start, 1e-6)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds per driver (default 9)")
    main(parser.parse_args().rounds)
