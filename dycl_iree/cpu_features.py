"""What this machine's CPU can do, where the form of an op depends on it (`decompositions`).

`llvm-cpu` compiles for this machine's CPU (`--iree-llvmcpu-target-cpu=host`), and some forms of an
op that IREE runs well with one instruction set it runs badly with another (README, performance):
those choices ask here.

Example:
    >>> isinstance(has_avx512(), bool)
    True
    >>> has_avx2() or not has_avx512()  # a CPU with AVX-512 has AVX2
    True
"""

from __future__ import annotations

import functools
import platform


@functools.cache
def has_avx512() -> bool:
    """Whether this machine's CPU has AVX-512 (`avx512f` in /proc/cpuinfo); False off x86."""
    return "avx512f" in _x86_flags()


@functools.cache
def has_avx2() -> bool:
    """Whether this machine's CPU has AVX2 and FMA (every x86 CPU with AVX-512 has them too); False
    off x86."""
    return {"avx2", "fma"} <= _x86_flags()


def _x86_flags() -> frozenset[str]:
    """The CPU's flags from /proc/cpuinfo; none off x86 or where it cannot be read."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return frozenset()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[-1].split())
    except OSError:
        pass
    return frozenset()
