"""Telling the user where a benchmark is while it runs: per model, per candidate, per round.

A full run takes many minutes (every model is exported and compiled several ways), so the command
line shows which model and candidate it is at, on stderr, keeping stdout for the report. On a
terminal that is a rich progress line (models done, elapsed time, the current step) with finished
steps printed above it; otherwise (a log file, CI) plain lines that say the same with the
seconds since the start, never wrapped. From Python, progress goes to the `dycl_iree.bench` logger
unless another `Progress` is given.

Example:
    >>> progress = PlainProgress(sys.stdout)
    >>> progress.done("sdn_resnet56: 7 samples")  # doctest: +ELLIPSIS
    [   ... s] sdn_resnet56: 7 samples
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, TextIO


class Progress:
    """Where the benchmark is. `step` says what runs now; `done` reports something that finished.

    `start(total)` is called once with the number of models, `advance()` after each model, and
    `stop()` at the end. This base class says nothing.
    """

    def start(self, total: int) -> None:
        """The benchmark starts on `total` models."""

    def step(self, message: str) -> None:
        """What runs now (replaced by the next step)."""

    def done(self, message: str) -> None:
        """Something finished; the line stays."""

    def advance(self) -> None:
        """One more model is done."""

    def stop(self) -> None:
        """The benchmark is over."""


class LogProgress(Progress):
    """Progress through `logging` (steps at DEBUG, finished steps at INFO): silent by default."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger("dycl_iree.bench")

    def step(self, message: str) -> None:
        self.logger.debug(message)

    def done(self, message: str) -> None:
        self.logger.info(message)


class PlainProgress(Progress):
    """One plain line per step and per finished step, with the seconds since the start."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.started = time.perf_counter()

    def _line(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.started:5.0f} s] {message}", file=self.stream, flush=True)

    def step(self, message: str) -> None:
        self._line(message)

    def done(self, message: str) -> None:
        self._line(message)


class RichProgress(Progress):
    """A rich progress line on a terminal: models done, elapsed time and the current step."""

    def __init__(self, stream: TextIO | None = None) -> None:
        from rich.console import Console

        self.console = Console(file=stream or sys.stderr, highlight=False)
        self._progress: Any = None
        self._task: Any = None

    def start(self, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("models"),
            MofNCompleteColumn(),
            BarColumn(bar_width=20),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=self.console,
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task("starting", total=total)

    def step(self, message: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=message)

    def done(self, message: str) -> None:
        self.console.print(message, markup=False, soft_wrap=True)  # the terminal wraps, not rich

    def advance(self) -> None:
        if self._progress is not None:
            self._progress.advance(self._task)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def console_progress(stream: TextIO | None = None) -> Progress:
    """The command line's progress: rich on a terminal, plain lines otherwise (stderr by default)."""
    stream = stream or sys.stderr
    return RichProgress(stream) if stream.isatty() else PlainProgress(stream)
