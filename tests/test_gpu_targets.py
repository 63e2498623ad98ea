"""GPU targets: Vulkan bundles run on both hosts (on Mesa's lavapipe software device when the machine
has no GPU), and CUDA bundles compile for the architecture asked for.

The Vulkan tests install `mesa-vulkan-drivers` through `scripts/ensure_debian_packages.sh` and skip,
with the reason, where that is impossible or IREE still finds no Vulkan device. lavapipe runs the
shaders on the CPU (and compiles each one when a bundle is loaded), so its speed means nothing and
the samples here are the programs' own plus a few per zoo model.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import dycl_iree
import host_runtime
from dycl_iree.compile import CUDA_ARCHITECTURE, cuda_architecture_of
from dycl_iree.program import If, Loop, iter_nodes
from dycl_iree.verify import compare
from host_runtime.bundle_format import read_manifest
from host_runtime.invoke import StagedReader, element_type_of, readers_for, to_numpy, to_scalar, upload
from models import ZOO, programs

from .conftest import assert_matches, make, scripted
from .test_host_runtime import ARRAYS
from .test_programs_e2e import EXPECTED_HOST, LOOP_EXITS, _loop_exit

ROOT = Path(__file__).resolve().parent.parent
ENSURE_PACKAGES = ROOT / "scripts" / "ensure_debian_packages.sh"
# Zoo models run on Vulkan on all their SAMPLES (which take every exit). Two of the cheaper ones to
# compile for Vulkan and run on lavapipe (BlockDrop: ~3 minutes to compile, ~4 to run).
ZOO_ON_VULKAN = ("ranet", "sdn_resnet56")


@pytest.fixture(scope="session")
def vulkan() -> str:
    """The Vulkan device name for `load`; installs lavapipe when missing, skips when there is no device."""
    install = ""
    if ENSURE_PACKAGES.exists():
        done = subprocess.run([str(ENSURE_PACKAGES), "mesa-vulkan-drivers"], capture_output=True, text=True)
        if done.returncode != 0:  # a machine may still have a Vulkan GPU of its own
            install = f"; mesa-vulkan-drivers could not be installed: {done.stderr.strip()[-300:]}"
    import iree.runtime as ireert

    try:
        devices = ireert.get_driver("vulkan").query_available_devices()
    except Exception as error:  # no Vulkan loader (libvulkan1) or no ICD
        pytest.skip(f"IREE's vulkan driver cannot start here: {error}{install}")
    if not devices:
        pytest.skip(f"IREE's vulkan driver finds no device (no GPU and no lavapipe){install}")
    return "vulkan"


@pytest.fixture(scope="session")
def vulkan_program(tmp_path_factory: pytest.TempPathFactory, vulkan: str):
    """vulkan_program(name) -> (bundle, path): each program exported for Vulkan once per session."""
    folder = tmp_path_factory.mktemp("vulkan-bundles")
    cache: dict[str, tuple] = {}

    def get(name: str) -> tuple:
        if name not in cache:
            model, example_inputs, dynamic_shapes = make(name)
            bundle = dycl_iree.export(model, example_inputs, dynamic_shapes=dynamic_shapes, targets=("vulkan",))
            cache[name] = (model, bundle, bundle.save(folder / f"{name}.dycl"))
        return cache[name]

    return get


def _torch_free(sample: tuple) -> tuple:
    return tuple(value.numpy() if isinstance(value, torch.Tensor) else value for value in sample)


@pytest.mark.parametrize("name", list(programs.MODELS))
def test_programs_run_on_vulkan_with_both_hosts(name: str, vulkan: str, vulkan_program) -> None:
    model, bundle, path = vulkan_program(name)
    assert bundle.host == EXPECTED_HOST[name], bundle.manifest["compiled_host_unsupported"]
    python_host = dycl_iree.load(path, device=vulkan, host="python", record=True)
    compiled_host = dycl_iree.load(path, device=vulkan, host="compiled") if bundle.host == "compiled" else None
    assert python_host.read_back == "staged"
    exits: set[str] = set()
    for index, sample in enumerate(programs.SAMPLES[name]()):
        with torch.no_grad():
            reference = scripted(model)(*sample)
        assert_matches(python_host(*_torch_free(sample)), reference, f"{name} sample {index} (python host, vulkan)")
        if compiled_host is not None:
            assert_matches(compiled_host(*sample), reference, f"{name} sample {index} (compiled host, vulkan)")
        if name in LOOP_EXITS:
            trips, how = _loop_exit(name, sample, reference)
            (label,) = [node.label for node in iter_nodes(bundle.program.body) if isinstance(node, Loop)]
            assert python_host.trip_counts[label][-1] == trips, f"sample {index}: trip count"
            exits.add(how)
    for label in [node.label for node in iter_nodes(bundle.program.body) if isinstance(node, If)]:
        taken = dict(python_host.decisions[label])
        assert set(taken) == {True, False}, f"{label} took only {taken}"
    if name in LOOP_EXITS:
        assert exits == LOOP_EXITS[name]


@pytest.fixture(scope="session")
def vulkan_zoo(tmp_path_factory: pytest.TempPathFactory, vulkan: str):
    folder = tmp_path_factory.mktemp("vulkan-zoo")
    cache: dict[str, tuple] = {}

    def get(name: str) -> tuple:
        if name not in cache:
            model, example_inputs = ZOO[name].build()
            bundle = dycl_iree.export(model.eval(), example_inputs, targets=("vulkan",))
            cache[name] = (model, bundle.save(folder / f"{name}.dycl"))
        return cache[name]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO_ON_VULKAN)
def test_zoo_models_run_on_vulkan_with_both_hosts(name: str, vulkan: str, vulkan_zoo) -> None:
    model, path = vulkan_zoo(name)
    samples = ZOO[name].samples()
    reference = scripted(model)
    python_host = host_runtime.load(path, device=vulkan, host="python", record=True)
    compiled_host = host_runtime.load(path, device=vulkan, host="compiled")
    assert compiled_host.read_back == python_host.read_back == "staged"
    for host, runner in (("python", python_host), ("compiled", compiled_host)):
        errors: list = []
        for index, sample in enumerate(samples):
            with torch.no_grad():
                expected = reference(*sample)
            assert compare(runner(*sample), expected, errors), f"{name} sample {index} ({host} host): {errors}"
    # The samples drive every decision both ways (each exit of an early-exit model is taken).
    for decision in python_host.manifest["decisions"]:
        taken = dict(python_host.decisions[decision["label"]])
        assert set(taken) == {True, False}, f"{name}: {decision['label']} took only {taken}"


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_staged_reader_round_trips_every_dtype(vulkan: str, name: str) -> None:
    import iree.runtime as ireert

    device = ireert.get_device(vulkan)
    reader = StagedReader(device)
    array = ARRAYS[name]
    buffer = upload(device, array, element_type_of(array.dtype))
    back = reader.to_numpy(buffer)
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)
    if array.size == 1:
        value = reader.to_scalar(buffer)
        assert type(value) is type(array.item()) and value == array.item()


def test_the_cpu_drivers_keep_their_in_place_read_back() -> None:
    import iree.runtime as ireert

    for driver in ("local-sync", "local-task"):
        assert readers_for(ireert.get_device(driver), driver) == (to_numpy, to_scalar)


def test_vulkan_inputs_are_checked_before_device_work(vulkan: str, vulkan_program) -> None:
    _, _, path = vulkan_program("early_exit")
    for host in ("compiled", "python"):
        run = host_runtime.load(path, device=vulkan, host=host)
        with pytest.raises(host_runtime.InputError, match="dtype float32"):
            run(np.zeros((1, 8), np.float64))
        with pytest.raises(host_runtime.InputError, match="takes 1 inputs"):
            run()


def test_cli_runs_a_vulkan_bundle(vulkan: str, vulkan_program, capsys: pytest.CaptureFixture) -> None:
    from dycl_iree.cli import main

    _, _, path = vulkan_program("early_exit")
    assert main(["run", str(path), "--input=1x8xf32=3", "--host", "python"]) == 0
    printed = capsys.readouterr().out
    assert "decision if0" in printed and "(python host, vulkan)" in printed


def test_a_vulkan_bundle_is_refused_by_the_cpu_drivers(vulkan_program) -> None:
    _, _, path = vulkan_program("early_exit")
    with pytest.raises(host_runtime.BundleError, match="no vmfb for this CPU"):
        host_runtime.load(path, device="local-sync")


# -- CUDA: compiled here, run by benchmarks/gpu_check.sh on a machine with an NVIDIA GPU ----------


@pytest.fixture(scope="module")
def cuda_bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    model, example_inputs, _ = make("for_break")
    folder = tmp_path_factory.mktemp("cuda-bundles")
    bundle = dycl_iree.export(model, example_inputs, targets=("cuda", "cuda:sm_86"))
    return {"both": bundle.save(folder / "for_break.dycl")}


def test_cuda_bundles_record_their_architecture(cuda_bundles: dict[str, Path]) -> None:
    _, manifest = read_manifest(cuda_bundles["both"])
    architectures = {name: cuda_architecture_of(entry["flags"]) for name, entry in manifest["targets"].items()}
    assert architectures == {"cuda": CUDA_ARCHITECTURE, "cuda:sm_86": "sm_86"}
    for entry in manifest["targets"].values():
        assert (cuda_bundles["both"] / entry["file"]).stat().st_size > 0


def test_inspect_shows_the_gpu_architecture(cuda_bundles: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    from dycl_iree.cli import main

    assert main(["inspect", str(cuda_bundles["both"])]) == 0
    printed = capsys.readouterr().out
    assert "target cuda: cuda.vmfb" in printed and f"for GPU architecture {CUDA_ARCHITECTURE}" in printed
    assert "for GPU architecture sm_86" in printed


@pytest.mark.parametrize("architecture", ["sm_90", "sm_90a", "sm_100"])
def test_cuda_architectures_iree_cannot_compile_are_refused_before_compiling(architecture: str) -> None:
    model, example_inputs, _ = make("early_exit")
    refused = rf"iree-base-compiler 3\.13 cannot compile for {architecture}.*sm_80"
    with pytest.raises(dycl_iree.DyclError, match=refused):
        dycl_iree.export(model, example_inputs, targets=(f"cuda:{architecture}",))


def test_cuda_architecture_names_are_checked() -> None:
    model, example_inputs, _ = make("early_exit")
    with pytest.raises(dycl_iree.DyclError, match="unknown CUDA architecture 'ampere'"):
        dycl_iree.export(model, example_inputs, targets=("cuda:ampere",))


def test_a_cuda_bundle_without_a_gpu_fails_to_open_with_a_bundle_error(cuda_bundles: dict[str, Path]) -> None:
    import iree.runtime as ireert

    try:
        available = ireert.get_driver("cuda").query_available_devices()
    except Exception:
        available = []
    if available:
        pytest.skip("this machine has a CUDA device: benchmarks/gpu_check.sh runs the bundles there")
    with pytest.raises(host_runtime.BundleError, match="cannot open IREE device 'cuda'"):
        host_runtime.load(cuda_bundles["both"], device="cuda")


def test_random_ops_in_a_loop_draw_on_vulkan_what_they_draw_on_the_cpu(vulkan: str, tmp_path: Path) -> None:
    """The random state is two int32 words and the generator 32-bit integer arithmetic, which the
    Vulkan target compiles (it rejects int64 elementwise ops): a seed draws on lavapipe the CPU's bits
    for every uniform-based op, and normals within float32 rounding (log and cos)."""
    from .test_random import _Draws

    bundle = dycl_iree.export(_Draws(), (torch.ones(16, 16), 1), targets=("llvm-cpu", "vulkan"))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / "draws.dycl")
    x = torch.ones(16, 16).numpy()
    on_cpu = dycl_iree.load(path, host="compiled", seed=3)(x, 2)
    for host in ("compiled", "python"):
        runner = dycl_iree.load(path, device=vulkan, host=host, seed=3)
        for index, (got, want) in enumerate(zip(runner(x, 2), on_cpu)):
            if index == 1:  # randn_like
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"{host} output {index}")
        assert runner.random_state == (3 << 32) + 12  # two iterations of six draws
