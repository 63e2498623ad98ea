"""A float tensor compared with a Python number is compared in the tensor's dtype, as PyTorch does.

PyTorch casts the number to the tensor's dtype: `torch.tensor([0.1]) > 0.1` is False, since 0.1 in
float32 is the tensor's own value. torch-mlir lowers `aten.gt.Scalar` and its kind by widening the
tensor to float64 and comparing with the number in float64, where float32's 0.1 (0.100000001...) is
greater than 0.1: masks and decisions at such a threshold came out the other way, silently. The
exporter decomposes those comparisons into ones with a 0-d tensor of the tensor's dtype
(`decompositions.with_number_in_its_dtype`).
"""

from __future__ import annotations

import torch
from torch import nn

from .conftest import check_hosts, export_compiled


class Thresholds(nn.Module):
    """Each comparison of a float32 tensor with a number that float32 rounds, as a mask and as a
    decision: the six operators, with floats and ints, and a clamp and a ReLU6 (whose comparisons
    with their bounds the exporter writes with the same ops, `nan_keeping.clamp_keeping_nan`), and
    `fmod` by a number, which torch-mlir does not lower."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        masks = torch.stack(
            [x > 0.1, x >= 0.3, x < 0.7, x <= 0.1, x == 0.3, x != 0.7, x > 2, x <= 1]
        ).to(torch.float32)
        if bool((x > 0.1).all()):
            y = x * 2.0
        else:
            y = x - 1.0
        clamped = torch.nn.functional.relu6(self.linear(x) * 10.0) + torch.clamp(x, 0.1, 0.7)
        return masks, y, clamped + torch.fmod(x, 0.3)  # fmod.Scalar: no lowering of its own


def test_a_float32_tensor_compared_with_a_number_is_compared_in_float32(tmp_path):
    torch.manual_seed(0)
    model = Thresholds().eval()
    example = (torch.tensor([0.1, 0.3, 0.7, 2.0]),)
    _, scripted, compiled, python = export_compiled(tmp_path, model, example, "thresholds")
    # Every element sits at a threshold, so float64 comparisons would flip each mask and the branch.
    at_thresholds = torch.tensor([0.1, 0.3, 0.7, 1.0])
    above = torch.tensor([0.2, 0.4, 0.8, 3.0])
    for inputs in ((at_thresholds,), (above,)):
        check_hosts(scripted, [compiled, python], inputs)
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {False: 1, True: 1}, python.decisions
    masks = scripted(at_thresholds)[0]
    assert masks[0, 0].item() == 0.0  # the premise: 0.1 > 0.1 is False in float32 (True in float64)


class Remainders(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return torch.fmod(x, y), torch.fmod(x, 0.3), torch.remainder(x, y)


def test_fmod_near_a_multiple_is_pytorchs_exact_remainder(tmp_path):
    """3.0 / 0.3 rounds to 10 in float32: IREE's a - b * trunc(a / b) gave -1.2e-7 for fmod(3.0, 0.3),
    where PyTorch's (C's fmod) gives 0.2999999; the exporter computes float32 fmod in float64
    (`decompositions.fmod_of_float32_in_float64`)."""
    torch.manual_seed(0)
    x = torch.cat([torch.tensor([3.0, -3.0, 6.0, 0.9, 7.5, 1e6]), torch.randn(58) * 100])
    y = torch.full_like(x, 0.3)
    _, scripted, compiled, python = export_compiled(tmp_path, Remainders().eval(), (x, y), "remainders")
    want = check_hosts(scripted, [compiled, python], (x, y))
    assert want[0][0].item() > 0.29  # the premise: PyTorch's fmod(3.0, 0.3) is 0.2999999
    for host in (compiled, python):  # bit for bit
        for got, expected in zip(host(x.numpy(), y.numpy()), want):
            assert (got == expected.numpy()).all()
