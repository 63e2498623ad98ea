"""The benchmark harness, run quickly on a tiny data-dependent model.

One shared run (rounds=2) covers eager, TorchScript, onnxruntime and IREE-through-ONNX, plus an
injected torch.jit.trace candidate that is fast but frozen on one path and must be reported WRONG.
torch.compile is excluded here because inductor's first compile alone takes longer than this whole
file should; it goes through the same code path as every other candidate. The dycl_iree candidates
are exercised against a stand-in exporter, so these tests check the harness, not the exporter.
The peer tests need the `bench` extra (onnx, onnxruntime, matplotlib), which `make test` installs.
"""

from __future__ import annotations

import ast
import importlib
import json
import logging
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from dycl_iree import bench, verify
from dycl_iree.bench.timing import MAX_CALLS


class Gate(torch.nn.Module):
    """A data-dependent `if`: a linear layer for inputs with a positive sum, a subtraction else."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return torch.relu(self.linear(x))
        return x - 1


POSITIVE = torch.linspace(0.1, 1.0, 8).reshape(1, 8)
SAMPLES = [(POSITIVE,), (-POSITIVE,)]


def make_gate() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return Gate().eval(), (POSITIVE,)


class Trace(bench.Peer):
    """A peer added from outside the harness, the way a new one is written."""

    name = "torch-jit-trace"
    description = "torch.jit.trace on the example input"

    def prepare(self, context: bench.ModelContext) -> None:
        # Tracing records the path the example input takes (the linear layer) and replays it for the
        # negative sample too: the silent error the DyCL paper measured.
        with pytest.warns(torch.jit.TracerWarning):
            self.traced = torch.jit.trace(context.model, context.example_inputs)

    def run(self, inputs: tuple) -> torch.Tensor:
        return self.traced(*inputs)


@pytest.fixture(scope="module")
def gate_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[bench.Report, Path]:
    # The peers come with the `bench` extra, which `make test` installs: a missing one must fail
    # here, not skip.
    for package in ("onnx", "onnxruntime", "matplotlib"):
        importlib.import_module(package)
    out = tmp_path_factory.mktemp("bench")
    entry = bench.ModelEntry("gate", make_gate, SAMPLES)
    report = bench.benchmark(
        [entry], out, rounds=2, warmup=1, candidates=["torchscript", "onnxruntime", "iree-onnx", Trace]
    )
    return report, out


def _by_name(report: bench.Report) -> dict[str, bench.CandidateResult]:
    return {result.candidate: result for result in report.models[0].candidates}


def test_report_files_exist(gate_run: tuple[bench.Report, Path]) -> None:
    out = gate_run[1]
    assert (out / "report.md").is_file()
    assert (out / "speedups.png").stat().st_size > 0
    raw = json.loads((out / "results.json").read_text())
    assert [c["candidate"] for c in raw["models"][0]["candidates"]] == [
        "eager",
        "torchscript",
        "onnxruntime",
        "iree-onnx",
        "torch-jit-trace",
    ]
    markdown = (out / "report.md").read_text()
    assert "## gate (2 samples)" in markdown
    assert "Geometric mean" in markdown


def test_eager_is_the_baseline(gate_run: tuple[bench.Report, Path]) -> None:
    eager = _by_name(gate_run[0])["eager"]
    assert eager.speedup == 1.0
    assert eager.matches is True
    assert len(eager.round_ms) == 2


def test_peers_run_and_match(gate_run: tuple[bench.Report, Path]) -> None:
    results = _by_name(gate_run[0])
    for name in ("torchscript", "onnxruntime", "iree-onnx"):
        result = results[name]
        assert result.status == "ok", (name, result.error, result.mismatch)
        assert result.latency_ms is not None and result.latency_ms > 0
        assert result.speedup is not None
    assert results["onnxruntime"].size_bytes and results["iree-onnx"].size_bytes


def test_traced_model_is_reported_wrong(gate_run: tuple[bench.Report, Path]) -> None:
    report, out = gate_run
    traced = _by_name(report)["torch-jit-trace"]
    assert traced.matches is False
    assert traced.status == "WRONG"
    assert traced.mismatch is not None and traced.mismatch.startswith("sample 1:")
    assert "| torch-jit-trace |" in (out / "report.md").read_text()
    row = next(line for line in (out / "report.md").read_text().splitlines() if "| torch-jit-trace |" in line)
    assert "WRONG" in row
    # A wrong candidate never counts towards the geometric mean.
    assert report.geomean["torch-jit-trace"]["models"] == 0


def test_candidates_are_given_against_onnxruntime(gate_run: tuple[bench.Report, Path]) -> None:
    report, out = gate_run
    results = _by_name(report)
    rival, scripted = results["onnxruntime"], results["torchscript"]
    assert rival.latency_ms and scripted.latency_ms
    assert scripted.against_onnxruntime == pytest.approx(rival.latency_ms / scripted.latency_ms)
    assert rival.against_onnxruntime == pytest.approx(1.0)
    # A wrong answer is no comparison; the column's cells say which is which.
    assert results["torch-jit-trace"].against_onnxruntime is None
    rows: dict[str, list[str]] = {}  # the model's table, before the geometric means' (also "| candidate |")
    for line in (out / "report.md").read_text().splitlines():
        if line.startswith("| "):
            rows.setdefault(line.split("|")[1].strip(), line.split("|"))
    assert rows["candidate"][4].strip() == "vs ONNX Runtime (min-max)"
    low, high = (float(x) for x in rows["torchscript"][4].split("(")[1].rstrip(") ").split("-"))
    assert rows["torchscript"][4].strip().startswith(f"{scripted.against_onnxruntime:.2f}x (")
    assert low <= scripted.against_onnxruntime + 0.005 and scripted.against_onnxruntime - 0.005 <= high
    assert (rows["onnxruntime"][4].strip(), rows["torch-jit-trace"][4].strip()) == ("reference", "WRONG")
    raw = json.loads((out / "results.json").read_text())
    assert raw["models"][0]["candidates"][1]["against_onnxruntime"] == scripted.against_onnxruntime


def test_compare_outputs() -> None:
    actual = [np.ones(2, np.float32), np.int64(3), np.bool_(True)]
    assert bench.compare_outputs((torch.ones(2), 3, True), actual) is None
    assert bench.compare_outputs(torch.ones(2), torch.ones(2) * (1 + 1e-6)) is None
    assert "max abs difference" in str(bench.compare_outputs(torch.ones(2), torch.ones(2) * 1.01))
    # Tolerance scales with the tensor's largest magnitude: rounding near zero is not an error.
    assert bench.compare_outputs(torch.tensor([10.0, 0.0]), np.array([10.0, 3e-5], np.float32)) is None
    assert "NaN" in str(bench.compare_outputs(torch.ones(1), np.array([np.nan], np.float32)))
    assert "shape" in str(bench.compare_outputs(torch.ones(2), torch.ones(1, 2)))
    assert "dtype" in str(bench.compare_outputs(3, np.float32(3.0)))
    # A Python scalar has no shape: ONNX's [1] tensor for it matches, a tensor output's shape must.
    assert bench.compare_outputs((torch.ones(2), 7), [np.ones(2), np.array([7])]) is None
    assert "shape" in str(bench.compare_outputs(torch.tensor(7), np.array([7])))
    assert "values differ" in str(bench.compare_outputs(3, 4))
    assert "outputs" in str(bench.compare_outputs((torch.ones(1), 2), (np.ones(1),)))
    assert [a.tolist() for a in bench.flatten_outputs({"a": [torch.zeros(1), (2.5, None)]})] == [[0.0], 2.5]


def test_outputs_are_compared_by_verifys_rule() -> None:
    # Off by 3e-5 of a value near 1: outside verify's plain tolerance (1e-6 + 1e-5 x 1) ...
    eager, candidate = torch.tensor([1.0]), np.array([1.00003], np.float32)
    assert "max abs difference" in str(bench.compare_outputs(eager, candidate))
    assert verify.compare(candidate, eager, []) is False
    # ... but a match when the candidate is nearer the float64 result than eager's float32 output,
    # verify's second look; and still a mismatch when eager is the nearer one.
    nearer_candidate = torch.tensor([1.00003], dtype=torch.float64)
    assert bench.compare_outputs(eager, candidate, exact=lambda: nearer_candidate) is None
    assert verify.compare(candidate, eager, [], exact=lambda: nearer_candidate) is True
    reason = bench.compare_outputs(eager, candidate, exact=lambda: eager.double())
    assert reason is not None and "further from the float64 result" in reason


def test_first_line_of_compiler_errors() -> None:
    error = RuntimeError("Error invoking IREE compiler tool iree-compile\nDiagnostics:\nm.mlir:3:1: error: bad op\n")
    assert bench.first_line(error) == "iree-compile error: bad op"
    assert bench.first_line(ValueError("static: x error: y\nz")) == "ValueError: static: x error: y"


class _StandInBundle:
    """Enough of a dycl_iree bundle to exercise the harness: TorchScript saved into a folder."""

    def __init__(self, scripted: torch.jit.ScriptModule, cpu_threads: int) -> None:
        self.scripted, self.cpu_threads = scripted, cpu_threads

    def save(self, path: str) -> None:
        Path(path).mkdir()
        torch.jit.save(self.scripted, str(Path(path) / "model.pt"))
        (Path(path) / "cpu_threads").write_text(str(self.cpu_threads))


def _stand_in_export(
    model: torch.nn.Module,
    example_inputs: tuple,
    targets: tuple[str, ...],
    dynamic_shapes: object = None,
    cpu_threads: int = 1,
) -> _StandInBundle:
    assert targets == ("llvm-cpu",) and dynamic_shapes is None
    return _StandInBundle(torch.jit.freeze(torch.jit.script(model.eval())), cpu_threads)


def _stand_in_load(path: str, device: str, host: str) -> object:
    assert device in bench.DYCL_DRIVERS and host in bench.DYCL_HOSTS
    # local-sync runs one thread; a local-task bundle is split for the benchmark's threads (2).
    assert (Path(path) / "cpu_threads").read_text() == ("1" if device == "local-sync" else "2"), (device, path)
    scripted = torch.jit.load(str(Path(path) / "model.pt"))
    return lambda *inputs: scripted(*(torch.from_numpy(x) for x in inputs)).numpy()


def test_dycl_candidates_are_wired(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = importlib.import_module("dycl_iree")
    monkeypatch.setattr(package, "export", _stand_in_export, raising=False)
    monkeypatch.setattr(package, "load", _stand_in_load, raising=False)
    report = bench.benchmark([bench.ModelEntry("gate", make_gate, SAMPLES)], tmp_path, rounds=1, candidates=["dycl"])
    results = _by_name(report)
    on_cpu = [name for name in bench.CANDIDATE_GROUPS["dycl"] if "cpu" in bench.CANDIDATES[name]().devices]
    assert list(results) == ["eager", *on_cpu]
    for name in on_cpu:
        assert results[name].status == "ok", results[name].error
        assert results[name].size_bytes and results[name].size_bytes > 0


def test_device_picks_the_candidates_that_run_there() -> None:
    names = {device: [f().name for f in bench.resolve_candidates(None, device)] for device in ("cpu", "cuda", "vulkan")}
    assert names["cuda"] == ["eager", "dycl-compiled-cuda", "dycl-python-cuda"]
    assert names["vulkan"] == ["eager", "dycl-compiled-vulkan", "dycl-python-vulkan"]
    assert "torchscript" in names["cpu"] and not any("cuda" in n or "vulkan" in n for n in names["cpu"])


def test_failing_exporter_is_reported_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_export(*args: object, **kwargs: object) -> None:
        raise NotImplementedError("lowering of aten::frobnicate\nsecond line")

    package = importlib.import_module("dycl_iree")
    monkeypatch.setattr(package, "export", broken_export, raising=False)
    monkeypatch.setattr(package, "load", _stand_in_load, raising=False)
    report = bench.benchmark(
        [bench.ModelEntry("gate", make_gate, SAMPLES)], tmp_path, rounds=1, candidates=["dycl-compiled-local-sync"]
    )
    result = _by_name(report)["dycl-compiled-local-sync"]
    assert result.status == "failed" and not result.exported
    assert result.error == "NotImplementedError: lowering of aten::frobnicate"
    assert "failed: export/load: NotImplementedError" in (tmp_path / "report.md").read_text()


def test_main_with_a_factory_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model_file = tmp_path / "tiny.py"
    model_file.write_text(
        "import torch\n\n"
        "class Double(torch.nn.Module):\n"
        "    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:\n"
        "        for _ in range(n):\n"
        "            x = x * 2\n"
        "        return x\n\n"
        "def make():\n"
        "    return Double(), (torch.ones(3), 2)\n"
    )
    out = tmp_path / "out"
    status = bench.main(
        ["--models", f"{model_file}:make", "--candidates", "torchscript", "--rounds", "1", "--out", str(out)]
    )
    assert status == 0
    raw = json.loads((out / "results.json").read_text())
    assert raw["models"][0]["name"] == "tiny.make"
    assert [c["matches"] for c in raw["models"][0]["candidates"]] == [True, True]
    # Progress per model and candidate on stderr, as plain lines since stderr is not a terminal here.
    err = capsys.readouterr().err
    assert "[1/1] tiny.make: 1 sample, 2 candidates" in err
    assert "[1/1] tiny.make: torchscript ready in" in err
    assert "[1/1] tiny.make: timing round 1/1 (2 candidates)" in err
    assert "\x1b[" not in err
    assert bench.main(["--models", f"{model_file}:missing", "--out", str(out)]) == 2
    assert bench.main(["--candidates", "nope", "--models", f"{model_file}:make", "--out", str(out)]) == 2


class Noisy(bench.Peer):
    """A peer that logs like torch.compile does on every graph break."""

    name = "noisy"

    def prepare(self, context: bench.ModelContext) -> None:
        logging.getLogger("torch._dynamo").warning("Graph break from `Tensor.item()`")
        self.model = context.model

    def run(self, inputs: tuple) -> torch.Tensor:
        logging.getLogger("torch._dynamo.convert_frame").warning("hit config.recompile_limit")
        return self.model(*inputs)


def test_peer_noise_is_silenced_failures_are_not(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    class Broken(bench.Peer):
        name = "broken"
        needs = ("a_module_that_is_not_installed",)

    report = bench.benchmark(
        [bench.ModelEntry("gate", make_gate, SAMPLES)], tmp_path, rounds=1, candidates=[Noisy, Broken]
    )
    err = capfd.readouterr().err
    assert "Graph break" not in err and "recompile_limit" not in err
    results = _by_name(report)
    assert results["noisy"].status == "ok"
    assert results["broken"].error == "PeerError: needs a_module_that_is_not_installed, not installed " + (
        "(pip install -e '.[bench]')"
    )
    assert logging.getLogger("torch._dynamo").level != logging.ERROR  # put back afterwards


def _sleeping(name: str, seconds: float) -> type[bench.Peer]:
    class Sleeping(bench.Peer):
        def prepare(self, context: bench.ModelContext) -> None:
            self.model = context.model

        def run(self, inputs: tuple) -> torch.Tensor:
            time.sleep(seconds)
            return self.model(*inputs)

    Sleeping.name = name
    return Sleeping


def test_a_fast_candidate_is_called_until_its_turn_has_run(tmp_path: Path) -> None:
    """A round's median of a fast model is over more calls than `repeat`: as many as run `turn_ms`
    (split over the samples, at most MAX_CALLS), the slow one's stays at `repeat`; the report says
    how many. (The bounds hold however long a loaded machine makes each sleep.)"""
    report = bench.benchmark(
        [bench.ModelEntry("gate", make_gate, SAMPLES)],
        tmp_path,
        rounds=2,
        repeat=2,
        turn_ms=200.0,
        candidates=[_sleeping("quick", 0.001), _sleeping("slow", 0.05)],
    )
    results = _by_name(report)
    for name, least, most in (("quick", 3, MAX_CALLS), ("slow", 2, 2), ("eager", 3, MAX_CALLS)):
        counts = [len(calls) for rounds in results[name].call_ms for calls in rounds]
        assert len(counts) == 2 * len(SAMPLES) and all(least <= count <= most for count in counts), (name, counts)
    assert report.settings["turn_ms"] == 200.0
    assert "median of at least 2 calls (more until they run 200 ms)" in (tmp_path / "report.md").read_text()


def test_package_has_no_import_cycle() -> None:
    """Every module of dycl_iree.bench imports only modules below it: no cycle hidden by __init__."""
    root = Path(bench.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent.parent).with_suffix("").parts)
        package = parts[:-1]
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                graph[name].add(target)
    graph = {name: {t for t in targets if t in graph and t != name} for name, targets in graph.items()}
    assert "dycl_iree.bench.peers.base" in graph and "dycl_iree.bench.driver" in graph

    def cycle_from(name: str, path: tuple[str, ...]) -> tuple[str, ...] | None:
        if name in path:
            return path[path.index(name) :] + (name,)
        for target in graph[name]:
            found = cycle_from(target, path + (name,))
            if found:
                return found
        return None

    for name in graph:
        assert cycle_from(name, ()) is None, cycle_from(name, ())


def test_plot_shows_spread_and_busy_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dycl_iree.bench import plot

    eager = bench.CandidateResult("eager", round_ms=[3.0, 4.0, 3.5], latency_ms=3.5, speedup=1.0, matches=True)
    fast = bench.CandidateResult("fast", round_ms=[1.0, 2.0, 1.0], latency_ms=1.0, speedup=3.5, matches=True)
    # Per round: 3/1, 4/2, 3.5/1; the ratio of medians (3.5) lies inside.
    assert plot._spread(fast, eager) == (2.0, 3.5)
    drawn: dict[str, list] = {"errorbar": [], "text": []}
    import matplotlib.axes
    import matplotlib.figure

    original_errorbar, original_text = matplotlib.axes.Axes.errorbar, matplotlib.figure.Figure.text
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "errorbar",
        lambda self, *a, **k: drawn["errorbar"].append((a, k)) or original_errorbar(self, *a, **k),
    )
    monkeypatch.setattr(
        matplotlib.figure.Figure,
        "text",
        lambda self, x, y, s, *a, **k: drawn["text"].append(s) or original_text(self, x, y, s, *a, **k),
    )
    report = bench.Report(
        settings={"candidates": {"eager": "", "fast": ""}},
        environment={"load average at start": "3.20", "cpus": "2"},
        models=[bench.ModelResult("m", 1, [eager, fast])],
        geomean={},
    )
    plot.plot_speedups(report, tmp_path / "busy.png")
    assert (tmp_path / "busy.png").stat().st_size > 0
    (x, y), keywords = drawn["errorbar"][0]
    assert y == 3.5 and keywords["yerr"] == [[1.5], [0.0]]
    assert any("busy (load 3.20 on 2 CPUs)" in text for text in drawn["text"])
    report.environment["load average at start"] = "0.10"
    drawn["text"].clear()
    plot.plot_speedups(report, tmp_path / "idle.png")
    assert not any("busy" in text for text in drawn["text"])
