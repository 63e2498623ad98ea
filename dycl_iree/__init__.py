"""dycl_iree: ahead-of-time export of dynamic PyTorch networks to IREE.

The pipeline, one stage per module: capture -> specialize -> partition -> lower -> hosts ->
compile -> bundle; `dycl_iree/pipeline.py` drives it. This module only names the public API.

Example:
    >>> import dycl_iree, torch
    >>> bundle = dycl_iree.export(model, (torch.randn(1, 8),))      # doctest: +SKIP
    >>> bundle.save("model.dycl")                                   # doctest: +SKIP
    >>> run = dycl_iree.load("model.dycl", host="compiled")         # doctest: +SKIP
    >>> outputs = run(torch.randn(1, 8))                            # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from host_runtime import __version__, available_devices, load
from host_runtime.errors import BundleError, DyclError, InputError, ModelRaised

from .errors import CaptureError, CompileError, SpecializeError, UnsupportedOpError

if TYPE_CHECKING:
    from .bundle import Bundle
    from .pipeline import export

__all__ = [
    "__version__",
    "export",
    "load",
    "available_devices",
    "Bundle",
    "DyclError",
    "BundleError",
    "InputError",
    "ModelRaised",
    "CaptureError",
    "CompileError",
    "SpecializeError",
    "UnsupportedOpError",
]


def __getattr__(name: str) -> Any:
    """`export` and `Bundle` import torch: load them on first use, so `load` alone stays torch-free."""
    if name == "export":
        # The driver module is `pipeline`, not `export`: importing a submodule binds the package's
        # attribute of that name to the module, which would hide the function.
        from .pipeline import export as value
    elif name == "Bundle":
        from .bundle import Bundle as value
    else:
        raise AttributeError(f"module 'dycl_iree' has no attribute {name!r}")
    globals()[name] = value
    return value
