"""The compiled host's loop packs its data-tiled weights once, at load (`dycl_iree.packing_hoist`),
and still matches PyTorch on every exit of the loop.

IREE 3.13 leaves the packing (`flow.tensor.encode`) of a weight used inside `main`'s `scf.while` in
the loop, so it ran at every step; the exporter moves it into an initializer. What moved is read from
the module the exporter hands to `hoisted` and the one it gets back, walked here on their own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from iree.compiler import ir
from torch import nn

import dycl_iree
from dycl_iree import cpu_features, packing_hoist
from tests.conftest import check_hosts


class GrowingDecoder(nn.Module):
    """An autoregressive loop as text decoders write it: every step runs the tokens so far through a
    feed-forward block (rows known only at run time, weights of 2^19 elements: data-tiled), appends
    the last row, and stops at an end condition or at the length cap."""

    def __init__(self) -> None:
        super().__init__()
        self.expand = nn.Linear(512, 1024)
        self.contract = nn.Linear(1024, 512)

    def forward(self, prompt: torch.Tensor) -> torch.Tensor:
        tokens = prompt
        for _ in range(6):
            state = torch.tanh(self.contract(torch.relu(self.expand(tokens))))[-1:]
            tokens = torch.cat([tokens, state], 0)
            if float(state.mean()) > 0.0035:
                break
        return tokens


def _constant_encodes_in_loops(module: bytes) -> int:
    """How many `flow.tensor.encode`s of an `arith.constant` sit inside an `scf.while`."""
    parsed = ir.Module.parse(module, ir.Context())
    count = 0

    def walk(op, in_loop: bool) -> None:
        nonlocal count
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    inner = inner.operation
                    source = inner.operands[0].owner if inner.name == "flow.tensor.encode" else None
                    if in_loop and getattr(source, "name", None) == "arith.constant":
                        count += 1
                    walk(inner, in_loop or inner.name == "scf.while")

    walk(parsed.operation, False)
    return count


@pytest.mark.parametrize("avx512", [True, False])
def test_a_loops_weights_are_packed_at_load_and_every_exit_matches_pytorch(
    avx512: bool, tmp_path: Path, monkeypatch
) -> None:
    if not cpu_features.has_avx2():
        pytest.skip("data tiling (and so packing) is the exporter's form for x86 CPUs with AVX2")
    monkeypatch.setattr(cpu_features, "has_avx512", lambda: avx512)
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")
    calls = []
    original = packing_hoist.hoisted

    def recording(module: bytes) -> tuple[bytes, int]:
        result = original(module)
        calls.append((module, *result))
        return result

    monkeypatch.setattr(packing_hoist, "hoisted", recording)
    torch.manual_seed(0)
    model = GrowingDecoder().eval()
    prompt = torch.randn(2, 512)
    bundle = dycl_iree.export(model, (prompt,), cache=False)  # compiled now, so `hoisted` runs
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]

    assert len(calls) == 1, calls
    before, after, moved = calls[0]
    in_loop = _constant_encodes_in_loops(before)
    assert in_loop >= 2 and moved == in_loop, (in_loop, moved)  # both weights
    assert _constant_encodes_in_loops(after) == 0
    assert str(ir.Module.parse(after, ir.Context())).count("util.initializer") > str(
        ir.Module.parse(before, ir.Context())
    ).count("util.initializer")

    path = bundle.save(tmp_path / "decoder.dycl")
    compiled, python = dycl_iree.load(path, host="compiled"), dycl_iree.load(path, host="python", record=True)
    scripted = torch.jit.script(model)
    for seed in range(10):
        torch.manual_seed(seed)
        check_hosts(scripted, [compiled, python], (torch.randn(2, 512),))
    (trips,) = python.trip_counts.values()
    assert {1, 2, 6} <= set(trips), trips  # the end condition at the first and a later step, and the cap


def test_a_failing_move_costs_the_compiled_host_nothing(tmp_path: Path, monkeypatch, caplog) -> None:
    """The move only speeds the module up: where it fails, the module compiles in one step, with a
    warning that says so, and keeps its compiled host."""
    if not cpu_features.has_avx2():
        pytest.skip("data tiling (and so packing) is the exporter's form for x86 CPUs with AVX2")
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")

    def failing(module: bytes) -> tuple[bytes, int]:
        raise RuntimeError("no such op")

    monkeypatch.setattr(packing_hoist, "hoisted", failing)
    torch.manual_seed(0)
    model = GrowingDecoder().eval()
    prompt = torch.randn(2, 512)
    with caplog.at_level("WARNING", logger="dycl_iree"):
        bundle = dycl_iree.export(model, (prompt,), cache=False)
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    assert any("compiling in one step: no such op" in record.getMessage() for record in caplog.records)
    run = dycl_iree.load(bundle.save(tmp_path / "decoder.dycl"), host="compiled")
    check_hosts(torch.jit.script(model), [run], (prompt,))
