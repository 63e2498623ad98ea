"""torch.bincount: a length made by data (`specialize/selections.py`: max(x) + 1 or `minlength`,
read to the host, then a `scatter_add` into zeros of that length). Before, the export failed: torch
has no meta kernel of `bincount`."""

from __future__ import annotations

import torch
from torch import nn

from .conftest import check_hosts, check_hosts_raise, export_compiled


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


class GroupMeans(nn.Module):
    """Message passing's mean aggregation as graph code writes it for a fixed number of groups: the
    rows' sums per group by `index_add`, divided by the group sizes from `bincount(..., minlength)`,
    given back to each row, twice. The sizes' length is made by data and meets the sums' static
    rows in the division: the result was typed `[?, ?]` (each perturbed size failed the broadcast),
    torch.export refused to keep the length dynamic, and the compiled host fell back ("failed to
    legalize operation 'tensor.cast'"). Now the division keeps its static `[2, 6]` and the segment
    takes the length at its only possible value, which the host checks."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for _ in range(2):
            h = torch.relu(h) - 0.25
            group = h[:, :2].argmax(1)
            sums = torch.zeros(2, h.size(1)).index_add(0, group, h)
            sizes = torch.bincount(group, minlength=2).to(h.dtype)
            h = h + (sums / sizes.clamp(min=1.0).unsqueeze(1))[group] * 0.1
        return torch.cat([x, h], 0)


def test_group_means_over_a_static_batch_run_on_the_compiled_host(tmp_path) -> None:
    torch.manual_seed(3)
    _, scripted, compiled, python = export_compiled(tmp_path, GroupMeans(), (torch.randn(3, 6),), "group_means")
    groups = set()
    both = torch.tensor([[2.0, 0.5, 1, 0, 3, 0], [0.5, 2.0, 0, 1, 0, 3], [1.0, 3.0, -1, 0, 2, 0]])
    for x in (both, both * -1.0, torch.tensor([[1.0, 0.0] * 3] * 3), torch.randn(3, 6) * 3):
        check_hosts(scripted, [compiled, python], (x,))
        groups.add(len(set((torch.relu(x) - 0.25)[:, :2].argmax(1).tolist())))
    assert groups == {1, 2}, groups  # one group empty (its size clamped), and both used


class GroupMeansWithoutMinlength(nn.Module):
    """The same without `minlength`, over three groups: the sizes have max(group) + 1 elements, which
    must be 3 to meet the sums (PyTorch raises otherwise). The segment computes with 3, so the host
    checks the length before the call: another length raises on both hosts instead of a result."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        group = x[:, :3].argmax(1)
        sums = torch.zeros(3, x.size(1)).index_add(0, group, x)
        return sums / torch.bincount(group).to(x.dtype).clamp(min=1.0).unsqueeze(1)


def test_a_length_made_by_data_that_must_meet_a_static_size_is_checked(tmp_path) -> None:
    example = torch.tensor([[0.0, 0, 5, 1], [0, 0, 5, 2], [9, 0, 0, 1]])
    _, scripted, compiled, python = export_compiled(
        tmp_path, GroupMeansWithoutMinlength(), (example,), "without_minlength", [{0: "rows"}]
    )
    for x in (example, example[:1], example.flip(0), torch.tensor([[0.0, 0, 1, 0]] * 4)):
        check_hosts(scripted, [compiled, python], (x,))
    check_hosts_raise(
        scripted,
        [compiled, python],
        (torch.tensor([[0.0, 9, 5, 1], [9, 0, 0, 1]]),),  # groups 1 and 0: two sizes
        "must match the size",
        "the run-time size %.* == 3, which the ops after it need does not hold",
    )


class GroupMeansPlusBias(nn.Module):
    """The same over run-time rows and columns, with a bias after: torch.export leaves the pinned
    length out of the exported program's inputs, and reading the others' sizes by position then
    put each parameter after it onto the next one's value (an IndexError, "tuple index out of
    range", reported against the `bincount`). Now they are read by name."""

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        group = x[:, :3].argmax(1)
        sums = torch.zeros(3, x.size(1)).index_add(0, group, x)
        sizes = torch.bincount(group).to(x.dtype)
        return sums / sizes.clamp(min=1.0).unsqueeze(1) + bias[: x.size(1)]


def test_a_pinned_length_before_inputs_of_run_time_sizes(tmp_path) -> None:
    example = (torch.tensor([[0.0, 0, 5, 1], [0, 0, 5, 2], [9, 0, 0, 1]]), torch.arange(6.0))
    _, scripted, compiled, python = export_compiled(
        tmp_path, GroupMeansPlusBias(), example, "plus_bias", [{0: "rows", 1: "columns"}, {0: "n"}]
    )
    wider = torch.tensor([[0.0, 0, 5, 1, 3], [9, 0, 0, 1, 3], [0, 4, 0, 0, 0], [0, 4, 1, 0, 0]])
    for x in (example[0], wider):
        check_hosts(scripted, [compiled, python], (x, example[1]))
