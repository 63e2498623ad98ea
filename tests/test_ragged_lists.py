"""Lists of tensors that grow by pieces of different sizes, as published models build them: a
sequence cut into segments at data-dependent boundaries, per-row outputs of different lengths
routed to different heads, and an Emformer-style memory that keeps the last few segments.

Such a list is carried as its tensors concatenated along the dim where they differ, with their
sizes (`specialize/ragged_lists.py`). Each model is written the way such code is written (lists
that start empty, `append`, `torch.cat(xs, 0)`, `xs[i]`, `len(xs)`, `xs[1:] + [new]`); every
path is driven and compared with the scripted model on both hosts, with inputs whose piece counts
and sizes differ from the example's, and the compiled host is asserted.
"""

# The models keep the published code's idioms (`super(Class, self)`, `typing.List`).
# ruff: noqa: UP006, UP008

from __future__ import annotations

from typing import List

import numpy as np
import pytest
import torch
import torch.nn as nn
from torch.export import Dim

from tests.conftest import check_hosts_raise, export_compiled


class SequenceSegmenter(nn.Module):
    """Cuts a sequence where its energy crosses a threshold, normalizes each segment, and returns
    the segments both joined and as a list (as voice-activity and subword segmenters do)."""

    def __init__(self):
        super(SequenceSegmenter, self).__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, threshold: float):
        energy = x.abs().mean(1)
        chunks: List[torch.Tensor] = []
        start = 0
        for i in range(1, x.size(0)):
            if bool(energy[i] > threshold):
                segment = x[start:i]
                chunks.append(self.proj(segment - segment.mean(0, keepdim=True)))
                start = i
        chunks.append(self.proj(x[start:]))
        return torch.cat(chunks, 0), len(chunks), chunks[0], chunks[-1], chunks


class RowRouter(nn.Module):
    """Routes each row to a short or a long head by a gate; the heads emit 2 or 3 tokens per row,
    collected in a list that starts empty and joined (mixture-of-experts style routing)."""

    def __init__(self):
        super(RowRouter, self).__init__()
        self.gate = nn.Linear(4, 1)
        self.short = nn.Linear(4, 2 * 3)
        self.long = nn.Linear(4, 3 * 3)

    def forward(self, x):
        rows: List[torch.Tensor] = []
        for b in range(x.size(0)):
            row = x[b]
            if bool(self.gate(row) > 0):
                out = self.short(row).view(2, 3)
            else:
                out = self.long(row).view(3, 3)
            rows.append(out)
        return torch.cat(rows, 0)


class SegmentMemory(nn.Module):
    """torchaudio's Emformer, cut down: an utterance processed segment by segment, each segment
    attending to a memory of the last `max_memory` segments' summaries (`mems[1:] + [new]`). The
    last segment is shorter, so the outputs differ in length; with `half=True` each summary keeps
    the first half of its segment's rows, so the memory's pieces differ in size too."""

    def __init__(self, segment_length: int = 3, max_memory: int = 2, half: bool = False):
        super(SegmentMemory, self).__init__()
        self.segment_length = segment_length
        self.max_memory = max_memory
        self.half = half
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        mems: List[torch.Tensor] = []
        outputs: List[torch.Tensor] = []
        utterance_length = x.size(0)
        for start in range(0, utterance_length, self.segment_length):
            segment = x[start : min(start + self.segment_length, utterance_length)]
            if len(mems) > 0:
                memory = torch.cat(mems)
                weights = torch.softmax(segment @ memory.t(), dim=1)
                segment = segment + weights @ memory
            out = torch.tanh(self.proj(segment))
            outputs.append(out)
            if self.half:
                new = out[: (out.size(0) + 1) // 2]
            else:
                new = out.mean(0, keepdim=True)
            if len(mems) >= self.max_memory:
                mems = mems[1:] + [new]
            else:
                mems.append(new)
        return torch.cat(outputs), torch.cat(mems), len(mems)


def _same(got, want):
    if isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), (type(got), len(got), len(want))
        for g, w in zip(got, want):
            _same(g, w)
    elif isinstance(want, torch.Tensor):
        assert tuple(np.shape(got)) == tuple(want.shape), (np.shape(got), want.shape)
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5, atol=1e-5)
    else:
        assert got == want, (got, want)


def _check(scripted, hosts, inputs):
    with torch.no_grad():
        want = scripted(*inputs)
    for host in hosts:
        _same(host(*(i.numpy() if isinstance(i, torch.Tensor) else i for i in inputs)), want)
    return want


def test_a_sequence_cut_at_data_dependent_boundaries(tmp_path):
    torch.manual_seed(0)
    example = (torch.randn(7, 4), 0.8)
    dynamic = {"x": {0: Dim("time")}, "threshold": None}
    _, scripted, compiled, python = export_compiled(tmp_path, SequenceSegmenter(), example, "segmenter", dynamic)
    counts, sizes = set(), set()
    generator = torch.Generator().manual_seed(1)
    # Lengths and thresholds that give 1 to many segments, of sizes other than the example's.
    for length, threshold in ((7, 0.8), (12, 0.5), (30, 0.6), (3, 5.0), (1, 0.1), (9, 0.0)):
        x = torch.randn(length, 4, generator=generator)
        joined, count, first, last, chunks = _check(scripted, (compiled, python), (x, threshold))
        counts.add(count)
        sizes.update(chunk.size(0) for chunk in chunks)
    assert {1, 9}.issubset(counts) and len(counts) >= 4, counts
    assert len(sizes) >= 4, sizes
    (label,) = python.decisions
    assert set(python.decisions[label]) == {True, False}
    (loop,) = python.trip_counts
    assert 0 in python.trip_counts[loop] and max(python.trip_counts[loop]) == 29


@pytest.fixture(scope="module")
def router(tmp_path_factory):
    torch.manual_seed(2)
    folder = tmp_path_factory.mktemp("router")
    return export_compiled(folder, RowRouter(), (torch.randn(3, 4),), "router", {"x": {0: Dim("rows")}})[1:]


def test_rows_routed_to_heads_of_different_lengths_are_joined(router):
    scripted, compiled, python = router
    lengths = set()
    generator = torch.Generator().manual_seed(3)
    for rows in (3, 5, 1, 8):
        x = torch.randn(rows, 4, generator=generator)
        lengths.add(_check(scripted, (compiled, python), (x,)).size(0))
    assert len(lengths) == 4, lengths
    (label,) = python.decisions
    assert dict(python.decisions[label]).keys() == {True, False}


def test_joining_a_list_that_stayed_empty_raises_as_in_pytorch(router):
    scripted, compiled, python = router
    x = torch.randn(0, 4)
    check_hosts_raise(scripted, (compiled, python), (x,), r"torch.cat\(\): expected a non-empty list of Tensors")


@pytest.mark.parametrize("half", [False, True], ids=["summaries", "half_segments"])
def test_an_emformer_style_memory_of_the_last_segments(tmp_path, half):
    torch.manual_seed(4)
    model = SegmentMemory(half=half)
    dynamic = {"x": {0: Dim("time")}}
    _, scripted, compiled, python = export_compiled(tmp_path, model, (torch.randn(8, 4),), "memory", dynamic)
    generator = torch.Generator().manual_seed(5)
    memories = set()
    for length in (8, 12, 2, 3, 1, 16):
        outputs, memory, count = _check(scripted, (compiled, python), (torch.randn(length, 4, generator=generator),))
        assert outputs.size(0) == length
        memories.add((memory.size(0), count))
    # One segment or several; with half segments, memories of the same count differ in rows.
    assert {count for _, count in memories} == {1, 2}, memories
    assert len(memories) >= (4 if half else 2), memories
    # The memory was read (and not) and trimmed (and not): both sides of both decisions ran.
    assert all(set(sides) == {True, False} for sides in python.decisions.values()), python.decisions
    assert len(python.decisions) == 2


class StepsThenPrompt(nn.Module):
    """Rows produced one per step (one shape: stacked), then a two-row prompt appended (another
    shape: the list is concatenated from there on)."""

    def forward(self, x, steps: int):
        rows: List[torch.Tensor] = []
        for i in range(steps):
            rows.append(x[i].unsqueeze(0) * 2.0)
        rows.append(x[:2])
        return torch.cat(rows, 0), rows[1], len(rows)


def test_a_list_of_one_shape_that_then_grows_by_another(tmp_path):
    torch.manual_seed(6)
    dynamic = {"x": {0: Dim("rows")}, "steps": None}
    example = (torch.randn(5, 4), 3)
    _, scripted, compiled, python = export_compiled(tmp_path, StepsThenPrompt(), example, "steps", dynamic)
    for rows, steps in ((5, 3), (8, 6), (3, 1), (4, 0)):
        inputs = (torch.randn(rows, 4), steps)
        if steps == 0:  # rows[1] does not exist: PyTorch raises, and so do both hosts
            check_hosts_raise(scripted, (compiled, python), inputs, "list index out of range")
            continue
        _check(scripted, (compiled, python), inputs)
    (loop,) = python.trip_counts
    assert python.trip_counts[loop][:3] == [3, 6, 1]
