"""verify: run PyTorch and a bundle on the same inputs; report errors, path coverage, and trace's errors.

Path coverage comes from the generated Python host, which counts every decision it takes
(`record=True`): each `if` must have taken both sides, each loop must have run with more than one
trip count. Outputs are compared with the scripted model. `--baseline trace` also runs a
`torch.jit.trace` of the model (what tracing compilers capture) and counts the samples it gets
wrong: DyCL's motivating measurement.

Example:
    python -m dycl_iree verify models/shallow_deep.py:sdn_resnet56 --baseline trace
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .progress import LOGGER

# Float outputs match when max|actual - expected| <= RTOL * max|expected| + ATOL, per output.
# Scaled by the output's magnitude, not element by element: an element near zero has no
# meaningful relative error. Deep networks can still differ by a little more, because PyTorch's
# float32 result is itself an approximation: float32 sums in another order (IREE's tiled
# convolutions) each land a few 1e-6 of the output's scale away from the float64 result, on
# opposite sides. So an output that misses is checked once more against the model run in
# float64: it passes if it is within twice PyTorch's own float32 error of it, plus RTOL. Twice, not
# once: neither float32 result is the better one by right, and where a program amplifies rounding
# (a tensor renormalized after subtracting its mean, again and again) PyTorch's own error is many
# times RTOL, and IREE's, from sums in another order, is of the same size but not smaller.
RTOL = 1e-5
ATOL = 1e-6


@dataclass
class OutputError:
    max_abs: float = 0.0
    max_rel: float = 0.0  # max|a - e| / max|e| over the samples
    mismatches: int = 0


@dataclass
class VerifyReport:
    model: str
    host: str
    samples: int = 0
    mismatched_samples: int = 0
    outputs: list[OutputError] = field(default_factory=list)
    labels_agree: int = 0
    labels_total: int = 0
    decisions: dict[str, dict[bool, int]] = field(default_factory=dict)
    trip_counts: dict[str, list[int]] = field(default_factory=dict)
    uncovered: list[str] = field(default_factory=list)
    trace_mismatches: int | None = None

    @property
    def ok(self) -> bool:
        return self.mismatched_samples == 0 and not self.uncovered

    def format(self) -> str:
        lines = [f"{self.model} ({self.host} host): {self.samples} samples"]
        for label, sides in sorted(self.decisions.items(), key=lambda item: _label_order(item[0])):
            lines.append(f"  {label}: true {sides.get(True, 0)}, false {sides.get(False, 0)}")
        for label, trips in sorted(self.trip_counts.items(), key=lambda item: _label_order(item[0])):
            lines.append(f"  {label}: {len(trips)} runs, trip counts {min(trips)}..{max(trips)}")
        for index, error in enumerate(self.outputs):
            lines.append(
                f"  output {index}: max abs error {error.max_abs:.3g}, max rel error {error.max_rel:.3g}"
                + (f", MISMATCH on {error.mismatches} samples" if error.mismatches else "")
            )
        if self.labels_total:
            lines.append(f"  labels agree: {self.labels_agree}/{self.labels_total}")
        if self.trace_mismatches is not None:
            lines.append(f"  torch.jit.trace baseline: wrong on {self.trace_mismatches}/{self.samples} samples")
        covered = "yes" if not self.uncovered else "no (" + "; ".join(self.uncovered) + ")"
        lines.append(f"  all paths covered: {covered}")
        lines.append(f"  result: {'OK' if self.ok else 'FAILED'}")
        return "\n".join(lines)


def _label_order(label: str) -> tuple[str, int]:
    prefix = label.rstrip("0123456789")
    return prefix, int(label[len(prefix) :] or 0)


def flatten(outputs: Any) -> list[Any]:
    """One sample's outputs as leaves; a dict is its keys (compared exactly: the path decides
    which a dict holds) and then its values; None is a leaf (the bundle must return None too)."""
    if isinstance(outputs, (tuple, list)):
        return [leaf for item in outputs for leaf in flatten(item)]
    if isinstance(outputs, dict):
        return [tuple(outputs), *(leaf for value in outputs.values() for leaf in flatten(value))]
    return [outputs]


def compare(actual: Any, expected: Any, errors: list[OutputError], exact: Any = None) -> bool:
    """Compare one sample's outputs; update per-output errors; True when everything matches.

    `exact`, if given, is a callable returning the float64 outputs (see RTOL).
    """
    got_leaves, want_leaves = flatten(actual), flatten(expected)
    if len(got_leaves) != len(want_leaves):
        return False
    while len(errors) < len(want_leaves):
        errors.append(OutputError())
    matches = True
    exact_leaves: list | None = None
    for index, (got, want, error) in enumerate(zip(got_leaves, want_leaves, errors)):
        same = _same(got, want, error)
        if same is None:
            if exact is not None and exact_leaves is None:
                exact_leaves = flatten(exact())
            same = (
                exact_leaves is not None
                and len(exact_leaves) == len(want_leaves)
                and _as_close_as_pytorch(got, want, exact_leaves[index])
            )
        if not same:
            error.mismatches += 1
        matches = matches and same
    return matches


def _as_close_as_pytorch(got: Any, want: torch.Tensor, exact: Any) -> bool:
    """Whether `got` is no farther from the float64 run's `exact` than PyTorch's float32 `want` is.
    Where the float64 run took another path (a decision on a value near its threshold went the
    other way), its output in this place may be another value or shape, an int or a dict's keys:
    it vouches for nothing there."""
    if not isinstance(exact, torch.Tensor) or exact.shape != want.shape:
        return False
    truth = exact.detach().numpy()
    scale = float(np.max(np.abs(truth)))
    ours = float(np.max(np.abs(np.asarray(got, np.float64) - truth)))
    pytorch = float(np.max(np.abs(want.detach().numpy().astype(np.float64) - truth)))
    return ours <= 2 * pytorch + RTOL * scale + ATOL


def _same(got: Any, want: Any, error: OutputError) -> bool | None:
    """True or False; None for a float tensor that misses, which the float64 check may still pass."""
    if isinstance(want, torch.Tensor):
        want = want.detach().numpy()
        got = np.asarray(got)
        if got.shape != want.shape or got.dtype != want.dtype:
            return False
        if want.dtype.kind != "f":
            return bool(np.array_equal(got, want))
        if want.size == 0:
            return True
        difference = float(np.max(np.abs(got.astype(np.float64) - want)))
        scale = float(np.max(np.abs(want)))
        error.max_abs = max(error.max_abs, difference)
        error.max_rel = max(error.max_rel, difference / scale if scale else difference)
        return True if difference <= RTOL * scale + ATOL else None
    if isinstance(want, float):
        difference = abs(float(got) - want)
        error.max_abs = max(error.max_abs, difference)
        error.max_rel = max(error.max_rel, difference / abs(want) if want else difference)
        return isinstance(got, float) and difference <= RTOL * abs(want) + ATOL
    return type(got) is type(want) and got == want


def _labels(outputs: Any) -> list[int]:
    """Classifier labels: the argmax of every float output shaped (1, classes)."""
    return [
        int(torch.as_tensor(np.asarray(leaf)).argmax())
        for leaf in flatten(outputs)
        if np.asarray(leaf).ndim == 2 and np.asarray(leaf).shape[0] == 1 and np.asarray(leaf).dtype.kind == "f"
    ]


def random_inputs(example_inputs: tuple, count: int, seed: int = 0) -> list[tuple]:
    """Inputs shaped like the example: float tensors with the example's mean and spread, int tensors
    within the example's range, and Python ints, floats and bools varied around the example's
    (an int input is often a step count or a length: a loop's trip count is a path too)."""
    generator = torch.Generator().manual_seed(seed)
    samples = []
    for _ in range(count):
        sample = []
        for value in example_inputs:
            if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
                spread = float(value.std()) if value.numel() > 1 else 1.0
                noise = torch.randn(value.shape, generator=generator, dtype=value.dtype)
                sample.append(float(value.mean()) + noise * (spread or 1.0))
            elif isinstance(value, torch.Tensor) and value.dtype != torch.bool and value.numel():
                low, high = int(value.min()), int(value.max())
                sample.append(torch.randint(low, high + 1, value.shape, generator=generator, dtype=value.dtype))
            elif isinstance(value, bool):
                sample.append(bool(torch.randint(0, 2, (), generator=generator)))
            elif isinstance(value, int):
                # Between 0 and twice the example for a count (an example of 0 or 1 still varies); a
                # negative example keeps its sign.
                low, high = sorted((0, 2 * value + (1 if value >= 0 else -1)))
                sample.append(int(torch.randint(low, high + 1, (), generator=generator)))
            elif isinstance(value, float):
                spread = abs(value) or 1.0
                sample.append(value + spread * float(torch.randn((), generator=generator, dtype=torch.float64)) / 2)
            else:
                sample.append(value)
        samples.append(tuple(sample))
    return samples


def verify(
    model: torch.nn.Module,
    samples: list[tuple],
    bundle_path: str | Path,
    host: str = "compiled",
    trace_example: tuple | None = None,
    name: str | None = None,
) -> VerifyReport:
    """Check the bundle against the scripted model on `samples` with one host.

    Coverage is always measured with the Python host (it records decisions); with
    host="compiled" the outputs checked are the compiled host's.
    """
    import host_runtime

    model = copy.deepcopy(model).eval()  # the caller's model keeps its mode
    in_float64: list[torch.nn.Module] = []  # built on the first float output that needs it

    def exact(sample: tuple) -> Any:
        if not in_float64:
            in_float64.append(copy.deepcopy(model).double())
        return in_float64[0](*_widen(sample))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(model)
    report = VerifyReport(name or type(model).__name__, host)
    recorder = host_runtime.load(bundle_path, host="python", record=True)
    runner = recorder if host == "python" else host_runtime.load(bundle_path, host=host)
    traced = None
    if trace_example is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(
                _TensorOutputs(model, trace_example), _tensor_inputs(trace_example), check_trace=False, strict=False
            )
        report.trace_mismatches = 0
    with torch.no_grad():
        for index, sample in enumerate(samples):
            LOGGER.debug(f"checking sample {index + 1} of {len(samples)} ({host} host)")
            expected = scripted(*sample)
            actual = runner(*sample)
            if runner is not recorder:
                recorder(*sample)
            report.samples += 1
            if not compare(actual, expected, report.outputs, exact=lambda: exact(sample)):
                report.mismatched_samples += 1
            expected_labels, actual_labels = _labels(expected), _labels(actual)
            report.labels_total += len(expected_labels)
            report.labels_agree += sum(a == b for a, b in zip(expected_labels, actual_labels))
            if traced is not None:
                try:
                    traced_outputs = _like(traced(*_tensor_inputs(sample)), expected)
                    wrong = not compare(_to_numpy(traced_outputs), expected, [])
                except Exception:
                    wrong = True  # a trace that cannot even run this input
                report.trace_mismatches += int(wrong)
    report.decisions = {label: dict(sides) for label, sides in recorder.decisions.items()}
    report.trip_counts = {label: list(trips) for label, trips in recorder.trip_counts.items()}
    report.uncovered = _uncovered(recorder)
    return report


def _widen(sample: tuple) -> tuple:
    return tuple(v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in sample)


class _TensorOutputs(torch.nn.Module):
    """torch.jit.trace takes and returns only tensors: int, float and bool inputs come in as 0-d
    tensors and are read back as Python values (the tracer freezes them, as tracing compilers do),
    and scalar outputs become (frozen) tensors."""

    def __init__(self, model: torch.nn.Module, example: tuple) -> None:
        super().__init__()
        self.model = model
        self.kinds = [type(value) if isinstance(value, (bool, int, float)) else None for value in example]

    def forward(self, *inputs: Any) -> Any:
        values = [kind(value.item()) if kind is not None else value for kind, value in zip(self.kinds, inputs)]
        return _as_tensors(self.model(*values))


def _tensor_inputs(sample: tuple) -> tuple:
    return tuple(torch.tensor(value) if isinstance(value, (bool, int, float)) else value for value in sample)


def _as_tensors(outputs: Any) -> Any:
    if isinstance(outputs, (tuple, list)):
        return tuple(_as_tensors(o) for o in outputs)
    return outputs if isinstance(outputs, torch.Tensor) else torch.tensor(outputs)


def _like(outputs: Any, reference: Any) -> Any:
    """Give traced outputs the reference's Python scalar types back."""
    if isinstance(reference, (tuple, list)):
        return tuple(_like(o, r) for o, r in zip(outputs, reference))
    if isinstance(reference, torch.Tensor):
        return outputs
    return type(reference)(outputs.item())


def _to_numpy(outputs: Any) -> Any:
    if isinstance(outputs, (tuple, list)):
        return tuple(_to_numpy(o) for o in outputs)
    if isinstance(outputs, torch.Tensor):
        return outputs.numpy()
    return outputs


def _uncovered(recorder: Any) -> list[str]:
    """Decisions that were not driven both ways, and loops that always ran the same count."""
    missing = []
    for decision in recorder.manifest["decisions"]:
        label = decision["label"]
        if decision["kind"] == "if":
            sides = recorder.decisions.get(label, {})
            absent = [str(side).lower() for side in (True, False) if not sides.get(side)]
            if absent:
                missing.append(f"{label} never {' or '.join(absent)}")
        else:
            trips = recorder.trip_counts.get(label, [])
            if len(set(trips)) < 2:
                missing.append(f"{label} always ran {trips[0] if trips else 'no'} times")
    return missing


def main(args: argparse.Namespace) -> int:
    """`python -m dycl_iree verify FILE.py:FACTORY [--bundle B] [--host ...] [--random N] [--baseline trace]`."""
    import dycl_iree

    from .loading import load_factory, load_samples

    LOGGER.info(f"loading {args.factory}")
    model, example_inputs, dynamic_shapes, name = load_factory(args.factory)
    samples = load_samples(args.factory) or [example_inputs]
    samples += random_inputs(example_inputs, args.random)
    if args.bundle:
        bundle_path = Path(args.bundle)
    else:
        start = time.perf_counter()
        bundle = dycl_iree.export(model, example_inputs, dynamic_shapes=dynamic_shapes)
        # Removed when this function returns (TemporaryDirectory's finalizer), an error included.
        temporary = tempfile.TemporaryDirectory(prefix="dycl-verify-")
        bundle_path = bundle.save(Path(temporary.name) / f"{name}.dycl")
        segments = len(bundle.manifest["segments"])
        plural = "" if segments == 1 else "s"
        print(f"exported {name} in {time.perf_counter() - start:.1f} s: {segments} segment{plural}")
    hosts = ["compiled", "python"] if args.host == "both" else [args.host]
    manifest_host = dycl_iree.load(bundle_path, host="python").manifest["host"]
    if manifest_host != "compiled" and "compiled" in hosts:
        print("this bundle has no compiled host; checking the python host only")
        hosts = ["python"]
    ok = True
    for host in hosts:
        trace_example = example_inputs if getattr(args, "baseline", None) == "trace" else None
        report = verify(model, samples, bundle_path, host=host, trace_example=trace_example, name=name)
        print(report.format())
        ok = ok and report.ok
    return 0 if ok else 1


__all__ = ["verify", "VerifyReport", "random_inputs", "compare", "RTOL", "ATOL"]
