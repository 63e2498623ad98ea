"""Check one fuzzed program: export it, run both hosts on every input case, compare with the scripted model.

The result is a JSON-ready dict: the program's constructs, whether it exported (and the error if
not), which host the bundle got and why not the compiled one, and one entry per failed run. A run
fails when its outputs differ from PyTorch's (NaN where PyTorch has NaN counts as equal), when
PyTorch raises and the bundle returns, when the bundle raises and PyTorch does not, or when both
raise but the bundle's error is not a `DyclError`.

Example:
    >>> result = check_seed(3, Path("/tmp/fuzz"))          # doctest: +SKIP
    >>> result["status"], result["host"]                    # doctest: +SKIP
    ('ok', 'compiled')
"""

from __future__ import annotations

import copy
import importlib.util
import math
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

import dycl_iree
from dycl_iree.errors import ExporterDefect
from dycl_iree.verify import OutputError, compare, flatten

from .calibrate import calibrate, instantiate
from .generate import Program, generate, source_features
from .inputs import Case, bad_cases, finite_cases
from .reproducer import write_reproducer


def load_program_module(path: Path) -> Any:
    """Import a program's source file (TorchScript reads the source of what it scripts from a file)."""
    name = f"fuzzed_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def prepare(seed: int) -> tuple[Program, list[Case]]:
    """The calibrated program of `seed` and the cases it is checked on."""
    program = generate(seed)
    finite = finite_cases(program)
    calibrate(program, finite)
    return program, finite + bad_cases(program)


def decisions_both_ways(program: Program, cases: list[Case]) -> tuple[int, int]:
    """(decisions that went both ways on `cases`, decisions with a threshold): the calibration's score."""
    model = instantiate(program.render(probe=True), program.seed, "fuzzed_probe")
    taken: dict[int, set[bool]] = {}

    def probe(index: int, value: Any, op: str) -> bool:
        threshold = program.conditions[index].threshold
        outcome = bool(value > threshold if op == ">" else value < threshold)
        taken.setdefault(index, set()).add(outcome)
        return outcome

    model._probe = probe
    for _, values in cases:
        try:
            with torch.no_grad():
                model(*values)
        except Exception:
            continue
    counted = [i for i, c in enumerate(program.conditions) if c.kind != "bool"]
    return sum(1 for i in counted if taken.get(i) == {True, False}), len(counted)


def check_seed(seed: int, folder: Path, keep_bundle: bool = False) -> dict[str, Any]:
    """Generate, calibrate, export and check the program of `seed`; failures leave a reproducer in `folder`."""
    start = time.perf_counter()
    program, cases = prepare(seed)
    folder.mkdir(parents=True, exist_ok=True)
    source_path = folder / f"program_{seed}.py"
    source_path.write_text(program.render())
    both, counted = decisions_both_ways(program, cases[: len(finite_cases(program))])
    result: dict[str, Any] = {
        "seed": seed,
        "constructs": program.constructs,
        "features": source_features(program),
        "inputs": program.inputs,
        "dynamic_batch": program.dynamic_batch,
        "decisions": counted,
        "decisions_both_ways": both,
        "status": "ok",
        "host": None,
        "fallback": None,
        "export_error": None,
        "failures": [],
    }
    # Written before anything runs: if a host kills the process, the reproducer is already there.
    reproducer = write_reproducer(program, cases, folder / f"repro_{seed}.py")
    try:
        _check(program, cases, source_path, folder, result)
    finally:
        result["seconds"] = round(time.perf_counter() - start, 2)
        if result["status"] in ("ok", "unsupported"):
            reproducer.unlink()
            if not keep_bundle:
                source_path.unlink()
        else:
            result["reproducer"] = str(reproducer)
    return result


def _check(program: Program, cases: list[Case], source_path: Path, folder: Path, result: dict[str, Any]) -> None:
    module = load_program_module(source_path)
    torch.manual_seed(program.seed)
    model = module.Program().eval()
    try:
        scripted = torch.jit.script(model)
    except Exception as error:  # the generator wrote something TorchScript rejects: a fuzzer bug
        result.update(status="generator_error", export_error=_first_line(error))
        return
    widened = torch.jit.script(copy.deepcopy(model).double())
    example = cases[0][1]
    dynamic_shapes = {"x": {0: "batch"}} if program.dynamic_batch else None
    try:
        bundle = dycl_iree.export(model, example, dynamic_shapes=dynamic_shapes)
    except ExporterDefect as error:  # a DyclError, but a bug of the exporter, never an unsupported model
        result.update(status="export_crash", export_error=_describe(error))
        return
    except dycl_iree.DyclError as error:
        result.update(status="unsupported", export_error=f"{type(error).__name__}: {_first_line(error)}")
        return
    except Exception as error:  # not a DyclError: an exporter bug
        result.update(status="export_crash", export_error=_describe(error))
        return
    result["host"] = bundle.host
    result["fallback"] = bundle.manifest.get("compiled_host_unsupported")
    path = bundle.save(folder / f"bundle_{program.seed}.dycl")
    hosts = ["compiled", "python"] if bundle.host == "compiled" else ["python"]
    runners = {host: dycl_iree.load(path, host=host) for host in hosts}
    for label, values in cases:
        expected, expected_error = _run_reference(scripted, values)
        returned: dict[str, Any] = {}
        for host, run in runners.items():
            failure = _run_and_compare(
                run, values, expected, expected_error, lambda v=values: _run_wide(widened, v), returned, host
            )
            if failure is not None and (
                (
                    failure["kind"] == "mismatch"
                    and (
                        _unstable(program, values, expected, widened)
                        or ill_conditioned(scripted, values, expected, returned.get(host))
                    )
                )
                or (failure["kind"] == "no error" and near_threshold(program, values))
            ):
                # A decision within float32 rounding of its threshold, or an argmax between near ties,
                # may go either way on another summation order (PyTorch's own float64 run disagrees
                # with its float32 run): not a defect, but counted. So may a path on which PyTorch
                # raises (an embedding of an index the other path never looks up, seed 74354). So
                # may a program that amplifies rounding (`ill_conditioned`).
                result.setdefault("near_threshold", []).append({"case": label, "host": host})
            elif failure is not None:
                result["failures"].append({"case": label, "host": host, **failure})
        if len(returned) == 2 and not hosts_agree(returned["compiled"], returned["python"]):
            # Both within tolerance of PyTorch (or on an unstable input) but not of each other.
            if not _unstable(program, values, expected, widened):
                detail = f"compiled {_short(returned['compiled'])}, python {_short(returned['python'])}"
                result["failures"].append({"case": label, "host": "compiled", "kind": "hosts differ", "detail": detail})
    if result["failures"]:
        result["status"] = "mismatch"
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _unstable(program: Program, values: tuple, expected: Any, widened: Any) -> bool:
    """Whether PyTorch itself takes another path in float64 (a decision or an argmax on near ties):
    its float64 outputs differ from its float32 ones far beyond rounding (1e-3 relative)."""
    if near_threshold(program, values):
        return True
    try:
        wide = flatten(_run_wide(widened, values))
    except Exception:
        return False
    for narrow, exact in zip(flatten(expected), wide):
        if isinstance(narrow, torch.Tensor) and narrow.is_floating_point():
            a, b = narrow.double().numpy(), exact.numpy()
            if a.shape != b.shape or not np.allclose(
                a, b, rtol=1e-3, atol=1e-4 * (1 + np.nanmax(np.abs(b), initial=0)), equal_nan=True
            ):
                return True
        elif isinstance(narrow, torch.Tensor):
            if not torch.equal(narrow, exact):
                return True
        elif narrow != exact:
            if not isinstance(narrow, float):
                return True
            if not (math.isclose(narrow, exact, rel_tol=1e-3) or (math.isnan(narrow) and math.isnan(exact))):
                return True
    return False


def ill_conditioned(scripted: Any, values: tuple, expected: Any, got: Any, trials: int = 8) -> bool:
    """Whether PyTorch's own float32 outputs move as far as `got` is from them when its float inputs
    move by a rounding (1.2e-7 relative): a program that amplifies rounding (normalizations and
    `abs(h) - 0.5` repeated 16 times, seed 80010; `clamp(h) + h * 0.5` doubling on, seed 5403)
    gives another float32 result for another summation order, as the float64 run does not show when
    its own error stays under 1e-3. Also true where such a nudge takes PyTorch another path."""
    if got is None:
        return False
    want_leaves, got_leaves = flatten(expected), flatten(got)
    floats = [
        k for k, w in enumerate(want_leaves) if isinstance(w, torch.Tensor) and w.is_floating_point() and w.numel()
    ]
    if not floats or len(got_leaves) != len(want_leaves):
        return False
    spread = [np.zeros(want_leaves[k].shape) for k in floats]
    generator = torch.Generator().manual_seed(0)
    for _ in range(trials):
        nudged = tuple(
            v * (1 + 1.2e-7 * torch.randn(v.shape, generator=generator, dtype=v.dtype))
            if isinstance(v, torch.Tensor) and v.is_floating_point()
            else v
            for v in values
        )
        try:
            with torch.no_grad():
                leaves = flatten(scripted(*nudged))
        except Exception:
            return False
        if len(leaves) != len(want_leaves) or any(leaves[k].shape != want_leaves[k].shape for k in floats):
            return True
        for slot, k in zip(spread, floats):
            moved = np.abs(leaves[k].double().numpy() - want_leaves[k].double().numpy())
            np.fmax(slot, moved, out=slot)
    moves = [np.nan_to_num(slot) > 1e-5 * (1.0 + np.abs(np.nan_to_num(want_leaves[k].double().numpy())))
             for slot, k in zip(spread, floats)]
    if not any(move.any() for move in moves):
        return False  # PyTorch's result holds still: a difference from it is the host's
    for slot, k in zip(spread, floats):
        want = want_leaves[k].double().numpy()
        have = np.asarray(got_leaves[k], dtype=np.float64)
        if have.shape != want.shape:
            return False
        error = np.abs(have - want)
        finite = np.isfinite(want) & np.isfinite(have)
        if not np.all(error[finite] <= 2.0 * slot[finite] + 1e-5 * (1.0 + np.abs(want[finite]))):
            return False
    return True


def near_threshold(program: Program, values: tuple, tolerance: float = 1e-4) -> bool:
    """Whether some decision on `values` compared a value within `tolerance` (relative) of its threshold."""
    model = instantiate(program.render(probe=True), program.seed, "fuzzed_probe")
    close = False

    def probe(index: int, value: Any, op: str) -> bool:
        nonlocal close
        threshold = program.conditions[index].threshold
        close |= abs(float(value) - threshold) <= tolerance * (1.0 + abs(threshold))
        return bool(value > threshold if op == ">" else value < threshold)

    model._probe = probe
    try:
        with torch.no_grad():
            model(*values)
    except Exception:
        pass  # the path raised (an index out of range): the decisions that led to it still count
    return close


def _run_reference(scripted: Any, values: tuple) -> tuple[Any, str | None]:
    try:
        with torch.no_grad():
            return scripted(*values), None
    except Exception as error:
        return None, f"{type(error).__name__}: {_first_line(error)}"


def _run_wide(widened: Any, values: tuple) -> Any:
    wide = tuple(v.double() if isinstance(v, torch.Tensor) else v for v in values)
    with torch.no_grad():
        outputs = widened(*wide)
    return _as_tensors(outputs)


def _as_tensors(outputs: Any) -> Any:
    if isinstance(outputs, tuple):
        return tuple(_as_tensors(o) for o in outputs)
    return outputs


def _run_and_compare(
    run: Any, values: tuple, expected: Any, expected_error: str | None, exact: Any, returned: dict, host: str
) -> dict | None:
    """A failure of one host on one input, or None; what the host returned goes into `returned[host]`.
    A run error (the VM's INVALID_ARGUMENT, a null ref) where PyTorch returns is a failure, as is one
    that is not a `DyclError` where PyTorch raises: never skipped."""
    arguments = [v.numpy().copy() if isinstance(v, torch.Tensor) else v for v in values]
    try:
        got = run(*arguments)
        returned[host] = got
    except dycl_iree.DyclError as error:
        if expected_error is not None:
            return None
        return {"kind": "unexpected error", "detail": f"{type(error).__name__}: {_first_line(error)}"}
    except Exception as error:
        kind = "wrong error kind" if expected_error is not None else "unexpected error"
        return {"kind": kind, "detail": _describe(error), "pytorch": expected_error}
    if expected_error is not None:
        return {"kind": "no error", "detail": f"PyTorch raised {expected_error}; the bundle returned"}
    if not nan_aware_compare(got, expected, exact):
        return {"kind": "mismatch", "detail": f"got {_short(got)}, PyTorch {_short(expected)}"}
    return None


def nan_aware_compare(got: Any, expected: Any, exact: Any = None) -> bool:
    """`verify.compare`, with NaN and inf required at the same places and then left out of the comparison."""
    got_leaves, want_leaves = flatten(got), flatten(expected)
    if len(got_leaves) != len(want_leaves):
        return False
    kept_got, kept_want = [], []
    for have, want in zip(got_leaves, want_leaves):
        if isinstance(want, torch.Tensor) and want.is_floating_point():
            array, reference = np.asarray(have), want.detach().numpy()
            if array.shape != reference.shape:
                return False
            if array.dtype.kind == "f" and not np.isfinite(reference).all():
                same_nan = np.array_equal(np.isnan(array), np.isnan(reference))
                if not (same_nan and np.array_equal(_infs(array), _infs(reference))):
                    return False
                finite = np.isfinite(reference)
                array, reference = np.where(finite, array, 0).astype(array.dtype), np.where(finite, reference, 0)
                want = torch.from_numpy(reference.astype(want.detach().numpy().dtype))
                exact = None  # the float64 run has its NaN too; the float32 comparison decides
            kept_got.append(array)
            kept_want.append(want)
        elif isinstance(want, float) and not math.isfinite(want):
            if not (isinstance(have, float) and (have == want or (math.isnan(have) and math.isnan(want)))):
                return False
            kept_got.append(0.0)
            kept_want.append(0.0)
        else:
            kept_got.append(have)
            kept_want.append(want)
    errors: list[OutputError] = []
    return compare(kept_got, kept_want, errors, exact)


def hosts_agree(compiled: Any, python: Any) -> bool:
    """The two hosts' outputs on one input: the same structure, shapes and dtypes, NaN at the same
    places and values within float32 rounding of each other (they run the same segment code)."""
    a, b = flatten(compiled), flatten(python)
    if len(a) != len(b):
        return False
    for left, right in zip(a, b):
        left, right = np.asarray(left), np.asarray(right)
        if left.shape != right.shape or left.dtype != right.dtype:
            return False
        if left.dtype.kind == "f":
            if not np.allclose(left, right, rtol=1e-4, atol=1e-5, equal_nan=True):
                return False
        elif not np.array_equal(left, right):
            return False
    return True


def _infs(array: np.ndarray) -> np.ndarray:
    """+1 at +inf, -1 at -inf, 0 elsewhere (NaN included)."""
    return np.where(np.isinf(array), np.sign(array), 0)


def _short(outputs: Any) -> str:
    text = repr(outputs).replace("\n", " ")
    return text if len(text) < 400 else text[:400] + "..."


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:500] if text else type(error).__name__


def _describe(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(error).__name__}: {_first_line(error)}{where}"
