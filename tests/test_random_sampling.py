"""multinomial, randperm, poisson, alpha dropout, the other in-place draws and a run-time `training`
flag on the explicit random state (dycl_iree/random_sampling.py, random_ops.py), inside loops.

The numbers are not PyTorch's stream (test_random.py says why), so the draws are compared with
PyTorch's by their distributions, exactly where the op is deterministic (one-hot probabilities,
p = 0 or 1, a rate of 0, training off), and the two hosts with each other bit for bit for a seed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dycl_iree
from dycl_iree.capture import capture
from dycl_iree.partition import partition
from dycl_iree.program import iter_nodes
from dycl_iree.reference import ReferenceInterpreter
from dycl_iree.specialize import specialize
from host_runtime.random_state import initial_state


def _state(seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(initial_state(seed))


def _frequencies(samples: torch.Tensor, categories: int) -> torch.Tensor:
    return torch.bincount(samples.flatten(), minlength=categories).double() / samples.numel()


# -- the samplers themselves (eager, no IREE) -------------------------------------------------------

_WEIGHTS = torch.tensor([0.5, 0.0, 1.5, 3.0, 0.0])  # unnormalized, with categories of weight zero


def _sequential_draw_probabilities(weights: list[float], draws: int) -> list[list[float]]:
    """P(the d-th draw is category i) when each draw picks by weight among the categories not yet
    drawn (sampling without replacement, as `torch.multinomial(..., replacement=False)` describes),
    summed over every ordered sequence of earlier draws."""
    table = [[0.0] * len(weights) for _ in range(draws)]

    def walk(drawn: tuple[int, ...], probability: float) -> None:
        if len(drawn) == draws:
            return
        left = sum(w for i, w in enumerate(weights) if i not in drawn)
        for i, w in enumerate(weights):
            if i not in drawn and w > 0:
                table[len(drawn)][i] += probability * w / left
                walk((*drawn, i), probability * w / left)

    walk((), 1.0)
    return table


def test_the_sequential_draw_probabilities_of_a_simple_case() -> None:
    # Weights 1 and 3: the first draw is 1 with 1/4; the second is whatever is left.
    assert _sequential_draw_probabilities([1.0, 3.0], 2) == [[0.25, 0.75], [0.75, 0.25]]


# 40,000 and 20,000 draws estimate each frequency within a standard deviation of at most 0.0025 and
# 0.0035 (sqrt(1/4 / n)): the bounds below are 4 and 4.3 of them, against the exact probabilities. A
# bound against another sample counts both samples' noise, and PyTorch's global generator's state
# depends on which tests ran before on the worker.


def test_multinomial_with_replacement_draws_each_category_by_its_weight() -> None:
    rows = _WEIGHTS.expand(2000, 5).contiguous()
    samples, following = torch.ops.dycl.multinomial(rows, 20, True, _state(1))
    assert samples.shape == (2000, 20) and samples.dtype == torch.int64 and following.tolist() == [1, 1]
    exact = (_WEIGHTS / _WEIGHTS.sum()).double()
    pytorch = _frequencies(torch.multinomial(rows, 20, True, generator=torch.Generator().manual_seed(1)), 5)
    got = _frequencies(samples, 5)
    assert got[1] == got[4] == 0.0  # weight zero: never drawn, as in PyTorch
    assert float((pytorch - exact).abs().max()) < 0.01, (pytorch, exact)  # the bound holds for PyTorch
    assert float((got - exact).abs().max()) < 0.01, (got, exact)


def test_multinomial_without_replacement_follows_pytorchs_sequential_draws() -> None:
    rows = _WEIGHTS.expand(20000, 5).contiguous()
    samples, _ = torch.ops.dycl.multinomial(rows, 3, False, _state(2))
    assert (samples.sort(1).values.diff(1) != 0).all()  # no category twice in a row
    pytorch = torch.multinomial(rows, 3, False, generator=torch.Generator().manual_seed(2))
    exact = torch.tensor(_sequential_draw_probabilities(_WEIGHTS.tolist(), 3), dtype=torch.float64)
    for column in range(3):  # the first draw by weight, the next ones from what is left
        for name, drawn in (("PyTorch", pytorch), ("dycl", samples)):
            got = _frequencies(drawn[:, column], 5)
            assert float((got - exact[column]).abs().max()) < 0.015, (name, column, got, exact[column])


def test_multinomial_of_one_hot_rows_is_pytorchs_exactly() -> None:
    probs = F.one_hot(torch.tensor([3, 0, 4, 1]), 5).float()
    for replacement, count in ((True, 6), (False, 1)):
        samples, _ = torch.ops.dycl.multinomial(probs, count, replacement, _state())
        assert torch.equal(samples, torch.multinomial(probs, count, replacement))
    single, _ = torch.ops.dycl.multinomial(probs[0], 1, False, _state())
    assert single.tolist() == [3] and single.shape == torch.multinomial(probs[0], 1).shape


def test_randperm_is_a_uniform_permutation() -> None:
    perms = [torch.ops.dycl.randperm(6, _state(seed))[0] for seed in range(3000)]
    assert all(sorted(p.tolist()) == list(range(6)) for p in perms) and perms[0].dtype == torch.int64
    first = torch.stack(perms)[:, 0]
    assert float((_frequencies(first, 6) - 1 / 6).abs().max()) < 0.025
    assert torch.ops.dycl.randperm(5, _state(), dtype=torch.int32)[0].dtype == torch.int32


@pytest.mark.parametrize("rate", [0.5, 9.9, 10.0, 1000.0])
def test_poisson_has_the_mean_and_variance_of_its_rate(rate: float) -> None:
    rates = torch.full((100000,), rate)
    counts, _ = torch.ops.dycl.poisson(rates, _state(4))
    assert torch.equal(counts, counts.floor()) and float(counts.min()) >= 0.0 and counts.dtype == torch.float32
    reference = torch.poisson(rates)
    tolerance = 5 * math.sqrt(rate / rates.numel())
    assert abs(float(counts.mean()) - rate) < tolerance
    assert abs(float(counts.var()) - float(reference.var())) < 10 * rate * math.sqrt(2 / rates.numel())


def test_poisson_follows_the_probabilities_of_each_count() -> None:
    """Against the exact probabilities on both sides of the switch between the methods."""
    for rate in (4.0, 25.0):
        counts, _ = torch.ops.dycl.poisson(torch.full((100000,), rate), _state(5))
        k = torch.arange(int(rate * 3), dtype=torch.float64)
        exact = torch.exp(k * math.log(rate) - rate - torch.lgamma(k + 1))
        got = torch.bincount(counts.long(), minlength=len(k))[: len(k)].double() / counts.numel()
        assert float((got - exact).abs().max()) < 0.006, rate


def test_a_rate_of_zero_gives_zero() -> None:
    counts, _ = torch.ops.dycl.poisson(torch.tensor([0.0, 0.0, 2.0]), _state())
    assert counts[:2].tolist() == [0.0, 0.0] == torch.poisson(torch.zeros(2)).tolist()


def test_alpha_dropout_keeps_selus_mean_and_variance_and_its_ends() -> None:
    x = torch.randn(200000, generator=torch.Generator().manual_seed(0))
    dropped, _ = torch.ops.dycl.alpha_dropout(x, 0.3, _state(6))
    want = F.alpha_dropout(x, 0.3, True)
    assert abs(float(dropped.mean()) - float(want.mean())) < 0.01
    assert abs(float(dropped.std()) - float(want.std())) < 0.01
    alpha = 1.7580993408473766  # SELU's scale * alpha; a dropped element is -alpha * a * (1 - p)
    floor = -alpha * (1 - 0.3) / math.sqrt((alpha * alpha * 0.3 + 1) * (1 - 0.3))
    for values in (dropped, want):
        assert abs(float(((values - floor).abs() < 1e-5).double().mean()) - 0.3) < 0.005
    assert torch.equal(torch.ops.dycl.alpha_dropout(x, 0.0, _state())[0], F.alpha_dropout(x, 0.0, True))
    assert torch.equal(torch.ops.dycl.alpha_dropout(x, 1.0, _state())[0], F.alpha_dropout(x, 1.0, True))
    channels, _ = torch.ops.dycl.feature_alpha_dropout(torch.ones(64, 32, 3), 0.5, _state())
    assert torch.equal(channels.amin(2), channels.amax(2))  # whole channels


def test_a_run_time_training_flag_selects_the_draw() -> None:
    x = torch.ones(1000)
    off, following = torch.ops.dycl.dropout(x, 0.5, _state(), train=False)
    on, _ = torch.ops.dycl.dropout(x, 0.5, _state(), train=True)
    assert torch.equal(off, x) and following.tolist() == [0, 1]  # the stream advances either way
    assert abs(float((on == 0).double().mean()) - 0.5) < 0.05


def test_the_in_place_draws_follow_their_distributions() -> None:
    shape = torch.empty(100000)
    exponential, state = torch.ops.dycl.exponential(shape, 2.0, _state(7))
    assert float(exponential.min()) >= 0.0 and abs(float(exponential.mean()) - 0.5) < 0.01
    geometric, state = torch.ops.dycl.geometric(shape, 0.25, state)
    assert float(geometric.min()) == 1.0 and abs(float(geometric.mean()) - 4.0) < 0.05
    cauchy, state = torch.ops.dycl.cauchy(shape, 1.0, 2.0, state)
    assert abs(float(cauchy.median()) - 1.0) < 0.05 and abs(float((cauchy - 1.0).abs().median()) - 2.0) < 0.05
    log_normal, state = torch.ops.dycl.log_normal(shape, 0.5, 0.25, state)
    assert abs(float(log_normal.log().mean()) - 0.5) < 0.01 and abs(float(log_normal.log().std()) - 0.25) < 0.01
    normal, state = torch.ops.dycl.normal_from_float(-1.0, torch.full((100000,), 3.0), state)
    assert abs(float(normal.mean()) + 1.0) < 0.05 and abs(float(normal.std()) - 3.0) < 0.05
    probabilities = torch.tensor([[0.0], [1.0], [0.2], [0.7]])
    ones, state = torch.ops.dycl.bernoulli_tensor(torch.empty(4, 50000), probabilities, state)
    assert ones[0].sum() == 0 and ones[1].sum() == 50000 and abs(float(ones[2:].mean(1)[0]) - 0.2) < 0.01
    integers, _ = torch.ops.dycl.randint_like_low(torch.empty(10000, dtype=torch.int32), -2, 3, state)
    assert integers.dtype == torch.int32 and set(integers.unique().tolist()) == {-2, -1, 0, 1, 2}


# -- the Program: each op becomes its dycl:: op on the state ---------------------------------------


class _InPlace(nn.Module):
    """The in-place and float-mean forms as models write them, in a loop."""

    def forward(self, x: torch.Tensor, n: int):
        for _ in range(n):
            x = x + torch.empty_like(x).exponential_() + torch.empty_like(x).normal_(1.0, 2.0)
            x = x + torch.empty_like(x).bernoulli_(torch.full_like(x, 0.3)) + torch.normal(0.5, x.abs())
            x = x + torch.empty_like(x).geometric_(0.3) + torch.randint_like(x, 5) + torch.empty_like(x).random_(0, 5)
        return x


def test_every_random_op_of_the_program_reads_the_state() -> None:
    program = partition(specialize(capture(_InPlace()), (torch.ones(2, 3), 2)))
    targets = {op.target for segment in program.segments for op in segment.nodes}
    assert program.random_state
    assert not [t for t in targets if t.startswith("aten::") and any(w in t for w in ("rand", "normal", "bern"))]
    assert {"dycl::exponential", "dycl::normal_shaped", "dycl::bernoulli_tensor", "dycl::normal_from_float"} <= targets
    assert {"dycl::geometric", "dycl::randint_like", "dycl::random_between"} <= targets
    assert any(node for node in iter_nodes(program.body))


# -- bundles: a sampling decoder, and the other ops inside a loop ----------------------------------


class _SamplingDecoder(nn.Module):
    """The sampling loop of a language model's `generate` (minGPT, nanoGPT, HuggingFace's `sample`):
    logits of the last token, scaled by a temperature, softmax, `torch.multinomial(probs, 1)`, the token
    appended, stop at the end token."""

    def __init__(self, vocabulary: int = 16, width: int = 8) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocabulary, width)
        self.mix = nn.Linear(width, width)
        self.head = nn.Linear(width, vocabulary)
        self.end = 0

    def forward(self, tokens: torch.Tensor, steps: int, temperature: float) -> torch.Tensor:
        for _ in range(steps):
            hidden = torch.tanh(self.mix(self.embed(tokens[:, -1])))
            logits = self.head(hidden) / temperature
            probs = F.softmax(logits, dim=-1)
            next_token = torch.multinomial(probs, num_samples=1)
            tokens = torch.cat((tokens, next_token), dim=1)
            if bool((next_token == self.end).all()):
                break
        return tokens


@pytest.fixture(scope="module")
def decoder(tmp_path_factory: pytest.TempPathFactory):
    model = _SamplingDecoder().eval()
    bundle = dycl_iree.export(model, (torch.tensor([[3]]), 4, 1.0))
    return model, bundle, bundle.save(tmp_path_factory.mktemp("sampling") / "decoder.dycl")


def test_a_sampling_decoder_gets_the_compiled_host(decoder) -> None:
    _, bundle, _ = decoder
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    assert bundle.manifest["random_state"]


def test_greedy_sampling_is_pytorchs_sequence(decoder) -> None:
    """A temperature near zero makes every row one-hot (the others underflow to 0), so PyTorch's
    multinomial is deterministic and the bundle must give its tokens exactly, stop included."""
    model, _, path = decoder
    run = dycl_iree.load(path, host="compiled")
    lengths = set()
    for start in range(16):
        tokens = torch.tensor([[start]])
        for steps in (0, 1, 6):
            got = run(tokens.numpy(), steps, 1e-4)
            with torch.no_grad():
                want = model(tokens, steps, 1e-4)
            np.testing.assert_array_equal(got, want.numpy())
            lengths.add((steps, want.shape[1] - 1))
    assert (0, 0) in lengths and (6, 6) in lengths and any(n < steps for steps, n in lengths if steps), lengths


def test_sampling_draws_tokens_by_their_probabilities_on_both_hosts(decoder) -> None:
    model, _, path = decoder
    compiled = dycl_iree.load(path, host="compiled", seed=5)
    python = dycl_iree.load(path, host="python", seed=5)
    tokens = torch.tensor([[3]])
    firsts = []
    for _ in range(400):
        got = compiled(tokens.numpy(), 3, 1.0)
        np.testing.assert_array_equal(got, python(tokens.numpy(), 3, 1.0))
        firsts.append(int(got[0, 1]))
    with torch.no_grad():
        probs = F.softmax(model.head(torch.tanh(model.mix(model.embed(tokens[:, -1])))), -1)[0].double()
    got = torch.bincount(torch.tensor(firsts), minlength=16).double() / len(firsts)
    assert float((got - probs).abs().max()) < 4 * math.sqrt(0.25 / len(firsts)), (got, probs)


class _DrawsInALoop(nn.Module):
    """The other ops inside a loop and an `if`, each its own output, with the draw's parameters as inputs
    so that a deterministic setting compares with PyTorch exactly."""

    def forward(self, x: torch.Tensor, n: int, p: float, rate: float, train: bool):
        outputs = [x, x, x, x, x, x, x, x]
        for _ in range(n):
            if float(x.sum()) > 0.0:
                outputs = [
                    torch.randperm(4096).reshape(64, 64).float(),
                    torch.poisson(x * rate),
                    F.alpha_dropout(x, p, True),
                    F.dropout(x, 0.5, train),
                    torch.multinomial(F.softmax(x * rate, -1), 64, True).float(),
                    torch.empty_like(x).bernoulli_(torch.full_like(x, p)),
                    torch.normal(2.0, x),
                    torch.empty_like(x).exponential_(rate + 1.0),
                ]
        return outputs


@pytest.fixture(scope="module")
def draws_in_a_loop(tmp_path_factory: pytest.TempPathFactory):
    model = _DrawsInALoop()
    bundle = dycl_iree.export(model, (torch.ones(64, 64), 1, 0.5, 3.0, True))
    return model, bundle, bundle.save(tmp_path_factory.mktemp("sampling") / "loop.dycl")


def test_the_other_ops_in_a_loop_get_the_compiled_host_and_both_hosts_agree(draws_in_a_loop) -> None:
    _, bundle, path = draws_in_a_loop
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    x = np.ones((64, 64), np.float32)
    for arguments in ((x, 1, 0.3, 20.0, True), (x, 2, 0.5, 0.5, False)):
        got = dycl_iree.load(path, host="compiled", seed=4)(*arguments)
        want = dycl_iree.load(path, host="python", seed=4)(*arguments)
        for index, (a, b) in enumerate(zip(got, want)):
            np.testing.assert_array_equal(a, b, err_msg=str(index))


def test_the_other_ops_draw_their_distributions(draws_in_a_loop) -> None:
    _, _, path = draws_in_a_loop
    x = np.ones((64, 64), np.float32)
    outputs = dycl_iree.load(path, seed=8)(x, 1, 0.3, 20.0, True)
    perm, counts, alpha, dropped, samples, ones, normal, exponential = outputs
    assert sorted(perm.reshape(-1).astype(int).tolist()) == list(range(4096))
    assert abs(counts.mean() - 20.0) < 0.5 and abs(counts.var() - 20.0) < 2.0 and (counts == np.floor(counts)).all()
    scale = 1 / math.sqrt((1.7580993408473766**2 * 0.3 + 1) * 0.7)  # alpha dropout keeps a * (1 - p) of a mean
    assert abs(alpha.mean() - scale * 0.7) < 0.05 and abs((alpha == alpha.min()).mean() - 0.3) < 0.03
    assert abs((dropped == 0).mean() - 0.5) < 0.03 and np.allclose(dropped[dropped != 0], 2.0)
    assert samples.min() >= 0 and samples.max() < 64 and abs(samples.mean() - 31.5) < 1.0  # equal probabilities
    assert abs(ones.mean() - 0.3) < 0.03 and abs(normal.mean() - 2.0) < 0.05 and abs(normal.std() - 1.0) < 0.05
    assert abs(exponential.mean() - 1 / 21.0) < 0.005


def test_deterministic_settings_are_pytorchs_exactly(draws_in_a_loop) -> None:
    """p = 0 (alpha dropout is the input, bernoulli all zeros), training off (dropout the input), a rate
    of 0 (poisson zeros), one-hot probabilities (softmax of huge differences): PyTorch's values."""
    model, _, path = draws_in_a_loop
    run = dycl_iree.load(path, host="compiled")
    x = torch.ones(64, 64)
    x[:, 7] = 2.0  # softmax(x * rate) one-hot on column 7 once the rate is large
    got = run(x.numpy(), 1, 0.0, 1000.0, False)
    want = model(x, 1, 0.0, 1000.0, False)
    for index in (2, 3, 4, 5):
        np.testing.assert_array_equal(got[index], want[index].numpy(), err_msg=str(index))
    zero_rate = run(x.numpy(), 1, 0.0, 0.0, False)[1]
    np.testing.assert_array_equal(zero_rate, torch.poisson(x * 0.0).numpy())
    untouched = run(-x.numpy(), 1, 0.5, 3.0, True)  # the `if` not taken: the inputs come back
    for value in untouched:
        np.testing.assert_array_equal(value, -x.numpy())


class _RandomizedLeakyRelu(nn.Module):
    """`F.rrelu` in training mode draws its slopes from torch-mlir's global seed (no dycl:: op replaces it)."""

    def forward(self, x: torch.Tensor, n: int):
        for _ in range(n):
            x = F.rrelu(x, 0.1, 0.3, True) - 0.5
        return x


def test_a_random_op_on_the_global_seed_in_a_loop_falls_back_naming_it(tmp_path) -> None:
    bundle = dycl_iree.export(_RandomizedLeakyRelu(), (torch.randn(2, 3), 2))
    reason = bundle.manifest["compiled_host_unsupported"]
    assert bundle.host == "python"
    assert "aten::rrelu.default" in reason and "functional.py:" in reason and "global random seed" in reason
    run = dycl_iree.load(bundle.save(tmp_path / "rrelu.dycl"), host="python")
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(run(x, 1), x - 0.5)  # positive: rrelu is the identity there


def test_iree_draws_the_reference_interpreters_permutation_and_masks(draws_in_a_loop) -> None:
    """randperm (a sort of integer keys), the dropout and bernoulli masks and alpha dropout come from
    integer arithmetic and exact conversions: IREE's values are PyTorch's eager run of the same dycl::
    ops; poisson, multinomial and the exponential go through log, exp or cumsum rounding, whose last
    bit may differ, so they agree within float32 rounding where a count or category is not on a boundary."""
    _, bundle, path = draws_in_a_loop
    x = torch.ones(64, 64)
    arguments = (1, 0.3, 20.0, True)
    want = ReferenceInterpreter(bundle.program).run(x, *arguments, seed=6)
    got = dycl_iree.load(path, host="compiled", seed=6)(x.numpy(), *arguments)
    for index in (0, 2, 3, 5):
        np.testing.assert_allclose(got[index], want[index].numpy(), rtol=1e-6, err_msg=str(index))
    for index in (1, 4):
        assert (got[index] == want[index].numpy()).mean() > 0.99, index
    np.testing.assert_allclose(got[7], want[7].numpy(), rtol=1e-5)
