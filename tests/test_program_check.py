"""`check_definitions`: a Program that reads a value where some path does not define it is an exporter
defect, reported at export time with the value and its reader, never a host that fails at run time.

The Programs here are built by hand, one per way to read out of scope (a value of one side of an
`if`, of a loop body, of no node at all, made after the read), each next to the valid Program of the
same shape."""

from __future__ import annotations

import itertools

import pytest
import torch

import dycl_iree
from dycl_iree import pipeline
from dycl_iree.errors import DyclError, ExporterDefect
from dycl_iree.program import (
    Block,
    Constant,
    HostOp,
    If,
    Loop,
    Program,
    ScalarType,
    Segment,
    SegmentCall,
    TensorOp,
    TensorType,
    Value,
)
from dycl_iree.program_check import check_definitions

_ids = itertools.count(100)


def _int(name: str) -> Value:
    return Value(next(_ids), ScalarType("int"), name)


def _bool(name: str) -> Value:
    return Value(next(_ids), ScalarType("bool"), name)


def _add(a, b, out: Value, line: int) -> HostOp:
    return HostOp("aten::add.int", (a, b), (out,), f"m.py:{line}")


def _less(a, b, out: Value, line: int) -> HostOp:
    return HostOp("aten::lt.int", (a, b), (out,), f"m.py:{line}")


def _if_program(read_in_else: bool, read_after: bool) -> tuple[Program, Value]:
    """`a = n + 1` only in the `then` side of `if0`; the `else` side reads it when `read_in_else`,
    the node after the `if` when `read_after`; otherwise both read only the `if`'s result `r`."""
    n, small, a, b, r, s = _int("n"), _bool("small"), _int("a"), _int("b"), _int("r"), _int("s")
    then_block = Block((), (_add(n, Constant(1), a, 3),), (a,))
    else_block = Block((), (_add(a if read_in_else else n, Constant(2), b, 5),), (b,))
    branch = If(small, then_block, else_block, (r,), "if0", "m.py:2")
    after = _add(a if read_after else r, Constant(3), s, 7)
    body = Block((n,), (_less(n, Constant(3), small, 2), branch, after), (s,))
    return Program(("n",), body, 0), a


def test_a_valid_branch_passes_and_its_results_carry_the_sides_values_out() -> None:
    program, _ = _if_program(read_in_else=False, read_after=False)
    assert check_definitions(program) is None


def test_a_value_of_one_side_read_after_the_if_is_a_defect_naming_value_and_reader() -> None:
    program, a = _if_program(read_in_else=False, read_after=True)
    with pytest.raises(ExporterDefect) as caught:
        check_definitions(program)
    message = str(caught.value)
    assert f"%a{a.id} is read by aten::add.int (m.py:7)" in message, message
    assert "only inside the then side of if0 (m.py:2)" in message, message
    assert "exporter defect" in message and "report" in message, message
    assert isinstance(caught.value, DyclError)


def test_a_value_of_the_then_side_read_on_the_else_side_is_a_defect() -> None:
    program, a = _if_program(read_in_else=True, read_after=False)
    with pytest.raises(ExporterDefect, match=rf"%a{a.id} is read by aten::add\.int \(m\.py:5\)"):
        check_definitions(program)


def _loop_program(read_after: str) -> tuple[Program, dict[str, Value]]:
    """`for i in range(n): acc = acc + i; t = acc + n` with `acc` carried (`acc0` -> `acc1` in the
    body, `out` after the loop). After the loop, the node reads `read_after`: "out" (valid), "t"
    (made in the body), "acc1" (the body's carried parameter) or "i" (its index)."""
    n, start, i, acc, t, out, final = (_int(name) for name in ("n", "start", "i", "acc1", "t", "out", "final"))
    more = _bool("more")
    body = Block(
        (i, acc),
        (_add(acc, i, t, 4), _less(t, n, more, 5)),
        (more, t),
    )
    loop = Loop(n, Constant(True), (start,), body, (out,), "loop0", "m.py:3")
    values = {"out": out, "t": t, "acc1": acc, "i": i}
    after = _add(values[read_after], Constant(1), final, 8)
    program_body = Block((n,), (HostOp("aten::mul.int", (n, n), (start,), "m.py:2"), loop, after), (final,))
    return Program(("n",), program_body, 0), values


def test_a_valid_loop_passes_its_body_reads_outer_values_and_its_parameters() -> None:
    program, _ = _loop_program("out")
    assert check_definitions(program) is None


@pytest.mark.parametrize("name", ["t", "acc1", "i"])
def test_a_value_of_a_loop_body_read_after_the_loop_is_a_defect(name: str) -> None:
    """Neither what the body makes nor its parameters (index, carried values) outlive the loop:
    only the loop's outputs carry them out."""
    program, values = _loop_program(name)
    value = values[name]
    with pytest.raises(ExporterDefect) as caught:
        check_definitions(program)
    message = str(caught.value)
    assert f"%{name}{value.id} is read by aten::add.int (m.py:8)" in message, message
    assert "only inside the body of loop0 (m.py:3)" in message, message


def test_a_value_no_node_makes_is_a_defect() -> None:
    n, ghost, r = _int("n"), _int("size252"), _int("r")
    program = Program(("n",), Block((n,), (_add(n, ghost, r, 9),), (r,)), 0)
    with pytest.raises(ExporterDefect) as caught:
        check_definitions(program)
    message = str(caught.value)
    assert f"%size252{ghost.id} is read by aten::add.int (m.py:9)" in message, message
    assert "no node of the program makes it" in message, message


def test_a_value_read_before_the_node_that_makes_it_is_a_defect() -> None:
    n, a, b = _int("n"), _int("a"), _int("b")
    program = Program(("n",), Block((n,), (_add(a, n, b, 4), _add(n, n, a, 5)), (b,)), 0)
    with pytest.raises(ExporterDefect, match=rf"%a{a.id} is read by aten::add\.int \(m\.py:4\).*after the read"):
        check_definitions(program)


def test_reads_by_conditions_trip_counts_results_and_outputs_are_checked() -> None:
    """Every kind of read: an `if`'s condition, a side's results, a loop's trip count, start
    condition, initial and carried values, and the program's outputs."""
    n, ghost, r, out, i, carried = _int("n"), _int("ghost"), _int("r"), _int("out"), _int("i"), _int("c")
    flag, unset = _bool("flag"), _bool("unset")
    test = _less(n, Constant(2), flag, 6)

    def raises(value: Value, body: Block, reader: str) -> None:
        with pytest.raises(ExporterDefect) as caught:
            check_definitions(Program(("n",), body, 0))
        assert f"{value.name}{value.id} is read by {reader} where" in str(caught.value), str(caught.value)

    def loop(trip, start, initial, next_value) -> Loop:
        body = Block((i, carried), (), (Constant(True), next_value))
        return Loop(trip, start, (initial,), body, (out,), "loop2", "")

    branch = If(unset, Block((), (), (n,)), Block((), (), (n,)), (r,), "if4", "m.py:6")
    raises(unset, Block((n,), (branch,), (r,)), "the condition of if4 (m.py:6)")
    branch = If(flag, Block((), (), (ghost,)), Block((), (), (n,)), (r,), "if4", "m.py:6")
    raises(ghost, Block((n,), (test, branch), (r,)), "the results of the then side of if4 (m.py:6)")
    raises(ghost, Block((n,), (loop(ghost, Constant(True), n, carried),), (out,)), "the trip count of loop2")
    raises(unset, Block((n,), (loop(n, unset, n, carried),), (out,)), "the start condition of loop2")
    raises(ghost, Block((n,), (loop(n, Constant(True), ghost, carried),), (out,)), "the initial values of loop2")
    raises(ghost, Block((n,), (loop(n, Constant(True), n, ghost),), (out,)), "the carried values of loop2")
    raises(ghost, Block((n,), (), (n, ghost)), "the program's outputs")
    assert check_definitions(Program(("n",), Block((n,), (loop(n, Constant(True), n, carried),), (out,)), 0)) is None


def _segment_program(defined: bool) -> tuple[Program, Value]:
    """A segment call whose tensor argument `h` is made by a host op (valid) or by nothing."""
    x = Value(next(_ids), TensorType("float32", (2,), (2,)), "x")
    h = Value(next(_ids), TensorType("float32", (2,), (2,)), "h")
    y = Value(next(_ids), TensorType("float32", (2,), (2,)), "y")
    p, q = (Value(next(_ids), TensorType("float32", (2,), (2,)), name) for name in ("p", "q"))
    op = TensorOp("aten::relu.default", (p,), (), (q,), "m.py:11")
    segment = Segment("seg0", (p,), (op,), (q,))
    stand_in = (HostOp("dycl::stand_in", (), (h,), ""),) if defined else ()
    body = Block((x,), (*stand_in, SegmentCall("seg0", (h,), (y,))), (y,))
    return Program(("x",), body, 0, segments=(segment,)), h


def test_a_segment_call_is_named_with_the_op_that_reads_the_argument() -> None:
    program, _ = _segment_program(defined=True)
    assert check_definitions(program) is None
    program, h = _segment_program(defined=False)
    reader = r"call seg0 \(its aten::relu\.default \(m\.py:11\)\)"
    with pytest.raises(ExporterDefect, match=rf"%h{h.id} is read by {reader}"):
        check_definitions(program)


def test_nested_scopes_see_outer_values_and_shadow_nothing() -> None:
    """A loop inside an `if` inside a loop reads the outer loop's parameters and values made before
    it; each block's values end with the block, the outer ones stay visible."""
    n, i, acc, j, k = _int("n"), _int("i"), _int("acc"), _int("j"), _int("k")
    flag, sum_, inner_out, r, after, out = _bool("flag"), _int("sum"), _int("io"), _int("r"), _int("after"), _int("o")
    inner_body = Block((j, k), (_add(k, acc, sum_, 6),), (Constant(True), sum_))
    inner = Loop(i, Constant(True), (acc,), inner_body, (inner_out,), "loop1", "m.py:5")
    branch = If(flag, Block((), (inner,), (inner_out,)), Block((), (), (acc,)), (r,), "if0", "m.py:4")
    outer_body = Block((i, acc), (_less(i, n, flag, 4), branch, _add(r, n, after, 7)), (Constant(True), after))
    outer = Loop(n, Constant(True), (n,), outer_body, (out,), "loop0", "m.py:3")
    assert check_definitions(Program(("n",), Block((n,), (outer,), (out,)), 0)) is None
    # ... but the inner loop's result is not visible on the other side nor after the outer loop.
    broken_else = Block((), (), (inner_out,))
    branch = If(flag, Block((), (inner,), (inner_out,)), broken_else, (r,), "if0", "m.py:4")
    outer_body = Block((i, acc), (_less(i, n, flag, 4), branch, _add(r, n, after, 7)), (Constant(True), after))
    outer = Loop(n, Constant(True), (n,), outer_body, (out,), "loop0", "m.py:3")
    with pytest.raises(ExporterDefect, match=r"the results of the else side of if0 \(m\.py:4\)"):
        check_definitions(Program(("n",), Block((n,), (outer,), (out,)), 0))


class _Branchy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.sum() > 0.0):
            x = x * 2.0
        return x


def test_export_stops_at_a_defect_before_any_host_is_written(monkeypatch) -> None:
    """A partition that left an output no node makes: `export` raises the defect, naming the value,
    and writes neither host."""
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")
    real = pipeline.partition
    ghost = Value(10**6, TensorType("float32", (1, 4), (1, 4)), "lost")

    def losing(typed):
        program = real(typed)
        return program.replace(body=Block(program.body.params, program.body.nodes, (ghost,)))

    def no_host(*args, **kwargs):
        raise AssertionError("a host was synthesized from a Program that failed the check")

    monkeypatch.setattr(pipeline, "partition", losing)
    monkeypatch.setattr(pipeline, "synthesize_python", no_host)
    monkeypatch.setattr(pipeline, "synthesize_compiled", no_host)
    with pytest.raises(ExporterDefect, match=r"%lost1000000 is read by the program's outputs"):
        dycl_iree.export(_Branchy(), (torch.ones(1, 4),))
