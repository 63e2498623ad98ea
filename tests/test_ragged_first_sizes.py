"""Lists that start empty and grow by pieces dynamic in several dims, as torchaudio's Emformer
builds its attention mask: one block per segment, as many rows as the segment has frames and as
wide as the utterance (`rc_mask.append(block)` in `_gen_attention_mask`, then `torch.cat`).

No tensor the loop starts from has the pieces' shape, so the empty list's width is unknown until
its first append. The list is kept concatenated along the dim its pieces differ in with their
sizes (`specialize/ragged_lists.py`); its empty form is 0 in every dynamic dim, and an append to a
list that holds no tensor yet takes the tensor itself (`RaggedList.first_sizes`). Each model is
exported once with the number of frames dynamic and the compiled host asserted; every loop exit
(no segment, one, several, a last short segment) and the error of pieces that disagree in width
are driven on both hosts against the scripted model.
"""

# The models keep the published code's idioms (`super(Class, self)`, `typing.List`).
# ruff: noqa: UP006, UP008

from __future__ import annotations

import math
from typing import List

import pytest
import torch
import torch.nn as nn
from torch.export import Dim

from tests.conftest import check_hosts, check_hosts_raise, export_compiled


class SegmentMasks(nn.Module):
    """Emformer's attention mask, cut down: per segment, a block whose rows are the segment's
    frames, ones up to the segment's end and zeros after (`torch.cat([ones, zeros], 1)`), and a
    block of one right-context row, both as wide as the utterance; each list joined through a
    list of lists (`masks_to_concat`), as Emformer joins them, and read by index. With `shrink`, a
    block after the first is one column narrower: PyTorch's `torch.cat` then raises."""

    def __init__(self, segment_length: int = 3):
        super(SegmentMasks, self).__init__()
        self.segment_length = segment_length

    def forward(self, x, shrink: bool):
        utterance_length = x.size(0)
        num_segs = math.ceil(utterance_length / self.segment_length)
        masks: List[torch.Tensor] = []
        rc_masks: List[torch.Tensor] = []
        masks_to_concat = [rc_masks, masks]
        for seg_idx in range(num_segs):
            seg_start = seg_idx * self.segment_length
            rows = min(self.segment_length, utterance_length - seg_start)
            after = utterance_length - seg_start - rows
            block = torch.cat([torch.ones(rows, seg_start + rows), torch.zeros(rows, after)], 1)
            if shrink and seg_idx > 0:
                block = block[:, 1:]
            masks.append(block * x[seg_start : seg_start + rows, :1])
            rc_masks.append((torch.arange(utterance_length) >= seg_start).float().unsqueeze(0))
        mask = torch.cat([torch.cat(m) for m in masks_to_concat])
        return mask, len(masks), masks[0], masks[-1], masks, rc_masks[-1]


@pytest.fixture(scope="module")
def segment_masks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("masks")
    example = (torch.randn(7, 2), False)
    return export_compiled(folder, SegmentMasks(), example, "masks", {"x": {0: Dim("frames")}, "shrink": None})


@pytest.mark.parametrize("frames", [1, 2, 3, 4, 6, 7, 11])
def test_mask_blocks_as_wide_as_the_utterance_are_joined(segment_masks, frames):
    bundle, scripted, compiled, python = segment_masks
    torch.manual_seed(frames)
    inputs = (torch.randn(frames, 2), False)
    mask, count, first, last, masks, rc_last = check_hosts(scripted, (compiled, python), inputs)
    assert count == math.ceil(frames / 3) and mask.shape == (frames + count, frames)


def test_both_sides_of_the_first_append_are_taken(segment_masks):
    bundle, scripted, compiled, python = segment_masks
    python.decisions.clear()
    check_hosts(scripted, (compiled, python), (torch.randn(3, 2), False))  # one segment
    # The appends to the lists that hold no block yet take the block: the decisions taken true.
    appends = [label for label, taken in python.decisions.items() if set(taken) == {True}]
    assert len(appends) == 2, python.decisions
    check_hosts(scripted, (compiled, python), (torch.randn(8, 2), False))  # three, the last short
    assert all(dict(python.decisions[label]) == {True: 2, False: 2} for label in appends), python.decisions


def test_no_segment_raises_as_pytorch_does(segment_masks):
    bundle, scripted, compiled, python = segment_masks
    message = r"torch.cat\(\): expected a non-empty list of Tensors"
    check_hosts_raise(scripted, (compiled, python), (torch.randn(0, 2), False), message)


@pytest.mark.parametrize("frames", [4, 9])
def test_blocks_of_different_widths_raise_as_pytorch_does(segment_masks, frames):
    bundle, scripted, compiled, python = segment_masks
    # PyTorch raises at `torch.cat`; the hosts where the narrower block is appended.
    message = r"Sizes of tensors must match except in dimension 0"
    check_hosts_raise(scripted, (compiled, python), (torch.randn(frames, 2), True), message)


class MasksOrPrompt(nn.Module):
    """Segment blocks as wide as the utterance, or, where `keep` is false, a prompt's two rows in
    their place (a list literal on one side of a branch), then one more row appended: the list
    is in its empty form on one path (no segment) and holds tensors on the other."""

    def forward(self, x, keep: bool):
        utterance_length = x.size(0)
        masks: List[torch.Tensor] = []
        for seg_idx in range(math.ceil(utterance_length / 3)):
            rows = min(3, utterance_length - 3 * seg_idx)
            masks.append(torch.ones(rows, utterance_length) * x[3 * seg_idx : 3 * seg_idx + rows, :1])
        if not keep:
            masks = [x[:1].sum() * torch.ones(2, utterance_length)]
        masks.append(torch.zeros(1, utterance_length))
        return torch.cat(masks), len(masks)


@pytest.fixture(scope="module")
def masks_or_prompt(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prompt")
    example = (torch.randn(7, 2), True)
    return export_compiled(folder, MasksOrPrompt(), example, "prompt", {"x": {0: Dim("frames")}, "keep": None})


@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("frames", [0, 1, 4, 7])
def test_a_list_in_its_empty_form_on_one_path_only(masks_or_prompt, frames, keep):
    bundle, scripted, compiled, python = masks_or_prompt
    mask, count = check_hosts(scripted, (compiled, python), (torch.randn(frames, 2), keep))
    assert count == (math.ceil(frames / 3) if keep else 1) + 1 and mask.size(1) == frames


class OptionalHead(nn.Module):
    """A head block that a branch puts in a list or leaves out (the list an `if` leaves empty),
    then a row and a tail appended, all as wide as the utterance: the first append takes the row
    itself on the path without the head."""

    def forward(self, x, head: bool):
        utterance_length = x.size(0)
        masks: List[torch.Tensor] = []
        if head:
            masks = [torch.ones(utterance_length // 2, utterance_length)]
        masks.append(torch.zeros(1, utterance_length) + x[:1, :1])
        masks.append(torch.ones(utterance_length - utterance_length // 2, utterance_length))
        return torch.cat(masks), len(masks)


def test_a_list_that_a_branch_leaves_empty(tmp_path):
    example = (torch.randn(7, 2), True)
    dynamic = {"x": {0: Dim("frames")}, "head": None}
    _, scripted, compiled, python = export_compiled(tmp_path, OptionalHead(), example, "head", dynamic)
    for frames in (1, 4, 7):
        for head in (True, False):
            mask, count = check_hosts(scripted, (compiled, python), (torch.randn(frames, 2), head))
            assert count == 2 + head and mask.shape == ((frames if head else frames - frames // 2) + 1, frames)
    # The branch, and the first append (to a list with the head, or to none); the second append
    # always finds the list holding a tensor.
    sides = sorted(sorted(taken) for taken in python.decisions.values())
    assert sides == [[False], [False, True], [False, True]], python.decisions
