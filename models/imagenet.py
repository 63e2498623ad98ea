"""Networks at the sizes people deploy: ImageNet-shaped CNNs at 224x224 and a Transformer of width 512.

The zoo's CIFAR-size models (16-64 channels at 32x32) say little about speed at deployment sizes,
where convolutions have 64-2048 channels and the decisions sit between much larger layers. These
follow the standard architectures with torchvision's layer shapes (torchvision itself does not
import here: its wheel for torch 2.13 is a CUDA build), batch 1, 1000 classes, random seeded
weights (no training), BatchNorm statistics fitted on one batch of random images
(`fit_image_batch_norms`), as the zoo does:

- ResNet-18 and ResNet-50 ("Deep Residual Learning for Image Recognition", He et al., CVPR 2016) as
  torchvision builds them: 7x7/2 stem, 3x3/2 max pooling, four stages of basic (18) or bottleneck
  (50) blocks with the stride on the bottleneck's 3x3 convolution (torchvision's "v1.5") and
  1x1 projection shortcuts, global average pooling, one linear layer;
- MobileNetV2 ("MobileNetV2: Inverted Residuals and Linear Bottlenecks", Sandler et al., CVPR 2018)
  as torchvision builds it: inverted residual blocks (1x1 expansion, 3x3 depthwise, 1x1 linear
  projection) with ReLU6, the paper's (t, c, n, s) table, a 1280-channel head;
- an early-exit ResNet-50 in the style of Shallow-Deep Networks (`models/shallow_deep.py`): an
  internal classifier after stages 1, 2 and 3 (SDN's mixed max-average pooling down to 4x4, then a
  linear layer); the first whose top softmax probability exceeds the threshold answers;
- the Transformer translator of `models/transformer.py` at the paper's base width: d_model 512,
  8 heads, feed-forward 2048, 6 encoder and 6 decoder layers, greedy decoding (a `while` loop whose
  decoder input grows every step).

Every factory takes a `width` (and the images a `resolution`) so that a test can export the same
architecture small: `resnet18(width=8, resolution=64)` has every layer kind of the real one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.common import fit_batch_norms, sample_builders, seeded
from models.transformer import Translator, source_inputs

CLASSES = 1000
RESOLUTION = 224


def imagenet_image(seed: int, scale: float = 1.0, shift: float = 0.0, resolution: int = RESOLUTION) -> Tensor:
    """A deterministic random 1x3xRxR image: smooth colour blobs plus pixel noise (as
    `models.common.random_image`, at ImageNet's resolution).

    >>> imagenet_image(0).shape
    torch.Size([1, 3, 224, 224])
    """
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.randn(1, 3, 7, 7, generator=generator)
    fine = torch.randn(1, 3, resolution, resolution, generator=generator)
    blobs = F.interpolate(coarse, size=(resolution, resolution), mode="bilinear", align_corners=False)
    return (blobs + 0.5 * fine) * scale + shift


def fit_image_batch_norms(model: nn.Module, run: Callable[[Tensor], object], seed: int, resolution: int) -> None:
    """`models.common.fit_batch_norms` on one batch of 8 random images at `resolution`."""
    batch = torch.cat([imagenet_image(2000 + index, 0.5 + index / 4, resolution=resolution) for index in range(8)])
    fit_batch_norms(model, run, seed, batch)


# ---------------------------------------------------------------------------------------------
# ResNet (torchvision's layout)
# ---------------------------------------------------------------------------------------------


def _projection(in_channels: int, out_channels: int, stride: int) -> nn.Module:
    """torchvision's `downsample`: 1x1 convolution with the block's stride, then BatchNorm."""
    if stride == 1 and in_channels == out_channels:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), nn.BatchNorm2d(out_channels))


class BasicBlock(nn.Module):
    """ResNet-18/34's block: two 3x3 convolutions (stride on the first) and a shortcut."""

    expansion = 1

    def __init__(self, in_channels: int, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut = _projection(in_channels, channels, stride)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class Bottleneck(nn.Module):
    """ResNet-50's block: 1x1 reduce, 3x3 (with the stride), 1x1 expand by 4, and a shortcut."""

    expansion = 4

    def __init__(self, in_channels: int, channels: int, stride: int) -> None:
        super().__init__()
        out_channels = channels * self.expansion
        self.conv1 = nn.Conv2d(in_channels, channels, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.conv3 = nn.Conv2d(channels, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.shortcut = _projection(in_channels, out_channels, stride)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + self.shortcut(x))


def resnet_stages(
    block: type[nn.Module], depths: tuple[int, ...], width: int
) -> tuple[nn.Module, list[nn.Module], int]:
    """The stem and the four stages of a torchvision ResNet whose first stage has `width` channels
    (64 in the standard networks); also the channels of the last stage's output."""
    stem = nn.Sequential(
        nn.Conv2d(3, width, 7, 2, 3, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    )
    stages: list[nn.Module] = []
    in_channels = width
    for index, depth in enumerate(depths):
        channels = width * 2**index
        blocks = []
        for position in range(depth):
            stride = 2 if index > 0 and position == 0 else 1
            blocks.append(block(in_channels, channels, stride))
            in_channels = channels * block.expansion  # type: ignore[attr-defined]
        stages.append(nn.Sequential(*blocks))
    return stem, stages, in_channels


class ResNet(nn.Module):
    """A torchvision-shaped ResNet: stem, four stages, global average pooling, linear."""

    def __init__(self, block: type[nn.Module], depths: tuple[int, ...], width: int = 64) -> None:
        super().__init__()
        self.stem, stages, features = resnet_stages(block, depths, width)
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(features, CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build_resnet(block: type[nn.Module], depths: tuple[int, ...], width: int, resolution: int, seed: int) -> ResNet:
    with seeded(seed):
        model = ResNet(block, depths, width)
    fit_image_batch_norms(model, model, seed + 1, resolution)
    return model


# ---------------------------------------------------------------------------------------------
# MobileNetV2 (torchvision's layout)
# ---------------------------------------------------------------------------------------------


def _divisible(value: float, divisor: int = 8) -> int:
    """torchvision's `_make_divisible`: round to a multiple of 8, never down by more than 10%."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def conv_bn_relu6(in_channels: int, out_channels: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    """torchvision's `Conv2dNormActivation` with ReLU6."""
    padding = (kernel - 1) // 2
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel, stride, padding, groups=groups, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU6(),
    )


class InvertedResidual(nn.Module):
    """1x1 expansion (unless t = 1), 3x3 depthwise, 1x1 linear projection; residual when shapes agree."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, expansion: int) -> None:
        super().__init__()
        hidden = round(in_channels * expansion)
        layers: list[nn.Module] = [conv_bn_relu6(in_channels, hidden, 1)] if expansion != 1 else []
        layers += [
            conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
            nn.Conv2d(hidden, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
        ]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and in_channels == out_channels

    def forward(self, x: Tensor) -> Tensor:
        return x + self.body(x) if self.residual else self.body(x)


# The paper's table: expansion t, output channels c, repeats n, first stride s.
MOBILENET_V2_SETTING = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


class MobileNetV2(nn.Module):
    """torchvision's MobileNetV2 with a width multiplier (1.0: 3.5M parameters)."""

    def __init__(self, width_multiplier: float = 1.0) -> None:
        super().__init__()
        in_channels = _divisible(32 * width_multiplier)
        last = _divisible(1280 * max(1.0, width_multiplier))
        layers: list[nn.Module] = [conv_bn_relu6(3, in_channels, 3, 2)]
        for expansion, channels, repeats, stride in MOBILENET_V2_SETTING:
            out_channels = _divisible(channels * width_multiplier)
            for position in range(repeats):
                layers.append(InvertedResidual(in_channels, out_channels, stride if position == 0 else 1, expansion))
                in_channels = out_channels
        layers.append(conv_bn_relu6(in_channels, last, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(last, CLASSES)  # torchvision's Dropout(0.2) before it is a no-op in eval

    def forward(self, x: Tensor) -> Tensor:
        x = self.features(x)
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---------------------------------------------------------------------------------------------
# Early-exit ResNet-50 (Shallow-Deep style)
# ---------------------------------------------------------------------------------------------


class ExitClassifier(nn.Module):
    """SDN's internal classifier: `alpha * maxpool + (1 - alpha) * avgpool` down to 4x4, then linear."""

    def __init__(self, channels: int, spatial: int, logit_scale: float) -> None:
        super().__init__()
        self.kernel = max(spatial // 4, 1)
        reduced = spatial // self.kernel
        self.mix = nn.Parameter(torch.zeros(1))
        self.linear = nn.Linear(channels * reduced * reduced, CLASSES)
        with torch.no_grad():
            self.linear.weight.mul_(logit_scale)

    def forward(self, x: Tensor) -> Tensor:
        alpha = torch.sigmoid(self.mix)
        pooled = alpha * F.max_pool2d(x, self.kernel) + (1 - alpha) * F.avg_pool2d(x, self.kernel)
        return self.linear(torch.flatten(pooled, 1))


class EarlyExitResNet(nn.Module):
    """A ResNet with an internal classifier after each of its first three stages.

    forward returns `(logits, exit_index)`: 0-2 for the classifier after stage 1-3, 3 for the
    network's own classifier. TorchScript unrolls the loop into nested `prim::If`s.
    """

    def __init__(
        self,
        block: type[nn.Module],
        depths: tuple[int, ...],
        width: int,
        resolution: int,
        threshold: float,
        logit_scales: tuple[float, ...],
    ) -> None:
        super().__init__()
        self.stem, stages, features = resnet_stages(block, depths, width)
        self.stages = nn.ModuleList(stages[:3])
        self.last_stage = stages[3]
        spatial = resolution // 4
        heads = []
        for index, scale in enumerate(logit_scales):
            channels = width * 2**index * block.expansion  # type: ignore[attr-defined]
            heads.append(ExitClassifier(channels, spatial // 2**index, scale))
        self.heads = nn.ModuleList(heads)
        self.fc = nn.Linear(features, CLASSES)
        self.threshold = threshold
        self.num_heads = len(heads)

    def forward(self, x: Tensor) -> tuple[Tensor, int]:
        x = self.stem(x)
        for index, (stage, head) in enumerate(zip(self.stages, self.heads)):
            x = stage(x)
            logits = head(x)
            if torch.softmax(logits, dim=1).max() > self.threshold:
                return logits, index
        x = self.last_stage(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)), self.num_heads

    @torch.jit.unused
    def run_backbone(self, x: Tensor) -> Tensor:
        """Every stage and every classifier, for a batch (used to fit BatchNorm statistics)."""
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return self.last_stage(x)


# ---------------------------------------------------------------------------------------------
# Factories and samples
# ---------------------------------------------------------------------------------------------


def resnet18(width: int = 64, resolution: int = RESOLUTION, seed: int = 0) -> tuple[nn.Module, tuple]:
    """torchvision's ResNet-18 shapes (11.7M parameters at width 64).

    >>> model, (image,) = resnet18(width=8, resolution=64)
    >>> model(image).shape
    torch.Size([1, 1000])
    """
    model = build_resnet(BasicBlock, (2, 2, 2, 2), width, resolution, seed)
    return model, (imagenet_image(0, resolution=resolution),)


def resnet50(width: int = 64, resolution: int = RESOLUTION, seed: int = 0) -> tuple[nn.Module, tuple]:
    """torchvision's ResNet-50 shapes (25.6M parameters at width 64)."""
    model = build_resnet(Bottleneck, (3, 4, 6, 3), width, resolution, seed)
    return model, (imagenet_image(0, resolution=resolution),)


def mobilenet_v2(width_multiplier: float = 1.0, resolution: int = RESOLUTION, seed: int = 0) -> tuple[nn.Module, tuple]:
    """torchvision's MobileNetV2 shapes (3.5M parameters at width 1.0)."""
    with seeded(seed):
        model = MobileNetV2(width_multiplier)
    fit_image_batch_norms(model, model, seed + 1, resolution)
    return model, (imagenet_image(0, resolution=resolution),)


# Threshold and logit scales of the early-exit network's classifiers, chosen by printing each
# classifier's top probability for a few images: the shipped samples (EXIT_SAMPLES: seed, scale,
# shift) leave at exits 0, 1, 2 and 3, every top probability at least 0.03 away from the threshold
# (0.816; 0.484, 0.998; 0.156, 0.257, 0.688; 0.255, 0.259, 0.388).
EXIT_THRESHOLD = 0.6
EXIT_LOGIT_SCALES = (3.0, 3.0, 3.0)


def early_exit_resnet50(
    width: int = 64, resolution: int = RESOLUTION, seed: int = 0, threshold: float = EXIT_THRESHOLD
) -> tuple[nn.Module, tuple]:
    """ResNet-50 with SDN-style classifiers after stages 1-3; returns (logits, exit index)."""
    with seeded(seed):
        model = EarlyExitResNet(Bottleneck, (3, 4, 6, 3), width, resolution, threshold, EXIT_LOGIT_SCALES)
    fit_image_batch_norms(model, model.run_backbone, seed + 1, resolution)
    return model, (imagenet_image(*EXIT_SAMPLES[0], resolution=resolution),)


def transformer_base(layers: int = 6, size: int = 512, seed: int = 0) -> tuple[nn.Module, tuple]:
    """The zoo's translator at the paper's base size: d_model 512, 8 heads, feed-forward 2048."""
    with seeded(seed):
        model = Translator(size=size, heads=max(size // 64, 1), hidden=4 * size, layers=layers, max_length=10)
    return model.eval(), source_inputs(0)


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {
    "resnet18": resnet18,
    "resnet50": resnet50,
    "mobilenet_v2": mobilenet_v2,
    "early_exit_resnet50": early_exit_resnet50,
    "transformer_base": transformer_base,
}


def image_sample(spec: tuple[int, float, float]) -> tuple[Tensor]:
    """The input tuple of an image model for one (seed, scale, shift) spec."""
    return (imagenet_image(*spec),)


IMAGE_SAMPLES = [(0, 1.0, 0.0)]
EXIT_SAMPLES = [(2, 1.0, 0.0), (0, 2.0, 0.0), (5, 4.0, 0.0), (1, 1.0, 0.0)]
SAMPLES: dict[str, Callable[[], list[tuple]]] = {
    **sample_builders({name: IMAGE_SAMPLES for name in ("resnet18", "resnet50", "mobilenet_v2")}, image_sample),
    **sample_builders({"early_exit_resnet50": EXIT_SAMPLES}, image_sample),
    **sample_builders({"transformer_base": [0, 8]}, source_inputs),
}
