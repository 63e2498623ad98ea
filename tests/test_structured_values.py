"""Structured values across data-dependent control flow: Optionals, dicts, NamedTuples, objects.

Each model is written the way published code writes it: decoders whose state starts as `None`
and is set in the first step (`if state is None:`), heads with an optional auxiliary output,
segmentation and detection heads that return a `Dict[str, Tensor]` from an early exit, a
NamedTuple of outputs, and a `@torch.jit.script` class `Hypothesis` carried through a beam-search
style loop under `with torch.no_grad():`. Every model is exported once; both hosts run inputs that
take every path and are compared with the scripted model (None, dicts and NamedTuples included);
the Python host's records show the paths taken; every bundle gets the compiled host.
"""

# The models keep the published code's idioms (`super(Class, self)`, `typing.Optional`).
# ruff: noqa: UP004, UP006, UP007, UP008, UP037, UP045

from __future__ import annotations

import inspect
from typing import Dict, List, NamedTuple, Optional

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dycl_iree
from tests.conftest import check_hosts
from tests.conftest import export_compiled as _export

# ---------------------------------------------------------------------------------------------
# Optional: an auxiliary output, decoder states that start as None, Optional[int] / [float]
# ---------------------------------------------------------------------------------------------


class AuxiliaryHead(nn.Module):
    """An auxiliary classifier that only runs when the main head is unsure (GoogLeNet / deep
    supervision style): `aux` is None otherwise, and None is what the model returns."""

    def __init__(self, dim=4, classes=3):
        super(AuxiliaryHead, self).__init__()
        self.body = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, classes)
        self.aux_head = nn.Linear(dim, classes)

    def forward(self, x):
        h = torch.relu(self.body(x))
        logits = self.head(h)
        aux: Optional[torch.Tensor] = None
        if bool(F.softmax(logits, -1).max() < 0.5):
            aux = self.aux_head(h)
        return logits, aux


def test_an_optional_output_is_none_on_the_path_that_leaves_it_unset(tmp_path):
    torch.manual_seed(0)
    bundle, scripted, compiled, python = _export(tmp_path, AuxiliaryHead(), (torch.randn(1, 4),), "aux")
    assert bundle.manifest["outputs"]["tree"] == [0, {"optional": [1, 2]}]
    outcomes = set()
    generator = torch.Generator().manual_seed(0)
    for scale in (0.1, 0.1, 10.0, 10.0):
        _, aux = check_hosts(scripted, (compiled, python), (torch.randn(1, 4, generator=generator) * scale,))
        outcomes.add(aux is None)
    assert outcomes == {True, False}
    (label,) = python.decisions
    assert set(python.decisions[label]) == {True, False}
    assert [port.name for port in compiled.outputs] == ["output0", "output1_has_value", "output2"]


class GreedySearch(nn.Module):
    """A decoder loop as seq2seq code writes it: the recurrent state starts as None and the first
    step makes it (`if state is None:`), the best step so far is an `Optional[int]` and its score an
    `Optional[float]`, set only when a step beats it; the search stops on end-of-sequence."""

    def __init__(self, dim=4, vocab=5, eos=0):
        super(GreedySearch, self).__init__()
        self.eos = eos
        self.init_state = nn.Linear(dim, dim)
        self.cell = nn.GRUCell(vocab, dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, encoded, max_steps: int):
        state: Optional[torch.Tensor] = None
        best_step: Optional[int] = None
        best_score: Optional[float] = None
        token = torch.zeros(encoded.size(0), 5)
        for step in range(max_steps):
            if state is None:
                state = torch.tanh(self.init_state(encoded))
            else:
                state = self.cell(token, state)
            logp = F.log_softmax(self.out(state), dim=-1)
            score = float(logp.max())
            if best_score is None or score > best_score:
                best_score = score
                best_step = step
            token = F.one_hot(logp.argmax(-1), 5).float()
            if int(logp.argmax()) == self.eos:
                break
        return state, best_step, best_score


def test_decoder_state_that_starts_as_none_is_set_in_the_first_step(tmp_path):
    torch.manual_seed(3)
    _, scripted, compiled, python = _export(tmp_path, GreedySearch(), (torch.randn(1, 4), 4), "greedy")
    exits = set()
    generator = torch.Generator().manual_seed(0)
    for sample in range(40):
        encoded = torch.randn(1, 4, generator=generator) * 3
        max_steps = 0 if sample == 0 else 4
        state, _, _ = check_hosts(scripted, (compiled, python), (encoded, max_steps))
        (trips,) = python.trip_counts.values()
        exits.add("none" if state is None else ("cap" if trips[-1] == max_steps else "eos"))
        if exits == {"none", "cap", "eos"}:
            break
    assert exits == {"none", "cap", "eos"}, exits


class BeamSearch(nn.Module):
    """A small beam search as translation code writes one: the decoder's hidden state starts as None
    and the first step makes it from the encoder; `topk` over beam x vocabulary picks the next
    beams; the best finished hypothesis (its final state and score) is Optional until a beam's
    best candidate ends with end-of-sequence; the search stops early once no beam can beat it."""

    def __init__(self, dim=4, vocab=5, beam=3, bos=1, eos=0):
        super(BeamSearch, self).__init__()
        self.vocab, self.beam, self.bos, self.eos = vocab, beam, bos, eos
        self.bridge = nn.Linear(dim, dim)
        self.embed = nn.Embedding(vocab, dim)
        self.cell = nn.GRUCell(dim, dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, memory, max_len: int):
        hidden: Optional[torch.Tensor] = None
        scores = torch.zeros(self.beam)
        tokens = torch.full((self.beam,), self.bos, dtype=torch.long)
        best: Optional[torch.Tensor] = None
        best_score: Optional[float] = None
        for _ in range(max_len):
            if hidden is None:
                hidden = torch.tanh(self.bridge(memory)).repeat(self.beam, 1)
            hidden = self.cell(self.embed(tokens), hidden)
            logp = F.log_softmax(self.out(hidden), dim=-1)
            candidates = (scores.unsqueeze(1) + logp).view(-1)
            scores, flat = candidates.topk(self.beam)
            origin = torch.div(flat, self.vocab, rounding_mode="floor")
            tokens = flat % self.vocab
            hidden = hidden[origin]
            if int(tokens[0]) == self.eos:
                if best_score is None or float(scores[0]) > best_score:
                    best = hidden[0]
                    best_score = float(scores[0])
            if best_score is not None and float(scores.max()) < best_score:
                break
        return best, best_score, scores


def test_beam_search_with_optional_state_and_best_hypothesis(tmp_path):
    torch.manual_seed(7)
    _, scripted, compiled, python = _export(tmp_path, BeamSearch(), (torch.randn(1, 4), 4), "beam")
    outcomes = set()
    generator = torch.Generator().manual_seed(0)
    for sample in range(60):
        memory = torch.randn(1, 4, generator=generator) * 3
        max_len = 0 if sample == 0 else 5
        best, _, _ = check_hosts(scripted, (compiled, python), (memory, max_len))
        (trips,) = python.trip_counts.values()
        if max_len == 0:
            outcomes.add("no step")  # every Optional stays None
        else:
            outcomes.add(("finished" if best is not None else "unfinished", "cap" if trips[-1] == max_len else "early"))
        if len(outcomes) == 3:
            break
    # A search that never finishes runs to the cap; one that finishes stops once no beam can beat it.
    assert outcomes == {"no step", ("unfinished", "cap"), ("finished", "early")}, outcomes


class ExitingEncoder(nn.Module):
    """An early-exit encoder that returns from inside its loop over steps with the attention of
    the last step that computed one (None if none did yet); a run to the end asserts it has one,
    as code that unpacks an Optional does."""

    def __init__(self, dim=4):
        super(ExitingEncoder, self).__init__()
        self.layer = nn.Linear(dim, dim)

    def forward(self, x, steps: int):
        attention: Optional[torch.Tensor] = None
        for _ in range(steps):
            x = x + torch.tanh(self.layer(x))
            if bool(x.sum() > 2.0):
                return x, attention
            if bool(x.abs().max() > 1.0):
                attention = F.softmax(x, -1)
        assert attention is not None, "no step computed an attention"
        return x, attention


def test_an_optional_returned_from_inside_a_loop_and_asserted_after_it(tmp_path):
    torch.manual_seed(4)
    _, scripted, compiled, python = _export(tmp_path, ExitingEncoder(), (torch.randn(1, 4), 3), "exiting")
    outcomes = set()
    generator = torch.Generator().manual_seed(0)
    for sample in range(60):
        x, steps = torch.randn(1, 4, generator=generator) * 2, sample % 4
        try:
            out, attention = check_hosts(scripted, (compiled, python), (x, steps))
        except torch.jit.Error:
            for host in (compiled, python):
                with pytest.raises(dycl_iree.ModelRaised, match="no step computed an attention"):
                    host(x.numpy(), steps)
            outcomes.add("raised")
            continue
        # Only the `return` inside the loop gives a sum over 2 (the end of a step checks it).
        outcomes.add(("returned" if bool(out.sum() > 2.0) else "ran to the end", attention is None))
    assert outcomes == {"raised", ("returned", True), ("returned", False), ("ran to the end", False)}, outcomes


# ---------------------------------------------------------------------------------------------
# Dicts with keys known at export: heads that return a dict, from an early exit too
# ---------------------------------------------------------------------------------------------


class SegmentationHead(nn.Module):
    """torchvision's segmentation models return `OrderedDict`s (`result["out"]`, `result["aux"]`);
    this head returns its dict early when the coarse prediction is confident, else refines it and
    adds the key `"aux"`, then rescales every entry by iterating over `.items()`."""

    def __init__(self, dim=4, classes=3):
        super(SegmentationHead, self).__init__()
        self.coarse = nn.Linear(dim, classes)
        self.refine = nn.Linear(classes, classes)
        self.aux = nn.Linear(dim, classes)

    def forward(self, features) -> Dict[str, torch.Tensor]:
        result: Dict[str, torch.Tensor] = {}
        result["out"] = self.coarse(features)
        if bool(result["out"].softmax(-1).max() > 0.9):
            return result
        result["out"] = self.refine(result["out"])
        result["aux"] = self.aux(features)
        for name, value in result.items():
            result[name] = value * 0.5
        if "aux" in result:
            result["score"] = result["aux"].sum(-1)
        return result


def test_a_dict_returned_from_an_early_exit_holds_the_keys_of_its_path(tmp_path):
    torch.manual_seed(1)
    bundle, scripted, compiled, python = _export(tmp_path, SegmentationHead(), (torch.randn(2, 4),), "segment")
    keys = set()
    generator = torch.Generator().manual_seed(0)
    for scale in (0.1, 20.0, 0.5, 30.0):
        result = check_hosts(scripted, (compiled, python), (torch.randn(2, 4, generator=generator) * scale,))
        keys.add(tuple(result))
    assert keys == {("out",), ("out", "aux", "score")}, keys
    (label,) = python.decisions
    assert set(python.decisions[label]) == {True, False}
    tree = bundle.manifest["outputs"]["tree"]
    assert [entry[0] for entry in tree["dict"]] == ["out", "aux", "score"]


class DetectionPostprocess(nn.Module):
    """A detector's per-level outputs kept in a dict keyed by level name (as FPN code keys its
    feature maps), read with `d[k]` and `k in d`; a loop over the levels' constant keys; the
    `"boxes"` entry is set inside a data-dependent loop, so the dict holds it on some runs only."""

    def __init__(self, dim=4):
        super(DetectionPostprocess, self).__init__()
        self.levels = nn.ModuleDict({"p3": nn.Linear(dim, dim), "p4": nn.Linear(dim, dim)})

    def forward(self, x, rounds: int):
        features: Dict[str, torch.Tensor] = {}
        for name, level in self.levels.items():
            features[name] = level(x)
        outputs: Dict[str, torch.Tensor] = {"scores": features["p3"].sigmoid()}
        for _ in range(rounds):
            x = x * 0.5
            if bool(x.abs().sum() > 1.0):
                outputs["boxes"] = x + features["p4"]
        total = torch.zeros(1)
        for key in features.keys():
            total = total + features[key].sum()
        if "boxes" in outputs:
            total = total + outputs["boxes"].sum()
        return outputs, total, len(features)


def test_dict_keys_set_in_a_loop_and_read_over_constant_keys(tmp_path):
    torch.manual_seed(2)
    _, scripted, compiled, python = _export(tmp_path, DetectionPostprocess(), (torch.randn(1, 4), 2), "detect")
    seen = set()
    for rounds, scale in ((0, 1.0), (3, 0.1), (3, 4.0)):
        outputs, _, _ = check_hosts(scripted, (compiled, python), (torch.randn(1, 4) * scale, rounds))
        seen.add(tuple(outputs))
    assert seen == {("scores",), ("scores", "boxes")}, seen


class CountedHeads(nn.Module):
    """Counts the heads that ran: `len(result)` after a key set in a data-dependent branch."""

    def forward(self, x):
        result: Dict[str, torch.Tensor] = {"out": x}
        if bool(x.sum() > 0):
            result["aux"] = x * 2
        return x * len(result)


def test_the_length_of_a_dict_whose_keys_depend_on_the_path_is_refused():
    line = inspect.getsourcelines(CountedHeads.forward)[1] + 4
    message = rf"len\(\) on a dict that holds 'aux' on some paths only \(.*test_structured_values.py:{line}\)"
    with pytest.raises(dycl_iree.DyclError, match=message):
        dycl_iree.export(CountedHeads(), (torch.randn(3),))


class BeamOfStrings(nn.Module):
    """torchaudio's RNN-T beam search keys its hypotheses by their tokens as a string."""

    def forward(self, logits, steps: int):
        hypotheses: Dict[str, torch.Tensor] = {}
        tokens: List[int] = []
        for _ in range(steps):
            tokens.append(int(logits.argmax()))
            hypotheses[str(tokens)] = logits.max()
            logits = logits * 0.5
        return hypotheses


def test_a_dict_keyed_by_token_text_is_carried_but_not_returned():
    """A dict keyed by `str(tokens)` is carried as a log of its sets (`tests/test_run_time_dicts.py`),
    which holds a key once per set: returning it is refused, naming where it was set."""
    line = inspect.getsourcelines(BeamOfStrings.forward)[1] + 5
    message = (
        rf"BeamOfStrings returns a dict keyed by run-time text \(set at .*test_structured_values.py:{line}\): "
        r"it is carried as a log of its sets"
    )
    with pytest.raises(dycl_iree.DyclError, match=message):
        dycl_iree.export(BeamOfStrings(), (torch.randn(5), 3))


# ---------------------------------------------------------------------------------------------
# Objects: NamedTuple outputs, a scripted class carried through a loop, `with torch.no_grad():`
# ---------------------------------------------------------------------------------------------


class DecoderState(NamedTuple):
    hidden: torch.Tensor
    cell: torch.Tensor


class DecoderOutput(NamedTuple):
    logits: torch.Tensor
    steps: int
    finished: bool


class StoppingDecoder(nn.Module):
    """Carries its LSTM state as a NamedTuple through the decode loop and returns a NamedTuple (as
    Hugging Face's and fairseq's decoders return their outputs)."""

    def __init__(self, dim=4):
        super(StoppingDecoder, self).__init__()
        self.cell = nn.LSTMCell(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, max_steps: int) -> DecoderOutput:
        state = DecoderState(torch.zeros_like(x), torch.zeros_like(x))
        finished = False
        steps = 0
        for _ in range(max_steps):
            hidden, cell = self.cell(x, (state.hidden, state.cell))
            state = DecoderState(hidden, cell)
            x = torch.tanh(self.out(state.hidden))
            steps += 1
            if bool(x.mean() > 0.0):
                finished = True
                break
        return DecoderOutput(logits=x + state.cell, steps=steps, finished=finished)


def test_a_namedtuple_output_comes_back_with_its_names(tmp_path):
    torch.manual_seed(0)
    _, scripted, compiled, python = _export(tmp_path, StoppingDecoder(), (torch.randn(1, 4), 3), "namedtuple")
    finished = set()
    generator = torch.Generator().manual_seed(1)
    for _ in range(60):
        output = check_hosts(scripted, (compiled, python), (torch.randn(1, 4, generator=generator) * 2, 3))
        finished.add(output.finished)
        if finished == {True, False}:
            break
    assert finished == {True, False}


@torch.jit.script
class Hypothesis(object):
    """A beam-search hypothesis as a TorchScript class: tokens, a running score, a length."""

    def __init__(self, tokens: torch.Tensor, score: float, length: int):
        self.tokens = tokens
        self.score = score
        self.length = length

    def extend(self, token: torch.Tensor, logp: float) -> "Hypothesis":
        return Hypothesis(torch.cat([self.tokens, token]), self.score + logp, self.length + 1)

    def normalized_score(self) -> float:
        return self.score / max(self.length, 1)


class ScriptedClassSearch(nn.Module):
    """A greedy search over `Hypothesis` objects, under `with torch.no_grad():` as inference code
    writes it: a new hypothesis per step (`extend`), its score rescaled through an attribute write,
    and the best one kept through a data-dependent comparison."""

    def __init__(self, dim=4, vocab=6, eos=1):
        super(ScriptedClassSearch, self).__init__()
        self.eos = eos
        self.proj = nn.Linear(dim, vocab)
        self.embed = nn.Embedding(vocab, dim)

    def forward(self, state, max_steps: int):
        with torch.no_grad():
            hyp = Hypothesis(torch.zeros(0, dtype=torch.long), 0.0, 0)
            best = hyp
            for _ in range(max_steps):
                logp = F.log_softmax(self.proj(state), dim=-1)
                token = logp.argmax(-1)
                hyp = hyp.extend(token, float(logp.max()))
                hyp.score = hyp.score * 0.9
                if hyp.normalized_score() > best.normalized_score() or best.length == 0:
                    best = hyp
                if int(token) == self.eos:
                    break
                state = torch.tanh(state + self.embed(token))
        return best.tokens, best.score, hyp.length


def test_a_scripted_class_is_carried_field_by_field_through_a_loop(tmp_path):
    torch.manual_seed(5)
    _, scripted, compiled, python = _export(tmp_path, ScriptedClassSearch(), (torch.randn(1, 4), 4), "hypothesis")
    exits = set()
    generator = torch.Generator().manual_seed(0)
    for sample in range(40):
        max_steps = 0 if sample == 0 else 4
        x = torch.randn(1, 4, generator=generator) * 3
        _, _, length = check_hosts(scripted, (compiled, python), (x, max_steps))
        exits.add("none" if max_steps == 0 else ("cap" if length == max_steps else "eos"))
        if exits == {"none", "cap", "eos"}:
            break
    assert exits == {"none", "cap", "eos"}, exits


# ---------------------------------------------------------------------------------------------
# How they come back: the manifest's output tree, and the C header
# ---------------------------------------------------------------------------------------------


def test_the_output_tree_rebuilds_none_dicts_and_namedtuples_and_is_checked():
    from host_runtime.output_tree import TreeProblem, build_outputs, check_tree, flatten_outputs, leaf_labels

    tree = [{"namedtuple": ["Out", [["logits", 0]]]}, {"optional": [1, 2]}, {"dict": [["a", 3], ["b", 4, 5]]}, None]
    leaves = ["logits", False, "stand-in", "a", "b", True]
    built = build_outputs(tree, leaves)
    assert built[0].logits == "logits" and type(built[0]).__name__ == "Out"
    assert built[1:] == (None, {"a": "a", "b": "b"}, None)
    assert flatten_outputs(tree, built) == ["logits", False, None, "a", "b", True]
    assert leaf_labels(tree, 6) == [
        "output0_logits",
        "output1_has_value",
        "output2",
        "output3_a",
        "output4_b",
        "output5_b_has_value",
    ]
    check_tree(tree, 6, "outputs.tree")
    with pytest.raises(TreeProblem, match=r"outputs.tree\[1\].optional must be \[flag leaf, subtree\]"):
        check_tree([0, {"optional": [1]}], 6, "outputs.tree")
    with pytest.raises(TreeProblem, match="names leaf 7, but there are 6"):
        check_tree({"dict": [["a", 7]]}, 6, "outputs.tree")


def test_the_c_header_shows_an_optional_as_a_flag_beside_its_value(tmp_path):
    from dycl_iree.emit_c import emit_c

    torch.manual_seed(0)
    aux = dycl_iree.export(AuxiliaryHead().eval(), (torch.randn(1, 4),)).save(tmp_path / "aux.dycl")
    header = emit_c(aux, tmp_path / "c")[0].read_text()
    assert "float* output0,\n" in header and "bool* output1_has_value,\n" in header and "float* output2)" in header
    assert "//   (output0, output2 if output1_has_value else None)\n" in header
    assert "// An Optional (or a dict key the model sets on some paths only) is a has_value flag beside" in header
    segment = dycl_iree.export(SegmentationHead().eval(), (torch.randn(2, 4),)).save(tmp_path / "segment.dycl")
    header = emit_c(segment, tmp_path / "c")[0].read_text()
    assert "{'out': output0_out, 'aux': output1_aux (if output2_aux_has_value), " in header


class SharedHypothesis(nn.Module):
    """`best = hyp`, then a loop that writes `hyp.score` and may give `best` a new object: after
    the first iteration `best` is `hyp` on some paths only."""

    def forward(self, state, max_steps: int):
        hyp = Hypothesis(torch.zeros(1, dtype=torch.long), 0.0, 0)
        best = hyp
        for _ in range(max_steps):
            hyp.score = hyp.score + float(state.sum())
            if hyp.score > 1.0:
                best = Hypothesis(hyp.tokens, hyp.score, hyp.length)
        return best.score


def test_a_write_to_an_object_that_another_name_may_hold_is_refused():
    line = inspect.getsourcelines(SharedHypothesis.forward)[1] + 4
    message = (
        rf"`.score = ...` writes a Hypothesis object that another name may or may not hold, depending on a "
        rf"decision made at run time \(.*test_structured_values.py:{line}\).*make a new object instead"
    )
    with pytest.raises(dycl_iree.DyclError, match=message):
        dycl_iree.export(SharedHypothesis(), (torch.randn(3), 2))
