"""Which matmuls IREE data-tiles (`dycl_iree.data_tiling`): on an x86 CPU only those with few rows
and a large weight (from 2^19 weights with AVX-512, 2^18 with AVX2 only), with AVX2 the 6 x 16
register tile of the other large matmuls, and the model still matches PyTorch; off x86 none of it.

Which dispatches IREE made is read from `--compile-to=executable-sources`: a data-tiled matmul has
`encode` dispatches that pack its operands; the register tile from `--compile-to=executable-
configurations`. The CPU probes are set by the tests, so every side is checked on any x86 machine.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import iree.compiler
import numpy as np
import pytest
import torch
from torch import nn

import dycl_iree
from dycl_iree import compile as compile_module
from dycl_iree import cpu_features, data_tiling
from dycl_iree.data_tiling import spec_text
from tests.conftest import check_hosts, export_compiled


class WideAndNarrow(nn.Module):
    """Two 1x1 convolutions at 7x7 as ResNet-50's layer4 has them: 512 -> 2048 channels (a 49x512
    by 512x2048 matmul, 2^20 weights: data-tiled) and 2048 -> 64 (2048x64, 2^17: not)."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = nn.Conv2d(512, 2048, 1)
        self.narrow = nn.Conv2d(2048, 64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.narrow(torch.relu(self.wide(x)))


class Projection(nn.Module):
    """ResNet-50's layer3 expansion: 256 -> 1024 channels at 14x14 (a 196x256 by 256x1024 matmul,
    2^18 weights: data-tiled with AVX2 only), and a 1x1 convolution of 64 channels at 8x8 (a 64x64
    by 64x64 matmul: the register tile with AVX2)."""

    def __init__(self) -> None:
        super().__init__()
        self.expand = nn.Conv2d(256, 1024, 1)
        self.small = nn.Conv2d(64, 64, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.relu(self.expand(x)), torch.relu(self.small(y))


def _compiled(model: nn.Module, examples: tuple, phase: str, dynamic_shapes=None) -> str:
    """The module the exporter compiles, compiled for this machine up to `phase`."""
    from dycl_iree.capture import capture
    from dycl_iree.lower import lower, module_bytecode
    from dycl_iree.partition import partition
    from dycl_iree.specialize import specialize

    program = partition(specialize(capture(model), examples, dynamic_shapes))
    return iree.compiler.compile_str(
        module_bytecode(lower(program).module),
        input_type="torch",
        extra_args=[*compile_module.target_flags("llvm-cpu"), f"--compile-to={phase}"],
    ).decode()


def _encoded_shapes(model: nn.Module, example: torch.Tensor, dynamic_shapes=None) -> list[str]:
    """The operand shapes IREE packs for data tiling, from the module the exporter compiles."""
    sources = _compiled(model, (example,), "executable-sources", dynamic_shapes)
    return sorted(set(re.findall(r"hal\.executable\.export public @\w*_encode_(\w+?)_to_", sources)))


def _set_cpu(monkeypatch, avx512: bool, avx2: bool) -> None:
    monkeypatch.setattr(cpu_features, "has_avx512", lambda: avx512)
    monkeypatch.setattr(cpu_features, "has_avx2", lambda: avx2)


@pytest.mark.parametrize(("avx512", "avx2"), [(True, True), (False, True), (False, False)])
def test_matmuls_of_49_rows_are_not_data_tiled(avx512: bool, avx2: bool, monkeypatch) -> None:
    """With AVX2 or AVX-512 their 49 rows take the register tile (below), off x86 IREE's own tiles."""
    _set_cpu(monkeypatch, avx512, avx2)
    torch.manual_seed(0)
    assert _encoded_shapes(WideAndNarrow().eval(), torch.randn(1, 512, 7, 7)) == []


class FewRows(nn.Module):
    """A 1x1 convolution of 512 -> 2048 channels at 4x4: 16 rows, fewer than the register tile takes."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = nn.Conv2d(512, 2048, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.wide(x))


def test_avx2_data_tiles_the_matmuls_of_few_rows_with_their_weight_unpadded(monkeypatch) -> None:
    _set_cpu(monkeypatch, False, True)
    torch.manual_seed(0)
    configurations = _compiled(FewRows().eval(), (torch.randn(1, 512, 4, 4),), "executable-configurations")
    encoded = set(re.findall(r"hal\.executable\.export public @\w*_encode_(\w+?)_to_", configurations))
    assert "512x2048xf32" in encoded, encoded
    assert "512x2064xf32" not in configurations


def _configuration_lines(configurations: str, operand: str) -> list[str]:
    """The lines of `linalg.matmul`s that read an operand of this shape (`512x2048xf32`)."""
    return [line for line in configurations.splitlines() if "linalg.matmul" in line and operand in line]


def _padded_weight_dispatches(configurations: str, weight: str, stored_columns: int) -> list[str]:
    """The dispatches (their executables' text) that read a `weight` (`512x2048xf32`) from a buffer
    of `stored_columns` columns: a padded weight read through a slice of its true columns."""
    rows, columns = weight.removesuffix("xf32").split("x")
    view = f"to memref<{weight}, strided<[{stored_columns}, 1]"  # then ">" or ", offset: ?>"
    executables = configurations.split("hal.executable private @")[1:]
    return [text for text in executables if view in text and f"memref<{rows}x{stored_columns}xf32" in text]


def _panel_lines(configurations: str, weight: str) -> list[str]:
    """The lines of the contractions that read a `weight` (`512x2048xf32`, K x N) as panels of 16
    columns (a `linalg.generic` over `128x512x16xf32`)."""
    depth, columns = weight.removesuffix("xf32").split("x")
    panels = f"tensor<{int(columns) // 16}x{depth}x16xf32>"
    return [line for line in configurations.splitlines() if "linalg.generic" in line and panels in line]


def test_avx2_reads_late_weights_as_panels_whole(monkeypatch) -> None:
    # ResNet-50's layer4: 512 -> 2048 channels at 7x7 (49x512 by 512x2048: its weight's rows 8 KiB
    # apart, read as 128 panels of 512 x 16) and 2048 -> 64 (49x2048 by 2048x64: 2^17 weights, 4
    # panels, a reduction of 2048, not in blocks: a workgroup's panels stay in L2).
    _set_cpu(monkeypatch, False, True)
    torch.manual_seed(0)
    configurations = _compiled(WideAndNarrow().eval(), (torch.randn(1, 512, 7, 7),), "executable-configurations")
    wide = _panel_lines(configurations, "512x2048xf32")
    narrow = _panel_lines(configurations, "2048x64xf32")
    assert wide and narrow, configurations
    assert "x2064xf32" not in configurations and "linalg.matmul" not in configurations  # neither padded nor plain
    assert all("vector_common_parallel = [6, 1, 16, 0]" in line for line in wide + narrow), wide + narrow
    assert all("cache_reduction" not in line for line in wide + narrow), wide + narrow


def test_avx2_keeps_a_weight_whose_columns_split_a_workgroup_as_stored(monkeypatch) -> None:
    # MobileNetV2's 960 -> 160 channels at 7x7: 2^17.2 weights, but 160 columns are 2.5 workgroups
    # of 64 (as panels: 76.3 -> 54.1 GFLOP/s), so the 6 x 16 register tile reads it as stored.
    _set_cpu(monkeypatch, False, True)
    torch.manual_seed(0)
    convolution = nn.Conv2d(960, 160, 1).eval()
    configurations = _compiled(convolution, (torch.randn(1, 960, 7, 7),), "executable-configurations")
    assert not _panel_lines(configurations, "960x160xf32"), configurations
    lines = _configuration_lines(configurations, "960x160xf32")
    assert lines and all("vector_common_parallel = [6, 16, 0]" in line for line in lines), lines


class PaddedWeight(nn.Module):
    """A 1x1 convolution of 64 -> 256 channels at 8x8 (a 64x64 by 64x256 matmul: rows 1 KiB apart,
    2^14 weights, too few for panels: stored with 16 columns more)."""

    def __init__(self) -> None:
        super().__init__()
        self.convolution = nn.Conv2d(64, 256, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.convolution(x))


def test_avx2_pads_a_small_weight_whose_rows_share_l1_sets(monkeypatch) -> None:
    _set_cpu(monkeypatch, False, True)
    torch.manual_seed(0)
    configurations = _compiled(PaddedWeight().eval(), (torch.randn(1, 64, 8, 8),), "executable-configurations")
    assert len(_padded_weight_dispatches(configurations, "64x256xf32", 272)) == 1, configurations
    lines = _configuration_lines(configurations, "64x256xf32")
    assert lines and all("vector_common_parallel = [6, 16, 0]" in line for line in lines), lines


@pytest.mark.parametrize("avx512", [True, False])
def test_a_weight_of_2_to_the_16_is_read_as_panels_with_avx512_and_padded_with_avx2(avx512: bool, monkeypatch) -> None:
    """ResNet-50's 128 -> 512 at 28x28 (a 784x128 by 128x512 matmul, 2^16 weights, rows 2 KiB apart):
    with AVX-512 read as panels (from 2^15, `data_tiling.WIDE_PANELS_MIN_WEIGHT_LOG2`), no dispatch
    reading it through a padded view; with AVX2 below its panels' bound (2^17), so stored with 16
    columns more and read through a slice."""
    _set_cpu(monkeypatch, avx512, True)
    torch.manual_seed(0)
    convolution = nn.Conv2d(128, 512, 1).eval()
    configurations = _compiled(convolution, (torch.randn(1, 128, 28, 28),), "executable-configurations")
    panels = _panel_lines(configurations, "128x512xf32")
    padded = _padded_weight_dispatches(configurations, "128x512xf32", 528)
    assert (len(panels), len(padded)) == ((1, 0) if avx512 else (0, 1)), (panels, len(padded), configurations)


@pytest.mark.parametrize("avx512", [True, False])
def test_large_matmuls_take_the_register_tile_of_the_cpu_and_none_is_data_tiled(avx512: bool, monkeypatch) -> None:
    """6 x 16 with AVX2; with AVX-512 4 x 64 where the columns are a multiple of 64."""
    _set_cpu(monkeypatch, avx512, True)
    torch.manual_seed(0)
    examples = (torch.randn(1, 256, 14, 14), torch.randn(1, 64, 8, 8))
    configurations = _compiled(Projection().eval(), examples, "executable-configurations")
    encoded = set(re.findall(r"hal\.executable\.export public @\w*_encode_(\w+?)_to_", configurations))
    small = _configuration_lines(configurations, "64x64xf32")
    assert small, "no 64x64 matmul"
    assert encoded == set(), encoded  # 196 and 64 rows: the register tile
    expand = _panel_lines(configurations, "256x1024xf32")  # 2^18 weights: read as panels
    assert expand and "x1040xf32" not in configurations, configurations
    panel_tile, tile = ("[4, 4, 16, 0]", "[4, 64, 0]") if avx512 else ("[6, 1, 16, 0]", "[6, 16, 0]")
    assert all(f"vector_common_parallel = {panel_tile}" in line for line in expand), expand
    assert all(f"vector_common_parallel = {tile}" in line for line in small), small


class ImageNetMaps(nn.Module):
    """1x1 convolutions on maps of 2^a x 7^2 pixels, as ImageNet networks have them, and on one of
    20x20 (a multiple of neither 7 nor 48): 64 -> 256 channels at 28x28 (784 rows: 14 workgroups of
    56) and 20x20 (400), MobileNetV2's 192 -> 32 at 28x28, 576 -> 96 at 14x14 (196 rows: 7 of 28),
    960 -> 160 at 7x7 (49 rows, one workgroup) and 96 -> 24 at 56x56, and 192 -> 32 at 20x20; and
    ResNet-50's 256 -> 1024 at 14x14, whose weight is read as panels."""

    SHAPES = (
        (64, 256, 28),
        (64, 256, 20),
        (192, 32, 28),
        (576, 96, 14),
        (960, 160, 7),
        (96, 24, 56),
        (192, 32, 20),
        (256, 1024, 14),
    )

    def __init__(self) -> None:
        super().__init__()
        self.convolutions = nn.ModuleList(nn.Conv2d(cin, cout, 1) for cin, cout, _ in self.SHAPES)

    def forward(self, a, b, c, d, e, f, g, h):  # one map per convolution
        maps, outputs = [a, b, c, d, e, f, g, h], []
        for index, conv in enumerate(self.convolutions):
            outputs.append(torch.relu(conv(maps[index])))
        return outputs

    @classmethod
    def examples(cls) -> tuple[torch.Tensor, ...]:
        return tuple(torch.randn(1, cin, size, size) for cin, _, size in cls.SHAPES)


# Per shape of ImageNetMaps (rows, K x N): the workgroup's rows and the register tile with AVX-512
# (None: its weight is read as panels, AVX512_PANEL_TILES) and with AVX2.
IMAGENET_MAP_TILES = {
    (784, "64x256"): ((56, (4, 64)), (48, (6, 16))),
    (400, "64x256"): ((48, (4, 64)), (48, (6, 16))),
    (784, "192x32"): ((56, (7, 32)), (48, (6, 16))),
    (196, "576x96"): (None, (48, (6, 16))),
    (49, "960x160"): (None, (96, (6, 16))),
    (3136, "96x24"): ((56, (7, 16)), (48, (6, 16))),
    (400, "192x32"): ((48, (6, 32)), (48, (6, 16))),
}
# With AVX-512 the weights of 2^15 elements or more and an odd multiple of 32 columns are read as
# panels by the 7 x 32 tile where 7 divides the rows (`data_tiling.WIDE_ODD_PANEL_TILES`); the
# panels' loops are (M, N / 16, 16, K): per weight, the workgroup's sizes and the register tile.
AVX512_PANEL_TILES = {
    "576x96": ("[28, 4, 16, 0]", "[7, 2, 16, 0]"),
    "960x160": ("[96, 4, 16, 0]", "[7, 2, 16, 0]"),
    "256x1024": ("[28, 4, 16, 0]", "[4, 4, 16, 0]"),
}


@pytest.mark.parametrize("avx512", [True, False])
def test_workgroups_divide_imagenet_maps_and_avx512_tiles_take_7_rows_there(
    avx512: bool, tmp_path: Path, monkeypatch
) -> None:
    """With AVX-512 a matmul whose rows a workgroup of 56, 28 or 49 rows divides takes it (or one
    workgroup of every row), a 7-row register tile where 7 divides them and the columns are no
    multiple of 64, over the weight's panels where it has 2^15 elements or more; with AVX2 (6 x 16,
    whose 6 rows 56 is no multiple of) workgroups of 48 or 96, panels only from 2^17 elements and 64
    columns."""
    _set_cpu(monkeypatch, avx512, True)
    torch.manual_seed(0)
    model = ImageNetMaps().eval()
    examples = ImageNetMaps.examples()
    configurations = _compiled(model, examples, "executable-configurations")
    for (rows, weight), tiles in IMAGENET_MAP_TILES.items():
        operand = f"<{rows}x{weight.split('x')[0]}xf32>"
        lines = [line for line in _configuration_lines(configurations, f"{weight}xf32") if operand in line]
        if avx512 and tiles[0] is None:
            assert not lines, (rows, weight, lines)  # read as panels, below
            continue
        workgroup, tile = tiles[0] if avx512 else tiles[1]
        assert len(lines) == 1, (rows, weight, configurations)
        assert f"distribution = [{workgroup}, 64, 0]" in lines[0], (rows, weight, lines[0])
        assert f"vector_common_parallel = [{tile[0]}, {tile[1]}, 0]" in lines[0], (rows, weight, lines[0])
    # ResNet-50's 256 -> 1024 as panels with AVX2 too: 196 rows in workgroups of 48, 6 x 16.
    panel_tiles = AVX512_PANEL_TILES if avx512 else {"256x1024": ("[48, 4, 16, 0]", "[6, 1, 16, 0]")}
    for weight, (workgroup, tile) in panel_tiles.items():
        panels = _panel_lines(configurations, f"{weight}xf32")
        assert len(panels) == 1 and f"distribution = {workgroup}" in panels[0], (weight, panels)
        assert f"vector_common_parallel = {tile}" in panels[0], (weight, panels)
    run = dycl_iree.load(dycl_iree.export(model, examples).save(tmp_path / "maps.dycl"))
    with torch.no_grad():
        wants = model(*examples)
    for got, want in zip(run(*[example.numpy() for example in examples]), wants):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5 * float(want.abs().max()))


class PanelDepths(nn.Module):
    """Matmuls that read their weights as panels, at ResNet-50's shapes: 256 -> 1024 and 1024 -> 256
    channels at 14x14 (196 rows: several workgroups), 512 -> 2048 and 128 -> 1024 at 7x7 (49 rows:
    one workgroup), and a 3x3 convolution of 256 channels at 14x14, Winograd's batch matmul of 49
    rows per tile position (16 x 49x256 by 256x256)."""

    def __init__(self) -> None:
        super().__init__()
        self.expand = nn.Conv2d(256, 1024, 1)
        self.reduce = nn.Conv2d(1024, 256, 1)
        self.wide = nn.Conv2d(512, 2048, 1)
        self.shallow = nn.Conv2d(128, 1024, 1)
        self.spatial = nn.Conv2d(256, 256, 3, padding=1)

    def forward(self, x, y, z):
        return (
            torch.relu(self.reduce(torch.relu(self.expand(x)))),
            torch.relu(self.wide(y)),
            torch.relu(self.shallow(z)),
            torch.relu(self.spatial(x)),
        )


# Per weight of PanelDepths (its panels as the contraction reads them): the reduction's cache
# blocks with AVX-512 where blocks are asked from a depth of 256 with one workgroup and 1024 with
# several (None: whole). As exported every reduction is whole.
PANEL_DEPTH_BLOCKS = {
    "tensor<64x256x16xf32>": None,  # 196 rows, several workgroups, depth 256 (< 1024)
    "tensor<16x1024x16xf32>": "[0, 0, 0, 32]",  # 196 rows, depth 1024
    "tensor<128x512x16xf32>": "[0, 0, 0, 32]",  # 49 rows, one workgroup, depth 512 (>= 256)
    "tensor<64x128x16xf32>": None,  # 49 rows, depth 128
    "tensor<16x16x256x16xf32>": "[0, 0, 0, 0, 32]",  # Winograd's: 49 rows, depth 256
}


@pytest.mark.parametrize(("avx512", "blocked"), [(True, False), (True, True), (False, False)])
def test_reductions_over_panels_are_whole_unless_blocks_are_asked(
    avx512: bool, blocked: bool, tmp_path: Path, monkeypatch
) -> None:
    """As exported every reduction over panels is whole, with AVX-512 too (blocks measured slower:
    `data_tiling.WIDE_PANELS_BLOCKED_FROM`); asked for, from a depth of 256 where one workgroup
    takes every row and 1024 where several do, blocks of 32 reach IREE's configuration
    (`data_tiling.panel_blocks`), and the model matches PyTorch either way."""
    _set_cpu(monkeypatch, avx512, True)
    if blocked:
        monkeypatch.setattr(data_tiling, "WIDE_PANELS_BLOCKED_FROM", {"one workgroup": 256, "several workgroups": 1024})
    torch.manual_seed(0)
    model = PanelDepths().eval()
    examples = (torch.randn(1, 256, 14, 14), torch.randn(1, 512, 7, 7), torch.randn(1, 128, 7, 7))
    configurations = _compiled(model, examples, "executable-configurations")
    for panels, blocks in PANEL_DEPTH_BLOCKS.items():
        lines = [line for line in configurations.splitlines() if "linalg.generic" in line and panels in line]
        assert len(lines) == 1, (panels, configurations)
        if blocked and blocks:
            assert f"cache_reduction = {blocks}" in lines[0], (panels, lines[0])
        else:
            assert "cache_reduction" not in lines[0], (panels, lines[0])
    if not avx512:  # the AVX2 spec is checked against PyTorch by test_an_avx2_model_matches_pytorch
        return
    run = dycl_iree.load(dycl_iree.export(model, examples).save(tmp_path / "depths.dycl"))
    with torch.no_grad():
        wants = model(*examples)
    for got, want in zip(run(*[example.numpy() for example in examples]), wants):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5 * float(want.abs().max()))


class LateConvolutions(nn.Module):
    """Convolutions whose matmuls read their weights as panels with AVX2: 256 -> 1024 channels at
    14x14 (196 rows), 512 -> 2048 at 7x7 then 2048 -> 512 with a residual (49 rows), and a 3x3
    stride-2 one of 128 -> 512 channels at 14x14 (im2col); and a 1x1 one of 64 channels at 8x8 (the
    6 x 16 register tile)."""

    def __init__(self) -> None:
        super().__init__()
        self.expand = nn.Conv2d(256, 1024, 1)
        self.wide = nn.Conv2d(512, 2048, 1)
        self.reduce = nn.Conv2d(2048, 512, 1)
        self.strided = nn.Conv2d(128, 512, 3, stride=2, padding=1)
        self.small = nn.Conv2d(64, 64, 1)

    def forward(self, x, y, z, w):
        return (
            torch.relu(self.expand(x)),
            self.reduce(torch.relu(self.wide(y))) + y,
            torch.relu(self.strided(z)),
            torch.relu(self.small(w)),
        )


def test_an_avx2_model_matches_pytorch(tmp_path: Path, monkeypatch) -> None:
    _set_cpu(monkeypatch, False, True)
    torch.manual_seed(0)
    model = LateConvolutions().eval()
    examples = (
        torch.randn(1, 256, 14, 14),
        torch.randn(1, 512, 7, 7),
        torch.randn(1, 128, 14, 14),
        torch.randn(1, 64, 8, 8),
    )
    bundle = dycl_iree.export(model, examples)
    assert bundle.host == "compiled"
    assert "--iree-opt-data-tiling" in json.dumps(bundle.manifest)
    configurations = _compiled(model, examples, "executable-configurations")
    for weight in ["256x1024xf32", "512x2048xf32", "2048x512xf32", "1152x512xf32"]:
        # Every large weight is read as panels, each by one dispatch (the strided convolution's as
        # im2col's); the packed result is the [M, N] one, so nothing unpacks it.
        assert len(_panel_lines(configurations, weight)) == 1, weight
    assert "unpack" not in configurations
    # The bias, the ReLU and the residual add after each matmul run in its dispatch: every
    # dispatch is a matmul, a transpose of an input, or a copy of im2col's slices.
    names = re.findall(r"hal\.executable\.export public @([\w$]+)", configurations)
    assert all(re.search(r"_(matmul_like|matmul|transpose)_[0-9x]+_f32$|_slow_memcpy$", name) for name in names), names
    run = dycl_iree.load(bundle.save(tmp_path / "late.dycl"))
    with torch.no_grad():
        wants = model(*examples)
    for got, want in zip(run(*[example.numpy() for example in examples]), wants):
        want = want.numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize("avx512", [True, False])
def test_a_matmul_of_a_dynamic_batch_is_data_tiled_by_its_weight(avx512: bool, monkeypatch) -> None:
    """Rows known only at run time (`data_tiling.DYNAMIC_ROWS`): the large weight data-tiled, the
    small one not."""
    _set_cpu(monkeypatch, avx512, True)
    encoded = _encoded_shapes(WideAndNarrow().eval(), torch.randn(2, 512, 7, 7), ({0: "batch"},))
    assert "512x2048xf32" in encoded and not any("2048x64" in shape for shape in encoded), encoded


class GreedyRows(nn.Module):
    """A greedy decoder's shape: each step projects every row so far (a matmul of as many rows as
    steps, known only at run time) and appends the last one, until its mean passes a threshold or
    eight rows."""

    def __init__(self) -> None:
        super().__init__()
        self.step = nn.Linear(512, 512)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x
        while rows.shape[0] < 8:
            nxt = torch.tanh(self.step(rows))[-1:]
            rows = torch.cat([rows, nxt], 0)
            if float(nxt.mean()) > 0.05:
                break
        return rows


def test_rows_known_at_run_time_are_data_tiled_and_match_pytorch(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")
    _set_cpu(monkeypatch, False, True)
    torch.manual_seed(0)
    model = GreedyRows().eval()
    samples = [torch.randn(1, 512) for _ in range(12)]
    with torch.no_grad():
        lengths = {int(model(sample).shape[0]) for sample in samples}
    assert len(lengths) > 1 and 8 in lengths, lengths  # loops that stop early and one that runs out
    assert "512x512xf32" in _encoded_shapes(model, samples[0])
    _, scripted, compiled, python = export_compiled(tmp_path, model, (samples[0],), "greedy")
    for sample in samples:
        check_hosts(scripted, (compiled, python), (sample,))


def test_a_data_tiled_model_matches_pytorch(tmp_path: Path, monkeypatch) -> None:
    _set_cpu(monkeypatch, True, True)
    torch.manual_seed(0)
    model = WideAndNarrow().eval()
    x = torch.randn(1, 512, 7, 7)
    bundle = dycl_iree.export(model, (x,))
    assert "--iree-opt-data-tiling" in json.dumps(bundle.manifest)
    run = dycl_iree.load(bundle.save(tmp_path / "wide.dycl"))
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(run(x.numpy()), want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_cross_compiled_targets_keep_their_flags() -> None:
    flags = compile_module.target_flags("llvm-cpu:aarch64-linux-gnu")
    assert "--iree-opt-data-tiling" not in flags
    assert not any(flag.startswith("--iree-preprocessing-transform-spec-filename") for flag in flags)


def test_the_weight_bound_covers_every_power_of_two_split() -> None:
    text = spec_text(max_rows=196, min_weight_log2=19)
    for k_log2 in range(4, 16):
        assert f"transform.param.constant {1 << k_log2} : i64" in text
        assert f"transform.param.constant {1 << (19 - k_log2)} : i64" in text


class WinogradPair(nn.Module):
    """Two 3x3 convolutions with padding, each + ReLU, on inputs of their own."""

    def __init__(self, wide: tuple[int, int], narrow: tuple[int, int]) -> None:
        super().__init__()
        self.wide = nn.Conv2d(*wide, 3, padding=1)
        self.narrow = nn.Conv2d(*narrow, 3, padding=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.relu(self.wide(x)), torch.relu(self.narrow(y))


@pytest.mark.parametrize("avx512", [True, False])
def test_winograds_batch_matmul_reads_its_filter_as_panels_in_the_register_tile(avx512: bool, monkeypatch) -> None:
    _set_cpu(monkeypatch, avx512, True)
    torch.manual_seed(0)
    examples = (torch.randn(1, 512, 7, 7), torch.randn(1, 128, 14, 14))
    # Layer4 of ResNet: 512 channels at 7x7, Winograd's F(2x2, 3x3), a batch matmul 16 x 16x512 by
    # 512x512 whose filter is read as panels; and 128 -> 96 channels at 14x14, whose 96 columns are
    # not a multiple of the panels' workgroup: a batch matmul over the filter as stored, whose 49
    # rows (7x7 tiles) take 7-row tiles with AVX-512.
    model = WinogradPair((512, 512), (128, 96)).eval()
    configurations = _compiled(model, examples, "executable-configurations")
    lines = configurations.splitlines()
    panels = [line for line in lines if "linalg.generic" in line and "tensor<16x32x512x16xf32>" in line]
    plain = [line for line in lines if "linalg.batch_matmul" in line]
    assert panels and plain and not any("512x512xf32" in line for line in plain), configurations
    panel_tile, tile = ("[1, 4, 4, 16, 0]", "[1, 7, 32, 0]") if avx512 else ("[1, 6, 1, 16, 0]", "[1, 6, 16, 0]")
    assert all(f"vector_common_parallel = {panel_tile}" in line for line in panels), panels
    assert all(f"vector_common_parallel = {tile}" in line for line in plain), plain


class NarrowPointwise(nn.Module):
    """MobileNetV2's expansion of 16 channels to 96 (here at 8x8: a 64x16 by 16x96 matmul, the
    register tile with AVX2), and one of 8 channels (64x8 by 8x96: below the bound, IREE's tile)."""

    def __init__(self) -> None:
        super().__init__()
        self.sixteen = nn.Conv2d(16, 96, 1)
        self.eight = nn.Conv2d(8, 96, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.relu(self.sixteen(x)), torch.relu(self.eight(y))


def test_avx2_gives_matmuls_of_sixteen_channels_the_register_tile(monkeypatch) -> None:
    _set_cpu(monkeypatch, False, True)
    torch.manual_seed(0)
    examples = (torch.randn(1, 16, 8, 8), torch.randn(1, 8, 8, 8))
    configurations = _compiled(NarrowPointwise().eval(), examples, "executable-configurations")
    matmuls = [line for line in configurations.splitlines() if "linalg.matmul" in line]
    sixteen = [line for line in matmuls if "64x16xf32" in line]
    eight = [line for line in matmuls if "64x8xf32" in line]
    assert sixteen and eight, matmuls
    assert all("vector_common_parallel = [6, 16, 0]" in line for line in sixteen), sixteen
    assert all("vector_common_parallel = [6, 16, 0]" not in line for line in eight), eight


def test_avx2_stores_winograds_filter_padded_where_its_rows_share_l1_sets(monkeypatch, tmp_path: Path) -> None:
    """Where the filter is not read as panels (`data_tiling.BATCH_PANELS_MIN_WEIGHT_LOG2` 0 here)."""
    _set_cpu(monkeypatch, False, True)
    monkeypatch.setattr(data_tiling, "BATCH_PANELS_MIN_WEIGHT_LOG2", 0)
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")  # the whole-export key does not see the probes
    torch.manual_seed(0)
    # ResNet's 3x3 convolutions as Winograd's F(2x2, 3x3): 256 channels at 14x14 (a batch matmul of
    # 49 tiles by a 256x256 transformed filter per position, rows 1 KiB apart: stored padded) and
    # 128 at 14x14 (rows 512 bytes apart: as stored).
    model = WinogradPair((256, 256), (128, 128)).eval()
    examples = (torch.randn(1, 256, 14, 14), torch.randn(1, 128, 14, 14))
    sources = _compiled(model, examples, "executable-sources")
    weights = {}
    for function in re.split(r"func\.func @", sources)[1:]:
        if re.match(r"\S+_batch_matmul_", function):
            loads = re.findall(r"readonly:tensor<16x(\d+)x(\d+)xf32>> -> tensor<16x\d+x(\d+)xf32>", function)
            # the filter [16, C, F] (its stored and read columns), not the 49 tiles' activations [16, 49, C]
            weights.update({int(read): int(stored) for depth, stored, read in loads if depth != "49"})
    assert weights == {256: 272, 128: 128}, weights  # the bmm reads 256 of 272 stored columns
    run = dycl_iree.load(dycl_iree.export(model, examples).save(tmp_path / "winograd.dycl"))
    with torch.no_grad():
        wants = [want.numpy() for want in model(*examples)]
    for got, want in zip(run(*[example.numpy() for example in examples]), wants, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


class PointwiseWidths(nn.Module):
    """1x1 convolutions at 8x8 (64 rows) of 64 -> 128, 96 and 144 channels, and a 3x3 one of 128
    channels at 14x14 (Winograd's batch matmul over filter panels, 128 columns): with AVX-512 the 4 x
    64 register tile, 6 x 32, 6 x 16 and 4 rows x 4 panels."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = nn.Conv2d(64, 128, 1)
        self.middle = nn.Conv2d(64, 96, 1)
        self.narrow = nn.Conv2d(64, 144, 1)
        self.winograd = nn.Conv2d(128, 128, 3, padding=1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        pointwise = [torch.relu(self.wide(x)), torch.relu(self.middle(x)), torch.relu(self.narrow(x))]
        return pointwise + [torch.relu(self.winograd(y))]


@pytest.mark.parametrize("avx512", [True, False])
def test_avx512_tiles_matmuls_by_the_widest_tile_their_columns_are_a_multiple_of(
    avx512: bool, monkeypatch, tmp_path: Path
) -> None:
    _set_cpu(monkeypatch, avx512, True)
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")  # the whole-export key does not see the probes
    torch.manual_seed(0)
    model = PointwiseWidths().eval()
    examples = (torch.randn(1, 64, 8, 8), torch.randn(1, 128, 14, 14))
    configurations = _compiled(model, examples, "executable-configurations")
    tiles = {}
    for width in (128, 96, 144):
        lines = configurations.splitlines()
        (line,) = [line for line in lines if "linalg.matmul" in line and f"64x{width}xf32" in line]
        tiles[width] = re.search(r"vector_common_parallel = \[(\d+), (\d+), 0\]", line).groups()
    panels = "tensor<16x8x128x16xf32>"
    (batch,) = [line for line in configurations.splitlines() if "linalg.generic" in line and panels in line]
    tiles["winograd"] = re.search(r"vector_common_parallel = \[1, (\d+), (\d+), 16, 0\]", batch).groups()
    if avx512:
        assert tiles == {128: ("4", "64"), 96: ("6", "32"), 144: ("6", "16"), "winograd": ("4", "4")}, tiles
    else:
        assert tiles == {128: ("6", "16"), 96: ("6", "16"), 144: ("6", "16"), "winograd": ("6", "1")}, tiles
    run = dycl_iree.load(dycl_iree.export(model, examples).save(tmp_path / "widths.dycl"))
    with torch.no_grad():
        wants = [want.numpy() for want in model(*examples)]
    for got, want in zip(run(*[example.numpy() for example in examples]), wants, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
