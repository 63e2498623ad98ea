"""The zoo through the exporter: both hosts match PyTorch on every sample, with every path covered.

`make test` runs a representative subset (one model per family, chosen to keep the suite short on
two cores); `make zoo` (DYCL_ZOO=full) runs every zoo model.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dycl_iree.verify import verify
from models import ZOO
from tests.conftest import export_reused

SUBSET = [
    "ranet",
    "ranet_predictions",  # RANet's own form: a list of predictions whose length is the exit taken
    "sdn_resnet56",
    "skipnet_rnn_resnet38",
    "blockdrop_resnet110",
    "show_attend_tell",
    "transformer_translator",
]
NAMES = sorted(ZOO) if os.environ.get("DYCL_ZOO") == "full" else SUBSET
# Every zoo model gets the compiled host (the captioner's List[int] lives on the device as a tensor).
PYTHON_HOST: set[str] = set()


@pytest.fixture(scope="module")
def zoo_bundles(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("zoo")
    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            model, example_inputs = ZOO[name].build()
            bundle = export_reused(model, example_inputs)
            cache[name] = (model, example_inputs, bundle, bundle.save(Path(folder) / f"{name}.dycl"))
        return cache[name]

    return get


@pytest.mark.parametrize("name", NAMES)
def test_zoo_model_matches_pytorch_on_every_path(name: str, zoo_bundles) -> None:
    model, example_inputs, bundle, path = zoo_bundles(name)
    assert bundle.host == ("python" if name in PYTHON_HOST else "compiled"), bundle.manifest[
        "compiled_host_unsupported"
    ]
    samples = ZOO[name].samples()
    for host in (["compiled"] if bundle.host == "compiled" else []) + ["python"]:
        # The trace's mismatches are asserted once, below, on the last report: tracing and running the
        # trace again for the compiled host's report changed nothing but the time.
        trace = example_inputs if host == "python" else None
        report = verify(model, samples, path, host=host, trace_example=trace, name=name)
        assert report.mismatched_samples == 0, report.format()
        assert not report.uncovered, report.format()
        assert report.labels_agree == report.labels_total
    # Tracing freezes one path: on these samples it must be wrong somewhere, or the samples
    # would not be exercising the dynamic behaviour at all.
    assert report.trace_mismatches > 0, report.format()
