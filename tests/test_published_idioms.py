"""Idioms of published dynamic models: scalars read from shapes, device moves and literal tensors,
in-place writes.

Each model is written the way its authors write theirs (torchaudio's Emformer and Tacotron2, its
RNN-T beam search, SSD's non-maximum suppression, SkipNet's gate counter, beam-search and decoder
bookkeeping), not in a style that suits the exporter. Every model is exported once; both hosts run
inputs that take every path and are compared with the scripted model; the Python host's records
show the paths taken; every bundle gets the compiled host.
"""

# The models keep the published code's idioms (`super(Class, self)`, `typing.List`).
# ruff: noqa: UP006, UP007, UP008, UP045

from __future__ import annotations

import math
from typing import List, Optional, Tuple

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dycl_iree
from dycl_iree.program import Loop, iter_nodes
from tests.conftest import assert_same as _same
from tests.conftest import check_hosts_raise
from tests.conftest import export_compiled as _export


def _numpy(inputs):
    return tuple(i.numpy() if isinstance(i, torch.Tensor) else i for i in inputs)


def _check(scripted, hosts, inputs):
    with torch.no_grad():
        want = scripted(*inputs)
    for host in hosts:
        _same(host(*_numpy(inputs)), want)
    return want


# ---------------------------------------------------------------------------------------------
# Scalars read from shapes: numel(), size(), dim(), len() are host ints; a loop over a size fixed
# at export is no decision
# ---------------------------------------------------------------------------------------------


class SegmentedContext(nn.Module):
    """torchaudio's Emformer, `_gen_attention_mask` / `_gen_right_context` style: a loop over the
    segments of an utterance whose length is fixed at export, a summary that starts as None, mask
    blocks of a width that depends on the segment, then a data-dependent gate."""

    def __init__(self, segment_length=2, right_context_length=1):
        super(SegmentedContext, self).__init__()
        self.segment_length = segment_length
        self.right_context_length = right_context_length
        self.proj = nn.Linear(4, 4)

    def forward(self, input, lengths):
        utterance_length = input.size(0)
        num_segs = math.ceil(utterance_length / self.segment_length)
        mask_blocks: List[torch.Tensor] = []
        summary: Optional[torch.Tensor] = None
        for seg_idx in range(num_segs):
            seg_start = seg_idx * self.segment_length
            seg_end = min(seg_start + self.segment_length, utterance_length)
            segment = input[seg_start:seg_end].mean(0, keepdim=True)
            if summary is None:
                summary = segment
            else:
                summary = summary + segment
            mask_blocks.append(torch.ones(seg_end - seg_start, utterance_length, device=input.device))
        attention_mask = torch.cat(mask_blocks)
        assert summary is not None
        output = self.proj(summary)
        if bool(lengths.max() > utterance_length // 2):
            output = output * 2.0
        return output, attention_mask, input.numel(), len(input), input.dim(), input.size()


def test_a_loop_over_a_size_fixed_at_export_folds_like_range_of_a_literal(tmp_path):
    torch.manual_seed(0)
    example = (torch.randn(5, 4), torch.tensor([5, 3]))
    bundle, scripted, compiled, python = _export(tmp_path, SegmentedContext(), example, "segments")
    # The loop over segments is unrolled: only the gate is decided at run time.
    assert not [n for n in iter_nodes(bundle.program.body) if isinstance(n, Loop)]
    for lengths in (torch.tensor([5, 3]), torch.tensor([2, 1])):
        _check(scripted, (compiled, python), (torch.randn(5, 4), lengths))
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 1}


class SuppressionCount(nn.Module):
    """SSD's `nms` opening: `if boxes.numel() == 0: return keep`, then a count read from the
    number of candidates; the number of boxes is dynamic."""

    def forward(self, boxes, scores):
        keep = torch.zeros(scores.size(0), dtype=torch.long)
        if boxes.numel() == 0:
            return keep, 0, scores.sum()
        count = boxes.numel() // boxes.dim() // 2
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        return keep + count, len(boxes), (area * scores).sum() / boxes.numel()


def test_numel_of_a_tensor_with_a_dynamic_dim_is_a_host_int(tmp_path):
    torch.manual_seed(0)
    dims = {0: "boxes"}
    example = (torch.rand(3, 4), torch.rand(3))
    _, scripted, compiled, python = _export(
        tmp_path, SuppressionCount(), example, "numel", dynamic_shapes={"boxes": dims, "scores": dims}
    )
    for count in (0, 1, 6):
        _check(scripted, (compiled, python), (torch.rand(count, 4), torch.rand(count)))
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 2}


# ---------------------------------------------------------------------------------------------
# Device moves and literal tensors
# ---------------------------------------------------------------------------------------------


def get_mask_from_lengths(lengths):
    """Tacotron2's padding mask, as torchaudio writes it (`device=`, `lengths.cpu()` elsewhere)."""
    max_len = lengths.size(0) + 4
    ids = torch.arange(0, max_len, device=lengths.device, dtype=lengths.dtype)
    mask = (ids < lengths.unsqueeze(1)).byte()
    mask = torch.le(mask, 0)
    return mask


class Encoder(nn.Module):
    """Tacotron2's encoder call pattern: `lengths.cpu()`, `.to(device)`, `device=` in factories."""

    def __init__(self):
        super(Encoder, self).__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, lengths) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        input_lengths = lengths.cpu()
        device = x.device
        mask = get_mask_from_lengths(input_lengths.to(device))
        memory = self.proj(x).to(device)
        memory = memory.masked_fill(mask.unsqueeze(2), 0.0)
        frames = torch.zeros(x.size(0), 2, dtype=memory.dtype, device=device)
        if bool((input_lengths > 3).any()):
            frames = frames + memory.sum(1)[:, :2]
        if x.is_cuda:
            frames = frames.cuda()
        scale = x.new_zeros(1) + lengths.type_as(x).to("cpu").mean()
        return memory, frames, lengths.to(device, torch.int32), x.to(device=device, dtype=torch.int32), scale.to(x)


def test_device_moves_are_the_tensor_itself(tmp_path):
    torch.manual_seed(0)
    example = (torch.randn(2, 6, 4), torch.tensor([6, 3]))
    _, scripted, compiled, python = _export(tmp_path, Encoder(), example, "encoder")
    for lengths in (torch.tensor([6, 3]), torch.tensor([2, 3])):
        _check(scripted, (compiled, python), (torch.randn(2, 6, 4) * 3, lengths))
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 1}


class GreedyTokens(nn.Module):
    """torchaudio's `RNNTBeamSearch` bookkeeping: a start token `torch.tensor([[blank]])`, and the
    hypothesis, a list of ints grown in a data-dependent loop, turned back into a tensor with
    `torch.tensor(hyp_list, device=device)`."""

    def __init__(self, blank=7):
        super(GreedyTokens, self).__init__()
        self.blank = blank
        self.embed = nn.Embedding(8, 4)
        self.out = nn.Linear(4, 8)

    def forward(self, enc, max_steps: int):
        device = enc.device
        token = torch.tensor([[self.blank]], device=device)
        hyp_list: List[int] = [self.blank]
        state = enc
        for _ in range(max_steps):
            state = torch.tanh(state + self.embed(token).squeeze(1))
            token = self.out(state).argmax(-1, keepdim=True)
            if int(token.item()) == self.blank:
                break
            hyp_list.append(int(token.item()))
        hyp = torch.tensor(hyp_list, device=device)
        return hyp, token


def test_literal_tensors_and_tensors_of_a_host_list(tmp_path):
    torch.manual_seed(2)
    _, scripted, compiled, python = _export(tmp_path, GreedyTokens(), (torch.randn(1, 4), 5), "greedy")
    exits = set()
    generator = torch.Generator().manual_seed(0)
    for _ in range(60):
        enc = torch.randn(1, 4, generator=generator) * 3
        hyp, _ = _check(scripted, (compiled, python), (enc, 5))
        (trips,) = python.trip_counts.values()
        exits.add("cap" if len(hyp) == 6 else "break")
        if exits == {"cap", "break"}:
            break
    assert exits == {"cap", "break"}, exits


class BasicBlock(nn.Module):
    def __init__(self, planes):
        super(BasicBlock, self).__init__()
        self.conv = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.conv(x) + x)


class GatedBlocks(nn.Module):
    """SkipNet-RNN / BlockDrop as their authors write them: `gate_num = torch.tensor([0])` counts
    the blocks run, beside an `nn.ReLU(inplace=True)` (after which freezing leaves the literal)."""

    def __init__(self, planes=4, num_blocks=2):
        super(GatedBlocks, self).__init__()
        self.relu = nn.ReLU(inplace=True)
        self.layers = nn.ModuleList([BasicBlock(planes) for _ in range(num_blocks)])
        self.gate = nn.Linear(planes, 1)

    def forward(self, x):
        gate_num = torch.tensor([0])
        x = self.relu(x)
        for layer in self.layers:
            prob = torch.sigmoid(self.gate(x.mean((2, 3))))
            if bool(prob > 0.5):
                x = layer(x)
                gate_num += 1
        return x, gate_num


def test_a_literal_counter_beside_an_inplace_relu(tmp_path):
    torch.manual_seed(4)
    _, scripted, compiled, python = _export(tmp_path, GatedBlocks(), (torch.randn(1, 4, 4, 4),), "gated")
    counts = set()
    generator = torch.Generator().manual_seed(0)
    for _ in range(40):
        x = torch.randn(1, 4, 4, 4, generator=generator) * 2 - 1
        _, gate_num = _check(scripted, (compiled, python), (x,))
        counts.add(int(gate_num))
    assert len(counts) >= 2, counts
    assert all(set(sides) == {True, False} for sides in python.decisions.values()), python.decisions


# ---------------------------------------------------------------------------------------------
# In-place writes: into selects, slices and views of views, inside branches and loops
# ---------------------------------------------------------------------------------------------


def _clone(inputs):
    """PyTorch's model writes into its inputs: give it copies."""
    return tuple(i.clone() if isinstance(i, torch.Tensor) else i for i in inputs)


def _check_writes(scripted, hosts, inputs):
    """Compare on copies of the inputs (the model writes into them)."""
    with torch.no_grad():
        want = scripted(*_clone(inputs))
    for host in hosts:
        _same(host(*_numpy(_clone(inputs))), want)
    return want


class NonMaximumSuppression(nn.Module):
    """SSD's `nms` (ssd.pytorch's box_utils.py): `keep[count] = i` into a fresh `zeros`, `count += 1`
    in a data-dependent `while`, the box coordinates as views, a `break` when every box is kept; the
    suppression zeroes scores in place here instead of SSD's boolean-mask indexing."""

    def __init__(self, overlap=0.5):
        super(NonMaximumSuppression, self).__init__()
        self.overlap = overlap

    def forward(self, boxes, scores):
        keep = torch.zeros(scores.size(0), dtype=torch.long)
        if boxes.numel() == 0:
            return keep, 0
        x1 = boxes[:, 0]
        y1 = boxes[:, 1]
        x2 = boxes[:, 2]
        y2 = boxes[:, 3]
        area = torch.mul(x2 - x1, y2 - y1)
        remaining = scores.clone()
        count = 0
        while bool(remaining.max() > 0):
            i = remaining.argmax()
            keep[count] = i
            count += 1
            if count == boxes.size(0):
                break
            xx1 = torch.max(x1, x1[i])
            yy1 = torch.max(y1, y1[i])
            xx2 = torch.min(x2, x2[i])
            yy2 = torch.min(y2, y2[i])
            w = torch.clamp(xx2 - xx1, min=0.0)
            h = torch.clamp(yy2 - yy1, min=0.0)
            inter = w * h
            union = area - inter + area[i]
            IoU = inter / union
            remaining.masked_fill_(IoU.gt(self.overlap), 0.0)
            remaining[i] = 0.0
        return keep, count


def _boxes(count, generator, spread):
    corners = torch.rand(count, 2, generator=generator) * spread
    return torch.cat([corners, corners + 1.0], 1)


def test_non_maximum_suppression_writes_into_a_fresh_tensor_in_a_data_dependent_loop(tmp_path):
    dims = {0: "boxes"}
    generator = torch.Generator().manual_seed(0)
    example = (_boxes(4, generator, 1.0), torch.rand(4, generator=generator))
    _, scripted, compiled, python = _export(
        tmp_path, NonMaximumSuppression(), example, "nms", dynamic_shapes={"boxes": dims, "scores": dims}
    )
    outcomes = set()
    # No box; boxes far apart (all kept, the loop ends at its `break`); boxes that overlap (some
    # suppressed, the loop ends when no score is left).
    for count, spread in ((0, 1.0), (1, 1.0), (5, 20.0), (3, 0.3), (8, 0.5), (8, 1.0)):
        boxes, scores = _boxes(count, generator, spread), torch.rand(count, generator=generator) + 0.1
        _, kept = _check_writes(scripted, (compiled, python), (boxes, scores))
        outcomes.add("none" if count == 0 else ("all kept" if kept == count else "suppressed"))
    assert outcomes == {"none", "all kept", "suppressed"}, outcomes
    loops = [label for label in python.trip_counts]
    assert loops and all(set(sides) == {True, False} for sides in python.decisions.values()), python.decisions


class BeamStep(nn.Module):
    """Beam-search bookkeeping: finished hypotheses may only emit end-of-sequence again,
    `logp[:, eos] = torch.where(done, 0, logp[:, eos])`, in a loop that stops when all are done."""

    def __init__(self, vocab=6, eos=2):
        super(BeamStep, self).__init__()
        self.eos = eos
        self.step = nn.Linear(vocab, vocab)

    def forward(self, logits, max_len: int):
        done = torch.zeros(logits.size(0), dtype=torch.bool)
        scores = torch.zeros(logits.size(0))
        for _ in range(max_len):
            logp = F.log_softmax(self.step(logits), dim=-1)
            logp[:, self.eos] = torch.where(done, torch.zeros_like(logp[:, self.eos]), logp[:, self.eos])
            tokens = logp.argmax(-1)
            scores = scores + logp.max(-1)[0] * (~done).float()
            done = done | (tokens == self.eos)
            logits = logits + F.one_hot(tokens, logits.size(1)).float()
            if bool(done.all()):
                break
        return scores, done


def test_a_write_into_a_column_of_a_loop_carried_tensor(tmp_path):
    torch.manual_seed(1)
    _, scripted, compiled, python = _export(tmp_path, BeamStep(), (torch.randn(3, 6), 4), "beam")
    exits = set()
    generator = torch.Generator().manual_seed(3)
    for _ in range(30):
        logits = torch.randn(3, 6, generator=generator) * 3
        _check_writes(scripted, (compiled, python), (logits, 4))
        (trips,) = python.trip_counts.values()
        exits.add("cap" if trips[-1] == 4 else "break")
        if exits == {"cap", "break"}:
            break
    assert exits == {"cap", "break"}, exits


class GreedyDecoder(nn.Module):
    """A decoder that writes each step into a preallocated output, `outputs[:, t] = output`
    (the PyTorch seq2seq tutorials' pattern), and stops early once every row has ended."""

    def __init__(self, hidden=4):
        super(GreedyDecoder, self).__init__()
        self.cell = nn.GRUCell(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, hidden, max_len: int):
        batch_size = hidden.size(0)
        outputs = torch.zeros(batch_size, max_len, hidden.size(1))
        step = torch.zeros_like(hidden)
        for t in range(max_len):
            hidden = self.cell(step, hidden)
            output = self.out(hidden)
            outputs[:, t] = output
            step = torch.tanh(output)
            if bool(output.sum() < -1.0):
                break
        return outputs


def test_a_decoder_writes_each_step_into_a_preallocated_output(tmp_path):
    torch.manual_seed(0)
    _, scripted, compiled, python = _export(tmp_path, GreedyDecoder(), (torch.randn(2, 4), 5), "decoder")
    exits = set()
    generator = torch.Generator().manual_seed(0)
    for _ in range(40):
        hidden = torch.randn(2, 4, generator=generator) * 3
        for max_len in (0, 5):
            _check_writes(scripted, (compiled, python), (hidden, max_len))
            (trips,) = python.trip_counts.values()
            exits.add("none" if max_len == 0 else ("cap" if trips[-1] == max_len else "break"))
        if exits == {"none", "cap", "break"}:
            break
    assert exits == {"none", "cap", "break"}, exits


class RouteTokens(nn.Module):
    """A top-1 mixture of experts written token by token: `x[i] = expert(x[i])` for a row chosen
    at run time, under a data-dependent branch, in a loop over a size fixed at export; then
    writes through views of views (`x[:, 1:3] += 1`, `x.view(-1)[0] = ...`, a transpose, a narrow)."""

    def __init__(self, dim=4):
        super(RouteTokens, self).__init__()
        self.router = nn.Linear(dim, 2)
        self.expert0 = nn.Linear(dim, dim)
        self.expert1 = nn.Linear(dim, dim)

    def forward(self, x, idx: int):
        choice = self.router(x).argmax(-1)
        for i in range(x.size(0)):
            if int(choice[i]) == 0:
                x[i] = self.expert0(x[i])
            else:
                x[i] = torch.relu(self.expert1(x[i]))
        rows = torch.tensor([0, 2])
        x[rows] = x[rows] * 0.5
        x[idx] = F.relu(x[idx]) * 2
        x[:, -1] = x[:, -2:].sum(1)
        if bool(x.sum() > 0):
            x[:, 1:3] += 1
            x.t()[0] = x[:, 3]
        else:
            x.view(-1)[0] = x.sum()
            x.narrow(1, 1, 2).mul_(-1)
        return x


def test_writes_into_selects_slices_and_views_of_views_in_branches_and_loops(tmp_path):
    torch.manual_seed(0)
    _, scripted, compiled, python = _export(tmp_path, RouteTokens(), (torch.randn(4, 4), 1), "route")
    generator = torch.Generator().manual_seed(0)
    seen: dict[str, set] = {}
    for sample in range(12):
        x = torch.randn(4, 4, generator=generator) * 2 + (sample % 3 - 1) * 3
        _check_writes(scripted, (compiled, python), (x, sample % 4 - 1))
        for label, sides in python.decisions.items():
            seen.setdefault(label, set()).update(sides)
    assert len(seen) == 5 and all(sides == {True, False} for sides in seen.values()), seen


class MaskedWrites(nn.Module):
    """Writes through boolean masks with one value: finished beams get no more score, outliers are
    clipped to the mean (`x[mask] = v` is an index_put, whatever the number of rows selected)."""

    def forward(self, scores, finished, x):
        scores[finished] = 0.0
        x[x > 1.0] = x.mean()
        if bool(finished.any()):
            x[finished] = scores.max()
        return scores, x


def test_writes_through_boolean_masks(tmp_path):
    example = (torch.randn(4), torch.tensor([True, False, True, False]), torch.randn(4, 3))
    _, scripted, compiled, python = _export(tmp_path, MaskedWrites(), example, "masked")
    for finished in ([True, False, True, False], [False] * 4, [True] * 4):
        _check_writes(scripted, (compiled, python), (torch.randn(4), torch.tensor(finished), torch.randn(4, 3) * 2))
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 2, False: 1}


class ReadAfterWrite(nn.Module):
    def forward(self, x):
        first, second = x.unbind(0)
        x[0] = x[1]
        return first * 2


def test_a_view_that_cannot_be_taken_again_is_refused_when_read_after_a_write():
    message = r"first is read after a write into the tensor it is a view of \(.*test_published_idioms.py:\d+\)"
    with pytest.raises(dycl_iree.DyclError, match=message):
        dycl_iree.export(ReadAfterWrite(), (torch.randn(3, 4),))


# ---------------------------------------------------------------------------------------------
# Sizes read with .item(): never frozen to the example's value
# ---------------------------------------------------------------------------------------------


def _get_mask_from_lengths(lengths):
    """torchaudio's Tacotron2 padding mask, as published."""
    max_len = torch.max(lengths).item()
    ids = torch.arange(0, max_len, device=lengths.device, dtype=lengths.dtype)
    mask = (ids < lengths.unsqueeze(1)).byte()
    mask = torch.le(mask, 0)
    return mask


class AttentionDecoder(nn.Module):
    """Tacotron2's `Decoder.infer` shape: the padding mask from the lengths, attention over the
    encoder's steps masked with `masked_fill`, a decode loop that stops on a gate (or a cap)."""

    def __init__(self, dim=4, max_decoder_steps=6, gate_threshold=0.55):
        super(AttentionDecoder, self).__init__()
        self.score_mask_value = -float("inf")
        self.query = nn.Linear(dim, dim)
        self.cell = nn.GRUCell(dim, dim)
        self.gate = nn.Linear(dim, 1)
        self.max_decoder_steps = max_decoder_steps
        self.gate_threshold = gate_threshold

    def forward(self, memory, memory_lengths) -> Tuple[torch.Tensor, torch.Tensor]:
        mask = _get_mask_from_lengths(memory_lengths.cpu())
        state = memory.mean(1)
        frames: List[torch.Tensor] = []
        steps = torch.zeros(memory.size(0), dtype=torch.int32)
        while True:
            alignment = torch.bmm(memory, self.query(state).unsqueeze(2)).squeeze(2)
            alignment = alignment.masked_fill(mask, self.score_mask_value)
            weights = F.softmax(alignment, dim=1)
            context = torch.bmm(weights.unsqueeze(1), memory).squeeze(1)
            state = self.cell(context, state)
            frames.append(state)
            steps += 1
            if bool(torch.sigmoid(self.gate(state)).min() > self.gate_threshold):
                break
            if len(frames) == self.max_decoder_steps:
                break
        return torch.stack(frames, 1), steps


def test_a_padding_mask_sized_by_item_follows_the_lengths(tmp_path):
    torch.manual_seed(5)
    example = (torch.randn(2, 6, 4), torch.tensor([6, 3]))
    _, scripted, compiled, python = _export(tmp_path, AttentionDecoder(), example, "tacotron_mask")
    stops = set()
    generator = torch.Generator().manual_seed(0)
    # The longest sequence fills the encoder's steps, as Tacotron2's batches do; the others vary.
    for sample in range(40):
        memory = torch.randn(2, 6, 4, generator=generator) * 2
        frames, _ = _check(scripted, (compiled, python), (memory, torch.tensor([6, 1 + sample % 6])))
        stops.add("cap" if frames.size(1) == 6 else "gate")
        if stops == {"cap", "gate"} and sample >= 6:
            break
    assert stops == {"cap", "gate"}, stops
    # Lengths shorter than the encoder's steps: PyTorch cannot broadcast the mask, and neither host
    # returns the example's mask instead.
    memory, lengths = torch.randn(2, 6, 4), torch.tensor([5, 2])
    message = "must match the size of tensor b"
    check_hosts_raise(scripted, (compiled, python), (memory, lengths), message, rf"{message} \(6\)")


class CountUpTo(nn.Module):
    """A count read with `.item()` sizes a tensor: `torch.arange(0, n)`; its example is 1."""

    def forward(self, x):
        n = int((x > 0).sum().item())
        return torch.arange(0, n) * 2, x.sum()


def test_an_int_read_from_data_with_example_one_stays_a_run_time_size(tmp_path):
    _, scripted, compiled, python = _export(tmp_path, CountUpTo(), (torch.tensor([1.0, -1.0, -1.0]),), "count")
    for x in (torch.tensor([1.0, -1.0, -1.0]), torch.tensor([1.0, 2.0, 3.0]), -torch.ones(3)):
        _check(scripted, (compiled, python), (x,))


# ---------------------------------------------------------------------------------------------
# Decode loops with location-sensitive attention (Tacotron2's `_Decoder.infer`): the attention
# weights and their running sum start as two equal `torch.zeros`, are `[B, T]` with `T` read from
# the lengths at run time, and cross every step of a loop that stops on a gate
# ---------------------------------------------------------------------------------------------


class StopWhenAllFinished(nn.Module):
    """The smallest form of the decode loop: two state tensors that start as equal zeros (one
    value once TorchScript has frozen the model), a `finished` mask, a `break`."""

    def forward(self, energies):
        weights = torch.zeros(energies.size(0), energies.size(1))
        weights_cum = torch.zeros(energies.size(0), energies.size(1))
        finished = torch.zeros(energies.size(0), dtype=torch.bool)
        for _ in range(8):
            weights = F.softmax(energies + weights_cum - weights, dim=1)
            weights_cum += weights
            finished |= weights_cum.max(1)[0] > 2.0
            if torch.all(finished):
                break
        return weights_cum, finished


def test_two_states_that_start_as_equal_zeros_cross_a_loop_with_a_break(tmp_path):
    """IREE passed the one zero tensor into the loop twice and the call failed with OUT_OF_RANGE
    ("indirect buffer reference slot 0 ...") on every input, the Python host being right."""
    example = (torch.randn(2, 5),)
    _, scripted, compiled, python = _export(
        tmp_path, StopWhenAllFinished(), example, "equal_zeros", {"energies": {1: "T"}}
    )
    generator = torch.Generator().manual_seed(0)
    for steps, scale in ((5, 1.0), (3, 4.0), (7, 0.1), (1, 1.0)):  # stops at the first step .. runs to the cap
        _check(scripted, (compiled, python), (torch.randn(2, steps, generator=generator) * scale,))


class LocationSensitiveDecoder(nn.Module):
    """Tacotron2's `_Decoder.infer` cut down, written as torchaudio writes it: `_get_initial_states`,
    location features from the weights and their running sum, the padding mask, frames and
    alignments collected in lists, `mel_specgram_lengths[~finished] += 1`, a stop on the gates or at
    `decoder_max_step`."""

    def __init__(self, dim=4, n_filter=2, kernel_size=3, decoder_max_step=8, gate_threshold=0.5):
        super(LocationSensitiveDecoder, self).__init__()
        self.location_conv = nn.Conv1d(2, n_filter, kernel_size, padding=(kernel_size - 1) // 2, bias=False)
        self.location_dense = nn.Linear(n_filter, dim, bias=False)
        self.query_layer = nn.Linear(dim, dim, bias=False)
        self.memory_layer = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, 1, bias=False)
        self.decoder_rnn = nn.LSTMCell(2 * dim, dim)
        self.linear_projection = nn.Linear(2 * dim, dim)
        self.gate_layer = nn.Linear(2 * dim, 1)
        self.score_mask_value = -float("inf")
        self.dim = dim
        self.decoder_max_step = decoder_max_step
        self.gate_threshold = gate_threshold

    def _get_initial_states(self, memory: torch.Tensor):
        n_batch, max_time = memory.size(0), memory.size(1)
        hidden = torch.zeros(n_batch, self.dim, dtype=memory.dtype, device=memory.device)
        cell = torch.zeros(n_batch, self.dim, dtype=memory.dtype, device=memory.device)
        attention_weights = torch.zeros(n_batch, max_time, dtype=memory.dtype, device=memory.device)
        attention_weights_cum = torch.zeros(n_batch, max_time, dtype=memory.dtype, device=memory.device)
        attention_context = torch.zeros(n_batch, self.dim, dtype=memory.dtype, device=memory.device)
        return hidden, cell, attention_weights, attention_weights_cum, attention_context

    def forward(self, memory, memory_lengths):
        memory = memory[:, : int(torch.max(memory_lengths).item())]
        mask = _get_mask_from_lengths(memory_lengths)
        processed_memory = self.memory_layer(memory)
        hidden, cell, attention_weights, attention_weights_cum, attention_context = self._get_initial_states(memory)
        n_batch = memory.size(0)
        decoder_input = torch.zeros(n_batch, self.dim, dtype=memory.dtype, device=memory.device)
        mel_specgram_lengths = torch.zeros([n_batch], dtype=torch.int32, device=memory.device)
        finished = torch.zeros([n_batch], dtype=torch.bool, device=memory.device)
        mel_specgrams: List[torch.Tensor] = []
        alignments: List[torch.Tensor] = []
        for _ in range(self.decoder_max_step):
            attention_weights_cat = torch.cat(
                (attention_weights.unsqueeze(1), attention_weights_cum.unsqueeze(1)), dim=1
            )
            processed_attention = self.location_dense(self.location_conv(attention_weights_cat).transpose(1, 2))
            processed_query = self.query_layer(hidden.unsqueeze(1))
            energies = self.v(torch.tanh(processed_query + processed_attention + processed_memory)).squeeze(2)
            alignment = energies.masked_fill(mask, self.score_mask_value)
            attention_weights = F.softmax(alignment, dim=1)
            attention_weights_cum += attention_weights
            attention_context = torch.bmm(attention_weights.unsqueeze(1), memory).squeeze(1)
            hidden, cell = self.decoder_rnn(torch.cat((decoder_input, attention_context), -1), (hidden, cell))
            decoder_hidden_attention_context = torch.cat((hidden, attention_context), dim=1)
            mel_specgram = self.linear_projection(decoder_hidden_attention_context)
            gate_output = self.gate_layer(decoder_hidden_attention_context)
            mel_specgrams.append(mel_specgram.unsqueeze(0))
            alignments.append(attention_weights)
            mel_specgram_lengths[~finished] += 1
            finished |= torch.sigmoid(gate_output.squeeze(1)) > self.gate_threshold
            if torch.all(finished):
                break
            decoder_input = mel_specgram
        mel_specgram = torch.cat(mel_specgrams, dim=0).permute(1, 2, 0)
        return mel_specgram, mel_specgram_lengths, torch.stack(alignments).transpose(0, 1)


def test_a_location_sensitive_decode_loop_stops_where_pytorch_stops(tmp_path):
    """iree-compile rejected its compiled host ("failed to legalize unresolved target
    materialization from ('index') to ('!stream.resource<*>', 'index')"): the README's trap."""
    torch.manual_seed(7)  # initial weights whose gates stop the inputs below at steps 1, 2, 3 and the cap
    model = LocationSensitiveDecoder(gate_threshold=0.4)
    example = (torch.randn(2, 6, 4), torch.tensor([6, 4]))
    _, scripted, compiled, python = _export(tmp_path, model, example, "location_attention")
    generator = torch.Generator().manual_seed(0)
    stops = set()
    for lengths in ([6, 4], [5, 5], [3, 1], [6, 6], [2, 2], [4, 3], [1, 1]):
        memory = torch.randn(2, 6, 4, generator=generator) * 2
        _, steps, _ = _check(scripted, (compiled, python), (memory, torch.tensor(lengths)))
        stops.update(steps.tolist())
    assert len(stops) >= 4 and 8 in stops, stops  # sequences stop at different steps, and at the cap
