"""The whole-export cache: an unchanged model re-exports in the time it takes to script and hash it.

Lowering a large model (torch.export of every segment, the FX import) takes most of an export once
iree-compile's output is cached (BlockDrop: 57 s of a warm export). The key is everything an export
reads: the frozen TorchScript graph (its code, and every constant tensor's bytes: the weights), the
example inputs' types (dtype and shape of a tensor, kind and value of a scalar), the declared dynamic
dims, the targets and their flags (with the CPU that `host` means here), and the versions of torch,
torch-mlir, iree-base-compiler and of this exporter's own source. An entry is a saved bundle plus the
pickled Program; it lives in the compile cache's folder (`dycl_iree/cache.py`), under the same bound.
That folder is trusted as the user's own files are: it holds native code (vmfbs) and pickles, so a
cache shared between users must be writable only by people whose code they would run anyway.

Example:
    >>> key = export_key(captured, example_inputs, dims, ("llvm-cpu",), 1)      # doctest: +SKIP
    >>> bundle = lookup(key) or build_and_store(key)                          # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from functools import cache as memoize
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

import torch

from . import cache
from .bundle import Bundle
from .capture import CapturedModel
from .compile import cache_key_flags, target_flags
from .progress import LOGGER

_PROGRAM = "program.pt"
_INDEX = "index.json"  # the bundle's manifest and the names of its files
# TorchScript numbers the classes it compiles per process (`___torch_mangle_6`): not part of the model.
_MANGLE = re.compile(r"___torch_mangle_\d+\.")


def export_key(
    captured: CapturedModel,
    example_inputs: Sequence[Any],
    dims: list[list[dict[str, Any]]],
    targets: Sequence[str],
    cpu_threads: int,
) -> str:
    """The cache key of one export (hex SHA-256)."""
    key = hashlib.sha256()
    key.update(_MANGLE.sub("", str(captured.graph)).encode())
    for tensor in _constant_tensors(captured.graph):
        key.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
        key.update(_bytes(tensor))
    for name, tensor in sorted(captured.frozen.state_dict().items()):  # attributes freezing kept
        key.update(name.encode())
        key.update(_bytes(tensor))
    key.update(json.dumps([_input_type(value) for value in example_inputs]).encode())
    key.update(json.dumps(dims).encode())
    for target in targets:
        key.update("\0".join([target, *cache_key_flags(target_flags(target, cpu_threads))]).encode())
    key.update(_versions().encode())
    return key.hexdigest()


def _bytes(tensor: torch.Tensor) -> bytes:
    """A tensor's bytes; flattened first, since `view(torch.uint8)` refuses a 0-d tensor of wider elements."""
    return tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""


def lookup(key: str) -> Bundle | None:
    """The cached bundle of this key, or None."""
    if not cache.enabled():
        return None
    folder = cache.entry_path(f"export-{key}")
    try:
        index = json.loads((folder / _INDEX).read_text())
        manifest = index["manifest"]
        files = {name: (folder / name).read_bytes() for name in index["files"]}
        pickled = (folder / _PROGRAM).read_bytes()
    except Exception as error:  # missing, half-pruned or from another version: a miss, never a failed export
        if folder.exists():
            LOGGER.debug(f"export cache entry {folder} unusable ({error}); exporting")
        return None
    cache.touch(folder.name)
    return CachedBundle(manifest, files, pickled)


class CachedBundle(Bundle):
    """A bundle from the cache, whose Program is unpickled when first asked for: a saved or loaded
    bundle never needs it, and unpickling it (the weights are in it) was 1.6 of the 3.9 s (CPU) of
    the early-exit ResNet-50's cached export."""

    def __init__(self, manifest: dict[str, Any], files: dict[str, bytes], pickled: bytes) -> None:
        self._pickled = pickled
        self._program = None
        super().__init__(manifest, files, None)  # type: ignore[arg-type]

    @property  # type: ignore[override]
    def program(self) -> Any:
        if self._program is None:
            self._program = torch.load(io.BytesIO(self._pickled), weights_only=False)
            self._pickled = b""
        return self._program

    @program.setter
    def program(self, value: Any) -> None:
        if value is not None:
            self._program = value


def store(key: str, bundle: Bundle) -> None:
    """Keep an exported bundle for the next export of the same model (best effort)."""
    if not cache.enabled():
        return
    buffer = io.BytesIO()
    try:
        # Protocol 4, not torch.save's default 2: under 2 a `torch.memory_format` (the constant of a
        # `.contiguous()`, as in torchaudio's Emformer) fails with "cannot pickle 'module' object".
        torch.save(bundle.program, buffer, pickle_protocol=4)
    except Exception as error:  # a Program holding something pickle cannot write: just not cached
        LOGGER.debug(f"not caching this export: its Program cannot be saved ({error})")
        return
    files = dict(bundle.files)
    if _INDEX in files or _PROGRAM in files:
        return
    files[_INDEX] = json.dumps({"manifest": bundle.manifest, "files": sorted(bundle.files)}).encode()
    files[_PROGRAM] = buffer.getvalue()
    cache.write_folder(f"export-{key}", files)


def _constant_tensors(graph: torch._C.Graph) -> list[torch.Tensor]:
    tensors = []

    def visit(block: Any) -> None:
        for node in block.nodes():
            if node.kind() == "prim::Constant" and node.hasAttribute("value") and node.kindOf("value") == "t":
                tensors.append(node.t("value"))
            for inner in node.blocks():
                visit(inner)

    visit(graph)
    return tensors


def _input_type(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ["tensor", str(value.dtype), list(value.shape)]
    return [type(value).__name__, value if isinstance(value, (bool, int, float)) else repr(value)]


@memoize
def _versions() -> str:
    """Versions of the toolchain, and a hash of this exporter's source (a change to it is a new exporter)."""
    parts = []
    for name in ("torch", "torch-mlir", "iree-base-compiler"):
        try:
            parts.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{name}=?")
    source = hashlib.sha256()
    package = Path(__file__).resolve().parent
    # host_runtime's modules that shape a bundle: its format, and the scalar ops the Python host inlines.
    shared = [package.parent / "host_runtime" / name for name in ("bundle_format.py", "scalar_ops.py")]
    for path in sorted([*package.rglob("*.py"), *shared]):
        if path.is_file():
            source.update(path.relative_to(package.parent).as_posix().encode())
            source.update(path.read_bytes())
    parts.append(f"source={source.hexdigest()}")
    return " ".join(parts)
