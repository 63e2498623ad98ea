"""What the zoo's model files share: sample images, seeded construction, BatchNorm calibration,
CIFAR ResNet building blocks, and the SAMPLES tables.

Model files import this module absolutely (`from models.common import ...`), never relatively:
`python -m dycl_iree export models/skipnet.py:skipnet_ff_resnet38` loads a model file by path,
outside the `models` package, so a relative import has no package to resolve against, while the
absolute one resolves as long as the repository root is on sys.path (the CLI's `export` adds it;
`bench` is run from the root). TorchScript finds the source of a class defined here, such as
BasicBlock, through `sys.modules["models.common"]`, which that import registers.

>>> block = BasicBlock(3, 8, stride=2).eval()
>>> block(random_image(0)).shape
torch.Size([1, 8, 16, 16])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NUM_CLASSES = 10

Spec = TypeVar("Spec")


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed torch's global RNG for the body of a `with`, and give the caller its own RNG back after.

    nn.Module constructors draw their initial weights from the global RNG, so building a model
    under `seeded(seed)` gives the same parameters in every process (a bundle exported in one
    process is verified against a model rebuilt in another), and the caller's random stream
    continues as if nothing had been built.

    >>> with seeded(0):
    ...     first = nn.Linear(2, 2).weight
    >>> with seeded(0):
    ...     second = nn.Linear(2, 2).weight
    >>> torch.equal(first, second)
    True
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


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


def image_inputs(spec: tuple[int, float, float]) -> tuple[Tensor]:
    """The input tuple of an image model for one (seed, scale, shift) sample spec.

    >>> torch.equal(image_inputs((3, 2.0, 0.0))[0], random_image(3, 2.0, 0.0))
    True
    """
    return (random_image(*spec),)


def sample_builders(
    specs: Mapping[str, Sequence[Spec]], make_inputs: Callable[[Spec], tuple] = image_inputs
) -> dict[str, Callable[[], list[tuple]]]:
    """A model file's SAMPLES: per model name, a function building that model's input tuples.

    `specs[name]` lists the model's samples as reproducible specs (by default (seed, scale, shift)
    triples for `random_image`); the tensors are built on demand, so importing a model file stays
    cheap.

    >>> samples = sample_builders({"model": [(0, 1.0, 0.0), (1, 2.0, 0.0)]})
    >>> [inputs[0].shape for inputs in samples["model"]()]
    [torch.Size([1, 3, 32, 32]), torch.Size([1, 3, 32, 32])]
    """

    def builder(name: str) -> Callable[[], list[tuple]]:
        def build() -> list[tuple]:
            return [make_inputs(spec) for spec in specs[name]]

        return build

    return {name: builder(name) for name in specs}


def fit_batch_norms(model: nn.Module, run: Callable[[Tensor], object], seed: int, batch: Tensor | None = None) -> None:
    """Give every BatchNorm the running statistics a trained network would have, then random affines.

    With PyTorch's default initialisation and identity BatchNorms, the signal of a random deep
    network shrinks layer after layer until deep features no longer depend on the input, and every
    deep decision (exit, gate) would be constant. Running one batch of random images through the
    backbone in train mode sets each BatchNorm's mean/var to its batch's statistics, so features
    stay normalised and input-dependent at every depth. Random affine parameters then keep all four
    `batch_norm` operands non-trivial for the exporter's tests. `run` must execute every BatchNorm
    without any data-dependent decision (a batch cannot take one path). `batch` defaults to 16
    random 32x32 images. Leaves `model` in eval mode.

    >>> model = nn.Sequential(conv_bn_relu(3, 4))
    >>> fit_batch_norms(model, model, seed=1)
    >>> model.training
    False
    """
    generator = torch.Generator().manual_seed(seed)
    norms = [module for module in model.modules() if isinstance(module, nn.BatchNorm2d)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average: the statistics of exactly this batch
        with torch.no_grad():
            norm.weight.copy_(torch.rand(norm.num_features, generator=generator) * 0.5 + 0.75)
            norm.bias.copy_(torch.randn(norm.num_features, generator=generator) * 0.1)
    if batch is None:
        batch = torch.cat([random_image(1000 + index, 0.5 + index / 8) for index in range(16)])
    model.train()
    with torch.no_grad():
        run(batch)
    for norm in norms:
        norm.momentum = 0.1
    model.eval()


def conv_bn_relu(in_channels: int, out_channels: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    """3x3 conv (no bias) -> BatchNorm -> ReLU, the unit most backbones of the zoo are made of.

    >>> conv_bn_relu(3, 8, stride=2)(random_image(0)).shape
    torch.Size([1, 8, 16, 16])
    """
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, stride, 1, groups=groups, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(),
    )


class BasicBlock(nn.Module):
    """CIFAR ResNet basic block (two 3x3 convs); a 1x1-conv projection shortcut when the shape changes.

    `skip` is what a gated-off (SkipNet) or dropped (BlockDrop) block computes: its shortcut alone,
    so that even a block that changes the shape can be left out. TorchScript compiles only the
    methods a forward calls, so models that never skip a block do not carry it.
    """

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


def cifar_resnet_plan(depth: int, width: int, in_channels: int | None = None) -> list[tuple[int, int, int]]:
    """(in_channels, out_channels, stride) of every block of a CIFAR ResNet of `depth` = 6n+2.

    Three stages of n blocks with widths w, 2w, 4w (He et al. 2016, section 4.2); the first block of
    stages 2 and 3 halves the feature map. `in_channels` is the stem's width when it differs from
    `width`. A plan rather than modules, so each model creates its modules in its own order (the
    order their initial weights were drawn in).

    >>> cifar_resnet_plan(14, 8)
    [(8, 8, 1), (8, 8, 1), (8, 16, 2), (16, 16, 1), (16, 32, 2), (32, 32, 1)]
    """
    if (depth - 2) % 6 != 0:
        raise ValueError(f"CIFAR ResNet depth must be 6n+2, got {depth}")
    plan: list[tuple[int, int, int]] = []
    current = width if in_channels is None else in_channels
    for stage in range(3):
        out_channels = width * 2**stage
        for block in range((depth - 2) // 6):
            stride = 2 if stage > 0 and block == 0 else 1
            plan.append((current, out_channels, stride))
            current = out_channels
    return plan
