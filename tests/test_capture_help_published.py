"""What published code meets first in TorchScript gets its own fix at the user's line, every one in one run.

The models are written as their authors write them: SSD's post-processing with the legacy
`Tensor.new`, a class annotation of a ModuleList, a `for ... else`, `nonzero(as_tuple=True)`, a
layer built only under a constructor flag, and a forward under a logging decorator that lives in
another file. Each file is written without `from __future__ import annotations` (TorchScript reads
class annotations as they are stored), imported, diagnosed, and, where the fix is a rewrite, the
rewrite is checked to script and to agree with the eager model.
"""

import textwrap

import torch

from dycl_iree.diagnose import diagnose
from dycl_iree.loading import import_module

_PUBLISHED = textwrap.dedent(
    """
    import torch
    from torch import Tensor, nn


    class Detect(nn.Module):
        # SSD's `nms`, as its authors write the buffers it fills.
        def forward(self, boxes: Tensor, scores: Tensor) -> Tensor:
            keep = scores.new(scores.size(0)).zero_().long()
            v, idx = scores.sort(0)
            xx1 = boxes.new()
            yy1 = boxes.new()
            return keep + idx


    class Stack(nn.Module):
        layers: nn.ModuleList

        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])

        def forward(self, x: Tensor) -> Tensor:
            for layer in self.layers:
                x = layer(x)
            return x


    class Search(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            for i in range(3):
                if bool(x.sum() > 10):
                    break
                x = x * 2
            else:
                x = x + 1
            return x


    class Positions(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            rows, cols = torch.nonzero(x > 0, as_tuple=True)
            return rows * 10 + cols


    class FeedForward(nn.Module):
        def __init__(self, gated: bool = False):
            super().__init__()
            self.gated = gated
            self.linear_u = nn.Linear(4, 4)
            if gated:
                self.linear_v = nn.Linear(4, 4)

        def forward(self, x: Tensor) -> Tensor:
            if self.gated:
                return self.linear_u(x) * self.linear_v(x)
            return self.linear_u(x)
    """
)

_FIXED = textwrap.dedent(
    """
    from typing import Final

    import torch
    from torch import Tensor, nn


    class Search(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            found = False
            for i in range(3):
                if bool(x.sum() > 10):
                    found = True
                    break
                x = x * 2
            if not found:
                x = x + 1
            return x


    class Positions(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            nz = torch.nonzero(x > 0)
            rows, cols = nz[:, 0], nz[:, 1]
            return rows * 10 + cols


    class FeedForward(nn.Module):
        gated: Final[bool]

        def __init__(self, gated: bool = False):
            super().__init__()
            self.gated = gated
            self.linear_u = nn.Linear(4, 4)
            if gated:
                self.linear_v = nn.Linear(4, 4)

        def forward(self, x: Tensor) -> Tensor:
            if self.gated:
                return self.linear_u(x) * self.linear_v(x)
            return self.linear_u(x)
    """
)

_DECORATOR = textwrap.dedent(
    """
    import functools


    def logged(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            return function(*args, **kwargs)

        return wrapper
    """
)

_DECORATED = textwrap.dedent(
    """
    from torch import Tensor, nn

    from logging_helpers import logged


    class Decorated(nn.Module):
        @logged
        def forward(self, x: Tensor) -> Tensor:
            try:
                return x * 2
            except RuntimeError:
                return x
    """
)


def _module(tmp_path, name: str, source: str):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return import_module(str(path)), str(path)


def _line(path: str, text: str) -> int:
    with open(path) as handle:
        return next(number for number, line in enumerate(handle, 1) if text in line)


def _where(problem) -> tuple[str, int]:
    return problem.file, problem.line


def test_every_legacy_constructor_in_one_run_with_its_rewrite(tmp_path) -> None:
    module, path = _module(tmp_path, "detect", _PUBLISHED)
    problems = diagnose(module.Detect())
    assert [_where(p) for p in problems] == [
        (path, _line(path, "keep = scores.new")),
        (path, _line(path, "xx1 = boxes.new()")),
        (path, _line(path, "yy1 = boxes.new()")),
    ]
    assert "`scores.new_zeros(scores.size(0))` (and drop the `.zero_()`)" in problems[0].fix
    assert "`boxes.new_empty(0)`" in problems[1].fix


def test_a_module_class_annotation_is_named_at_its_line(tmp_path) -> None:
    module, path = _module(tmp_path, "stack", _PUBLISHED)
    (problem,) = diagnose(module.Stack())
    assert _where(problem) == (path, _line(path, "layers: nn.ModuleList"))
    assert "remove the class annotation `layers: ModuleList`" in problem.fix
    # The fix: the same class without the annotation scripts.
    del module.Stack.__annotations__["layers"]
    assert diagnose(module.Stack()) == []


def test_loop_else_nonzero_tuple_and_a_conditional_layer_get_their_fixes(tmp_path) -> None:
    module, path = _module(tmp_path, "published", _PUBLISHED)
    (search,) = diagnose(module.Search())
    assert _where(search) == (path, _line(path, "for i in range(3):"))
    assert "set a flag before the loop" in search.fix
    (positions,) = diagnose(module.Positions())
    assert _where(positions) == (path, _line(path, "as_tuple=True"))
    assert "`nz = torch.nonzero(x > 0)` then `rows, cols = nz[:, 0], nz[:, 1]`" in positions.fix
    (gated,) = diagnose(module.FeedForward())
    assert _where(gated) == (path, _line(path, "self.linear_u(x) * self.linear_v(x)"))
    assert f"set only when `gated` (at {path}:{_line(path, 'self.linear_v = nn.Linear')})" in gated.fix
    assert "`gated: Final[bool]`" in gated.fix


def test_the_rewrites_the_fixes_name_script_and_agree_with_the_original(tmp_path) -> None:
    published, _ = _module(tmp_path, "published_models", _PUBLISHED)
    fixed, _ = _module(tmp_path, "fixed_models", _FIXED)
    inputs = [torch.tensor([[1.0, -2.0], [0.5, 3.0]]), torch.full((2, 2), 4.0), torch.zeros(2, 2)]
    for name in ("Search", "Positions"):
        for x in inputs:
            torch.testing.assert_close(torch.jit.script(getattr(fixed, name)())(x), getattr(published, name)()(x))
    for gated in (False, True):
        torch.manual_seed(0)
        eager = published.FeedForward(gated)
        torch.manual_seed(0)
        scripted = torch.jit.script(fixed.FeedForward(gated))
        x = torch.randn(2, 4)
        torch.testing.assert_close(scripted(x), eager(x))


def test_a_problem_under_a_decorator_from_another_file_is_told_at_the_users_line(tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    _module(tmp_path, "logging_helpers", _DECORATOR)
    module, path = _module(tmp_path, "decorated", _DECORATED)
    (problem,) = diagnose(module.Decorated())
    # TorchScript's own message names the decorator's file with the model's line number.
    assert _where(problem) == (path, _line(path, "try:"))
    assert problem.source == "try:"


def test_a_class_without_readable_source_is_named() -> None:
    namespace: dict = {}
    exec("from torch import nn\nclass Made(nn.Module):\n    def forward(self, x):\n        return x + 1\n", namespace)
    (problem,) = diagnose(namespace["Made"]())
    assert problem.title == "the model's source code cannot be read"
    assert "`Made`" in problem.fix and "define it in a .py file" in problem.fix


_REFUSED = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Summarizer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(4, 6, proj_size=3)

        def forward(self, x):
            out, _ = self.lstm(x)
            return out.mean(0)


    def summarizer():
        return Summarizer(), (torch.randn(5, 1, 4),), ({0: torch.export.Dim("steps")},)
    """
)


def test_doctor_gives_an_exporter_refusal_at_the_users_line_with_its_way_out(tmp_path, capsys) -> None:
    from dycl_iree import cli

    path = tmp_path / "summarizer.py"
    path.write_text(_REFUSED)
    assert cli.main(["doctor", f"{path}:summarizer"]) == 1
    out = capsys.readouterr().out
    line = _line(str(path), "out, _ = self.lstm(x)")
    assert f"{path}:{line}: cannot lower aten::lstm" in out
    assert "out, _ = self.lstm(x)" in out.splitlines()[2]  # the line itself, under the title
    assert "fix: 5 weight tensors where 4 were expected" in out and "export with a fixed sequence length" in out


_SDN = textwrap.dedent(
    """
    from typing import Final, List, Optional, Tuple

    import torch
    import torch.nn as nn
    from torch import Tensor


    class BasicBlockWOutput(nn.Module):
        def __init__(self, channels, add_output):
            super(BasicBlockWOutput, self).__init__()
            self.layers = nn.ModuleList()
            self.layers.append(nn.Sequential(nn.Conv2d(channels, channels, 3, 1, 1), nn.ReLU()))
            self.layers.append(nn.Sequential())
            self.layers.append(nn.ReLU())
            if add_output:
                self.output = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10))
                self.no_output = False
            else:
                self.output = None
                self.forward = self.only_forward
                self.no_output = True

        def forward(self, x):
            fwd = self.layers[0](x)
            fwd = fwd + self.layers[1](x)
            return self.layers[2](fwd), 1, self.output(fwd)

        def only_forward(self, x):
            fwd = self.layers[0](x)
            fwd = fwd + self.layers[1](x)
            return self.layers[2](fwd), 0, None


    class FixedBlock(nn.Module):
        no_output: Final[bool]

        def __init__(self, channels, add_output):
            super(FixedBlock, self).__init__()
            self.layers = nn.ModuleList()
            self.layers.append(nn.Sequential(nn.Conv2d(channels, channels, 3, 1, 1), nn.ReLU()))
            self.layers.append(nn.Sequential())
            self.layers.append(nn.ReLU())
            if add_output:
                self.output = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10))
                self.no_output = False
            else:
                self.output = None
                self.no_output = True

        def forward(self, x) -> Tuple[Tensor, int, Optional[Tensor]]:
            if self.no_output:
                return self.only_forward(x)
            fwd = self.layers[0](x)
            fwd = fwd + self.layers[1](x)
            return self.layers[2](fwd), 1, self.output(fwd)

        def only_forward(self, x) -> Tuple[Tensor, int, Optional[Tensor]]:
            fwd = self.layers[0](x)
            fwd = fwd + self.layers[1](x)
            return self.layers[2](fwd), 0, None


    class SDN(nn.Module):
        def __init__(self, block=BasicBlockWOutput):
            super(SDN, self).__init__()
            self.layers = nn.ModuleList([block(4, add) for add in (True, False, True)])

        def forward(self, x):
            outputs = []
            fwd = x
            for layer in self.layers:
                fwd, is_output, output = layer(fwd)
                if is_output:
                    outputs.append(output)
            return outputs


    class FixedSDN(SDN):
        def forward(self, x):
            outputs: List[Tensor] = []
            fwd = x
            for layer in self.layers:
                fwd, is_output, output = layer(fwd)
                if output is not None:
                    outputs.append(output)
            return outputs
    """
)


def test_a_forward_swapped_in_init_is_told_at_the_swap_and_the_fix_scripts(tmp_path) -> None:
    module, path = _module(tmp_path, "sdn", _SDN)
    problems = diagnose(module.SDN())
    swap = next(p for p in problems if p.title.startswith("`self.forward` replaced"))
    assert _where(swap) == (path, _line(path, "self.forward = self.only_forward"))
    assert "`Final[bool]`" in swap.fix and "`Optional[Tensor]`" in swap.fix
    torch.manual_seed(0)
    eager = module.SDN().eval()
    torch.manual_seed(0)
    fixed = module.FixedSDN(module.FixedBlock).eval()
    assert diagnose(fixed) == []
    x = torch.randn(1, 4, 6, 6)
    with torch.no_grad():
        want, got = eager(x), torch.jit.script(fixed)(x)
    assert len(want) == len(got) == 2
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
