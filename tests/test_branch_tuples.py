"""Tuples whose parts differ between the two sides of a data-dependent branch.

A state that one side sets to a literal (`(torch.zeros(1, 4), torch.ones(1, 4))`, which TorchScript
folds into one constant tuple) lines up item by item with the other side's tuple; parts whose sizes
differ between the sides become dynamic dims. Where the structures truly differ, the refusal names
the part and says how it differs, at the model's line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

import dycl_iree
from dycl_iree.program import ScalarType, TensorType, Value
from dycl_iree.specialize.values import TupleEntry, structure_difference


class ResetState(nn.Module):
    """A recurrent-style state reset to a literal tuple when the input is quiet."""

    def forward(self, x):
        if bool(x.sum() > 0):
            state = (x * 2.0, x * 3.0)
        else:
            state = (torch.zeros(1, 4), torch.ones(1, 4))
        return state[0] + state[1]


class CropEither(nn.Module):
    """Returns a pair whose parts are cropped differently on each side (detection heads that keep
    a different number of columns per branch)."""

    def forward(self, x):
        if bool(x.sum() > 0):
            pair = (x, x[:, :2])
        else:
            pair = (x[:, :3], x)
        return pair


def _hosts(tmp_path, model, name):
    bundle = dycl_iree.export(model.eval(), (torch.randn(1, 4),))
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    path = bundle.save(tmp_path / f"{name}.dycl")
    return bundle, dycl_iree.load(path, host="compiled"), dycl_iree.load(path, host="python", record=True)


def test_a_literal_tuple_on_one_side_lines_up_with_the_other(tmp_path):
    bundle, compiled, python = _hosts(tmp_path, ResetState(), "reset")
    scripted = torch.jit.script(ResetState())
    for x in (torch.ones(1, 4), -torch.ones(1, 4)):
        want = scripted(x).numpy()
        for host in (compiled, python):
            np.testing.assert_allclose(host(x.numpy()), want)
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 1}


def test_tuple_parts_of_different_sizes_are_joined_into_dynamic_dims(tmp_path):
    bundle, compiled, python = _hosts(tmp_path, CropEither(), "crop")
    # Each part's second dim differs between the sides: both leave the branch dynamic there.
    assert [leaf.type.shape for leaf in bundle.program.body.results] == [(1, None), (1, None)]
    scripted = torch.jit.script(CropEither())
    for x, widths in ((torch.ones(1, 4), (4, 2)), (-torch.ones(1, 4), (3, 4))):
        want = scripted(x)
        for host in (compiled, python):
            got = host(x.numpy())
            assert isinstance(got, tuple) and tuple(np.shape(g)[1] for g in got) == widths
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w.numpy())
    (label,) = python.decisions
    assert dict(python.decisions[label]) == {True: 1, False: 1}


@pytest.mark.parametrize(
    "then_items, else_items, expected",
    [
        (2, 3, "result 0 is a tuple of 2 on one side and a tuple of 3 on the other"),
        ("int", "tensor", "result 0, element 1 is an int on one side and a tensor float32[1, 4] on the other"),
    ],
)
def test_a_refusal_names_the_part_that_differs_and_how(then_items, else_items, expected):
    tensor = Value(0, TensorType("float32", (1, 4), (1, 4)), "x")
    count = Value(1, ScalarType("int", 1), "n")

    def made(items):
        if items == "int":
            return TupleEntry((tensor, count))
        if items == "tensor":
            return TupleEntry((tensor, tensor))
        return TupleEntry((tensor,) * items)

    assert structure_difference([made(then_items)], [made(else_items)], ["result 0"]) == expected
    assert structure_difference([made(2)], [made(2)], ["result 0"]) == ""
