"""The micro-benchmark: what one data-dependent decision costs per call, on each dycl_iree host.

`if x.sum() > 0: x + 1 else: x - 1` against `x + 1`, x of 4 elements, alternating positive and
negative x so both sides run: the difference is the price of computing the predicate, reading it
back to the host and choosing (compiled host: inside the VM; Python host: in Python). Runs on
eager and on every host/driver pair, and writes `micro.md` and `micro.json`.

Example:
    >>> results = micro_benchmark("/tmp/bench-micro-doctest", calls=100, rounds=1)
    >>> results[0].configuration, results[0].matches
    ('eager', True)
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from .errors import first_line
from .outputs import compare_outputs
from .peers.base import remove, torch_call
from .peers.dycl import DRIVERS, HOSTS, dycl_module
from .peers.iree_config import limit_iree_threads
from .report import cell


class Decide(torch.nn.Module):
    """One data-dependent decision around the cheapest possible tensor work."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x + 1
        return x - 1


class NoDecision(torch.nn.Module):
    """The same tensor work with no decision: the baseline `Decide` is compared against."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


@dataclass
class MicroResult:
    """Per-call cost in microseconds with and without the decision on one host/driver."""

    configuration: str
    decide_us: float | None = None
    plain_us: float | None = None
    decision_us: float | None = None
    matches: bool | None = None
    error: str | None = None


def _bundle_path(folder: Path, model: torch.nn.Module) -> Path:
    return folder / f"{type(model).__name__.strip('_').lower()}.dycl"


def _micro_callables(
    configuration: str, folder: Path, threads: int
) -> tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[torch.Tensor], Any]]:
    """Return (decide, plain, convert) for `eager` or `dycl-<host>-<driver>`."""
    if configuration == "eager":
        decide, plain = Decide(), NoDecision()
        return (lambda inputs: torch_call(decide, inputs)), (lambda inputs: torch_call(plain, inputs)), lambda x: (x,)
    _, host, driver = configuration.split("-", 2)
    dycl = dycl_module()
    if driver == "local-task":
        limit_iree_threads(threads)
    runs = []
    for model in (Decide(), NoDecision()):
        run = dycl.load(str(_bundle_path(folder, model)), device=driver, host=host)
        runs.append(lambda inputs, run=run: run(*inputs))
    return runs[0], runs[1], lambda x: (x.numpy(),)


def micro_benchmark(out_dir: str | Path, calls: int = 2000, rounds: int = 5, threads: int = 2) -> list[MicroResult]:
    """Measure what one data-dependent decision costs per call, on eager and on each dycl host
    (see the module's docstring). Writes micro.md and micro.json to `out_dir`."""
    out = Path(out_dir)
    folder = out / "artifacts" / "micro"
    folder.mkdir(parents=True, exist_ok=True)
    positive = torch.tensor([1.0, 2.0, 3.0, 4.0])
    samples = [positive, -positive]
    configurations = ["eager", *(f"dycl-{host}-{driver}" for host in HOSTS for driver in DRIVERS)]
    results: list[MicroResult] = []
    export_error: str | None = None
    try:  # export both bundles once; every host/driver pair loads the same two
        dycl = dycl_module()
        for model in (Decide(), NoDecision()):
            path = _bundle_path(folder, model)
            remove(path)
            dycl.export(model, (positive,), targets=("llvm-cpu",)).save(str(path))
    except Exception as exc:  # every dycl configuration reports it
        export_error = f"not exported: {first_line(exc)}"
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for configuration in configurations:
            result = MicroResult(configuration)
            results.append(result)
            if export_error is not None and configuration != "eager":
                result.error = export_error
                continue
            try:
                decide, plain, convert = _micro_callables(configuration, folder, threads)
                inputs = [convert(sample) for sample in samples]
                result.matches = all(
                    compare_outputs(Decide()(sample), decide(converted)) is None
                    and compare_outputs(sample + 1, plain(converted)) is None
                    for sample, converted in zip(samples, inputs)
                )
                result.decide_us, result.plain_us = _time_pair(decide, plain, inputs, calls, rounds)
                result.decision_us = result.decide_us - result.plain_us
            except Exception as exc:  # reported as a failed configuration
                result.error = first_line(exc)
    finally:
        torch.set_num_threads(previous_threads)
    (out / "micro.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    (out / "micro.md").write_text(render_micro(results, calls, rounds))
    return results


def _time_pair(
    first: Callable[[Any], Any], second: Callable[[Any], Any], inputs: list[Any], calls: int, rounds: int
) -> tuple[float, float]:
    """Median over rounds of the per-call time in microseconds, the two alternating each round."""
    for function in (first, second):
        for index in range(max(calls // 10, 2)):
            function(inputs[index % len(inputs)])
    times: dict[int, list[float]] = {0: [], 1: []}
    gc.collect()
    for round_index in range(rounds):
        order = (0, 1) if round_index % 2 == 0 else (1, 0)
        for which in order:
            function = (first, second)[which]
            start = time.perf_counter_ns()
            for index in range(calls):
                function(inputs[index % len(inputs)])
            times[which].append((time.perf_counter_ns() - start) / 1e3 / calls)
    return statistics.median(times[0]), statistics.median(times[1])


def render_micro(results: Sequence[MicroResult], calls: int, rounds: int) -> str:
    """The micro-benchmark as a markdown table."""
    lines = [
        "# Host cost of one data-dependent decision",
        "",
        (
            f"`if x.sum() > 0: x + 1 else: x - 1` vs `x + 1`, x of 4 float32 elements, {calls} calls "
            f"per round, median of {rounds} rounds. Decision = the difference, per call."
        ),
        "",
        "| configuration | with decision us/call | without us/call | decision us | matches eager? |",
        "|---|---|---|---|---|",
    ]
    for result in results:
        if result.error is not None:
            lines.append(f"| {result.configuration} | - | - | - | failed: {cell(result.error)} |")
            continue
        matches = "yes" if result.matches else "**WRONG**"
        lines.append(
            f"| {result.configuration} | {result.decide_us:.2f} | {result.plain_us:.2f} "
            f"| {result.decision_us:.2f} | {matches} |"
        )
    lines.append("")
    return "\n".join(lines)
