"""Transient buffers reused between calls on the CPU drivers (`host_runtime.runner.reuses_buffers`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import as_numpy, assert_matches


def _manifest(*shapes: list) -> dict:
    """A manifest with one segment per shape, that segment's one output of that shape."""
    segments = [
        {"name": f"seg{i}", "inputs": [], "outputs": [{"kind": "tensor", "shape": shape}]}
        for i, shape in enumerate(shapes)
    ]
    return {"segments": segments}


def test_only_static_bundles_on_the_cpu_drivers_reuse_buffers_by_default(exported):
    from host_runtime import load
    from host_runtime.runner import reuses_buffers

    static, dynamic = _manifest([1, 8], [], [2, 3]), _manifest([1, 8], [None, 512])
    assert [reuses_buffers(static, driver) for driver in ("local-sync", "local-task", "vulkan", "cuda")] == [
        True,
        True,
        False,
        False,
    ]
    assert not reuses_buffers(dynamic, "local-sync")
    assert reuses_buffers({"segments": [{"name": "seg0", "inputs": [{"kind": "int"}], "outputs": []}]}, "local-sync")
    grown = {**static, "outputs": {"tree": 0, "leaves": [{"kind": "tensor", "shape": [None]}]}}
    assert not reuses_buffers(grown, "local-sync")  # a result whose size the run decides
    assert load(exported("early_exit").path).reuse_buffers  # [1, 8] in, [1, 4] out, branches
    assert not load(exported("greedy_decoder").path).reuse_buffers  # as many tokens as its loop ran


@pytest.mark.parametrize("host", ["compiled", "python"])
def test_reused_buffers_give_pytorch_results_on_both_sides_of_every_branch(exported, host):
    """Calls alternate between the samples, so each side's buffers serve calls that take the other
    side too; both sides ran (the recording Python host counts them), and every result matches."""
    from host_runtime import load

    item = exported("early_exit")
    reusing = load(item.path, host=host, reuse_buffers=True)
    plain = load(item.path, host=host, reuse_buffers=False)
    recording = load(item.path, host="python", record=True, reuse_buffers=True)
    samples = item.samples()
    for round in range(3):
        for inputs in samples[round % 2 :] + samples[: round % 2]:
            expected = item.reference(*inputs)
            assert_matches(reusing(*as_numpy(inputs)), expected, f"{host}, reused buffers")
            assert_matches(plain(*as_numpy(inputs)), expected, f"{host}, new buffers")
            assert_matches(recording(*as_numpy(inputs)), expected, "python host, recording")
    assert all(sides[True] and sides[False] for sides in recording.decisions.values()), recording.decisions


def test_a_dynamic_bundle_forced_to_reuse_buffers_still_matches(exported):
    """Sizes that change with a loop's trip count find few buffers of their size, which costs time,
    never results."""
    from host_runtime import load

    item = exported("greedy_decoder")
    run = load(item.path, reuse_buffers=True)
    for inputs in item.samples() + item.samples()[::-1]:
        assert_matches(run(*as_numpy(inputs)), item.reference(*inputs), "greedy decoder, reused buffers")


def test_repeated_calls_allocate_no_new_transient_memory(exported):
    """The device allocator's count of bytes allocated: without reuse every call adds its transient
    buffers; with it, calls after the first take them from the cache."""
    from host_runtime import load

    item = exported("early_exit")
    inputs = as_numpy(item.samples()[0])
    grown = {}
    for reuse in (False, True):
        run = load(item.path, reuse_buffers=reuse)
        allocator = run._context.config.device.allocator
        run(*inputs)
        before = allocator.statistics["device_bytes_allocated"]
        for _ in range(5):
            run(*inputs)
        grown[reuse] = allocator.statistics["device_bytes_allocated"] - before
    assert grown[False] > 0
    assert grown[True] < grown[False] / 4, grown


@pytest.mark.parametrize(
    "runners",
    [
        [("compiled", True)],
        [("compiled", False), ("compiled", True)],
        [("compiled", False), ("compiled", True), ("python", True)],
    ],
    ids=["one reusing", "plain and reusing", "both hosts"],
)
def test_the_process_exits_cleanly_with_reusing_runners_alive(exported, runners):
    """A buffer from IREE's cache is released into its allocator, which the buffer does not hold:
    the runners' buffers must go before their device, which Python's order at exit does not ensure
    (the first two sets of runners crashed the interpreter at exit before the exit handler released
    them in order)."""
    item = exported("early_exit")
    script = textwrap.dedent(
        f"""
        import numpy as np
        from host_runtime import load
        x = np.zeros((1, 8), np.float32)
        runners = [load({str(item.path)!r}, host=host, reuse_buffers=reuse) for host, reuse in {runners!r}]
        results = [run(x) for run in runners for _ in range(3)]
        print("called")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.strip() == "called"
    assert "leaked" not in done.stderr, done.stderr[-2000:]


def test_runners_loaded_at_once_from_several_threads_share_one_device(exported):
    """One caching device per driver, also when the first loads race (the exit handler releases the
    runners of the devices it knows before those devices)."""
    import threading

    from host_runtime import load
    from host_runtime.runner import _REUSING_DEVICES

    item = exported("early_exit")
    runners: list = []
    start = threading.Barrier(4)

    def worker() -> None:
        start.wait()
        runners.append(load(item.path, device="local-task", reuse_buffers=True))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    devices = {id(run._context.config.device) for run in runners}
    assert len(runners) == 4 and devices == {id(_REUSING_DEVICES["local-task"])}
