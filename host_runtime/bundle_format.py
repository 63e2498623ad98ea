"""The on-disk bundle format, shared by the exporter (writes) and the runtime (reads).

A bundle is a directory:

    model.dycl/
      manifest.json       format, version, signature, segments, host kind, targets, file hashes
      llvm-cpu.vmfb       one vmfb per target (segment functions + the compiled host `main`)
      host.py             the generated Python host
      program.txt         the Program, as `inspect` prints it

The manifest is written last, so a bundle whose export was interrupted has none and is refused.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .errors import BundleError

FORMAT = "dycl_iree-bundle"
VERSION = 1
MANIFEST = "manifest.json"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """Read and check a bundle's manifest; every problem is a BundleError naming the file."""
    root = Path(path)
    if not root.exists():
        raise BundleError(f"{root}: no such bundle")
    if not root.is_dir():
        raise BundleError(f"{root}: not a bundle directory (a bundle is a folder with {MANIFEST})")
    manifest_path = root / MANIFEST
    if not manifest_path.exists():
        raise BundleError(f"{manifest_path}: missing; the bundle is incomplete (was its export interrupted?)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise BundleError(f"{manifest_path}: corrupt manifest ({error})") from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{manifest_path}: not a dycl_iree bundle manifest")
    version = manifest.get("version")
    if version != VERSION:
        raise BundleError(
            f"{manifest_path}: bundle format version {version}, but this runtime reads version {VERSION}; "
            "re-export the model with this dycl_iree version"
        )
    for key in ("inputs", "outputs", "host", "targets", "files", "module_name"):
        if key not in manifest:
            raise BundleError(f"{manifest_path}: corrupt manifest (no {key!r})")
    return root, manifest


def check_file(root: Path, manifest: dict[str, Any], name: str) -> Path:
    """The path of a bundle file after checking that it exists and that its hash matches."""
    entry = manifest["files"].get(name)
    if entry is None:
        raise BundleError(f"{root / MANIFEST}: lists no file {name!r}")
    path = root / name
    if not path.exists():
        raise BundleError(f"{path}: missing from the bundle")
    size = path.stat().st_size
    if size != entry["size"]:
        raise BundleError(f"{path}: {size} bytes but the manifest says {entry['size']} (truncated or replaced)")
    if sha256_file(path) != entry["sha256"]:
        raise BundleError(f"{path}: contents do not match the manifest's hash (corrupt or modified)")
    return path
