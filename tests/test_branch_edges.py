"""One tensor on two edges of a branch: the compiled host against PyTorch (fuzzer seeds 74279, 74280)."""

from __future__ import annotations

from typing import List

import numpy as np
import torch
from torch import nn

import dycl_iree


class _ListReturnedFromTwoPlaces(nn.Module):
    """A list returned from inside the first loop and after the last (fuzzer seed 74280, cut down).

    The `if` that joins the early `return` with the end of `forward` has a side that yields the list
    twice (as what `return` gives back and as the variable): IREE 3.13's VM moved the one buffer ref
    into the first slot and the second read null ("INVALID_ARGUMENT; ref is null; while invoking
    native function hal.buffer_view.create"), or a dispatch read a null binding ("indirect buffer
    reference slot 0 is out range", seed 74279: `acc = h` returned from a nested loop), on most
    inputs that ran every loop. A side now yields a copy for the second (`control_flow.distinct`)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 8)
        self.other = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor):
        h = x
        li: List[int] = []  # noqa: UP006  (the spelling the fuzzer writes)
        for _ in range(3):
            h = torch.tanh(self.layer(h))
            if float(h.abs().sum()) > 12.0:
                return h, li
        for _ in range(4):
            li.append(int(h.argmax()))
            if float(h.sum()) < 0.5:
                h = torch.tanh(h)
                break
        for _ in range(5):
            if bool(h.norm() > 1.2):
                break
            h = self.other(h)
            li.append(int(h.argmax()))
        return h, li


def test_a_list_yielded_twice_by_one_side_of_an_if(tmp_path) -> None:
    torch.manual_seed(0)
    model = _ListReturnedFromTwoPlaces().eval()
    bundle = dycl_iree.export(model, (torch.randn(3, 8),), dynamic_shapes={"x": {0: "batch"}})
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / "twice.dycl")
    generator = torch.Generator().manual_seed(1)
    inputs = [torch.randn(1 + i % 4, 8, generator=generator) * (0.3 + 0.4 * i) for i in range(10)]
    returned_early = {len(model(x)[1]) == 0 for x in inputs}
    assert returned_early == {True, False}  # the `return` inside the first loop, and the end
    for host in ("compiled", "python"):
        run = dycl_iree.load(path, host=host)
        for x in inputs:
            want_h, want_li = model(x)
            got_h, got_li = run(x.numpy())
            np.testing.assert_allclose(got_h, want_h.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=host)
            assert list(got_li) == want_li, host
