"""Pick every condition's threshold so that the decision goes both ways on the program's inputs.

The program runs eagerly in its probe form (`Program.render(probe=True)`), where each condition
records the value it compares and decides with the thresholds chosen so far. Thresholds are fixed in
source order, since a later decision sees values that depend on the earlier ones: each becomes the
split near the median of the finite values its condition saw.

Example:
    >>> from tests.fuzz.generate import generate
    >>> from tests.fuzz.inputs import finite_cases
    >>> program = generate(3)
    >>> calibrate(program, finite_cases(program))   # sets program.conditions[i].threshold
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch

from .inputs import Case

_COMPARE = {">": operator.gt, "<": operator.lt}


def instantiate(source: str, seed: int, namespace_name: str = "fuzzed_program") -> torch.nn.Module:
    """Build `Program` from source (eager; not scriptable: TorchScript needs a file), weights from `seed`."""
    namespace: dict[str, Any] = {"__name__": namespace_name}
    exec(compile(source, f"<{namespace_name}>", "exec"), namespace)
    torch.manual_seed(seed)
    return namespace["Program"]().eval()


def calibrate(program: Any, cases: list[Case]) -> None:
    """Set each condition's threshold near the median of the values it sees on `cases`."""
    model = instantiate(program.render(probe=True), program.seed, "fuzzed_probe")
    seen: dict[int, list[float]] = {}

    def probe(index: int, value: Any, op: str) -> bool:
        seen.setdefault(index, []).append(float(value))
        return _COMPARE[op](value, program.conditions[index].threshold)

    model._probe = probe
    for index, condition in enumerate(program.conditions):
        if condition.kind == "bool":
            continue
        seen.clear()
        for _, values in cases:
            try:
                with torch.no_grad():
                    model(*values)
            except Exception:  # an input PyTorch rejects (an index out of range) calibrates nothing
                continue
        finite = [v for v in seen.get(index, []) if math.isfinite(v)]
        if not finite:
            continue
        condition.threshold = _split(sorted(finite), condition.kind)


def _split(values: list[float], kind: str) -> float | int:
    """A threshold near the median, halfway between two neighbouring distinct values (so that float32
    rounding differences between PyTorch and IREE do not flip a decision)."""
    middle = len(values) // 2
    low, high = values[max(middle - 1, 0)], values[middle]
    if low == high:  # many equal values: split at the nearest gap above or below them
        higher = [v for v in values if v > high]
        lower = [v for v in values if v < low]
        if higher:
            low, high = high, higher[0]
        elif lower:
            low, high = lower[-1], low
    if kind == "int":
        return math.floor((low + high) / 2)
    return float(f"{(low + high) / 2:.6g}")
