"""Bundle: the manifest, the vmfbs and the generated host, as one directory.

Example:
    >>> bundle = dycl_iree.export(model, (torch.randn(1, 8),))       # doctest: +SKIP
    >>> bundle.save("model.dycl")                                    # doctest: +SKIP
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from host_runtime import __version__
from host_runtime.bundle_format import FORMAT, MAIN_ABI, MANIFEST, RANDOM_STATE_ABI, format_version, sha256_file
from host_runtime.errors import BundleError

from .program import (
    Constant,
    If,
    ListArg,
    ListType,
    Loop,
    Program,
    ScalarType,
    TensorType,
    Type,
    Value,
    format_program,
    iter_nodes,
)

PROGRAM_TEXT = "program.txt"
PYTHON_HOST = "host.py"


def describe_type(type_: Type) -> dict[str, Any]:
    if isinstance(type_, TensorType):
        return {"kind": "tensor", "dtype": type_.dtype, "shape": list(type_.shape)}
    if isinstance(type_, ScalarType):
        return {"kind": type_.kind}
    if isinstance(type_, ListType):
        return {"kind": "list", "element": type_.element}
    raise TypeError(type_)


def describe_leaf(arg: Any) -> dict[str, Any]:
    if isinstance(arg, Value):
        return describe_type(arg.type)
    value = arg.value if isinstance(arg, Constant) else arg
    kind = {bool: "bool", int: "int", float: "float"}.get(type(value))
    if kind is None:
        raise TypeError(f"cannot describe constant output {value!r}")
    return {"kind": kind, "constant": value}


class OutputExists(BundleError, FileExistsError):
    """`Bundle.save` to a path that holds something other than a bundle (a DyclError and a FileExistsError)."""


@dataclass(repr=False)
class Bundle:
    """An exported dynamic network: write it with `save`, run it with `dycl_iree.load`.

    >>> bundle                                                       # doctest: +SKIP
    Bundle(model='EarlyExit', host='compiled', targets=['llvm-cpu'], 1 segment, files: host.py 1.2 kB, ...)
    """

    manifest: dict[str, Any]
    files: dict[str, bytes]
    program: Program

    def __repr__(self) -> str:
        segments = len(self.manifest["segments"])
        sizes = ", ".join(f"{name} {_size_text(len(data))}" for name, data in sorted(self.files.items()))
        return (
            f"Bundle(model={self.manifest['model']!r}, host={self.host!r}, targets={list(self.manifest['targets'])}, "
            f"{segments} segment{'' if segments == 1 else 's'}, files: {sizes})"
        )

    def save(self, path: str | Path, force: bool = False) -> Path:
        """Write the bundle directory (replacing a bundle that exists there); returns its path.

        A path that holds anything else (a file, a folder that is not a bundle) is refused with a
        BundleError, unless `force=True`, which replaces it.
        """
        root = Path(path)
        if root.exists() or root.is_symlink():
            is_bundle = root.is_dir() and (root / MANIFEST).is_file()
            if not is_bundle and not force and not (root.is_dir() and not any(root.iterdir())):
                what = "a folder that is not a bundle" if root.is_dir() else "a file"
                raise OutputExists(f"{root} exists and is {what}; refusing to overwrite it (force=True does)")
            if root.is_dir() and not root.is_symlink():
                shutil.rmtree(root)
            else:
                root.unlink()
        root.mkdir(parents=True)
        manifest = dict(self.manifest)
        manifest["files"] = {}
        for name, content in self.files.items():
            (root / name).write_bytes(content)
            manifest["files"][name] = {"size": len(content), "sha256": sha256_file(root / name)}
        # The manifest goes last: a bundle without one is incomplete and is refused on load.
        (root / MANIFEST).write_text(json.dumps(manifest, indent=2))
        return root

    @property
    def host(self) -> str:
        return self.manifest["host"]

    def size(self, target: str = "llvm-cpu") -> int:
        return len(self.files[self.manifest["targets"][target]["file"]])


def _size_text(size: int) -> str:
    if size < 1000:
        return f"{size} B"
    return f"{size / 1e3:.1f} kB" if size < 1_000_000 else f"{size / 1e6:.1f} MB"


def make_manifest(
    program: Program,
    module_name: str,
    host: str,
    compiled_host_unsupported: str | None,
    targets: dict[str, dict[str, Any]],
    weight_bytes: int,
) -> dict[str, Any]:
    from importlib.metadata import version

    segments = []
    for segment in program.segments:
        segments.append(
            {
                "name": segment.name,
                "inputs": [describe_type(v.type) for v in segment.params],
                "outputs": [describe_type(v.type) for v in segment.results],
                "ops": len(segment.nodes),
                "sources": sorted({op.source for op in segment.nodes if op.source}),
            }
        )
    inputs = manifest_inputs(program)
    return {
        "format": FORMAT,
        "version": format_version(inputs, program.output_tree),
        # How the compiled host's `main` takes and returns values (host_runtime/bundle_format.py).
        "main_abi": RANDOM_STATE_ABI if program.random_state else MAIN_ABI,
        # Whether `main` and the Python host take and return the random state after the model's values.
        "random_state": program.random_state,
        "model": program.name,
        "module_name": module_name,
        "producer": {
            "dycl_iree": __version__,
            "torch": torch.__version__,
            "iree-base-compiler": version("iree-base-compiler"),
        },
        "inputs": inputs,
        "outputs": {"tree": program.output_tree, "leaves": [describe_leaf(r) for r in model_results(program)]},
        "host": host,
        "compiled_host_unsupported": compiled_host_unsupported,
        "segments": segments,
        # Every data-dependent decision, as the Python host labels it when it records.
        "decisions": [
            {"label": node.label, "kind": "if" if isinstance(node, If) else "loop", "source": node.source}
            for node in iter_nodes(program.body)
            if isinstance(node, (If, Loop))
        ],
        "weight_bytes": weight_bytes,
        "targets": targets,
        "python_host": PYTHON_HOST,
        "program": PROGRAM_TEXT,
    }


def manifest_inputs(program: Program) -> list[dict[str, Any]]:
    """`forward`'s inputs in order: each taken one with its type, and each exported as None as
    `{"kind": "none", "declared": "Optional[Tensor]", "default_none": true}` (`main` does not take
    it; a runtime accepts only None for it, and may leave it out where `default_none`)."""
    taken = iter(zip(program.taken_input_names, program.inputs))
    exported_as_none = {name: (declared, default) for name, declared, default in program.none_inputs}
    inputs = []
    for name in program.input_names:
        if name in exported_as_none:
            declared, default = exported_as_none[name]
            inputs.append({"name": name, "kind": "none", "declared": declared, "default_none": default})
        else:
            _, value = next(taken)
            inputs.append({"name": name, **describe_type(value.type)})
    return inputs


def model_results(program: Program) -> tuple:
    """The results of `program` that are the model's outputs (not the random state after the run)."""
    results = program.body.results
    return results[:-1] if program.random_state else results


def weight_bytes(program: Program) -> int:
    """Bytes of the constant tensors the segments use, each counted once (the manifest's weight_bytes)."""
    seen = {id(value): value.numel() * value.element_size() for value in _weights(program.segments)}
    return sum(seen.values())


def largest_weights(program: Program) -> dict[str, int]:
    """Per segment, the elements of its largest constant tensor (0 where it has none)."""
    return {
        segment.name: max((value.numel() for value in _weights([segment])), default=0) for segment in program.segments
    }


def _weights(segments: Any) -> Iterator[torch.Tensor]:
    """The constant tensors the ops of `segments` take, lists of them included."""

    def visit(arg: Any) -> Iterator[torch.Tensor]:
        if isinstance(arg, ListArg):
            for item in arg.items:
                yield from visit(item)
        elif isinstance(arg, Constant) and isinstance(arg.value, torch.Tensor):
            yield arg.value

    for segment in segments:
        for op in segment.nodes:
            for arg in op.args:
                yield from visit(arg)
            for _, arg in op.kwargs:
                yield from visit(arg)


def program_text(program: Program) -> str:
    return format_program(program) + "\n"
