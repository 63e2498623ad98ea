"""Ranges whose bounds are known at export are imported as literals of PyTorch's values
(`dycl_iree/constant_ranges.py`); the others stay ops. Both hosts against PyTorch."""

from __future__ import annotations

import re

import torch
from torch import nn

from dycl_iree import lower as lower_stage

from .conftest import check_hosts, export_compiled


class PositionsAndSteps(nn.Module):
    """A model's own ranges of constant bounds are constants before lowering (the specializer folds
    them); the ranges lowering meets come from decompositions: argmax's positions (`nan_keeping`),
    bilinear upsampling's float grid. Beside them, a range over a run-time count."""

    def forward(self, x: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        best = x.argmax(1)
        up = torch.nn.functional.interpolate(x.view(1, 1, 2, 8), scale_factor=1.5, mode="bilinear")
        counted = torch.arange(n)
        return up + best.sum().to(x.dtype), counted.sum() * best


def _ranges(text: str) -> list[str]:
    """The result types of the arange ops left in a lowered module's text."""
    return re.findall(r"torch\.aten\.arange[.\w]* [^\n]*-> (!torch\.vtensor<[^>]*>)", text)


def test_ranges_of_known_bounds_are_literals_and_give_pytorchs_values(tmp_path) -> None:
    from dycl_iree.capture import capture
    from dycl_iree.partition import partition
    from dycl_iree.specialize import specialize

    model = PositionsAndSteps().eval()
    example = (torch.randn(2, 8), 4)
    program = partition(specialize(capture(model), example))
    folded = str(lower_stage.lower(program).module)
    kept = str(lower_stage.lower(program, fold_ranges=False).module)
    assert _ranges(folded) == ["!torch.vtensor<[?],si64>"], _ranges(folded)  # only the run-time one
    static = {text for text in _ranges(kept) if "?" not in text}  # argmax's positions, the grid's
    assert {"!torch.vtensor<[8],si64>", "!torch.vtensor<[12],f32>"} <= static, _ranges(kept)
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "ranges")
    for seed, n in ((0, 4), (1, 0), (2, 9)):
        check_hosts(scripted, (compiled, python), (torch.randn(2, 8, generator=torch.Generator().manual_seed(seed)), n))
