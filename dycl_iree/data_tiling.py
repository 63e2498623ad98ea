"""Which matmuls IREE data-tiles on an AVX-512 CPU: those with few rows and a large weight.

IREE's data tiling (`--iree-opt-data-tiling`) packs a matmul's operands into tiles its mmt4d code
reads in order; a constant weight is packed at compile time, the activations at each call. Turned
on for a whole module it made ResNet-50 at 224x224 12% faster (one thread, CPU time, same process,
alternating: 114.8 -> 100.6 ms) but MobileNetV2 10% slower (11.8 -> 13.0 ms) and left ResNet-18
unchanged (45.2 / 45.3 ms). Per matmul (one `x @ w` + ReLU, same measurement, AVX-512, Zen 4):
with at most 196 rows (a 1x1 convolution at 14x14 or 7x7, batch 1) and a weight of 2^19 elements
(2 MiB, twice Zen 4's L2) or more, data tiling is 1.14-1.63x faster (ResNet-50's 49x1024 by
1024x2048: 38 -> 62 GFLOP/s, 196x512 by 512x1024: 63 -> 88); with more rows, or a smaller weight,
it is 0.73-1.04x (49x320 by 320x1280: 0.73x; 3136x64 by 64x64: 0.86x), since packing the
activations costs more than the packed weight saves.

So only those matmuls are data-tiled: a transform-dialect spec, run by IREE's preprocessing
(`--iree-preprocessing-transform-spec-filename`), marks them with IREE's `iree.opt.data_tiling`
hint, and marks every function too: IREE's own hint pass
(`iree-dispatch-creation-annotate-data-tiling-hints`) leaves a function alone once any op in it
carries the hint, instead of marking all its matmuls. The weight size is matched as "K >= 2^a and
N >= 2^(19-a)" for some a, since the spec can compare sizes but not multiply them: a weight of
2^19 elements or more whose sides are powers of two always matches, others may not.

Only for `llvm-cpu` on this machine's CPU when it has AVX-512 (`compile.target_flags`), where it
was measured; AVX2 (which takes im2col for many channels, `decompositions._im2col_wins`) and
cross-compiled targets keep their flags.

Example:
    >>> flags = compile_flags()
    >>> flags[0]
    '--iree-opt-data-tiling'
    >>> "linalg.matmul" in Path(flags[1].split("=", 1)[1]).read_text()
    True
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

MAX_ROWS = 196  # a 1x1 convolution at 14x14, batch 1
MIN_WEIGHT_LOG2 = 19  # 2^19 float32 elements: 2 MiB
HINT = "iree.opt.data_tiling"


def spec_text(max_rows: int = MAX_ROWS, min_weight_log2: int = MIN_WEIGHT_LOG2) -> str:
    """The transform-dialect spec that marks functions and the matmuls to data-tile.

    >>> "transform.named_sequence @__transform_main" in spec_text()
    True
    """
    matchers = [
        _matmul_matcher(f"@wide_matmul_k{k_log2}", max_rows, 1 << k_log2, 1 << (min_weight_log2 - k_log2))
        for k_log2 in range(4, min_weight_log2 - 3)
    ]
    pairs = ", ".join(["@function -> @hint", *(f"{name} -> @hint" for name, _ in matchers)])
    body = "\n".join(text for _, text in matchers)
    return f"""module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @function(%op: !transform.any_op {{transform.readonly}}) -> !transform.any_op {{
    transform.match.operation_name %op ["util.func", "func.func"] : !transform.any_op
    transform.yield %op : !transform.any_op
  }}
{body}
  transform.named_sequence @hint(%op: !transform.any_op {{transform.readonly}}) {{
    transform.annotate %op "{HINT}" : !transform.any_op
    transform.yield
  }}
  transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.consumed}}) {{
    transform.foreach_match in %root {pairs} : (!transform.any_op) -> (!transform.any_op)
    transform.yield
  }}
}}
"""


def _matmul_matcher(name: str, max_rows: int, min_k: int, min_n: int) -> tuple[str, str]:
    """A matcher of `linalg.matmul` ops with 1..max_rows rows (M), K >= min_k and N >= min_n (static
    sizes: a dynamic size matches no bound)."""
    bounds = [(0, "ge", 1), (0, "le", max_rows), (2, "ge", min_k), (1, "ge", min_n)]
    lines = []
    for index, (dim, predicate, value) in enumerate(bounds):
        lines.append(
            f"    %bound{index} = transform.param.constant {value} : i64 -> !transform.param<i64>\n"
            f"    transform.match.param.cmpi {predicate} %dim{dim}, %bound{index} : !transform.param<i64>"
        )
    text = f"""  transform.named_sequence {name}(%op: !transform.any_op {{transform.readonly}}) -> !transform.any_op {{
    transform.match.operation_name %op ["linalg.matmul"] : !transform.any_op
    %dim0, %dim1, %dim2 = transform.match.structured %op
        : (!transform.any_op) -> (!transform.param<i64>, !transform.param<i64>, !transform.param<i64>) {{
    ^bb0(%s: !transform.any_op):
      %m = transform.match.structured.dim %s[0] : (!transform.any_op) -> !transform.param<i64>
      %n = transform.match.structured.dim %s[1] : (!transform.any_op) -> !transform.param<i64>
      %k = transform.match.structured.dim %s[2] : (!transform.any_op) -> !transform.param<i64>
      transform.match.structured.yield %m, %n, %k : !transform.param<i64>, !transform.param<i64>, !transform.param<i64>
    }}
{chr(10).join(lines)}
    transform.yield %op : !transform.any_op
  }}"""
    return name, text


def compile_flags() -> list[str]:
    """The iree-compile flags that data-tile the matmuls `spec_text` marks. The spec is written to
    the temp folder (not the compile cache's, whose entries `cache clear` and the size bound
    remove), named by its content, so a changed rule is a changed flag and a changed cache key;
    it is written again if missing when the next compile asks for it."""
    text = spec_text()
    folder = Path(tempfile.gettempdir()) / "dycl_iree-specs"
    path = folder / f"data-tiling-{hashlib.sha256(text.encode()).hexdigest()[:16]}.mlir"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        partial.replace(path)  # atomic: another process may be reading it
    return ["--iree-opt-data-tiling", f"--iree-preprocessing-transform-spec-filename={path}"]
