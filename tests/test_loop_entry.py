"""Tensors made before a loop: read by the loop (fuzzer seed 75295), or after it (seed 74203)."""

from __future__ import annotations

from typing import List

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import dycl_iree


class _RefineThenStop(nn.Module):
    """Pool a summary into the rows, then refine until the total passes a threshold (seed 75295,
    cut down). The compiled host returned the same rows for every input, as if the loop had started
    from zeros: behind the barrier that keeps its sizes from being narrowed (`control_flow._dynamic`),
    the tensor computed before the loop reached the body as a zero tensor. Only the sizes pass a
    barrier now, for a tensor the body reads and does not grow."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor):
        h = F.adaptive_avg_pool1d(x.unsqueeze(1), 1).view(-1, 1) + x
        steps = 0
        for _ in range(4):
            h = self.layer(h)
            steps += 1
            if h.sum() > 2.0:
                h = torch.sigmoid(h) * 2.0 - 1.0
                break
            else:
                h = torch.clamp(h, -1.0, 1.0) + h * 0.5
                h = torch.softmax(h, 1) * 2.0 - 0.5
        return h, steps


def test_a_tensor_computed_before_a_loop_with_a_break(tmp_path) -> None:
    torch.manual_seed(0)
    model = _RefineThenStop().eval()
    bundle = dycl_iree.export(model, (torch.randn(3, 6),), dynamic_shapes={"x": {0: "batch"}})
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / "refine.dycl")
    generator = torch.Generator().manual_seed(2)
    inputs = [torch.randn(1 + i % 4, 6, generator=generator) * (0.5 + i) for i in range(8)]
    inputs.append(torch.full((2, 6), 40.0))  # a break at the first step
    steps = {model(x)[1] for x in inputs}
    assert 1 in steps and 4 in steps, steps  # a break at once, and every step without one
    for host in ("compiled", "python"):
        run = dycl_iree.load(path, host=host)
        for x in inputs:
            want_h, want_steps = model(x)
            got_h, got_steps = run(x.numpy())
            np.testing.assert_allclose(got_h, want_h.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=host)
            assert got_steps == want_steps, host


class _FirstAndLast(nn.Module):
    """Keep a scaled copy of the input, refine it `n` times, return both stacked (fuzzer seed 74203,
    cut down). iree-compile failed on the compiled host ("operand #1 does not dominate this use"):
    IREE moved the copy's dispatch to write into the concatenation's buffer, which the loop sizes.
    A tensor made before a loop and read after it goes through a barrier there."""

    def forward(self, x: torch.Tensor, n: int):
        h = x
        kept: List[torch.Tensor] = []  # noqa: UP006  (the spelling the fuzzer writes)
        kept.append(h * 0.5)
        h = h * float(h.norm())
        steps = 0
        for _ in range(n):
            for _ in range(2):
                h = F.log_softmax(h, 1) * 0.5
            steps += 1
        return h, torch.cat(kept + [h], 0), steps


def test_a_tensor_made_before_a_loop_and_concatenated_after_it(tmp_path) -> None:
    model = _FirstAndLast()
    example = (torch.randn(2, 6, generator=torch.Generator().manual_seed(3)), 2)
    bundle = dycl_iree.export(model, example, dynamic_shapes={"x": {0: "batch"}})
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / "first_and_last.dycl")
    generator = torch.Generator().manual_seed(4)
    cases = [(torch.randn(1 + i % 3, 6, generator=generator), i % 3) for i in range(6)]
    assert {model(x, n)[2] for x, n in cases} == {0, 1, 2}  # the loop ran 0, 1 and 2 times
    for host in ("compiled", "python"):
        run = dycl_iree.load(path, host=host)
        for x, n in cases:
            want_h, want_both, want_steps = model(x, n)
            got_h, got_both, got_steps = run(x.numpy(), n)
            np.testing.assert_allclose(got_h, want_h.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{host} {n}")
            np.testing.assert_allclose(got_both, want_both.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{host} {n}")
            assert got_steps == want_steps, host
