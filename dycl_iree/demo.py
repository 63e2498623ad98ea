"""`make demo`: export two built-in dynamic networks, run them on every path, compare with PyTorch.

The models come from the zoo: RaNet (an early-exit CNN: which classifier answers depends on the
image) and a Transformer translator (greedy decoding until an end token or a length cap). For
each sample the demo prints the path the input took, whether both hosts match PyTorch, and the
latency of PyTorch eager and of both hosts.

The timing is fair by construction: every side runs on one thread (PyTorch with
`torch.set_num_threads(1)`, IREE's `local-sync` driver), the sides take turns within each round
(so a burst of other work hits all of them), and each figure is the median over the rounds with
its spread (min-max). A speedup is the median of the rounds' ratios (each round compares the sides
under the same load), with their quartiles, and is printed only when the quartiles agree within a
factor 1.5; otherwise the demo says the machine was too noisy instead of printing a number. A busy
machine (load average at or above its core count) is reported before the figures.

Example:
    python -m dycl_iree demo --rounds 9 --keep demo-bundles
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .errors import DyclError

DEMO_MODELS = ("ranet", "transformer_translator")
# A round times each side for at least this long (several calls), so that timer resolution and
# one-off stalls do not decide a figure.
_ROUND_SECONDS = 0.02
# A ratio is printed only when the quartiles of the rounds' ratios are within this factor of each other.
_MAX_RATIO_SPREAD = 1.5


@dataclass
class Timing:
    """Per-call milliseconds of one side, one value per round."""

    rounds: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.rounds)

    def text(self) -> str:
        return f"{self.median:.3f} ({min(self.rounds):.3f}-{max(self.rounds):.3f})"


def time_interleaved(sides: dict[str, Callable[[], Any]], rounds: int) -> dict[str, Timing]:
    """Time every side in turns: each round runs each side for about `_ROUND_SECONDS`, in a rotating order."""
    repeats = {}
    for name, function in sides.items():
        function()  # warm up: first calls allocate and fill caches
        start = time.perf_counter()
        function()
        one = max(time.perf_counter() - start, 1e-6)
        repeats[name] = max(1, min(1000, int(_ROUND_SECONDS / one)))
    names = list(sides)
    per_call: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(rounds):
        for name in names[round_index % len(names) :] + names[: round_index % len(names)]:
            function, count = sides[name], repeats[name]
            start = time.perf_counter()
            for _ in range(count):
                function()
            per_call[name].append((time.perf_counter() - start) * 1e3 / count)
    return {name: Timing(values) for name, values in per_call.items()}


def speedup_text(baseline: Timing, candidate: Timing) -> str | None:
    """`"4.9x (4.1-5.8)"`: the median of the per-round ratios and their quartiles, or None when the data
    cannot carry a ratio.

    The sides take turns within a round, so a round's ratio compares them under the same load. The
    ratio is reported only when the middle half of the rounds' ratios agree within a factor
    `_MAX_RATIO_SPREAD`: one round in which another process took the core does not decide it, a
    machine whose load keeps changing does.
    """
    ratios = [b / c for b, c in zip(baseline.rounds, candidate.rounds)]
    low, _, high = statistics.quantiles(ratios, n=4)
    if high / low > _MAX_RATIO_SPREAD:
        return None
    return f"{statistics.median(ratios):.1f}x ({low:.1f}-{high:.1f})"


def busy_note() -> str | None:
    """A warning when other work competes for the cores (the 1-minute load average, where there is one)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    cores = os.cpu_count() or 1
    if load >= cores:
        return (
            f"this machine is busy (load average {load:.1f} on {cores} cores): the times below include waiting "
            "for a core and vary between rounds; rerun when it is idle for figures to compare"
        )
    return None


def _zoo() -> Any:
    """The zoo lives in the repository's `models/`, which is not installed: find it from this file."""
    try:
        from models import ZOO
    except ImportError:
        root = Path(__file__).resolve().parent.parent
        if not (root / "models" / "__init__.py").is_file():
            raise DyclError("the demo's models are in the repository's models/ folder: run it from a clone") from None
        sys.path.insert(0, str(root))
        from models import ZOO
    return ZOO


def _path_of(name: str, outputs: Any) -> str:
    if name == "ranet":
        return f"exit {outputs[1]}"
    if name == "transformer_translator":
        return f"{len(np.asarray(outputs).tolist())} tokens"
    return "-"


def main(rounds: int = 7, keep: str | None = None) -> int:
    """Export the demo models, check every sample against PyTorch, time the three sides; 0 when all match."""
    import torch
    from rich.console import Console
    from rich.table import Table

    import dycl_iree
    from dycl_iree.verify import compare

    from .progress import show_progress

    if rounds < 3:
        raise DyclError(f"--rounds {rounds}: at least 3 rounds are needed for a median with a spread")
    # Off a terminal (a log, a pipe) rich would wrap at 80 columns and cut the table's cells.
    terminal = sys.stdout.isatty()
    console = Console(width=None if terminal else 200, soft_wrap=not terminal)
    torch.set_num_threads(1)  # as many threads as IREE's local-sync driver uses
    zoo = _zoo()
    temporary = None if keep else tempfile.TemporaryDirectory(prefix="dycl-demo-")
    folder = Path(keep) if keep else Path(temporary.name)
    folder.mkdir(parents=True, exist_ok=True)
    all_match, notes = True, []
    try:
        for name in DEMO_MODELS:
            entry = zoo[name]
            model, example_inputs = entry.build()
            console.rule(f"{name}: {type(model).__doc__.strip().splitlines()[0]}")
            start = time.perf_counter()
            with show_progress():
                bundle = dycl_iree.export(model, example_inputs)
            path = bundle.save(folder / f"{name}.dycl")
            seconds = time.perf_counter() - start
            reason = bundle.manifest["compiled_host_unsupported"]
            segments = len(bundle.manifest["segments"])
            console.print(
                f"exported in {seconds:.1f} s: {segments} segment{'' if segments == 1 else 's'}, "
                f"{bundle.size() / 1024:.0f} KiB vmfb ({bundle.manifest['weight_bytes'] / 1024:.0f} KiB of weights), "
                f"host: {bundle.host}" + (f" ({reason})" if reason else "")
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                scripted = torch.jit.script(model)
            hosts = {"python": dycl_iree.load(path, host="python")}
            if bundle.host == "compiled":
                hosts["compiled"] = dycl_iree.load(path, host="compiled")
            note = busy_note()
            if note:
                console.print(f"[yellow]warning:[/yellow] {note}")
                notes.append(note)
            table = Table(
                "sample",
                "path (PyTorch)",
                "matches",
                "eager ms",
                *[f"{host} host ms" for host in hosts],
                *[f"{host} vs eager" for host in hosts],
                caption=(
                    f"ms: median (min-max) over {rounds} interleaved rounds, 1 thread each; "
                    "vs eager: median (quartiles) of the rounds' ratios"
                ),
            )
            ratios: dict[str, list[float | None]] = {host: [] for host in hosts}
            for index, sample in enumerate(entry.samples()):
                with torch.no_grad():
                    expected = scripted(*sample)
                    matches = all(compare(run(*sample), expected, []) for run in hosts.values())
                    all_match = all_match and matches
                    sides = {"eager": lambda sample=sample: model(*sample)}
                    sides.update({host: (lambda run=run, sample=sample: run(*sample)) for host, run in hosts.items()})
                    timings = time_interleaved(sides, rounds)
                texts = {host: speedup_text(timings["eager"], timings[host]) for host in hosts}
                for host in hosts:
                    per_round = [e / h for e, h in zip(timings["eager"].rounds, timings[host].rounds)]
                    ratios[host].append(statistics.median(per_round) if texts[host] is not None else None)
                table.add_row(
                    str(index),
                    _path_of(name, expected),
                    "yes" if matches else "[red]NO[/red]",
                    timings["eager"].text(),
                    *[timings[host].text() for host in hosts],
                    *[texts[host] or "too noisy" for host in hosts],
                )
            console.print(table)
            for host, values in ratios.items():
                if values and all(value is not None for value in values):
                    geomean = math.exp(statistics.fmean(math.log(value) for value in values))
                    console.print(f"{host} host: {geomean:.1f}x PyTorch eager (geometric mean over the samples)")
                else:
                    console.print(
                        f"{host} host: no overall figure: the rounds of some samples varied too much "
                        "(another process took the core); rerun with more --rounds on an idle machine"
                    )
        console.rule()
        console.print("every sample matches PyTorch" if all_match else "[red]some samples do not match PyTorch[/red]")
        if keep:
            console.print(f"bundles in {folder}; try: python -m dycl_iree inspect {folder / DEMO_MODELS[0]}.dycl")
        else:
            console.print("to keep the bundles: python -m dycl_iree demo --keep DIR")
    finally:
        if temporary is not None:
            temporary.cleanup()
    return 0 if all_match else 1
