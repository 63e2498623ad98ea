"""Empty tensors of `main` made at run time (a mixin of the compiled host's emitter)."""

from __future__ import annotations

from ..program import Value
from .types import DTYPE_CODES, MLIR_DTYPE


class RunTimeEmpties:
    """`empty_at_run_time`: see the README trap of a block argument sharing a live constant's register."""

    def empty_at_run_time(self, value: Value) -> None:
        """Make `value`, an empty tensor whose emptiness the type says (an empty list's stand-in, its
        data or sizes), zeros of sizes behind barriers, typed with those dims dynamic.

        A list that one side of a nested `if` leaves empty, concatenated after the branches, failed
        with OUT_OF_RANGE ("buffer byte_length=0", fuzzer seed 80038): IREE 3.13's VM register
        allocator gave the row count the branches pass the register of the constant 1 the other
        sides pass, and `rows + 1` read `rows + rows` (README, "Known traps"). With the empty
        tensor made at run time the registers fall right there; the allocator's fault remains."""
        name, type_text = self.names[value], self.types[value]
        sizes = []
        for dim, size in enumerate(value.type.shape):
            if size is None:
                sizes.append(self.tensor_size(name, type_text, dim))
            else:
                sizes.append(self.opaque_int(size))
        listed, code, none, made = self.fresh(), self.fresh(), self.fresh(), self.fresh()
        self.emit(
            f"{listed} = torch.prim.ListConstruct {', '.join(sizes)} : "
            f"({', '.join(['!torch.int'] * len(sizes))}) -> !torch.list<int>"
        )
        self.emit(f"{code} = torch.constant.int {DTYPE_CODES[value.type.dtype]}")
        self.emit(f"{none} = torch.constant.none")
        dynamic = "!torch.vtensor<[" + ",".join("?" * len(sizes)) + f"],{MLIR_DTYPE[value.type.dtype]}>"
        self.emit(
            f"{made} = torch.aten.zeros {listed}, {code}, {none}, {none}, {none} : "
            f"!torch.list<int>, !torch.int, !torch.none, !torch.none, !torch.none -> {dynamic}"
        )
        self.define(value, made, dynamic)

    def tensor_size(self, name: str, type_text: str, dim: int) -> str:
        index, size = self.fresh(), self.fresh()
        self.emit(f"{index} = torch.constant.int {dim}")
        self.emit(f"{size} = torch.aten.size.int {name}, {index} : {type_text}, !torch.int -> !torch.int")
        return size
