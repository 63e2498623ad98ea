"""Writes into a fill that is also read elsewhere (`index_clamping._unshared`).

IREE 3.13 writes a scatter in place into its destination, and does not copy a fill (every
`torch.zeros(n, 4)` of one shape is one tensor to it) that is also a result or the destination of
another write: a model that returned `z` and `z.index_add(0, i, h)` got them swapped, and of two
`zeros(...).index_add` in a graph readout (sums, then squares, as a sum and a count of degrees are
written in graph networks) the second started from the first's sums. Both hosts were wrong where the
two are in one segment, the compiled host alone where they are in two.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from .conftest import check_hosts, export_compiled


class _Both(nn.Module):
    """The fill and a write into it, both results, for each kind of write."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, h: torch.Tensor, idx: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.zeros(n, 4)
        if self.kind == "index_add":
            written = z.index_add(0, idx, h)
        elif self.kind == "scatter_add":
            written = z.scatter_add(0, idx.unsqueeze(1).expand(idx.size(0), 4), h)
        elif self.kind == "scatter":
            written = z.scatter(0, idx.unsqueeze(1).expand(idx.size(0), 4), h)
        elif self.kind == "index_copy":
            written = z.index_copy(0, idx[:2], h[:2])
        elif self.kind == "index_fill":
            written = z.index_fill(0, idx, 2.0)
        elif self.kind == "setitem":
            written = z.clone()
            written[idx] = h
        else:
            written = z.index_put((idx,), h, accumulate=True)
        return z, written


@pytest.mark.parametrize(
    "kind", ["index_add", "scatter_add", "scatter", "index_copy", "index_fill", "setitem", "accumulate"]
)
def test_a_fill_and_a_write_into_it_are_both_results(tmp_path, kind: str) -> None:
    torch.manual_seed(0)
    example = (torch.randn(5, 4), torch.tensor([0, 2, 1, 0, 2]), 3)
    _, scripted, compiled, python = export_compiled(tmp_path, _Both(kind).eval(), example, kind)
    check_hosts(scripted, [compiled, python], example)
    check_hosts(scripted, [compiled, python], (torch.randn(5, 4), torch.tensor([3, 3, 0, 1, 2]), 4))


class Readout(nn.Module):
    """Per-graph sums, and where asked, per-graph sums of squares: two `zeros(...).index_add`."""

    def forward(self, h: torch.Tensor, batch: torch.Tensor, graphs: int, squares: bool) -> torch.Tensor:
        sums = torch.zeros(graphs, 4).index_add(0, batch, h)
        if squares:
            return torch.zeros(graphs, 4).index_add(0, batch, h * h)
        return sums


def test_two_writes_into_equal_fills_on_both_sides_of_a_branch(tmp_path) -> None:
    torch.manual_seed(1)
    batch = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    example = (torch.randn(9, 4), batch, 3, True)
    shapes = [{0: "nodes"}, {0: "nodes"}, None, None]
    _, scripted, compiled, python = export_compiled(tmp_path, Readout().eval(), example, "readout", shapes)
    for squares in (True, False):
        check_hosts(scripted, [compiled, python], (torch.randn(9, 4), batch, 3, squares))
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 1}, python.decisions


class ImageTokens(nn.Module):
    """A vision-language model's merge (LLaVA's): projected image features written into the token
    embeddings at the image tokens with `masked_scatter`, over a run-time number of tokens and of
    image patches; text alone takes another path."""

    def __init__(self) -> None:
        super().__init__()
        self.image_token = 9
        self.embed = nn.Embedding(10, 4)
        self.project = nn.Linear(3, 4)

    def forward(self, ids: torch.Tensor, patches: torch.Tensor) -> torch.Tensor:
        embeds = self.embed(ids)
        image = ids == self.image_token
        if not bool(image.any()):
            return embeds
        mask = image.unsqueeze(-1).expand_as(embeds)
        return embeds.masked_scatter(mask, self.project(patches))


def test_image_features_written_at_the_image_tokens(tmp_path) -> None:
    """torch-mlir has no lowering of `masked_scatter` (`decompositions.masked_scatter_by_gather`)."""
    torch.manual_seed(2)
    ids = torch.tensor([[1, 9, 9, 4, 9]])
    example = (ids, torch.randn(3, 3))
    shapes = [{1: "tokens"}, {0: "patches"}]
    _, scripted, compiled, python = export_compiled(tmp_path, ImageTokens().eval(), example, "image_tokens", shapes)
    for ids in ([[1, 9, 9, 4, 9]], [[9, 9, 2, 9, 9, 9, 3]], [[1, 2, 3]]):
        ids = torch.tensor(ids)
        check_hosts(scripted, [compiled, python], (ids, torch.randn(int((ids == 9).sum()) or 2, 3)))
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 2}, python.decisions
