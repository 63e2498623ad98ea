"""The machine a benchmark ran on: package versions, thread budget and how busy it was.

Other work on the machine inflates and scatters latencies, worst for torch's OpenMP pool, whose
every parallel region waits for its slowest thread. So the load average is read when the benchmark
starts and ends, and both the report and the plot say so when the machine was already busy.

Example:
    >>> busy_note({"load average at start": "1.96", "cpus": "2"})
    'the machine was already busy (load 1.96 on 2 CPUs) when the benchmark started'
"""

from __future__ import annotations

import importlib.metadata
import os
import platform

PACKAGES = (
    "torch",
    "torch-mlir",
    "iree-base-compiler",
    "iree-base-runtime",
    "onnx",
    "onnxruntime",
    "numpy",
    "matplotlib",
)
"""The packages whose versions a report records."""

BUSY_LOAD = 0.5
"""A 1-minute load average at or above this when the benchmark starts counts as a busy machine."""


def load_average() -> str:
    """The 1-minute load average, as text ("unknown" where the platform has none)."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "unknown"


def environment(threads: int) -> dict[str, str]:
    """Machine and package versions, so that two reports can be told apart."""
    found = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": str(os.cpu_count()),
        "threads": str(threads),
        "load average at start": load_average(),
    }
    for package in PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "missing"
    return found


def software_vulkan_device() -> str | None:
    """The name of IREE's Vulkan device when it is a CPU emulation (Mesa's lavapipe, SwiftShader),
    whose speed says nothing about a GPU; None when it is a real GPU or there is none."""
    try:
        import iree.runtime

        devices = iree.runtime.get_driver("vulkan").query_available_devices()
    except Exception:  # no Vulkan loader or driver: the vulkan candidates fail on their own
        return None
    names = [str(device.get("name", "")) for device in devices]
    return next((name for name in names if any(cpu in name.lower() for cpu in ("llvmpipe", "swiftshader"))), None)


def busy_note(environment: dict[str, str]) -> str | None:
    """A sentence saying the machine was busy at the start, or None when it was not (or unknown)."""
    try:
        load = float(environment.get("load average at start", "unknown"))
    except ValueError:
        return None
    if load < BUSY_LOAD:
        return None
    return (
        f"the machine was already busy (load {load:.2f} on {environment.get('cpus')} CPUs) "
        "when the benchmark started"
    )
