"""torch.unique and torch.unique_consecutive: sizes made by how many values differ
(`specialize/selections.py`: the count read to the host, the values, each element's place and the
counts computed in the segment). Before, the export failed: torch has no meta kernel of either."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import dycl_iree

from .conftest import check_hosts, export_compiled


class GraphMeanPool(nn.Module):
    """A graph network's readout as PyTorch Geometric-style code writes it without the library: the
    graphs of a batch are the distinct ids of the `batch` vector, each node's graph its place among
    them, and each graph's features the mean of its nodes'; a batch of one graph skips the pooling."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        graphs, node_graph, nodes = torch.unique(batch, return_inverse=True, return_counts=True)
        h = torch.relu(self.lin(x))
        if graphs.numel() == 1:
            return h.mean(0, keepdim=True), graphs
        sums = torch.zeros(graphs.size(0), h.size(1)).index_add(0, node_graph, h)
        return sums / nodes.unsqueeze(1).to(h.dtype), graphs


def test_graph_readout_over_run_time_nodes_and_graphs(tmp_path) -> None:
    torch.manual_seed(0)
    example = (torch.randn(7, 4), torch.tensor([0, 0, 1, 1, 1, 4, 4]))
    _, scripted, compiled, python = export_compiled(
        tmp_path, GraphMeanPool(), example, "readout", [{0: "nodes"}, {0: "nodes"}]
    )
    graphs = set()
    for batch in (
        [0, 0, 1, 1, 1, 4, 4],
        [2, 2, 2],  # one graph: the other side
        [5, 1, 5, 1, 3, 0, 0, 9, 3, 3, 1],  # ids out of order
        [7, 3],
    ):
        x = torch.randn(len(batch), 4)
        pooled, ids = check_hosts(scripted, (compiled, python), (x, torch.tensor(batch)))
        graphs.add(ids.numel())
        assert ids.tolist() == sorted(set(batch))
    assert 1 in graphs and max(graphs) >= 4, graphs
    assert python.decisions, "the Python host recorded no decision"


class LabelDiversity(nn.Module):
    """A branch on how many distinct classes a batch of predictions holds (a data-dependent
    `numel()` of a `unique`), with `sorted=False` as some code asks."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        labels = logits.argmax(-1)
        classes = torch.unique(labels, sorted=False)
        if classes.numel() > 2:
            return logits.softmax(-1) * classes.numel()
        return logits - classes.to(logits.dtype).sum()


def test_a_branch_on_the_number_of_distinct_labels(tmp_path) -> None:
    torch.manual_seed(1)
    _, scripted, compiled, python = export_compiled(
        tmp_path, LabelDiversity(), (torch.randn(6, 5),), "diversity", [{0: "rows"}]
    )
    eye = torch.eye(5)
    sides = set()
    for logits in (eye[[0, 1, 2, 3]], eye[[4, 4, 4]], eye[[1, 3, 1, 3, 1]], torch.randn(9, 5)):
        check_hosts(scripted, (compiled, python), (logits,))
        sides.add(len(set(logits.argmax(-1).tolist())) > 2)
    assert sides == {True, False}


class GreedyCTCDecoder(nn.Module):
    """torchaudio's speech recognition tutorial's greedy CTC decoder (`torch.unique_consecutive(indices,
    dim=-1)`, then the blanks dropped), returning the token ids where the tutorial joins their
    labels into a string."""

    def __init__(self, blank: int = 0) -> None:
        super().__init__()
        self.blank = blank

    def forward(self, emission: torch.Tensor) -> torch.Tensor:
        indices = torch.argmax(emission, dim=-1)  # [num_seq,]
        indices = torch.unique_consecutive(indices, dim=-1)
        return indices[indices != self.blank]


def test_greedy_ctc_decoding_over_run_time_frames(tmp_path) -> None:
    torch.manual_seed(2)
    _, scripted, compiled, python = export_compiled(
        tmp_path, GreedyCTCDecoder(), (torch.randn(12, 6),), "ctc", [{0: "frames"}]
    )
    eye = torch.eye(6)
    for frames in ([1, 1, 0, 1, 2, 2, 0, 0, 3], [0, 0, 0], [5], [4, 4, 4, 4, 4, 0, 4]):
        tokens = check_hosts(scripted, (compiled, python), (eye[frames],))
        runs = [t for i, t in enumerate(frames) if i == 0 or frames[i - 1] != t]
        assert tokens.tolist() == [t for t in runs if t != 0]


class RunLengths(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.unique_consecutive(x, return_inverse=True, return_counts=True)


class Distinct(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.unique(x, return_inverse=True, return_counts=True)


@pytest.mark.parametrize("model", [Distinct, RunLengths])
def test_floats_with_nan_signed_zeros_and_infinities(tmp_path, model) -> None:
    """Each NaN is a value of its own, placed after the numbers and after +inf (`unique`) or apart
    from its neighbours (`unique_consecutive`); -0.0 equals 0.0. Which of several NaN maps to which
    NaN value follows PyTorch's sort, not specified, so those inputs hold one NaN each."""
    nan, inf = float("nan"), float("inf")
    example = torch.tensor([3.0, 1.0, 1.0, 2.0, -1.0, 2.0])
    bundle = dycl_iree.export(model(), (example,), dynamic_shapes=[{0: "n"}])
    path = bundle.save(tmp_path / "floats.dycl")
    hosts = [dycl_iree.load(path, host=host) for host in ("compiled", "python")]
    for values in (
        [2.0, nan, -inf, 2.0, inf, -0.0, 0.0, 0.0, -inf],
        [nan, nan, 1.0, 1.0],  # unique_consecutive: two runs of NaN; unique: two NaN (same places either way)
        [0.5],
        [1e-30, -1e-30, 0.0, inf, inf],
    ):
        if model is Distinct and values.count(nan) > 1:
            values = values[1:]
        x = torch.tensor(values)
        want = model()(x)
        for host in hosts:
            got = host(x.numpy())
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w.numpy())


def test_a_unique_along_a_dim_of_a_matrix_is_refused_naming_the_op(tmp_path) -> None:
    """Refused with the op. Its line is torch's (`torch/functional.py`, where `torch.unique` calls it),
    not the model's: TorchScript's Python API gives an inlined node's innermost source only."""

    class Rows(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.unique(x, dim=0)

    with pytest.raises(dycl_iree.UnsupportedOpError, match="unique_dim") as caught:
        dycl_iree.export(Rows(), (torch.tensor([[1, 2], [1, 2], [3, 4]]),))
    assert caught.value.op == "aten::unique_dim.default", caught.value.op


class PresentGroupMeans(nn.Module):
    """Each row's group is an argmax; the groups present are found by `unique`, and each row gets
    its group's mean back (the fuzzer's `group_aggregate` idiom, seed 127011)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = x[:, :2].argmax(1)
        present, place, sizes = torch.unique(g, return_inverse=True, return_counts=True)
        sums = x.new_zeros(present.size(0), x.size(1)).index_add(0, place, x)
        return x + (sums / sizes.unsqueeze(1).to(x.dtype))[place] * 0.1


@pytest.mark.parametrize("rows", [1, 3])
def test_the_unique_values_of_a_static_number_of_elements(tmp_path, rows) -> None:
    """With one element, the count is known to be one: read at run time, it made IREE 3.13 fail to
    compile the writes it sizes ("'memref.alloca' op expected no unbounded stack allocations")."""
    torch.manual_seed(rows)
    _, scripted, compiled, python = export_compiled(
        tmp_path, PresentGroupMeans(), (torch.randn(rows, 8),), f"present_{rows}"
    )
    for x in (torch.randn(rows, 8), -torch.randn(rows, 8), torch.eye(rows, 8)):
        check_hosts(scripted, (compiled, python), (x,))
