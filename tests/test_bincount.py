"""torch.bincount: a length made by data (`specialize/selections.py`: max(x) + 1 or `minlength`,
read to the host, then a `scatter_add` into zeros of that length). Before, the export failed: torch
has no meta kernel of `bincount`."""

from __future__ import annotations

import torch
from torch import nn

from .conftest import check_hosts, export_compiled


class LoadBalance(nn.Module):
    """A Switch Transformer router's load statistics: each token's expert by argmax, the tokens per
    expert (`bincount(..., minlength=experts)`), the router's mass per expert (`bincount` with
    weights), and the auxiliary loss; an overloaded expert (more tokens than a capacity) drops to a
    second-choice statistic."""

    def __init__(self, experts: int = 4) -> None:
        super().__init__()
        self.experts = experts
        self.router = nn.Linear(3, experts)

    def forward(self, tokens: torch.Tensor, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
        probabilities = self.router(tokens).softmax(-1)
        gate, expert = probabilities.max(-1)
        load = torch.bincount(expert, minlength=self.experts)
        mass = torch.bincount(expert, weights=gate)
        if int(load.max()) > capacity:
            return load, mass / load[: mass.size(0)].clamp(min=1).to(mass.dtype)
        return load, mass


def test_router_load_over_run_time_token_counts(tmp_path) -> None:
    torch.manual_seed(0)
    model = LoadBalance().eval()
    example = (torch.randn(8, 3), 3)
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "router", [{0: "tokens"}, None])
    for tokens in (8, 3, 20):
        x = torch.randn(tokens, 3)
        for capacity in (100, 1):
            check_hosts(scripted, [compiled, python], (x, capacity))
    # One token: the weighted count is as long as its expert's index.
    check_hosts(scripted, [compiled, python], (torch.randn(1, 3), 1))
    sides = [dict(counts) for counts in python.decisions.values()]
    assert {True: 3, False: 4} in sides, python.decisions
