"""`Optional` inputs of `forward` whose example is None.

Recurrent cells and decoders take a state that the first call leaves out (`def forward(self, x,
state: Optional[Tensor] = None)`, `if state is None: state = zeros`). Exported with the example
`(x, None)`, the bundle is specialized to None there, as it is to an example's dtype and rank: the
`is None` test folds, neither host takes the input (`main` has no argument for it), the manifest
records it as `{"kind": "none", "declared": "Optional[Tensor]"}`, and a call passes None or leaves
it out where `forward` defaults it to None. A tensor there is refused, naming the input and saying to
export with a tensor example; exported with a tensor example instead, the input is typed by it and
a call with None is refused. Each model runs on both hosts against PyTorch, the Python host's
records showing the paths taken.
"""

# The models keep the published code's idioms (`typing.Optional`).
# ruff: noqa: UP006, UP007, UP045

from __future__ import annotations

import json
import shutil
import textwrap
from typing import Optional, Tuple

import numpy as np
import pytest
import torch
import torch.nn as nn

import dycl_iree
from dycl_iree.cli import main as cli_main
from dycl_iree.emit_c import describe_bundle, header
from dycl_iree.errors import SpecializeError
from host_runtime.bundle_format import MANIFEST
from host_runtime.errors import InputError
from tests.conftest import NO_TORCH_GUARD, assert_same, run_without_torch
from tests.conftest import export_compiled as _export


class GatedCell(nn.Module):
    """A recurrent cell whose state the first call leaves out, with a data-dependent gate after it."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.input = nn.Linear(dim, dim)
        self.hidden = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, state: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        if state is None:
            state = torch.zeros_like(x)
        h = torch.tanh(self.input(x) + self.hidden(state))
        if bool(h.sum() > 0):
            out = h * 2.0
        else:
            out = -h
        return out, h


class Decoder(nn.Module):
    """A decode loop whose state input is None at the start of a sequence, set in its first step
    (`if state is None`) and returned; with no step taken it stays None, as PyTorch returns it."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.step = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, state: Optional[torch.Tensor], steps: int) -> Optional[torch.Tensor]:
        for _ in range(steps):
            if state is None:
                state = torch.tanh(self.step(x))
            else:
                state = torch.tanh(self.step(state) + x)
            if bool(state.abs().max() > 0.95):
                break
        return state


class Limited(nn.Module):
    """An `Optional[int]` limit that defaults to None (no limit)."""

    def forward(self, x: torch.Tensor, limit: Optional[int] = None) -> torch.Tensor:
        if limit is None:
            return x * 2.0
        return x[:limit] * 3.0


def _want(scripted, *inputs):
    with torch.no_grad():
        return scripted(*inputs)


def _inputs(*values):
    return tuple(v.numpy() if isinstance(v, torch.Tensor) else v for v in values)


def test_an_optional_state_exported_as_none_is_no_input_of_either_host(tmp_path):
    torch.manual_seed(0)
    bundle, scripted, compiled, python = _export(tmp_path, GatedCell(), (torch.randn(1, 4), None), "cell")
    assert bundle.manifest["inputs"] == [
        {"name": "x", "kind": "tensor", "dtype": "float32", "shape": [1, 4]},
        {"name": "state", "kind": "none", "declared": "Optional[Tensor]", "default_none": True},
    ]
    assert [value.name for value in bundle.program.inputs] == ["x"]  # `main` takes x only
    assert "state: Optional[Tensor], exported as None" in bundle.files["program.txt"].decode()
    signs = set()
    for seed in range(8):
        x = torch.randn(1, 4, generator=torch.Generator().manual_seed(seed))
        want = _want(scripted, x, None)
        signs.add(bool(want[1].sum() > 0))
        for host in (compiled, python):
            assert_same(host(*_inputs(x, None)), want)
            assert_same(host(*_inputs(x)), want)  # forward defaults it to None
            assert_same(host(x=x.numpy()), want)
            assert_same(host(x=x.numpy(), state=None), want)
    assert signs == {True, False}
    (label,) = python.decisions
    assert set(python.decisions[label]) == {True, False}
    for host in (compiled, python):
        with pytest.raises(InputError, match=r"input 1 \('state'\) was exported as None.*export with a tensor example"):
            host(np.ones((1, 4), np.float32), np.ones((1, 4), np.float32))
        with pytest.raises(InputError, match="takes 1 to 2 inputs"):
            host(np.ones((1, 4), np.float32), None, None)
    assert [(port.name, port.kind) for port in compiled.inputs] == [("x", "tensor"), ("state", "none")]
    _check_the_format_version_of_an_input_exported_as_none(tmp_path / "cell.dycl", tmp_path)


def _check_the_format_version_of_an_input_exported_as_none(path, tmp_path):
    """Such a bundle is format version 3: a runtime that reads only version 2 refuses it by that
    number (not as a corrupt manifest), and a version-2 manifest that holds such an input is corrupt."""
    import host_runtime.bundle_format as bundle_format

    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["version"] == 3
    original = bundle_format.READABLE_VERSIONS
    bundle_format.READABLE_VERSIONS = (2,)
    try:
        with pytest.raises(dycl_iree.BundleError) as caught:
            dycl_iree.load(path)
    finally:
        bundle_format.READABLE_VERSIONS = original
    assert "bundle format version 3, but this runtime reads version 2 (version 3 adds inputs exported as None)" in str(
        caught.value
    )
    older = shutil.copytree(path, tmp_path / "as_version_2.dycl")
    manifest["version"] = 2
    (older / MANIFEST).write_text(json.dumps(manifest))
    corrupt = r"corrupt manifest \(inputs\[1\] is exported as None, which format version 2 has not"
    with pytest.raises(dycl_iree.BundleError, match=corrupt):
        dycl_iree.load(older)


def test_the_same_cell_exported_with_a_state_takes_one_and_refuses_none(tmp_path):
    torch.manual_seed(0)
    bundle, scripted, compiled, python = _export(
        tmp_path, GatedCell(), (torch.randn(1, 4), torch.randn(1, 4)), "cell_state"
    )
    assert [spec["kind"] for spec in bundle.manifest["inputs"]] == ["tensor", "tensor"]
    assert bundle.manifest["version"] == 2  # loads in runtimes that read only version 2
    for seed in range(4):
        generator = torch.Generator().manual_seed(seed)
        x, state = torch.randn(1, 4, generator=generator), torch.randn(1, 4, generator=generator)
        for host in (compiled, python):
            assert_same(host(*_inputs(x, state)), _want(scripted, x, state))
    for host in (compiled, python):
        with pytest.raises(InputError, match=r"input 1 \('state'\) must be a tensor/array, got None.*export with None"):
            host(np.ones((1, 4), np.float32), None)


def test_a_decoder_state_that_starts_as_a_none_input_is_carried_through_its_loop(tmp_path):
    torch.manual_seed(1)
    bundle, scripted, compiled, python = _export(tmp_path, Decoder(), (torch.randn(1, 4), None, 3), "decoder")
    assert [spec["kind"] for spec in bundle.manifest["inputs"]] == ["tensor", "none", "int"]
    assert bundle.manifest["inputs"][1]["default_none"] is False  # no default: a call passes None
    outcomes = set()
    for steps, scale in ((0, 1.0), (1, 1.0), (4, 0.1), (6, 10.0)):
        x = torch.randn(1, 4, generator=torch.Generator().manual_seed(steps)) * scale
        want = _want(scripted, x, None, steps)
        outcomes.add(want is None)
        for host in (compiled, python):
            assert_same(host(*_inputs(x, None, steps)), want)
    assert outcomes == {True, False}  # no step leaves the state None, as PyTorch returns it
    trips = [count for counts in python.trip_counts.values() for count in counts]
    assert 0 in trips and max(trips) > 1
    for host in (compiled, python):
        with pytest.raises(InputError, match="needs input 'state'"):
            host(x=np.ones((1, 4), np.float32), steps=2)


def test_an_optional_int_is_none_or_typed_by_its_example(tmp_path):
    x = torch.arange(6.0)
    _, scripted, compiled, python = _export(tmp_path, Limited(), (x, None), "unlimited")
    for host in (compiled, python):
        assert_same(host(x.numpy()), _want(scripted, x))
        with pytest.raises(InputError, match=r"\('limit'\) was exported as None.*export with a int example"):
            host(x.numpy(), 2)
    bundle, scripted, compiled, python = _export(tmp_path, Limited(), (x, 4), "limited")
    assert bundle.manifest["inputs"][1]["kind"] == "int"
    for limit in (1, 4, 6):
        for host in (compiled, python):
            assert_same(host(x.numpy(), limit), _want(scripted, x, limit))


def test_none_for_an_input_that_is_not_optional_is_refused_naming_it():
    with pytest.raises(SpecializeError, match="example input 'x' is None, but .* declares it Tensor"):
        dycl_iree.export(GatedCell().eval(), (None, None))


def test_the_c_function_takes_no_parameter_for_an_input_exported_as_none(tmp_path):
    torch.manual_seed(0)
    bundle, _, _, _ = _export(tmp_path, GatedCell(), (torch.randn(1, 4), None), "cell_c")
    described = describe_bundle(tmp_path / "cell_c.dycl")
    assert [value.name for value in described.inputs] == ["x"]
    text = header(described)
    assert "(state: Optional[Tensor], exported as None: no parameter" in text
    assert "const float* x," in text and "state" not in text.split("_run(")[1].split(";")[0]


_NO_TORCH = NO_TORCH_GUARD + textwrap.dedent(
    """    import numpy as np
    import host_runtime

    bundle, inputs_file, outputs_file, host = sys.argv[1:5]
    x = np.load(inputs_file)["x"]
    run = host_runtime.load(bundle, host=host)
    first, second = run(x), run(x, None)
    try:
        run(x, x)
    except host_runtime.InputError as error:
        refused = str(error)
    np.savez(outputs_file, out=first[0], h=first[1], same=np.array(np.array_equal(first[0], second[0])))
    assert "torch" not in sys.modules and "exported as None" in refused, refused
    """
)


def test_host_runtime_without_torch_runs_a_bundle_with_an_input_exported_as_none(tmp_path):
    torch.manual_seed(0)
    bundle, scripted, _, _ = _export(tmp_path, GatedCell(), (torch.randn(1, 4), None), "cell_edge")
    script, inputs, outputs = tmp_path / "edge.py", tmp_path / "in.npz", tmp_path / "out.npz"
    script.write_text(_NO_TORCH)
    x = torch.randn(1, 4)
    np.savez(inputs, x=x.numpy())
    want = _want(scripted, x)
    for host in ("compiled", "python"):
        run_without_torch(script, str(tmp_path / "cell_edge.dycl"), str(inputs), str(outputs), host)
        got = np.load(outputs)
        assert bool(got["same"])
        assert_same(got["out"], want[0])
        assert_same(got["h"], want[1])


def cell_with_steps():
    """A factory for the command line: the state is exported as None, the step count is an input."""
    return Decoder(), (torch.ones(1, 4) * 0.1, None, 2)


def test_the_command_line_reads_no_value_for_an_input_exported_as_none(tmp_path, capsys):
    torch.manual_seed(1)
    bundle = tmp_path / "decoder.dycl"
    assert cli_main(["export", f"{__file__}:cell_with_steps", "-o", str(bundle)]) == 0
    capsys.readouterr()
    assert cli_main(["inspect", str(bundle)]) == 0
    text = capsys.readouterr().out
    assert "state: None (exported as None; Optional[Tensor])" in text
    assert cli_main(["run", str(bundle)]) == 0  # the stored example inputs hold x and steps only
    assert "compiled host" in capsys.readouterr().out
    assert cli_main(["run", str(bundle), "--input=1x4xf32=0.1,0.2,0.3,0.4", "--input=3"]) == 0
    assert "output: float32[1, 4]" in capsys.readouterr().out
