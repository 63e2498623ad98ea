"""Bundles: the manifest, hashes, and clear errors for every way a bundle can be broken."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import dycl_iree
from host_runtime.bundle_format import MANIFEST, VERSION


@pytest.fixture
def bundle_copy(exported, tmp_path: Path) -> Path:
    source = exported("early_exit").path
    target = tmp_path / "copy.dycl"
    shutil.copytree(source, target)
    return target


def test_manifest_describes_signature_segments_host_and_files(exported) -> None:
    item = exported("early_exit")
    manifest = json.loads((item.path / MANIFEST).read_text())
    assert manifest["version"] == 2  # newer formats only for bundles that hold what they added
    assert manifest["inputs"] == [{"name": "x", "kind": "tensor", "dtype": "float32", "shape": [1, 8]}]
    assert manifest["outputs"]["tree"] == [0, 1]
    assert [leaf["kind"] for leaf in manifest["outputs"]["leaves"]] == ["tensor", "int"]
    assert manifest["host"] == "compiled" and manifest["compiled_host_unsupported"] is None
    assert {"llvm-cpu.vmfb", "host.py", "program.txt"} <= set(manifest["files"])
    assert len(manifest["segments"]) == len(item.bundle.program.segments)
    assert [(d["label"], d["kind"]) for d in manifest["decisions"]] == [("if0", "if")]
    assert manifest["decisions"][0]["source"].endswith("programs.py:" + str(_line_of_exit_test()))


def _line_of_exit_test() -> int:
    """The line of EarlyExit's `if h.mean() > 0.5:` in models/programs.py."""
    from models import programs

    lines = Path(programs.__file__).read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if "if h.mean() > 0.5:" in line)


def _load_error(path: Path, **kwargs) -> str:
    with pytest.raises(dycl_iree.BundleError) as caught:
        dycl_iree.load(path, **kwargs)
    return str(caught.value)


def test_missing_bundle(tmp_path: Path) -> None:
    assert "no such bundle" in _load_error(tmp_path / "nothing.dycl")


def test_interrupted_export_has_no_manifest(bundle_copy: Path) -> None:
    (bundle_copy / MANIFEST).unlink()
    assert "incomplete" in _load_error(bundle_copy)


def test_corrupt_manifest(bundle_copy: Path) -> None:
    (bundle_copy / MANIFEST).write_text("{not json")
    assert "corrupt manifest" in _load_error(bundle_copy)


def test_other_format_version(bundle_copy: Path) -> None:
    manifest = json.loads((bundle_copy / MANIFEST).read_text())
    manifest["version"] = VERSION + 1
    (bundle_copy / MANIFEST).write_text(json.dumps(manifest))
    message = _load_error(bundle_copy)
    assert f"version {VERSION + 1}" in message and "re-export" in message


def test_a_runtime_older_than_the_bundle_refuses_it_by_its_version(bundle_copy: Path, monkeypatch) -> None:
    """A runtime that reads up to version 3 refuses a version-4 bundle naming both versions, what 4
    added and where to get a runtime for it, not as a damaged output tree."""
    import host_runtime.bundle_format as bundle_format

    manifest = json.loads((bundle_copy / MANIFEST).read_text())
    manifest["version"] = 4
    manifest["outputs"]["tree"] = {"ragged_ints": [0, 1]}
    (bundle_copy / MANIFEST).write_text(json.dumps(manifest))
    dycl_iree.load(bundle_copy, host="python")  # this runtime reads it
    monkeypatch.setattr(bundle_format, "READABLE_VERSIONS", (2, 3))
    message = _load_error(bundle_copy)
    assert "bundle format version 4, but this runtime reads version 2 or 3 (version 4 adds outputs that are lists" in (
        message
    ), message
    assert "newer than this runtime" in message and f"dycl_iree {manifest['producer']['dycl_iree']}" in message, message
    assert "corrupt" not in message and "TreeProblem" not in message, message


@pytest.mark.parametrize("node", ["ragged_ints", "zip_lists"])
def test_an_output_tree_that_its_format_version_has_not_is_refused_naming_it(bundle_copy: Path, node: str) -> None:
    manifest = json.loads((bundle_copy / MANIFEST).read_text())
    manifest["version"] = 3
    manifest["outputs"]["tree"] = {node: [0, 1]} if node == "ragged_ints" else {node: [{"unstack": 0}]}
    (bundle_copy / MANIFEST).write_text(json.dumps(manifest))
    message = _load_error(bundle_copy)
    assert f"outputs.tree holds {node!r}, which format version 3 has not" in message, message


def test_the_format_version_is_the_oldest_that_holds_the_bundle() -> None:
    from host_runtime.bundle_format import format_version

    tensor = {"name": "x", "kind": "tensor", "dtype": "float32", "shape": [2]}
    none = {"name": "h", "kind": "none", "declared": "Optional[Tensor]", "default_none": True}
    assert format_version([tensor], [0, {"zip": [{"unstack": 1}]}]) == 2
    assert format_version([tensor, none], [0]) == 3
    assert format_version([tensor, none], [{"zip": [{"ragged_ints": [0, 1]}, {"unstack": 2}]}]) == 4
    assert format_version([tensor], {"optional": [0, {"zip_lists": [{"unstack": 1}]}]}) == 4
    # A model's dict key is no node of the tree.
    assert format_version([tensor], {"dict": [["zip_lists", 0]]}) == 2


def test_a_bundle_from_before_main_abi_2_is_refused_naming_both_versions(bundle_copy: Path) -> None:
    """Format version 1 (its `main` took VM scalars): refused by name, never called with tensors."""
    manifest = json.loads((bundle_copy / MANIFEST).read_text())
    manifest["version"] = 1
    del manifest["main_abi"]
    (bundle_copy / MANIFEST).write_text(json.dumps(manifest))
    for host in ("compiled", "python"):
        message = _load_error(bundle_copy, host=host)
        assert "bundle format version 1, but this runtime reads version 2, 3 or 4" in message, message
        assert "0-d tensors" in message and "re-export" in message


def test_a_compiled_host_of_another_main_abi_is_refused_naming_both(bundle_copy: Path, tmp_path: Path) -> None:
    from dycl_iree.emit_c import emit_c
    from host_runtime.bundle_format import MAIN_ABI

    manifest = json.loads((bundle_copy / MANIFEST).read_text())
    assert manifest["main_abi"] == MAIN_ABI == 2
    manifest["main_abi"] = 4  # 3 is main_abi 2 with a random state (a model that draws random numbers)
    (bundle_copy / MANIFEST).write_text(json.dumps(manifest))
    message = _load_error(bundle_copy)
    assert "calling convention (main_abi) 4, but this runtime passes main_abi 2 or 3" in message, message
    with pytest.raises(dycl_iree.BundleError, match=r"main_abi\) 4, but this runtime passes main_abi 2 or 3"):
        emit_c(bundle_copy, tmp_path)
    # The Python host calls the segments, not `main`: it still runs.
    run = dycl_iree.load(bundle_copy, host="python")
    logits, exit_index = run(np.ones((1, 8), np.float32))
    assert logits.shape == (1, 4) and exit_index in (0, 1)


def test_truncated_vmfb(bundle_copy: Path) -> None:
    vmfb = bundle_copy / "llvm-cpu.vmfb"
    vmfb.write_bytes(vmfb.read_bytes()[:1000])
    message = _load_error(bundle_copy)
    assert "llvm-cpu.vmfb" in message and "truncated" in message


def test_corrupt_vmfb_of_the_right_size(bundle_copy: Path) -> None:
    vmfb = bundle_copy / "llvm-cpu.vmfb"
    data = bytearray(vmfb.read_bytes())
    data[len(data) // 2] ^= 0xFF
    vmfb.write_bytes(bytes(data))
    assert "do not match the manifest's hash" in _load_error(bundle_copy)


def test_tampered_python_host_is_refused(bundle_copy: Path) -> None:
    host = bundle_copy / "host.py"
    host.write_text(host.read_text().replace("return main", "return None"))
    assert "host.py" in _load_error(bundle_copy, host="python")


def test_device_the_bundle_was_not_built_for(bundle_copy: Path) -> None:
    message = _load_error(bundle_copy, device="cuda")
    assert "built for llvm-cpu" in message and "cuda" in message


def test_unknown_device(bundle_copy: Path) -> None:
    assert "unknown device 'tpu'" in _load_error(bundle_copy, device="tpu")


def test_save_replaces_a_bundle_but_not_other_folders(exported, tmp_path: Path) -> None:
    bundle = exported("early_exit").bundle
    path = bundle.save(tmp_path / "b.dycl")
    bundle.save(path)  # replacing a bundle is fine
    other = tmp_path / "notes"
    other.mkdir()
    (other / "important.txt").write_text("keep me")
    with pytest.raises(FileExistsError):
        bundle.save(other)
    assert (other / "important.txt").read_text() == "keep me"


def test_both_drivers_run_the_same_bundle(exported) -> None:
    item = exported("nested_if")
    sample = item.samples()[0]
    outputs = [dycl_iree.load(item.path, device=d)(*sample) for d in ("local-sync", "local-task")]
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-6)


def test_cpu_code_is_split_for_the_threads_asked(tmp_path: Path) -> None:
    """One thread by default (local-sync); `cpu_threads` changes the code, never the results."""
    import torch
    from torch import nn

    class Pooled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(16, 16, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.conv(x)).mean((2, 3))

    torch.manual_seed(0)
    model, x = Pooled().eval(), torch.randn(1, 16, 32, 32)
    expected = model(x).detach().numpy()
    vmfbs = {}
    for threads in (1, 2):
        asked = {"cpu_threads": threads} if threads > 1 else {}  # one thread must be the default
        bundle = dycl_iree.export(model, (x,), **asked)
        flags = bundle.manifest["targets"]["llvm-cpu"]["flags"]
        assert [f for f in flags if "number-of-threads" in f] == [f"--iree-llvmcpu-number-of-threads={threads}"]
        path = bundle.save(tmp_path / f"pooled{threads}.dycl")
        vmfbs[threads] = (path / "llvm-cpu.vmfb").read_bytes()
        for device in ("local-sync", "local-task"):
            np.testing.assert_allclose(dycl_iree.load(path, device=device)(x.numpy()), expected, rtol=1e-5, atol=1e-5)
    assert vmfbs[1] != vmfbs[2]
    with pytest.raises(dycl_iree.DyclError, match="cpu_threads must be a positive int, not 0"):
        dycl_iree.export(model, (x,), cpu_threads=0)


def test_shared_weights_are_stored_once(tmp_path: Path) -> None:
    """One 256x256 weight read by two segments must not be stored twice in the vmfb."""
    import torch
    from torch import nn

    class Reuse(nn.Module):
        def __init__(self, shared: bool) -> None:
            super().__init__()
            self.first = nn.Linear(256, 256)
            self.second = self.first if shared else nn.Linear(256, 256)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.sum() > 0:
                return torch.relu(self.first(x))
            return torch.tanh(self.second(x))

    torch.manual_seed(0)
    sizes = {}
    for shared in (True, False):
        bundle = dycl_iree.export(Reuse(shared).eval(), (torch.randn(1, 256),))
        assert len(bundle.program.segments) == 3
        sizes[shared] = bundle.size()
    weight = 256 * 256 * 4
    assert sizes[False] - sizes[True] > 0.9 * weight, sizes
    assert sizes[True] < 1.5 * weight, sizes
