"""Host lists of floats of run-time length (beam scores) on the compiled host: `hosts.lists`, float64
as TorchScript's floats are, against PyTorch on both hosts."""

from __future__ import annotations

from typing import List, Tuple

import pytest
import torch
from torch import nn

import dycl_iree
from tests.conftest import check_hosts, check_hosts_raise, export_compiled


class Scores(nn.Module):
    """Scores appended in a loop that the data may stop early, read at an index only the run time
    knows (from the back), and compared with each other."""

    def forward(self, x: torch.Tensor, n: int) -> Tuple[List[float], int]:  # noqa: UP006  (TorchScript reads the annotations)
        scores: List[float] = [0.25]  # noqa: UP006  (TorchScript reads the annotations)
        best = 0
        for i in range(n):
            row = x[i % x.shape[0]]
            picked = scores[int(row.argmax()) % len(scores) - len(scores)]  # a negative index
            scores.append(picked + float(row.max()))
            if scores[-1] > scores[best]:
                best = len(scores) - 1
            if float(row.sum()) > 2.0:
                break
        return scores, best


def _inputs() -> list[tuple[torch.Tensor, int]]:
    torch.manual_seed(3)
    small = torch.randn(3, 4) * 0.1
    large = small.clone()
    large[1] += 1.0  # the second step breaks
    # 1/3 is not a float32: a score held as float32 anywhere would differ from PyTorch's.
    thirds = torch.full((3, 4), 1.0 / 3.0, dtype=torch.float64).float()
    return [(small, 0), (small, 1), (large, 5), (small, 6), (torch.randn(3, 4), 9), (thirds, 7)]


def _arrays(inputs: tuple) -> tuple:
    return tuple(i.numpy() if isinstance(i, torch.Tensor) else i for i in inputs)


def test_scores_grow_and_are_read_and_compared_on_the_compiled_host(tmp_path):
    bundle, scripted, compiled, python = export_compiled(tmp_path, Scores(), (torch.randn(3, 4), 4), "scores")
    assert bundle.host == "compiled"
    lengths, bests = set(), set()
    for inputs in _inputs():
        scores, best = check_hosts(scripted, (compiled, python), inputs)
        # Exactly PyTorch's doubles on the compiled host, not within a tolerance.
        assert compiled(*_arrays(inputs))[0] == scores
        lengths.add(len(scores))
        bests.add(best == 0)
    (trips,) = python.trip_counts.values()
    assert trips[:3] == [0, 1, 2], trips  # not entered; run to its count; stopped by the break
    assert lengths >= {1, 2, 3, 7}, lengths
    assert bests == {True, False}  # the comparison went both ways


class Upload(nn.Module):
    """Scores sliced at run-time bounds (one omitted), joined and uploaded: `torch.tensor` of a
    list of floats is float32 unless told otherwise, as in PyTorch."""

    def forward(self, x: torch.Tensor, n: int, k: int) -> Tuple[List[float], torch.Tensor, torch.Tensor]:  # noqa: UP006  (TorchScript reads the annotations)
        scores: List[float] = [0.25]  # noqa: UP006  (TorchScript reads the annotations)
        for i in range(n):
            scores.append(scores[-1] + float(x[i % x.shape[0]].max()))
        tail = scores[k:-1] + scores[: len(scores) // 2]
        return scores, torch.tensor(tail), torch.tensor(tail, dtype=torch.float64)


def test_slices_joined_and_uploaded_on_the_compiled_host(tmp_path):
    example = (torch.randn(3, 4), 4, 1)
    bundle, scripted, compiled, python = export_compiled(tmp_path, Upload(), example, "upload")
    assert bundle.host == "compiled"
    x = torch.full((3, 4), 1.0 / 3.0)
    sizes = set()
    for n, k in ((0, 0), (1, 1), (2, 0), (5, 2), (5, -2), (5, 9)):
        scores, single, double = check_hosts(scripted, (compiled, python), (x, n, k))
        got = compiled(*_arrays((x, n, k)))
        # Exact doubles; TorchScript rounds `torch.tensor(xs, dtype=torch.float64)` through float32.
        assert got[0] == scores and got[2].tolist() == double.tolist()
        assert single.dtype == torch.float32 and str(got[1].dtype) == "float32", got[1]
        sizes.add(len(single))
    assert 0 in sizes and max(sizes) >= 5, sizes


class PickScore(nn.Module):
    """`scores[i]` with `i` an input: PyTorch's IndexError past either end, on both hosts."""

    def forward(self, x: torch.Tensor, n: int, i: int) -> float:
        scores: List[float] = []  # noqa: UP006  (TorchScript reads the annotations)
        for step in range(n):
            scores.append(float(x[step % x.shape[0]]) * 0.1 + step)
        return scores[i]


class PickCount(nn.Module):
    """`counts[i]` of a list of ints, as `PickScore`."""

    def forward(self, x: torch.Tensor, n: int, i: int) -> int:
        counts: List[int] = []  # noqa: UP006  (TorchScript reads the annotations)
        for step in range(n):
            counts.append(int(x[step % x.shape[0]] * 10) + step)
        return counts[i]


@pytest.mark.parametrize("model", [PickScore, PickCount], ids=["floats", "ints"])
def test_an_index_past_either_end_raises_on_both_hosts(tmp_path, model):
    bundle, scripted, compiled, python = export_compiled(tmp_path, model(), (torch.ones(2), 3, 1), "pick")
    assert bundle.host == "compiled"
    x = torch.tensor([0.3, 0.7])
    for n, i in ((3, 0), (3, 2), (3, -3), (1, -1), (4, -2)):
        check_hosts(scripted, (compiled, python), (x, n, i))
    for n, i in ((3, 3), (3, -4), (0, 0)):
        check_hosts_raise(scripted, (compiled, python), (x, n, i), "list index out of range")
    with pytest.raises(dycl_iree.ModelRaised, match=r"IndexError: list index out of range \(.*test_float_lists.py:"):
        python(*_arrays((x, 3, 3)))
