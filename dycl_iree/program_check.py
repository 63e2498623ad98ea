"""Checks of a partitioned Program before any host is written from it.

`check_definitions` proves that every value the Program reads is defined on every path to the read.
A Program is lexically scoped, as both hosts write it:

* a block sees the values its enclosing blocks define before the node that holds it, its own
  parameters (a loop body's are the iteration index and the carried values), and what its own
  earlier nodes define;
* a node's outputs are defined after the node: an `If`'s are its sides' results, a `Loop`'s the
  carried values after the last iteration;
* what one side of an `If` defines is not visible on the other side nor after the `If`, and what a
  loop body defines (its parameters included) is not visible after the loop: only the node's
  outputs carry it out;
* a `Loop` reads its trip count, start condition and initial values before the loop, in the
  enclosing block; its body's results (the continue condition and the next carried values) are
  read at the end of each iteration, in the body.

The generated Python host is one Python function, so a value defined on one side of an `if` is
still bound after it when that side ran: a read outside the scope fails only on the inputs that
take the other path (`UnboundLocalError` on a user's device), and the compiled host cannot be
written at all. A Program that breaks the rule is a defect of an earlier stage (a size the
specializer cached across the two sides of a branch did this), never of the model, so the check
raises `ExporterDefect` at export time, naming the value and the node that reads it.

Each segment is checked too: its ops read only its parameters and what earlier ops made.

The walk is linear in the Program: each value enters the set of visible values once per
definition and leaves it when its block ends.

Example:
    >>> check_definitions(program)      # doctest: +SKIP
    ExporterDefect: exporter defect: %size252 is read by aten::mul.int (model.py:14) where it is
    not defined on every path (it is made only inside the then side of if3 (model.py:9)); ...
"""

from __future__ import annotations

from .errors import ExporterDefect
from .program import (
    Block,
    HostOp,
    If,
    Loop,
    Node,
    Program,
    Segment,
    SegmentCall,
    TensorOp,
    Value,
    arg_values,
    dispatch,
    format_value,
    node_inputs,
)


def check_definitions(program: Program) -> None:
    """Raise `ExporterDefect` where `program` reads a value that some path to the read does not
    define (see the module docstring for the scoping rule); return None when every read is defined.

    >>> from dycl_iree.program import Block, Program, ScalarType, Value
    >>> n = Value(0, ScalarType("int"), "n")
    >>> check_definitions(Program(("n",), Block((n,), (), (n,)), 0))
    """
    _Scopes(program).block(program.body, "the program's outputs")
    for segment in program.segments:
        _check_segment(segment)


class _Scopes:
    """The walk, one method per node kind (`dispatch`): `visible` holds the values defined on every
    path to the current node."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.visible: set[Value] = set()

    def block(self, block: Block, first_reader: str, reader: str = "") -> None:
        """Check `block` with its parameters bound; what it defines is forgotten when it ends.
        `first_reader` reads its first result, `reader` (if given, else `first_reader`) the others."""
        added: list[Value] = []
        self.define(block.params, added)
        for node in block.nodes:
            dispatch(self, node)
            self.define(node.outputs, added)
        for position, result in enumerate(block.results):
            for value in arg_values(result):
                self.need(value, first_reader if position == 0 or not reader else reader)
        self.visible.difference_update(added)

    def define(self, values: tuple[Value, ...], added: list[Value]) -> None:
        for value in values:
            if value not in self.visible:  # a value seen already stays visible when this block ends
                self.visible.add(value)
                added.append(value)

    def reads(self, node: Node) -> None:
        for value in node_inputs(node):
            if value not in self.visible:  # the reader's name is looked up only for the message
                self.need(value, _reader(self.program, node, value))

    tensor_op = host_op = segment_call = reads

    def if_(self, node: If) -> None:
        self.reads(node)
        where = _construct(node)
        self.block(node.then_block, f"the results of the then side of {where}")
        self.block(node.else_block, f"the results of the else side of {where}")

    def loop(self, node: Loop) -> None:
        where = _construct(node)
        for value in arg_values(node.trip_count):
            self.need(value, f"the trip count of {where}")
        for value in arg_values(node.condition):
            self.need(value, f"the start condition of {where}")
        for arg in node.initial:
            for value in arg_values(arg):
                self.need(value, f"the initial values of {where}")
        self.block(node.body, f"the continue condition of {where}", f"the carried values of {where}")

    def need(self, value: Value, reader: str) -> None:
        if value not in self.visible:
            raise _defect(value, reader, _home(self.program, value))


def _check_segment(segment: Segment) -> None:
    """A segment is straight-line: each op reads its parameters and what earlier ops made."""
    name = segment.name
    visible = set(segment.params)
    for op in segment.nodes:
        for value in node_inputs(op):
            if value not in visible:
                raise _defect(value, f"{_op(op)} in segment {name}", "not a parameter nor made by an earlier op")
        visible.update(op.outputs)
    for value in segment.results:
        if value not in visible:
            raise _defect(value, f"the results of segment {name}", "not a parameter nor made by any op")


def _defect(value: Value, reader: str, home: str) -> ExporterDefect:
    return ExporterDefect(
        f"exporter defect: {format_value(value)} is read by {reader} where it is not defined on every "
        f"path ({home}). The exporter made an inconsistent Program from this model, and no host was "
        "written from it (its Python host would fail at run time on some inputs); please report this "
        "to dycl_iree with the model."
    )


def _construct(node: If | Loop) -> str:
    return f"{node.label} ({node.source})" if node.source else node.label


def _op(node: TensorOp | HostOp) -> str:
    return f"{node.target} ({node.source})" if node.source else node.target


def _reader(program: Program, node: Node, value: Value) -> str:
    """The node that reads `value`, with its source line; a segment call names the op in the
    segment that reads the value, whose line the call itself does not carry."""
    if isinstance(node, If):
        return f"the condition of {_construct(node)}"
    if not isinstance(node, SegmentCall):
        return _op(node)
    try:
        segment = program.segment(node.segment)
    except KeyError:
        return f"call {node.segment}"
    params = [param for arg, param in zip(node.args, segment.params) if isinstance(arg, Value) and arg == value]
    for op in segment.nodes:
        if any(read in params for read in node_inputs(op)):
            return f"call {node.segment} (its {_op(op)})"
    return f"call {node.segment}"


def _home(program: Program, value: Value) -> str:
    """Where `value` is defined, if anywhere (only computed for the error message)."""
    if value in program.body.params:
        return "it is a program input"
    found = _find_home(program.body, value, "")
    if found is None:
        return "no node of the program makes it"
    maker, inside = found
    if not inside:
        return f"it is made by {maker}, after the read"
    return f"it is made by {maker}, only inside {inside}"


def _find_home(block: Block, value: Value, inside: str) -> tuple[str, str] | None:
    for node in block.nodes:
        if value in node.outputs:
            return _maker(node), inside
        if isinstance(node, If):
            for side, inner in (("then", node.then_block), ("else", node.else_block)):
                found = _find_home(inner, value, f"the {side} side of {_construct(node)}")
                if found is not None:
                    return found
        elif isinstance(node, Loop):
            where = f"the body of {_construct(node)}"
            if value in node.body.params:
                return "the loop's parameters", where
            found = _find_home(node.body, value, where)
            if found is not None:
                return found
    return None


def _maker(node: Node) -> str:
    if isinstance(node, (If, Loop)):
        return _construct(node)
    if isinstance(node, SegmentCall):
        return f"call {node.segment}"
    return _op(node)
