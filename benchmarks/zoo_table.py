"""Export every zoo model with a cold compile cache and print the zoo table (markdown).

    python benchmarks/zoo_table.py [NAME ...]

Columns: parameters; data-dependent decisions in the Program (ifs + loops, counted statically);
segments emitted (DyCL's count where the paper gives one); export time (cold cache); vmfb size
against the bytes of the weights; host kind; how many samples `torch.jit.trace` gets wrong; and
whether both hosts match PyTorch on every sample with every path covered.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ["DYCL_IREE_CACHE"] = tempfile.mkdtemp(prefix="dycl-cold-cache-")

import dycl_iree  # noqa: E402
from dycl_iree.program import If, Loop, iter_nodes  # noqa: E402
from dycl_iree.verify import verify  # noqa: E402
from models import ZOO, parameter_count  # noqa: E402

DYCL_SEGMENTS = {"blockdrop_resnet110": 163}


def main(names: list[str]) -> int:
    folder = Path(tempfile.mkdtemp(prefix="dycl-zoo-"))
    columns = ["model", "params", "decisions", "segments (DyCL)", "export s", "vmfb KiB / weights KiB"]
    columns += ["host", "trace wrong", "verified"]
    print("| " + " | ".join(columns) + " |")
    print("|---|---|---|---|---|---|---|---|---|")
    ok = True
    for name in names:
        model, example_inputs = ZOO[name].build()
        start = time.perf_counter()
        bundle = dycl_iree.export(model, example_inputs)
        seconds = time.perf_counter() - start
        path = bundle.save(folder / f"{name}.dycl")
        nodes = list(iter_nodes(bundle.program.body))
        decisions = sum(isinstance(n, (If, Loop)) for n in nodes)
        samples = ZOO[name].samples()
        verified = []
        trace_wrong = None
        for host in (["compiled"] if bundle.host == "compiled" else []) + ["python"]:
            report = verify(model, samples, path, host=host, trace_example=example_inputs, name=name)
            verified.append(f"{host} {'yes' if report.ok else 'NO'}")
            trace_wrong = report.trace_mismatches
            ok = ok and report.ok
        dycl = DYCL_SEGMENTS.get(name)
        print(
            f"| {name} | {parameter_count(model):,} | {decisions} | {len(bundle.program.segments)}"
            f"{f' ({dycl})' if dycl else ''} | {seconds:.1f} | {bundle.size() / 1024:.0f} / "
            f"{bundle.manifest['weight_bytes'] / 1024:.0f} | {bundle.host} | {trace_wrong}/{len(samples)} | "
            f"{', '.join(verified)} |",
            flush=True,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or sorted(ZOO)))
