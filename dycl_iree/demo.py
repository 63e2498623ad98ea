"""`make demo`: export two built-in dynamic networks, run them on every path, compare with PyTorch.

The models come from the zoo: RaNet (an early-exit CNN: which classifier answers depends on the
image) and a Transformer translator (greedy decoding until an end token or a length cap). For
each sample the demo prints the path the input took, the largest difference from PyTorch, and the
latency of PyTorch eager against both hosts (medians of interleaved runs on this machine).
"""

from __future__ import annotations

import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

DEMO_MODELS = ("ranet", "transformer_translator")


def _median_ms(function: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _path_of(name: str, outputs: Any) -> str:
    if name == "ranet":
        return f"exit {outputs[1]}"
    tokens = np.asarray(outputs).tolist()
    return f"{len(tokens)} tokens"


def main() -> int:
    from rich.console import Console
    from rich.table import Table

    import dycl_iree
    from dycl_iree.verify import compare
    from models import ZOO

    console = Console()
    torch.set_num_threads(2)
    folder = Path(tempfile.mkdtemp(prefix="dycl-demo-"))
    all_match = True
    for name in DEMO_MODELS:
        entry = ZOO[name]
        model, example_inputs = entry.build()
        console.rule(f"{name}: {type(model).__doc__.strip().splitlines()[0]}")
        start = time.perf_counter()
        with console.status(f"exporting {name}"):
            bundle = dycl_iree.export(model, example_inputs)
            path = bundle.save(folder / f"{name}.dycl")
        seconds = time.perf_counter() - start
        reason = bundle.manifest["compiled_host_unsupported"]
        console.print(
            f"exported in {seconds:.1f} s: {len(bundle.program.segments)} segments, "
            f"{bundle.size() / 1024:.0f} KiB vmfb ({bundle.manifest['weight_bytes'] / 1024:.0f} KiB of weights), "
            f"host: {bundle.host}" + (f" ({reason})" if reason else "")
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scripted = torch.jit.script(model)
        hosts = {"python": dycl_iree.load(path, host="python")}
        if bundle.host == "compiled":
            hosts["compiled"] = dycl_iree.load(path, host="compiled")
        table = Table("sample", "path (PyTorch)", "matches", "eager ms", *[f"{h} host ms" for h in hosts])
        speedups: dict[str, list[float]] = {h: [] for h in hosts}
        for index, sample in enumerate(entry.samples()):
            with torch.no_grad():
                expected = scripted(*sample)
                eager = _median_ms(lambda: model(*sample), 15)
            matches = all(compare(run(*sample), expected, []) for run in hosts.values())
            all_match = all_match and matches
            times = {h: _median_ms(lambda: run(*sample), 15) for h, run in hosts.items()}
            for host, value in times.items():
                speedups[host].append(eager / value)
            table.add_row(
                str(index),
                _path_of(name, expected),
                "yes" if matches else "[red]NO[/red]",
                f"{eager:.2f}",
                *[f"{times[h]:.2f} ({eager / times[h]:.1f}x)" for h in hosts],
            )
        console.print(table)
        for host, values in speedups.items():
            geomean = float(np.exp(np.mean(np.log(values))))
            console.print(f"{host} host: {geomean:.2f}x PyTorch eager (geometric mean over the samples)")
    console.rule()
    console.print("every sample matches PyTorch" if all_match else "[red]some samples do not match PyTorch[/red]")
    console.print(f"bundles in {folder}; try: python -m dycl_iree inspect {folder / DEMO_MODELS[0]}.dycl")
    return 0 if all_match else 1
