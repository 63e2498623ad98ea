"""host_runtime: load and run a dycl_iree bundle with `iree.runtime` and numpy only (no torch).

Example:
    >>> import host_runtime
    >>> run = host_runtime.load("model.dycl", device="local-sync", host="compiled")   # doctest: +SKIP
"""

from .errors import BundleError, DyclError, InputError, ModelRaised
from .runner import Runner, load

__all__ = ["load", "Runner", "DyclError", "BundleError", "InputError", "ModelRaised"]
