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


def _demoted(monkeypatch) -> None:
    """IREE's demotion of f64 to f32 back on: `Halting`'s main then gets the overlapping branch."""
    if vm_remaps.dump_tool() is None:
        pytest.fail("iree-dump-module (iree-base-runtime) is missing")
    flags = [flag for flag in compile_flags.TARGETS["llvm-cpu"] if flag != "--iree-input-demote-f64-to-f32=false"]
    monkeypatch.setitem(compile_flags.TARGETS, "llvm-cpu", flags)


def _check_every_path(model, compiled) -> None:
    steps = set()
    for limit, x in halting_inputs((0, 2, 6)):
        with torch.no_grad():
            want = model(x, limit)
        steps.add(int(want[1]))
        _check(compiled(x.numpy(), limit), want)
    assert 0 in steps and len(steps) > 2, steps  # no step, some, the limit


def test_a_main_whose_branches_overlap_has_their_moves_reordered(tmp_path, monkeypatch):
    """The exporter finds the overlapping branch and puts its moves in an order that reads each value
    before it is overwritten, in the vmfb; command buffers stay memoized, and the compiled host
    computes what PyTorch does on every path."""
    _demoted(monkeypatch)
    found = []
    original = vm_remaps.repaired
    monkeypatch.setattr(vm_remaps, "repaired", lambda vmfb, lines: found.append(1) or original(vmfb, lines))
    model, bundle, compiled = _halting_bundle(tmp_path, "repaired")
    assert found, "the demoted module had no overlapping branch to repair"
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    assert "--iree-hal-indirect-command-buffers=false" not in bundle.manifest["targets"]["llvm-cpu"]["flags"]
    assert vm_remaps.overlapping_moves(bundle.files["llvm-cpu.vmfb"]) == []
    _check_every_path(model, compiled)


def test_a_main_whose_overlaps_cannot_be_reordered_is_compiled_again_with_recorded_command_buffers(
    tmp_path, monkeypatch
):
    """Where no order of the moves is right (`repaired` gives None), the exporter compiles again with
    command buffers recorded at each call, which gives other registers."""
    _demoted(monkeypatch)
    monkeypatch.setattr(vm_remaps, "repaired", lambda vmfb, lines: None)
    model, bundle, compiled = _halting_bundle(tmp_path, "recorded")
    assert bundle.host == "compiled", bundle.manifest["compiled_host_unsupported"]
    assert "--iree-hal-indirect-command-buffers=false" in bundle.manifest["targets"]["llvm-cpu"]["flags"]
    _check_every_path(model, compiled)


def _successors(line: str) -> dict[str, str]:
    return dict(vm_remaps._SUCCESSOR.findall(line))


@pytest.mark.parametrize(
    "operands",
    [
        _successors(OVERLAPPING)["bb17"],
        # Fuzzer seed 130114's: the i64 goes to %i4:%i5, then %i4 (a bool) is read into %i2.
        "%R4->%r14, %R1->%r13, %R0->%r12, %i60->%i6, %i61->%i7, %r10->%r11, %i64->%i4, %i65->%i5, %i4->%i2",
    ],
)
def test_overlapping_moves_are_reordered_to_read_each_value_before_it_is_overwritten(operands):
    fixed = vm_remaps.reordered(operands)
    assert fixed is not None
    assert vm_remaps.overlaps_in(f"vm.br ^bb1({operands})") != []
    assert vm_remaps.overlaps_in(f"vm.br ^bb1({fixed})") == []
    assert sorted(fixed.split(", ")) == sorted(operands.split(", "))  # the same moves
    assert _registers_after(fixed, one_after_another=True) == _registers_after(operands, one_after_another=False)
    assert _registers_after(operands, one_after_another=True) != _registers_after(operands, one_after_another=False)


def _registers_after(operands: str, one_after_another: bool) -> dict[str, str]:
    """What each 32-bit register written holds after the moves: run one after the other, as the VM
    does, or all at once (every source read before any target is written), as a branch means them
    where the compiler used no scratch register."""
    registers: dict[str, str] = {}
    for move in operands.split(", "):
        source, target = (register.removeprefix("%") for register in move.split("->"))
        if source[0] in "rR":
            continue
        registers[target] = registers.get(source, f"old {source}") if one_after_another else f"old {source}"
    return registers


def test_the_compilers_own_scratch_moves_keep_their_order():
    operands = _successors(ROTATION)["bb14"]
    assert vm_remaps.reordered(operands) == operands


def test_moves_that_need_a_scratch_register_are_not_reordered():
    # An i64 from %i4:%i5 to %i6:%i7 and the old %i6 to %i4: each overwrites what the other reads.
    assert vm_remaps.reordered("%i4->%i6, %i5->%i7, %i6->%i4") is None
    assert vm_remaps.reordered("not a move") is None


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
