"""The compiled host's weight packings moved out of its loops and branches, to run once, at load.

IREE 3.13 data-tiles a matmul by packing its operands (`flow.tensor.encode`, which dispatch creation
places beside the matmul). Where the weight is a constant and the encode sits in its function's
top-level region, the packing is a constant expression, and IREE evaluates it once. Inside a region
(an `scf.while` or `scf.if` of the compiled host's `main`) it stays where it is: IREE's
`ConstExprAnalysis` does not look into nested regions (README, Known traps;
iree-org/iree#15961 proposed that and was closed), and its loop-invariant code motion
(`iree-loop-invariant-code-motion`, run on the module after dispatch creation) moved none of them.
So a decoder loop packed every weight of its layers at every step: the d 512 Transformer's `main`
spent 86 of its 174 ms a call in `encode` dispatches (AMD Zen 4, one thread, IREE's profile), where
the Python host, whose segments are functions of their own, packs them when the module loads.

`hoisted` takes a module compiled to the end of dispatch creation (`compile.compile_module` compiles
such a module in two steps, `--compile-to=dispatch-creation` and `--compile-from=dispatch-creation`)
and moves every encode of a top-level constant out of the regions it sits in, to just after the
constant; IREE's `iree-util-hoist-into-globals` then makes each an initializer. The packing runs once,
when the module loads, even where the loop or branch never runs in a call (the cost
iree-org/iree#15961 weighed: load time and the packed copy's memory), and the loop reads the packed
weights from memory where it had read the copy just packed into cache. The Transformer (`bench`'s
`transformer_base`, two tokens' sentences, greedy decoding, `iree-benchmark-module`, median of 3):
179-195 -> 121-126 ms a call, the tokens unchanged.

Example:
    >>> text = '''
    ... util.func public @main(%arg0: tensor<4x4xf32>, %n: index) -> tensor<4x4xf32> {
    ...   %c0 = arith.constant 0 : index
    ...   %c1 = arith.constant 1 : index
    ...   %w = arith.constant dense<2.0> : tensor<4x4xf32>
    ...   %r = scf.for %i = %c0 to %n step %c1 iter_args(%x = %arg0) -> tensor<4x4xf32> {
    ...     %e = flow.tensor.encode %w : tensor<4x4xf32> -> tensor<4x4xf32>
    ...     %y = arith.addf %x, %e : tensor<4x4xf32>
    ...     scf.yield %y : tensor<4x4xf32>
    ...   }
    ...   util.return %r : tensor<4x4xf32>
    ... }'''
    >>> module, moved = hoisted(text.encode())
    >>> moved
    1
    >>> from iree.compiler import ir
    >>> "util.initializer" in str(ir.Module.parse(module, ir.Context()))
    True
"""

from __future__ import annotations

from typing import Any

# The phase `compile.compile_module` stops at and resumes from: the encodes exist from its end on.
PHASE = "dispatch-creation"
# The ops whose result may be packed once: a constant of the function's top-level region.
_CONSTANTS = frozenset({"arith.constant"})


def hoisted(module: bytes) -> tuple[bytes, int]:
    """The module (MLIR, text or bytecode, compiled to the end of dispatch creation) with every
    `flow.tensor.encode` of a top-level constant moved out of its nested regions and made an
    initializer, as bytecode, and how many encodes moved (0: the module is returned as given)."""
    from iree.compiler import ir
    from iree.compiler.passmanager import PassManager

    context = ir.Context()
    parsed = ir.Module.parse(module, context)
    moved = 0
    for function in parsed.body.operations:
        if function.operation.name != "util.func" or not function.operation.regions[0].blocks:
            continue
        for encode in _nested_encodes(function.operation):
            source = _top_level_constant(encode.operands[0], function.operation)
            if source is not None:
                encode.move_after(source)
                moved += 1
    if not moved:
        return module, 0
    with context:
        PassManager.parse("builtin.module(iree-util-hoist-into-globals)").run(parsed.operation)
    return _bytecode(parsed), moved


def _nested_encodes(function: Any) -> list[Any]:
    """The `flow.tensor.encode` ops of `function` that sit in a region nested in its body."""
    found: list[Any] = []

    def walk(op: Any, nested: bool) -> None:
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    inner = inner.operation
                    if nested and inner.name == "flow.tensor.encode":
                        found.append(inner)
                    walk(inner, True)

    walk(function, False)
    return found


def _top_level_constant(value: Any, function: Any) -> Any:
    """The op that defines `value` if it is a constant in `function`'s own body, else None."""
    owner = value.owner
    if not hasattr(owner, "name") or owner.name not in _CONSTANTS:
        return None
    return owner if owner.parent == function else None


def _bytecode(module: Any) -> bytes:
    import io

    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    return buffer.getvalue()
