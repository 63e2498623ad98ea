"""Timing prepared candidates fairly: in one process, round-robin, after a pause, without GC.

Each round, every candidate takes one turn: it calls every sample `repeat` times, and a fast one
more often, until its calls have run `turn_ms` (at most MAX_CALLS calls). The candidates
alternate within a round, and each round starts one candidate later, so a slow drift of the
machine (other jobs, frequency scaling) spreads over all of them instead of biasing one, and none
is always first after the pause. `results.summarize` turns the per-call times into latencies.

Example:
    >>> result = CandidateResult("double")
    >>> timed = Timed(run=lambda x: x * 2, samples=[1, 2], result=result)
    >>> time_rounds([timed], rounds=2, repeat=3)
    >>> [len(times) for times in result.call_ms], len(result.call_ms[0][0])
    ([2, 2], 3)
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import first_line
from .results import CandidateResult

SETTLE_S = 0.02
"""Pause before each candidate's turn in a round; see `time_turn`."""

TURN_MS = 100.0
"""How long a turn's timed calls of one model run at least (`time_turn`), split over its samples:
a median of 3 calls of MobileNetV2 at 224x224 (7-8 ms) moved its ratio to ONNX Runtime between 1.02
and 1.18 from run to run on a shared 2-core machine, where one stall in two of the three calls
sets the median; 100 ms gives such a model 10-15 calls a turn and leaves the slow ones at `repeat`."""

MAX_CALLS = 64
"""The most timed calls of one sample in one turn (a model of microseconds stops here)."""


@dataclass
class Timed:
    """A candidate ready to be timed: what to call, its converted samples, where its numbers go."""

    run: Callable[[Any], Any]
    samples: list[Any]
    result: CandidateResult


def time_rounds(
    timed: Sequence[Timed],
    rounds: int,
    repeat: int,
    on_round: Callable[[int], None] | None = None,
    turn_ms: float = 0.0,
) -> None:
    """Time every candidate for `rounds` rounds into `result.call_ms[sample][round][call]`: each
    sample at least `repeat` times a turn, and until the turn's calls have run `turn_ms` (`time_turn`).

    `on_round(index)` is called as each round starts (for progress). The garbage collector is off
    while timing: a collection inside one candidate's turn would be charged to it alone.
    """
    timed = list(timed)
    for item in timed:
        item.result.call_ms = [[] for _ in item.samples]
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for round_index in range(rounds):
            if on_round is not None:
                on_round(round_index)
            shift = round_index % max(len(timed), 1)
            for item in timed[shift:] + timed[:shift]:
                if item.result.error is None:
                    time_turn(item, repeat, turn_ms)
    finally:
        if gc_was_enabled:
            gc.enable()


def time_turn(item: Timed, repeat: int, turn_ms: float = 0.0) -> None:
    """One candidate's turn in a round: every sample `repeat` times, and again while that sample's
    calls have run less than its share of `turn_ms` (and fewer than MAX_CALLS times).

    The pause lets the previous candidate's worker threads (OpenMP spins after a parallel region)
    go idle so they are not charged to this one; then one untimed call wakes this candidate's own
    pool and caches: on a 1 ms network the first call after another candidate ran is 2-10x slower
    than the steady state, and a shared machine adds the odd 100 ms stall, hence the repeats, as
    many as fit in `turn_ms` (TURN_MS) for a fast model.

    >>> result = CandidateResult("sleep")
    >>> result.call_ms = [[], []]
    >>> time_turn(Timed(run=time.sleep, samples=[0.001, 0.05], result=result), repeat=2, turn_ms=200.0)
    >>> fast, slow = (len(calls) for (calls,) in result.call_ms)
    >>> 2 < fast <= MAX_CALLS, slow  # 100 ms a sample: the 1 ms one is called again, the 50 ms one not
    (True, 2)
    """
    time.sleep(SETTLE_S)
    run, result = item.run, item.result
    share_ms = turn_ms / len(item.samples)
    try:
        run(item.samples[0])
        for index, sample in enumerate(item.samples):
            times: list[float] = []
            spent_ms = 0.0
            while len(times) < repeat or (spent_ms < share_ms and len(times) < MAX_CALLS):
                start_ns = time.perf_counter_ns()
                run(sample)
                times.append((time.perf_counter_ns() - start_ns) / 1e6)
                spent_ms += times[-1]
            result.call_ms[index].append(times)
    except Exception as exc:  # reported as the candidate's failure
        result.error = f"run: {first_line(exc)}"
