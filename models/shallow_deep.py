"""Shallow-Deep Networks: early exit through internal classifiers, on four CIFAR backbones.

Follows "Shallow-Deep Networks: Understanding and Mitigating Network Overthinking",
Yigitcan Kaya, Sanghyun Hong, Tudor Dumitras, ICML 2019. An SDN attaches internal classifiers (ICs)
after roughly 15%, 30%, 45%, 60%, 75% and 90% of a backbone's depth. Each IC reduces the feature
map to at most 4x4 with the paper's mixed max-average pooling (a learned mix weight), then applies
one linear layer. At inference the network returns the first IC whose top softmax probability
exceeds a threshold q; if none does, the backbone runs to its own final classifier.

What is scaled down (so every model has well under 1M parameters and exports fast), batch 1,
3x32x32 input, 10 classes, random seeded weights (no training):
- ResNet-56 (He et al. 2016, CIFAR form: 3 stages x 9 basic blocks): widths 8/16/32 instead of
  16/32/64; downsampling blocks use a 1x1-conv projection shortcut.
- VGG-16-BN (Simonyan & Zisserman 2015, CIFAR form: 13 conv+BN layers, 5 max pools, 3 FC layers):
  widths divided by 8 (8, 16, 32, 64, 64) and FC layers of 64 instead of 512.
- MobileNet v1 (Howard et al. 2017: a 3x3 conv then 13 depthwise-separable blocks): widths
  divided by 4 (8 ... 256); stride-2 blocks placed for a 32x32 input (32 -> 16 -> 8 -> 4 -> 2).
- WideResNet-32-4 (Zagoruyko & Komodakis 2016, pre-activation wide blocks): depth 32 is not of
  the usual 6n+4 form, so, counting the final linear layer as a layer (6n+2), it has 5 blocks per
  stage; widening factor k=4 is kept but applied to base widths 4/8/16 instead of 16/32/64, so the
  stages have 16/32/64 channels instead of 64/128/256. Dropout is omitted (a no-op in eval mode).

Calibration (none of it is in the paper; it stands in for training):
- BatchNorm statistics are fitted on one batch of random images (`fit_batch_norms`), so deep
  features still depend on the input, as in a trained network;
- q = 0.8 for every backbone, and each IC's initial linear weights are multiplied by a logit scale
  chosen offline by `models/calibrate.py` so that about 30% of the inputs reaching an IC leave there;
- the shipped SAMPLES (one per exit, 7 in all) were picked by the same script; every confidence
  they produce is at least 1e-3 away from q, so a compiled copy cannot flip an exit by rounding.

The forward returns `(logits, exit_index)`: exit_index i < number of ICs means IC i answered;
exit_index == number of ICs means the final classifier did.

`sdn_resnet56_view` is `sdn_resnet56` written as the SDN authors' code writes it (`ResNet_SDN`,
`BasicBlockWOutput`, an `InternalClassifier` of `nn.MaxPool2d` / `nn.AvgPool2d` modules flattened
with `.view`, end layers `AvgPool2d(8)` and a `.view` Flatten); it shares that model's weights, so
the same samples take the same exits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional, Tuple

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

# ---------------------------------------------------------------------------------------------
# Pieces the four SDNs share (conv_bn_relu and BasicBlock come from models/common.py)
# ---------------------------------------------------------------------------------------------


class WideBlock(nn.Module):
    """Pre-activation wide residual block (BN-ReLU-conv twice), as in WideResNet."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        if stride != 1 or in_channels != out_channels:
            self.shortcut: nn.Module = nn.Conv2d(in_channels, out_channels, 1, stride, bias=False)
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv1(F.relu(self.bn1(x)))
        out = self.conv2(F.relu(self.bn2(out)))
        return out + self.shortcut(x)


class DepthwiseSeparable(nn.Module):
    """MobileNet v1 unit: 3x3 depthwise conv-BN-ReLU, then 1x1 pointwise conv-BN-ReLU."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.depthwise = conv_bn_relu(in_channels, in_channels, stride, groups=in_channels)
        self.pointwise = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 1, bias=False), nn.BatchNorm2d(out_channels), nn.ReLU()
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.pointwise(self.depthwise(x))


class InternalClassifier(nn.Module):
    """SDN's internal classifier: mixed max-average pooling down to at most 4x4, then a linear layer.

    The paper mixes the two poolings with a learned weight alpha:
    `alpha * maxpool(x) + (1 - alpha) * avgpool(x)`. `logit_scale` multiplies the linear layer's
    initial weights; it is part of this zoo's calibration (see the module docstring), not the paper.
    """

    def __init__(self, channels: int, spatial: int, logit_scale: float) -> None:
        super().__init__()
        self.kernel = max(spatial // 4, 1)
        reduced = spatial // self.kernel
        self.mix = nn.Parameter(torch.zeros(1))
        self.linear = nn.Linear(channels * reduced * reduced, NUM_CLASSES)
        with torch.no_grad():
            self.linear.weight.mul_(logit_scale)

    def forward(self, x: Tensor) -> Tensor:
        alpha = torch.sigmoid(self.mix)
        pooled = alpha * F.max_pool2d(x, self.kernel) + (1 - alpha) * F.avg_pool2d(x, self.kernel)
        return self.linear(torch.flatten(pooled, 1))


class ShallowDeepNetwork(nn.Module):
    """A backbone cut into stages, an internal classifier after each stage, and the backbone's rest.

    `stages[i]` followed by `heads[i]` is IC i; `tail` and `classifier` finish the original
    backbone. The loop over the two ModuleLists is unrolled by TorchScript, so the scripted graph is
    a chain of nested `prim::If`s, one per IC, each on `max(softmax(logits)) > threshold`.
    """

    def __init__(
        self,
        stages: list[nn.Module],
        heads: list[nn.Module],
        tail: nn.Module,
        classifier: nn.Module,
        threshold: float,
    ) -> None:
        super().__init__()
        if len(stages) != len(heads):
            raise ValueError(f"{len(stages)} stages but {len(heads)} internal classifiers")
        self.stages = nn.ModuleList(stages)
        self.heads = nn.ModuleList(heads)
        self.tail = tail
        self.classifier = classifier
        self.threshold = threshold
        self.num_heads = len(heads)

    def forward(self, x: Tensor) -> tuple[Tensor, int]:
        for index, (stage, head) in enumerate(zip(self.stages, self.heads)):
            x = stage(x)
            logits = head(x)
            if torch.softmax(logits, dim=1).max() > self.threshold:
                return logits, index
        return self.classifier(self.tail(x)), self.num_heads

    @torch.jit.unused
    def run_backbone(self, x: Tensor) -> Tensor:
        """The whole backbone without exits, for a batch (used to fit BatchNorm statistics)."""
        for stage in self.stages:
            x = stage(x)
        return self.classifier(self.tail(x))


def _split(layers: list[nn.Module], exit_after: list[int]) -> tuple[list[nn.Module], nn.Module]:
    """Cut `layers` into one nn.Sequential per IC (ending after layer `exit_after[i]`) plus the tail."""
    stages: list[nn.Module] = []
    start = 0
    for end in exit_after:
        stages.append(nn.Sequential(*layers[start : end + 1]))
        start = end + 1
    return stages, nn.Sequential(*layers[start:])


def _exit_positions(num_layers: int, fractions: tuple[float, ...]) -> list[int]:
    """Index of the layer after which each IC sits: the paper's fractions of the backbone's depth."""
    return [max(round(fraction * num_layers) - 1, 0) for fraction in fractions]


PAPER_FRACTIONS = (0.15, 0.30, 0.45, 0.60, 0.75, 0.90)


def _assemble(
    layers: list[nn.Module],
    shapes: list[tuple[int, int]],
    classifier: nn.Module,
    threshold: float,
    logit_scales: tuple[float, ...],
    seed: int,
) -> ShallowDeepNetwork:
    """Place ICs at the paper's depth fractions; `shapes[i]` is (channels, spatial) after layer i."""
    if len(logit_scales) != len(PAPER_FRACTIONS):
        raise ValueError(f"expected {len(PAPER_FRACTIONS)} IC logit scales, got {len(logit_scales)}")
    exit_after = _exit_positions(len(layers), PAPER_FRACTIONS)
    heads: list[nn.Module] = [
        InternalClassifier(shapes[position][0], shapes[position][1], scale)
        for position, scale in zip(exit_after, logit_scales)
    ]
    stages, tail = _split(layers, exit_after)
    model = ShallowDeepNetwork(stages, heads, tail, classifier, threshold)
    fit_batch_norms(model, model.run_backbone, seed + 1)
    return model


# ---------------------------------------------------------------------------------------------
# Backbones
# ---------------------------------------------------------------------------------------------


def build_resnet56(
    width: int = 8, threshold: float = 0.5, logit_scales: tuple[float, ...] = (1.0,) * 6, seed: int = 0
) -> ShallowDeepNetwork:
    """SDN on a CIFAR ResNet-56 (stem conv + 27 basic blocks in 3 stages + linear), widths w/2w/4w.

    >>> from models.common import random_image
    >>> model = build_resnet56()
    >>> logits, exit_index = model(random_image(0))
    """
    with seeded(seed):
        layers: list[nn.Module] = [conv_bn_relu(3, width)]
        shapes = [(width, 32)]
        spatial = 32
        for in_channels, out_channels, stride in cifar_resnet_plan(56, width):
            spatial //= stride
            layers.append(BasicBlock(in_channels, out_channels, stride))
            shapes.append((out_channels, spatial))
        classifier = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, NUM_CLASSES))
        return _assemble(layers, shapes, classifier, threshold, logit_scales, seed)


def build_vgg16_bn(
    width: int = 8, threshold: float = 0.5, logit_scales: tuple[float, ...] = (1.0,) * 6, seed: int = 0
) -> ShallowDeepNetwork:
    """SDN on VGG-16-BN: 13 conv-BN-ReLU layers (max pool closing each of 5 groups) + 3 FC layers.

    A layer here is one conv (with its pool when it closes a group), so ICs sit after
    convolutions like in the paper. Widths are w, 2w, 4w, 8w, 8w per group.

    >>> from models.common import random_image
    >>> logits, exit_index = build_vgg16_bn()(random_image(0))
    """
    with seeded(seed):
        groups = [(width, 2), (2 * width, 2), (4 * width, 3), (8 * width, 3), (8 * width, 3)]
        layers: list[nn.Module] = []
        shapes: list[tuple[int, int]] = []
        in_channels, spatial = 3, 32
        for out_channels, count in groups:
            for index in range(count):
                unit: list[nn.Module] = list(conv_bn_relu(in_channels, out_channels))
                if index == count - 1:
                    unit.append(nn.MaxPool2d(2))
                    spatial //= 2
                layers.append(nn.Sequential(*unit))
                shapes.append((out_channels, spatial))
                in_channels = out_channels
        hidden = 8 * width
        classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_channels * spatial * spatial, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, NUM_CLASSES),
        )
        return _assemble(layers, shapes, classifier, threshold, logit_scales, seed)


def build_mobilenet(
    width: int = 8, threshold: float = 0.5, logit_scales: tuple[float, ...] = (1.0,) * 6, seed: int = 0
) -> ShallowDeepNetwork:
    """SDN on MobileNet v1: a 3x3 conv then 13 depthwise-separable blocks, average pool, linear.

    Channels follow the paper's 32, 64, 128, 128, 256, 256, 512 x 6, 1024, 1024 pattern scaled
    by width/32.

    >>> from models.common import random_image
    >>> logits, exit_index = build_mobilenet()(random_image(0))
    """
    with seeded(seed):
        # (output channels as multiples of `width`, stride) for the 13 separable blocks.
        plan = [(2, 1), (4, 2), (4, 1), (8, 2), (8, 1), (16, 2)] + [(16, 1)] * 5 + [(32, 2), (32, 1)]
        layers: list[nn.Module] = [conv_bn_relu(3, width)]
        shapes = [(width, 32)]
        in_channels, spatial = width, 32
        for multiple, stride in plan:
            out_channels = multiple * width
            spatial //= stride
            layers.append(DepthwiseSeparable(in_channels, out_channels, stride))
            shapes.append((out_channels, spatial))
            in_channels = out_channels
        classifier = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_channels, NUM_CLASSES))
        return _assemble(layers, shapes, classifier, threshold, logit_scales, seed)


def build_wide_resnet32_4(
    base_width: int = 4,
    widen_factor: int = 4,
    threshold: float = 0.5,
    logit_scales: tuple[float, ...] = (1.0,) * 6,
    seed: int = 0,
) -> ShallowDeepNetwork:
    """SDN on WideResNet-32-4: stem conv, 3 stages x 5 pre-activation wide blocks, BN-ReLU-pool-linear.

    Stage widths are base_width * widen_factor * (1, 2, 4); the paper's base_width is 16.

    >>> from models.common import random_image
    >>> logits, exit_index = build_wide_resnet32_4()(random_image(0))
    """
    with seeded(seed):
        stem_channels = 4 * base_width
        layers: list[nn.Module] = [nn.Conv2d(3, stem_channels, 3, 1, 1, bias=False)]
        shapes = [(stem_channels, 32)]
        stage_width = base_width * widen_factor
        spatial = 32
        for in_channels, out_channels, stride in cifar_resnet_plan(32, stage_width, stem_channels):
            spatial //= stride
            layers.append(WideBlock(in_channels, out_channels, stride))
            shapes.append((out_channels, spatial))
        classifier = nn.Sequential(
            nn.BatchNorm2d(4 * stage_width),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(4 * stage_width, NUM_CLASSES),
        )
        return _assemble(layers, shapes, classifier, threshold, logit_scales, seed)


# ---------------------------------------------------------------------------------------------
# The same SDN ResNet-56 as the SDN authors' code writes it (`ResNet_SDN`, `BasicBlockWOutput`,
# `InternalClassifier`): pooling layers as modules and `.view` to flatten. Only what TorchScript
# forces is changed (the Optional output refined with `is not None`, type annotations).
# ---------------------------------------------------------------------------------------------


def feature_reduction_formula(input_feature_map_size: int) -> int:
    if input_feature_map_size >= 4:
        return int(input_feature_map_size / 4)
    else:
        return -1


class SDNInternalClassifier(nn.Module):
    """SDN's `InternalClassifier` with pooling: `alpha * maxpool + (1 - alpha) * avgpool`, `.view`, linear."""

    def __init__(self, input_size: int, output_channels: int, num_classes: int, alpha: float = 0.5) -> None:
        super(SDNInternalClassifier, self).__init__()  # noqa: UP008 (the published code's spelling)
        red_kernel_size = feature_reduction_formula(input_size)  # get the pooling size
        self.output_channels = output_channels
        red_input_size = int(input_size / red_kernel_size)
        self.max_pool = nn.MaxPool2d(kernel_size=red_kernel_size)
        self.avg_pool = nn.AvgPool2d(kernel_size=red_kernel_size)
        self.alpha = nn.Parameter(torch.rand(1))
        self.linear = nn.Linear(output_channels * red_input_size * red_input_size, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        avgp = self.alpha * self.max_pool(x)
        maxp = (1 - self.alpha) * self.avg_pool(x)
        mixed = avgp + maxp
        return self.linear(mixed.view(mixed.size(0), -1))


class BasicBlockWOutput(nn.Module):
    """SDN's `BasicBlockWOutput`: a basic block (conv layers, shortcut, ReLU) that may carry an IC.

    The IC reads the block's output after its ReLU, as this zoo's SDNs do (the SDN code feeds it the
    sum before the ReLU), so that the calibrated `sdn_resnet56` carries over unchanged."""

    def __init__(self, block: BasicBlock, output: Optional[nn.Module]) -> None:  # noqa: UP045
        super(BasicBlockWOutput, self).__init__()  # noqa: UP008
        layers = nn.ModuleList()
        layers.append(nn.Sequential(block.conv1, block.bn1, nn.ReLU(), block.conv2, block.bn2))
        layers.append(nn.Sequential() if isinstance(block.shortcut, nn.Identity) else block.shortcut)
        layers.append(nn.ReLU())
        self.layers = layers
        self.output = output
        self.no_output = output is None

    def forward(self, x: Tensor) -> Tuple[Tensor, int, Optional[Tensor]]:  # noqa: UP006, UP045
        fwd = self.layers[0](x)  # conv layers
        fwd = fwd + self.layers[1](x)  # shortcut
        fwd = self.layers[2](fwd)
        if self.output is None:
            return fwd, 0, None
        return fwd, 1, self.output(fwd)


class Flatten(nn.Module):
    """SDN's `af.Flatten`."""

    def forward(self, x: Tensor) -> Tensor:
        return x.view(x.size(0), -1)


class ResNetSDN(nn.Module):
    """SDN's `ResNet_SDN` at inference (`early_exit`): the first IC whose confidence reaches the
    threshold answers, else the end layers (average pooling, flatten, linear)."""

    def __init__(
        self, init_conv: nn.Module, layers: list[nn.Module], end_layers: nn.Module, confidence_threshold: float
    ) -> None:
        super(ResNetSDN, self).__init__()  # noqa: UP008
        self.init_conv = init_conv
        self.layers = nn.ModuleList(layers)
        self.end_layers = end_layers
        self.confidence_threshold = confidence_threshold
        self.num_output = sum(1 for layer in layers if layer.output is not None) + 1
        self.num_heads = self.num_output - 1

    def forward(self, x: Tensor) -> Tuple[Tensor, int]:  # noqa: UP006
        fwd = self.init_conv(x)
        output_id = 0
        for layer in self.layers:
            fwd, is_output, output = layer(fwd)
            if output is not None:  # `if is_output:` in SDN's code; TorchScript must see the refinement
                softmax = nn.functional.softmax(output[0], dim=0)
                confidence = torch.max(softmax)
                if confidence >= self.confidence_threshold:
                    return output, output_id
                output_id += 1
        output = self.end_layers(fwd)
        return output, output_id


def sdn_code_resnet56(network: ShallowDeepNetwork, seed: int = 0) -> ResNetSDN:
    """`network` (a `build_resnet56` SDN) rebuilt as the SDN code's classes, sharing its weights."""
    with seeded(seed):  # the new modules' initial weights are overwritten; keep the caller's RNG
        layers = [layer for stage in network.stages for layer in stage] + list(network.tail)
        ic_after = {}
        position = -1
        for stage, head in zip(network.stages, network.heads):
            position += len(stage)
            ic_after[position] = head
        blocks = []
        for index, layer in enumerate(layers[1:], start=1):
            head = ic_after.get(index)
            output = None
            if head is not None:
                spatial = 4 * head.kernel  # the map the IC reads (feature_reduction_formula's inverse)
                output = SDNInternalClassifier(spatial, layer.conv2.out_channels, NUM_CLASSES)
                with torch.no_grad():
                    output.alpha.copy_(torch.sigmoid(head.mix))
                output.linear = head.linear
            blocks.append(BasicBlockWOutput(layer, output))
        _, _, linear = network.classifier  # AdaptiveAvgPool2d(1), Flatten, Linear
        end_layers = nn.Sequential(nn.AvgPool2d(kernel_size=8), Flatten(), linear)
    return ResNetSDN(layers[0], blocks, end_layers, network.threshold).eval()


# ---------------------------------------------------------------------------------------------
# Calibrated zoo entries (values found by models/calibrate.py; see the module docstring)
# ---------------------------------------------------------------------------------------------

THRESHOLD = 0.8

# Per-IC logit scales and the samples, (seed, scale, shift) per random_image, one per exit in exit
# order (IC 0 .. IC 5, then the final classifier). Printed by `python -m models.calibrate`.
LOGIT_SCALES: dict[str, tuple[float, ...]] = {
    "sdn_resnet56": (2.8, 2.8, 8.0, 4.0, 8.0, 5.6),
    "sdn_vgg16_bn": (4.0, 8.0, 11.0, 22.0, 2.8, 11.0),
    "sdn_mobilenet": (4.0, 5.6, 11.0, 11.0, 8.0, 8.0),
    "sdn_wide_resnet32_4": (8.0, 11.0, 16.0, 16.0, 22.0, 11.0),
}
SAMPLE_SPECS: dict[str, list[tuple[int, float, float]]] = {
    "sdn_resnet56": [
        (28, 2.0, 0.0),
        (19, 2.0, 0.0),
        (9, 0.5, 0.0),
        (11, 0.5, 0.0),
        (11, 1.0, 0.0),
        (25, 0.5, 0.0),
        (17, 0.5, 0.0),
    ],
    "sdn_vgg16_bn": [
        (22, 2.0, 0.0),
        (39, 1.0, 0.0),
        (33, 1.0, 0.0),
        (31, 1.0, 0.0),
        (20, 1.0, 0.0),
        (21, 1.0, 0.0),
        (24, 0.5, 0.0),
    ],
    "sdn_mobilenet": [
        (9, 2.0, 0.0),
        (15, 1.0, 0.0),
        (36, 2.0, 0.0),
        (18, 1.0, 0.0),
        (3, 0.5, 0.0),
        (0, 0.5, 0.0),
        (13, 0.5, 0.0),
    ],
    "sdn_wide_resnet32_4": [
        (37, 2.0, 0.0),
        (30, 2.0, 0.0),
        (18, 2.0, 0.0),
        (8, 0.5, 0.0),
        (39, 1.0, 0.0),
        (18, 0.5, 0.0),
        (34, 0.5, 0.0),
    ],
}


def sdn_resnet56() -> tuple[nn.Module, tuple]:
    """SDN ResNet-56 with its calibrated threshold and IC scales; example input: its first sample."""
    model = build_resnet56(threshold=THRESHOLD, logit_scales=LOGIT_SCALES["sdn_resnet56"])
    return model, image_inputs(SAMPLE_SPECS["sdn_resnet56"][0])


def sdn_vgg16_bn() -> tuple[nn.Module, tuple]:
    """SDN VGG-16-BN with its calibrated threshold and IC scales; example input: its first sample."""
    model = build_vgg16_bn(threshold=THRESHOLD, logit_scales=LOGIT_SCALES["sdn_vgg16_bn"])
    return model, image_inputs(SAMPLE_SPECS["sdn_vgg16_bn"][0])


def sdn_mobilenet() -> tuple[nn.Module, tuple]:
    """SDN MobileNet v1 with its calibrated threshold and IC scales; example input: its first sample."""
    model = build_mobilenet(threshold=THRESHOLD, logit_scales=LOGIT_SCALES["sdn_mobilenet"])
    return model, image_inputs(SAMPLE_SPECS["sdn_mobilenet"][0])


def sdn_wide_resnet32_4() -> tuple[nn.Module, tuple]:
    """SDN WideResNet-32-4 with its calibrated threshold and IC scales; example input: its first sample."""
    model = build_wide_resnet32_4(threshold=THRESHOLD, logit_scales=LOGIT_SCALES["sdn_wide_resnet32_4"])
    return model, image_inputs(SAMPLE_SPECS["sdn_wide_resnet32_4"][0])


def sdn_resnet56_view() -> tuple[nn.Module, tuple]:
    """`sdn_resnet56` written as the SDN authors' code writes it (pooling modules, `.view`); it shares
    that model's weights, so the same samples take the same exits."""
    model, example = sdn_resnet56()
    return sdn_code_resnet56(model), example


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {
    "sdn_resnet56": sdn_resnet56,
    "sdn_resnet56_view": sdn_resnet56_view,
    "sdn_vgg16_bn": sdn_vgg16_bn,
    "sdn_mobilenet": sdn_mobilenet,
    "sdn_wide_resnet32_4": sdn_wide_resnet32_4,
}


SAMPLE_SPECS["sdn_resnet56_view"] = SAMPLE_SPECS["sdn_resnet56"]
SAMPLES: dict[str, Callable[[], list[tuple]]] = sample_builders(SAMPLE_SPECS)
