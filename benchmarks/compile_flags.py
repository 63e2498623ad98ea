"""Whether extra iree-compile flags make the deployment-size models faster on one thread, and still right.

    python benchmarks/compile_flags.py [--models resnet18,resnet50,mobilenet_v2] [--rounds 15]
        [--variant NAME=FLAG[,FLAG...]] ...

Each model of `models/imagenet.py` is exported once by `dycl_iree.export` (compiled host, the flags
`llvm-cpu` gets on this machine: `compile.target_flags`, with data tiling on an AVX-512 CPU), and the
very module iree-compile received is compiled again once per variant, with the variant's flags after
the exporter's own (nothing else changes: same graph, same host, same data-tiling spec). Every
variant is then loaded on `local-sync` (one thread) and

- checked against PyTorch eager on every sample of the model: the largest absolute difference, and
  whether the outputs keep the exporter's contract (`verify.compare`'s rule, as `bench` applies it:
  within `verify.ATOL` + `verify.RTOL` x the output's largest magnitude, or no further from the
  float64 result than eager is);
- timed in this one process, alternating (each round runs every variant once, starting one variant
  later each round), as CPU time per call: the process's CPU time (`time.process_time`) over a turn
  of calls, divided by their number. On a shared machine wall time counts the other jobs too; the
  CPU time of one thread does not (much).

Beside the variants runs a control (`CONTROL`): the baseline's own vmfb again, from files of its own.
Two copies of one vmfb loaded side by side differed by up to 6% on a 2-core Xeon (README,
"AVX-512 on an Intel Xeon"), so a variant's ratio within the control's says nothing about its flags.

The report gives, per model and variant, the median per-call time over the rounds with its min-max,
the median over rounds of the variant's time divided by the baseline's in the same round (the
ratio; below 1 is faster), the largest error, and the compile time (wall and iree-compile's own CPU
time, of one cold compile without the cache; the machine's load moves the wall figure).

`--cpu znver3` measures the code an AVX2 host gets instead (`exporting_for`). Variants are
`NAME=FLAG[,FLAG...]`; without any, `VARIANTS` below. A flag given twice (one of the
exporter's own again) is an iree-compile error, reported as that variant's failure.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import dycl_iree  # noqa: E402
from dycl_iree import compile as compiling  # noqa: E402
from dycl_iree import cpu_features, pipeline  # noqa: E402
from dycl_iree.bench.outputs import Float64Reference, compare_outputs, flatten_outputs  # noqa: E402
from dycl_iree.bundle import Bundle  # noqa: E402
from models import ZOO  # noqa: E402
from models.imagenet import MODELS, SAMPLES  # noqa: E402

BASELINE = "current flags"
VARIANTS: dict[str, list[str]] = {
    BASELINE: [],
    "O2": ["--iree-opt-level=O2"],
    "O3": ["--iree-opt-level=O3"],
    "O2, matmuls kept named": ["--iree-opt-level=O2", "--iree-opt-generalize-matmul=false"],
    "aggressive fusion": ["--iree-dispatch-creation-enable-aggressive-fusion=true"],
    "pad into consumer": ["--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops=true"],
}
CONTROL = "the first row's vmfb again, a copy"
"""The baseline's vmfb once more, saved to files of its own and loaded beside it (`control_copy`)."""
TURN_S = 0.25
"""CPU seconds of calls per variant per round (at least 2 calls)."""


@contextlib.contextmanager
def exporting_for(cpu: str | None):
    """Export and compile as on a host whose CPU is `cpu` without AVX-512 (None: this machine as it is).

    `--cpu znver3` gives the code an AVX2 machine would get: the exporter's AVX2 choices (im2col for
    many channels, the AVX2 rule of `data_tiling`: `cpu_features.has_avx512` patched to False) and code for that CPU,
    which an AVX-512 machine runs too (the code is measured, not the other machine's clock).
    """
    if cpu is None:
        yield
        return
    saved_flags, saved_probe = compiling.TARGETS["llvm-cpu"], cpu_features.has_avx512
    compiling.TARGETS["llvm-cpu"] = [
        f"--iree-llvmcpu-target-cpu={cpu}" if flag == compiling.HOST_CPU_FLAG else flag for flag in saved_flags
    ]
    cpu_features.has_avx512 = lambda: False
    try:
        yield
    finally:
        compiling.TARGETS["llvm-cpu"], cpu_features.has_avx512 = saved_flags, saved_probe


def _compile_seconds(compile_call) -> tuple[bytes, float, float]:
    """Run `compile_call()`: its result, wall seconds and the CPU seconds of the child iree-compile."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = compile_call()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result, wall, cpu


def export_variants(
    model, example: tuple, dynamic_shapes, variants: dict[str, list[str]], folder: Path
) -> dict[str, dict]:
    """Export `model` once and compile its module once per variant: per variant, a loaded runner
    (or the failure), the compile times and the flags."""
    seen: dict[str, object] = {}
    original = pipeline.compile_module

    def recording(bytecode, target, cpu_threads=1, use_cache=True, extra_flags=(), **options):
        seen.update(bytecode=bytecode, target=target, cpu_threads=cpu_threads, extra=tuple(extra_flags))
        seen["options"] = options  # main's branches as blocks, the check of its VM branches
        return original(bytecode, target, cpu_threads, use_cache=False, extra_flags=extra_flags, **options)

    pipeline.compile_module = recording
    try:
        bundle = dycl_iree.export(model, example, dynamic_shapes=dynamic_shapes, cache=False)
    finally:
        pipeline.compile_module = original
    if bundle.host != "compiled":
        raise SystemExit("the export took the Python host; its flags are not what is measured here")
    vmfb_name = bundle.manifest["targets"]["llvm-cpu"]["file"]
    built = {}
    for name, flags in variants.items():
        extra = list(seen["extra"]) + [flag for flag in flags if flag not in seen["extra"]]
        try:
            vmfb, wall, cpu = _compile_seconds(
                lambda extra=extra: compiling.compile_module(
                    seen["bytecode"],
                    "llvm-cpu",
                    seen["cpu_threads"],
                    use_cache=False,
                    extra_flags=tuple(extra),
                    **seen["options"],
                )
            )
        except Exception as error:  # a variant iree-compile rejects is a result
            built[name] = {"error": str(error).splitlines()[0][:300], "flags": flags}
            continue
        blocks = seen["options"].get("branches_as_blocks", False)
        manifest = dict(bundle.manifest)
        manifest["targets"] = {
            **manifest["targets"],
            "llvm-cpu": {
                **manifest["targets"]["llvm-cpu"],
                "flags": compiling.target_flags("llvm-cpu", seen["cpu_threads"], blocks) + extra,
            },
        }
        variant_bundle = Bundle(manifest, {**bundle.files, vmfb_name: vmfb}, bundle.program)
        path = variant_bundle.save(folder / f"variant-{len(built)}.dycl")
        runner = dycl_iree.load(str(path), device="local-sync", host="compiled")
        built[name] = {
            "run": runner,
            "compile_wall": wall,
            "compile_cpu": cpu,
            "flags": flags,
            "size": len(vmfb),
            "path": path,
        }
    return built


def control_copy(bundle: Path, folder: Path) -> tuple[object, Path]:
    """A saved `bundle` again: copied to new files in `folder` and loaded from them, so that its vmfb
    is mapped from pages of its own; the runner and the copy's path."""
    copy = folder / "control.dycl"
    shutil.copytree(bundle, copy)
    return dycl_iree.load(str(copy), device="local-sync", host="compiled"), copy


def add_control(built: dict[str, dict], folder: Path) -> None:
    """Add the control (`CONTROL`) to `export_variants`' `built`, where the baseline built: its
    bundle copied to `folder` and loaded again, with no compile times (it is not compiled again)."""
    if "run" not in built.get(BASELINE, {}):
        return
    run, copy = control_copy(built[BASELINE]["path"], folder)
    built[CONTROL] = {**built[BASELINE], "run": run, "path": copy, "compile_wall": None, "compile_cpu": None}


def realistic_model(model_name: str) -> tuple:
    """`models/imagenet.py`'s model `model_name`, or the zoo's of that name: (model, example, dynamic
    shapes, samples, the model's outputs on the samples)."""
    if model_name not in MODELS and model_name in ZOO:
        made, samples = ZOO[model_name].build(), ZOO[model_name].samples()
    else:
        made = MODELS[model_name]()
        samples = SAMPLES[model_name]() if model_name in SAMPLES else [tuple(made[1])]
    model, example = made[0].eval(), tuple(made[1])
    dynamic_shapes = made[2] if len(made) > 2 else None
    with torch.no_grad():
        expected = [model(*sample) for sample in samples]
    return model, example, dynamic_shapes, samples, expected


def check(run, samples: list[tuple], expected: list, exact: Float64Reference) -> tuple[float, str | None]:
    """Largest absolute difference from eager over every sample and float output, and why the
    outputs break the exporter's contract (`bench.outputs.compare_outputs`, verify's rule), if they do."""
    worst, reason = 0.0, None
    for sample, want in zip(samples, expected):
        got = run(*[value.numpy() if isinstance(value, torch.Tensor) else value for value in sample])
        for have, reference in zip(flatten_outputs(got), flatten_outputs(want)):
            if have.shape == reference.shape and have.size and np.issubdtype(reference.dtype, np.floating):
                worst = max(worst, float(np.max(np.abs(have.astype(np.float64) - reference))))
        reason = reason or compare_outputs(want, got, exact=lambda sample=sample, want=want: exact(sample, want))
    return worst, reason


def time_alternating(runs: dict[str, object], sample: tuple, rounds: int) -> dict[str, list[float]]:
    """Per variant, the CPU seconds per call in each round; variants alternate, rotated each round."""
    inputs = [value.numpy() if isinstance(value, torch.Tensor) else value for value in sample]
    calls = {}
    for name, run in runs.items():
        run(*inputs)
        start = time.process_time()
        run(*inputs)
        calls[name] = max(2, round(TURN_S / max(time.process_time() - start, 1e-6)))
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            run = runs[name]
            run(*inputs)  # untimed: caches after the other variant
            start = time.process_time()
            for _ in range(calls[name]):
                run(*inputs)
            times[name].append((time.process_time() - start) / calls[name])
    return times


def main(model_names: list[str], variants: dict[str, list[str]], rounds: int, cpu: str | None = None) -> None:
    torch.set_num_threads(1)
    print(f"load average at start: {os.getloadavg()[0]:.1f}; {rounds} rounds; CPU ms per call, one thread")
    with exporting_for(cpu):
        print(f"baseline flags: {' '.join(compiling.target_flags('llvm-cpu'))}")
    print(
        "| model | variant | median ms | min-max ms | ratio to current (median, min-max) | max abs error "
        "| within contract | compile wall s | compile CPU s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for model_name in model_names:
        model, example, dynamic_shapes, samples, expected = realistic_model(model_name)
        # The variants' bundles (the weights once per variant: ~600 MB for ResNet-50) go once timed.
        with tempfile.TemporaryDirectory(prefix="dycl-compile-flags-") as folder:
            with exporting_for(cpu):
                built = export_variants(model, example, dynamic_shapes, variants, Path(folder))
            add_control(built, Path(folder))
            runs = {name: item["run"] for name, item in built.items() if "run" in item}
            exact = Float64Reference(model)
            errors = {name: check(run, samples, expected, exact) for name, run in runs.items()}
            times = time_alternating(runs, samples[0], rounds)
        base = times.get(BASELINE)
        for name, item in built.items():
            if "error" in item:
                print(f"| {model_name} | {name} | failed: {item['error']} |||||||", flush=True)
                continue
            series = times[name]
            ratio = "-"
            if base is not None:
                ratios = [value / reference for value, reference in zip(series, base)]
                ratio = f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
            worst, reason = errors[name]
            seconds = [f"{item[key]:.0f}" if item[key] is not None else "-" for key in ("compile_wall", "compile_cpu")]
            print(
                f"| {model_name} | {name} | {statistics.median(series) * 1e3:.2f} | "
                f"{min(series) * 1e3:.2f}-{max(series) * 1e3:.2f} | {ratio} | {worst:.2e} | "
                f"{'yes' if reason is None else 'NO: ' + reason} | {' | '.join(seconds)} |",
                flush=True,
            )
        print(f"(load average after {model_name}: {os.getloadavg()[0]:.1f})", flush=True)


def _parse_variant(text: str) -> tuple[str, list[str]]:
    name, _, flags = text.partition("=")
    if not name or not flags.startswith("--"):
        raise argparse.ArgumentTypeError(f"expected NAME=--flag[,--flag...], not {text!r}")
    return name, [flag for flag in flags.split(",") if flag]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2", help="models of models/imagenet.py")
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds (default 15)")
    parser.add_argument(
        "--variant", action="append", type=_parse_variant, metavar="NAME=FLAG[,FLAG...]", help="(repeatable)"
    )
    parser.add_argument(
        "--cpu", help="export and compile as on a host with this CPU and no AVX-512 (e.g. znver3); default: this one"
    )
    arguments = parser.parse_args()
    chosen = dict(arguments.variant) if arguments.variant else dict(VARIANTS)
    chosen = {BASELINE: [], **chosen}
    main(arguments.models.split(","), chosen, arguments.rounds, arguments.cpu)
