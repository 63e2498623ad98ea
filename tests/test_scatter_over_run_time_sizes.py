"""Scatters over a run-time number of rows, as graph code writes them: an index that broadcasts one
node id per row over the features (`dst.unsqueeze(-1).expand_as(msg)`, PyTorch Geometric's
`scatter`). Each bundle checks its indices before the segment (`guards.py`), and that check's
`all` over both bounds of such an index did not compile ("exceeded stack allocation limit"), so the
export was refused; each bound is now reduced on its own. `scatter_reduce` without `include_self`
(max, min and mean aggregation) failed the same way, for its own form."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from .conftest import check_hosts, check_hosts_raise, export_compiled


class MeanAggregation(nn.Module):
    """A message-passing layer's mean aggregation without the library: messages from each edge's
    source, summed into its target by `scatter_add_`, divided by the in-degree; a graph with a
    node no edge reaches adds that node's own features instead of leaving it at zero."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        src, dst = edge_index[0], edge_index[1]
        msg = self.lin(x)[src]
        index = dst.unsqueeze(-1).expand_as(msg)
        out = torch.zeros(x.size(0), msg.size(1)).scatter_add_(0, index, msg)
        count = torch.zeros(x.size(0), 1).scatter_add_(0, dst.unsqueeze(-1), torch.ones(dst.size(0), 1))
        if bool((count == 0).any()):
            return out / count.clamp(min=1.0) + self.lin(x) * (count == 0).to(x.dtype)
        return out / count


def test_mean_aggregation_over_run_time_nodes_and_edges(tmp_path) -> None:
    torch.manual_seed(0)
    example = (torch.randn(4, 4), torch.tensor([[0, 1, 2, 3, 1], [1, 2, 3, 0, 0]]))
    _, scripted, compiled, python = export_compiled(
        tmp_path, MeanAggregation(), example, "mean_aggregation", [{0: "nodes"}, {1: "edges"}]
    )
    isolated = set()
    for nodes, edges in (
        (4, [[0, 1, 2, 3, 1], [1, 2, 3, 0, 0]]),  # every node reached
        (6, [[0, 1, 2], [1, 2, 1]]),  # nodes 0, 3, 4, 5 reached by no edge
        (3, [[2, 2, 1, 0, 0, 1, 2], [0, 1, 2, 1, 2, 0, 0]]),
        (5, [[4], [4]]),
    ):
        check_hosts(scripted, [compiled, python], (torch.randn(nodes, 4), torch.tensor(edges)))
        isolated.add(len(set(range(nodes)) - set(edges[1])) > 0)
    assert isolated == {True, False}, isolated
    check_hosts_raise(
        scripted,
        [compiled, python],
        (torch.randn(3, 4), torch.tensor([[0, 1], [1, 3]])),  # an edge to node 3 of 3
        "index 3 is out of bounds|out of range",
    )


class NeighbourhoodReduction(nn.Module):
    """PyTorch Geometric's max, min and mean aggregation as its `scatter` writes them:
    `scatter_reduce_(0, index, src, reduce, include_self=False)` into zeros, so that a node no edge
    reaches stays 0 and the others hold the reduction of their messages alone. torch-mlir's form of
    `include_self=False` did not compile over a run-time number of edges; the exporter's does
    (`index_clamping.scatter_reduce_in_range`)."""

    def __init__(self, reduce: str) -> None:
        super().__init__()
        self.reduce = reduce

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        src, dst = edge_index[0], edge_index[1]
        msg = x[src]
        index = dst.unsqueeze(-1).expand_as(msg)
        out = x.new_zeros(x.size(0), x.size(1)).scatter_reduce_(0, index, msg, self.reduce, include_self=False)
        return torch.cat([x, out], 1)


@pytest.mark.parametrize("reduce", ["amax", "amin", "mean", "prod"])
def test_max_min_mean_and_product_of_neighbours(tmp_path, reduce) -> None:
    torch.manual_seed(1)
    example = (torch.randn(4, 3), torch.tensor([[0, 1, 2, 3, 1], [1, 2, 3, 0, 0]]))
    _, scripted, compiled, python = export_compiled(
        tmp_path, NeighbourhoodReduction(reduce), example, f"reduce_{reduce}", [{0: "nodes"}, {1: "edges"}]
    )
    for nodes, edges in ((4, [[0, 1, 2, 3, 1], [1, 2, 3, 0, 0]]), (6, [[0, 1, 2, 5], [1, 1, 1, 4]]), (2, [[1], [0]])):
        check_hosts(scripted, [compiled, python], (torch.randn(nodes, 3), torch.tensor(edges)))
