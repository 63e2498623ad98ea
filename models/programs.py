"""Small dynamic programs: one per kind of control flow the exporter must carry.

Each model's forward takes a different path depending on its input. `MODELS` maps a name to a
factory returning `(model, example_inputs)` or `(model, example_inputs, dynamic_shapes)`;
`SAMPLES` maps the same name to inputs that, together, take every branch side and every loop exit
(the test suite checks that they do). Weights are random and seeded.

    python -m dycl_iree export models/programs.py:early_exit -o early_exit.dycl
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

Inputs = tuple


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=_seeded(seed)) * scale


class EarlyExit(nn.Module):
    """Early exit: return from an internal classifier when the features are already strong."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(8, 16)
        self.deeper = nn.Linear(16, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor):
        h = torch.relu(self.stem(x))
        if h.mean() > 0.5:
            return self.head(h), 0
        h = torch.relu(self.deeper(h)) + h
        return self.head(h), 1


class NestedIf(nn.Module):
    """Nested data-dependent branches, each side doing different tensor work."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            if x.max() > 2.0:
                y = x * 2.0
            else:
                y = x + 1.0
        else:
            if x.min() < -2.0:
                y = torch.abs(x)
            else:
                y = x - 1.0
        return torch.tanh(y)


class ArgmaxSwitch(nn.Module):
    """if / elif / else on an int read back from the device (`int(x.argmax())`)."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(6, 3)
        self.experts = nn.ModuleList([nn.Linear(6, 6) for _ in range(3)])

    def forward(self, x: torch.Tensor):
        choice = int(self.router(x).argmax())
        if choice == 0:
            y = self.experts[0](x)
        elif choice == 1:
            y = torch.relu(self.experts[1](x))
        else:
            y = torch.sigmoid(self.experts[2](x))
        return y, choice


class GatedBlock(nn.Module):
    """A residual block behind its own gate; returns whether it ran."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.gate = nn.Linear(width, 1)
        self.body = nn.Sequential(nn.Linear(width, width), nn.ReLU())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        if torch.sigmoid(self.gate(x)).mean() > 0.5:
            return x + self.body(x), 1
        return x, 0


class GatedResidual(nn.Module):
    """SkipNet-style gated residual blocks: a gate per block decides whether the block runs."""

    def __init__(self, blocks: int = 4, width: int = 8) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([GatedBlock(width) for _ in range(blocks)])

    def forward(self, x: torch.Tensor):
        executed = 0
        for block in self.blocks:
            x, ran = block(x)
            executed += ran
        return x, executed


class PolicyBlocks(nn.Module):
    """BlockDrop-style: a policy network emits keep/drop for each of 16 residual blocks."""

    def __init__(self, blocks: int = 16, width: int = 8) -> None:
        super().__init__()
        self.policy = nn.Linear(width, blocks)
        self.blocks = nn.ModuleList([nn.Linear(width, width) for _ in range(blocks)])
        self.head = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor):
        policy = torch.sigmoid(self.policy(x))
        for i, block in enumerate(self.blocks):
            if policy[0, i] > 0.5:
                x = x + torch.relu(block(x))
        return self.head(x), policy > 0.5


class ForRange(nn.Module):
    """`for i in range(n)` with n an int input (n = 0 runs no iteration)."""

    def __init__(self) -> None:
        super().__init__()
        self.step = nn.Linear(5, 5)

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        for i in range(n):
            x = torch.tanh(self.step(x)) + float(i) * 0.1
        return x


class ForBreak(nn.Module):
    """`for` with a data-dependent `break`: stops at the cap n or when the norm crosses a bound."""

    def __init__(self) -> None:
        super().__init__()
        self.step = nn.Linear(5, 5)

    def forward(self, x: torch.Tensor, n: int):
        steps = 0
        for _ in range(n):
            x = self.step(x) * 1.5
            steps += 1
            if x.norm() > 4.0:
                break
        return x, steps


class WhileCap(nn.Module):
    """A `while` whose condition reads a tensor, with an iteration cap."""

    def forward(self, x: torch.Tensor, cap: int):
        steps = 0
        while bool(x.abs().max() > 0.1) and steps < cap:
            x = x * 0.5
            steps += 1
        return x, steps


class GrowingSequence(nn.Module):
    """A loop-carried tensor that grows each iteration (`torch.cat`), so its first dim is dynamic."""

    def __init__(self) -> None:
        super().__init__()
        self.next = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        sequence = x
        for _ in range(n):
            last = sequence[-1:]
            sequence = torch.cat([sequence, torch.tanh(self.next(last))], 0)
        return sequence


class GreedyDecoder(nn.Module):
    """Greedy decoding into a List[int] until the end token or a length cap."""

    def __init__(self, vocabulary: int = 7, width: int = 8, end_token: int = 0, cap: int = 6) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width)
        self.cell = nn.GRUCell(width, width)
        self.out = nn.Linear(width, vocabulary)
        self.end_token = end_token
        self.cap = cap

    def forward(self, h: torch.Tensor, start: int) -> torch.Tensor:
        tokens: list[int] = []
        token = start
        while len(tokens) < self.cap:
            step = self.embed(torch.tensor([token]))
            h = self.cell(step, h)
            token = int(self.out(h).argmax())
            tokens.append(token)
            if token == self.end_token:
                break
        return torch.tensor(tokens)


class RecurrentCells(nn.Module):
    """GRUCell and LSTMCell: their scripted code is full of rank checks that must all fold away."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRUCell(4, 6)
        self.lstm = nn.LSTMCell(6, 6)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        h = self.gru(x, h)
        h, c = self.lstm(h, (h, c))
        return h, c


class ScalarInputs(nn.Module):
    """Int, float and bool inputs; scalar outputs inside nested tuples."""

    def forward(self, x: torch.Tensor, n: int, scale: float, flag: bool):
        if flag:
            y = x * scale
        else:
            y = x - scale
        total = float(y.sum())
        return y, (n + 1, total), total > 0.0


class InplaceBranch(nn.Module):
    """In-place tensor ops inside branches, on a tensor defined before the branch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        if x.mean() > 0:
            y.add_(1.0)
            y.relu_()
        else:
            y.mul_(2.0)
        return y * 3.0


class DynamicBatch(nn.Module):
    """An input whose batch dim the user declares dynamic."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.layer(x)
        if h.mean() > 0:
            h = h * 2.0
        else:
            h = torch.relu(h)
        return h.sum(1)


def _build(cls: type, seed: int = 0, **kwargs) -> nn.Module:
    torch.manual_seed(seed)
    return cls(**kwargs).eval()


def early_exit():
    return _build(EarlyExit), (_randn(1, 8, seed=1),)


def nested_if():
    return _build(NestedIf), (_randn(1, 6, seed=1),)


def argmax_switch():
    return _build(ArgmaxSwitch), (_randn(1, 6, seed=1),)


def gated_residual():
    return _build(GatedResidual), (_randn(1, 8, seed=1),)


def policy_blocks():
    return _build(PolicyBlocks), (_randn(1, 8, seed=1),)


def for_range():
    return _build(ForRange), (_randn(1, 5, seed=1), 3)


def for_break():
    return _build(ForBreak, seed=3), (_randn(1, 5, seed=1), 4)


def while_cap():
    return _build(WhileCap), (_randn(1, 5, seed=1), 5)


def growing_sequence():
    return _build(GrowingSequence), (_randn(1, 4, seed=1), 3)


def greedy_decoder():
    return _build(GreedyDecoder, seed=2), (_randn(1, 8, seed=1), 1)


def recurrent_cells():
    return _build(RecurrentCells), (_randn(2, 4, seed=1), _randn(2, 6, seed=2), _randn(2, 6, seed=3))


def scalar_inputs():
    return _build(ScalarInputs), (_randn(2, 3, seed=1), 3, 0.5, True)


def inplace_branch():
    return _build(InplaceBranch), (_randn(2, 3, seed=1),)


def dynamic_batch():
    return _build(DynamicBatch), (_randn(4, 8, seed=1),), ({0: "batch"},)


MODELS: dict[str, Callable[[], tuple]] = {
    "early_exit": early_exit,
    "nested_if": nested_if,
    "argmax_switch": argmax_switch,
    "gated_residual": gated_residual,
    "policy_blocks": policy_blocks,
    "for_range": for_range,
    "for_break": for_break,
    "while_cap": while_cap,
    "growing_sequence": growing_sequence,
    "greedy_decoder": greedy_decoder,
    "recurrent_cells": recurrent_cells,
    "scalar_inputs": scalar_inputs,
    "inplace_branch": inplace_branch,
    "dynamic_batch": dynamic_batch,
}


def _shifted(seed: int, shape: tuple, shifts: list[float], scale: float = 1.0) -> list[torch.Tensor]:
    return [_randn(*shape, seed=seed + i, scale=scale) + shift for i, shift in enumerate(shifts)]


SAMPLES: dict[str, Callable[[], list[Inputs]]] = {
    "early_exit": lambda: [(x,) for x in _shifted(10, (1, 8), [-3.0, 0.0, 3.0, 6.0, -6.0])],
    "nested_if": lambda: (
        [(x,) for x in _shifted(20, (1, 6), [2.0, 0.3, -0.3, -2.0], scale=0.2)]
        + [(torch.tensor([[0.1, 0.1, 0.1, 0.1, 0.1, 3.0]]),), (torch.tensor([[-0.1, -0.1, -0.1, -0.1, -0.1, -3.0]]),)]
    ),
    "argmax_switch": lambda: [(x,) for x in _shifted(30, (1, 6), [0.0] * 12, scale=3.0)],
    "gated_residual": lambda: [(x,) for x in _shifted(40, (1, 8), [0.0] * 8, scale=3.0)],
    "policy_blocks": lambda: [(x,) for x in _shifted(50, (1, 8), [0.0] * 6, scale=3.0)],
    "for_range": lambda: [(_randn(1, 5, seed=60), n) for n in (0, 1, 4)],
    "for_break": lambda: [
        (_randn(1, 5, seed=70 + i, scale=s), n) for i, (s, n) in enumerate([(0.1, 3), (3.0, 6), (0.1, 0), (0.5, 8)])
    ],
    "while_cap": lambda: [
        (_randn(1, 5, seed=80, scale=s), cap) for s, cap in [(0.01, 5), (1.0, 20), (8.0, 3), (1.0, 0)]
    ],
    "growing_sequence": lambda: [(_randn(1, 4, seed=90), n) for n in (0, 1, 5)],
    "greedy_decoder": lambda: [(_randn(1, 8, seed=100 + i, scale=2.0), start) for i, start in enumerate(range(7))],
    "recurrent_cells": lambda: [(_randn(2, 4, seed=110), _randn(2, 6, seed=111), _randn(2, 6, seed=112))],
    "scalar_inputs": lambda: [
        (_randn(2, 3, seed=120), 4, 2.0, True),
        (_randn(2, 3, seed=121), -2, 0.25, False),
        (_randn(2, 3, seed=122) + 1.0, 0, -1.5, True),
    ],
    "inplace_branch": lambda: [(x,) for x in _shifted(130, (2, 3), [1.0, -1.0])],
    "dynamic_batch": lambda: (
        [(x,) for x in _shifted(140, (4, 8), [0.0, 2.0, -2.0])]
        + [(_randn(1, 8, seed=145) + 2.0,), (_randn(7, 8, seed=146) - 2.0,)]
    ),
}
