"""Run many seeds, surviving a program that crashes or hangs the process, and tabulate the results.

The seeds run in a worker process (`python -m tests.fuzz worker`), one after another so imports are
paid once; the parent sends a seed, waits for its result line, and restarts the worker when it dies
(a crash: recorded with its signal, the program's reproducer already written) or runs past the time
limit (a hang). Results go to `<out>/results.jsonl`, one JSON object per seed.

Example:
    >>> run_campaign(range(20), Path("/tmp/fuzz"))        # doctest: +SKIP
    >>> print(fallback_table(read_results(Path("/tmp/fuzz/results.jsonl"))))   # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

DONE = "@@fuzz-result "


def worker_main(out: Path) -> None:
    """Read seeds from stdin, check each, print its result as one line (stdout carries nothing else)."""
    import warnings

    warnings.filterwarnings("ignore")
    from .check import check_seed

    results = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints of the exporter go to stderr
    for line in sys.stdin:
        seed = int(line)
        try:
            result = check_seed(seed, out)
        except Exception as error:  # a fuzzer bug: record it and go on with the next seed
            result = {"seed": seed, "status": "fuzzer_error", "export_error": f"{type(error).__name__}: {error}"}
        results.write(DONE + json.dumps(result) + "\n")


class _Worker:
    def __init__(self, out: Path, log: Any) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz", "worker", "--out", str(out)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )

    def check(self, seed: int, timeout: float) -> dict[str, Any]:
        self.process.stdin.write(f"{seed}\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                return {"seed": seed, "status": "timeout", "export_error": f"no result within {timeout:.0f} s"}
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if not ready:
                continue
            line = self.process.stdout.readline()
            if not line:  # the worker died while checking this seed
                code = self.process.wait()
                name = signal.Signals(-code).name if code < 0 else f"exit status {code}"
                return {"seed": seed, "status": "crash", "export_error": f"the process died ({name})"}
            if line.startswith(DONE):
                return json.loads(line[len(DONE) :])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def run_campaign(seeds: Iterable[int], out: Path, timeout: float = 600.0, quiet: bool = False) -> list[dict]:
    """Check every seed; append each result to `<out>/results.jsonl` as it comes; returns them all."""
    out.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    with open(out / "worker.log", "a") as log, open(out / "results.jsonl", "a") as sink:
        worker = _Worker(out, log)
        try:
            for seed in seeds:
                if worker.process.poll() is not None:
                    worker = _Worker(out, log)
                result = worker.check(seed, timeout)
                if result["status"] in ("crash", "timeout"):
                    repro = out / f"repro_{seed}.py"
                    result["reproducer"] = str(repro) if repro.exists() else None
                results.append(result)
                sink.write(json.dumps(result) + "\n")
                sink.flush()
                if not quiet:
                    print(_summary_line(result), flush=True)
        finally:
            worker.process.stdin.close()
            worker.stop()
    return results


def _summary_line(result: dict) -> str:
    text = f"seed {result['seed']}: {result['status']}"
    if result.get("host"):
        text += f", host {result['host']}"
    if result.get("fallback"):
        text += f" ({reason_of(result['fallback'])})"
    if result.get("export_error"):
        text += f" [{result['export_error'][:160]}]"
    for failure in result.get("failures", [])[:3]:
        text += f"\n    {failure['host']} host, {failure['case']}: {failure['kind']}: {failure['detail'][:200]}"
    return text


def read_results(path: Path) -> list[dict]:
    """The results of a campaign; a seed checked twice counts once (its last result)."""
    by_seed: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            result = json.loads(line)
            by_seed[result["seed"]] = result
    return list(by_seed.values())


# Reasons of a fallback, from most to least specific: (pattern, name). The first match names it;
# otherwise the reason's first line with its numbers and source lines removed.
_REASONS = [
    (r"torch\.tensor of a scalar", "torch.tensor of a scalar on a host path"),
    (r"constant object", "a constant object on a host path"),
    (r"from \('i64'\) to \('!stream\.resource", "iree-compile: i64 -> (!stream.resource, index) materialization"),
    (r"source materialization from \('i1'\) to \('i64'\)", "iree-compile: i1 -> i64 source materialization"),
    (r"scf\.if.*should match", "iree-compile: scf.if result types differ"),
    (r"flow\.tensor\.update", "iree-compile: flow.tensor.update dynamic dims"),
    (r"failed to legalize operation 'torch\.constant\.float'", "iree-compile: torch.constant.float not legalized"),
    (r"SIGSEGV|SIGABRT|Segmentation|Aborted|core dumped|crash", "iree-compile crashed"),
    (r"list", "a list on a host path"),
]


def reason_of(fallback: str) -> str:
    for pattern, name in _REASONS:
        if re.search(pattern, fallback, re.IGNORECASE):
            return name
    text = fallback.splitlines()[0].replace("iree-compile rejected the compiled host: ", "iree-compile: ")
    text = re.sub(r"(<unknown>|-|loc\([^)]*\)):\d+(:\d+)?: error: ", "", text)
    text = re.sub(r"\S+\.py:\d+", "<source>", text)
    text = re.sub(r"\d+", "N", text)
    return text[:110]


def fallback_table(results: list[dict]) -> str:
    """Exported programs by host, the fallbacks by reason, and every failure kind."""
    exported = [r for r in results if r.get("host")]
    compiled = sum(1 for r in exported if r["host"] == "compiled")
    lines = [f"{len(results)} programs; {len(exported)} exported"]
    if exported:
        lines.append(f"compiled host: {compiled} of {len(exported)} ({100 * compiled / len(exported):.0f}%)")
    reasons = Counter(reason_of(r["fallback"]) for r in exported if r["host"] != "compiled")
    if reasons:
        lines.append("fallbacks to the Python host, by reason:")
        lines += [f"  {count:4d}  {reason}" for reason, count in reasons.most_common()]
    statuses = Counter(r["status"] for r in results)
    lines.append("status: " + ", ".join(f"{status} {count}" for status, count in statuses.most_common()))
    unsupported = Counter(reason_of(r["export_error"]) for r in results if r["status"] == "unsupported")
    if unsupported:
        lines.append("export errors (DyclError), by reason:")
        lines += [f"  {count:4d}  {reason}" for reason, count in unsupported.most_common()]
    failures = Counter(f"{f['host']} host: {f['kind']}" for r in results for f in r.get("failures", []))
    if failures:
        lines.append("failed runs, by host and kind:")
        lines += [f"  {count:4d}  {kind}" for kind, count in failures.most_common()]
    unstable = sum(len(r.get("near_threshold", [])) for r in results)
    if unstable:
        lines.append(f"runs that differ where PyTorch's float64 run takes another path (not failures): {unstable}")
    others = [r for r in results if r["status"] not in ("ok", "unsupported", "mismatch")]
    for result in others:
        lines.append(f"  seed {result['seed']}: {result['status']}: {(result.get('export_error') or '')[:150]}")
    decided = sum(r.get("decisions", 0) for r in results)
    if decided:
        both = sum(r.get("decisions_both_ways", 0) for r in results)
        lines.append(f"decisions that went both ways on the finite inputs: {both} of {decided}")
    return "\n".join(lines)
