"""Building and running the C side for the tests: IREE's runtime once per machine, apps per bundle.

IREE's runtime is built in `build/c-runtime/<cpu>/` (gitignored) by the top-level CMakeLists.txt and
installed into a folder of the user's cache named by a hash of what it is built from (`runtime_key`):
every checkout on the machine, a fresh clone included, reuses it without running CMake (a build from
scratch is about 2.5 min for x86_64 and 1.5 min for aarch64 on two cores), and a change to the C
runtime, the CMake files or IREE's source builds and installs a new one. IREE's source is
`$DYCL_IREE_SOURCE_DIR`, or the runtime-only snapshot in `../shared/third_party/`, unpacked once into
`.cache/`. aarch64 is cross-built with Debian's gcc
(installed by scripts/ensure_debian_packages.sh when missing) and run under qemu-aarch64.

Example:
    >>> runtime = c_runtime("x86_64")                                      # doctest: +SKIP
    >>> app = runtime.build_app(Path("early_exit.dycl"), Path("/tmp/app"))  # doctest: +SKIP
    >>> outputs = run_app(app, ["x.npy"])                                  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "c-runtime"
# Installed runtimes, shared by the checkouts of this machine: $DYCL_IREE_C_RUNTIMES, else beside the
# compile cache ($XDG_CACHE_HOME or ~/.cache), not in it: that one is pruned entry by entry.
INSTALLED = Path(
    os.environ.get("DYCL_IREE_C_RUNTIMES")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dycl_iree-c-runtimes"
)
_COMPLETE = ".complete"  # written last: a folder without it is a build that did not finish
CACHE = ROOT / ".cache"
SNAPSHOTS = sorted((ROOT.parent / "shared" / "third_party").glob("iree-runtime-src-*.tar.gz"))
CROSS_PACKAGES = [
    "gcc-aarch64-linux-gnu",
    "g++-aarch64-linux-gnu",
    "libc6-arm64-cross",
    "libstdc++6-arm64-cross",
    "qemu-user-static",
]
AARCH64_SYSROOT = "/usr/aarch64-linux-gnu"
QEMU = ["qemu-aarch64-static", "-L", AARCH64_SYSROOT]
HOST_CPU = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())


class CBuildError(RuntimeError):
    """A CMake step or an app run failed; the message holds the command and its output."""


def run(command: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 900) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0:
        raise CBuildError(
            f"{' '.join(map(str, command))} exited {result.returncode}\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
    return result


def cmake() -> str:
    """CMake >= 3.26 (IREE needs it; Debian 12 has 3.25): the venv's (pip `cmake`) first."""
    for candidate in (Path(sys.executable).parent / "cmake", shutil.which("cmake")):
        if candidate and Path(candidate).exists():
            version = run([str(candidate), "--version"]).stdout.split()[2]
            if tuple(int(part) for part in version.split(".")[:2]) >= (3, 26):
                return str(candidate)
    raise CBuildError("needs CMake >= 3.26: pip install 'cmake>=3.26,<4' (it is in the test extras)")


def _generator() -> list[str]:
    return ["-G", "Ninja"] if shutil.which("ninja") else []


def iree_source() -> Path:
    """IREE's source tree: $DYCL_IREE_SOURCE_DIR, or the shared snapshot unpacked into .cache/."""
    if os.environ.get("DYCL_IREE_SOURCE_DIR"):
        return Path(os.environ["DYCL_IREE_SOURCE_DIR"])
    if not SNAPSHOTS:
        raise CBuildError(
            "no IREE source: set DYCL_IREE_SOURCE_DIR or put iree-runtime-src-*.tar.gz in "
            f"{ROOT.parent / 'shared' / 'third_party'}"
        )
    snapshot = SNAPSHOTS[-1]
    unpacked = CACHE / snapshot.name.removesuffix(".tar.gz")
    if not (unpacked / "iree-runtime-src" / "CMakeLists.txt").exists():
        partial = unpacked.with_name(unpacked.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        with tarfile.open(snapshot) as archive:
            archive.extractall(partial, filter="data")
        shutil.rmtree(unpacked, ignore_errors=True)
        partial.rename(unpacked)
    return unpacked / "iree-runtime-src"


def ensure_cross_tools() -> None:
    """Debian's aarch64 cross gcc, libraries and qemu (the project's script installs what is missing)."""
    run(["bash", ROOT / "scripts" / "ensure_debian_packages.sh", *CROSS_PACKAGES], timeout=1800)


@dataclass
class CRuntime:
    """An installed dycl_iree C runtime (IREE's runtime included) for one CPU."""

    cpu: str
    prefix: Path
    host_bin: Path  # iree-c-embed-data for the build machine
    build_seconds: float

    @property
    def toolchain(self) -> list[str]:
        if self.cpu == HOST_CPU:
            return []
        return [f"-DCMAKE_TOOLCHAIN_FILE={ROOT / 'cmake' / f'{self.cpu}-linux-gnu.cmake'}"]

    def build_app(self, bundle: Path, build_dir: Path, source: Path = ROOT / "examples" / "edge_app",
                  variables: dict[str, str] | None = None) -> Path:
        """Configure and build a CMake project (the edge app by default) that embeds `bundle`."""
        settings = {
            "CMAKE_BUILD_TYPE": "Release",
            "CMAKE_PREFIX_PATH": str(self.prefix),
            "EDGE_APP_BUNDLE": str(bundle),
            "DYCL_PYTHON": sys.executable,
            # The generator of this checkout (the code under test), not whichever dycl_iree is installed.
            "DYCL_GENERATOR_PYTHONPATH": str(ROOT),
            "DYCL_EMBED_DATA_EXECUTABLE": str(self.host_bin / "iree-c-embed-data"),
            **(variables or {}),
        }
        run([cmake(), *_generator(), "-S", source, "-B", build_dir, *self.toolchain,
             *[f"-D{key}={value}" for key, value in settings.items()]])
        run([cmake(), "--build", build_dir, "-j2"])
        return build_dir

    def command(self, executable: Path) -> list[str]:
        """How to run an executable built for this CPU here (under qemu when it is another CPU)."""
        return [str(executable)] if self.cpu == HOST_CPU else [*QEMU, str(executable)]


def runtime_key(cpu: str, host: CRuntime | None = None) -> str:
    """A hash of what the runtime of `cpu` is built from: the CMake files, the C runtime's sources,
    IREE's source (the snapshot's name and size, or $DYCL_IREE_SOURCE_DIR) and, for a cross build,
    the native runtime whose tools it uses."""
    digest = hashlib.sha256(f"{cpu}\0{host.prefix.name if host else ''}\0".encode())
    if os.environ.get("DYCL_IREE_SOURCE_DIR"):
        digest.update(f"source {os.environ['DYCL_IREE_SOURCE_DIR']}\0".encode())
    elif SNAPSHOTS:
        digest.update(f"snapshot {SNAPSHOTS[-1].name} {SNAPSHOTS[-1].stat().st_size}\0".encode())
    files = [ROOT / "CMakeLists.txt", *(ROOT / "cmake").rglob("*"), *(ROOT / "host_runtime" / "c").rglob("*")]
    for path in sorted(path for path in files if path.is_file()):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:20]


def c_runtime(cpu: str, host: CRuntime | None = None) -> CRuntime:
    """The installed runtime of `cpu`: reused when one of the same `runtime_key` is installed, else
    configured, built (incrementally in this checkout's `build/c-runtime/<cpu>/`) and installed.

    A cross build needs the native runtime `host` for IREE's host tools.
    """
    import time

    if cpu != HOST_CPU:
        if host is None:
            raise CBuildError(f"a {cpu} runtime is cross-built: it needs the {HOST_CPU} runtime for IREE's host tools")
        ensure_cross_tools()  # qemu runs the apps, even when the runtime is not built here
    start = time.perf_counter()
    prefix = INSTALLED / f"{cpu}-{runtime_key(cpu, host)}"
    if not (prefix / _COMPLETE).exists():
        _build_and_install(cpu, host, prefix)
    seconds = time.perf_counter() - start
    return CRuntime(cpu, prefix, host.host_bin if host else prefix / "bin", seconds)


def _build_and_install(cpu: str, host: CRuntime | None, prefix: Path) -> None:
    build_dir = BUILD / cpu
    settings = [f"-DDYCL_IREE_SOURCE_DIR={iree_source()}", f"-DCMAKE_INSTALL_PREFIX={prefix}",
                "-DCMAKE_BUILD_TYPE=Release"]
    if host is not None:
        settings += [f"-DCMAKE_TOOLCHAIN_FILE={ROOT / 'cmake' / f'{cpu}-linux-gnu.cmake'}",
                     f"-DIREE_HOST_BIN_DIR={host.host_bin}"]
    run([cmake(), *_generator(), "-S", ROOT, "-B", build_dir, *settings])
    run([cmake(), "--build", build_dir, "-j2"], timeout=1800)
    # Installed beside its final name and renamed into place, so that a checkout building the same
    # key at the same time never sees half of one; the first to finish wins, the other's is removed.
    partial = prefix.with_name(f"{prefix.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    run([cmake(), "--install", build_dir, "--prefix", partial])
    (partial / _COMPLETE).write_text("")
    try:
        partial.rename(prefix)
    except OSError:
        if not (prefix / _COMPLETE).exists():
            raise
        shutil.rmtree(partial, ignore_errors=True)


# -- running the edge app -----------------------------------------------------------------------------

_DTYPES = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
           "int16": np.int16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}
_LINE = re.compile(r"(\S+) (\S+)(?: \[([0-9, ]*)\])?(.*)")


def app_arguments(sample: tuple, folder: Path) -> list[str]:
    """The edge app's command line for one sample: tensors as .npy files in `folder`, scalars as text."""
    folder.mkdir(parents=True, exist_ok=True)
    arguments = []
    for index, value in enumerate(sample):
        if hasattr(value, "detach"):
            path = folder / f"input{index}.npy"
            np.save(path, value.detach().numpy())
            arguments.append(str(path))
        elif isinstance(value, bool):
            arguments.append("1" if value else "0")
        else:
            arguments.append(repr(value))
    return arguments


def parse_outputs(text: str) -> tuple[list[Any], dict[str, float]]:
    """The app's outputs (numpy arrays, ints, floats, bools in leaf order) and its `bench` figures."""
    leaves: list[Any] = []
    bench: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("bench "):
            bench = {key: float(value) for key, value in (part.split("=") for part in line.split()[1:])}
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise CBuildError(f"cannot read the app's output line {line!r}")
        _, kind, shape, values = match.groups()
        if kind == "int":
            leaves.append(int(values))
        elif kind == "float":
            leaves.append(float(np.float32(float(values))))
        elif kind == "bool":
            leaves.append(values.strip() == "1")
        else:
            dims = [int(d) for d in shape.split(",")] if shape.strip() else []
            array = np.array(values.split(), dtype=np.float64 if kind.startswith("float") else np.int64)
            leaves.append(array.astype(_DTYPES[kind]).reshape(dims))
    return leaves, bench


def run_app(command: list[str], arguments: list[str], timeout: float = 300) -> tuple[list[Any], dict[str, float]]:
    return parse_outputs(run([*command, *arguments], timeout=timeout).stdout)


# -- Python on aarch64 -------------------------------------------------------------------------------

# Debian's python3.11 for arm64 and what its interpreter and stdlib load, unpacked (not installed:
# the amd64 python3.11 would conflict) into .cache/aarch64-python/.
AARCH64_PYTHON_DEBS = [
    "python3.11-minimal:arm64",
    "libpython3.11-minimal:arm64",
    "libpython3.11-stdlib:arm64",
    "libexpat1:arm64",
    "zlib1g:arm64",
    "libffi8:arm64",
    "libssl3:arm64",
]
# PyPI's aarch64 wheels of what host_runtime imports, at the versions this environment has.
AARCH64_WHEELS = ["iree-base-runtime", "numpy", "ml_dtypes"]


def aarch64_python(root: Path = CACHE / "aarch64-python") -> tuple[list[str], dict[str, str]]:
    """(command, environment) running an aarch64 python3.11 under qemu that imports host_runtime."""
    from importlib.metadata import version

    sysroot, site = root / "sysroot", root / "site"
    if not (root / ".complete").exists():
        ensure_cross_tools()
        shutil.rmtree(root, ignore_errors=True)
        (root / "debs").mkdir(parents=True)
        if "arm64" not in run(["dpkg", "--print-foreign-architectures"]).stdout.split():
            run(["dpkg", "--add-architecture", "arm64"])
            run(["apt-get", "update", "-qq"], timeout=600)
        run(["apt-get", "download", *AARCH64_PYTHON_DEBS], cwd=root / "debs", timeout=600)
        for deb in sorted((root / "debs").glob("*.deb")):
            run(["dpkg", "-x", deb, sysroot])
        wheels = [f"{name}=={version(name)}" for name in AARCH64_WHEELS]
        run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--no-deps",
             "--platform", "manylinux_2_28_aarch64", "--python-version", "3.11", "-d", root / "wheels", *wheels],
            timeout=600)
        for wheel in sorted((root / "wheels").glob("*.whl")):
            shutil.unpack_archive(wheel, site, "zip")
        (root / ".complete").touch()
    libraries = [sysroot / "usr" / "lib" / "aarch64-linux-gnu", sysroot / "lib" / "aarch64-linux-gnu"]
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONHOME": str(sysroot / "usr"),
        "PYTHONPATH": f"{site}:{ROOT}",
        "LD_LIBRARY_PATH": ":".join(map(str, libraries)),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return [*QEMU, str(sysroot / "usr" / "bin" / "python3.11")], env
