"""Every TorchScript scalar op in the compiled host: int, float and bool arithmetic, comparisons,
conversions, `math` functions, `.item()` of each dtype and `not`, on run-time values, both hosts
against PyTorch. The ops come from `dycl_iree.hosts.scalars.SUPPORTED`, the table README lists; a
test checks that each op of that table is exercised here, so the table cannot claim an op no test
runs.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

import dycl_iree
from dycl_iree.hosts.scalars import SUPPORTED
from dycl_iree.program import HostOp, iter_nodes
from host_runtime.errors import ModelRaised

from .conftest import assert_matches, scripted


class IntArithmetic(nn.Module):
    """Ints as counters and indices are written: every int op, and a decision on their results."""

    def forward(self, x: Tensor, a: int, b: int):
        q = a // b
        r = a % b
        scaled = x * float(q + r)
        if q * b + r == a and abs(a) >= max(b, -b):
            scaled = scaled + 1.0
        return (
            scaled,
            a + b, a - b, a * b, q, r, a / b, a**2, b**-1, a**b, -a, abs(a), min(a, b), max(a, b),
            a < b, a <= b, a > b, a >= b, a == b, a != b,
            a & b, a | b, a ^ b, a << 2, a >> 1, float(a), bool(a), not bool(b),
        )  # fmt: skip


class FloatArithmetic(nn.Module):
    """Host floats as schedules and thresholds are written: arithmetic, `math`, conversions."""

    def forward(self, x: Tensor, s: float, t: float, n: int):
        gate = math.exp(-abs(s)) * t
        if gate > 0.25 or math.isnan(s):
            x = x * gate
        return (
            x,
            s + t, s - t, s * t, s / t, s // t, s % t, abs(s) ** t, -s, abs(s), min(s, t), max(s, t),
            s < t, s <= t, s > t, s >= t, s == t, s != t,
            math.sqrt(abs(s)), math.exp(s), math.log(abs(s) + 1.0), math.log10(abs(t) + 1.0),
            math.log1p(abs(s)), math.expm1(s), math.sin(s), math.cos(s), math.tan(s), math.tanh(s),
            math.asin(t / 4.0), math.acos(t / 4.0), math.atan(s), math.sinh(s), math.cosh(s), math.asinh(s),
            math.acosh(abs(s) + 1.0), math.atanh(t / 4.0), math.erf(s), math.fabs(s),
            math.floor(s), math.ceil(s), round(s), int(s), bool(s), math.isnan(s), math.isinf(s),
            n + s, n * s, s - n, n / s, s**n, n < s, s >= n, min(float(n), s),
        )  # fmt: skip


class ReadBack(nn.Module):
    """Values read back from tensors, as adaptive-computation cells write their halting tests."""

    def forward(self, x: Tensor, p: bool, q: bool):
        total = x.sum().item()
        first = int(x.argmax().item())
        hot = (x > 1.0).any().item()
        steps = 0
        while not (x.abs() < 0.5).all().item() and steps < 4:
            x = x * 0.5
            steps += 1
        if not hot and first >= 2:
            x = x + 1.0
        return (
            x, steps, total, first, bool(hot), not hot, int(hot) + first, float(first) * total,
            p and q, p or q, p != q, p == q, not p, int(p) + int(q), float(q),
        )  # fmt: skip


MODELS = {
    "ints": (IntArithmetic, (torch.randn(1, 3), 7, 3)),
    "floats": (FloatArithmetic, (torch.randn(1, 3), 1.5, 0.75, 2)),
    "read_back": (ReadBack, (torch.randn(1, 4), True, False)),
}
SAMPLES = {
    "ints": [(torch.randn(1, 3), a, b) for a, b in [(7, 3), (-7, 3), (7, -3), (-7, -3), (0, 5), (3, 7), (5, 5)]],
    "floats": [
        (torch.randn(1, 3), s, t, n)
        for s, t, n in [(1.5, 0.75, 2), (-2.25, 1.25, 3), (0.3, -3.5, 0), (-0.5, -0.5, -2), (2.0, 3.0, 1)]
    ],
    "read_back": [
        (x, p, q)
        for x in (torch.tensor([[0.1, 0.2, 0.3, 0.05]]), torch.tensor([[3.0, -2.0, 0.4, 1.5]]), torch.full((1, 4), 0.9))
        for p, q in [(True, False), (False, False), (True, True)]
    ],
}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("scalar_ops")
    made: dict[str, tuple] = {}

    def get(name: str) -> tuple[nn.Module, object, Path]:
        if name not in made:
            model_class, example = MODELS[name]
            model = model_class()
            bundle = dycl_iree.export(model, example)
            made[name] = (model, bundle, bundle.save(folder / f"{name}.dycl"))
        return made[name]

    return get


@pytest.mark.parametrize("name", list(MODELS))
def test_scalar_ops_run_in_the_compiled_host_as_pytorch_computes_them(name: str, bundles) -> None:
    model, bundle, path = bundles(name)
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    runs = {host: dycl_iree.load(path, host=host) for host in ("compiled", "python")}
    for index, sample in enumerate(SAMPLES[name]):
        with torch.no_grad():
            want = scripted(model)(*sample)
        for host, run in runs.items():
            assert_matches(run(*sample), want, f"{name} sample {index} ({host} host)")


def test_each_op_of_the_table_is_exercised_here(bundles) -> None:
    """README's table of scalar ops is `SUPPORTED`; each of its ops reaches the compiled host here."""
    seen = set()
    for name in MODELS:
        _, bundle, _ = bundles(name)
        for node in iter_nodes(bundle.program.body):
            if isinstance(node, HostOp):
                seen.add(re.sub(r"\..*", "", node.target))
    missing = sorted(set(SUPPORTED) - seen)
    assert not missing, f"ops of the table no test model reaches: {missing}"


def test_the_decisions_and_the_loop_take_every_path(bundles) -> None:
    model, bundle, path = bundles("read_back")
    run = dycl_iree.load(path, host="python", record=True)
    for sample in SAMPLES["read_back"]:
        run(*sample)
    assert all(set(sides) == {True, False} for sides in run.decisions.values()), dict(run.decisions)
    assert {0, 1, 3} <= {steps for counts in run.trip_counts.values() for steps in counts}


def test_an_int_division_by_zero_fails_the_call_as_torchscript_raises(bundles) -> None:
    model, _, path = bundles("ints")
    with pytest.raises(RuntimeError, match="division by 0"):
        scripted(model)(torch.randn(1, 3), 7, 0)
    for host in ("compiled", "python"):
        with pytest.raises((ModelRaised, ZeroDivisionError), match="division"):
            dycl_iree.load(path, host=host)(torch.randn(1, 3), 7, 0)


def test_readme_lists_exactly_the_supported_ops() -> None:
    """README's table of scalar ops is `SUPPORTED`, neither more nor less."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    table = readme.split("<!-- scalar-ops:")[1].split("<!-- end scalar-ops -->")[0]
    listed = set()
    for line in table.splitlines()[3:]:
        listed |= set(re.findall(r"`(\w+)`", line.split("|")[2]))
    assert listed == {name.split("::")[1] for name in SUPPORTED}
