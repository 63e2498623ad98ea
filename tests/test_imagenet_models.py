"""The deployment-size models (`models/imagenet.py`): their shapes in PyTorch, one export of a
reduced-width early-exit ResNet-50 (every layer kind of the real networks, control flow included),
and, slow, the full-size one, whose branches' large weights make the compiled host's branches blocks.

The full-size models are only exported by the benchmark (`python -m dycl_iree bench --models
realistic`): a cold export of each takes 20-60 s on two cores.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

import dycl_iree
from dycl_iree import compile as compile_module
from dycl_iree.bench.models import select_entries
from dycl_iree.verify import verify
from models import imagenet


def test_the_full_size_models_have_torchvisions_shapes() -> None:
    """Parameter counts of torchvision's ResNet-18 (11,689,512), ResNet-50 (25,557,032) and
    MobileNetV2 (3,504,872): the same layers with the same shapes."""
    networks = {
        "resnet18": imagenet.ResNet(imagenet.BasicBlock, (2, 2, 2, 2)),
        "resnet50": imagenet.ResNet(imagenet.Bottleneck, (3, 4, 6, 3)),
        "mobilenet_v2": imagenet.MobileNetV2(),
    }
    counts = {name: sum(p.numel() for p in network.parameters()) for name, network in networks.items()}
    assert counts == {"resnet18": 11_689_512, "resnet50": 25_557_032, "mobilenet_v2": 3_504_872}


def test_the_realistic_group_is_registered_with_the_benchmark() -> None:
    names = [entry.name for entry in select_entries(["realistic"])]
    assert names == ["resnet18", "resnet50", "mobilenet_v2", "early_exit_resnet50", "transformer_base"]


@pytest.mark.slow  # ~45 s on two busy cores
def test_reduced_early_exit_resnet50_matches_pytorch_on_every_exit(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, example = imagenet.early_exit_resnet50(width=8, resolution=64, threshold=0.6)
    # Top probabilities of the three classifiers (0.869; 0.579, 0.860; 0.199, 0.161, 0.812; all < 0.31):
    # exits 0, 1, 2 and 3.
    specs = ((2, 4.0), (5, 4.0), (0, 1.0), (1, 1.0))
    images = [imagenet.imagenet_image(seed, scale, resolution=64) for seed, scale in specs]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exits = sorted({int(model(image)[1]) for image in images})
    bundle = dycl_iree.export(model, example)
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / "early_exit.dycl")
    report = verify(model, [(image,) for image in images], path, host="compiled")
    assert report.mismatched_samples == 0, report.format()
    assert exits == [0, 1, 2, 3]


@pytest.mark.slow  # 41 s cold on two cores (export, compile, four samples against float64)
def test_the_full_size_early_exit_resnet50_compiles_its_branches_as_blocks_and_matches_pytorch(tmp_path: Path) -> None:
    """At 224x224 every stage after the first holds weights of 2^17 elements or more, so `main`'s
    branches are blocks (`pipeline.branches_as_blocks`); the shipped samples leave at every exit."""
    torch.manual_seed(0)
    model, example = imagenet.early_exit_resnet50()
    samples = [imagenet.image_sample(spec) for spec in imagenet.EXIT_SAMPLES]
    with torch.no_grad():
        exits = sorted(int(model(*sample)[1]) for sample in samples)
    bundle = dycl_iree.export(model, example)
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    assert compile_module.AS_BLOCKS in str(bundle.manifest["targets"]["llvm-cpu"]["flags"])
    report = verify(model, samples, bundle.save(tmp_path / "early_exit.dycl"), host="compiled")
    assert report.mismatched_samples == 0, report.format()
    assert exits == [0, 1, 2, 3]
