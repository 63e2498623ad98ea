"""Host checks of `main` that the segment after them depends on (a mixin of the compiled host's emitter).

A check (`dycl::check_index`: an index in its range, an appended tensor of the list's sizes, a
non-empty list) guards the segment call that follows it, whose kernels have no bounds checks of
their own (README, "Known traps": IREE has no error inside a kernel). IREE 3.13 orders a
`torch.runtime.assert` only among host ops: the kernels of the next segment, which do not read its
condition, join the execution region of the kernels before the check and run before the VM reaches
the assert. A list that grows at run time appended a tensor wider than its own, the check
failed, and the concatenation had already written past its buffer: the process aborted ("double
free or corruption", fuzzer seed 80023) instead of raising the check's message.

So the checks' outcome gates the next segment's operands: its ints, and the dynamic sizes of its
tensors (the tensors tied to them again), leave a `torch.prim.If` on the checks whose failing side
asserts, and IREE can schedule nothing that reads them before the branch.
"""

from __future__ import annotations

from .control_flow import _builtin_type


class CheckedCalls:
    """Collects the checks since the last segment call (`checked`) and gates the next call's
    operands on them (`gated`). The list is the current block's: a region's own checks end with it
    (`block` of the emitter saves and restores it), and a region sees the checks before it."""

    pending_checks: list[str]

    def checked(self, inside: str) -> None:
        self.pending_checks.append(inside)

    def gated(self, operands: list[str], types: list[str]) -> list[str]:
        """`operands` (of a segment call, `types` their MLIR types) made to depend on the pending
        checks; the same names where nothing is pending or nothing can carry the dependence."""
        if not self.pending_checks:
            return operands
        checks, self.pending_checks = self.pending_checks, []
        # The ints that carry the dependence: int operands, and each dynamic size of a tensor.
        carried: list[tuple[int, int | None, str]] = []  # (operand, dim or None, !torch.int name)
        for position, (name, type_text) in enumerate(zip(operands, types)):
            if type_text == "!torch.int":
                carried.append((position, None, name))
            elif _builtin_type(type_text) is not None:
                shape = type_text[len("!torch.vtensor<[") :].split("]")[0].split(",")
                for dim, size in enumerate(shape):
                    if size == "?":
                        carried.append((position, dim, self.tensor_size(name, type_text, dim)))
        if not carried:
            return operands
        ok = checks[0]
        for other in checks[1:]:
            both = self.fresh()
            self.emit(f"{both} = torch.aten.__and__.bool {ok}, {other} : !torch.bool, !torch.bool -> !torch.bool")
            ok = both
        result = self.fresh()
        ints = ", ".join(["!torch.int"] * len(carried))
        count = len(carried)
        self.emit(f"{result}{'' if count == 1 else f':{count}'} = torch.prim.If {ok} -> ({ints}) {{")
        self.depth += 1
        self.emit(f"torch.prim.If.yield {', '.join(name for _, _, name in carried)} : {ints}")
        self.depth -= 1
        self.emit("} else {")
        self.depth += 1
        false = self.fresh()
        self.emit(f"{false} = torch.constant.bool false")
        self.emit(f'torch.runtime.assert {false}, "a check before this call failed"')
        # Not a constant: IREE's integer range analysis then took the constant for the size of
        # every buffer sized by it (OUT_OF_RANGE, "buffer byte_length=0"). The same ints behind a
        # barrier are different values (equal ones fold the branch away) of unknown range.
        others = [self.barrier(name, "!torch.int") for _, _, name in carried]
        self.emit(f"torch.prim.If.yield {', '.join(others)} : {ints}")
        self.depth -= 1
        self.emit("}")
        kept = [result if count == 1 else f"{result}#{index}" for index in range(count)]
        gated = list(operands)
        sizes: dict[int, list[str]] = {}
        for (position, dim, _), name in zip(carried, kept):
            if dim is None:
                gated[position] = name
            else:
                sizes.setdefault(position, []).append(name)
        for position, dims in sizes.items():
            gated[position] = self.tied(operands[position], types[position], dims)
        return gated

    def tensor_size(self, name: str, type_text: str, dim: int) -> str:
        index, size = self.fresh(), self.fresh()
        self.emit(f"{index} = torch.constant.int {dim}")
        self.emit(f"{size} = torch.aten.size.int {name}, {index} : {type_text}, !torch.int -> !torch.int")
        return size

    def tied(self, name: str, type_text: str, sizes: list[str]) -> str:
        """The tensor `name` with its dynamic sizes (in order) given by the ints `sizes`."""
        builtin = _builtin_type(type_text)
        tensor = self.to_builtin(name, type_text)
        # Behind a barrier: otherwise IREE 3.13's `EmplaceAllocationsPass` moves the kernel that made
        # the tensor to write into the buffer of what the call makes of it, which is sized after the
        # branch, and iree-compile fails ("operand #0 does not dominate this use").
        kept = self.fresh()
        self.emit(f'{kept} = "util.optimization_barrier"({tensor}) : ({builtin}) -> {builtin}')
        tensor = kept
        dims = []
        for size in sizes:
            wide, index = self.fresh(), self.fresh()
            self.emit(f'{wide} = "torch_c.to_i64"({size}) : (!torch.int) -> i64')
            self.emit(f'{index} = "arith.index_cast"({wide}) : (i64) -> index')
            dims.append(index)
        tied = self.fresh()
        dim_types = ", ".join([builtin] + ["index"] * len(dims))
        self.emit(f'{tied} = "flow.tensor.tie_shape"({", ".join([tensor, *dims])}) : ({dim_types}) -> {builtin}')
        return self.from_builtin(tied, type_text)
