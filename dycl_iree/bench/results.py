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
