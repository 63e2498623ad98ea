"""The register tile of depthwise convolutions' taps with AVX2 (`dycl_iree.tap_tiles`): a row of
pixels per tile where the output width has a divisor from 2 to 8, IREE's own tile where it has none
or where the CPU has AVX-512, and the model still matches PyTorch.

The tile is read from `--compile-to=executable-configurations`, per dispatch; the CPU probes are
set by the tests, so every side is checked on any x86 machine.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import dycl_iree
from dycl_iree import compile as compile_module
from dycl_iree import tap_tiles
from tests.test_data_tiling import _compiled, _set_cpu


class MobileNetDepthwise(nn.Module):
    """torchvision's MobileNetV2 depthwise layer: a 3x3 depthwise Conv2d without bias, BatchNorm2d,
    ReLU6."""

    def __init__(self, channels: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, stride, 1, groups=channels, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.act = nn.ReLU6(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Widths(nn.Module):
    """Depthwise layers whose outputs are 14 pixels wide (stride 1: a tile of 7), 7 wide (stride 2
    from 14: 7), 16 wide (8, not 4 or 2; 24 channels, no multiple of AVX-512's 16) and 13 wide (a
    prime: IREE's tile)."""

    def __init__(self) -> None:
        super().__init__()
        self.even, self.strided = MobileNetDepthwise(32, 1), MobileNetDepthwise(32, 2)
        self.prime, self.eight = MobileNetDepthwise(32, 1), MobileNetDepthwise(24, 1)
        for module in self.modules():
            if isinstance(module, nn.BatchNorm2d):  # statistics of a trained layer, not the identity
                module.running_mean.uniform_(-1, 1)
                module.running_var.uniform_(0.5, 2)
                module.weight.data.uniform_(0.5, 1.5)
                module.bias.data.uniform_(-0.5, 0.5)

    def forward(
        self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.even(x), self.strided(x), self.prime(y), self.eight(z)


def _examples(batch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.randn(batch, 32, 14, 14), torch.randn(batch, 32, 13, 13), torch.randn(batch, 24, 16, 16)


def _tiles(configurations: str) -> dict[str, str]:
    """Per element-wise dispatch (`..._dispatch_N_elementwise_..._HxWxC_f32`, by its whole name): its
    lowering config."""
    tiles = {}
    for function in re.split(r"func\.func @", configurations)[1:]:
        name = re.match(r"(\S+?_elementwise_\w+)\(\)", function)
        config = re.search(r"lowering_config<[^>]*>", function)
        if name and config:
            tiles[name.group(1)] = config.group(0)
    return tiles


def test_pixels_per_tile_is_the_largest_divisor_up_to_eight() -> None:
    widths = {112: 8, 56: 8, 28: 7, 14: 7, 7: 7, 10: 5, 9: 3, 22: 2, 13: None, 1: None}
    assert {width: tap_tiles.pixels_per_tile(width) for width in widths} == widths


@pytest.mark.parametrize("batch", [1, 2])
def test_avx2_tiles_the_taps_by_a_divisor_of_their_width(batch: int, monkeypatch) -> None:
    _set_cpu(monkeypatch, False, True)
    torch.manual_seed(0)
    tiles = _tiles(_compiled(Widths().eval(), _examples(batch), "executable-configurations"))
    lead = [1] * batch  # batch 1 folds away: [H, W, C]; batch 2 keeps [N, H, W, C]
    row = ", ".join(map(str, [*lead, 0, 0]))
    ours = {name: config for name, config in tiles.items() if f"distribution = [{row}]" in config}
    shape = "2x" if batch == 2 else ""
    # stride 1 at 14 wide, stride 2 to 7 wide, 16 wide (8 divides it, so not 4 or 2)
    wanted = {f"{shape}14x14x32": 7, f"{shape}7x7x32": 7, f"{shape}16x16x24": 8}
    assert len(ours) == len(wanted), tiles
    for size, pixels in wanted.items():
        vector = f"vector_common_parallel = [{', '.join(map(str, [*lead, pixels, 8]))}]"
        assert [config for name, config in ours.items() if name.endswith(f"_{size}_f32") and vector in config], tiles
    prime = [config for name, config in tiles.items() if "13x13x32" in name or "169x32" in name]
    assert prime and not any(row in config for config in prime), tiles  # IREE's own tile


@pytest.mark.parametrize(("avx512", "avx2"), [(True, True), (False, True), (False, False)])
def test_every_x86_cpu_with_avx2_gets_the_tap_tile(avx512: bool, avx2: bool, monkeypatch) -> None:
    _set_cpu(monkeypatch, avx512, avx2)
    flags = compile_module.target_flags("llvm-cpu")
    assert any(flag.startswith(tap_tiles.EXECUTABLES_FLAG) for flag in flags) is avx2
    if avx2:  # one vector of channels: 16 floats with AVX-512, 8 with AVX2
        (spec,) = [flag.split("transform-spec-path=")[1].rstrip("})") for flag in flags if "tap-tiles" in flag]
        channels = 16 if avx512 else 8
        assert f", 8, {channels}]" in Path(spec).read_text() and f", 8, {24 - channels}]" not in Path(spec).read_text()
    cross = compile_module.target_flags("llvm-cpu:aarch64-linux-gnu")
    assert not any(flag.startswith(tap_tiles.EXECUTABLES_FLAG) for flag in cross)


def test_the_spec_parses_and_tries_the_largest_tile_first() -> None:
    path = Path(re.search(r"transform-spec-path=([^}]+)", tap_tiles.compile_flags()[0]).group(1))
    from iree.compiler.tools import binaries

    command = [binaries.find_tool("iree-opt"), str(path), "-o", "/dev/null"]
    checked = subprocess.run(command, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    for rank in (3, 4):
        tried = [int(pixels) for pixels in re.findall(rf"@taps_{rank}d_by_(\d+) ->", path.read_text())]
        assert tried == list(range(tap_tiles.MAX_COLUMNS, 1, -1))


@pytest.mark.parametrize(("batch", "avx512"), [(1, False), (2, False), (1, True)])
def test_a_depthwise_model_in_the_tap_tile_matches_pytorch(
    batch: int, avx512: bool, monkeypatch, tmp_path: Path
) -> None:
    """8 channels a tile with AVX2, 16 with AVX-512 (the 24-channel layer leaves a half vector)."""
    _set_cpu(monkeypatch, avx512, True)
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")  # the whole-export key does not see the probes
    torch.manual_seed(1)
    model = Widths().eval()
    examples = _examples(batch)
    bundle = dycl_iree.export(model, examples)
    flags = bundle.manifest["targets"]["llvm-cpu"]["flags"]
    assert any(flag.startswith(tap_tiles.EXECUTABLES_FLAG) for flag in flags)
    run = dycl_iree.load(bundle.save(tmp_path / "depthwise.dycl"))
    with torch.no_grad():
        wants = [want.numpy() for want in model(*examples)]
    gots = run(*[example.numpy() for example in examples])
    for got, want in zip(gots, wants, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


class PooledThenScaled(nn.Module):
    """An average pooling whose result an element-wise op of ten inputs reads (nine per-pixel
    weights): IREE fuses both into one dispatch, whose root is the pooling, as in the early-exit
    ResNet-50's heads. The spec must leave that element-wise op alone."""

    def __init__(self) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.randn(9, 64, 4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = nn.functional.avg_pool2d(x, 3, 3)
        out = pooled * self.weights[0]
        for index in range(1, 9):
            out = out * self.weights[index] + pooled
        return out


def test_an_element_wise_op_that_shares_its_dispatch_keeps_irees_tile(monkeypatch, tmp_path: Path) -> None:
    _set_cpu(monkeypatch, False, True)
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")  # the whole-export key does not see the probes
    torch.manual_seed(0)
    model = PooledThenScaled().eval()
    example = torch.randn(1, 64, 14, 14)
    configurations = _compiled(model, (example,), "executable-configurations")
    assert "distribution = [1, 0, 0]" not in configurations
    assert "distribution = [1, 1, 0, 0]" not in configurations
    run = dycl_iree.load(dycl_iree.export(model, (example,)).save(tmp_path / "pooled.dycl"))
    with torch.no_grad():
        want = model(example).numpy()
    np.testing.assert_allclose(run(example.numpy()), want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.slow  # 114 s on two busy cores, warm or cold: it compiles the network twice
def test_every_depthwise_layer_of_mobilenet_v2_takes_the_tile_and_it_matches_pytorch(monkeypatch, tmp_path) -> None:
    """torchvision's MobileNetV2 layout (`models/imagenet.py`, width 0.25 to keep the compile short)
    at 224x224: its 17 depthwise layers run at widths 112 to 7 (IREE compiles the same shapes once),
    and the dispatch of each output shape gets the tile its width takes (a layer whose expansion
    runs in bands, `padded_expansion.depthwise_of_expansion_in_bands`, in dispatches of fewer rows)."""
    from models import imagenet

    _set_cpu(monkeypatch, False, True)
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")  # the whole-export key does not see the probes
    model, example = imagenet.mobilenet_v2(width_multiplier=0.25)
    model = model.eval()
    shapes = set()
    depthwise = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.groups > 1]
    hooks = [m.register_forward_hook(lambda _, __, out: shapes.add(tuple(out.shape[1:]))) for m in depthwise]
    with torch.no_grad():
        want = model(*example).numpy()
    for hook in hooks:
        hook.remove()
    tiles = _tiles(_compiled(model, example, "executable-configurations"))
    assert len(depthwise) == 17 and {width for _, _, width in shapes} == {112, 56, 28, 14, 7}, shapes
    for channels, height, width in shapes:
        shape = re.compile(rf"_(\d+)x{width}x{channels}_f32$")
        configs = [c for name, c in tiles.items() if (m := shape.search(name)) and int(m.group(1)) <= height]
        vector = f"vector_common_parallel = [1, {tap_tiles.pixels_per_tile(width)}, 8]"
        assert configs and all("distribution = [1, 0, 0]" in c and vector in c for c in configs), (width, tiles)
    run = dycl_iree.load(dycl_iree.export(model, example).save(tmp_path / "mobilenet.dycl"))
    np.testing.assert_allclose(run(example[0].numpy()), want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
