"""Compile: one MLIR module to one vmfb per target with `iree.compiler`, cached by content.

The cache key is the module's bytecode, the flags, the compiler version and, for code built for
this machine's CPU (`--iree-llvmcpu-target-cpu=host`), which CPU that resolved to, so a cache shared
between machines never hands out code for another CPU. A re-export of an unchanged model (the test
suite does this a lot) costs a hash instead of a compile. Where the cache lives, its size bound and
how to clear it: `dycl_iree/cache.py`.

Example:
    >>> flags = target_flags("llvm-cpu")
    >>> "--iree-hal-target-device=local" in flags
    True
    >>> "--iree-llvmcpu-number-of-threads=4" in target_flags("llvm-cpu", cpu_threads=4)
    True
    >>> target_flags("cuda:sm_86")
    ['--iree-hal-target-device=cuda', '--iree-cuda-target=sm_86']
"""

from __future__ import annotations

import functools
import hashlib
import platform
import re
from pathlib import Path
from typing import Any

from . import cache, cpu_features, data_tiling, packing_hoist, tap_tiles, vm_remaps
from .errors import CompileError, DyclError
from .progress import LOGGER

# Flags per target, from ENVIRONMENT.md. "llvm-cpu" compiles for this machine's CPU;
# "llvm-cpu:TRIPLE" cross-compiles (e.g. llvm-cpu:aarch64-linux-gnu); "cuda:sm_XX" picks the GPU
# architecture (CUDA_ARCHITECTURE when not given).
# Convolutions run channels-last: IREE's preprocessing converts each NCHW convolution to NHWC, and
# the transposes between neighbouring convolutions cancel in global optimization. IREE's direct NHWC
# convolution beats both its im2col + matmul and the per-tap copies + matmul this exporter used
# before (two 3x3 convolutions, 32 channels at 16x16: 78 us against 107 and 111; deepest path of
# WRN-SDN 1.86 -> 1.45 ms). Filters reach IREE pre-transposed (`lower._constant_weight`) and
# depthwise convolutions as channels-last taps (`decompositions.depthwise_convolution_as_taps`).
# That holds where the CPU has AVX-512 (or is not x86). Without AVX-512, IREE 3.13 tiles a direct
# convolution of 8 or more input channels as 4 pixels x 4 channels, 2-16 GFLOP/s, and no flag changes
# that choice (`--iree-llvmcpu-max-allowed-number-of-native-vectors`, `--iree-llvmcpu-target-vector-
# width-in-bytes` tried); `--iree-global-opt-use-im2col-for-convs` (with data tiling and ukernels)
# makes those fast, but converts every convolution and made SDN-ResNet-56 1.7x slower (code for
# znver3: 3.4 -> 5.8 ms). So the exporter picks im2col per shape instead (`decompositions.
# _im2col_wins`; Winograd's F(2x2, 3x3) for the 3x3 stride-1 ones, `winograd.output_tile`), and the
# flags stay the same for every x86 CPU.
#
# Command buffers are memoized (IREE's default). They were recorded at each call for a while, after
# `Halting` of tests/test_host_scalars.py returned 0.0 for `torch.tensor(magnitude) * x.sum()` with
# memoized ones; the fault was in IREE's VM code, not the command buffers: a branch's register moves
# overwrote the host's float before another move read it, and recording had only changed the
# registers (`vm_remaps`, which now checks every compiled host; README's traps). Memoized, the zoo's
# compiled hosts run 3-11% faster and `bench --micro`'s decision 8.70 -> 6.82 us.
CHANNELS_LAST = "util.func(iree-preprocessing-convert-conv-to-channels-last)"
# The compiled host's branches as blocks (`target_flags(..., branches_as_blocks=True)`), last in
# the preprocessing pipeline. IREE 3.13 moves work on constants (a weight's packing for data tiling,
# a transpose) out of the call into an initializer only where the constant and the op that uses it
# share a region (`ConstExprAnalysis`; iree-org/iree#15961 proposed more, and was closed). The
# constants sit at the top of `main`, and the segments inlined into its `scf.if`s use them there; so
# that work ran at every call on the compiled host, and the weights were stored twice, raw for `main`
# and packed for the segments. The early-exit ResNet-50 packed weights for 7 ms a call on its path
# through every stage (103 -> 94 ms as blocks; its vmfb 359 -> 245 MB). Blocks share the function's
# region.
# Which `main`s take them, and why not the others: `pipeline.branches_as_blocks`.
AS_BLOCKS = "util.func(iree-top-level-scf-to-cfg)"
_CPU = [
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    f"{data_tiling.PIPELINE_FLAG}builtin.module({CHANNELS_LAST})",
    "--iree-input-demote-f64-to-f32=false",
]
# Vulkan: IREE's default target (the vp_android_baseline_2022 profile) stores only 32-bit words, so
# an i1/i8/i16 tensor is written as whole words; a tensor whose byte size is not a multiple of 4 then
# loses its last elements on a device that bounds-checks buffer accesses (lavapipe: a segment's
# 0-d bool, the decision the Python host reads, comes back false; 5xi8 loses element 4). The
# profile's features plus 8- and 16-bit storage (Vulkan 1.2 core, on desktop GPUs and lavapipe)
# write those tensors byte by byte.
_VULKAN_FEATURES = [
    "spirv:v1.3",
    "cap:Shader",
    "cap:Int8",
    "cap:Int16",
    "cap:StorageBuffer8BitAccess",
    "cap:StorageBuffer16BitAccess",
    "ext:SPV_KHR_8bit_storage",
    "ext:SPV_KHR_16bit_storage",
]
THREADS_FLAG = "--iree-llvmcpu-number-of-threads="
TARGETS = {
    "llvm-cpu": _CPU + ["--iree-llvmcpu-target-cpu=host"],
    "cuda": ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"],  # CUDA_ARCHITECTURE
    "vulkan": ["--iree-hal-target-device=vulkan", "--iree-vulkan-target-features=" + ",".join(_VULKAN_FEATURES)],
}
CUDA_FLAG = "--iree-cuda-target="
CUDA_ARCHITECTURE = "sm_80"
# NVIDIA architectures iree-base-compiler 3.13 has no GPU target for: it fails in the middle of the
# compile with "missing GPU target in #hal.executable.target" (checked one by one on a 4-element
# add; sm_60-sm_89 and sm_120/sm_121 compile). The vmfb embeds PTX, which the CUDA driver compiles
# for the GPU it runs on, so sm_80 or sm_89 code also runs on Hopper and Blackwell.
CUDA_ARCHITECTURES_REJECTED = frozenset(
    ["sm_35", "sm_37", "sm_50", "sm_52", "sm_53", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_101", "sm_103", "sm_120a"]
)
# Which runtime drivers can run a vmfb of each target.
TARGET_DRIVERS = {
    "llvm-cpu": ["local-sync", "local-task"],
    "cuda": ["cuda"],
    "vulkan": ["vulkan"],
}


def target_flags(target: str, cpu_threads: int = 1, branches_as_blocks: bool = False) -> list[str]:
    """iree-compile flags for a target name; CPU code is tiled for `cpu_threads` threads, and the
    compiled host's branches become blocks with `branches_as_blocks` (`AS_BLOCKS`).

    IREE splits every CPU dispatch into workgroups for the threads it expects at run time (8 unless
    told), and narrows its vectors to make enough of them: SkipNet-RNN's 16-channel global average
    pool ran as 8 workgroups of 2-wide vectors (5.0 us; one 16-wide workgroup: 3.2 us), and every
    convolution as 8 workgroups. `local-sync`, the runtime's default driver, runs on one thread,
    so 1 is the default (up to 15% faster per zoo model); a bundle for `local-task` should say how many
    workers it will have. On an x86 CPU with AVX2, `llvm-cpu` data-tiles the matmuls `data_tiling`
    picks and gives the rest its register tiles (wider with AVX-512), and depthwise convolutions'
    taps theirs (`tap_tiles`).
    """
    if isinstance(cpu_threads, bool) or not isinstance(cpu_threads, int) or cpu_threads < 1:
        raise DyclError(f"cpu_threads must be a positive int, not {cpu_threads!r}")
    if target.startswith("llvm-cpu:"):
        triple = target.split(":", 1)[1]
        flags = _CPU + [f"--iree-llvmcpu-target-triple={triple}", "--iree-llvmcpu-target-cpu=generic"]
    elif target.startswith("cuda:"):
        flags = [TARGETS["cuda"][0], CUDA_FLAG + _cuda_architecture(target.split(":", 1)[1])]
    elif target in TARGETS:
        flags = list(TARGETS[target])
        if target == "llvm-cpu" and cpu_features.has_avx2():
            # data tiling of the matmuls with few rows and a large weight, the register tile and weight
            # panels of the others (wide with AVX-512), in a preprocessing pipeline of its own
            wide = cpu_features.has_avx512()
            rule = data_tiling.compile_flags((CHANNELS_LAST,), wide=wide)
            pipeline = [flag for flag in rule if flag.startswith(data_tiling.PIPELINE_FLAG)]
            flags = [pipeline[0] if pipeline and flag.startswith(data_tiling.PIPELINE_FLAG) else flag for flag in flags]
            channels = tap_tiles.AVX512_CHANNELS if wide else tap_tiles.CHANNELS
            flags += [flag for flag in rule if flag not in pipeline] + tap_tiles.compile_flags(channels)
    else:
        known = ", ".join([*TARGETS, "llvm-cpu:TRIPLE", "cuda:sm_XX"])
        raise DyclError(f"unknown target {target!r}; known targets: {known}")
    flags = _ending_with_blocks(flags) if branches_as_blocks else flags
    return flags + [f"{THREADS_FLAG}{cpu_threads}"] if flags[0] == _CPU[0] else flags


def _ending_with_blocks(flags: list[str]) -> list[str]:
    """The flags with `AS_BLOCKS` last in the preprocessing pipeline (one made for it if none).

    >>> _ending_with_blocks(["--iree-preprocessing-pass-pipeline=builtin.module(a)", "-b"])
    ['--iree-preprocessing-pass-pipeline=builtin.module(a,util.func(iree-top-level-scf-to-cfg))', '-b']
    >>> _ending_with_blocks(["-b"])
    ['-b', '--iree-preprocessing-pass-pipeline=builtin.module(util.func(iree-top-level-scf-to-cfg))']
    """
    pipeline = data_tiling.PIPELINE_FLAG
    if not any(flag.startswith(pipeline) for flag in flags):
        return [*flags, f"{pipeline}builtin.module({AS_BLOCKS})"]
    return [f"{flag[:-1]},{AS_BLOCKS})" if flag.startswith(pipeline) else flag for flag in flags]


def cpu_threads_of(flags: list[str]) -> int | None:
    """The thread count a CPU vmfb's code was split for, from its flags (None for GPU targets).

    >>> cpu_threads_of(target_flags("llvm-cpu", cpu_threads=2))
    2
    """
    counts = [int(flag[len(THREADS_FLAG) :]) for flag in flags if flag.startswith(THREADS_FLAG)]
    return counts[0] if counts else None


def _cuda_architecture(architecture: str) -> str:
    """Check a CUDA architecture name before any compile: iree-compile's own failure comes late and
    does not say that the architecture is the problem."""
    if not re.fullmatch(r"sm_\d+a?", architecture):
        raise DyclError(f"target 'cuda:{architecture}': unknown CUDA architecture {architecture!r}; write it as sm_XX")
    if architecture in CUDA_ARCHITECTURES_REJECTED:
        raise DyclError(
            f"target 'cuda:{architecture}': iree-base-compiler 3.13 cannot compile for {architecture} "
            '("missing GPU target in #hal.executable.target"); compile for sm_80 (the default) or sm_89: '
            "the vmfb carries PTX, which the CUDA driver compiles for newer GPUs (Hopper included) when it loads it"
        )
    return architecture


def cuda_architecture_of(flags: list[str]) -> str | None:
    """The GPU architecture a CUDA vmfb was compiled for, from its flags (None for other targets).

    >>> cuda_architecture_of(target_flags("cuda"))
    'sm_80'
    """
    architectures = [flag[len(CUDA_FLAG) :] for flag in flags if flag.startswith(CUDA_FLAG)]
    return architectures[0] if architectures else None


def cache_dir() -> Path:
    """The cache folder: `$DYCL_IREE_CACHE`, `$XDG_CACHE_HOME/dycl_iree` or `~/.cache/dycl_iree`."""
    return cache.directory()


HOST_CPU_FLAG = "--iree-llvmcpu-target-cpu=host"


@functools.cache
def host_cpu() -> str:
    """What `--iree-llvmcpu-target-cpu=host` resolves to on this machine: LLVM picks the CPU model and its
    features from cpuid, so the key holds the same facts (vendor, family, model, feature flags).

    >>> host_cpu().startswith(platform.machine())
    True
    """
    facts = {}
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("vendor_id", "cpu family", "model", "model name", "flags", "Features", "CPU part"):
                    facts.setdefault(key, value.strip())
                if not line.strip() and facts:
                    break  # the first processor's block is enough
    except OSError:
        facts["processor"] = platform.processor()
    features = facts.pop("flags", None) or facts.pop("Features", "")
    digest = hashlib.sha256(" ".join(sorted(features.split())).encode()).hexdigest()[:16]
    return " ".join([platform.machine(), *(f"{k}={v}" for k, v in sorted(facts.items())), f"features={digest}"])


def cache_key_flags(flags: list[str]) -> list[str]:
    """The flags as the cache key sees them: `host` replaced by the CPU it means here."""
    return [f"--iree-llvmcpu-target-cpu=host[{host_cpu()}]" if flag == HOST_CPU_FLAG else flag for flag in flags]


# iree-compile errors on the compiled host that one more flag avoids (README, "Known traps"):
# the diagnostic's text, and the flag the module is compiled again with.
WORKAROUNDS = (
    # IREE 3.13's stream partitioning leaves a dispatch without operands (an `arange` that CSE made
    # one for two segments split by a loop) outside every execution region; fused into its
    # consumers, there is none.
    ("streamable op expected to be in an execution region", "--iree-dispatch-creation-enable-aggressive-fusion=true"),
    # A branch of the VM code whose register moves overlap (`vm_remaps`): command buffers recorded
    # at each call instead of memoized change `main`'s registers (that cleared `Halting`'s).
    ("ordered a branch's register moves", "--iree-hal-indirect-command-buffers=false"),
)


def workaround_for(diagnostic: str) -> str | None:
    """The flag that avoids the iree-compile error `diagnostic`, if one is known (`WORKAROUNDS`).

    >>> workaround_for("error: 'stream.async.dispatch' op : streamable op expected to be in an execution region")
    '--iree-dispatch-creation-enable-aggressive-fusion=true'
    >>> workaround_for("error: failed to legalize operation") is None
    True
    """
    return next((flag for text, flag in WORKAROUNDS if text in diagnostic), None)


def compile_module(
    bytecode: bytes,
    target: str,
    cpu_threads: int = 1,
    use_cache: bool = True,
    extra_flags: tuple[str, ...] = (),
    branches_as_blocks: bool = False,
    check_branches: bool = False,
    hoist_packing: bool = False,
) -> bytes:
    """Compile torch-dialect MLIR bytecode for `target` (with `extra_flags` after the target's own);
    reuse a cached vmfb when there is one. With `check_branches` (a compiled host whose `main`
    branches) the new vmfb's VM code is read for overlapping register moves before it is cached
    (`vm_remaps.checked`: their order repaired where it can be, else OverlapError), so a cached one
    was read once, when it was made.
    With `hoist_packing` (a `main` that keeps its loops or branches as regions), the weights its
    regions data-tile are packed once, at load (`packing_hoist`)."""
    import iree.compiler as iree_compiler

    flags = target_flags(target, cpu_threads, branches_as_blocks) + list(extra_flags)
    hoist_packing = hoist_packing and data_tiling.FLAG in flags  # only data tiling packs weights
    version = getattr(iree_compiler, "__version__", "") or _compiler_version()
    key = hashlib.sha256()
    key.update(bytecode)
    key.update("\0".join(cache_key_flags(flags)).encode())
    key.update(version.encode())
    key.update(b"\0branches checked" if check_branches else b"")
    key.update(b"\0packing hoisted" if hoist_packing else b"")
    name = f"{key.hexdigest()}.vmfb"
    use_cache = use_cache and cache.enabled()
    if use_cache:
        cached = cache.read(name)
        if cached is not None:
            return cached
    try:
        vmfb = _compile(iree_compiler, bytecode, flags, hoist_packing)
    except Exception as error:  # iree.compiler raises CompilerToolError with the tool's stderr
        hint = ""
        if target.startswith("cuda") and "missing GPU target" in str(error):
            hint = f"\n(iree-compile has no GPU target for that architecture; the default {CUDA_ARCHITECTURE} has one)"
        output = str(error)
        failure = CompileError(
            f"iree-compile failed for target {target}: {describe_failure(output)}\n{_trim(output)}{hint}"
        )
        failure.diagnostic = describe_failure(output)  # the one line a fallback's reason quotes
        raise failure from error
    if check_branches:
        vmfb = vm_remaps.checked(vmfb, target)
    if use_cache:
        cache.write(name, vmfb)
    return vmfb


def _compile(iree_compiler: Any, bytecode: bytes, flags: list[str], hoist_packing: bool) -> bytes:
    """iree-compile of the module; with `hoist_packing`, in two steps around `packing_hoist.hoisted`,
    else in one. The move only speeds the module up: where either step fails, the module is
    compiled in one step (a warning says why), so that an error the one-step compile would not make
    cannot cost the compiled host."""
    if hoist_packing:
        try:
            stop = [f"--compile-to={packing_hoist.PHASE}", "--emit-mlir-bytecode"]
            flow = iree_compiler.compile_str(bytecode, input_type="torch", extra_args=flags + stop)
            flow, _ = packing_hoist.hoisted(flow)
            return iree_compiler.compile_str(flow, extra_args=flags + [f"--compile-from={packing_hoist.PHASE}"])
        except Exception as error:  # iree.compiler's CompilerToolError, or the MLIR bindings' errors
            reason = _trim(str(error), 400)
            LOGGER.warning("packing the loops' weights at load failed, compiling in one step: %s", reason)
    return iree_compiler.compile_str(bytecode, input_type="torch", extra_args=flags)


def _compiler_version() -> str:
    try:
        from importlib.metadata import version

        return version("iree-base-compiler")
    except Exception:
        return "unknown"


def _trim(text: str, limit: int = 4000) -> str:
    """The tool's output without what repeats the command line, cut to `limit` characters (a crash's
    stack dump runs to tens of thousands; `describe_failure` has already read all of it)."""
    text = re.sub(r"(?m)^(\s*0\.\s+Program arguments: )\S*iree-compile\S*", r"\1iree-compile", text)
    return text if len(text) <= limit else text[:limit] + "\n... (truncated)"


# What iree-compile's output looks like (iree.compiler's CompilerToolError text):
#   Error code: -11                                <- the tool died of a signal (here SIGSEGV)
#   Diagnostics:
#   "loop1 model.py:12": error: failed to legalize ...   <- a diagnostic at an op's location
#   Stack dump:
#    #5 0x... mlir::detail::ConversionPatternRewriterImpl::applySignatureConversion(...) File.cpp:0:0
#    #7 0x... mlir::iree_compiler::(anonymous namespace)::ScfWhileOpConversion::matchAndRewrite(...)
#   #18 0x... mlir::iree_compiler::IREE::Stream::(anonymous namespace)::ConvertToStreamPass::runOnOperation()
_FRAME = re.compile(r"^\s*#\d+\s+0x[0-9a-fA-F]+\s+(.*?)\s*(?:\S+\.(?:cpp|h|c|S|inc):\d+(?::\d+)?)?$")
_DIAGNOSTIC = re.compile(r"^(?:(.*?):\s+)?error:\s*(.*)$")
# Frames that say nothing about where the tool died: the signal machinery, pattern dispatch.
_PLUMBING = re.compile(
    r"PrintStackTrace|RunSignalHandlers|SignalHandler|^\(|libc\.so|function_ref|PatternApplicator|"
    r"OpConversionPattern<|ConversionPattern::matchAndRewrite|OperationLegalizer|OperationConverter|applyConversion|"
    r"applyPartialConversion|applyFullConversion|^raise$|^abort$|__GI_|pthread_kill|report_bad_alloc_error|"
    r"report_fatal_error|reportFatal"
)


def describe_failure(output: str) -> str:
    """One line that says what iree-compile reported: its first `error:` diagnostic with its location
    (the compiled host labels its ops with the construct and the model's line, `loop1 model.py:12`),
    or for a crash the signal, the pass it died in and the innermost frames of its stack dump.

    >>> describe_failure('Diagnostics:\\n<unknown>:0: error: loc("if2 m.py:7"): failed to legalize it')
    'error: failed to legalize it (at if2 m.py:7)'
    >>> describe_failure("Error code: -8\\nStack dump:\\n #4 0x1 mlir::foo::FooPass::runOnOperation() F.cpp:0:0")
    'crashed with SIGFPE in pass FooPass'
    """
    lines = output.splitlines()
    for line in lines:
        match = _DIAGNOSTIC.match(line.strip())
        if match and not line.strip().startswith(("Error code", "Error invoking")):
            where, message = (match.group(1) or "").strip().strip('"'), match.group(2).strip()
            located = re.match(r"loc\((.*?)\):\s*(.*)$", message)  # `<unknown>:0: error: loc("if2 m.py:7"): ...`
            if located:
                names = re.findall(r'"([^"]*)"', located.group(1))
                where, message = (names[0] if names else located.group(1)), located.group(2)
            message = re.split(r":\s+(?:%\S+(?::\d+)?\s+=|\"\w+\.\w+\"\()", message)[0]  # not the op it echoes
            if where and not re.fullmatch(r"(<unknown>|-|<stdin>)(:\d+)*", where):
                return f"error: {message[:300]} (at {where})"
            return f"error: {message[:300]}"
    code = re.search(r"^Error code:\s*(-?\d+)", output, re.MULTILINE)
    crashed = "Stack dump:" in output or (code is not None and int(code.group(1)) < 0)
    if not crashed:
        assertion = next((line.strip() for line in lines if "Assertion" in line and "failed" in line), None)
        return assertion or _first_diagnostic_line(lines)
    text = "crashed"
    if code is not None and int(code.group(1)) < 0:
        text += f" with {_signal_name(-int(code.group(1)))}"
    fatal = next((line.strip() for line in lines if re.search(r"Assertion .* failed|LLVM ERROR", line)), None)
    if fatal:
        text += f" ({fatal[:200]})"
    raw = [match.group(1) for line in lines if (match := _FRAME.match(line))]
    frames = [_short_frame(frame) for frame in raw if not frame.startswith("(")]
    passes = [frame for frame in frames if re.search(r"Pass(::|$)|::runOnOperation", frame)]
    if passes:
        text += f" in pass {passes[0].split('::')[0]}"
    inner = []
    for frame in frames:
        if frame in passes[:1]:
            break
        if not _PLUMBING.search(frame) and frame not in inner:
            inner.append(frame)
    if inner:
        pattern = next((index for index, frame in enumerate(inner) if "matchAndRewrite" in frame), None)
        chain = inner[:3] if pattern is None else inner[max(pattern - 3, 0) : pattern + 1]
        text += ": " + " -> ".join(reversed(chain))
    return text


def crashed_on(description: str) -> str | None:
    """The kind of structured op ("while", "if") whose conversion a crash description names, if any.

    A crash in the stream dialect's `RefineUsagePass` names no op, but the one IREE 3.13 is known for
    comes from an `scf.while` with fewer results than operands (README, "Known traps": the
    loop-narrowing crash), so it names the loops.

    >>> crashed_on("crashed with SIGSEGV in pass RefineUsagePass: Solver::getOrCreateElementFor")
    'while'
    """
    match = re.search(r"Scf(\w+?)Op\w*::matchAndRewrite|scf::(\w+?)Op", description)
    if match:
        return (match.group(1) or match.group(2)).lower()
    return "while" if re.search(r"\bin pass RefineUsagePass\b", description) else None


_NAMESPACES = {"mlir", "llvm", "iree_compiler", "detail", "IREE", "Stream", "Flow", "HAL", "Util", "Codegen", "sys"}


def _short_frame(frame: str) -> str:
    """A stack frame's function without its arguments, templates and namespaces:
    `ScfWhileOpConversion::matchAndRewrite(scf::WhileOp)` keeps the op it was given."""
    op = re.search(r"\((mlir::)?(scf::\w+Op)\b", frame)
    name = frame
    while True:  # drop <...> and (...) groups, innermost first
        shorter = re.sub(r"<[^<>]*>|\([^()]*\)", "", name)
        if shorter == name:
            break
        name = shorter
    name = re.sub(r"\s+const\s*$", "", name.strip()).split(" ")[-1]
    parts = [part for part in name.split("::") if part and part not in _NAMESPACES]
    short = "::".join(parts[-2:]) if parts else frame.strip()[:80]
    return short + (f"({op.group(2)})" if op else "")


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _first_diagnostic_line(lines: list[str]) -> str:
    """The first line after `Diagnostics:` (or of the output) when nothing says `error:`."""
    if "Diagnostics:" in lines:
        lines = lines[lines.index("Diagnostics:") + 1 :]
    kept = [line.strip() for line in lines if line.strip() and not line.startswith(("Error invoking", "Error code"))]
    return kept[0][:300] if kept else "no diagnostic"
