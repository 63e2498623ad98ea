"""Load a bundle and run it. Imports `iree.runtime` and `numpy` only (never torch).

Example:
    >>> run = load("model.dycl", device="local-sync", host="compiled")   # doctest: +SKIP
    >>> logits, exit_index = run(np.zeros((1, 3, 32, 32), np.float32))  # doctest: +SKIP
"""

from __future__ import annotations

import atexit
import functools
import gc
import platform
import threading
import weakref
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .bundle_format import check_file, check_main_abi, read_manifest, select_cpu_target
from .errors import BundleError, InputError, ModelRaised
from .invoke import (
    MAPPABLE_RESULT_DRIVERS,
    array_reader,
    bind_exclusive,
    bind_function,
    element_type_of,
    prepared_invoke,
    readers_for,
    scalar_reader,
    to_numpy,
    to_scalar,
    upload,
)
from .none_inputs import NoneInputs
from .output_tree import build_outputs, flatten_outputs, leaf_labels
from .random_state import DEFAULT_SEED, initial_state, state_array, state_number
from .staged_call import StagedPlan, staged_call
from .staging import InputStaging

_NUMPY_DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "int64": np.int64,
    "int32": np.int32,
    "int16": np.int16,
    "int8": np.int8,
    "uint8": np.uint8,
    "bool": np.bool_,
}
# The 0-d tensor each scalar kind travels as through the compiled host's `main` (main_abi 2).
_SCALAR_DTYPES = {"int": np.dtype(np.int64), "float": np.dtype(np.float32), "bool": np.dtype(np.bool_)}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# The targets whose vmfbs each driver can run.
_DRIVER_TARGETS = {
    "local-sync": "llvm-cpu",
    "local-task": "llvm-cpu",
    "cuda": "cuda",
    "vulkan": "vulkan",
}
# IREE's caching allocator: a buffer a call frees serves a later request of the same size. It keeps
# at most 64 free buffers and 256 MiB (in use and free together) of the device's first heap, the
# one the CPU drivers have; past that a freed buffer goes back to the heap. The C runtime's
# `dycl_use_buffer_cache` passes the same pools.
_BUFFER_CACHE = "caching:*=*;256mib;64"


class HostServices:
    """What the generated Python host calls: segments, read-backs, decision counting."""

    ModelRaised = ModelRaised

    def __init__(
        self,
        context: Any,
        module: Any,
        segments: dict[str, int],
        record: bool,
        read_scalar: Callable = to_scalar,
        pinned: tuple | None = None,
        kept_results: frozenset[str] = frozenset(),
    ) -> None:
        self._context = context
        self._module = module
        self._segments = segments
        self._read_scalar = read_scalar
        # For a host that one thread at a time runs (`invoke.bind_exclusive`): the staging's views,
        # and the segments whose results lists are kept between calls.
        self._pinned = pinned
        self._kept_results = kept_results
        self.record = record
        self.decisions: dict[str, dict[bool, int]] = defaultdict(lambda: defaultdict(int))
        self.trip_counts: dict[str, list[int]] = defaultdict(list)
        if not record:
            self.decide = _pass_through
            self.trips = _ignore
        if read_scalar is to_scalar:  # results read in place: each kind in one call (`invoke.scalar_reader`)
            self.to_bool, self.to_int, self.to_float = scalar_reader(bool), scalar_reader(int), scalar_reader(float)
        else:  # a device whose results need a staged read-back

            def to_bool(array: Any) -> bool:
                return bool(read_scalar(array))

            def to_int(array: Any) -> int:
                return int(read_scalar(array))

            def to_float(array: Any) -> float:
                return float(read_scalar(array))

            self.to_bool, self.to_int, self.to_float = to_bool, to_int, to_float

    def segment(self, name: str) -> Callable[..., tuple]:
        """The segment function; it returns a tuple of buffers that stay on the device."""
        if self._pinned is not None:
            function = bind_exclusive(
                self._context, self._module, name, self._segments[name], self._pinned, name in self._kept_results
            )
            if function is not None:
                return function
        return bind_function(self._context, self._module, name, self._segments[name], all_tensors=True)

    # `.item()` semantics: TorchScript's Bool/Int/Float accept any one-element tensor, not only 0-d.
    @staticmethod
    def to_bool(array: Any) -> bool:
        return bool(to_scalar(array))

    @staticmethod
    def to_int(array: Any) -> int:
        return int(to_scalar(array))

    @staticmethod
    def to_float(array: Any) -> float:
        return float(to_scalar(array))

    @staticmethod
    def to_array(items: Any, dtype: str) -> np.ndarray:
        return np.asarray(items, dtype=_NUMPY_DTYPES[dtype])

    @staticmethod
    def float_arg(value: float) -> np.ndarray:
        return np.asarray(value, dtype=np.float32)

    def decide(self, condition: bool, label: str) -> bool:
        self.decisions[label][bool(condition)] += 1
        return condition

    def trips(self, label: str, count: int) -> None:
        self.trip_counts[label].append(count)


def _pass_through(condition: bool, label: str) -> bool:
    return condition


def _ignore(label: str, count: int) -> None:
    return None


class Runner:
    """A loaded bundle: call it with the model's inputs."""

    def __init__(
        self,
        path: str | Path,
        device: str = "local-sync",
        host: str = "compiled",
        record: bool = False,
        expected_sha256: str | None = None,
        seed: int = DEFAULT_SEED,
        reuse_buffers: bool | None = None,
    ) -> None:
        import iree.runtime as ireert

        self.path, self.manifest = read_manifest(path, expected_sha256)
        if host not in ("compiled", "python"):
            raise ValueError(f"host must be 'compiled' or 'python', not {host!r}")
        if host == "compiled" and self.manifest["host"] != "compiled":
            reason = self.manifest.get("compiled_host_unsupported") or "not built"
            raise BundleError(f"{self.path}: has no compiled host ({reason}); load it with host='python'")
        if host == "compiled":
            check_main_abi(self.path, self.manifest)
        self.host = host
        self.device = device
        driver = device.split(":")[0]
        target = _DRIVER_TARGETS.get(driver)
        if target is None:
            raise BundleError(f"unknown device {device!r}; known drivers: {', '.join(_DRIVER_TARGETS)}")
        if target == "llvm-cpu":  # a bundle may hold CPU code for several CPUs: take this machine's
            target = select_cpu_target(self.path, self.manifest, platform.machine())
        self.target = target
        entry = _target_entry(self.manifest["targets"], target)
        if entry is None:
            built = ", ".join(self.manifest["targets"]) or "none"
            raise BundleError(
                f"{self.path}: built for {built}, which device {device!r} cannot run (it needs a {target} vmfb)"
            )
        vmfb = check_file(self.path, self.manifest, entry["file"])
        if reuse_buffers is None:
            reuse_buffers = reuses_buffers(self.manifest, driver)
        self.reuse_buffers = reuse_buffers
        try:
            if reuse_buffers:
                config = ireert.Config(device=_reusing_device(device))
            elif driver == "vulkan":
                config = ireert.Config(device=_own_device(device))
            else:
                config = ireert.Config(device)
        except Exception as error:
            raise BundleError(f"cannot open IREE device {device!r}: {error}") from error
        self._context = ireert.SystemContext(config=config)
        if reuse_buffers:
            _REUSING_RUNNERS.add(self)
        try:
            module = ireert.VmModule.mmap(self._context.instance, str(vmfb))
            self._context.add_vm_module(module)
        except Exception as error:
            raise BundleError(f"{vmfb}: IREE cannot load it ({error}); it may be corrupt or for another CPU") from error
        # How results reach the host, chosen once for this device (see `invoke.readers_for`).
        read_array, read_scalar = readers_for(self._context.config.device, driver)
        self.read_back = "in place" if driver in MAPPABLE_RESULT_DRIVERS else "staged"
        segments = {segment["name"]: len(segment["outputs"]) for segment in self.manifest["segments"]}
        wanted = ["main"] if host == "compiled" else list(segments)
        absent = [name for name in wanted if module.lookup_function(name) is None]
        if absent:
            raise BundleError(f"{vmfb}: has no function {', '.join(absent)}, which the manifest's {host} host calls")
        self.services = HostServices(self._context, module, segments, record, read_scalar)
        self._read_array = read_array
        # A model that draws random numbers takes the generator's state after its inputs and returns
        # the next state after its outputs (main_abi 3, `random_state.py`); the runner keeps it.
        self._draws = bool(self.manifest.get("random_state"))
        self._state: Any = initial_state(seed) if self._draws else None
        if host == "compiled":
            # main_abi 2 and 3: every result of `main` is a buffer view, scalars included.
            result_count = len(self.manifest["outputs"]["leaves"]) + self._draws
            self._main = bind_function(self._context, module, "main", result_count, all_tensors=True)
        else:
            source_path = check_file(self.path, self.manifest, self.manifest["python_host"])
            namespace: dict[str, Any] = {}
            code = compile(source_path.read_text(), str(source_path), "exec")
            exec(code, namespace)  # the caller asked for the Python host: it is code from the bundle
            self._bind_python_host = namespace["bind"]
            self._main = self._bind_python_host(self.services)
        # Inputs exported as None take only None and are removed before the checks (`none_inputs`).
        self._none_inputs = NoneInputs.of(self.manifest["inputs"], self.manifest["model"])
        taken = self._none_inputs.taken() if self._none_inputs else list(enumerate(self.manifest["inputs"]))
        self._positions = [position for position, _ in taken]  # in `forward`, for the messages
        self._inputs = [spec for _, spec in taken]
        # The compiled host's `main` takes scalars as 0-d tensors (main_abi 2); the Python host's segment
        # calls take them as the generated code passes them. The Python host uploads each tensor
        # input once, since several segments may read it. On a GPU the compiled host's inputs are
        # uploaded the same way, into device-local memory (iree.runtime would put a numpy argument in
        # a device-local buffer that the host may map, which a GPU may have to place in host memory).
        on_gpu = driver not in MAPPABLE_RESULT_DRIVERS
        device = self._context.config.device if host == "python" or on_gpu else None
        self._checkers = [
            _input_checker(position, spec, scalar_as_tensor=host == "compiled", upload_to=device)
            for position, spec in taken
        ]
        self._leaves = self.manifest["outputs"]["leaves"]
        self._tree = self.manifest["outputs"]["tree"]
        self._shared_dims = _shared_dims(self._inputs)
        # Per-call work decided once: how each output is read and the output structure rebuilt,
        # and on the CPU drivers, which inputs go through buffers reused every call (`staging`).
        self._converters = [_output_converter(spec, read_array, read_scalar) for spec in self._leaves]
        self._build = _output_builder(self._tree)
        self._staging: InputStaging | None = None
        self._call_staged: Callable[[tuple], Any] | None = None
        if not on_gpu and not self._draws:  # a model that draws passes its random state: the general path
            self._stage_inputs(module, host)

    def _stage_inputs(self, module: Any, host: str) -> None:
        """Give every static-shape input a device buffer reused by every call (`staging.py`), and
        make `_call_staged`, the call through them.

        The compiled host then calls `main` with one argument list built here, which needs every
        input staged (a scalar is a 0-d tensor to `main`); the Python host stages its tensor inputs
        and passes its scalars as they come. The checks are the general path's functions, without
        the upload, so bad input gets the same errors.
        """
        plans = []  # per input: (check, (shape, dtype) if staged else None)
        for position, spec in zip(self._positions, self._inputs):
            kind = spec["kind"]
            if kind in _SCALAR_DTYPES and host == "compiled":
                layout = ((), _SCALAR_DTYPES[kind])
            elif kind == "tensor":
                layout = (tuple(spec["shape"]), np.dtype(_NUMPY_DTYPES.get(spec["dtype"], spec["dtype"])))
            else:
                layout = None
            if layout is not None and not InputStaging.fits(*layout):
                layout = None
            # A staged array is copied into the mapping element by element: any layout will do.
            plans.append((_input_checker(position, spec, scalar_as_tensor=False, contiguous=False), layout))
        staged = [layout for _, layout in plans if layout is not None]
        main_prepared = None
        if host == "compiled":
            main_prepared = prepared_invoke(self._context, module, "main", len(self._leaves))
        if (host == "compiled" and (len(staged) < len(plans) or main_prepared is None)) or not staged:
            return
        self._staging = staging = InputStaging(self._context.config.device, staged)
        arrays, views = iter(staging.arrays), iter(staging.views)
        copies = [(check, next(arrays) if layout is not None else None) for check, layout in plans]
        plan = StagedPlan(
            copies=copies,
            views=[next(views) if layout is not None else None for _, layout in plans],
            # A tensor with declared dims keeps its check (their ranges); none is staged today.
            layouts=[
                layout if spec["kind"] == "tensor" and not spec.get("dims") else None
                for (_, layout), spec in zip(plans, self._inputs)
            ],
            converters=self._converters,
            reads=[_read_in_place(spec, self._read_array) for spec in self._leaves],
            tree=self._tree,
            build=self._build,
            shared_dims=self._shared_dims,
            check_shared_dims=_check_shared_dims,
            model_check_failed=_model_check_failed,
            not_staged=_NOT_STAGED,
        )
        if main_prepared is not None:
            invoke, function, results = main_prepared
            self._call_staged = staged_call(
                plan, staging.try_acquire, staging.release, prepared=(invoke, function, staging.arguments, results)
            )
            return
        # The staged call holds the staging's lock from the copy to the read-back, so the host it runs
        # is run by one thread at a time: it gets segments that reuse their argument lists and, where
        # their results are small, their results lists (`invoke.bind_exclusive`), and counts its
        # decisions where `decisions` reads.
        services = self.services
        exclusive = HostServices(
            self._context,
            module,
            services._segments,
            services.record,
            services._read_scalar,
            pinned=tuple(staging.views),
            kept_results=_small_results(self.manifest["segments"]),
        )
        exclusive.decisions, exclusive.trip_counts = services.decisions, services.trip_counts
        self._call_staged = staged_call(
            plan, staging.try_acquire, staging.release, python_main=self._bind_python_host(exclusive)
        )

    @property
    def inputs(self) -> list[Port]:
        """The model's inputs in `forward` order: name, kind, dtype and shape (a dynamic dim is its name or None).

        >>> [(i.name, i.dtype, i.shape) for i in run.inputs]      # doctest: +SKIP
        [('x', 'float32', ['batch', 8])]
        """
        return [_port(spec["name"], spec) for spec in self.manifest["inputs"]]

    @property
    def outputs(self) -> list[Port]:
        """The model's outputs as flat leaves (`output0`, `output1_logits`, ... in the order `flatten_outputs`
        gives; see `output_tree.leaf_labels`)."""
        labels = leaf_labels(self._tree, len(self._leaves))
        return [_port(label, spec) for label, spec in zip(labels, self._leaves)]

    def flatten_outputs(self, outputs: Any) -> list:
        """The leaves of what a call returned, in `outputs` order (a run-time list of tensors as one stacked array)."""
        return flatten_outputs(self._tree, outputs)

    @property
    def decisions(self) -> dict[str, dict[bool, int]]:
        return self.services.decisions

    @property
    def trip_counts(self) -> dict[str, list[int]]:
        return self.services.trip_counts

    def __call__(self, *inputs: Any, **named: Any) -> Any:
        """Run the model: inputs in `forward` order, or by name (`run(x=..., n=3)`), as the model takes them."""
        if named:
            inputs = self._bind(inputs, named)
        if self._none_inputs is not None:
            inputs = self._none_inputs.strip(inputs)
        if self._call_staged is not None:
            outputs = self._call_staged(inputs)
            if outputs is not _NOT_STAGED:
                return outputs
        arguments = self._check_taken(inputs)
        if self._draws:
            arguments.append(self._state)
        try:
            results = self._main(*arguments)
        except RuntimeError as error:
            failed = _model_check_failed(error)
            if failed is None:
                raise
            raise failed from error
        if self._draws:
            # The next state stays where `main` left it (a device buffer) until the next call reads it.
            self._state, results = results[-1], results[:-1]
        return self._build([convert(value) for convert, value in zip(self._converters, results)])

    @property
    def random_state(self) -> int | None:
        """The random generator's state that the next call starts from, as one int (None for a model
        that does not draw): save it and give it to `restore_random_state` to replay the same numbers.
        It is `seed * 2**32 + draws so far` (host_runtime/random_state.py)."""
        if not self._draws:
            return None
        if isinstance(self._state, np.ndarray):
            return state_number(self._state)
        return state_number(self._read_array(self._state))  # a device buffer; staged on a GPU

    def restore_random_state(self, state: int) -> None:
        """Start the next call from `state` (a value `random_state` returned)."""
        self._state = state_array(state)

    def seed(self, seed: int) -> None:
        """Restart the model's random numbers from `seed` (an int; `load`'s default is 0). Two runners
        of one bundle, compiled host or Python host, given the same seed and inputs draw the same
        numbers. See host_runtime/random_state.py."""
        self._state = initial_state(seed)

    def check_inputs(self, inputs: tuple) -> list:
        """Convert and check the inputs before any device work; InputError names the bad one."""
        if self._none_inputs is not None:
            inputs = self._none_inputs.strip(inputs)
        return self._check_taken(inputs)

    def _check_taken(self, inputs: tuple) -> list:
        """`check_inputs` of the inputs the hosts take (those exported as None removed)."""
        if len(inputs) != len(self._checkers):
            names = ", ".join(spec["name"] for spec in self._inputs)
            raise InputError(f"{self.manifest['model']} takes {len(self._inputs)} inputs ({names}), got {len(inputs)}")
        arguments = [check(value) for check, value in zip(self._checkers, inputs)]
        if self._shared_dims:
            _check_shared_dims(self._shared_dims, inputs)
        return arguments

    def _bind(self, positional: tuple, named: dict[str, Any]) -> tuple:
        if self._none_inputs is not None:
            return self._none_inputs.bind(positional, named)
        names = [spec["name"] for spec in self._inputs]
        unknown = [name for name in named if name not in names]
        if unknown:
            raise InputError(f"{self.manifest['model']} has no input {unknown[0]!r}; its inputs are {', '.join(names)}")
        twice = [name for name in names[: len(positional)] if name in named]
        if twice:
            raise InputError(f"input {twice[0]!r} given both by position and by name")
        missing = [name for name in names[len(positional) :] if name not in named]
        if missing:
            raise InputError(f"{self.manifest['model']} needs input {missing[0]!r}; its inputs are {', '.join(names)}")
        return (*positional, *(named[name] for name in names[len(positional) :]))

    @staticmethod
    def _convert_output(
        value: Any,
        spec: dict[str, Any],
        to_numpy: Callable[[Any], np.ndarray] = to_numpy,
        to_scalar: Callable[[Any], Any] = to_scalar,
    ) -> Any:
        kind = spec["kind"]
        if "constant" in spec and value is None:
            return spec["constant"]
        if value is None:  # the Python host's stand-in for an Optional's unset value
            return None
        if kind in _SCALAR_DTYPES and not isinstance(value, (bool, int, float)):
            value = to_scalar(value)  # the compiled host returns a scalar as a 0-d tensor (main_abi 2)
        if kind == "tensor":
            array = to_numpy(value)
            want = _NUMPY_DTYPES.get(spec["dtype"])
            if want is not None and array.dtype != want:
                array = array.astype(want)
            return array
        if kind == "bool":
            return bool(value)
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "list" and not isinstance(value, list):
            return to_numpy(value).tolist()  # the compiled host keeps a list of ints as a tensor
        return value


_NOT_STAGED = object()  # what a staged call returns when the general path must take the call


# A results list kept between calls holds the last results alive until the next call: worth ~0.7 us
# a call on a tiny segment, nothing on one whose results are activations of a large network.
_KEPT_RESULT_BYTES = 64 * 1024


def _small_results(segments: list[dict[str, Any]]) -> frozenset[str]:
    """The segments whose results are all static-shape tensors of at most `_KEPT_RESULT_BYTES` together."""
    small = []
    for segment in segments:
        total = 0
        for spec in segment["outputs"]:
            dtype = _NUMPY_DTYPES.get(spec.get("dtype") or "")
            shape = spec.get("shape")
            if spec.get("kind") != "tensor" or dtype is None or shape is None or None in shape:
                break
            total += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        else:
            if total <= _KEPT_RESULT_BYTES:
                small.append(segment["name"])
    return frozenset(small)


def _read_in_place(spec: dict[str, Any], read_array: Callable[[Any], np.ndarray]) -> np.dtype | None:
    """The dtype a staged call reads an output leaf as, in place (`staged_call`), where
    `_output_converter` gives it `invoke.array_reader`; None where the converter does the work."""
    want = _NUMPY_DTYPES.get(spec.get("dtype") or "")
    if spec["kind"] == "tensor" and "constant" not in spec and want is not None and read_array is to_numpy:
        return np.dtype(want)
    return None


def _output_converter(
    spec: dict[str, Any], read_array: Callable[[Any], np.ndarray], read_scalar: Callable[[Any], Any]
) -> Callable[[Any], Any]:
    """How one output leaf becomes what the caller gets, decided once per bundle: a tensor of a
    known dtype read in place gets `invoke.array_reader`; everything else `Runner._convert_output`."""
    want = _NUMPY_DTYPES.get(spec.get("dtype") or "")
    if spec["kind"] == "tensor" and "constant" not in spec and want is not None and read_array is to_numpy:
        return array_reader(want)
    return functools.partial(Runner._convert_output, spec=spec, to_numpy=read_array, to_scalar=read_scalar)


def _output_builder(tree: Any) -> Callable[[list], Any]:
    """`build_outputs` for one tree, with the common trees (one leaf, a flat tuple) decided once."""
    if isinstance(tree, int):
        return lambda leaves: leaves[tree]
    if isinstance(tree, list) and tree == list(range(len(tree))):
        return tuple
    return functools.partial(build_outputs, tree)


def _input_checker(
    position: int, spec: dict[str, Any], scalar_as_tensor: bool, upload_to: Any = None, contiguous: bool = True
) -> Callable[[Any], Any]:
    """A function that checks and converts one input, built once per bundle (this is per-call work).

    With `upload_to` (a device), a tensor input comes back as a buffer on that device. With
    `scalar_as_tensor` (the compiled host's `main`, main_abi 2), an int, float or bool comes back as
    a 0-d int64, float32 or bool array (or buffer), as `main` takes it. Without `contiguous` a
    tensor may come back in the caller's layout (for a copy that takes any layout).
    """
    where = f"input {position} ({spec['name']!r})"
    kind = spec["kind"]
    if scalar_as_tensor and kind in _SCALAR_DTYPES:
        check_scalar = _input_checker(position, spec, scalar_as_tensor=False)
        dtype = _SCALAR_DTYPES[kind]
        if upload_to is None:

            def check_scalar_as_array(value: Any) -> np.ndarray:
                return np.asarray(check_scalar(value), dtype)

            return check_scalar_as_array
        element_type = element_type_of(dtype)

        def check_scalar_as_buffer(value: Any) -> Any:
            return upload(upload_to, np.asarray(check_scalar(value), dtype), element_type)

        return check_scalar_as_buffer
    if kind == "tensor":
        dtype = np.dtype(_NUMPY_DTYPES.get(spec["dtype"], spec["dtype"]))
        shape = tuple(spec["shape"])
        static = None not in shape
        element_type = element_type_of(dtype) if upload_to is not None else None
        # Declared ranges of dynamic dims (`Dim("batch", min=1, max=8)`), checked as torch.export checks them.
        bounds = [
            (dim["dim"], dim.get("min"), dim.get("max"), dim.get("name") or "dynamic")
            for dim in _dims_of(spec, where)
            if dim.get("min") is not None or dim.get("max") is not None
        ]

        def check_tensor(value: Any) -> Any:
            array = value if type(value) is np.ndarray else _to_numpy(value)
            if array is None:
                if value is None:  # an Optional input called with None: the bundle is for a tensor there
                    raise InputError(
                        f"{where} must be a tensor/array, got None: the bundle was exported with a tensor "
                        "for it (export with None for it to call it with None)"
                    )
                raise InputError(f"{where} must be a tensor/array, got {type(value).__name__}")
            if array.dtype is not dtype and array.dtype != dtype:  # numpy's builtin dtypes are singletons
                raise InputError(f"{where} must have dtype {spec['dtype']}, got {array.dtype}")
            if array.shape != shape and (static or not _fits(array.shape, shape)):
                expected = f"shape {_shape_text(list(shape))}, got shape {list(array.shape)}"
                if array.ndim != len(shape):
                    raise InputError(f"{where} must have rank {len(shape)} ({expected})")
                dim = next(d for d, (w, h) in enumerate(zip(shape, array.shape)) if w is not None and w != h)
                raise InputError(f"{where} must have size {shape[dim]} in dim {dim} ({expected})")
            for dim, low, high, name in bounds:
                size = array.shape[dim]
                if (low is not None and size < low) or (high is not None and size > high):
                    allowed = f"[{low if low is not None else 0}, {high if high is not None else 'inf'}]"
                    raise InputError(f"{where} has size {size} in dim {dim} ({name}), outside its range {allowed}")
            if contiguous and not array.flags.c_contiguous:
                array = np.ascontiguousarray(array)
            return array if upload_to is None else upload(upload_to, array, element_type)

        return check_tensor
    if kind == "bool":

        def check_bool(value: Any) -> Any:
            if not isinstance(value, (bool, np.bool_)):
                raise InputError(f"{where} must be a bool, got {type(value).__name__}")
            return bool(value)

        return check_bool
    if kind == "int":
        # Both hosts hold an int as int64 (PyTorch's `int`); beyond it IREE's VM would fail deep inside.
        def check_int(value: Any) -> int:
            if type(value) is not int:
                if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                    raise InputError(f"{where} must be an int, got {type(value).__name__}")
                value = int(value)
            if not _INT64_MIN <= value <= _INT64_MAX:
                raise InputError(f"{where} is {value}, outside the int64 range [-2**63, 2**63 - 1]")
            return value

        return check_int
    if kind == "float":

        def check_float(value: Any) -> float:
            if type(value) is float:
                return value
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.floating, np.integer)):
                raise InputError(f"{where} must be a float, got {type(value).__name__}")
            return float(value)

        return check_float
    raise BundleError(f"input kind {kind!r} is not supported by this runtime")


@dataclass(frozen=True)
class Port:
    """One input or output of a bundle, as ONNX Runtime's `get_inputs()` describes them."""

    name: str
    kind: str  # "tensor", "int", "float", "bool", "list" or "none" (an input exported as None: pass None)
    dtype: str | None  # a tensor's dtype (torch's name: "float32"), else None
    shape: list | None  # a tensor's dims: an int, or a dynamic dim's name (None when it has none)


def _port(name: str, spec: dict[str, Any]) -> Port:
    if spec["kind"] != "tensor":
        return Port(name, spec["kind"], None, None)
    names = {dim["dim"]: dim.get("name") for dim in spec.get("dims", [])}
    return Port(name, "tensor", spec["dtype"], [names.get(i) if d is None else d for i, d in enumerate(spec["shape"])])


def _dims_of(spec: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """A tensor input's declared dynamic dims (`dims` in the manifest), checked for shape once."""
    dims = spec.get("dims", [])
    ok = isinstance(dims, list) and all(
        isinstance(d, dict)
        and type(d.get("dim")) is int
        and 0 <= d["dim"] < len(spec["shape"])
        and all(d.get(k) is None or type(d[k]) is int for k in ("min", "max"))
        and (d.get("name") is None or isinstance(d["name"], str))
        for d in dims
    )
    if not ok:
        raise BundleError(f"corrupt manifest: {where} has malformed 'dims' {dims!r}")
    return dims


def _shared_dims(specs: list[dict[str, Any]]) -> list[tuple[str, list[tuple[int, int, str]]]]:
    """Dim names that several dims share (they must be equal at run time), each with its
    (input position, dim, input name) members."""
    groups: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for position, spec in enumerate(specs):
        if spec["kind"] == "tensor":
            for dim in _dims_of(spec, f"input {position} ({spec['name']!r})"):
                if dim.get("name"):
                    groups[dim["name"]].append((position, dim["dim"], spec["name"]))
    return [(name, members) for name, members in groups.items() if len(members) > 1]


def _check_shared_dims(groups: list[tuple[str, list[tuple[int, int, str]]]], inputs: tuple) -> None:
    for dim_name, members in groups:
        (position, dim, name), *others = members
        size = tuple(inputs[position].shape)[dim]
        for other_position, other_dim, other_name in others:
            other_size = tuple(inputs[other_position].shape)[other_dim]
            if other_size != size:
                raise InputError(
                    f"input {position} ({name!r}) has size {size} in dim {dim} and input {other_position} "
                    f"({other_name!r}) size {other_size} in dim {other_dim}, but both are dim {dim_name!r}: "
                    "they must be equal"
                )


def available_devices() -> list[str]:
    """The devices this machine can run bundles on, as `load(device=...)` takes them.

    >>> available_devices()                                            # doctest: +SKIP
    ['local-sync', 'local-task', 'vulkan']
    """
    import iree.runtime as ireert

    found = []
    for driver in _DRIVER_TARGETS:
        try:
            devices = ireert.get_driver(driver).query_available_devices()
        except Exception:  # the driver's library is absent (no libcuda, no Vulkan loader)
            continue
        if devices:
            found.append(driver)
    return found


# The devices `_reusing_device` opened, by device URI, and the lock that makes runners loaded at
# once from several threads share one.
def _own_device(device: str) -> Any:
    """A Vulkan device of the runner's own. With one device shared by two runners (as `iree.runtime`
    shares a driver's device), a compiled host called after another bundle's host on it computed
    with a wrong input on lavapipe (README, Known traps: `x - scale` came out as `x`), where each
    runner with its own device was right."""
    import iree.runtime as ireert

    return ireert.get_driver(device.split(":")[0]).create_device_by_uri(device)


_REUSING_DEVICES: dict[str, Any] = {}
_REUSING_DEVICES_LOCK = threading.Lock()


def _reusing_device(device: str) -> Any:
    """The process's one device for `device` whose allocator caches freed buffers, shared by every
    runner that reuses buffers (as `iree.runtime` shares its plain devices) and kept until the
    process exits (`_release_reusing_devices`).

    A buffer from IREE's cache points back to the caching allocator without holding it (IREE's
    `pooling_allocator`), so the buffer must be released before its device: a device per runner,
    released with it, crashed the process at exit, where Python frees objects in no set order."""
    import iree.runtime as ireert

    with _REUSING_DEVICES_LOCK:
        if device not in _REUSING_DEVICES:
            driver = ireert.get_driver(device.split(":")[0])
            _REUSING_DEVICES[device] = driver.create_device_by_uri(device, allocators=[_BUFFER_CACHE])
        return _REUSING_DEVICES[device]


# The live runners whose buffers come from `_reusing_device`; what they hold is released at exit
# before the devices are.
_REUSING_RUNNERS: weakref.WeakSet[Runner] = weakref.WeakSet()


@atexit.register
def _release_reusing_devices() -> None:
    """At exit, release every reusing runner's buffers (staged inputs, kept state, its VM context),
    then the caching devices, in that order."""
    if not _REUSING_DEVICES:
        return
    for runner in list(_REUSING_RUNNERS):
        runner.__dict__.clear()
    gc.collect()
    _REUSING_DEVICES.clear()


def reuses_buffers(manifest: dict[str, Any], driver: str) -> bool:
    """Whether a bundle's calls on `driver` take their transient buffers from a cache by default:
    on the CPU drivers, when the model's inputs and outputs and every segment's have static shapes.

    IREE's CPU drivers allocate each call's transient buffers anew and zero them (`calloc`), which
    costs MobileNetV2 at 224x224 two allocations of ~0.11 ms a call, ~4% of the call. IREE's caching
    allocator hands a freed buffer to the next request of its size. A bundle whose shapes are
    static asks the same sizes at every call (one set per path), so the cache holds at most what
    its paths use. Where sizes change from call to call (a decoder's rows growing with its loop),
    few requests find a buffer of their size, the cache keeps buffers nothing takes, and a new
    buffer is cold: the Transformer decoder took 1.07x the time with it.
    """
    if _DRIVER_TARGETS.get(driver) != "llvm-cpu":  # the CPU drivers, local-sync and local-task
        return False
    values = [*manifest.get("inputs", ()), *manifest.get("outputs", {}).get("leaves", ())]
    values += [value for segment in manifest["segments"] for value in (*segment["inputs"], *segment["outputs"])]
    return all(None not in (value.get("shape") or ()) for value in values)


def _target_entry(targets: dict[str, Any], target: str) -> dict[str, Any] | None:
    """The manifest entry of `target`; a GPU target may carry its architecture (`cuda:sm_86`)."""
    if target in targets or target == "llvm-cpu":  # `llvm-cpu:TRIPLE` is cross-compiled: not for this CPU
        return targets.get(target)
    return next((entry for name, entry in targets.items() if name.split(":")[0] == target), None)


def _model_check_failed(error: RuntimeError) -> ModelRaised | None:
    """The compiled host's failed check (a `torch.runtime.assert`, e.g. an index out of range) as ModelRaised.

    IREE's VM fails the call with FAILED_PRECONDITION and the check's message; other errors are left as they are.
    """
    text = str(error)
    marker = "FAILED_PRECONDITION; "
    if marker not in text:
        return None
    message = text.split(marker, 1)[1].split("; \n")[0].strip()
    if not message.startswith(("IndexError", "RuntimeError", "model raised")):
        return None
    return ModelRaised(message.removeprefix("model raised: "))


def _fits(have: tuple, want: tuple) -> bool:
    return len(have) == len(want) and all(w is None or w == h for w, h in zip(want, have))


def _to_numpy(value: Any) -> np.ndarray | None:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "numpy") and hasattr(value, "detach"):  # a torch.Tensor, without importing torch
        return value.detach().cpu().numpy()
    if hasattr(value, "to_host"):
        return value.to_host()
    return None


def _shape_text(shape: list) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def load(
    path: str | Path,
    device: str = "local-sync",
    host: str = "compiled",
    record: bool = False,
    expected_sha256: str | None = None,
    seed: int = DEFAULT_SEED,
    reuse_buffers: bool | None = None,
) -> Runner:
    """Load a bundle for `device` ("local-sync", "local-task", "cuda", "vulkan") with one host.

    `record=True` (Python host only) counts which side of every decision ran (`runner.decisions`)
    and every loop's trip count (`runner.trip_counts`). `expected_sha256` pins the bundle: the
    SHA-256 of its manifest (`host_runtime.bundle_format.manifest_sha256`), which holds every file's hash.
    `seed` starts the random numbers of a model that draws them (`torch.rand`, `bernoulli`, dropout in
    training mode); `Runner.seed` restarts them. Without it every load draws the same numbers (seed 0).
    `reuse_buffers` runs the bundle on a device whose freed buffers serve later calls of the same
    sizes (IREE's caching allocator, one such device per driver in the process); by default (None)
    on the CPU drivers for bundles whose shapes are all static (`reuses_buffers`).
    """
    return Runner(
        path,
        device=device,
        host=host,
        record=record,
        expected_sha256=expected_sha256,
        seed=seed,
        reuse_buffers=reuse_buffers,
    )
