"""The check of the compiled host's VM branches (`dycl_iree/vm_remaps.py`): IREE 3.13's VM compiler
can order a branch's register moves so that a 64-bit move overwrites a 32-bit register a later move
of the same branch still reads, and the call then computes with the wrong value, silently."""

from __future__ import annotations

import pytest
import torch

import dycl_iree
from dycl_iree import compile as compile_flags
from dycl_iree import vm_remaps
from tests.test_host_scalars import Halting, _check, halting_inputs

# The branch `Halting`'s main got with IREE's f64-to-f32 demotion and memoized command buffers: the
# i64 goes to %i32:%i33, then %i33 (the host's float) is read into %i4.
OVERLAPPING = (
    "vm.cond_br %i6, ^bb8(%r10->%r1, %i33->%i6, %i24->%i36, %i25->%i37, %i24->%i38, %i25->%i39), "
    "^bb17(%i16->%i32, %i17->%i33, %R10->%r1, %i33->%i4, %i24->%i22, %i25->%i23)"
)
# The compiler's own cycle through a scratch register pair: read back whole, as written.
ROTATION = (
    "vm.br ^bb14(%i40->%i44, %i41->%i45, %R10->%r1, %i38->%i40, %i39->%i41, %i42->%i38, %i43->%i39, "
    "%i44->%i42, %i45->%i43)"
)


def test_an_i32_read_from_the_high_word_of_an_i64_just_written_is_an_overlap():
    assert vm_remaps.overlaps_in(OVERLAPPING) == ["^bb17: %i33 read after %i32:%i33 was written"]


@pytest.mark.parametrize(
    "line",
    [
        ROTATION,
        "vm.br ^bb3(%i4->%i6, %i5->%i7, %i8->%i4)",  # an i64 moved, then its old low word rewritten
        "vm.cond_br %i1, ^bb1(%r2->%r3, %R3->%r2), ^bb2()",  # references only
        "vm.br ^bb2(%i3->%i5, %i5->%i7)",  # a 32-bit read of a 32-bit write: the compiler's own order
    ],
)
def test_moves_that_read_back_what_they_wrote_whole_are_not_overlaps(line):
    assert vm_remaps.overlaps_in(line) == []


def _halting_bundle(tmp_path, name):
    torch.manual_seed(0)
    model = Halting().eval()
    bundle = dycl_iree.export(model, (torch.randn(1, 4), 3), cache=False)
    return model, bundle, dycl_iree.load(bundle.save(tmp_path / f"{name}.dycl"), host="compiled")


def test_a_main_whose_branches_overlap_is_compiled_again_with_recorded_command_buffers(tmp_path, monkeypatch):
    """With IREE's demotion of f64 to f32 back on, `Halting`'s main gets the overlapping branch: the
    exporter finds it, compiles again with command buffers recorded at each call, and the compiled
    host computes what PyTorch does on every path (no step, some, the limit)."""
    if vm_remaps.dump_tool() is None:
        pytest.fail("iree-dump-module (iree-base-runtime) is missing")
    flags = [flag for flag in compile_flags.TARGETS["llvm-cpu"] if flag != "--iree-input-demote-f64-to-f32=false"]
    monkeypatch.setitem(compile_flags.TARGETS, "llvm-cpu", flags)
    retry = "--iree-hal-indirect-command-buffers=false"
    model, bundle, compiled = _halting_bundle(tmp_path, "demoted")
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    assert retry in bundle.manifest["targets"]["llvm-cpu"]["flags"]
    steps = set()
    for limit, x in halting_inputs((0, 2, 6)):
        with torch.no_grad():
            want = model(x, limit)
        steps.add(int(want[1]))
        _check(compiled(x.numpy(), limit), want)
    assert 0 in steps and len(steps) > 2, steps


def test_the_exporters_own_flags_give_halting_memoized_command_buffers_and_no_overlap(tmp_path):
    model, bundle, compiled = _halting_bundle(tmp_path, "halting")
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    flags = bundle.manifest["targets"]["llvm-cpu"]["flags"]
    assert "--iree-hal-indirect-command-buffers=false" not in flags
    assert vm_remaps.overlapping_moves(bundle.files["llvm-cpu.vmfb"]) == []
    x = torch.randn(1, 4) * 3
    with torch.no_grad():
        want = model(x, 2)
    _check(compiled(x.numpy(), 2), want)
