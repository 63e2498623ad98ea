"""The Program: the one IR every stage after capture reads and writes.

A Program is a typed, immutable tree of blocks, like a jaxpr with structured control flow:

* a `Block` has parameters, a list of nodes and results;
* nodes are `TensorOp` (one aten op on tensors, before partitioning), `SegmentCall` (a call of a
  straight-line sub-network, after partitioning), `HostOp` (scalar and list arithmetic, shape reads
  and sync points that read a tensor back to the host), `If` and `Loop`;
* every value is a `Value` with a type: `TensorType`, `ScalarType` or `ListType`.

`specialize` produces a Program whose tensor code is still inline (`TensorOp`s); `partition` moves
maximal runs of tensor code into `Segment`s and leaves `SegmentCall`s in their place. Everything
else (the reference interpreter, both host generators, shape and liveness analyses, the printer)
is a walk over this one structure, see `Walker`.

Example:
    >>> x = Value(0, TensorType("float32", (None, 4), (2, 4)), "x")
    >>> print(format_type(x.type))
    f32[?,4]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# Scalar kinds a host value can have. Floats travel into segments as 0-d float32 tensors,
# bools and ints as `!torch.int` (see lower.py for why).
SCALAR_KINDS = ("int", "float", "bool")

_SHORT_DTYPE = {
    "float32": "f32",
    "float64": "f64",
    "float16": "f16",
    "bfloat16": "bf16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "i1",
}


@dataclass(frozen=True)
class TensorType:
    """A tensor's dtype and shape; `None` marks a dim that varies at run time.

    `hint` holds one concrete size per dim (an example, never compared): it seeds the example
    tensors that `torch.export` traces each segment with.
    """

    dtype: str
    shape: tuple[int | None, ...]
    hint: tuple[int, ...] = field(default=(), compare=False)

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class ScalarType:
    """A host scalar: `kind` is "int", "float" or "bool"; `hint` is an example value."""

    kind: str
    hint: Any = field(default=None, compare=False)


@dataclass(frozen=True)
class ListType:
    """A list that lives on the host and may grow at run time (`List[int]` of a decoder)."""

    element: str
    hint: tuple = field(default=(), compare=False)


Type = TensorType | ScalarType | ListType


@dataclass(frozen=True)
class Value:
    """An SSA value. Identity is `id`; `name` is a readable hint taken from TorchScript."""

    id: int
    type: Type
    name: str = ""

    def __hash__(self) -> int:
        return self.id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Value) and other.id == self.id


@dataclass(frozen=True, eq=False)
class Constant:
    """A value known at export time: a Python scalar, None, a list, a string or a tensor (weights)."""

    value: Any


@dataclass(frozen=True)
class ListArg:
    """A fixed-length list built from values and constants (a shape, the tensors of a `cat`)."""

    items: tuple[Arg, ...]


Arg = Value | Constant | ListArg


@dataclass(frozen=True)
class TensorOp:
    """One aten op on tensors: `target` is the overload ("aten::linear.default")."""

    target: str
    args: tuple[Arg, ...]
    kwargs: tuple[tuple[str, Arg], ...]
    outputs: tuple[Value, ...]
    source: str
    # How `outputs` map onto what the op returns: "single", "tuple" or "list".
    returns: str = "single"


# A host op without arguments whose one output is a tensor that is never read: it stands in for a
# value TorchScript leaves uninitialized on one side of a branch or loop (the Python host binds
# None; the compiled host, which must yield a value of the type, a zero tensor).
STAND_IN = "dycl::stand_in"

# A host op from a tensor to the same tensor under a narrower type (dims static that were dynamic):
# what a loop carries into the next iteration, where the paths that leave the loop (a `break`)
# yield the slot at another size than those that go on (`specialize/loop_exits.py`). The Python
# host binds the tensor as it is; the compiled host casts it to the narrower type.
REFINE = "dycl::refine"


@dataclass(frozen=True)
class HostOp:
    """A host-side operation on scalars or lists, a shape read, or a sync point.

    `target` names a TorchScript op ("aten::add.int", "aten::Bool.Tensor", "aten::size.int",
    "aten::append.t", "prim::RaiseException", ...). Lists are values here: `aten::append.t`
    returns the new list, so the IR stays SSA even where TorchScript mutates a list in place.
    """

    target: str
    args: tuple[Arg, ...]
    outputs: tuple[Value, ...]
    source: str


@dataclass(frozen=True)
class SegmentCall:
    """A call of the straight-line sub-network `segment`.

    `args` are Values, or int Constants where the segment takes an index as a parameter so that
    several places can share it (see partition.py).
    """

    segment: str
    args: tuple[Arg, ...]
    outputs: tuple[Value, ...]


@dataclass(frozen=True)
class Block:
    params: tuple[Value, ...]
    nodes: tuple[Node, ...]
    results: tuple[Arg, ...]


@dataclass(frozen=True)
class If:
    """A data-dependent branch. `label` names the decision in reports ("if0 model.py:12")."""

    condition: Value
    then_block: Block
    else_block: Block
    outputs: tuple[Value, ...]
    label: str
    source: str


@dataclass(frozen=True)
class Loop:
    """TorchScript's `prim::Loop`: runs while `index < trip_count` and the condition holds.

    `body.params` are (index, *carried); `body.results` are (continue_condition, *carried).
    """

    trip_count: Arg
    condition: Arg
    initial: tuple[Arg, ...]
    body: Block
    outputs: tuple[Value, ...]
    label: str
    source: str


Node = TensorOp | HostOp | SegmentCall | If | Loop


@dataclass(frozen=True)
class Segment:
    """A condition-free sub-network: one function in the compiled module."""

    name: str
    params: tuple[Value, ...]
    nodes: tuple[TensorOp, ...]
    results: tuple[Value, ...]


@dataclass(frozen=True)
class Program:
    """A whole dynamic network.

    `output_tree` rebuilds the model's output structure from `body.results`: an int is the index
    of a result, a list is a tuple of subtrees. With `random_state`, the last of `body.params` is
    the random generator's state (two int32 words) and the last of `body.results` the state
    after the run; neither is a model input or output (`random_state.py`).

    `input_names` are all of `forward`'s inputs; those in `none_inputs` (an `Optional` input whose
    example was None) were specialized to None, as a constant, so no host takes them: their
    `(name, declared type, whether forward defaults it to None)`. The others are `body.params`.
    """

    input_names: tuple[str, ...]
    body: Block
    output_tree: Any
    segments: tuple[Segment, ...] = ()
    name: str = "model"
    random_state: bool = False
    none_inputs: tuple[tuple[str, str, bool], ...] = ()

    @property
    def inputs(self) -> tuple[Value, ...]:
        return self.body.params

    @property
    def taken_input_names(self) -> tuple[str, ...]:
        """The names of the inputs the hosts take (`body.params`, less the random state)."""
        dropped = {name for name, _, _ in self.none_inputs}
        return tuple(name for name in self.input_names if name not in dropped)

    def segment(self, name: str) -> Segment:
        for segment in self.segments:
            if segment.name == name:
                return segment
        raise KeyError(name)

    def replace(self, **changes: Any) -> Program:
        return dataclasses.replace(self, **changes)


# ---------------------------------------------------------------------------------------------
# Walking the IR


def iter_nodes(block: Block) -> Iterator[Node]:
    """Every node of `block` and of the blocks nested in it, outer before inner."""
    for node in block.nodes:
        yield node
        for inner in sub_blocks(node):
            yield from iter_nodes(inner)


def sub_blocks(node: Node) -> tuple[Block, ...]:
    if isinstance(node, If):
        return (node.then_block, node.else_block)
    if isinstance(node, Loop):
        return (node.body,)
    return ()


def map_sub_blocks(node: Node, transform: Any) -> Node:
    """The node with every nested block replaced by `transform(block)` (other nodes unchanged)."""
    if isinstance(node, If):
        return dataclasses.replace(node, then_block=transform(node.then_block), else_block=transform(node.else_block))
    if isinstance(node, Loop):
        return dataclasses.replace(node, body=transform(node.body))
    return node


def arg_values(arg: Arg) -> Iterator[Value]:
    """The Values an argument reads (a ListArg reads each of its items)."""
    if isinstance(arg, Value):
        yield arg
    elif isinstance(arg, ListArg):
        for item in arg.items:
            yield from arg_values(item)


def node_inputs(node: Node) -> Iterator[Value]:
    """The Values a node reads directly (not those its nested blocks read)."""
    if isinstance(node, TensorOp):
        args: tuple[Arg, ...] = node.args + tuple(a for _, a in node.kwargs)
    elif isinstance(node, (HostOp, SegmentCall)):
        args = node.args
    elif isinstance(node, If):
        args = (node.condition,)
    else:
        args = (node.trip_count, node.condition) + node.initial
    for arg in args:
        yield from arg_values(arg)


def dispatch(visitor: Any, node: Node) -> Any:
    """Call the visitor's method for the node's kind: `tensor_op`, `host_op`, `segment_call`,
    `if_` or `loop`. Every walk over a Program (interpreters, host generators) dispatches here."""
    if isinstance(node, TensorOp):
        return visitor.tensor_op(node)
    if isinstance(node, HostOp):
        return visitor.host_op(node)
    if isinstance(node, SegmentCall):
        return visitor.segment_call(node)
    if isinstance(node, If):
        return visitor.if_(node)
    return visitor.loop(node)


class Emitter:
    """Base of the walks that write code for a partitioned Program (the two host generators)."""

    def block(self, block: Block) -> None:
        for node in block.nodes:
            dispatch(self, node)

    def tensor_op(self, node: TensorOp) -> None:
        raise ValueError(f"{node.target} outside any segment: partition the Program before generating a host")


class Walker:
    """Base class of every walk over a Program: one method per node kind, like torch.fx's Interpreter.

    `run_block` binds parameters, dispatches each node to `tensor_op` / `host_op` / `segment_call` /
    `if_` / `loop`, and reads the results. Subclasses keep their own state in `self.env`.
    """

    def __init__(self) -> None:
        self.env: dict[Value, Any] = {}

    def read(self, arg: Arg) -> Any:
        if isinstance(arg, Value):
            return self.env[arg]
        if isinstance(arg, ListArg):
            return [self.read(item) for item in arg.items]
        return arg.value

    def run_block(self, block: Block, args: tuple | list) -> list:
        for param, arg in zip(block.params, args):
            self.env[param] = arg
        for node in block.nodes:
            self.run_node(node)
        return [self.read(result) for result in block.results]

    def run_node(self, node: Node) -> None:
        results = dispatch(self, node)
        for value, result in zip(node.outputs, results):
            self.env[value] = result

    def tensor_op(self, node: TensorOp) -> list:
        raise NotImplementedError(type(self).__name__ + " does not run TensorOps")

    def host_op(self, node: HostOp) -> list:
        raise NotImplementedError(type(self).__name__ + " does not run HostOps")

    def segment_call(self, node: SegmentCall) -> list:
        raise NotImplementedError(type(self).__name__ + " does not run SegmentCalls")

    def if_(self, node: If) -> list:
        raise NotImplementedError(type(self).__name__ + " does not run Ifs")

    def loop(self, node: Loop) -> list:
        raise NotImplementedError(type(self).__name__ + " does not run Loops")


# ---------------------------------------------------------------------------------------------
# Printing


def format_type(type_: Type) -> str:
    if isinstance(type_, TensorType):
        dims = ",".join("?" if d is None else str(d) for d in type_.shape)
        return f"{_SHORT_DTYPE.get(type_.dtype, type_.dtype)}[{dims}]"
    if isinstance(type_, ScalarType):
        return type_.kind
    return f"list[{type_.element}]"


def format_value(value: Value) -> str:
    return f"%{value.name or 'v'}{value.id}" if value.name else f"%{value.id}"


def format_arg(arg: Arg) -> str:
    if isinstance(arg, Value):
        return format_value(arg)
    if isinstance(arg, ListArg):
        return "[" + ", ".join(format_arg(a) for a in arg.items) + "]"
    value = arg.value
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"<const {str(value.dtype).replace('torch.', '')}{list(value.shape)}>"
    return repr(value)


def _typed(values: tuple[Value, ...]) -> str:
    return ", ".join(f"{format_value(v)}: {format_type(v.type)}" for v in values)


def format_program(program: Program) -> str:
    """Readable text of a Program: segments with their signatures, then the host around them.

    >>> print(format_program(program))          # doctest: +SKIP
    segment seg0(%x0: f32[1,8]) -> (%y3: f32[1,8], %5: i1[])   # 3 ops
    ...
    """
    lines: list[str] = []
    for segment in program.segments:
        lines.append(
            f"segment {segment.name}({_typed(segment.params)}) -> ({_typed(segment.results)})"
            f"    # {len(segment.nodes)} ops"
        )
        for node in segment.nodes:
            lines.append("    " + _format_node_head(node))
    if program.segments:
        lines.append("")
    lines.append(f"host {program.name}({_typed(program.inputs)}):")
    for name, declared, _ in program.none_inputs:
        lines.append(f"    # {name}: {declared}, exported as None (a constant; no host takes it)")
    _format_block(program.body, 1, lines)
    return "\n".join(lines)


def _format_node_head(node: Node) -> str:
    outputs = ", ".join(format_value(v) for v in node.outputs)
    prefix = f"{outputs} = " if outputs else ""
    if isinstance(node, TensorOp):
        args = [format_arg(a) for a in node.args] + [f"{k}={format_arg(a)}" for k, a in node.kwargs]
        text = f"{prefix}{node.target}({', '.join(args)})"
        return text + (f"    # {node.source}" if node.source else "")
    if isinstance(node, HostOp):
        text = f"{prefix}{node.target}({', '.join(format_arg(a) for a in node.args)})"
        return text + (f"    # {node.source}" if node.source else "")
    if isinstance(node, SegmentCall):
        return f"{prefix}call {node.segment}({', '.join(format_arg(a) for a in node.args)})"
    raise TypeError(node)


def _format_block(block: Block, depth: int, lines: list[str]) -> None:
    pad = "    " * depth
    for node in block.nodes:
        if isinstance(node, If):
            outputs = ", ".join(format_value(v) for v in node.outputs)
            prefix = f"{outputs} = " if outputs else ""
            lines.append(f"{pad}{prefix}if {format_value(node.condition)}:    # {node.label} {node.source}")
            _format_block(node.then_block, depth + 1, lines)
            lines.append(f"{pad}else:")
            _format_block(node.else_block, depth + 1, lines)
        elif isinstance(node, Loop):
            outputs = ", ".join(format_value(v) for v in node.outputs)
            prefix = f"{outputs} = " if outputs else ""
            params = ", ".join(format_value(v) for v in node.body.params)
            initial = ", ".join(format_arg(a) for a in node.initial)
            lines.append(
                f"{pad}{prefix}loop trip_count={format_arg(node.trip_count)} "
                f"while={format_arg(node.condition)} init=({initial}) as ({params}):"
                f"    # {node.label} {node.source}"
            )
            _format_block(node.body, depth + 1, lines)
        else:
            lines.append(pad + _format_node_head(node))
    if block.results:
        lines.append(f"{pad}-> ({', '.join(format_arg(r) for r in block.results)})")
