"""The model zoo, in PyTorch alone: every model scripts, and its SAMPLES take every path.

The exporter's end-to-end tests verify each bundle against the scripted model on the model's
SAMPLES and rely on them to drive every branch side and loop exit. This file is what makes that
true: for every zoo model it checks that `torch.jit.script` accepts it, that the scripted copy
answers exactly like eager PyTorch on every sample, that the path information each forward returns
(exit index, gate vector, keep mask, token sequence) shows every exit / gate value / loop exit
taken, and that every decision had room to spare (so a compiled copy cannot flip it by rounding).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

import models
from models import ZOO, parameter_count
from models.calibrate import MIN_MARGIN, decision_margins
from models.skipnet import build_skipnet

# What each model's path information is, and for early-exit models how many exits it has.
EXIT_COUNTS = {
    "sdn_resnet56": 7,
    "sdn_resnet56_view": 7,
    "sdn_vgg16_bn": 7,
    "sdn_mobilenet": 7,
    "sdn_wide_resnet32_4": 7,
    "ranet": 3,
    "ranet_predictions": 3,
}
GATE_COUNTS = {
    "skipnet_ff_resnet38": 18,
    "skipnet_rnn_resnet38": 18,
    "skipnet_lstm_resnet38": 18,
    "blockdrop_resnet110": 54,
    "blockdrop_downsample_resnet110": 54,
}
DECODERS = {"show_attend_tell", "transformer_translator"}
NAMES = sorted(ZOO)


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """One intra-op thread: these tensors are tiny, and on a busy 2-core machine a second spinning
    OpenMP thread made this file 4x slower (46 s against 12 s)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@dataclass(frozen=True)
class Built:
    model: nn.Module
    example: tuple
    scripted: torch.jit.ScriptModule
    samples: list[tuple]
    outputs: list[object]  # the eager model's output on each sample


@functools.cache
def built(name: str) -> Built:
    """Everything the tests need about one zoo model, built once per test session."""
    model, example = ZOO[name].build()
    scripted = script(model)
    samples = ZOO[name].samples()
    with torch.no_grad():
        outputs = [model(*sample) for sample in samples]
    return Built(model, example, scripted, samples, outputs)


def script(model: nn.Module) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 deprecates torch.jit.script
        return torch.jit.script(model)


def run_scripted(scripted: torch.jit.ScriptModule, sample: tuple) -> object:
    """Run the scripted graph as written: the exporter consumes that graph, not the profiling
    executor's re-optimised copy, and skipping those passes saves seconds per model."""
    with torch.no_grad(), torch.jit.optimized_execution(False):
        return scripted(*sample)


def assert_same(eager: object, scripted: object, where: str) -> None:
    """Same structure; tensors of equal dtype and shape, floats within float32 noise, the rest exact."""
    assert type(eager) is type(scripted), f"{where}: {type(eager).__name__} vs {type(scripted).__name__}"
    if isinstance(eager, (tuple, list)):
        assert len(eager) == len(scripted), where
        for index, (left, right) in enumerate(zip(eager, scripted)):
            assert_same(left, right, f"{where}[{index}]")
    elif isinstance(eager, Tensor):
        assert eager.dtype == scripted.dtype and eager.shape == scripted.shape, where
        if eager.is_floating_point():
            torch.testing.assert_close(scripted, eager, rtol=1e-5, atol=1e-6, msg=where)
        else:
            assert torch.equal(eager, scripted), where
    else:
        assert eager == scripted, where


def test_every_model_has_a_coverage_rule() -> None:
    assert set(NAMES) == set(EXIT_COUNTS) | set(GATE_COUNTS) | DECODERS


@pytest.mark.parametrize("name", NAMES)
def test_scripted_matches_eager_on_every_sample(name: str) -> None:
    zoo_model = built(name)
    assert not zoo_model.model.training, "factories must return eval-mode models"
    assert 1 <= len(zoo_model.samples) <= 8
    for index, (sample, expected) in enumerate(zip(zoo_model.samples, zoo_model.outputs)):
        assert_same(expected, run_scripted(zoo_model.scripted, sample), f"{name} sample {index}")


@pytest.mark.parametrize("name", NAMES)
def test_example_inputs_match_first_sample(name: str) -> None:
    """The factory's example inputs are the first sample, so export and verification agree on shapes."""
    zoo_model = built(name)
    assert len(zoo_model.example) == len(zoo_model.samples[0])
    for left, right in zip(zoo_model.example, zoo_model.samples[0]):
        assert torch.equal(left, right)


@pytest.mark.parametrize("name", sorted(EXIT_COUNTS))
def test_samples_take_every_exit(name: str) -> None:
    zoo_model = built(name)
    # `(logits, exit_index)`, or the list of predictions made so far (RANet's own form).
    exits = [len(output) - 1 if isinstance(output, list) else output[1] for output in zoo_model.outputs]
    assert getattr(zoo_model.model, "num_heads", 2) + 1 == EXIT_COUNTS[name]
    assert sorted(set(exits)) == list(range(EXIT_COUNTS[name])), f"exits taken: {exits}"


@pytest.mark.parametrize("name", sorted(GATE_COUNTS))
def test_samples_flip_every_gate(name: str) -> None:
    """Every gate is its own branch in the exported program, so each must run on some sample and
    skip on another: one gate that never changes leaves a branch side the verification never sees."""
    gates = torch.stack([gate_vector for _, gate_vector in built(name).outputs])
    assert gates.shape[1] == GATE_COUNTS[name]
    assert gates.dtype == torch.float32 and set(gates.unique().tolist()) <= {0.0, 1.0}
    never_ran = (gates.max(dim=0).values == 0).nonzero().flatten().tolist()
    always_ran = (gates.min(dim=0).values == 1).nonzero().flatten().tolist()
    assert not never_ran and not always_ran, f"blocks never run: {never_ran}; blocks always run: {always_ran}"


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_samples_leave_the_decoding_loop_both_ways(name: str) -> None:
    model, outputs = built(name).model, built(name).outputs
    ended = [tokens for tokens in outputs if int(tokens[-1]) == model.end_token and len(tokens) < model.max_length]
    capped = [tokens for tokens in outputs if int(tokens[-1]) != model.end_token and len(tokens) == model.max_length]
    assert ended, "no sample stopped on the end token before the cap"
    assert capped, "no sample reached the length cap"
    assert any(len(tokens) > 1 for tokens in ended), "the end token only ever came first"
    for tokens in outputs:
        assert tokens.dtype == torch.int64 and tokens.dim() == 1
        assert (tokens[:-1] != model.end_token).all(), "decoding went on after the end token"


@pytest.mark.parametrize("name", NAMES)
def test_every_decision_has_a_margin(name: str) -> None:
    zoo_model = built(name)
    for index, sample in enumerate(zoo_model.samples):
        _, margins = decision_margins(zoo_model.model, sample)
        assert margins, f"{name} sample {index} made no decision"
        assert min(margins) >= MIN_MARGIN, f"{name} sample {index}: a decision is {min(margins):.2e} from flipping"


@pytest.mark.parametrize("name", NAMES)
def test_parameter_budget(name: str) -> None:
    limit = 1_000_000 if name.startswith("sdn_") else 1_500_000
    assert parameter_count(built(name).model) < limit


@pytest.mark.parametrize("name", ["ranet", "skipnet_rnn_resnet38", "transformer_translator"])
def test_factories_are_deterministic(name: str) -> None:
    """A bundle exported in one process is verified against a model rebuilt in another."""
    first = built(name)
    second, _ = ZOO[name].build()
    for (key, left), right in zip(first.model.state_dict().items(), second.state_dict().values()):
        assert torch.equal(left, right), key
    for left, right in zip(first.samples, ZOO[name].samples()):
        assert all(torch.equal(a, b) for a, b in zip(left, right))


def test_factories_leave_the_global_rng_alone() -> None:
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    ZOO["ranet"].build()
    ZOO["ranet"].samples()
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("variant", ["ff", "rnn"])
def test_skipnet_resnet110_depth(variant: str) -> None:
    model = build_skipnet(variant, depth=110, width=8)
    assert parameter_count(model) < 1_000_000
    sample = built(f"skipnet_{variant}_resnet38").samples[0]
    with torch.no_grad():
        expected = model(*sample)
    assert expected[1].shape == (54,)
    assert_same(expected, run_scripted(script(model), sample), f"skipnet_{variant} depth 110")


def zoo_imports(path: Path) -> list[str]:
    """Every module of this repository's `models` package that the file at `path` imports ("." for relative)."""
    imported = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names = ["." * node.level + (node.module or "")]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        imported += [name for name in names if name.startswith(".") or name.split(".")[0] == "models"]
    return imported


@pytest.mark.parametrize("module", models.ZOO_MODULES, ids=lambda module: module.__name__)
def test_model_file_loads_on_its_own(module: object) -> None:
    """`python -m dycl_iree export models/FILE.py:FACTORY` loads a file by path, outside the package,
    with the repository root on sys.path (the CLI puts it there).

    So a model file takes what it shares with the others from `models.common`, imported absolutely:
    a relative import has no package to resolve against in a file loaded by path. Model files do not
    import each other (each is one model family, read on its own). TorchScript finds a class's source
    through `sys.modules[cls.__module__]`, so a loader must register the module before scripting.
    """
    path = Path(module.__file__)
    assert set(zoo_imports(path)) <= {"models.common"}, f"{path.name} imports {zoo_imports(path)}"
    unique_name = f"zoo_standalone_{path.stem}"
    spec = importlib.util.spec_from_file_location(unique_name, path)
    assert spec is not None and spec.loader is not None
    standalone = importlib.util.module_from_spec(spec)
    sys.modules[unique_name] = standalone
    try:
        spec.loader.exec_module(standalone)
        assert set(standalone.MODELS) == set(module.MODELS)
        assert set(standalone.SAMPLES) == set(module.SAMPLES)
        for name, factory in standalone.MODELS.items():
            assert getattr(standalone, factory.__name__) is factory, f"{name}: factory is not a module-level function"
        name = min(module.MODELS)  # one model per file is enough to show the file scripts on its own
        model, example = standalone.MODELS[name]()
        assert_same(built(name).outputs[0], run_scripted(script(model), example), f"standalone {name}")
    finally:
        del sys.modules[unique_name]


def test_model_files_load_by_path_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """The CLI's own loader, in a process where nothing of the zoo is imported yet: the first
    `from models.common import ...` then imports the `models` package (and through it every model
    file) while a file loaded by path is still half executed, which this test process, having
    imported the zoo already, never exercises. Every file's first model must give what it gives here."""
    root = Path(models.__file__).resolve().parent.parent
    targets = {
        min(module.MODELS): f"{Path(module.__file__).resolve()}:{min(module.MODELS)}" for module in models.ZOO_MODULES
    }
    program = (
        "import sys, torch\n"
        "torch.set_num_threads(1)\n"
        "from dycl_iree.loading import load_factory\n"
        "outputs = {}\n"
        f"for name, target in {targets!r}.items():\n"
        "    model, example, _, _ = load_factory(target)\n"
        "    with torch.no_grad():\n"
        "        outputs[name] = model(*example)\n"
        "torch.save(outputs, sys.argv[1])\n"
    )
    # The working directory puts the repository root on sys.path, as `python -m dycl_iree` does.
    subprocess.run([sys.executable, "-c", program, str(tmp_path / "outputs.pt")], cwd=root, check=True)
    outputs = torch.load(tmp_path / "outputs.pt", weights_only=False)
    assert set(outputs) == set(targets)
    for name, output in outputs.items():
        assert_same(built(name).outputs[0], output, f"{name} loaded by path in a fresh interpreter")
