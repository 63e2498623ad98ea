"""Running a benchmark: for each model, prepare every candidate, check it, then time them together.

For one model (`benchmark_model`): build it, run eager on every sample (the expected outputs),
*prepare* each candidate (export, compile, load: its export time), *check* it on every sample
against eager (`outputs.compare_outputs`, verify's rule), and *time* the ones that ran, round-robin
(`timing`). A candidate that fails or computes something else is a result, never a crash: the
report says `failed` or `WRONG`. `benchmark` does that for every model with one thread budget and
writes the report (`report.write_report`).

Example:
    >>> class Flip(torch.nn.Module):
    ...     def forward(self, x):
    ...         if x.sum() > 0:
    ...             return x + 1
    ...         return x - 1
    >>> entry = ModelEntry("flip", lambda: (Flip(), (torch.ones(4),)), [(torch.ones(4),), (-torch.ones(4),)])
    >>> report = benchmark([entry], "/tmp/bench-doctest", rounds=2, candidates=["torchscript"])
    >>> [(r.candidate, r.status) for r in report.models[0].candidates]
    [('eager', 'ok'), ('torchscript', 'ok')]
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from ..verify import ATOL, RTOL
from .candidates import PeerFactory, resolve_candidates
from .errors import PeerError, first_line
from .machine import environment, load_average, software_vulkan_device
from .models import Inputs, ModelEntry, resolve_samples
from .outputs import Float64Reference, compare_outputs
from .peers.base import ModelContext, Peer, torch_call
from .progress import LogProgress, Progress
from .quiet import quiet_peers
from .report import write_report
from .results import ONNXRUNTIME, CandidateResult, ModelResult, Report, against, geometric_means, summarize
from .timing import TURN_MS, Timed, time_rounds


def benchmark(
    entries: Sequence[ModelEntry],
    out_dir: str | Path,
    rounds: int = 5,
    warmup: int = 1,
    candidates: Iterable[str | PeerFactory] | None = None,
    threads: int = 2,
    repeat: int = 3,
    progress: Progress | None = None,
    device: str = "cpu",
    turn_ms: float = TURN_MS,
) -> Report:
    """Benchmark every candidate on every model and write report.md, results.json, speedups.png.

    All candidates run in this process on the same samples with `threads` threads each (torch's
    intra-op pool, onnxruntime's intra-op pool, IREE local-task's workers), alternating round-robin
    over `rounds` rounds after `warmup` untimed calls per sample; in each round a candidate calls
    every sample `repeat` times, a fast one more until its calls have run `turn_ms`, and keeps the
    median. `candidates` takes names, group names and Peer classes (None: every built-in peer).
    Progress goes to `progress` (default: the `dycl_iree.bench` logger). A candidate that cannot
    run on `device` is reported as failed.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chosen = resolve_candidates(candidates, device)
    emulated = software_vulkan_device() if device == "vulkan" else None
    if emulated:  # outputs are still checked on every sample; only the timing is left out
        rounds = 0
    progress = progress or LogProgress()
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    found = environment(threads)
    progress.start(len(entries))
    models = []
    try:
        with quiet_peers():
            for index, entry in enumerate(entries, start=1):
                label = f"[{index}/{len(entries)}] {entry.name}"
                folder = out / "artifacts" / entry.name
                models.append(
                    benchmark_model(
                        entry, folder, chosen, rounds, warmup, threads, repeat, progress, label, device, turn_ms
                    )
                )
                progress.advance()
    finally:
        torch.set_num_threads(previous_threads)
        progress.stop()
    peers = [factory() for factory in chosen]
    report = Report(
        settings={
            "rounds": rounds,
            "warmup": warmup,
            "repeat": repeat,
            "turn_ms": turn_ms,
            "threads": threads,
            "device": device,
            **(
                {"untimed": f"the Vulkan device is {emulated}, a CPU emulation: outputs checked, not timed"}
                if emulated
                else {}
            ),
            "candidates": {peer.name: peer.description for peer in peers},
            "float_rtol": RTOL,
            "float_atol": ATOL,
        },
        environment={**found, "load average at end": load_average()},
        models=models,
        geomean=geometric_means(models, [peer.name for peer in peers]),
    )
    write_report(report, out)
    return report


def benchmark_model(
    entry: ModelEntry,
    folder: Path,
    candidates: Sequence[PeerFactory],
    rounds: int,
    warmup: int,
    threads: int,
    repeat: int = 3,
    progress: Progress | None = None,
    label: str | None = None,
    device: str = "cpu",
    turn_ms: float = TURN_MS,
) -> ModelResult:
    """Prepare, check and time every candidate on one model (see `benchmark`); eager comes first."""
    progress = progress or Progress()
    label = label or entry.name
    started = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    progress.step(f"{label}: building the model and eager's outputs")
    try:
        made = entry.factory()
        model, example_inputs = made[0].eval(), tuple(made[1])
        dynamic_shapes = made[2] if len(made) > 2 else None
        samples = resolve_samples(entry, example_inputs)
        expected = [torch_call(model, sample) for sample in samples]
    except Exception as exc:  # one broken model must not stop the others
        progress.done(f"{label}: model failed to build: {first_line(exc)}")
        return ModelResult(entry.name, 0, [], error=first_line(exc))
    progress.done(f"{label}: {_count(len(samples), 'sample')}, {_count(len(candidates), 'candidate')}")
    context = ModelContext(entry.name, model, example_inputs, samples, folder, threads, dynamic_shapes, device)
    results, timed = _prepare_all(context, candidates, progress, label)
    timed = _check_all(timed, samples, expected, Float64Reference(model), warmup, progress, label)

    def on_round(index: int) -> None:
        progress.step(f"{label}: timing round {index + 1}/{rounds} ({_count(len(timed), 'candidate')})")

    time_rounds(timed, rounds, repeat, on_round, turn_ms)
    for item in timed:
        summarize(item.result)
    eager = results[0]
    rival = next((result for result in results if result.candidate == ONNXRUNTIME), None)
    for result in results:
        if result.latency_ms and eager.latency_ms:
            result.speedup = eager.latency_ms / result.latency_ms
        if rival is not None:
            result.against_onnxruntime = against(rival, result)
    progress.done(f"{label}: done in {time.perf_counter() - started:.0f} s; {_summary(results)}")
    return ModelResult(entry.name, len(samples), results)


def _prepare_all(
    context: ModelContext, candidates: Sequence[PeerFactory], progress: Progress, label: str
) -> tuple[list[CandidateResult], list[Timed]]:
    """Make every candidate runnable, timing it as its export time; a failure becomes its result."""
    results: list[CandidateResult] = []
    timed: list[Timed] = []
    for factory in candidates:
        peer = factory()
        result = CandidateResult(peer.name)
        results.append(result)
        context.reused_s = 0.0
        progress.step(f"{label}: preparing {peer.name}")
        start = time.perf_counter()
        try:
            _check_runs_here(peer, context.device)
            peer.prepare(context)
            converted = [peer.convert(sample) for sample in context.samples]
        except Exception as exc:  # a failing candidate is a result, not a crash
            result.error = first_line(exc)
            progress.done(f"{label}: {peer.name} failed: {result.error}")
            continue
        result.exported = True
        result.export_s = time.perf_counter() - start + context.reused_s
        result.size_bytes = peer.size_bytes
        result.note = peer.note
        timed.append(Timed(peer.run, converted, result))
        progress.done(f"{label}: {peer.name} ready in {result.export_s:.2f} s")
    return results, timed


def _check_runs_here(peer: Peer, device: str) -> None:
    if device not in peer.devices:
        raise PeerError(f"runs on {', '.join(peer.devices)}, not {device}")
    missing = peer.missing()
    if missing:
        raise PeerError(f"needs {', '.join(missing)}, not installed (pip install -e '.[bench]')")


def _check_all(
    timed: list[Timed],
    samples: list[Inputs],
    expected: list[Any],
    reference: Float64Reference,
    warmup: int,
    progress: Progress,
    label: str,
) -> list[Timed]:
    """Warm up and compare with eager on every sample, before any timing: a candidate wrong on any
    sample is reported WRONG whatever its speed. Returns the candidates that ran."""
    still_running = []
    for item in timed:
        result = item.result
        progress.step(f"{label}: checking {result.candidate} against eager on {_count(len(samples), 'sample')}")
        try:
            for index, (converted, want) in enumerate(zip(item.samples, expected)):
                for _ in range(warmup):
                    item.run(converted)
                sample = samples[index]
                reason = compare_outputs(want, item.run(converted), exact=lambda: reference(sample, want))
                if reason is not None:
                    result.matches, result.mismatch = False, f"sample {index}: {reason}"
                    progress.done(f"{label}: {result.candidate} WRONG: {result.mismatch}")
                    break
            else:
                result.matches = True
        except Exception as exc:  # reported as the candidate's failure
            result.error = f"run: {first_line(exc)}"
            progress.done(f"{label}: {result.candidate} failed: {result.error}")
            continue
        still_running.append(item)
    return still_running


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _summary(results: list[CandidateResult]) -> str:
    """The fastest candidate that matched eager, and how many did not run or did not match."""
    ok = [r for r in results if r.status == "ok" and r.latency_ms]
    parts = []
    if ok:
        best = min(ok, key=lambda r: r.latency_ms or 0.0)
        ratios = [f"{best.speedup:.2f}x eager"] if best.speedup else []
        if best.against_onnxruntime and best.candidate != ONNXRUNTIME:
            ratios.append(f"{best.against_onnxruntime:.2f}x ONNX Runtime")
        speedup = f" ({', '.join(ratios)})" if ratios else ""
        parts.append(f"fastest {best.candidate} {best.latency_ms:.3f} ms{speedup}")
    failed = sum(r.status == "failed" for r in results)
    wrong = sum(r.status == "WRONG" for r in results)
    parts.append(f"{failed} failed, {wrong} WRONG")
    return "; ".join(parts)
