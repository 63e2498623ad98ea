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


def reasons_of(fallback: str) -> list[str]:
    """The distinct reasons of one fallback: the compiled host lists every host operation it cannot
    express, joined by "; "."""
    if fallback.startswith("iree-compile"):
        return [reason_of(fallback)]
    return list(dict.fromkeys(reason_of(part) for part in fallback.split("; ")))


def reason_of(fallback: str) -> str:
    """A fallback's reason as a group: what iree-compile said (a crash: signal, pass and frames; an
    error: its message) or what the compiled host cannot express, without the model's lines, the
    construct labels and the numbers that differ between programs."""
    if not fallback.strip():
        return "(no reason given)"
    text = fallback.splitlines()[0].replace("iree-compile rejected the compiled host: ", "iree-compile: ")
    text = re.sub(r" \((the scf\.\w+ of|one of the scf\.\w+ ops of|at) [^)]*\)", "", text)
    text = re.sub(r"(<unknown>|-|loc\([^)]*\)):\d+(:\d+)?: error: ", "", text)
    text = re.sub(r"\s*\([^()]*\.py:\d+\)", "", text)  # "(model.py:12)" after a host-side reason
    text = re.sub(r"\S+\.py:\d+", "<source>", text)
    text = re.sub(r"__memcpy\w*", "memcpy", text)
    text = re.sub(r"\b(loop|if)\d+\b", r"\1N", text)
    text = re.sub(r"(?<![A-Za-z_])\d+", "N", text)
    return text[:200]


def fallback_table(results: list[dict]) -> str:
    """Exported programs by host, the fallbacks by reason, and every failure kind."""
    exported = [r for r in results if r.get("host")]
    compiled = sum(1 for r in exported if r["host"] == "compiled")
    lines = [f"{len(results)} programs; {len(exported)} exported"]
    if exported:
        lines.append(f"compiled host: {compiled} of {len(exported)} ({100 * compiled / len(exported):.0f}%)")
    fallbacks = [r for r in exported if r["host"] != "compiled"]
    reasons = Counter(reason for r in fallbacks for reason in reasons_of(r["fallback"]))
    if reasons:
        lines.append("fallbacks to the Python host, by reason (a program with several counts under each):")
        seeds: dict[str, list[int]] = {}
        for result in fallbacks:
            for reason in reasons_of(result["fallback"]):
                seeds.setdefault(reason, []).append(result["seed"])
        for reason, count in reasons.most_common():
            shown = ", ".join(map(str, seeds[reason][:6])) + (", ..." if len(seeds[reason]) > 6 else "")
            lines.append(f"  {count:4d}  {reason}  (seeds {shown})")
    lines += feature_table(results)
    statuses = Counter(r["status"] for r in results)
    lines.append("status: " + ", ".join(f"{status} {count}" for status, count in statuses.most_common()))
    unsupported = Counter(reason_of(r["export_error"]) for r in results if r["status"] == "unsupported")
    if unsupported:
        lines.append("export errors (DyclError), by reason:")
        seeds = _seeds_by(results, lambda r: reason_of(r["export_error"]) if r["status"] == "unsupported" else None)
        lines += [f"  {count:4d}  {reason}  (seeds {seeds[reason]})" for reason, count in unsupported.most_common()]
    failures = Counter(f"{f['host']} host: {f['kind']}" for r in results for f in r.get("failures", []))
    if failures:
        lines.append("failed runs, by host and kind:")
        for kind, count in failures.most_common():
            seeds = sorted(
                {r["seed"] for r in results for f in r.get("failures", []) if f"{f['host']} host: {f['kind']}" == kind}
            )
            lines.append(
                f"  {count:4d}  {kind}  (seeds {', '.join(map(str, seeds[:8]))}{', ...' if len(seeds) > 8 else ''})"
            )
    unstable = sum(len(r.get("near_threshold", [])) for r in results)
    if unstable:
        lines.append(
            "runs that differ where PyTorch's own result is unstable (another path in float64, or rounding "
            f"amplified: `check.ill_conditioned`; not failures): {unstable}"
        )
    others = [r for r in results if r["status"] not in ("ok", "unsupported", "mismatch")]
    for result in others:
        lines.append(f"  seed {result['seed']}: {result['status']}: {(result.get('export_error') or '')[:150]}")
    decided = sum(r.get("decisions", 0) for r in results)
    if decided:
        both = sum(r.get("decisions_both_ways", 0) for r in results)
        lines.append(f"decisions that went both ways on the finite inputs: {both} of {decided}")
    return "\n".join(lines)


def _seeds_by(results: list[dict], group: Any, shown: int = 6) -> dict[str, str]:
    """The first seeds of each group (to rerun: `python -m tests.fuzz show SEED`)."""
    found: dict[str, list[int]] = {}
    for result in results:
        name = group(result)
        if name is not None:
            found.setdefault(name, []).append(result["seed"])
    return {
        name: ", ".join(map(str, seeds[:shown])) + (", ..." if len(seeds) > shown else "")
        for name, seeds in found.items()
    }


def feature_table(results: list[dict]) -> list[str]:
    """The compiled host's share among the exported programs that have each feature (a construct or a
    feature of the source, `generate.source_features`), lowest share first: where the compiled host
    is weak. Runs that failed are counted per feature too."""
    exported = [r for r in results if r.get("host")]
    if not exported:
        return []
    by_feature: dict[str, list[dict]] = {}
    for result in exported:
        for feature in set(result.get("features", [])) | {f"construct {c}" for c in result.get("constructs", [])}:
            by_feature.setdefault(feature, []).append(result)
    rows = []
    for feature, having in by_feature.items():
        compiled = sum(1 for r in having if r["host"] == "compiled")
        failed = sum(1 for r in having if r.get("failures"))
        rows.append((compiled / len(having), feature, compiled, len(having), failed))
    lines = ["compiled host by feature (share of the exported programs that have it; failed: with a failed run):"]
    for share, feature, compiled, count, failed in sorted(rows):
        lines.append(
            f"  {100 * share:5.0f}%  {compiled:4d} of {count:<4d} {feature}"
            + (f"  (failed {failed})" if failed else "")
        )
    return lines
