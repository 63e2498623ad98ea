"""torch.repeat_interleave with a repeats tensor: a size made by data (`specialize/selections.py`).

The exporter reads the repeats' total to the host and gives the op that output size; the indices are
a scatter of ones at each repeat's start and a running sum
(`decompositions.repeat_interleave_of_output_size`). Before, the export failed: "cannot repeat_interleave
a meta tensor without output_size".
"""

from __future__ import annotations

import torch
from torch import nn

from .conftest import check_hosts, export_compiled


class GraphPooling(nn.Module):
    """A graph network's readout as PyTorch Geometric batches graphs: each node's graph index from
    the graphs' node counts (`repeat_interleave(arange(B), counts)`), then the mean of each graph's
    nodes by `index_add`; where a graph has more nodes than a limit, the root mean square instead."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(3, 4)

    def forward(self, nodes: torch.Tensor, counts: torch.Tensor, limit: int) -> torch.Tensor:
        h = torch.relu(self.embed(nodes))
        graphs = counts.size(0)
        batch = torch.repeat_interleave(torch.arange(graphs), counts)
        sums = torch.zeros(graphs, h.size(1)).index_add(0, batch, h)
        means = sums / counts.clamp(min=1).unsqueeze(1).to(h.dtype)
        if int(counts.max()) > limit:
            squares = torch.zeros(graphs, h.size(1)).index_add(0, batch, h * h)
            return torch.sqrt(squares / counts.clamp(min=1).unsqueeze(1).to(h.dtype))
        return means


class TokenCopies(nn.Module):
    """Each token copied as many times as it was routed (a mixture of experts' dispatch), a repeat of
    every column by one count, and of every element of the flattened tokens."""

    def forward(
        self, tokens: torch.Tensor, routes: torch.Tensor, times: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        copies = tokens.repeat_interleave(routes, dim=0)
        return copies, tokens.repeat_interleave(times.reshape(1), dim=1), tokens.repeat_interleave(times)


def test_graph_readout_over_run_time_node_counts(tmp_path) -> None:
    torch.manual_seed(0)
    model = GraphPooling().eval()
    counts = torch.tensor([3, 2, 4])
    example = (torch.randn(9, 3), counts, 3)
    shapes = [{0: "nodes"}, {0: "graphs"}, None]
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "graphs", shapes)
    for counts in ([3, 2, 4], [1, 0, 5, 2], [2]):
        counts = torch.tensor(counts)
        inputs = (torch.randn(int(counts.sum()), 3), counts)
        for limit in (10, 3):  # the max readout where a graph has more than 3 nodes
            check_hosts(scripted, [compiled, python], (*inputs, limit))
    sides = [dict(counts) for counts in python.decisions.values()]
    assert {True: 2, False: 4} in sides, python.decisions  # [2] never exceeds 3; the others do once


def test_token_copies_by_routes(tmp_path) -> None:
    torch.manual_seed(1)
    example = (torch.randn(4, 3), torch.tensor([1, 0, 2, 3]), torch.tensor(2))
    shapes = [{0: "tokens"}, {0: "tokens"}, None]
    _, scripted, compiled, python = export_compiled(tmp_path, TokenCopies().eval(), example, "tokens", shapes)
    for routes, times in (([1, 0, 2, 3], 2), ([0, 0, 1], 1), ([2, 2, 2, 2, 2], 3)):
        routes = torch.tensor(routes)
        check_hosts(scripted, [compiled, python], (torch.randn(routes.size(0), 3), routes, torch.tensor(times)))
