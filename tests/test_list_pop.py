"""`xs.pop(i)` on lists as other people's loops write it: a window of the last states
(`history.pop(0)` once it is full), a work queue (`while len(queue) > 0: t = queue.pop(0)`), a
decoder's tokens with a backtrack (`tokens.pop()`), the worst of a list of `(score, state)` pairs,
a list of token lists, and a fixed-length list at constant indices; both hosts against PyTorch,
PyTorch's errors on an empty list and an index past its end (`specialize.list_deletion`)."""

from __future__ import annotations

from typing import List, Tuple

import torch
from torch import nn

from tests.conftest import check_hosts, check_hosts_raise, export_compiled


class Window(nn.Module):
    """A moving average over the last three states, stopped early when the newest is flat."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.Linear(6, 6, bias=False)

    def forward(self, x: torch.Tensor, n: int) -> Tuple[torch.Tensor, int, List[torch.Tensor]]:  # noqa: UP006
        h = x
        history: List[torch.Tensor] = []  # noqa: UP006
        for _ in range(n):
            h = torch.tanh(self.cell(h))
            history.append(h)
            if len(history) > 3:
                history.pop(0)
            h = torch.stack(history).mean(0)
            if float(history[-1].abs().max()) < 0.05:
                break
        return h, len(history), history


def test_a_window_of_the_last_states_drops_its_oldest(tmp_path):
    torch.manual_seed(0)
    _, scripted, compiled, python = export_compiled(tmp_path, Window(), (torch.randn(2, 6), 5), "window")
    generator = torch.Generator().manual_seed(1)
    lengths = set()
    for scale, n in ((1.0, 0), (1.0, 2), (1.0, 7), (0.001, 6), (5.0, 4)):
        _, length, _ = check_hosts(scripted, [compiled, python], (torch.randn(2, 6, generator=generator) * scale, n))
        lengths.add(length)
    assert {0, 2, 3} <= lengths, lengths  # never filled, filling, full (its oldest popped)
    decisions = {label: set(sides) for label, sides in python.decisions.items()}
    assert all(sides == {True, False} for sides in decisions.values()), decisions


class Queue(nn.Module):
    """Work items split while large, breadth first (a quadtree's refinement), at most 8 steps."""

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, int]:  # noqa: UP006
        queue: List[torch.Tensor] = [x]  # noqa: UP006
        done: List[torch.Tensor] = []  # noqa: UP006
        steps = 0
        while len(queue) > 0 and steps < 8:
            t = queue.pop(0)
            steps += 1
            if float(t.abs().sum()) > 4.0:
                queue.append(t * 0.5)
                queue.append(t * 0.25)
            else:
                done.append(t)
        total = torch.stack(done).sum(0) if len(done) > 0 else x * 0.0
        return total, steps


def test_a_work_queue_pops_from_its_front(tmp_path):
    _, scripted, compiled, python = export_compiled(tmp_path, Queue(), (torch.ones(4),), "queue")
    steps = set()
    for scale in (0.5, 1.5, 3.0, 9.0, 40.0):
        steps.add(check_hosts(scripted, [compiled, python], (torch.ones(4) * scale,))[1])
    assert {1, 3, 8} <= steps, steps  # done at once, split once, stopped by the step cap
    decisions = {label: set(sides) for label, sides in python.decisions.items()}
    assert sum(sides == {True, False} for sides in decisions.values()) >= 2, decisions


class Backtrack(nn.Module):
    """A decoder's tokens: the last one taken back while the state is negative, the first one
    returned apart."""

    def forward(self, x: torch.Tensor, n: int) -> Tuple[List[int], int]:  # noqa: UP006
        tokens: List[int] = []  # noqa: UP006
        h = x
        for i in range(n):
            h = h * 0.9 + torch.roll(h, 1) * 0.3 - 0.1 * i
            tokens.append(int(h.argmax()))
            if float(h.sum()) < 0.0 and len(tokens) > 1:
                last = tokens.pop()
                h = h + float(last) * 0.01
        first = tokens.pop(0) if len(tokens) > 0 else -1
        return tokens, first


def test_tokens_taken_back_from_either_end(tmp_path):
    _, scripted, compiled, python = export_compiled(tmp_path, Backtrack(), (torch.randn(5), 3), "backtrack")
    generator = torch.Generator().manual_seed(3)
    firsts = set()
    for scale, n in ((1.0, 0), (1.0, 1), (3.0, 6), (0.2, 6), (1.0, 4)):
        _, first = check_hosts(scripted, [compiled, python], (torch.randn(5, generator=generator) * scale, n))
        firsts.add(first)
    assert -1 in firsts and len(firsts) > 2, firsts  # no token, and several first tokens
    decisions = {label: set(sides) for label, sides in python.decisions.items()}
    assert sum(sides == {True, False} for sides in decisions.values()) >= 3, decisions


class DropWorst(nn.Module):
    """`(score, state)` pairs; past two, the worst is found by a search loop and popped."""

    def forward(self, x: torch.Tensor, n: int) -> Tuple[torch.Tensor, int, torch.Tensor]:  # noqa: UP006
        beams: List[Tuple[torch.Tensor, torch.Tensor]] = [(x.sum(), x)]  # noqa: UP006
        for _ in range(n):
            _, h = beams[-1]
            h = torch.tanh(h + 0.3)
            beams.append((h.sum(), h))
            if len(beams) > 2:
                worst = 0
                for j in range(len(beams)):
                    if float(beams[j][0]) < float(beams[worst][0]):
                        worst = j
                _, dropped = beams.pop(worst)
                x = x + dropped * 0.1
        return x, len(beams), beams[0][1]


def test_the_worst_of_a_list_of_pairs_is_popped(tmp_path):
    _, scripted, compiled, python = export_compiled(tmp_path, DropWorst(), (torch.randn(3), 3), "worst")
    generator = torch.Generator().manual_seed(4)
    for scale, n in ((1.0, 0), (1.0, 1), (1.0, 5), (3.0, 4), (0.1, 3)):
        check_hosts(scripted, [compiled, python], (torch.randn(3, generator=generator) * scale, n))
    decisions = {label: set(sides) for label, sides in python.decisions.items()}
    assert all(sides == {True, False} for sides in decisions.values()), decisions


class TokenLists(nn.Module):
    """Token lists of growing lengths; the oldest popped each step past the second."""

    def forward(self, x: torch.Tensor, n: int) -> Tuple[List[List[int]], List[int]]:  # noqa: UP006
        hyps: List[List[int]] = []  # noqa: UP006
        oldest: List[int] = []  # noqa: UP006
        for step in range(n):
            tokens: List[int] = []  # noqa: UP006
            for _ in range(step + 1):
                tokens.append(int(x.argmax()) + step)
            hyps.append(tokens)
            if len(hyps) > 2:
                oldest = hyps.pop(0)
        return hyps, oldest


def test_a_list_of_token_lists_pops_its_oldest(tmp_path):
    _, scripted, compiled, python = export_compiled(tmp_path, TokenLists(), (torch.randn(4), 3), "token_lists")
    for n in (0, 2, 3, 6):
        hyps, oldest = check_hosts(scripted, [compiled, python], (torch.arange(4.0), n))
        assert len(hyps) == min(n, 2) and len(oldest) == (n - 2 if n > 2 else 0)


class PopConstant(nn.Module):
    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, int, torch.Tensor]:  # noqa: UP006
        xs = [x, x * 2.0, x * 3.0]
        last = xs.pop()
        first = xs.pop(0)
        return last + first, len(xs), xs[0]


def test_a_fixed_length_list_pops_at_constant_indices(tmp_path):
    _, scripted, compiled, python = export_compiled(tmp_path, PopConstant(), (torch.randn(2),), "constant")
    total, length, middle = check_hosts(scripted, [compiled, python], (torch.arange(2.0),))
    assert length == 1 and torch.equal(middle, torch.arange(2.0) * 2.0)


class PopSecond(nn.Module):
    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        xs: List[torch.Tensor] = []  # noqa: UP006
        for i in range(n):
            xs.append(x * float(i))
        return xs.pop(1)


def test_popping_an_empty_list_or_past_its_end_raises_as_pytorch(tmp_path):
    _, scripted, compiled, python = export_compiled(tmp_path, PopSecond(), (torch.randn(3), 3), "pop_second")
    check_hosts(scripted, [compiled, python], (torch.arange(3.0), 4))
    check_hosts_raise(scripted, [compiled, python], (torch.arange(3.0), 0), "pop from empty list")
    check_hosts_raise(scripted, [compiled, python], (torch.arange(3.0), 1), "list index out of range")


class PieceWindow(nn.Module):
    """Pieces of a width the data decides (a list concatenated along its dim 1), kept in a window of
    the last three; then the second one deleted and the first replaced by a wider one."""

    def forward(self, x: torch.Tensor, n: int) -> Tuple[torch.Tensor, int]:  # noqa: UP006
        pieces: List[torch.Tensor] = []  # noqa: UP006
        h = x
        for i in range(n):
            width = int(h.argmax(1).max()) % 4 + 1
            pieces.append(h[:, :width] * float(i + 1))
            if len(pieces) > 3:
                pieces.pop(0)
            h = torch.roll(h, 1, 1) * 0.9
        if len(pieces) > 1:
            del pieces[1]
        if len(pieces) > 0:
            pieces[0] = torch.cat([pieces[0], pieces[0]], 1)
        return torch.cat(pieces + [x], 1), len(pieces)


def test_a_window_of_pieces_of_different_widths(tmp_path):
    batch = {"x": {0: "batch"}}
    _, scripted, compiled, python = export_compiled(tmp_path, PieceWindow(), (torch.randn(2, 5), 4), "pieces", batch)
    generator = torch.Generator().manual_seed(6)
    widths, counts = set(), set()
    for rows, n in ((2, 0), (2, 1), (3, 2), (1, 4), (2, 6), (3, 5)):
        joined, count = check_hosts(scripted, [compiled, python], (torch.randn(rows, 5, generator=generator), n))
        widths.add(joined.shape[1])
        counts.add(count)
    assert {0, 1, 2} <= counts and len(widths) >= 4, (counts, widths)
