"""The command line: export, inspect and run, as a user types them."""

from __future__ import annotations

from pathlib import Path

import pytest

from dycl_iree.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_export_inspect_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bundle = tmp_path / "ff.dycl"
    factory = str(ROOT / "models/programs.py") + ":for_break"
    assert main(["export", factory, "-o", str(bundle), "--cpu-threads", "2"]) == 0
    assert (bundle / "manifest.json").exists() and (bundle / "example_inputs.npz").exists()
    capsys.readouterr()

    assert main(["inspect", str(bundle)]) == 0
    text = capsys.readouterr().out
    assert "host: compiled" in text
    assert "target llvm-cpu: llvm-cpu.vmfb" in text and "code split for 2 threads" in text
    assert "segment seg0(" in text and "loop trip_count=" in text
    assert "signature (x: float32[1,5], n: int) -> (float32[1,5], int)" in text

    assert main(["run", str(bundle), "--host", "python"]) == 0
    text = capsys.readouterr().out
    assert "output[0]: float32[1, 5]" in text and "output[1]: " in text
    assert "loop loop0: trip counts [" in text

    assert main(["run", str(bundle)]) == 0
    assert "compiled host" in capsys.readouterr().out


def test_errors_are_reported_not_raised(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["inspect", str(tmp_path / "missing.dycl")]) == 2
    assert "no such bundle" in capsys.readouterr().err
    assert main(["export", "models/programs.py"]) == 2
    assert "FILE.py:FACTORY" in capsys.readouterr().err
    assert main(["export", str(ROOT / "models/programs.py") + ":nothing_here"]) == 2
    assert "defines no function 'nothing_here'" in capsys.readouterr().err
    assert main(["export", str(ROOT / "models/programs.py") + ":for_break", "--cpu-threads", "0"]) == 2
    assert "cpu_threads must be a positive int, not 0" in capsys.readouterr().err


def test_iree_run_module_runs_the_whole_dynamic_network(exported) -> None:
    """The compiled host makes the vmfb self-contained: IREE's own tool runs every path."""
    import shutil
    import subprocess
    import sys

    tool = shutil.which("iree-run-module") or str(Path(sys.executable).parent / "iree-run-module")
    item = exported("for_break")
    for x, n in item.samples():
        values = " ".join(f"{v:.9g}" for v in x.flatten().tolist())
        result = subprocess.run(
            [
                tool,
                f"--module={item.path / 'llvm-cpu.vmfb'}",
                "--device=local-task",
                "--function=main",
                f"--input=1x5xf32={values}",
                f"--input=i64={n}",  # main takes an int as a 0-d int64 tensor (main_abi 2)
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        expected_x, expected_steps = item.reference(x, n)
        assert f"result[1]: hal.buffer_view\ni64={expected_steps}\n" in result.stdout
        printed = result.stdout.split("1x5xf32=[")[1].split("]")[0].split()
        assert [float(v) for v in printed] == pytest.approx(expected_x.flatten().tolist(), rel=1e-4, abs=1e-5)
