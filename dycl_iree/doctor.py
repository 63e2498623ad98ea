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

import inspect
import re
from typing import Any, Sequence

from host_runtime.errors import DyclError

from .capture import capture
from .diagnose import Problem, diagnose
from .diagnose.source import source_line
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
        return [_problem_of(error, model)]
    return []


def _problem_of(error: DyclError, model: Any = None) -> Problem:
    """A Problem from an exporter error: what it refuses, at the model's line it names, with the way
    out the message gives (`...(model.py:12): its tensors must share dtype and rank`). An
    error inside torch's code called by a submodule (`rnn.py:1164 called by self.lstm (LSTM)`) is
    told at the model's line that calls that submodule."""
    message = str(error)
    where = re.search(r"\((?:from )?([^\s(,]+\.py):(\d+)[^()]*(?:\([^()]*\)[^()]*)*\)", message)
    if where is None:
        title = "the exporter cannot type this construct for the example inputs"
        if not isinstance(error, SpecializeError):
            title = f"the exporter stops here ({type(error).__name__})"
        return Problem(title, "", 0, "", message, _GENERIC_FIX, said_by="exporter")
    file, line = where.group(1), int(where.group(2))
    caller = re.search(r"called by (self(?:\.\w+)+)", where.group(0))
    if caller is not None and model is not None:
        file, line = _call_site(model, caller.group(1)) or (file, line)
    what, hint = message[: where.start()].strip(), message[where.end() :].lstrip(":; ").strip()
    title = what or type(error).__name__
    said = message[: where.end()] if hint else message  # the way out is the fix, not said twice
    return Problem(title, file, line, source_line(file, line), said, hint or _GENERIC_FIX, said_by="exporter")


def _call_site(model: Any, path: str) -> tuple[str, int] | None:
    """(file, line) of the call `self.name(...)` in the forward of the module that owns `path`
    (`self.encoder.lstm`: the encoder's forward calling `self.lstm(`), or None if not found."""
    *parents, name = path.split(".")[1:]
    try:
        owner = model.get_submodule(".".join(parents)) if parents else model
        lines, first = inspect.getsourcelines(type(owner).forward)
        file = inspect.getsourcefile(type(owner).forward)
    except (AttributeError, OSError, TypeError):
        return None
    call = re.compile(rf"\bself\.{re.escape(name)}\s*\(")
    for offset, text in enumerate(lines):
        if call.search(text) and file is not None:
            return file, first + offset
    return None


_GENERIC_FIX = (
    "change the construct the message names, or the example inputs when they are not what forward "
    "expects; `export` stops with the same error."
)


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
