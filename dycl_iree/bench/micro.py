"""The micro-benchmark: the per-call floor of each dycl_iree host, and what one data-dependent
decision adds to it.

`if x.sum() > 0: x + 1 else: x - 1` against `x + 1`, x of 4 elements, alternating positive and
negative x so both sides run: the difference is the price of computing the predicate, reading it
back to the host and choosing (compiled host: inside the VM; Python host: in Python). Runs on
eager, on ONNX Runtime (the same two models through the TorchScript ONNX exporter, `If` in the
graph) and on every host/driver pair, all in one process and taking turns within each round, so
the ratio of each to ONNX Runtime holds on a busy machine; writes `micro.md` and `micro.json`.

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
from .peers.base import ModelContext, remove, torch_call
from .peers.dycl import DRIVERS, HOSTS, dycl_module
from .peers.iree_config import limit_iree_threads
from .report import cell
from .results import ONNXRUNTIME


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
    decide_cpu_us: float | None = None
    plain_cpu_us: float | None = None
    decide_vs_onnxruntime: float | None = None
    plain_vs_onnxruntime: float | None = None
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
    if configuration == ONNXRUNTIME:
        return _onnxruntime_callables(folder, threads)
    _, host, driver = configuration.split("-", 2)
    dycl = dycl_module()
    if driver == "local-task":
        limit_iree_threads(threads)
    runs = []
    for model in (Decide(), NoDecision()):
        run = dycl.load(str(_bundle_path(folder, model)), device=driver, host=host)
        runs.append(lambda inputs, run=run: run(*inputs))
    return runs[0], runs[1], lambda x: (x.numpy(),)


def _onnxruntime_callables(
    folder: Path, threads: int
) -> tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[torch.Tensor], Any]]:
    """(decide, plain, convert) on ONNX Runtime, through the benchmark's own `onnxruntime` peer
    (same export, same session options); its input is the feed dict the peer takes."""
    from .peers.onnxruntime import OnnxRuntime

    example = (torch.tensor([1.0, 2.0, 3.0, 4.0]),)
    peers = []
    for model in (Decide(), NoDecision()):
        model_folder = folder / f"onnx-{type(model).__name__.lower()}"
        model_folder.mkdir(parents=True, exist_ok=True)
        peer = OnnxRuntime()
        peer.prepare(ModelContext(type(model).__name__, model, example, [example], model_folder, threads))
        peers.append(peer)
    decide, plain = peers
    return decide.run, plain.run, lambda x: decide.convert((x,))


def micro_benchmark(out_dir: str | Path, calls: int = 2000, rounds: int = 5, threads: int = 2) -> list[MicroResult]:
    """Measure what one data-dependent decision costs per call, on eager and on each dycl host
    (see the module's docstring). Writes micro.md and micro.json to `out_dir`."""
    out = Path(out_dir)
    folder = out / "artifacts" / "micro"
    folder.mkdir(parents=True, exist_ok=True)
    positive = torch.tensor([1.0, 2.0, 3.0, 4.0])
    samples = [positive, -positive]
    configurations = ["eager", ONNXRUNTIME, *(f"dycl-{host}-{driver}" for host in HOSTS for driver in DRIVERS)]
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
    timed: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], list[Any]]] = {}
    try:
        for configuration in configurations:
            result = MicroResult(configuration)
            results.append(result)
            if export_error is not None and configuration not in ("eager", ONNXRUNTIME):
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
                timed[configuration] = (decide, plain, inputs)
            except Exception as exc:  # reported as a failed configuration
                result.error = first_line(exc)
        medians = _time_turns(timed, calls, rounds)
    finally:
        torch.set_num_threads(previous_threads)
    reference = medians.get(ONNXRUNTIME)
    for result in results:
        if result.configuration in medians:
            result.decide_us, result.plain_us, result.decide_cpu_us, result.plain_cpu_us = medians[result.configuration]
            result.decision_us = result.decide_cpu_us - result.plain_cpu_us
            if reference is not None:
                result.decide_vs_onnxruntime = result.decide_cpu_us / reference[2]
                result.plain_vs_onnxruntime = result.plain_cpu_us / reference[3]
    (out / "micro.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    (out / "micro.md").write_text(render_micro(results, calls, rounds))
    return results


def _time_turns(
    timed: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], list[Any]]], calls: int, rounds: int
) -> dict[str, tuple[float, float, float, float]]:
    """Per configuration, the median over rounds of the per-call time in microseconds: wall time
    with the decision and without, then the process's CPU time likewise. Every configuration takes
    its turn in every round (the first one rotates, and each turn alternates which of its pair goes
    first), so load that comes and goes on a shared machine falls on all of them alike; the
    garbage collector is off while timing.

    The CPU time is the figure to compare on a busy machine: every configuration here but
    local-task runs on the calling thread, and its wall time there grows with the other processes'
    load (2-4x at a load average of 8 on 2 cores) while its CPU time does not. local-task's workers
    are in the process's CPU time too, and its waiting only in the wall time."""
    functions = [(name, pair) for name, (*pair, _) in timed.items()]
    for decide, plain, inputs in timed.values():
        for function in (decide, plain):
            for index in range(max(calls // 10, 2)):
                function(inputs[index % len(inputs)])
    times: dict[tuple[str, int], list[float]] = {(name, which): [] for name in timed for which in range(4)}
    gc.collect()
    gc.disable()
    try:
        for round_index in range(rounds):
            shift = round_index % max(len(functions), 1)
            for name, pair in functions[shift:] + functions[:shift]:
                inputs = timed[name][2]
                for which in (0, 1) if round_index % 2 == 0 else (1, 0):
                    function = pair[which]
                    start, start_cpu = time.perf_counter_ns(), time.process_time_ns()
                    for index in range(calls):
                        function(inputs[index % len(inputs)])
                    times[name, 2 + which].append((time.process_time_ns() - start_cpu) / 1e3 / calls)
                    times[name, which].append((time.perf_counter_ns() - start) / 1e3 / calls)
    finally:
        gc.enable()
    return {name: tuple(statistics.median(times[name, which]) for which in range(4)) for name in timed}


def render_micro(results: Sequence[MicroResult], calls: int, rounds: int) -> str:
    """The micro-benchmark as a markdown table."""
    lines = [
        "# Host cost of one data-dependent decision",
        "",
        (
            f"`if x.sum() > 0: x + 1 else: x - 1` vs `x + 1`, x of 4 float32 elements, {calls} calls "
            f"per round, median of {rounds} rounds, every configuration in every round; per call, wall / "
            "process CPU time in us. Decision = the difference in CPU time; the ratios are CPU time to "
            "ONNX Runtime's in the same run (below 1: faster)."
        ),
        "",
        "| configuration | with decision | without | decision us | with / ORT | without / ORT | matches eager? |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in results:
        if result.error is not None:
            lines.append(f"| {result.configuration} | - | - | - | - | - | failed: {cell(result.error)} |")
            continue
        matches = "yes" if result.matches else "**WRONG**"
        ratios = [
            "-" if ratio is None else f"{ratio:.2f}x"
            for ratio in (result.decide_vs_onnxruntime, result.plain_vs_onnxruntime)
        ]
        lines.append(
            f"| {result.configuration} | {result.decide_us:.2f} / {result.decide_cpu_us:.2f} "
            f"| {result.plain_us:.2f} / {result.plain_cpu_us:.2f} "
            f"| {result.decision_us:.2f} | {ratios[0]} | {ratios[1]} | {matches} |"
        )
    lines.append("")
    return "\n".join(lines)
