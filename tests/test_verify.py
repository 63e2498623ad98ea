"""verify: it must report what is wrong, not only pass what is right."""

from __future__ import annotations

import numpy as np
import torch

from dycl_iree.verify import compare, verify
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
