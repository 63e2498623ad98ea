"""Lists of lists of ints whose length is known only at run time, built by a comprehension or grown
in a loop (`[[token] for token in tokens]`, a beam search's new tokens as rows), and `torch.tensor`
of them: `specialize.ragged_ints` and `specialize.list_tensors`, against PyTorch on both hosts."""

from __future__ import annotations

from typing import List, Tuple

import pytest
import torch
from torch import nn

import dycl_iree
from tests.conftest import check_hosts, export_compiled

EMPTY_ROWS = r"torch.tensor of an empty list of lists gives a tensor of shape \[0\].*test_int_rows.py:\d+"


class TokenRows(nn.Module):
    """A token per step until a row is large, then one row per token, as torchaudio's
    `RNNTBeamSearch._gen_new_hypos` makes its decoder's input; the two-row literal of run-time ints
    is a list of fixed length."""

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        tokens: List[int] = []  # noqa: UP006  (TorchScript reads the annotations)
        for i in range(n):
            row = x[i % x.shape[0]]
            tokens.append(int(row.argmax()))
            if float(row.sum()) > 2.0:
                break
        rows = torch.tensor([[token] for token in tokens])
        counts = torch.tensor([[n], [len(tokens)]])
        return rows * 10 + counts.sum()


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(3)
    small = torch.randn(3, 4) * 0.1
    large = small.clone()
    large[1] += 1.0  # the second step breaks
    return small, large


@pytest.fixture(scope="module")
def token_rows(tmp_path_factory):
    """TokenRows exported once: (bundle, scripted, its folder); each test loads its own hosts
    (`_hosts`), so the trip counts the Python host records are that test's."""
    folder = tmp_path_factory.mktemp("rows")
    bundle, scripted, _, _ = export_compiled(folder, TokenRows(), (torch.randn(3, 4), 3), "rows")
    return bundle, scripted, folder / "rows.dycl"


def _hosts(path):
    return dycl_iree.load(path, host="compiled"), dycl_iree.load(path, host="python", record=True)


def test_one_row_per_token_is_an_int64_tensor_of_n_rows_on_the_compiled_host(token_rows):
    bundle, scripted, path = token_rows
    compiled, python = _hosts(path)
    assert bundle.host == "compiled"
    small, large = _inputs()
    shapes = []
    for inputs in ((small, 1), (small, 2), (large, 5), (small, 7)):
        result = check_hosts(scripted, (compiled, python), inputs)
        assert result.dtype == torch.int64
        shapes.append(tuple(result.shape))
    assert shapes == [(1, 1), (2, 1), (2, 1), (7, 1)], shapes  # one row; several; cut by the break
    tokens_loop, rows_loop = python.trip_counts.values()
    assert tokens_loop == [1, 2, 2, 7] and rows_loop == [1, 2, 2, 7], python.trip_counts


def test_no_tokens_raises_where_pytorch_gives_a_tensor_of_another_rank(token_rows):
    """TorchScript makes `torch.tensor` of no rows a tensor of shape [0] (int64, from the list's
    type; eager PyTorch's is float32): of rank 1 where every other length gives rank 2. One exported
    tensor has one rank, so that path raises on both hosts, naming the line."""
    bundle, scripted, path = token_rows
    compiled, python = _hosts(path)
    small, _ = _inputs()
    with torch.no_grad():
        empty = scripted(small, 0)
    assert empty.shape == (0,) and empty.dtype == torch.int64
    assert torch.tensor([[t] for t in []]).shape == (0,)  # eager PyTorch: rank 1 too
    for host in (compiled, python):
        with pytest.raises(dycl_iree.ModelRaised, match=EMPTY_ROWS):
            host(small.numpy(), 0)
    assert python.trip_counts["loop0"] == [0] and not bundle.manifest.get("compiled_host_unsupported")


class PairRows(nn.Module):
    """Rows of two ints, returned as lists, read at an index known only at run time, summed by a
    `for`, and shortened by `del` on one side of a branch, before `torch.tensor` of what is left."""

    def forward(self, x: torch.Tensor, n: int, i: int) -> Tuple[List[List[int]], List[int], int, torch.Tensor]:  # noqa: UP006  (TorchScript reads the annotations)
        tokens: List[int] = []  # noqa: UP006  (TorchScript reads the annotations)
        for step in range(n):
            tokens.append(int(x[step % x.shape[0]].argmax()) + step)
        pairs = [[token, token + 1] for token in tokens]
        picked = pairs[i]
        total = 0
        for pair in pairs:
            total += pair[1] * len(pairs)
        if len(pairs) > 2:
            del pairs[1]
        return pairs, picked, total, torch.tensor(pairs)


def test_rows_of_two_are_returned_indexed_iterated_and_shortened(tmp_path):
    bundle, scripted, compiled, python = export_compiled(tmp_path, PairRows(), (torch.randn(3, 4), 3, 1), "pairs")
    assert bundle.host == "compiled"
    assert bundle.manifest["outputs"]["tree"][0] == {"ragged_ints": [0, 1]}
    x = torch.randn(3, 4)
    lengths = []
    for n, i in ((1, 0), (1, -1), (2, 1), (3, -3), (5, 4)):
        pairs, picked, _, rows = check_hosts(scripted, (compiled, python), (x, n, i))
        assert rows.shape == (len(pairs), 2) and rows.dtype == torch.int64 and len(picked) == 2
        lengths.append(len(pairs))
    assert lengths == [1, 1, 2, 2, 4], lengths  # `del` skipped for n <= 2, taken for n > 2
    # The `if len(pairs) > 2` went both ways.
    assert any(sides[True] and sides[False] for sides in python.decisions.values()), python.decisions
    for n, i in ((0, 0), (2, 2), (2, -3)):
        with pytest.raises(RuntimeError, match="list index out of range"):
            scripted(x, n, i)
        for host in (compiled, python):
            with pytest.raises(dycl_iree.ModelRaised, match="list index out of range"):
                host(x.numpy(), n, i)


class Prefixes(nn.Module):
    """Rows of different lengths (each token list so far), until a row is large."""

    def forward(self, x: torch.Tensor, n: int) -> List[List[int]]:  # noqa: UP006  (TorchScript reads the annotations)
        tokens: List[int] = []  # noqa: UP006  (TorchScript reads the annotations)
        prefixes: List[List[int]] = []  # noqa: UP006  (TorchScript reads the annotations)
        for step in range(n):
            row = x[step % x.shape[0]]
            tokens.append(int(row.argmax()))
            prefixes.append(tokens + [step])
            if float(row.sum()) > 2.0:
                break
        return prefixes


def test_rows_of_different_lengths_are_returned_as_lists(tmp_path):
    bundle, scripted, compiled, python = export_compiled(tmp_path, Prefixes(), (torch.randn(3, 4), 3), "prefixes")
    small, large = _inputs()
    lengths = [
        len(check_hosts(scripted, (compiled, python), inputs)) for inputs in ((small, 0), (small, 4), (large, 6))
    ]
    assert lengths == [0, 4, 2], lengths  # no row; all steps; cut by the break


class PrefixTensor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.prefixes = Prefixes()

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return torch.tensor(self.prefixes(x, n))


def test_torch_tensor_of_rows_of_run_time_lengths_is_refused_at_its_line():
    message = r"torch.tensor of a list of lists of ints whose lengths are not one length known at export \(.*int_rows"
    with pytest.raises(dycl_iree.DyclError, match=message):
        dycl_iree.export(PrefixTensor().eval(), (torch.randn(3, 4), 3))
