"""A tensor computed before a loop with an exit, read by the loop, with a dynamic batch (fuzzer seed 75295)."""

from __future__ import annotations

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
