"""A compiled-host fallback says what iree-compile said: the diagnostic and where, or the signal and pass.

The outputs in tests/data/iree_compile/ are real iree-compile 3.13 outputs (this machine's paths
replaced by SITE, a long stack dump cut after its pass frame):

* crash_scf_while_sigsegv.txt, crash_scf_while_sigabrt.txt: `main` of
      for i in range(n):
          h = h + F.dropout(h, 0.1, True)
          if float(h.abs().sum()) > 30.0:
              return h
      return h
  (the same input crashes with SIGSEGV or, the heap already corrupt, SIGABRT "out of memory");
* crash_tile_sizes_sigfpe.txt: the same with `break` instead of the inner `return`;
* error_legalize.txt: error_legalize.mlir, an op no conversion takes, at a construct's location.
* crash_refine_usage_sigsegv.txt: `main` of two loops with a `return` inside each, the second
  with a random op, dynamic batch (`tests/test_fuzz_regressions.py: _RandomLoopAfterAReturnLoop`),
  as the compiled host wrote it before its loops kept the sizes of their dynamic-batch tensors.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

import dycl_iree
from dycl_iree import pipeline
from dycl_iree.cli import main as cli_main
from dycl_iree.compile import crashed_on, describe_failure
from dycl_iree.errors import CompileError

OUTPUTS = Path(__file__).parent / "data" / "iree_compile"


def _read(name: str) -> str:
    return (OUTPUTS / name).read_text()


def test_a_diagnostic_is_quoted_with_its_location() -> None:
    text = describe_failure(_read("error_legalize.txt"))
    assert text == (
        "error: failed to legalize operation 'torch.operator' that was explicitly marked illegal (at if2 model.py:7)"
    )


@pytest.mark.parametrize(
    "name, signal", [("crash_scf_while_sigsegv.txt", "SIGSEGV"), ("crash_scf_while_sigabrt.txt", "SIGABRT")]
)
def test_a_crash_in_the_stream_conversion_names_signal_pass_and_pattern(name: str, signal: str) -> None:
    text = describe_failure(_read(name))
    assert text.startswith(f"crashed with {signal}"), text
    assert "in pass ConvertToStreamPass" in text
    assert "ScfWhileOpConversion::matchAndRewrite(scf::WhileOp) -> " in text
    assert "applySignatureConversion" in text
    assert crashed_on(text) == "while"


def test_a_crash_in_codegen_names_the_tile_size_function() -> None:
    text = describe_failure(_read("crash_tile_sizes_sigfpe.txt"))
    assert text == (
        "crashed with SIGFPE in pass LLVMCPUSelectLoweringStrategyPass: "
        "initCPULaunchConfig -> setRootConfigImpl -> getDefaultDistributedLevelTileSizes"
    )
    assert crashed_on(text) is None


def test_a_crash_on_a_while_names_the_loop_of_main() -> None:
    error = CompileError("iree-compile failed")
    error.diagnostic = describe_failure(_read("crash_scf_while_sigsegv.txt"))
    main_text = "\n".join(
        [
            "func.func @main(%arg0: tensor<2x4xf32>) -> (tensor<2x4xf32>) {",
            "  %t1 = scf.if %c -> (tensor<2x4xf32>) {",
            "    %t2 = scf.while (%a = %arg0) : (tensor<2x4xf32>) -> (tensor<2x4xf32>) {",
            '      scf.condition(%b) %a : tensor<2x4xf32> loc("loop0 model.py:9")',
            "    } do {",
            '      scf.yield %a : tensor<2x4xf32> loc("loop0 model.py:9")',
            '    } loc("loop0 model.py:9")',
            "  } else {",
            '  } loc("loop0 model.py:9")',
            "  %t3 = scf.if %d -> (tensor<2x4xf32>) {",
            "  } else {",
            '  } loc("if3 model.py:14")',
            "}",
        ]
    )
    reason = pipeline.compiled_host_failure(error, main_text)
    assert reason.startswith("crashed with SIGSEGV in pass ConvertToStreamPass")
    assert reason.endswith("(the scf.while of loop0 model.py:9)")


def test_a_crash_in_refine_usage_names_the_loops_of_main() -> None:
    """The stream conversion's `RefineUsagePass` dies on a narrowed `scf.while` (README, Known traps);
    its stack names no op, so the reason names every loop of `main`."""
    error = CompileError("iree-compile failed")
    error.diagnostic = describe_failure(_read("crash_refine_usage_sigsegv.txt"))
    assert error.diagnostic.startswith("crashed with SIGSEGV in pass RefineUsagePass: "), error.diagnostic
    assert crashed_on(error.diagnostic) == "while"
    main_text = "\n".join(
        [
            "func.func @main(%arg0: tensor<?x6xf32>) -> (tensor<?x6xf32>) {",
            "  %t1 = scf.while (%a = %arg0) : (tensor<?x6xf32>) -> (tensor<?x6xf32>) {",
            '    scf.condition(%b) %a : tensor<?x6xf32> loc("loop0 model.py:8")',
            "  } do {",
            '  } loc("loop0 model.py:8")',
            "  %t2 = scf.while (%c = %t1) : (tensor<?x6xf32>) -> (tensor<?x6xf32>) {",
            '    scf.condition(%d) %c : tensor<?x6xf32> loc("loop4 model.py:12")',
            "  } do {",
            '  } loc("loop4 model.py:12")',
            "}",
        ]
    )
    reason = pipeline.compiled_host_failure(error, main_text)
    assert reason.endswith("(one of the scf.while ops of loop0 model.py:8, loop4 model.py:12)"), reason


def test_the_compile_error_keeps_the_summary_on_its_first_line(monkeypatch) -> None:
    """`CompileError` starts with the one-line summary, and the stack dump is cut, not the summary."""
    import iree.compiler

    import dycl_iree.compile as compile_module

    def crash(*args, **kwargs):
        raise RuntimeError(_read("crash_scf_while_sigabrt.txt") + "#99 0x0 filler\n" * 400)

    monkeypatch.setattr(iree.compiler, "compile_str", crash)
    with pytest.raises(CompileError) as caught:
        compile_module.compile_module(b"not really", "llvm-cpu", use_cache=False)
    first = str(caught.value).splitlines()[0]
    assert first.startswith("iree-compile failed for target llvm-cpu: crashed with SIGABRT")
    assert caught.value.diagnostic in first and "ScfWhileOpConversion" in first
    assert "(truncated)" in str(caught.value)


class _Branchy(nn.Module):
    def forward(self, x: torch.Tensor):
        if bool(x.sum() > 0.0):
            x = x * 2.0
        return x


def test_a_forced_fallback_names_the_diagnostic_and_inspect_shows_it(tmp_path, monkeypatch, capsys) -> None:
    """`main` with an op iree-compile cannot legalize (a stand-in for a defect of the compiled host):
    the bundle falls back to the Python host, and its reason quotes iree-compile's diagnostic and the
    construct's location, as `inspect` shows."""
    monkeypatch.setenv("DYCL_IREE_EXPORT_CACHE", "0")
    real = pipeline.synthesize_compiled

    def broken(program, signatures):
        lines = real(program, signatures).splitlines()
        argument = re.search(r"%arg0: (!torch\.vtensor<[^>]*>)", lines[0]).group(1)
        bad = f'  %bad = torch.operator "aten.no_such_op"(%arg0) : ({argument}) -> {argument} loc("if7 branchy.py:3")'
        return "\n".join([lines[0], bad, *lines[1:]])

    monkeypatch.setattr(pipeline, "synthesize_compiled", broken)
    bundle = dycl_iree.export(_Branchy(), (torch.ones(1, 4),))
    assert bundle.host == "python"
    reason = bundle.manifest["compiled_host_unsupported"]
    assert reason == (
        "iree-compile rejected the compiled host: error: failed to legalize operation 'torch.operator' "
        "that was explicitly marked illegal (at if7 branchy.py:3)"
    ), reason
    path = bundle.save(tmp_path / "branchy.dycl")
    run = dycl_iree.load(path, host="python")
    for x in (torch.ones(1, 4), -torch.ones(1, 4)):
        torch.testing.assert_close(torch.from_numpy(run(x.numpy())), _Branchy()(x))
    assert cli_main(["inspect", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "failed to legalize operation 'torch.operator'" in shown and "if7 branchy.py:3" in shown


def test_a_segment_error_quotes_the_crash_summary() -> None:
    """`first_error_line` (what a segment's UnsupportedOpError quotes) keeps a crash's summary line."""
    from dycl_iree.lower import first_error_line

    text = "iree-compile failed for target llvm-cpu: crashed with SIGFPE in pass P: f -> g\nError code: -8\n..."
    assert first_error_line(text) == "iree-compile failed for target llvm-cpu: crashed with SIGFPE in pass P: f -> g"
    assert first_error_line("noise\n<unknown>:0: error: bad op\n") == "<unknown>:0: error: bad op"


def test_a_value_read_where_it_is_not_defined_is_named() -> None:
    """A Program whose `else` reads a value that only the `then` side defines (what a defect of an
    earlier stage leaves, fuzzer seed 80136): the compiled host is not possible, and its reason names
    the value and the line that reads it instead of being empty."""
    from dycl_iree.hosts import CompiledHostUnsupported, synthesize_compiled
    from dycl_iree.program import Block, Constant, HostOp, If, Program, ScalarType, Value

    n, small = Value(0, ScalarType("int"), "n"), Value(1, ScalarType("bool"))
    a, b, r = (Value(k, ScalarType("int"), name) for k, name in [(2, "a"), (3, "b"), (4, "r")])
    then_block = Block((), (HostOp("aten::add.int", (n, Constant(1)), (a,), "m.py:3"),), (a,))
    else_block = Block((), (HostOp("aten::add.int", (a, Constant(2)), (b,), "m.py:5"),), (b,))
    test = HostOp("aten::lt.int", (n, Constant(3)), (small,), "m.py:2")
    body = Block((n,), (test, If(small, then_block, else_block, (r,), "if0", "m.py:2")), (r,))
    with pytest.raises(CompiledHostUnsupported, match=r"^%a2 is read where it is not defined \(m\.py:5\)$"):
        synthesize_compiled(Program(("n",), body, 0), {})
