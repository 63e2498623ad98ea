"""Where an export's time goes, and what makes it shorter: the per-stage report (wall and CPU time), the
weights' import without Python lists (`dycl_iree/literals.py`), and an unchanged model's export that
neither lowers nor compiles again."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import dycl_iree
from dycl_iree import compile as compile_stage
from dycl_iree import literals, pipeline
from dycl_iree import lower as lower_stage
from dycl_iree.program import format_program


class _TwoConvolutions(nn.Module):
    """Weights of several dtypes and sizes: float32 filters, a one-element bias (the importer's splat),
    an int64 index, a mask."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 1, 1)
        self.register_buffer("order", torch.tensor([3, 1, 0, 2, 7, 5, 6, 4]))
        mask = torch.tensor([True, False, True, True, False, True, True, False])
        self.register_buffer("mask", mask.reshape(1, 8, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x)).index_select(1, self.order)
        h = torch.where(self.mask, h, -h)
        if bool(x.sum() > 0):
            return self.b(h)
        return self.b(-h)


def _program(model: nn.Module, example: tuple, dynamic_shapes=None):
    from dycl_iree.capture import capture
    from dycl_iree.partition import partition
    from dycl_iree.specialize import specialize

    return partition(specialize(capture(model), example, dynamic_shapes))


def test_weights_import_to_the_same_module_as_through_torch_mlirs_own_conversion(monkeypatch) -> None:
    torch.manual_seed(0)
    program = _program(_TwoConvolutions().eval(), (torch.randn(1, 3, 6, 6),))
    converted: list[torch.Tensor] = []
    literal = literals.tensor_literal

    def counting(tensor, context):
        converted.append(tensor)
        return literal(tensor, context)

    monkeypatch.setattr(literals, "tensor_literal", counting)
    ours = lower_stage.module_bytecode(lower_stage.lower(program).module)
    # The dtypes the model's weights have all went through the tracker's own conversion.
    assert {tensor.dtype for tensor in converted} >= {torch.float32, torch.int64}
    assert all(tensor.numel() > 1 for tensor in converted)
    # torch-mlir's own conversion for every tensor; dead entries still dropped (the bool mask's
    # uint8 copy dies at once, and a plain RefTracker then hands its literal on now and then).
    monkeypatch.setattr(literals, "_real_tensor", lambda value: False)
    theirs = lower_stage.module_bytecode(lower_stage.lower(program).module)
    assert ours == theirs


def test_a_literal_of_a_tensor_that_died_is_not_given_to_one_that_reuses_its_id() -> None:
    """torch-mlir's importer keys literals by id(); it imports a bool constant through a uint8 copy
    that dies at once, and a later weight reusing that id got the copy's literal."""
    import gc

    from torch_mlir import ir
    from torch_mlir.extras.fx_importer import RefMapping

    context = ir.Context()
    tracker = literals.WeightTracker(context)
    dead = torch.zeros(1, 8, 1, 1, dtype=torch.uint8)
    stale = RefMapping(dead)
    stale.value = "the dead tensor's literal"
    del dead
    gc.collect()
    weight = torch.randn(1, 1, 8, 1)
    tracker._refs[id(weight)] = stale  # as if `weight` had been allocated where the dead tensor was
    mapping = tracker.track(weight)
    assert mapping is not stale and mapping.value != "the dead tensor's literal"
    assert "1x1x8x1xf32" in str(mapping.value)
    assert tracker.track(weight) is mapping  # a live tensor keeps its literal


def test_an_export_reports_each_stages_wall_and_cpu_time(caplog) -> None:
    caplog.set_level(logging.INFO, logger="dycl_iree")
    torch.manual_seed(0)
    model = _TwoConvolutions().eval()
    bundle = dycl_iree.export(model, (torch.randn(1, 3, 6, 6),), cache=False)
    stages = ["capture", "specialize", "partition", "check", "lower", "hosts", "compile[llvm-cpu]"]
    assert list(bundle.manifest["export_seconds"]) == stages
    assert list(bundle.manifest["export_cpu_seconds"]) == stages
    assert all(seconds >= 0 for seconds in bundle.manifest["export_cpu_seconds"].values())
    last = [record.getMessage() for record in caplog.records if record.name == "dycl_iree"][-1]
    assert last.startswith("exported _TwoConvolutions in ")
    assert all(f"{stage} " in last for stage in stages)


def test_stage_report_shows_cpu_time_only_where_it_differs_from_wall_time() -> None:
    report = pipeline.stage_report({"lower": 10.0, "compile": 20.0, "check": 0.01}, {"lower": 9.8, "compile": 35.0})
    assert report == "lower 10.0 s, compile 20.0 s (CPU 35.0 s), check 0.0 s"


def test_a_cached_export_neither_lowers_nor_compiles(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DYCL_IREE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "1")
    torch.manual_seed(0)
    model, example = _TwoConvolutions().eval(), (torch.randn(1, 3, 6, 6),)
    first = dycl_iree.export(model, example)

    def refuse(*args, **kwargs):
        raise AssertionError("a cached export ran a stage it should have reused")

    monkeypatch.setattr(pipeline, "lower", refuse)
    monkeypatch.setattr(pipeline, "compile_module", refuse)
    monkeypatch.setattr(compile_stage, "compile_module", refuse)
    again = dycl_iree.export(model, example)
    assert again.manifest["export_cache"] == "hit"
    assert again.manifest["export_seconds"] == first.manifest["export_seconds"]  # the cold export's, kept
    assert again.files["llvm-cpu.vmfb"] == first.files["llvm-cpu.vmfb"]
    assert again._program is None  # not unpickled until asked for
    assert format_program(again.program) == format_program(first.program)
    _check_both_sides(dycl_iree.load(again.save(tmp_path / "again.dycl"), host="compiled"), model)



class _Contiguous(nn.Module):
    """`.contiguous()` keeps `torch.contiguous_format` as a constant of the Program."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.transpose(0, 1).contiguous()
        if bool(h.sum() > 0):
            return h * 2.0
        return h - 1.0


def test_a_program_holding_a_memory_format_is_cached(monkeypatch, tmp_path: Path) -> None:
    """torch.save's default pickle protocol (2) cannot write a `torch.memory_format`; the cache must."""
    monkeypatch.setenv("DYCL_IREE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "1")
    model, example = _Contiguous().eval(), (torch.randn(3, 2),)
    first = dycl_iree.export(model, example)
    assert "contiguous_format" in format_program(first.program)
    monkeypatch.setattr(pipeline, "lower", lambda *args, **kwargs: pytest.fail("the export was not cached"))
    again = dycl_iree.export(model, example)
    assert again.manifest["export_cache"] == "hit"
    assert format_program(again.program) == format_program(first.program)
    run = dycl_iree.load(again.save(tmp_path / "again.dycl"), host="compiled")
    for x in (torch.randn(3, 2).abs(), -torch.randn(3, 2).abs()):
        np.testing.assert_allclose(run(x.numpy()), model(x).numpy(), rtol=1e-6)

ONE_TRACE_PROGRAMS = [
    "dynamic_batch",
    "growing_sequence",
    "greedy_decoder",
    "scalar_inputs",
    "recurrent_cells",
    "nested_if",
]


@pytest.mark.parametrize("name", ONE_TRACE_PROGRAMS)
def test_one_trace_lowers_to_the_module_that_export_then_decompositions_gives(monkeypatch, name: str) -> None:
    """The segments exported and decomposed in one trace (`lower._export_in_one_trace`) import to the
    same module, byte for byte, as `torch.export.export` + `run_decompositions` (dynamic dims, int
    and float host scalars, loops, recurrent cells)."""
    from models import programs

    built = programs.MODELS[name]()
    model, example = built[0], built[1]
    program = _program(model.eval(), example, built[2] if len(built) > 2 else None)
    one_trace = lower_stage._export_in_one_trace
    outcomes: list[bool] = []

    def recording(*args, **kwargs):
        exported = one_trace(*args, **kwargs)
        outcomes.append(exported is not None)
        return exported

    monkeypatch.setattr(lower_stage, "_export_in_one_trace", recording)
    ours = lower_stage.module_bytecode(lower_stage.lower(program).module)
    assert outcomes and all(outcomes)  # every segment took the one trace, none fell back
    monkeypatch.setattr(lower_stage, "_export_in_one_trace", lambda *args, **kwargs: None)
    theirs = lower_stage.module_bytecode(lower_stage.lower(program).module)
    assert ours == theirs


class _GatedByAMask(nn.Module):
    """`.float()` of a bool input: torch.export's pre-dispatch trace checks the input's dtype there
    (`aten._assert_tensor_metadata`), the one trace does not."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        gated = self.linear(x) * mask.float()
        if bool(gated.sum() > 0):
            return gated
        return -gated


def _canonical(text: str) -> list[str]:
    """A module's lines without the dtype checks, canonicalized (constants hoisted, SSA renumbered), in
    sorted order: the two traces create the constants in another order."""
    from torch_mlir import ir, passmanager
    from torch_mlir.dialects import torch as torch_dialect

    kept = "\n".join(line for line in text.splitlines() if "torch.aten._assert_tensor_metadata" not in line)
    context = ir.Context()
    torch_dialect.register_dialect(context)
    with context:
        module = ir.Module.parse(kept)
        passmanager.PassManager.parse("builtin.module(func.func(canonicalize,cse))").run(module.operation)
        return sorted(module.operation.get_asm(large_elements_limit=None).splitlines())


def test_one_trace_drops_only_the_dtype_checks_of_a_conversion(monkeypatch, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _GatedByAMask().eval()
    x, mask = torch.randn(2, 4), torch.tensor([[True, False, True, True], [False, True, True, False]])
    program = _program(model, (x, mask))
    ours = lower_stage.lower(program).module.operation.get_asm(large_elements_limit=None)
    one_trace = lower_stage._export_in_one_trace
    monkeypatch.setattr(lower_stage, "_export_in_one_trace", lambda *args, **kwargs: None)
    theirs = lower_stage.lower(program).module.operation.get_asm(large_elements_limit=None)
    monkeypatch.setattr(lower_stage, "_export_in_one_trace", one_trace)
    assert "_assert_tensor_metadata" in theirs and "_assert_tensor_metadata" not in ours
    assert _canonical(ours) == _canonical(theirs)
    bundle = dycl_iree.export(model, (x, mask), cache=False)
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    run = dycl_iree.load(bundle.save(tmp_path / "gated.dycl"), host="compiled")
    taken = []
    for sample in (x, -x):  # both sides of the branch
        with torch.no_grad():
            expected = model(sample, mask)
        taken.append(bool((model.linear(sample) * mask.float()).sum() > 0))
        torch.testing.assert_close(torch.as_tensor(run(sample.numpy(), mask.numpy())), expected, rtol=1e-5, atol=1e-5)
    assert sorted(taken) == [False, True]


def test_a_segment_the_one_trace_fails_on_is_exported_in_two_steps(monkeypatch, tmp_path: Path) -> None:
    from torch.export import _trace

    export = _trace._export
    one_trace_calls = []

    def failing_without_pre_dispatch(*args, **kwargs):
        if not kwargs.get("pre_dispatch"):  # the one trace's call (torch.export.export's is pre-dispatch)
            one_trace_calls.append(1)
            raise RuntimeError("not this way")
        return export(*args, **kwargs)

    monkeypatch.setattr(_trace, "_export", failing_without_pre_dispatch)
    torch.manual_seed(0)
    model, example = _TwoConvolutions().eval(), (torch.randn(1, 3, 6, 6),)
    bundle = dycl_iree.export(model, example, cache=False)
    assert one_trace_calls  # the one trace was tried, and failed
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    _check_both_sides(dycl_iree.load(bundle.save(tmp_path / "two_steps.dycl"), host="compiled"), model)


def _check_both_sides(run, model: nn.Module) -> None:
    positive = torch.randn(1, 3, 6, 6)
    positive = positive if positive.sum() > 0 else -positive
    for x in (positive, -positive):  # both sides of the branch
        with torch.no_grad():
            torch.testing.assert_close(torch.as_tensor(run(x.numpy())), model(x), rtol=1e-5, atol=1e-5)


def _composite_kernels() -> dict:
    from dycl_iree.decompositions import decomposition_table

    return {op: dict(op.py_kernels) for op in decomposition_table() if hasattr(op, "py_kernels")}


def test_a_lowering_leaves_torchs_composite_kernels_as_it_found_them(monkeypatch) -> None:
    """The override of the composite ops is kept across a lowering's segments (`one_trace`): it must
    be gone after the lowering, and after one that fails, or later exports would trace with it."""
    from dycl_iree.one_trace import OVERRIDE

    torch.manual_seed(0)
    model, example = _TwoConvolutions().eval(), (torch.randn(1, 3, 6, 6),)
    before = _composite_kernels()
    assert len(_program(model, example).segments) >= 2  # the override is kept from one to the next
    dycl_iree.export(model, example)
    assert OVERRIDE.stack is None and _composite_kernels() == before

    def fail(*args, **kwargs):
        assert OVERRIDE.stack is not None  # the one trace ran with the kept override
        raise RuntimeError("a failure after the segment's trace")

    monkeypatch.setattr(lower_stage, "_refuse_specialized_dims", fail)
    with pytest.raises(Exception, match="a failure after the segment's trace"):
        dycl_iree.export(model, example)
    assert OVERRIDE.stack is None and _composite_kernels() == before
