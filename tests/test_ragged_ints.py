"""Lists of tuples of run-time length whose tuples hold a `List[int]` of its own length (a beam's
hypotheses, `(tokens, score)`), indexed at run time: `specialize.ragged_ints`, against PyTorch on
both hosts."""

from __future__ import annotations

from typing import List, Tuple

import torch
from torch import nn

from host_runtime.output_tree import build_outputs, check_tree, describe_tree, flatten_outputs
from tests.conftest import check_hosts, check_hosts_raise, export_compiled


class GrowBeam(nn.Module):
    """Each step extends the tokens of a hypothesis that the data picks (an index known only at run
    time) by one token; the loop stops early when a row is large. The first hypothesis is a literal
    that TorchScript folds into a constant tuple."""

    def forward(self, x: torch.Tensor, n: int) -> Tuple[List[Tuple[List[int], torch.Tensor]], List[int]]:  # noqa: UP006  (TorchScript reads the annotations)
        hyps: List[Tuple[List[int], torch.Tensor]] = [([7], x[0, :1] * 0.0)]  # noqa: UP006  (TorchScript reads the annotations)
        for i in range(n):
            row = x[i % x.shape[0]]
            tokens, score = hyps[int(row.argmax()) % len(hyps)]
            hyps.append((tokens + [i + 1], score + row.max()))
            if float(row.sum()) > 2.0:
                break
        # A negative index known only at run time reads from the back.
        last, _ = hyps[int(x[0].argmin()) % len(hyps) - len(hyps)]
        return hyps, last


def _inputs() -> list[tuple[torch.Tensor, int]]:
    torch.manual_seed(1)
    small = torch.randn(3, 4) * 0.1
    large = small.clone()
    large[1] += 1.0  # the second step breaks
    return [(small, 0), (small, 1), (large, 5), (small, 6), (torch.randn(3, 4), 9)]


def test_a_beam_of_token_lists_grows_and_is_read_at_run_time_on_the_compiled_host(tmp_path):
    bundle, scripted, compiled, python = export_compiled(tmp_path, GrowBeam(), (torch.randn(3, 4), 4), "beam")
    assert bundle.host == "compiled"
    tree = bundle.manifest["outputs"]["tree"]
    assert tree[0]["zip"][0] == {"ragged_ints": [0, 1]}, tree
    assert bundle.manifest["version"] == 4  # the format that added them: older runtimes refuse it by that
    lengths = set()
    for inputs in _inputs():
        hyps, _ = check_hosts(scripted, (compiled, python), inputs)
        lengths.add(len(hyps))
    (trips,) = python.trip_counts.values()
    assert trips[:3] == [0, 1, 2], trips  # not entered; run to its count; stopped by the break
    assert lengths >= {1, 2, 3, 7}, lengths
    assert max(len(tokens) for tokens, _ in scripted(*_inputs()[-1])[0]) >= 3  # token lists of 1, 2 and more


class PickHypothesis(nn.Module):
    """`hyps[i]` with `i` an input: PyTorch's IndexError past either end, on both hosts."""

    def forward(self, x: torch.Tensor, n: int, i: int) -> List[int]:  # noqa: UP006  (TorchScript reads the annotations)
        hyps: List[Tuple[List[int], torch.Tensor]] = [([0], x)]  # noqa: UP006  (TorchScript reads the annotations)
        for step in range(n):
            tokens, h = hyps[-1]
            hyps.append((tokens + [step], h * 2.0))
        tokens, _ = hyps[i]
        return tokens


def test_an_index_past_either_end_raises_on_both_hosts(tmp_path):
    bundle, scripted, compiled, python = export_compiled(tmp_path, PickHypothesis(), (torch.ones(2), 3, 1), "pick")
    assert bundle.host == "compiled"
    x = torch.ones(2)
    # hyps[k] holds [0, 0, 1, ..., k - 1].
    expected = {(3, 0): [0], (3, 3): [0, 0, 1, 2], (3, -4): [0], (0, 0): [0], (2, -1): [0, 0, 1], (3, -2): [0, 0, 1]}
    for (n, i), tokens in expected.items():
        assert check_hosts(scripted, (compiled, python), (x, n, i)) == tokens
    for n, i in ((3, 4), (3, -5), (0, 1)):
        check_hosts_raise(scripted, (compiled, python), (x, n, i), "list index out of range")


class FloatScores(nn.Module):
    """The same beam with float scores: a host list of floats (`tests/test_float_lists.py`)."""

    def forward(self, x: torch.Tensor, n: int) -> List[Tuple[List[int], float]]:  # noqa: UP006  (TorchScript reads the annotations)
        hyps: List[Tuple[List[int], float]] = [([0], 0.0)]  # noqa: UP006  (TorchScript reads the annotations)
        for i in range(n):
            row = x[i % x.shape[0]]
            tokens, score = hyps[int(row.argmax()) % len(hyps)]
            hyps.append((tokens + [i + 1], score + float(row.max())))
            if float(row.sum()) > 2.0:
                break
        return hyps


def test_float_scores_take_the_compiled_host(tmp_path):
    bundle, scripted, compiled, python = export_compiled(tmp_path, FloatScores(), (torch.randn(3, 4), 4), "floats")
    assert bundle.host == "compiled"
    lengths = {len(check_hosts(scripted, (compiled, python), inputs)) for inputs in _inputs()}
    assert lengths >= {1, 2, 3, 7}, lengths


def test_the_output_tree_splits_the_ints_at_their_bounds():
    tree = {"ragged_ints": [0, 1]}
    check_tree(tree, 2, "outputs")
    lists = [[7], [], [7, 1, 2]]
    leaves = flatten_outputs(tree, lists)
    assert leaves == [[7, 7, 1, 2], [0, 1, 1, 4]]
    assert build_outputs(tree, leaves) == lists
    assert describe_tree(tree, ["output0", "output1_bounds"]) == "split(output0, at=output1_bounds)"
