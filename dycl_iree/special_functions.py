"""Element-wise functions torch-mlir has no lowering of ("failed to legalize operation
'torch.operator'"), written as the float arithmetic IREE compiles: the log-gamma and digamma
functions (a distribution's log-density, a Beta or Dirichlet entropy), the inverse error function
(a normal quantile), `erfc` and the log of the normal CDF (`special.log_ndtr`), accurate in their
tails as PyTorch's are, `copysign`, `signbit` and `hypot` (geometry), `index_reduce` (a scatter of
products, means, maxima or minima) and `histc`. And functions it lowers to forms that lose
accuracy: sin, tan, sinh, asinh and atanh of float32 near zero (within the contract's absolute
1e-6, but a quotient by them, sin(t) / t, came out 0 or of the wrong sign), the float64 expm1 and
log1p (exp(x) - 1 and log(1 + x), 0 near zero), and `isfinite`, which was True for NaN.

The gamma functions are power series about 2 and Stirling's series, joined by the recurrence
Gamma(x + 1) = x Gamma(x) and, below zero, by the reflection formula; every piece is computed for every
element and `where` picks the element's, so the whole function is one fused element-wise dispatch.
In float32 they stay within 1.1e-6 of the larger of 1 and the result, against float64, over x in
[-40, 60] (PyTorch's own float32 functions: lgamma 6e-8, digamma 7e-7); the largest errors are next
to the poles at the negative integers, where 1 - x rounds.

Example:
    >>> x = torch.tensor([-2.5, 0.1, 1.0, 1.5, 2.0, 7.5, 30.0])
    >>> bool((lgamma(x) - torch.lgamma(x)).abs().max() < 1e-5)
    True
    >>> bool((digamma(x) - torch.digamma(x)).abs().max() < 1e-5)
    True
"""

from __future__ import annotations

import math
from typing import Any

import torch

aten = torch.ops.aten

_EULER_GAMMA = 0.5772156649015329
_TERMS = 18  # of the series about 2: its terms fall as 4^-k over |e| <= 1/2


def _zeta_minus_one(k: int) -> float:
    """zeta(k) - 1 = sum over n >= 2 of n^-k, by Euler-Maclaurin's sum from 32 on (error < 1e-12)."""
    n = 32
    head = sum(m ** -float(k) for m in range(2, n))
    tail = n ** (1.0 - k) / (k - 1) + 0.5 * n ** -float(k) + k * n ** (-k - 1.0) / 12.0
    return head + tail - k * (k + 1) * (k + 2) * n ** (-k - 3.0) / 720.0


# lgamma(2 + e) = (1 - gamma) e + sum over k >= 2 of (-1)^k (zeta(k) - 1) / k e^k (Abramowitz and
# Stegun 6.1.33 with log(1 + e) taken out), and its derivative digamma(2 + e): the coefficients of
# e^1..e^N and of e^0..e^(N-1).
_LGAMMA_2 = [1.0 - _EULER_GAMMA] + [(-1) ** k * _zeta_minus_one(k) / k for k in range(2, _TERMS + 1)]
_DIGAMMA_2 = [1.0 - _EULER_GAMMA] + [(-1) ** k * _zeta_minus_one(k) for k in range(2, _TERMS + 1)]
_HALF_LOG_TWO_PI = 0.5 * math.log(2.0 * math.pi)
_STIRLING_FROM = 8.0  # from here Stirling's series, to the terms kept, is within float32's rounding
_MAX_STEPS_DOWN = 6  # from [1.5, 8) down to [1.5, 2.5)


def _horner(coefficients: list[float], x: torch.Tensor) -> torch.Tensor:
    """sum of coefficients[i] x^i."""
    total = torch.full_like(x, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        total = total * x + c
    return total


def _float_of(x: torch.Tensor) -> torch.Tensor | None:
    """`x` in the float dtype PyTorch computes its special functions in (ints take the default
    float dtype), or None for dtypes these forms do not cover (half precision, complex)."""
    if x.dtype in (torch.float32, torch.float64):
        return x
    if x.dtype == torch.bool or not x.dtype.is_floating_point and not x.dtype.is_complex:
        return x.to(torch.get_default_dtype())
    return None


def _positive_pieces(w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """For w > 0, what both gamma functions take: e, the point of the series about 2 (in
    [-1/2, 1/2)), the masks of w's range ([0, 1/2), [1/2, 3/2), [3/2, 8), from 8) and the number of
    steps down from [3/2, 8) to [3/2, 5/2)."""
    small = w < 0.5
    near_one = (w >= 0.5) & (w < 1.5)
    large = w >= _STIRLING_FROM
    steps = torch.clamp(torch.floor(w - 1.5), 0.0, float(_MAX_STEPS_DOWN))
    e = torch.where(small, w, torch.where(near_one, w - 1.0, w - 2.0 - steps))
    e = torch.where(large, torch.zeros_like(w), e)  # unused there; keeps the series bounded
    return e, small, near_one, large, steps


def _reduced_pi(x: torch.Tensor) -> torch.Tensor:
    """pi (x - round(x)): the argument of sin(pi x) and tan(pi x) reduced to [-pi/2, pi/2], exact
    where x is (no rounding of pi x at large x)."""
    return (x - torch.round(x)) * math.pi


def odd_by_magnitude(op: Any) -> Any:
    """An odd function `op` (sin, tan) of float32 as `op(|x|)` with x's sign: IREE 3.13's float32
    sin and tan of a negative argument near zero are off by ~6e-8 absolute (sin(-1e-20) gives
    +6.2e-8, sin(-1e-4) -9.994e-5), where those of positive ones are right, so a quotient by them
    (a reflection formula's pi / tan(pi x)) lost its sign and size. Other dtypes keep the op.

    >>> x = torch.tensor([-1e-20, 0.5, -0.0])
    >>> odd_by_magnitude(aten.sin.default)(x).tolist() == torch.sin(x).tolist()
    True
    """

    def decompose(x: torch.Tensor) -> Any:
        if x.dtype != torch.float32:
            return NotImplemented
        magnitude = op(torch.abs(x))  # the table keeps this call's op (`decompositions._without_reentry`)
        return _negated_where_signed(x, magnitude)

    decompose.__name__ = f"{op.__name__.split('.')[0]}_by_magnitude"
    return decompose


def half_difference(inner: Any) -> Any:
    """(inner(x) - inner(-x)) / 2 of float32 and float64, for an odd function that IREE computes
    with a cancellation near zero: sinh by expm1 (IREE's (exp(x) - exp(-x)) / 2 is 0 for
    |x| < 1e-8 and 1e-5 off relatively up to |x| ~ 0.1), atanh by log1p (IREE's form cancels alike).

    >>> x = torch.tensor([1e-20, -0.5, 2.0])
    >>> torch.allclose(half_difference(torch.expm1)(x), torch.sinh(x), rtol=1e-6, atol=0.0)
    True
    >>> torch.allclose(half_difference(torch.log1p)(x[:2]), torch.atanh(x[:2]), rtol=1e-6, atol=0.0)
    True
    """

    def decompose(x: torch.Tensor) -> Any:
        if x.dtype not in (torch.float32, torch.float64):
            return NotImplemented
        return (inner(x) - inner(-x)) * 0.5

    decompose.__name__ = f"half_difference_of_{inner.__name__}"
    return decompose


def asinh_by_log1p(x: torch.Tensor) -> Any:
    """`torch.asinh` of float32 and float64 as sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2))), and as
    log(2 |x|) beyond 2^30, where x^2 would overflow: IREE's log(x + sqrt(x^2 + 1)) cancels near
    zero and overflows from 1.8e19 in float32.

    >>> x = torch.tensor([-1e-20, 0.1, 1e30])
    >>> torch.allclose(asinh_by_log1p(x), torch.asinh(x), rtol=1e-6, atol=0.0)
    True
    """
    if x.dtype not in (torch.float32, torch.float64):
        return NotImplemented
    a = torch.abs(x)
    small = torch.where(a > 2.0**30, torch.zeros_like(a), a)
    squared = small * small
    near = torch.log1p(small + squared / (1.0 + torch.sqrt(1.0 + squared)))
    magnitude = torch.where(a > 2.0**30, torch.log(a) + math.log(2.0), near)
    return _negated_where_signed(x, magnitude)


def expm1_of_float64(x: torch.Tensor) -> Any:
    """`torch.expm1` of float64 as x (1 + x (1/2 + x / 6)) where |x| < 1e-5 (the series' next term
    is 4e-17 of the result there) and exp(x) - 1 elsewhere (within 1e-11): IREE 3.13's float64
    expm1 is exp(x) - 1 throughout, 0 for |x| < 1e-17 (its float32 expm1 is accurate).

    >>> x = torch.tensor([1e-30, -3e-6, 0.5, -math.inf], dtype=torch.float64)
    >>> torch.allclose(expm1_of_float64(x), torch.expm1(x), rtol=1e-11, atol=0.0)
    True
    """
    if x.dtype != torch.float64:
        return NotImplemented
    series = x * (1.0 + x * (0.5 + x / 6.0))
    return torch.where(torch.abs(x) < 1e-5, series, torch.exp(x) - 1.0)


def log1p_of_float64(x: torch.Tensor) -> Any:
    """`torch.log1p` of float64 as x (1 - x (1/2 - x (1/3 - x / 4))) where |x| < 1e-4 and log(1 + x)
    elsewhere (within 1e-12): IREE 3.13's float64 log1p is log(1 + x) throughout, like its expm1.

    >>> x = torch.tensor([1e-30, -5e-5, 0.5, -1.0], dtype=torch.float64)
    >>> torch.allclose(log1p_of_float64(x), torch.log1p(x), rtol=1e-12, atol=0.0)
    True
    """
    if x.dtype != torch.float64:
        return NotImplemented
    series = x * (1.0 - x * (0.5 - x * (1.0 / 3.0 - x / 4.0)))
    return torch.where(torch.abs(x) < 1e-4, series, torch.log(1.0 + x))


def isfinite_without_nan(x: torch.Tensor) -> torch.Tensor:
    """`torch.isfinite` as |x| < inf, an ordered comparison that NaN fails: torch-mlir's form gave
    True for NaN, so `x[torch.isfinite(x)]` kept the NaNs it is written to drop.

    >>> isfinite_without_nan(torch.tensor([1.0, math.nan, -math.inf])).tolist()
    [True, False, False]
    """
    if not x.dtype.is_floating_point:
        return torch.ones_like(x, dtype=torch.bool)
    return torch.abs(x) < math.inf


def _lgamma_positive(w: torch.Tensor) -> torch.Tensor:
    e, small, near_one, large, steps = _positive_pieces(w)
    series = e * _horner(_LGAMMA_2, e)  # lgamma(2 + e)
    # Down from [3/2, 8): lgamma(w) = log((w - 1) ... (w - steps)) + lgamma(w - steps).
    product = torch.ones_like(w)
    for j in range(1, _MAX_STEPS_DOWN + 1):
        product = product * torch.where(steps >= j, w - j, torch.ones_like(w))
    safe = torch.where(large, w, torch.full_like(w, _STIRLING_FROM))
    inverse = 1.0 / safe
    inverse_squared = inverse * inverse
    stirling = (
        safe * (torch.log(safe) - 1.0)
        - 0.5 * torch.log(safe)
        + _HALF_LOG_TWO_PI
        + inverse * (1.0 / 12.0 - inverse_squared * (1.0 / 360.0 - inverse_squared / 1260.0))
    )
    below = series - torch.log1p(e)  # lgamma(1 + e)
    result = torch.where(small, below - torch.log(w), torch.where(near_one, below, series + torch.log(product)))
    return torch.where(large, stirling, result)


def lgamma(x: torch.Tensor) -> Any:
    """`torch.lgamma`: log |Gamma(x)|; +inf at 0, at the negative integers and at +-inf, as PyTorch.

    >>> lgamma(torch.tensor([1.0, 2.0, 3.0, 0.5, -0.5, 0.0, -3.0])).tolist()[:4]
    [0.0, 0.0, 0.6931471824645996, 0.5723649263381958]
    """
    x = _float_of(x)
    if x is None:
        return NotImplemented
    negative = x <= 0.0
    w = torch.where(negative, 1.0 - x, x)
    positive = _lgamma_positive(torch.where(torch.isinf(w), torch.ones_like(w), w))
    # Reflection: lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x); sin is 0 at the integers: +inf.
    reflected = math.log(math.pi) - torch.log(torch.abs(torch.sin(_reduced_pi(x)))) - positive
    return torch.where(torch.isinf(x), torch.full_like(x, math.inf), torch.where(negative, reflected, positive))


def _digamma_positive(w: torch.Tensor) -> torch.Tensor:
    e, small, near_one, large, steps = _positive_pieces(w)
    series = _horner(_DIGAMMA_2, e)  # digamma(2 + e)
    # Down from [3/2, 8): digamma(w) = digamma(w - steps) + sum of 1 / (w - j), j = 1..steps.
    steps_sum = torch.zeros_like(w)
    for j in range(1, _MAX_STEPS_DOWN + 1):
        steps_sum = steps_sum + torch.where(steps >= j, 1.0 / (w - j), torch.zeros_like(w))
    safe = torch.where(large, w, torch.full_like(w, _STIRLING_FROM))
    inverse = 1.0 / safe
    inverse_squared = inverse * inverse
    asymptotic = (
        torch.log(safe)
        - 0.5 * inverse
        - inverse_squared
        * (1.0 / 12.0 - inverse_squared * (1.0 / 120.0 - inverse_squared * (1.0 / 252.0 - inverse_squared / 240.0)))
    )
    below = series - 1.0 / (1.0 + e)  # digamma(1 + e)
    result = torch.where(small, below - 1.0 / w, torch.where(near_one, below, series + steps_sum))
    return torch.where(large, asymptotic, result)


def digamma(x: torch.Tensor) -> Any:
    """`torch.digamma`: -inf at +0 and +inf at -0, NaN at the negative integers and -inf, as PyTorch.

    >>> digamma(torch.tensor([1.0, 0.0, -0.0, -2.0, math.inf])).tolist()
    [-0.5772156715393066, -inf, inf, nan, inf]
    """
    x = _float_of(x)
    if x is None:
        return NotImplemented
    negative = x < 0.0
    w = torch.where(negative, 1.0 - x, x)
    w = torch.where(torch.isinf(w) | (w == 0.0), torch.ones_like(w), w)
    positive = _digamma_positive(w)
    angle = _reduced_pi(torch.where(torch.isinf(x), torch.zeros_like(x), x))
    # Reflection: digamma(x) = digamma(1 - x) - pi / tan(pi x).
    reflected = positive - math.pi * torch.cos(angle) / torch.sin(angle)
    result = torch.where(negative, reflected, positive)
    result = torch.where(negative & (x == torch.round(x)), torch.full_like(x, math.nan), result)
    result = torch.where(x == 0.0, torch.where(1.0 / x > 0.0, -math.inf, math.inf), result)
    return torch.where(x == math.inf, x, result)


def erfinv(y: torch.Tensor) -> Any:
    """`torch.erfinv`: Winitzki's closed form (within 2e-3) refined by three Newton steps on `erf`;
    +-inf at +-1, NaN beyond. Where |y| nears 1 erfinv is ill-conditioned: at |y| = 0.9999 one unit
    in the last place of float32's erf moves the result by 4e-5 of itself, so there any two float32
    implementations differ (this one and PyTorch's by up to 1e-4 of the result from |y| ~ 0.999).

    >>> y = torch.tensor([0.0, 0.5, -0.9, 1.0, 1.5])
    >>> torch.allclose(erfinv(y), torch.erfinv(y), rtol=1e-6, atol=0.0, equal_nan=True)
    True
    """
    y = _float_of(y)
    if y is None:
        return NotImplemented
    a = 0.147
    log_term = torch.log((1.0 - y) * (1.0 + y))
    first = 2.0 / (math.pi * a) + 0.5 * log_term
    x = torch.sign(y) * torch.sqrt(torch.sqrt(first * first - log_term / a) - first)
    inside = torch.abs(y) < 1.0
    x = torch.where(inside, x, torch.zeros_like(y))
    for _ in range(3):
        x = x - (torch.erf(x) - y) / (2.0 / math.sqrt(math.pi) * torch.exp(-x * x))
    edge = torch.where(torch.abs(y) == 1.0, torch.sign(y) * math.inf, torch.full_like(y, math.nan))
    return torch.where(inside, x, edge)


# erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), for z >= 0, within 1.2e-7 relatively (Press et
# al., Numerical Recipes, "erfcc", a Chebyshev fit): the coefficients of P.
_ERFC_TAIL = [-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
              -0.82215223, 0.17087277]  # fmt: skip
_ERFC_FROM = 0.5  # below, 1 - erf(x) is at least 0.48: no cancellation


def _erfc_tail(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log erfc(z) for z >= 0 in two parts, -s^2 and the rest, s = z rounded to 1/16: s^2 is exact
    in float32 (z < 2^8), so exp of each part rounds once, not exp of their sum (a sum of ~-66 at
    z = 8 rounds by 4e-6 of the result)."""
    t = 1.0 / (1.0 + 0.5 * z)
    s = torch.round(z * 16.0) / 16.0
    return -s * s, torch.log(t) - (z - s) * (z + s) + _horner(_ERFC_TAIL, t)


def erfc(x: torch.Tensor) -> Any:
    """`torch.erfc`: 1 - erf(x) below 1/2, the tail form `_erfc_tail` from there (within 5e-7 of it
    in float32, where 1 - erf(x) is 0 from x ~ 3.9; erfc(10) is below float32's normal range, and
    IREE's CPU code flushes it to 0, README's traps).

    >>> x = torch.tensor([-3.0, 0.2, 0.5, 2.0, 6.0, math.inf])
    >>> torch.allclose(erfc(x), torch.erfc(x), rtol=1e-6, atol=0.0)
    True
    """
    x = _float_of(x)
    if x is None:
        return NotImplemented
    tail = x >= _ERFC_FROM
    square, rest = _erfc_tail(torch.where(tail, torch.clamp(x, max=10.0), torch.ones_like(x)))
    tail_value = torch.where(x == math.inf, torch.zeros_like(x), torch.exp(square) * torch.exp(rest))
    return torch.where(tail, tail_value, 1.0 - torch.erf(x))


def log_ndtr(x: torch.Tensor) -> Any:
    """`torch.special.log_ndtr`: log(1/2) plus `_erfc_tail` of -x / sqrt 2 in the lower tail (no
    underflow: -5005.5 at x = -100), log1p(-erfc(x / sqrt 2) / 2) above it.

    >>> x = torch.tensor([-100.0, -3.0, 0.0, 5.0, -math.inf, math.inf])
    >>> torch.allclose(log_ndtr(x), torch.special.log_ndtr(x), rtol=1e-6, atol=0.0)
    True
    """
    x = _float_of(x)
    if x is None:
        return NotImplemented
    z = -x / math.sqrt(2.0)
    lower = z >= _ERFC_FROM
    square, rest = _erfc_tail(torch.where(lower & ~torch.isinf(z), z, torch.ones_like(z)))
    below = torch.where(torch.isinf(z), -z, math.log(0.5) + square + rest)
    return torch.where(lower, below, torch.log1p(-0.5 * erfc(x / math.sqrt(2.0))))


def signbit(x: torch.Tensor) -> torch.Tensor:
    """`torch.signbit`: the sign bit of each float, read through the integer of its bits (so -0.0 and
    a NaN of negative sign count as negative); an int's sign; False for bools.

    >>> x = torch.tensor([-1.0, -0.0, 0.0, 2.0, -math.nan])
    >>> signbit(x).tolist() == torch.signbit(x).tolist() == [True, True, False, False, True]
    True
    """
    if x.dtype in _BITS:
        return aten.view.dtype(x, _BITS[x.dtype]) < 0
    if x.dtype == torch.bool:
        return torch.zeros_like(x)
    return x < 0


def _negated_where_signed(x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """`value`, negated where `x`'s sign bit is set (`signbit`: -0.0 and -NaN too): the sign of an
    odd function's argument put back on its value at |x|, or `copysign`'s."""
    return torch.where(signbit(x), -value, value)


# The signed integer of each float dtype's width.
_BITS = {
    torch.float32: torch.int32,
    torch.float64: torch.int64,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}


def copysign(input: torch.Tensor, other: Any) -> Any:
    """`torch.copysign` of a tensor or a number: |input| with the sign bit of `other` (`signbit`), in
    the float dtype PyTorch promotes to.

    >>> copysign(torch.tensor([1.0, -2.0, 3.0]), torch.tensor([-0.0, 1.0, -5.0])).tolist()
    [-1.0, 2.0, -3.0]
    """
    dtype = torch.result_type(input, other)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    if dtype not in (torch.float32, torch.float64):
        return NotImplemented
    magnitude = torch.abs(input.to(dtype))
    if isinstance(other, torch.Tensor):
        return _negated_where_signed(other, magnitude)
    if type(other) not in (int, float, bool):
        return NotImplemented
    return -magnitude if math.copysign(1.0, other) < 0.0 else magnitude


def hypot(input: torch.Tensor, other: torch.Tensor) -> Any:
    """`torch.hypot` without overflow or underflow: max(|a|, |b|) sqrt(1 + (min / max)^2); +inf where
    either is infinite (a NaN in the other too), as C's hypot.

    >>> hypot(torch.tensor([3.0, 1e30, 0.0]), torch.tensor([4.0, 1e30, 0.0])).tolist()[0::2]
    [5.0, 0.0]
    >>> big = torch.tensor(1e30)  # its square overflows float32
    >>> bool(torch.isinf(big * big)), torch.allclose(hypot(big, big), big * math.sqrt(2.0))
    (True, True)
    """
    dtype = torch.result_type(input, other)
    if dtype not in (torch.float32, torch.float64):
        return NotImplemented
    a, b = torch.abs(input.to(dtype)), torch.abs(other.to(dtype))
    larger, smaller = torch.maximum(a, b), torch.minimum(a, b)
    ratio = torch.where(larger == 0.0, torch.zeros_like(larger), smaller / larger)
    result = larger * torch.sqrt(1.0 + ratio * ratio)
    return torch.where(torch.isinf(a) | torch.isinf(b), torch.full_like(result, math.inf), result)


def index_reduce_by_scatter(
    input: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, reduce: str, include_self: bool = True
) -> Any:
    """`Tensor.index_reduce(dim, index, source, reduce)` as `scatter_reduce` of `source` at `index`
    spread over `source`'s other dims (the same reduction, `include_self` alike).

    >>> x = torch.ones(3, 2)
    >>> index_reduce_by_scatter(x, 0, torch.tensor([0, 2, 0]), torch.full((3, 2), 2.0), "prod").tolist()
    [[4.0, 4.0], [1.0, 1.0], [2.0, 2.0]]
    """
    if source.dim() == 0:
        return NotImplemented
    dim = dim % source.dim()
    shape = [1] * source.dim()
    shape[dim] = -1
    spread = index.to(torch.int64).reshape(shape).expand(source.shape)
    return aten.scatter_reduce.two(input, dim, spread, source, reduce, include_self=include_self)


def histc_by_scatter(input: torch.Tensor, bins: int = 100, min: Any = 0, max: Any = 0) -> Any:
    """`torch.histc`: each element's bin as PyTorch computes it in the input's dtype, floor((x - min)
    * bins / (max - min)), the maximum itself in the last bin, elements outside [min, max] (and NaN)
    in none; the counts by a `scatter_add` of ones. Where min == max the data's own minimum and
    maximum bound the bins, widened by 1 each way where those are equal too, as in PyTorch. Bounds
    not known at export, or min > max (which PyTorch refuses), keep the op. A data range that is not
    finite, which PyTorch refuses at run time, is not refused here: the infinite or NaN elements
    fall in no bin.

    >>> x = torch.tensor([0.0, 0.1, 0.25, 0.5, 1.0, 1.5, -0.1, math.nan])
    >>> histc_by_scatter(x, 4, 0.0, 1.0).tolist() == torch.histc(x, 4, 0.0, 1.0).tolist() == [2.0, 1.0, 1.0, 1.0]
    True
    """
    if (
        input.dtype not in (torch.float32, torch.float64)
        or type(min) not in (int, float)
        or type(max) not in (int, float)
    ):
        return NotImplemented
    if min > max:
        return NotImplemented
    x = input.reshape(-1)
    if min == max:
        low, high = torch.min(x), torch.max(x)
        same = low == high
        low, high = torch.where(same, low - 1.0, low), torch.where(same, high + 1.0, high)
    else:
        low = aten.scalar_tensor(min, dtype=x.dtype, device=x.device)  # rounded to the dtype, as PyTorch
        high = aten.scalar_tensor(max, dtype=x.dtype, device=x.device)
    position = torch.floor((x - low) * bins / (high - low))
    position = torch.where(position == bins, torch.full_like(position, bins - 1), position)
    inside = (x >= low) & (x <= high)
    index = torch.where(inside, position, torch.full_like(position, bins)).to(torch.int64)
    counts = torch.zeros(bins + 1, dtype=x.dtype, device=x.device).scatter_add(0, index, torch.ones_like(x))
    return counts[:bins]


# The odd functions IREE computes inaccurately near zero (`odd_by_magnitude`); `decompositions`
# registers them so that the call inside keeps the op.
ODD = (aten.sin.default, aten.tan.default)

TABLE = {
    aten.histc.default: histc_by_scatter,
    aten.lgamma.default: lgamma,
    aten.digamma.default: digamma,
    aten.erfinv.default: erfinv,
    aten.erfc.default: erfc,
    aten.special_log_ndtr.default: log_ndtr,
    aten.signbit.default: signbit,
    aten.copysign.Tensor: copysign,
    aten.copysign.Scalar: copysign,
    aten.hypot.default: hypot,
    aten.index_reduce.default: index_reduce_by_scatter,
    aten.sinh.default: half_difference(torch.expm1),
    aten.asinh.default: asinh_by_log1p,
    aten.atanh.default: half_difference(torch.log1p),
    aten.isfinite.default: isfinite_without_nan,
    aten.expm1.default: expm1_of_float64,
    aten.log1p.default: log1p_of_float64,
}
