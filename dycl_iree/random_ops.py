"""Random ops as pure functions of an explicit state: a counter-based generator in integer tensor ops.

torch-mlir lowers PyTorch's random ops through a 0-d int64 global (`global_seed`) that every draw
loads and stores. Inside a branch or loop of the compiled host's `main` that global is loaded and
stored within an scf region, and iree-compile 3.13 dies with SIGFPE (README's traps). So a segment
never uses it: every random op is rewritten (`random_state.py`) into one of the `dycl::` ops below,
which take the generator's state as an ordinary tensor, two int32 words (the seed's word and a
draw counter), and return the draw and the next state. Each is a CompositeImplicitAutograd function
of plain aten integer and float ops, so torch.export decomposes it, torch-mlir imports it like any
arithmetic, and the reference interpreter runs the very same function eagerly. This module holds the
generator and the draws that transform it elementwise (dropout and alpha dropout included);
`random_sampling.py` holds the multinomial, randperm and poisson samplers.

The generator is counter-based (the idea of Philox and Threefry), in 32-bit words: the state gives
two keys, and element `i` (row-major) the word `mix(mix(i * golden + key0) ^ key1)`, with `mix` the
lowbias32 hash; a uniform float takes its top 24 bits, `u = (word >> 8) * 2**-24` in [0, 1); a
normal one is Box-Muller of two uniforms whose words come from two key pairs. Every draw increments
the counter. The numbers are a pure function of (state, shape), so the compiled host and the Python
host, which run the same segment functions, give the same bits. They are not PyTorch's numbers:
torch's CPU generator is a Mersenne Twister whose state no IREE program holds, so a model's random
ops follow the same distributions as in PyTorch, not the same stream.

Example:
    >>> state = torch.zeros(2, dtype=torch.int32)
    >>> values, state = torch.ops.dycl.uniform([2, 3], state)
    >>> bool(((values >= 0) & (values < 1)).all()), state.tolist()
    (True, [0, 1])
"""

from __future__ import annotations

import math

import torch

# 32-bit words, and a state of two int32 words rather than one int64: IREE's Vulkan target (without
# the Int64 capability) rejects an elementwise op on int64 ("failed to legalize operation
# 'vector.broadcast'" on `vector<1xi64>`), also a 0-d int64 state broadcast into the draw's dispatch.
# The increment is the golden ratio in 32 bits; the mixing function is lowbias32 (C. Wellons' hash
# prospector), a bijection of 32-bit words.
_GOLDEN = 0x9E3779B9 - (1 << 32)
_MIX1 = 0x7FEB352D
_MIX2 = 0x846CA68B - (1 << 32)
_STREAM = 0x632BE5AB  # separates the keys of a draw's second word from those of its first
_FLOAT_BITS = 24  # a float32 mantissa: every u * 2**24 is an exact integer


def _shift_right(word: torch.Tensor, count: int) -> torch.Tensor:
    """Logical right shift of int32 words. torch's `>>` is arithmetic on signed ints, so the sign bits
    are masked off. The shift count is a tensor: torch-mlir lowers `bitwise_right_shift.Tensor` but
    not its `.Tensor_Scalar` form ("failed to legalize operation 'torch.operator'")."""
    shifted = torch.bitwise_right_shift(word, torch.full((), count, dtype=word.dtype))
    return torch.bitwise_and(shifted, (1 << (32 - count)) - 1)


def _mix(word: torch.Tensor) -> torch.Tensor:
    """lowbias32; int32 multiplication wraps alike in PyTorch and in IREE (`arith.muli`)."""
    word = torch.bitwise_xor(word, _shift_right(word, 16)) * _MIX1
    word = torch.bitwise_xor(word, _shift_right(word, 15)) * _MIX2
    return torch.bitwise_xor(word, _shift_right(word, 16))


def _keys(state: torch.Tensor, stream: int | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two 32-bit keys (0-d) of the state (seed word, draw counter); both words reach both keys."""
    first = _mix(torch.bitwise_xor(state[1], _mix(state[0] + stream * _STREAM)))
    return first, _mix(first + _STREAM)


def random_words(size: list, state: torch.Tensor, stream: int | torch.Tensor = 0) -> torch.Tensor:
    """32 random bits (int32) per element of a tensor of `size`: a pure function of the state, the
    element's row-major index and the stream (0, or 1 for a draw's independent second word). An int32
    tensor of streams, shaped to broadcast in front of `size`, gives each stream's words at once."""
    count = 1
    for dim in size:
        count = count * dim
    index = torch.arange(count, dtype=torch.int32).reshape(size)
    first, second = _keys(state, stream)
    return _mix(torch.bitwise_xor(_mix(index * _GOLDEN + first), second))


def unit_floats(word: torch.Tensor) -> torch.Tensor:
    """The top 24 bits of `word`, as a float32 in [0, 1)."""
    return _shift_right(word, 32 - _FLOAT_BITS).to(torch.float32) * (2.0**-_FLOAT_BITS)


def uniform_values(size: list, state: torch.Tensor) -> torch.Tensor:
    """float32 uniform in [0, 1) of `size`."""
    return unit_floats(random_words(size, state))


def normal_values(size: list, state: torch.Tensor) -> torch.Tensor:
    """float32 standard normal of `size`: Box-Muller of two independent uniforms (1 - u > 0)."""
    radius = torch.sqrt(-2.0 * torch.log(1.0 - unit_floats(random_words(size, state))))
    return radius * torch.cos((2.0 * math.pi) * unit_floats(random_words(size, state, 1)))


def next_state(state: torch.Tensor) -> torch.Tensor:
    """The state of the next draw: the same seed word, the counter plus one (wrapping after 2**32 draws)."""
    return torch.stack([state[0], state[1] + 1])


def _float_dtype(dtype: torch.dtype | None, like: torch.dtype | None = None) -> torch.dtype:
    return dtype if dtype is not None else (like if like is not None else torch.get_default_dtype())


def _uniform(size: list, state: torch.Tensor, dtype: torch.dtype | None = None) -> tuple:
    return uniform_values(size, state).to(_float_dtype(dtype)), next_state(state)


def _normal(size: list, state: torch.Tensor, dtype: torch.dtype | None = None) -> tuple:
    return normal_values(size, state).to(_float_dtype(dtype)), next_state(state)


def _uniform_like(self: torch.Tensor, state: torch.Tensor, dtype: torch.dtype | None = None) -> tuple:
    return uniform_values(list(self.shape), state).to(_float_dtype(dtype, self.dtype)), next_state(state)


def _normal_like(self: torch.Tensor, state: torch.Tensor, dtype: torch.dtype | None = None) -> tuple:
    return normal_values(list(self.shape), state).to(_float_dtype(dtype, self.dtype)), next_state(state)


def _uniform_between(self: torch.Tensor, low: float, high: float, state: torch.Tensor) -> tuple:
    """`x.uniform_(low, high)` (functionalized): uniform in [low, high), shaped and typed like x."""
    values = low + (high - low) * uniform_values(list(self.shape), state)
    return values.to(self.dtype), next_state(state)


def _normal_around(mean: torch.Tensor, std: torch.Tensor, state: torch.Tensor) -> tuple:
    """`torch.normal(mean, std)` with a tensor mean and a tensor or float std, broadcast together."""
    shape = list(torch.broadcast_shapes(mean.shape, std.shape))
    return (mean + std * normal_values(shape, state)).to(mean.dtype), next_state(state)


def _normal_around_float(mean: torch.Tensor, std: float, state: torch.Tensor) -> tuple:
    """`torch.normal(mean, std)` with a float std."""
    return (mean + std * normal_values(list(mean.shape), state)).to(mean.dtype), next_state(state)


def _random_integers(low: int, high: int, size: list, state: torch.Tensor, dtype: torch.dtype | None) -> tuple:
    """`torch.randint(low, high, size)`: the word's low 31 bits modulo the range (the bias is below
    range / 2**31; the range must be below 2**31), plus low in the result's dtype."""
    word = torch.bitwise_and(random_words(size, state), (1 << 31) - 1)
    dtype = dtype if dtype is not None else torch.int64
    return torch.remainder(word, high - low).to(dtype) + low, next_state(state)


def _randint(high: int, size: list, state: torch.Tensor, dtype: torch.dtype | None = None) -> tuple:
    return _random_integers(0, high, size, state, dtype)


def _randint_low(low: int, high: int, size: list, state: torch.Tensor, dtype: torch.dtype | None = None) -> tuple:
    return _random_integers(low, high, size, state, dtype)


def _randint_like(self: torch.Tensor, high: int, state: torch.Tensor, dtype: torch.dtype | None = None) -> tuple:
    """`torch.randint_like(x, high)`: shaped like x, typed like x unless `dtype` says otherwise."""
    return _random_integers(0, high, list(self.shape), state, dtype if dtype is not None else self.dtype)


def _randint_like_low(
    self: torch.Tensor, low: int, high: int, state: torch.Tensor, dtype: torch.dtype | None = None
) -> tuple:
    return _random_integers(low, high, list(self.shape), state, dtype if dtype is not None else self.dtype)


def _random_between(self: torch.Tensor, low: int, high: int, state: torch.Tensor) -> tuple:
    """`x.random_(low, high)` / `x.random_(high)` (functionalized): integers in [low, high) typed like x."""
    return _random_integers(low, high, list(self.shape), state, self.dtype)


def _normal_from_float(mean: float, std: torch.Tensor, state: torch.Tensor) -> tuple:
    """`torch.normal(mean, std)` with a float mean and a tensor std."""
    return (mean + std * normal_values(list(std.shape), state)).to(std.dtype), next_state(state)


def _normal_sized(mean: float, std: float, size: list, state: torch.Tensor, dtype: torch.dtype | None = None) -> tuple:
    """`torch.normal(mean, std, size)` with float mean and std."""
    return (mean + std * normal_values(size, state)).to(_float_dtype(dtype)), next_state(state)


def _normal_shaped(self: torch.Tensor, mean: float, std: float, state: torch.Tensor) -> tuple:
    """`x.normal_(mean, std)` (functionalized to `normal_functional`): shaped and typed like x."""
    return (mean + std * normal_values(list(self.shape), state)).to(self.dtype), next_state(state)


def _log_normal(self: torch.Tensor, mean: float, std: float, state: torch.Tensor) -> tuple:
    """`x.log_normal_(mean, std)`: exp of a normal with that mean and deviation."""
    return torch.exp(mean + std * normal_values(list(self.shape), state)).to(self.dtype), next_state(state)


def _exponential(self: torch.Tensor, lambd: float, state: torch.Tensor) -> tuple:
    """`x.exponential_(lambd)`: inversion, -log(1 - u) / lambd (1 - u is in (0, 1], so the draw is finite)."""
    values = -torch.log1p(-uniform_values(list(self.shape), state)) / lambd
    return values.to(self.dtype), next_state(state)


def _geometric(self: torch.Tensor, p: float, state: torch.Tensor) -> tuple:
    """`x.geometric_(p)`: the number of trials up to the first success (1, 2, ...), by inversion:
    floor(log(1 - u) / log(1 - p)) + 1, so that P(X > k) = (1 - p)**k."""
    log_miss = torch.log1p(-torch.full((), p, dtype=torch.float32))
    values = torch.floor(torch.log1p(-uniform_values(list(self.shape), state)) / log_miss) + 1.0
    return values.to(self.dtype), next_state(state)


def _cauchy(self: torch.Tensor, median: float, sigma: float, state: torch.Tensor) -> tuple:
    """`x.cauchy_(median, sigma)`: inversion, median + sigma * tan(pi * (u - 1/2))."""
    values = median + sigma * torch.tan(math.pi * (uniform_values(list(self.shape), state) - 0.5))
    return values.to(self.dtype), next_state(state)


def _bernoulli(self: torch.Tensor, state: torch.Tensor) -> tuple:
    """`torch.bernoulli(p)`: 1 where u < p, with p the tensor itself."""
    drawn = uniform_values(list(self.shape), state).to(self.dtype) < self
    return drawn.to(self.dtype), next_state(state)


def _bernoulli_p(self: torch.Tensor, p: float, state: torch.Tensor) -> tuple:
    """`torch.bernoulli(x, p)` / `x.bernoulli_(p)`: ones with probability p, shaped and typed like x."""
    drawn = uniform_values(list(self.shape), state) < p
    return drawn.to(self.dtype), next_state(state)


def _bernoulli_tensor(self: torch.Tensor, p: torch.Tensor, state: torch.Tensor) -> tuple:
    """`x.bernoulli_(p)` with a tensor p broadcast to x's shape: ones where u < p, typed like x."""
    drawn = uniform_values(list(self.shape), state).to(p.dtype) < p
    return drawn.to(self.dtype), next_state(state)


def _switched(input: torch.Tensor, dropped: torch.Tensor, train: bool) -> torch.Tensor:
    """The dropout's result where `train`, else the input. `train` is True, or a model's run-time bool,
    which reaches a segment as an int (lower.py); the draw happens (and the state advances) either way,
    so how far the stream has gone does not depend on the flag's value at a point."""
    if isinstance(train, bool):
        return dropped if train else input
    return torch.where(torch.full((), train, dtype=torch.int32) != 0, dropped, input)


def _dropped(input: torch.Tensor, mask_size: list, p: float, state: torch.Tensor) -> torch.Tensor:
    """Dropout as PyTorch computes it, `input * mask / (1 - p)` with a mask that keeps an element with
    probability 1 - p (u >= p); a product, so a dropped NaN or inf stays NaN as in PyTorch. The scale is
    a tensor: at p = 1 it is infinite (a Python division would raise), but then nothing is kept."""
    kept = uniform_values(mask_size, state) >= p
    scale = torch.reciprocal(torch.full((), 1.0 - p, dtype=torch.float32))
    return input * torch.where(kept, scale, 0.0).to(input.dtype)


# SELU's alpha * scale: the value alpha dropout sets a dropped element to is -_SELU_FLOOR (PyTorch's constant).
_SELU_FLOOR = 1.7580993408473766


def _alpha_dropped(input: torch.Tensor, mask_size: list, p: float, state: torch.Tensor) -> torch.Tensor:
    """Alpha dropout as PyTorch computes it (ATen's `_dropout_impl`): with `keep` the same mask as
    dropout's and a = 1 / sqrt((alpha**2 p + 1)(1 - p)), `input * keep * a + (keep - 1) alpha a + alpha a p`,
    which keeps SELU's zero mean and unit variance. At p = 0 it is the input itself; at p = 1, where a is
    infinite, PyTorch returns `input * 0`, and so does this."""
    keep = (uniform_values(mask_size, state) >= p).to(torch.float32)
    rate = torch.full((), p, dtype=torch.float32)
    scale = torch.rsqrt((_SELU_FLOOR * _SELU_FLOOR * rate + 1.0) * (1.0 - rate))
    shift = (keep - 1.0) * (_SELU_FLOOR * scale) + _SELU_FLOOR * scale * rate
    dropped = input * (keep * scale).to(input.dtype) + shift.to(input.dtype)
    return torch.where(rate >= 1.0, input * 0.0, dropped)


def _channels(input: torch.Tensor) -> list:
    """The mask size of a feature dropout: whole channels (dims 0 and 1) at once."""
    return list(input.shape[:2]) + [1] * (input.dim() - 2)


def _dropout(input: torch.Tensor, p: float, state: torch.Tensor, train: bool = True) -> tuple:
    """`F.dropout(x, p, training)`: zero with probability p, the rest scaled by 1 / (1 - p)."""
    return _switched(input, _dropped(input, list(input.shape), p, state), train), next_state(state)


def _feature_dropout(input: torch.Tensor, p: float, state: torch.Tensor, train: bool = True) -> tuple:
    """`F.dropout2d` / `dropout1d` / `dropout3d`: whole channels (dims 0 and 1) at once."""
    return _switched(input, _dropped(input, _channels(input), p, state), train), next_state(state)


def _alpha_dropout(input: torch.Tensor, p: float, state: torch.Tensor, train: bool = True) -> tuple:
    """`F.alpha_dropout(x, p, training)` (`nn.AlphaDropout`)."""
    return _switched(input, _alpha_dropped(input, list(input.shape), p, state), train), next_state(state)


def _feature_alpha_dropout(input: torch.Tensor, p: float, state: torch.Tensor, train: bool = True) -> tuple:
    """`F.feature_alpha_dropout(x, p, training)`: alpha dropout of whole channels."""
    return _switched(input, _alpha_dropped(input, _channels(input), p, state), train), next_state(state)


# A fragment: padded_rnn.py defines other dycl:: ops, and a namespace has one DEF library at most.
_LIBRARY = torch.library.Library("dycl", "FRAGMENT")
# (schema, function) of each op. The state is the last tensor argument and the last result of every op;
# a dropout's run-time `train` flag is a keyword after it.
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
    (f"randint_like(Tensor self, SymInt high, Tensor state, ScalarType? dtype=None) {_DRAWN}", _randint_like),
    (
        f"randint_like_low(Tensor self, SymInt low, SymInt high, Tensor state, ScalarType? dtype=None) {_DRAWN}",
        _randint_like_low,
    ),
    (f"random_between(Tensor self, SymInt low, SymInt high, Tensor state) {_DRAWN}", _random_between),
    (f"normal_from_float(Scalar mean, Tensor std, Tensor state) {_DRAWN}", _normal_from_float),
    (f"normal_sized(Scalar mean, Scalar std, {_SIZED}) {_DRAWN}", _normal_sized),
    (f"normal_shaped(Tensor self, Scalar mean, Scalar std, Tensor state) {_DRAWN}", _normal_shaped),
    (f"log_normal(Tensor self, Scalar mean, Scalar std, Tensor state) {_DRAWN}", _log_normal),
    (f"exponential(Tensor self, Scalar lambd, Tensor state) {_DRAWN}", _exponential),
    (f"geometric(Tensor self, Scalar p, Tensor state) {_DRAWN}", _geometric),
    (f"cauchy(Tensor self, Scalar median, Scalar sigma, Tensor state) {_DRAWN}", _cauchy),
    (f"bernoulli(Tensor self, Tensor state) {_DRAWN}", _bernoulli),
    (f"bernoulli_p(Tensor self, Scalar p, Tensor state) {_DRAWN}", _bernoulli_p),
    (f"bernoulli_tensor(Tensor self, Tensor p, Tensor state) {_DRAWN}", _bernoulli_tensor),
    (f"dropout(Tensor input, Scalar p, Tensor state, *, Scalar train=True) {_DRAWN}", _dropout),
    (f"feature_dropout(Tensor input, Scalar p, Tensor state, *, Scalar train=True) {_DRAWN}", _feature_dropout),
    (f"alpha_dropout(Tensor input, Scalar p, Tensor state, *, Scalar train=True) {_DRAWN}", _alpha_dropout),
    (
        f"feature_alpha_dropout(Tensor input, Scalar p, Tensor state, *, Scalar train=True) {_DRAWN}",
        _feature_alpha_dropout,
    ),
]
for _schema, _function in _OPS:
    _LIBRARY.define(_schema)
    _LIBRARY.impl(_schema.split("(")[0], _function, "CompositeImplicitAutograd")

__all__ = ["random_words", "uniform_values", "normal_values", "unit_floats", "next_state"]
