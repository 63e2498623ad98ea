"""The on-disk cache of compiled vmfbs (`compile`) and whole exports (`export_cache`).

Where: `$DYCL_IREE_CACHE`, else `$XDG_CACHE_HOME/dycl_iree`, else `~/.cache/dycl_iree`.
How big: at most `$DYCL_IREE_CACHE_SIZE` bytes (a number, or with a K/M/G suffix; default 2G); after
each write the least recently used entries go until the cache fits. `DYCL_IREE_NO_CACHE=1` turns it
off (neither read nor written), as `export --no-cache` does for one export; `python -m dycl_iree
cache clear` empties it. Entries are written to a temporary name and renamed, so a concurrent
reader never sees half of one. This module imports neither torch nor IREE.

Example:
    >>> directory().name
    'dycl_iree'
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from .errors import DyclError

DEFAULT_LIMIT = 2 << 30
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.I)


def directory() -> Path:
    """The cache folder (not created here)."""
    if os.environ.get("DYCL_IREE_CACHE"):
        return Path(os.environ["DYCL_IREE_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"  # the spec ignores relative ones
    return base / "dycl_iree"


def enabled() -> bool:
    return os.environ.get("DYCL_IREE_NO_CACHE", "").lower() in ("", "0", "false", "no")


def limit() -> int:
    """The size bound in bytes, from `$DYCL_IREE_CACHE_SIZE` (e.g. `500M`, `2G`)."""
    text = os.environ.get("DYCL_IREE_CACHE_SIZE")
    if not text:
        return DEFAULT_LIMIT
    match = _SIZE.match(text)
    if not match:
        raise DyclError(f"DYCL_IREE_CACHE_SIZE={text!r}: write a size such as 500M or 2G")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)


def entry_path(name: str) -> Path:
    return directory() / name


def read(name: str) -> bytes | None:
    """A cached file's bytes, or None; a hit counts as a use (it is kept longer)."""
    path = entry_path(name)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    _touch(path)
    return data


def write(name: str, data: bytes) -> None:
    """Store a file under `name` (atomically), then keep the cache within its bound."""
    folder = directory()
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".partial-", delete=False) as handle:
        handle.write(data)
    os.replace(handle.name, folder / name)
    prune()


def write_folder(name: str, files: dict[str, bytes]) -> None:
    """Store a folder of files under `name` (atomically: written aside, then renamed)."""
    folder = directory()
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder, prefix=".partial-"))
    try:
        for file_name, data in files.items():
            (staging / file_name).write_bytes(data)
        target = folder / name
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return  # another process stored the same entry first: theirs is as good
    prune()


def touch(name: str) -> None:
    _touch(entry_path(name))


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def _entries() -> list[tuple[float, int, Path]]:
    """(last use, bytes, path) of every entry, files and export folders alike."""
    folder = directory()
    if not folder.is_dir():
        return []
    entries = []
    for path in folder.iterdir():
        try:
            if path.is_dir():
                size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            else:
                size = path.stat().st_size
            entries.append((path.stat().st_mtime, size, path))
        except OSError:
            continue  # removed by another process meanwhile
    return entries


def usage() -> tuple[int, int]:
    """(entries, bytes) in the cache."""
    entries = [e for e in _entries() if not e[2].name.startswith(".partial-")]
    return len(entries), sum(size for _, size, _ in entries)


def prune(bound: int | None = None) -> int:
    """Remove the least recently used entries until the cache fits `bound` (default `limit()`); returns how many."""
    bound = limit() if bound is None else bound
    entries = sorted(_entries(), key=lambda entry: entry[0])
    total = sum(size for _, size, _ in entries)
    removed = 0
    for _, size, path in entries:
        if total <= bound:
            break
        _remove(path)
        total -= size
        removed += 1
    return removed


def clear() -> tuple[int, int]:
    """Empty the cache; returns (entries, bytes) removed."""
    entries = _entries()
    for _, _, path in entries:
        _remove(path)
    return len(entries), sum(size for _, size, _ in entries)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except OSError:
            pass
