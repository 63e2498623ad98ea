"""The pipeline's driver: `export(model, example_inputs)` runs every stage, top to bottom.

    capture -> specialize -> partition -> lower -> hosts -> compile -> bundle

Each stage is a module with one entry function; this module only calls them in order, times
them, reports progress, and applies the one fallback policy of the exporter:

    The bundle uses the compiled host (`main` in the vmfb) whenever `main` can be synthesized and
    iree-compile accepts it. Otherwise it uses the generated Python host, and the manifest's
    `compiled_host_unsupported` says why. An error in the segments themselves is never a
    fallback: it is reported with the op, its source line and its segment.

Example:
    >>> bundle = export(torch.nn.Linear(4, 2), (torch.randn(1, 4),))     # doctest: +SKIP
    >>> bundle.host
    'compiled'
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable, Sequence

from .bundle import PROGRAM_TEXT, PYTHON_HOST, Bundle, make_manifest, program_text, weight_bytes
from .capture import capture
from .compile import compile_module, target_flags
from .errors import CompileError
from .hosts import (
    CompiledHostUnsupported,
    attach_main,
    name_module,
    remove_main,
    synthesize_compiled,
    synthesize_python,
)
from .lower import LoweredModule, explain_compile_error, first_error_line, lower, module_bytecode
from .partition import partition
from .program import Program
from .specialize import specialize


def export(
    model: Any,
    example_inputs: Sequence[Any],
    targets: Sequence[str] = ("llvm-cpu",),
    dynamic_shapes: Any = None,
    progress: Callable[[str], None] | None = None,
    cpu_threads: int = 1,
) -> Bundle:
    """Export a dynamic PyTorch model to a bundle that runs on IREE with its control flow intact.

    `example_inputs` are tensors and Python int/float/bool in `forward` order; `dynamic_shapes`
    follows torch.export (per input, a dict from dim index to a name). `progress`, if given, is
    called with a line of text at each stage. `cpu_threads` is how many threads the CPU code is
    split for: 1 for the `local-sync` driver (the default), the worker count for `local-task`.

    >>> bundle = export(torch.nn.Linear(4, 2), (torch.randn(1, 4),))     # doctest: +SKIP
    >>> bundle.host
    'compiled'
    """
    say = progress or (lambda message: None)
    timings: dict[str, float] = {}
    example_inputs = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    targets = tuple(targets)
    for target in targets:
        target_flags(target, cpu_threads)  # reject unknown targets and thread counts before any work

    def stage(name: str, function: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        result = function()
        timings[name] = time.perf_counter() - start
        return result

    say("capturing (torch.jit.script + freeze)")
    captured = stage("capture", lambda: capture(model))
    say("specializing to the example inputs")
    typed = stage("specialize", lambda: specialize(captured, example_inputs, dynamic_shapes))
    program = stage("partition", lambda: partition(typed))
    say(f"lowering {len(program.segments)} segments through torch-mlir")
    lowered = stage(
        "lower",
        lambda: lower(program, progress=lambda name: say(f"  lowering {name} of {len(program.segments)}")),
    )
    module_name = "dycl_" + re.sub(r"\W", "_", program.name).lower()
    name_module(lowered, module_name)
    python_source = synthesize_python(program)
    unsupported = _add_compiled_host(program, lowered)

    def compile_all() -> dict[str, bytes]:
        bytecode = module_bytecode(lowered.module)
        vmfbs = {}
        for target in targets:
            say(f"compiling for {target} (iree-compile)")
            vmfbs[target] = stage(f"compile[{target}]", lambda: compile_module(bytecode, target, cpu_threads))
        return vmfbs

    try:
        compiled = compile_all()
    except CompileError as error:
        if unsupported is not None:
            raise explain_compile_error(program, targets[0], error) from error
        # The segments compile without `main` (checked next), so only the compiled host is at fault.
        remove_main(lowered)
        unsupported = "iree-compile rejected the compiled host: " + first_error_line(str(error))
        try:
            compiled = compile_all()
        except CompileError as segment_error:
            raise explain_compile_error(program, targets[0], segment_error) from segment_error

    host = "compiled" if unsupported is None else "python"
    files = {f"{target}.vmfb": vmfb for target, vmfb in compiled.items()}
    files[PYTHON_HOST] = python_source.encode()
    files[PROGRAM_TEXT] = program_text(program).encode()
    target_entries = {
        target: {"file": f"{target}.vmfb", "flags": target_flags(target, cpu_threads)} for target in compiled
    }
    manifest = make_manifest(program, module_name, host, unsupported, target_entries, weight_bytes(program))
    manifest["export_seconds"] = timings
    return Bundle(manifest, files, program)


def _add_compiled_host(program: Program, lowered: LoweredModule) -> str | None:
    """Add `main` to the lowered module; None on success, else why the compiled host is not possible."""
    try:
        attach_main(lowered, synthesize_compiled(program, lowered.signatures))
    except CompiledHostUnsupported as reason:
        return str(reason)
    return None
