"""The inputs a fuzzed program is checked with: finite ones (which also calibrate its thresholds) and bad ones.

Each case is `(label, values)` with values in forward order: a float32 tensor `x`, then Python scalars.
Bad cases: a NaN or an inf in `x`, a NaN float input, an index input out of range (PyTorch raises).

Example:
    >>> from tests.fuzz.generate import generate
    >>> cases = input_cases(generate(3))
    >>> cases[0][0]
    'example'
"""

from __future__ import annotations

import random
from typing import Any

import torch

Case = tuple[str, tuple[Any, ...]]


def _values(program: Any, rng: random.Random, batch: int, generator: torch.Generator) -> dict[str, Any]:
    scale, shift = rng.uniform(0.2, 3.0), rng.uniform(-1.0, 1.0)
    f = program.features
    return {
        "x": torch.randn(batch, f, generator=generator) * scale + shift,
        "n": rng.randint(0, 5),
        "k": rng.randint(-f, f - 1),
        "s": round(rng.uniform(-2.0, 2.0), 3),
        "flag": rng.random() < 0.5,
    }


def _case(program: Any, label: str, values: dict[str, Any]) -> Case:
    return label, tuple(values[name] for name in program.inputs)


def example_case(program: Any) -> Case:
    generator = torch.Generator().manual_seed(program.seed)
    return _case(program, "example", _values(program, random.Random(program.seed), program.batch, generator))


def finite_cases(program: Any, count: int = 6) -> list[Case]:
    """The example inputs first, then `count - 1` random finite ones (another batch size when it is dynamic)."""
    rng = random.Random(program.seed * 7919 + 1)
    generator = torch.Generator().manual_seed(program.seed * 7919 + 1)
    cases = [example_case(program)]
    for index in range(count - 1):
        batch = rng.randint(1, 4) if program.dynamic_batch else program.batch
        cases.append(_case(program, f"random{index}", _values(program, rng, batch, generator)))
    return cases


def bad_cases(program: Any) -> list[Case]:
    """NaN, inf, and out-of-range index inputs."""
    rng = random.Random(program.seed * 104729 + 2)
    generator = torch.Generator().manual_seed(program.seed * 104729 + 2)
    cases = []
    values = _values(program, rng, program.batch, generator)
    values["x"] = values["x"].clone()
    values["x"].view(-1)[rng.randrange(values["x"].numel())] = float("nan")
    cases.append(_case(program, "nan in x", values))
    values = _values(program, rng, program.batch, generator)
    values["x"] = values["x"].clone()
    values["x"].view(-1)[rng.randrange(values["x"].numel())] = rng.choice([float("inf"), float("-inf")])
    cases.append(_case(program, "inf in x", values))
    if "s" in program.inputs:
        values = _values(program, rng, program.batch, generator)
        values["s"] = float("nan")
        cases.append(_case(program, "s = nan", values))
    if "k" in program.inputs:
        for k in (program.features, -program.features - 1, 10**9):
            values = _values(program, rng, program.batch, generator)
            values["k"] = k
            cases.append(_case(program, f"k = {k} (out of range)", values))
    return cases


def input_cases(program: Any) -> list[Case]:
    return finite_cases(program) + bad_cases(program)
