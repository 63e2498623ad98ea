"""Segment inputs as a run of the example inputs meets them: examples for a segment whose hints disagree.

Specialize gives every value a hint, its size at the example inputs where it can tell, else a size
its rules for joins make up (a loop-carried list's length, the size of a list's item read back
from the device). Those rules keep most segments' hints in step, not all: in a loop that appends
`softmax(h)` to a list that starts empty and, inside, sums the list's items into `zeros_like(h)`,
the list's join settled at 3 rows for 3 items, so an item was read with the example length 2
where `h` had 3 rows, and torch.export refused `total + item` ("The size of tensor a (s64) must
match the size of tensor b (s97)"): a disagreement of the examples, not of the model.

So where a segment's export fails at its hints, lowering exports it again at the sizes and ints of
one of its calls in a run of the Program on the example inputs (the reference interpreter: eager
PyTorch ops), the first call whose dynamic dims are all 2 or more (torch.export specializes a dim
of 0 or 1). The run is made once, and only when a segment needs it.

Example:
    >>> observed = ObservedCalls(program, example_inputs)                 # doctest: +SKIP
    >>> observed.hints(program.segments[6])                               # doctest: +SKIP
    [(3, 4), 0, 3, None, (3, 4)]
"""

from __future__ import annotations

from typing import Any

import torch

from .program import Program, ScalarType, Segment, SegmentCall, TensorType
from .reference import ReferenceInterpreter

# Calls kept per segment: a loop's segment is called once per iteration, and a call from the
# first few whose dims are all 2 or more is as good as any.
KEPT_CALLS = 16


class ObservedCalls:
    """Each segment's inputs at its first calls in a run of `program` on `example_inputs`."""

    def __init__(self, program: Program, example_inputs: tuple) -> None:
        self.program = program
        taken = set(program.taken_input_names)
        self.inputs = [value for name, value in zip(program.input_names, example_inputs) if name in taken]
        self._calls: dict[str, list[list[Any]]] | None = None

    def hints(self, segment: Segment) -> list | None:
        """Per parameter of `segment`: a tensor's shape, an int's value (None for a float, a
        negative int or a random state), at its first observed call whose dynamic dims are all 2
        or more; None where no call was seen (the run failed, or did not reach the segment)."""
        if self._calls is None:
            self._calls = self._run()
        for arguments in self._calls.get(segment.name, []):
            hints = _hints_of_call(segment, arguments)
            if hints is not None:
                return hints
        return None

    def _run(self) -> dict[str, list[list[Any]]]:
        recorder = _Recorder(self.program)
        inputs = [value.clone() if isinstance(value, torch.Tensor) else value for value in self.inputs]
        try:
            with torch.no_grad():
                recorder.run(*inputs)
        except Exception:
            pass  # the calls seen before a failure (a model that raises at its examples) still count
        return recorder.calls


class _Recorder(ReferenceInterpreter):
    def __init__(self, program: Program) -> None:
        super().__init__(program)
        self.calls: dict[str, list[list[Any]]] = {}

    def segment_call(self, node: SegmentCall) -> list:
        seen = self.calls.setdefault(node.segment, [])
        if len(seen) < KEPT_CALLS:
            seen.append([_abstract(self.read(argument)) for argument in node.args])
        return super().segment_call(node)


def _abstract(value: Any) -> Any:
    """What an example needs of an argument: a tensor's shape, an int's value."""
    if isinstance(value, torch.Tensor):
        return tuple(value.shape)
    if isinstance(value, (bool, int)):
        return int(value)
    return None


def _hints_of_call(segment: Segment, arguments: list) -> list | None:
    hints: list = []
    for param, argument in zip(segment.params, arguments):
        type_ = param.type
        if isinstance(type_, TensorType):
            if not isinstance(argument, tuple) or len(argument) != type_.rank:
                return None
            for size, observed in zip(type_.shape, argument):
                if (size is None and observed < 2) or (size is not None and size != observed):
                    return None
            hints.append(argument)
        elif isinstance(type_, ScalarType) and type_.kind != "float" and isinstance(argument, int) and argument >= 0:
            hints.append(argument)
        else:
            hints.append(None)
    return hints
