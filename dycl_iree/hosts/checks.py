"""Host checks of `main` that the segment after them depends on (a mixin of the compiled host's emitter).

A check (`dycl::check_index`: an index in its range, an appended tensor of the list's sizes, a
non-empty list) guards the segment call that follows it, whose kernels have no bounds checks of
their own (README, "Known traps": IREE has no error inside a kernel). IREE 3.13 orders a
`torch.runtime.assert` only among host ops: the kernels of the next segment, which do not read its
condition, join the execution region of the kernels before the check and run before the VM reaches
the assert. A list that grows at run time appended a tensor wider than its own, the check failed,
and the concatenation had already written past its buffer: the process aborted ("double free or
corruption", fuzzer seed 80023) instead of raising the check's message.

So the next segment call reads its tensors through an `scf.if` on the checks whose failing side
asserts: IREE can schedule no kernel that reads them before the branch. Only the tensors' data pass
the branch; their sizes are the same SSA values after it as before (each tensor is tied to them
again). Gating the sizes instead (an int out of the branch, the tensor tied to it) gave the tensor a
size IREE could not prove equal to that of the same tensor read elsewhere, and the zoo's
Transformer translator, whose decoder loop reads its growing input both ways, returned wrong tokens
on 4 of its 6 samples (a heap corruption without the barrier on the tied tensor).

The values a loop carries, read in its body, do not pass the gate (a barrier on them there crashed
Tacotron2's decode loop), so a kernel that reads only those and ints can still run before a failing
check: the gate orders the kernels that read a tensor made since the loop's last iteration began.
"""

from __future__ import annotations

from .control_flow import _builtin_type


class CheckedCalls:
    """Collects the checks since the last segment call (`checked`) and gates the next call's
    tensors on them (`gated`). The list is the current block's: a region's own checks end with it
    (`block` of the emitter saves and restores it), and a region sees the checks before it."""

    pending_checks: list[str]
    loop_carried: set[str]  # the names of the values loops carry, in their bodies (`control_flow.loop`)

    def checked(self, inside: str) -> None:
        self.pending_checks.append(inside)

    def gated(self, operands: list[str], types: list[str]) -> list[str]:
        """`operands` (of a segment call, `types` their MLIR types) with each tensor made to depend
        on the pending checks; the same names where nothing is pending or no tensor is passed."""
        if not self.pending_checks:
            return operands
        checks, self.pending_checks = self.pending_checks, []
        # Not the values a loop carries, read in its body: behind barriers there, on the branch's
        # sides, Tacotron2's decode loop (its alignments, carried and appended to) crashed the
        # process (SIGSEGV) on the compiled host. A kernel that reads a carried tensor and a fresh
        # one (the piece a list appends) still waits for the fresh one.
        tensors = [
            position
            for position, (name, type_text) in enumerate(zip(operands, types))
            if _is_mapped_tensor(type_text) and name not in self.loop_carried
        ]
        if not tensors:
            return operands
        ok = checks[0]
        for other in checks[1:]:
            both = self.fresh()
            self.emit(f"{both} = torch.aten.__and__.bool {ok}, {other} : !torch.bool, !torch.bool -> !torch.bool")
            ok = both
        bit = self.to_builtin(ok, "!torch.bool")
        builtins = [str(_builtin_type(types[position])) for position in tensors]
        names = [self.to_builtin(operands[position], types[position]) for position in tensors]
        sizes = [self.dynamic_sizes(name, builtin) for name, builtin in zip(names, builtins)]
        listed = ", ".join(builtins)
        result, count = self.fresh(), len(tensors)
        self.emit(f"{result}{'' if count == 1 else f':{count}'} = scf.if {bit} -> ({listed}) {{")
        self.depth += 1
        # Each side passes its own barrier of the tensor: an `scf.if` whose sides yield the same
        # value folds away, and with it the order of the assert before the call's kernels.
        kept = [self.tied(self.barrier_of(n, b), b, s) for n, b, s in zip(names, builtins, sizes)]
        self.emit(f"scf.yield {', '.join(kept)} : {listed}")
        self.depth -= 1
        self.emit("} else {")
        self.depth += 1
        false = self.fresh()
        self.emit(f"{false} = torch.constant.bool false")
        self.emit(f'torch.runtime.assert {false}, "a check before this call failed"')
        kept = [self.tied(self.barrier_of(n, b), b, s) for n, b, s in zip(names, builtins, sizes)]
        self.emit(f"scf.yield {', '.join(kept)} : {listed}")
        self.depth -= 1
        self.emit(f"}} loc({self.where[-1]})")
        gated = list(operands)
        for index, (position, builtin, dims) in enumerate(zip(tensors, builtins, sizes)):
            out = result if count == 1 else f"{result}#{index}"
            gated[position] = self.from_builtin(self.tied(out, builtin, dims), types[position])
        return gated

    def dynamic_sizes(self, name: str, builtin: str) -> list[str]:
        """The `tensor.dim` of each dynamic dim of the builtin tensor `name`, in order."""
        dims = []
        for position, size in enumerate(builtin[len("tensor<") :].split("x")[:-1]):
            if size == "?":
                index, dim = self.fresh(), self.fresh()
                self.emit(f'{index} = "arith.constant"() {{value = {position} : index}} : () -> index')
                self.emit(f'{dim} = "tensor.dim"({name}, {index}) : ({builtin}, index) -> index')
                dims.append(dim)
        return dims

    def barrier_of(self, name: str, builtin: str) -> str:
        kept = self.fresh()
        self.emit(f'{kept} = "util.optimization_barrier"({name}) : ({builtin}) -> {builtin}')
        return kept

    def tied(self, name: str, builtin: str, dims: list[str]) -> str:
        """The builtin tensor `name` tied to the sizes `dims` (the same name where it has none)."""
        if not dims:
            return name
        tied = self.fresh()
        dim_types = ", ".join([builtin] + ["index"] * len(dims))
        self.emit(f'{tied} = "flow.tensor.tie_shape"({", ".join([name, *dims])}) : ({dim_types}) -> {builtin}')
        return tied


def _is_mapped_tensor(type_text: str) -> bool:
    """A tensor type that torch_c converts to a builtin one (not an unsigned tensor)."""
    return type_text.startswith("!torch.vtensor<") and _builtin_type(type_text) is not None
