"""How the IREE peers compile and run on this machine's CPU (shared by `iree-onnx`, the dycl_iree
peers and the micro-benchmark; not a peer itself)."""

from __future__ import annotations

# The CPU flags of ENVIRONMENT.md: compile for the machine the benchmark runs on.
IREE_CPU_FLAGS = (
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
)

_THREADS_SET: list[int] = []


def limit_iree_threads(threads: int) -> None:
    """Cap local-task's worker count. The flag is process-global and only read when a driver is
    first created, so it is parsed once, before any peer creates one."""
    import iree.runtime

    if not _THREADS_SET:
        iree.runtime.flags.parse_flags(f"--task_topology_max_group_count={threads}")
        _THREADS_SET.append(threads)
