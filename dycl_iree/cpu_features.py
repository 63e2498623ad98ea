"""What the exported code's processor can do, where the form of an op depends on it
(`decompositions`, `winograd`).

Some forms of an op that IREE runs well with one instruction set it runs badly with another
(README, performance): IREE 3.13's direct channels-last convolution is fast with AVX-512 and slow
with AVX2 or NEON. The form follows the target the export is for (`exporting_for`, set by
`pipeline.export` from its first target): `llvm-cpu` compiles for this machine's CPU
(`--iree-llvmcpu-target-cpu=host`), so its AVX-512 decides; `llvm-cpu:TRIPLE` compiles for a
generic CPU of that triple (no AVX-512 on x86, NEON on aarch64); GPU targets keep the convolution
for IREE's GPU code generation.

Example:
    >>> isinstance(has_avx512(), bool)
    True
    >>> with exporting_for("llvm-cpu:aarch64-linux-gnu"):
    ...     direct_convolutions_fast()
    False
    >>> has_avx2() or not has_avx512()  # a CPU with AVX-512 has AVX2
    True
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import platform
from collections.abc import Iterator

_TARGET: contextvars.ContextVar[str] = contextvars.ContextVar("dycl_iree_target", default="llvm-cpu")


@contextlib.contextmanager
def exporting_for(target: str) -> Iterator[None]:
    """Within this block, forms are chosen for `target` (a `compile.TARGETS` name or `llvm-cpu:TRIPLE`)."""
    token = _TARGET.set(target)
    try:
        yield
    finally:
        _TARGET.reset(token)


def direct_convolutions_fast() -> bool:
    """Whether IREE's direct convolution is the form to keep for the target being exported.

    True for this machine's CPU with AVX-512 and for GPU targets (whose convolutions IREE's GPU code
    generation handles; not measured here); False for a CPU without AVX-512 and for every cross
    build to another triple (`--iree-llvmcpu-target-cpu=generic`: no AVX-512 on x86, and on aarch64
    IREE tiles a direct convolution as it does for AVX2), which then take im2col or Winograd's
    form for large convolutions.
    """
    target = _TARGET.get()
    if target == "llvm-cpu":
        return has_avx512()
    return not target.startswith("llvm-cpu:")


def avx2_matmul_rule() -> bool:
    """Whether the target being exported compiles with `data_tiling`'s AVX2 rule: this machine's
    CPU, with AVX2 and without AVX-512 (`compile.target_flags`)."""
    return _TARGET.get() == "llvm-cpu" and not has_avx512() and has_avx2()


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
