"""BlockDrop: a policy network decides, per input, which residual blocks of a ResNet-110 run.

Follows "BlockDrop: Dynamic Inference Paths in Residual Networks", Zuxuan Wu, Tushar Nagarajan,
Abhishek Kumar, Steven Rennie, Larry S. Davis, Kristen Grauman, Rogerio Feris, CVPR 2018. A small
policy network looks at the image once and outputs, through a sigmoid, one keep probability per
residual block of a pretrained ResNet; at test time a block is kept when its probability exceeds
0.5. All 54 decisions are made up front, then the ResNet runs the kept blocks.

A dropped block computes its shortcut alone, as in the paper's ResNet formulation where a block's
output is `shortcut(x) + F(x)` and dropping removes `F(x)`: for the 51 blocks whose input and
output shapes agree the shortcut is the identity, and for the first block of stages 2 and 3 (stride
2, doubled channels) it is the block's 1x1-conv projection, so even those two blocks can be dropped
and every one of the 54 policy outputs is a real decision. (The alternative, always running the
downsampling blocks, would leave 52 decisions; we follow the formula.)

Scaled down: ResNet-110 (3 stages x 18 basic blocks) with widths 8/16/32 instead of 16/32/64; the
policy network (the paper uses a ResNet-8 on a downsampled image) is three conv-BN-ReLU layers on
the image average-pooled to 16x16, global pooling and a linear layer to 54 logits. Batch 1,
3x32x32, 10 classes, random seeded weights (no training).

Calibration (stands in for training): BatchNorm statistics are fitted on random images
(`fit_batch_norms`); offline, `models/calibrate.py` sets each of the policy's 54 output biases
(POLICY_BIASES) to minus the median of that block's logit over 240 random images, so every block
is kept for about half of them, and picks the 4 shipped SAMPLES from those images so that every
one of the 54 blocks is kept by some sample and dropped by another (each keeps 24-28 blocks), with
every probability at least 1e-3 away from 0.5.

The forward returns `(logits, kept)`: kept is the float32 0./1. keep mask of shape (54,).
"""

from __future__ import annotations

from collections.abc import Callable

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


class PolicyNetwork(nn.Module):
    """Keep probabilities for every block from a downsampled view of the image."""

    def __init__(self, num_blocks: int, width: int = 8) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_relu(3, width), conv_bn_relu(width, 2 * width, 2), conv_bn_relu(2 * width, 2 * width, 2)
        )
        self.linear = nn.Linear(2 * width, num_blocks)
        with torch.no_grad():
            self.linear.bias.zero_()  # the calibrated POLICY_BIASES replace it (build_blockdrop)

    def forward(self, image: Tensor) -> Tensor:
        features = self.features(F.avg_pool2d(image, 2))
        return torch.sigmoid(self.linear(torch.flatten(F.adaptive_avg_pool2d(features, 1), 1)))


class BlockDropResNet(nn.Module):
    """CIFAR ResNet of `depth` = 6n+2 (3 stages x n blocks) whose blocks a policy network keeps or drops."""

    def __init__(self, depth: int, width: int) -> None:
        super().__init__()
        self.stem = conv_bn_relu(3, width)
        self.blocks = nn.ModuleList([BasicBlock(*step) for step in cifar_resnet_plan(depth, width)])
        self.policy = PolicyNetwork(len(self.blocks))
        self.classifier = nn.Linear(4 * width, NUM_CLASSES)

    def forward(self, image: Tensor) -> tuple[Tensor, Tensor]:
        # One decision per block, all made before the ResNet runs (the paper's single policy pass).
        policy = (self.policy(image) > 0.5).to(torch.float32)
        x = self.stem(image)
        for index, block in enumerate(self.blocks):
            if policy[0, index] > 0.5:
                x = block(x)
            else:
                x = block.skip(x)
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)), policy[0]

    @torch.jit.unused
    def run_all_blocks(self, image: Tensor) -> Tensor:
        """Policy and every block, no decisions, for a batch (used to fit BatchNorm statistics)."""
        self.policy(image)
        x = self.stem(image)
        for block in self.blocks:
            x = block(x)
        return x


class DownsampleB(nn.Module):
    """BlockDrop's published shortcut for a block that halves the resolution and multiplies the
    channels: average-pool, then pad the channels with zeros by repeating a zeroed copy of the list."""

    def __init__(self, nIn: int, nOut: int, stride: int) -> None:
        super(DownsampleB, self).__init__()  # noqa: UP008 (the published code's spelling)
        self.avg = nn.AvgPool2d(stride)
        self.expand_ratio = nOut // nIn

    def forward(self, x: Tensor) -> Tensor:
        x = self.avg(x)
        return torch.cat([x] + [x.mul(0)] * (self.expand_ratio - 1), 1)


def build_blockdrop(
    depth: int = 110, width: int = 8, seed: int = 0, policy_biases: tuple[float, ...] | None = None
) -> BlockDropResNet:
    """A BlockDrop ResNet of `depth` = 6n+2 (110: 54 blocks) in eval mode.

    `policy_biases` (calibrated, one per block; zero when None) are the biases of the policy's
    output layer: block k is kept when its logit plus `policy_biases[k]` is positive.

    >>> from models.common import random_image
    >>> logits, kept = build_blockdrop()(random_image(0))
    >>> kept.shape
    torch.Size([54])
    """
    with seeded(seed):
        model = BlockDropResNet(depth, width)
    if policy_biases is not None:
        if len(policy_biases) != len(model.blocks):
            raise ValueError(f"policy_biases: expected {len(model.blocks)} (one per block), got {len(policy_biases)}")
        with torch.no_grad():
            model.policy.linear.bias.copy_(torch.tensor(policy_biases, dtype=torch.float32))
    fit_batch_norms(model, model.run_all_blocks, seed + 1)
    return model


# ---------------------------------------------------------------------------------------------
# Calibrated zoo entry (values found by models/calibrate.py; see the module docstring)
# ---------------------------------------------------------------------------------------------

# The policy's output biases fitted by `python -m models.calibrate` (see the module docstring):
# each block is kept for about half of the calibration images. Two rows per stage.
# fmt: off
POLICY_BIASES: tuple[float, ...] = (
    -0.0239, -0.0534, 0.1232, -0.378, -0.0467, -0.1517, 0.0014, 0.0703, 0.1652,
    0.0146, 0.0925, 0.0723, 0.2219, 0.1369, 0.2519, -0.1882, -0.1043, 0.0747,
    -0.2675, 0.2176, -0.2001, 0.1282, 0.0837, 0.1985, -0.0065, 0.0235, -0.0098,
    0.0425, 0.0904, -0.045, -0.0528, 0.0124, -0.0707, -0.016, -0.0571, 0.0502,
    0.0714, -0.1953, 0.1675, -0.2446, 0.1482, -0.1611, -0.05, 0.0775, -0.1476,
    -0.3174, -0.0028, -0.0828, 0.3735, 0.0059, -0.1651, 0.0509, 0.2436, 0.0391,
)
# fmt: on

# (seed, scale, shift) per random_image: together they keep and drop every block, each probability
# at least 1e-3 away from 0.5; printed by `python -m models.calibrate`.
SAMPLE_SPECS: dict[str, list[tuple[int, float, float]]] = {
    "blockdrop_resnet110": [(37, 2.0, 0.0), (32, 0.5, 0.0), (74, 2.0, 0.0), (55, 2.0, 0.0)]
}
SAMPLE_SPECS["blockdrop_downsample_resnet110"] = SAMPLE_SPECS["blockdrop_resnet110"]


def blockdrop_resnet110() -> tuple[nn.Module, tuple]:
    """BlockDrop on ResNet-110 (54 gated blocks); example input: its first sample."""
    model = build_blockdrop(110, policy_biases=POLICY_BIASES)
    return model, image_inputs(SAMPLE_SPECS["blockdrop_resnet110"][0])


def blockdrop_downsample_resnet110() -> tuple[nn.Module, tuple]:
    """`blockdrop_resnet110` with the published code's parameter-free shortcut (`DownsampleB`, a list
    repeated and concatenated) where a block changes shape. The policy network is the same, so the
    same samples keep and drop the same blocks."""
    model = build_blockdrop(110, policy_biases=POLICY_BIASES)
    for block in model.blocks:
        if not isinstance(block.shortcut, nn.Identity):
            projection = block.shortcut[0]
            block.shortcut = DownsampleB(projection.in_channels, projection.out_channels, projection.stride[0])
    # The BatchNorm statistics stay as fitted with the projection: refitting would redraw the
    # policy's affine parameters too, and with them its calibrated decisions.
    return model, image_inputs(SAMPLE_SPECS["blockdrop_downsample_resnet110"][0])


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {
    "blockdrop_resnet110": blockdrop_resnet110,
    "blockdrop_downsample_resnet110": blockdrop_downsample_resnet110,
}


SAMPLES: dict[str, Callable[[], list[tuple]]] = sample_builders(SAMPLE_SPECS)
