"""Adaptive max pooling whose windows are of different sizes (`decompositions.
adaptive_max_pool_of_uneven_windows`): torch-mlir's kernel for it checks at run time that every
window has one size, so such a bundle exported and then failed every call ("FAILED_PRECONDITION;
unimplemented: only support cases with fixed stride size")."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .conftest import check_hosts, export_compiled


class PyramidPooling(nn.Module):
    """A spatial pyramid pooling head (SPP-net's) over 7x7 features: pyramids of 1, 2 and 3 cells,
    the last two over uneven windows; a second look at the strongest cell where the pooled features
    are weak, with the cell's position from the indices."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Conv2d(3, 4, 3, padding=1)
        self.classify = nn.Linear(4 * (1 + 4 + 9), 5)

    def forward(self, x: torch.Tensor, threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.features(x))
        pooled = torch.cat([F.adaptive_max_pool2d(h, cells).flatten(1) for cells in (1, 2, 3)], 1)
        logits = self.classify(pooled)
        _, where = F.adaptive_max_pool2d(h, (3, 2), return_indices=True)
        if float(pooled.mean()) < threshold:
            return logits * 0.5, F.adaptive_max_pool1d(h.flatten(2), 5)
        return logits, where.flatten(2).to(torch.float32)


def test_pyramid_pooling_over_uneven_windows_on_both_sides(tmp_path) -> None:
    torch.manual_seed(0)
    model = PyramidPooling().eval()
    example = (torch.randn(1, 3, 7, 7), 0.0)
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "pyramid")
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(1, 3, 7, 7)
        for threshold in (-1.0, 10.0):
            check_hosts(scripted, [compiled, python], (x, threshold))
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 3, False: 3}, python.decisions


class Indices(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return F.adaptive_max_pool2d(x, (2, 3), return_indices=True)


def test_indices_are_pytorchs_with_ties_and_nans(tmp_path) -> None:
    """PyTorch's kernel takes the first of equal maxima and the last NaN of a window."""
    model = Indices().eval()
    x = torch.zeros(1, 1, 5, 4)  # every window ties
    _, scripted, compiled, python = export_compiled(tmp_path, model, (x,), "indices")
    check_hosts(scripted, [compiled, python], (x,))
    nans = torch.randn(1, 1, 5, 4)
    nans[0, 0, 0, 0] = nans[0, 0, 1, 1] = float("nan")  # two NaNs in the first window
    values, indices = scripted(nans)
    assert indices[0, 0, 0, 0].item() == 5  # the premise: the last NaN, row 1 column 1
    check_hosts(scripted, [compiled, python], (nans,))
