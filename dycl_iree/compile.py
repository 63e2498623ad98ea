"""Compile: one MLIR module to one vmfb per target with `iree.compiler`, cached by content.

The cache key is the module's bytecode, the flags and the compiler version, so a re-export of an
unchanged model (the test suite does this a lot) costs a hash instead of a compile. The cache lives
in `$DYCL_IREE_CACHE` or `~/.cache/dycl_iree`.

Example:
    >>> flags = target_flags("llvm-cpu")
    >>> "--iree-hal-target-device=local" in flags
    True
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from .errors import CompileError, DyclError

# Flags per target, from ENVIRONMENT.md. "llvm-cpu" compiles for this machine's CPU;
# "llvm-cpu:TRIPLE" cross-compiles (e.g. llvm-cpu:aarch64-linux-gnu).
# im2col turns convolutions into matmuls, which IREE's CPU backend tiles far better than the
# direct NCHW convolutions torch-mlir produces: compiled host on the zoo, local-sync, batch 1
# (median of 7 interleaved rounds): SkipNet-FF 5.56 -> 2.61 ms, MobileNet-SDN 0.49 -> 0.38,
# RaNet 0.68 -> 0.57, SkipNet-RNN 2.65 -> 2.27, WRN-SDN 2.46 -> 2.19; VGG-SDN 0.32 -> 0.36 and
# BlockDrop 2.43 -> 2.67 lose a little (see benchmarks/README.md).
_CPU = [
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-global-opt-use-im2col-for-convs",
]
TARGETS = {
    "llvm-cpu": _CPU + ["--iree-llvmcpu-target-cpu=host"],
    "cuda": ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"],
    "vulkan": ["--iree-hal-target-device=vulkan"],
}
# Which runtime drivers can run a vmfb of each target.
TARGET_DRIVERS = {
    "llvm-cpu": ["local-sync", "local-task"],
    "cuda": ["cuda"],
    "vulkan": ["vulkan"],
}


def target_flags(target: str) -> list[str]:
    """iree-compile flags for a target name."""
    if target.startswith("llvm-cpu:"):
        triple = target.split(":", 1)[1]
        return _CPU + [f"--iree-llvmcpu-target-triple={triple}", "--iree-llvmcpu-target-cpu=generic"]
    if target not in TARGETS:
        known = ", ".join([*TARGETS, "llvm-cpu:TRIPLE"])
        raise DyclError(f"unknown target {target!r}; known targets: {known}")
    return list(TARGETS[target])


def cache_dir() -> Path:
    return Path(os.environ.get("DYCL_IREE_CACHE", Path.home() / ".cache" / "dycl_iree"))


def compile_module(bytecode: bytes, target: str) -> bytes:
    """Compile torch-dialect MLIR bytecode for `target`; reuse a cached vmfb when there is one."""
    import iree.compiler as iree_compiler

    flags = target_flags(target)
    version = getattr(iree_compiler, "__version__", "") or _compiler_version()
    key = hashlib.sha256()
    key.update(bytecode)
    key.update("\0".join(flags).encode())
    key.update(version.encode())
    path = cache_dir() / f"{key.hexdigest()}.vmfb"
    if path.exists():
        return path.read_bytes()
    try:
        vmfb = iree_compiler.compile_str(bytecode, input_type="torch", extra_args=flags)
    except Exception as error:  # iree.compiler raises CompilerToolError with the tool's stderr
        raise CompileError(f"iree-compile failed for target {target}:\n{_trim(str(error))}") from error
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so that a concurrent reader never sees half a file.
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as handle:
        handle.write(vmfb)
    os.replace(handle.name, path)
    return vmfb


def _compiler_version() -> str:
    try:
        from importlib.metadata import version

        return version("iree-base-compiler")
    except Exception:
        return "unknown"


def _trim(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else text[:limit] + "\n... (truncated)"
