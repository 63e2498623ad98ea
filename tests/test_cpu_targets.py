"""Which llvm-cpu vmfb a bundle runs on which CPU, and the names vmfbs are stored under."""

from __future__ import annotations

from pathlib import Path

import pytest

from host_runtime.bundle_format import cpu_name, select_cpu_target, target_cpu, vmfb_file_name
from host_runtime.errors import BundleError

ROOT = Path("model.dycl")


def _manifest(*targets: str, cpu: str | None = None) -> dict:
    entries = {target: {"file": vmfb_file_name(target)} for target in targets}
    if cpu is not None and "llvm-cpu" in entries:
        entries["llvm-cpu"]["cpu"] = cpu
    return {"targets": entries}


def test_vmfb_names_have_no_colon() -> None:
    assert vmfb_file_name("llvm-cpu") == "llvm-cpu.vmfb"
    assert vmfb_file_name("llvm-cpu:aarch64-linux-gnu") == "llvm-cpu-aarch64-linux-gnu.vmfb"
    assert vmfb_file_name("cuda:sm_86") == "cuda-sm_86.vmfb"


def test_cpu_names_follow_the_triple() -> None:
    assert [cpu_name(name) for name in ("x86_64", "AMD64", "arm64", "aarch64")] == [
        "x86_64", "x86_64", "aarch64", "aarch64"]
    assert target_cpu("llvm-cpu:aarch64-linux-gnu", {}) == "aarch64"
    assert target_cpu("llvm-cpu", {"cpu": "x86_64"}) == "x86_64"
    assert target_cpu("llvm-cpu", {}) is None  # a bundle from before the exporter recorded it
    assert target_cpu("vulkan", {}) is None


@pytest.mark.parametrize(
    ("targets", "cpu", "machine", "chosen"),
    [
        (("llvm-cpu", "llvm-cpu:aarch64-linux-gnu"), None, "x86_64", "llvm-cpu"),
        (("llvm-cpu", "llvm-cpu:aarch64-linux-gnu"), None, "aarch64", "llvm-cpu:aarch64-linux-gnu"),
        (("llvm-cpu", "llvm-cpu:aarch64-linux-gnu"), "x86_64", "arm64", "llvm-cpu:aarch64-linux-gnu"),
        (("llvm-cpu", "llvm-cpu:x86_64-linux-gnu"), "x86_64", "x86_64", "llvm-cpu"),
        (("llvm-cpu:aarch64-linux-gnu", "llvm-cpu"), "aarch64", "aarch64", "llvm-cpu"),
        (("vulkan", "llvm-cpu:aarch64-linux-gnu"), None, "aarch64", "llvm-cpu:aarch64-linux-gnu"),
    ],
)
def test_the_vmfb_for_the_cpu_it_runs_on(targets: tuple, cpu: str | None, machine: str, chosen: str) -> None:
    assert select_cpu_target(ROOT, _manifest(*targets, cpu=cpu), machine) == chosen


def test_no_vmfb_for_this_cpu_is_a_bundle_error() -> None:
    with pytest.raises(BundleError) as error:
        select_cpu_target(ROOT, _manifest("llvm-cpu:aarch64-linux-gnu", "vulkan"), "x86_64")
    assert str(error.value) == (
        "model.dycl: no vmfb for this CPU (x86_64); the bundle has llvm-cpu:aarch64-linux-gnu (aarch64). "
        "Export it with --target llvm-cpu:x86_64-linux-gnu"
    )
    with pytest.raises(BundleError, match=r"the bundle has llvm-cpu \(x86_64\)"):
        select_cpu_target(ROOT, _manifest("llvm-cpu", cpu="x86_64"), "aarch64")
