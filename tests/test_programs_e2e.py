"""End to end, per program: export once, run both hosts on every sample, compare with PyTorch,
and check from the Python host's records that every branch side and every loop exit was taken."""

from __future__ import annotations

import pytest

import dycl_iree
from dycl_iree.program import If, Loop, iter_nodes
from models import programs

from .conftest import assert_matches

# Which host each bundle gets: every program gets the compiled host (while_cap's loop, which IREE
# 3.13 failed on as `torch.prim.Loop`, compiles as the do-while `scf.while` the host now writes).
EXPECTED_HOST = {name: "compiled" for name in programs.MODELS}


def _loop_exit(name: str, sample: tuple, reference: object) -> tuple[int, str]:
    """(trip count, how the loop ended), read off the inputs and PyTorch's outputs."""
    if name == "for_range":
        n = sample[1]
        return n, "no iteration" if n == 0 else "trip count"
    if name == "for_break":
        n, steps = sample[1], reference[1]
        return steps, "no iteration" if n == 0 else ("trip count" if steps == n else "break")
    if name == "while_cap":
        cap, steps = sample[1], reference[1]
        return steps, "cap" if steps == cap else "condition"
    if name == "growing_sequence":
        return reference.shape[0] - 1, "no iteration" if sample[1] == 0 else "trip count"
    if name == "greedy_decoder":
        tokens = reference.tolist()
        model = programs.MODELS[name]()[0]
        return len(tokens), "end token" if tokens[-1] == model.end_token else "length cap"
    raise KeyError(name)


LOOP_EXITS = {
    "for_range": {"no iteration", "trip count"},
    "for_break": {"no iteration", "trip count", "break"},
    "while_cap": {"cap", "condition"},
    "growing_sequence": {"no iteration", "trip count"},
    "greedy_decoder": {"end token", "length cap"},
}


@pytest.mark.parametrize("name", list(programs.MODELS))
def test_both_hosts_match_pytorch_on_every_path(name: str, exported) -> None:
    item = exported(name)
    assert item.bundle.host == EXPECTED_HOST[name], item.bundle.manifest["compiled_host_unsupported"]
    python_host = dycl_iree.load(item.path, host="python", record=True)
    compiled_host = dycl_iree.load(item.path, host="compiled") if item.bundle.host == "compiled" else None
    exits: set[str] = set()
    for index, sample in enumerate(item.samples()):
        reference = item.reference(*sample)
        assert_matches(python_host(*sample), reference, f"{name} sample {index} (python host)")
        if compiled_host is not None:
            assert_matches(compiled_host(*sample), reference, f"{name} sample {index} (compiled host)")
        if name in LOOP_EXITS:
            trips, how = _loop_exit(name, sample, reference)
            (label,) = [node.label for node in iter_nodes(item.bundle.program.body) if isinstance(node, Loop)]
            assert python_host.trip_counts[label][-1] == trips, f"sample {index}: trip count"
            exits.add(how)
    branches = [node.label for node in iter_nodes(item.bundle.program.body) if isinstance(node, If)]
    for label in branches:
        taken = dict(python_host.decisions[label])
        assert set(taken) == {True, False}, f"{label} took only {taken}"
    if name in LOOP_EXITS:
        assert exits == LOOP_EXITS[name]


def test_compiled_host_falls_back_with_a_reason(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """While_cap's loop written as `torch.prim.Loop` (the form the host writes only for carried dtypes
    it cannot convert) still hits IREE 3.13's scf.while trap: the bundle falls back, naming the loop."""
    from dycl_iree.hosts import control_flow

    monkeypatch.setattr(control_flow, "_builtin_type", lambda type_text: None)
    model, example_inputs = programs.MODELS["while_cap"]()[:2]
    bundle = dycl_iree.export(model, example_inputs)
    reason = bundle.manifest["compiled_host_unsupported"]
    assert reason.startswith("iree-compile rejected the compiled host") and "loop" in reason, reason
    with pytest.raises(dycl_iree.BundleError, match="has no compiled host"):
        dycl_iree.load(bundle.save(tmp_path / "while_cap.dycl"), host="compiled")


def test_decisions_do_not_depend_on_the_host_only(exported) -> None:
    """The same input takes the same path in PyTorch (exit index) and in the bundle."""
    item = exported("early_exit")
    run = dycl_iree.load(item.path, host="python", record=True)
    for sample in item.samples():
        _, exit_index = item.reference(*sample)
        before = dict(run.decisions["if0"])
        run(*sample)
        took_early_exit = run.decisions["if0"].get(True, 0) > before.get(True, 0)
        assert took_early_exit == (exit_index == 0)
