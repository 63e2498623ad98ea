"""The register tile of depthwise convolutions' taps on an x86 CPU with AVX2 (or AVX-512).

`decompositions.depthwise_convolution_as_taps` writes a depthwise convolution as its kernel's taps,
each times its per-channel weights, summed element-wise in NHWC. IREE fuses them (with the bias
and the activation) into one element-wise dispatch over the output, [H, W, C] at batch 1 (the
batch dim folded away; [N, H, W, C] otherwise), and IREE 3.13 tiles it as 1 pixel x 8 channels:
each output vector loads its 9 input vectors and its 9 weight vectors, 18 loads for 9 FMAs. A tile
of `w` pixels along the row shares each weight vector between `w` outputs, and the neighbouring
taps of one row read the same input vectors. `w` is the largest divisor of the output width up to
MAX_COLUMNS (8 accumulators and 9 weight vectors nearly fill AVX2's 16 registers; a width with no
divisor from 2 to 8 keeps IREE's tile). Each workgroup takes one output row
(`distribution = [1, 0, 0]`), so that `local-task` still splits the work; a split of the channels
(IREE's own choice, 48-64 channels) was 2-2.5x slower where it does not divide them (96, 144).

MobileNetV2's depthwise dispatches, AVX2 (Zen 3), one thread, ms per call, best of 3 profiles
(IREE's tile -> this one): 112x112x32 0.289 -> 0.156, 56x56x96 (stride 2) 0.314 -> 0.179,
56x56x144 0.290 -> 0.145, 28x28x192 0.169 -> 0.097, 14x14x384 0.158 -> 0.113, 7x7x960 0.155 ->
0.058; all ten together 1.65 -> 0.93 ms, of the model's ~9.7. One tile for every width (in one
workgroup per dispatch), same measurement, all ten: 1 x 8 pixels x channels 1.32 ms, 2 x 8 1.12,
4 x 8 1.10, 8 x 8 1.16, 7 x 8 (which divides every MobileNetV2 width) 0.89, 2 x 16 1.14, 4 x 16
1.09: a tile that does not divide the width was slower than IREE's (4 x 8 at 14x14x384: 0.173
against 0.146), and 8 pixels was as fast as 7 where it divides (56, 112).

The tile is a `compilation_info` on the op, which a transform-dialect spec gives it in each
executable before IREE configures it (`--iree-hal-preprocess-executables-with`, running IREE's
preprocessing transform interpreter on every executable), as `data_tiling`'s spec gives one to the
matmuls in preprocessing, where the taps are not yet one op. Not IREE's tuning specs
(`--iree-codegen-tuning-spec-path`), which do the same: iree-compile 3.13 hung once with one, a
worker thread waiting forever for the lock of the parsed spec (`IREECodegenDialect::
getOrLoadTransformLibraryModule`) while no other thread ran (README, Known traps). The spec
matches an all-parallel op of rank 3 or 4 with at least MIN_INPUTS inputs (the taps of a 3x3
kernel or larger and their weights: no other op of ResNet-18 or ResNet-50 matches) and the tile
that divides its width (`transform.iree.match.dim_is_multiple_of`), one matcher per rank and tile,
the largest tile first, and only in a dispatch whose one linalg op it is: an element-wise op that
shares its dispatch with another (a pooling it reads, in the early-exit ResNet-50's heads) is not
that dispatch's root, and a second `compilation_info` there failed iree-compile's pipeline.

Only for `llvm-cpu` on an x86 CPU with AVX2 (`compile.target_flags`); cross-compiled targets keep
IREE's tile. With AVX-512 the tile is 16 channels wide, one vector (an Intel Xeon, MobileNetV2, one
thread, CPU time, 9 rounds, `benchmarks/convolution_forms.py --compare tap-tiles`: IREE's tile 5.95
ms, 8 channels 5.69, 16 channels 5.52).

Example:
    >>> pixels_per_tile(56), pixels_per_tile(14), pixels_per_tile(13)
    (8, 7, None)
    >>> flag = compile_flags()[0]
    >>> flag.startswith("--iree-hal-preprocess-executables-with=")
    True
"""

from __future__ import annotations

from .data_tiling import written_spec

MAX_COLUMNS = 8  # pixels of a tile along the row
MIN_INPUTS = 10  # 3x3 taps and their 9 weight vectors are 18 inputs; 1x3 ones 6
CHANNELS = 8  # one AVX2 vector of float32
AVX512_CHANNELS = 16  # one AVX-512 vector


def pixels_per_tile(width: int) -> int | None:
    """The pixels of a row a tile takes: the largest divisor of `width` up to MAX_COLUMNS, or None
    (IREE's own tile) when no divisor from 2 to MAX_COLUMNS divides it."""
    return next((pixels for pixels in range(MAX_COLUMNS, 1, -1) if width % pixels == 0), None)


def spec_text(channels: int = CHANNELS) -> str:
    """The spec: per rank (3, 4) and tile (MAX_COLUMNS pixels down to 2), a matcher of the
    taps whose width that tile divides, and the compilation_info it gives them; IREE takes the first
    pair that matches, so the largest such tile."""
    sequences, pairs = [], []
    for rank in (3, 4):
        ones = [1] * (rank - 2)
        distribution = ", ".join(map(str, [*ones, 0, 0]))
        for pixels in range(MAX_COLUMNS, 1, -1):
            vector = ", ".join(map(str, [*ones, pixels, channels]))
            info = (
                "#iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<"
                f"distribution = [{distribution}], vector_common_parallel = [{vector}]>, "
                "translation_info = <pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>"
            )
            sequences.append(_matcher(rank, pixels))
            sequences.append(
                f"""  transform.named_sequence @tile_{rank}d_{pixels}(%op: !transform.any_op {{transform.readonly}}) {{
    %info = transform.param.constant {info} -> !transform.any_param
    transform.annotate %op "compilation_info" = %info : !transform.any_op, !transform.any_param
    transform.yield
  }}"""
            )
            pairs.append(f"@taps_{rank}d_by_{pixels} -> @tile_{rank}d_{pixels}")
    entry = ",\n            ".join(pairs)
    # Only in a dispatch whose one linalg op is the taps: one with another (a pooling whose result the
    # element-wise op reads: the early-exit ResNet-50's heads) has its own root, and a second
    # compilation_info fails its pipeline ("failed to build pass pipeline").
    return f"""module attributes {{transform.with_named_sequence}} {{
{chr(10).join(sequences)}
  transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.readonly}}) {{
    %functions = transform.structured.match ops{{["func.func"]}} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %functions : !transform.any_op {{
    ^bb0(%function: !transform.any_op):
      transform.sequence %function : !transform.any_op failures(suppress) {{
      ^bb1(%alone: !transform.any_op):
        %linalg = transform.structured.match interface{{LinalgOp}} in %alone : (!transform.any_op) -> !transform.any_op
        // A silenceable failure unless there is exactly one, which leaves the handles after it empty
        // (the sequence goes on: ops do not stop it by failing).
        %single = transform.split_handle %linalg : (!transform.any_op) -> !transform.any_op
        %parent = "transform.get_parent_op"(%single) <{{nth_parent = 1 : i64}}>
            : (!transform.any_op) -> !transform.any_op
        transform.foreach_match in %parent
            {entry} : (!transform.any_op) -> !transform.any_op
      }}
    }}
    transform.yield
  }}
}}
"""


def _matcher(rank: int, pixels: int) -> str:
    """A matcher of an all-parallel `linalg.generic` of `rank` dims with MIN_INPUTS inputs or more,
    whose next-to-last dim (the width) is a multiple of `pixels` (a static one)."""
    return f"""  transform.named_sequence @taps_{rank}d_by_{pixels}(%op: !transform.any_op {{transform.readonly}})
      -> !transform.any_op {{
    transform.match.operation_name %op ["linalg.generic"] : !transform.any_op
    %rank, %inputs = transform.match.structured %op
        : (!transform.any_op) -> (!transform.param<i64>, !transform.param<i64>) {{
    ^bb0(%s: !transform.any_op):
      transform.match.structured.dim %s[all] parallel : !transform.any_op
      %r = transform.match.structured.rank %s : (!transform.any_op) -> !transform.param<i64>
      %i = transform.match.structured.num_inputs %s : (!transform.any_op) -> !transform.param<i64>
      transform.match.structured.yield %r, %i : !transform.param<i64>, !transform.param<i64>
    }}
    %want_rank = transform.param.constant {rank} : i64 -> !transform.param<i64>
    transform.match.param.cmpi eq %rank, %want_rank : !transform.param<i64>
    %min_inputs = transform.param.constant {MIN_INPUTS} : i64 -> !transform.param<i64>
    transform.match.param.cmpi ge %inputs, %min_inputs : !transform.param<i64>
    %out = transform.get_operand %op[-1] : (!transform.any_op) -> !transform.any_value
    transform.iree.match.dim_is_multiple_of %out[{rank - 2}], {pixels} : !transform.any_value
    transform.yield %op : !transform.any_op
  }}"""


def compile_flags(channels: int = CHANNELS) -> list[str]:
    """The iree-compile flag that gives the taps their tile of `channels` channels (CHANNELS, or
    AVX512_CHANNELS): the spec (written by content, as `data_tiling.compile_flags` writes its own)
    run on each executable before IREE configures it."""
    path = written_spec(spec_text(channels), "tap-tiles")
    return [f"{EXECUTABLES_FLAG}builtin.module(iree-preprocessing-transform-interpreter{{transform-spec-path={path}}})"]


EXECUTABLES_FLAG = "--iree-hal-preprocess-executables-with="
