"""Element-wise functions torch-mlir does not lower, in models written as their authors write them:
a count model's likelihoods (`lgamma`, `digamma`, `xlogy` of a number), a normal quantile
(`erfinv`), polar features of points (`hypot`, `copysign`, `signbit`) and graph pooling
(`index_reduce`). `dycl_iree/special_functions.py` writes them as float arithmetic; here both hosts
match PyTorch on every branch side and loop exit, and each function over its whole domain (poles,
signed zeros, infinities, NaN).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dycl_iree

from .conftest import check_hosts, check_hosts_raise, export_compiled


class CountLikelihood(nn.Module):
    """A count regression's negative log-likelihood: a Gamma likelihood of the rate, and where it
    fits badly (outlying counts) the expected log-rate by digamma; else a Poisson likelihood under a
    fixed prior rate."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(6, 2)

    def forward(self, features: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        params = F.softplus(self.head(features)) + 1e-3
        concentration, rate = params[:, 0], params[:, 1]
        log_prob = (
            torch.xlogy(concentration, rate)
            + torch.xlogy(concentration - 1.0, counts)
            - rate * counts
            - torch.lgamma(concentration)
        )
        if bool(log_prob.mean() < -4.0):
            return -log_prob.mean(), torch.digamma(concentration) - torch.log(rate)
        prior = torch.xlogy(counts, 3.0) - 3.0 - torch.lgamma(counts + 1.0)
        return -prior.mean(), torch.digamma(counts + 1.0)


def test_a_count_models_likelihoods_take_both_sides(tmp_path):
    torch.manual_seed(0)
    features = torch.randn(16, 6)
    counts = torch.rand(16) * 3.0 + 0.5
    _, scripted, compiled, python = export_compiled(tmp_path, CountLikelihood(), (features, counts), "counts")
    outlying = torch.rand(16) * 200.0 + 100.0
    for inputs in ((features, counts), (features, outlying), (torch.randn(16, 6) * 3.0, counts)):
        check_hosts(scripted, [compiled, python], inputs)
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 2}, python.decisions


class SpecialValues(nn.Module):
    """Each function over its whole domain, and a decision on one of them."""

    def forward(self, x: torch.Tensor, y: torch.Tensor, p: torch.Tensor):
        gamma = torch.lgamma(x)
        if bool(gamma[torch.isfinite(gamma)].sum() > 0.0):
            gamma = gamma * 0.5
        return (
            gamma,
            torch.digamma(x),
            torch.erfinv(p),
            torch.hypot(x, y),
            torch.copysign(x, y),
            torch.copysign(x, -2.0),
            torch.signbit(y),
            torch.xlogy(2.0, torch.abs(y)),
            torch.lgamma(torch.arange(1, 9)),  # ints take the default float dtype, as in PyTorch
            torch.erfc(x),
            torch.special.log_ndtr(x),
            torch.special.xlog1py(torch.abs(y), 0.5),
        )


_DOMAIN = [0.0, -0.0, 1.0, 2.0, 0.5, 1.5, 1.4616321, 2.5, 7.99, 8.0, -0.5, -1.0, -2.5, -7.999, -20.3, 1e-30,
           -1e-30, 1e30, -1e30, 3.4e38, math.inf, -math.inf, math.nan]  # fmt: skip


def _domain(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.cat([torch.tensor(_DOMAIN), torch.rand(233, generator=generator) * 100.0 - 40.0])
    y = torch.cat([-torch.tensor(_DOMAIN), torch.randn(233, generator=generator) * 1e3])
    p = torch.cat([torch.tensor([0.0, -0.0, 1.0, -1.0, 1.5, -2.0, math.nan, 0.999, -0.999, 1e-20]),
                   torch.rand(246, generator=generator) * 1.998 - 0.999])  # fmt: skip
    return x, y, p


def test_each_function_over_its_domain(tmp_path):
    example = _domain(0)
    _, scripted, compiled, python = export_compiled(tmp_path, SpecialValues(), example, "special_values")
    between_one_and_two = (torch.rand(256) * 0.8 + 1.1, example[1], example[2])  # lgamma < 0 there
    for inputs in (example, _domain(1), between_one_and_two):
        check_hosts(scripted, [compiled, python], inputs)
    (label,) = python.decisions
    assert set(python.decisions[label]) == {True, False}, python.decisions


class CensoredLikelihood(nn.Module):
    """A Tobit (censored regression) log-likelihood as its authors write it: observed values by the
    normal log-density, values censored at the bound by `special.log_ndtr` of it, the censoring
    probability by `erfc`; far-off predictions are penalized by another path."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = 1.5

    def forward(self, mean: torch.Tensor, y: torch.Tensor, censored: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = (y - mean) / self.scale
        density = -0.5 * z * z - math.log(math.sqrt(2.0 * math.pi) * self.scale)
        ll = torch.where(censored, torch.special.log_ndtr(-z), density)
        tail = 0.5 * torch.erfc(z / math.sqrt(2.0))
        if bool(ll.mean() < -50.0):
            return -ll.sum(), torch.log(tail)
        return -ll.mean(), tail


def test_a_censored_likelihood_in_its_tails(tmp_path):
    torch.manual_seed(0)
    mean, y = torch.randn(64), torch.randn(64)
    censored = torch.rand(64) < 0.3
    _, scripted, compiled, python = export_compiled(tmp_path, CensoredLikelihood(), (mean, y, censored), "tobit")
    far = mean + 30.0 * torch.sign(torch.randn(64))  # censored at z ~ 20: log_ndtr ~ -200, erfc ~ 1e-88 (0)
    for inputs in ((mean, y, censored), (far, y, censored), (mean, y + 8.0, censored)):
        check_hosts(scripted, [compiled, python], inputs)
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {False: 2, True: 1}, python.decisions


class PolarFeatures(nn.Module):
    """Point features in polar form: radius by `hypot`, the angle signed by `copysign`, the lower
    half-plane by `signbit` (-0.0 counts as below, as in C)."""

    def forward(self, points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dx, dy = points[:, 0], points[:, 1]
        radius = torch.hypot(dx, dy)
        angle = torch.copysign(torch.acos(torch.clamp(dx / radius, -1.0, 1.0)), dy)
        below = torch.signbit(dy)
        if int(below.sum()) * 2 > points.shape[0]:
            return radius, -angle, below
        return radius * 2.0, angle, below


def test_polar_features_take_both_sides(tmp_path):
    torch.manual_seed(0)
    points = torch.randn(32, 2)
    points[0, 1], points[1, 1] = -0.0, 0.0
    _, scripted, compiled, python = export_compiled(tmp_path, PolarFeatures(), (points,), "polar")
    lower = torch.cat([points[:, :1], -points[:, 1:].abs() - 0.1], dim=1)
    upper = torch.cat([points[:, :1], points[:, 1:].abs() + 0.1], dim=1)
    big = points * 1e25  # squares would overflow float32
    for inputs in ((lower,), (upper,), (big,)):
        check_hosts(scripted, [compiled, python], inputs)
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 2}, python.decisions


class QuantileClipper(nn.Module):
    """Clips activations at the first normal quantile (by `erfinv`) of a list of levels that leaves
    at most 5% of them above it: a loop whose exit depends on the data."""

    def forward(self, x: torch.Tensor, levels: torch.Tensor) -> tuple[torch.Tensor, int]:
        z = math.sqrt(2.0) * torch.erfinv(2.0 * levels - 1.0)
        bounds = x.mean() + x.std() * z
        i = 0
        while i < levels.shape[0] - 1 and float((x > bounds[i]).float().mean()) > 0.05:
            i += 1
        return torch.minimum(x, bounds[i]), i


def test_a_quantile_loop_exits_at_each_level(tmp_path):
    torch.manual_seed(0)
    levels = torch.tensor([0.5, 0.8, 0.9, 0.97, 0.999])
    x = torch.randn(400)
    _, scripted, compiled, python = export_compiled(tmp_path, QuantileClipper(), (x, levels), "quantiles")
    exits = set()
    spiky = torch.cat([torch.zeros(376), torch.ones(24)])  # 6% above every level's bound: the last
    for inputs in ((x, levels), (torch.full((400,), 2.0), levels), (torch.randn(400) ** 3, levels), (spiky, levels)):
        exits.add(check_hosts(scripted, [compiled, python], inputs)[1])
    assert {0, 4} <= exits and len(exits) >= 3, exits


class GraphPooling(nn.Module):
    """Graph-level readout as graph networks write it: the nodes of each of 4 graphs reduced by
    `index_reduce` (in place and not, with and without the initial values), and a graph's
    maximum deciding which readout is returned."""

    def forward(self, nodes: torch.Tensor, graph: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        peak = torch.zeros(4, nodes.shape[1])
        peak.index_reduce_(0, graph, nodes, "amax", include_self=False)
        mean = torch.ones(4, nodes.shape[1]).index_reduce(0, graph, nodes, "mean")
        product = torch.ones(4, nodes.shape[1]).index_reduce(0, graph, nodes, "prod")
        low = torch.zeros(4, nodes.shape[1]).index_reduce(0, graph, nodes, "amin", include_self=True)
        if bool(peak.max() > 2.0):
            return peak + low, product
        return mean, product


@pytest.fixture(scope="module")
def graph_pooling(tmp_path_factory: pytest.TempPathFactory):
    """GraphPooling exported once for the tests below: (its scripted model, the bundle's path)."""
    torch.manual_seed(0)
    nodes = torch.rand(10, 3)
    graph = torch.tensor([0, 0, 1, 3, 3, 3, 1, 0, 3, 1])  # graph 2 has no nodes
    folder = tmp_path_factory.mktemp("pooling")
    _, scripted, _, _ = export_compiled(folder, GraphPooling(), (nodes, graph), "pooling")
    return scripted, folder / "pooling.dycl", nodes, graph


def _pooling_hosts(graph_pooling):
    scripted, path, nodes, graph = graph_pooling
    compiled, python = dycl_iree.load(path, host="compiled"), dycl_iree.load(path, host="python", record=True)
    return scripted, compiled, python, nodes, graph


def test_graph_pooling_by_index_reduce(graph_pooling):
    scripted, compiled, python, nodes, graph = _pooling_hosts(graph_pooling)
    for inputs in ((nodes, graph), (nodes * 3.0 + 1.0, graph), (torch.rand(10, 3), torch.tensor([2] * 10))):
        check_hosts(scripted, [compiled, python], inputs)
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {False: 2, True: 1}, python.decisions


class SmallAngles(nn.Module):
    """Quotients by odd functions near zero, as rotation and kernel code writes them (sin(t) / t of
    an axis-angle map, sinh(t) / t, ...), and a masked loss that drops non-finite targets. IREE's
    float32 sin and tan of small negative angles are off by ~6e-8, its sinh, asinh and atanh cancel
    near zero, and so do its float64 expm1 and log1p: within the contract's absolute 1e-6, but a
    quotient by them was 0 or of the wrong sign (`special_functions.odd_by_magnitude` and the forms
    after it)."""

    def forward(self, theta: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ratios = torch.stack(
            [
                torch.sin(theta) / theta,
                torch.tan(theta) / theta,
                torch.sinh(theta) / theta,
                torch.asinh(theta) / theta,
                torch.atanh(theta) / theta,
                torch.expm1(theta) / theta,
                torch.log1p(theta) / theta,
            ]
        )
        valid = torch.isfinite(target)
        loss = ((theta - target)[valid] ** 2).mean()
        if not bool(valid.all()):
            loss = loss + valid.logical_not().sum()
        return ratios, loss


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_odd_functions_keep_their_relative_accuracy_near_zero(tmp_path, dtype):
    """float64's sin and tan compute in float32 (`decompositions._FLOAT32_IN_FLOAT64`), the others
    in float64: both dtypes keep the ratios ~1 from 1e-30 on."""
    theta = (-torch.logspace(-30, -1, 64) * torch.tensor([1.0, -1.0]).repeat(32)).to(dtype)
    target = torch.randn(64, dtype=dtype)
    _, scripted, compiled, python = export_compiled(tmp_path, SmallAngles(), (theta, target), "small_angles")
    with_nan = target.clone()
    with_nan[[3, 10]] = torch.tensor([math.nan, -math.inf], dtype=dtype)
    for inputs in ((theta, target), (theta, with_nan)):
        want = check_hosts(scripted, [compiled, python], inputs)
        assert torch.allclose(want[0], torch.ones_like(want[0]), atol=0.06)  # the premise: each ratio ~1
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 1}, python.decisions


def test_graph_pooling_at_a_graph_out_of_range_raises_as_pytorch(graph_pooling):
    scripted, compiled, python, nodes, graph = _pooling_hosts(graph_pooling)
    for wrong in (4, -1):
        bad = graph.clone()
        bad[5] = wrong
        check_hosts_raise(
            scripted, [compiled, python], (nodes, bad), "out of (range|bounds)", "index out of range in self"
        )


class IntensityHistogram(nn.Module):
    """An image's intensity histograms as exposure code writes them: over the data's own range and
    over [0, 1], and the image brightened where most of it sits in the lowest bins."""

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        spread = torch.histc(image, bins=16)
        fixed = torch.histc(image, 10, 0.0, 1.0)
        dark = torch.cumsum(fixed, 0)[3] / image.numel()
        if bool(dark > 0.8):
            return torch.clamp(image * 2.0, 0.0, 1.0), spread, fixed
        return image, spread, fixed


def test_histograms_at_their_edges_and_both_sides(tmp_path):
    torch.manual_seed(0)
    image = torch.rand(3, 8, 8)
    _, scripted, compiled, python = export_compiled(tmp_path, IntensityHistogram(), (image,), "histogram")
    edges = torch.linspace(0.0, 1.0, 11)
    below = torch.nextafter(edges[1:], edges[1:] - 1)  # not below 0: a subnormal there
    at_edges = torch.cat([edges, torch.nextafter(edges, edges + 1), below, torch.tensor([-0.5, 1.5, 0.7]),
                          torch.rand(192 - 35)]).reshape(3, 8, 8)  # fmt: skip
    constant = torch.full((3, 8, 8), 0.25)  # the data's range is a point: widened by 1 each way
    for inputs in ((image,), (at_edges,), (image * 0.3,), (constant,)):
        check_hosts(scripted, [compiled, python], inputs)
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {False: 2, True: 2}, python.decisions
