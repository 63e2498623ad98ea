"""`benchmarks/compile_flags.py`, run on a small ResNet-18 (width 8, 64x64) with one extra flag.

The script recompiles the exporter's own module per variant; these check that each variant is the
exported model with only its flags added (its bundle's manifest says so, its outputs match eager by
the benchmark's rule), that the AVX2 mode restores what it patches, and that the timing alternates.
"""

from __future__ import annotations

import json

import pytest
import torch

from dycl_iree import compile as compiling
from dycl_iree import cpu_features, data_tiling
from dycl_iree.bench.outputs import Float64Reference
from models.imagenet import resnet18
from tests.conftest import benchmark_script


@pytest.fixture(scope="module")
def script():
    return benchmark_script("compile_flags")


def test_variants_are_the_exported_module_with_their_flags(script, tmp_path):
    model, example = resnet18(width=8, resolution=64)
    named = ["--iree-opt-level=O2", "--iree-opt-generalize-matmul=false"]
    variants = {script.BASELINE: [], "O2, matmuls kept named": named, "bad": ["--iree-no-such-flag=1"]}
    built = script.export_variants(model.eval(), example, None, variants, tmp_path)
    assert list(built) == list(variants)
    assert "no-such-flag" in built.pop("bad")["error"]  # a flag iree-compile rejects fails only its variant
    with torch.no_grad():
        expected = [model(*example)]
    for name, item in built.items():
        worst, reason = script.check(item["run"], [example], expected, Float64Reference(model))
        assert reason is None and worst < 1e-4, (name, reason, worst)
        assert item["compile_wall"] > 0
    saved = sorted(tmp_path.glob("variant-*.dycl"))
    manifests = [json.loads((path / "manifest.json").read_text()) for path in saved]
    assert [manifest["targets"]["llvm-cpu"]["flags"] for manifest in manifests] == [
        compiling.target_flags("llvm-cpu"),
        compiling.target_flags("llvm-cpu") + named,
    ]
    # The control: the baseline's vmfb, byte for byte, from files of its own, loaded and right.
    script.add_control(built, tmp_path)
    control, baseline = built[script.CONTROL], built[script.BASELINE]
    vmfbs = [item["path"] / "llvm-cpu.vmfb" for item in (baseline, control)]
    assert vmfbs[0] != vmfbs[1] and vmfbs[0].read_bytes() == vmfbs[1].read_bytes()
    assert control["run"] is not baseline["run"] and control["compile_wall"] is None
    worst, reason = script.check(control["run"], [example], expected, Float64Reference(model))
    assert reason is None and worst < 1e-4, (reason, worst)
    times = script.time_alternating({name: item["run"] for name, item in built.items()}, example, rounds=2)
    assert {name: len(series) for name, series in times.items()} == {name: 2 for name in built}


def test_avx2_mode_patches_and_restores(script):
    flags, probe = list(compiling.TARGETS["llvm-cpu"]), cpu_features.has_avx512
    with script.exporting_for("znver3"):
        assert "--iree-llvmcpu-target-cpu=znver3" in compiling.target_flags("llvm-cpu")
        # the AVX2 rule of data tiling and register tiles, not AVX-512's
        flags_for_avx2 = compiling.target_flags("llvm-cpu")
        assert all(flag in flags_for_avx2 for flag in data_tiling.compile_flags((compiling.CHANNELS_LAST,)))
        wide = data_tiling.compile_flags((compiling.CHANNELS_LAST,), wide=True)
        assert not any(flag in flags_for_avx2 for flag in wide if flag.startswith(data_tiling.PIPELINE_FLAG))
    assert compiling.TARGETS["llvm-cpu"] == flags and cpu_features.has_avx512 is probe
    assert script._parse_variant("O2=--iree-opt-level=O2,--x=1") == ("O2", ["--iree-opt-level=O2", "--x=1"])
