"""Compile: one MLIR module to one vmfb per target with `iree.compiler`, cached by content.

The cache key is the module's bytecode, the flags, the compiler version and, for code built for
this machine's CPU (`--iree-llvmcpu-target-cpu=host`), which CPU that resolved to, so a cache shared
between machines never hands out code for another CPU. A re-export of an unchanged model (the test
suite does this a lot) costs a hash instead of a compile. Where the cache lives, its size bound and
how to clear it: `dycl_iree/cache.py`.

Example:
    >>> flags = target_flags("llvm-cpu")
    >>> "--iree-hal-target-device=local" in flags
    True
    >>> "--iree-llvmcpu-number-of-threads=4" in target_flags("llvm-cpu", cpu_threads=4)
    True
    >>> target_flags("cuda:sm_86")
    ['--iree-hal-target-device=cuda', '--iree-cuda-target=sm_86']
"""

from __future__ import annotations

import functools
import hashlib
import platform
import re
from pathlib import Path

from . import cache
from .errors import CompileError, DyclError

# Flags per target, from ENVIRONMENT.md. "llvm-cpu" compiles for this machine's CPU;
# "llvm-cpu:TRIPLE" cross-compiles (e.g. llvm-cpu:aarch64-linux-gnu); "cuda:sm_XX" picks the GPU
# architecture (CUDA_ARCHITECTURE when not given).
# Convolutions run channels-last: IREE's preprocessing converts each NCHW convolution to NHWC, and
# the transposes between neighbouring convolutions cancel in global optimization. IREE's direct NHWC
# convolution beats both its im2col + matmul and the per-tap copies + matmul this exporter used
# before (two 3x3 convolutions, 32 channels at 16x16: 78 us against 107 and 111; deepest path of
# WRN-SDN 1.86 -> 1.45 ms). Filters reach IREE pre-transposed (`lower._constant_filter`) and
# depthwise convolutions as channels-last taps (`decompositions.depthwise_convolution_as_taps`).
# That holds where the CPU has AVX-512 (or is not x86). Without AVX-512, IREE 3.13 tiles a direct
# convolution of 8 or more input channels as 4 pixels x 4 channels, 2-16 GFLOP/s, and no flag changes
# that choice (`--iree-llvmcpu-max-allowed-number-of-native-vectors`, `--iree-llvmcpu-target-vector-
# width-in-bytes` tried); `--iree-global-opt-use-im2col-for-convs` (with data tiling and ukernels)
# makes those fast, but converts every convolution and made SDN-ResNet-56 1.7x slower (code for
# znver3: 3.4 -> 5.8 ms). So the exporter picks im2col per shape instead (`decompositions.
# _im2col_wins`), and the flags stay the same for every x86 CPU.
#
# Command buffers are recorded at each call, not memoized as indirect (binding-table) command
# buffers: IREE 3.13's CPU drivers (local-sync and local-task alike) replay some memoized ones
# wrongly. `Halting` of tests/test_host_scalars.py, whose `main` reads its int input and then
# `float(x.abs().max())`, returned 0.0 for `torch.tensor(magnitude) * x.sum()`; every IR stage
# (flow, stream, vm) is right, and with `--iree-hal-indirect-command-buffers=false` (or
# `--iree-hal-memoization=false`) the result is right (README's traps).
_CPU = [
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-preprocessing-pass-pipeline=builtin.module(util.func(iree-preprocessing-convert-conv-to-channels-last))",
    "--iree-hal-indirect-command-buffers=false",
]
# Vulkan: IREE's default target (the vp_android_baseline_2022 profile) stores only 32-bit words, so
# an i1/i8/i16 tensor is written as whole words; a tensor whose byte size is not a multiple of 4 then
# loses its last elements on a device that bounds-checks buffer accesses (lavapipe: a segment's
# 0-d bool, the decision the Python host reads, comes back false; 5xi8 loses element 4). The
# profile's features plus 8- and 16-bit storage (Vulkan 1.2 core, on desktop GPUs and lavapipe)
# write those tensors byte by byte.
_VULKAN_FEATURES = [
    "spirv:v1.3",
    "cap:Shader",
    "cap:Int8",
    "cap:Int16",
    "cap:StorageBuffer8BitAccess",
    "cap:StorageBuffer16BitAccess",
    "ext:SPV_KHR_8bit_storage",
    "ext:SPV_KHR_16bit_storage",
]
THREADS_FLAG = "--iree-llvmcpu-number-of-threads="
TARGETS = {
    "llvm-cpu": _CPU + ["--iree-llvmcpu-target-cpu=host"],
    "cuda": ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"],  # CUDA_ARCHITECTURE
    "vulkan": ["--iree-hal-target-device=vulkan", "--iree-vulkan-target-features=" + ",".join(_VULKAN_FEATURES)],
}
CUDA_FLAG = "--iree-cuda-target="
CUDA_ARCHITECTURE = "sm_80"
# NVIDIA architectures iree-base-compiler 3.13 has no GPU target for: it fails in the middle of the
# compile with "missing GPU target in #hal.executable.target" (checked one by one on a 4-element
# add; sm_60-sm_89 and sm_120/sm_121 compile). The vmfb embeds PTX, which the CUDA driver compiles
# for the GPU it runs on, so sm_80 or sm_89 code also runs on Hopper and Blackwell.
CUDA_ARCHITECTURES_REJECTED = frozenset(
    ["sm_35", "sm_37", "sm_50", "sm_52", "sm_53", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_101", "sm_103", "sm_120a"]
)
# Which runtime drivers can run a vmfb of each target.
TARGET_DRIVERS = {
    "llvm-cpu": ["local-sync", "local-task"],
    "cuda": ["cuda"],
    "vulkan": ["vulkan"],
}


def target_flags(target: str, cpu_threads: int = 1) -> list[str]:
    """iree-compile flags for a target name; CPU code is tiled for `cpu_threads` threads.

    IREE splits every CPU dispatch into workgroups for the threads it expects at run time (8 unless
    told), and narrows its vectors to make enough of them: SkipNet-RNN's 16-channel global average
    pool ran as 8 workgroups of 2-wide vectors (5.0 us; one 16-wide workgroup: 3.2 us), and every
    convolution as 8 workgroups. `local-sync`, the runtime's default driver, runs on one thread,
    so 1 is the default (up to 15% faster per zoo model); a bundle for `local-task` should say how many
    workers it will have.
    """
    if isinstance(cpu_threads, bool) or not isinstance(cpu_threads, int) or cpu_threads < 1:
        raise DyclError(f"cpu_threads must be a positive int, not {cpu_threads!r}")
    if target.startswith("llvm-cpu:"):
        triple = target.split(":", 1)[1]
        flags = _CPU + [f"--iree-llvmcpu-target-triple={triple}", "--iree-llvmcpu-target-cpu=generic"]
    elif target.startswith("cuda:"):
        flags = [TARGETS["cuda"][0], CUDA_FLAG + _cuda_architecture(target.split(":", 1)[1])]
    elif target in TARGETS:
        flags = list(TARGETS[target])
    else:
        known = ", ".join([*TARGETS, "llvm-cpu:TRIPLE", "cuda:sm_XX"])
        raise DyclError(f"unknown target {target!r}; known targets: {known}")
    return flags + [f"{THREADS_FLAG}{cpu_threads}"] if flags[: len(_CPU)] == _CPU else flags


def cpu_threads_of(flags: list[str]) -> int | None:
    """The thread count a CPU vmfb's code was split for, from its flags (None for GPU targets).

    >>> cpu_threads_of(target_flags("llvm-cpu", cpu_threads=2))
    2
    """
    counts = [int(flag[len(THREADS_FLAG) :]) for flag in flags if flag.startswith(THREADS_FLAG)]
    return counts[0] if counts else None


def _cuda_architecture(architecture: str) -> str:
    """Check a CUDA architecture name before any compile: iree-compile's own failure comes late and
    does not say that the architecture is the problem."""
    if not re.fullmatch(r"sm_\d+a?", architecture):
        raise DyclError(f"target 'cuda:{architecture}': unknown CUDA architecture {architecture!r}; write it as sm_XX")
    if architecture in CUDA_ARCHITECTURES_REJECTED:
        raise DyclError(
            f"target 'cuda:{architecture}': iree-base-compiler 3.13 cannot compile for {architecture} "
            '("missing GPU target in #hal.executable.target"); compile for sm_80 (the default) or sm_89: '
            "the vmfb carries PTX, which the CUDA driver compiles for newer GPUs (Hopper included) when it loads it"
        )
    return architecture


def cuda_architecture_of(flags: list[str]) -> str | None:
    """The GPU architecture a CUDA vmfb was compiled for, from its flags (None for other targets).

    >>> cuda_architecture_of(target_flags("cuda"))
    'sm_80'
    """
    architectures = [flag[len(CUDA_FLAG) :] for flag in flags if flag.startswith(CUDA_FLAG)]
    return architectures[0] if architectures else None


def cache_dir() -> Path:
    """The cache folder: `$DYCL_IREE_CACHE`, `$XDG_CACHE_HOME/dycl_iree` or `~/.cache/dycl_iree`."""
    return cache.directory()


HOST_CPU_FLAG = "--iree-llvmcpu-target-cpu=host"


@functools.cache
def host_cpu() -> str:
    """What `--iree-llvmcpu-target-cpu=host` resolves to on this machine: LLVM picks the CPU model and its
    features from cpuid, so the key holds the same facts (vendor, family, model, feature flags).

    >>> host_cpu().startswith(platform.machine())
    True
    """
    facts = {}
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("vendor_id", "cpu family", "model", "model name", "flags", "Features", "CPU part"):
                    facts.setdefault(key, value.strip())
                if not line.strip() and facts:
                    break  # the first processor's block is enough
    except OSError:
        facts["processor"] = platform.processor()
    features = facts.pop("flags", None) or facts.pop("Features", "")
    digest = hashlib.sha256(" ".join(sorted(features.split())).encode()).hexdigest()[:16]
    return " ".join([platform.machine(), *(f"{k}={v}" for k, v in sorted(facts.items())), f"features={digest}"])


def cache_key_flags(flags: list[str]) -> list[str]:
    """The flags as the cache key sees them: `host` replaced by the CPU it means here."""
    return [f"--iree-llvmcpu-target-cpu=host[{host_cpu()}]" if flag == HOST_CPU_FLAG else flag for flag in flags]


def compile_module(bytecode: bytes, target: str, cpu_threads: int = 1, use_cache: bool = True) -> bytes:
    """Compile torch-dialect MLIR bytecode for `target`; reuse a cached vmfb when there is one."""
    import iree.compiler as iree_compiler

    flags = target_flags(target, cpu_threads)
    version = getattr(iree_compiler, "__version__", "") or _compiler_version()
    key = hashlib.sha256()
    key.update(bytecode)
    key.update("\0".join(cache_key_flags(flags)).encode())
    key.update(version.encode())
    name = f"{key.hexdigest()}.vmfb"
    use_cache = use_cache and cache.enabled()
    if use_cache:
        cached = cache.read(name)
        if cached is not None:
            return cached
    try:
        vmfb = iree_compiler.compile_str(bytecode, input_type="torch", extra_args=flags)
    except Exception as error:  # iree.compiler raises CompilerToolError with the tool's stderr
        hint = ""
        if target.startswith("cuda") and "missing GPU target" in str(error):
            hint = f"\n(iree-compile has no GPU target for that architecture; the default {CUDA_ARCHITECTURE} has one)"
        raise CompileError(f"iree-compile failed for target {target}:\n{_trim(str(error))}{hint}") from error
    if use_cache:
        cache.write(name, vmfb)
    return vmfb


def _compiler_version() -> str:
    try:
        from importlib.metadata import version

        return version("iree-base-compiler")
    except Exception:
        return "unknown"


def _trim(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else text[:limit] + "\n... (truncated)"
