"""Published dynamic-network code exports as written: views after pooling, nn.LSTM / nn.GRU / nn.RNN.

The models here are written the way published code writes them (`self.pool = nn.AvgPool2d(2)`,
`out = out.view(out.size(0), -1)`, `out, (h, c) = self.lstm(x, (h0, c0))`, a SkipNet-style LSTM
gate deciding `if bool(gate > 0.5):`), not in a style that suits the exporter. Every model is
exported once, both hosts run every sample and are compared with the scripted model, the Python
host's records show every branch side taken, and every bundle gets the compiled host.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import dycl_iree
from dycl_iree import decompositions
from dycl_iree.program import If, Loop, iter_nodes
from models.skipnet import RNNGate  # SkipNet's gate, as the zoo's skipnet_lstm_resnet38 writes it

from .conftest import assert_matches, scripted

# ---------------------------------------------------------------------------------------------
# Class 1: the model's own ops after a layout rewrite see what they see in PyTorch
# ---------------------------------------------------------------------------------------------


class ExitAfterPooling(nn.Module):
    """A Shallow-Deep Networks style exit: pool, `.view`, linear; a confident exit returns, else a
    1x1-conv shortcut whose output is viewed again inside the branch."""

    def __init__(self, reduce: nn.Module) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.reduce = reduce  # [N, 8, 8, 8] -> [N, 8, 4, 4]
        self.exit = nn.Linear(8 * 4 * 4, 10)
        self.shortcut = nn.Conv2d(8, 16, kernel_size=1, stride=2, bias=False)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)
        self.threshold = 0.0

    def forward(self, x: Tensor) -> tuple[Tensor, int]:
        out = F.relu(self.conv1(x))
        early = self.reduce(out)
        early = self.exit(early.view(early.size(0), -1))
        if bool(early.max() > self.threshold):
            return early, 0
        out = self.shortcut(out)
        flat = out.view(out.size(0), out.size(1), -1)
        out = self.pool(out).flatten(1) + flat.mean(2)
        return self.fc(out), 1

    @torch.jit.unused
    def score(self, x: Tensor) -> float:
        """What the exit compares with the threshold."""
        with torch.no_grad():
            return self._score(x)

    @torch.jit.unused
    def _score(self, x: Tensor) -> float:
        early = self.reduce(F.relu(self.conv1(x)))
        return float(self.exit(early.view(early.size(0), -1)).max())


class LayoutOpsAfterRewrites(nn.Module):
    """Every layout-sensitive op after each rewritten op: view, flatten, reshape, permute, transpose."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.avg = nn.AvgPool2d(2)
        self.max = nn.MaxPool2d(kernel_size=2, stride=2)
        self.pointwise = nn.Conv2d(8, 4, 1)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, int]:
        x = F.relu(self.conv(x))
        a = self.avg(x)
        m = self.max(x)
        p = self.pointwise(x)
        d = self.depthwise(x)
        viewed = a.view(a.size(0), -1)
        flat = torch.flatten(m, 1)
        channels_last = p.permute(0, 2, 3, 1).reshape(p.size(0), -1)
        swapped = d.transpose(1, 2).contiguous().view(d.size(0), -1)
        moved = m.transpose(1, 3).reshape(-1)
        return viewed, flat, channels_last, swapped, moved, p.stride(1)


def _samples(seeds: list[int], scales: list[float], shape: tuple[int, ...]) -> list[tuple]:
    return [(torch.randn(shape, generator=torch.Generator().manual_seed(s)) * k,) for s, k in zip(seeds, scales)]


def _set_threshold_between(model: nn.Module, samples: list[tuple]) -> None:
    """Put the threshold halfway between the middle two scores, so half the samples take each side."""
    scores = sorted(model.score(*sample) for sample in samples)
    middle = len(scores) // 2
    assert scores[middle] - scores[middle - 1] > 1e-3, scores
    model.threshold = (scores[middle - 1] + scores[middle]) / 2


REDUCERS: dict[str, Callable[[], nn.Module]] = {
    "avg_pool": lambda: nn.AvgPool2d(2),
    "max_pool": lambda: nn.MaxPool2d(2),
    "adaptive_avg_pool": lambda: nn.AdaptiveAvgPool2d(4),
    "conv1x1_stride2": lambda: nn.Conv2d(8, 8, kernel_size=1, stride=2),
    "depthwise_stride2": lambda: nn.Conv2d(8, 8, kernel_size=3, stride=2, padding=1, groups=8),
}


def exit_after_pooling(reducer: str) -> tuple[nn.Module, tuple, list[tuple]]:
    torch.manual_seed(0)
    model = ExitAfterPooling(REDUCERS[reducer]()).eval()
    samples = _samples([1, 2, 3, 4], [0.5, 3.0, 1.0, 2.0], (1, 3, 8, 8))
    _set_threshold_between(model, samples)
    return model, samples[0], samples


def layout_ops() -> tuple[nn.Module, tuple, list[tuple]]:
    torch.manual_seed(0)
    samples = _samples([5, 6], [1.0, 1.0], (1, 3, 8, 8))
    return LayoutOpsAfterRewrites().eval(), samples[0], samples


# ---------------------------------------------------------------------------------------------
# Class 2: recurrent layers
# ---------------------------------------------------------------------------------------------


class LstmWithState(nn.Module):
    """`nn.LSTM(10, 10)` called with the caller's `(h0, c0)`."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(10, 10)

    def forward(self, x: Tensor, h0: Tensor, c0: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        out, (h, c) = self.lstm(x, (h0, c0))
        return out, h, c


class StackedLstmClassifier(nn.Module):
    """Two layers, batch_first, the state built as zeros from `x.size(0)`; the last step classifies."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden_size = 16
        self.num_layers = 2
        self.lstm = nn.LSTM(10, self.hidden_size, num_layers=self.num_layers, batch_first=True)
        self.fc = nn.Linear(self.hidden_size, 4)

    def forward(self, x: Tensor) -> Tensor:
        h0 = torch.zeros(self.num_layers, x.size(0), self.hidden_size)
        c0 = torch.zeros(self.num_layers, x.size(0), self.hidden_size)
        out, _ = self.lstm(x, (h0, c0))
        return self.fc(out[:, -1, :])


class BidirectionalEncoder(nn.Module):
    """Bidirectional, batch_first, no initial state: the encoder of a tagger or a captioner."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(10, 8, num_layers=2, batch_first=True, bidirectional=True)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        out, (h, c) = self.lstm(x)
        return out, h, c


class ConstantZeroState(nn.Module):
    """The state is a constant: `(h0, h0)` folds into one constant tuple when TorchScript freezes."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(10, 6)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h0 = torch.zeros(1, 1, 6)
        out, (h, c) = self.lstm(x, (h0, h0))
        return out, h + c


class GruAndRnn(nn.Module):
    """`nn.GRU` with a constant zero state feeding a two-layer ReLU `nn.RNN` without one."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(10, 8, batch_first=True)
        self.rnn = nn.RNN(8, 6, num_layers=2, nonlinearity="relu", batch_first=True, bidirectional=True)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        out, h = self.gru(x, torch.zeros(1, 1, 8))
        out, h2 = self.rnn(out)
        return out, h, h2


class RecurrentSkipping(nn.Module):
    """A SkipNet-style gate in a loop that runs `steps` times (a run-time int): each step the LSTM
    gate reads the pooled features and decides whether the shared block runs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.gate_layer = nn.Sequential(nn.AvgPool2d(8), nn.Conv2d(8, 10, kernel_size=1, stride=1))
        self.control = RNNGate(10, 10)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: Tensor, steps: int) -> tuple[Tensor, int]:
        batch_size = x.size(0)
        x = F.relu(self.conv1(x))
        hidden = self.control.init_hidden(batch_size)
        ran = 0
        for _ in range(steps):
            gate_feature = self.gate_layer(x)
            prob, hidden = self.control(gate_feature, hidden)
            if bool(prob > 0.5):
                x = x + self.block(x)
                ran += 1
        x = F.adaptive_avg_pool2d(x, 1)
        return self.fc(x.view(x.size(0), -1)), ran


class LstmInsideBranch(nn.Module):
    """A GRU on one side of a data-dependent branch, a bidirectional LSTM on the other."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(10, 8, batch_first=True)
        self.lstm = nn.LSTM(10, 4, batch_first=True, bidirectional=True)

    def forward(self, x: Tensor) -> Tensor:
        if bool(x.mean() > 0):
            out, _ = self.gru(x)
        else:
            out, _ = self.lstm(x)
        return out


class BatchOfSequences(nn.Module):
    """A batch whose size is only known at run time: an LSTM whose state is built from `x.size(0)`,
    then a GRU and a tanh RNN without one (every state checked against the batch by nn.RNN's own
    code)."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(10, 8, batch_first=True)
        self.gru = nn.GRU(8, 6, batch_first=True)
        self.rnn = nn.RNN(6, 4, batch_first=True)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        h0 = torch.zeros(1, x.size(0), 8)
        c0 = torch.zeros(1, x.size(0), 8)
        out, (h, c) = self.lstm(x, (h0, c0))
        out, h = self.gru(out)
        out, h_rnn = self.rnn(out)
        return out, h, h_rnn


def batch_of_sequences() -> tuple[nn.Module, tuple, list[tuple]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(4)
    samples = [(torch.randn(batch, 5, 10, generator=generator),) for batch in (2, 3, 1)]
    return BatchOfSequences().eval(), samples[0], samples


def recurrent_skipping() -> tuple[nn.Module, tuple, list[tuple]]:
    torch.manual_seed(3)
    model = RecurrentSkipping().eval()
    with torch.no_grad():
        # Scaled so that the image, not the LSTM's random biases, drives the gate; with this bias
        # the first sample's gate runs the block on some steps and skips it on others (every
        # probability at least 3e-3 from 0.5), the second skips it, the last runs it every time.
        model.gate_layer[1].weight.mul_(10.0)
        model.control.proj.weight.mul_(10.0)
        model.control.proj.bias.fill_(0.4)
    images = _samples([11, 12, 13], [1.0, 2.0, 0.5], (1, 3, 8, 8))
    samples = [(images[0][0], 5), (images[1][0], 3), (images[2][0], 0), (images[2][0], 4)]
    return model, samples[0], samples


def _sequences(shape: tuple[int, ...], count: int, seed: int = 0) -> list[tuple]:
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(shape, generator=generator),) for _ in range(count)]


def _plain(model_class: type, shape: tuple[int, ...]) -> Callable[[], tuple[nn.Module, tuple, list[tuple]]]:
    def make() -> tuple[nn.Module, tuple, list[tuple]]:
        torch.manual_seed(0)
        samples = _sequences(shape, 2)
        return model_class().eval(), samples[0], samples

    return make


def lstm_with_state() -> tuple[nn.Module, tuple, list[tuple]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    samples = [tuple(torch.randn(shape, generator=generator) for shape in [(5, 1, 10), (1, 1, 10), (1, 1, 10)])]
    samples.append((samples[0][0], torch.zeros(1, 1, 10), torch.zeros(1, 1, 10)))
    return LstmWithState().eval(), samples[0], samples


def lstm_inside_branch() -> tuple[nn.Module, tuple, list[tuple]]:
    torch.manual_seed(0)
    x = torch.randn(1, 5, 10, generator=torch.Generator().manual_seed(2))
    samples = [(x.abs() + 0.1,), (-x.abs() - 0.1,)]
    return LstmInsideBranch().eval(), samples[0], samples


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple, list[tuple]]]] = {
    **{f"exit_after_{name}": (lambda name=name: exit_after_pooling(name)) for name in REDUCERS},
    "layout_ops": layout_ops,
    "lstm_with_state": lstm_with_state,
    "stacked_lstm_classifier": _plain(StackedLstmClassifier, (1, 6, 10)),
    "bidirectional_encoder": _plain(BidirectionalEncoder, (1, 5, 10)),
    "constant_zero_state": _plain(ConstantZeroState, (4, 1, 10)),
    "gru_and_rnn": _plain(GruAndRnn, (1, 5, 10)),
    "recurrent_skipping": recurrent_skipping,
    "lstm_inside_branch": lstm_inside_branch,
    "batch_of_sequences": batch_of_sequences,
}
DYNAMIC_SHAPES = {"batch_of_sequences": ({0: torch.export.Dim("batch")},)}
# Which side of each model's decisions the samples must take (every model with a branch takes both).
BRANCHING = {name for name in MODELS if name.startswith("exit_after_")} | {"recurrent_skipping", "lstm_inside_branch"}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("real_code")
    cache: dict[str, tuple] = {}

    def get(name: str) -> tuple[nn.Module, list[tuple], Any, Path]:
        if name not in cache:
            model, example, samples = MODELS[name]()
            bundle = dycl_iree.export(model, example, dynamic_shapes=DYNAMIC_SHAPES.get(name))
            cache[name] = (model, samples, bundle, bundle.save(folder / f"{name}.dycl"))
        return cache[name]

    return get


@pytest.mark.parametrize("name", list(MODELS))
def test_both_hosts_match_pytorch_on_every_path(name: str, bundles) -> None:
    model, samples, bundle, path = bundles(name)
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    python_host = dycl_iree.load(path, host="python", record=True)
    compiled_host = dycl_iree.load(path, host="compiled")
    for index, sample in enumerate(samples):
        with torch.no_grad():
            reference = scripted(model)(*sample)
        assert_matches(python_host(*sample), reference, f"{name} sample {index} (python host)")
        assert_matches(compiled_host(*sample), reference, f"{name} sample {index} (compiled host)")
    branches = [node.label for node in iter_nodes(bundle.program.body) if isinstance(node, If)]
    assert bool(branches) == (name in BRANCHING)
    for label in branches:
        assert set(python_host.decisions[label]) == {True, False}, (
            f"{name}: {label} took only {python_host.decisions[label]}"
        )


def test_exits_are_taken_as_pytorch_takes_them(bundles) -> None:
    """Both exits of every pooled-exit model, and the same exit as PyTorch on every sample."""
    for reducer in REDUCERS:
        model, samples, _, path = bundles(f"exit_after_{reducer}")
        run = dycl_iree.load(path, host="compiled")
        exits = [run(*sample)[1] for sample in samples]
        with torch.no_grad():
            assert exits == [model(*sample)[1] for sample in samples]
        assert sorted(set(exits)) == [0, 1], f"{reducer}: exits {exits}"


def test_the_gate_loop_runs_skips_and_stops_on_every_count(bundles) -> None:
    """The LSTM gate sits inside a run-time loop: zero steps, and steps where the block runs and
    where it is skipped."""
    model, samples, bundle, path = bundles("recurrent_skipping")
    python_host = dycl_iree.load(path, host="python", record=True)
    for sample in samples:
        python_host(*sample)
    (label,) = [node.label for node in iter_nodes(bundle.program.body) if isinstance(node, Loop)]
    assert python_host.trip_counts[label] == [steps for _, steps in samples]
    with torch.no_grad():
        ran = [model(*sample)[1] for sample in samples]
    assert any(0 < count < steps for count, (_, steps) in zip(ran, samples)), ran


# ---------------------------------------------------------------------------------------------
# The rewrites themselves, and the error when an op after one fails
# ---------------------------------------------------------------------------------------------

REWRITES = [
    ("avg_pool", lambda x: decompositions.avg_pool_as_reduction(x, [2, 2]), lambda x: F.avg_pool2d(x, 2)),
    ("max_pool", lambda x: decompositions.max_pool_as_reduction(x, [2, 2])[0], lambda x: F.max_pool2d(x, 2)),
    (
        "pointwise",
        lambda x: decompositions.pointwise_convolution_as_matmul(x, WEIGHT_1X1, None, [2, 2]),
        lambda x: F.conv2d(x, WEIGHT_1X1, stride=2),
    ),
    (
        "depthwise",
        lambda x: decompositions.depthwise_convolution_as_taps(x, WEIGHT_DW, None, [1, 1], [1, 1], [1, 1]),
        lambda x: F.conv2d(x, WEIGHT_DW, padding=1, groups=4),
    ),
]
WEIGHT_1X1 = torch.randn(6, 4, 1, 1, generator=torch.Generator().manual_seed(0))
WEIGHT_DW = torch.randn(4, 1, 3, 3, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name,rewrite,original", REWRITES, ids=[r[0] for r in REWRITES])
def test_layout_rewrites_return_what_the_op_returns(name: str, rewrite: Callable, original: Callable) -> None:
    """Same values, same shape and the same (contiguous NCHW) strides as PyTorch's own op."""
    x = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(2))
    got, want = rewrite(x), original(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert got.stride() == want.stride() and got.is_contiguous(), f"{name}: strides {got.stride()}"


def test_an_op_failing_after_a_rewrite_names_the_models_line(monkeypatch) -> None:
    """When torch.export fails on an op, the error names the line of the model that holds the op
    (here the `.view` after the pooling), not torch's pooling.py that produced its input."""
    import dycl_iree.lower as lower

    def leaves_nhwc_strides(input: Tensor, kernel_size: Any, *rest: Any) -> Tensor:
        out = decompositions.avg_pool_as_reduction(input, kernel_size)
        return torch.ops.aten.permute(torch.ops.aten.permute(out, [0, 2, 3, 1]).contiguous(), [0, 3, 1, 2])

    table = lower.decomposition_table()
    table[torch.ops.aten.avg_pool2d.default] = leaves_nhwc_strides
    monkeypatch.setattr(lower, "decomposition_table", lambda: table)
    model, example, _ = exit_after_pooling("avg_pool")
    view_line = next(
        number for number, line in enumerate(inspect.getsource(ExitAfterPooling).splitlines()) if "early.view(" in line
    )
    line = inspect.getsourcelines(ExitAfterPooling)[1] + view_line
    with pytest.raises(dycl_iree.UnsupportedOpError) as caught:
        dycl_iree.export(model, example)
    message = str(caught.value)
    assert message.startswith("cannot lower aten::view"), message
    assert f"{Path(__file__).name}:{line}" in message, message
    assert "pooling.py" not in message


def test_a_dynamic_sequence_length_runs_the_layer_as_a_loop_over_steps(tmp_path) -> None:
    """torch.export would unroll nn.LSTM over the example's time steps; with the sequence length
    declared dynamic, each layer and direction is a loop over steps instead (tests/test_recurrent.py
    has the other layers), and one bundle takes every length."""
    model, example, _ = _plain(BidirectionalEncoder, (1, 5, 10))()
    bundle = dycl_iree.export(model, example, dynamic_shapes=({1: torch.export.Dim("steps")},))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / "encoder.dycl")
    for steps in (1, 5, 9):
        x = torch.randn(1, steps, 10)
        with torch.no_grad():
            expected = model(x)
        for host in ("python", "compiled"):
            assert_matches(dycl_iree.load(path, host=host)(x.numpy()), expected, f"{host}, {steps} steps")
