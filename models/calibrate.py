"""Offline calibration of the zoo's random-weight models, and the decision margins of a run.

Why this exists: the zoo's models have random weights, so nothing makes their decisions land
anywhere useful. An internal classifier may never be confident, a gate may always skip, a decoder
may stop on its first word for every input. The tests and the exporter's verification need SAMPLES
that take every exit, flip gates and leave decoding loops both ways, and each decision must have
room to spare: a compiled copy that computes 1e-6 differently must not take another path.

This module re-derives every calibrated constant hard-coded in the model files (thresholds,
per-classifier logit scales, per-gate biases, end-token biases, sample seeds) with deterministic
searches, and prints them as Python literals:

    python -m models.calibrate            # all models, about a minute on 2 cores
    python -m models.calibrate sdn_vgg16_bn transformer_translator

`decision_margins` is also used by tests/test_zoo_models.py to check that the shipped samples keep
every decision at least MIN_MARGIN away from flipping.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .blockdrop import BlockDropResNet, build_blockdrop
from .captioning import ShowAttendTell, build_show_attend_tell
from .common import image_inputs, random_image
from .ranet import RaNet, build_ranet
from .shallow_deep import (
    ResNetSDN,
    ShallowDeepNetwork,
    build_mobilenet,
    build_resnet56,
    build_vgg16_bn,
    build_wide_resnet32_4,
)
from .skipnet import RecurrentGatedResNet, SkipNetFeedForward, SkipNetRecurrent, build_skipnet
from .transformer import Translator, build_translator, source_inputs

# How far (in probability, or in logit for an argmax) every decision of a shipped sample must be
# from flipping. Compiled float32 code agrees with PyTorch to about 1e-5 relative.
MIN_MARGIN = 1e-3

# Candidate logit scales for internal classifiers (roughly powers of sqrt(2)).
SCALE_GRID = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 2.8, 4.0, 5.6, 8.0, 11.0, 16.0, 22.0, 32.0)

# Candidate images: (seed, scale, shift); scale changes how hard an image drives the network.
IMAGE_CANDIDATES = [(seed, scale, 0.0) for seed in range(40) for scale in (0.5, 1.0, 2.0)]


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
    if isinstance(model, ResNetSDN):
        margin = _confidence_margin(model.confidence_threshold)
        return [(layer.output, margin) for layer in model.layers if layer.output is not None]
    if isinstance(model, RecurrentGatedResNet):
        return [(model.control.prob, lambda probability: [abs(float(probability) - 0.5)])]
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
    candidates = [image_inputs(spec) for spec in IMAGE_CANDIDATES]
    model = build(threshold=SDN_THRESHOLD)
    linears = [head.linear for head in model.heads]
    features = _exit_linear_inputs(model, linears, candidates)
    scales = calibrate_exit_scales(linears, features, SDN_THRESHOLD, target_rate=0.3)
    model = build(threshold=SDN_THRESHOLD, logit_scales=tuple(scales))
    samples = select_exit_samples(model, IMAGE_CANDIDATES, image_inputs, len(scales) + 1)
    return {"threshold": SDN_THRESHOLD, "logit_scales": tuple(scales), "samples": samples}


def calibrate_ranet() -> dict[str, object]:
    """Logit scales for RaNet's two early classifiers, and one sample per exit (3 samples)."""
    candidates = [image_inputs(spec) for spec in IMAGE_CANDIDATES]
    model = build_ranet(threshold=RANET_THRESHOLD)
    linears = [model.coarse_classifier.linear, model.middle_classifier.linear]
    features = _exit_linear_inputs(model, linears, candidates)
    scales = calibrate_exit_scales(linears, features, RANET_THRESHOLD, target_rate=0.35)
    logit_scales = (scales[0], scales[1], 1.0)
    model = build_ranet(threshold=RANET_THRESHOLD, logit_scales=logit_scales)
    samples = select_exit_samples(model, IMAGE_CANDIDATES, image_inputs, 3)
    return {"threshold": RANET_THRESHOLD, "logit_scales": logit_scales, "samples": samples}


# ---------------------------------------------------------------------------------------------
# Gates: per-gate biases that split the candidates in half, then samples flipping every gate
# ---------------------------------------------------------------------------------------------

# Candidate images for the gated models: twice the seeds of IMAGE_CANDIDATES, because a sample
# must keep all 18 or 54 of its gates MIN_MARGIN away from 0.5 and the recurrent gate's logits are
# small (its read-out sees an LSTM state bounded by 1), so fewer candidates pass.
GATE_CANDIDATES = [(seed, scale, 0.0) for seed in range(80) for scale in (0.5, 1.0, 2.0)]

# The project's verification runs every sample; no gated model may need more than this many.
MAX_GATE_SAMPLES = 8

# Calibrated biases are shipped as Python literals with this many decimals. Each one is rounded
# before the next gate is fitted, so the fit sees exactly the shipped model.
BIAS_DECIMALS = 4


def _output_of(module: nn.Module, run: Callable[[], object]) -> Tensor:
    """What `module` returned during `run()` (its last call)."""
    recorded: list[Tensor] = []
    handle = module.register_forward_hook(lambda _m, _i, out: recorded.append(out))
    try:
        run()
    finally:
        handle.remove()
    return recorded[-1]


def _centring_bias(logits: Tensor) -> float:
    """The bias that puts the median of `logits` at zero (so half of them are positive), rounded.

    torch.quantile interpolates: with an even count the median lies between two candidates, so
    no candidate sits exactly on the decision boundary.
    """
    return round(-float(torch.quantile(logits.double(), 0.5)), BIAS_DECIMALS)


def _follow_decisions(block: nn.Module, x: Tensor, run: Tensor) -> Tensor:
    """The next block input of a batch in which row i ran the block when run[i], else skipped it."""
    return torch.where(run[:, None, None, None], block(x), block.skip(x))


def fit_feed_forward_gate_biases(model: SkipNetFeedForward, images: Tensor) -> tuple[float, ...]:
    """Set each feed-forward gate's output bias to minus the median of its logit over `images`.

    Gates are fitted in order, and a gate's input depends on the decisions before it, so the batch
    walks the network as the model's forward does one image at a time: every row runs or skips
    each block as its own (already fitted) gate decides. Each gate then runs its block for about
    half of the images.

    >>> images = torch.cat([random_image(seed) for seed in range(8)])
    >>> len(fit_feed_forward_gate_biases(build_skipnet("ff", 38), images))
    18
    """
    biases: list[float] = []
    with torch.no_grad():
        x = model.stem(images)
        for block, gate in zip(model.blocks, model.gates):
            gate.linear.bias.zero_()
            logits = _output_of(gate.linear, lambda gate=gate, x=x: gate(x)).squeeze(1)
            biases.append(_centring_bias(logits))
            gate.linear.bias.fill_(biases[-1])
            x = _follow_decisions(block, x, logits + biases[-1] > 0)
    return tuple(biases)


def _recurrent_gate(
    model: SkipNetRecurrent, projection: nn.Module, pooled: Tensor, state: tuple[Tensor, Tensor]
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """One step of the shared LSTM gate on a batch, as the forward takes it: logits and next state."""
    hidden, memory = model.cell(projection(pooled), state)
    return model.gate_output(hidden).squeeze(1), (hidden, memory)


def fit_recurrent_projection_biases(model: SkipNetRecurrent, images: Tensor) -> tuple[tuple[float, ...], ...]:
    """Set each block's projection bias so the shared LSTM gate runs that block for about half of `images`.

    The gate's logit depends on the whole LSTM history, and its read-out layer (shared by all
    blocks) has a single bias, so the per-block knob is the block's own projection bias. It is
    first set to minus the mean projected summary of the block's inputs over `images`, so the LSTM
    sees inputs centred on zero instead of saturating its gates; then it is moved along one
    direction until the median gate logit is zero (bisection). That direction, the LSTM's
    cell-input weights transposed times the read-out weights, pushes the cell input along the
    read-out, so the logit rises with it. Blocks are fitted in order, each row of the batch
    following its own decisions (see fit_feed_forward_gate_biases).

    >>> images = torch.cat([random_image(seed) for seed in range(8)])
    >>> [len(bias) for bias in fit_recurrent_projection_biases(build_skipnet("rnn", 38), images)][:3]
    [10, 10, 10]
    """
    size = model.gate_size
    with torch.no_grad():
        # nn.LSTMCell stacks its input weights as (input, forget, cell, output) gate rows.
        direction = model.cell.weight_ih[2 * size : 3 * size].T @ model.gate_output.weight[0]
        direction = direction / direction.norm()
        x = model.stem(images)
        state = (torch.zeros(images.shape[0], size), torch.zeros(images.shape[0], size))
        biases: list[tuple[float, ...]] = []
        for index, (block, projection) in enumerate(zip(model.blocks, model.projections)):
            pooled = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
            centring = -(pooled @ projection.weight.T).mean(0)

            def median_logit(shift: float, projection: nn.Module = projection, pooled: Tensor = pooled) -> float:
                projection.bias.copy_(centring + shift * direction)
                logits, _ = _recurrent_gate(model, projection, pooled, state)
                return float(torch.quantile(logits, 0.5))

            low, high = -16.0, 16.0
            if median_logit(low) > 0 or median_logit(high) < 0:
                raise RuntimeError(f"block {index}: no shift of its projection bias centres the recurrent gate")
            for _ in range(40):
                middle = (low + high) / 2
                low, high = (low, middle) if median_logit(middle) > 0 else (middle, high)
            bias = centring + (low + high) / 2 * direction
            biases.append(tuple(round(float(value), BIAS_DECIMALS) for value in bias))
            projection.bias.copy_(torch.tensor(biases[-1]))
            logits, state = _recurrent_gate(model, projection, pooled, state)
            x = _follow_decisions(block, x, logits > 0)
    return tuple(biases)


def fit_policy_biases(model: BlockDropResNet, images: Tensor) -> tuple[float, ...]:
    """Set each policy output's bias to minus the median of its logit over `images`.

    BlockDrop makes all its decisions from the image before any block runs, so every block's
    logit is known from one batched policy pass and each block is kept for about half of `images`.

    >>> images = torch.cat([random_image(seed) for seed in range(8)])
    >>> len(fit_policy_biases(build_blockdrop(110), images))
    54
    """
    with torch.no_grad():
        model.policy.linear.bias.zero_()
        logits = _output_of(model.policy.linear, lambda: model.policy(images))
        biases = tuple(_centring_bias(column) for column in logits.T)
        model.policy.linear.bias.copy_(torch.tensor(biases))
    return biases


def _cover_gates(gates: Tensor, margins: Tensor) -> list[int] | None:
    """Rows of `gates` (candidates x gates, bool) under which every gate is both True and False.

    Greedy: each pick covers the most (gate, value) pairs not yet covered, ties going to the larger
    margin. None when MAX_GATE_SAMPLES picks do not cover every pair.
    """
    ran = torch.zeros(gates.shape[1], dtype=torch.bool)
    skipped = torch.zeros_like(ran)
    chosen: list[int] = []
    while not (ran & skipped).all():
        new_pairs = ((gates & ~ran) | (~gates & ~skipped)).sum(dim=1)
        best = int(torch.argmax(torch.where(new_pairs == new_pairs.max(), margins, -1.0)))
        if new_pairs[best] == 0 or len(chosen) == MAX_GATE_SAMPLES:
            return None
        chosen.append(best)
        ran, skipped = ran | gates[best], skipped | ~gates[best]
    return chosen


def select_gate_samples(model: nn.Module, specs: list, make_inputs: Callable) -> list:
    """At most MAX_GATE_SAMPLES candidates on which every gate both runs and skips, margins maximised.

    Each candidate's margin is its decision closest to flipping, and it must be at least
    MIN_MARGIN. The set is the greedy cover (see `_cover_gates`) among the candidates whose
    margin is at least a floor, for the highest floor at which such a cover exists.
    """
    runs = [decision_margins(model, make_inputs(spec)) for spec in specs]
    gates = torch.stack([gate_values.bool() for (_, gate_values), _ in runs])
    margins = torch.tensor([min(run_margins) for _, run_margins in runs], dtype=torch.float64)
    for floor in sorted(set(margins[margins >= MIN_MARGIN].tolist()), reverse=True):
        allowed = (margins >= floor).nonzero().flatten()
        chosen = _cover_gates(gates[allowed], margins[allowed])
        if chosen is not None:
            return [specs[int(allowed[index])] for index in chosen]
    robust = gates[margins >= MIN_MARGIN]
    never_run = (~robust.any(dim=0)).nonzero().flatten().tolist()
    always_run = robust.all(dim=0).nonzero().flatten().tolist()
    raise RuntimeError(
        f"no {MAX_GATE_SAMPLES} robust candidates flip every gate (gates no robust candidate runs: {never_run}, "
        f"gates every robust candidate runs: {always_run})"
    )


def calibrate_gates(name: str) -> dict[str, object]:
    """Per-gate biases centred on the candidates' median logits, then samples flipping every gate."""
    images = torch.cat([random_image(*spec) for spec in GATE_CANDIDATES])
    if name == "skipnet_ff_resnet38":
        feed_forward = build_skipnet("ff", 38)
        constants: dict[str, object] = {"gate_biases": fit_feed_forward_gate_biases(feed_forward, images)}
        model: nn.Module = build_skipnet("ff", 38, **constants)
    elif name == "skipnet_rnn_resnet38":
        recurrent = build_skipnet("rnn", 38)
        constants = {"projection_biases": fit_recurrent_projection_biases(recurrent, images)}
        model = build_skipnet("rnn", 38, **constants)
    else:
        blockdrop = build_blockdrop(110)
        constants = {"policy_biases": fit_policy_biases(blockdrop, images)}
        model = build_blockdrop(110, **constants)
    return {**constants, "samples": select_gate_samples(model, GATE_CANDIDATES, image_inputs)}


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
        make_inputs: Callable = image_inputs
        build: Callable = build_show_attend_tell
        cap = 12
    else:
        specs = list(range(60))
        make_inputs = source_inputs
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
