"""Values no buffer can hold, and NaN / inf: a clear error or PyTorch's answer on both hosts, never a crash."""

from __future__ import annotations

import inspect
import math
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dycl_iree

from .conftest import assert_matches

HOSTS = ("compiled", "python")


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("n", [2**63, 2**64 + 5, -(2**63) - 1, np.uint64(2**63)])
def test_an_int_beyond_int64_is_an_input_error(exported, host: str, n: int) -> None:
    item = exported("scalar_inputs")
    x = item.samples()[0][0]
    run = dycl_iree.load(item.path, host=host)
    with pytest.raises(dycl_iree.InputError, match=r"input 1 \('n'\) is -?\d+, outside the int64 range"):
        run(x.numpy(), n, 0.5, True)


@pytest.mark.parametrize("host", HOSTS)
def test_the_ends_of_the_int64_range_still_run(exported, host: str) -> None:
    item = exported("scalar_inputs")
    x = item.samples()[0][0]
    run = dycl_iree.load(item.path, host=host)
    for n in (-(2**63), 2**63 - 2, np.int64(-(2**63))):
        assert_matches(run(x.numpy(), n, 0.5, True), item.reference(x, int(n), 0.5, True), f"{host} n={n}")


def _same_with_nan(got, want, where: str) -> None:
    """Outputs equal PyTorch's, NaN where PyTorch has NaN."""
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want), where
    for index, (have, expected) in enumerate(zip(got, want)):
        if isinstance(expected, tuple):
            _same_with_nan(have, expected, f"{where} output {index}")
        elif isinstance(expected, torch.Tensor):
            expected = expected.numpy()
            assert np.asarray(have).shape == expected.shape, f"{where} output {index}"
            np.testing.assert_allclose(have, expected, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=where)
        elif isinstance(expected, float) and math.isnan(expected):
            assert isinstance(have, float) and math.isnan(have), f"{where} output {index}: {have!r}"
        else:
            assert type(have) is type(expected) and have == expected, f"{where} output {index}: {have!r}"


class _FloatDecisions(nn.Module):
    """Each decision returns which way it went, so a test sees the side taken, not only the values."""

    def forward(self, x: torch.Tensor, s: float):
        total = float(x.sum())
        if total > 0.0:
            a = x + 1.0
            went_gt = True
        else:
            a = x - 1.0
            went_gt = False
        if total < 0.0:
            b = a * 2.0
            went_lt = True
        else:
            b = a * 3.0
            went_lt = False
        return b, went_gt, went_lt, s < 0.0, s > 1, total >= 2.0


NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module")
def float_decisions(tmp_path_factory: pytest.TempPathFactory):
    model = _FloatDecisions()
    bundle = dycl_iree.export(model, (torch.ones(1, 4), 0.5))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    return torch.jit.script(model), bundle.save(tmp_path_factory.mktemp("decisions") / "decisions.dycl")


@pytest.mark.parametrize("host", HOSTS)
def test_float_decisions_go_pytorchs_way_on_nan_and_inf(float_decisions, host: str) -> None:
    """`float(t) > 0.0` and `< 0.0` with NaN are both False in PyTorch: neither branch side's condition holds."""
    scripted, path = float_decisions
    run = dycl_iree.load(path, host=host)
    sides = set()
    for fill, s in [(1.0, -1.0), (-1.0, 2.0), (NAN, NAN), (INF, INF), (-INF, -INF), (0.0, 0.0), (0.5, 1.0)]:
        x = torch.full((1, 4), fill)
        want = scripted(x, s)
        got = run(x.numpy(), s)
        _same_with_nan(got, want, f"{host} host, x={fill}, s={s}")
        sides.add((want[1], want[2]))
    assert sides == {(True, False), (False, True), (False, False)}  # NaN and 0.0 take neither `then` side


class _NanOps(nn.Module):
    """The ops whose lowering compared without NaN: each must propagate or pick NaN as PyTorch does."""

    def forward(self, x: torch.Tensor):
        values, indices = x.max(1)
        low, low_indices = x.min(1)
        return (
            torch.clamp(x, -1.0, 1.0),
            torch.clamp(x, min=-1.0),
            torch.clamp(x, max=1.0),
            torch.clamp(x, torch.full_like(x, -1.0), torch.full_like(x, 1.0)),
            F.hardtanh(x),
            F.relu6(x),
            torch.maximum(x, torch.zeros_like(x)),
            torch.minimum(x, torch.zeros_like(x)),
            torch.argmax(x, 1),
            torch.argmax(x),
            torch.argmax(x, 1, keepdim=True),
            torch.argmin(x, 1),
            values,
            indices,
            low,
            low_indices,
        )


def test_ops_rewritten_by_the_lowering_keep_pytorchs_nan_semantics(tmp_path) -> None:
    model = _NanOps()
    path = dycl_iree.export(model, (torch.randn(2, 4),)).save(tmp_path / "nan_ops.dycl")
    run = dycl_iree.load(path)
    inputs = [
        torch.tensor([[1.0, NAN, -2.0, 0.5], [3.0, -1.0, NAN, 2.0]]),
        torch.tensor([[NAN, NAN, 5.0, -5.0], [0.25, 4.0, 4.0, -3.0]]),  # ties: the first index, as PyTorch
        torch.tensor([[INF, NAN, -INF, 0.0], [-INF, -INF, INF, INF]]),
        torch.randn(2, 4, generator=torch.Generator().manual_seed(0)) * 3.0,
    ]
    for x in inputs:
        _same_with_nan(run(x.numpy()), model(x), f"x={x.tolist()}")


@pytest.mark.parametrize("host", HOSTS)
def test_scalar_inputs_with_a_nan_scale(exported, host: str) -> None:
    item = exported("scalar_inputs")
    run = dycl_iree.load(item.path, host=host)
    for x, n, scale, flag in [(torch.ones(2, 3), 1, NAN, True), (-torch.ones(2, 3), 2, NAN, False)]:
        _same_with_nan(run(x.numpy(), n, scale, flag), item.reference(x, n, scale, flag), f"{host} host")


class _Indexed(nn.Module):
    """Every way a host int becomes an index in a segment."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(7, 4)

    def forward(self, x: torch.Tensor, k: int):
        h = x + self.embedding(torch.tensor([k]))
        h = h + h[:, k].unsqueeze(1)
        h = h * h[0, k]
        return h + torch.index_select(h, 1, torch.tensor([k % 4]))


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory):
    torch.manual_seed(0)
    model = _Indexed().eval()
    bundle = dycl_iree.export(model, (torch.randn(2, 4), 1), dynamic_shapes={"x": {0: "batch"}})
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    return model, bundle.save(tmp_path_factory.mktemp("indexed") / "indexed.dycl")


@pytest.mark.parametrize("host", HOSTS)
def test_an_index_out_of_range_raises_as_pytorch_does_and_names_op_and_line(indexed, host: str) -> None:
    """PyTorch raises IndexError; the bundle raises ModelRaised naming the op and the line, never reads outside."""
    model, path = indexed
    run = dycl_iree.load(path, host=host)
    raised = set()
    for k in (0, 3, -1, 4, 6, 7, 10**9, -(10**9), -5):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(k % 97))
        try:
            with torch.no_grad():
                want = model(x, k)
        except (IndexError, RuntimeError):
            with pytest.raises(dycl_iree.ModelRaised, match=r"IndexError: index out of range in \w+.*test_bad_values"):
                run(x.numpy(), k)
            raised.add(k)
            continue
        np.testing.assert_allclose(run(x.numpy(), k), want.numpy(), rtol=1e-5, atol=1e-6)
    assert raised == {-1, 4, 6, 7, 10**9, -(10**9), -5}  # 0 and 3 are in range for all four lookups


@pytest.mark.parametrize("host", HOSTS)
def test_which_lookup_failed_is_named(indexed, host: str) -> None:
    _, path = indexed
    run = dycl_iree.load(path, host=host)
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(dycl_iree.ModelRaised, match=r"in embedding \(.*test_bad_values.py:\d+\)"):
        run(x, 7)  # past the 7 rows of the embedding
    with pytest.raises(dycl_iree.ModelRaised, match=r"in select \(dim 1\)"):
        run(x, 5)  # a valid row of the embedding, past x's 4 columns


@pytest.mark.parametrize("host", HOSTS)
def test_greedy_decoder_with_a_start_token_out_of_range(exported, host: str) -> None:
    item = exported("greedy_decoder")
    run = dycl_iree.load(item.path, host=host)
    x = item.samples()[0][0]
    for start in (7, 10**9, -1):
        with pytest.raises(RuntimeError):
            item.reference(x, start)
        with pytest.raises(dycl_iree.ModelRaised, match="index out of range in embedding"):
            run(x.numpy(), start)
    assert_matches(run(x.numpy(), 3), item.reference(x, 3), f"{host} host")


class _DeviceIndices(nn.Module):
    """Indices computed on the device, out of range for some `k`: never a read outside the buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(7, 4)

    def forward(self, x: torch.Tensor, k: int):
        h = x + torch.gather(x, 1, torch.zeros_like(x, dtype=torch.long) + k)
        rows = x.argmax(1) + k
        h = h + self.embedding(rows)
        h = h + torch.index_select(h, 1, rows[:1] % 9)
        return h + h[rows - 2]


def _raising_line(error: BaseException) -> int:
    """The line of this file where PyTorch raised `error`."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename == __file__]
    return frames[-1].lineno


def test_indices_computed_on_the_device_raise_as_pytorch_does(tmp_path) -> None:
    """In range: PyTorch's values. Out of range: PyTorch's exception class, at the line of the lookup it raised at."""
    torch.manual_seed(0)
    model = _DeviceIndices().eval()
    path = dycl_iree.export(model, (torch.randn(2, 4), 1), dynamic_shapes={"x": {0: "batch"}}).save(tmp_path / "d")
    for host in HOSTS:
        run = dycl_iree.load(path, host=host)
        raised_at = set()
        for k in (0, 1, 3, 5, -7, 10**9, -(10**9)):
            x = torch.randn(3, 4, generator=torch.Generator().manual_seed(k % 50))
            try:
                with torch.no_grad():
                    want = model(x, k)
            except (IndexError, RuntimeError) as error:
                line = _raising_line(error)
                pattern = rf"^{type(error).__name__}: index out of range in \w+ \(.*test_bad_values.py:{line}\)"
                with pytest.raises(dycl_iree.ModelRaised, match=pattern):
                    run(x.numpy(), k)
                raised_at.add(line)
                continue
            np.testing.assert_allclose(run(x.numpy(), k), want.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{host} k={k}")
            raised_at.add("returned")
        assert len(raised_at) >= 3 and "returned" in raised_at, raised_at  # two lookups raised, and values came back


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory):
    """`saved(model, example)`: the model's bundle path, exported once per module for both host params."""
    paths: dict[str, Path] = {}

    def export_once(model: nn.Module, example: tuple) -> Path:
        name = type(model).__name__
        if name not in paths:
            bundle = dycl_iree.export(model, example)
            assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
            paths[name] = bundle.save(tmp_path_factory.mktemp(name) / f"{name}.dycl")
        return paths[name]

    return export_once


class _FourLookups(nn.Module):
    """Each lookup takes its indices from the device, shifted by its own int: each can be out of range alone."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(5, 3)

    def forward(self, x: torch.Tensor, a: int, b: int, c: int, d: int):
        rows = x.argmax(1)  # in [0, 3)
        h = self.embedding(rows + a)
        h = torch.gather(h, 1, torch.zeros_like(h, dtype=torch.long) + rows.unsqueeze(1) + b) + h
        h = torch.index_select(h, 1, rows + c) + h
        return h[rows + d]


@pytest.mark.parametrize("host", HOSTS)
def test_each_lookup_on_device_indices_raises_at_its_line(saved, host: str) -> None:
    torch.manual_seed(0)
    model = _FourLookups().eval()
    run = dycl_iree.load(saved(model, (torch.randn(3, 3), 0, 0, 0, 0)), host=host)
    x = torch.eye(3)  # rows = [0, 1, 2]
    lines = set()
    source, first = inspect.getsourcelines(_FourLookups.forward)
    embedding_line = first + next(i for i, text in enumerate(source) if "self.embedding(" in text)
    for shifts in (
        [0, 0, 0, 0],
        [2, 0, 0, 0],
        [3, 0, 0, 0],
        [0, 1, 0, 0],
        [0, -1, 0, 0],
        [0, 0, 1, 0],
        [0, 0, 0, -3],
        [0, 0, 0, -4],
        [0, 0, 0, 1],
        [9, 9, 9, 9],
    ):
        try:
            with torch.no_grad():
                want = model(x, *shifts)
        except (IndexError, RuntimeError) as error:
            line = _raising_line(error)
            # Inside nn.Embedding the op's own line is torch's; the message names the submodule instead.
            where = rf"test_bad_values.py:{line}"
            if line == embedding_line:
                where = r"called by self\.embedding \(Embedding\)"
            with pytest.raises(dycl_iree.ModelRaised, match=rf"^{type(error).__name__}: .*{where}\)"):
                run(x.numpy(), *shifts)
            lines.add(line)
            continue
        np.testing.assert_allclose(run(x.numpy(), *shifts), want.numpy(), rtol=1e-6, err_msg=str(shifts))
    assert len(lines) == 4, lines  # every lookup raised for some shift


class _RaisesOnSomePaths(nn.Module):
    """A user's `raise` and a dim the tensor lacks, each on a data-dependent path (fuzzer: `x.sum().size(0)`)."""

    def forward(self, x: torch.Tensor):
        if bool(x.sum() > 100.0):
            if x.sum().size(0) > 1:
                return x
        if bool(x.sum() < -100.0):
            raise ValueError("too small for a batch of " + str(x.size(0)))
        return x * 2


@pytest.mark.parametrize("host", HOSTS)
def test_raising_paths_raise_on_both_hosts(saved, host: str) -> None:
    model = _RaisesOnSomePaths()
    run = dycl_iree.load(saved(model, (torch.ones(2),)), host=host)
    np.testing.assert_allclose(run(np.ones(2, np.float32)), model(torch.ones(2)).numpy())
    cases = [
        (100.0, IndexError, r"^IndexError: Dimension specified as 0 but tensor has no dimensions \(.*:\d+\)"),
        (-100.0, ValueError, r"^too small for a batch of 2 \(.*test_bad_values.py:\d+\)"),
    ]
    for fill, pytorch_error, message in cases:
        x = torch.full((2,), fill)
        with pytest.raises(pytorch_error):
            model(x)
        with pytest.raises(dycl_iree.ModelRaised, match=message):
            run(x.numpy())


def test_a_dim_the_tensor_lacks_on_every_path_is_refused_at_export() -> None:
    class SizeOfASum(nn.Module):
        def forward(self, x: torch.Tensor):
            return x * x.sum().size(0)

    with pytest.raises(dycl_iree.DyclError, match=r"always raises.*IndexError: Dimension specified as 0.*:\d+\)"):
        dycl_iree.export(SizeOfASum(), (torch.ones(2),))


class _IndexedWrites(nn.Module):
    """Writes at indices the device computed, each shifted by its own int: a write past the end
    would land outside the buffer."""

    def forward(self, x: torch.Tensor, a: int, b: int, c: int, d: int, e: int):
        rows = x.argmax(1)  # in [0, 3)
        h = torch.zeros_like(x).scatter(1, rows.unsqueeze(1) + a, 1.0)
        h = h.index_add(0, rows + b, x)
        h = h.index_copy(0, rows.flip(0) + c, h * 2.0)
        h = h.index_fill(1, rows[:1] + d, -1.0)
        h[rows + e] = 7.0
        return h


@pytest.mark.parametrize("host", HOSTS)
def test_each_write_at_device_indices_raises_at_its_line(saved, host: str) -> None:
    model = _IndexedWrites()
    run = dycl_iree.load(saved(model, (torch.eye(3, 4), 0, 0, 0, 0, 0)), host=host)
    x = torch.eye(3, 4)  # rows = [0, 1, 2]
    lines = set()
    for shifts in (
        [0] * 5,
        [1, 0, 0, 0, 0],
        [2, 0, 0, 0, 0],
        [-1, 0, 0, 0, 0],
        [0, 1, 0, 0, 0],
        [0, 0, 1, 0, 0],
        [0, 0, -1, 0, 0],
        [0, 0, 0, -1, 0],
        [0, 0, 0, 4, 0],
        [0, 0, 0, 0, -3],
        [0, 0, 0, 0, 1],
        [0, 0, 0, 0, -5],
        [10**9] * 5,
    ):
        try:
            want = model(x, *shifts)
        except (IndexError, RuntimeError) as error:
            line = _raising_line(error)
            with pytest.raises(dycl_iree.ModelRaised, match=rf"^{type(error).__name__}: .*test_bad_values.py:{line}\)"):
                run(x.numpy(), *shifts)
            lines.add(line)
            continue
        np.testing.assert_allclose(run(x.numpy(), *shifts), want.numpy(), rtol=1e-6, err_msg=str(shifts))
        lines.add(str(shifts))
    assert len([line for line in lines if isinstance(line, int)]) == 5, lines  # every write raised for some shift
    assert "[0, 0, 0, 0, 0]" in lines and "[0, 0, 0, -1, 0]" in lines, lines  # and values came back in range


class _IndexBuiltFromAHostInt(nn.Module):
    """An index tensor the host builds from an int: the host checks it before the segment only for
    embedding and index_select; indexing with it is checked on the device after the call."""

    def forward(self, x: torch.Tensor, k: int):
        return x[torch.tensor([k, 0])] * 2.0


@pytest.mark.parametrize("host", HOSTS)
def test_indexing_with_a_tensor_built_from_a_host_int(saved, host: str) -> None:
    model = _IndexBuiltFromAHostInt()
    run = dycl_iree.load(saved(model, (torch.randn(4, 3), 1)), host=host)
    x = torch.randn(4, 3)
    for k in (0, 3, -1, -4, 4, -5, 10**9):
        try:
            want = model(x, k)
        except IndexError:
            with pytest.raises(dycl_iree.ModelRaised, match=r"^IndexError: index out of range in indexing \(.*:\d+\)"):
                run(x.numpy(), k)
            continue
        np.testing.assert_array_equal(run(x.numpy(), k), want.numpy())
