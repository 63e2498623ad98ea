"""A fixed-seed smoke set of the differential fuzzer (`tests/fuzz/`); `make fuzz N=...` runs more seeds."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.fuzz.calibrate import calibrate
from tests.fuzz.campaign import fallback_table
from tests.fuzz.check import check_seed, nan_aware_compare, prepare
from tests.fuzz.generate import generate
from tests.fuzz.inputs import finite_cases

# Seeds chosen to cover the constructs: nested breaks, a dynamic batch, an RNN module, a list of
# tensors after a pooling view, a growing tensor, argmax on NaN input, a dict constant and a List[int].
SMOKE_SEEDS = [2, 5, 8, 11, 12, 13, 21]


@pytest.fixture(scope="module")
def smoke_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    folder = tmp_path_factory.mktemp("fuzz")
    return [check_seed(seed, folder) for seed in SMOKE_SEEDS]


def test_smoke_programs_match_pytorch_on_both_hosts(smoke_results: list[dict]) -> None:
    for result in smoke_results:
        assert result["status"] == "ok", (result["seed"], result["failures"], result.get("export_error"))
        assert result["host"] in ("compiled", "python")
    table = fallback_table(smoke_results)
    assert f"{len(SMOKE_SEEDS)} programs; {len(SMOKE_SEEDS)} exported" in table


def test_smoke_set_covers_the_constructs(smoke_results: list[dict]) -> None:
    used = {name for result in smoke_results for name in result["constructs"]}
    wanted = {"for_break", "nested_if", "recurrent", "list_of_tensors", "pooled_view", "growing_tensor"}
    assert wanted <= used, wanted - used
    assert {"dict_constant", "list_of_ints"} <= used
    assert any(result["dynamic_batch"] for result in smoke_results)


def test_calibration_sends_decisions_both_ways(smoke_results: list[dict]) -> None:
    decided = sum(result["decisions"] for result in smoke_results)
    both = sum(result["decisions_both_ways"] for result in smoke_results)
    assert decided >= 10 and both >= 0.8 * decided, (both, decided)


def test_the_same_seed_gives_the_same_program() -> None:
    first, _ = prepare(17)
    second, _ = prepare(17)
    assert first.render() == second.render()
    assert "__C" not in first.render()  # every threshold placed


def test_a_threshold_splits_the_values_it_saw() -> None:
    program = generate(5)
    assert program.conditions
    calibrate(program, finite_cases(program))
    assert any(condition.threshold != 0 for condition in program.conditions)


def test_nan_aware_compare_needs_nan_at_the_same_places() -> None:
    nan = float("nan")
    want = torch.tensor([1.0, nan, 3.0])
    assert nan_aware_compare([want.numpy().copy()], [want])
    assert not nan_aware_compare([torch.tensor([1.0, 2.0, 3.0]).numpy()], [want])
    assert not nan_aware_compare([torch.tensor([nan, nan, 3.0]).numpy()], [want])
    assert nan_aware_compare([nan], [nan]) and not nan_aware_compare([1.0], [nan])


def test_a_failure_leaves_a_self_contained_reproducer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that answers wrong makes the check fail and keep a script that shows the difference."""
    import tests.fuzz.check as check

    monkeypatch.setattr(check, "nan_aware_compare", lambda got, expected, exact=None: False)
    result = check_seed(8, tmp_path)
    assert result["status"] == "mismatch" and result["failures"]
    reproducer = Path(result["reproducer"])
    text = reproducer.read_text()
    assert "class Program(nn.Module)" in text and "dycl_iree.export" in text and "INPUTS = [" in text
    compile(text, str(reproducer), "exec")
