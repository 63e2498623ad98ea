"""The random generator's state of a bundle whose model draws random numbers (numpy only, never torch).

Such a bundle's `main` (and its Python host) takes the state as one more input after the model's
and returns the next state as one more result (manifest `random_state: true`, main_abi 3). The
state is two int32 words: the seed's word and a draw counter that every random op a run executes
increments (dycl_iree/random_ops.py says how a draw turns them into numbers). Two seeds give
different streams; a seed's stream repeats after 2**32 draws. Seeds are taken modulo 2**32. As one
number (`state_number`, what `Runner.random_state` returns), a state is `seed_word * 2**32 + counter`.

Example:
    >>> initial_state(7).tolist(), state_number(initial_state(7))
    ([7, 0], 30064771072)
"""

from __future__ import annotations

import numpy as np

DEFAULT_SEED = 0
_WORD = 1 << 32


def _signed_word(value: int) -> int:
    value %= _WORD
    return value - _WORD if value >= 1 << 31 else value


def initial_state(seed: int = DEFAULT_SEED) -> np.ndarray:
    """The state (an int32 array of 2) that `seed` starts the stream at."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"a seed is an int, not {type(seed).__name__}")
    return np.asarray([_signed_word(int(seed)), 0], dtype=np.int32)


def state_number(state: np.ndarray) -> int:
    """A state as one int in [0, 2**64): seed word * 2**32 + draw counter."""
    seed_word, counter = (int(word) % _WORD for word in np.asarray(state).reshape(2))
    return seed_word * _WORD + counter


def state_array(number: int) -> np.ndarray:
    """The state that `state_number` gave `number` for."""
    if isinstance(number, bool) or not isinstance(number, (int, np.integer)) or not 0 <= number < _WORD * _WORD:
        raise ValueError(f"a random state is an int in [0, 2**64), not {number!r}")
    return np.asarray([_signed_word(int(number) // _WORD), _signed_word(int(number))], dtype=np.int32)


__all__ = ["initial_state", "state_number", "state_array", "DEFAULT_SEED"]
