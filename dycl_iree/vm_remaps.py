"""A check and repair of a vmfb's branches: IREE 3.13's VM compiler can order a branch's register moves so that
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
list has its moves put back in an order that reads every value before it is overwritten
(`repaired`: the same moves, reordered in the vmfb's bytecode); where no order does (a cycle that
needs a scratch register), it is compiled again with command buffers recorded at each call (other
registers), and where that does not clear it the bundle falls back to the Python host, whose
segments have no branches.

Example:
    >>> overlaps_in("vm.br ^bb2(%i16->%i32, %i17->%i33, %i33->%i4)")
    ['^bb2: %i33 read after %i32:%i33 was written']
    >>> overlaps_in("vm.br ^bb14(%i40->%i44, %i41->%i45, %i38->%i40, %i39->%i41, %i44->%i38, %i45->%i39)")
    []
    >>> reordered("%i16->%i32, %i17->%i33, %R10->%r1, %i33->%i4")
    '%R10->%r1, %i33->%i4, %i16->%i32, %i17->%i33'
"""

from __future__ import annotations

import heapq
import io
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
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
    lines = _code_lines(vmfb)
    if lines is None:
        return None
    return [f"{function}: {overlap}" for function, line in _branches(lines) for overlap in overlaps_in(line)]


def _code_lines(vmfb: bytes) -> list[tuple[str, str]] | None:
    """The disassembly's lines from the first function on, each with the function it is in; a line
    that is no branch cut to 4,096 characters. None where `iree-dump-module` is not found or fails."""
    tool = dump_tool()
    if tool is None:
        return None
    with tempfile.TemporaryDirectory(prefix="dycl_iree-vm-") as folder:
        path = Path(folder) / "module.vmfb"
        path.write_bytes(vmfb)
        process = subprocess.Popen([str(tool), "--output=disassembly", str(path)], stdout=subprocess.PIPE)
        assert process.stdout is not None
        lines: list[tuple[str, str]] = []
        function = None
        for raw in process.stdout:  # the rodata comes first, as a few very long lines: look at the start only
            head = raw[:4096]
            if head.startswith(b"vm.func "):
                function = head.split(b"(", 1)[0][len(b"vm.func ") :].decode(errors="replace")
            if function is not None:
                branch = any(marker in head for marker in _BRANCH)
                lines.append((function, (raw if branch else head).decode(errors="replace").rstrip("\n")))
        if process.wait() != 0:
            return None
    return lines


def _branches(lines: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(function, line) for function, line in lines if any(marker.decode() in line for marker in _BRANCH)]


class OverlapError(CompileError):
    """A compiled host's vmfb whose branches would move a wrong value into a block argument."""

    def __init__(self, overlaps: list[str]) -> None:
        self.overlaps = overlaps
        self.diagnostic = f"{DIAGNOSTIC} ({overlaps[0]}{'; and more' if len(overlaps) > 1 else ''})"
        super().__init__(self.diagnostic)


def checked(vmfb: bytes, target: str) -> bytes:
    """The vmfb (for `target`) where no branch's register moves overlap; where some do, the vmfb with
    those moves reordered (`repaired`); raise OverlapError where they cannot be."""
    lines = _code_lines(vmfb)
    if lines is None:
        return vmfb
    overlaps = [
        f"{target}: {function}: {overlap}" for function, line in _branches(lines) for overlap in overlaps_in(line)
    ]
    if not overlaps:
        return vmfb
    fixed = repaired(vmfb, lines)
    if fixed is None:
        raise OverlapError(overlaps)
    return fixed


@dataclass(frozen=True)
class _Move:
    """One value a branch moves: an i32, an i64 (two 32-bit registers), or a reference."""

    operands: tuple[str, ...]  # as printed, `%i4->%i2`
    source: tuple[int, ...]
    target: tuple[int, ...]
    reference: bool


def reordered(operands: str) -> str | None:
    """A branch's moves (`operands`, as the disassembly prints one successor's) in an order that gives
    every block argument the value meant for it; None where no order does, or the text is not moves.

    What each move means to read is what the compiler ordered it after: the value an earlier move of
    the same list wrote to exactly its registers (the compiler's own cycles through scratch
    registers, read back whole), else the value from before the branch, which a move that wrote part
    of its registers earlier (`overlaps_in`) must not have replaced yet. Each move then has to come
    before the moves that overwrite what it reads, and after the ones whose value it reads or whose
    registers it writes again; references keep their order (their own register file). The result is
    checked by running both lists on symbolic registers.
    """
    moves = _parsed(operands)
    if moves is None:
        return None
    order = _order(moves)
    if order is None:
        return None
    result = [moves[index] for index in order]
    if _run(result) != _meant(moves):
        return None
    return ", ".join(operand for move in result for operand in move.operands)


def _parsed(operands: str) -> list[_Move] | None:
    """The moves of one successor's operands, 32-bit moves grouped into values as `_moves` does."""
    entries = _MOVE.findall(operands)
    if ", ".join(f"%{kind}{source}->%{kind2}{target}" for kind, source, kind2, target in entries) != operands.strip():
        return None
    moves, index = [], 0
    while index < len(entries):
        kind, source, kind2, target = entries[index]
        if kind in "rR":
            moves.append(_Move((f"%{kind}{source}->%{kind2}{target}",), (int(source),), (int(target),), True))
            index += 1
            continue
        pair = [(int(s), int(t)) for k, s, _, t in entries[index : index + 2] if k in "iI"]
        grouped = _moves(pair)[0]
        count = len(grouped[0])
        texts = tuple(f"%{k}{s}->%{k2}{t}" for k, s, k2, t in entries[index : index + count])
        moves.append(_Move(texts, grouped[0], grouped[1], False))
        index += count
    return moves


def _order(moves: list[_Move]) -> list[int] | None:
    """Indices of `moves` in an order that keeps what `reordered` says each reads (stable: the
    compiler's order wherever it is free); None on a cycle."""
    before: list[set[int]] = [set() for _ in moves]  # before[b]: the moves that must come before b
    for a, first in enumerate(moves):
        for b in range(a + 1, len(moves)):
            second = moves[b]
            if first.reference or second.reference:
                if first.reference and second.reference:
                    before[b].add(a)
                continue
            reads_written = set(second.source) & set(first.target)
            if reads_written and second.source != first.target:
                before[a].add(b)  # second reads what was there before first wrote part of it
            if second.source == first.target or set(second.target) & (set(first.source) | set(first.target)):
                before[b].add(a)  # second reads first's value, or overwrites what first reads or writes
    waiting = [len(needs) for needs in before]
    after: list[list[int]] = [[] for _ in moves]
    for b, needs in enumerate(before):
        for a in needs:
            after[a].append(b)
    ready = [index for index, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for later in after[index]:
            waiting[later] -= 1
            if waiting[later] == 0:
                heapq.heappush(ready, later)
    return order if len(order) == len(moves) else None


def _meant(moves: list[_Move]) -> dict[int, tuple[str, int]]:
    """What each 32-bit register written holds after the branch as the compiler meant it: ('before',
    r) for register r's value from before the branch."""
    registers: dict[int, tuple[str, int]] = {}
    # The last value written to exactly these registers: a write to part of them is the overlap the
    # compiler did not see, so it does not change what a later move meant to read.
    whole: dict[tuple[int, ...], tuple[tuple[str, int], ...]] = {}
    for move in moves:
        if move.reference:
            continue
        value = whole.get(move.source, tuple(("before", register) for register in move.source))
        for register, word in zip(move.target, value, strict=True):
            registers[register] = word
        whole[move.target] = value
    return registers


def _run(moves: list[_Move]) -> dict[int, tuple[str, int]]:
    """What each 32-bit register written holds after running `moves` one after the other, as the VM does."""
    registers: dict[int, tuple[str, int]] = {}
    for move in moves:
        if move.reference:
            continue
        value = [registers.get(register, ("before", register)) for register in move.source]
        for register, word in zip(move.target, value, strict=True):
            registers[register] = word
    return registers


# `BytecodeModuleDef.bytecode_data`'s place among the table's fields (IREE's
# `iree/schemas/bytecode_module_def.fbs`): the functions' bytecode, where a branch's moves are
# encoded as a count and (source, target) pairs of 16-bit registers, a reference's with bit 15 set
# and, where it is moved rather than retained, bit 14 (`iree/vm/bytecode/isa/isa.h`).
_BYTECODE_FIELD = 14
_REFERENCE_BIT, _MOVE_BIT = 0x8000, 0x4000
_ZIP_LOCAL_HEADER, _ZIP_CENTRAL_HEADER = b"PK\x03\x04", b"PK\x01\x02"


def repaired(vmfb: bytes, lines: list[tuple[str, str]]) -> bytes | None:
    """The vmfb with each overlapping branch's moves `reordered` in its bytecode (`lines` its
    disassembly, `_code_lines`); None where one cannot be, or the vmfb reads back other than exactly
    those branches changed."""
    span = _bytecode_span(vmfb)
    if span is None:
        return None
    start, end = span
    data = bytearray(vmfb)
    changed: dict[str, str] = {}
    for _, line in _branches(lines):
        if not overlaps_in(line) or line in changed:
            continue
        fixed = line
        for block, operands in _SUCCESSOR.findall(line):
            if not overlaps_in(f"vm.br ^{block}({operands})"):
                continue
            order = reordered(operands)
            if order is None:
                return None
            old, new = _encoded(operands), _encoded(order)
            found = bytes(data[start:end]).count(old)
            if found == 0:
                return None
            data[start:end] = bytes(data[start:end]).replace(old, new)
            fixed = fixed.replace(f"^{block}({operands})", f"^{block}({order})")
        changed[line] = fixed
    _rewrite_checksum(data)
    result = bytes(data)
    again = _code_lines(result)
    if again is None or len(again) != len(lines):
        return None
    for (_, before), (_, after) in zip(lines, again, strict=True):
        if before != after and changed.get(before) != after:
            return None
    if any(overlaps_in(line) for _, line in _branches(again)):
        return None
    return result


def _encoded(operands: str) -> bytes:
    """One successor's moves as the bytecode holds them: a 16-bit count, then (source, target) pairs."""
    entries = _MOVE.findall(operands)
    words = [len(entries)]
    for kind, source, kind2, target in entries:
        words += [_register(kind, int(source)), _register(kind2, int(target))]
    return struct.pack(f"<{len(words)}H", *words)


def _register(kind: str, index: int) -> int:
    if kind in "iI":
        return index
    return _REFERENCE_BIT | (_MOVE_BIT if kind == "R" else 0) | index


def _module_start(vmfb: bytes | bytearray) -> int:
    """Where the module's size-prefixed FlatBuffer starts: after the ZIP local header IREE writes
    before it, as the runtime reads it (`iree_vm_bytecode_archive_parse_header`)."""
    if len(vmfb) >= 30 and vmfb[:4] == _ZIP_LOCAL_HEADER:
        name_length, extra_length = struct.unpack_from("<HH", vmfb, 26)
        return 30 + name_length + extra_length
    return 0


def _bytecode_span(vmfb: bytes) -> tuple[int, int] | None:
    """The bytes of `BytecodeModuleDef.bytecode_data` in the vmfb, read from the FlatBuffer's root
    table; None where it is not there."""
    try:
        buffer = _module_start(vmfb) + 4  # after the size prefix
        root = buffer + struct.unpack_from("<I", vmfb, buffer)[0]
        vtable = root - struct.unpack_from("<i", vmfb, root)[0]
        vtable_size = struct.unpack_from("<H", vmfb, vtable)[0]
        slot = 4 + 2 * _BYTECODE_FIELD
        if slot + 2 > vtable_size:
            return None
        field = struct.unpack_from("<H", vmfb, vtable + slot)[0]
        if field == 0:
            return None
        vector = root + field + struct.unpack_from("<I", vmfb, root + field)[0]
        length = struct.unpack_from("<I", vmfb, vector)[0]
    except struct.error:
        return None
    if vector + 4 + length > len(vmfb):
        return None
    return vector + 4, vector + 4 + length


def _rewrite_checksum(data: bytearray) -> None:
    """Set the module entry's CRC-32 in the ZIP's local and central headers to its new contents (the
    runtime does not read it; other ZIP readers do)."""
    if data[:4] != _ZIP_LOCAL_HEADER:
        return
    try:
        entries = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except zipfile.BadZipFile:
        return
    module = next((entry for entry in entries if entry.header_offset == 0), None)
    if module is None:
        return
    start = _module_start(data)
    checksum = zlib.crc32(data[start : start + module.file_size])
    struct.pack_into("<I", data, 14, checksum)
    # The central directory follows the last entry's data.
    position = data.find(_ZIP_CENTRAL_HEADER, max(entry.header_offset + entry.compress_size for entry in entries))
    while position != -1:
        name_length = struct.unpack_from("<H", data, position + 28)[0]
        if bytes(data[position + 46 : position + 46 + name_length]).decode(errors="replace") == module.filename:
            struct.pack_into("<I", data, position + 16, checksum)
            return
        position = data.find(_ZIP_CENTRAL_HEADER, position + 4)


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
