"""What the exported code's processor can do, where the form of an op depends on it
(`decompositions`, `winograd`).

Some forms of an op that IREE runs well with one instruction set it runs badly with another
(README, performance): IREE 3.13's direct channels-last convolution of many channels is slow with
AVX2 or NEON, and with AVX-512 on an Intel Xeon (Sapphire Rapids) too, where Winograd and im2col +
matmul in the exporter's register tiles run ResNet-18 2.8x faster. The form follows the target the
export is for (`exporting_for`, set by `pipeline.export` from its first target): `llvm-cpu`
compiles for this machine's CPU (`--iree-llvmcpu-target-cpu=host`), whose AVX2 and AVX-512 set the
matmul rule (`register_tile_rule`, `data_tiling`); `llvm-cpu:TRIPLE` compiles for a generic CPU of
that triple; GPU targets keep the convolution for IREE's GPU code generation.

Example:
    >>> isinstance(has_avx512(), bool)
    True
    >>> with exporting_for("llvm-cpu:aarch64-linux-gnu"):
    ...     direct_convolutions_fast()
    False
    >>> has_avx2() or not has_avx512()  # a CPU with AVX-512 has AVX2
    True
    >>> with exporting_for("vulkan"):
    ...     direct_convolutions_fast()
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

    True for GPU targets (whose convolutions IREE's GPU code generation handles; not measured here);
    False for every CPU target, which then takes im2col or Winograd's form for large convolutions:
    IREE 3.13 tiles a direct convolution of many channels badly for AVX2 (4 pixels x 4 channels)
    and NEON (2 x 2), and with AVX-512 on an Intel Xeon it ran ResNet's layer3 and layer4 3x3
    convolutions at 63 and 41 GFLOP/s where Winograd in the wide register tiles runs them at 242 and
    171 (README, performance, "AVX-512 on an Intel Xeon"). (On an AMD Zen 4 IREE's direct
    convolution had measured faster than im2col; Winograd was not measured there.)
    """
    return not _TARGET.get().startswith("llvm-cpu")


def register_tile_rule() -> bool:
    """Whether the target being exported compiles with `data_tiling`'s register-tile rule: this
    machine's x86 CPU with AVX2, the wide tiles with AVX-512 (`compile.target_flags`)."""
    return _TARGET.get() == "llvm-cpu" and has_avx2()


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
