"""Code TorchScript rejects gets, for each problem, the user's file and line and what to change."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch import nn

import dycl_iree
from dycl_iree import cli
from dycl_iree.diagnose import diagnose
from dycl_iree.errors import CaptureError

HERE = "test_capture_help.py"


def _line_of(text: str) -> int:
    with open(__file__) as handle:
        for number, line in enumerate(handle, 1):
            if text in line and "_line_of" not in line and "_export_error" not in line:
                return number
    raise AssertionError(text)


def _export_error(model: nn.Module) -> str:
    with pytest.raises(CaptureError) as caught:
        dycl_iree.export(model, (torch.randn(2, 4),))
    return str(caught.value)


def _points_at(message: str, text: str) -> bool:
    """The message names this file and the line holding `text`, and shows the line."""
    return f"{HERE}:{_line_of(text)}:" in message and text.strip() in message


class SkipNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        for i in range(len(self.blocks)):
            x = self.blocks[i](x)  # skipnet-index
        return x


def test_module_list_indexed_by_a_variable() -> None:
    message = _export_error(SkipNet())
    assert _points_at(message, "x = self.blocks[i](x)  # skipnet-index")
    assert "for block in self.blocks: x = block(x)" in message and "enumerate(self.blocks)" in message
    assert "(1 problem)" in message


class Guarded(nn.Module):
    def forward(self, x):
        try:  # guarded-try
            y = x.relu()
        except:  # noqa: E722 (published code writes it so)
            y = x
        return y


def test_try_except() -> None:
    message = _export_error(Guarded())
    assert _points_at(message, "try:  # guarded-try")
    assert "remove the try/except" in message


class MultiHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleDict({"cifar": nn.Linear(4, 10), "svhn": nn.Linear(4, 10)})
        self.task = "cifar"

    def forward(self, x):
        task = self.task
        return self.heads[task](x)  # dict-index


def test_module_dict_indexed_by_a_string_variable() -> None:
    message = _export_error(MultiHead())
    assert _points_at(message, "return self.heads[task](x)  # dict-index")
    assert "for name, module in self.heads.items(): if name == task" in message


class TrainOnly(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        if self.training:
            return self._train_forward(x)
        return self.fc(x)

    def _train_forward(self, x):
        noise = torch.from_numpy(x.detach().numpy())  # train-helper
        return self.fc(x + noise)


def test_training_only_helper() -> None:
    message = _export_error(TrainOnly())
    assert _points_at(message, "noise = torch.from_numpy(x.detach().numpy())  # train-helper")
    assert "`_train_forward` runs only in training" in message and "@torch.jit.unused" in message
    assert f"{HERE}:{_line_of('return self._train_forward(x)')}" in message


class TrainOnlyInline(nn.Module):
    def forward(self, x):
        if self.training:
            x = x + torch.from_numpy(x.numpy())  # train-inline
        return x * 2


def test_training_only_branch_in_forward() -> None:
    message = _export_error(TrainOnlyInline())
    assert _points_at(message, "x = x + torch.from_numpy(x.numpy())  # train-inline")
    assert "runs only in training" in message and "@torch.jit.unused" in message


class Thresholds(nn.Module):
    def forward(self, x):
        values = x.sum(1).tolist()  # untyped-tolist
        return x * len(values)


def test_tolist_without_annotation() -> None:
    message = _export_error(Thresholds())
    assert _points_at(message, "values = x.sum(1).tolist()  # untyped-tolist")
    assert "`values: List[float] = x.sum(1).tolist()`" in message


class Picker(nn.Module):
    def forward(self, x):
        out = []  # untyped-empty
        for t in range(x.size(0)):
            out.append(t)
        return x[out[-1]]


def test_untyped_empty_list() -> None:
    message = _export_error(Picker())
    assert _points_at(message, "out = []  # untyped-empty")
    assert "`out: List[int] = []`" in message
    assert f"filled at line {_line_of('out.append(t)')}" in message


class Cached(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.history = []

    def forward(self, x):
        self.history.append(x)  # empty-attribute
        return x


def test_untyped_empty_list_attribute() -> None:
    message = _export_error(Cached())
    assert _points_at(message, "self.history.append(x)  # empty-attribute")
    assert "`history: List[Tensor]` above `__init__`" in message


class PlainDictOfHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.heads = {"a": nn.Linear(4, 2)}

    def forward(self, x):
        return self.heads["a"](x)  # plain-dict


def test_plain_dict_of_modules() -> None:
    message = _export_error(PlainDictOfHeads())
    assert _points_at(message, 'return self.heads["a"](x)  # plain-dict')
    assert "nn.ModuleDict({...})" in message


class NamedLayers(nn.Module):
    """SkipNet and BlockDrop register their layers as `group1_layer0`, ... and fetch them by name."""

    def __init__(self) -> None:
        super().__init__()
        for i in range(2):
            setattr(self, f"layer{i}", nn.Linear(4, 4))

    def forward(self, x):
        for i in range(2):
            x = getattr(self, f"layer{i}")(x)  # computed-getattr
        return x


def test_getattr_with_a_computed_name() -> None:
    message = _export_error(NamedLayers())
    assert _points_at(message, 'x = getattr(self, f"layer{i}")(x)  # computed-getattr')
    assert "nn.ModuleList" in message and "for layer in self.layers" in message


class StatefulGate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = None

    def forward(self, x):
        self.hidden = (x, x)  # none-attribute
        return x


def test_attribute_set_to_none_then_assigned() -> None:
    message = _export_error(StatefulGate())
    assert _points_at(message, "self.hidden = (x, x)  # none-attribute")
    assert "`hidden: Optional[Tuple[Tensor, Tensor]]` above `__init__`" in message


class OldStyle(nn.Module):
    def forward(self, x):
        return torch.autograd.Variable(x) * 2  # variable


def test_autograd_variable() -> None:
    message = _export_error(OldStyle())
    assert _points_at(message, "return torch.autograd.Variable(x) * 2  # variable")
    assert "remove `Variable(...)`" in message


class VarArgs(nn.Module):
    def forward(self, x, *args):  # var-args
        return x


def test_variable_arguments() -> None:
    message = _export_error(VarArgs())
    assert _points_at(message, "def forward(self, x, *args):  # var-args")
    assert "instead of *args/**kwargs" in message


class Distinct(nn.Module):
    def forward(self, x):
        sizes = {s for s in x.shape}  # set-comp
        return x * len(sizes)


def test_set_comprehension() -> None:
    message = _export_error(Distinct())
    assert _points_at(message, "sizes = {s for s in x.shape}  # set-comp")
    assert "TorchScript has no sets" in message


class Ensemble(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.members = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        outs = [member(x) for member in self.members]
        return sum(t for t in outs)  # generator-sum


def test_generator_summed() -> None:
    message = _export_error(Ensemble())
    assert _points_at(message, "return sum(t for t in outs)  # generator-sum")
    assert "torch.stack([...]).sum(0)" in message


class RNNGate(nn.Module):
    """SkipNet's LSTM gate as published: it re-packs the LSTM's weights on every call."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(4, 4)
        self.proj = nn.Linear(4, 1)

    def forward(self, x):
        self.rnn.flatten_parameters()  # gate-flatten
        out, _ = self.rnn(x.view(1, x.size(0), -1))
        return torch.sigmoid(self.proj(out.squeeze(0)))


def test_error_inside_torch_points_at_the_users_call() -> None:
    message = _export_error(RNNGate())
    first_line = message.splitlines()[1]
    assert f"{HERE}:{_line_of('self.rnn.flatten_parameters()  # gate-flatten')}:" in first_line
    assert "rnn.py" not in first_line.split(": ")[0]  # the location is the user's file, not torch's
    assert "`flatten_parameters`" in message and "nn/modules/rnn.py:" in message
    assert "remove the `flatten_parameters()` call" in message


class ResettingGate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(4, 4)

    def forward(self, x):
        self.rnn.reset_parameters()  # gate-reset
        out, _ = self.rnn(x.view(1, x.size(0), -1))
        return out


def test_error_inside_torch_with_a_call_chain_points_at_the_users_call() -> None:
    # Here TorchScript's own message has the chain (rnn.py, then the caller); the user's frame is chosen.
    message = _export_error(ResettingGate())
    first_line = message.splitlines()[1]
    assert f"{HERE}:{_line_of('self.rnn.reset_parameters()  # gate-reset')}:" in first_line
    assert "`reset_parameters` (nn/modules/rnn.py:" in first_line
    assert "call it outside forward" in message


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        try:  # residual-try
            return x + self.fc(x)
        except RuntimeError:
            return x


class TwoProblems(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = Residual()
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        x = self.stem(x)
        for i in range(2):
            x = self.blocks[i](x)  # two-index
        values = x.tolist()  # two-tolist
        return x * len(values)


def test_every_problem_is_reported_not_only_the_first() -> None:
    message = _export_error(TwoProblems())
    assert "(3 problems)" in message
    assert _points_at(message, "try:  # residual-try")
    assert _points_at(message, "x = self.blocks[i](x)  # two-index")
    assert _points_at(message, "values = x.tolist()  # two-tolist")
    assert message.index("residual-try") < message.index("two-index") < message.index("two-tolist")


class PublishedRNNGate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(4, 4)
        self.proj = nn.Linear(4, 1)

    def forward(self, x):
        self.rnn.flatten_parameters()  # published-flatten
        out, _ = self.rnn(x.view(1, x.size(0), -1))
        prob = torch.sigmoid(self.proj(out.squeeze(0)))
        return (prob > 0.5).float(), prob


class PublishedSkipNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        for i in range(2):
            setattr(self, f"group1_layer{i}", nn.Linear(4, 4))
        self.control = PublishedRNNGate()

    def forward(self, x):
        for i in range(2):
            mask, gprob = self.control(x)
            x = getattr(self, f"group1_layer{i}")(x) * mask  # published-getattr
        return x


def test_a_problem_behind_a_call_to_a_broken_submodule_is_still_found() -> None:
    # The caller's first error is an artifact (the gate's stand-in returns one Tensor, not a pair);
    # the getattr in the same function is still reported, the artifact is not.
    message = _export_error(PublishedSkipNet())
    assert "(2 problems)" in message
    assert _points_at(message, "self.rnn.flatten_parameters()  # published-flatten")
    assert _points_at(message, 'x = getattr(self, f"group1_layer{i}")(x) * mask  # published-getattr')
    assert "mask, gprob = self.control(x)" not in message


class HelperBehindTry(nn.Module):
    def forward(self, x):
        try:  # behind-try
            x = x + 1
        except RuntimeError:
            pass
        return self._scores(x)

    def _scores(self, x):
        keys = {k for k in range(2)}  # behind-helper
        return x * len(keys) * _helper_scale(x)


def _helper_scale(x):
    return len(x.tolist())  # behind-free-function


def test_problems_in_functions_a_rejected_function_calls_are_found() -> None:
    # TorchScript rejects forward as a whole (a try block), so it never reaches the method and the
    # free function forward calls; they are compiled on their own.
    message = _export_error(HelperBehindTry())
    assert "(3 problems)" in message
    assert _points_at(message, "try:  # behind-try")
    assert _points_at(message, "keys = {k for k in range(2)}  # behind-helper")
    assert _points_at(message, "return len(x.tolist())  # behind-free-function")
    assert getattr(HelperBehindTry._scores, "_torchscript_modifier", None) is None  # restored


def test_diagnosis_leaves_the_model_and_torchscript_as_they_were() -> None:
    model = TwoProblems()
    before = {name: getattr(function, "_torchscript_modifier", None) for name, function in _functions()}
    problems = diagnose(model)
    assert [problem.line for problem in problems] == [
        _line_of("try:  # residual-try"),
        _line_of("x = self.blocks[i](x)  # two-index"),
        _line_of("values = x.tolist()  # two-tolist"),
    ]
    assert before == {name: getattr(function, "_torchscript_modifier", None) for name, function in _functions()}
    # No type compiled while functions were silenced is reused: scripting fails as before, on the real error.
    with pytest.raises(Exception, match="try blocks aren't supported"):
        torch.jit.script(model)


def _functions():
    for cls in (Residual, TwoProblems):
        for name, value in vars(cls).items():
            if callable(value):
                yield f"{cls.__name__}.{name}", value


class Redefined(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x).tolist()  # redefined-tolist


def test_a_second_export_of_a_failed_class_gives_the_real_error_again() -> None:
    first = _export_error(Redefined())
    second = _export_error(Redefined())
    assert first == second
    assert _points_at(second, "return self.fc(x).tolist()  # redefined-tolist")
    assert "Can't redefine" not in second


def test_export_after_the_users_own_failed_script_gives_the_real_error() -> None:
    class Local(nn.Module):
        def forward(self, x):
            return x.tolist()  # local-tolist

    with pytest.raises(RuntimeError, match="Expected type hint for result of tolist"):
        torch.jit.script(Local())
    with pytest.raises(RuntimeError, match="Can't redefine method: forward"):
        torch.jit.script(Local())  # what TorchScript alone says the second time
    message = _export_error(Local())
    assert _points_at(message, "return x.tolist()  # local-tolist") and "Can't redefine" not in message


class Fine(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        out: list[torch.Tensor] = []
        for block in self.blocks:
            x = block(x)
            out.append(x)
        return torch.stack(out).sum(0)


def test_a_model_torchscript_accepts_has_no_problems() -> None:
    assert diagnose(Fine()) == []


class SkipNetFixed(SkipNet):
    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


class MultiHeadFixed(MultiHead):
    def forward(self, x):
        task = self.task
        out = x
        for name, module in self.heads.items():
            if name == task:
                out = module(x)
        return out


class TrainOnlyFixed(TrainOnly):
    @torch.jit.unused
    def _train_forward(self, x):
        noise = torch.from_numpy(x.detach().numpy())
        return self.fc(x + noise)


class ThresholdsFixed(nn.Module):
    def forward(self, x):
        values: list[float] = x.sum(1).tolist()
        return x * len(values)


class EnsembleFixed(Ensemble):
    def forward(self, x):
        outs = [member(x) for member in self.members]
        total = outs[0]
        for t in outs[1:]:
            total = total + t
        return total


@pytest.mark.parametrize(
    "model_class",
    [SkipNetFixed, MultiHeadFixed, TrainOnlyFixed, ThresholdsFixed, EnsembleFixed],
)
def test_the_fixes_the_messages_suggest_script_and_agree_with_eager(model_class) -> None:
    assert diagnose(model_class()) == []
    torch.manual_seed(0)
    scripted = torch.jit.script(model_class().eval())
    torch.manual_seed(0)
    eager = model_class().eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(scripted(x), eager(x))


# Class-level annotations, the fix for attributes, need a file without `from __future__ import
# annotations` (this one has it): torch 2.13 cannot read them as strings.
_ATTRIBUTES_FILE = """
from typing import List, Optional, Tuple

import torch
from torch import Tensor, nn


class CachedFixed(nn.Module):
    history: List[Tensor]

    def __init__(self):
        super().__init__()
        self.history = []

    def forward(self, x):
        self.history.append(x)
        return x * len(self.history)


class StatefulGateFixed(nn.Module):
    hidden: Optional[Tuple[Tensor, Tensor]]

    def __init__(self):
        super().__init__()
        self.hidden = None

    def forward(self, x):
        self.hidden = (x, x)
        return x + 1
"""


def test_the_attribute_fixes_script_and_agree_with_eager(tmp_path) -> None:
    module = _import(tmp_path / "attributes_fixed.py", _ATTRIBUTES_FILE)
    for model_class in (module.CachedFixed, module.StatefulGateFixed):
        assert diagnose(model_class()) == []
        x = torch.randn(2, 4)
        torch.testing.assert_close(torch.jit.script(model_class().eval())(x), model_class().eval()(x))


def test_a_class_annotation_under_postponed_annotations_is_named(tmp_path) -> None:
    source = "from __future__ import annotations\n" + _ATTRIBUTES_FILE
    module = _import(tmp_path / "attributes_postponed.py", source)
    message = _export_error(module.CachedFixed())
    line = source.splitlines().index("    history: List[Tensor]") + 1
    assert f"attributes_postponed.py:{line}: the annotation of `CachedFixed.history` is a string" in message
    assert "remove that import" in message


def _import(path, source: str):
    from dycl_iree.loading import import_module

    path.write_text(source)
    return import_module(str(path))


_MODELS_FILE = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Good(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x - 1


    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

        def forward(self, x):
            for i in range(2):
                x = self.blocks[i](x)
            try:
                x = x.relu()
            except Exception:
                pass
            return x


    def good():
        return Good(), (torch.randn(2, 4),)


    def bad():
        return Bad(), (torch.randn(2, 4),)


    class NeedsImages(nn.Module):
        def forward(self, x):
            if x.dim() != 4:
                raise ValueError("expected NCHW images")
            return x.mean()


    def flat_example():
        return NeedsImages(), (torch.randn(2, 4),)
    """
)


def test_doctor_on_good_and_bad_models(tmp_path, capsys) -> None:
    path = tmp_path / "doctor_models.py"
    path.write_text(_MODELS_FILE)
    assert cli.main(["doctor", f"{path}:good"]) == 0
    assert "no problems found" in capsys.readouterr().out

    assert cli.main(["doctor", f"{path}:bad"]) == 1
    out = capsys.readouterr().out
    lines = _MODELS_FILE.splitlines()
    index_line = next(n for n, text in enumerate(lines, 1) if "self.blocks[i](x)" in text)
    try_line = next(n for n, text in enumerate(lines, 1) if text.strip() == "try:")
    assert "2 problems" in out
    assert f"{path}:{index_line}:" in out and "for block in self.blocks" in out
    assert f"{path}:{try_line}:" in out and "remove the try/except" in out
    assert "no problems found" not in out

    # A model TorchScript accepts still gets the checks specialize makes for its example inputs.
    assert cli.main(["doctor", f"{path}:flat_example"]) == 1
    out = capsys.readouterr().out
    assert "1 problem" in out and "NeedsImages always raises on inputs of the example's types" in out


class ExitsOfDifferentLengths(nn.Module):
    def forward(self, x):
        if bool(x.sum() > 0):
            return (x,)
        return (x, x * 2.0)  # shorter-exit


def test_returns_of_tuples_of_different_lengths_are_told_to_return_a_list() -> None:
    message = _export_error(ExitsOfDifferentLengths())
    assert _points_at(message, "return (x, x * 2.0)  # shorter-exit")
    assert "returns of tuples of different lengths" in message and "List[Tuple[Tensor, Tensor]]" in message
