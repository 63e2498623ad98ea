"""F.interpolate as segmentation and detection code calls it, over run-time heights and widths.

TorchScript builds F.interpolate's scale factors as a list by appends (`[scale_factor for _ in
range(dim)]`); the exporter reads such a host list of known items as its items
(`visitor.visit_op`), where it refused it before ("reads a run-time list") at any size. Over a run-time size,
`decompositions.scaled_size` gives PyTorch's output size in int arithmetic, nearest upsampling
gathers at PyTorch's source indices (`decompositions.upsample_nearest_of_run_time_size`: torch-mlir
picked the wrong rows downsampling by 0.5), and bilinear upsampling's interpolation matrices take
run-time sizes (`decompositions._interpolation_matrix`).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from .conftest import check_hosts, export_compiled


class TinyUNet(nn.Module):
    """One level of a U-Net: the skip path at the input's size, the deep path at half of it brought
    back by `scale_factor=2.0`, resized to the skip's size when the input's was odd (as U-Net
    implementations do), and a coarse output when the deep features are weak."""

    def __init__(self) -> None:
        super().__init__()
        self.encode = nn.Conv2d(3, 4, 3, padding=1)
        self.down = nn.Conv2d(4, 8, 3, stride=2, padding=1)
        self.decode = nn.Conv2d(12, 2, 3, padding=1)

    def forward(self, x: torch.Tensor, threshold: float) -> torch.Tensor:
        skip = torch.relu(self.encode(x))
        deep = torch.relu(self.down(skip))
        up = F.interpolate(deep, scale_factor=2.0, mode="nearest")
        if up.shape[-2:] != skip.shape[-2:]:
            up = F.interpolate(up, size=skip.shape[-2:], mode="bilinear", align_corners=False)
        out = self.decode(torch.cat([up, skip], 1))
        if float(deep.mean()) < threshold:
            return F.interpolate(out, scale_factor=0.5, mode="nearest-exact")
        return out


class TopDown(nn.Module):
    """A feature pyramid's top-down pathway (torchvision's FeaturePyramidNetwork's shape): each level
    adds the coarser one upsampled to its own size, nearest or bilinear."""

    def __init__(self) -> None:
        super().__init__()
        self.lateral = nn.ModuleList([nn.Conv2d(channels, 4, 1) for channels in (2, 3, 5)])

    def forward(self, c3: torch.Tensor, c4: torch.Tensor, c5: torch.Tensor) -> list[torch.Tensor]:
        p5 = self.lateral[2](c5)
        p4 = self.lateral[1](c4) + F.interpolate(p5, size=c4.shape[-2:], mode="nearest")
        p3 = self.lateral[0](c3) + F.interpolate(p4, size=c3.shape[-2:], mode="bilinear", align_corners=True)
        return [p3, p4, p5, F.interpolate(p5, scale_factor=0.5)]


def _unet_inputs(height: int, width: int, threshold: float) -> tuple:
    torch.manual_seed(height * 100 + width)
    return (torch.randn(1, 3, height, width), threshold)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_unet_scale_factor_and_size(tmp_path, dynamic: bool) -> None:
    torch.manual_seed(0)
    model = TinyUNet().eval()
    example = _unet_inputs(8, 8, 0.0)
    shapes = [{2: "height", 3: "width"}, None] if dynamic else None
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "unet", shapes)
    sizes = [(8, 8), (7, 9), (6, 10), (11, 5)] if dynamic else [(8, 8)]
    for height, width in sizes:
        for threshold in (-1.0, 1.0):  # the deep features' mean is in (0, 1): both sides
            check_hosts(scripted, [compiled, python], _unet_inputs(height, width, threshold))
    sides = {label: dict(counts) for label, counts in python.decisions.items()}
    coarse = [counts for counts in sides.values() if counts.get(True) == counts.get(False) == len(sizes)]
    assert coarse, sides  # the threshold's branch went each way at every size
    if dynamic:  # odd sizes resized the deep path: (7, 9) and (11, 5), twice each
        assert {True: 4, False: 4} in sides.values(), sides


def test_feature_pyramid_over_run_time_sizes(tmp_path) -> None:
    torch.manual_seed(1)
    model = TopDown().eval()
    example = (torch.randn(1, 2, 16, 12), torch.randn(1, 3, 8, 6), torch.randn(1, 5, 4, 3))
    shapes = [{2: "h3", 3: "w3"}, {2: "h4", 3: "w4"}, {2: "h5", 3: "w5"}]
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "pyramid", shapes)
    for sizes in (((16, 12), (8, 6), (4, 3)), ((15, 11), (8, 6), (4, 3)), ((20, 9), (10, 5), (5, 2))):
        inputs = tuple(torch.randn(1, channels, *size) for channels, size in zip((2, 3, 5), sizes))
        check_hosts(scripted, [compiled, python], inputs)


class GivenScales(nn.Module):
    """The nearest kernels called with output sizes and scales both, as code written against
    `torch._C._nn` does: the scales pick the source rows (PyTorch reads rows 0, 2, 4 of 6 here)."""

    def forward(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        half = [y.size(2) // 2, y.size(3) // 2]
        return (
            torch._C._nn.upsample_nearest2d(y, half, 0.5, 0.5),
            torch._C._nn._upsample_nearest_exact2d(y, half, 0.5, None),
        )


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_nearest_given_sizes_and_scales_reads_the_rows_the_scales_pick(tmp_path, dynamic: bool) -> None:
    model = GivenScales().eval()
    example = (torch.arange(60.0).reshape(1, 1, 6, 10),)
    shapes = [{2: "h", 3: "w"}] if dynamic else None
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "scales", shapes)
    want = check_hosts(scripted, [compiled, python], example)
    assert want[0][0, 0, :, 0].tolist() == [0.0, 20.0, 40.0]  # the premise: rows 0, 2, 4
    if dynamic:
        check_hosts(scripted, [compiled, python], (torch.arange(63.0).reshape(1, 1, 7, 9),))
