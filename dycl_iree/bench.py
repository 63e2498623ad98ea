"""Benchmark dycl_iree against the other ways of running a dynamic network, side by side.

A dynamic network's speed only means something next to the alternatives, measured the same way:
in one process, on the same inputs, with the same thread budget, and with every candidate's outputs
checked against PyTorch eager on every sample, because a traced or mis-compiled network is often
fast exactly because it skips the path the input should have taken. So each candidate is
*prepared* once (exported and compiled; that time is the export time), checked on every sample,
and then timed in rounds that alternate the candidates round-robin, so a slow drift of the
machine (other jobs, frequency scaling) spreads over all of them instead of biasing one.

Candidates (see `CANDIDATES`):

- `eager`: the model itself; the baseline every speedup is measured against.
- `torchscript`: `torch.jit.freeze(torch.jit.script(model))`, the graph dycl_iree starts from.
- `torch-compile`: `torch.compile(model)` (inductor; graph breaks allowed); its export time is
  the first call on every sample, where compilation happens.
- `onnxruntime`: the TorchScript ONNX exporter's graph (with ONNX `If`/`Loop`) on onnxruntime's CPU
  provider: the DyCL paper's backend, but with control flow inside the graph.
- `iree-onnx`: the same ONNX graph through torch-mlir's ONNX importer and `iree-compile`, run on
  IREE's `local-task` driver: IREE without dycl_iree.
- `dycl-<host>-<driver>`: `dycl_iree.export` + `load` with the compiled or the Python host, on
  the `local-sync` or `local-task` driver.

Outputs: `report.md` (one table per model, then geometric-mean speedups), `results.json` (every raw
number) and `speedups.png` in the output folder. `--micro` measures what one data-dependent
decision costs on each host (see `micro_benchmark`).

Example (from the repository root):

    python -m dycl_iree bench --models my_model.py:make --rounds 3 --out bench-out
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from .errors import DyclError

T = TypeVar("T")

Inputs = tuple[Any, ...]
"""One call's positional inputs, in `forward` order: tensors and Python scalars."""

Factory = Callable[[], tuple[torch.nn.Module, Inputs]]
"""Builds a model and its example inputs, as `python -m dycl_iree export FILE.py:FACTORY` expects."""

# The CPU flags of ENVIRONMENT.md: compile for the machine the benchmark runs on.
IREE_CPU_FLAGS = (
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
)

# A float output matches when |actual - expected| <= FLOAT_ATOL + FLOAT_RTOL * max|expected| for
# every element. Relative to the tensor's largest magnitude, not element by element: rounding in
# a deep network is proportional to the size of the values it summed, so a logit near zero can
# legitimately be off by 3e-5 after torch.jit.freeze fuses a conv and a batch norm (measured on
# the zoo's SDN ResNet-56), while taking another path changes outputs by whole units.
FLOAT_RTOL = 1e-4
FLOAT_ATOL = 1e-5

# Pause before each candidate's turn in a round; see _time_turn.
SETTLE_S = 0.02

DYCL_HOSTS = ("compiled", "python")
DYCL_DRIVERS = ("local-sync", "local-task")


class BenchError(DyclError):
    """A problem with the benchmark's own inputs (an unknown model or candidate name)."""


class PeerError(DyclError):
    """A peer could not take the model (the message holds the peer's own error lines)."""


class ExporterMissingError(DyclError):
    """`dycl_iree.export` / `load` cannot be found (the exporter is not installed or not built)."""


# ---------------------------------------------------------------------------------------------
# Comparing outputs
# ---------------------------------------------------------------------------------------------


def flatten_outputs(outputs: Any) -> list[np.ndarray]:
    """Flatten any nesting of outputs into a list of numpy arrays, in order.

    Every candidate returns its own kind of value (tensors, numpy arrays, IREE `DeviceArray`s,
    Python scalars; tuples, lists or dicts of them), and ONNX flattens a model's output tuple into
    a list, so outputs are compared in this one flat form. `None` is dropped: exporters drop it too.

    >>> [a.tolist() for a in flatten_outputs((torch.ones(2), (3, [np.zeros(1)])))]
    [[1.0, 1.0], 3, [0.0]]
    """
    return [array for array, _ in _leaves(outputs)]


def _leaves(value: Any) -> list[tuple[np.ndarray, bool]]:
    """The flat outputs, each with whether it was a Python scalar (which has no shape to match)."""
    if value is None:
        return []
    if isinstance(value, torch.Tensor):
        return [(value.detach().cpu().numpy(), False)]
    if isinstance(value, np.ndarray):
        return [(value, False)]
    if isinstance(value, (bool, int, float)):
        return [(np.asarray(value), True)]
    if isinstance(value, np.generic):
        return [(np.asarray(value), False)]
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _leaves(item)]
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if hasattr(value, "to_host"):  # iree.runtime.DeviceArray
        return [(np.asarray(value.to_host()), False)]
    return [(np.asarray(value), False)]


def _kind(array: np.ndarray) -> str:
    """Group dtypes the way the correctness contract does: widths may differ, kinds may not."""
    if array.dtype == np.bool_:
        return "bool"
    if np.issubdtype(array.dtype, np.integer):
        return "int"
    if np.issubdtype(array.dtype, np.floating):
        return "float"
    return str(array.dtype)


def compare_outputs(expected: Any, actual: Any) -> str | None:
    """Return None when `actual` matches `expected`, else a one-line reason.

    Floats match within atol 1e-5 + rtol 1e-4 times the expected tensor's largest magnitude (NaN
    and infinity where expected has them); integers, booleans and every shape match exactly.
    Widths may differ (ONNX turns a Python int into int64, a Python float may come back as float32)
    but an int may not come back as a float. A Python scalar in `expected` has no shape, so any
    one-element array holding the same value matches it (ONNX returns an int as a [1] tensor).

    >>> compare_outputs((torch.ones(2), 3), [np.ones(2, np.float32), np.int64(3)]) is None
    True
    >>> compare_outputs(torch.ones(2), -torch.ones(2))
    'output 0: max abs difference 2 > 0.00011 (atol 1e-05 + rtol 0.0001 x max |expected| 1)'
    """
    expected_flat = _leaves(expected)
    actual_flat = flatten_outputs(actual)
    if len(expected_flat) != len(actual_flat):
        return f"{len(actual_flat)} outputs, expected {len(expected_flat)}"
    for index, ((want, scalar), got) in enumerate(zip(expected_flat, actual_flat)):
        if scalar and got.size == 1:
            got = got.reshape(())
        if want.shape != got.shape:
            return f"output {index}: shape {list(got.shape)}, expected {list(want.shape)}"
        if _kind(want) != _kind(got):
            return f"output {index}: dtype {got.dtype}, expected {want.dtype}"
        if _kind(want) == "float":
            reason = _float_mismatch(want, got)
            if reason is not None:
                return f"output {index}: {reason}"
        elif not np.array_equal(got, want):
            return f"output {index}: values differ ({_preview(got)} vs expected {_preview(want)})"
    return None


def _float_mismatch(want: np.ndarray, got: np.ndarray) -> str | None:
    want, got = want.astype(np.float64), got.astype(np.float64)
    if not np.array_equal(np.isnan(want), np.isnan(got)):
        return "NaN where expected has none, or the other way round"
    finite = np.isfinite(want)
    if not np.array_equal(want[~finite], got[~finite]):
        return "infinity differs"
    if not finite.any():
        return None
    difference = float(np.max(np.abs(got[finite] - want[finite]), initial=0.0))
    scale = float(np.max(np.abs(want[finite])))
    tolerance = FLOAT_ATOL + FLOAT_RTOL * scale
    if not difference <= tolerance:  # also catches NaN in `got` where `want` is finite
        return (
            f"max abs difference {difference:.3g} > {tolerance:.2g} "
            f"(atol {FLOAT_ATOL} + rtol {FLOAT_RTOL} x max |expected| {scale:.3g})"
        )
    return None


def _preview(array: np.ndarray) -> str:
    text = np.array2string(array.reshape(-1)[:6], separator=",")
    return text if array.size <= 6 else text[:-1] + ",...]"


def first_line(error: BaseException) -> str:
    """The line of an error that says what went wrong, for a report cell.

    `iree-compile` errors start with "Error invoking IREE compiler tool" and carry the real
    diagnostic further down, so for them the first line containing `error:` is taken instead
    (without the temporary file's path, which says nothing).

    >>> first_line(ValueError("bad shape\\nmore detail"))
    'ValueError: bad shape'
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if lines[0].startswith("Error invoking IREE compiler tool"):
        for line in lines[1:]:
            if "error: " in line:
                return f"iree-compile {line[line.index('error: ') :]}"
    return f"{type(error).__name__}: {lines[0]}"


# ---------------------------------------------------------------------------------------------
# Models, candidates and their results
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelEntry:
    """A model to benchmark: its factory and the samples to time and check it on.

    `samples` may be a list of input tuples, a callable building one (so a zoo can defer building
    big inputs), or None for `[example_inputs]`. The factory is called once per benchmark, so
    every candidate sees the same weights even when the factory initializes them randomly.
    """

    name: str
    factory: Factory
    samples: Sequence[Inputs] | Callable[[], Sequence[Inputs]] | None = None


@dataclass
class Prepared:
    """A candidate made ready for one model: what to call, and on what form of the inputs.

    `convert` runs once per sample before timing (torch tensors to numpy, input dicts for
    onnxruntime), so only the call itself is timed. `call` must return host values: a candidate
    that leaves results on a device would look faster than one that has to hand them back.
    """

    call: Callable[[Any], Any]
    convert: Callable[[Inputs], Any] = lambda inputs: inputs
    size_bytes: int | None = None
    note: str = ""


class ModelContext:
    """What candidates share for one model: the model, its inputs, a folder and built artifacts.

    Several candidates start from the same artifact (the ONNX graph feeds onnxruntime and IREE; a
    dycl_iree bundle feeds both hosts on one driver, its CPU code split for that driver's threads).
    `shared` builds each once, and remembers a failure so that every candidate depending on it
    reports the same error.
    """

    def __init__(
        self,
        name: str,
        model: torch.nn.Module,
        example_inputs: Inputs,
        samples: list[Inputs],
        folder: Path,
        threads: int,
    ) -> None:
        self.name = name
        self.model = model
        self.example_inputs = example_inputs
        self.samples = samples
        self.folder = folder
        self.threads = threads
        self._shared: dict[str, tuple[Any, float, BaseException | None]] = {}
        self.reused_s = 0.0
        """Build time of the shared artifacts the current candidate reused rather than built."""

    def shared(self, key: str, build: Callable[[], T]) -> tuple[T, float]:
        """Return `(artifact, seconds it took to build)`, building it on the first request.

        A candidate that reuses an artifact is still charged its build time (through
        `reused_s`), so each export time is what that candidate would cost on its own.
        """
        if key not in self._shared:
            start = time.perf_counter()
            try:
                value, error = build(), None
            except Exception as exc:  # reported per candidate, not swallowed
                value, error = None, exc
            self._shared[key] = (value, time.perf_counter() - start, error)
        else:
            self.reused_s += self._shared[key][1]
        value, seconds, error = self._shared[key]
        if error is not None:
            raise error
        return value, seconds


@dataclass(frozen=True)
class Candidate:
    """One way of running a model. `prepare` exports/compiles it; raising means it failed."""

    name: str
    description: str
    prepare: Callable[[ModelContext], Prepared]


@dataclass
class CandidateResult:
    """Everything measured for one candidate on one model (all times in ms unless named _s)."""

    candidate: str
    exported: bool = False
    error: str | None = None
    matches: bool | None = None
    mismatch: str | None = None
    export_s: float | None = None
    size_bytes: int | None = None
    latency_ms: float | None = None
    latency_min_ms: float | None = None
    latency_max_ms: float | None = None
    speedup: float | None = None
    note: str = ""
    round_ms: list[float] = field(default_factory=list)
    call_ms: list[list[list[float]]] = field(default_factory=list)  # [sample][round][repeat]

    @property
    def status(self) -> str:
        """`ok`, `WRONG` (ran, but some output differs from eager) or `failed`."""
        if self.error is not None:
            return "failed"
        if self.matches is False:
            return "WRONG"
        return "ok"


@dataclass
class ModelResult:
    """One model's table: every candidate's result, eager first."""

    name: str
    sample_count: int
    candidates: list[CandidateResult]
    error: str | None = None


@dataclass
class Report:
    """The whole benchmark: settings, environment, per-model results and the geometric means."""

    settings: dict[str, Any]
    environment: dict[str, str]
    models: list[ModelResult]
    geomean: dict[str, dict[str, Any]]
    files: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """All raw numbers, as written to results.json."""
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# The candidates
# ---------------------------------------------------------------------------------------------


def _torch_call(model: Callable[..., Any]) -> Callable[[Inputs], Any]:
    def call(inputs: Inputs) -> Any:
        with torch.no_grad():
            return model(*inputs)

    return call


def _prepare_eager(context: ModelContext) -> Prepared:
    return Prepared(call=_torch_call(context.model))


def _script(model: torch.nn.Module) -> torch.jit.ScriptModule:
    """Script and freeze: the same capture dycl_iree starts from (DESIGN.md, stage 1)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.13 deprecates torch.jit.script; it still works
        return torch.jit.freeze(torch.jit.script(model.eval()))


def _prepare_torchscript(context: ModelContext) -> Prepared:
    scripted = _script(context.model)
    path = context.folder / "model.torchscript.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.save is deprecated too; the size is what we want
        torch.jit.save(scripted, str(path))
    return Prepared(call=_torch_call(scripted), size_bytes=path.stat().st_size)


def _prepare_torch_compile(context: ModelContext) -> Prepared:
    """Compile lazily, then call every sample once: inductor compiles (and recompiles per path or
    per Python int value) on first use, so that first pass is this candidate's export time."""
    compiled = torch.compile(context.model)
    call = _torch_call(compiled)
    for sample in context.samples:
        call(sample)
    return Prepared(call=call)


def _onnx_input_names(count: int) -> list[str]:
    # Named by position, because the TorchScript ONNX exporter drops inputs the graph never reads,
    # and the position is what maps a graph input back to a sample's value.
    return [f"input_{index}" for index in range(count)]


def _export_onnx(context: ModelContext, dynamic_dims: bool) -> Path:
    """Export with the TorchScript ONNX exporter, the one that keeps `If`/`Loop` in the graph
    (the dynamo exporter fails on data-dependent control flow). A fresh scripted copy is
    exported because the exporter runs its passes on the graph it is given."""
    path = context.folder / ("model.dynamic.onnx" if dynamic_dims else "model.onnx")
    names = _onnx_input_names(len(context.example_inputs))
    dynamic_axes = None
    if dynamic_dims:
        dynamic_axes = {
            name: {dim: f"{name}_dim{dim}" for dim in range(value.dim())}
            for name, value in zip(names, context.example_inputs)
            if isinstance(value, torch.Tensor) and value.dim() > 0
        }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
        torch.onnx.export(
            _script(context.model),
            tuple(context.example_inputs),
            str(path),
            dynamo=False,
            input_names=names,
            dynamic_axes=dynamic_axes,
        )
    return path


@dataclass(frozen=True)
class _OnnxSignature:
    """Which sample positions the ONNX graph reads, and as what numpy dtype."""

    positions: tuple[int, ...]
    names: tuple[str, ...]
    dtypes: tuple[np.dtype, ...]

    def arrays(self, inputs: Inputs) -> list[np.ndarray]:
        arrays = []
        for position, dtype in zip(self.positions, self.dtypes):
            value = inputs[position]
            array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
            arrays.append(np.ascontiguousarray(array, dtype=dtype))
        return arrays


def _onnx_signature(path: Path) -> _OnnxSignature:
    import onnx
    from onnx import helper

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {tensor.name for tensor in graph.initializer}
    inputs = [value for value in graph.input if value.name not in initializers]
    return _OnnxSignature(
        positions=tuple(int(value.name.rsplit("_", 1)[1]) for value in inputs),
        names=tuple(value.name for value in inputs),
        dtypes=tuple(np.dtype(helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)) for value in inputs),
    )


def _prepare_onnxruntime(context: ModelContext) -> Prepared:
    import onnxruntime

    path, export_s = context.shared("onnx", lambda: _export_onnx(context, dynamic_dims=False))
    signature = _onnx_signature(path)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = context.threads
    options.inter_op_num_threads = 1
    # onnxruntime as it is deployed: its workers spin between ops by default. Turning that off
    # (session.intra_op.allow_spinning=0) made it ~1.6x slower at batch 1 (WRN-SDN 1.23 -> 0.75 ms
    # with it on); the pause before each turn (SETTLE_S) lets the spinning threads go idle before
    # the next candidate runs.
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def convert(inputs: Inputs) -> dict[str, np.ndarray]:
        return dict(zip(signature.names, signature.arrays(inputs)))

    return Prepared(
        call=lambda feed: session.run(None, feed),
        convert=convert,
        size_bytes=path.stat().st_size,
        note=f"onnx export {export_s:.2f} s",
    )


class OnnxImportError(PeerError):
    """torch-mlir's ONNX importer rejected the graph (its last stderr line says why)."""


def _onnx_to_vmfb(onnx_path: Path) -> Path:
    """ONNX -> torch-dialect MLIR (torch-mlir's importer, as its command line) -> vmfb."""
    import iree.compiler

    mlir_path = onnx_path.with_suffix(".mlir")
    process = subprocess.run(
        [sys.executable, "-m", "torch_mlir.tools.import_onnx", str(onnx_path), "-o", str(mlir_path)],
        capture_output=True,
        text=True,
        check=False,  # the importer's stderr makes a better message than CalledProcessError
    )
    if process.returncode != 0:
        lines = [line for line in process.stderr.splitlines() if line.strip()]
        raise OnnxImportError(lines[-1] if lines else f"exit status {process.returncode}")
    vmfb_path = onnx_path.with_suffix(".vmfb")
    iree.compiler.compile_file(
        str(mlir_path), input_type="onnx", extra_args=list(IREE_CPU_FLAGS), output_file=str(vmfb_path)
    )
    return vmfb_path


_IREE_THREADS_SET: list[int] = []


def _limit_iree_threads(threads: int) -> None:
    """Cap local-task's worker count. The flag is process-global and only read when a driver is
    first created, so it is parsed once, before any candidate creates one."""
    import iree.runtime

    if not _IREE_THREADS_SET:
        iree.runtime.flags.parse_flags(f"--task_topology_max_group_count={threads}")
        _IREE_THREADS_SET.append(threads)


def _prepare_iree_onnx(context: ModelContext) -> Prepared:
    """The ONNX graph as exported is tried first. IREE 3.13 rejects every ONNX `Loop` whose
    carried tensor has a static shape ("failed to legalize unresolved materialization from
    [4] to [?]": the exporter types loop results as dynamic), so when the static graph fails the
    export with every tensor dim dynamic is tried as well, and the note says so."""
    import iree.runtime

    onnx_path, export_s = context.shared("onnx", lambda: _export_onnx(context, dynamic_dims=False))
    start = time.perf_counter()
    note = ""
    try:
        vmfb_path = _onnx_to_vmfb(onnx_path)
    except Exception as static_error:  # retried below, reported if that fails too
        try:
            onnx_path, export_s = context.shared("onnx-dynamic", lambda: _export_onnx(context, dynamic_dims=True))
            start = time.perf_counter()
            vmfb_path = _onnx_to_vmfb(onnx_path)
        except Exception as dynamic_error:
            raise PeerError(
                f"static dims: {first_line(static_error)}; all dims dynamic: {first_line(dynamic_error)}"
            ) from dynamic_error
        note = f"static-dim graph failed ({first_line(static_error)}); ran the all-dims-dynamic export"
    compile_s = time.perf_counter() - start
    signature = _onnx_signature(onnx_path)
    _limit_iree_threads(context.threads)
    config = iree.runtime.Config("local-task")
    system = iree.runtime.SystemContext(config=config)
    system.add_vm_module(iree.runtime.VmModule.copy_buffer(system.instance, vmfb_path.read_bytes()))
    function = system.modules.module["main_graph"]

    def call(arrays: list[np.ndarray]) -> list[np.ndarray]:
        return flatten_outputs(function(*arrays))

    prefix = f"{note}; " if note else ""
    return Prepared(
        call=call,
        convert=signature.arrays,
        size_bytes=vmfb_path.stat().st_size,
        note=f"{prefix}onnx export {export_s:.2f} s, import+compile {compile_s:.2f} s",
    )


def _dycl_module() -> Any:
    """The exporter, resolved at call time so that a missing or broken one is a failed candidate."""
    module = importlib.import_module("dycl_iree")
    for name in ("export", "load"):
        if not callable(getattr(module, name, None)):
            raise ExporterMissingError(f"dycl_iree.{name} is not available")
    return module


def _export_dycl(context: ModelContext, cpu_threads: int) -> Path:
    dycl = _dycl_module()
    bundle = dycl.export(
        context.model,
        tuple(context.example_inputs),
        targets=("llvm-cpu",),
        dynamic_shapes=getattr(context, "dynamic_shapes", None),
        cpu_threads=cpu_threads,
    )
    path = context.folder / f"model-{cpu_threads}-threads.dycl"
    _remove(path)  # a bundle from an earlier run must not be measured (or refused by save)
    bundle.save(str(path))
    return path


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def _path_size(path: Path) -> int:
    if path.is_dir():
        return sum(item.stat().st_size for item in path.rglob("*") if item.is_file())
    return path.stat().st_size


def _dycl_inputs(inputs: Inputs) -> Inputs:
    # The host runtime takes numpy (it never imports torch); Python scalars pass through.
    return tuple(value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value for value in inputs)


def _dycl_candidate(host: str, driver: str) -> Candidate:
    def prepare(context: ModelContext) -> Prepared:
        # local-sync runs on one thread; local-task gets code split for its workers.
        cpu_threads = context.threads if driver == "local-task" else 1
        path, export_s = context.shared(f"dycl-{cpu_threads}", lambda: _export_dycl(context, cpu_threads))
        if driver == "local-task":
            _limit_iree_threads(context.threads)
        start = time.perf_counter()
        run = _dycl_module().load(str(path), device=driver, host=host)
        load_s = time.perf_counter() - start
        return Prepared(
            call=lambda inputs: run(*inputs),
            convert=_dycl_inputs,
            size_bytes=_path_size(path),
            note=f"export+save {export_s:.2f} s, load {load_s:.3f} s",
        )

    return Candidate(
        name=f"dycl-{host}-{driver}",
        description=f"dycl_iree bundle, {host} host, IREE {driver} driver",
        prepare=prepare,
    )


CANDIDATES: dict[str, Candidate] = {
    candidate.name: candidate
    for candidate in [
        Candidate("eager", "PyTorch eager (the baseline)", _prepare_eager),
        Candidate("torchscript", "torch.jit.freeze(torch.jit.script(model))", _prepare_torchscript),
        Candidate("torch-compile", "torch.compile(model), inductor, graph breaks allowed", _prepare_torch_compile),
        Candidate("onnxruntime", "TorchScript ONNX export (If/Loop), onnxruntime CPU", _prepare_onnxruntime),
        Candidate("iree-onnx", "same ONNX graph, torch-mlir import, iree-compile, local-task", _prepare_iree_onnx),
        *(_dycl_candidate(host, driver) for host in DYCL_HOSTS for driver in DYCL_DRIVERS),
    ]
}
"""Every built-in candidate, in report order."""

CANDIDATE_GROUPS = {
    "all": list(CANDIDATES),
    "peers": ["eager", "torchscript", "torch-compile", "onnxruntime", "iree-onnx"],
    "dycl": [name for name in CANDIDATES if name.startswith("dycl-")],
}
"""Names `--candidates` accepts besides single candidate names."""


def resolve_candidates(selection: Iterable[str | Candidate] | None) -> list[Candidate]:
    """Turn names, group names and Candidate objects into a list with `eager` first.

    Eager is always included because every speedup and every correctness check is relative to it.

    >>> [c.name for c in resolve_candidates(["onnxruntime"])]
    ['eager', 'onnxruntime']
    """
    chosen: list[Candidate] = [CANDIDATES["eager"]]
    for item in selection if selection is not None else CANDIDATE_GROUPS["all"]:
        if isinstance(item, Candidate):
            found = [item]
        elif item in CANDIDATE_GROUPS:
            found = [CANDIDATES[name] for name in CANDIDATE_GROUPS[item]]
        elif item in CANDIDATES:
            found = [CANDIDATES[item]]
        else:
            known = ", ".join([*CANDIDATES, *CANDIDATE_GROUPS])
            raise BenchError(f"unknown candidate {item!r}; known: {known}")
        chosen.extend(candidate for candidate in found if candidate.name not in {c.name for c in chosen})
    return chosen


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------


@dataclass
class _Running:
    """A prepared candidate during timing: its converted samples and where its numbers go."""

    prepared: Prepared
    samples: list[Any]
    result: CandidateResult


def _resolve_samples(entry: ModelEntry, example_inputs: Inputs) -> list[Inputs]:
    samples = entry.samples() if callable(entry.samples) else entry.samples
    return [tuple(sample) for sample in samples] if samples else [tuple(example_inputs)]


def benchmark_model(
    entry: ModelEntry,
    folder: Path,
    candidates: Sequence[Candidate],
    rounds: int,
    warmup: int,
    threads: int,
    repeat: int = 3,
) -> ModelResult:
    """Prepare, check and time every candidate on one model (see `benchmark`)."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        made = entry.factory()
        model, example_inputs = made[0], made[1]
        dynamic_shapes = made[2] if len(made) > 2 else None
        model = model.eval()
        samples = _resolve_samples(entry, tuple(example_inputs))
        expected = [_torch_call(model)(sample) for sample in samples]
    except Exception as exc:  # one broken model must not stop the others
        return ModelResult(entry.name, 0, [], error=first_line(exc))
    context = ModelContext(entry.name, model, tuple(example_inputs), samples, folder, threads)
    context.dynamic_shapes = dynamic_shapes
    results, running = _prepare_all(context, candidates)
    running = _check_all(running, expected, warmup)
    _time_rounds(running, rounds, repeat)
    for item in running:
        _summarize(item.result)
    eager = results[0]
    for result in results:
        if result.latency_ms and eager.latency_ms:
            result.speedup = eager.latency_ms / result.latency_ms
    return ModelResult(entry.name, len(samples), results)


def _prepare_all(
    context: ModelContext, candidates: Sequence[Candidate]
) -> tuple[list[CandidateResult], list[_Running]]:
    """Export every candidate, timing it; a failure becomes the candidate's result."""
    results: list[CandidateResult] = []
    running: list[_Running] = []
    for candidate in candidates:
        result = CandidateResult(candidate.name)
        results.append(result)
        context.reused_s = 0.0
        start = time.perf_counter()
        try:
            prepared = candidate.prepare(context)
            converted = [prepared.convert(sample) for sample in context.samples]
        except Exception as exc:  # a failing candidate is a result, not a crash
            result.error = first_line(exc)
            continue
        result.exported = True
        result.export_s = time.perf_counter() - start + context.reused_s
        result.size_bytes = prepared.size_bytes
        result.note = prepared.note
        running.append(_Running(prepared, converted, result))
    return results, running


def _check_all(running: list[_Running], expected: list[Any], warmup: int) -> list[_Running]:
    """Warm up and compare with eager on every sample, before any timing: a candidate wrong on any
    sample is reported WRONG whatever its speed. Returns the candidates that ran."""
    still_running = []
    for item in running:
        try:
            for index, (sample, want) in enumerate(zip(item.samples, expected)):
                for _ in range(warmup):
                    item.prepared.call(sample)
                reason = compare_outputs(want, item.prepared.call(sample))
                if reason is not None:
                    item.result.matches, item.result.mismatch = False, f"sample {index}: {reason}"
                    break
            else:
                item.result.matches = True
        except Exception as exc:  # reported as the candidate's failure
            item.result.error = f"run: {first_line(exc)}"
            continue
        still_running.append(item)
    return still_running


def _time_rounds(running: list[_Running], rounds: int, repeat: int) -> None:
    """Time every sample `repeat` times per candidate turn, candidates round-robin, starting each
    round one candidate later so none is always first after the pause."""
    for item in running:
        item.result.call_ms = [[] for _ in item.samples]
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection inside one candidate's turn would be charged to it alone
    try:
        for round_index in range(rounds):
            shift = round_index % max(len(running), 1)
            for item in running[shift:] + running[:shift]:
                if item.result.error is None:
                    _time_turn(item, repeat)
    finally:
        if gc_was_enabled:
            gc.enable()


def _time_turn(item: _Running, repeat: int) -> None:
    # Let the previous candidate's worker threads (OpenMP spins after a parallel region) go idle so
    # they are not charged to this one; then one untimed call wakes this candidate's own pool and
    # caches: on a 1 ms network the first call after another candidate ran is 2-10x slower than
    # the steady state, and a shared machine adds the odd 100 ms stall, hence the repeats.
    time.sleep(SETTLE_S)
    call, result = item.prepared.call, item.result
    try:
        call(item.samples[0])
        for index, sample in enumerate(item.samples):
            times = []
            for _ in range(repeat):
                start_ns = time.perf_counter_ns()
                call(sample)
                times.append((time.perf_counter_ns() - start_ns) / 1e6)
            result.call_ms[index].append(times)
    except Exception as exc:  # reported as the candidate's failure
        result.error = f"run: {first_line(exc)}"


def _summarize(result: CandidateResult) -> None:
    """Per round: each sample's median over its repeats, then the mean over samples, so every path
    the samples take weighs in. Then median, min and max over rounds."""
    if result.error is not None or not result.call_ms or not result.call_ms[0]:
        return
    per_sample = [[statistics.median(times) for times in rounds] for rounds in result.call_ms]
    result.round_ms = [statistics.fmean(values) for values in zip(*per_sample)]
    result.latency_ms = statistics.median(result.round_ms)
    result.latency_min_ms = min(result.round_ms)
    result.latency_max_ms = max(result.round_ms)


def geometric_means(models: Sequence[ModelResult], candidate_names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Geometric mean of the speedup over eager per candidate, over the models where it ran and
    matched eager; a WRONG or failed model is left out of the mean but counted in `of`."""
    means: dict[str, dict[str, Any]] = {}
    for name in candidate_names:
        speedups, total = [], 0
        for model in models:
            for result in model.candidates:
                if result.candidate == name:
                    total += 1
                    if result.status == "ok" and result.speedup:
                        speedups.append(result.speedup)
        mean = math.exp(statistics.fmean(math.log(s) for s in speedups)) if speedups else None
        means[name] = {"speedup": mean, "models": len(speedups), "of": total}
    return means


BENCH_PACKAGES = (
    "torch",
    "torch-mlir",
    "iree-base-compiler",
    "iree-base-runtime",
    "onnx",
    "onnxruntime",
    "numpy",
    "matplotlib",
)


def _load_average() -> str:
    """The 1-minute load average: other work on the machine inflates and scatters latencies,
    worst for torch's OpenMP pool, whose every parallel region waits for its slowest thread."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "unknown"


def _environment(threads: int) -> dict[str, str]:
    """Machine and package versions, so that two reports can be told apart."""
    environment = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": str(os.cpu_count()),
        "threads": str(threads),
        "load average at start": _load_average(),
    }
    for package in BENCH_PACKAGES:
        try:
            environment[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            environment[package] = "missing"
    return environment


def benchmark(
    entries: Sequence[ModelEntry],
    out_dir: str | Path,
    rounds: int = 5,
    warmup: int = 1,
    candidates: Iterable[str | Candidate] | None = None,
    threads: int = 2,
    repeat: int = 3,
) -> Report:
    """Benchmark every candidate on every model and write report.md, results.json, speedups.png.

    All candidates run in this process on the same samples with `threads` threads each (torch's
    intra-op pool, onnxruntime's intra-op pool, IREE local-task's workers), alternating round-robin
    over `rounds` rounds after `warmup` untimed calls per sample; in each round a candidate calls
    every sample `repeat` times and keeps the median.

    >>> class Flip(torch.nn.Module):
    ...     def forward(self, x):
    ...         if x.sum() > 0:
    ...             return x + 1
    ...         return x - 1
    >>> entry = ModelEntry("flip", lambda: (Flip(), (torch.ones(4),)), [(torch.ones(4),), (-torch.ones(4),)])
    >>> report = benchmark([entry], "/tmp/bench-doctest", rounds=2, candidates=["torchscript"])
    >>> [(r.candidate, r.status) for r in report.models[0].candidates]
    [('eager', 'ok'), ('torchscript', 'ok')]
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chosen = resolve_candidates(candidates)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    environment = _environment(threads)
    try:
        models = [
            benchmark_model(entry, out / "artifacts" / entry.name, chosen, rounds, warmup, threads, repeat)
            for entry in entries
        ]
    finally:
        torch.set_num_threads(previous_threads)
    report = Report(
        settings={
            "rounds": rounds,
            "warmup": warmup,
            "repeat": repeat,
            "threads": threads,
            "candidates": {c.name: c.description for c in chosen},
            "float_rtol": FLOAT_RTOL,
            "float_atol": FLOAT_ATOL,
        },
        environment={**environment, "load average at end": _load_average()},
        models=models,
        geomean=geometric_means(models, [c.name for c in chosen]),
    )
    write_report(report, out)
    return report


# ---------------------------------------------------------------------------------------------
# Writing the report
# ---------------------------------------------------------------------------------------------


def _cell(text: str, limit: int = 160) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    for unit in ("B", "KiB", "MiB"):
        if size < 1024 or unit == "MiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return str(size)


def _verdict(result: CandidateResult) -> str:
    if result.status == "failed":
        # Preparing covers export, compile and load; a run-time failure says "run:" itself.
        prefix = "" if result.exported else "export/load: "
        return f"failed: {prefix}{result.error}"
    if result.status == "WRONG":
        return f"**WRONG**: {result.mismatch}"
    return "yes"


def _speedup_cell(result: CandidateResult) -> str:
    # A wrong answer's speed is not shown as a speedup: it is in results.json for the curious.
    if result.status == "WRONG":
        return "WRONG"
    return f"{result.speedup:.2f}x" if result.speedup else "-"


def _busy_warning(environment: dict[str, str]) -> str | None:
    try:
        load = float(environment.get("load average at start", "unknown"))
    except ValueError:
        return None
    if load < 0.5:
        return None
    return (
        f"**Warning**: the machine was already busy (load {load:.2f} on {environment.get('cpus')} CPUs) "
        "when the benchmark started; latencies are inflated and scattered, the torch candidates most."
    )


def render_markdown(report: Report) -> str:
    """The report as markdown: settings, a table per model, then the geometric means."""
    settings = report.settings
    environment = report.environment
    lines = [
        "# dycl_iree benchmark",
        "",
        (
            f"{settings['rounds']} rounds after {settings['warmup']} warmup call(s) per sample, "
            f"{settings['threads']} threads per candidate, candidates alternating round-robin in one "
            f"process. Latency: per round, each sample's median of {settings['repeat']} calls, averaged "
            "over the model's samples; the median over rounds, (min-max) in brackets. "
            "Speedup: eager's median / the candidate's. "
            "Matches: outputs equal to eager on every sample (floats within atol "
            f"{settings['float_atol']} + rtol {settings['float_rtol']} x the output's largest magnitude; "
            "ints, bools and shapes exactly). "
            "Export: model to a runnable callable, compile and load included."
        ),
        "",
        "Environment: " + ", ".join(f"{key} {value}" for key, value in environment.items()),
        "",
    ]
    busy = _busy_warning(environment)
    if busy:
        lines += [busy, ""]
    for model in report.models:
        lines += [f"## {model.name} ({model.sample_count} samples)", ""]
        if model.error:
            lines += [f"Model failed to build: {_cell(model.error)}", ""]
            continue
        lines += [
            "| candidate | latency ms median (min-max) | speedup vs eager | matches eager? | export s | size |",
            "|---|---|---|---|---|---|",
        ]
        for result in model.candidates:
            latency = (
                f"{result.latency_ms:.3f} ({result.latency_min_ms:.3f}-{result.latency_max_ms:.3f})"
                if result.latency_ms is not None
                else "-"
            )
            export = f"{result.export_s:.2f}" if result.export_s is not None else "-"
            verdict = _verdict(result)
            lines.append(
                f"| {result.candidate} | {latency} | {_speedup_cell(result)} | {_cell(verdict, 120)} "
                f"| {export} | {_size(result.size_bytes)} |"
            )
        # A verdict too long for its cell is given in full under the table.
        notes = [
            f"- {r.candidate}: {_cell(text, 1000)}"
            for r in model.candidates
            for text in ([_verdict(r)] if len(_verdict(r)) > 120 else []) + ([r.note] if r.note else [])
        ]
        lines += ["", *(["Notes:", "", *notes, ""] if notes else [])]
    lines += [
        "## Geometric mean of speedup over eager",
        "",
        "Over the models where the candidate ran and matched eager.",
        "",
        "| candidate | geomean speedup | models |",
        "|---|---|---|",
    ]
    for name, mean in report.geomean.items():
        value = f"{mean['speedup']:.2f}x" if mean["speedup"] else "-"
        lines.append(f"| {name} | {value} | {mean['models']} of {mean['of']} |")
    lines.append("")
    return "\n".join(lines)


def _times(speedup: float) -> str:
    return f"{speedup:.0f}x" if speedup >= 10 else f"{speedup:.2g}x"


def plot_speedups(report: Report, path: Path) -> None:
    """Grouped bars: one group per model, one bar per candidate, growing from eager's line at 1x.

    Log scale, because speedups multiply: 0.5x and 2x are the same distance from eager, and a bar
    starts at 1x so a slower candidate points down. A candidate that failed or was WRONG on a model
    gets no bar but a label, so a missing bar is never mistaken for a slow one.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    names = [name for name in report.settings["candidates"] if name != "eager"]
    models = [model for model in report.models if not model.error]
    speedups = [
        r.speedup for m in models for r in m.candidates if r.candidate != "eager" and r.status == "ok" and r.speedup
    ]
    low, high = min([0.5, *speedups]) / 1.5, max([2.0, *speedups]) * 1.5
    width_inches = min(22.0, max(7.0, 2.5 + 0.3 * len(names) * max(len(models), 1)))
    figure, axes = plt.subplots(figsize=(width_inches, 4.8))
    width = 0.8 / max(len(names), 1)
    colors = plt.get_cmap("tab10")
    for index, name in enumerate(names):
        color = colors(index % 10)
        axes.bar(0, 0, 0, color=color, label=name)  # one legend entry even if it never ran
        for position, model in enumerate(models):
            result = next((r for r in model.candidates if r.candidate == name), None)
            x = position - 0.4 + width * (index + 0.5)
            if result is not None and result.status == "ok" and result.speedup:
                axes.bar(x, result.speedup - 1.0, width, bottom=1.0, color=color)
                where = "bottom" if result.speedup >= 1 else "top"
                axes.text(x, result.speedup, _times(result.speedup), ha="center", va=where, fontsize=6)
            elif result is not None:
                label = "WRONG" if result.status == "WRONG" else "failed"
                axes.text(x, 1.05, label, rotation=90, ha="center", va="bottom", fontsize=7, color=color)
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_yscale("log")
    axes.set_ylim(low, high)
    ticks = [base * 10.0**power for power in range(-3, 4) for base in (1, 2, 5)]
    axes.set_yticks([tick for tick in ticks if low <= tick <= high])
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    axes.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    axes.set_xlim(-0.5, len(models) - 0.5)
    axes.set_xticks(range(len(models)), [model.name for model in models], rotation=20, ha="right")
    axes.set_ylabel("speedup over PyTorch eager (log scale)")
    axes.set_title("Speedup over eager (median over rounds of the mean latency per sample)", fontsize=10)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: never over a bar
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_report(report: Report, out_dir: Path) -> None:
    """Write report.md, results.json and speedups.png; a plot that cannot be drawn is noted in
    report.md rather than failing the run that produced the numbers."""
    report.files = {"report": str(out_dir / "report.md"), "results": str(out_dir / "results.json")}
    markdown = render_markdown(report)
    try:
        plot_speedups(report, out_dir / "speedups.png")
        report.files["plot"] = str(out_dir / "speedups.png")
        markdown += "\n![speedup over eager](speedups.png)\n"
    except Exception as exc:  # matplotlib is an optional extra
        markdown += f"\nspeedups.png not written: {first_line(exc)}\n"
    (out_dir / "report.md").write_text(markdown)
    (out_dir / "results.json").write_text(json.dumps(report.to_json(), indent=1, default=str))


# ---------------------------------------------------------------------------------------------
# Micro-benchmark: the host cost of one data-dependent decision
# ---------------------------------------------------------------------------------------------


class _Decide(torch.nn.Module):
    """One data-dependent decision around the cheapest possible tensor work."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x + 1
        return x - 1


class _NoDecision(torch.nn.Module):
    """The same tensor work with no decision: the baseline `_Decide` is compared against."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


@dataclass
class MicroResult:
    """Per-call cost in microseconds with and without the decision on one host/driver."""

    configuration: str
    decide_us: float | None = None
    plain_us: float | None = None
    decision_us: float | None = None
    matches: bool | None = None
    error: str | None = None


def _micro_callables(
    configuration: str, folder: Path, threads: int
) -> tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[torch.Tensor], Any]]:
    """Return (decide, plain, convert) for `eager` or `dycl-<host>-<driver>`."""
    if configuration == "eager":
        return _torch_call(_Decide()), _torch_call(_NoDecision()), lambda x: (x,)
    _, host, driver = configuration.split("-", 2)
    dycl = _dycl_module()
    if driver == "local-task":
        _limit_iree_threads(threads)
    runs = []
    for model in (_Decide(), _NoDecision()):
        path = folder / f"{type(model).__name__.strip('_').lower()}.dycl"
        run = dycl.load(str(path), device=driver, host=host)
        runs.append(lambda inputs, run=run: run(*inputs))
    return runs[0], runs[1], lambda x: (x.numpy(),)


def micro_benchmark(out_dir: str | Path, calls: int = 2000, rounds: int = 5, threads: int = 2) -> list[MicroResult]:
    """Measure what one data-dependent decision costs per call, on eager and on each dycl host.

    `if x.sum() > 0: x + 1 else: x - 1` against `x + 1`, x of 4 elements, alternating positive and
    negative x so both sides run: the difference is the price of computing the predicate, reading
    it back to the host and choosing (compiled host: inside the VM; Python host: in Python).
    Writes micro.md and micro.json to `out_dir`.

    >>> results = micro_benchmark("/tmp/bench-micro-doctest", calls=100, rounds=1)
    >>> results[0].configuration, results[0].matches
    ('eager', True)
    """
    out = Path(out_dir)
    folder = out / "artifacts" / "micro"
    folder.mkdir(parents=True, exist_ok=True)
    positive = torch.tensor([1.0, 2.0, 3.0, 4.0])
    samples = [positive, -positive]
    configurations = ["eager", *CANDIDATE_GROUPS["dycl"]]
    results: list[MicroResult] = []
    export_error: str | None = None
    try:  # export both bundles once; every host/driver pair loads the same two
        dycl = _dycl_module()
        for model in (_Decide(), _NoDecision()):
            path = folder / f"{type(model).__name__.strip('_').lower()}.dycl"
            _remove(path)
            dycl.export(model, (positive,), targets=("llvm-cpu",)).save(str(path))
    except Exception as exc:  # every dycl configuration reports it
        export_error = f"not exported: {first_line(exc)}"
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for configuration in configurations:
            result = MicroResult(configuration)
            results.append(result)
            if export_error is not None and configuration != "eager":
                result.error = export_error
                continue
            try:
                decide, plain, convert = _micro_callables(configuration, folder, threads)
                inputs = [convert(sample) for sample in samples]
                result.matches = all(
                    compare_outputs(_Decide()(sample), decide(converted)) is None
                    and compare_outputs(sample + 1, plain(converted)) is None
                    for sample, converted in zip(samples, inputs)
                )
                result.decide_us, result.plain_us = _time_pair(decide, plain, inputs, calls, rounds)
                result.decision_us = result.decide_us - result.plain_us
            except Exception as exc:  # reported as a failed configuration
                result.error = first_line(exc)
    finally:
        torch.set_num_threads(previous_threads)
    (out / "micro.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    (out / "micro.md").write_text(render_micro(results, calls, rounds))
    return results


def _time_pair(
    first: Callable[[Any], Any], second: Callable[[Any], Any], inputs: list[Any], calls: int, rounds: int
) -> tuple[float, float]:
    """Median over rounds of the per-call time in microseconds, the two alternating each round."""
    for function in (first, second):
        for index in range(max(calls // 10, 2)):
            function(inputs[index % len(inputs)])
    times: dict[int, list[float]] = {0: [], 1: []}
    gc.collect()
    for round_index in range(rounds):
        order = (0, 1) if round_index % 2 == 0 else (1, 0)
        for which in order:
            function = (first, second)[which]
            start = time.perf_counter_ns()
            for index in range(calls):
                function(inputs[index % len(inputs)])
            times[which].append((time.perf_counter_ns() - start) / 1e3 / calls)
    return statistics.median(times[0]), statistics.median(times[1])


def render_micro(results: Sequence[MicroResult], calls: int, rounds: int) -> str:
    """The micro-benchmark as a markdown table."""
    lines = [
        "# Host cost of one data-dependent decision",
        "",
        (
            f"`if x.sum() > 0: x + 1 else: x - 1` vs `x + 1`, x of 4 float32 elements, {calls} calls "
            f"per round, median of {rounds} rounds. Decision = the difference, per call."
        ),
        "",
        "| configuration | with decision us/call | without us/call | decision us | matches eager? |",
        "|---|---|---|---|---|",
    ]
    for result in results:
        if result.error is not None:
            lines.append(f"| {result.configuration} | - | - | - | failed: {_cell(result.error)} |")
            continue
        matches = "yes" if result.matches else "**WRONG**"
        lines.append(
            f"| {result.configuration} | {result.decide_us:.2f} | {result.plain_us:.2f} "
            f"| {result.decision_us:.2f} | {matches} |"
        )
    lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Finding models: the zoo, or FILE.py:FACTORY
# ---------------------------------------------------------------------------------------------


def _import_zoo() -> Any:
    """Import the repository's `models` package, from the working directory or the checkout
    this file lives in (the zoo is a folder of the repository, not part of the installed package)."""
    try:
        return importlib.import_module("models")
    except ImportError:
        root = Path(__file__).resolve().parents[1]
        if not (root / "models").is_dir():
            raise
        sys.path.insert(0, str(root))
        return importlib.import_module("models")


def zoo_entries() -> dict[str, ModelEntry]:
    """Every model of the zoo, by name.

    Accepts the registry forms the zoo may take: `ZOO[name]` as an entry with `build` (or
    `factory`) and `samples`, as a `(factory, samples)` pair or dict, or as a bare factory with
    samples in `SAMPLES`;
    or `MODELS` (factories) with `SAMPLES`. Samples may be a list or a callable building one.
    """
    zoo = _import_zoo()
    registry = getattr(zoo, "ZOO", None)
    if registry is None:
        registry = getattr(zoo, "MODELS", None)
    if not isinstance(registry, dict):
        raise BenchError("models has no ZOO (or MODELS) registry; name a model as FILE.py:FACTORY")
    all_samples = getattr(zoo, "SAMPLES", {}) or {}
    entries = {}
    for name, value in registry.items():
        samples = all_samples.get(name)
        if isinstance(value, dict):
            factory, samples = value["factory"], value.get("samples", samples)
        elif isinstance(value, (tuple, list)):
            factory, samples = value[0], (value[1] if len(value) > 1 else samples)
        elif hasattr(value, "factory") or hasattr(value, "build"):
            factory = getattr(value, "factory", None) or value.build
            samples = getattr(value, "samples", samples)
        else:
            factory = value
        entries[name] = ModelEntry(name, factory, samples)
    return entries


def entry_from_file(spec: str) -> ModelEntry:
    """`FILE.py:FACTORY` -> a ModelEntry; its samples are the module's SAMPLES[FACTORY] if any,
    else the factory's example inputs.

    The file is registered in `sys.modules` before it runs, because `torch.jit.script` finds a
    class's source through its module.
    """
    file_name, _, factory_name = spec.rpartition(":")
    path = Path(file_name)
    if not path.is_file():
        raise BenchError(f"{spec}: no file {file_name}")
    module_name = f"_dycl_bench_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise BenchError(f"{spec}: cannot import {file_name}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    module_spec.loader.exec_module(module)
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise BenchError(f"{spec}: {file_name} has no function {factory_name}")
    samples = getattr(module, "SAMPLES", {}).get(factory_name)
    return ModelEntry(f"{path.stem}.{factory_name}", factory, samples)


def select_entries(names: Sequence[str] | None) -> list[ModelEntry]:
    """Resolve `--models`: zoo names and `FILE.py:FACTORY` specs; None means the whole zoo."""
    if not names:
        return list(zoo_entries().values())
    entries = []
    zoo: dict[str, ModelEntry] | None = None
    for name in names:
        if ":" in name and name.split(":", 1)[0].endswith(".py"):
            entries.append(entry_from_file(name))
            continue
        if zoo is None:
            zoo = zoo_entries()
        if name not in zoo:
            raise BenchError(f"unknown model {name!r}; the zoo has: {', '.join(zoo)}")
        entries.append(zoo[name])
    return entries


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def _split_commas(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [part for value in values for part in value.split(",") if part]


def build_parser() -> argparse.ArgumentParser:
    """The `bench` command's arguments (also used by the project's command line)."""
    parser = argparse.ArgumentParser(
        prog="python -m dycl_iree bench",
        description="Benchmark dycl_iree against PyTorch eager, TorchScript, torch.compile, "
        "onnxruntime and IREE-through-ONNX, side by side, checking every output against eager.",
    )
    parser.add_argument(
        "--models",
        action="append",
        metavar="NAME[,NAME...]",
        help="zoo model names and/or FILE.py:FACTORY (repeatable; default: the whole zoo)",
    )
    parser.add_argument(
        "--candidates",
        action="append",
        metavar="NAME[,NAME...]",
        help=f"candidates or groups ({', '.join(CANDIDATE_GROUPS)}); known: {', '.join(CANDIDATES)}",
    )
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls per sample first (default 1)")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per sample per round (default 3)")
    parser.add_argument("--threads", type=int, default=2, help="threads per candidate (default 2)")
    parser.add_argument("--out", default="bench-out", help="output folder (default bench-out/)")
    parser.add_argument(
        "--micro", action="store_true", help="measure the host cost of one decision (alone, unless --models is given)"
    )
    parser.add_argument("--micro-calls", type=int, default=2000, help="calls per round in --micro (default 2000)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark from the command line; returns the exit status.

    >>> main(["--micro", "--micro-calls", "50", "--rounds", "1", "--out", "/tmp/bench-doctest"])  # doctest: +ELLIPSIS
    # Host cost of one data-dependent decision
    ...
    0
    """
    arguments = build_parser().parse_args(argv)
    models = _split_commas(arguments.models)
    out = Path(arguments.out)
    try:
        candidates = resolve_candidates(_split_commas(arguments.candidates))
        entries = select_entries(models) if models or not arguments.micro else []
    except (BenchError, ImportError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    if arguments.micro:
        results = micro_benchmark(out, calls=arguments.micro_calls, rounds=arguments.rounds, threads=arguments.threads)
        print(render_micro(results, arguments.micro_calls, arguments.rounds))
    if entries:
        report = benchmark(
            entries,
            out,
            rounds=arguments.rounds,
            warmup=arguments.warmup,
            candidates=candidates,
            threads=arguments.threads,
            repeat=arguments.repeat,
        )
        print(render_markdown(report))
        print(f"written: {', '.join(report.files.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
