"""Bad input gets a clear error that names the problem and where it came from."""

from __future__ import annotations

from typing import List

import numpy as np
import pytest
import torch
from torch import nn

import dycl_iree
from dycl_iree.errors import CaptureError, SpecializeError, UnsupportedOpError


class _Unscriptable(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([row * 2 for row in x.numpy()])  # numpy() does not script


def test_unscriptable_model_reports_torchscript_file_line_and_advice() -> None:
    with pytest.raises(CaptureError) as caught:
        dycl_iree.export(_Unscriptable(), (torch.randn(2, 3),))
    message = str(caught.value)
    assert "test_errors.py" in message and "line" in message
    assert "numpy" in message
    assert "TorchScript must be able to compile forward()" in message


class _NextFloat(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return torch.nextafter(x, x + 1.0)
        return x


def test_op_the_lowering_cannot_handle_is_named_with_source_line_and_segment() -> None:
    with pytest.raises(UnsupportedOpError) as caught:
        dycl_iree.export(_NextFloat(), (torch.randn(4),))
    error = caught.value
    assert error.op == "aten::nextafter.default"
    assert error.source.endswith("test_errors.py:" + str(_line_of("torch.nextafter")))
    assert error.segment.startswith("seg")
    assert "aten::nextafter" in str(error) and "in segment" in str(error)


class _Entropy(nn.Module):
    def forward(self, p: torch.Tensor) -> torch.Tensor:
        q = p.softmax(0)
        return torch.xlogy(q, 0.5) - q


def test_an_op_a_decomposition_makes_is_blamed_on_the_op_it_came_from(monkeypatch) -> None:
    """An op a decomposition makes that torch-mlir cannot lower (here `nextafter`, made by a
    decomposition of `xlogy.Scalar_Other` the test puts in the table) is named with the op it came
    from: the error names xlogy's line and that op, not the segment's first op (softmax)."""
    from dycl_iree import lower

    table = lower.decomposition_table

    def with_nextafter() -> dict:
        patched = table()
        patched[torch.ops.aten.xlogy.Scalar_Other] = lambda q, other: torch.ops.aten.nextafter(q, q + other)
        return patched

    monkeypatch.setattr(lower, "decomposition_table", with_nextafter)
    with pytest.raises(UnsupportedOpError) as caught:
        dycl_iree.export(_Entropy(), (torch.randn(4),))
    error = caught.value
    assert error.op == "aten::xlogy.Scalar_Other", str(error)
    assert error.source.endswith("test_errors.py:" + str(_line_of("torch.xlogy(q, 0.5)")))
    assert "aten.nextafter, which its decomposition makes" in str(error), str(error)


class _Inverse(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x[:, :4] * 2.0
        return torch.linalg.inv(y @ y.T + torch.eye(4))


def test_an_op_the_importer_cannot_take_is_blamed_on_the_op_it_came_from() -> None:
    """torch.export wraps `linalg.inv`'s check of its result in `with_effects`, which torch-mlir's
    importer does not import: the error names inv's line and what failed, not the segment's first
    op (the slice)."""
    with pytest.raises(UnsupportedOpError) as caught:
        dycl_iree.export(_Inverse(), (torch.randn(4, 5),))
    error = caught.value
    assert error.op == "aten::linalg_inv.default", str(error)
    assert error.source.endswith("test_errors.py:" + str(_line_of("torch.linalg.inv")))
    assert "with_effects of aten._linalg_check_errors.default, which its decomposition makes" in str(error)


class _RowsInRange(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        index = x.abs().argmax(1).unsqueeze(1).expand_as(x)
        return ((index >= 0) & (index < 2)).all()


def test_a_compile_error_that_names_no_op_blames_none() -> None:
    """iree-compile 3.13 cannot compile `all` of two comparisons of an index broadcast over run-time
    rows (README, Known traps) and names no op of the segment ("'func.func' op exceeded stack
    allocation limit"): the error lists the segment's ops as suspects, where it named the first
    one (`abs`) as the culprit."""
    with pytest.raises(UnsupportedOpError) as caught:
        dycl_iree.export(_RowsInRange(), (torch.randn(3, 4),), dynamic_shapes=[{0: "rows"}])
    message = str(caught.value)
    assert message.startswith("cannot lower one of aten::abs.default"), message
    assert "aten::expand_as.default" in message and "exceeded stack allocation limit" in message, message


def _line_of(text: str) -> int:
    with open(__file__) as handle:
        for number, line in enumerate(handle, 1):
            if text in line and "_line_of" not in line:
                return number
    raise AssertionError(text)


def test_unknown_target_is_refused_before_any_work() -> None:
    with pytest.raises(dycl_iree.DyclError, match="unknown target 'tpu'"):
        dycl_iree.export(nn.Linear(2, 2), (torch.randn(1, 2),), targets=("tpu",))


def test_wrong_inputs_are_refused_before_any_device_work(exported, monkeypatch) -> None:
    item = exported("for_range")
    run = dycl_iree.load(item.path, host="compiled")

    def no_device_work(*args):
        raise AssertionError("the device was called with bad inputs")

    monkeypatch.setattr(run, "_main", no_device_work)
    x = np.zeros((1, 5), np.float32)
    cases = [
        ((x,), r"takes 2 inputs \(x, n\), got 1"),
        ((x.astype(np.float64), 3), r"input 0 \('x'\) must have dtype float32, got float64"),
        ((x.reshape(5), 3), r"input 0 \('x'\) must have rank 2 \(shape \[1, 5\], got shape \[5\]\)"),
        ((np.zeros((1, 6), np.float32), 3), r"must have size 5 in dim 1"),
        ((x, 2.5), r"input 1 \('n'\) must be an int, got float"),
        (("text", 3), r"input 0 \('x'\) must be a tensor/array, got str"),
    ]
    for inputs, message in cases:
        with pytest.raises(dycl_iree.InputError, match=message):
            run(*inputs)


def test_dynamic_dims_accept_other_sizes_and_static_dims_do_not(exported) -> None:
    item = exported("dynamic_batch")
    run = dycl_iree.load(item.path, host="compiled")
    assert run(np.ones((3, 8), np.float32)).shape == (3,)
    with pytest.raises(dycl_iree.InputError, match="must have size 8 in dim 1"):
        run(np.ones((3, 9), np.float32))


class _TokenLists(nn.Module):
    """A beam search's token lists rebuilt in a loop over a run-time count (`List[List[int]]`)."""

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        tokens: List[List[int]] = [[0]]  # noqa: UP006  (TorchScript's spelling in published code)
        for step in range(n):  # the loop the error names
            tokens = [t + [step] for t in tokens]
        return x + float(len(tokens[0]))


def test_a_list_of_lists_set_in_a_loop_is_named_with_its_type_and_line() -> None:
    with pytest.raises(SpecializeError) as caught:
        dycl_iree.export(_TokenLists(), (torch.randn(2, 3), 2))
    message = str(caught.value)
    assert "a List[List[int]] ([[0]]) cannot change inside data-dependent control flow" in message
    assert f"test_errors.py:{_line_of('for step in range(n):')}" in message
