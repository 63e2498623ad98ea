"""A dict keyed by `str(tokens)`, the text of a list of ints known only at run time, as a beam search
keeps its hypotheses (`specialize.run_time_dicts`): `key in d`, `d[key]`, `d[key] = value` and
`str(a) == str(b)`, against PyTorch on the Python host, which the compiled host falls back to with
the operation named."""

from __future__ import annotations

import re
from typing import Dict, List, Tuple

import pytest
import torch
from torch import nn

import dycl_iree
from dycl_iree.errors import SpecializeError
from tests.conftest import check_hosts

Entry = Tuple[List[int], torch.Tensor]  # noqa: UP006  (TorchScript reads the annotations)


class MergeByTokens(nn.Module):
    """Each step moves a window of the last three tokens; hypotheses with equal windows are merged
    (their scores summed), and a step that repeats the previous window is counted."""

    def forward(self, x: torch.Tensor, n: int) -> Tuple[List[int], torch.Tensor, int, int]:  # noqa: UP006
        seen: Dict[str, Entry] = {}  # noqa: UP006
        merged, repeated = 0, 0
        tokens: List[int] = [0]  # noqa: UP006
        for i in range(n):
            row = x[i % x.shape[0]]
            previous = tokens
            tokens = tokens + [int(row.argmax()) % 2]
            if len(tokens) > 3:
                tokens = tokens[1:]
            if str(tokens) == str(previous):
                repeated += 1
            key = str(tokens)
            if key in seen:
                old = seen[key]
                seen[key] = (old[0], old[1] + row.max())
                merged += 1
            else:
                seen[key] = (tokens, row.max() * 1.0)
        last = str(tokens)
        if last in seen:
            return seen[last][0], seen[last][1], merged, repeated
        return tokens, x[0, 0] * 0.0, merged, repeated


def test_hypotheses_merged_by_their_tokens_on_the_python_host_which_says_why(tmp_path):
    bundle = dycl_iree.export(MergeByTokens().eval(), (torch.randn(3, 4), 4))
    assert bundle.host == "python"
    reason = bundle.manifest["compiled_host_unsupported"]
    assert re.search(r"host operation dycl::rfind_int_list \(tests/test_run_time_dicts.py:\d+\)", reason), reason
    python = dycl_iree.load(bundle.save(tmp_path / "merge.dycl"), host="python", record=True)
    scripted = torch.jit.script(MergeByTokens().eval())
    torch.manual_seed(1)
    inputs = [(torch.randn(3, 4), n) for n in (0, 1, 3, 8, 12)] + [(torch.zeros(3, 4), 6)]  # zeros: one token
    results = [check_hosts(scripted, (python,), example) for example in inputs]
    merged, repeated = {r[2] for r in results}, {r[3] for r in results}
    assert 0 in merged and max(merged) >= 2, merged  # keys found in the dict, and not
    assert 0 in repeated and max(repeated) >= 1, repeated  # equal texts, and not
    assert {len(r[0]) for r in results} == {1, 2, 3}


class ReadMissing(nn.Module):
    """The key of the first two tokens (of none, where the loop does not run: a key never set)."""

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        d: Dict[str, torch.Tensor] = {}  # noqa: UP006
        tokens: List[int] = []  # noqa: UP006
        for i in range(n):
            tokens.append(i)
            d[str(tokens)] = x * float(i)
        return d[str(tokens[:2])]


def test_a_missing_key_raises_as_pytorch_does(tmp_path):
    bundle = dycl_iree.export(ReadMissing().eval(), (torch.randn(2), 3))
    python = dycl_iree.load(bundle.save(tmp_path / "missing.dycl"), host="python")
    scripted = torch.jit.script(ReadMissing().eval())
    x = torch.randn(2)
    check_hosts(scripted, (python,), (x, 2))
    check_hosts(scripted, (python,), (x, 5))
    with pytest.raises(RuntimeError, match="KeyError"):
        scripted(x, 0)
    with pytest.raises(dycl_iree.ModelRaised, match="KeyError"):
        python(x.numpy(), 0)


class CountKeys(nn.Module):
    def forward(self, x: torch.Tensor, n: int) -> int:
        d: Dict[str, torch.Tensor] = {}  # noqa: UP006
        tokens: List[int] = []  # noqa: UP006
        for i in range(n):
            tokens.append(i % 2)
            d[str(tokens)] = x
        return len(d)


def test_reading_its_length_is_refused_at_its_line():
    with pytest.raises(SpecializeError, match=r"aten::len on a dict keyed by run-time text \(.*test_run_time_dicts"):
        dycl_iree.export(CountKeys().eval(), (torch.randn(2), 3))
