"""iree-compile errors on the compiled host that one more flag avoids (`compile.WORKAROUNDS`)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import dycl_iree
from dycl_iree import lower, pipeline
from dycl_iree.compile import WORKAROUNDS


class _TwoSearchesPerStep(nn.Module):
    """Two `while` loops on `argmax` in each step of a `for` (fuzzer seeds 74219, 75057, cut down).

    Both argmax segments build the same `arange` (argmax that keeps NaN, `nan_keeping.py`); IREE's
    CSE makes them one dispatch without operands, and its stream partitioning leaves that dispatch
    outside every execution region: "'stream.async.dispatch' op : streamable op expected to be in
    an execution region". Compiled again with aggressive fusion, it is fused into its consumers.
    For CPU targets the range is a literal now (`constant_ranges.py`), and there is no such dispatch;
    GPU targets keep it, and the flag."""

    def forward(self, x: torch.Tensor, n: int):
        h = x
        first = 0
        second = 0
        for _ in range(n):
            j = 0
            while int(h.argmax()) > 0 and j < 3:
                h = torch.relu(h) - 0.25
                j += 1
            first += j
            k = 0
            while int(h.argmax()) > 1 and k < 3:
                h = torch.relu(h) - 0.5
                k += 1
            second += k
        return h, first, second


def _cases() -> list[tuple[torch.Tensor, int]]:
    generator = torch.Generator().manual_seed(1)
    cases = [(torch.randn(2, 6, generator=generator) * (0.5 + i), i % 4) for i in range(8)]
    cases.append((torch.zeros(2, 6).index_fill_(1, torch.tensor([0]), 1.0), 2))  # argmax 0: no search runs
    return cases


def _check_both_hosts(model: nn.Module, path) -> None:
    cases = _cases()
    counts = [model(x, n)[1:] for x, n in cases]
    assert any(first > 0 for first, _ in counts) and any(second > 0 for _, second in counts)
    assert any(first == second == 0 for first, second in counts)
    for host in ("compiled", "python"):
        run = dycl_iree.load(path, host=host)
        for x, n in cases:
            want_h, want_first, want_second = model(x, n)
            got_h, got_first, got_second = run(x.numpy(), n)
            np.testing.assert_allclose(got_h, want_h.numpy(), rtol=1e-6, err_msg=f"{host} n={n}")
            assert (got_first, got_second) == (want_first, want_second), host


def test_a_range_known_at_export_leaves_no_trap_for_the_flag_on_the_cpu(tmp_path) -> None:
    model = _TwoSearchesPerStep()
    bundle = dycl_iree.export(model, (torch.randn(2, 6, generator=torch.Generator().manual_seed(0)), 2))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    assert WORKAROUNDS[0][1] not in bundle.manifest["targets"]["llvm-cpu"]["flags"]
    _check_both_hosts(model, bundle.save(tmp_path / "searches.dycl"))


def test_a_known_compile_trap_is_compiled_again_with_its_flag(tmp_path, monkeypatch) -> None:
    """The ranges as GPU targets keep them (a dispatch each), so that the trap is there on the CPU."""
    monkeypatch.setattr(lower, "fold_ranges_in", lambda function, context: 0)
    model = _TwoSearchesPerStep()
    example = (torch.randn(2, 6, generator=torch.Generator().manual_seed(0)), 2)
    text, flag = WORKAROUNDS[0]
    with monkeypatch.context() as patch:  # the trap is still there without its flag
        patch.setattr(pipeline, "workaround_for", lambda diagnostic: None)
        fallback = dycl_iree.export(model, example)
    assert fallback.host == "python" and text in fallback.manifest["compiled_host_unsupported"]
    bundle = dycl_iree.export(model, example)
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    assert flag in bundle.manifest["targets"]["llvm-cpu"]["flags"]
    _check_both_hosts(model, bundle.save(tmp_path / "searches.dycl"))
