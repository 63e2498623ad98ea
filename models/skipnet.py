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

Calibration (stands in for training, done offline by `models/calibrate.py` on 240 random images):
- "ff": each gate's output bias (GATE_BIASES) is minus the median of its logit over the images,
  fitted block by block with every image following its own path, so each gate runs its block for
  about half of the images;
- "rnn": the projections' initial weights are multiplied by 10 so the image, not the LSTM's random
  biases, drives the gate, and each block's projection bias (PROJECTION_BIASES, 10 numbers per
  block) centres the block's summaries on zero and then shifts them until the shared gate runs the
  block for about half of the images (the read-out layer is shared, so its one bias cannot do it).
The shipped SAMPLES (5 for "ff", 4 for "rnn") were then chosen from the same images so that every
one of the 18 blocks runs on some sample and is skipped on another, with every gate probability at
least 1e-3 away from 0.5.

The forward returns `(logits, gates)`: gates is a float32 tensor with one 0./1. per block
(1. = the block ran), built with torch.cat so no Python list of tensors is involved.

`skipnet_lstm_resnet38` is `skipnet_rnn_resnet38` written as SkipNet's code writes it: per block a
gate layer (`nn.AvgPool2d` over the map, a 1x1 conv), the shared `RNNGate` (an `nn.LSTM`, a 1x1-conv
read-out, a sigmoid) and `if bool(prob > 0.5):`; it shares that model's weights, so the same samples
run and skip the same blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.common import (
    NUM_CLASSES,
    BasicBlock,
    cifar_resnet_plan,
    conv_bn_relu,
    fit_batch_norms,
    image_inputs,
    sample_builders,
    seeded,
)


class FeedForwardGate(nn.Module):
    """SkipNet's feed-forward gate: strided 3x3 conv, ReLU, global average pool, linear, sigmoid."""

    def __init__(self, channels: int, hidden: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, hidden, 3, 2, 1)
        self.linear = nn.Linear(hidden, 1)
        with torch.no_grad():
            self.linear.bias.zero_()  # the calibrated GATE_BIASES replace it (build_skipnet)

    def forward(self, x: Tensor) -> Tensor:
        features = F.adaptive_avg_pool2d(F.relu(self.conv(x)), 1)
        return torch.sigmoid(self.linear(torch.flatten(features, 1)))


class GatedResNet(nn.Module):
    """What both SkipNet variants share: a CIFAR ResNet of `depth` = 6n+2 (stem, 3 x n basic blocks).

    Each variant adds its gates and then its classifier (4 * width -> classes), in that order: the
    order in which the modules draw their initial weights from the seeded RNG is part of the model.
    """

    def __init__(self, depth: int, width: int) -> None:
        super().__init__()
        # Blocks before the stem: the calibrated constants below were fitted to weights drawn in this order.
        blocks = [BasicBlock(*step) for step in cifar_resnet_plan(depth, width)]
        self.stem = conv_bn_relu(3, width)
        self.blocks = nn.ModuleList(blocks)

    def block_input_channels(self) -> list[int]:
        """Channels of each block's input: what the gate deciding that block looks at."""
        return [block.conv1.in_channels for block in self.blocks]

    @torch.jit.unused
    def run_all_blocks(self, image: Tensor) -> Tensor:
        """Every block, no decisions, for a batch (used to fit BatchNorm statistics; no gate has one)."""
        x = self.stem(image)
        for block in self.blocks:
            x = block(x)
        return x


class SkipNetFeedForward(GatedResNet):
    """CIFAR ResNet with one feed-forward gate per block (SkipNet-FFGate)."""

    def __init__(self, depth: int, width: int) -> None:
        super().__init__(depth, width)
        self.gates = nn.ModuleList([FeedForwardGate(channels) for channels in self.block_input_channels()])
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


class SkipNetRecurrent(GatedResNet):
    """CIFAR ResNet whose blocks share ONE LSTM-cell gate, its state carried from block to block."""

    def __init__(self, depth: int, width: int, projection_gain: float, gate_size: int = 10) -> None:
        super().__init__(depth, width)
        # Global average pooling then a 1x1 projection (a linear layer on the pooled vector).
        self.projections = nn.ModuleList([nn.Linear(channels, gate_size) for channels in self.block_input_channels()])
        with torch.no_grad():
            for projection in self.projections:
                # With the default init the pooled block summaries are tiny next to the LSTM's
                # biases, so the gate would hardly depend on the image (calibration, not the paper).
                projection.weight.mul_(projection_gain)
        self.cell = nn.LSTMCell(gate_size, gate_size)
        self.gate_output = nn.Linear(gate_size, 1)
        with torch.no_grad():
            self.gate_output.bias.zero_()  # shared by all blocks: PROJECTION_BIASES centre each block
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


class RNNGate(nn.Module):
    """SkipNet's `RNNGate` as its authors wrote it: an `nn.LSTM` over the blocks' gate features, a
    1x1 convolution to one logit, a sigmoid. The state is passed in and out instead of kept in
    `self.hidden` (TorchScript cannot assign a module attribute in forward)."""

    def __init__(self, input_dim: int, hidden_dim: int, rnn_type: str = "lstm") -> None:
        super(RNNGate, self).__init__()  # noqa: UP008 (the published code's spelling)
        self.rnn_type = rnn_type
        self.input_dim = input_dim
        self.hidden_dim = hidden_dim
        self.rnn = nn.LSTM(input_dim, hidden_dim)
        # reduce dim
        self.proj = nn.Conv2d(in_channels=hidden_dim, out_channels=1, kernel_size=1, stride=1)
        self.prob = nn.Sigmoid()

    def init_hidden(self, batch_size: int) -> Tuple[Tensor, Tensor]:  # noqa: UP006
        return (torch.zeros(1, batch_size, self.hidden_dim), torch.zeros(1, batch_size, self.hidden_dim))

    def forward(self, x: Tensor, hidden: Tuple[Tensor, Tensor]) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:  # noqa: UP006
        batch_size = x.size(0)
        out, hidden = self.rnn(x.view(1, batch_size, -1), hidden)
        out = out.squeeze(0)
        proj = self.proj(out.view(out.size(0), out.size(1), 1, 1)).squeeze()
        prob = self.prob(proj)
        return prob, hidden


class RecurrentGatedResNet(nn.Module):
    """SkipNet's `RecurrentGatedResNet` at inference: before each block, its gate layer (average
    pooling over the whole map, a 1x1 convolution to the LSTM's input size) feeds the shared
    `RNNGate`, and the block runs when the probability exceeds 0.5, else only its shortcut."""

    def __init__(self, stem: nn.Module, blocks: nn.ModuleList, gate_layers: list[nn.Module], control: RNNGate,
                 fc: nn.Module) -> None:  # fmt: skip
        super(RecurrentGatedResNet, self).__init__()  # noqa: UP008
        self.stem = stem
        self.blocks = blocks
        self.gate_layers = nn.ModuleList(gate_layers)
        self.control = control
        self.avgpool = nn.AvgPool2d(8)
        self.fc = fc

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:  # noqa: UP006
        batch_size = x.size(0)
        x = self.stem(x)
        hidden = self.control.init_hidden(batch_size)
        decisions = torch.zeros(0)
        for block, gate_layer in zip(self.blocks, self.gate_layers):
            gate_feature = gate_layer(x)
            prob, hidden = self.control(gate_feature, hidden)
            if bool(prob > 0.5):
                x = block(x)
            else:
                x = block.skip(x)
            decisions = torch.cat((decisions, (prob > 0.5).float().view(1)))
        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        return self.fc(x), decisions


def skipnet_code_recurrent(network: SkipNetRecurrent, seed: int = 0) -> RecurrentGatedResNet:
    """`network` rebuilt as SkipNet's code writes it, with the same weights: each projection
    (a linear layer on the pooled map) becomes a 1x1 convolution, the LSTM cell an `nn.LSTM`
    (the same weight layout), the gate's read-out a 1x1 convolution to one channel."""
    with seeded(seed):  # the new modules' initial weights are overwritten; keep the caller's RNG
        gate_layers: list[nn.Module] = []
        spatial = 32
        for block, projection in zip(network.blocks, network.projections):
            conv = nn.Conv2d(projection.in_features, projection.out_features, kernel_size=1, stride=1)
            with torch.no_grad():
                conv.weight.copy_(projection.weight.view(*projection.weight.shape, 1, 1))
                conv.bias.copy_(projection.bias)
            gate_layers.append(nn.Sequential(nn.AvgPool2d(spatial), conv))
            spatial //= block.conv1.stride[0]
        control = RNNGate(network.gate_size, network.gate_size)
        with torch.no_grad():
            control.rnn.weight_ih_l0.copy_(network.cell.weight_ih)
            control.rnn.weight_hh_l0.copy_(network.cell.weight_hh)
            control.rnn.bias_ih_l0.copy_(network.cell.bias_ih)
            control.rnn.bias_hh_l0.copy_(network.cell.bias_hh)
            control.proj.weight.copy_(network.gate_output.weight.view(1, network.gate_size, 1, 1))
            control.proj.bias.copy_(network.gate_output.bias)
    return RecurrentGatedResNet(network.stem, network.blocks, gate_layers, control, network.classifier).eval()


def build_skipnet(
    variant: str = "ff",
    depth: int = 38,
    width: int = 16,
    projection_gain: float = 10.0,
    seed: int = 0,
    gate_biases: tuple[float, ...] | None = None,
    projection_biases: tuple[tuple[float, ...], ...] | None = None,
) -> nn.Module:
    """A SkipNet in eval mode: `variant` "ff" (a gate per block) or "rnn" (one shared LSTM gate).

    `depth` is 6n+2 (38, 110, ...). Calibrated constants (see the module docstring), one per
    block: for "ff", `gate_biases` are the gates' output biases (zero when None); for "rnn",
    `projection_biases` replace the per-block projections' biases (random init when None), and
    `projection_gain` scales the projections' weights.

    >>> from models.common import random_image
    >>> model = build_skipnet("rnn", depth=38)
    >>> logits, gates = model(random_image(0))
    >>> gates.shape
    torch.Size([18])
    """
    with seeded(seed):
        if variant == "ff":
            model: nn.Module = SkipNetFeedForward(depth, width)
        elif variant == "rnn":
            model = SkipNetRecurrent(depth, width, projection_gain)
        else:
            raise ValueError(f"unknown SkipNet variant {variant!r}: expected 'ff' or 'rnn'")
    if gate_biases is not None:
        if not isinstance(model, SkipNetFeedForward) or len(gate_biases) != len(model.gates):
            raise ValueError(f"gate_biases: expected one per block of a feed-forward SkipNet, got {len(gate_biases)}")
        with torch.no_grad():
            for gate, bias in zip(model.gates, gate_biases):
                gate.linear.bias.fill_(bias)
    if projection_biases is not None:
        if not isinstance(model, SkipNetRecurrent) or len(projection_biases) != len(model.projections):
            raise ValueError(
                f"projection_biases: expected one per block of a recurrent SkipNet, got {len(projection_biases)}"
            )
        with torch.no_grad():
            for projection, bias in zip(model.projections, projection_biases):
                projection.bias.copy_(torch.tensor(bias, dtype=torch.float32))
    fit_batch_norms(model, model.run_all_blocks, seed + 1)
    return model


# ---------------------------------------------------------------------------------------------
# Calibrated zoo entries (values found by models/calibrate.py; see the module docstring)
# ---------------------------------------------------------------------------------------------

# Per-block gate constants fitted by `python -m models.calibrate` (see the module docstring): each
# gate runs its block for about half of the calibration images. Rows are the three stages.
# fmt: off
GATE_BIASES: tuple[float, ...] = (
    -0.0252, -0.0191, -0.01, 0.0152, -0.0577, 0.1458,
    -0.2165, 0.0556, -0.081, -0.1264, 0.041, 0.1038,
    0.0398, 0.1816, 0.0628, -0.0329, -0.0821, 0.1765,
)
# fmt: on
PROJECTION_BIASES: tuple[tuple[float, ...], ...] = (
    (-1.5903, -1.6956, 4.6447, 0.5586, 2.5087, -0.1225, -1.8321, -4.4078, 1.2067, -0.4569),
    (-2.8472, -1.9428, 0.0471, 5.3357, 0.3057, -5.7417, -1.1884, -0.7977, -4.9512, 2.9682),
    (5.1577, 1.0217, -3.0694, 0.6765, 2.3697, 1.0872, 5.8517, 1.2518, 2.5038, 0.5048),
    (0.5954, 0.5094, -4.232, 2.5561, -0.395, 0.8657, 6.5441, -2.0917, 3.4447, -0.1648),
    (2.5008, -5.8673, -7.2567, 6.8705, 4.3004, -1.6868, 4.3255, 3.1842, -4.3464, -2.2953),
    (1.3964, 5.1548, -1.6725, 2.053, -3.3844, 0.6158, -5.9074, -7.703, 3.6795, -2.3517),
    (4.32, -4.4921, -1.8814, 7.5151, -5.1007, 5.5961, 7.8646, 2.9159, -11.9076, 7.2221),
    (0.91, -3.79, 1.2411, 0.4288, 2.5712, -1.4697, -4.4274, 1.8822, -4.0368, 0.6945),
    (-1.0239, 0.3315, 2.6842, 2.5591, 1.1681, -2.5659, -3.4959, 0.4465, 2.3993, 1.5945),
    (2.1248, 0.872, -4.013, -3.0151, -2.5309, -2.8978, 1.519, -0.721, -3.0694, -2.3792),
    (3.5759, -3.9697, 0.4514, 0.5518, 3.4817, -0.6709, -4.4387, 0.6865, 3.3596, -1.9476),
    (-0.5974, 2.9373, 6.7386, 2.5364, -0.9271, -7.6042, -3.2532, -6.8844, -2.5112, 1.6638),
    (-1.0264, -1.9865, -5.8077, -4.6164, -2.7554, 4.247, 1.9967, -0.4935, -1.3531, -1.4747),
    (-2.1677, -1.7617, 1.1547, 2.9367, -2.3234, 0.6659, -2.0535, -0.5271, -0.2058, 2.836),
    (-0.0824, -4.1365, 1.0301, -2.9372, -1.7606, 0.5536, 6.1225, 0.8019, 2.2093, -1.9128),
    (3.5405, 2.9738, 0.4273, 3.6739, 1.2393, -2.6995, -2.1801, -0.9482, -0.2557, 2.0727),
    (0.5392, 5.4595, -2.6663, -1.226, -5.7398, 0.7177, 3.0206, 2.139, -2.8378, 4.6897),
    (-2.7816, -4.4526, -9.1297, 3.2547, -7.1965, 0.6122, 2.8658, -2.0641, -2.2374, -0.2406),
)

# (seed, scale, shift) per random_image: together they run and skip every block, each probability
# at least 1e-3 away from 0.5; printed by `python -m models.calibrate`.
SAMPLE_SPECS: dict[str, list[tuple[int, float, float]]] = {
    "skipnet_ff_resnet38": [(56, 2.0, 0.0), (2, 1.0, 0.0), (18, 2.0, 0.0), (32, 2.0, 0.0), (58, 2.0, 0.0)],
    "skipnet_rnn_resnet38": [(3, 0.5, 0.0), (34, 1.0, 0.0), (58, 2.0, 0.0), (56, 1.0, 0.0)],
}


def skipnet_ff_resnet38() -> tuple[nn.Module, tuple]:
    """SkipNet-FFGate on ResNet-38; example input: its first sample."""
    model = build_skipnet("ff", 38, gate_biases=GATE_BIASES)
    return model, image_inputs(SAMPLE_SPECS["skipnet_ff_resnet38"][0])


def skipnet_rnn_resnet38() -> tuple[nn.Module, tuple]:
    """SkipNet-RNNGate on ResNet-38; example input: its first sample."""
    model = build_skipnet("rnn", 38, projection_biases=PROJECTION_BIASES)
    return model, image_inputs(SAMPLE_SPECS["skipnet_rnn_resnet38"][0])


def skipnet_lstm_resnet38() -> tuple[nn.Module, tuple]:
    """`skipnet_rnn_resnet38` written as SkipNet's code writes it (`RNNGate` with an `nn.LSTM`); it shares
    that model's weights, so the same samples run and skip the same blocks."""
    model, example = skipnet_rnn_resnet38()
    return skipnet_code_recurrent(model), example


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {
    "skipnet_ff_resnet38": skipnet_ff_resnet38,
    "skipnet_rnn_resnet38": skipnet_rnn_resnet38,
    "skipnet_lstm_resnet38": skipnet_lstm_resnet38,
}


SAMPLE_SPECS["skipnet_lstm_resnet38"] = SAMPLE_SPECS["skipnet_rnn_resnet38"]
SAMPLES: dict[str, Callable[[], list[tuple]]] = sample_builders(SAMPLE_SPECS)
