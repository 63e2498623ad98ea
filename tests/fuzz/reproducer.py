"""Write a failing program as a self-contained script: the program, its inputs, export, both hosts, PyTorch.

The script needs only torch and dycl_iree: it exports the program, runs every input on both hosts
and on the scripted model, prints each comparison and exits 1 on any difference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .inputs import Case

_TEMPLATE = '''"""Reproducer from dycl_iree's differential fuzzer (seed {seed}): {constructs}.

    .venv/bin/python {name}

Exports `Program`, runs each input on both hosts and on the scripted model, exits 1 on a difference.
"""

import math
import sys
import tempfile

import numpy as np

{source}

nan, inf = float("nan"), float("inf")
SEED = {seed}
DYNAMIC_SHAPES = {dynamic_shapes!r}
INPUTS = [
{inputs}
]


def same(got, want):
    if isinstance(want, (tuple, list)):
        return isinstance(got, (tuple, list)) and len(got) == len(want) and all(map(same, got, want))
    if isinstance(want, dict):
        return isinstance(got, dict) and list(got) == list(want) and all(same(got[k], want[k]) for k in want)
    if isinstance(want, torch.Tensor):
        want, got = want.numpy(), np.asarray(got)
        return got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)
    if isinstance(want, float):
        return isinstance(got, float) and (math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-5) or got == want
                                           or (math.isnan(got) and math.isnan(want)))
    return type(got) is type(want) and got == want


def main():
    import dycl_iree

    torch.manual_seed(SEED)
    model = Program().eval()
    scripted = torch.jit.script(model)
    bundle = dycl_iree.export(model, INPUTS[0][1], dynamic_shapes=DYNAMIC_SHAPES)
    print("host:", bundle.host, "| fallback:", bundle.manifest["compiled_host_unsupported"])
    path = bundle.save(tempfile.mkdtemp() + "/program.dycl")
    hosts = ["compiled", "python"] if bundle.host == "compiled" else ["python"]
    failed = False
    for label, values in INPUTS:
        try:
            with torch.no_grad():
                want = scripted(*values)
        except Exception as error:
            want = f"raises {{type(error).__name__}}"
        for host in hosts:
            arguments = [v.numpy() if isinstance(v, torch.Tensor) else v for v in values]
            print(f"{{label}} / {{host}} host:", flush=True)  # printed first: the run may kill the process
            try:
                got = dycl_iree.load(path, host=host)(*arguments)
            except Exception as error:
                got = f"raises {{type(error).__name__}}: {{error}}"
            if isinstance(want, str) or isinstance(got, str):
                ok = isinstance(want, str) and isinstance(got, str)  # both raise: see whether the error is clear
            else:
                ok = same(got, want)
            failed |= not ok
            print(f"    {{'ok' if ok else 'DIFFERS'}}: got {{got!r}}")
            print(f"    PyTorch: {{want!r}}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
'''


def literal(value: Any) -> str:
    """Python source that rebuilds `value` exactly (float32 values are exact as Python floats)."""
    if isinstance(value, torch.Tensor):
        return f"torch.tensor({value.tolist()!r}, dtype={value.dtype})"
    return repr(value)


def write_reproducer(program: Any, cases: list[Case], path: Path) -> Path:
    inputs = "\n".join(f"    ({label!r}, ({''.join(literal(v) + ', ' for v in values)}))," for label, values in cases)
    dynamic_shapes = {"x": {0: "batch"}} if program.dynamic_batch else None
    path.write_text(
        _TEMPLATE.format(
            seed=program.seed,
            constructs=", ".join(program.constructs),
            name=path.name,
            source=program.render(),
            dynamic_shapes=dynamic_shapes,
            inputs=inputs,
        )
    )
    return path
