"""`benchmarks/layer_profile.py`, run on a small ResNet-18 (width 8, 64x64): both profilers are read,
every kernel is named and timed, and the report sets the two sides next to each other."""

from __future__ import annotations

import pytest

from models.imagenet import resnet18
from tests.conftest import benchmark_script


@pytest.fixture(scope="module")
def script():
    return benchmark_script("layer_profile")


def test_dispatch_names_give_their_kind(script):
    kinds = {
        "dispatch_5_matmul_12996x96x16_f32": "matmul",
        "dispatch_56_matmul_like_49x60x16x160_f32": "matmul_like",
        "dispatch_4_slow_memcpy": "slow_memcpy",
        "dispatch_1_conv_114x114x32x3x3x3_f32": "conv",
        "dispatch_69_reduction_1280x49_f32": "reduction",
        "dispatch_3_elementwise_3136x64_i1xf32": "elementwise",
        "seg1/dispatch_206_matmul_1x1000x16384_f32": "matmul",
        "__builtin_splat_i64": "__builtin_splat_i64",
    }
    assert {name: script.dispatch_kind(name) for name in kinds} == kinds


def test_both_sides_are_profiled_and_reported(script, tmp_path):
    model, (example,) = resnet18(width=8, resolution=64)
    profile = script.profile_model(model.eval(), example, calls=3, work=tmp_path)
    # Every dispatch of the bundle's main ran and took time; the convolutions are matmuls or
    # IREE's own convolutions (the stem), as the exporter writes them.
    assert profile.iree and all(ms > 0 for ms in profile.iree.values())
    assert all(name.startswith("seg0/dispatch_") for name in profile.iree)
    assert {"matmul", "conv"} & set(profile.iree_kinds())
    # ONNX Runtime's nodes: ResNet-18's 20 convolutions (BN folded, ReLU fused) and its classifier.
    ops = [op for op, _ in profile.onnxruntime.values()]
    assert sum(op in ("Conv", "FusedConv") for op in ops) == 20 and "Gemm" in ops
    assert profile.iree_wall > 0 and profile.onnxruntime_wall > 0
    text = script.render("small", profile, top=4)
    assert text.startswith("## small") and "| IREE dispatch kind | ms | ONNX Runtime op | ms |" in text
    assert "| IREE dispatch (top 4) | ms | ONNX Runtime node (top 4) | ms |" in text
    costliest = max(profile.iree, key=profile.iree.get)
    assert f"| {costliest} | {profile.iree[costliest]:.3f} |" in text
