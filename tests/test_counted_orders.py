"""Searches, stable sorts, distances and ranges that torch-mlir does not lower, or not over run-time
sizes (`counted_orders.py`, `specialize/selections.py: linspace`), in the models that use them,
against PyTorch on both hosts. Before, each export failed."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from .conftest import check_hosts, export_compiled

NAN = float("nan")


class SamplePdf(nn.Module):
    """NeRF's hierarchical sampling (`sample_pdf`): the coarse weights' CDF, and the bin of each
    uniform sample found by `torch.searchsorted(cdf, u, right=True)`, over run-time numbers of rays
    and samples."""

    def forward(self, bins: torch.Tensor, weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        weights = weights + 1e-5
        pdf = weights / torch.sum(weights, -1, keepdim=True)
        cdf = torch.cumsum(pdf, -1)
        cdf = torch.cat([torch.zeros_like(cdf[..., :1]), cdf], -1)
        inds = torch.searchsorted(cdf, u, right=True)
        below = torch.clamp(inds - 1, min=0)
        above = torch.clamp(inds, max=cdf.shape[-1] - 1)
        cdf_below, cdf_above = torch.gather(cdf, -1, below), torch.gather(cdf, -1, above)
        bins_below, bins_above = torch.gather(bins, -1, below), torch.gather(bins, -1, above)
        denom = cdf_above - cdf_below
        denom = torch.where(denom < 1e-5, torch.ones_like(denom), denom)
        t = (u - cdf_below) / denom
        return bins_below + t * (bins_above - bins_below)


def test_inverse_cdf_sampling_over_run_time_rays_and_samples(tmp_path) -> None:
    torch.manual_seed(0)
    example = (torch.linspace(0, 1, 9).expand(4, 9).contiguous(), torch.rand(4, 8), torch.rand(4, 5))
    dims = [{0: "rays"}, {0: "rays"}, {0: "rays", 1: "samples"}]
    _, scripted, compiled, python = export_compiled(tmp_path, SamplePdf(), example, "sample_pdf", dims)
    for rays, samples in ((4, 5), (2, 11), (1, 1)):
        u = torch.rand(rays, samples)
        u[0, 0] = 1.0  # past the last bin's edge
        check_hosts(scripted, [compiled, python], (example[0][:rays], torch.rand(rays, 8), u))


class Searches(nn.Module):
    def forward(self, sequence: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.searchsorted(sequence, values), torch.searchsorted(sequence, values, right=True, out_int32=True)


def test_searches_at_ties_out_of_range_and_nan(tmp_path) -> None:
    """Values equal to elements (left and right differ), below and above the sequence, and NaN
    (after every element, as PyTorch's binary search puts it); a batched sequence too."""
    sequence = torch.tensor([[0.0, 1.0, 1.0, 2.0], [-3.0, -1.0, 0.5, 0.5]])
    example = (sequence, torch.tensor([[1.0, -5.0, 2.0], [0.5, 9.0, -1.0]]))
    _, scripted, compiled, python = export_compiled(
        tmp_path, Searches(), example, "searches", [{0: "rows"}, {0: "rows", 1: "values"}]
    )
    for values in (example[1], torch.tensor([[NAN, 1.0, 0.0, 2.5, 1.0], [0.5, NAN, -3.0, -3.5, 0.6]])):
        check_hosts(scripted, [compiled, python], (sequence, values))
    check_hosts(scripted, [compiled, python], (sequence[:1], torch.tensor([[1.0]])))


class RankCandidates(nn.Module):
    """A beam step's candidates ordered by score with ties kept in their order
    (`torch.sort(..., stable=True)` and `argsort(stable=True)`), the best `beam` kept."""

    def forward(self, scores: torch.Tensor, beam: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ordered, order = torch.sort(scores, dim=-1, descending=True, stable=True)
        rising = torch.argsort(scores, dim=0, stable=True)
        return ordered[:, :beam], order[:, :beam], rising


def test_stable_sorts_keep_ties_in_order_and_place_nan_as_pytorch(tmp_path) -> None:
    example = (torch.tensor([[0.5, 0.2, 0.5, 0.9], [0.1, 0.1, 0.3, 0.1]]), 2)
    _, scripted, compiled, python = export_compiled(
        tmp_path, RankCandidates(), example, "rank", [{0: "rows", 1: "candidates"}, None]
    )
    tied = torch.tensor([[1.0, NAN, 1.0, -0.0, 0.0, 2.0, NAN], [0.0, 0.0, 0.0, 5.0, 5.0, -1.0, 0.0]])
    for scores, beam in ((example[0], 2), (tied, 5), (torch.randn(3, 30), 7), (torch.tensor([[4.0]]), 1)):
        check_hosts(scripted, [compiled, python], (scores, beam))


class Quantize(nn.Module):
    """A VQ-VAE's codebook lookup: each latent's nearest code by `torch.cdist(...).argmin(-1)`, and
    the distances to the chosen codes under `p`."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p
        self.codebook = nn.Parameter(torch.randn(30, 6))

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        distances = torch.cdist(z, self.codebook, p=self.p)
        codes = distances.argmin(-1)
        return codes, distances.gather(-1, codes.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("p", [2.0, 1.0, float("inf")])
def test_nearest_codes_over_run_time_latents(tmp_path, p) -> None:
    """Over a run-time number of latents (the differences), and, with p = 2, 30 codes against 40
    latents of a static batch (PyTorch's matmul form, as it takes it past 25 rows)."""
    torch.manual_seed(1)
    model = Quantize(p)
    _, scripted, compiled, python = export_compiled(
        tmp_path, model, (torch.randn(5, 6),), f"quantize_{p}", [{0: "latents"}]
    )
    for latents in (5, 1, 17):
        check_hosts(scripted, [compiled, python], (torch.randn(latents, 6),))
    if p == 2.0:
        _, scripted, compiled, python = export_compiled(tmp_path, model, (torch.randn(40, 6),), "quantize_static")
        check_hosts(scripted, [compiled, python], (torch.randn(40, 6),))


class EulerSampler(nn.Module):
    """A diffusion sampler's time grid, `torch.linspace(1.0, 0.0, steps)` with the number of steps
    an input, and an Euler step per interval."""

    def __init__(self) -> None:
        super().__init__()
        self.velocity = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        t = torch.linspace(1.0, 0.0, steps)
        for i in range(steps - 1):
            x = x + (t[i + 1] - t[i]) * self.velocity(x)
        return x, t


def test_a_time_grid_of_run_time_steps(tmp_path) -> None:
    torch.manual_seed(2)
    _, scripted, compiled, python = export_compiled(tmp_path, EulerSampler(), (torch.randn(2, 4), 5), "euler")
    for steps in (5, 1, 2, 7, 50):
        x, t = check_hosts(scripted, [compiled, python], (torch.randn(2, 4), steps))
        assert t.numel() == steps


class OneHot(nn.Module):
    """Labels one-hot by `zeros(n, c).scatter_(-1, labels.unsqueeze(-1), 1.0)`: a negative dim
    crashed torch-mlir's scatter conversion (SIGSEGV), so the export was refused."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        labels = logits.argmax(-1)
        one_hot = torch.zeros_like(logits).scatter_(-1, labels.unsqueeze(-1), 1.0)
        return one_hot * logits.softmax(-1).gather(-1, labels.unsqueeze(-1))


def test_one_hot_by_a_scatter_along_the_last_dim(tmp_path) -> None:
    _, scripted, compiled, python = export_compiled(tmp_path, OneHot(), (torch.randn(3, 5),), "one_hot", [{0: "n"}])
    for n in (3, 1, 8):
        check_hosts(scripted, [compiled, python], (torch.randn(n, 5),))


class RobustScale(nn.Module):
    """Median-based normalization of each row (`x.median(-1, keepdim=True)`), a batch-wide median,
    and each row's second smallest value (`torch.kthvalue`), over run-time rows."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        center, where = x.median(-1, keepdim=True)
        second = torch.kthvalue(x, 2, dim=1).values
        return x - center, where, x.median(), second


def test_medians_and_kth_values_with_nan(tmp_path) -> None:
    """A row with NaN has the median NaN at its first NaN's index, as PyTorch gives it. Ties are
    left out of the indices checked: of equal values PyTorch's selection may return any's index."""
    _, scripted, compiled, python = export_compiled(
        tmp_path, RobustScale(), (torch.randn(3, 5),), "robust_scale", [{0: "rows"}]
    )
    torch.manual_seed(3)
    with_nan = torch.tensor([[1.0, NAN, 2.0, 0.5, NAN], [3.0, 0.0, 2.0, -1.0, 9.0]])
    for x in (torch.randn(3, 5), torch.randn(1, 5), with_nan, torch.randn(6, 5)):
        check_hosts(scripted, [compiled, python], (x,))


class NanRobustCenter(nn.Module):
    """Centering that skips missing values (NaN), as sensor and audio pipelines write it: each row's
    `nanmedian` over a run-time number of rows, and the whole batch's, deciding whether to rescale."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        center, where = x.nanmedian(-1, keepdim=True)
        centered = x - center
        if bool(torch.nanmedian(x) > 0.0):
            centered = centered * 0.5
        return centered, where


def test_nan_skipping_medians_over_run_time_rows(tmp_path) -> None:
    """A row's NaN are left out (a row of NaN only has the median NaN; its index is PyTorch's
    selection's, so no such row is compared); both sides of the decision."""
    _, scripted, compiled, python = export_compiled(
        tmp_path, NanRobustCenter(), (torch.randn(3, 5),), "nan_robust_center", [{0: "rows"}]
    )
    torch.manual_seed(4)
    with_nan = torch.tensor([[1.0, NAN, 2.0, 0.5, NAN], [3.0, 0.0, 2.0, -1.0, 9.0], [NAN, NAN, NAN, 4.0, NAN]])
    decisions = []
    for x in (with_nan, with_nan - 5.0, torch.randn(1, 5), torch.randn(6, 5)):
        decisions.append(bool(torch.nanmedian(x) > 0.0))
        check_hosts(scripted, [compiled, python], (x,))
    assert set(decisions) == {True, False}


class MajorityVote(nn.Module):
    """An ensemble's vote as it is written: each member's label per sample, the labels' `torch.mode`
    over a run-time number of members (ties go to the smallest label, at its last member), and an
    abstention unless a strict majority agrees."""

    def forward(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        labels = logits.argmax(-1)
        vote, member = torch.mode(labels, 0)
        agree = (labels == vote.unsqueeze(0)).sum(0)
        if bool((agree * 2 > labels.shape[0]).all()):
            return vote, member
        return torch.full_like(vote, -1), member


def test_majority_votes_over_run_time_members(tmp_path) -> None:
    _, scripted, compiled, python = export_compiled(
        tmp_path, MajorityVote(), (torch.randn(5, 4, 3),), "majority_vote", [{0: "members"}]
    )
    torch.manual_seed(5)
    agreeing = torch.randn(1, 4, 3).repeat(5, 1, 1) + torch.randn(5, 4, 3) * 0.01
    for logits in (torch.randn(5, 4, 3), agreeing, torch.randn(2, 4, 3), torch.randn(9, 4, 3)):
        check_hosts(scripted, [compiled, python], (logits,))
    (label,) = python.decisions
    assert set(python.decisions[label]) == {True, False}, python.decisions


class RunningBest(nn.Module):
    """The best score so far along a sequence and where it was reached (`torch.cummax`, ties to the
    latest), and the lowest loss so far (`torch.cummin`), over run-time lengths."""

    def forward(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        best, at = torch.cummax(scores, dim=1)
        lowest, when = torch.cummin(scores, dim=1)
        return best, at, lowest, when


def test_running_extremes_with_ties_and_nan(tmp_path) -> None:
    _, scripted, compiled, python = export_compiled(
        tmp_path, RunningBest(), (torch.randn(2, 6),), "running_best", [{1: "steps"}]
    )
    ties = torch.tensor([[4.0, 4.0, 1.0, 4.0, 0.0, 5.0, 5.0], [2.0, NAN, 1.0, NAN, 0.0, 3.0, 3.0]])
    for scores in (torch.randn(2, 6), ties, torch.randn(2, 1), torch.randint(0, 3, (2, 9)).float()):
        check_hosts(scripted, [compiled, python], (scores,))
