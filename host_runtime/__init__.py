"""host_runtime: load and run a dycl_iree bundle with `iree.runtime` and numpy only (no torch).

Example:
    >>> import host_runtime
    >>> run = host_runtime.load("model.dycl", device="local-sync", host="compiled")   # doctest: +SKIP
"""

# The version of dycl_iree and of this runtime, released together: both pyproject.toml files read it here.
__version__ = "0.1.0"

from .errors import BundleError, DyclError, InputError, ModelRaised  # noqa: E402
from .runner import Runner, available_devices, load  # noqa: E402

__all__ = [
    "__version__",
    "load",
    "available_devices",
    "Runner",
    "DyclError",
    "BundleError",
    "InputError",
    "ModelRaised",
]
