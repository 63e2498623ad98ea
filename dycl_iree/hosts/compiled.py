"""The compiled host: a `main` function in the segments' MLIR module that carries the control flow.

`main` calls the segment functions and expresses branches as `torch.prim.If` and loops as
`torch.prim.Loop`, which IREE turns into scf.if / scf.while in its VM, so the whole dynamic network
is one function that any IREE runtime runs (`iree-run-module --function=main`).

IREE 3.13 lowers `torch.prim.Loop` correctly in only two forms (see ENVIRONMENT.md): every loop is
emitted in the while-like form, with trip count INT64_MAX, a counter carried by hand, the
condition `(counter + 1 < trip_count) and body_condition`, and a start condition `0 < trip_count`
behind `util.optimization_barrier` so that it cannot fold to a constant.

What this host cannot express (lists that grow at run time, `raise`, host ops IREE does not
legalize) raises `CompiledHostUnsupported`; the bundle then uses the Python host.

Example:
    >>> text = synthesize_compiled(program, lowered.signatures)     # doctest: +SKIP
    >>> text.splitlines()[0]                                        # doctest: +SKIP
    'func.func @main(%v0: !torch.vtensor<[1,8],f32>) -> (!torch.vtensor<[1,8],f32>) {'
"""

from __future__ import annotations

import itertools
import math
import struct
from typing import Any

from host_runtime.scalar_ops import op_key

from ..guards import CHECK_INDEX
from ..program import (
    REFINE,
    STAND_IN,
    Arg,
    Block,
    Constant,
    Emitter,
    HostOp,
    ListArg,
    Program,
    ScalarType,
    SegmentCall,
    TensorOp,
    TensorType,
    Value,
    dispatch,
    format_value,
)
from ..random_state import global_seed_draws
from ..sources import relative_sources
from ..specialize.values import UNINITIALIZED
from .checks import CheckedCalls
from .control_flow import ControlFlowEmitter, concatenations, segment_inputs
from .empties import RunTimeEmpties
from .lists import LIST_OPS, ScalarLists
from .scalars import emit_scalar_op
from .types import DTYPE_CODES, FLOAT_LIST, INT_LIST, MLIR_DTYPE, CompiledHostUnsupported, mlir_type

# Host ops that IREE 3.13 legalizes, checked one by one (ENVIRONMENT.md), and their result types; every
# other scalar op goes through 0-d tensors (`scalars.py`). Not `aten.remainder.int`: it legalizes,
# but with C's sign rule (-7 % 3 gives -1; TorchScript and Python give 2); nor `aten.floordiv.int`, whose
# division by zero stops the process with SIGFPE.
_LEGAL_HOST_OPS = {
    "aten::add.int": "!torch.int",
    "aten::sub.int": "!torch.int",
    "aten::mul.int": "!torch.int",
    "aten::neg.int": "!torch.int",
    "aten::lt.int": "!torch.bool",
    "aten::le.int": "!torch.bool",
    "aten::gt.int": "!torch.bool",
    "aten::ge.int": "!torch.bool",
    "aten::eq.int": "!torch.bool",
    "aten::ne.int": "!torch.bool",
    "aten::__and__.bool": "!torch.bool",
    "aten::__or__.bool": "!torch.bool",
    "aten::Bool.int": "!torch.bool",
    "prim::min.int": "!torch.int",
    "prim::max.int": "!torch.int",
    "aten::Float.Scalar": "!torch.float",
    "aten::add.float": "!torch.float",
    "aten::mul.float": "!torch.float",
    "aten::sub.float": "!torch.float",
}


# Comparisons with a float operand (TorchScript's `float_int` / `int_float` mix an int in), and the
# tensor comparison each is emitted as (see `_Emitter.float_comparison`).
_FLOAT_COMPARISONS = {
    f"aten::{op}.{operands}": op
    for op in ("gt", "lt", "ge", "le", "eq", "ne")
    for operands in ("float", "float_int", "int_float")
}


class _DependsOnUnsupported(CompiledHostUnsupported):
    """A node reads a value whose producer the compiled host could not express (reported there)."""


def _float_literal(value: float) -> str:
    if math.isfinite(value):
        return f"{value:.17e}"
    return "0x" + struct.pack(">d", value).hex().upper()


class _Emitter(CheckedCalls, ScalarLists, RunTimeEmpties, ControlFlowEmitter, Emitter):
    def __init__(
        self, signatures: dict[str, tuple[list[str], list[str]]], seeded: dict[str, list[TensorOp]] | None = None
    ) -> None:
        self.signatures = signatures
        # Segments with random ops on torch-mlir's global seed (`random_state.global_seed_draws`).
        self.seeded = seeded or {}
        self.lines: list[str] = []
        self.names: dict[Value, str] = {}
        self.types: dict[Value, str] = {}
        self.temporaries = itertools.count()
        self.where = ['"main"']
        self.depth = 1
        self.enclosing_loops = 0  # how many loops hold the one being emitted (`control_flow.loop`)
        self.loops_done = 0  # loops emitted so far, and how many there were when each value was made
        self.made_after: dict[Value, int] = {}
        self.concatenated: set[Value] = set()  # `control_flow.concatenations` of the program
        self.read_by_segments: set[Value] = set()  # `control_flow.segment_inputs` of the program
        # What the compiled host cannot express, each with where it is; the walk goes on past
        # each one so that the manifest lists them all, not only the first.
        self.unsupported: list[str] = []
        self.dropped: set[Value] = set()  # the outputs of the nodes reported there
        self.pending_checks: list[str] = []  # `checks.CheckedCalls`
        self.loop_carried: set[str] = set()

    def block(self, block: Block) -> None:
        outer_checks = self.pending_checks
        self.pending_checks = list(outer_checks)
        for node in block.nodes:
            depth, names, types, where = self.depth, dict(self.names), dict(self.types), list(self.where)
            try:
                dispatch(self, node)
            except _DependsOnUnsupported:
                pass  # already reported where the value came from
            except CompiledHostUnsupported as reason:
                source = getattr(node, "source", "")
                if not source and isinstance(node, SegmentCall):
                    source = f"a call of {node.segment}"
                text = str(reason)
                self.unsupported.append(text if not source or source in text else f"{text} ({source})")
            else:
                continue
            # Restore the walk's state and leave the node's outputs undefined for what follows.
            self.depth, self.names, self.types, self.where = depth, names, types, where
            for value in node.outputs:
                self.names.pop(value, None)
                self.dropped.add(value)
        self.pending_checks = outer_checks

    def emit(self, line: str) -> None:
        # Every op carries the decision it lies in as its location, so that an iree-compile error
        # about `main` names the construct ("loop1 model.py:12") instead of a line of generated text.
        if line[:1] in ("%", '"') or line.startswith(("torch.", "func.")) or line.startswith("} :"):
            if not line.endswith("{"):
                line += f" loc({self.where[-1]})"
        self.lines.append("  " * self.depth + line)

    def located(self, label: str, source: str) -> str:
        # The vmfb keeps these locations: no path of the building machine (`sources`).
        text = relative_sources(f"{label} {source}".strip().replace("\\", "/").replace('"', "'"))
        return f'"{text}"'

    def fresh(self) -> str:
        return f"%t{next(self.temporaries)}"

    def define(self, value: Value, name: str, type_text: str) -> None:
        self.names[value] = name
        self.types[value] = type_text
        self.made_after[value] = self.loops_done

    def across_a_loop(self, arg: Arg) -> None:
        """Put a tensor made before a loop and read after it, outside any loop, behind a barrier.

        IREE 3.13's `EmplaceAllocationsPass` otherwise moves the tensor's dispatch to write into the
        buffer of a concatenation after the loop, whose size the loop decides, and iree-compile
        fails ("operand #1 does not dominate this use"; `ts = [h * 0.5]`, a loop over `h`, then
        `torch.cat(ts + [h])`, fuzzer seed 74203)."""
        if (
            self.enclosing_loops == 0
            and isinstance(arg, Value)
            and arg in self.names
            and self.types[arg].startswith("!torch.vtensor")
            and self.made_after.get(arg, self.loops_done) < self.loops_done
        ):
            self.define(arg, self.barrier(self.names[arg], self.types[arg]), self.types[arg])

    def operand(self, arg: Arg, want: str | None = None) -> tuple[str, str]:
        """The SSA name and MLIR type of `arg`, materializing constants, cast to `want` if given."""
        if isinstance(arg, Value):
            if arg in self.dropped:
                raise _DependsOnUnsupported()
            if arg not in self.names:
                # A Program that reads a value where no path defines it: say which, never fall back
                # without a reason.
                raise CompiledHostUnsupported(f"{format_value(arg)} is read where it is not defined")
            name, type_text = self.names[arg], self.types[arg]
        elif isinstance(arg, Constant):
            name, type_text = self.constant(arg.value, want)
        else:
            raise CompiledHostUnsupported("a list built on the host")
        if want is not None and want != type_text:
            name, type_text = self.cast(name, type_text, want), want
        return name, type_text

    def constant(self, value: Any, want: str | None) -> tuple[str, str]:
        name = self.fresh()
        if isinstance(value, bool):
            self.emit(f"{name} = torch.constant.bool {'true' if value else 'false'}")
            return name, "!torch.bool"
        if isinstance(value, int):
            if want == "!torch.float":
                value = float(value)
            else:
                self.emit(f"{name} = torch.constant.int {value}")
                return name, "!torch.int"
        if isinstance(value, float):
            self.emit(f"{name} = torch.constant.float {_float_literal(value)}")
            return name, "!torch.float"
        if isinstance(value, list) and want in (INT_LIST, FLOAT_LIST):
            # A constant list that a run-time one starts from (`tokens = [0]` before a loop grows it).
            element = "int" if want == INT_LIST else "float"
            if all(type(item) is int or element == "float" and type(item) is float for item in value):
                self.scalar_list(tuple(Constant(item) for item in value), element, name)
                return name, want
        if value is UNINITIALIZED:
            # TorchScript's value of a `return` inside a loop, until the loop returns: the compiled
            # host's loop carries a stand-in there, which exists for tensors and scalars only.
            raise CompiledHostUnsupported(
                "a list returned from inside a loop (unset until the loop returns: the compiled host "
                "stands in for tensors and scalars only)"
            )
        raise CompiledHostUnsupported(f"a constant {type(value).__name__} on a host path")

    def cast(self, name: str, have: str, want: str) -> str:
        result = self.fresh()
        if have.startswith("!torch.vtensor") and want.startswith("!torch.vtensor"):
            self.emit(f"{result} = torch.tensor_static_info_cast {name} : {have} to {want}")
        elif have == "!torch.int" and want == "!torch.float":
            self.emit(f"{result} = torch.aten.Float.Scalar {name} : !torch.int -> !torch.float")
        elif have == "!torch.bool" and want == "!torch.int":
            self.emit(f"{result} = torch.aten.Int.bool {name} : !torch.bool -> !torch.int")
        elif have == "!torch.float" and want == "!torch.vtensor<[],f32>":
            # The float through a barrier of its own: the same float made a 0-d tensor in two places
            # of nested loops became one dispatch whose only operand was a scalar, which IREE 3.13
            # left outside every execution region (fuzzer seed 130096; README, "Known traps").
            # Converted on the host instead (`arith.truncf`), the VM code failed to legalize.
            wide = self.fresh()
            self.emit(
                f"{wide} = torch.prim.NumToTensor.Scalar {self.barrier(name, have)} : !torch.float -> "
                "!torch.vtensor<[],f64>"
            )
            code, false, none = self.fresh(), self.fresh(), self.fresh()
            self.emit(f"{code} = torch.constant.int 6")
            self.emit(f"{false} = torch.constant.bool false")
            self.emit(f"{none} = torch.constant.none")
            self.emit(
                f"{result} = torch.aten.to.dtype {wide}, {code}, {false}, {false}, {none} : "
                f"!torch.vtensor<[],f64>, !torch.int, !torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[],f32>"
            )
        else:
            raise CompiledHostUnsupported(f"passing a {have} where {want} is expected")
        return result

    # -- nodes --------------------------------------------------------------------------------
    def segment_call(self, node: SegmentCall) -> None:
        if len(self.where) > 1 and node.segment in self.seeded:
            # iree-compile 3.13 dies with SIGFPE on the global seed's store inside a region (README's traps).
            op = self.seeded[node.segment][0]
            raise CompiledHostUnsupported(
                f"{op.target} ({op.source}) draws from torch-mlir's global random seed, which iree-compile "
                "cannot update inside a loop or an if"
            )
        params, results = self.signatures[node.segment]
        for arg in node.args:
            self.across_a_loop(arg)
        operands = self.gated([self.operand(arg, want)[0] for arg, want in zip(node.args, params)], params)
        result = self.fresh()
        count = len(results)
        target = result if count == 1 else f"{result}:{count}"
        results_text = results[0] if count == 1 else f"({', '.join(results)})"
        self.emit(
            f"{target} = func.call @{node.segment}({', '.join(operands)}) : ({', '.join(params)}) -> {results_text}"
        )
        for position, (value, type_text) in enumerate(zip(node.outputs, results)):
            self.define(value, result if count == 1 else f"{result}#{position}", type_text)
            if isinstance(value.type, TensorType) and 0 in value.type.shape:
                self.empty_at_run_time(value)

    def host_op(self, node: HostOp) -> None:
        target = node.target
        (output,) = node.outputs or (None,)
        result = self.fresh()
        if target in ("aten::Bool.Tensor", "aten::Int.Tensor", "aten::Float.Tensor"):
            operand, type_text = self.operand(node.args[0])
            result_type = mlir_type(output.type)
            op = "torch." + target.replace("::", ".")
            self.emit(f"{result} = {op} {operand} : {type_text} -> {result_type}")
        elif target == "aten::size.int":
            tensor, tensor_type = self.operand(node.args[0])
            dim, _ = self.operand(node.args[1], "!torch.int")
            result_type = "!torch.int"
            self.emit(f"{result} = torch.aten.size.int {tensor}, {dim} : {tensor_type}, !torch.int -> !torch.int")
        elif target == "aten::__not__.bool":
            # torch-mlir/IREE cannot lower aten.__not__; an scf.if that yields the opposite can.
            operand, _ = self.operand(node.args[0], "!torch.bool")
            result_type = "!torch.bool"
            self.emit(f"{result} = torch.prim.If {operand} -> (!torch.bool) {{")
            self.depth += 1
            false = self.constant(False, None)[0]
            self.emit(f"torch.prim.If.yield {false} : !torch.bool")
            self.depth -= 1
            self.emit("} else {")
            self.depth += 1
            true = self.constant(True, None)[0]
            self.emit(f"torch.prim.If.yield {true} : !torch.bool")
            self.depth -= 1
            self.emit("}")
        elif target == CHECK_INDEX:
            self.check_index(*node.args)
            return
        elif target == REFINE:
            operand, type_text = self.operand(node.args[0])
            result_type = mlir_type(output.type)
            result = self.cast(operand, type_text, result_type)
        elif target == STAND_IN:
            result_type = mlir_type(output.type)
            self.zeros(output.type, result)
        elif target == "prim::RaiseException":
            # The VM fails the call with the message (FAILED_PRECONDITION); the runner raises ModelRaised.
            false = self.constant(False, None)[0]
            text = self.message_text(f"model raised: {node.args[0].value}", node.source)
            self.emit(f'torch.runtime.assert {false}, "{text}"')
            return
        elif target in _FLOAT_COMPARISONS:
            result_type = "!torch.bool"
            self.float_comparison(_FLOAT_COMPARISONS[target], node.args, result)
        elif target in LIST_OPS:
            result_type = LIST_OPS[target](self, node, result)
        elif target in _LEGAL_HOST_OPS:
            args = node.args
            result_type = _LEGAL_HOST_OPS[target]
            kind = target.split(".")[-1]
            want = {"int": "!torch.int", "float": "!torch.float", "bool": "!torch.bool"}.get(kind)
            operands = [self.operand(arg, want) for arg in args]
            op = "torch." + target.replace("::", ".")
            self.emit(
                f"{result} = {op} {', '.join(o[0] for o in operands)} : "
                f"{', '.join(o[1] for o in operands)} -> {result_type}"
            )
        elif (
            output is not None
            and isinstance(output.type, ScalarType)
            and emit_scalar_op(self, op_key(target), node.args, output.type.kind, node.source, result)
        ):
            result_type = mlir_type(output.type)
        else:
            where = f" ({node.source})" if node.source else ""
            raise CompiledHostUnsupported(f"host operation {target}{where}")
        self.define(output, result, result_type)

    def zeros(self, type_: TensorType, result: str) -> None:
        """`result` = zeros of `type_`, sized at run time (the hint's sizes behind a barrier).

        Not a literal: IREE gives a constant its own resource lifetime, and an `scf.if` or
        `scf.while` that yields it on one side and a computed tensor on the other is rejected
        ("successor operand type '!stream.resource<constant>' should match ... '<external>'").
        """
        sizes = [self.opaque_int(size) for size in type_.hint]
        listed, code, none, made = self.fresh(), self.fresh(), self.fresh(), self.fresh()
        self.emit(
            f"{listed} = torch.prim.ListConstruct {', '.join(sizes)} : "
            f"({', '.join(['!torch.int'] * len(sizes))}) -> !torch.list<int>"
        )
        self.emit(f"{code} = torch.constant.int {DTYPE_CODES[type_.dtype]}")
        self.emit(f"{none} = torch.constant.none")
        dynamic = "!torch.vtensor<[" + ",".join("?" * len(sizes)) + f"],{MLIR_DTYPE[type_.dtype]}>"
        self.emit(
            f"{made} = torch.aten.zeros {listed}, {code}, {none}, {none}, {none} : "
            f"!torch.list<int>, !torch.int, !torch.none, !torch.none, !torch.none -> {dynamic}"
        )
        self.emit(f"{result} = torch.tensor_static_info_cast {made} : {dynamic} to {mlir_type(type_)}")

    def check_index(self, index: Arg, low: Arg, high: Arg, message: Constant) -> None:
        """Fail the call unless low <= index < high: IREE's VM reports the message (FAILED_PRECONDITION)."""
        index_name = self.operand(index, "!torch.int")[0]
        above, below, inside = self.fresh(), self.fresh(), self.fresh()
        low_name, high_name = self.operand(low, "!torch.int")[0], self.operand(high, "!torch.int")[0]
        self.emit(f"{above} = torch.aten.ge.int {index_name}, {low_name} : !torch.int, !torch.int -> !torch.bool")
        self.emit(f"{below} = torch.aten.lt.int {index_name}, {high_name} : !torch.int, !torch.int -> !torch.bool")
        self.emit(f"{inside} = torch.aten.__and__.bool {above}, {below} : !torch.bool, !torch.bool -> !torch.bool")
        self.emit(f'torch.runtime.assert {inside}, "{self.message_text(message.value, "")}"')
        self.checked(inside)  # the next segment call waits for it (`checks.py`)

    @staticmethod
    def message_text(message: str, source: str) -> str:
        """An error message for `torch.runtime.assert`: with its line, without a build path or quotes."""
        text = f"{message} ({source})" if source else message
        return relative_sources(text.replace("\\", "/").replace('"', "'"))

    def float_comparison(self, op: str, args: tuple, result: str) -> None:
        """`result` = a comparison of two host floats (or a float and an int), as PyTorch decides it.

        Through 0-d f64 tensors, not `torch.aten.gt.float`: torch-mlir lowers that to an unordered
        `arith.cmpf ugt`, true when an operand is NaN (PyTorch and Python: false), and leaves
        `aten.lt.float` unlowered ("failed to legalize operation 'torch.constant.float'"). Tensor
        comparisons are ordered; the 0-d ops fold into the host code.
        """
        tensors = []
        for arg in args:
            scalar, _ = self.operand(arg, "!torch.float")
            tensor = self.fresh()
            self.emit(f"{tensor} = torch.prim.NumToTensor.Scalar {scalar} : !torch.float -> !torch.vtensor<[],f64>")
            tensors.append(tensor)
        compared = self.fresh()
        self.emit(
            f"{compared} = torch.aten.{op}.Tensor {tensors[0]}, {tensors[1]} : "
            "!torch.vtensor<[],f64>, !torch.vtensor<[],f64> -> !torch.vtensor<[],i1>"
        )
        self.emit(f"{result} = torch.aten.Bool.Tensor {compared} : !torch.vtensor<[],i1> -> !torch.bool")

    def opaque_int(self, value: int) -> str:
        """A `!torch.int` of `value` that the compiler cannot see through (an optimization barrier)."""
        return self.barrier(self.constant(value, None)[0], "!torch.int")


def synthesize_compiled(program: Program, signatures: dict[str, tuple[list[str], list[str]]]) -> str:
    """MLIR text of `func.func @main`, or CompiledHostUnsupported naming what it cannot express."""
    seeded = {segment.name: global_seed_draws(segment) for segment in program.segments}
    emitter = _Emitter(signatures, {name: ops for name, ops in seeded.items() if ops})
    emitter.concatenated = concatenations(program)
    emitter.read_by_segments = segment_inputs(program)
    params = _abi_params(emitter, program.inputs)
    result_types = []
    for arg in program.body.results:
        try:
            result_types.append(_result_type(arg))
        except CompiledHostUnsupported as reason:
            emitter.unsupported.append(str(reason))
    emitter.block(program.body)
    if emitter.unsupported:
        raise CompiledHostUnsupported("; ".join(dict.fromkeys(emitter.unsupported)))
    results = emitter.region_results(program.body, result_types)
    results, result_types = _abi_results(emitter, results, result_types)
    body = emitter.lines
    header = f"func.func @main({', '.join(params)}) -> ({', '.join(result_types)}) {{"
    footer = [f"  return {', '.join(results)} : {', '.join(result_types)}", "}"]
    return "\n".join([header, *body, *footer])


# The calling convention of `main` (MAIN_ABI, the manifest's `main_abi`): every int, float and bool
# input and output is a 0-d tensor, so the VM signature of `main` holds only buffer views. IREE
# runtimes disagree on how scalar arguments of a VM call are laid out (the C runtime snapshot loses an
# i64's high half and shifts the arguments after it, README's traps), but all pass buffer views alike.
# A float is float32, as everywhere in an IREE module (iree-compile demotes f64 to f32 by default);
# a bool is one byte (i1 tensors are stored as i8).
_ABI_TENSORS = {
    "!torch.int": ("!torch.vtensor<[],si64>", "Int"),
    "!torch.float": ("!torch.vtensor<[],f32>", "Float"),
    "!torch.bool": ("!torch.vtensor<[],i1>", "Bool"),
}


def _abi_params(emitter: _Emitter, inputs: list[Value]) -> list[str]:
    """The parameters of `main`; a scalar input arrives as a 0-d tensor and is read into its torch
    scalar first thing, so the body sees the same `!torch.int` / `.float` / `.bool` as before."""
    params = []
    for index, value in enumerate(inputs):
        type_text = mlir_type(value.type)
        name = f"%arg{index}"
        if type_text not in _ABI_TENSORS:
            emitter.define(value, name, type_text)
            params.append(f"{name}: {type_text}")
            continue
        tensor, read = _ABI_TENSORS[type_text]
        scalar = emitter.fresh()
        emitter.emit(f"{scalar} = torch.aten.{read}.Tensor {name} : {tensor} -> {type_text}")
        emitter.define(value, scalar, type_text)
        params.append(f"{name}: {tensor}")
    return params


def _abi_results(emitter: _Emitter, results: list[str], types: list[str]) -> tuple[list[str], list[str]]:
    """The results of `main`, a scalar one wrapped into its 0-d tensor."""
    names, abi_types = [], []
    for name, type_text in zip(results, types):
        if type_text not in _ABI_TENSORS:
            names.append(name)
            abi_types.append(type_text)
            continue
        tensor = _ABI_TENSORS[type_text][0]
        if type_text == "!torch.float":  # through f64, as torch does
            wrapped = emitter.cast(name, type_text, tensor)
        else:  # NumToTensor takes no bool: a bool goes through its int, then to bool (`!= 0`)
            number = emitter.cast(name, type_text, "!torch.int") if type_text == "!torch.bool" else name
            wrapped = emitter.fresh()
            emitter.emit(f"{wrapped} = torch.prim.NumToTensor.Scalar {number} : !torch.int -> !torch.vtensor<[],si64>")
            if type_text == "!torch.bool":
                wrapped = emitter.to_dtype(wrapped, "!torch.vtensor<[],si64>", "bool", tensor)
        names.append(wrapped)
        abi_types.append(tensor)
    return names, abi_types


def _result_type(arg: Arg) -> str:
    if isinstance(arg, Value):
        return mlir_type(arg.type)
    if isinstance(arg, Constant):
        value = arg.value
        if isinstance(value, bool):
            return "!torch.bool"
        if isinstance(value, int):
            return "!torch.int"
        if isinstance(value, float):
            return "!torch.float"
        raise CompiledHostUnsupported("a constant tensor output")
    if isinstance(arg, ListArg):
        raise CompiledHostUnsupported("a list output")
    raise CompiledHostUnsupported(f"an output of kind {type(arg).__name__}")


# ---------------------------------------------------------------------------------------------
# Putting `main` into the lowered module (MLIR surgery on torch-mlir's module)
# ---------------------------------------------------------------------------------------------


def name_module(lowered: Any, name: str) -> None:
    """Give the MLIR module its name: IREE's runtime names the vmfb's module after it."""
    from torch_mlir import ir

    with lowered.context:
        lowered.module.operation.attributes["sym_name"] = ir.StringAttr.get(name)


def attach_main(lowered: Any, main_text: str) -> None:
    """Add `main` (the text `synthesize_compiled` wrote) to the lowered module, its calls inlined.

    `main` is parsed beside declarations of the segments, then moved into the real module:
    parsing it alone would fail symbol verification of its calls, and the real module's text is
    not re-parsed because it carries the weights. `torch_c` and `util` ops are written in generic
    form and parsed as unregistered ops: torch-mlir's context does not load those IREE dialects.
    """
    from torch_mlir import ir

    declarations = []
    for name, (params, results) in lowered.signatures.items():
        declarations.append(f"func.func private @{name}({', '.join(params)}) -> ({', '.join(results)})")
    text = "module {\n" + "\n".join(declarations) + "\n" + main_text + "\n}"
    lowered.context.allow_unregistered_dialects = True
    try:
        scratch = ir.Module.parse(text, lowered.context)
    except Exception as error:
        raise CompiledHostUnsupported(f"the compiled host does not parse: {error}") from error
    main = list(scratch.body.operations)[-1].detach_from_parent()
    lowered.module.body.append(main)
    _inline_segments_into_main(lowered)


def _inline_segments_into_main(lowered: Any) -> None:
    """Inline the segment calls of `main` while the module is still in the torch dialect.

    iree-compile inlines them itself, but only after lowering to linalg, and a segment that slices
    along a dynamic dim then holds `affine.apply` ops, which MLIR's inliner does not move into the
    region of an `scf.if`; the call survives, and `torch-iree-func-conversion` rejects it ("'func.call'
    op 'seg1' does not reference a valid function"). In the torch dialect every call inlines. The
    segments stay as public functions for the Python host; no simplification pipeline runs, so they
    are unchanged.
    """
    from torch_mlir.passmanager import PassManager

    with lowered.context:
        PassManager.parse("builtin.module(inline{default-pipeline=})").run(lowered.module.operation)


def remove_main(lowered: Any) -> None:
    """Take `main` out again (the bundle falls back to the Python host)."""
    for op in list(lowered.module.body.operations):
        if op.operation.name == "func.func" and str(op.attributes["sym_name"]) == '"main"':
            op.operation.erase()
