"""float64 tensors and host floats keep their precision on both hosts.

IREE demotes float64 to float32 unless told not to: a float64 output then came back as an
OUT_OF_RANGE error (a 48-byte view over a 24-byte buffer), and a host float read from a float64
tensor lost the digits a decision may turn on. Scientific and signal-processing code computes in
float64 on purpose (`x.double()` before a sum of many terms).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import dycl_iree
import host_runtime
from tests.conftest import assert_matches


class CompensatedEnergy(nn.Module):
    """Energy of a signal in float64, thresholded: the decision depends on digits float32 drops."""

    def forward(self, signal: torch.Tensor):
        energy = float((signal.double() ** 2).sum())
        if energy > 1.0:
            return signal.double() / energy, energy
        return signal.double() * 2.0, energy


def test_float64_outputs_and_host_floats_on_both_hosts(tmp_path) -> None:
    model = CompensatedEnergy().eval()
    bundle = dycl_iree.export(model, (torch.full((4,), 0.6),))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / "energy.dycl")
    scripted = torch.jit.script(model)
    # Energy 1 + 2**-26 in float64, 1.0 in float32: the branch would flip if the sum were demoted.
    just_above = torch.tensor([1.0, 2.0**-13, 0.0, 0.0])
    cases = [torch.full((4,), 0.6), torch.full((4,), 0.1), just_above]
    for host in ("python", "compiled"):
        recorder = host_runtime.load(path, host="python", record=True)
        run = host_runtime.load(path, host=host)
        for signal in cases:
            got, energy = run(signal.numpy())
            want, want_energy = scripted(signal)
            recorder(signal.numpy())
            assert got.dtype == np.float64
            assert_matches((got, energy), (want, want_energy), f"{host} host, {signal.tolist()}")
            # Read from a float64 sum, exactly; `main` returns a float as a 0-d float32 tensor (its
            # ABI, C's `float`), but decides on the float64 value inside.
            assert energy == (want_energy if host == "python" else float(np.float32(want_energy)))
        ((label, sides),) = recorder.decisions.items()
        assert sides[True] == 2 and sides[False] == 1, (label, dict(sides))
    assert float((just_above.double() ** 2).sum()) > 1.0 == float((just_above**2).sum())  # just above, in float64 only
