"""A list kept inside another list or a tuple, then grown: the holder sees the growth (TorchScript lists
are references), on both hosts, against PyTorch."""

from __future__ import annotations

from typing import List

import numpy as np
import pytest
import torch
from torch import nn

import dycl_iree


class _MasksToConcat(nn.Module):
    """Emformer's attention mask in small: the per-segment pieces go into two lists that are put in a
    list first and grown after (`masks_to_concat = [rc_mask, query_mask]`), then concatenated."""

    def forward(self, x: torch.Tensor, segments: int):
        rows: List[torch.Tensor] = []  # noqa: UP006  (TorchScript's spelling in published code)
        columns: List[torch.Tensor] = []  # noqa: UP006
        masks_to_concat = [rows, columns]
        for i in range(segments):
            rows.append(x[i : i + 1] * 2.0)
            columns.append(x[:, i : i + 1].t() + 1.0)
        return torch.cat([torch.cat(mask, 0) for mask in masks_to_concat], 0)


class _SeededLists(nn.Module):
    """Two lists that start with the same tensor (one value to the exporter), held in a list and
    grown in a loop, one of them only on some steps: each position of the holder follows its own
    list (it read the second list as it was when it was put in, a silently short result)."""

    def forward(self, x: torch.Tensor, steps: int):
        first: List[torch.Tensor] = [x[0:1]]  # noqa: UP006
        second: List[torch.Tensor] = [x[0:1]]  # noqa: UP006
        both = [first, second]
        for i in range(steps):
            first.append(x[i : i + 1] * 0.5)
            if float(x[i].sum()) > 0.0:
                second.append(x[i : i + 1] - 1.0)
        return torch.cat(both[0], 0), torch.cat([torch.cat(part, 0) for part in both], 0)


@pytest.mark.parametrize("model_class", [_MasksToConcat, _SeededLists])
def test_a_list_held_by_another_follows_its_growth(model_class: type, tmp_path) -> None:
    model = model_class()
    x = torch.linspace(-2.0, 2.0, 25).view(5, 5)
    bundle = dycl_iree.export(model, (x, 2))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / "held.dycl")
    cases = [(x, 1), (x, 3), (x.flip(0), 4), (-x, 5)]
    lengths = set()
    for host in ("compiled", "python"):
        run = dycl_iree.load(path, host=host)
        for values, count in cases:
            want = model(values, count)
            want = want if isinstance(want, tuple) else (want,)
            lengths.add(tuple(w.shape[0] for w in want))
            got = run(values.numpy(), count)
            got = got if isinstance(got, tuple) else (got,)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w.numpy(), rtol=1e-6, err_msg=f"{host} {count}")
    assert len(lengths) == len(cases)  # every case grew the lists differently
