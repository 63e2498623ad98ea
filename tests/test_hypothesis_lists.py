"""A beam's hypotheses as published decoders keep them: tuples of tokens and a recurrent state that
is a `List[List[Tensor]]` (one list per layer), in a list of run-time length read at indices a sort
chose (`[hyps[idx] for idx in order]`), against PyTorch on both hosts (`specialize.tuple_lists`)."""

from __future__ import annotations

from typing import List, Tuple

import torch
from torch import nn

from dycl_iree.capture import capture
from dycl_iree.program import TensorOp, iter_nodes
from dycl_iree.specialize import specialize
from tests.conftest import check_hosts, export_compiled

State = List[List[torch.Tensor]]  # noqa: UP006  (TorchScript reads the annotations)


class StateBeam(nn.Module):
    """Each step extends a hypothesis the data picks: its tokens by one, its two-layer state (each
    layer `[h, c]`) by a recurrent update; the loop stops early on a large row."""

    def forward(self, x: torch.Tensor, n: int) -> List[Tuple[List[int], State]]:  # noqa: UP006
        zero = x[0] * 0.0
        hyps: List[Tuple[List[int], State]] = [([0], [[zero, zero], [zero, zero + 1.0]])]  # noqa: UP006
        for i in range(n):
            row = x[i % x.shape[0]]
            tokens, state = hyps[int(row.argmax()) % len(hyps)]
            layers: State = []
            below = row
            for layer in state:
                c = torch.tanh(layer[1] + below)
                h = layer[0] * 0.5 + c
                layers.append([h, c])
                below = h
            hyps.append((tokens + [i + 1], layers))
            if float(row.sum()) > 2.0:
                break
        return hyps


def _beam_inputs() -> list[tuple[torch.Tensor, int]]:
    torch.manual_seed(3)
    small = torch.randn(3, 4) * 0.1
    large = small.clone()
    large[1] += 1.0  # the second step breaks
    return [(small, 0), (small, 1), (large, 5), (torch.randn(3, 4), 7)]


def test_a_state_of_lists_per_hypothesis_is_carried_and_comes_back_as_lists(tmp_path):
    bundle, scripted, compiled, python = export_compiled(tmp_path, StateBeam(), (torch.randn(3, 4), 3), "state")
    assert bundle.host == "compiled"
    tree = bundle.manifest["outputs"]["tree"]
    assert "zip_lists" in tree["zip"][1], tree  # the layers, and each layer's [h, c], are lists
    assert bundle.manifest["version"] == 4  # the format that added them
    lengths = {len(check_hosts(scripted, (compiled, python), inputs)) for inputs in _beam_inputs()}
    (trips,) = python.trip_counts.values()  # the loop over layers is unrolled
    assert trips[:3] == [0, 1, 2], trips  # not entered; run to its count; stopped by the break
    x, n = _beam_inputs()[-1]
    for host in (compiled, python):
        for _, state in host(x.numpy(), n):
            assert type(state) is list and all(type(layer) is list and len(layer) == 2 for layer in state)
    assert lengths >= {1, 2, 3}, lengths


class SortedBeam(nn.Module):
    """Hypotheses put in order of their states' sums: `[hyps[int(k)] for k in order]`, the indices
    read back from `argsort`, with one hypothesis in the example (whose read-back index has an
    example value past that list's end)."""

    def forward(self, x: torch.Tensor, n: int) -> List[Tuple[List[int], State]]:  # noqa: UP006
        hyps: List[Tuple[List[int], State]] = [([0], [[x[0] * 1.0]])]  # noqa: UP006
        for i in range(n):
            tokens, state = hyps[-1]
            hyps.append((tokens + [i + 1], [[state[0][0] * 0.5 + x[(i + 1) % x.shape[0]]]]))
        scores = torch.stack([state[0][0].sum() for _, state in hyps])
        return [hyps[int(k)] for k in scores.argsort()]


def test_hypotheses_put_in_the_order_a_sort_chose(tmp_path):
    bundle, scripted, compiled, python = export_compiled(tmp_path, SortedBeam(), (torch.randn(3, 4), 0), "sorted")
    assert bundle.host == "compiled"
    torch.manual_seed(4)
    orders = set()
    for n in (0, 1, 4, 6):
        hyps = check_hosts(scripted, (compiled, python), (torch.randn(3, 4), n))
        orders.add(tuple(len(tokens) for tokens, _ in hyps))
    assert len(orders) == 4 and any(order != tuple(sorted(order)) for order in orders), orders  # reordered


class PickRow(nn.Module):
    def forward(self, x: torch.Tensor, i: int) -> torch.Tensor:
        return x[i] * 2.0


def test_an_index_known_only_at_run_time_keeps_the_other_dims_static():
    """x[i] of a (1, 8) tensor: i + 1 and 2i + 1 run past its end in the meta runs that find the
    dynamic dims; i - 1 (from the back) does not, and the row's size stays static."""
    program = specialize(capture(PickRow().eval()), (torch.randn(1, 8), 0))
    (select,) = [n for n in iter_nodes(program.body) if isinstance(n, TensorOp) and n.target == "aten::select.int"]
    assert select.outputs[0].type.shape == (8,)


Hypothesis = Tuple[List[int], torch.Tensor]  # noqa: UP006  (TorchScript reads the annotations)


class NewHypotheses(nn.Module):
    """`_gen_a_hypos`'s shape: new hypotheses where some token beat the bound, else an empty list,
    which TorchScript folds into a constant."""

    def forward(self, x: torch.Tensor, n: int) -> List[Hypothesis]:  # noqa: UP006
        tokens: List[int] = []  # noqa: UP006
        for i in range(n):
            tokens.append(int(x[i % x.shape[0]].argmax()))
        if tokens:
            new_hypos = [([token], x[0] * float(token)) for token in tokens]
        else:
            new_hypos: List[Hypothesis] = []  # noqa: UP006
        return new_hypos


def test_a_branch_may_give_an_empty_list_of_hypotheses(tmp_path):
    _, scripted, compiled, python = export_compiled(tmp_path, NewHypotheses(), (torch.randn(3, 4), 2), "new")
    x = torch.randn(3, 4)
    lengths = [len(check_hosts(scripted, (compiled, python), (x, n))) for n in (0, 1, 4)]
    assert lengths == [0, 1, 4], lengths
    (sides,) = python.decisions.values()
    assert dict(sides) == {False: 1, True: 2}


class TopBeam(SortedBeam):
    """The best `beam` hypotheses by their states' sums, as `_search` keeps its beam:
    `_, sorted_idx = scores.topk(beam_width)`, whose top values nothing reads."""

    def forward(self, x: torch.Tensor, n: int, beam: int) -> List[Tuple[List[int], State]]:  # noqa: UP006
        hyps: List[Tuple[List[int], State]] = [([0], [[x[0] * 1.0]])]  # noqa: UP006
        for i in range(n):
            tokens, state = hyps[-1]
            hyps.append((tokens + [i + 1], [[state[0][0] * 0.5 + x[(i + 1) % x.shape[0]]]]))
        scores = torch.stack([state[0][0].sum() for _, state in hyps])
        _, order = scores.topk(beam)
        return [hyps[int(k)] for k in order]


def test_the_beam_a_top_k_chose_from_a_list_of_run_time_length(tmp_path):
    bundle, scripted, compiled, python = export_compiled(tmp_path, TopBeam(), (torch.randn(3, 4), 2, 2), "top")
    assert bundle.host == "compiled"
    torch.manual_seed(5)
    kept = []
    for n, beam in ((0, 1), (3, 2), (5, 4)):
        kept.append(len(check_hosts(scripted, (compiled, python), (torch.randn(3, 4), n, beam))))
    assert kept == [1, 2, 4], kept
