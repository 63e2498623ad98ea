"""Which matmuls IREE data-tiles (`dycl_iree.data_tiling`): on an AVX-512 CPU only those with few rows
and a large weight, and the model still matches PyTorch; elsewhere none.

Which dispatches IREE made is read from `--compile-to=executable-sources`: a data-tiled matmul has
`encode` dispatches that pack its operands. The CPU probe is set by the tests, so both sides are
checked on any x86 machine.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import iree.compiler
import numpy as np
import pytest
import torch
from torch import nn

import dycl_iree
from dycl_iree import compile as compile_module
from dycl_iree import cpu_features
from dycl_iree.data_tiling import spec_text


class WideAndNarrow(nn.Module):
    """Two 1x1 convolutions at 7x7 as ResNet-50's layer4 has them: 512 -> 2048 channels (a 49x512
    by 512x2048 matmul, 2^20 weights: data-tiled) and 2048 -> 64 (2048x64, 2^17: not)."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = nn.Conv2d(512, 2048, 1)
        self.narrow = nn.Conv2d(2048, 64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.narrow(torch.relu(self.wide(x)))


def _encoded_shapes(model: nn.Module, example: torch.Tensor, dynamic_shapes=None) -> list[str]:
    """The operand shapes IREE packs for data tiling, from the module the exporter compiles."""
    from dycl_iree.capture import capture
    from dycl_iree.lower import lower, module_bytecode
    from dycl_iree.partition import partition
    from dycl_iree.specialize import specialize

    program = partition(specialize(capture(model), (example,), dynamic_shapes))
    sources = iree.compiler.compile_str(
        module_bytecode(lower(program).module),
        input_type="torch",
        extra_args=[*compile_module.target_flags("llvm-cpu"), "--compile-to=executable-sources"],
    ).decode()
    return sorted(set(re.findall(r"hal\.executable\.export public @\w*_encode_(\w+?)_to_", sources)))


@pytest.mark.parametrize("avx512", [True, False])
def test_only_the_wide_matmul_is_data_tiled_and_only_with_avx512(avx512: bool, monkeypatch) -> None:
    monkeypatch.setattr(cpu_features, "has_avx512", lambda: avx512)
    torch.manual_seed(0)
    encoded = _encoded_shapes(WideAndNarrow().eval(), torch.randn(1, 512, 7, 7))
    if avx512:
        # The wide matmul's weight is packed (its activations may be packed inside the dispatch
        # that makes them); nothing of the narrow one.
        assert "512x2048xf32" in encoded, encoded
        assert not any("2048x64" in shape or "64x2048" in shape for shape in encoded), encoded
    else:
        assert encoded == []


def test_a_matmul_of_a_dynamic_batch_is_not_data_tiled(monkeypatch) -> None:
    monkeypatch.setattr(cpu_features, "has_avx512", lambda: True)
    encoded = _encoded_shapes(WideAndNarrow().eval(), torch.randn(2, 512, 7, 7), ({0: "batch"},))
    assert encoded == []


def test_a_data_tiled_model_matches_pytorch(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(cpu_features, "has_avx512", lambda: True)
    torch.manual_seed(0)
    model = WideAndNarrow().eval()
    x = torch.randn(1, 512, 7, 7)
    bundle = dycl_iree.export(model, (x,))
    assert "--iree-opt-data-tiling" in json.dumps(bundle.manifest)
    run = dycl_iree.load(bundle.save(tmp_path / "wide.dycl"))
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(run(x.numpy()), want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_cross_compiled_targets_keep_their_flags() -> None:
    assert "--iree-opt-data-tiling" not in compile_module.target_flags("llvm-cpu:aarch64-linux-gnu")


def test_the_weight_bound_covers_every_power_of_two_split() -> None:
    text = spec_text(max_rows=196, min_weight_log2=19)
    for k_log2 in range(4, 16):
        assert f"transform.param.constant {1 << k_log2} : i64" in text
        assert f"transform.param.constant {1 << (19 - k_log2)} : i64" in text
