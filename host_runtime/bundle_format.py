"""The on-disk bundle format, shared by the exporter (writes) and the runtime (reads).

A bundle is a directory:

    model.dycl/
      manifest.json       format, version, main_abi, signature, segments, host kind, targets, file hashes
      llvm-cpu.vmfb       one vmfb per target (segment functions + the compiled host `main`)
      host.py             the generated Python host
      program.txt         the Program, as `inspect` prints it

The manifest is written last, so a bundle whose export was interrupted has none and is refused.

Every file the manifest names must lie inside the bundle's folder (no absolute names, no `..`, no
symbolic link that leads out), and the manifest's shape is checked once, on load: a bundle that is
damaged or edited by hand gets a BundleError naming the file and the problem, never a KeyError later.
The SHA-256 of each file guards against corruption (a truncated copy, a flipped bit), not against a
malicious author, who can rewrite the hashes too (and a vmfb holds native code). To pin a bundle you
trust, pass the SHA-256 of its manifest (`manifest_sha256`), which covers every file's hash, to
`load(..., expected_sha256=...)`.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path, PurePosixPath
from typing import Any

from .errors import BundleError
from .output_tree import TreeProblem, check_tree

FORMAT = "dycl_iree-bundle"
# 2: the compiled host's `main` takes and returns scalars as 0-d tensors (MAIN_ABI 2). A runtime that
# reads version 1 calls `main` with VM scalars; it refuses a version-2 bundle at load, by this number.
# 3: as 2, and an input may be of kind "none" (exported with None as its example: no host takes it).
#   Only such a bundle is written as version 3, so that a runtime that reads only version 2 refuses
#   just those, by this number, instead of calling their manifests corrupt.
# 4: as 3, and the output tree may hold lists of run-time length of lists (`{"ragged_ints": ...}`, a
#   list of `List[int]`s; `{"zip_lists": ...}`, of fixed-length lists). Written only for bundles whose
#   outputs hold one: a runtime that reads only up to version 3 refuses those by this number.
VERSION = 4
NONE_INPUTS_VERSION = 3
LISTS_OF_LISTS_VERSION = 4
READABLE_VERSIONS = (2, 3, 4)
# The output tree's nodes that format version 4 adds (`output_tree.py`).
_LISTS_OF_LISTS = frozenset({"ragged_ints", "zip_lists"})


def format_version(inputs: list[dict[str, Any]], tree: Any = None) -> int:
    """The oldest format version that holds a bundle with these manifest inputs and output tree, so
    that a runtime of an older version loads every bundle it can.

    >>> format_version([{"name": "x", "kind": "tensor", "dtype": "float32", "shape": [2]}], [0, {"zip": [1]}])
    2
    >>> format_version([], {"zip_lists": [{"unstack": 0}]})
    4
    """
    if tree_nodes(tree) & _LISTS_OF_LISTS:
        return LISTS_OF_LISTS_VERSION
    return NONE_INPUTS_VERSION if any(spec["kind"] == "none" for spec in inputs) else 2


def tree_nodes(tree: Any) -> set[str]:
    """The kinds of node (the keys of its JSON objects: "zip", "ragged_ints", ...) an output tree holds.
    A model's dict keys are strings inside lists (`{"dict": [[key, subtree], ...]}`), never counted."""
    if isinstance(tree, dict):
        return set(tree).union(*(tree_nodes(body) for body in tree.values()))
    if isinstance(tree, list):
        return set().union(*(tree_nodes(item) for item in tree))
    return set()


_VERSION_CHANGES = {
    2: "version 2 passes the compiled host's int, float and bool values as 0-d tensors",
    3: "version 3 adds inputs exported as None",
    4: "version 4 adds outputs that are lists of run-time length of lists (of ints, or of fixed length)",
}
# The calling convention of the compiled host's `main`, recorded in the manifest as `main_abi`:
#   1 (format version 1): tensors as buffer views, int/float/bool as VM i64/f32/i32 values. IREE runtimes
#     lay out mixed scalar arguments differently (README's traps), so it is refused.
#   2: every input and output a buffer view; an int is a 0-d int64 tensor, a float a 0-d float32
#     tensor, a bool a 0-d bool tensor (one byte).
#   3: as 2, and the random generator's state (an int32 tensor of 2) follows the model's inputs and
#     its next value the model's outputs (manifest `random_state: true`, `random_state.py`). Only a
#     bundle whose model draws random numbers uses it, so a runtime that knows only 2 refuses just those.
MAIN_ABI = 2
RANDOM_STATE_ABI = 3
MAIN_ABIS = (MAIN_ABI, RANDOM_STATE_ABI)
MANIFEST = "manifest.json"
# The dtypes an exporter writes into a manifest (torch's names).
DTYPES = frozenset({"float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"})
HOSTS = ("compiled", "python")
_VALUE_KINDS = frozenset({"tensor", "int", "float", "bool", "list"})
# An input may also be one the bundle was exported with as None (`none_inputs.py`): no host takes it.
_INPUT_KINDS = _VALUE_KINDS | {"none"}
_SHA256 = re.compile(r"[0-9a-f]{64}")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def manifest_sha256(path: str | Path) -> str:
    """The SHA-256 of a bundle's manifest: it pins the whole bundle, since the manifest holds every file's hash.

    >>> pin = manifest_sha256("model.dycl")                            # doctest: +SKIP
    >>> run = host_runtime.load("model.dycl", expected_sha256=pin)    # doctest: +SKIP
    """
    manifest_path = Path(path) / MANIFEST
    try:
        return sha256_file(manifest_path)
    except OSError as error:
        raise BundleError(f"{manifest_path}: cannot read it ({error})") from error


def read_manifest(path: str | Path, expected_sha256: str | None = None) -> tuple[Path, dict[str, Any]]:
    """Read and check a bundle's manifest; every problem is a BundleError naming the file.

    With `expected_sha256`, the manifest's bytes must have that SHA-256 (see `manifest_sha256`).
    """
    root = Path(path)
    if not root.exists():
        raise BundleError(f"{root}: no such bundle")
    if not root.is_dir():
        raise BundleError(f"{root}: not a bundle directory (a bundle is a folder with {MANIFEST})")
    manifest_path = root / MANIFEST
    if not manifest_path.exists():
        raise BundleError(f"{manifest_path}: missing; the bundle is incomplete (was its export interrupted?)")
    if manifest_path.is_symlink() or not manifest_path.is_file():
        raise BundleError(f"{manifest_path}: not a regular file inside the bundle")
    text = manifest_path.read_bytes()
    if expected_sha256 is not None:
        actual = hashlib.sha256(text).hexdigest()
        if actual != expected_sha256.lower():
            raise BundleError(
                f"{manifest_path}: SHA-256 {actual}, but the caller pinned {expected_sha256} "
                "(another bundle, or this one modified)"
            )
    try:
        manifest = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise BundleError(f"{manifest_path}: corrupt manifest ({error})") from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{manifest_path}: not a dycl_iree bundle manifest")
    version = manifest.get("version")
    if type(version) is not int:
        raise BundleError(f"{manifest_path}: corrupt manifest ('version' must be an int, not {version!r})")
    if version not in READABLE_VERSIONS:
        # What changed between the two (a bundle older than every version read, or newer).
        newer = version > max(READABLE_VERSIONS)
        low, high = sorted((version, max(READABLE_VERSIONS) if newer else min(READABLE_VERSIONS)))
        changes = "; ".join(_VERSION_CHANGES[v] for v in range(low + 1, high + 1) if v in _VERSION_CHANGES)
        *earlier, last = map(str, READABLE_VERSIONS)
        readable = f"{', '.join(earlier)} or {last}" if earlier else last
        producer = manifest.get("producer")
        exporter = producer.get("dycl_iree") if isinstance(producer, dict) else None
        if newer:
            made_by = f", as dycl_iree {exporter}'s does" if isinstance(exporter, str) else ""
            remedy = (
                f"; the bundle is newer than this runtime: load it with a runtime that reads version {version}"
                f"{made_by}, or re-export the model with this runtime's dycl_iree version"
            )
        else:
            remedy = (
                "; re-export the model with this dycl_iree version, or load it with the runtime it was exported for"
            )
        raise BundleError(
            f"{manifest_path}: bundle format version {version}, but this runtime reads version {readable}"
            + (f" ({changes})" if changes else "")
            + remedy
        )
    problem = manifest_problem(manifest)
    if problem is not None:
        raise BundleError(f"{manifest_path}: corrupt manifest ({problem})")
    return root, manifest


def check_main_abi(root: Path, manifest: dict[str, Any]) -> None:
    """Refuse a compiled host whose `main` uses another calling convention than this runtime passes
    (a BundleError naming both), before anything calls it with wrongly laid-out arguments."""
    abi = manifest["main_abi"]
    if abi not in MAIN_ABIS:
        raise BundleError(
            f"{root}: its compiled host `main` uses calling convention (main_abi) {abi}, but this runtime "
            f"passes main_abi {' or '.join(map(str, MAIN_ABIS))}; re-export the model with this dycl_iree "
            "version, or run it with a runtime of its own version"
        )


def manifest_problem(manifest: dict[str, Any]) -> str | None:
    """What is wrong with a manifest's shape (a key's path and the problem), or None; checked once on load,
    so the runtime can then index the manifest without guarding each read."""
    try:
        _check_manifest(manifest)
    except _Problem as problem:
        return str(problem)
    return None


class _Problem(Exception):
    pass


def _expect(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    # bool is an int to isinstance: a `true` where a count belongs is a damaged manifest too.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        names = " or ".join(k.__name__ for k in _as_tuple(kind))
        raise _Problem(f"{where} must be {names}, not {value!r}")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _key(mapping: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in mapping:
        raise _Problem(f"no {key!r} in {where}" if where else f"no {key!r}")
    return _expect(mapping[key], kind, f"{where}.{key}" if where else repr(key))


def _check_value(spec: Any, where: str, named: bool = False) -> None:
    _expect(spec, dict, where)
    if named:
        _key(spec, "name", str, where)
    kind = _key(spec, "kind", str, where)
    kinds = _INPUT_KINDS if named else _VALUE_KINDS
    if kind not in kinds:
        raise _Problem(f"{where}.kind {kind!r} is not one of {', '.join(sorted(kinds))}")
    if kind == "tensor":
        dtype = _key(spec, "dtype", str, where)
        if dtype not in DTYPES:
            raise _Problem(f"{where}.dtype {dtype!r} is not a dtype this runtime knows ({', '.join(sorted(DTYPES))})")
        for index, dim in enumerate(_key(spec, "shape", list, where)):
            if dim is not None and (type(dim) is not int or dim < 0):
                raise _Problem(f"{where}.shape[{index}] must be a size or null, not {dim!r}")
    elif kind == "list":
        _key(spec, "element", str, where)
    elif kind == "none":
        _key(spec, "declared", str, where)
        _key(spec, "default_none", bool, where)


def _check_manifest(manifest: dict[str, Any]) -> None:
    _key(manifest, "model", str, "")
    _key(manifest, "module_name", str, "")
    for index, spec in enumerate(_key(manifest, "inputs", list, "")):
        _check_value(spec, f"inputs[{index}]", named=True)
        if spec["kind"] == "none" and manifest["version"] < NONE_INPUTS_VERSION:
            raise _Problem(f"inputs[{index}] is exported as None, which format version {manifest['version']} has not")
    outputs = _key(manifest, "outputs", dict, "")
    leaves = _key(outputs, "leaves", list, "outputs")
    for index, spec in enumerate(leaves):
        _check_value(spec, f"outputs.leaves[{index}]")
    tree = _key(outputs, "tree", (int, list, dict, type(None)), "outputs")
    try:
        check_tree(tree, len(leaves), "outputs.tree")
    except TreeProblem as problem:
        raise _Problem(str(problem)) from None
    if manifest["version"] < LISTS_OF_LISTS_VERSION:
        for node in sorted(tree_nodes(tree) & _LISTS_OF_LISTS):
            raise _Problem(f"outputs.tree holds {node!r}, which format version {manifest['version']} has not")
    for index, segment in enumerate(_key(manifest, "segments", list, "")):
        where = f"segments[{index}]"
        _expect(segment, dict, where)
        _key(segment, "name", str, where)
        for side in ("inputs", "outputs"):
            for position, spec in enumerate(_key(segment, side, list, where)):
                _check_value(spec, f"{where}.{side}[{position}]")
    files = _key(manifest, "files", dict, "")
    if not files:
        raise _Problem("'files' is empty: a bundle has at least a vmfb and its hosts")
    for name, entry in files.items():
        where = f"files[{name!r}]"
        problem = _name_problem(name)
        if problem is not None:
            raise _Problem(f"{where}: {problem}")
        _expect(entry, dict, where)
        if _key(entry, "size", int, where) < 0:
            raise _Problem(f"{where}.size must not be negative")
        if not _SHA256.fullmatch(_key(entry, "sha256", str, where)):
            raise _Problem(f"{where}.sha256 is not a SHA-256 in hex")
    targets = _key(manifest, "targets", dict, "")
    for target, entry in targets.items():
        where = f"targets[{target!r}]"
        _expect(entry, dict, where)
        _named_file(files, _key(entry, "file", str, where), f"{where}.file")
    _named_file(files, _key(manifest, "python_host", str, ""), "'python_host'")
    if "program" in manifest:
        _named_file(files, _key(manifest, "program", str, ""), "'program'")
    if _key(manifest, "main_abi", int, "") < 1:
        raise _Problem(f"'main_abi' must be a calling convention number (1 or more), not {manifest['main_abi']!r}")
    random_state = manifest.get("random_state", False)
    if not isinstance(random_state, bool):
        raise _Problem(f"'random_state' must be a bool, not {random_state!r}")
    if random_state != (manifest["main_abi"] == RANDOM_STATE_ABI):
        raise _Problem(f"'random_state' is {random_state} but 'main_abi' is {manifest['main_abi']}")
    host = _key(manifest, "host", str, "")
    if host not in HOSTS:
        raise _Problem(f"'host' must be one of {', '.join(map(repr, HOSTS))}, not {host!r}")
    unsupported = manifest.get("compiled_host_unsupported")
    if unsupported is not None and not isinstance(unsupported, str):
        raise _Problem(f"'compiled_host_unsupported' must be a str or null, not {unsupported!r}")
    if host == "compiled" and unsupported:
        raise _Problem(f"'host' is 'compiled', but 'compiled_host_unsupported' says it was not built ({unsupported})")


def _named_file(files: dict[str, Any], name: str, where: str) -> None:
    if name not in files:
        raise _Problem(f"{where} names {name!r}, which 'files' does not list")


def _name_problem(name: str) -> str | None:
    """Why `name` cannot be a bundle file: every file lies inside the bundle's folder, named relative to it."""
    if not name or "\\" in name or "\0" in name:
        return "not a plain file name"
    path = PurePosixPath(name)
    if path.is_absolute() or Path(name).is_absolute():
        return "an absolute path; a bundle names only files inside its folder"
    if any(part in ("..", ".") for part in name.split("/")) or not path.parts:
        return "a path with '..' or '.'; a bundle names only files inside its folder"
    return None


def resolve_inside(root: Path, name: str) -> Path:
    """The path of bundle file `name`, after checking that it lies inside `root`, symbolic links resolved."""
    problem = _name_problem(name)
    if problem is not None:
        raise BundleError(f"{root / MANIFEST}: file {name!r} is {problem}")
    path = root / name
    try:
        inside = path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError) as error:  # a loop of symbolic links
        raise BundleError(f"{path}: cannot resolve it ({error})") from error
    if not inside:
        raise BundleError(f"{path}: leads outside the bundle folder (a symbolic link?); a bundle opens only its files")
    return path


def check_file(root: Path, manifest: dict[str, Any], name: str) -> Path:
    """The path of a bundle file after checking that it exists and that its hash matches."""
    entry = manifest["files"].get(name)
    if entry is None:
        raise BundleError(f"{root / MANIFEST}: lists no file {name!r}")
    path = resolve_inside(root, name)
    if not path.exists():
        raise BundleError(f"{path}: missing from the bundle")
    if not path.is_file():
        raise BundleError(f"{path}: not a regular file")
    size = path.stat().st_size
    if size != entry["size"]:
        raise BundleError(f"{path}: {size} bytes but the manifest says {entry['size']} (truncated or replaced)")
    if sha256_file(path) != entry["sha256"]:
        raise BundleError(f"{path}: contents do not match the manifest's hash (corrupt or modified)")
    return path


# -- CPU targets: which llvm-cpu vmfb runs on which CPU ---------------------------------------------

# Names a CPU goes by (`platform.machine()`, CMake's CMAKE_SYSTEM_PROCESSOR), in the triple's spelling.
_CPU_NAMES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "armv8": "aarch64", "armv8l": "aarch64"}


def cpu_name(machine: str) -> str:
    """The triple's spelling of a CPU name.

    >>> cpu_name("AMD64"), cpu_name("arm64"), cpu_name("aarch64")
    ('x86_64', 'aarch64', 'aarch64')
    """
    return _CPU_NAMES.get(machine.lower(), machine.lower())


def vmfb_file_name(target: str) -> str:
    """The file a target's vmfb is stored as: no `:`, which `scp` and Windows read as a host or a drive.

    >>> vmfb_file_name("llvm-cpu:aarch64-linux-gnu")
    'llvm-cpu-aarch64-linux-gnu.vmfb'
    """
    return target.replace(":", "-") + ".vmfb"


def target_cpu(target: str, entry: dict[str, Any]) -> str | None:
    """The CPU an llvm-cpu target's code runs on: its triple's first part (`llvm-cpu:aarch64-linux-gnu`),
    or for `llvm-cpu` (the exporting machine's CPU) the `cpu` the exporter recorded; None when unknown
    (bundles from before it was recorded) or not a CPU target."""
    if target.startswith("llvm-cpu:"):
        return cpu_name(target.split(":", 1)[1].split("-", 1)[0])
    if target == "llvm-cpu" and isinstance(entry.get("cpu"), str):
        return cpu_name(entry["cpu"])
    return None


def select_cpu_target(root: Path, manifest: dict[str, Any], machine: str) -> str:
    """The llvm-cpu target of a bundle whose code runs on CPU `machine`; a BundleError when none does.

    A plain `llvm-cpu` vmfb (tuned for the exporting machine) comes before a cross-compiled one for the
    same CPU; a plain `llvm-cpu` whose CPU was not recorded is taken when no target names `machine`.
    """
    cpu = cpu_name(machine)
    targets = manifest["targets"]
    cpu_targets = ["llvm-cpu"] if "llvm-cpu" in targets else []
    cpu_targets += [name for name in targets if name.startswith("llvm-cpu:")]
    for name in cpu_targets:
        if target_cpu(name, targets[name]) == cpu:
            return name
    if "llvm-cpu" in targets and target_cpu("llvm-cpu", targets["llvm-cpu"]) is None:
        return "llvm-cpu"
    built = ", ".join(f"{name} ({target_cpu(name, targets[name])})" for name in cpu_targets) or "no CPU target"
    raise BundleError(
        f"{root}: no vmfb for this CPU ({cpu}); the bundle has {built}. "
        f"Export it with --target llvm-cpu:{cpu}-linux-gnu"
    )
