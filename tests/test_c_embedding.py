"""Embedding bundles in C: the edge app on every sample and path, on x86 and on aarch64 under qemu.

IREE's runtime is built once per machine (tests/c_build.py: installed under a hash of its sources,
reused by every checkout and session). Each bundle is exported for this CPU and for `llvm-cpu:aarch64-linux-gnu`, built
into examples/edge_app against the installed package (`find_package(dycl_iree_runtime)`, as an
application would) and run on every sample; outputs are compared with PyTorch, and the Python host
records that the samples take every branch side and loop exit. The Python runtime (`host_runtime`)
also runs on aarch64: Debian's python3.11 for arm64 under qemu with PyPI's aarch64 wheels.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import dycl_iree
from dycl_iree.verify import compare, verify
from host_runtime.errors import BundleError
from host_runtime.runner import build_outputs
from models import ZOO, programs

from .c_build import HOST_CPU, CRuntime, aarch64_python, app_arguments, c_runtime, parse_outputs, run, run_app
from .conftest import export_reused

CROSS_TARGET = "llvm-cpu:aarch64-linux-gnu"
CPUS = [HOST_CPU, "aarch64"] if HOST_CPU != "aarch64" else ["aarch64"]
# The programs the issue names, one zoo model (7 samples, one per exit), and the scalars in every order.
MODELS = ["early_exit", "for_break", "greedy_decoder", "sdn_resnet56", "mixed_scalars"]


class MixedScalars(torch.nn.Module):
    """Ints, floats and bools in every order of two neighbours (float-bool, bool-int, int-bool,
    bool-float, float-int, int-float, and an int before the tensor), and scalar outputs of every kind
    among a tensor one. A runtime that lays out mixed scalar arguments otherwise than the compiler
    (README's traps) reads some of them wrong; ints beyond 32 bits and negative ones show a lost
    high half."""

    def forward(self, n0: int, x: torch.Tensor, s0: float, b0: bool, n1: int, b1: bool, s1: float, n2: int,
                s2: float):
        y = x * s0 + n0
        if b0:
            y = y + s1
        if b1:
            y = y * s2
        else:
            y = y - n0
        total = float(y.sum())
        return total > s2, n0 * n1 - n2, y, total * s0, b1, n2


def mixed_scalars() -> tuple[torch.nn.Module, tuple, None, list[tuple]]:
    x = torch.linspace(-1.0, 2.0, 6).reshape(2, 3)
    samples = [
        (3, x, 0.5, True, 5_000_000_000, True, -1.25, -7, 2.0),
        (-2, x * 2, -1.5, False, -3, False, 0.75, 6_000_000_001, -0.5),
        (0, -x, 2.25, True, 1, False, 3.5, -(2**40), 1.0),
        (7, x + 1, 1.0, False, -(2**33), True, -2.0, 11, -3.0),
    ]
    return MixedScalars(), samples[0], None, samples


_LOCAL_MODELS = {"mixed_scalars": mixed_scalars}


@dataclass
class CBundle:
    name: str
    model: torch.nn.Module
    samples: list[tuple]
    path: Path
    manifest: dict[str, Any]


def _factory(name: str) -> tuple[torch.nn.Module, tuple, Any, list[tuple]]:
    """(model, example inputs, dynamic shapes, samples)."""
    if name in _LOCAL_MODELS:
        return _LOCAL_MODELS[name]()
    if name in ZOO:
        model, example_inputs = ZOO[name].build()
        return model, example_inputs, None, ZOO[name].samples()
    made = programs.MODELS[name]()
    return made[0], made[1], made[2] if len(made) > 2 else None, programs.SAMPLES[name]()


@pytest.fixture(scope="session")
def c_bundles(tmp_path_factory: pytest.TempPathFactory):
    """c_bundles(name) -> CBundle, exported once per session for this CPU and for aarch64."""
    folder = tmp_path_factory.mktemp("c_bundles")
    cache: dict[str, CBundle] = {}

    def get(name: str) -> CBundle:
        if name not in cache:
            model, example_inputs, dynamic_shapes, samples = _factory(name)
            targets = ("llvm-cpu", CROSS_TARGET)
            bundle = export_reused(model.eval(), example_inputs, targets=targets, dynamic_shapes=dynamic_shapes)
            path = bundle.save(folder / f"{name}.dycl")
            cache[name] = CBundle(name, model.eval(), samples, path, bundle.manifest)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def c_runtimes():
    """c_runtimes(cpu) -> CRuntime: IREE's runtime and the C library, built and installed once."""
    built: dict[str, CRuntime] = {}

    def get(cpu: str) -> CRuntime:
        if cpu not in built:
            host = None if cpu == HOST_CPU else get(HOST_CPU)
            built[cpu] = c_runtime(cpu, host)
        return built[cpu]

    return get


@pytest.fixture(scope="session")
def coverage_checked(c_bundles):
    """coverage_checked(name): assert (once) that the samples take every branch side and loop exit."""
    done: set[str] = set()

    def check(name: str) -> None:
        if name not in done:
            item = c_bundles(name)
            report = verify(item.model, item.samples, item.path, host="python", name=name)
            assert not report.uncovered, report.format()
            assert report.mismatched_samples == 0, report.format()
            done.add(name)

    return check


_SCRIPTED: dict[int, Any] = {}


def _scripted(item: CBundle) -> Any:
    if id(item.model) not in _SCRIPTED:
        _SCRIPTED[id(item.model)] = torch.jit.script(item.model)
    return _SCRIPTED[id(item.model)]


def _assert_matches_pytorch(item: CBundle, index: int, leaves: list[Any], where: str) -> None:
    """The correctness contract of `verify`: ints, bools and shapes exactly; floats within 1e-5 of
    PyTorch, or no further from the float64 result than PyTorch is."""
    sample = item.samples[index]

    def exact() -> Any:
        widened = tuple(v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in sample)
        with torch.no_grad():
            return copy.deepcopy(item.model).double()(*widened)

    with torch.no_grad():
        expected = _scripted(item)(*sample)
    actual = build_outputs(item.manifest["outputs"]["tree"], leaves)
    assert compare(actual, expected, [], exact=exact), f"{where}: {actual} != {expected}"


@pytest.mark.parametrize("cpu", CPUS)
@pytest.mark.parametrize("name", MODELS)
def test_edge_app_matches_pytorch_on_every_path(name: str, cpu: str, c_bundles, c_runtimes, coverage_checked,
                                                tmp_path: Path) -> None:
    item = c_bundles(name)
    coverage_checked(name)
    runtime = c_runtimes(cpu)
    app = runtime.build_app(item.path, tmp_path / "build") / "edge_app"
    command = runtime.command(app)
    for index, sample in enumerate(item.samples):
        leaves, _ = run_app(command, app_arguments(sample, tmp_path / f"sample{index}"))
        _assert_matches_pytorch(item, index, leaves, f"{name} on {cpu}, sample {index}")


def test_edge_app_refuses_a_wrong_shape_before_running(c_bundles, c_runtimes, tmp_path: Path) -> None:
    item = c_bundles("for_break")
    app = c_runtimes(HOST_CPU).build_app(item.path, tmp_path / "build") / "edge_app"
    arguments = app_arguments((torch.zeros(1, 8), 3), tmp_path / "inputs")
    result = subprocess.run([str(app), *arguments], capture_output=True, text=True)
    assert result.returncode == 1
    assert "INVALID_ARGUMENT" in result.stderr
    assert "ForBreak: input 0 ('x') must have size 5 in dim 1 (shape [1, 5], got shape [1, 8])" in result.stderr


class _Noisy(torch.nn.Module):
    """Always-on dropout and uniform noise in a loop with a data-dependent `break`."""

    def forward(self, x: torch.Tensor, n: int):
        h = x
        for _ in range(n):
            h = h + torch.nn.functional.dropout(torch.ones_like(h), 0.5, True) + torch.rand_like(h)
            if float(h.sum()) > 40.0:
                break
        return h


def test_edge_app_passes_the_random_state_and_draws_the_python_runtimes_numbers(c_runtimes, tmp_path: Path) -> None:
    """A model that draws takes the generator's state (two int32 words) as one more input and returns
    the next one; seeded alike (NAME_RANDOM_STATE(seed) in C), the edge app and `load(..., seed=...)`
    draw the same bits."""
    from dycl_iree.emit_c import emit_c
    from host_runtime.random_state import state_array

    bundle = dycl_iree.export(_Noisy(), (torch.zeros(2, 3), 2))
    assert bundle.host == "compiled" and bundle.manifest["random_state"]
    path = bundle.save(tmp_path / "noisy.dycl")
    emit_c(path, tmp_path / "c")
    header = (tmp_path / "c" / "noisy.h").read_text()
    assert "random_state: int32[2]" in header and "next_random_state: int32[2]" in header
    assert "#define NOISY_RANDOM_STATE(seed) {(int32_t)(uint32_t)(seed), 0}" in header
    app = c_runtimes(HOST_CPU).build_app(path, tmp_path / "build") / "edge_app"
    python = dycl_iree.load(path, host="compiled", seed=7)
    state = state_array(python.random_state)
    assert state.tolist() == [7, 0]
    for index, n in enumerate((1, 3, 0, 2)):
        x = torch.zeros(2, 3)
        (got, state), _ = run_app([str(app)], app_arguments((x, n, torch.from_numpy(state)), tmp_path / f"in{index}"))
        np.testing.assert_array_equal(got, python(x.numpy(), n))
        assert state.tolist() == state_array(python.random_state).tolist()


# -- the typed functions, called directly -------------------------------------------------------------


@pytest.fixture(scope="module")
def typed_api(c_bundles, c_runtimes, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    runtime = c_runtimes(HOST_CPU)
    variables = {f"{name.upper()}_BUNDLE": str(c_bundles(name).path)
                 for name in ("greedy_decoder", "dynamic_batch", "scalar_inputs")}
    build = runtime.build_app(c_bundles("greedy_decoder").path, tmp_path_factory.mktemp("typed_api"),
                              source=Path(__file__).parent / "c", variables=variables)
    return [str(build / "typed_api")]


def _typed(command: list[str], *arguments: Any) -> str:
    return run([*command, *map(str, arguments)]).stdout


def test_typed_decoder_reports_its_length_and_asks_for_capacity(typed_api, c_bundles, tmp_path: Path) -> None:
    item = c_bundles("greedy_decoder")
    lengths = set()
    for index, (h, start) in enumerate(item.samples):
        (path,) = app_arguments((h,), tmp_path / f"sample{index}")
        expected = _scripted(item)(h, start).numpy()
        lengths.add(len(expected))
        text = _typed(typed_api, "greedy", path, start, len(expected))
        assert text.startswith(f"length {len(expected)}\n"), text
        leaves, _ = parse_outputs(text.split("\n", 1)[1])
        np.testing.assert_array_equal(leaves[0], expected)
        if len(expected) > 1:  # one token short: the call says how many it needs and writes nothing
            short = _typed(typed_api, "greedy", path, start, len(expected) - 1)
            assert short.startswith(f"length {len(expected)}\nerror RESOURCE_EXHAUSTED"), short
            assert f"has shape [{len(expected)}] ({len(expected)} elements) but its buffer holds" in short
    assert len(lengths) > 1, "the samples should decode sequences of different lengths"


def test_typed_dynamic_dim_and_its_checks(typed_api, c_bundles, tmp_path: Path) -> None:
    item = c_bundles("dynamic_batch")
    for index, (x,) in enumerate(item.samples):
        (path,) = app_arguments((x,), tmp_path / f"sample{index}")
        leaves, _ = parse_outputs(_typed(typed_api, "batch", path))
        np.testing.assert_allclose(leaves[0], _scripted(item)(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    threads = _typed(typed_api, "threads", path, 2000)  # two models, one device, two threads at once
    assert threads == "mismatches 0 0\n", threads
    negative = _typed(typed_api, "batch-negative", path)
    assert negative.startswith("error INVALID_ARGUMENT"), negative
    assert "input 'x' has negative size -1 in dim 0" in negative


def test_typed_scalars_in_and_out(typed_api, c_bundles, tmp_path: Path) -> None:
    item = c_bundles("scalar_inputs")
    for index, (x, n, scale, flag) in enumerate(item.samples):
        (path,) = app_arguments((x,), tmp_path / f"sample{index}")
        leaves, _ = parse_outputs(_typed(typed_api, "scalars", path, n, scale, int(flag)))
        _assert_matches_pytorch(item, index, leaves, f"scalar_inputs sample {index}")


def test_typed_model_reuses_buffers_as_its_signature_says(typed_api, c_bundles, tmp_path: Path) -> None:
    """scalar_inputs' shapes are static, so its signature asks for buffer reuse: after the first call
    its device allocates (nearly) nothing, where without reuse every call allocates its transient
    buffers anew; the results are the same either way. The dynamic decoder's signature does not ask."""
    item = c_bundles("scalar_inputs")
    x, n, scale, flag = item.samples[0]
    (path,) = app_arguments((x,), tmp_path / "sample0")
    text = _typed(typed_api, "reuse", path, n, scale, int(flag))
    allocated = {line.split()[1]: int(line.split()[2]) for line in text.splitlines() if line.startswith("reuse ")}
    assert set(allocated) == {"never", "always", "as-signature"}, text
    assert allocated["never"] > 0, text
    assert allocated["always"] < allocated["never"] / 4 and allocated["as-signature"] == allocated["always"], text
    chunks = text.split("reuse ")[1:]
    for chunk in chunks:
        leaves, _ = parse_outputs("\n".join(chunk.splitlines()[1:]))
        _assert_matches_pytorch(item, 0, leaves, f"scalar_inputs, reuse {chunk.split()[0]}")


def test_generated_signature_asks_for_buffer_reuse_only_for_static_bundles(c_bundles) -> None:
    from dycl_iree.emit_c import describe_bundle, implementation

    for name, reuse in (("scalar_inputs", True), ("early_exit", True), ("greedy_decoder", False)):
        bundle = describe_bundle(c_bundles(name).path)
        assert bundle.reuse_buffers is reuse, name
        assert f", {'true' if reuse else 'false'},\n}};" in implementation(bundle), name


class GreedyDecoder(torch.nn.Module):
    """Named like the program's decoder, so its vmfb's module is `dycl_greedydecoder` too, with another `main`."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h * 2.0


def test_typed_code_refuses_another_bundle(typed_api, c_bundles, tmp_path: Path) -> None:
    other = c_bundles("dynamic_batch")
    text = _typed(typed_api, "mismatch", other.path / other.manifest["targets"]["llvm-cpu"]["file"])
    assert text.startswith("error NOT_FOUND"), text
    assert "GreedyDecoder: the vmfb has no function dycl_greedydecoder.main" in text
    # Same module name, other signature: refused at load time by the calling-convention check.
    impostor = dycl_iree.export(GreedyDecoder(), (torch.ones(1, 8),)).save(tmp_path / "impostor.dycl")
    manifest = json.loads((impostor / "manifest.json").read_text())
    assert manifest["module_name"] == "dycl_greedydecoder"
    text = _typed(typed_api, "mismatch", impostor / manifest["targets"]["llvm-cpu"]["file"])
    assert text.startswith("error FAILED_PRECONDITION"), text
    assert "calling convention '0r_r' but the signature expects '0rr_r'" in text
    text = _typed(typed_api, "wrong-model")
    assert text.startswith("error INVALID_ARGUMENT"), text
    assert "greedy_decoder_run: the model was not created by greedy_decoder_create" in text


# What a decoder's `main` was before main_abi 2: its int input a VM i64 (calling convention '0rI_r').
_MAIN_ABI_1_DECODER = """
module @dycl_greedydecoder {
  func.func @main(%h: tensor<1x8xf32>, %start: i64) -> tensor<?xi64> {
    %row = tensor.from_elements %start : tensor<1xi64>
    %any = tensor.cast %row : tensor<1xi64> to tensor<?xi64>
    return %any : tensor<?xi64>
  }
}
"""


def test_typed_code_refuses_a_vmfb_whose_main_takes_vm_scalars(typed_api, tmp_path: Path) -> None:
    """A vmfb of main_abi 1 is refused at load, both calling conventions named, never run with garbage."""
    from iree.compiler import compile_str

    from dycl_iree.compile import target_flags

    vmfb = tmp_path / "abi1.vmfb"
    vmfb.write_bytes(compile_str(_MAIN_ABI_1_DECODER, extra_args=target_flags("llvm-cpu")))
    text = _typed(typed_api, "mismatch", vmfb)
    assert text.startswith("error FAILED_PRECONDITION"), text
    assert "takes scalars as VM values (calling convention '0rI_r': main_abi 1" in text, text
    assert "this runtime passes main_abi 2 (scalars as 0-d tensors, '0rr_r')" in text, text
    # Code generated for main_abi 1 is refused too, before the vmfb is looked at.
    text = _typed(typed_api, "old-signature")
    assert text.startswith("error FAILED_PRECONDITION"), text
    assert "the signature was generated for main_abi 1, but this runtime passes main_abi 2" in text, text


def test_main_takes_and_returns_only_buffer_views(c_bundles) -> None:
    """The VM signature of `main` (what every runtime marshals) holds no scalar, as IREE's own dump shows."""
    import sys

    item = c_bundles("mixed_scalars")
    dump = Path(sys.executable).parent / "iree-dump-module"
    text = run([str(dump), str(item.path / item.manifest["targets"]["llvm-cpu"]["file"])]).stdout
    (line,) = [line for line in text.splitlines() if " main(" in line]
    assert line.split("] ", 1)[1] == "main(" + ", ".join(["!vm.ref<?>"] * 9) + ") -> (" + ", ".join(
        ["!vm.ref<?>"] * 6) + ")", line


# -- the Python runtime on aarch64 ----------------------------------------------------------------------

_RUN_ON_AARCH64 = """
import json, platform, sys
import numpy as np
import host_runtime
bundle, inputs = sys.argv[1], np.load(sys.argv[2])
run = host_runtime.load(bundle)
results = []
for index in range(int(inputs["count"])):
    logits, exit_index = run(inputs[f"x{index}"])
    results.append({"logits": logits.tolist(), "exit": exit_index})
print(json.dumps({"machine": platform.machine(), "target": run.target, "results": results}))
"""


def test_python_runtime_on_aarch64_picks_the_aarch64_vmfb(c_bundles, c_runtimes, tmp_path: Path) -> None:
    item = c_bundles("early_exit")
    c_runtimes(HOST_CPU)  # not needed here, but the cross tools are installed with the aarch64 runtime
    command, env = aarch64_python()
    arrays = {f"x{index}": x.numpy() for index, (x,) in enumerate(item.samples)}
    np.savez(tmp_path / "inputs.npz", count=len(item.samples), **arrays)
    script = tmp_path / "run.py"
    script.write_text(_RUN_ON_AARCH64)
    output = json.loads(run([*command, str(script), str(item.path), str(tmp_path / "inputs.npz")], env=env).stdout)
    assert output["machine"] == "aarch64"
    assert output["target"] == CROSS_TARGET
    exits = set()
    for index, result in enumerate(output["results"]):
        leaves = [np.asarray(result["logits"], np.float32), result["exit"]]
        _assert_matches_pytorch(item, index, leaves, f"early_exit on aarch64 python, sample {index}")
        exits.add(result["exit"])
    assert exits == {0, 1}


# -- the generator alone ------------------------------------------------------------------------------


def test_generated_header_types_every_kind_of_value(c_bundles, tmp_path: Path) -> None:
    from dycl_iree.emit_c import emit_c

    header, source = emit_c(c_bundles("scalar_inputs").path, tmp_path, cpu="aarch64")
    text = header.read_text()
    assert "(target llvm-cpu:aarch64-linux-gnu)" in text
    start = text.index("iree_status_t scalar_inputs_run(")
    prototype = text[start : text.index(");", start)]
    parameters = [part.strip() for part in prototype.split("(", 1)[1].split(",")]
    assert parameters == [
        "dycl_model_t* model", "const float* x", "int64_t n", "float scale", "bool flag",
        "float* output0", "int64_t* output1", "float* output2", "bool* output3",
    ]
    assert "#define SCALAR_INPUTS_OUTPUT0_ELEMENTS 6" in text
    decoder = emit_c(c_bundles("greedy_decoder").path, tmp_path, name="decoder")[0].read_text()
    assert "int64_t* output0,\n" in decoder and "iree_host_size_t output0_capacity" in decoder
    assert "int64_t* output0_dim0)" in decoder
    batch = emit_c(c_bundles("dynamic_batch").path, tmp_path)[1].read_text()
    assert "dycl_value_tensor(x, 2, (const int64_t[]){x_dim0, 8})" in batch
    assert "{DYCL_DYNAMIC_DIM, 8}" in batch


def test_generator_refuses_what_c_cannot_run(c_bundles, tmp_path: Path) -> None:
    from dycl_iree.emit_c import emit_c

    # A bundle that fell back to the Python host (its manifest says so; the files are unchanged).
    python_only = tmp_path / "python_only.dycl"
    shutil.copytree(c_bundles("early_exit").path, python_only)
    manifest = json.loads((python_only / "manifest.json").read_text())
    manifest.update(host="python", compiled_host_unsupported="a list output")
    (python_only / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="has no compiled host .*the C runtime runs only the compiled `main`"):
        emit_c(python_only, tmp_path)
    with pytest.raises(BundleError, match=r"no vmfb for this CPU \(riscv64\)"):
        emit_c(c_bundles("early_exit").path, tmp_path, cpu="riscv64")
    with pytest.raises(BundleError, match="has no target 'vulkan'"):
        emit_c(c_bundles("early_exit").path, tmp_path, target="vulkan")


def test_command_line_emits_c(c_bundles, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from dycl_iree.cli import main

    assert main(["emit-c", str(c_bundles("for_break").path), "-o", str(tmp_path), "--cpu", "aarch64"]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "for_break.h"), str(tmp_path / "for_break.c")]
    assert "(target llvm-cpu:aarch64-linux-gnu)" in (tmp_path / "for_break.h").read_text()
    assert main(["emit-c", str(c_bundles("for_break").path), "-o", str(tmp_path), "--cpu", "riscv64"]) == 2
    assert "error: " in capsys.readouterr().err
