"""Random ops that are more than a transform of one draw: multinomial, randperm and poisson, on the explicit state.

torch-mlir lowers these three through its global seed, whose store inside a branch or loop of the
compiled host crashes iree-compile (README's traps), so like every random op they are rewritten
(`random_state.py`) into `dycl::` ops that take the generator's state and return the next one
(`random_ops.py` has the generator). Each is a CompositeImplicitAutograd function of plain tensor ops
that torch-mlir and IREE 3.13 compile inside loops: comparisons, sums, `cumsum`, `sort` (not
`argsort(stable=True)`, whose `aten.sort.stable` torch-mlir does not lower) and float math (not
`lgamma`, which it does not lower either). The methods:

* `multinomial(w, n, replacement)`: inverse CDF. One uniform u per sample, scaled by the row's total
  weight, and the sample is the number of categories whose cumulative weight is <= u * total, so a
  category of weight zero is never drawn and the weights need no normalization. Without replacement
  the n samples are drawn one after another, each from the weights left after zeroing those drawn.
* `randperm(n)`: the order (`sort`) of n random 32-bit keys.
* `poisson(rate)`: PyTorch's and numpy's two methods. A rate below 10 by inversion: the count of
  k in 0..39 whose cumulative probability is <= u (the mass beyond 39 is below 1e-11 at a rate of 10);
  a rate of 10 or more by Hormann's transformed rejection (PTRS, "The transformed rejection method for
  generating Poisson random variables", 1993), whose loop becomes 20 rounds drawn at once, the first
  accepted round's value taken; each round accepts with probability 0.75 or more, so all 20 reject
  with probability below 1e-12, and then the last round's candidate is taken. In float32: a rate
  above 2**24 is not exact.

What PyTorch checks and raises on (negative or NaN weights, an all-zero row, more samples without
replacement than categories of positive weight) cannot raise inside a compiled segment: a row that
cannot be drawn from gives the last category.

Example:
    >>> state = torch.zeros(2, dtype=torch.int32)
    >>> samples, state = torch.ops.dycl.multinomial(torch.tensor([0.0, 1.0, 0.0]), 4, True, state)
    >>> samples.tolist(), state.tolist()
    ([1, 1, 1, 1], [0, 1])
"""

from __future__ import annotations

import math

import torch

from .random_ops import next_state, random_words, uniform_values, unit_floats


def _inverse_cdf(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """For each row of `weights` [rows, k] and each of its uniforms [rows, n], the category whose
    cumulative weight interval [cdf[j-1], cdf[j]) holds u * total (int64 [rows, n])."""
    # In float32 at least: u <= 1 - 2**-24 keeps u * total below total when rounded to float32 or
    # float64, so it never passes the last category of positive weight; in float16 u would round to 1.
    cdf = torch.cumsum(weights if weights.element_size() >= 4 else weights.to(torch.float32), -1)
    target = uniform.to(cdf.dtype) * cdf[:, -1:]
    index = (cdf.unsqueeze(1) <= target.unsqueeze(2)).to(torch.int64).sum(-1)
    return torch.clamp(index, max=weights.shape[-1] - 1)


def _multinomial(self: torch.Tensor, num_samples: int, replacement: bool, state: torch.Tensor) -> tuple:
    """`torch.multinomial(weights, num_samples, replacement)` of a 1-d or 2-d weights tensor."""
    weights = self.unsqueeze(0) if self.dim() == 1 else self
    uniform = uniform_values([weights.shape[0], num_samples], state)
    if replacement or num_samples == 1:
        samples = _inverse_cdf(weights, uniform)
    else:
        categories = torch.arange(weights.shape[-1]).unsqueeze(0)
        columns = []
        for column in range(num_samples):
            drawn = _inverse_cdf(weights, uniform[:, column : column + 1])
            columns.append(drawn)
            weights = torch.where(categories == drawn, 0.0, weights).to(weights.dtype)
        samples = torch.cat(columns, 1)
    return (samples.squeeze(0) if self.dim() == 1 else samples), next_state(state)


def _randperm(n: int, state: torch.Tensor, dtype: torch.dtype | None = None) -> tuple:
    """`torch.randperm(n)`: the permutation that sorts n random keys. Equal keys (two among n collide
    with probability about n**2 / 2**33) still give a permutation, in either order."""
    order = torch.sort(random_words([n], state)).indices
    return order.to(dtype if dtype is not None else torch.int64), next_state(state)


_SMALL_RATE = 10.0  # PyTorch's and numpy's switch from inversion to transformed rejection
_INVERSION_TERMS = 40
_REJECTION_ROUNDS = 20


def _poisson_by_inversion(rate: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """For rates in (0, 10]: the number of k in 0..39 with P(X <= k) <= u."""
    counts = torch.arange(_INVERSION_TERMS, dtype=torch.float32)
    # log(k!) as a cumulative sum of logs: a constant tensor in the function would be a lifted constant
    # that torch.export refuses ("Constant tensor lifted_tensor_0 is not in the constants dictionary").
    log_factorials = torch.cumsum(torch.log(torch.clamp(counts, min=1.0)), 0)
    rate = rate.unsqueeze(-1)
    terms = torch.exp(counts * torch.log(rate) - rate - log_factorials)
    cdf = torch.cumsum(terms, -1)
    return (cdf <= uniform.unsqueeze(-1)).to(torch.float32).sum(-1)


def _log_poisson_probability(rate: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """log P(X = k) for X ~ Poisson(rate), k >= 0, rate >= 10, in float32 without lgamma: for k >= 10 by
    Stirling's series written around the rate, (x - rate) - k log1p((x - rate) / rate) - log(2 pi x) / 2
    - 1 / (12 x) + 1 / (360 x**3) with x = k + 1, which keeps its terms small where the probability is
    not negligible; for k < 10 directly, with log(k!) summed from the logs of 2..9."""
    x = k + 1.0
    stirling = (
        (x - rate)
        - k * torch.log1p((x - rate) / rate)
        - 0.5 * torch.log(2.0 * math.pi * x)
        - 1.0 / (12.0 * x)
        + 1.0 / (360.0 * x * x * x)
    )
    log_factorial = torch.zeros_like(k)
    for factor in range(2, 10):
        log_factorial = log_factorial + torch.where(k >= factor, math.log(factor), 0.0)
    direct = k * torch.log(rate) - rate - log_factorial
    return torch.where(k >= 10.0, stirling, direct)


def _poisson_by_rejection(rate: torch.Tensor, size: list, state: torch.Tensor) -> torch.Tensor:
    """For rates >= 10: PTRS (Hormann 1993, as numpy's `random_poisson_ptrs`), its loop as
    `_REJECTION_ROUNDS` rounds drawn at once; the earliest accepted round wins.

    The rounds are one leading dim of size `_REJECTION_ROUNDS` (round r draws streams 1 + 2r and
    2 + 2r), not a Python loop: a loop made some 7000 ops that torch.export traced one by one, 40 s
    of an export with one `torch.poisson`; the words are the same, so are the counts."""
    root = torch.sqrt(rate)
    b = 0.931 + 2.53 * root
    a = -0.059 + 0.02483 * b
    log_inverse_alpha = torch.log(1.1239 + 1.1328 / (b - 3.4))
    v_r = 0.9277 - 3.6224 / (b - 2.0)
    rounds = torch.arange(_REJECTION_ROUNDS, dtype=torch.int32).reshape([_REJECTION_ROUNDS] + [1] * len(size))
    u = unit_floats(random_words(size, state, 1 + 2 * rounds)) - 0.5
    v = unit_floats(random_words(size, state, 2 + 2 * rounds))
    u_s = 0.5 - torch.abs(u)
    k = torch.floor((2.0 * a / u_s + b) * u + rate + 0.43)
    quick = (u_s >= 0.07) & (v <= v_r)
    rejected = (k < 0.0) | ((u_s < 0.013) & (v > u_s))
    safe_k = torch.clamp(k, min=0.0)  # keeps the logs finite where k < 0 (rejected anyway)
    bound = torch.log(v) + log_inverse_alpha - torch.log(a / (u_s * u_s) + b)
    accepted = quick | (~rejected & (bound <= _log_poisson_probability(rate, safe_k)))
    # The earliest accepted round; where all are rejected (below 1e-12), the last round's candidate.
    chosen = torch.amin(torch.where(accepted, rounds, _REJECTION_ROUNDS - 1), 0, keepdim=True)
    # safe_k >= 0, so the max over rounds of (safe_k at the chosen round, else -1) is that count exactly.
    return torch.amax(torch.where(rounds == chosen, safe_k, -1.0), 0)


def _poisson(self: torch.Tensor, state: torch.Tensor) -> tuple:
    """`torch.poisson(rates)`: counts (as floats of the rates' dtype); a rate of 0 gives 0."""
    size = list(self.shape)
    rate = self.to(torch.float32)
    small = torch.clamp(rate, min=1e-30, max=_SMALL_RATE)  # the other method's rates, kept finite
    large = torch.clamp(rate, min=_SMALL_RATE)
    by_inversion = _poisson_by_inversion(small, unit_floats(random_words(size, state)))
    by_rejection = _poisson_by_rejection(large, size, state)
    counts = torch.where(rate < _SMALL_RATE, by_inversion, by_rejection)
    return torch.where(rate > 0.0, counts, 0.0).to(self.dtype), next_state(state)


# Another fragment of the dycl:: namespace (random_ops.py says why fragments); the state is the last
# tensor argument and the last result, as there.
_LIBRARY = torch.library.Library("dycl", "FRAGMENT")
_OPS = [
    ("multinomial(Tensor self, SymInt num_samples, bool replacement, Tensor state) -> (Tensor, Tensor)", _multinomial),
    ("randperm(SymInt n, Tensor state, ScalarType? dtype=None) -> (Tensor, Tensor)", _randperm),
    ("poisson(Tensor self, Tensor state) -> (Tensor, Tensor)", _poisson),
]
for _schema, _function in _OPS:
    _LIBRARY.define(_schema)
    _LIBRARY.impl(_schema.split("(")[0], _function, "CompositeImplicitAutograd")

__all__: list[str] = []
