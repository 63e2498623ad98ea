"""The command line: `python -m dycl_iree export | run | inspect | verify | doctor | bench | demo`.

Example:
    python -m dycl_iree export models/programs.py:early_exit -o early_exit.dycl
    python -m dycl_iree inspect early_exit.dycl
    python -m dycl_iree run early_exit.dycl --host python
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from host_runtime.errors import DyclError

from .compile import cpu_threads_of
from .loading import load_factory

EXAMPLE_INPUTS = "example_inputs.npz"


def _export(args: argparse.Namespace) -> int:
    from rich.console import Console

    import dycl_iree

    console = Console(stderr=True)
    model, example_inputs, dynamic_shapes, name = load_factory(args.factory)
    output = Path(args.output or f"{name}.dycl")
    start = time.perf_counter()
    with console.status("exporting", spinner="dots") as status:

        def progress(message: str) -> None:
            status.update(message)
            if not message.startswith("  "):
                console.log(message)

        bundle = dycl_iree.export(
            model,
            example_inputs,
            targets=args.target or ("llvm-cpu",),
            dynamic_shapes=dynamic_shapes,
            progress=progress,
            cpu_threads=args.cpu_threads,
        )
    bundle.files[EXAMPLE_INPUTS] = _npz(example_inputs)
    bundle.save(output)
    seconds = time.perf_counter() - start
    manifest = bundle.manifest
    host = manifest["host"]
    reason = manifest.get("compiled_host_unsupported")
    console.print(
        f"wrote {output}: {len(manifest['segments'])} segments, host {host}"
        + (f" (compiled host not possible: {reason})" if reason else "")
        + f", {seconds:.1f} s"
    )
    for target in manifest["targets"]:
        console.print(f"  {target}: {bundle.size(target):,} bytes (weights {manifest['weight_bytes']:,} bytes)")
    return 0


def _npz(inputs: Sequence[Any]) -> bytes:
    import io

    arrays = {}
    for index, value in enumerate(inputs):
        arrays[f"arg{index}"] = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _read_inputs(path: Path, manifest: dict[str, Any]) -> tuple:
    with np.load(path) as data:
        arrays = [data[f"arg{i}"] for i in range(len(data.files))]
    values = []
    for array, spec in zip(arrays, manifest["inputs"]):
        kind = spec["kind"]
        values.append(array if kind == "tensor" else {"int": int, "float": float, "bool": bool}[kind](array))
    return tuple(values)


def _run(args: argparse.Namespace) -> int:
    import host_runtime

    runner = host_runtime.load(args.bundle, device=args.device, host=args.host, record=args.host == "python")
    inputs_path = Path(args.inputs) if args.inputs else Path(args.bundle) / EXAMPLE_INPUTS
    if not inputs_path.exists():
        raise DyclError(f"{inputs_path}: no inputs (give --inputs FILE.npz with arg0, arg1, ...)")
    inputs = _read_inputs(inputs_path, runner.manifest)
    start = time.perf_counter()
    outputs = runner(*inputs)
    elapsed = time.perf_counter() - start
    _print_outputs(outputs)
    if args.host == "python":
        for label, sides in sorted(runner.decisions.items()):
            print(f"decision {label}: " + ", ".join(f"{side}: {count}" for side, count in sorted(sides.items())))
        for label, trips in sorted(runner.trip_counts.items()):
            print(f"loop {label}: trip counts {trips}")
    print(f"ran in {elapsed * 1e3:.3f} ms ({args.host} host, {args.device})")
    return 0


def _print_outputs(outputs: Any, prefix: str = "output") -> None:
    if isinstance(outputs, tuple):
        for index, item in enumerate(outputs):
            _print_outputs(item, f"{prefix}[{index}]")
        return
    if isinstance(outputs, np.ndarray):
        with np.printoptions(precision=5, threshold=20, edgeitems=3):
            print(f"{prefix}: {outputs.dtype}{list(outputs.shape)} {outputs}")
    else:
        print(f"{prefix}: {outputs!r}")


def _inspect(args: argparse.Namespace) -> int:
    from host_runtime.bundle_format import check_file, read_manifest

    root, manifest = read_manifest(args.bundle)
    if args.json:
        print(json.dumps(manifest, indent=2))
        return 0
    print(f"bundle {root}  (format {manifest['format']} v{manifest['version']})")
    producer = manifest["producer"]
    print(f"model {manifest['model']}, exported by dycl_iree {producer['dycl_iree']}, torch {producer['torch']}")
    signature = ", ".join(f"{i['name']}: {_describe(i)}" for i in manifest["inputs"])
    outputs = ", ".join(_describe(o) for o in manifest["outputs"]["leaves"])
    print(f"signature ({signature}) -> ({outputs})")
    print(f"host: {manifest['host']}", end="")
    reason = manifest.get("compiled_host_unsupported")
    print(f"   (compiled host not possible: {reason})" if reason else "   (control flow compiled into `main`)")
    for target, entry in manifest["targets"].items():
        size = manifest["files"][entry["file"]]["size"]
        threads = cpu_threads_of(entry["flags"])
        split = f", code split for {threads} thread(s)" if threads else ""
        print(f"target {target}: {entry['file']} {size:,} bytes, weights {manifest['weight_bytes']:,} bytes{split}")
    print(f"{len(manifest['segments'])} segments:")
    for segment in manifest["segments"]:
        ins = ", ".join(_describe(t) for t in segment["inputs"])
        outs = ", ".join(_describe(t) for t in segment["outputs"])
        print(f"  {segment['name']}({ins}) -> ({outs})  {segment['ops']} ops")
    print()
    print(check_file(root, manifest, manifest["program"]).read_text(), end="")
    return 0


def _describe(spec: dict[str, Any]) -> str:
    if spec["kind"] == "tensor":
        return f"{spec['dtype']}[{','.join('?' if d is None else str(d) for d in spec['shape'])}]"
    if "constant" in spec:
        return f"{spec['kind']}={spec['constant']!r}"
    return spec["kind"]


def _verify(args: argparse.Namespace) -> int:
    from .verify import main as verify_main

    return verify_main(args)


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import main as doctor_main

    return doctor_main(args.factory)


def _demo(args: argparse.Namespace) -> int:
    from .demo import main as demo_main

    return demo_main()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dycl_iree", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    export = commands.add_parser("export", help="export FILE.py:FACTORY to a bundle")
    export.add_argument(
        "factory", help="FILE.py:FACTORY, where FACTORY() returns (model, example_inputs[, dynamic_shapes])"
    )
    export.add_argument("-o", "--output", help="bundle directory to write (default FACTORY.dycl)")
    export.add_argument(
        "--target", action="append", help="llvm-cpu (default), llvm-cpu:TRIPLE, cuda, vulkan; repeatable"
    )
    export.add_argument(
        "--cpu-threads",
        type=int,
        default=1,
        metavar="N",
        help="threads the CPU code is split for: 1 (default) for --device local-sync, the worker count for local-task",
    )
    export.set_defaults(handler=_export)

    run = commands.add_parser("run", help="run a bundle on its example inputs or on --inputs FILE.npz")
    run.add_argument("bundle")
    run.add_argument("--inputs", help=".npz with arrays arg0, arg1, ... (scalars as 0-d arrays)")
    run.add_argument("--host", choices=("compiled", "python"), default="compiled")
    run.add_argument("--device", default="local-sync")
    run.set_defaults(handler=_run)

    inspect = commands.add_parser("inspect", help="print a bundle's signature, segments and host program")
    inspect.add_argument("bundle")
    inspect.add_argument("--json", action="store_true", help="print the raw manifest")
    inspect.set_defaults(handler=_inspect)

    verify = commands.add_parser("verify", help="check a model's bundle against PyTorch on every path")
    verify.add_argument("factory", help="FILE.py:FACTORY (its module's SAMPLES[FACTORY] are used when present)")
    verify.add_argument("--bundle", help="use this bundle instead of exporting")
    verify.add_argument("--host", choices=("compiled", "python", "both"), default="both")
    verify.add_argument("--random", type=int, default=0, help="also check N random inputs shaped like the example")
    verify.add_argument("--baseline", choices=("trace",), help="also count the samples a torch.jit.trace gets wrong")
    verify.set_defaults(handler=_verify)

    doctor = commands.add_parser(
        "doctor", help="list every problem that stops a model's export, with its fix, without exporting"
    )
    doctor.add_argument("factory", help="FILE.py:FACTORY or package.module:FACTORY")
    doctor.set_defaults(handler=_doctor)

    demo = commands.add_parser("demo", help="export and run the built-in examples, against PyTorch")
    demo.set_defaults(handler=_demo)

    bench = commands.add_parser("bench", help="benchmark against the peers (see benchmarks/README.md)", add_help=False)
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    bench.set_defaults(handler=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        from .bench import main as bench_main

        return bench_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except DyclError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
