"""A check of a vmfb's branches: IREE 3.13's VM compiler can order a branch's register moves so that
one move overwrites a register a later move still reads, and the call then computes with the wrong
value, silently.

A VM branch passes its block arguments as a list of register moves that the interpreter runs one
after the other (`iree_vm_bytecode_dispatch_remap_branch_registers`); the compiler is to order
them so that no move reads a register an earlier move of the list wrote, breaking cycles through
scratch registers. An i64 value occupies two consecutive 32-bit registers, and the ordering does not
see a 64-bit move and a 32-bit one that share a register: in `Halting` of
`tests/test_host_scalars.py`, compiled with IREE's demotion of f64 to f32 and memoized command
buffers, `^bb17(%i16->%i32, %i17->%i33, ..., %i33->%i4, ...)` moves an i64 into %i32:%i33 and then
reads %i33, the host's float, into %i4: the float became the i64's high word, and `torch.tensor(
magnitude) * x.sum()` came back -0.0 (README, known traps). Recording the command buffers at each
call changed the registers and hid it, which is how it was first worked around.

This module reads the disassembly `iree-dump-module` prints and reports each list where a move
reads part of what an earlier move of the same list wrote, other than exactly the registers it
wrote (the compiler's own scratch use reads back what it saved, whole). The exporter checks the
compiled host's vmfbs so (`compile.compile_module`, before a vmfb is cached): a vmfb with such a
list is compiled again with command buffers recorded at each call (other registers), and where
that does not clear it the bundle falls back to the Python host, whose segments have no branches.

Example:
    >>> overlaps_in("vm.br ^bb2(%i16->%i32, %i17->%i33, %i33->%i4)")
    ['^bb2: %i33 read after %i32:%i33 was written']
    >>> overlaps_in("vm.br ^bb14(%i40->%i44, %i41->%i45, %i38->%i40, %i39->%i41, %i44->%i38, %i45->%i39)")
    []
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from .errors import CompileError

# The text `compile.WORKAROUNDS` knows an overlap by (its flag: command buffers recorded at each call).
DIAGNOSTIC = "IREE's VM compiler ordered a branch's register moves so that one overwrites a register a later one reads"

_SUCCESSOR = re.compile(r"\^(bb\d+)\(([^()]*)\)")
_MOVE = re.compile(r"%([iIrR])(\d+)->%([iIrR])(\d+)")
_BRANCH = (b"vm.br ", b"vm.cond_br ")


def overlaps_in(line: str) -> list[str]:
    """The register overlaps in one disassembled branch line, one text per successor that has one."""
    found = []
    for block, operands in _SUCCESSOR.findall(line):
        pairs = [(int(src), int(dst)) for kind, src, _, dst in _MOVE.findall(operands) if kind in "iI"]
        written: list[tuple[int, ...]] = []
        for source, target in _moves(pairs):
            clash = next((regs for regs in written if set(regs) & set(source) and regs != source), None)
            if clash is not None:
                found.append(f"^{block}: {_name(source)} read after {_name(clash)} was written")
                break
            if source != target:
                written.append(target)
    return found


def _moves(pairs: list[tuple[int, int]]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """32-bit register moves grouped into values: two consecutive moves of consecutive registers,
    both even, are one i64 (the VM keeps an i64 in an even register and the next one)."""
    moves, index = [], 0
    while index < len(pairs):
        source, target = pairs[index]
        if source % 2 == 0 and target % 2 == 0 and pairs[index + 1 : index + 2] == [(source + 1, target + 1)]:
            moves.append(((source, source + 1), (target, target + 1)))
            index += 2
        else:
            moves.append(((source,), (target,)))
            index += 1
    return moves


def _name(registers: tuple[int, ...]) -> str:
    return ":".join(f"%i{register}" for register in registers)


def overlapping_moves(vmfb: bytes) -> list[str] | None:
    """Every branch of the vmfb whose register moves overlap (`overlaps_in`), as 'function: line';
    None where `iree-dump-module` (iree-base-runtime) is not found or cannot read the vmfb."""
    tool = dump_tool()
    if tool is None:
        return None
    with tempfile.TemporaryDirectory(prefix="dycl_iree-vm-") as folder:
        path = Path(folder) / "module.vmfb"
        path.write_bytes(vmfb)
        process = subprocess.Popen([str(tool), "--output=disassembly", str(path)], stdout=subprocess.PIPE)
        assert process.stdout is not None
        found, function = [], "?"
        for raw in process.stdout:  # the rodata comes as a few very long lines: look at the start only
            head = raw[:4096]
            if head.startswith(b"vm.func "):
                function = head.split(b"(", 1)[0][len(b"vm.func ") :].decode(errors="replace")
            elif any(marker in head for marker in _BRANCH):
                found += [f"{function}: {overlap}" for overlap in overlaps_in(raw.decode(errors="replace"))]
        if process.wait() != 0:
            return None
    return found


class OverlapError(CompileError):
    """A compiled host's vmfb whose branches would move a wrong value into a block argument."""

    def __init__(self, overlaps: list[str]) -> None:
        self.overlaps = overlaps
        self.diagnostic = f"{DIAGNOSTIC} ({overlaps[0]}{'; and more' if len(overlaps) > 1 else ''})"
        super().__init__(self.diagnostic)


def check(vmfb: bytes, target: str) -> None:
    """Raise OverlapError where the vmfb (for `target`) has a branch whose register moves overlap."""
    overlaps = [f"{target}: {overlap}" for overlap in overlapping_moves(vmfb) or []]
    if overlaps:
        raise OverlapError(overlaps)


def dump_tool() -> Path | None:
    """`iree-dump-module` (`runtime_tool`)."""
    return runtime_tool("iree-dump-module")


def runtime_tool(name: str) -> Path | None:
    """One of IREE's runtime tools (`iree-dump-module`, `iree-benchmark-module`, `iree-profile`, ...):
    the binary iree-base-runtime ships, else one on PATH; None where neither is."""
    try:
        import iree._runtime_libs as libs

        shipped = Path(libs.__file__).parent / name
        if shipped.is_file() and os.access(shipped, os.X_OK):
            return shipped
    except ImportError:
        pass
    found = shutil.which(name)
    return Path(found) if found else None
