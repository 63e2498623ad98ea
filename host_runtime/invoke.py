"""Calling functions of a loaded vmfb with as little per-call work as iree.runtime allows.

`iree.runtime.FunctionInvoker` wraps every result in a `DeviceArray` and builds Python-side
bookkeeping objects on each call; for the small segments of a dynamic network that is most of the
cost of a call (about 9 us of a 10 us call of a 4-element segment on local-sync). This module
keeps the C++ argument packer and the VM invoke, and returns the raw `HalBufferView`s, which can be
passed straight back into the next segment; only the values the host reads are mapped.

If the binding's internals differ in another iree-base-runtime version, `Function` falls back to
`FunctionInvoker` and `DeviceArray`s, which behave the same, just slower.

Example:
    >>> function = Function(context, module, "seg0", result_count=1)      # doctest: +SKIP
    >>> (mask,) = function(np.zeros((1, 8), np.float32))                  # doctest: +SKIP
    >>> to_numpy(mask)                                                    # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:  # the same objects FunctionInvoker uses; internal to iree.runtime, so guarded
    from iree.runtime._binding import ArgumentPacker, InvokeContext, _invoke_statics

    _LEAN = True
except ImportError:  # pragma: no cover - other iree-base-runtime versions
    _LEAN = False


class Function:
    """A function of a loaded module, called with numpy arrays, ints, floats and buffer views."""

    def __init__(self, context: Any, module: Any, name: str, result_count: int, all_tensors: bool = False) -> None:
        import iree.runtime as ireert

        self._ireert = ireert
        self._count = result_count
        self._device = context.config.device
        self._vm_context = context.vm_context
        vm_function = module.lookup_function(name)
        if vm_function is None:
            raise KeyError(name)
        self._vm_function = vm_function
        # Segments return only tensors: read them as buffer views without a type check each.
        self._all_tensors = all_tensors
        if _LEAN:
            self._packer = ArgumentPacker(_invoke_statics, None)
        else:  # pragma: no cover
            self._invoker = ireert.FunctionInvoker(self._vm_context, self._device, vm_function)

    def __call__(self, *args: Any) -> tuple:
        if not _LEAN:  # pragma: no cover
            result = self._invoker(*args)
            return result if isinstance(result, tuple) else (result,)
        arguments = self._packer.pack(InvokeContext(self._device), args, {})
        results = self._ireert.VmVariantList(self._count)
        self._vm_context.invoke(self._vm_function, arguments, results)
        buffer_view = self._ireert.HalBufferView
        if self._all_tensors:
            return tuple(results.get_as_object(index, buffer_view) for index in range(self._count))
        values = []
        for index in range(len(results)):
            value = results.get_variant(index)
            if isinstance(value, self._ireert.VmRef):
                value = value.deref(buffer_view)
            values.append(value)
        return tuple(values)


def to_numpy(value: Any) -> np.ndarray:
    """A host copy of a tensor result (a HalBufferView, or a DeviceArray on the fallback path).

    A Python host can also return a numpy input unchanged (a loop that ran zero times).
    """
    if isinstance(value, np.ndarray):
        return value.copy()
    if hasattr(value, "to_host"):
        return np.array(value.to_host())
    # The mapping's buffer protocol: about half the cost of `MappedMemory.asarray` (~0.9 vs 1.9 us
    # for a small result on local-sync), which builds its array through a slower path.
    return np.frombuffer(value.map(), _dtype(value.element_type)).reshape(value.shape).copy()


def to_scalar(value: Any) -> Any:
    """The one element of a tensor result, as a Python scalar (what TorchScript's Int/Bool read).

    This is the read-back of every data-dependent decision in the Python host, so it reads the
    mapped bytes directly (~0.3 us on local-sync, against ~1.9 us through `asarray(...).item()`).
    """
    if isinstance(value, np.ndarray):
        return value.item()
    if hasattr(value, "to_host"):
        return value.to_host().item()
    dtype = _dtype(value.element_type)
    code = _SCALAR_CODES.get(dtype)
    if code is None:  # float16 and others memoryview cannot cast to
        return np.frombuffer(value.map(), dtype)[0].item()
    return memoryview(value.map()).cast(code)[0]


def upload(device: Any, array: np.ndarray, element_type: Any) -> Any:
    """A device copy of a host array, as a HalBufferView: uploaded once, it can be passed to every
    segment that reads it (passing the numpy array would copy it again on each call)."""
    import iree.runtime as ireert

    return device.allocator.allocate_buffer_copy(
        memory_type=ireert.MemoryType.DEVICE_LOCAL,
        allowed_usage=ireert.BufferUsage.DEFAULT,
        device=device,
        buffer=array,
        element_type=element_type,
    )


def element_type_of(dtype: np.dtype) -> Any:
    """The IREE element type of a numpy dtype (what `upload` needs)."""
    from iree.runtime.array_interop import map_dtype_to_element_type

    element_type = map_dtype_to_element_type(np.dtype(dtype))
    if element_type is None:
        raise ValueError(f"IREE has no element type for numpy dtype {dtype}")
    return element_type


_SCALAR_CODES: dict[np.dtype, str] = {
    np.dtype(name): code
    for name, code in [
        ("float32", "f"),
        ("float64", "d"),
        ("int64", "q"),
        ("int32", "i"),
        ("int16", "h"),
        ("int8", "b"),
        ("uint8", "B"),
        ("bool", "?"),
    ]
}
_DTYPES: dict[int, np.dtype] = {}


def _dtype(element_type: Any) -> np.dtype:
    dtype = _DTYPES.get(element_type)
    if dtype is None:
        import iree.runtime as ireert

        dtype = _DTYPES[element_type] = np.dtype(ireert.HalElementType.map_to_dtype(element_type))
    return dtype
