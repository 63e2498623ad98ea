"""dycl_iree: ahead-of-time export of dynamic PyTorch networks to IREE.

The pipeline, one stage per module: capture -> specialize -> partition -> lower -> hosts ->
compile -> bundle.

Example:
    >>> import dycl_iree, torch
    >>> bundle = dycl_iree.export(model, (torch.randn(1, 8),))      # doctest: +SKIP
    >>> bundle.save("model.dycl")                                   # doctest: +SKIP
    >>> run = dycl_iree.load("model.dycl", host="compiled")         # doctest: +SKIP
    >>> outputs = run(torch.randn(1, 8))                            # doctest: +SKIP
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable, Sequence

from host_runtime import load
from host_runtime.errors import BundleError, DyclError, InputError, ModelRaised

from .errors import CaptureError, CompileError, SpecializeError, UnsupportedOpError

__all__ = [
    "export",
    "load",
    "Bundle",
    "DyclError",
    "BundleError",
    "InputError",
    "ModelRaised",
    "CaptureError",
    "CompileError",
    "SpecializeError",
    "UnsupportedOpError",
]


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
    from .bundle import PROGRAM_TEXT, PYTHON_HOST, Bundle, make_manifest, program_text
    from .capture import capture
    from .compile import compile_module, target_flags
    from .hosts import CompiledHostUnsupported, synthesize_compiled, synthesize_python
    from .lower import explain_compile_error, first_error_line, lower, module_bytecode
    from .partition import partition
    from .specialize import specialize

    say = progress or (lambda message: None)
    timings: dict[str, float] = {}
    if isinstance(example_inputs, (list, tuple)):
        example_inputs = tuple(example_inputs)
    else:
        example_inputs = (example_inputs,)
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
    python_source = synthesize_python(program)
    unsupported: str | None = None
    try:
        main_text = synthesize_compiled(program, lowered.signatures)
    except CompiledHostUnsupported as reason:
        unsupported = str(reason)
        main_text = None
    module_name = "dycl_" + re.sub(r"\W", "_", program.name).lower()
    _name_module(lowered, module_name)
    if main_text is not None:
        try:
            _append_main(lowered, main_text)
            _inline_segments_into_main(lowered)
        except CompiledHostUnsupported as reason:
            unsupported, main_text = str(reason), None

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
        if main_text is None:
            raise explain_compile_error(program, targets[0], error) from error
        # If the segments compile without `main`, only the compiled host is at fault: fall back
        # to the Python host and say why in the manifest.
        _remove_main(lowered)
        main_text = None
        unsupported = "iree-compile rejected the compiled host: " + first_error_line(str(error))
        try:
            compiled = compile_all()
        except CompileError as segment_error:
            raise explain_compile_error(program, targets[0], segment_error) from segment_error
    host = "compiled" if main_text is not None else "python"
    files = {f"{target}.vmfb": vmfb for target, vmfb in compiled.items()}
    files[PYTHON_HOST] = python_source.encode()
    files[PROGRAM_TEXT] = program_text(program).encode()
    target_entries = {
        target: {"file": f"{target}.vmfb", "flags": target_flags(target, cpu_threads)} for target in compiled
    }
    manifest = make_manifest(program, module_name, host, unsupported, target_entries, _weight_bytes(program))
    manifest["export_seconds"] = timings
    bundle = Bundle(manifest, files, program)
    return bundle


def _name_module(lowered: Any, name: str) -> None:
    from torch_mlir import ir

    with lowered.context:
        lowered.module.operation.attributes["sym_name"] = ir.StringAttr.get(name)


def _append_main(lowered: Any, main_text: str) -> None:
    """Parse `main` beside declarations of the segments, then move it into the real module.

    Parsing it alone would fail symbol verification of its calls; the real module's text is not
    re-parsed because it carries the weights. `torch_c` and `util` ops are written in generic form
    and parsed as unregistered ops: torch-mlir's context does not load those IREE dialects.
    """
    from torch_mlir import ir

    from .hosts.compiled import CompiledHostUnsupported

    declarations = []
    for name, (params, results) in lowered.signatures.items():
        declarations.append(f"func.func private @{name}({', '.join(params)}) -> ({', '.join(results)})")
    text = "module {\n" + "\n".join(declarations) + "\n" + main_text + "\n}"
    lowered.context.allow_unregistered_dialects = True
    try:
        scratch = ir.Module.parse(text, lowered.context)
    except Exception as error:
        raise CompiledHostUnsupported(f"the compiled host does not parse: {error}") from error
    main = list(scratch.body.operations)[-1]
    main = main.detach_from_parent()
    lowered.module.body.append(main)


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


def _remove_main(lowered: Any) -> None:
    for op in list(lowered.module.body.operations):
        if op.operation.name == "func.func" and str(op.attributes["sym_name"]) == '"main"':
            op.operation.erase()


def _weight_bytes(program: Any) -> int:
    import torch

    from .program import Constant, ListArg

    seen: dict[int, int] = {}

    def visit(arg: Any) -> None:
        if isinstance(arg, ListArg):
            for item in arg.items:
                visit(item)
        elif isinstance(arg, Constant) and isinstance(arg.value, torch.Tensor):
            seen[id(arg.value)] = arg.value.numel() * arg.value.element_size()

    for segment in program.segments:
        for op in segment.nodes:
            for arg in op.args:
                visit(arg)
            for _, arg in op.kwargs:
                visit(arg)
    return sum(seen.values())


from .bundle import Bundle  # noqa: E402  (the public name; imports torch)
