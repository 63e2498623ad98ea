"""Silencing what the peers print that is not a result, while a benchmark runs.

torch.compile's dynamo logs every graph break and recompilation as a multi-line warning (a dynamic
network breaks the graph at every data-dependent decision, by design); those are what the
benchmark measures, not news. onnxruntime's own log lines are turned off where its sessions are
made (`peers/onnxruntime.py`). A peer that fails still raises, and its error is in the report.

Example:
    >>> with quiet_peers():
    ...     logging.getLogger("torch._dynamo").getEffectiveLevel() == logging.ERROR
    True
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

NOISY_LOGGERS = ("torch._dynamo", "torch._inductor")
"""Loggers whose warnings a benchmark run hides (errors still show)."""


@contextmanager
def quiet_peers() -> Iterator[None]:
    """Raise the noisy peers' loggers to ERROR for the duration, then put them back."""
    loggers = [logging.getLogger(name) for name in NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
