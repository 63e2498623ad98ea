"""The benchmark's errors, and the one line of an error that a report cell shows.

A candidate that fails is a result, not a crash: its error's `first_line` goes into the report.
The classes below are the benchmark's own problems (a bad `--models` name, a peer that rejected
the model, an exporter that is not there).

Example:
    >>> first_line(PeerError("onnxruntime: bad graph\\nmore detail"))
    'PeerError: onnxruntime: bad graph'
"""

from __future__ import annotations

from ..errors import DyclError


class BenchError(DyclError):
    """A problem with the benchmark's own inputs (an unknown model or candidate name)."""


class PeerError(DyclError):
    """A peer could not take the model (the message holds the peer's own error lines)."""


class ExporterMissingError(DyclError):
    """`dycl_iree.export` / `load` cannot be found (the exporter is not installed or not built)."""


def first_line(error: BaseException) -> str:
    """The line of an error that says what went wrong, for a report cell.

    `iree-compile` errors start with "Error invoking IREE compiler tool" and carry the real
    diagnostic further down, so for them the first line containing `error:` is taken instead
    (without the temporary file's path, which says nothing).

    >>> first_line(ValueError("bad shape\\nmore detail"))
    'ValueError: bad shape'
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if lines[0].startswith("Error invoking IREE compiler tool"):
        for line in lines[1:]:
            if "error: " in line:
                return f"iree-compile {line[line.index('error: ') :]}"
    return f"{type(error).__name__}: {lines[0]}"
