"""What lets the segments of one lowering share the work of their one-trace exports
(`lower._export_in_one_trace`): the split of the decomposition table, and torch's override of the
table's composite ops, each made once per lowering rather than once per segment.

Same process, a fuzzer program of 43 segments: lowering CPU 16.1-17.4 s with both per segment,
11.3-11.9 s with the split shared, 2.7-3.6 s with the override kept too; the vmfb is the same bytes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

# The split of the last table: one lowering passes the same table for every segment, and the split
# scans every registered op (0.3 s a segment; a fuzzer program of 43 segments spent 13 of its 58 s of
# lowering there). Read and written under `lower._EXPORT_LOCK`; it keeps that table alive, and `is` tells it.
_SPLIT: list[tuple[Any, dict, dict]] = []


def split_table(decompositions: Any, split: Callable) -> tuple[dict, dict]:
    """(the table's composite ops, the rest of it), as `_split_decomp_table_to_cia_and_python_decomp`
    gives them, the composite ops kept only where the table names them (`_export_in_one_trace`)."""
    if not (_SPLIT and _SPLIT[0][0] is decompositions):
        composite, table = split(dict(decompositions))
        composite = {op: rewrite for op, rewrite in composite.items() if op in decompositions}
        _SPLIT[:] = [(decompositions, composite, table)]
    _, composite, table = _SPLIT[0]
    return composite, dict(table)  # a copy: the trace gets a table of its own, as before


class KeptOverride:
    """torch's override of the table's composite ops (`_override_composite_implicit_decomp`), entered
    once for the segments of one lowering that export in one trace rather than once for each: it
    re-registers some 500 ops' Python kernels each time (about a third of a small segment's
    lowering). It is left before the two-step path, which applies the table itself, and before an
    error is explained, and at the end of the lowering; held only under `lower._EXPORT_LOCK`."""

    def __init__(self) -> None:
        self.lowering = False
        self.stack: contextlib.ExitStack | None = None
        self.composite: dict | None = None

    @contextlib.contextmanager
    def kept(self) -> Any:
        self.lowering = True
        try:
            yield
        finally:
            self.lowering = False
            self.release()

    def enter(self, override: Callable, composite: dict) -> contextlib.AbstractContextManager:
        """A context for one trace: the kept override while lowering, else one of its own."""
        if not self.lowering:
            return override(composite)
        if self.stack is None or self.composite is not composite:
            self.release()
            stack = contextlib.ExitStack()
            stack.enter_context(override(composite))
            self.stack, self.composite = stack, composite
        return contextlib.nullcontext()

    def release(self) -> None:
        if self.stack is not None:
            stack, self.stack, self.composite = self.stack, None, None
            stack.close()


OVERRIDE = KeptOverride()
