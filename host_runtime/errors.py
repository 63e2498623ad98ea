"""Errors shared by the exporter and the runtime (this module imports neither torch nor IREE)."""


class DyclError(Exception):
    """Base class of every error dycl_iree raises on purpose."""


class BundleError(DyclError):
    """A bundle that is missing, corrupt, truncated, of another format version or for another device."""


class InputError(DyclError):
    """Run-time inputs of the wrong count, dtype, rank or static size (caught before device work)."""


class ModelRaised(DyclError):
    """The model itself raised (a `raise` statement on a data-dependent path)."""
