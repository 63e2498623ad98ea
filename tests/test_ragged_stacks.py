"""`torch.stack` of lists that grow by pieces whose sizes are known only at run time, as published
decoders and routers build them.

A list whose tensors differ in one dim (or that starts empty and grows by tensors with a dynamic
dim that no tensor the loop starts from has) is kept concatenated along that dim with its sizes
(`specialize/ragged_lists.py`). PyTorch stacks such a list when its tensors happen to have one
size at run time, and raises otherwise; so does `torch.cat` along another dim. Each model is
written the way such code is written (`outs: List[Tensor] = []`, `append` in a `while` loop that
stops on data, `torch.stack(outs)`), exported once with the compiled host, and every loop exit
(no iteration, one, several, the cap) and every error is driven on both hosts against the
scripted model.
"""

# The models keep the published code's idioms (`super(Class, self)`, `typing.List`).
# ruff: noqa: UP006, UP008

from __future__ import annotations

from typing import List

import pytest
import torch
import torch.nn as nn
from torch.export import Dim

from tests.conftest import check_hosts, check_hosts_raise, export_compiled


class GatedHeads(nn.Module):
    """Each row goes to a short head (2 tokens) or a long head (3 tokens) by a gate, as
    mixture-of-experts routing does. The tokens are joined side by side (`torch.cat(rows, 1)`) and
    stacked on the first dim, in the middle and after the last: all need every row's tokens equal
    in number, which holds when every row took the same head."""

    def __init__(self):
        super(GatedHeads, self).__init__()
        self.gate = nn.Linear(4, 1)
        self.short = nn.Linear(4, 2 * 3)
        self.long = nn.Linear(4, 3 * 3)
        with torch.no_grad():  # the gate is the sign of the row's sum
            self.gate.weight.fill_(1.0)
            self.gate.bias.zero_()

    def forward(self, x):
        rows: List[torch.Tensor] = []
        for b in range(x.size(0)):
            row = x[b]
            if bool(self.gate(row) > 0):
                rows.append(self.short(row).view(2, 3))
            else:
                rows.append(self.long(row).view(3, 3))
        side_by_side = torch.cat(rows, 1)
        return side_by_side, torch.stack(rows), torch.stack(rows, 1), torch.stack(rows, -1), len(rows)


class LengthCappedDecoder(nn.Module):
    """A decoder that attends over the encoder's outputs up to the longest length in the batch
    (`memory = x[:, :n]`, n = `int(lengths.max())`) and emits the attention-weighted memory at each
    step, until its state falls below a threshold or after `max_steps`. Each step's output has the
    memory's run-time time dim, which no tensor the loop starts from has."""

    def __init__(self):
        super(LengthCappedDecoder, self).__init__()
        self.query = nn.Linear(4, 4)

    def forward(self, x, lengths, threshold: float, max_steps: int):
        n = int(lengths.max())
        memory = x[:, :n]
        state = x.mean(1)
        outs: List[torch.Tensor] = []
        step = 0
        while step < max_steps and bool(state.norm() > threshold):
            scores = torch.softmax((memory * self.query(state).unsqueeze(1)).sum(2), 1)
            outs.append(memory * scores.unsqueeze(2))
            state = state * 0.5
            step += 1
        return torch.stack(outs), torch.cat(outs, 1), torch.cat(outs, 0), len(outs)


class SegmentEncoder(nn.Module):
    """Reads an utterance in segments whose lengths an input gives (a segmenter's output), encoding
    each, until the utterance ends, a length is 0, or the lengths run out. The segments are joined
    in time, and stacked: PyTorch stacks them only when every segment has the same length."""

    def __init__(self):
        super(SegmentEncoder, self).__init__()
        self.proj = nn.Linear(4, 3)

    def forward(self, x, lengths):
        outs: List[torch.Tensor] = []
        start = 0
        step = 0
        while step < lengths.size(0) and start < x.size(1) and bool(lengths[step] > 0):
            end = start + int(lengths[step])
            outs.append(torch.tanh(self.proj(x[:, start:end])))
            start = end
            step += 1
        return torch.cat(outs, 1), torch.stack(outs, 1)


@pytest.fixture(scope="module")
def gated_heads(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("gated")
    return export_compiled(folder, GatedHeads(), (torch.randn(3, 4),), "gated", {"x": {0: Dim("rows")}})


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("decoder")
    example = (torch.randn(2, 6, 4), torch.tensor([3, 5]), 0.1, 4)
    dynamic = {"x": None, "lengths": None, "threshold": None, "max_steps": None}
    return export_compiled(folder, LengthCappedDecoder(), example, "decoder", dynamic)


@pytest.fixture(scope="module")
def segments(tmp_path_factory):
    torch.manual_seed(2)
    folder = tmp_path_factory.mktemp("segments")
    example = (torch.randn(2, 6, 4), torch.tensor([2, 2, 2]))
    dynamic = {"x": {1: Dim("time")}, "lengths": {0: Dim("count")}}
    return export_compiled(folder, SegmentEncoder(), example, "segments", dynamic)


def _rows(signs: list[float]) -> torch.Tensor:
    """Rows whose sums have the given signs (the gate's choice of head)."""
    generator = torch.Generator().manual_seed(len(signs))
    return torch.rand(len(signs), 4, generator=generator).add(0.1) * torch.tensor(signs).unsqueeze(1)


def test_rows_that_took_one_head_are_stacked(gated_heads):
    bundle, scripted, compiled, python = gated_heads
    lengths = set()
    for signs in ([1.0, 1.0, 1.0], [-1.0, -1.0], [1.0], [-1.0] * 5):
        side_by_side, stacked, middle, last, count = check_hosts(scripted, (compiled, python), (_rows(signs),))
        lengths.add(stacked.size(1))
    assert lengths == {2, 3}, lengths  # short and long heads, stacked
    (label,) = python.decisions
    assert set(python.decisions[label]) == {True, False}


def test_rows_of_different_heads_raise_as_pytorch_does(gated_heads):
    bundle, scripted, compiled, python = gated_heads
    hosts = (compiled, python)
    # cat along dim 1 comes first in the model: PyTorch's message for it, naming the dim.
    check_hosts_raise(
        scripted, hosts, (_rows([1.0, -1.0, 1.0]),), r"Sizes of tensors must match except in dimension 1"
    )
    check_hosts_raise(scripted, hosts, (torch.randn(0, 4),), r"torch.cat\(\): expected a non-empty list of Tensors")


def test_a_decoder_stacks_steps_as_long_as_the_longest_input(decoder):
    bundle, scripted, compiled, python = decoder
    hosts = (compiled, python)
    generator = torch.Generator().manual_seed(3)
    steps, widths = [], set()
    # thresholds and caps for one step, several, and the cap; lengths for memories of other widths.
    # The state halves at each step; the loop stops once it is at most `fraction` of what it was.
    runs = (([3, 5], 0.1, 4), ([6, 2], 0.1, 2), ([1, 1], 1e-4, 12), ([4, 2], 0.7, 9), ([2, 3], 0.3, 9))
    for lengths, fraction, max_steps in runs:
        x = torch.randn(2, 6, 4, generator=generator)
        threshold = float(x.mean(1).norm()) * fraction
        stacked, in_time, in_batch, count = check_hosts(
            scripted, hosts, (x, torch.tensor(lengths), threshold, max_steps)
        )
        steps.append(count)
        widths.add(stacked.size(2))
    assert steps == [4, 2, 12, 1, 2], steps  # the cap reached three times, the threshold twice
    assert widths == {5, 6, 1, 4, 3}, widths
    # No step at all: torch.stack of the empty list raises, on both hosts too.
    x = torch.randn(2, 6, 4, generator=generator)
    inputs = (x, torch.tensor([3, 5]), float(x.mean(1).norm()) * 2.0, 4)
    check_hosts_raise(scripted, hosts, inputs, r"stack expects a non-empty TensorList")
    (loop,) = python.trip_counts
    assert set(python.trip_counts[loop]) >= {1, 2, 4, 12}, python.trip_counts


def test_segments_of_one_length_stack_and_others_raise(segments):
    bundle, scripted, compiled, python = segments
    hosts = (compiled, python)
    generator = torch.Generator().manual_seed(4)
    counts = []
    # Segments of one length: the lengths run out, the utterance ends, a 0 stops the loop.
    for time, lengths in ((6, [2, 2, 2]), (9, [3, 3, 3, 3]), (5, [4, 0, 4]), (8, [1] * 8), (7, [7, 7])):
        x = torch.randn(2, time, 4, generator=generator)
        in_time, stacked = check_hosts(scripted, hosts, (x, torch.tensor(lengths)))
        counts.append(stacked.size(1))
    assert counts == [3, 3, 1, 8, 1], counts
    (loop,) = python.trip_counts
    assert set(python.trip_counts[loop]) == {1, 3, 8}, python.trip_counts
    # Segments of different lengths: torch.cat joins them, torch.stack raises.
    x = torch.randn(2, 7, 4, generator=generator)
    check_hosts_raise(scripted, hosts, (x, torch.tensor([3, 4])), r"stack expects each tensor to be equal size")
    # The last segment cut short by the end of the utterance.
    x = torch.randn(2, 5, 4, generator=generator)
    check_hosts_raise(scripted, hosts, (x, torch.tensor([2, 2, 2])), r"stack expects each tensor to be equal size")
    # No segment: torch.cat raises first.
    check_hosts_raise(scripted, hosts, (x, torch.tensor([0, 2])), r"torch.cat\(\): expected a non-empty list")


class OptionalPrompt(nn.Module):
    """Frames over the longest input (`x[:, :n]`), after a prompt frame that only inputs with a
    positive sum get: a list that starts empty, whose length depends on a branch, stacked."""

    def forward(self, x, lengths):
        n = int(lengths.max())
        frames: List[torch.Tensor] = []
        if bool(x.sum() > 0):
            frames.append(x[:, :n] * 2.0)
        frames.append(x[:, :n] + 1.0)
        return torch.stack(frames), len(frames)


def test_a_list_whose_length_a_branch_decides_is_stacked(tmp_path):
    example = (torch.randn(2, 6, 4), torch.tensor([3, 5]))
    _, scripted, compiled, python = export_compiled(
        tmp_path, OptionalPrompt(), example, "prompt", {"x": None, "lengths": None}
    )
    counts = set()
    for sign, lengths in ((1.0, [2, 4]), (-1.0, [6, 1]), (1.0, [1, 1])):
        x = torch.rand(2, 6, 4) * sign
        stacked, count = check_hosts(scripted, (compiled, python), (x, torch.tensor(lengths)))
        counts.add((count, stacked.size(2)))
    assert counts == {(2, 4), (1, 6), (2, 1)}, counts
    (label,) = python.decisions
    assert set(python.decisions[label]) == {True, False}


class SquareCrops(nn.Module):
    """Crops of sizes read from the data, square: dynamic in two dims, from a list that starts
    empty; no tensor the loop starts from has their shape, so the crops' width is unknown until
    the first append (`RaggedList.first_sizes`)."""

    def forward(self, x, sizes):
        crops: List[torch.Tensor] = []
        i = 0
        while i < sizes.size(0) and bool(sizes[i] > 0):
            k = int(sizes[i])
            crops.append(x[:k, :k])
            i += 1
        return torch.stack(crops)


@pytest.fixture(scope="module")
def square_crops(tmp_path_factory):
    folder = tmp_path_factory.mktemp("crops")
    example = (torch.randn(5, 5), torch.tensor([2, 2]))
    return export_compiled(folder, SquareCrops(), example, "crops", {"x": None, "sizes": {0: Dim("count")}})


@pytest.mark.parametrize("sizes", [[2, 2], [3], [1, 1, 1, 0], [4, 4, 4], [5, 5, 0, 2]])
def test_square_crops_from_a_list_that_starts_empty_are_stacked(square_crops, sizes):
    bundle, scripted, compiled, python = square_crops
    stacked = check_hosts(scripted, (compiled, python), (torch.randn(5, 5), torch.tensor(sizes)))
    assert stacked.size(0) == (sizes.index(0) if 0 in sizes else len(sizes))


def test_square_crops_of_different_sizes_or_none_raise(square_crops):
    bundle, scripted, compiled, python = square_crops
    hosts = (compiled, python)
    check_hosts_raise(scripted, hosts, (torch.randn(5, 5), torch.tensor([0])), r"stack expects a non-empty TensorList")
    # PyTorch raises at the stack; the hosts where the crop of another width is appended.
    check_hosts_raise(
        scripted,
        hosts,
        (torch.randn(5, 5), torch.tensor([2, 3])),
        r"stack expects each tensor to be equal size",
        r"Sizes of tensors must match except in dimension 0: a tensor of another size in dim 1 was appended",
    )
