"""Offline calibration of the zoo's random-weight models, and the decision margins of a run.

Why this exists: the zoo's models have random weights, so nothing makes their decisions land
anywhere useful. An internal classifier may never be confident, a gate may always skip, a decoder
may stop on its first word for every input. The tests and the exporter's verification need SAMPLES
that take every exit, flip gates and leave decoding loops both ways, and each decision must have
room to spare: a compiled copy that computes 1e-6 differently must not take another path.

This module re-derives every calibrated constant hard-coded in the model files (thresholds,
per-classifier logit scales, end-token biases, sample seeds) with deterministic searches, and
prints them as Python literals:

    python -m models.calibrate            # all models, about a minute on 2 cores
    python -m models.calibrate sdn_vgg16_bn transformer_translator

`decision_margins` is also used by tests/test_zoo_models.py to check that the shipped samples keep
every decision at least MIN_MARGIN away from flipping.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
from torch import Tensor, nn

from .blockdrop import BlockDropResNet, build_blockdrop
from .captioning import ShowAttendTell, build_show_attend_tell
from .ranet import RaNet, build_ranet
from .ranet import random_image as ranet_image
from .shallow_deep import (
    ShallowDeepNetwork,
    build_mobilenet,
    build_resnet56,
    build_vgg16_bn,
    build_wide_resnet32_4,
    random_image,
)
from .skipnet import SkipNetFeedForward, SkipNetRecurrent, build_skipnet
from .transformer import Translator, build_translator, random_source

# How far (in probability, or in logit for an argmax) every decision of a shipped sample must be
# from flipping. Compiled float32 code agrees with PyTorch to about 1e-5 relative.
MIN_MARGIN = 1e-3

# Candidate logit scales for internal classifiers (roughly powers of sqrt(2)).
SCALE_GRID = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 2.8, 4.0, 5.6, 8.0, 11.0, 16.0, 22.0, 32.0)

# Candidate images: (seed, scale, shift); scale changes how hard an image drives the network.
IMAGE_CANDIDATES = [(seed, scale, 0.0) for seed in range(40) for scale in (0.5, 1.0, 2.0)]


def _image_inputs(spec: tuple[int, float, float]) -> tuple[Tensor]:
    return (random_image(*spec),)


def _source_inputs(seed: int) -> tuple[Tensor]:
    return (random_source(seed),)


# ---------------------------------------------------------------------------------------------
# Decision margins of one eager run
# ---------------------------------------------------------------------------------------------


def _top2_gap(logits: Tensor) -> float:
    top = torch.topk(logits.flatten(), 2).values
    return float(top[0] - top[1])


def _confidence_margin(threshold: float) -> Callable[[Tensor], list[float]]:
    return lambda logits: [abs(float(torch.softmax(logits, dim=1).max()) - threshold)]


def _probes(model: nn.Module) -> list[tuple[nn.Module, Callable[[Tensor], list[float]]]]:
    """(module, margins of its output) for every module whose output a decision is read from."""
    if isinstance(model, ShallowDeepNetwork):
        return [(head, _confidence_margin(model.threshold)) for head in model.heads]
    if isinstance(model, RaNet):
        margin = _confidence_margin(model.threshold)
        return [(model.coarse_classifier, margin), (model.middle_classifier, margin)]
    if isinstance(model, SkipNetFeedForward):
        return [(gate, lambda probability: [abs(float(probability) - 0.5)]) for gate in model.gates]
    if isinstance(model, SkipNetRecurrent):
        return [(model.gate_output, lambda logit: [abs(float(torch.sigmoid(logit)) - 0.5)])]
    if isinstance(model, BlockDropResNet):
        return [(model.policy, lambda probabilities: (probabilities - 0.5).abs().flatten().tolist())]
    if isinstance(model, ShowAttendTell):
        return [(model.output_words, lambda logits: [_top2_gap(logits)])]
    if isinstance(model, Translator):
        return [(model.generator, lambda logits: [_top2_gap(logits[:, -1] if logits.dim() == 3 else logits)])]
    raise TypeError(f"no decision probes known for {type(model).__name__}")


def decision_margins(model: nn.Module, inputs: tuple) -> tuple[object, list[float]]:
    """Run the eager `model` on `inputs`; return its output and the margin of every decision taken.

    A margin is how far the value a decision reads was from flipping it: |confidence - threshold|
    for an exit, |probability - 0.5| for a gate or policy entry, the gap between the two largest
    logits for a greedy decoding step.

    >>> from models.ranet import ranet
    >>> model, example = ranet()
    >>> output, margins = decision_margins(model, example)
    """
    margins: list[float] = []
    handles = []
    for module, measure in _probes(model):
        handles.append(module.register_forward_hook(lambda _m, _i, out, measure=measure: margins.extend(measure(out))))
    try:
        with torch.no_grad():
            output = model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return output, margins


# ---------------------------------------------------------------------------------------------
# Early exits: per-classifier logit scales, then one sample per exit
# ---------------------------------------------------------------------------------------------


def calibrate_exit_scales(
    linears: list[nn.Linear], features: list[Tensor], threshold: float, target_rate: float
) -> list[float]:
    """Pick each exit classifier's logit scale so about `target_rate` of the inputs reaching it exit.

    `features[k]` holds, one row per candidate input, what exit k's final linear layer received
    (with every exit evaluated). Exits are calibrated in order, each on the candidates that passed
    the earlier ones, so every exit, and the final classifier, keeps a share of the candidates.
    """
    reaching = torch.ones(features[0].shape[0], dtype=torch.bool)
    scales: list[float] = []
    for linear, feature in zip(linears, features):
        with torch.no_grad():
            raw = feature @ linear.weight.T
            best_scale, best_exits, best_error = SCALE_GRID[0], reaching & False, 2.0
            for scale in SCALE_GRID:
                confidence = torch.softmax(scale * raw + linear.bias, dim=1).max(dim=1).values
                exits = (confidence > threshold) & reaching
                error = abs(float(exits.sum()) / max(int(reaching.sum()), 1) - target_rate)
                if error < best_error:
                    best_scale, best_exits, best_error = scale, exits, error
        scales.append(best_scale)
        reaching = reaching & ~best_exits
    return scales


def _exit_linear_inputs(model: nn.Module, linears: list[nn.Linear], candidates: list[tuple]) -> list[Tensor]:
    """Inputs of each exit's final linear layer for every candidate, with the exits disabled."""
    recorded: list[list[Tensor]] = [[] for _ in linears]
    handles = [
        linear.register_forward_pre_hook(lambda _m, args, index=index: recorded[index].append(args[0]))
        for index, linear in enumerate(linears)
    ]
    threshold = model.threshold
    model.threshold = 2.0  # no softmax probability exceeds it: every exit is evaluated
    try:
        with torch.no_grad():
            for inputs in candidates:
                model(*inputs)
    finally:
        model.threshold = threshold
        for handle in handles:
            handle.remove()
    return [torch.cat(rows) for rows in recorded]


def select_exit_samples(model: nn.Module, specs: list, make_inputs: Callable, exit_count: int) -> list:
    """For every exit, the candidate taking it with the largest margin (specs ordered by exit)."""
    best: dict[int, tuple[float, object]] = {}
    for spec in specs:
        (_, exit_index), margins = decision_margins(model, make_inputs(spec))
        margin = min(margins)
        if margin >= MIN_MARGIN and margin > best.get(exit_index, (-1.0, None))[0]:
            best[exit_index] = (margin, spec)
    missing = sorted(set(range(exit_count)) - set(best))
    if missing:
        raise RuntimeError(f"no candidate takes exit(s) {missing} with margin {MIN_MARGIN}")
    return [best[index][1] for index in range(exit_count)]


SDN_BUILDERS: dict[str, Callable[..., ShallowDeepNetwork]] = {
    "sdn_resnet56": build_resnet56,
    "sdn_vgg16_bn": build_vgg16_bn,
    "sdn_mobilenet": build_mobilenet,
    "sdn_wide_resnet32_4": build_wide_resnet32_4,
}
SDN_THRESHOLD = 0.8
RANET_THRESHOLD = 0.8


def calibrate_sdn(name: str) -> dict[str, object]:
    """Logit scales for the six ICs of one SDN, and one sample per exit (7 samples)."""
    build = SDN_BUILDERS[name]
    candidates = [(random_image(*spec),) for spec in IMAGE_CANDIDATES]
    model = build(threshold=SDN_THRESHOLD)
    linears = [head.linear for head in model.heads]
    features = _exit_linear_inputs(model, linears, candidates)
    scales = calibrate_exit_scales(linears, features, SDN_THRESHOLD, target_rate=0.3)
    model = build(threshold=SDN_THRESHOLD, logit_scales=tuple(scales))
    samples = select_exit_samples(model, IMAGE_CANDIDATES, _image_inputs, len(scales) + 1)
    return {"threshold": SDN_THRESHOLD, "logit_scales": tuple(scales), "samples": samples}


def calibrate_ranet() -> dict[str, object]:
    """Logit scales for RaNet's two early classifiers, and one sample per exit (3 samples)."""
    candidates = [(ranet_image(*spec),) for spec in IMAGE_CANDIDATES]
    model = build_ranet(threshold=RANET_THRESHOLD)
    linears = [model.coarse_classifier.linear, model.middle_classifier.linear]
    features = _exit_linear_inputs(model, linears, candidates)
    scales = calibrate_exit_scales(linears, features, RANET_THRESHOLD, target_rate=0.35)
    logit_scales = (scales[0], scales[1], 1.0)
    model = build_ranet(threshold=RANET_THRESHOLD, logit_scales=logit_scales)
    samples = select_exit_samples(model, IMAGE_CANDIDATES, lambda spec: (ranet_image(*spec),), 3)
    return {"threshold": RANET_THRESHOLD, "logit_scales": logit_scales, "samples": samples}


# ---------------------------------------------------------------------------------------------
# Gates: samples that make as many blocks as possible change their decision
# ---------------------------------------------------------------------------------------------


def select_gate_samples(model: nn.Module, specs: list, make_inputs: Callable, count: int = 6) -> list:
    """Greedily pick `count` robust candidates so that the most blocks both run and skip across them."""
    decisions: list[tuple[object, Tensor]] = []
    for spec in specs:
        (_, gates), margins = decision_margins(model, make_inputs(spec))
        if min(margins) >= MIN_MARGIN:
            decisions.append((spec, gates))
    if not decisions:
        raise RuntimeError(f"no candidate keeps every gate {MIN_MARGIN} away from 0.5")
    chosen = [decisions[0]]
    while len(chosen) < min(count, len(decisions)):

        def varying(extra: tuple[object, Tensor]) -> int:
            stacked = torch.stack([gates for _, gates in chosen + [extra]])
            return int(((stacked.min(0).values == 0) & (stacked.max(0).values == 1)).sum())

        remaining = [candidate for candidate in decisions if all(candidate[0] != spec for spec, _ in chosen)]
        chosen.append(max(remaining, key=varying))
    return [spec for spec, _ in chosen]


def calibrate_gates(name: str) -> dict[str, object]:
    """Samples for a SkipNet or the BlockDrop model (no constants to fit: gates are centred on 0.5)."""
    if name == "skipnet_ff_resnet38":
        model: nn.Module = build_skipnet("ff", 38)
    elif name == "skipnet_rnn_resnet38":
        model = build_skipnet("rnn", 38)
    else:
        model = build_blockdrop(110)
    samples = select_gate_samples(model, IMAGE_CANDIDATES, _image_inputs)
    return {"samples": samples}


# ---------------------------------------------------------------------------------------------
# Decoders: an end-token bias giving both loop exits, and samples of varied lengths
# ---------------------------------------------------------------------------------------------

END_BIAS_GRID = tuple(step / 4 for step in range(-4, 17))


def _decoder_outcomes(
    model: nn.Module, specs: list, make_inputs: Callable, cap: int
) -> list[tuple[object, tuple[int, ...], bool]]:
    """(spec, words, ended on the end token) for every candidate whose decisions are all robust.

    A run that makes the end token as its `cap`-th word is left out: both loop exits coincide there.
    """
    outcomes = []
    for spec in specs:
        tokens, margins = decision_margins(model, make_inputs(spec))
        ended = int(tokens[-1]) == model.end_token
        if min(margins) >= MIN_MARGIN and (len(tokens) < cap) == ended:
            outcomes.append((spec, tuple(tokens.tolist()), ended))
    return outcomes


def select_decoder_samples(outcomes: list[tuple[object, tuple[int, ...], bool]], count: int = 6) -> list:
    """Two capped runs (different words) and end-token runs of as many lengths as fit, longest first."""
    capped_by_words: dict[tuple[int, ...], object] = {}
    for spec, words, ended in outcomes:
        if not ended:
            capped_by_words.setdefault(words, spec)
    capped = list(capped_by_words.values())[:2]
    by_length: dict[int, object] = {}
    for spec, words, ended in outcomes:
        if ended:
            by_length.setdefault(len(words), spec)
    ended_specs = [by_length[length] for length in sorted(by_length, reverse=True)][: count - len(capped)]
    return ended_specs[:1] + capped + ended_specs[1:]


def _decoder_score(outcomes: list[tuple[object, tuple[int, ...], bool]]) -> tuple[int, int]:
    lengths = {len(words) for _, words, ended in outcomes if ended}
    has_cap = any(not ended for _, _, ended in outcomes)
    return (int(has_cap and bool(lengths)), len(lengths))


def calibrate_decoder(name: str) -> dict[str, object]:
    """The end-token bias giving the most distinct end-token lengths plus capped runs; samples."""
    if name == "show_attend_tell":
        specs: list = IMAGE_CANDIDATES[:60]
        make_inputs: Callable = _image_inputs
        build: Callable = build_show_attend_tell
        cap = 12
    else:
        specs = list(range(60))
        make_inputs = _source_inputs
        build = build_translator
        cap = 10
    best: tuple[tuple[int, int], float, list] = ((-1, -1), 0.0, [])
    for end_bias in END_BIAS_GRID:
        outcomes = _decoder_outcomes(build(end_bias=end_bias), specs, make_inputs, cap)
        score = _decoder_score(outcomes)
        if score > best[0]:
            best = (score, end_bias, outcomes)
    if best[0][0] != 1:
        raise RuntimeError(f"{name}: no end-token bias gives both loop exits")
    return {"end_bias": best[1], "samples": select_decoder_samples(best[2])}


CALIBRATIONS: dict[str, Callable[[], dict[str, object]]] = {
    **{name: (lambda name=name: calibrate_sdn(name)) for name in SDN_BUILDERS},
    "ranet": calibrate_ranet,
    "skipnet_ff_resnet38": lambda: calibrate_gates("skipnet_ff_resnet38"),
    "skipnet_rnn_resnet38": lambda: calibrate_gates("skipnet_rnn_resnet38"),
    "blockdrop_resnet110": lambda: calibrate_gates("blockdrop_resnet110"),
    "show_attend_tell": lambda: calibrate_decoder("show_attend_tell"),
    "transformer_translator": lambda: calibrate_decoder("transformer_translator"),
}


def main(names: list[str]) -> None:
    """Print the calibrated constants of the named models (all when none is named)."""
    torch.set_num_threads(1)
    for name in names or list(CALIBRATIONS):
        print(f"{name}: {CALIBRATIONS[name]()}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
