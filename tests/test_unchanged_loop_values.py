"""A value a loop carries but never changes is the value it starts with (`capture.fold_unchanged_loop_values`).

TorchScript carries an Optional that a loop's body refines (`if s_cols is not None:`), since the
branch yields the refined value on one side and the unrefined one on the other, although neither
changes it. Emformer's mask loop carried its `s_cols_mask`, a constant list of bools, that way: the
compiled host cannot hold a list of bools that changes at run time, so an Emformer with a memory had
only the Python host, and each column group of its summary mask was chosen by a branch at run time.
"""

from __future__ import annotations

from typing import List, Optional

import pytest
import torch
from torch import Tensor, nn

from dycl_iree.capture import capture
from tests.conftest import check_hosts, check_hosts_raise, export_compiled


def _block(widths: List[int], seen: List[bool], rows: int) -> Tensor:  # noqa: UP006
    parts = [torch.ones(rows, w) if s else torch.zeros(rows, w) for w, s in zip(widths, seen)]
    return torch.cat(parts, dim=1)


class _SummaryMask(nn.Module):
    """Emformer's `_gen_attention_mask`, cut down: with a summary, each segment adds a summary row
    that sees other columns than the segment's rows."""

    def __init__(self, summary: bool) -> None:
        super().__init__()
        self.summary = summary

    def forward(self, x: Tensor, segments: int) -> Tensor:
        rows: List[Tensor] = []  # noqa: UP006
        summaries: List[Tensor] = []  # noqa: UP006
        if self.summary:
            seen = [i in [1, 3] for i in range(4)]
            summary_seen: Optional[List[bool]] = [i in [3] for i in range(4)]  # noqa: UP006, UP045
        else:
            seen = [i in [1, 2] for i in range(4)]
            summary_seen = None
        for segment in range(segments):
            widths = [segment, 1, 2, segments - segment]
            rows.append(_block(widths, seen, 2))
            if summary_seen is not None:
                summaries.append(_block(widths, summary_seen, 1))
        return torch.cat(rows + summaries) * x


def _carried_types(graph: torch._C.Graph) -> list[str]:
    return [str(output.type()) for node in graph.nodes() if node.kind() == "prim::Loop" for output in node.outputs()]


def test_scripting_carries_the_refined_optional_and_capture_folds_it() -> None:
    model = _SummaryMask(summary=True).eval()
    frozen = torch.jit.freeze(torch.jit.script(model))
    assert _carried_types(frozen.graph) == ["Optional[List[bool]]"]
    assert _carried_types(capture(model).graph) == []


@pytest.mark.parametrize("summary", [True, False])
def test_a_refined_optional_list_of_bools_takes_the_compiled_host(tmp_path, summary: bool) -> None:
    x = torch.tensor([1.5])
    _, scripted, compiled, python = export_compiled(tmp_path, _SummaryMask(summary), (x, 3), f"summary{summary}")
    for segments in (1, 2, 5):
        check_hosts(scripted, [compiled, python], (torch.tensor([-0.5]), segments))
    trips = {count for counts in python.trip_counts.values() for count in counts}
    assert {1, 2, 5} <= trips, python.trip_counts
    # No segment: `torch.cat` of no blocks raises, as PyTorch does.
    check_hosts_raise(scripted, [compiled, python], (torch.tensor([-0.5]), 0), "expected a non-empty list")
