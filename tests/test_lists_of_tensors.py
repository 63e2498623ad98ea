"""Lists of tensors as published models use them: built with `+` and `*`, appended in a loop with an
early exit, collected in a loop with `break` and stacked, indexed from the end, returned as a list.

Each model is written the way the original code writes it; every path is driven and compared with
PyTorch on both hosts, and the compiled host is asserted (a list must not force the Python host).
"""

# The models keep the published code's idioms (`super(Class, self)`, `typing.List`).
# ruff: noqa: UP006, UP008

from __future__ import annotations

from typing import List

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.conftest import check_hosts_raise, export_compiled


class DownsampleB(nn.Module):
    """BlockDrop's shortcut: pool, then pad the channels with zeros by repeating a list."""

    def __init__(self, nIn, nOut, stride):
        super(DownsampleB, self).__init__()
        self.avg = nn.AvgPool2d(stride)
        self.expand_ratio = nOut // nIn

    def forward(self, x):
        x = self.avg(x)
        return torch.cat([x] + [x.mul(0)] * (self.expand_ratio - 1), 1)


class GatedShortcut(nn.Module):
    def __init__(self):
        super(GatedShortcut, self).__init__()
        self.conv = nn.Conv2d(4, 8, 3, stride=2, padding=1)
        self.shortcut = DownsampleB(4, 8, 2)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x, policy):
        residual = self.shortcut(x)
        if bool(policy[0, 0] > 0.5):
            residual = residual + F.relu(self.conv(x))
        return self.fc(residual.view(residual.size(0), -1))


class AnytimeClassifier(nn.Module):
    """RaNet-style: one prediction per scale, returned as a list that stops at the first confident one."""

    def __init__(self, thresholds=(0.7, 0.5, 0.0)):
        super(AnytimeClassifier, self).__init__()
        self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
        self.classifiers = nn.ModuleList([nn.Linear(8, 4) for _ in range(3)])
        self.thresholds = list(thresholds)

    def forward(self, x) -> List[torch.Tensor]:
        res: List[torch.Tensor] = []
        for i, (block, classifier) in enumerate(zip(self.blocks, self.classifiers)):
            x = F.relu(block(x))
            res.append(classifier(x))
            confidence = F.softmax(res[-1], dim=1).max()
            if bool(confidence > self.thresholds[i]):
                return res
        return res


class CollectStates(nn.Module):
    """A recurrent cell run until its state saturates; the states are stacked, as decoders do."""

    def __init__(self):
        super(CollectStates, self).__init__()
        self.cell = nn.GRUCell(4, 6)
        self.proj = nn.Linear(6, 4)

    def forward(self, x, steps: int):
        h = torch.zeros(x.size(0), 6)
        hs: List[torch.Tensor] = []
        for _ in range(steps):
            h = self.cell(x, h)
            hs.append(h)
            x = torch.tanh(self.proj(h))
            if bool(h.abs().mean() > 0.4):
                break
        states = torch.stack(hs, dim=1)
        total = torch.zeros_like(hs[0])
        for state in hs:
            total = total + state
        return states, hs[-1], total, len(hs)


def _same(got, want):
    if isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), (type(got), len(got), len(want))
        for g, w in zip(got, want):
            _same(g, w)
    elif isinstance(want, torch.Tensor):
        assert got.shape == tuple(want.shape)
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5, atol=1e-5)
    else:
        assert got == want


def _numpy(inputs):
    return tuple(i.numpy() if isinstance(i, torch.Tensor) else i for i in inputs)


def test_a_list_repeated_and_concatenated_runs_on_both_hosts(tmp_path):
    torch.manual_seed(0)
    example = (torch.randn(1, 4, 8, 8), torch.rand(1, 2))
    _, scripted, compiled, python = export_compiled(tmp_path, GatedShortcut(), example, "gs")
    for policy in (torch.tensor([[0.9, 0.0]]), torch.tensor([[0.1, 0.0]])):
        x = torch.randn(1, 4, 8, 8)
        with torch.no_grad():
            want = scripted(x, policy)
        for host in (compiled, python):
            _same(host(*_numpy((x, policy))), want)
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 1}


def test_a_list_returned_from_an_early_exit_has_the_length_of_the_path(tmp_path):
    torch.manual_seed(3)
    model = AnytimeClassifier()
    _, scripted, compiled, python = export_compiled(tmp_path, model, (torch.randn(1, 8),), "anytime")
    # Find inputs that stop at each exit (PyTorch decides which), then check every one.
    by_length: dict[int, torch.Tensor] = {}
    generator = torch.Generator().manual_seed(0)
    for _ in range(400):
        x = torch.randn(1, 8, generator=generator) * float(torch.rand(1, generator=generator) * 6)
        with torch.no_grad():
            by_length.setdefault(len(scripted(x)), x)
        if len(by_length) == 3:
            break
    assert sorted(by_length) == [1, 2, 3], sorted(by_length)
    for length, x in sorted(by_length.items()):
        with torch.no_grad():
            want = scripted(x)
        for host in (compiled, python):
            got = host(x.numpy())
            assert isinstance(got, list) and len(got) == length
            _same(got, want)
    # The first two exits were both taken and passed (the last threshold, 0.0, always exits).
    both_ways = [label for label, sides in python.decisions.items() if set(sides) == {True, False}]
    assert len(both_ways) >= 2, python.decisions


@pytest.fixture(scope="module")
def collect_states(tmp_path_factory):
    torch.manual_seed(1)
    return export_compiled(tmp_path_factory.mktemp("collect"), CollectStates(), (torch.randn(2, 4), 4), "collect")[1:]


def test_stacking_a_run_time_list_that_stayed_empty_raises_as_in_pytorch(collect_states):
    scripted, compiled, python = collect_states
    x = torch.randn(2, 4)
    check_hosts_raise(scripted, (compiled, python), (x, 0), "stack expects a non-empty TensorList")


@pytest.mark.parametrize("steps", [1, 3, 8])
def test_states_collected_in_a_loop_with_break_are_stacked_indexed_and_counted(collect_states, steps):
    scripted, compiled, python = collect_states
    # Inputs for every length PyTorch's loop stops at (by `break` or by running out of steps).
    by_length: dict[int, torch.Tensor] = {}
    generator = torch.Generator().manual_seed(steps)
    for _ in range(200):
        x = torch.randn(2, 4, generator=generator) * float(torch.rand(1, generator=generator) * 8)
        with torch.no_grad():
            by_length.setdefault(scripted(x, steps)[3], x)
    for x in by_length.values():
        with torch.no_grad():
            want = scripted(x, steps)
        for host in (compiled, python):
            _same(host(x.numpy(), steps), want)
    if steps > 1:
        # Some input breaks out early and some runs every step: both exits of the loop were taken.
        assert min(by_length) < steps and max(by_length) == steps, sorted(by_length)


class Refine(nn.Module):
    """A run-time list joined with fixed lists on either side: `torch.cat(states + [h])`."""

    def forward(self, x, n: int):
        h = x
        states: List[torch.Tensor] = [x * 0.0]
        for _ in range(n):
            h = torch.tanh(h) + 0.3
            states.append(h * 0.5)
            if bool(h.mean() > 0.7):
                break
        return torch.cat(states + [h], 0), torch.stack([h] + states, 0)


def test_a_run_time_list_concatenated_with_fixed_lists(tmp_path):
    torch.manual_seed(0)
    model = Refine()
    _, scripted, compiled, python = export_compiled(tmp_path, model, (torch.randn(1, 4), 3), "refine")
    exits = set()
    for n in (0, 1, 3, 6):
        for scale in (-2.0, 2.0):
            x = torch.randn(1, 4) * scale
            with torch.no_grad():
                want = scripted(x, n)
            for host in (compiled, python):
                _same(host(x.numpy(), n), want)
            (trips,) = python.trip_counts.values()
            exits.add("no iteration" if n == 0 else ("cap" if trips[-1] == n else "break"))
    assert exits == {"no iteration", "cap", "break"}, exits


class AttentionWeights(nn.Module):
    """Tacotron2's decode loop: `alignments: List[Tensor] = []`, one row of attention weights per
    step appended, as wide as the encoder's steps (`max(lengths)`, read at run time), and a gate."""

    def __init__(self, max_steps=5):
        super(AttentionWeights, self).__init__()
        self.max_steps = max_steps

    def forward(self, memory, lengths):
        max_time = int(torch.max(lengths).item())
        weights = torch.zeros(memory.size(0), max_time)
        alignments: List[torch.Tensor] = []
        for _ in range(self.max_steps):
            weights = torch.tanh(weights + memory[:, :max_time] + 0.3)
            alignments.append(weights)
            if bool(weights.sum() > 3.0):
                break
        return torch.cat(alignments, 0), len(alignments)


def test_a_list_that_starts_empty_takes_the_run_time_width_of_its_tensors(tmp_path):
    torch.manual_seed(0)
    _, scripted, compiled, python = export_compiled(
        tmp_path, AttentionWeights(), (torch.randn(2, 6), torch.tensor([6, 3])), "alignments"
    )
    counts = set()
    for lengths in ([6, 3], [2, 1], [4, 4], [1, 1]):
        memory = torch.randn(2, 6)
        want = scripted(memory, torch.tensor(lengths))
        for host in (compiled, python):
            _same(host(memory.numpy(), np.array(lengths)), want)
        assert want[0].shape[1] == max(lengths)
        counts.add(want[1])
    assert len(counts) >= 2, counts  # stopped by the gate and by the cap


class Tail(nn.Module):
    """Rows grown in a loop, returned from a run-time start: the list's length and the slice's
    length both change at run time (`hs[start:]`, as a decoder drops its first states)."""

    def forward(self, x: torch.Tensor, n: int, start: int) -> List[torch.Tensor]:
        rows: List[torch.Tensor] = [x[0] * 1.0]
        for i in range(n):
            rows.append(x[i % 3] * 2.0 + float(i))
        return rows[start:]


class Head(nn.Module):
    def forward(self, x: torch.Tensor, n: int, end: int) -> List[torch.Tensor]:
        rows: List[torch.Tensor] = [x[0] * 1.0]
        for i in range(n):
            rows.append(x[i % 3] * 2.0 + float(i))
        return rows[:end]


class Window(nn.Module):
    def forward(self, x: torch.Tensor, n: int, start: int, end: int) -> List[torch.Tensor]:
        rows: List[torch.Tensor] = [x[0] * 1.0]
        for i in range(n):
            rows.append(x[i % 3] * 2.0 + float(i))
        return rows[start:end]


class LastK(nn.Module):
    def forward(self, x: torch.Tensor, n: int, k: int) -> List[torch.Tensor]:
        rows: List[torch.Tensor] = [x[0] * 1.0]
        for i in range(n):
            rows.append(x[i % 3] * 2.0 + float(i))
        return rows[-k:]


class TensorTail(nn.Module):
    def forward(self, x: torch.Tensor, start: int) -> torch.Tensor:
        return x[start:] * 2.0


# The examples give a slice of one row: torch.export specialized that size and tied the list's
# length to the bound (`start + 1`), so the function returned one row whatever the list and bound.
_SLICES = {
    "tail": (Tail(), (2, 1), [(2, 1), (4, 1), (4, 0), (0, 0), (0, 1), (3, 5), (4, -2), (2, -9), (4, 4)]),
    "head": (Head(), (2, 1), [(2, 1), (4, 1), (4, 3), (0, 0), (3, 9), (4, -2), (2, -9), (0, 1)]),
    "window": (Window(), (2, 1, 2), [(2, 1, 2), (4, 1, 4), (4, 0, 9), (3, 5, 6), (4, -3, -1), (4, 2, 1), (0, 0, 1)]),
    "last": (LastK(), (2, 1), [(2, 1), (4, 1), (4, 3), (4, 0), (3, 9), (4, -2), (0, 1)]),
}


@pytest.mark.parametrize("name", sorted(_SLICES))
def test_a_grown_list_sliced_by_run_time_bounds_has_the_slice_of_pytorch(tmp_path, name):
    torch.manual_seed(0)
    model, example, cases = _SLICES[name]
    _, scripted, compiled, python = export_compiled(tmp_path, model, (torch.randn(3, 4), *example), name)
    lengths = set()
    for ints in cases:
        x = torch.randn(3, 4)
        with torch.no_grad():
            want = scripted(x, *ints)
        for host in (compiled, python):
            _same(host(x.numpy(), *ints), want)
        lengths.add(len(want))
    # One row (the example's length) and other lengths, empty ones where the form allows them
    # (`rows[-0:]` is the whole list): a length fixed at export cannot pass.
    assert 1 in lengths and len(lengths) >= 3 and (name == "last" or 0 in lengths), lengths


def test_a_tensor_sliced_from_a_run_time_start_keeps_its_rows(tmp_path):
    _, scripted, compiled, python = export_compiled(tmp_path, TensorTail(), (torch.randn(5, 4), 4), "tensor_tail")
    rows = set()
    for start in (4, 0, 2, 5, 9, -2, -9):
        x = torch.randn(5, 4)
        with torch.no_grad():
            want = scripted(x, start)
        for host in (compiled, python):
            _same(host(x.numpy(), start), want)
        rows.add(want.shape[0])
    assert rows == {0, 1, 2, 3, 5}, rows


class RightContext(nn.Module):
    """Emformer's `_gen_right_context`: a slice of `right` frames after each segment, concatenated.
    With `right` 0 every slice is empty, and so is the concatenation."""

    def __init__(self, right: int) -> None:
        super(RightContext, self).__init__()
        self.right = right

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[0]
        blocks: List[torch.Tensor] = []
        for start in range(2, T, 2):
            blocks.append(x[start : start + self.right])
        blocks.append(x[T - self.right :])
        context = torch.cat(blocks)
        if float(x.sum()) > 0.0:
            return torch.cat([context, x]) * 2.0
        return torch.cat([context, x])


@pytest.mark.parametrize("right", [0, 1])
def test_a_concatenation_of_empty_slices_compiles(tmp_path, right):
    from tests.conftest import check_hosts, export_compiled

    _, scripted, compiled, python = export_compiled(tmp_path, RightContext(right), (torch.randn(6, 3),), "context")
    for x in (torch.ones(6, 3), -torch.ones(6, 3)):
        result = check_hosts(scripted, (compiled, python), (x,))
        assert result.shape == (6 + 3 * right, 3)
    (sides,) = python.decisions.values()
    assert dict(sides) == {True: 1, False: 1}
