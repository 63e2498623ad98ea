"""Values no buffer can hold, and NaN / inf: a clear error or PyTorch's answer on both hosts, never a crash."""

from __future__ import annotations

import numpy as np
import pytest

import dycl_iree

from .conftest import assert_matches

HOSTS = ("compiled", "python")


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("n", [2**63, 2**64 + 5, -(2**63) - 1, np.uint64(2**63)])
def test_an_int_beyond_int64_is_an_input_error(exported, host: str, n: int) -> None:
    item = exported("scalar_inputs")
    x = item.samples()[0][0]
    run = dycl_iree.load(item.path, host=host)
    with pytest.raises(dycl_iree.InputError, match=r"input 1 \('n'\) is -?\d+, outside the int64 range"):
        run(x.numpy(), n, 0.5, True)


@pytest.mark.parametrize("host", HOSTS)
def test_the_ends_of_the_int64_range_still_run(exported, host: str) -> None:
    item = exported("scalar_inputs")
    x = item.samples()[0][0]
    run = dycl_iree.load(item.path, host=host)
    for n in (-(2**63), 2**63 - 2, np.int64(-(2**63))):
        assert_matches(run(x.numpy(), n, 0.5, True), item.reference(x, int(n), 0.5, True), f"{host} n={n}")
