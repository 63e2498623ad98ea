"""Device buffers that a CPU device reads a bundle's static-shape inputs from, allocated once per bundle.

Handing a numpy array to an IREE function costs an allocation and an import per call (`iree.runtime`'s
argument packer: ~2.3 us for a 4-element array on local-sync, of a ~9 us call), and the packing of
the argument list itself another ~0.6 us. On the CPU drivers every buffer can be mapped, so an input
whose shape never changes gets one buffer for the life of the bundle: each call copies the caller's
array into its mapping (~0.2 us) and passes the same argument list again. The buffer views and the
argument list are built once.

A call holds the staging buffers from the copy until its results have been read into host arrays
(a result may be the input's own buffer: `return x`), so two threads calling one bundle at once
must not share them: `try_acquire` takes them only when no other call holds them, and a call that
does not get them passes its arrays as before.

Example:
    >>> staging = InputStaging(device, [((1, 8), np.dtype(np.float32))])  # doctest: +SKIP
    >>> if staging.try_acquire():                                          # doctest: +SKIP
    ...     staging.arrays[0][...] = x
    ...     results = call_with(staging.arguments)
    ...     staging.release()
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

from .invoke import element_type_of


class InputStaging:
    """One mapped device buffer per input, the buffer views over them, and the VM argument list
    that holds those views in order (what `staged_call` calls a function with)."""

    def __init__(self, device: Any, inputs: list[tuple[tuple[int, ...], np.dtype]]) -> None:
        import iree.runtime as ireert

        memory_type = ireert.MemoryType.DEVICE_LOCAL | ireert.MemoryType.HOST_VISIBLE
        usage = ireert.BufferUsage.DEFAULT | ireert.BufferUsage.MAPPING
        self.arrays: list[np.ndarray] = []
        self.views: list[Any] = []
        self.arguments = ireert.VmVariantList(len(inputs))
        # The mappings stay alive with the arrays made from them (the arrays' base holds them).
        for shape, dtype in inputs:
            size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            buffer = device.allocator.allocate_buffer(
                memory_type=memory_type, allowed_usage=usage, allocation_size=max(size, dtype.itemsize)
            )
            array = buffer.map().asarray(shape, dtype)
            view = ireert.HalBufferView(buffer, shape, element_type_of(dtype))
            self.arrays.append(array)
            self.views.append(view)
            self.arguments.push_ref(view)
        lock = threading.Lock()
        self.try_acquire = functools.partial(lock.acquire, False)  # never waits for another call
        self.release = lock.release

    @staticmethod
    def fits(shape: list | tuple, dtype: np.dtype) -> bool:
        """Whether an input can be staged: a static shape with at least one element (an empty
        buffer has nothing to map), of a dtype IREE has an element type for."""
        if None in shape or int(np.prod(shape, dtype=np.int64)) == 0:
            return False
        try:
            element_type_of(dtype)
        except ValueError:
            return False
        return True
