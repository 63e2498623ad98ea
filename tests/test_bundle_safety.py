"""A bundle opens only files inside its own folder, and a tampered manifest is refused with a BundleError."""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

import dycl_iree
from host_runtime.bundle_format import MANIFEST, manifest_sha256


@pytest.fixture
def bundle_copy(exported, tmp_path: Path) -> Path:
    target = tmp_path / "inner" / "copy.dycl"
    shutil.copytree(exported("early_exit").path, target)
    return target


@pytest.fixture(scope="module")
def python_only_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle whose vmfb has no `main`: the exporter's fallback, forced for a model that has a compiled host."""
    export_module = importlib.import_module("dycl_iree.pipeline")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DYCL_IREE_EXPORT_CACHE", "0")  # the whole-export cache would return the compiled host
        patch.setattr(export_module, "_add_compiled_host", lambda program, lowered: ("not built for this test", ""))
        from models import programs

        model, example_inputs = programs.early_exit()[:2]
        bundle = dycl_iree.export(model, example_inputs)
    assert bundle.host == "python"
    return bundle.save(tmp_path_factory.mktemp("python_only") / "python_only.dycl")


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    manifest = json.loads((path / MANIFEST).read_text())
    change(manifest)
    (path / MANIFEST).write_text(json.dumps(manifest))


def _load_error(path: Path, **kwargs: Any) -> str:
    with pytest.raises(dycl_iree.BundleError) as caught:
        dycl_iree.load(path, **kwargs)
    return str(caught.value)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rename_vmfb(manifest: dict[str, Any], name: str) -> None:
    """Point the target's vmfb at `name`, with the listed hash and size of the real one."""
    manifest["files"][name] = manifest["files"].pop("llvm-cpu.vmfb")
    manifest["targets"]["llvm-cpu"]["file"] = name


def test_a_vmfb_named_with_dot_dot_is_refused_even_when_its_hash_matches(bundle_copy: Path) -> None:
    outside = bundle_copy.parent.parent / "x.vmfb"
    shutil.copy(bundle_copy / "llvm-cpu.vmfb", outside)  # the same bytes: the hash check alone would pass
    _edit(bundle_copy, lambda m: _rename_vmfb(m, "../../x.vmfb"))
    message = _load_error(bundle_copy)
    assert MANIFEST in message and "'../../x.vmfb'" in message and "inside its folder" in message


def test_an_absolute_vmfb_path_is_refused(bundle_copy: Path) -> None:
    outside = bundle_copy.parent / "abs.vmfb"
    shutil.copy(bundle_copy / "llvm-cpu.vmfb", outside)
    _edit(bundle_copy, lambda m: _rename_vmfb(m, str(outside)))
    message = _load_error(bundle_copy)
    assert MANIFEST in message and "absolute path" in message


def test_a_python_host_outside_the_bundle_is_never_executed(bundle_copy: Path) -> None:
    marker = bundle_copy.parent / "ran"
    evil = bundle_copy.parent / "evil_host.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")

    def point_at_evil(manifest: dict[str, Any]) -> None:
        manifest["files"]["../evil_host.py"] = {"size": evil.stat().st_size, "sha256": _sha256(evil)}
        manifest["python_host"] = "../evil_host.py"

    _edit(bundle_copy, point_at_evil)
    message = _load_error(bundle_copy, host="python")
    assert "'../evil_host.py'" in message and "inside its folder" in message
    assert not marker.exists()


def test_a_vmfb_that_is_a_symlink_out_of_the_folder_is_refused(bundle_copy: Path) -> None:
    vmfb = bundle_copy / "llvm-cpu.vmfb"
    outside = bundle_copy.parent / "elsewhere.vmfb"
    shutil.move(vmfb, outside)
    vmfb.symlink_to(outside)  # same bytes, same hash: only the location is wrong
    message = _load_error(bundle_copy)
    assert "llvm-cpu.vmfb" in message and "outside the bundle folder" in message


def test_a_symlink_to_the_bundle_folder_itself_loads(bundle_copy: Path, tmp_path: Path) -> None:
    link = tmp_path / "link.dycl"
    link.symlink_to(bundle_copy, target_is_directory=True)
    x = np.full((1, 8), 3.0, np.float32)
    np.testing.assert_allclose(dycl_iree.load(link)(x)[0], dycl_iree.load(bundle_copy)(x)[0])


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda manifest: manifest.pop(key)


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda manifest: manifest.__setitem__(key, value)


def _set_input_dtype(manifest: dict[str, Any]) -> None:
    manifest["inputs"][0]["dtype"] = "float22"


def _set_segment_output_dtype(manifest: dict[str, Any]) -> None:
    manifest["segments"][0]["outputs"][0]["dtype"] = "float22"


def _target_without_file(manifest: dict[str, Any]) -> None:
    del manifest["targets"]["llvm-cpu"]["file"]


def _size_as_text(manifest: dict[str, Any]) -> None:
    manifest["files"]["llvm-cpu.vmfb"]["size"] = "12"


def _tree_past_the_leaves(manifest: dict[str, Any]) -> None:
    manifest["outputs"]["tree"] = [0, 7]


TAMPERED = {
    "no segments": (_drop("segments"), "no 'segments'"),
    "no python_host": (_drop("python_host"), "no 'python_host'"),
    "files as an empty list": (_set("files", []), "'files' must be dict"),
    "files empty": (_set("files", {}), "'files' is empty"),
    "version as a string": (_set("version", "1"), "'version' must be an int, not '1'"),
    "no main_abi": (_drop("main_abi"), "no 'main_abi'"),
    "main_abi as a string": (_set("main_abi", "2"), "'main_abi' must be int, not '2'"),
    "main_abi zero": (_set("main_abi", 0), "'main_abi' must be a calling convention number"),
    "unknown input dtype": (_set_input_dtype, "inputs[0].dtype 'float22'"),
    "unknown segment dtype": (_set_segment_output_dtype, "segments[0].outputs[0].dtype 'float22'"),
    "host neither compiled nor python": (_set("host", "gpu"), "'host' must be one of"),
    "inputs not a list": (_set("inputs", {"x": 1}), "'inputs' must be list"),
    "target without a file": (_target_without_file, "no 'file' in targets['llvm-cpu']"),
    "size as text": (_size_as_text, "files['llvm-cpu.vmfb'].size must be int"),
    "output tree past the leaves": (_tree_past_the_leaves, "outputs.tree[1] names leaf 7"),
    "python host not listed": (_set("python_host", "other.py"), "'python_host' names 'other.py'"),
}


@pytest.mark.parametrize("name", list(TAMPERED))
def test_a_tampered_manifest_is_a_bundle_error_naming_the_problem(bundle_copy: Path, name: str) -> None:
    change, expected = TAMPERED[name]
    _edit(bundle_copy, change)
    for host in ("compiled", "python"):
        message = _load_error(bundle_copy, host=host)
        assert str(bundle_copy / MANIFEST) in message and "corrupt manifest" in message, message
        assert expected in message, message


def test_compiled_host_claimed_while_the_manifest_says_it_was_not_built(python_only_bundle: Path, tmp_path) -> None:
    copy = shutil.copytree(python_only_bundle, tmp_path / "claimed.dycl")
    _edit(copy, _set("host", "compiled"))
    message = _load_error(copy)
    assert "corrupt manifest" in message and "not built for this test" in message


def test_compiled_host_claimed_on_a_vmfb_without_main(python_only_bundle: Path, tmp_path) -> None:
    copy = shutil.copytree(python_only_bundle, tmp_path / "claimed.dycl")
    _edit(copy, lambda m: m.update(host="compiled", compiled_host_unsupported=None))
    message = _load_error(copy)
    assert "llvm-cpu.vmfb" in message and "no function main" in message
    # The Python host of the same bundle still runs, and agrees with PyTorch.
    from models import programs

    model = programs.early_exit()[0]
    x = torch.full((1, 8), 3.0)
    got = dycl_iree.load(copy, host="python")(x.numpy())
    np.testing.assert_allclose(got[0], model(x)[0].detach().numpy(), rtol=1e-5)


def test_a_pinned_bundle_loads_only_with_its_manifest(bundle_copy: Path) -> None:
    pin = manifest_sha256(bundle_copy)
    assert pin == _sha256(bundle_copy / MANIFEST)
    run = dycl_iree.load(bundle_copy, expected_sha256=pin)
    x = torch.full((1, 8), -3.0)
    assert len(run(x.numpy())) == 2
    assert "pinned" in _load_error(bundle_copy, expected_sha256="0" * 64)
    _edit(bundle_copy, lambda m: m.update(model="renamed"))  # any change to the manifest breaks the pin
    message = _load_error(bundle_copy, expected_sha256=pin)
    assert MANIFEST in message and "pinned" in message
