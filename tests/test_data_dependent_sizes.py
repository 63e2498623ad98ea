"""Sizes that depend on data: `nonzero`, boolean-mask reads and writes, `masked_select`, `torch.where(mask)`.

How many elements a mask selects is decided on the device, like a branch: the host reads the count
(a sync point, as `.item()` is) and what follows runs with that dim dynamic, never fixed to the
example's count. Each model is written the way published code writes it: a top-1 Switch mixture of
experts that routes tokens with `(choice == e).nonzero().squeeze(1)`, SSD's non-maximum suppression
(`idx = idx[IoU.le(overlap)]` in `while idx.numel() > 0`), detection post-processing that keeps the
boxes above a score, the valid frames of a padded batch, `masked_select`, and a decoder's
`lengths[~finished] += 1`. Every model is exported once; both hosts run inputs that select nothing,
some and everything, with counts other than the example's, and are compared with the scripted model;
the Python host's records show the paths taken; every bundle gets the compiled host.
"""

# The models keep the published code's idioms (`super(Class, self)`, `typing.List`).
# ruff: noqa: UP006, UP008

from __future__ import annotations

import inspect
from typing import List, Tuple

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dycl_iree
from dycl_iree.program import HostOp, iter_nodes
from tests.conftest import assert_same as _same
from tests.conftest import check_hosts_raise
from tests.conftest import export_compiled as _export


def _check(scripted, hosts, inputs):
    """Both hosts against the scripted model, on copies of the inputs (some models write into them)."""
    with torch.no_grad():
        want = scripted(*(i.clone() if isinstance(i, torch.Tensor) else i for i in inputs))
    for host in hosts:
        _same(host(*(i.clone().numpy() if isinstance(i, torch.Tensor) else i for i in inputs)), want)
    return want


def _count_reads(bundle) -> int:
    """How many counts the host reads from the device (one per mask, as `.item()` reads a size)."""
    reads = [n for n in iter_nodes(bundle.program.body) if isinstance(n, HostOp) and n.target == "aten::Int.Tensor"]
    return sum(1 for n in reads if n.outputs[0].name == "count")


# ---------------------------------------------------------------------------------------------
# A top-1 (Switch) mixture of experts: the tokens routed to each expert are found with nonzero()
# ---------------------------------------------------------------------------------------------


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super(FeedForward, self).__init__()
        self.layer1 = nn.Linear(d_model, d_ff)
        self.layer2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.layer2(F.relu(self.layer1(x)))


class SwitchFeedForward(nn.Module):
    """The Switch Transformer's routing layer as its popular re-implementations write it: each token
    goes to the expert its router scores highest; the tokens of expert `i` are
    `(routes == i).nonzero().squeeze(1)`, gathered, run through the expert and written back; an
    expert that got no token is skipped. Also returns how many tokens each expert got."""

    def __init__(self, d_model=4, d_ff=8, n_experts=3):
        super(SwitchFeedForward, self).__init__()
        self.n_experts = n_experts
        self.experts = nn.ModuleList([FeedForward(d_model, d_ff) for _ in range(n_experts)])
        self.switch = nn.Linear(d_model, n_experts)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        seq_len, batch_size, d_model = x.shape
        x = x.reshape(-1, d_model)
        route_prob = self.softmax(self.switch(x))
        route_prob_max, routes = torch.max(route_prob, dim=-1)
        final_output = torch.zeros_like(x)
        counts = torch.zeros(self.n_experts, dtype=torch.long)
        for i, expert in enumerate(self.experts):
            indexes = (routes == i).nonzero().squeeze(1)
            counts[i] = indexes.numel()
            if indexes.numel() > 0:
                final_output[indexes, :] = expert(x[indexes, :])
        final_output = final_output * route_prob_max.view(-1, 1)
        return final_output.view(seq_len, batch_size, d_model), counts


def _routed_to(expert_of_token: list[int], generator) -> torch.Tensor:
    """Tokens [T, 1, 4] that the router (made to score by the first three features) sends to the given experts."""
    x = torch.randn(len(expert_of_token), 1, 4, generator=generator) * 0.1
    for token, expert in enumerate(expert_of_token):
        x[token, 0, expert] += 2.0
    return x


def test_a_switch_router_gathers_each_experts_tokens_with_nonzero(tmp_path):
    torch.manual_seed(0)
    model = SwitchFeedForward()
    with torch.no_grad():
        model.switch.weight.copy_(torch.eye(3, 4) * 4.0)
        model.switch.bias.zero_()
    generator = torch.Generator().manual_seed(0)
    example = (_routed_to([0, 1, 1, 2, 0], generator),)
    bundle, scripted, compiled, python = _export(
        tmp_path, model, example, "switch", dynamic_shapes={"x": {0: "tokens"}}
    )
    assert _count_reads(bundle) == 3  # one count per expert
    # Every expert busy; all tokens to one expert (the others get none); one token; more tokens
    # than the example has, unevenly routed.
    for routes in ([0, 1, 2], [1, 1, 1, 1], [2], [0, 0, 2, 2, 2, 0, 1, 0, 0]):
        _, counts = _check(scripted, (compiled, python), (_routed_to(routes, generator),))
        assert counts.tolist() == [routes.count(e) for e in range(3)]
    assert len(python.decisions) == 3
    assert all(set(sides) == {True, False} for sides in python.decisions.values()), python.decisions


# ---------------------------------------------------------------------------------------------
# SSD's non-maximum suppression: the candidates shrink by a boolean mask in a data-dependent loop
# ---------------------------------------------------------------------------------------------


class NonMaximumSuppression(nn.Module):
    """ssd.pytorch's `box_utils.nms`, as TorchScript takes it (`torch.zeros` for `scores.new()`, no
    `out=` buffers): sort the scores, keep the best box, compute its IoU with the rest and keep
    those below the threshold, `idx = idx[IoU.le(overlap)]`, until none is left. `top_k=0` keeps every
    box a candidate."""

    def __init__(self, overlap=0.5, top_k=200):
        super(NonMaximumSuppression, self).__init__()
        self.overlap = overlap
        self.top_k = top_k

    def forward(self, boxes, scores) -> Tuple[torch.Tensor, int]:
        keep = torch.zeros(scores.size(0), dtype=torch.long)
        if boxes.numel() == 0:
            return keep, 0
        x1 = boxes[:, 0]
        y1 = boxes[:, 1]
        x2 = boxes[:, 2]
        y2 = boxes[:, 3]
        area = torch.mul(x2 - x1, y2 - y1)
        v, idx = scores.sort(0)  # sort in ascending order
        if self.top_k > 0:
            idx = idx[-self.top_k :]  # indices of the top-k largest vals
        count = 0
        while idx.numel() > 0:
            i = idx[-1]  # index of current largest val
            keep[count] = i
            count += 1
            if idx.size(0) == 1:
                break
            idx = idx[:-1]  # remove kept element from view
            # load bboxes of next highest vals
            xx1 = torch.index_select(x1, 0, idx)
            yy1 = torch.index_select(y1, 0, idx)
            xx2 = torch.index_select(x2, 0, idx)
            yy2 = torch.index_select(y2, 0, idx)
            # store element-wise max with next highest score
            xx1 = torch.clamp(xx1, min=x1[i])
            yy1 = torch.clamp(yy1, min=y1[i])
            xx2 = torch.clamp(xx2, max=x2[i])
            yy2 = torch.clamp(yy2, max=y2[i])
            w = xx2 - xx1
            h = yy2 - yy1
            # check sizes of xx1 and xx2.. after each iteration
            w = torch.clamp(w, min=0.0)
            h = torch.clamp(h, min=0.0)
            inter = w * h
            # IoU = i / (area(a) + area(b) - i)
            rem_areas = torch.index_select(area, 0, idx)  # load remaining areas)
            union = (rem_areas - inter) + area[i]
            IoU = inter / union  # store result in iou
            # keep only elements with an IoU <= overlap
            idx = idx[IoU.le(self.overlap)]
        return keep, count


def _boxes(count, generator, spread):
    corners = torch.rand(count, 2, generator=generator) * spread
    return torch.cat([corners, corners + 1.0], 1)


@pytest.mark.parametrize("top_k", [0, 200])  # every box a candidate, or the 200 best (SSD's default)
def test_non_maximum_suppression_shrinks_its_candidates_by_a_mask_in_a_loop(tmp_path, top_k):
    dims = {0: "boxes"}
    generator = torch.Generator().manual_seed(0)
    example = (_boxes(4, generator, 1.0), torch.rand(4, generator=generator))
    _, scripted, compiled, python = _export(
        tmp_path, NonMaximumSuppression(top_k=top_k), example, "nms", dynamic_shapes={"boxes": dims, "scores": dims}
    )
    outcomes = set()
    # No box; one box (the loop ends at its `break`); boxes far apart (all kept, the mask keeps
    # every candidate); boxes that overlap (the mask drops some, or all at once).
    for count, spread in ((0, 1.0), (1, 1.0), (6, 30.0), (3, 0.2), (9, 0.6), (12, 1.5)):
        boxes, scores = _boxes(count, generator, spread), torch.rand(count, generator=generator)
        _, kept = _check(scripted, (compiled, python), (boxes, scores))
        outcomes.add("none" if count == 0 else ("all kept" if kept == count else "suppressed"))
    assert outcomes == {"none", "all kept", "suppressed"}, outcomes
    assert all(set(sides) == {True, False} for sides in python.decisions.values()), python.decisions
    (trips,) = python.trip_counts.values()
    assert 1 in trips and max(trips) > 2, trips


# ---------------------------------------------------------------------------------------------
# Boolean-mask reads and masked_select
# ---------------------------------------------------------------------------------------------


class ScoreFilter(nn.Module):
    """Detection post-processing (DETR / torchvision style): keep the detections whose score passes
    a threshold, `boxes[keep]`, then the classes they name, and their scores as a flat list with
    `masked_select`; `torch.where(keep)` gives their positions."""

    def __init__(self, num_classes=3):
        super(ScoreFilter, self).__init__()
        self.classifier = nn.Linear(4, num_classes)

    def forward(self, boxes, scores, score_threshold: float):
        keep = scores > score_threshold
        kept_boxes = boxes[keep]
        labels = self.classifier(kept_boxes).argmax(-1)
        kept_scores = torch.masked_select(scores, keep)
        (positions,) = torch.where(keep)
        return kept_boxes, labels, kept_scores, positions, kept_boxes.size(0)


def test_detections_are_filtered_by_a_boolean_mask(tmp_path):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    example = (torch.rand(5, 4, generator=generator), torch.rand(5, generator=generator), 0.5)
    bundle, scripted, compiled, python = _export(tmp_path, ScoreFilter(), example, "filter")
    kept = set()
    for threshold in (0.5, 2.0, -1.0, 0.2, 0.8):
        boxes, scores = torch.rand(5, 4, generator=generator), torch.rand(5, generator=generator)
        *_, count = _check(scripted, (compiled, python), (boxes, scores, threshold))
        kept.add(count)
    assert {0, 5} <= kept and len(kept) >= 3, kept  # none, all, and some selected


class ValidFrames(nn.Module):
    """The frames of a padded batch that lie within each sequence's length, as speech and
    sequence-labelling models pick them before a loss or a pooling: `frames[mask]` with a 2-d mask,
    and the logits at those frames with a broadcast `masked_select`."""

    def __init__(self):
        super(ValidFrames, self).__init__()
        self.proj = nn.Linear(3, 2)

    def forward(self, frames, lengths):
        max_len = frames.size(1)
        mask = torch.arange(max_len).unsqueeze(0) < lengths.unsqueeze(1)
        valid = frames[mask]
        logits = self.proj(frames)
        selected = logits.masked_select(mask.unsqueeze(-1))
        return valid, self.proj(valid).mean(0), selected.view(-1, 2)


def test_a_two_dimensional_mask_and_a_broadcast_masked_select(tmp_path):
    torch.manual_seed(0)
    example = (torch.randn(2, 4, 3), torch.tensor([4, 2]))
    _, scripted, compiled, python = _export(
        tmp_path, ValidFrames(), example, "frames", dynamic_shapes={"frames": {1: "time"}, "lengths": None}
    )
    for time, lengths in ((4, [1, 3]), (6, [6, 6]), (3, [0, 1]), (5, [2, 5])):
        _check(scripted, (compiled, python), (torch.randn(2, time, 3), torch.tensor(lengths)))
    # No valid frame at all: PyTorch's mean of no rows is NaN, and so is the bundle's.
    frames, lengths = torch.randn(2, 3, 3), torch.tensor([0, 0])
    valid, pooled, selected = _check(scripted, (compiled, python), (frames, lengths))
    assert valid.shape == (0, 3) and bool(pooled.isnan().all()) and selected.shape == (0, 2)


class MismatchedMask(nn.Module):
    def forward(self, x, mask):
        return x[mask] * 2.0


def test_a_mask_of_the_wrong_size_raises_as_pytorch_does(tmp_path):
    dims = {"x": {0: "rows"}, "mask": {0: "mask"}}
    example = (torch.randn(4, 2), torch.tensor([True, False, True, True]))
    _, scripted, compiled, python = _export(tmp_path, MismatchedMask(), example, "mismatch", dims)
    _check(scripted, (compiled, python), (torch.randn(3, 2), torch.tensor([False, True, True])))
    x, mask = torch.randn(4, 2), torch.tensor([True, False, True])
    check_hosts_raise(scripted, (compiled, python), (x, mask), "shape of the mask")


# ---------------------------------------------------------------------------------------------
# Boolean-mask writes whose values are a selection
# ---------------------------------------------------------------------------------------------


class GreedyLengths(nn.Module):
    """A greedy decoder's bookkeeping: the sequences not yet finished grow by one,
    `lengths[~finished] += 1` (a read and a write through the same mask), their scores take the
    step's log-probabilities, `scores[~finished] += logp[~finished]`; the loop stops once all are done."""

    def __init__(self, vocab=5, eos=0):
        super(GreedyLengths, self).__init__()
        self.eos = eos
        self.step = nn.Linear(vocab, vocab)
        self.register_buffer("end_bias", F.one_hot(torch.tensor(eos), vocab).float())

    def forward(self, logits, max_len: int) -> Tuple[torch.Tensor, torch.Tensor, List[int]]:
        batch = logits.size(0)
        finished = torch.zeros(batch, dtype=torch.bool)
        lengths = torch.zeros(batch, dtype=torch.long)
        scores = torch.zeros(batch)
        active: List[int] = []
        for _ in range(max_len):
            logp = F.log_softmax(logits + self.step(logits), dim=-1)
            best, tokens = logp.max(-1)
            lengths[~finished] += 1
            scores[~finished] += best[~finished]
            active.append(int((~finished).sum()))
            finished = finished | (tokens == self.eos)
            if bool(finished.all()):
                break
            logits = logits - F.one_hot(tokens, logits.size(1)).float() + self.end_bias
        return lengths, scores, active


def test_writes_through_a_mask_with_one_value_per_selected_element(tmp_path):
    torch.manual_seed(3)
    _, scripted, compiled, python = _export(tmp_path, GreedyLengths(), (torch.randn(4, 5), 6), "lengths")
    exits = set()
    generator = torch.Generator().manual_seed(0)
    for sample in range(40):
        logits = torch.randn(4, 5, generator=generator) * 3
        _check(scripted, (compiled, python), (logits, 6 if sample % 5 else 0))
        trips = list(python.trip_counts.values())[0]
        exits.add("none" if sample % 5 == 0 else ("cap" if trips[-1] == 6 else "break"))
        if exits == {"none", "cap", "break"} and sample >= 10:
            break
    assert exits == {"none", "cap", "break"}, exits


# ---------------------------------------------------------------------------------------------
# What cannot be exported is refused at the model's line, with the rewrite that works
# ---------------------------------------------------------------------------------------------


class ScalarMask(nn.Module):
    def forward(self, x):
        flag = x.sum() > 0
        return x[flag]


def test_a_zero_dimensional_mask_is_refused_with_the_rewrite():
    line = inspect.getsourcelines(ScalarMask.forward)[1] + 2
    message = rf"from .*test_data_dependent_sizes.py:{line}\).*0-d mask.*reshape\(1\)"
    with pytest.raises(dycl_iree.DyclError, match=message):
        dycl_iree.export(ScalarMask(), (torch.randn(3),))
