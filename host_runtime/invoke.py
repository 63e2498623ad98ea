"""Calling functions of a loaded vmfb with as little per-call work as iree.runtime allows.

`iree.runtime.FunctionInvoker` wraps every result in a `DeviceArray` and builds Python-side
bookkeeping objects on each call; for the small segments of a dynamic network that is most of the
cost of a call (about 9 us of a 10 us call of a 4-element segment on local-sync). This module
keeps the C++ argument packer and the VM invoke, and returns the raw `HalBufferView`s, which can be
passed straight back into the next segment; only the values the host reads are mapped.

If the binding's internals differ in another iree-base-runtime version, `bind_function` falls back to
`FunctionInvoker` and `DeviceArray`s, which behave the same, just slower.

How results reach the host depends on the device, and is chosen once per device (`readers_for`):
the CPU drivers map result buffers in place (`to_numpy`, `to_scalar`); GPU drivers allocate results
that the host may not map, so they are copied through a host-visible staging buffer (`StagedReader`).

Example:
    >>> function = bind_function(context, module, "seg0", result_count=1)  # doctest: +SKIP
    >>> (mask,) = function(np.zeros((1, 8), np.float32))                  # doctest: +SKIP
    >>> to_numpy(mask)                                                    # doctest: +SKIP
"""

from __future__ import annotations

from operator import is_ as _is
from typing import Any, Callable

import numpy as np

try:  # the same objects FunctionInvoker uses; internal to iree.runtime, so guarded
    from iree.runtime._binding import ArgumentPacker, InvokeContext, _invoke_statics

    _LEAN = True
except ImportError:  # pragma: no cover - other iree-base-runtime versions
    _LEAN = False


def bind_function(
    context: Any, module: Any, name: str, result_count: int, all_tensors: bool = False
) -> Callable[..., tuple]:
    """A function of a loaded module as a Python callable: numpy arrays, ints, floats and buffer
    views in, a tuple of results out (tensors as `HalBufferView`s).

    A closure over everything it needs, not an object with `__call__`: the attribute lookups of a
    method cost ~0.9 us per call, a quarter of a small segment's whole call on local-sync.
    `all_tensors` (segments return only tensors) reads the results without a type check each.
    """
    import iree.runtime as ireert

    device = context.config.device
    vm_function = module.lookup_function(name)
    if vm_function is None:
        raise KeyError(name)
    if not _LEAN:  # pragma: no cover
        invoker = ireert.FunctionInvoker(context.vm_context, device, vm_function)

        def call_invoker(*args: Any) -> tuple:
            result = invoker(*args)
            return result if isinstance(result, tuple) else (result,)

        return call_invoker

    pack = ArgumentPacker(_invoke_statics, None).pack
    invoke = context.vm_context.invoke
    variant_list, buffer_view, vm_ref = ireert.VmVariantList, ireert.HalBufferView, ireert.VmRef
    no_keywords: dict = {}
    count = result_count

    def call_tensors(*args: Any) -> tuple:
        results = variant_list(count)
        invoke(vm_function, pack(InvokeContext(device), args, no_keywords), results)
        return tuple([results.get_as_object(index, buffer_view) for index in range(count)])

    def call(*args: Any) -> tuple:
        results = variant_list(count)
        invoke(vm_function, pack(InvokeContext(device), args, no_keywords), results)
        values = []
        for index in range(len(results)):
            value = results.get_variant(index)
            values.append(value.deref(buffer_view) if isinstance(value, vm_ref) else value)
        return tuple(values)

    return call_tensors if all_tensors else call


def prepared_invoke(context: Any, module: Any, name: str, result_count: int) -> tuple[Any, Any, Any] | None:
    """What calling a function of a loaded module with one prepared argument list takes: (invoke,
    function, results list), for a caller that fills in the argument list (a `VmVariantList` of
    buffer views, `staging.InputStaging.arguments`) and calls `invoke(function, arguments, results)`,
    then reads `results.get_as_object(index, HalBufferView)` (`staged_call`).

    The list is passed as it is, so the argument packer's work (~0.6 us a call, ~2.3 us for a numpy
    array) is done once, when the list is built; IREE's invoke reads the list without changing it.
    The results list is made once too (~0.3 us a call): IREE's invoke empties the list it writes
    into, so it holds the last call's results until the next call. Hence one caller at a time (the
    staging buffers' lock). None where this iree.runtime lacks the internals `bind_function` uses
    (callers keep their general path).
    """
    if not _LEAN:  # pragma: no cover
        return None
    import iree.runtime as ireert

    vm_function = module.lookup_function(name)
    if vm_function is None:
        raise KeyError(name)
    return context.vm_context.invoke, vm_function, ireert.VmVariantList(result_count)


def bind_exclusive(
    context: Any, module: Any, name: str, result_count: int, pinned: tuple, keep_results: bool
) -> Callable[..., tuple] | None:
    """`bind_function(..., all_tensors=True)` for a caller that never calls it from two threads at
    once (the Python host's call through the staging buffers, which holds their lock).

    When the first call's arguments are all `pinned` objects (the staging's buffer views, alive as
    long as the bundle: `seg0(x)` of a static-shape x), it passes the argument list packed for them
    then (~1.5 us a call) whenever the same objects come again. With `keep_results`
    it also keeps one results list for every call (~0.7 us a call): IREE's invoke empties the list
    it writes into, so the list holds the last call's results until the next call, which is for the
    caller to allow only where those results are small. None where `bind_function` would fall back.
    """
    if not _LEAN:  # pragma: no cover
        return None
    import iree.runtime as ireert

    device = context.config.device
    vm_function = module.lookup_function(name)
    if vm_function is None:
        raise KeyError(name)
    pack = ArgumentPacker(_invoke_statics, None).pack
    invoke = context.vm_context.invoke
    variant_list, buffer_view = ireert.VmVariantList, ireert.HalBufferView
    kept = variant_list(result_count) if keep_results else None
    indices = range(result_count)
    pinned_ids = frozenset(id(value) for value in pinned)
    no_keywords: dict = {}
    key: tuple = ()  # the pinned arguments `prepared` was packed from
    first: Any = None  # key[0]: most segments take one input
    prepared: Any = None
    count = -1  # len(key) once there is a key; -2 when the first call's arguments were not all pinned
    single = result_count == 1

    def call_exclusive(*args: Any) -> tuple:
        nonlocal key, first, prepared, count
        results = kept if kept is not None else variant_list(result_count)
        # By identity: an argument may be a numpy array, whose `==` is elementwise.
        if len(args) == count and args[0] is first and (count == 1 or all(map(_is, args, key))):
            invoke(vm_function, prepared, results)
        else:
            arguments = pack(InvokeContext(device), args, no_keywords)
            if count == -1:  # the first call decides, so a segment that never gets pinned arguments stops looking
                if args and all(id(value) in pinned_ids for value in args):
                    key, first, prepared, count = args, args[0], arguments, len(args)
                else:
                    count = -2
            invoke(vm_function, arguments, results)
        if single:
            return (results.get_as_object(0, buffer_view),)
        get = results.get_as_object
        return tuple([get(index, buffer_view) for index in indices])

    return call_exclusive


def array_reader(dtype: np.dtype) -> Callable[[Any], np.ndarray]:
    """`to_numpy` for results the caller wants as `dtype`, with the dtype's lookups done once:
    ~0.8 us a small result instead of ~1.7. A result of another element type (IREE returns a
    bool tensor as int8) or a numpy array (a Python host can return its input as it is) is read
    by `to_numpy` and converted to `dtype`.
    """
    dtype = np.dtype(dtype)
    try:
        element_type = int(element_type_of(dtype))  # a buffer view's `element_type` is a plain int
    except ValueError:
        element_type = None
    ndarray = np.ndarray

    def read(value: Any) -> np.ndarray | None:
        if value is None:  # the Python host's stand-in for an Optional that is unset
            return None
        if getattr(value, "element_type", None) == element_type:
            # See `to_numpy`: the view's elements from the start of its buffer's mapping.
            return ndarray(value.shape, dtype, value.map()).copy()
        array = to_numpy(value)
        return array if array.dtype == dtype else array.astype(dtype)

    return read


def to_numpy(value: Any) -> np.ndarray:
    """A host copy of a tensor result (a HalBufferView, or a DeviceArray on the fallback path).

    A Python host can also return a numpy input unchanged (a loop that ran zero times).
    """
    if not hasattr(value, "map"):  # a numpy input returned as is, or a DeviceArray (fallback path)
        return value.copy() if isinstance(value, np.ndarray) else np.array(value.to_host())
    # An ndarray over the mapping, made in one call (~0.8 us for a small result, against ~1.7 for
    # `frombuffer` + `reshape` and ~1.9 for `MappedMemory.asarray`). The mapping covers the whole
    # buffer, which can be longer than the view (a loop-carried result of a smaller batch than the
    # allocation): the array reads the view's elements from its start and no further.
    return np.ndarray(value.shape, _dtype(value.element_type), value.map()).copy()


def to_scalar(value: Any) -> Any:
    """The one element of a tensor result, as a Python scalar (what TorchScript's Int/Bool read).

    This is the read-back of every data-dependent decision in the Python host, so it reads the
    mapped bytes directly (~0.3 us on local-sync, against ~1.9 us through `asarray(...).item()`).
    """
    if not hasattr(value, "map"):  # a numpy input returned as is, or a DeviceArray (fallback path)
        return value.item() if isinstance(value, np.ndarray) else value.to_host().item()
    dtype = _dtype(value.element_type)
    code = _SCALAR_CODES.get(dtype)
    if code is None:  # float16 and others memoryview cannot cast to
        return np.frombuffer(value.map(), dtype)[0].item()
    return memoryview(value.map()).cast(code)[0]


def scalar_reader(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`convert(to_scalar(value))` in one call (the Python host's `to_bool`, `to_int`, `to_float`:
    TorchScript's Bool/Int/Float of a one-element result, every decision's read-back).

    The memoryview code is looked up by the view's element type, a plain int, instead of through
    its dtype: ~0.6 us less a read on local-sync. Anything else (a numpy array the host returned as
    it is, float16) goes through `to_scalar`.
    """
    codes = _element_codes()
    mapped = memoryview

    def read(value: Any) -> Any:
        code = codes.get(getattr(value, "element_type", None))
        if code is None:
            return convert(to_scalar(value))
        return convert(mapped(value.map()).cast(code)[0])

    return read


def _element_codes() -> dict[int, str]:
    """IREE element type (as a buffer view's `element_type` gives it) -> memoryview code."""
    return {int(element_type_of(dtype)): code for dtype, code in _SCALAR_CODES.items()}


# Drivers whose result buffers the host can map in place: the CPU drivers' heap allocator grants
# every buffer MAPPING usage. GPU drivers allocate results with TRANSFER|DISPATCH_STORAGE usage only
# (Vulkan, lavapipe included, even when the memory itself is host-visible: `map()` fails with
# PERMISSION_DENIED ... requires MAPPING_SCOPED), and CUDA's device memory is not host memory at all.
MAPPABLE_RESULT_DRIVERS = frozenset({"local-sync", "local-task"})


def readers_for(device: Any, driver: str) -> tuple[Callable[[Any], np.ndarray], Callable[[Any], Any]]:
    """(to_numpy, to_scalar) for results of `device`, opened with `driver`; chosen once per device.

    The CPU drivers get the module's in-place readers unchanged (the fast path); any other driver
    reads through a `StagedReader`.
    """
    if driver in MAPPABLE_RESULT_DRIVERS:
        return to_numpy, to_scalar
    reader = StagedReader(device)
    return reader.to_numpy, reader.to_scalar


class StagedReader:
    """Reads device results by copying them into a host-visible staging buffer.

    The copy is a queue operation (`queue_copy` into a `HOST_LOCAL|DEVICE_VISIBLE` buffer with
    `TRANSFER|MAPPING` usage), waited on with a semaphore, then mapped. `iree.runtime`'s own
    `DeviceArray.to_host` does not work on every device: it imports the destination numpy array as
    a host allocation, which lavapipe rejects ("host allocation import pointer does not satisfy
    Vulkan minImportedHostPointerAlignment 4096"). One staging buffer is kept and grown, since a
    pinned host allocation can cost more than the copy; a lock keeps concurrent read-backs apart.

    >>> reader = StagedReader(device)          # doctest: +SKIP
    >>> reader.to_numpy(result_buffer_view)    # doctest: +SKIP
    """

    def __init__(self, device: Any) -> None:
        import threading

        import iree.runtime as ireert

        self._device = device
        self._memory_type = ireert.MemoryType.HOST_LOCAL | ireert.MemoryType.DEVICE_VISIBLE
        self._usage = ireert.BufferUsage.TRANSFER | ireert.BufferUsage.MAPPING
        self._semaphore = device.create_semaphore(0)
        self._signalled = 0
        self._staging: Any = None
        self._capacity = 0
        self._lock = threading.Lock()

    def _read(self, value: Any) -> np.ndarray:
        """A flat host copy of a buffer view's elements."""
        buffer = value.get_buffer()
        size = buffer.byte_length()  # queue_copy copies the whole (sub)buffer the view lies in
        dtype = _dtype(value.element_type)
        if size == 0:  # an empty tensor (a loop that produced nothing): there is nothing to copy
            return np.empty(0, dtype)
        with self._lock:
            if size > self._capacity:
                self._capacity = max(size, 2 * self._capacity, 256)
                self._staging = self._device.allocator.allocate_buffer(
                    memory_type=self._memory_type, allowed_usage=self._usage, allocation_size=self._capacity
                )
            self._signalled += 1
            self._device.queue_copy(buffer, self._staging, [], [(self._semaphore, self._signalled)])
            self._semaphore.wait(self._signalled)
            return np.frombuffer(self._staging.map(), dtype, count=value.byte_length // dtype.itemsize).copy()

    def to_numpy(self, value: Any) -> np.ndarray:
        """A host copy of a tensor result (see the module-level `to_numpy`)."""
        if isinstance(value, np.ndarray):  # a numpy input returned as is by a Python host
            return value.copy()
        return self._read(value).reshape(value.shape)

    def to_scalar(self, value: Any) -> Any:
        """The one element of a tensor result, as a Python scalar (see the module-level `to_scalar`)."""
        if isinstance(value, np.ndarray):
            return value.item()
        return self._read(value)[0].item()


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
