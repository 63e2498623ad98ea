"""dycl_iree compiles a dynamic PyTorch network (early exits, gated blocks, decode loops) into an IREE bundle.

Example:
    python -m dycl_iree export models/programs.py:early_exit -o early_exit.dycl
    python -m dycl_iree inspect early_exit.dycl
    python -m dycl_iree run early_exit.dycl --input=1x8xf32=0.5
    python -m dycl_iree run early_exit.dycl --input=@inputs.npz --output=outputs.npz

Each subcommand is one `_add_<name>` function that declares its options and one `_<name>` handler.
`inspect`, `run`, `cache` and `--help` never import torch: they start in a fraction of a second and
work where only the runtime is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

import numpy as np

from host_runtime.bundle_format import MANIFEST
from host_runtime.errors import DyclError

from .compile import cpu_threads_of, cuda_architecture_of
from .emit_c import add_subcommand as add_emit_c
from .emit_c import emit_c
from .run_inputs import read_inputs, read_npz, write_outputs

PROGRAM = "python -m dycl_iree"
EXAMPLE_INPUTS = "example_inputs.npz"
# The driver that runs each target's vmfb when `run` is not given --device.
_DEFAULT_DEVICES = {"llvm-cpu": "local-sync", "cuda": "cuda", "vulkan": "vulkan"}


def plural(count: int, word: str) -> str:
    """`plural(1, "segment")` -> "1 segment"; `plural(3, "segment")` -> "3 segments"."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


# -- export -------------------------------------------------------------------------------------


def _add_export(commands: Any) -> None:
    export = commands.add_parser(
        "export",
        help="export FILE.py:FACTORY to a bundle",
        description="Script the model FACTORY() returns, compile it for each target and write a bundle folder.",
        epilog=f"example: {PROGRAM} export models/programs.py:early_exit -o early_exit.dycl",
    )
    export.add_argument(
        "factory",
        help="FILE.py:FACTORY or package.module:FACTORY; FACTORY() returns (model, example_inputs[, dynamic_shapes])",
    )
    export.add_argument("-o", "--output", metavar="DIR", help="bundle folder to write (default: FACTORY.dycl)")
    export.add_argument(
        "--force",
        action="store_true",
        help="replace --output even when it exists and is not a bundle (an existing bundle is always replaced)",
    )
    export.add_argument(
        "--target",
        action="append",
        metavar="TARGET",
        help="llvm-cpu (default: this machine's CPU), llvm-cpu:TRIPLE, cuda[:sm_XX], vulkan; repeatable",
    )
    export.add_argument(
        "--cpu-threads",
        type=int,
        default=1,
        metavar="N",
        help="threads the CPU code is split for: 1 (default) for --device local-sync, the worker count for local-task",
    )
    export.add_argument(
        "--no-cache", action="store_true", help="compile from scratch: neither read nor write the cache"
    )
    export.add_argument("--emit-c", metavar="DIR", help="also write the typed C function (<name>.h/.c) to DIR")
    export.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    output_given = Path(args.output) if args.output else None
    if output_given is not None:
        _check_output(output_given, args.force)  # before the minutes an export can take
    from .compile import target_flags

    for target in args.target or ("llvm-cpu",):
        target_flags(target, args.cpu_threads)  # a typo in --target fails now, not after the model loads
    from .progress import LOGGER, show_progress

    start = time.perf_counter()
    with show_progress():
        LOGGER.info(f"loading {args.factory}")
        from .loading import load_factory

        model, example_inputs, dynamic_shapes, name = load_factory(args.factory)
        output = output_given or Path(f"{name}.dycl")
        if output_given is None:
            _check_output(output, args.force)
        import dycl_iree  # its `export` attribute, not the submodule of the same name

        bundle = dycl_iree.export(
            model,
            example_inputs,
            targets=args.target or ("llvm-cpu",),
            dynamic_shapes=dynamic_shapes,
            cpu_threads=args.cpu_threads,
            cache=not args.no_cache,
        )
    bundle.files[EXAMPLE_INPUTS] = _npz(example_inputs, [spec["name"] for spec in bundle.manifest["inputs"]])
    bundle.save(output, force=args.force)
    manifest = bundle.manifest
    reason = manifest.get("compiled_host_unsupported")
    print(
        f"wrote {output}: {plural(len(manifest['segments']), 'segment')}, host {manifest['host']}"
        + (f" (compiled host not possible: {reason})" if reason else "")
        + f", {time.perf_counter() - start:.1f} s"
        + (" (unchanged model: reused the cached export)" if manifest.get("export_cache") == "hit" else "")
    )
    for target in manifest["targets"]:
        print(f"  {target}: {bundle.size(target):,} bytes (weights {manifest['weight_bytes']:,} bytes)")
    if args.emit_c:
        for path in emit_c(output, args.emit_c):
            print(f"  wrote {path}")
    print(f"next: {PROGRAM} run {output}   (on the example inputs stored in the bundle)")
    return 0


def _check_output(path: Path, force: bool) -> None:
    """Refuse an output path that holds something other than a bundle, unless --force."""
    if not path.exists() and not path.is_symlink():
        return
    is_bundle = path.is_dir() and (path / MANIFEST).is_file()
    if is_bundle or force or (path.is_dir() and not any(path.iterdir())):
        return
    what = "a folder that is not a bundle" if path.is_dir() else "a file"
    raise DyclError(f"{path} exists and is {what}; choose another --output, or give --force to replace it")


def _npz(inputs: Sequence[Any], names: Sequence[str]) -> bytes:
    import io

    arrays = {}
    for name, value in zip(names, inputs):
        if value is None:  # an input exported as None: `run` passes None for it
            continue
        arrays[name] = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


# -- run ----------------------------------------------------------------------------------------


def _add_run(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        help="run a bundle on given inputs (default: the example inputs stored at export)",
        description="Run a bundle with the torch-free runtime and print (or save) its outputs.",
        epilog=(
            "inputs, as iree-run-module takes them:\n"
            "  --input=1x8xf32=0.5 1 2 3 4 5 6 7   shape x element type = values (one value fills the tensor)\n"
            "  --input=3  --input=true            int, float and bool inputs\n"
            "  --input=@x.npy                     one input from a file\n"
            "  --input=@inputs.npz                every input, keyed by the model's input names (or arg0, arg1, ...)\n"
            f"example: {PROGRAM} run early_exit.dycl --input=1x8xf32=0.5 --output=outputs.npz"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("bundle", help="the bundle folder (written by `export`)")
    run.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="VALUE",
        help="one input in forward order (repeat per input) or @FILE.npz with all of them; see below",
    )
    run.add_argument("--inputs", metavar="FILE", help="same as --input=@FILE (.npz keyed by input names, or .npy)")
    run.add_argument("--output", metavar="FILE.npz", help="also save the outputs, keyed output0, output1, ...")
    run.add_argument(
        "--host", choices=("compiled", "python"), help="which host runs the control flow (default: the bundle's)"
    )
    run.add_argument(
        "--device",
        help="IREE driver: local-sync, local-task, cuda, vulkan (default: one that runs the bundle's target)",
    )
    run.add_argument(
        "--seed", type=int, default=0, help="seed of the model's random ops (torch.rand, bernoulli, dropout on)"
    )
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from host_runtime.bundle_format import read_manifest

    root, manifest = read_manifest(args.bundle)
    # Inputs exported as None are read from nowhere: the model gets None there.
    specs = [spec for spec in manifest["inputs"] if spec["kind"] != "none"]
    if args.inputs and args.input:
        raise DyclError("give the inputs either with --input or with --inputs, not both")
    if args.inputs:
        inputs = read_npz(Path(args.inputs), specs)
    elif args.input:
        inputs = read_inputs(args.input, specs)
    elif (root / EXAMPLE_INPUTS).is_file():
        inputs = read_npz(root / EXAMPLE_INPUTS, specs)
    else:
        raise DyclError(
            f"{root} holds no example inputs (a bundle saved from Python has none): give them with "
            "--input, once per input, or --input=@inputs.npz (see --help)"
        )
    host = args.host or manifest["host"]
    device = args.device or _default_device(root, manifest)
    import host_runtime

    runner = host_runtime.load(root, device=device, host=host, record=host == "python", seed=args.seed)
    given = iter(inputs)
    inputs = tuple(None if spec["kind"] == "none" else next(given) for spec in manifest["inputs"])
    start = time.perf_counter()
    outputs = runner(*inputs)
    elapsed = time.perf_counter() - start
    _print_outputs(outputs)
    if host == "python":
        for label, sides in sorted(runner.decisions.items()):
            print(f"decision {label}: " + ", ".join(f"{side}: {count}" for side, count in sorted(sides.items())))
        for label, trips in sorted(runner.trip_counts.items()):
            print(f"loop {label}: trip counts {trips}")
    if args.output:
        write_outputs(Path(args.output), [port.name for port in runner.outputs], runner.flatten_outputs(outputs))
        print(f"wrote {args.output}")
    print(f"ran in {elapsed * 1e3:.3f} ms ({host} host, {device})")
    return 0


def _default_device(root: Path, manifest: dict[str, Any]) -> str:
    targets = [name.split(":")[0] for name in manifest["targets"] if not name.startswith("llvm-cpu:")]
    if not targets:
        raise DyclError(f"{root} holds only cross-compiled CPU code ({', '.join(manifest['targets'])}); run it there")
    return _DEFAULT_DEVICES.get(targets[0], targets[0])


def _print_outputs(outputs: Any, prefix: str = "output") -> None:
    if isinstance(outputs, dict):
        for key, item in outputs.items():
            _print_outputs(item, f"{prefix}[{key!r}]")
        return
    if isinstance(outputs, (tuple, list)) and not isinstance(outputs, np.ndarray):
        for index, item in enumerate(outputs):
            _print_outputs(item, f"{prefix}[{index}]")
        return
    if isinstance(outputs, np.ndarray):
        with np.printoptions(precision=5, threshold=20, edgeitems=3):
            print(f"{prefix}: {outputs.dtype}{list(outputs.shape)} {outputs}")
    else:
        print(f"{prefix}: {outputs!r}")


# -- inspect ------------------------------------------------------------------------------------


def _add_inspect(commands: Any) -> None:
    inspect = commands.add_parser(
        "inspect",
        help="print a bundle's signature, targets, segments and host program",
        description="Print what a bundle holds, without running it.",
        epilog=f"example: {PROGRAM} inspect early_exit.dycl",
    )
    inspect.add_argument("bundle", help="the bundle folder")
    inspect.add_argument("--json", action="store_true", help="print the raw manifest instead")
    inspect.set_defaults(handler=_inspect)


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
    for line in _dim_lines(manifest):
        print(line)
    print(f"host: {manifest['host']}   ({_host_note(manifest)})")
    for target, entry in manifest["targets"].items():
        print(_target_line(manifest, target, entry))
    print(f"{plural(len(manifest['segments']), 'segment')}:")
    for segment in manifest["segments"]:
        ins = ", ".join(_describe(t) for t in segment["inputs"])
        outs = ", ".join(_describe(t) for t in segment["outputs"])
        print(f"  {segment['name']}({ins}) -> ({outs})  {plural(segment.get('ops', 0), 'op')}")
    print()
    print(check_file(root, manifest, manifest["program"]).read_text(), end="")
    return 0


def _host_note(manifest: dict[str, Any]) -> str:
    reason = manifest.get("compiled_host_unsupported")
    if reason:
        return f"compiled host not possible: {reason}"
    if not manifest.get("decisions"):
        return "no data-dependent control flow"
    return f"{plural(len(manifest['decisions']), 'data-dependent decision')}, compiled into `main`"


def _target_line(manifest: dict[str, Any], target: str, entry: dict[str, Any]) -> str:
    size = manifest["files"][entry["file"]]["size"]
    threads = cpu_threads_of(entry["flags"])
    split = f", code split for {plural(threads, 'thread')}" if threads else ""
    split += f", for GPU architecture {architecture}" if (architecture := cuda_architecture_of(entry["flags"])) else ""
    return f"target {target}: {entry['file']} {size:,} bytes, weights {manifest['weight_bytes']:,} bytes{split}"


def _dim_lines(manifest: dict[str, Any]) -> list[str]:
    """The dynamic dims, their names and ranges (checked at run time)."""
    lines = []
    for spec in manifest["inputs"]:
        for dim in spec.get("dims", []):
            low, high = dim.get("min"), dim.get("max")
            bounds = f"{low if low is not None else 0}..{high if high is not None else 'inf'}"
            lines.append(f"  {spec['name']} dim {dim['dim']}: {dim['name']} in {bounds}")
    return (["dynamic dims:"] + lines) if lines else []


def _describe(spec: dict[str, Any]) -> str:
    if spec["kind"] == "tensor":
        names = {dim["dim"]: dim["name"] for dim in spec.get("dims", [])}
        dims = [names.get(i, "?") if d is None else str(d) for i, d in enumerate(spec["shape"])]
        return f"{spec['dtype']}[{','.join(dims)}]"
    if "constant" in spec:
        return f"{spec['kind']}={spec['constant']!r}"
    if spec["kind"] == "none":
        return f"None (exported as None; {spec['declared']})"
    return spec["kind"]


# -- verify, demo, bench ------------------------------------------------------------------------


def _add_verify(commands: Any) -> None:
    verify = commands.add_parser(
        "verify",
        help="check a model's bundle against PyTorch on every path",
        description="Export (or take --bundle), run PyTorch and the bundle on the factory's SAMPLES and compare.",
        epilog=f"example: {PROGRAM} verify models/programs.py:early_exit --random 20",
    )
    verify.add_argument("factory", help="FILE.py:FACTORY (its module's SAMPLES[FACTORY] are used when present)")
    verify.add_argument("--bundle", help="use this bundle instead of exporting")
    verify.add_argument(
        "--host", choices=("compiled", "python", "both"), default="both", help="which host to check (default: both)"
    )
    verify.add_argument(
        "--random", type=int, default=0, metavar="N", help="also check N random inputs shaped like the example"
    )
    verify.add_argument("--baseline", choices=("trace",), help="also count the samples a torch.jit.trace gets wrong")
    verify.set_defaults(handler=_verify)


def _verify(args: argparse.Namespace) -> int:
    from .progress import show_progress
    from .verify import main as verify_main

    with show_progress():
        return verify_main(args)


def _add_doctor(commands: Any) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="list every problem that stops a model's export, with its fix, without exporting",
        description=(
            "Script the model (every problem TorchScript finds, at your line, with what to change), then "
            "specialize it to the example inputs; nothing is compiled. Exit status 1 when there are problems."
        ),
        epilog=f"example: {PROGRAM} doctor models/programs.py:early_exit",
    )
    doctor.add_argument("factory", help="FILE.py:FACTORY or package.module:FACTORY")
    doctor.set_defaults(handler=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import main as doctor_main

    return doctor_main(args.factory)


def _add_demo(commands: Any) -> None:
    demo = commands.add_parser(
        "demo",
        help="export and run two built-in dynamic networks against PyTorch",
        description="Export RaNet and a Transformer decoder, run every sample on both hosts, compare and time them.",
    )
    demo.add_argument(
        "--rounds", type=int, default=7, metavar="N", help="interleaved timing rounds per sample (default 7)"
    )
    demo.add_argument("--keep", metavar="DIR", help="keep the bundles in DIR (default: a temporary folder, removed)")
    demo.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from .demo import main as demo_main

    return demo_main(rounds=args.rounds, keep=args.keep)


def _add_bench(commands: Any) -> None:
    # `main` hands `bench ...` to the benchmark's own parser; this entry lists it in --help.
    commands.add_parser("bench", help="benchmark against PyTorch, ONNX Runtime and more (see benchmarks/README.md)")


# -- cache --------------------------------------------------------------------------------------


def _add_cache(commands: Any) -> None:
    cache = commands.add_parser(
        "cache",
        help="show or clear the compile cache",
        description=(
            "Compiled vmfbs and whole exports are cached in $DYCL_IREE_CACHE, else $XDG_CACHE_HOME/dycl_iree, "
            "else ~/.cache/dycl_iree; the oldest entries go once it passes $DYCL_IREE_CACHE_SIZE (default 2G)."
        ),
    )
    cache.add_argument("action", nargs="?", choices=("info", "clear"), default="info", help="info (default) or clear")
    cache.set_defaults(handler=_cache)


def _cache(args: argparse.Namespace) -> int:
    from . import cache

    if args.action == "clear":
        count, size = cache.clear()
        entries = "entry" if count == 1 else "entries"
        print(f"removed {count} {entries} ({size / 2**20:.1f} MiB) from {cache.directory()}")
        return 0
    count, size = cache.usage()
    print(f"{cache.directory()}: {count} entries, {size / 2**20:.1f} MiB (bound {cache.limit() / 2**20:.0f} MiB)")
    return 0


# -- the parser ---------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose mistakes are one `error:` line that says where to look."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see: {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


SUBCOMMANDS: list[Callable[[Any], None]] = [
    _add_export,
    _add_run,
    _add_inspect,
    _add_verify,
    _add_doctor,
    _add_demo,
    _add_bench,
    _add_cache,
    add_emit_c,
]


def _version() -> str:
    from host_runtime import __version__

    def installed(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    peers = ", ".join(
        f"{name} {installed(name)}" for name in ("torch", "torch-mlir", "iree-base-compiler", "iree-base-runtime")
    )
    return f"dycl_iree {__version__} ({peers})"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROGRAM,
        description=__doc__.split("\n\nEach subcommand")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version(), help="print the versions and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for add in SUBCOMMANDS:
        add(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status (2 for any error, with one `error:` line on stderr)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "bench":
            from .bench import main as bench_main

            return bench_main(argv[1:])
        args = build_parser().parse_args(argv)
        return args.handler(args)
    except DyclError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`inspect ... | head`): stop quietly, as `cat` does.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except OSError as error:  # a file the command was told to read or write (--output in a missing folder, ...)
        where = f"{error.filename}: " if error.filename else ""
        print(f"error: {where}{error.strerror or error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


__all__ = ["main", "build_parser", "SUBCOMMANDS"]
