"""RaNet-style resolution-adaptive early exit: try a low-resolution sub-network first.

Follows "Resolution Adaptive Networks for Efficient Inference", Le Yang, Yizeng Han, Xi Chen,
Shiji Song, Jifeng Dai, Gao Huang, CVPR 2020. RaNet's observation: many ("easy") images are
classified correctly from a low-resolution view, so the network first runs a sub-network on
small feature maps and exits if its classifier is confident; only otherwise does it run the next
sub-network on larger feature maps, which *reuses* the smaller sub-network's features by
upsampling them and fusing them into its own layers (so earlier work is never wasted).

This small version has 3 scales and one classifier per sub-network:
1. 8x8: the image average-pooled by 4, a stem conv and two conv layers (32 channels), classifier 0;
2. 16x16: the image pooled by 2, a stem conv, and two conv layers (16 channels) whose inputs are the
   concatenation of their own features and the matching layer of sub-network 1, bilinearly
   upsampled (RaNet's fusion); a strided conv brings the result to 8x8 for classifier 1;
3. 32x32: the full image, likewise fused with sub-network 2's layers (8 channels); two strided
   convs bring it to 8x8 for the final classifier 2.
Each stem runs only when its sub-network runs, so an easy image never pays for the larger scales.
Classifiers: global average pooling and a linear layer. Exit when the top softmax probability
exceeds the threshold; the forward returns `(logits, exit_index)` with exit_index 0, 1 or 2.

Scaled down: the paper's CIFAR RaNet has more scales, dense blocks and several classifiers per
sub-network; here each sub-network has two conv-BN-ReLU layers and one classifier. Batch 1,
3x32x32, 10 classes, random seeded weights (no training).

Calibration (stands in for training): BatchNorm statistics are fitted on random images
(`fit_batch_norms`); with threshold 0.8, the two early classifiers' initial weights are multiplied
by logit scales found offline by `models/calibrate.py` so a good share of inputs leaves at each
exit; the 3 shipped SAMPLES take exits 0, 1 and 2, every confidence at least 1e-3 away from 0.8.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import List

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.common import NUM_CLASSES, conv_bn_relu, fit_batch_norms, image_inputs, sample_builders, seeded


def upsample(x: Tensor) -> Tensor:
    """Double the spatial size (bilinear), to fuse a coarser sub-network's features into a finer one.

    Same numbers as `F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)`, but
    calls the aten op directly: scripted F.interpolate inlines about 40 nodes of argument checking
    per call (string membership tests, `prim::Uninitialized`, a `prim::Loop` that appends the scale
    factors to a list, rank checks that raise), all foldable once ranks are known but unrelated to
    the network's own dynamism.
    """
    return torch._C._nn.upsample_bilinear2d(x, None, False, [2.0, 2.0])


class Classifier(nn.Module):
    """Global average pooling and a linear layer; `logit_scale` is zoo calibration, not the paper."""

    def __init__(self, channels: int, logit_scale: float) -> None:
        super().__init__()
        self.linear = nn.Linear(channels, NUM_CLASSES)
        with torch.no_grad():
            self.linear.weight.mul_(logit_scale)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class RaNet(nn.Module):
    """Three sub-networks at 8x8, 16x16 and 32x32, run coarse to fine until one is confident."""

    def __init__(self, threshold: float, logit_scales: tuple[float, float, float]) -> None:
        super().__init__()
        coarse, middle, fine = 32, 16, 8  # channels per scale: fewer where maps are larger
        self.coarse_stem = conv_bn_relu(3, coarse)
        self.coarse_layer1 = conv_bn_relu(coarse, coarse)
        self.coarse_layer2 = conv_bn_relu(coarse, coarse)
        self.coarse_classifier = Classifier(coarse, logit_scales[0])

        self.middle_stem = conv_bn_relu(3, middle)
        self.middle_layer1 = conv_bn_relu(middle + coarse, middle)
        self.middle_layer2 = conv_bn_relu(middle + coarse, middle)
        self.middle_reduce = conv_bn_relu(middle, coarse, stride=2)
        self.middle_classifier = Classifier(coarse, logit_scales[1])

        self.fine_stem = conv_bn_relu(3, fine)
        self.fine_layer1 = conv_bn_relu(fine + middle, fine)
        self.fine_layer2 = conv_bn_relu(fine + middle, fine)
        self.fine_reduce = nn.Sequential(conv_bn_relu(fine, middle, stride=2), conv_bn_relu(middle, coarse, stride=2))
        self.fine_classifier = Classifier(coarse, logit_scales[2])
        self.threshold = threshold

    def forward(self, image: Tensor) -> tuple[Tensor, int]:
        coarse1 = self.coarse_layer1(self.coarse_stem(F.avg_pool2d(image, 4)))
        coarse2 = self.coarse_layer2(coarse1)
        logits = self.coarse_classifier(coarse2)
        if torch.softmax(logits, dim=1).max() > self.threshold:
            return logits, 0

        middle0 = self.middle_stem(F.avg_pool2d(image, 2))
        middle1 = self.middle_layer1(torch.cat((middle0, upsample(coarse1)), dim=1))
        middle2 = self.middle_layer2(torch.cat((middle1, upsample(coarse2)), dim=1))
        logits = self.middle_classifier(self.middle_reduce(middle2))
        if torch.softmax(logits, dim=1).max() > self.threshold:
            return logits, 1

        fine0 = self.fine_stem(image)
        fine1 = self.fine_layer1(torch.cat((fine0, upsample(middle1)), dim=1))
        fine2 = self.fine_layer2(torch.cat((fine1, upsample(middle2)), dim=1))
        return self.fine_classifier(self.fine_reduce(fine2)), 2

    @torch.jit.unused
    def run_all_scales(self, image: Tensor) -> Tensor:
        """All three sub-networks, no exits, for a batch (used to fit BatchNorm statistics)."""
        threshold = self.threshold
        self.threshold = 2.0  # no softmax probability exceeds it, so no exit is taken
        try:
            return self.forward(image)[0]
        finally:
            self.threshold = threshold


class RaNetPredictions(RaNet):
    """The same network, written as RANet's own code returns it: the list of predictions made so far
    (`res`), which stops growing at the first confident classifier (its length is the exit taken + 1)."""

    def forward(self, image: Tensor) -> List[Tensor]:  # noqa: UP006 (the published code's annotation)
        res: List[Tensor] = []  # noqa: UP006
        coarse1 = self.coarse_layer1(self.coarse_stem(F.avg_pool2d(image, 4)))
        coarse2 = self.coarse_layer2(coarse1)
        res.append(self.coarse_classifier(coarse2))
        if torch.softmax(res[-1], dim=1).max() > self.threshold:
            return res

        middle0 = self.middle_stem(F.avg_pool2d(image, 2))
        middle1 = self.middle_layer1(torch.cat((middle0, upsample(coarse1)), dim=1))
        middle2 = self.middle_layer2(torch.cat((middle1, upsample(coarse2)), dim=1))
        res.append(self.middle_classifier(self.middle_reduce(middle2)))
        if torch.softmax(res[-1], dim=1).max() > self.threshold:
            return res

        fine0 = self.fine_stem(image)
        fine1 = self.fine_layer1(torch.cat((fine0, upsample(middle1)), dim=1))
        fine2 = self.fine_layer2(torch.cat((fine1, upsample(middle2)), dim=1))
        res.append(self.fine_classifier(self.fine_reduce(fine2)))
        return res


def build_ranet(
    threshold: float = 0.5, logit_scales: tuple[float, float, float] = (1.0, 1.0, 1.0), seed: int = 0
) -> RaNet:
    """A RaNet in eval mode.

    >>> from models.common import random_image
    >>> logits, exit_index = build_ranet()(random_image(0))
    """
    with seeded(seed):
        model = RaNet(threshold, logit_scales)
    fit_batch_norms(model, model.run_all_scales, seed + 1)
    return model


# ---------------------------------------------------------------------------------------------
# Calibrated zoo entry (values found by models/calibrate.py; see the module docstring)
# ---------------------------------------------------------------------------------------------

THRESHOLD = 0.8
LOGIT_SCALES = (11.0, 32.0, 1.0)

# (seed, scale, shift) per random_image, one per exit in exit order; printed by models/calibrate.py.
SAMPLE_SPECS: dict[str, list[tuple[int, float, float]]] = {"ranet": [(37, 2.0, 0.0), (24, 2.0, 0.0), (35, 0.5, 0.0)]}
SAMPLE_SPECS["ranet_predictions"] = SAMPLE_SPECS["ranet"]


def ranet() -> tuple[nn.Module, tuple]:
    """The 3-scale RaNet with its calibrated threshold and scales; example input: its first sample."""
    return build_ranet(THRESHOLD, LOGIT_SCALES), image_inputs(SAMPLE_SPECS["ranet"][0])


def ranet_predictions() -> tuple[nn.Module, tuple]:
    """`ranet`'s weights in `RaNetPredictions`: the output is the list of predictions, as RANet returns."""
    reference = build_ranet(THRESHOLD, LOGIT_SCALES)
    with seeded(0):
        model = RaNetPredictions(THRESHOLD, LOGIT_SCALES)
    model.load_state_dict(reference.state_dict())
    return model.eval(), image_inputs(SAMPLE_SPECS["ranet_predictions"][0])


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {"ranet": ranet, "ranet_predictions": ranet_predictions}


SAMPLES: dict[str, Callable[[], list[tuple]]] = sample_builders(SAMPLE_SPECS)
