"""Weights used inside the compiled host's branches are prepared once, not at every call.

IREE 3.13 moves work on a constant (a weight packed into panels for data tiling) into an
initializer only where the constant and its user share a region; the segments inlined into
`main`'s `scf.if`s did not, so their weights were packed at every call on the compiled host.
A `main` that branches, never loops, and calls a segment with a large weight in a branch is
compiled with its branches as blocks (`compile.AS_BLOCKS`, `pipeline.branches_as_blocks`). The CPU
probes are set by the tests (AVX2 without AVX-512, where the exporter reads large weights as
panels), so this runs on any x86 machine.
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
from dycl_iree.bundle import largest_weights
from dycl_iree.pipeline import branches_as_blocks
from tests.test_data_tiling import _set_cpu


class ConfidentExit(nn.Module):
    """BranchyNet-style inference: a cheap classifier after the first block, the rest of the network
    only when it is unsure. The rest's 256 -> 1024 1x1 convolution at 14x14 (196 rows, 2^18 weights)
    reads its weight as panels with AVX2."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Conv2d(64, 256, 1)
        self.exit = nn.Linear(256, 10)
        self.rest = nn.Conv2d(256, 1024, 1)
        self.classifier = nn.Linear(1024, 10)
        self.threshold = 0.5

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        h = torch.relu(self.block(x))
        early = self.exit(h.mean((2, 3)))
        if torch.softmax(early, dim=1).max() > self.threshold:
            return early, 0
        h = torch.relu(self.rest(h))
        return self.classifier(h.mean((2, 3))), 1


def _model() -> ConfidentExit:
    torch.manual_seed(0)
    model = ConfidentExit().eval()
    with torch.no_grad():
        model.exit.weight.mul_(20.0)  # confident on some inputs, unsure on others
    return model


def _main_after_global_optimization(model: nn.Module, example: torch.Tensor, blocks: bool) -> str:
    """`main` as IREE's global optimization leaves it (after it evaluates constant expressions),
    compiled from the module the exporter compiles, `main` included."""
    from dycl_iree.capture import capture
    from dycl_iree.lower import lower, module_bytecode
    from dycl_iree.partition import partition
    from dycl_iree.pipeline import _add_compiled_host
    from dycl_iree.specialize import specialize

    program = partition(specialize(capture(model), (example,), None))
    lowered = lower(program)
    unsupported, main_text = _add_compiled_host(program, lowered)
    assert unsupported is None, unsupported
    assert branches_as_blocks(main_text, largest_weights(program))
    text = iree.compiler.compile_str(
        module_bytecode(lowered.module),
        input_type="torch",
        extra_args=[
            *compile_module.target_flags("llvm-cpu", branches_as_blocks=blocks),
            "--compile-to=global-optimization",
            "--mlir-elide-elementsattrs-if-larger=16",
        ],
    ).decode()
    start = text.index("util.func public @main$async(")
    end = text.index("\n  }\n", start)
    return text[start:end]


def test_a_branch_packs_its_weights_once_not_at_every_call(monkeypatch) -> None:
    _set_cpu(monkeypatch, False, True)  # AVX2 without AVX-512
    model = _model()
    example = torch.randn(1, 64, 14, 14)
    # With the branch as a region, the rest's weight is packed in `main` itself, at every call that
    # takes the branch: the premise of the change, so the test below can fail.
    structured = _main_after_global_optimization(model, example, blocks=False)
    assert re.search(r"linalg\.pack %\S+ .*tensor<256x1024xf32>", structured), structured[:3000]
    blocks = _main_after_global_optimization(model, example, blocks=True)
    assert "cf.cond_br" in blocks and "scf.if" not in blocks
    assert "linalg.pack" not in blocks, blocks[:3000]


def test_an_exported_branch_as_blocks_matches_pytorch_on_both_sides(tmp_path: Path, monkeypatch) -> None:
    _set_cpu(monkeypatch, False, True)  # AVX2 without AVX-512
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")  # the whole-export cache does not see the probes
    model = _model()
    bundle = dycl_iree.export(model, (torch.randn(1, 64, 14, 14),))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    assert compile_module.AS_BLOCKS in json.dumps(bundle.manifest["targets"])
    run = dycl_iree.load(bundle.save(tmp_path / "exit.dycl"), host="compiled")
    generator = torch.Generator().manual_seed(1)
    exits = []
    for index in range(8):
        x = torch.randn(1, 64, 14, 14, generator=generator) * (0.05 + 0.3 * index)
        with torch.no_grad():
            want, taken = model(x)
        got, got_exit = run(x.numpy())
        assert int(got_exit) == taken
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5 * float(want.abs().max()))
        exits.append(taken)
    assert set(exits) == {0, 1}, exits


class SmallGate(nn.Module):
    """SkipNet-style: a gate skips a block whose weights are small (16 channels): its `main` keeps
    its regions: IREE packs none of its weights."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(16, 1)
        self.block = nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(torch.sigmoid(self.gate(x.mean((2, 3)))).sum() > 0.5):
            x = torch.relu(self.block(x)) + x
        return x


class DecodeSteps(nn.Module):
    """A loop that stops at a data-dependent step: its `main` keeps its regions."""

    def __init__(self) -> None:
        super().__init__()
        self.step = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(6):
            x = torch.tanh(self.step(x))
            if float(x.sum()) > 1.0:
                break
        return x


@pytest.mark.parametrize("kind", ["large weight in a branch", "small weights", "loop"])
def test_which_mains_are_compiled_as_blocks(kind: str, monkeypatch) -> None:
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")
    model, example = {
        "large weight in a branch": (_model(), torch.randn(1, 64, 14, 14)),
        "small weights": (SmallGate(), torch.randn(1, 16, 8, 8)),
        "loop": (DecodeSteps(), torch.randn(1, 8)),
    }[kind]
    bundle = dycl_iree.export(model.eval(), (example,))
    assert bundle.host == "compiled"
    flags = json.dumps(bundle.manifest["targets"])
    assert (compile_module.AS_BLOCKS in flags) == (kind == "large weight in a branch")


def test_a_main_iree_compile_rejects_as_blocks_keeps_the_compiled_host_as_regions(monkeypatch) -> None:
    """Blocks only speed the compiled host up: where iree-compile rejects them, `main` is compiled
    again with its regions, not dropped for the Python host."""
    from dycl_iree import pipeline
    from dycl_iree.errors import CompileError

    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")
    original = pipeline.compile_module
    tried = []

    def rejecting_blocks(*args, branches_as_blocks: bool = False, **options):
        tried.append(branches_as_blocks)
        if branches_as_blocks:
            failure = CompileError("iree-compile failed for target llvm-cpu: error: a rejected block")
            failure.diagnostic = "error: a rejected block"
            raise failure
        return original(*args, branches_as_blocks=branches_as_blocks, **options)

    monkeypatch.setattr(pipeline, "compile_module", rejecting_blocks)
    bundle = dycl_iree.export(_model(), (torch.randn(1, 64, 14, 14),))
    assert tried == [True, False]
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    assert compile_module.AS_BLOCKS not in json.dumps(bundle.manifest["targets"])
