"""Random ops: an explicit, seedable state that both hosts thread alike (dycl_iree/random_state.py).

The numbers cannot be PyTorch's (its CPU generator's state is not in the bundle), so the tests check
the distributions (means, fractions, ranges), that both hosts draw the same bits for a seed, and,
where a model's paths do not depend on the draw, its outputs against PyTorch.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dycl_iree
from dycl_iree.capture import capture
from dycl_iree.partition import partition
from dycl_iree.program import If, Loop, SegmentCall, iter_nodes
from dycl_iree.reference import ReferenceInterpreter
from dycl_iree.specialize import specialize
from host_runtime.random_state import initial_state

# -- the generator itself (eager, no IREE) ----------------------------------------------------------


def _state(value: int = 0) -> torch.Tensor:
    return torch.from_numpy(initial_state(value))


def test_uniform_is_in_the_unit_interval_with_the_moments_of_one() -> None:
    values, following = torch.ops.dycl.uniform([200, 500], _state())
    assert following.tolist() == [0, 1] and values.dtype == torch.float32
    assert float(values.min()) >= 0.0 and float(values.max()) < 1.0
    assert abs(float(values.mean()) - 0.5) < 0.005 and abs(float(values.var()) - 1 / 12) < 0.002
    counts = torch.histc(values, bins=10, min=0.0, max=1.0)
    assert float((counts / values.numel() - 0.1).abs().max()) < 0.005


def test_normal_has_mean_zero_and_deviation_one() -> None:
    values, _ = torch.ops.dycl.normal([200, 500], _state(3))
    assert torch.isfinite(values).all()
    assert abs(float(values.mean())) < 0.01 and abs(float(values.std()) - 1.0) < 0.01
    assert abs(float((values.abs() < 1.0).float().mean()) - 0.6827) < 0.01  # one sigma


def test_draws_differ_by_state_and_seed_and_are_uncorrelated() -> None:
    first, state = torch.ops.dycl.uniform([10000], _state(0))
    second, _ = torch.ops.dycl.uniform([10000], state)
    other_seed, _ = torch.ops.dycl.uniform([10000], _state(1))
    again, _ = torch.ops.dycl.uniform([10000], _state(0))
    assert torch.equal(first, again)
    for other in (second, other_seed):
        assert not torch.equal(first, other)
        assert abs(float(torch.corrcoef(torch.stack([first, other]))[0, 1])) < 0.05
    assert abs(float(torch.corrcoef(torch.stack([first[:-1], first[1:]]))[0, 1])) < 0.05  # neighbours


def test_bernoulli_dropout_and_integers_follow_their_parameters() -> None:
    state = _state(5)
    p = torch.full((100, 100), 0.3)
    ones, state = torch.ops.dycl.bernoulli(p, state)
    assert set(ones.unique().tolist()) == {0.0, 1.0} and abs(float(ones.mean()) - 0.3) < 0.015
    ones_p, state = torch.ops.dycl.bernoulli_p(torch.zeros(100, 100), 0.8, state)
    assert abs(float(ones_p.mean()) - 0.8) < 0.015
    kept, state = torch.ops.dycl.dropout(torch.ones(100, 100), 0.25, state)
    assert abs(float((kept == 0).float().mean()) - 0.25) < 0.015
    assert torch.allclose(kept[kept != 0], torch.tensor(1 / 0.75))
    channels, state = torch.ops.dycl.feature_dropout(torch.ones(64, 32, 3, 3), 0.5, state)
    per_channel = channels.flatten(2)
    assert torch.equal(per_channel.amin(2), per_channel.amax(2))  # a whole channel kept or dropped
    assert abs(float((per_channel[..., 0] == 0).float().mean()) - 0.5) < 0.04
    integers, state = torch.ops.dycl.randint_low(-3, 4, [10000], state)
    assert integers.dtype == torch.int64 and set(integers.unique().tolist()) == set(range(-3, 4))
    assert abs(float(integers.float().mean())) < 0.06
    zeros, _ = torch.ops.dycl.dropout(torch.ones(4, 4), 1.0, state)
    assert torch.equal(zeros, torch.zeros(4, 4))  # p = 1: PyTorch's zeros, not NaN


def test_dropout_keeps_pytorchs_nan_and_inf() -> None:
    """A dropped NaN is NaN and a dropped inf is NaN (inf * 0), as in PyTorch's `x * mask * scale`."""
    x = torch.tensor([float("nan"), float("inf")] * 50)
    dropped, _ = torch.ops.dycl.dropout(x, 0.5, _state())
    assert torch.isnan(dropped[x.isnan()]).all()
    assert (torch.isnan(dropped) | torch.isinf(dropped)).all()


# -- the Program: the state is a value threaded through branches and loops -------------------------


class _DrawsEverywhere(nn.Module):
    def forward(self, x: torch.Tensor, n: int):
        h = x + torch.rand_like(x)
        for _ in range(n):
            if float(h.sum()) > 0.0:
                h = h + F.dropout(h, 0.5, True)
            h = h * 0.5
        return h, F.dropout(h, 0.5, False)


def test_the_state_is_an_input_a_result_and_carried_by_the_loops_and_ifs_that_draw() -> None:
    program = partition(specialize(capture(_DrawsEverywhere()), (torch.ones(2, 3), 2)))
    assert program.random_state and program.inputs[-1].name == "random_state"
    assert len(program.input_names) == 2 and program.body.results[-1].name == "random_state"
    loop = next(node for node in iter_nodes(program.body) if isinstance(node, Loop))
    branch = next(node for node in iter_nodes(program.body) if isinstance(node, If))
    assert loop.body.params[-1].name == "random_state" and loop.outputs[-1].name == "random_state"
    assert branch.outputs[-1].name == "random_state"
    targets = {op.target for segment in program.segments for op in segment.nodes}
    assert {"dycl::uniform_like", "dycl::dropout"} <= targets
    assert not [t for t in targets if "rand" in t.split("::")[0] or t.startswith(("aten::dropout", "aten::rand"))]
    calls = [node for node in iter_nodes(program.body) if isinstance(node, SegmentCall)]
    assert sum(any(a.name == "random_state" for a in call.args) for call in calls) == 2


def test_a_program_without_random_ops_is_unchanged() -> None:
    program = partition(specialize(capture(_DrawsEverywhere()), (torch.ones(2, 3), 2)))
    plain = partition(specialize(capture(nn.Linear(3, 2)), (torch.ones(2, 3),)))
    assert not plain.random_state and len(plain.inputs) == 1
    assert program.random_state


# -- bundles: both hosts, seeds, the distributions through IREE -------------------------------------


class _Draws(nn.Module):
    """Every supported random op, drawn inside a loop and an `if` of the compiled host. The values
    before the loop differ from each other: four equal `zeros_like(x)` returned from a loop that did
    not run make the compiled host fail with "ref is null" (README's traps), with or without random ops."""

    def forward(self, x: torch.Tensor, n: int):
        u = torch.full_like(x, -1.0)
        z = torch.full_like(x, -2.0)
        b = torch.full_like(x, -3.0)
        d = torch.full_like(x, -4.0)
        r = torch.zeros(3, 5)
        k = torch.zeros(7, dtype=torch.long)
        for _ in range(n):
            if float(x.sum()) > 0.0:
                u = torch.rand_like(x)
                z = torch.randn_like(x)
                b = torch.bernoulli(torch.full_like(x, 0.3))
                d = F.dropout(torch.ones_like(x), 0.25, True)
                r = torch.rand(3, 5)
                k = torch.randint(0, 10, (7,))
        return u, z, b, d, r, k


@pytest.fixture(scope="module")
def draws(tmp_path_factory: pytest.TempPathFactory):
    bundle = dycl_iree.export(_Draws(), (torch.ones(64, 64), 1))
    return bundle, bundle.save(tmp_path_factory.mktemp("random") / "draws.dycl")


def _run(runner, x: torch.Tensor, n: int = 1) -> list[np.ndarray]:
    return [np.asarray(value) for value in runner(x.numpy(), n)]


def test_random_ops_in_a_loop_and_an_if_get_the_compiled_host(draws) -> None:
    bundle, _ = draws
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    manifest = bundle.manifest
    assert manifest["random_state"] is True and manifest["main_abi"] == 3
    assert [spec["name"] for spec in manifest["inputs"]] == ["x", "n"]
    assert len(manifest["outputs"]["leaves"]) == 6


def test_the_compiled_host_draws_the_distributions(draws) -> None:
    _, path = draws
    u, z, b, d, r, k = _run(dycl_iree.load(path, host="compiled", seed=11), torch.ones(64, 64))
    assert u.min() >= 0.0 and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.02
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1.0) < 0.05
    assert set(np.unique(b)) == {0.0, 1.0} and abs(b.mean() - 0.3) < 0.03
    assert abs((d == 0).mean() - 0.25) < 0.03 and np.allclose(d[d != 0], 1 / 0.75)
    assert r.shape == (3, 5) and 0.0 <= r.min() and r.max() < 1.0
    assert k.dtype == np.int64 and k.min() >= 0 and k.max() < 10


def test_both_hosts_draw_the_same_bits_for_a_seed_and_each_call_draws_anew(draws) -> None:
    _, path = draws
    x = torch.ones(64, 64)
    calls = {}
    for host in ("compiled", "python"):
        runner = dycl_iree.load(path, host=host, seed=7)
        calls[host] = [_run(runner, x, n) for n in (1, 2, 1)]
    for compiled, python in zip(calls["compiled"], calls["python"]):
        for a, b in zip(compiled, python):
            np.testing.assert_array_equal(a, b)
    first, second, third = (outputs[0] for outputs in calls["compiled"])
    assert not np.array_equal(first, second) and not np.array_equal(second, third)


def test_a_seed_replays_the_stream_and_another_seed_does_not(draws) -> None:
    _, path = draws
    x = torch.ones(64, 64)
    runner = dycl_iree.load(path, host="compiled", seed=7)
    first = _run(runner, x)[0]
    assert runner.random_state == (7 << 32) + 6  # the seed's word, six draws in one iteration
    runner.seed(7)
    np.testing.assert_array_equal(_run(runner, x)[0], first)
    saved = runner.random_state
    following = _run(runner, x)[0]
    runner.restore_random_state(saved)
    np.testing.assert_array_equal(_run(runner, x)[0], following)
    runner.seed(8)
    assert not np.array_equal(_run(runner, x)[0], first)
    assert dycl_iree.load(path, host="compiled").random_state == 0  # seed 0 unless given


def test_iree_draws_the_reference_interpreters_uniform_bits(draws) -> None:
    """The generator is integer arithmetic and an exact conversion: IREE's uniform, bernoulli, dropout
    and integer draws are PyTorch's eager run of the same dycl:: ops, bit for bit (normal draws go
    through log and cos, whose last bit may differ)."""
    bundle, path = draws
    x = torch.ones(64, 64)
    want = ReferenceInterpreter(bundle.program).run(x, 1, seed=3)
    got = _run(dycl_iree.load(path, host="compiled", seed=3), x)
    for index in (0, 2, 3, 4, 5):
        np.testing.assert_array_equal(got[index], want[index].numpy())
    np.testing.assert_allclose(got[1], want[1].numpy(), rtol=1e-5, atol=1e-5)


def test_no_draw_leaves_the_state_as_it_was(draws) -> None:
    _, path = draws
    runner = dycl_iree.load(path, host="compiled", seed=2)
    before = runner.random_state
    outputs = _run(runner, -torch.ones(64, 64))  # the `if` not taken
    assert runner.random_state == before and (outputs[0] == -1.0).all()
    _run(runner, torch.ones(64, 64), 0)  # the loop not entered
    assert runner.random_state == before


class _MoreDraws(nn.Module):
    """The other supported forms, in an `if`: a dropout rate that is a float input, channel dropout,
    `bernoulli(x, p)`, `normal` around a tensor, `uniform_`, `randint(high, ...)`, `randn(size)`."""

    def forward(self, x: torch.Tensor, p: float):
        outputs = [x, x, x, x, x, x.long(), x]
        if float(x.sum()) > 0.0:
            outputs = [
                F.dropout(torch.ones_like(x), p, True),
                F.dropout2d(torch.ones(64, 64, 2, 2), 0.5, True).flatten(2)[..., 0],
                torch.bernoulli(x, 0.8),
                torch.normal(torch.full_like(x, 3.0), torch.full_like(x, 2.0)),
                torch.empty(64, 64).uniform_(-1.0, 3.0),
                torch.randint(5, (64, 64)),
                torch.randn(64, 64) * 2.0 + torch.normal(x, 0.5),
            ]
        return outputs


def test_the_other_forms_draw_their_distributions_on_both_hosts(tmp_path) -> None:
    bundle = dycl_iree.export(_MoreDraws(), (torch.ones(64, 64), 0.5))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / "more.dycl")
    x = torch.ones(64, 64)
    got = dycl_iree.load(path, host="compiled", seed=9)(x.numpy(), 0.3)
    python = dycl_iree.load(path, host="python", seed=9)(x.numpy(), 0.3)
    want = ReferenceInterpreter(bundle.program).run(x, 0.3, seed=9)
    for index, (a, b, c) in enumerate(zip(got, python, want)):
        np.testing.assert_array_equal(a, b)
        if index in (0, 1, 2, 4, 5):  # uniform bits: the reference's exactly
            np.testing.assert_allclose(a, c.numpy(), rtol=1e-6, err_msg=str(index))
    dropped, channels, ones, normal, uniform, integers, noise = got
    assert abs((dropped == 0).mean() - 0.3) < 0.03 and np.allclose(dropped[dropped != 0], 1 / 0.7)
    assert abs((channels == 0).mean() - 0.5) < 0.03 and set(np.unique(channels)) == {0.0, 2.0}
    assert abs(ones.mean() - 0.8) < 0.03
    assert abs(normal.mean() - 3.0) < 0.1 and abs(normal.std() - 2.0) < 0.1
    assert uniform.min() >= -1.0 and uniform.max() < 3.0 and abs(uniform.mean() - 1.0) < 0.05
    assert set(np.unique(integers)) == set(range(5))
    assert abs(noise.mean() - 1.0) < 0.1 and abs(noise.std() - math.sqrt(4.25)) < 0.1


# -- models: paths that do not depend on the draw, against PyTorch ----------------------------------


class _Prenet(nn.Module):
    """torchaudio's Tacotron2 `_Prenet` as published, dropout on whatever the mode (`training=True`);
    torchaudio's p is 0.5."""

    def __init__(self, in_dim: int, out_sizes: list, p: float) -> None:
        super().__init__()
        in_sizes = [in_dim] + out_sizes[:-1]
        self.layers = nn.ModuleList([nn.Linear(i, o, bias=False) for i, o in zip(in_sizes, out_sizes)])
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear in self.layers:
            x = F.dropout(F.relu(linear(x)), p=self.p, training=True)
        return x


class _PrenetDecoder(nn.Module):
    """Tacotron2's decoder: the prenet in a decode loop that stops on a gate or at a cap."""

    def __init__(self, p: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.prenet = _Prenet(8, [16, 16], p)
        self.project = nn.Linear(16, 8)
        self.gate = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor, n: int):
        frame = x
        frames = x
        for _ in range(n):
            frame = torch.tanh(self.project(self.prenet(frame)))
            frames = frames + frame
            if float(torch.sigmoid(self.gate(frames)).mean()) > 0.47:  # the stop gate
                break
        return frames


_DECODER_INPUTS = [
    torch.zeros(2, 8),
    torch.full((2, 8), 3.0),
    torch.full((2, 8), -3.0),
    torch.linspace(-2, 2, 16).view(2, 8),
]


@pytest.mark.parametrize("p", [0.0, 0.5])
def test_tacotron2s_always_on_dropout_in_a_decode_loop(p: float, tmp_path) -> None:
    """With p = 0 PyTorch's dropout is the identity and every path compares with the model; with
    torchaudio's p = 0.5 the bundle compares with PyTorch running the Program with the bundle's
    generator (the reference interpreter), and the hosts with each other, bit for bit."""
    model = _PrenetDecoder(p).eval()
    bundle = dycl_iree.export(model, (torch.zeros(2, 8), 3))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    assert bundle.manifest["random_state"]
    path = bundle.save(tmp_path / "prenet.dycl")
    compiled = dycl_iree.load(path, host="compiled")
    python = dycl_iree.load(path, host="python", record=True)
    reference = ReferenceInterpreter(bundle.program)
    trips = set()
    for seed, x in enumerate(_DECODER_INPUTS):
        for n in (0, 1, 4):
            compiled.seed(seed)
            python.seed(seed)
            got = compiled(x.numpy(), n)
            np.testing.assert_array_equal(got, python(x.numpy(), n))
            with torch.no_grad():
                want = model(x, n) if p == 0.0 else reference.run(x, n, seed=seed)
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
            trips.add((n, python.trip_counts["loop0"][-1]))
    if p == 0.0:  # the loop not entered, stopped by the gate in its first step, run to its cap
        assert {(0, 0), (4, 1), (4, 4)} <= trips, trips
        assert set(python.decisions["if1"]) == {True, False}


class _PonderHalt(nn.Module):
    """PonderNet: each step halts with probability lambda, drawn with `bernoulli`; with lambda 0 or 1 the
    halting step is decided, so the paths compare with PyTorch."""

    def forward(self, x: torch.Tensor, n: int, lam: float):
        h = x
        steps = 0
        for _ in range(n):
            h = torch.tanh(h) + 0.5
            steps += 1
            halt = torch.bernoulli(torch.full((1,), lam))
            if bool(halt.item() > 0.5):
                break
        return h, steps


def test_pondernets_bernoulli_halting_gets_the_compiled_host(tmp_path) -> None:
    model = _PonderHalt()
    bundle = dycl_iree.export(model, (torch.ones(2, 4), 3, 0.5))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / "ponder.dycl")
    run = dycl_iree.load(path, host="compiled", seed=1)
    for lam, n in ((1.0, 5), (0.0, 5), (0.0, 0)):
        x = torch.ones(2, 4)
        got, steps = run(x.numpy(), n, lam)
        want, want_steps = model(x, n, lam)
        assert steps == want_steps == (min(n, 1) if lam == 1.0 else n)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)
    halted = [run(torch.ones(2, 4).numpy(), 50, 0.5)[1] for _ in range(200)]
    assert 1.7 < np.mean(halted) < 2.3  # a geometric number of steps with mean 1 / lambda = 2


def test_a_manifest_whose_random_state_and_main_abi_disagree_is_refused(draws, tmp_path) -> None:
    import json
    import shutil

    _, path = draws
    copy = Path(shutil.copytree(path, tmp_path / "copy.dycl"))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["main_abi"] = 2
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(dycl_iree.BundleError, match="'random_state' is True but 'main_abi' is 2"):
        dycl_iree.load(copy)


def test_the_command_line_runs_with_a_seed(draws, capsys) -> None:
    from dycl_iree.cli import main

    _, path = draws
    printed = {}
    for host, seed in (("compiled", 3), ("python", 3), ("compiled", 4)):
        assert main(["run", str(path), "--input=64x64xf32=1", "--input=1", "--seed", str(seed), "--host", host]) == 0
        printed[host, seed] = capsys.readouterr().out.split("output[5]")[1].splitlines()[0]
    assert printed["compiled", 3] == printed["python", 3] != printed["compiled", 4]
