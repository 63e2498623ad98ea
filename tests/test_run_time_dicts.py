"""A dict keyed by `str(tokens)`, the text of a list of ints known only at run time, as a beam search
keeps its hypotheses (`specialize.run_time_dicts`): `key in d`, `d[key]`, `d[key] = value` and
`str(a) == str(b)`, against PyTorch on both hosts. Finding a key is the index of the last logged key
equal to it (`dycl::rfind_int_list`), which the compiled host computes with tensor ops
(`hosts/list_search.py`): keys of different lengths, the empty key, an empty log and a key set
twice (its last value wins) are each compared below."""

from __future__ import annotations

from typing import Dict, List, Tuple

import pytest
import torch
from torch import nn

import dycl_iree
from dycl_iree.errors import SpecializeError
from tests.conftest import check_hosts, check_hosts_raise

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


def _hosts(tmp_path, model, example, name):
    bundle = dycl_iree.export(model.eval(), example)
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / f"{name}.dycl")
    return dycl_iree.load(path, host="compiled"), dycl_iree.load(path, host="python")


def test_hypotheses_merged_by_their_tokens_on_both_hosts(tmp_path):
    hosts = _hosts(tmp_path, MergeByTokens(), (torch.randn(3, 4), 4), "merge")
    scripted = torch.jit.script(MergeByTokens().eval())
    torch.manual_seed(1)
    inputs = [(torch.randn(3, 4), n) for n in (0, 1, 3, 8, 12)] + [(torch.zeros(3, 4), 6)]  # zeros: one token
    results = [check_hosts(scripted, hosts, example) for example in inputs]
    merged, repeated = {r[2] for r in results}, {r[3] for r in results}
    assert 0 in merged and max(merged) >= 2, merged  # keys found in the dict, and not
    assert 0 in repeated and max(repeated) >= 1, repeated  # equal texts, and not
    assert {len(r[0]) for r in results} == {1, 2, 3}


class LookUp(nn.Module):
    """Keys of one token more each step, back to the empty key at a token 0, each set to the row times
    the step: keys of different lengths, the empty one and keys set twice. Then the value of the key
    of `q`'s first m ints, with whether it was there."""

    def forward(self, x: torch.Tensor, n: int, q: torch.Tensor, m: int) -> Tuple[torch.Tensor, bool]:  # noqa: UP006
        d: Dict[str, torch.Tensor] = {}  # noqa: UP006
        tokens: List[int] = []  # noqa: UP006
        for i in range(n):
            row = x[i % x.shape[0]]
            token = int(row.argmax())
            if token == 0:
                tokens = tokens[:0]
            else:
                tokens = tokens + [token]
            d[str(tokens)] = row * float(i + 1)
        query: List[int] = []  # noqa: UP006
        for j in range(m):
            query = query + [int(q[j])]
        if str(query) in d:
            return d[str(query)], True
        return x[0] * 0.0 - 1.0, False


def _keys(tokens_per_row: list[int], n: int) -> list[list[int]]:
    """The keys LookUp sets, in order (as plain Python, to say which case an input is)."""
    keys, tokens = [], []
    for i in range(n):
        token = tokens_per_row[i % len(tokens_per_row)]
        tokens = [] if token == 0 else [*tokens, token]
        keys.append(tokens)
    return keys


def test_finding_a_key_among_keys_of_other_lengths_the_empty_key_and_keys_set_twice(tmp_path):
    rows = [1, 2, 0, 1, 2, 1]
    x = torch.nn.functional.one_hot(torch.tensor(rows), 3).float() + 0.25
    q = torch.tensor([1, 2, 1, 2])
    hosts = _hosts(tmp_path, LookUp(), (x, 6, q, 2), "look_up")
    scripted = torch.jit.script(LookUp().eval())
    cases = [
        (6, [1], "set twice, found"),  # [1] at steps 0 and 3: the value of step 3
        (6, [1, 2], "set twice, found"),
        (6, [], "empty, found"),
        (6, [1, 2, 1], "longest, found"),
        (6, [2], "absent, a key of its length there"),
        (6, [1, 1], "absent, a key of its length there"),
        (6, [1, 2, 2], "absent, a key of its length there"),
        (6, [2, 1, 2, 1], "absent, longer than every key"),
        (2, [], "empty, absent"),
        (0, [], "nothing logged"),
        (0, [1], "nothing logged"),
    ]
    for n, query, case in cases:
        keys = _keys(rows, n)
        assert (query in keys) == case.endswith("found"), (n, query)
        assert ("twice" in case) == (keys.count(query) == 2), (n, query)
        padded = torch.tensor(query + [0] * (4 - len(query)))
        got = check_hosts(scripted, hosts, (x, n, padded, len(query)))
        assert got[1] == case.endswith("found"), (n, query)
        if "twice" in case:  # the last value set, the row times the last step it was set at, plus one
            last = max(i for i, key in enumerate(keys) if key == query)
            torch.testing.assert_close(got[0], x[last % 6] * float(last + 1))


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
    hosts = _hosts(tmp_path, ReadMissing(), (torch.randn(2), 3), "missing")
    scripted = torch.jit.script(ReadMissing().eval())
    x = torch.randn(2)
    check_hosts(scripted, hosts, (x, 2))
    check_hosts(scripted, hosts, (x, 5))
    check_hosts_raise(scripted, hosts, (x, 0), "KeyError")


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
