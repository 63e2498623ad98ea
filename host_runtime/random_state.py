"""The random generator's state of a bundle whose model draws random numbers (numpy only, never torch).

Such a bundle's `main` (and its Python host) takes the state as one more input after the model's
and returns the next state as one more result (manifest `random_state: true`, main_abi 3). The
state is a draw counter: the k-th random op a run executes uses `state + k` (dycl_iree/random_ops.py
says how a draw turns it into numbers). A seed starts the counter at `seed * 2**32`, so two seeds
give disjoint streams for 2**32 draws; seeds are taken modulo 2**32.

Example:
    >>> int(initial_state(1))
    4294967296
"""

from __future__ import annotations

import numpy as np

DEFAULT_SEED = 0
_SEEDS = 1 << 32


def initial_state(seed: int = DEFAULT_SEED) -> np.ndarray:
    """The 0-d int64 state that `seed` starts the stream at."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"a seed is an int, not {type(seed).__name__}")
    counter = (int(seed) % _SEEDS) * _SEEDS
    if counter >= 1 << 63:  # the same 64 bits as a signed int64
        counter -= 1 << 64
    return np.asarray(counter, dtype=np.int64)


__all__ = ["initial_state", "DEFAULT_SEED"]
