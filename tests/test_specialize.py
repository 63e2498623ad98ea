"""Specialize: what the example types decide folds away; only data-dependent control flow stays."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dycl_iree.capture import capture
from dycl_iree.errors import SpecializeError
from dycl_iree.program import HostOp, If, Loop, TensorType, iter_nodes
from dycl_iree.reference import ReferenceInterpreter
from dycl_iree.specialize import specialize
from models import programs
from tests.conftest import check_hosts, export_compiled

from .conftest import make


def _specialized(name: str):
    model, example_inputs, dynamic_shapes = make(name)
    return specialize(capture(model), example_inputs, dynamic_shapes)


def test_recurrent_cells_rank_checks_fold_away() -> None:
    """nn.GRUCell / nn.LSTMCell script to rank checks guarding raises: none may survive."""
    scripted_graph = str(torch.jit.freeze(torch.jit.script(make("recurrent_cells")[0])).graph)
    assert scripted_graph.count("prim::If") >= 4 and "prim::RaiseException" in scripted_graph
    program = _specialized("recurrent_cells")
    nodes = list(iter_nodes(program.body))
    assert not [n for n in nodes if isinstance(n, (If, Loop))]
    assert not [n for n in nodes if isinstance(n, HostOp)], "every host-side check must fold"


def test_decoder_keeps_only_the_data_dependent_branch() -> None:
    program = _specialized("greedy_decoder")
    nodes = list(iter_nodes(program.body))
    branches = [n for n in nodes if isinstance(n, If)]
    assert len(branches) == 1  # `if token == self.end_token: break`; GRUCell's checks are gone
    assert not [n for n in nodes if isinstance(n, HostOp) and n.target == "prim::RaiseException"]
    assert len([n for n in nodes if isinstance(n, Loop)]) == 1


def test_declared_dynamic_dims_stay_dynamic() -> None:
    program = _specialized("dynamic_batch")
    (x,) = program.inputs
    assert x.type == TensorType("float32", (None, 8))
    assert program.body.results[0].type.shape == (None,)


class _Pooled(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.avg_pool2d(x, 2) + torch.nn.functional.max_pool2d(x, 4, 4).repeat(1, 1, 2, 2)


def test_a_dim_divided_by_a_kernel_stays_dynamic() -> None:
    """Heights 16 and 17 pool to the same 8: a +1 perturbation alone would type the output static,
    and the compiled host then returned the example's size for every input."""
    program = specialize(capture(_Pooled()), (torch.randn(1, 3, 16, 16),), ({2: "height", 3: "width"},))
    assert program.body.results[0].type.shape == (1, 3, None, None)


def test_a_tensor_that_grows_in_a_loop_gets_a_dynamic_dim() -> None:
    program = _specialized("growing_sequence")
    (loop,) = [n for n in iter_nodes(program.body) if isinstance(n, Loop)]
    assert loop.outputs[0].type.shape == (None, 4)


def test_wrong_number_of_example_inputs_names_the_inputs() -> None:
    model, _, _ = make("for_range")
    with pytest.raises(SpecializeError, match=r"takes 2 inputs \(x, n\) but 1"):
        specialize(capture(model), (torch.randn(1, 5),))


def test_example_of_the_wrong_kind_is_named() -> None:
    model, _, _ = make("for_range")
    with pytest.raises(SpecializeError, match="input 'n' is declared int but the example is a tensor"):
        specialize(capture(model), (torch.randn(1, 5), torch.tensor(3)))


class _OptionalAcrossBranch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        extra: torch.Tensor | None = None
        if x.sum() > 0:
            extra = x * 2
        if extra is None:
            return x
        return extra


def test_optional_across_data_dependent_branch_carries_its_flag() -> None:
    program = specialize(capture(_OptionalAcrossBranch()), (torch.randn(3),))
    # The first branch yields the flag beside the value (a stand-in where unset); `extra is None`
    # reads the flag; the second branch is then decided by it.
    first, *_ = [n for n in iter_nodes(program.body) if isinstance(n, If)]
    assert [r.value for r in (first.then_block.results[0], first.else_block.results[0])] == [True, False]
    assert any(isinstance(n, HostOp) and n.target == "aten::__not__.bool" for n in iter_nodes(program.body))


class _WriteIntoView(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        row = y[0]
        if x.sum() > 0:
            row.add_(1.0)
        return y


def test_in_place_write_into_a_view_writes_the_tensor_it_views() -> None:
    program = specialize(capture(_WriteIntoView()), (torch.randn(2, 3),))
    for x in (torch.ones(2, 3), -torch.ones(2, 3)):
        got = ReferenceInterpreter(program).run(x)
        torch.testing.assert_close(got, _WriteIntoView()(x.clone()))


class _WriteIntoViewInLoops(nn.Module):
    """Views made before a loop and written in it, views of views, a data-dependent loop."""

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        out = torch.zeros(3, 4)
        row = out[0]
        corner = out[1:, 2:]
        for t in range(n):
            row.add_(x[t % 2])
            corner.t()[0] = x[0, :2] * t
            if bool(row.sum() > 3.0):
                out[2, t % 4] = -1.0
        while bool(out.sum() < 5.0):
            out.view(-1)[0] += 2.0
        return out


def test_writes_into_views_made_before_a_loop_reach_the_tensor_in_every_iteration() -> None:
    program = specialize(capture(_WriteIntoViewInLoops()), (torch.randn(2, 4), 3))
    assert [n for n in iter_nodes(program.body) if isinstance(n, Loop)]
    for n in (0, 1, 5):
        x = torch.randn(2, 4)
        got = ReferenceInterpreter(program).run(x, n)
        torch.testing.assert_close(got, _WriteIntoViewInLoops()(x, n))


class _WriteIntoUnboundView(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first, second = x.unbind(0)
        first.add_(1.0)
        return x + second


def test_in_place_write_into_a_view_that_cannot_be_written_back_is_refused_not_miscompiled() -> None:
    with pytest.raises(SpecializeError, match=r"in-place write into one of several views \(unbind, split, chunk\)"):
        specialize(capture(_WriteIntoUnboundView()), (torch.randn(2, 3),))


@pytest.mark.parametrize("name", sorted(programs.MODELS))
def test_every_program_specializes_to_typed_inputs(name: str) -> None:
    program = _specialized(name)
    assert len(program.inputs) == len(make(name)[1])


class _MetadataChecks(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() > 3 and x.is_contiguous() and x.size(1) == 3 and x.dim() == 2:
            return x * 2
        return x


def test_metadata_reads_on_static_shapes_fold() -> None:
    program = specialize(capture(_MetadataChecks()), (torch.randn(2, 3),))
    nodes = list(iter_nodes(program.body))
    assert not [n for n in nodes if isinstance(n, (If, HostOp))]
    assert [n.target for n in nodes] == ["aten::mul.Scalar"]


class _TimeReduction(nn.Module):
    """torchaudio RNN-T's `_TimeReduction`: frames stacked by twos, the odd last one dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 8)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        input = self.linear(input.unsqueeze(0))
        B, T, D = input.shape
        num_frames = T - (T % 2)
        input = input[:, :num_frames, :]
        T_max = num_frames // 2
        output = input.reshape(B, T_max, D * 2)
        if output.size(0) == 1:  # Emformer's `if B == 1:` padding mask
            return output * 2.0
        return output.sum(0, keepdim=True)


def test_a_reshape_keeps_the_sizes_it_is_given_as_constants(tmp_path) -> None:
    # The meta runs that tell which dims are dynamic perturb the frames and the int `T_max` apart,
    # so the reshape fails at every perturbation; its batch of 1 and width of 16, given as
    # constants, are still static, and `if B == 1` is decided at export.
    program = specialize(capture(_TimeReduction()), (torch.randn(14, 4),), ({0: "T"},))
    reshaped = [n for n in iter_nodes(program.body) if getattr(n, "target", "") == "aten::reshape.default"]
    assert reshaped[0].outputs[0].type.shape == (1, None, 16)
    assert not any(isinstance(n, If) for n in iter_nodes(program.body))
    from .conftest import check_hosts, export_compiled

    _, scripted, compiled, python = export_compiled(
        tmp_path, _TimeReduction(), (torch.randn(14, 4),), "reduction", dynamic_shapes=({0: "T"},)
    )
    for frames in (2, 3, 7, 14, 21):
        check_hosts(scripted, [compiled, python], (torch.randn(frames, 4),))


def test_a_constant_freed_while_typing_never_lends_its_meta_tensor_to_another() -> None:
    # Constants made while typing (a block of ones folded from a constant width) can be freed before
    # the next is made, which CPython then often places at the same address: a meta tensor cached by
    # `id` alone typed Emformer's mask blocks with another block's width, now and then.
    from dycl_iree.specialize.visitor import _Specializer

    visitor = _Specializer(capture(nn.Identity()))
    for width in range(1, 64):
        assert tuple(visitor.meta_constant(torch.ones(2, width)).shape) == (2, width)


class _FirstColumns(nn.Module):
    def forward(self, x: torch.Tensor, n: int, start: int):
        return x[:, :n] * 2.0, x[:, start : start + 2] + 1.0


@pytest.mark.parametrize("example_n", [8, 6, 3])
def test_a_slice_whose_end_passes_the_example_stays_as_wide_as_its_bounds(tmp_path, example_n: int) -> None:
    """`x[:, :n]` of a 6-wide `x` at an example n of 6 or more is 6 wide at the example and at every
    larger n: typed static, both hosts returned all 6 columns where n was smaller. A window that
    moves with its start (`x[:, start : start + 2]`) is as wide as it is at run time too (it clamps
    at the end)."""
    example = (torch.randn(2, 6), example_n, 1)
    bundle, scripted, compiled, python = export_compiled(tmp_path, _FirstColumns(), example, f"columns{example_n}")
    slices = [op for s in bundle.program.segments for op in s.nodes if op.target == "aten::slice.Tensor"]
    assert [op.outputs[0].type.shape[1] for op in slices] == [None, None], slices  # both clamp at the end
    for n, start in ((2, 0), (6, 3), (9, 4), (0, 5)):
        check_hosts(scripted, (compiled, python), (torch.randn(2, 6), n, start))
