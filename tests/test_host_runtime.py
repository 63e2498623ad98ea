"""host_runtime's read-backs: a buffer on the device comes back as the same values, dtype and shape."""

from __future__ import annotations

import numpy as np
import pytest

from host_runtime.invoke import element_type_of, scalar_reader, to_numpy, to_scalar, upload
from tests.conftest import as_numpy


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


@pytest.mark.parametrize("convert", [bool, int, float])
@pytest.mark.parametrize(
    "array",
    [np.array(True), np.array([[-7]], np.int64), np.array([[1.5]], np.float32), np.array([[0.5]], np.float16)],
    ids=lambda array: f"{array.dtype}{list(array.shape)}",
)
def test_scalar_reader_reads_as_to_scalar(device, array, convert):
    """The Python host's `to_bool`/`to_int`/`to_float` read what `to_scalar` reads, float16 (no
    memoryview code: the general path) and a numpy array (returned by a host as it is) included."""
    read = scalar_reader(convert)
    value = read(upload(device, array, element_type_of(array.dtype)))
    assert type(value) is convert and value == convert(array.item())
    assert read(array) == convert(array.item())


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


# -- inputs staged in buffers reused every call (host_runtime/staging.py) ------------------------------


@pytest.mark.parametrize(
    "name, host, staged",
    [
        ("early_exit", "compiled", True),
        ("scalar_inputs", "compiled", True),  # int, float and bool inputs staged as 0-d tensors
        ("greedy_decoder", "python", True),  # tensors staged, the int passed as it comes
        ("for_range", "python", True),  # a loop that runs zero times returns the staged input itself
        ("dynamic_batch", "compiled", False),  # a dynamic dim: no fixed buffer, the general path
    ],
)
def test_static_inputs_are_staged_and_match_pytorch(exported, name, host, staged):
    """Both paths (staged, and the general one forced) give the scripted model's outputs on every sample."""
    import host_runtime
    from tests.conftest import assert_matches

    item = exported(name)
    run = host_runtime.load(item.path, host=host)
    assert (run._call_staged is not None) is staged
    general = host_runtime.load(item.path, host=host)
    general._call_staged = None
    for inputs in item.samples():
        expected = item.reference(*inputs)
        assert_matches(run(*as_numpy(inputs)), expected, f"{name} staged")
        assert_matches(general(*as_numpy(inputs)), expected, f"{name} general")


@pytest.mark.parametrize("host", ["compiled", "python"])
def test_staged_results_are_copies_and_bad_input_gets_the_same_errors(exported, host):
    """A result read after the next call still holds its own values (the staging buffers and the
    reused results lists are not visible through it), and bad input is refused before any copy."""
    import host_runtime
    from host_runtime.errors import InputError
    from tests.conftest import assert_matches

    item = exported("early_exit")
    run = host_runtime.load(item.path, host=host)
    samples = item.samples()
    first = run(*as_numpy(samples[0]))
    run(*as_numpy(samples[-1]))
    assert_matches(first, item.reference(*samples[0]), "first result after a second call")
    x = samples[0][0].numpy()
    with pytest.raises(InputError, match="dtype float32"):
        run(x.astype(np.float64))
    with pytest.raises(InputError, match="takes 1 inputs"):
        run(x, x)
    with pytest.raises(InputError, match="size 8 in dim 1"):
        run(np.zeros((1, 9), np.float32))
    assert np.array_equal(run._staging.arrays[0], samples[-1][0].numpy())  # nothing copied by a refused call
    wide = np.zeros((1, 16), np.float32)
    wide[:, ::2] = x
    assert_matches(run(wide[:, ::2]), item.reference(*samples[0]), "a strided input")  # any layout


@pytest.mark.parametrize("host", ["compiled", "python"])
def test_calls_from_several_threads_get_their_own_results(exported, host):
    """Calls that find the staging buffers held by another thread's call take the general path (on
    the Python host, the host whose segments keep no lists between calls)."""
    import threading

    import host_runtime
    from tests.conftest import flatten

    item = exported("early_exit")
    run = host_runtime.load(item.path, host=host)
    samples = [as_numpy(inputs) for inputs in item.samples()]
    expected = [flatten(run(*inputs)) for inputs in samples]

    def same(outputs: tuple, which: int) -> bool:
        return all(np.array_equal(a, b) for a, b in zip(flatten(outputs), expected[which]))

    assert run._staging.try_acquire()  # held: a call now takes the general path
    try:
        assert same(run(*samples[1]), 1)
    finally:
        run._staging.release()
    wrong: list[int] = []

    def worker(offset: int) -> None:
        for index in range(200):
            which = (index + offset) % len(samples)
            if not same(run(*samples[which]), which):
                wrong.append(which)

    threads = [threading.Thread(target=worker, args=(offset,)) for offset in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


def test_the_staged_call_is_straight_line_code_and_counts_decisions(exported):
    """The staged call is generated per bundle without loops (one copy per input, one read per
    output leaf), and the Python host it runs counts its decisions where `decisions` reads them:
    the staged path and the general path record the same sides for the same samples."""
    import host_runtime
    from tests.conftest import assert_matches

    item = exported("early_exit")
    samples = [as_numpy(inputs) for inputs in item.samples()]
    compiled = host_runtime.load(item.path, host="compiled")
    source = compiled._call_staged.source
    assert "for " not in source and source.count("array0[...] = ") == 2
    assert source.count("= get(") == len(compiled.outputs) and "invoke(function, arguments, results)" in source
    counts = []
    for staged in (True, False):
        run = host_runtime.load(item.path, host="python", record=True)
        if not staged:
            run._call_staged = None
        for inputs, original in zip(samples, item.samples()):
            assert_matches(run(*inputs), item.reference(*original), f"staged={staged}")
        counts.append({label: dict(sides) for label, sides in run.decisions.items()})
    assert counts[0] == counts[1]
    assert counts[0] and all(set(sides) == {True, False} for sides in counts[0].values()), counts[0]


def test_only_small_static_segment_results_are_kept_between_calls(exported, monkeypatch):
    """A segment's results list is kept between staged calls (holding its last results) only when
    those results are static tensors of at most 64 KiB together; with none kept the staged Python
    host still matches PyTorch."""
    import host_runtime
    from host_runtime import runner
    from tests.conftest import assert_matches

    tensor = {"kind": "tensor", "dtype": "float32"}
    segments = [
        {"name": "small", "outputs": [{**tensor, "shape": [1, 8]}, {**tensor, "shape": [127, 128]}]},
        {"name": "large", "outputs": [{**tensor, "shape": [1, 8]}, {**tensor, "shape": [128, 128]}]},
        {"name": "dynamic", "outputs": [{**tensor, "shape": [None, 8]}]},
        {"name": "none", "outputs": []},
    ]
    assert runner._small_results(segments) == {"small", "none"}
    item = exported("early_exit")
    monkeypatch.setattr(runner, "_KEPT_RESULT_BYTES", -1)
    run = host_runtime.load(item.path, host="python")
    assert run._call_staged is not None
    for inputs in item.samples():
        assert_matches(run(*as_numpy(inputs)), item.reference(*inputs), "no results list kept")
