"""`del xs[i]` on lists, as a beam search drops a hypothesis it merged into another (torchaudio's
`_remove_hypo`): a fixed-length list at a constant index, and lists of run-time length (of tensors,
of ints, of tuples of tokens and tensors) at an index known only at run time, against PyTorch on
both hosts (`specialize.list_deletion`)."""

from __future__ import annotations

from typing import List, Tuple

import torch
from torch import nn

from tests.conftest import check_hosts, check_hosts_raise, export_compiled

Hypotheses = List[Tuple[List[int], torch.Tensor]]  # noqa: UP006  (TorchScript reads the annotations)


class Prune(nn.Module):
    """Lists grown to n + 1 items, then item `drop` deleted from each."""

    def forward(self, x: torch.Tensor, n: int, drop: int) -> Tuple[Hypotheses, List[torch.Tensor], List[int]]:  # noqa: UP006
        hyps: Hypotheses = [([0], x[0] * 1.0)]
        rows: List[torch.Tensor] = [x[0] * 1.0]  # noqa: UP006
        marks: List[int] = [0]  # noqa: UP006
        for i in range(n):
            tokens, h = hyps[-1]
            hyps.append((tokens + [i + 1], h * 0.5 + x[(i + 1) % x.shape[0]]))
            rows.append(h * 2.0)
            marks.append(i + 1)
        del hyps[drop]
        del rows[drop]
        del marks[drop]
        return hyps, rows, marks


def test_an_item_known_only_at_run_time_is_deleted_from_every_kind_of_list(tmp_path):
    bundle, scripted, compiled, python = export_compiled(tmp_path, Prune(), (torch.randn(3, 4), 2, 1), "prune")
    assert bundle.host == "compiled"
    x = torch.randn(3, 4)
    # The middle, the first, the last from the back, the only one, and past the example's length.
    cases = {(2, 1): [0, 2], (3, 0): [1, 2, 3], (3, -1): [0, 1, 2], (0, 0): [], (4, 2): [0, 1, 3, 4], (2, -3): [1, 2]}
    for (n, drop), marks in cases.items():
        hyps, rows, kept = check_hosts(scripted, (compiled, python), (x, n, drop))
        assert kept == marks and len(rows) == len(hyps) == len(marks)
        assert [len(tokens) for tokens, _ in hyps] == [mark + 1 for mark in marks]
    for n, drop in ((2, 3), (0, -2)):  # past either end: PyTorch's IndexError on both hosts
        check_hosts_raise(scripted, (compiled, python), (x, n, drop), "list index out of range")


class DropConstant(nn.Module):
    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:  # noqa: UP006
        xs = [x, x * 2.0, x * 3.0]
        del xs[1]
        del xs[-1]
        return xs


def test_a_fixed_length_list_loses_an_item_at_a_constant_index(tmp_path):
    bundle, scripted, compiled, python = export_compiled(tmp_path, DropConstant(), (torch.randn(2),), "constant")
    assert len(check_hosts(scripted, (compiled, python), (torch.randn(2),))) == 1


class DropInBranch(nn.Module):
    """`del` on one side of a branch: the list after the branch is the shorter one on that side."""

    def forward(self, x: torch.Tensor, n: int) -> List[torch.Tensor]:  # noqa: UP006
        xs: List[torch.Tensor] = [x, x + 1.0, x + 2.0]  # noqa: UP006
        if n > 0:
            del xs[n % 3]
        return xs


def test_a_deletion_on_one_side_of_a_branch_is_kept_after_it(tmp_path):
    bundle, scripted, compiled, python = export_compiled(tmp_path, DropInBranch(), (torch.zeros(2), 1), "branch")
    lengths = [len(check_hosts(scripted, (compiled, python), (torch.arange(2.0), n))) for n in (0, 1, 5)]
    assert lengths == [3, 2, 2], lengths
    (sides,) = python.decisions.values()
    assert dict(sides) == {False: 1, True: 2}


class DropWhileGrowing(nn.Module):
    """`_remove_hypo`'s shape: each step searches the hypotheses so far and deletes one, then appends.
    The search loop is first visited with the list that starts empty, whose tensors are no rows."""

    def forward(self, x: torch.Tensor, n: int, drop: int) -> Hypotheses:
        hyps: Hypotheses = []
        for step in range(n):
            for i in range(len(hyps)):
                if i == drop:
                    del hyps[i]
                    break
            hyps.append(([step], x * float(step)))
        return hyps


def test_a_list_that_starts_empty_loses_an_item_in_a_search_loop(tmp_path):
    _, scripted, compiled, python = export_compiled(tmp_path, DropWhileGrowing(), (torch.ones(2), 3, 1), "search")
    kept = []
    for n, drop in ((0, 0), (3, 5), (4, 1)):
        hyps = check_hosts(scripted, (compiled, python), (torch.arange(2.0), n, drop))
        kept.append([tokens for tokens, _ in hyps])
    assert kept == [[], [[0], [1], [2]], [[0], [3]]], kept  # never entered; never found; deleted each step
