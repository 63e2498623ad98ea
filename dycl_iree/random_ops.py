"""Random ops as pure functions of an explicit state: a counter-based generator in integer tensor ops.

torch-mlir lowers PyTorch's random ops through a 0-d int64 global (`global_seed`) that every draw
loads and stores. Inside a branch or loop of the compiled host's `main` that global is loaded and
stored within an scf region, and iree-compile 3.13 dies with SIGFPE (README's traps). So a segment
never uses it: every random op is rewritten (`random_state.py`) into one of the `dycl::` ops below,
which take the generator's state as an ordinary 0-d int64 tensor and return the draw and the next
state. Each is a CompositeImplicitAutograd function of plain aten integer and float ops, so
torch.export decomposes it, torch-mlir imports it like any arithmetic, and the reference interpreter
runs the very same function eagerly.

The generator is counter-based (the idea of Philox and Threefry; the mixing function is SplitMix64's
finalizer, which passes BigCrush as a counter hash): draw number `state` and element `i` (row-major)
give the 64-bit word `mix(mix(state) + (i + 1) * golden)`; a uniform float takes its top 24 bits,
`u = (word >> 40) * 2**-24` in [0, 1); a normal one is Box-Muller of the top and the next 24 bits.
Every draw advances the state by one. The numbers are a pure function of (state, shape), so the
compiled host and the Python host, which run the same segment functions, give the same bits. They
are not PyTorch's numbers: torch's CPU generator is a Mersenne Twister whose state no IREE program
holds, so a model's random ops follow the same distributions as in PyTorch, not the same stream.

Example:
    >>> state = torch.tensor(0)
    >>> values, state = torch.ops.dycl.uniform([2, 3], state)
    >>> bool(((values >= 0) & (values < 1)).all()), int(state)
    (True, 1)
"""

from __future__ import annotations

import math

import torch

# SplitMix64's increment (the golden ratio in 64 bits) and its finalizer's multipliers, as int64.
_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX2 = 0x94D049BB133111EB - (1 << 64)
_FLOAT_BITS = 24  # a float32 mantissa: every u * 2**24 is an exact integer


def _shift_right(word: torch.Tensor, count: int) -> torch.Tensor:
    """Logical right shift of int64 words. torch's `>>` is arithmetic on int64, so the sign bits are
    masked off. The shift count is a tensor: torch-mlir lowers `bitwise_right_shift.Tensor` but not
    its `.Tensor_Scalar` form ("failed to legalize operation 'torch.operator'")."""
    shifted = torch.bitwise_right_shift(word, torch.full((), count, dtype=torch.int64))
    return torch.bitwise_and(shifted, (1 << (64 - count)) - 1)


def _mix(word: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finalizer; int64 multiplication wraps alike in PyTorch and in IREE (`arith.muli`)."""
    word = torch.bitwise_xor(word, _shift_right(word, 30)) * _MIX1
    word = torch.bitwise_xor(word, _shift_right(word, 27)) * _MIX2
    return torch.bitwise_xor(word, _shift_right(word, 31))


def random_words(size: list, state: torch.Tensor) -> torch.Tensor:
    """64 random bits per element of a tensor of `size`, a pure function of (state, element index)."""
    count = 1
    for dim in size:
        count = count * dim
    index = torch.arange(1, count + 1, dtype=torch.int64).reshape(size)
    return _mix(_mix(state.to(torch.int64)) + index * _GOLDEN)


def _unit(word: torch.Tensor, shift: int) -> torch.Tensor:
    """24 bits of `word` from bit `shift` up, as a float32 in [0, 1)."""
    bits = torch.bitwise_and(_shift_right(word, shift), (1 << _FLOAT_BITS) - 1)
    return bits.to(torch.float32) * (2.0**-_FLOAT_BITS)


def uniform_values(size: list, state: torch.Tensor) -> torch.Tensor:
    """float32 uniform in [0, 1) of `size`."""
    return _unit(random_words(size, state), 64 - _FLOAT_BITS)


def normal_values(size: list, state: torch.Tensor) -> torch.Tensor:
    """float32 standard normal of `size` (Box-Muller of two 24-bit uniforms of one word; 1 - u > 0)."""
    word = random_words(size, state)
    radius = torch.sqrt(-2.0 * torch.log(1.0 - _unit(word, 64 - _FLOAT_BITS)))
    return radius * torch.cos((2.0 * math.pi) * _unit(word, 64 - 2 * _FLOAT_BITS))


def _next(state: torch.Tensor) -> torch.Tensor:
    return state + 1


def _float_dtype(dtype: torch.dtype | None, like: torch.dtype | None = None) -> torch.dtype:
    return dtype if dtype is not None else (like if like is not None else torch.get_default_dtype())


def _uniform(size: list, state: torch.Tensor, dtype: torch.dtype | None = None) -> tuple:
    return uniform_values(size, state).to(_float_dtype(dtype)), _next(state)


def _normal(size: list, state: torch.Tensor, dtype: torch.dtype | None = None) -> tuple:
    return normal_values(size, state).to(_float_dtype(dtype)), _next(state)


def _uniform_like(self: torch.Tensor, state: torch.Tensor, dtype: torch.dtype | None = None) -> tuple:
    return uniform_values(list(self.shape), state).to(_float_dtype(dtype, self.dtype)), _next(state)


def _normal_like(self: torch.Tensor, state: torch.Tensor, dtype: torch.dtype | None = None) -> tuple:
    return normal_values(list(self.shape), state).to(_float_dtype(dtype, self.dtype)), _next(state)


def _uniform_between(self: torch.Tensor, low: float, high: float, state: torch.Tensor) -> tuple:
    """`x.uniform_(low, high)` (functionalized): uniform in [low, high), shaped and typed like x."""
    values = low + (high - low) * uniform_values(list(self.shape), state)
    return values.to(self.dtype), _next(state)


def _normal_around(mean: torch.Tensor, std: torch.Tensor, state: torch.Tensor) -> tuple:
    """`torch.normal(mean, std)` with a tensor mean and a tensor or float std, broadcast together."""
    shape = list(torch.broadcast_shapes(mean.shape, std.shape))
    return (mean + std * normal_values(shape, state)).to(mean.dtype), _next(state)


def _normal_around_float(mean: torch.Tensor, std: float, state: torch.Tensor) -> tuple:
    """`torch.normal(mean, std)` with a float std."""
    return (mean + std * normal_values(list(mean.shape), state)).to(mean.dtype), _next(state)


def _random_integers(low: int, high: int, size: list, state: torch.Tensor, dtype: torch.dtype | None) -> tuple:
    """`torch.randint(low, high, size)`: the word's top 63 bits modulo the range (the bias is below
    range / 2**63)."""
    word = _shift_right(random_words(size, state), 1)
    values = low + torch.remainder(word, high - low)
    return values.to(dtype if dtype is not None else torch.int64), _next(state)


def _randint(high: int, size: list, state: torch.Tensor, dtype: torch.dtype | None = None) -> tuple:
    return _random_integers(0, high, size, state, dtype)


def _randint_low(low: int, high: int, size: list, state: torch.Tensor, dtype: torch.dtype | None = None) -> tuple:
    return _random_integers(low, high, size, state, dtype)


def _bernoulli(self: torch.Tensor, state: torch.Tensor) -> tuple:
    """`torch.bernoulli(p)`: 1 where u < p, with p the tensor itself."""
    drawn = uniform_values(list(self.shape), state).to(self.dtype) < self
    return drawn.to(self.dtype), _next(state)


def _bernoulli_p(self: torch.Tensor, p: float, state: torch.Tensor) -> tuple:
    """`torch.bernoulli(x, p)`: ones with probability p, shaped and typed like x."""
    drawn = uniform_values(list(self.shape), state) < p
    return drawn.to(self.dtype), _next(state)


def _dropped(input: torch.Tensor, mask_size: list, p: float, state: torch.Tensor) -> torch.Tensor:
    """Dropout as PyTorch computes it, `input * mask / (1 - p)` with a mask that keeps an element with
    probability 1 - p (u >= p); a product, so a dropped NaN or inf stays NaN as in PyTorch. The scale is
    a tensor: at p = 1 it is infinite (a Python division would raise), but then nothing is kept."""
    kept = uniform_values(mask_size, state) >= p
    scale = torch.reciprocal(torch.full((), 1.0 - p, dtype=torch.float32))
    return input * torch.where(kept, scale, 0.0).to(input.dtype)


def _dropout(input: torch.Tensor, p: float, state: torch.Tensor) -> tuple:
    """`F.dropout(x, p, training=True)`: zero with probability p, the rest scaled by 1 / (1 - p)."""
    return _dropped(input, list(input.shape), p, state), _next(state)


def _feature_dropout(input: torch.Tensor, p: float, state: torch.Tensor) -> tuple:
    """`F.dropout2d` / `dropout1d` / `dropout3d` with training=True: whole channels (dims 0 and 1) at once."""
    mask_size = list(input.shape[:2]) + [1] * (input.dim() - 2)
    return _dropped(input, mask_size, p, state), _next(state)


_LIBRARY = torch.library.Library("dycl", "DEF")
# (schema, function) of each op. The state is the last tensor argument and the last result of every op.
# Rates and bounds are `Scalar`, not `float`: a dropout rate that is a float input of the model reaches
# the segment as `.item()` of a 0-d tensor, an unbacked SymFloat under torch.export, which a `float`
# argument refuses ("Expected a value of type 'float' ... but instead found type 'SymFloat'").
_DRAWN = "-> (Tensor, Tensor)"
_SIZED = "SymInt[] size, Tensor state, ScalarType? dtype=None"
_OPS = [
    (f"uniform(SymInt[] size, Tensor state, ScalarType? dtype=None) {_DRAWN}", _uniform),
    (f"normal(SymInt[] size, Tensor state, ScalarType? dtype=None) {_DRAWN}", _normal),
    (f"uniform_like(Tensor self, Tensor state, ScalarType? dtype=None) {_DRAWN}", _uniform_like),
    (f"normal_like(Tensor self, Tensor state, ScalarType? dtype=None) {_DRAWN}", _normal_like),
    (f"uniform_between(Tensor self, Scalar low, Scalar high, Tensor state) {_DRAWN}", _uniform_between),
    (f"normal_around(Tensor mean, Tensor std, Tensor state) {_DRAWN}", _normal_around),
    (f"normal_around_float(Tensor mean, Scalar std, Tensor state) {_DRAWN}", _normal_around_float),
    (f"randint(SymInt high, {_SIZED}) {_DRAWN}", _randint),
    (f"randint_low(SymInt low, SymInt high, {_SIZED}) {_DRAWN}", _randint_low),
    (f"bernoulli(Tensor self, Tensor state) {_DRAWN}", _bernoulli),
    (f"bernoulli_p(Tensor self, Scalar p, Tensor state) {_DRAWN}", _bernoulli_p),
    (f"dropout(Tensor input, Scalar p, Tensor state) {_DRAWN}", _dropout),
    (f"feature_dropout(Tensor input, Scalar p, Tensor state) {_DRAWN}", _feature_dropout),
]
for _schema, _function in _OPS:
    _LIBRARY.define(_schema)
    _LIBRARY.impl(_schema.split("(")[0], _function, "CompositeImplicitAutograd")

__all__ = ["random_words", "uniform_values", "normal_values"]
