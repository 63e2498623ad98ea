"""What the benchmark measured: one `CandidateResult` per candidate and model, and the `Report`.

These are plain dataclasses so that `results.json` is every field as it is (`Report.to_json`),
and the markdown report and the plot are two readings of the same numbers.

Example:
    >>> result = CandidateResult("onnxruntime", error="run: Fail: bad Loop")
    >>> result.status
    'failed'
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

ONNXRUNTIME = "onnxruntime"
"""The peer every candidate's latency is also given against (`against`): the one that runs the
same exported graphs on the same CPUs, and the one an edge deployment would pick instead."""


@dataclass
class CandidateResult:
    """Everything measured for one candidate on one model (all times in ms unless named _s)."""

    candidate: str
    exported: bool = False
    error: str | None = None
    matches: bool | None = None
    mismatch: str | None = None
    export_s: float | None = None
    size_bytes: int | None = None
    latency_ms: float | None = None
    latency_min_ms: float | None = None
    latency_max_ms: float | None = None
    speedup: float | None = None
    against_onnxruntime: float | None = None  # ONNX Runtime's latency / this candidate's, same run
    note: str = ""
    round_ms: list[float] = field(default_factory=list)
    call_ms: list[list[list[float]]] = field(default_factory=list)  # [sample][round][call]

    @property
    def status(self) -> str:
        """`ok`, `WRONG` (ran, but some output differs from eager) or `failed`."""
        if self.error is not None:
            return "failed"
        if self.matches is False:
            return "WRONG"
        return "ok"


@dataclass
class ModelResult:
    """One model's table: every candidate's result, eager first."""

    name: str
    sample_count: int
    candidates: list[CandidateResult]
    error: str | None = None


@dataclass
class Report:
    """The whole benchmark: settings, environment, per-model results and the geometric means."""

    settings: dict[str, Any]
    environment: dict[str, str]
    models: list[ModelResult]
    geomean: dict[str, dict[str, Any]]
    files: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """All raw numbers, as written to results.json."""
        return asdict(self)


def summarize(result: CandidateResult) -> None:
    """Per round: each sample's median over its repeats, then the mean over samples, so every path
    the samples take weighs in. Then median, min and max over rounds."""
    if result.error is not None or not result.call_ms or not result.call_ms[0]:
        return
    per_sample = [[statistics.median(times) for times in rounds] for rounds in result.call_ms]
    result.round_ms = [statistics.fmean(values) for values in zip(*per_sample)]
    result.latency_ms = statistics.median(result.round_ms)
    result.latency_min_ms = min(result.round_ms)
    result.latency_max_ms = max(result.round_ms)


def against(reference: CandidateResult, result: CandidateResult) -> float | None:
    """`reference`'s latency / `result`'s: how many times faster `result` ran in the same run; None
    unless both ran and matched eager (a wrong answer's speed is no comparison).

    >>> against(CandidateResult("onnxruntime", latency_ms=7.5), CandidateResult("ours", latency_ms=6.0))
    1.25
    """
    if reference.status != "ok" or result.status != "ok" or not reference.latency_ms or not result.latency_ms:
        return None
    return reference.latency_ms / result.latency_ms


def round_spread(
    result: CandidateResult, reference: CandidateResult, ratio: float | None
) -> tuple[float, float] | None:
    """Lowest and highest per-round `reference` time / `result` time (the candidates alternate
    within a round, so a round's ratio is measured under the same conditions), widened to include
    `ratio`, the ratio of the medians, which need not be one of the rounds'; None without paired
    rounds.

    >>> fast = CandidateResult("fast", round_ms=[1.0, 2.0, 1.0])
    >>> round_spread(fast, CandidateResult("eager", round_ms=[3.0, 4.0, 3.5]), 3.5)
    (2.0, 3.5)
    """
    if not ratio or not result.round_ms or len(result.round_ms) != len(reference.round_ms):
        return None
    ratios = [base / mine for base, mine in zip(reference.round_ms, result.round_ms) if mine > 0]
    if not ratios:
        return None
    return min([*ratios, ratio]), max([*ratios, ratio])


def geometric_means(models: Sequence[ModelResult], candidate_names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Geometric mean of the speedup over eager per candidate, over the models where it ran and
    matched eager; a WRONG or failed model is left out of the mean but counted in `of`."""
    means: dict[str, dict[str, Any]] = {}
    for name in candidate_names:
        speedups, total = [], 0
        for model in models:
            for result in model.candidates:
                if result.candidate == name:
                    total += 1
                    if result.status == "ok" and result.speedup:
                        speedups.append(result.speedup)
        mean = math.exp(statistics.fmean(math.log(s) for s in speedups)) if speedups else None
        means[name] = {"speedup": mean, "models": len(speedups), "of": total}
    return means
