"""Checking a candidate's outputs against PyTorch eager, with `dycl_iree.verify`'s rule.

Whether outputs match is decided by `verify.compare`, the check `python -m dycl_iree verify` applies
to bundles: floats within `verify.ATOL` + `verify.RTOL` x the output's largest magnitude, or no
further from the float64 result than eager's own float32 output is (deep networks differ from
PyTorch by a few float32 roundings either way); ints, bools and shapes exactly.

What this module adds is the benchmark's side of it. Every candidate returns its own kind of value
(tensors, numpy arrays, IREE `DeviceArray`s, Python scalars; tuples, lists or dicts of them), and
ONNX flattens the output tuple and turns a Python scalar into a one-element tensor of another
width. So both sides are flattened, and each of the candidate's outputs is given the form of the
eager output it stands for (a Python scalar back from a one-element array of the same kind; a
tensor's width, but never its kind: an int may not come back as a float) before `compare` decides.
When it says no, `compare_outputs` says which output differs and how, for the report.

Example:
    >>> compare_outputs((torch.ones(2), 3), [np.ones(2, np.float32), np.array([3])]) is None
    True
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..verify import ATOL, RTOL, OutputError, _widen, compare


def leaves(outputs: Any) -> list[Any]:
    """The outputs as one flat list, in order: tensors (on the CPU), arrays and Python scalars.

    `None` is dropped (exporters drop it too), dicts count by value, and IREE `DeviceArray`s are
    read back to numpy.

    >>> leaves({"a": [torch.zeros(1), (2.5, None)]})
    [tensor([0.]), 2.5]
    """
    if outputs is None:
        return []
    if isinstance(outputs, torch.Tensor):
        return [outputs.detach().cpu()]
    if isinstance(outputs, (tuple, list)):
        return [leaf for item in outputs for leaf in leaves(item)]
    if isinstance(outputs, dict):
        return [leaf for item in outputs.values() for leaf in leaves(item)]
    if hasattr(outputs, "to_host"):  # iree.runtime.DeviceArray
        return [np.asarray(outputs.to_host())]
    return [outputs]


def flatten_outputs(outputs: Any) -> list[np.ndarray]:
    """Flatten any nesting of outputs into a list of numpy arrays, in order (see `leaves`).

    >>> [a.tolist() for a in flatten_outputs((torch.ones(2), (3, [np.zeros(1)])))]
    [[1.0, 1.0], 3, [0.0]]
    """
    return [_array(leaf) for leaf in leaves(outputs)]


def compare_outputs(expected: Any, actual: Any, exact: Callable[[], Any] | None = None) -> str | None:
    """Return None when `actual` matches `expected` by `verify.compare`, else a one-line reason.

    `exact`, if given, returns the model's outputs in float64 (see `Float64Reference`): a float
    output that misses the plain tolerance still matches if it is no closer to eager than that.
    A Python scalar in `expected` has no shape, so a one-element array holding the same kind of
    value stands for it (ONNX returns an int as a [1] int64 tensor); a tensor's shape must match.

    >>> compare_outputs((torch.ones(2), 3), [np.ones(2, np.float32), np.int64(3)]) is None
    True
    >>> compare_outputs(torch.ones(2), -torch.ones(2))
    'output 0: max abs difference 2 > 1.1e-05 (atol 1e-06 + rtol 1e-05 x max |expected| 1)'
    """
    want = leaves(expected)
    got = leaves(actual)
    got = [_like(value, reference) for value, reference in zip(got, want)] + got[len(want) :]
    errors: list[OutputError] = []
    reference = None if exact is None else lambda: leaves(exact())
    if compare(got, want, errors, exact=reference):
        return None
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    index = next(index for index, error in enumerate(errors) if error.mismatches)
    return f"output {index}: {_difference(want[index], got[index], exact is not None)}"


class Float64Reference:
    """The model run in float64 on one sample, built once per model on the first call.

    This is `verify`'s second look at a float output that misses: PyTorch's float32 result is an
    approximation of this too. If the model cannot run in float64 (it makes float32 tensors of
    its own), the float32 outputs are returned, which leaves the plain tolerance as the rule.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self._in_float64: torch.nn.Module | None = None

    def __call__(self, sample: tuple, float32_outputs: Any) -> Any:
        try:
            if self._in_float64 is None:
                self._in_float64 = copy.deepcopy(self.model).double()
            with torch.no_grad():
                return self._in_float64(*_widen(sample))
        except Exception:  # no float64 result to compare with: the plain tolerance decides
            return float32_outputs


def _array(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if hasattr(value, "to_host"):
        return np.asarray(value.to_host())
    return np.asarray(value)


def _kind(array: np.ndarray) -> str:
    """Group dtypes the way the matching rule does: widths may differ, kinds may not."""
    if array.dtype == np.bool_:
        return "bool"
    if np.issubdtype(array.dtype, np.integer):
        return "int"
    if np.issubdtype(array.dtype, np.floating):
        return "float"
    return str(array.dtype)


def _like(value: Any, reference: Any) -> Any:
    """`value` in the form of the eager output `reference` when it holds the same kind of value."""
    if isinstance(reference, torch.Tensor):
        array = _array(value)
        dtype = reference.numpy().dtype
        if array.dtype != dtype and _kind(array) == _kind(np.empty(0, dtype)):
            array = array.astype(dtype)  # ONNX and IREE may widen or narrow; the values decide
        return array
    if isinstance(reference, (bool, int, float)) and not isinstance(value, (bool, int, float)):
        array = _array(value)
        if array.size == 1 and _kind(array) == _kind(np.asarray(reference)):
            return type(reference)(array.reshape(()).item())
        return array
    return value


def _difference(want: Any, got: Any, checked_float64: bool) -> str:
    """How one output that `compare` rejected differs from eager's."""
    if not isinstance(want, torch.Tensor):
        if type(got) is not type(want):
            return f"dtype {_array(got).dtype}, expected {type(want).__name__}"
        if isinstance(want, float):
            return _float_difference(np.asarray(want), np.asarray(got), checked_float64)
        return f"values differ ({got!r} vs expected {want!r})"
    want, got = want.numpy(), np.asarray(got)
    if got.shape != want.shape:
        return f"shape {list(got.shape)}, expected {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.kind != "f":
        return f"values differ ({_preview(got)} vs expected {_preview(want)})"
    return _float_difference(want, got, checked_float64)


def _float_difference(want: np.ndarray, got: np.ndarray, checked_float64: bool) -> str:
    want, got = want.astype(np.float64), got.astype(np.float64)
    if not np.isfinite(want).all():
        return "expected holds NaN or infinity, which no tolerance matches"
    if not np.isfinite(got).all():
        return "NaN or infinity where expected has none"
    difference = float(np.max(np.abs(got - want), initial=0.0))
    scale = float(np.max(np.abs(want), initial=0.0))
    tolerance = ATOL + RTOL * scale
    further = "; further from the float64 result than eager" if checked_float64 else ""
    return (
        f"max abs difference {difference:.3g} > {tolerance:.2g} "
        f"(atol {ATOL} + rtol {RTOL} x max |expected| {scale:.3g}){further}"
    )


def _preview(array: np.ndarray) -> str:
    text = np.array2string(array.reshape(-1)[:6], separator=",")
    return text if array.size <= 6 else text[:-1] + ",...]"
