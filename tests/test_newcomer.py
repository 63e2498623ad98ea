"""What a new user and a deployment engineer meet first: CLI mistakes, input formats, startup, the
API next to ONNX Runtime's, dynamic dims with ranges, the user's model left alone, the caches."""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.export import Dim

import dycl_iree
import host_runtime
from dycl_iree import cache
from dycl_iree.capture import capture
from dycl_iree.cli import build_parser, main
from dycl_iree.compile import cache_key_flags, host_cpu, target_flags

from .conftest import assert_matches, scripted

ROOT = Path(__file__).resolve().parent.parent
FACTORY = str(ROOT / "models/programs.py") + ":for_break"


class PairedBatch(torch.nn.Module):
    """Two inputs that share a batch dim; which branch runs depends on the data."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 8)
        self.dropout = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.dropout(self.layer(x))
        if bool((h + y).sum() > 0):
            return h * 2.0
        return y - 1.0


class Straight(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x).relu()


@pytest.fixture(scope="module")
def paired(tmp_path_factory: pytest.TempPathFactory):
    """PairedBatch exported in training mode with Dim("batch", min=1, max=8) on both inputs."""
    torch.manual_seed(0)
    model = PairedBatch().train()
    model.layer.eval()  # a mixed state, which the export must leave exactly as it was
    batch = Dim("batch", min=1, max=8)
    example = (torch.randn(4, 8), torch.randn(4, 8))
    bundle = dycl_iree.export(model, example, dynamic_shapes=({0: batch}, {0: batch}))
    path = bundle.save(tmp_path_factory.mktemp("paired") / "paired.dycl")
    return model, bundle, path


@pytest.fixture(scope="module")
def cli_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "for_break.dycl"
    assert main(["export", FACTORY, "-o", str(path)]) == 0
    return path


# -- 9: the user's model, dynamic dims ---------------------------------------------------------


def test_export_leaves_the_users_model_in_its_modes(paired) -> None:
    model, _, _ = paired
    assert model.training and model.dropout.training and not model.layer.training
    script = torch.jit.script(Straight().train())
    capture(script)
    assert script.training and script.layer.training


def test_dim_ranges_and_shared_names_are_enforced_at_run_time(paired) -> None:
    model, bundle, path = paired
    spec = bundle.manifest["inputs"][0]
    assert spec["shape"] == [None, 8] and spec["dims"] == [{"dim": 0, "name": "batch", "min": 1, "max": 8}]
    run = dycl_iree.load(path)
    reference = scripted(model.eval())
    model.train()
    model.layer.eval()
    taken = set()
    for batch in (1, 3, 8):
        for shift in (-3.0, 3.0):
            x, y = torch.randn(batch, 8), torch.randn(batch, 8) + shift
            expected = reference(x, y)
            taken.add(bool((model.eval().layer(x) + y).sum() > 0))
            model.train()
            model.layer.eval()
            assert_matches(run(x, y), expected, f"batch {batch}")
    assert taken == {True, False}
    for batch in (0, 9, 100):
        with pytest.raises(dycl_iree.InputError, match=rf"size {batch} in dim 0 \(batch\), outside its range \[1, 8\]"):
            run(np.zeros((batch, 8), np.float32), np.zeros((batch, 8), np.float32))
    with pytest.raises(dycl_iree.InputError, match="both are dim 'batch': they must be equal"):
        run(np.zeros((2, 8), np.float32), np.zeros((3, 8), np.float32))


def test_an_example_outside_its_declared_range_is_refused() -> None:
    with pytest.raises(dycl_iree.SpecializeError, match=r"size 9 is outside batch's range \[1, 8\]"):
        dycl_iree.export(Straight(), (torch.randn(9, 4),), dynamic_shapes=({0: Dim("batch", min=1, max=8)},))


# -- 10: an API like the tools users know ------------------------------------------------------


def test_runner_describes_its_inputs_and_outputs_and_takes_keywords(paired) -> None:
    model, bundle, path = paired
    run = dycl_iree.load(path)
    assert [(p.name, p.kind, p.dtype, p.shape) for p in run.inputs] == [
        ("x", "tensor", "float32", ["batch", 8]),
        ("y", "tensor", "float32", ["batch", 8]),
    ]
    assert [(p.name, p.kind, p.dtype) for p in run.outputs] == [("output0", "tensor", "float32")]
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    expected = scripted(model.eval())(x, y)
    model.train()
    model.layer.eval()
    assert_matches(run(y=y, x=x), expected)
    assert_matches(run(x, y=y), expected)
    with pytest.raises(dycl_iree.InputError, match="has no input 'z'; its inputs are x, y"):
        run(x, z=y)
    with pytest.raises(dycl_iree.InputError, match="needs input 'y'"):
        run(x=x)
    with pytest.raises(dycl_iree.InputError, match="'x' given both by position and by name"):
        run(x, x=x, y=y)
    assert "local-sync" in host_runtime.available_devices()
    assert dycl_iree.available_devices() == host_runtime.available_devices()


def test_bundle_repr_is_short_and_bundles_hold_no_build_paths(paired) -> None:
    _, bundle, path = paired
    text = repr(bundle)
    assert len(text) < 300 and "\\x" not in text and "b'" not in text, text
    assert text.startswith("Bundle(model='PairedBatch', host='compiled', targets=['llvm-cpu'], 3 segments, files: ")
    venv = str(Path(torch.__file__).resolve().parent.parent)
    for file in path.iterdir():
        data = file.read_bytes()
        for absolute in (str(ROOT), venv, str(Path.home()), str(path)):
            assert absolute.encode() not in data, (file.name, absolute)
    sources = [source for segment in bundle.manifest["segments"] for source in segment["sources"]]
    # Inside torch's code the line is torch's; the submodule that called it is named.
    assert "torch/nn/modules/linear.py:134 called by self.layer (Linear)" in sources, sources
    assert any(source.startswith("tests/test_newcomer.py:") for source in sources), sources


# -- 4, 5, 6: the command line ------------------------------------------------------------------


def _one_error_line(capsys: pytest.CaptureFixture, *expected: str) -> None:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    progress = [line for line in lines if line.startswith("[")]  # `[   0.0 s] loading ...`
    assert len(errors) == 1 and len(errors) + len(progress) == len(lines), captured.err
    for text in expected:
        assert text in errors[0], errors[0]


def test_cli_mistakes_are_one_error_line(cli_bundle: Path, tmp_path: Path, capsys) -> None:
    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    folder = tmp_path / "folder"
    (folder / "a").mkdir(parents=True)
    # The output path is checked before the model is even loaded (this factory does not exist).
    assert main(["export", "missing.py:f", "-o", str(taken)]) == 2
    _one_error_line(capsys, "exists and is a file", "--force")
    assert taken.read_text() == "mine"
    assert main(["export", "missing.py:f", "-o", str(folder)]) == 2
    _one_error_line(capsys, "a folder that is not a bundle", "--force")
    assert main(["export", FACTORY.replace("for_break", "for_brake"), "-o", str(tmp_path / "b.dycl")]) == 2
    _one_error_line(capsys, "no function 'for_brake'", "did you mean 'for_break'")
    assert main(["export", "models.programs:for_brake", "-o", str(tmp_path / "b.dycl")]) == 2
    _one_error_line(capsys, "did you mean 'for_break'")
    assert main(["export", FACTORY, "--target", "tpu"]) == 2
    _one_error_line(capsys, "unknown target 'tpu'")
    assert main(["inspect", str(tmp_path / "missing.dycl")]) == 2
    _one_error_line(capsys, "no such bundle")
    assert main(["run", str(cli_bundle), "--input=1x5xf32=1"]) == 2
    _one_error_line(capsys, "takes 2 inputs (x, n), 1 given", "--input=1x5xf32=... --input=3")
    assert main(["run", str(cli_bundle), "--input=3", "--input=3"]) == 2
    _one_error_line(capsys, "is a tensor: write it as 1x5xf32=...")
    assert main(["run", str(cli_bundle), "--input=1x5xf32=1 2", "--input=3"]) == 2
    _one_error_line(capsys, "holds 5 values, 2 given")
    np.save(tmp_path / "x.npy", np.zeros((1, 5), np.float32))
    assert main(["run", str(cli_bundle), "--inputs", str(tmp_path / "x.npy")]) == 2
    _one_error_line(capsys, "one array, but the model takes 2 inputs")
    np.savez(tmp_path / "wrong.npz", y=np.zeros(3))
    assert main(["run", str(cli_bundle), f"--input=@{tmp_path / 'wrong.npz'}"]) == 2
    _one_error_line(capsys, "no array 'x' (nor arg0); it holds y, the model takes x, n")
    assert main(["run", str(cli_bundle), "--device", "vulkan"]) == 2
    _one_error_line(capsys, "built for llvm-cpu, which device 'vulkan' cannot run")
    for argv, text in [
        (["exprt"], "invalid choice: 'exprt'"),
        (["run"], "the following arguments are required: bundle"),
        (["export", FACTORY, "--cpu-threads", "two"], "invalid int value: 'two'"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        _one_error_line(capsys, text, "--help")


def test_export_replaces_with_force_and_a_bundle_without_it(cli_bundle: Path, tmp_path: Path, capsys) -> None:
    taken = tmp_path / "taken"
    taken.write_text("not a bundle")
    assert main(["export", FACTORY, "-o", str(taken), "--force"]) == 0
    assert (taken / "manifest.json").is_file()
    assert main(["export", FACTORY, "-o", str(taken)]) == 0  # an existing bundle is replaced
    assert "wrote" in capsys.readouterr().out


def test_run_takes_inputs_as_iree_run_module_does(cli_bundle: Path, exported, tmp_path: Path, capsys) -> None:
    item = exported("for_break")
    for index, (x, n) in enumerate(item.samples()):
        expected_y, expected_steps = item.reference(x, n)
        values = " ".join(f"{v:.9g}" for v in x.flatten().tolist())
        np.save(tmp_path / "x.npy", x.numpy())
        np.savez(tmp_path / "named.npz", x=x.numpy(), n=np.array(n))
        np.savez(tmp_path / "positional.npz", arg0=x.numpy(), arg1=np.array(n))
        forms = [
            [f"--input=1x5xf32={values}", f"--input={n}"],
            [f"--input=1x5xf32=[{values.replace(' ', ',')}]", f"--input={n}"],
            [f"--input=@{tmp_path / 'x.npy'}", f"--input={n}"],
            [f"--input=@{tmp_path / 'named.npz'}"],
            [f"--input=@{tmp_path / 'positional.npz'}"],
            ["--inputs", str(tmp_path / "named.npz")],
        ]
        for form in forms:
            out = tmp_path / f"out{index}.npz"
            assert main(["run", str(cli_bundle), *form, "--output", str(out)]) == 0, form
            assert f"wrote {out}" in capsys.readouterr().out
            with np.load(out) as saved:
                assert sorted(saved.files) == ["output0", "output1"]
                np.testing.assert_allclose(saved["output0"], expected_y.numpy(), rtol=1e-5, atol=1e-6)
                assert int(saved["output1"]) == expected_steps


def test_a_bundle_saved_from_python_runs_with_given_inputs(exported, tmp_path: Path, capsys) -> None:
    item = exported("for_break")  # saved with Bundle.save: no example inputs inside
    assert main(["run", str(item.path)]) == 2
    _one_error_line(capsys, "holds no example inputs", "--input")
    assert main(["run", str(item.path), "--input=1x5xf32=3", "--input=6"]) == 0
    expected_y, expected_steps = item.reference(torch.full((1, 5), 3.0), 6)
    assert f"output[1]: {expected_steps}" in capsys.readouterr().out


def test_inspect_counts_segments_and_says_when_there_is_no_control_flow(tmp_path: Path, capsys) -> None:
    path = dycl_iree.export(Straight(), (torch.randn(1, 4),)).save(tmp_path / "straight.dycl")
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert "1 segment:" in text and "1 segments" not in text
    assert "host: compiled   (no data-dependent control flow)" in text
    assert "control flow compiled into" not in text


def test_inspect_into_a_closed_pipe_is_quiet(cli_bundle: Path) -> None:
    result = subprocess.run(
        f"{sys.executable} -m dycl_iree inspect {cli_bundle} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.stdout.startswith("bundle ") and result.stderr == ""


def test_version_has_one_source(capsys) -> None:
    assert dycl_iree.__version__ == host_runtime.__version__ == metadata.version("dycl_iree")
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "\nversion =" not in pyproject.split("[tool.setuptools.dynamic]")[0]
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith(f"dycl_iree {dycl_iree.__version__} (torch ")


def test_every_option_has_help_and_the_top_level_help_has_an_example() -> None:
    parser = build_parser()
    assert "Example:" in parser.format_help() and "export models/programs.py:early_exit" in parser.format_help()
    (subcommands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert {"export", "run", "inspect", "verify", "demo", "bench", "cache"} <= set(subcommands.choices)
    for name, subparser in subcommands.choices.items():
        for action in subparser._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help text"


_NO_TORCH = """
import runpy, sys
sys.argv = ["dycl_iree", *sys.argv[1:]]
try:
    runpy.run_module("dycl_iree", run_name="__main__")
except SystemExit as exit:
    code = exit.code
print("torch imported:", any(name == "torch" or name.startswith("torch.") for name in sys.modules), "exit:", code)
"""


def test_help_inspect_run_and_cache_do_not_import_torch(cli_bundle: Path, tmp_path: Path) -> None:
    for argv in (
        ["--help"],
        ["export", "--help"],
        ["inspect", str(cli_bundle)],
        ["run", str(cli_bundle)],
        ["run", str(cli_bundle), "--host", "python"],
        ["cache"],
        ["--version"],
    ):
        result = subprocess.run(
            [sys.executable, "-c", _NO_TORCH, *argv],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "DYCL_IREE_CACHE": str(tmp_path)},
        )
        assert result.stdout.strip().endswith("torch imported: False exit: 0"), (argv, result.stdout, result.stderr)


# -- 8: the caches -------------------------------------------------------------------------------


def test_cache_location_follows_the_environment(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DYCL_IREE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.directory() == tmp_path / "xdg" / "dycl_iree"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # the XDG spec says to ignore it
    assert cache.directory() == Path.home() / ".cache" / "dycl_iree"
    monkeypatch.setenv("DYCL_IREE_CACHE", str(tmp_path / "own"))
    assert cache.directory() == tmp_path / "own"


def test_cache_is_bounded_and_clears(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("DYCL_IREE_CACHE", str(tmp_path))
    monkeypatch.setenv("DYCL_IREE_CACHE_SIZE", "3K")
    assert cache.limit() == 3 * 1024
    for index in range(5):
        cache.write(f"entry{index}", bytes(1024))
        time.sleep(0.01)  # distinct modification times: the oldest goes first
    cache.read("entry2")  # a hit keeps an entry
    cache.write("entry5", bytes(1024))
    left = sorted(path.name for path in tmp_path.iterdir())
    assert len(left) == 3 and "entry2" in left and "entry5" in left and "entry0" not in left
    assert main(["cache", "clear"]) == 0
    assert "removed 3 entries" in capsys.readouterr().out and not any(tmp_path.iterdir())
    monkeypatch.setenv("DYCL_IREE_CACHE_SIZE", "lots")
    with pytest.raises(dycl_iree.DyclError, match="DYCL_IREE_CACHE_SIZE"):
        cache.limit()


def test_compile_cache_key_names_the_cpu_not_host() -> None:
    flags = cache_key_flags(target_flags("llvm-cpu"))
    assert "--iree-llvmcpu-target-cpu=host" not in flags
    assert f"--iree-llvmcpu-target-cpu=host[{host_cpu()}]" in flags
    assert "features=" in host_cpu()
    cross = target_flags("llvm-cpu:aarch64-linux-gnu")
    assert cache_key_flags(cross) == cross  # generic code for another CPU: nothing to resolve


def test_an_unchanged_model_reexports_from_the_cache(monkeypatch, tmp_path: Path, caplog) -> None:
    monkeypatch.setenv("DYCL_IREE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "1")
    from models import programs

    model, example_inputs = programs.for_break()
    first = dycl_iree.export(model, example_inputs)
    assert "export_cache" not in first.manifest
    caplog.set_level(logging.INFO, logger="dycl_iree")
    start = time.perf_counter()
    again = dycl_iree.export(model, example_inputs)
    assert time.perf_counter() - start < 5
    assert again.manifest["export_cache"] == "hit"
    assert any("reused the cached export" in record.getMessage() for record in caplog.records)
    assert again.files["llvm-cpu.vmfb"] == first.files["llvm-cpu.vmfb"]
    assert len(again.program.segments) == len(first.program.segments)
    path = again.save(tmp_path / "again.dycl")
    run = dycl_iree.load(path)
    for sample in programs.SAMPLES["for_break"]():
        assert_matches(run(*sample), scripted(model)(*sample))
    # Other weights, another export; no cache at all, another export.
    with torch.no_grad():
        model.step.weight.add_(1.0)
    assert "export_cache" not in dycl_iree.export(model, example_inputs).manifest
    assert "export_cache" not in dycl_iree.export(model, example_inputs, cache=False).manifest


def test_export_logs_its_progress(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="dycl_iree")
    dycl_iree.export(Straight(), (torch.randn(1, 4),))
    messages = [record.getMessage() for record in caplog.records if record.name == "dycl_iree"]
    assert "capturing (torch.jit.script + freeze)" in messages
    assert "compiling for llvm-cpu (iree-compile)" in messages
    assert "lowering 1 segment through torch-mlir" in messages
    assert any(message.startswith("exported Straight in ") for message in messages)


# -- 1, 12: the demo -------------------------------------------------------------------------------


def test_demo_times_in_turns_and_prints_only_ratios_the_data_carries() -> None:
    from dycl_iree.demo import Timing, speedup_text, time_interleaved

    order = []
    timings = time_interleaved({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, rounds=4)
    assert [len(t.rounds) for t in timings.values()] == [4, 4]
    assert order.index("b") < len(order) - order[::-1].index("a") - 1  # b ran before a's last turn: interleaved
    steady = speedup_text(Timing([10.0, 12.0, 20.0]), Timing([2.0, 2.0, 4.0]))
    assert steady == "5.0x (5.0-6.0)"  # a round slow for both sides (the same load) still carries a ratio
    # Of three rounds, one slow on one side only (another process took the core in its turn): no ratio.
    assert speedup_text(Timing([10.0, 10.5, 90.0]), Timing([2.0, 2.1, 2.2])) is None
    assert speedup_text(Timing([10.0, 10.5, 11.0]), Timing([0.5, 2.1, 2.2])) is None
    # Of seven, one such round does not decide the figure; ratios spread over the middle half do.
    assert speedup_text(Timing([10.0] * 6 + [80.0]), Timing([2.0] * 7)) == "5.0x (5.0-5.0)"
    assert speedup_text(Timing([2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]), Timing([1.0] * 7)) is None


def test_demo_matches_pytorch_and_leaves_no_temporary_folder(monkeypatch, tmp_path: Path, capsys) -> None:
    from dycl_iree import demo
    from models import programs

    class Tiny:
        def build(self):
            return programs.early_exit()

        def samples(self):
            return programs.SAMPLES["early_exit"]()

    monkeypatch.setattr(demo, "_zoo", lambda: {"tiny": Tiny()})
    monkeypatch.setattr(demo, "DEMO_MODELS", ("tiny",))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert demo.main(rounds=3) == 0
    out = capsys.readouterr().out
    assert "every sample matches PyTorch" in out and "1 thread each" in out and "quartiles" in out
    assert "3 segments" in out and not list(tmp_path.glob("dycl-demo-*"))


def test_verify_leaves_the_model_as_it_was_and_no_temporary_folder(paired, monkeypatch, tmp_path: Path) -> None:
    from dycl_iree.verify import verify

    model, _, path = paired
    report = verify(model, [(torch.randn(2, 8), torch.randn(2, 8) + 3.0)], path, host="compiled")
    assert report.samples == 1 and report.mismatched_samples == 0
    assert model.training and model.dropout.training and not model.layer.training
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["verify", str(ROOT / "models/programs.py") + ":early_exit", "--host", "compiled"]) == 0
    assert not list(tmp_path.glob("dycl-verify-*"))


def test_progress_off_a_terminal_is_plain_lines_with_a_heartbeat(monkeypatch) -> None:
    import io

    from dycl_iree import progress

    monkeypatch.setattr(progress, "_HEARTBEAT_SECONDS", 0.3)
    stream = io.StringIO()  # not a terminal
    with progress.show_progress(stream):
        progress.LOGGER.info("compiling for llvm-cpu (iree-compile)")
        progress.LOGGER.debug("lowering seg1 of 3")
        time.sleep(0.8)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[") and lines[0].endswith(" s] compiling for llvm-cpu (iree-compile)")
    assert any("still compiling for llvm-cpu (iree-compile) (" in line and "s so far)" in line for line in lines[1:])
    assert not any("lowering seg1" in line or "\x1b" in line or ".py:" in line for line in lines)
    assert progress.LOGGER.propagate and not progress.LOGGER.handlers  # left as it was


def test_run_picks_a_device_that_runs_the_bundle(exported, tmp_path: Path, capsys) -> None:
    """A Vulkan-only bundle runs on vulkan without --device; elsewhere an error: line says why not."""
    if "vulkan" not in host_runtime.available_devices():
        pytest.skip("no Vulkan device here (lavapipe, mesa-vulkan-drivers, gives one)")
    item = exported("for_break")
    path = tmp_path / "for_break_vulkan.dycl"
    assert main(["export", FACTORY, "-o", str(path), "--target", "vulkan"]) == 0
    capsys.readouterr()
    x, n = item.samples()[0]
    values = " ".join(f"{v:.9g}" for v in x.flatten().tolist())
    out = tmp_path / "out.npz"
    assert main(["run", str(path), f"--input=1x5xf32={values}", f"--input={n}", "--output", str(out)]) == 0
    assert "(compiled host, vulkan)" in capsys.readouterr().out
    expected_y, expected_steps = item.reference(x, n)
    with np.load(out) as saved:
        np.testing.assert_allclose(saved["output0"], expected_y.numpy(), rtol=1e-5, atol=1e-6)
        assert int(saved["output1"]) == expected_steps
    assert main(["run", str(path), "--device", "local-sync"]) == 2
    _one_error_line(capsys, str(path), "CPU")  # the runtime's message: no vmfb for this CPU


def test_inspect_shows_dim_names_and_ranges_and_a_bad_dims_entry_is_a_bundle_error(paired, tmp_path: Path, capsys):
    import json
    import shutil

    _, _, path = paired
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert "signature (x: float32[batch,8], y: float32[batch,8]) -> (float32[?,8])" in text
    assert "  x dim 0: batch in 1..8" in text and "  y dim 0: batch in 1..8" in text
    damaged = shutil.copytree(path, tmp_path / "damaged.dycl")
    manifest = json.loads((damaged / "manifest.json").read_text())
    manifest["inputs"][0]["dims"] = [{"dim": 5, "name": "batch", "min": 1, "max": 8}]
    (damaged / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(dycl_iree.BundleError, match="input 0 \\('x'\\) has malformed 'dims'"):
        dycl_iree.load(damaged)


def test_export_stays_callable_after_the_driver_module_is_imported() -> None:
    """Python binds a package's attribute to a submodule of the same name when it is imported: the
    driver is `dycl_iree.pipeline`, so that `dycl_iree.export` stays the function."""
    code = (
        "import dycl_iree.pipeline, torch\n"
        "bundle = dycl_iree.export(torch.nn.Linear(4, 2), (torch.randn(1, 4),))\n"
        "print(type(bundle).__name__, bundle.host)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.stdout.strip() == "Bundle compiled", result.stderr[-2000:]


def test_progress_on_a_terminal_shows_steps_and_the_current_step_time_verbatim() -> None:
    import io

    from dycl_iree import progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    with progress.show_progress(stream):
        progress.LOGGER.info("lowering x[0] [bold]of 3")  # brackets are text, not rich markup
        progress.LOGGER.debug("compiling [red]seg1")
        time.sleep(0.3)
    out = stream.getvalue()
    assert "s\x1b[0m lowering x[0] [bold]of 3\n" in out  # the step, kept above the status line
    assert "compiling [red]seg1" in out and "  0 s" in out  # the status line: sub-step and its time
