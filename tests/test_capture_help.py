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
    assert "`self.history: List[Tensor] = []`" in message


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
