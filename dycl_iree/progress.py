"""Progress of long steps: the exporter logs through `logging` (logger "dycl_iree"), and this module
shows those records while a command runs.

The Python API only logs: a program sees the steps with `logging.basicConfig(level=logging.INFO)`,
or with `export(..., progress=print)`. INFO records are steps (one line each); DEBUG records are
sub-steps (`lowering seg3 of 12`), shown on a terminal's status line only. On a terminal the status
line says how long the current step has run; elsewhere (a log file, CI) each step is one plain line,
and a step that runs long gets a line every 30 s, so a slow `iree-compile` is never silent.

Example:
    >>> with show_progress():                                  # doctest: +SKIP
    ...     bundle = dycl_iree.export(model, example_inputs)
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from typing import Any, Iterator, TextIO

LOGGER = logging.getLogger("dycl_iree")
_HEARTBEAT_SECONDS = 30.0


class _StatusLine:
    """The terminal status: the current step and how long it has run, recomputed at every refresh."""

    def __init__(self) -> None:
        self.message = "starting"
        self.since = time.perf_counter()

    def set(self, message: str) -> None:
        self.message, self.since = message, time.perf_counter()

    def __rich__(self) -> Any:
        from rich.text import Text  # Text, not markup: a message may hold brackets (`x[0]`)

        return Text.assemble(self.message, (f"  {time.perf_counter() - self.since:.0f} s", "dim"))


class _Handler(logging.Handler):
    def __init__(self, stream: TextIO) -> None:
        super().__init__(logging.DEBUG)
        self.stream = stream
        self.start = time.perf_counter()
        self.terminal = stream.isatty()
        self.status: Any = None
        self.line = _StatusLine()
        self.last_step = (time.perf_counter(), "")
        self.next_heartbeat = _HEARTBEAT_SECONDS
        self.done = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        step = record.levelno >= logging.INFO
        if self.terminal:
            self.line.set(message.strip())
            if step:
                from rich.text import Text

                self.status.console.print(Text.assemble((self._elapsed(), "dim"), " ", message))
        elif step:
            self.last_step = (time.perf_counter(), message)
            self.next_heartbeat = _HEARTBEAT_SECONDS
            self._write(message)

    def _elapsed(self) -> str:
        return f"{time.perf_counter() - self.start:6.1f} s"

    def _write(self, message: str) -> None:
        try:
            print(f"[{self._elapsed()}] {message}", file=self.stream, flush=True)
        except (BrokenPipeError, ValueError):
            pass

    def heartbeat(self) -> None:
        """Off a terminal: a line every 30 s while one step runs (iree-compile can take minutes)."""
        while not self.done.wait(_HEARTBEAT_SECONDS / 6):
            started, message = self.last_step
            ran = time.perf_counter() - started
            if message and ran >= self.next_heartbeat:
                self._write(f"  still {message} ({ran:.0f} s so far)")
                self.next_heartbeat = ran + _HEARTBEAT_SECONDS


@contextlib.contextmanager
def show_progress(stream: TextIO | None = None) -> Iterator[None]:
    """Show the "dycl_iree" logger's records on `stream` (stderr) while the block runs."""
    stream = stream or sys.stderr
    handler = _Handler(stream)
    previous_level, previous_propagate = LOGGER.level, LOGGER.propagate
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.DEBUG)
    LOGGER.propagate = False  # shown here once, not again by a handler a library put on the root logger
    ticker = None
    try:
        if handler.terminal:
            from rich.console import Console

            console = Console(file=stream, soft_wrap=True)
            with console.status(handler.line, spinner="dots") as status:
                handler.status = status
                yield
        else:
            ticker = threading.Thread(target=handler.heartbeat, daemon=True)
            ticker.start()
            yield
    finally:
        handler.done.set()
        if ticker is not None:
            ticker.join(timeout=1)
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(previous_level)
        LOGGER.propagate = previous_propagate
