"""verify: it must report what is wrong, not only pass what is right."""

from __future__ import annotations

import numpy as np
import torch

from dycl_iree.verify import compare, random_inputs, verify
from models import programs


def test_a_path_the_samples_never_take_is_reported(exported) -> None:
    item = exported("for_break")
    samples = programs.SAMPLES["for_break"]()
    report = verify(item.model, samples[:1], item.path, host="compiled")
    assert report.mismatched_samples == 0
    assert not report.ok
    assert any("never" in line for line in report.uncovered)  # the break was never taken
    assert any("always ran" in line for line in report.uncovered)  # one sample: one trip count
    assert verify(item.model, samples, item.path, host="compiled").ok


def test_trace_baseline_counts_the_samples_a_trace_gets_wrong(exported) -> None:
    item = exported("early_exit")
    samples = item.samples()
    report = verify(item.model, samples, item.path, host="compiled", trace_example=item.example_inputs)
    exits = [item.reference(*sample)[1] for sample in samples]
    traced_exit = item.reference(*item.example_inputs)[1]
    assert report.trace_mismatches == sum(exit_index != traced_exit for exit_index in exits) > 0


def test_compare_rejects_wrong_values_shapes_and_types() -> None:
    expected = (torch.tensor([1.0, 2.0]), 3)
    assert compare((np.array([1.0, 2.0], np.float32), 3), expected, [])
    assert not compare((np.array([1.0, 2.1], np.float32), 3), expected, [])
    assert not compare((np.array([1.0, 2.0, 0.0], np.float32), 3), expected, [])
    assert not compare((np.array([1.0, 2.0], np.float32), 4), expected, [])
    assert not compare((np.array([1.0, 2.0], np.float32), 3.0), expected, [])


def test_random_inputs_vary_int_float_and_bool_inputs() -> None:
    example = (torch.zeros(2, 3), 3, 0.5, True, -4)
    samples = random_inputs(example, 40, seed=1)
    for position, kind in ((1, int), (2, float), (3, bool), (4, int)):
        values = {sample[position] for sample in samples}
        assert all(type(value) is kind for value in values)
        assert len(values) > 1, f"input {position} never varies"
    assert {sample[1] for sample in samples} <= set(range(0, 8))  # a count stays a count: 0 .. 2n + 1
    assert all(sample[4] <= 0 for sample in samples)  # a negative example keeps its sign


def test_trace_baseline_with_int_float_and_bool_inputs(exported) -> None:
    # torch.jit.trace takes only tensors: the scalars go in as 0-d tensors and the trace freezes
    # them, as a tracing compiler does, so a trip count other than the example's is wrong.
    item = exported("for_range")
    samples = [item.example_inputs] + [(item.example_inputs[0], n) for n in (0, 1, 5)]
    report = verify(item.model, samples, item.path, host="compiled", trace_example=item.example_inputs)
    assert report.mismatched_samples == 0
    assert report.trace_mismatches == 3
    mixed = exported("scalar_inputs")
    x = mixed.example_inputs[0]
    samples = [mixed.example_inputs, (x, 3, 0.5, False), (x, 7, 0.5, True)]
    report = verify(mixed.model, samples, mixed.path, host="compiled", trace_example=mixed.example_inputs)
    assert report.mismatched_samples == 0
    assert report.trace_mismatches == 2  # the flag's other side, and n + 1 frozen at 4


def test_float_outputs_are_judged_against_float64_within_pytorchs_own_error() -> None:
    # Figures of an ill-conditioned program (fuzzer seed 71015: log_softmax, softmax, renormalized
    # twice per step): PyTorch's float32 result is 7.0e-6 from float64 in its last element, IREE's
    # 1.03e-5, 5e-5 of the output's scale. Both are float32 roundings of the same sums.
    exact = torch.tensor([[0.13131561, -0.08526611, 0.02353119, -0.06958069]], dtype=torch.float64)
    pytorch = torch.tensor([[0.13131778, -0.08526184, 0.02352421, -0.06958015]])
    iree = np.array([[0.13131495, -0.08525881, 0.02352091, -0.06957705]], np.float32)
    assert not compare(iree, pytorch, [])  # beyond RTOL of PyTorch's own float32 result
    assert compare(iree, pytorch, [], exact=lambda: exact)
    # Three times PyTorch's error is not rounding any more.
    worse = (exact + 3 * (pytorch.double() - exact)).float().numpy()
    assert not compare(worse, pytorch, [], exact=lambda: exact)


def test_a_float64_run_down_another_path_vouches_for_nothing() -> None:
    # Fuzzer seed 130101: the float64 run left a loop at another step, so its outputs were another
    # structure (a dict without the key, so an int where the float32 run had a tensor) and compare
    # raised AttributeError on the int. Such a run cannot excuse a float that misses; the exact
    # figures above still can.
    exact = torch.tensor([[0.13131561, -0.08526611, 0.02353119, -0.06958069]], dtype=torch.float64)
    pytorch = torch.tensor([[0.13131778, -0.08526184, 0.02352421, -0.06958015]])
    iree = np.array([[0.13131495, -0.08525881, 0.02352091, -0.06957705]], np.float32)
    assert compare((iree, 3), (pytorch, 3), [], exact=lambda: (exact, 3))
    assert not compare((iree, 3), (pytorch, 3), [], exact=lambda: (3, exact))  # another order of leaves
    assert not compare((iree, 3), (pytorch, 3), [], exact=lambda: (exact[:, :2], 3))  # another shape
    assert not compare((iree, 3), (pytorch, 3), [], exact=lambda: (exact, 3, exact))  # more leaves
