"""Shared fixtures: every program is exported once per test session and shared by the tests."""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import dycl_iree
from models import programs

# Tests patch pipeline stages, which a whole export reused from the cache would skip (iree-compile's
# output stays cached). The tests of that cache turn it back on.
os.environ.setdefault("DYCL_IREE_EXPORT_CACHE", "0")

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=FutureWarning)


# The start of a script run in a subprocess as an edge device without torch would run it: any
# import of torch or torch_mlir raises.
NO_TORCH_GUARD = """
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch.") or name.startswith("torch_mlir"):
            raise ImportError("torch is not installed on this device")
        return None

sys.meta_path.insert(0, NoTorch())
"""


@dataclass
class Exported:
    name: str
    model: torch.nn.Module
    example_inputs: tuple
    dynamic_shapes: Any
    bundle: Any
    path: Path

    def samples(self) -> list[tuple]:
        return list(programs.SAMPLES[self.name]())

    def reference(self, *inputs: Any) -> Any:
        """What the scripted model returns: the correctness contract is stated against it."""
        with torch.no_grad():
            return scripted(self.model)(*inputs)


_SCRIPTED: dict[int, Any] = {}


def scripted(model: torch.nn.Module) -> Any:
    if id(model) not in _SCRIPTED:
        _SCRIPTED[id(model)] = torch.jit.script(model)
    return _SCRIPTED[id(model)]


def make(name: str) -> tuple[torch.nn.Module, tuple, Any]:
    made = programs.MODELS[name]()
    return made[0], made[1], made[2] if len(made) > 2 else None


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory):
    """exported(name) -> Exported; each program is exported at most once per session."""
    folder = tmp_path_factory.mktemp("bundles")
    cache: dict[str, Exported] = {}

    def get(name: str) -> Exported:
        if name not in cache:
            model, example_inputs, dynamic_shapes = make(name)
            bundle = dycl_iree.export(model, example_inputs, dynamic_shapes=dynamic_shapes)
            path = bundle.save(folder / f"{name}.dycl")
            cache[name] = Exported(name, model, example_inputs, dynamic_shapes, bundle, path)
        return cache[name]

    return get


def benchmark_script(name: str) -> Any:
    """`benchmarks/NAME.py` loaded as a module (the folder is scripts, not a package)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_bench", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def as_numpy(inputs: tuple) -> tuple:
    """A sample's inputs as the host runtime takes them (it never imports torch)."""
    return tuple(value.numpy() if hasattr(value, "numpy") else value for value in inputs)


def flatten(outputs: Any) -> list:
    if isinstance(outputs, (tuple, list)):
        return [leaf for item in outputs for leaf in flatten(item)]
    return [outputs]


def assert_matches(actual: Any, expected: Any, context: str = "") -> None:
    """The correctness contract: floats within 1e-5 relative, ints, bools and shapes exactly."""
    actual_leaves, expected_leaves = flatten(actual), flatten(expected)
    assert len(actual_leaves) == len(expected_leaves), f"{context}: output structure differs"
    for index, (got, want) in enumerate(zip(actual_leaves, expected_leaves)):
        where = f"{context} output {index}"
        if isinstance(want, torch.Tensor):
            want = want.detach().numpy()
            got = np.asarray(got)
            assert got.shape == want.shape, f"{where}: shape {got.shape} != {want.shape}"
            assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} != {want.dtype}"
            if want.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=where)
            else:
                np.testing.assert_array_equal(got, want, err_msg=where)
        elif isinstance(want, bool):
            assert isinstance(got, bool) and got == want, f"{where}: {got!r} != {want!r}"
        elif isinstance(want, int):
            assert isinstance(got, int) and not isinstance(got, bool) and got == want, f"{where}: {got!r} != {want!r}"
        elif isinstance(want, float):
            assert isinstance(got, float), f"{where}: {got!r} is not a float"
            assert abs(got - want) <= 1e-5 * abs(want) + 1e-6, f"{where}: {got!r} != {want!r}"
        else:
            raise AssertionError(f"{where}: unexpected reference output {want!r}")


def export_reused(model: torch.nn.Module, example_inputs: tuple, **options: Any) -> Any:
    """`dycl_iree.export` with the whole-export cache on, for fixtures that only need the bundle of an
    unpatched exporter (the zoo's large models: their lowering is most of a warm export, BlockDrop's
    ~1 min). The key holds a hash of the exporter's source, so a change to it exports afresh."""
    saved = os.environ.get("DYCL_IREE_EXPORT_CACHE")
    os.environ["DYCL_IREE_EXPORT_CACHE"] = "1"
    try:
        return dycl_iree.export(model, example_inputs, **options)
    finally:
        if saved is None:
            del os.environ["DYCL_IREE_EXPORT_CACHE"]
        else:
            os.environ["DYCL_IREE_EXPORT_CACHE"] = saved


def export_compiled(tmp_path: Path, model: torch.nn.Module, example: tuple, name: str, dynamic_shapes: Any = None):
    """Export `model` and check it got the compiled host: (bundle, the scripted model, a compiled-host
    runner, a Python-host runner that records the decisions it takes)."""
    model = model.eval()
    bundle = dycl_iree.export(model, example, dynamic_shapes=dynamic_shapes)
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / f"{name}.dycl")
    compiled, python = dycl_iree.load(path, host="compiled"), dycl_iree.load(path, host="python", record=True)
    return bundle, torch.jit.script(model), compiled, python


def assert_same(got: Any, want: Any) -> None:
    """A host's outputs are the scripted model's: structure (None, dicts in key order, NamedTuples
    by name and fields, lists, tuples), tensor shapes and dtypes exactly, values within 1e-5."""
    if want is None:
        assert got is None, got
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), (got, want)
        for key in want:
            assert_same(got[key], want[key])
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), (got, want)
        if hasattr(want, "_fields"):  # a NamedTuple comes back as one, with the model's names
            assert type(got).__name__ == type(want).__name__ and got._fields == want._fields, (got, want)
        for g, w in zip(got, want):
            assert_same(g, w)
    elif isinstance(want, torch.Tensor):
        assert tuple(np.shape(got)) == tuple(want.shape), (np.shape(got), want.shape)
        assert np.asarray(got).dtype == want.numpy().dtype, (np.asarray(got).dtype, want.dtype)
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5, atol=1e-5)
    elif isinstance(want, float):  # a float read back from a float32 tensor
        assert type(got) is float and got == pytest.approx(want, rel=1e-5, abs=1e-6), (got, want)
    else:
        assert type(got) is type(want) and got == want, (got, want)


def check_hosts(scripted: Any, hosts: list, inputs: tuple) -> Any:
    """Run `inputs` through the scripted model and every host; each host's outputs equal PyTorch's."""
    with torch.no_grad():
        want = scripted(*inputs)
    arrays = tuple(i.numpy() if isinstance(i, torch.Tensor) else i for i in inputs)
    for host in hosts:
        assert_same(host(*arrays), want)
    return want


def check_hosts_raise(scripted: Any, hosts: list, inputs: tuple, message: str, host_message: str = "") -> None:
    """PyTorch raises `message` (a pattern) on `inputs`, and every host raises `ModelRaised` with it
    (or with `host_message`, where a host says more than PyTorch)."""
    with pytest.raises(RuntimeError, match=message):
        with torch.no_grad():
            scripted(*inputs)
    arrays = tuple(i.numpy() if isinstance(i, torch.Tensor) else i for i in inputs)
    for host in hosts:
        with pytest.raises(dycl_iree.ModelRaised, match=host_message or message):
            host(*arrays)


def run_without_torch(script: Path, *arguments: str) -> Any:
    """Run `script` (which starts with `NO_TORCH_GUARD`) in a fresh Python on `arguments`, from the
    repository's root with nothing but it on the path; assert it exits 0 and return the run."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, str(script), *arguments],
        capture_output=True,
        text=True,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result


# `make test` runs the files on two workers, a file whole on one (`--dist loadfile`), handed out in
# collection order; started last, a long file keeps one worker busy while the other has nothing left.
# So the long ones go first: the files with a test marked slow that runs (`make test-all`: minutes
# each with a cold compile cache), then these, the longest of `make test` with a cold cache, as CI
# has it (C builds, zoo exports, subprocesses that install or run the package), longest first; the
# rest keep their order.
LONGEST_FIRST = (
    "test_c_embedding.py",
    "test_zoo_export.py",
    "test_real_code.py",
    "test_fuzz_smoke.py",
    "test_data_dependent_sizes.py",
    "test_packed_sequence.py",
    "test_readme.py",
    "test_tacotron2.py",
    "test_runtime_no_torch.py",
    "test_newcomer.py",
    "test_packaging.py",
    "test_zoo_models.py",
)


@pytest.hookimpl(trylast=True)  # after `-m` has deselected: only the tests that run decide the order
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    with_slow = {item.path for item in items if item.get_closest_marker("slow")}
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: (item.path not in with_slow, rank.get(item.path.name, len(rank))))
