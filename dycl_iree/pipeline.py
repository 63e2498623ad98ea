"""The pipeline's driver: `export(model, example_inputs)` runs every stage, top to bottom.

    capture -> specialize -> partition -> lower -> hosts -> compile -> bundle

Each stage is a module with one entry function; this module only calls them in order, times
them, reports progress (through `logging`, logger "dycl_iree"), reuses the export of an unchanged
model (`export_cache`), and applies the one fallback policy of the exporter:

    The bundle uses the compiled host (`main` in the vmfb) whenever `main` can be synthesized and
    iree-compile accepts it. Otherwise it uses the generated Python host, and the manifest's
    `compiled_host_unsupported` says why. An error in the segments themselves is never a
    fallback: it is reported with the op, its source line and its segment.

Example:
    >>> bundle = export(torch.nn.Linear(4, 2), (torch.randn(1, 4),))     # doctest: +SKIP
    >>> bundle.host  # doctest: +SKIP
    'compiled'
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
from typing import Any, Callable, Sequence

from host_runtime.bundle_format import vmfb_file_name

from . import cache as compile_cache
from . import cpu_features, data_tiling, export_cache, vm_remaps
from .bundle import PROGRAM_TEXT, PYTHON_HOST, Bundle, largest_weights, make_manifest, program_text, weight_bytes
from .capture import capture
from .compile import compile_module, crashed_on, target_flags, workaround_for
from .dynamic_dims import check_examples, declared_dims
from .errors import CompileError, DyclError
from .guards import check_device_indices, guard_indices
from .hosts import (
    CompiledHostUnsupported,
    attach_main,
    name_module,
    remove_main,
    synthesize_compiled,
    synthesize_python,
)
from .lower import LoweredModule, explain_compile_error, first_error_line, lower, module_bytecode
from .observed_calls import ObservedCalls
from .partition import partition
from .program import Program
from .program_check import check_definitions
from .progress import LOGGER
from .size_ties import check_size_ties
from .sources import relative_sources
from .specialize import specialize
from .specialize.observed import reads_ints


def export(
    model: Any,
    example_inputs: Sequence[Any],
    targets: Sequence[str] = ("llvm-cpu",),
    dynamic_shapes: Any = None,
    progress: Callable[[str], None] | None = None,
    cpu_threads: int = 1,
    cache: bool = True,
) -> Bundle:
    """Export a dynamic PyTorch model to a bundle that runs on IREE with its control flow intact.

    `example_inputs` are tensors and Python int/float/bool in `forward` order (None for an
    `Optional` input specializes the bundle to None there: README, Optional inputs); `dynamic_shapes`
    follows torch.export (per input, a dict from dim index to a name or a `torch.export.Dim`; the
    runtime enforces a Dim's min/max and that dims of one name are equal). Progress is logged to the
    "dycl_iree" logger (`logging.basicConfig(level=logging.INFO)` shows it); `progress`, if given,
    is also called with each step's line. `cpu_threads` is how many threads the CPU code is split
    for: 1 for the `local-sync` driver (the default), the worker count for `local-task`.
    `cache=False` neither reads nor writes the cache (`dycl_iree/cache.py`): an unchanged model's
    export is reused whole, and an unchanged module's iree-compile output.

    >>> bundle = export(torch.nn.Linear(4, 2), (torch.randn(1, 4),))     # doctest: +SKIP
    >>> bundle.host  # doctest: +SKIP
    'compiled'
    """

    def say(message: str, detail: bool = False) -> None:
        LOGGER.log(10 if detail else 20, message)
        if progress is not None:
            progress(("  " if detail else "") + message)

    timings: dict[str, float] = {}
    example_inputs = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    targets = tuple(targets)
    for target in targets:
        target_flags(target, cpu_threads)  # reject unknown targets and thread counts before any work

    cpu_timings: dict[str, float] = {}

    def stage(name: str, function: Callable[[], Any]) -> Any:
        start, cpu_start = time.perf_counter(), cpu_seconds()
        result = function()
        # Accumulated: a stage run twice (iree-compile again with a workaround's flag) costs twice.
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start
        cpu_timings[name] = cpu_timings.get(name, 0.0) + cpu_seconds() - cpu_start
        return result

    started = time.perf_counter()
    say("capturing (torch.jit.script + freeze)")
    captured = stage("capture", lambda: capture(model))
    dims = declared_dims(captured.input_names, dynamic_shapes)
    shapes = [tuple(value.shape) if hasattr(value, "shape") else None for value in example_inputs]
    check_examples(captured.input_names, shapes, dims)
    use_cache = cache and compile_cache.enabled() and _export_cache_on()
    key = None
    if use_cache:
        key = stage("cache key", lambda: export_cache.export_key(captured, example_inputs, dims, targets, cpu_threads))
        cached = stage("cache read", lambda: export_cache.lookup(key))
        if cached is not None:
            cached.manifest["export_cache"] = "hit"
            seconds = time.perf_counter() - started
            say(f"unchanged model: reused the cached export ({seconds:.1f} s; --no-cache to rebuild)")
            say(stage_report(timings, cpu_timings), detail=True)
            return cached

    def typed_and_lowered(observe_ints: bool) -> tuple[Program, LoweredModule]:
        say("specializing to the example inputs")
        typed = stage("specialize", lambda: specialize(captured, example_inputs, dynamic_shapes, observe_ints))
        program = stage("partition", lambda: check_device_indices(guard_indices(partition(typed))))
        # A Program that reads a value where some path does not define it is a defect of a stage
        # above: stop here, before any host is written that would fail at run time on some inputs.
        stage("check", lambda: check_definitions(program))
        say(f"lowering {_plural(len(program.segments), 'segment')} through torch-mlir")

        def lowering(name: str) -> None:
            say(f"lowering {name} of {len(program.segments)}", detail=True)

        with cpu_features.exporting_for(targets[0]):  # forms that depend on the processor (README, performance)
            # A range as a literal is an i64 constant that Vulkan's i64 emulation cannot materialize
            # (`constant_ranges.py`): GPU targets keep the range's dispatch.
            cpu_only = all(target.startswith("llvm-cpu") for target in targets)
            observed = ObservedCalls(program, example_inputs)  # run only for a segment that needs it
            return program, stage(
                "lower", lambda: lower(program, progress=lowering, fold_ranges=cpu_only, observed=observed)
            )

    try:
        program, lowered = typed_and_lowered(observe_ints=False)
    except DyclError as error:
        # The ints read from data are typed with the example 1; where that fails, with their
        # values at the examples (`specialize/observed.py: observed_int`), else the first error.
        if not reads_ints(captured.graph):
            raise
        say(f"typing again with the ints read from data at their values in a run ({error})")
        try:
            program, lowered = typed_and_lowered(observe_ints=True)
        except DyclError:
            raise error from None
    # Sizes that torch.export tied to a sum of other inputs' sizes: the host checks them before the call.
    program = check_size_ties(program, lowered.ties)
    module_name = "dycl_" + re.sub(r"\W", "_", program.name).lower()
    name_module(lowered, module_name)
    python_source = stage("hosts", lambda: synthesize_python(program))
    unsupported, main_text = stage("hosts", lambda: _add_compiled_host(program, lowered))
    largest = largest_weights(program)
    blocks = branches_as_blocks(main_text, largest)
    packs = packs_in_regions(main_text, largest)

    branching = _branches(main_text)  # whose VM code `vm_remaps` checks, while the module holds `main`

    def compile_all(extra: tuple[str, ...] = ()) -> dict[str, bytes]:
        bytecode = module_bytecode(lowered.module)
        vmfbs = {}
        for target in targets:
            say(f"compiling for {target} (iree-compile)")
            vmfbs[target] = stage(
                f"compile[{target}]",
                lambda: compile_module(
                    bytecode,
                    target,
                    cpu_threads,
                    use_cache=cache,
                    extra_flags=extra,
                    branches_as_blocks=blocks,
                    check_branches=branching and unsupported is None,
                    hoist_packing=packs and not blocks and unsupported is None,
                ),
            )
        return vmfbs

    extra: tuple[str, ...] = ()
    failure: CompileError | None = None
    try:
        compiled = compile_all()
    except CompileError as error:
        if unsupported is not None:
            raise explain_compile_error(program, targets[0], error, lowered.observed) from error
        failure = error
    if failure is not None and blocks and not isinstance(failure, vm_remaps.OverlapError):
        # blocks only speed the host up: its regions may compile where they fail
        say(f"iree-compile rejected main's branches as blocks ({failure.diagnostic}); compiling them as regions")
        blocks = False
        try:
            compiled, failure = compile_all(), None
        except CompileError as again:
            failure = again
    flag = workaround_for(getattr(failure, "diagnostic", "")) if failure is not None else None
    retried = ""
    if failure is not None and flag is not None:  # a known iree-compile trap: once more, with its flag
        say(f"{_rejection(failure)} ({failure.diagnostic}); compiling again with {flag}")
        try:
            compiled, extra, failure = compile_all((flag,)), (flag,), None
        except CompileError as again:
            retried = f"; with {flag}: {getattr(again, 'diagnostic', '')}"
    if failure is not None:
        # The segments compile without `main` (checked next), so only the compiled host is at fault.
        remove_main(lowered)
        blocks = False
        unsupported = f"{_rejection(failure)}: {compiled_host_failure(failure, main_text)}{retried}"
        try:
            compiled = compile_all()
        except CompileError as segment_error:
            raise explain_compile_error(program, targets[0], segment_error, lowered.observed) from segment_error

    host = "compiled" if unsupported is None else "python"
    relative = relative_sources  # no path of this machine in the bundle (`sources`)
    files = {vmfb_file_name(target): vmfb for target, vmfb in compiled.items()}
    files[PYTHON_HOST] = relative(python_source).encode()
    files[PROGRAM_TEXT] = relative(program_text(program)).encode()
    target_entries = {
        target: {"file": vmfb_file_name(target), "flags": target_flags(target, cpu_threads, blocks) + list(extra)}
        for target in compiled
    }
    if "llvm-cpu" in target_entries:  # this machine's CPU: a runtime picks the vmfb for the CPU it runs on
        target_entries["llvm-cpu"]["cpu"] = platform.machine()
    manifest = make_manifest(program, module_name, host, unsupported, target_entries, weight_bytes(program))
    manifest = json.loads(relative(json.dumps(manifest)))
    for spec, declared in zip(manifest["inputs"], dims):
        named = [dim for dim in declared if spec["kind"] == "tensor" and spec["shape"][dim["dim"]] is None]
        if named:
            spec["dims"] = named
    manifest["export_seconds"] = dict(timings)  # the export's own stages, as the cache stores them
    manifest["export_cpu_seconds"] = dict(cpu_timings)
    bundle = Bundle(manifest, files, program)
    if key is not None:
        stage("cache write", lambda: export_cache.store(key, bundle))
    say(f"exported {program.name} in {time.perf_counter() - started:.1f} s; {stage_report(timings, cpu_timings)}")
    return bundle


def cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of its finished child processes (iree-compile)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def stage_report(wall: dict[str, float], cpu: dict[str, float]) -> str:
    """Where an export's time went, stage by stage: wall time, and CPU time where it differs (a stage
    that runs on several cores, or waits for a busy machine's cores, shows it).

    >>> stage_report({"lower": 12.04, "compile[llvm-cpu]": 30.0}, {"lower": 11.9, "compile[llvm-cpu]": 58.2})
    'lower 12.0 s, compile[llvm-cpu] 30.0 s (CPU 58.2 s)'
    """
    parts = []
    for name, seconds in wall.items():
        used = cpu.get(name, seconds)
        differs = abs(used - seconds) >= 0.1 * seconds + 0.5
        parts.append(f"{name} {seconds:.1f} s" + (f" (CPU {used:.1f} s)" if differs else ""))
    return ", ".join(parts)


def _export_cache_on() -> bool:
    """`DYCL_IREE_EXPORT_CACHE=0` turns off only the whole-export cache (tests that patch a stage set it)."""
    return os.environ.get("DYCL_IREE_EXPORT_CACHE", "1").lower() not in ("0", "false", "no")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


# The least weight (elements) of a segment in a branch that has `main` compiled with its branches as
# blocks: data tiling's least weight read as panels, which IREE packed at every call in a branch.
# Below it IREE packs no weight, and blocks cost their joins: the zoo's SkipNet-38 gates
# (36,864 weights at most) ran 2.4-3.0% slower as blocks (31 alternating rounds), its other branchy
# models within the noise.
BLOCKS_MIN_WEIGHT = 2**data_tiling.PANELS_MIN_WEIGHT_LOG2


def branches_as_blocks(main_text: str, largest: dict[str, int]) -> bool:
    r"""Whether `main` (its MLIR text; "" where there is none) is compiled with its branches as blocks
    (`compile.AS_BLOCKS`), so that IREE prepares the weights of the segments in its branches once, not
    at every call: where it branches, never loops, its branches yield no tensor of a run-time size,
    and a segment called in a branch has a weight of BLOCKS_MIN_WEIGHT elements or more (`largest`:
    per segment, its largest weight's). IREE 3.13 sizes a tensor of run-time size that reaches a
    block as its argument wrongly, around a loop's blocks (a list returned from inside a loop) and
    at a branch's join (`h = x if c else y`, x and y of other batch sizes: the call fails,
    "attempted to access an address outside of the valid buffer range"); those keep their regions.
    It reads `main`'s MLIR rather than the Program's `If` and `Loop` nodes because the hosts add
    `scf.if`s of their own (`hosts/checks.py` passes tensors through the checks before a call), and
    carry a list of run-time length as a tensor of run-time size, neither of which the Program shows.

    >>> head = "func.func @main(%x: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> {\n"
    >>> branch = "  %t2 = torch.prim.If %t1 -> (!torch.vtensor<[1,8],f32>) {\n    %t3 = func.call @seg1(%x) : x\n"
    >>> branches_as_blocks(head + branch, {"seg1": 2**17})
    True
    >>> branches_as_blocks(head + branch, {"seg1": 2**17 - 1})
    False
    >>> branches_as_blocks(head + branch.replace("[1,8]", "[?,8]"), {"seg1": 2**17})
    False
    >>> branches_as_blocks(head + branch + "  %l:2 = scf.while (", {"seg1": 2**17})
    False
    >>> branches_as_blocks("", {})
    False
    """
    if "torch.prim.If" not in main_text or "scf.while" in main_text or "torch.prim.Loop" in main_text:
        return False
    for line in main_text.splitlines():
        if re.search(r"torch\.prim\.If |scf\.if ", line) and "?" in line.partition("->")[2]:
            return False
    return any(largest.get(name, 0) >= BLOCKS_MIN_WEIGHT for name in _called_in_regions(main_text))


def packs_in_regions(main_text: str, largest: dict[str, int]) -> bool:
    r"""Whether `main` (its MLIR text) calls a segment inside a loop or a branch that has a weight
    large enough for data tiling (`largest`: per segment, its largest weight's elements), whose
    packing `packing_hoist` moves to load time where `main` keeps its regions (the compile then
    takes two steps, `compile.compile_module`).

    >>> head = "func.func @main(%x: !torch.vtensor<[?,512],f32>) -> !torch.vtensor<[?,512],f32> {\n"
    >>> loop = "  %l:2 = scf.while (%a = %x) {\n    %t3 = func.call @seg1(%a) : x\n"
    >>> packs_in_regions(head + loop, {"seg1": 2**18}), packs_in_regions(head + loop, {"seg1": 2**18 - 1})
    (True, False)
    >>> packs_in_regions(head + "  %t3 = func.call @seg1(%x) : x\n", {"seg1": 2**18})
    False
    """
    least = 2**data_tiling.AVX2_MIN_WEIGHT_LOG2
    return any(largest.get(name, 0) >= least for name in _called_in_regions(main_text))


def _called_in_regions(main_text: str) -> set[str]:
    """The segments `main` (its MLIR text) calls inside a branch or a loop of its body."""
    depth, called = 0, set()
    for line in main_text.splitlines():
        call = re.search(r"func\.call @([\w$]+)\(", line)
        if call and depth > 1:
            called.add(call.group(1))
        depth += line.count("{") - line.count("}")
    return called


def _add_compiled_host(program: Program, lowered: LoweredModule) -> tuple[str | None, str]:
    """Add `main` to the lowered module: (None, its MLIR text) on success, else (why the compiled host
    is not possible, "")."""
    try:
        main_text = synthesize_compiled(program, lowered.signatures)
        attach_main(lowered, main_text)
    except CompiledHostUnsupported as reason:
        return str(reason), ""
    return None, main_text


def _branches(main_text: str) -> bool:
    """Whether `main` (its MLIR text) branches or loops: only then has its VM code register moves of
    block arguments to check (`vm_remaps`)."""
    return re.search(r"\b(torch\.prim\.(If|Loop)|scf\.(if|while))\b", main_text) is not None


def _rejection(failure: CompileError) -> str:
    """How the fallback's reason starts: iree-compile's error, or a vmfb it made that is unsafe."""
    if isinstance(failure, vm_remaps.OverlapError):
        return "the compiled host's VM code is unsafe"
    return "iree-compile rejected the compiled host"


def compiled_host_failure(error: Exception, main_text: str) -> str:
    """What iree-compile said about `main`, in one line that names the model's construct.

    A diagnostic carries the location of the op it is about, which `main` labels with its construct
    and line (`loop1 model.py:12`). A crash has no location; where its stack names the structured op
    it was converting (`ScfWhileOpConversion`), the constructs of that kind in `main` are named.

    >>> error = CompileError("x")
    >>> error.diagnostic = "crashed with SIGSEGV in pass P: ScfWhileOpConversion::matchAndRewrite"
    >>> compiled_host_failure(error, 'scf.while {\\n} do {\\n} loc("loop1 m.py:3")')
    'crashed with SIGSEGV in pass P: ScfWhileOpConversion::matchAndRewrite (the scf.while of loop1 m.py:3)'
    """
    diagnostic = getattr(error, "diagnostic", None) or first_error_line(str(error))
    kind = crashed_on(diagnostic) if diagnostic.startswith("crashed") else None
    if kind is None:
        return diagnostic
    labels = list(dict.fromkeys(label for op, label in region_labels(main_text) if op == f"scf.{kind}"))
    if not labels:
        return diagnostic
    if len(labels) == 1:
        return f"{diagnostic} (the scf.{kind} of {labels[0]})"
    return f"{diagnostic} (one of the scf.{kind} ops of {', '.join(labels)})"


def region_labels(main_text: str) -> list[tuple[str, str]]:
    """(op name, location label) of every region op of `main`'s text, e.g. ("scf.while", "loop1 m.py:3"):
    an op that opens a region (a line ending in `{`) is labelled by the `} loc(...)` that closes it."""
    opened: list[str] = []
    found = []
    for line in main_text.splitlines():
        text = line.strip()
        if text.startswith("}"):
            if text.endswith("{"):  # `} else {`, `} do {`: the same op goes on
                continue
            op = opened.pop() if opened else ""
            label = re.search(r'loc\("([^"]*)"\)', text)
            if label:
                found.append((op, label.group(1)))
        elif text.endswith("{"):
            match = re.search(r"\b(scf\.\w+|func\.func)\b", text)
            opened.append(match.group(1) if match else "")
    return found
