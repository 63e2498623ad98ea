"""SkipNet: a gate before every residual block decides whether the block runs.

Follows "SkipNet: Learning Dynamic Routing in Convolutional Networks", Xin Wang, Fisher Yu,
Zi-Yi Dou, Trevor Darrell, Joseph E. Gonzalez, ECCV 2018. Before residual block i a gate G_i looks
at the block's input x_i and outputs a probability; at inference the decision is hard:
`x_{i+1} = F_i(x_i) + S_i(x_i)` when the probability exceeds 0.5, else `x_{i+1} = S_i(x_i)`, where
S_i is the block's shortcut (the identity, or for a block that changes shape its 1x1-conv
projection: skipping a downsampling block still has to produce the next stage's shape, which is
what the gated residual formula gives). Two gate designs from the paper:
- "ff": one feed-forward gate per block (the paper's FFGate: a strided conv on the block input,
  global average pooling, a linear layer, sigmoid);
- "rnn": ONE LSTM cell shared by all blocks (the paper's RNNGate): each block's input is reduced
  by global average pooling and a per-block 1x1 projection to the LSTM's input size (10, as in the
  paper, since channel counts differ between stages); the hidden state is carried from block to
  block, and a shared linear layer + sigmoid reads the gate probability from it.

Backbone: CIFAR ResNet of depth 6n+2 (3 stages x n basic blocks): ResNet-38 (n=6) by default,
ResNet-110 (n=18) with `depth=110`. ResNet-38 keeps the paper's widths 16/32/64 (0.6M
parameters); ResNet-110 at those widths has 1.7M, so build it with `width=8` (0.5M; the tests do).
The feed-forward gate's conv has 8 output channels. Batch 1, 3x32x32, 10 classes, random seeded
weights (no training); BatchNorm statistics fitted on random images (`fit_batch_norms`).

Calibration: gate output layers get a zero bias so the gate logits are centred on 0, and in the
"rnn" variant the projections' initial weights are multiplied by 10 so the image, not the LSTM's
random biases, drives the gate; the shipped SAMPLES were chosen offline
(see `models/calibrate.py`) so at least one block runs, one is skipped and at least one block's
decision differs between samples, each probability at least 1e-3 away from 0.5.

The forward returns `(logits, gates)`: gates is a float32 tensor with one 0./1. per block
(1. = the block ran), built with torch.cat so no Python list of tensors is involved.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NUM_CLASSES = 10


def random_image(seed: int, scale: float = 1.0, shift: float = 0.0) -> Tensor:
    """A deterministic random 1x3x32x32 image: smooth colour blobs plus pixel noise, scaled and shifted.

    A bilinearly upsampled 4x4 random image gives each sample its own low-frequency layout, as
    natural images have; i.i.d. pixel noise alone averages out under pooling, so every image would
    look alike to a pooled gate or classifier and decisions would hardly vary. Samples are
    (seed, scale, shift) triples so a reader can regenerate them and the calibration search can vary
    how strongly an input drives the network.

    >>> random_image(0).shape
    torch.Size([1, 3, 32, 32])
    """
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.randn(1, 3, 4, 4, generator=generator)
    fine = torch.randn(1, 3, 32, 32, generator=generator)
    blobs = F.interpolate(coarse, size=(32, 32), mode="bilinear", align_corners=False)
    return (blobs + 0.5 * fine) * scale + shift


def fit_batch_norms(model: nn.Module, run: Callable[[Tensor], object], seed: int) -> None:
    """Set BatchNorm running statistics from one batch of random images, then random affines.

    Without this a random deep network's features stop depending on the input, and every gate
    deep in the network would decide the same for all inputs (see shallow_deep.fit_batch_norms;
    the helper is repeated per file so each model file loads on its own by path). `run` must
    execute every BatchNorm with no data-dependent decision.
    """
    generator = torch.Generator().manual_seed(seed)
    norms = [module for module in model.modules() if isinstance(module, nn.BatchNorm2d)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average: the statistics of exactly this batch
        with torch.no_grad():
            norm.weight.copy_(torch.rand(norm.num_features, generator=generator) * 0.5 + 0.75)
            norm.bias.copy_(torch.randn(norm.num_features, generator=generator) * 0.1)
    batch = torch.cat([random_image(1000 + index, 0.5 + index / 8) for index in range(16)])
    model.train()
    with torch.no_grad():
        run(batch)
    for norm in norms:
        norm.momentum = 0.1
    model.eval()


class BasicBlock(nn.Module):
    """CIFAR ResNet basic block; `skip` is what a gated-off block computes (its shortcut alone)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        if stride != 1 or in_channels != out_channels:
            self.shortcut: nn.Module = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), nn.BatchNorm2d(out_channels)
            )
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))

    def skip(self, x: Tensor) -> Tensor:
        return self.shortcut(x)


class FeedForwardGate(nn.Module):
    """SkipNet's feed-forward gate: strided 3x3 conv, ReLU, global average pool, linear, sigmoid."""

    def __init__(self, channels: int, hidden: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, hidden, 3, 2, 1)
        self.linear = nn.Linear(hidden, 1)
        with torch.no_grad():
            self.linear.bias.zero_()  # centre the gate: run or skip decided by the input alone

    def forward(self, x: Tensor) -> Tensor:
        features = F.adaptive_avg_pool2d(F.relu(self.conv(x)), 1)
        return torch.sigmoid(self.linear(torch.flatten(features, 1)))


def _resnet_blocks(depth: int, width: int) -> tuple[list[BasicBlock], list[int]]:
    """The 3 x n basic blocks of a CIFAR ResNet of `depth` = 6n+2, and each block's input channels."""
    if (depth - 2) % 6 != 0:
        raise ValueError(f"CIFAR ResNet depth must be 6n+2, got {depth}")
    per_stage = (depth - 2) // 6
    blocks: list[BasicBlock] = []
    in_channels_of_block: list[int] = []
    in_channels = width
    for stage in range(3):
        out_channels = width * 2**stage
        for block in range(per_stage):
            stride = 2 if stage > 0 and block == 0 else 1
            blocks.append(BasicBlock(in_channels, out_channels, stride))
            in_channels_of_block.append(in_channels)
            in_channels = out_channels
    return blocks, in_channels_of_block


class SkipNetFeedForward(nn.Module):
    """CIFAR ResNet with one feed-forward gate per block (SkipNet-FFGate)."""

    def __init__(self, depth: int, width: int) -> None:
        super().__init__()
        blocks, in_channels = _resnet_blocks(depth, width)
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.blocks = nn.ModuleList(blocks)
        self.gates = nn.ModuleList([FeedForwardGate(channels) for channels in in_channels])
        self.classifier = nn.Linear(4 * width, NUM_CLASSES)

    def forward(self, image: Tensor) -> tuple[Tensor, Tensor]:
        x = self.stem(image)
        decisions = torch.zeros(0)
        for block, gate in zip(self.blocks, self.gates):
            run_block = gate(x) > 0.5
            if run_block:
                x = block(x)
            else:
                x = block.skip(x)
            decisions = torch.cat((decisions, run_block.to(torch.float32).reshape(1)))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)), decisions

    @torch.jit.unused
    def run_all_blocks(self, image: Tensor) -> Tensor:
        """Every block and gate, no decisions, for a batch (used to fit BatchNorm statistics)."""
        x = self.stem(image)
        for block in self.blocks:
            x = block(x)
        return x


class SkipNetRecurrent(nn.Module):
    """CIFAR ResNet whose blocks share ONE LSTM-cell gate, its state carried from block to block."""

    def __init__(self, depth: int, width: int, projection_gain: float, gate_size: int = 10) -> None:
        super().__init__()
        blocks, in_channels = _resnet_blocks(depth, width)
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.blocks = nn.ModuleList(blocks)
        # Global average pooling then a 1x1 projection (a linear layer on the pooled vector).
        self.projections = nn.ModuleList([nn.Linear(channels, gate_size) for channels in in_channels])
        with torch.no_grad():
            for projection in self.projections:
                # With the default init the pooled block summaries are tiny next to the LSTM's
                # biases, so the gate would hardly depend on the image (calibration, not the paper).
                projection.weight.mul_(projection_gain)
        self.cell = nn.LSTMCell(gate_size, gate_size)
        self.gate_output = nn.Linear(gate_size, 1)
        with torch.no_grad():
            self.gate_output.bias.zero_()  # centre the gate: run or skip decided by the state alone
        self.gate_size = gate_size
        self.classifier = nn.Linear(4 * width, NUM_CLASSES)

    def forward(self, image: Tensor) -> tuple[Tensor, Tensor]:
        x = self.stem(image)
        hidden = torch.zeros(1, self.gate_size)
        cell = torch.zeros(1, self.gate_size)
        decisions = torch.zeros(0)
        for block, projection in zip(self.blocks, self.projections):
            summary = projection(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
            hidden, cell = self.cell(summary, (hidden, cell))
            run_block = torch.sigmoid(self.gate_output(hidden)) > 0.5
            if run_block:
                x = block(x)
            else:
                x = block.skip(x)
            decisions = torch.cat((decisions, run_block.to(torch.float32).reshape(1)))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)), decisions

    @torch.jit.unused
    def run_all_blocks(self, image: Tensor) -> Tensor:
        """Every block, no decisions, for a batch (used to fit BatchNorm statistics)."""
        x = self.stem(image)
        for block in self.blocks:
            x = block(x)
        return x


def build_skipnet(
    variant: str = "ff", depth: int = 38, width: int = 16, projection_gain: float = 10.0, seed: int = 0
) -> nn.Module:
    """A SkipNet in eval mode: `variant` "ff" (a gate per block) or "rnn" (one shared LSTM gate).

    `depth` is 6n+2 (38, 110, ...); `projection_gain` only matters for "rnn" (see the module
    docstring).

    >>> model = build_skipnet("rnn", depth=38)
    >>> logits, gates = model(random_image(0))
    >>> gates.shape
    torch.Size([18])
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if variant == "ff":
            model: nn.Module = SkipNetFeedForward(depth, width)
        elif variant == "rnn":
            model = SkipNetRecurrent(depth, width, projection_gain)
        else:
            raise ValueError(f"unknown SkipNet variant {variant!r}: expected 'ff' or 'rnn'")
    fit_batch_norms(model, model.run_all_blocks, seed + 1)
    return model


# ---------------------------------------------------------------------------------------------
# Calibrated zoo entries (values found by models/calibrate.py; see the module docstring)
# ---------------------------------------------------------------------------------------------

# (seed, scale, shift) per random_image, chosen so many blocks both run and skip across the
# samples; printed by `python -m models.calibrate`.
SAMPLE_SPECS: dict[str, list[tuple[int, float, float]]] = {
    "skipnet_ff_resnet38": [(0, 0.5, 0.0), (3, 2.0, 0.0), (0, 2.0, 0.0), (0, 1.0, 0.0), (1, 0.5, 0.0), (1, 1.0, 0.0)],
    "skipnet_rnn_resnet38": [
        (0, 1.0, 0.0),
        (36, 2.0, 0.0),
        (25, 1.0, 0.0),
        (11, 2.0, 0.0),
        (4, 2.0, 0.0),
        (38, 0.5, 0.0),
    ],
}


def skipnet_ff_resnet38() -> tuple[nn.Module, tuple]:
    """SkipNet-FFGate on ResNet-38; example input: its first sample."""
    return build_skipnet("ff", 38), (random_image(*SAMPLE_SPECS["skipnet_ff_resnet38"][0]),)


def skipnet_rnn_resnet38() -> tuple[nn.Module, tuple]:
    """SkipNet-RNNGate on ResNet-38; example input: its first sample."""
    return build_skipnet("rnn", 38), (random_image(*SAMPLE_SPECS["skipnet_rnn_resnet38"][0]),)


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {
    "skipnet_ff_resnet38": skipnet_ff_resnet38,
    "skipnet_rnn_resnet38": skipnet_rnn_resnet38,
}


def _samples(name: str) -> Callable[[], list[tuple]]:
    def build() -> list[tuple]:
        return [(random_image(*spec),) for spec in SAMPLE_SPECS[name]]

    return build


SAMPLES: dict[str, Callable[[], list[tuple]]] = {name: _samples(name) for name in MODELS}
