"""Installing: the torch-free runtime is its own distribution, and the exporter's wheel adds no `models` package.

The runtime test builds a fresh virtual environment and lets pip fetch iree-base-runtime and numpy
(about 25 s here), so it runs in `make test`; it needs the package index pip is configured with.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

import host_runtime

from .conftest import flatten

ROOT = Path(__file__).resolve().parent.parent
_BUILD_OUTPUTS = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".venv", ".git", "bench-out", "*.dycl")


def test_runtime_installs_and_runs_a_bundle_without_torch(exported, tmp_path: Path) -> None:
    item = exported("for_break")
    source = tmp_path / "source" / "host_runtime"
    shutil.copytree(ROOT / "host_runtime", source, ignore=_BUILD_OUTPUTS)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(source)], capture_output=True, text=True, cwd=tmp_path
    )
    assert install.returncode == 0, install.stderr[-3000:]
    device = tmp_path / "device"  # away from the source copy, so that only the installed one imports
    device.mkdir()
    inputs = device / "inputs.npz"
    script = device / "deploy.py"
    script.write_text(
        "import importlib.util, sys\n"
        "import numpy as np\n"
        "import host_runtime\n"
        "assert importlib.util.find_spec('torch') is None, 'torch is installed'\n"
        "assert 'site-packages' in host_runtime.__file__, host_runtime.__file__\n"
        "run = host_runtime.load(sys.argv[1])\n"
        "data = np.load(sys.argv[2])\n"
        "results = []\n"
        "for index in range(int(data['count'])):\n"
        "    y, steps = run(x=data[f'x{index}'], n=int(data[f'n{index}']))\n"
        "    results += [y, np.array(steps)]\n"
        "np.savez(sys.argv[3], *results)\n"
        "print(host_runtime.__version__, [port.name for port in run.inputs])\n"
    )
    samples = item.samples()
    arrays = {f"x{i}": x.numpy() for i, (x, _) in enumerate(samples)}
    arrays.update({f"n{i}": np.array(n) for i, (_, n) in enumerate(samples)})
    np.savez(inputs, count=len(samples), **arrays)
    outputs = device / "outputs.npz"
    result = subprocess.run(
        [str(python), str(script), str(item.path), str(inputs), str(outputs)],
        capture_output=True,
        text=True,
        cwd=device,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == [host_runtime.__version__, "['x',", "'n']"]
    got = np.load(outputs)
    for index, sample in enumerate(samples):
        expected_y, expected_steps = flatten(item.reference(*sample))
        np.testing.assert_allclose(got[f"arr_{2 * index}"], expected_y.numpy(), rtol=1e-5, atol=1e-6)
        assert int(got[f"arr_{2 * index + 1}"]) == expected_steps


def test_exporter_wheel_has_no_top_level_models_package(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=_BUILD_OUTPUTS)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", str(source)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = tmp_path.glob("dycl_iree-*.whl")
    assert wheel.name.startswith(f"dycl_iree-{host_runtime.__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top_level == {"dycl_iree", "host_runtime"}
    # Every subpackage of the exporter ships (a listed-by-hand package list once missed some).
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "dycl_iree").rglob("__init__.py")}
    shipped = {name.rsplit("/", 1)[0] for name in names if name.endswith("/__init__.py")}
    assert packages <= shipped, packages - shipped
