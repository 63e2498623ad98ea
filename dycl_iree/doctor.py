"""`python -m dycl_iree doctor FILE.py:FACTORY`: every problem that stops an export, with its fix, without exporting.

It runs the stages that need no compiler: TorchScript (every problem `diagnose` finds), then, when
the model scripts, capture, specialize to the example inputs and partition. Nothing is lowered or
compiled with IREE, so it answers in seconds.

Example:
    >>> problems = check(model, example_inputs)         # doctest: +SKIP
    >>> main("models/programs.py:early_exit")            # doctest: +SKIP
    models/programs.py:early_exit: no problems found
    0
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from host_runtime.errors import DyclError

from .capture import capture
from .diagnose import Problem, diagnose
from .errors import SpecializeError
from .loading import load_factory
from .partition import partition
from .specialize import specialize


def check(model: Any, example_inputs: Sequence[Any], dynamic_shapes: Any = None) -> list[Problem]:
    """Every problem found in `model` before lowering: [] when it scripts, specializes and partitions."""
    problems = diagnose(model)
    if problems:
        return problems  # specialize needs the scripted graph
    try:
        partition(specialize(capture(model), tuple(example_inputs), dynamic_shapes))
    except DyclError as error:
        return [_problem_of(error)]
    return []


def _problem_of(error: DyclError) -> Problem:
    """A Problem from an exporter error; its message names the source line when one exists."""
    message = str(error)
    where = re.search(r"([^\s(,]+\.py):(\d+)", message)
    file, line = (where.group(1), int(where.group(2))) if where else ("", 0)
    if isinstance(error, SpecializeError):
        title = "the exporter cannot type this construct for the example inputs"
    else:
        title = f"the exporter stops here ({type(error).__name__})"
    fix = (
        "change the construct the message names, or the example inputs when they are not what forward "
        "expects; `export` stops with the same error."
    )
    return Problem(title, file, line, "", message, fix, said_by="exporter")


def main(spec: str) -> int:
    """Print every problem of the model `spec` names, with its fix; 1 when there are any, else 0."""
    model, example_inputs, dynamic_shapes, _ = load_factory(spec)
    problems = check(model, example_inputs, dynamic_shapes)
    if not problems:
        print(f"{spec}: no problems found")
        return 0
    count = f"{len(problems)} problem" + ("s" if len(problems) != 1 else "")
    print(f"{spec}: {count}")
    for number, problem in enumerate(problems, 1):
        print(f"{number}. " + str(problem).replace("\n", "\n   "))
    return 1
