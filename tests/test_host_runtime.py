"""host_runtime's read-backs: a buffer on the device comes back as the same values, dtype and shape."""

from __future__ import annotations

import numpy as np
import pytest

from host_runtime.invoke import element_type_of, to_numpy, to_scalar, upload


@pytest.fixture(scope="module")
def device():
    import iree.runtime as ireert

    return ireert.get_device("local-sync")


ARRAYS = {
    "float32 2x3": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5,
    "float64 0-d": np.array(-1.25),
    "float16 1x1": np.array([[2.5]], dtype=np.float16),
    "int64": np.array([-(2**40), 7], dtype=np.int64),
    "int32 0-d": np.array(-3, dtype=np.int32),
    "int8": np.array([-128, 127], dtype=np.int8),
    "uint8": np.array([0, 255], dtype=np.uint8),
    "bool": np.array([True, False, True]),
    "empty": np.zeros((0, 4), dtype=np.float32),
}


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_to_numpy_round_trips(device, name):
    array = ARRAYS[name]
    buffer = upload(device, array, element_type_of(array.dtype))
    back = to_numpy(buffer)
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)
    back[...] = 0  # a copy: the device buffer is not changed through it
    np.testing.assert_array_equal(to_numpy(buffer), array)


@pytest.mark.parametrize(
    "array",
    [
        np.array(True),
        np.array([False]),
        np.array([[1.5]], np.float32),
        np.array(0.1),
        np.array([[-7]], np.int64),
        np.array(3, np.int32),
        np.array([200], np.uint8),
        np.array([[0.5]], np.float16),
    ],
    ids=lambda array: f"{array.dtype}{list(array.shape)}",
)
def test_to_scalar_reads_any_one_element_tensor(device, array):
    value = to_scalar(upload(device, array, element_type_of(array.dtype)))
    assert type(value) is type(array.item()) and value == array.item()


# -- the compiled host's calling convention (main_abi 2) -------------------------------------------


def test_the_compiled_host_passes_and_reads_scalars_as_0d_tensors(exported):
    """`main` takes an int, float and bool as 0-d int64, float32 and bool arrays and returns its
    scalars as 0-d tensors; ints beyond 32 bits and negative ones come back exact."""
    import host_runtime

    item = exported("scalar_inputs")
    assert item.bundle.host == "compiled"
    run = host_runtime.load(item.path, host="compiled")
    x = item.samples()[0][0]
    arguments = run.check_inputs((x.numpy(), -5_000_000_000, 0.5, False))
    assert [(a.dtype, a.shape) for a in arguments[1:]] == [
        (np.dtype(np.int64), ()), (np.dtype(np.float32), ()), (np.dtype(np.bool_), ())
    ]
    for n, scale, flag in [(-5_000_000_000, 0.5, False), (2**40, -1.25, True), (-1, 3.0, True)]:
        y, (n_plus_one, total), positive = run(x.numpy(), n, scale, flag)
        expected_y, (expected_n, expected_total), expected_positive = item.reference(x, n, scale, flag)
        np.testing.assert_allclose(y, expected_y.numpy(), rtol=1e-6)
        assert type(n_plus_one) is int and n_plus_one == expected_n == n + 1
        assert type(total) is float and total == pytest.approx(expected_total, rel=1e-5)
        assert type(positive) is bool and positive == expected_positive
