"""The one exception hierarchy of dycl_iree. Messages name the model's source line where one exists.

Example:
    >>> try:
    ...     raise UnsupportedOpError("aten::foo", "model.py:3", "seg1")
    ... except DyclError as error:
    ...     print(error)
    cannot lower aten::foo (from model.py:3, in segment seg1)
"""

from __future__ import annotations

from host_runtime.errors import BundleError, DyclError, InputError

__all__ = [
    "DyclError",
    "BundleError",
    "InputError",
    "CaptureError",
    "SpecializeError",
    "UnsupportedOpError",
    "CompileError",
    "ExporterDefect",
]


class CaptureError(DyclError):
    """TorchScript could not script or freeze the model."""


class SpecializeError(DyclError):
    """The graph uses a construct the exporter cannot type or fold (an Optional out of a branch...)."""


class UnsupportedOpError(DyclError):
    """An op that the lowering (torch.export, torch-mlir or IREE) cannot handle."""

    def __init__(self, op: str, source: str, segment: str = "", detail: str = "") -> None:
        where = f"from {source}" if source else "source line unknown"
        if segment:
            where += f", in segment {segment}"
        message = f"cannot lower {op} ({where})"
        if detail:
            message += f": {detail}"
        super().__init__(message)
        self.op = op
        self.source = source
        self.segment = segment


class CompileError(DyclError):
    """iree-compile rejected the module."""


class ExporterDefect(DyclError):
    """A stage of dycl_iree made something inconsistent (a Program that reads a value where no path
    defines it): a defect of the exporter, not of the model, caught before it becomes a bundle that
    fails at run time. The message says what to report."""
