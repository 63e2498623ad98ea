"""Hints taken from one run of the model at its example inputs (`specialize/observed.py`).

Emformer builds its attention mask one segment at a time: each block is `torch.cat` of column
groups whose widths are differences of ints made from the loop's index, and one group (the memory,
`seg_idx - m_start` with none kept) is empty at every segment. A dynamic dim of example 0 is typed
with the example 2, so each block was typed 2 columns wider than the frames, and the joined mask
failed to meet the attention scores in `masked_fill`, at every example of the loop's index. With
the sizes of one run as hints, the blocks are as wide as the frames, and the joined mask as long as
the frames also where the last segment is shorter than the others (an odd number of frames).
"""

from __future__ import annotations

import math
import re
from typing import List

import pytest
import torch
from torch import Tensor, nn

import dycl_iree
from dycl_iree.capture import capture
from dycl_iree.partition import partition
from dycl_iree.program import TensorType, format_program
from dycl_iree.specialize import observed, specialize
from tests.conftest import check_hosts, check_hosts_raise, export_compiled


class _SegmentMask(nn.Module):
    """Emformer's mask, cut down: per segment of 2 frames, its rows see the memory (empty: none is
    kept) and their own segment; the blocks joined are T by T and mask the frames' scores."""

    def __init__(self) -> None:
        super().__init__()
        self.segment_length = 2
        self.max_memory_size = 0

    def mask(self, x: Tensor) -> Tensor:
        T = x.size(0)
        blocks: List[Tensor] = []  # noqa: UP006  (TorchScript's spelling in most models)
        for seg_idx in range(math.ceil(T / self.segment_length)):
            m_start = max(seg_idx - self.max_memory_size, 0)
            seg_start = seg_idx * self.segment_length
            seg_end = min((seg_idx + 1) * self.segment_length, T)
            widths = [seg_idx - m_start, seg_start, seg_end - seg_start, T - seg_end]
            seen = [True, False, True, False]
            rows = seg_end - seg_start
            parts = [torch.ones(rows, w) if s else torch.zeros(rows, w) for w, s in zip(widths, seen)]
            blocks.append(torch.cat(parts, 1))
        return (1 - torch.cat(blocks)).to(torch.bool)

    def forward(self, x: Tensor) -> Tensor:
        scores = x @ x.t()
        return torch.softmax(scores.masked_fill(self.mask(x), -1e8), -1) @ x


class _MaskOnly(_SegmentMask):
    """The mask and the frames' scores apart: typed without the observed run too."""

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self.mask(x), x @ x.t()


@pytest.mark.parametrize("frames", [6, 5])
def test_a_mask_joined_from_column_groups_empty_at_every_segment_meets_the_scores(tmp_path, frames: int) -> None:
    generator = torch.Generator().manual_seed(frames)
    example = torch.randn(frames, 4, generator=generator)
    _, scripted, compiled, python = export_compiled(
        tmp_path, _SegmentMask(), (example,), f"mask{frames}", dynamic_shapes=({0: "T"},)
    )
    # Odd numbers of frames: the last segment is one frame, the others two.
    for length in (1, 2, 3, 4, 5, 6, 7, 9):
        check_hosts(scripted, [compiled, python], (torch.randn(length, 4, generator=generator),))
    trips = {count for counts in python.trip_counts.values() for count in counts}
    assert {1, 2, 3, 5} <= trips, python.trip_counts
    # No frame: no segment, and `torch.cat` of no blocks raises as PyTorch does.
    check_hosts_raise(scripted, [compiled, python], (torch.randn(0, 4),), "expected a non-empty list")


def test_without_the_observed_run_the_mask_is_refused_where_it_meets_the_scores(monkeypatch) -> None:
    monkeypatch.setattr(observed, "observe", lambda captured, example_inputs: {})
    message = r"cannot lower aten::masked_fill\.Scalar .* broadcastable to \[6, 10\]"
    with pytest.raises(dycl_iree.DyclError, match=message):
        dycl_iree.export(_SegmentMask(), (torch.randn(6, 4),), dynamic_shapes=({0: "T"},))


def _program(monkeypatch, observe) -> object:
    monkeypatch.setattr(observed, "observe", observe)
    captured = capture(_MaskOnly())
    return partition(specialize(captured, (torch.randn(5, 4),), ({0: "T"},)))


def test_the_observed_run_changes_hints_only(monkeypatch) -> None:
    real = observed.observe
    seen = _program(monkeypatch, real)
    unseen = _program(monkeypatch, lambda captured, example_inputs: {})
    # The same ops, values and types (which dims are dynamic); only the example sizes differ.
    assert format_program(seen) == format_program(unseen)
    hints = [[p.type.hint for p in s.params if isinstance(p.type, TensorType)] for s in seen.segments]
    unseen_hints = [[p.type.hint for p in s.params if isinstance(p.type, TensorType)] for s in unseen.segments]
    assert hints != unseen_hints
    # The joined mask, typed 6 by 9 by the raised hints (each block's empty column groups 2 wide,
    # three segments of 2 rows), is hinted 5 by 5: the sizes of the run.
    assert (5, 5) in _dynamic_matrices(seen), _dynamic_matrices(seen)
    assert (5, 5) not in _dynamic_matrices(unseen) and (6, 9) in _dynamic_matrices(unseen)


def _dynamic_matrices(program) -> set:
    """The hints of the float matrices, dynamic in both dims, that the segments take."""
    types = [p.type for s in program.segments for p in s.params if isinstance(p.type, TensorType)]
    return {t.hint for t in types if t.dtype == "float32" and t.shape == (None, None)}


def test_sizes_that_are_not_the_runs_are_refused_not_wrong(tmp_path, monkeypatch) -> None:
    """A hint is only an example: observed sizes that do not agree (each one larger) must make the
    export fail, or give PyTorch's results; never a bundle that computes something else."""
    real = observed.observe

    def wrong(captured, example_inputs):
        return {key: _larger(sizes) for key, sizes in real(captured, example_inputs).items()}

    monkeypatch.setattr(observed, "observe", wrong)
    with pytest.raises(dycl_iree.DyclError, match=re.escape("masked_fill")):
        dycl_iree.export(_SegmentMask(), (torch.randn(6, 4),), dynamic_shapes=({0: "T"},))


def _larger(sizes: tuple) -> tuple:
    if sizes and isinstance(sizes[0], tuple):  # a list's tensors
        return tuple(_larger(item) for item in sizes)
    return tuple(size + 1 for size in sizes)


class _EmptyRightContext(nn.Module):
    """Emformer with a right context of length 0, over a number of segments known at run time: its
    right-context frames (a block of 0 frames per segment, stacked) and its mask's right-context
    rows (0 rows per segment, as wide as the utterance) are empty. torch-mlir crashed on the first
    (SIGFPE in ConvertTorchToLinalg: `view` of [?, 0, 8] to [0, 8]) and dropped every input of the
    second's `cat` (iree-compile: "'tensor.concat' op requires at least one input")."""

    def forward(self, x: Tensor) -> Tensor:
        T = x.shape[0]
        num_segs = math.ceil(T / 2)
        context: List[Tensor] = []  # noqa: UP006
        rows: List[Tensor] = []  # noqa: UP006
        for seg_idx in range(num_segs - 1):
            start = (seg_idx + 1) * 2
            context.append(x[start:start])
            rows.append(torch.zeros(0, T))
        context.append(x[T:])
        rows.append(torch.zeros(0, T))
        right_context, mask_rows = torch.cat(context), torch.cat(rows)
        return torch.cat([right_context, x]) * 2.0 + mask_rows.sum(0).unsqueeze(1).unsqueeze(2)


def test_empty_right_context_blocks_over_a_run_time_number_of_segments(tmp_path) -> None:
    generator = torch.Generator().manual_seed(1)
    example = torch.randn(6, 1, 8, generator=generator)
    _, scripted, compiled, python = export_compiled(
        tmp_path, _EmptyRightContext(), (example,), "context", dynamic_shapes=({0: "T"},)
    )
    for length in (1, 2, 3, 5, 6, 9):
        check_hosts(scripted, [compiled, python], (torch.randn(length, 1, 8, generator=generator),))
    trips = {count for counts in python.trip_counts.values() for count in counts}
    assert {0, 1, 4} <= trips, python.trip_counts


class _RightContext(nn.Module):
    """Emformer's right context, cut down (`_gen_right_context`): one frame after each segment of 2,
    the last one the input's last frame, joined ahead of the utterance; the positions of those rows
    are counted on the host (`num_segs * rc + utterance length`), as the attention's rows are. A
    piece of one frame is typed two frames long (torch.export fixes a dim of 1), and the list's sum
    of those hints made the joined rows one more than the positions per segment: the list after each
    `append` takes its length from the run."""

    def forward(self, x: Tensor) -> Tensor:
        T = x.size(0)
        rc = 1
        num_segs = math.ceil((T - rc) / 2)
        blocks: List[Tensor] = []  # noqa: UP006
        for seg_idx in range(num_segs - 1):
            start = (seg_idx + 1) * 2
            blocks.append(x[start : start + rc])
        blocks.append(x[T - rc :])
        right_context = torch.cat(blocks)
        utterance = x[: T - rc]
        rows = num_segs * rc + utterance.size(0)
        positions = torch.arange(rows).unsqueeze(1).to(x.dtype)
        return torch.cat([right_context, utterance]) * 2.0 + positions


def test_a_list_grown_by_one_frame_per_segment_adds_up_to_the_rows_counted_on_the_host(tmp_path) -> None:
    generator = torch.Generator().manual_seed(2)
    example = torch.randn(7, 4, generator=generator)
    _, scripted, compiled, python = export_compiled(
        tmp_path, _RightContext(), (example,), "right_context", dynamic_shapes=({0: "T"},)
    )
    # 2 frames: one segment, no loop trip; odd and even utterances (the last segment 1 or 2 frames).
    for length in (2, 3, 4, 5, 7, 8, 12):
        check_hosts(scripted, [compiled, python], (torch.randn(length, 4, generator=generator),))
    trips = {count for counts in python.trip_counts.values() for count in counts}
    assert {0, 1, 2, 5} <= trips, python.trip_counts


class _PaddingMask(nn.Module):
    """A padded batch masked by lengths, as torchaudio's Conformer and wav2vec2 make the mask: its
    width is an int read from the lengths' data."""

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        batch_size = lengths.shape[0]
        max_length = int(torch.max(lengths).item())
        positions = torch.arange(max_length, dtype=lengths.dtype).expand(batch_size, max_length)
        padding_mask = positions >= lengths.unsqueeze(1)
        return x.masked_fill(padding_mask.unsqueeze(-1), 0.0).sum(1)


def test_an_int_read_from_data_takes_its_value_in_the_run_as_its_example(tmp_path) -> None:
    """Typed with the example 1, `max_length` sized the expansion 1 wide, and the arange it expands,
    whose dim of 1 is typed 2 (torch.export fixes dims of 1), 2 wide: the expansion failed to type.
    The run's value (the example's frames) types both."""
    example = (torch.randn(2, 7, 3), torch.tensor([7, 5]))
    with pytest.raises(dycl_iree.UnsupportedOpError, match="expand"):
        specialize(capture(_PaddingMask()), example, ({1: "frames"}, None))
    program = specialize(capture(_PaddingMask()), example, ({1: "frames"}, None), observe_ints=True)
    (read,) = [n for n in program.body.nodes if getattr(n, "target", "") == "aten::Int.Tensor"]
    assert read.outputs[0].type.hint == 7
    # `export` types with the example 1 first, and with the run's values where that fails.
    _, scripted, compiled, python = export_compiled(
        tmp_path, _PaddingMask(), example, "padding", dynamic_shapes=({1: "frames"}, None)
    )
    for frames, lengths in ((7, [7, 5]), (3, [1, 3]), (12, [12, 12]), (1, [1, 1])):
        check_hosts(scripted, (compiled, python), (torch.randn(2, frames, 3), torch.tensor(lengths)))
