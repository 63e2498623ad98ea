"""`python -m dycl_iree bench`: the benchmark's command line (`main(argv)`).

Options map one to one onto `driver.benchmark`'s arguments: to add one, add it to `build_parser`
and pass it on in `main`. Progress goes to stderr (`progress.console_progress`), the report to
stdout and the output folder.

Example:
    python -m dycl_iree bench --models sdn_resnet56,ranet --rounds 7 --out bench-out
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import DyclError
from .candidates import CANDIDATE_GROUPS, CANDIDATES, resolve_candidates
from .driver import benchmark
from .micro import micro_benchmark, render_micro
from .models import select_entries
from .progress import console_progress
from .report import render_markdown
from .timing import TURN_MS


def _split_commas(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [part for value in values for part in value.split(",") if part]


def build_parser() -> argparse.ArgumentParser:
    """The `bench` command's arguments."""
    parser = argparse.ArgumentParser(
        prog="python -m dycl_iree bench",
        description="Benchmark dycl_iree against PyTorch eager, TorchScript, torch.compile, "
        "onnxruntime and IREE-through-ONNX, side by side, checking every output against eager.",
    )
    parser.add_argument(
        "--models",
        action="append",
        metavar="NAME[,NAME...]",
        help="model names, groups (zoo, realistic) and/or FILE.py:FACTORY (repeatable; default: the zoo)",
    )
    parser.add_argument(
        "--candidates",
        action="append",
        metavar="NAME[,NAME...]",
        help=f"candidates or groups ({', '.join(CANDIDATE_GROUPS)}); known: {', '.join(CANDIDATES)}",
    )
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls per sample first (default 1)")
    parser.add_argument("--repeat", type=int, default=3, help="least timed calls per sample per round (default 3)")
    parser.add_argument(
        "--turn-ms",
        type=float,
        default=TURN_MS,
        help=f"a fast model's calls per round run at least this long, split over its samples (default {TURN_MS:g})",
    )
    parser.add_argument("--threads", type=int, default=2, help="threads per candidate (default 2)")
    parser.add_argument("--out", default="bench-out", help="output folder (default bench-out/)")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda", "vulkan"),
        default="cpu",
        help="where the candidates run: cpu (default); cuda (PyTorch eager on the GPU and dycl_iree on IREE's "
        "cuda driver); vulkan (dycl_iree on IREE's vulkan driver, eager on the CPU; a software Vulkan device "
        "such as lavapipe is checked for correctness, not timed)",
    )
    parser.add_argument(
        "--micro", action="store_true", help="measure the host cost of one decision (alone, unless --models is given)"
    )
    parser.add_argument("--micro-calls", type=int, default=2000, help="calls per round in --micro (default 2000)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark from the command line; returns the exit status.

    >>> main(["--micro", "--micro-calls", "50", "--rounds", "1", "--out", "/tmp/bench-doctest"])  # doctest: +ELLIPSIS
    # Host cost of one data-dependent decision
    ...
    0
    """
    arguments = build_parser().parse_args(argv)
    models = _split_commas(arguments.models)
    out = Path(arguments.out)
    try:
        candidates = resolve_candidates(_split_commas(arguments.candidates), arguments.device)
        entries = select_entries(models) if models or not arguments.micro else []
    except (DyclError, ImportError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    if arguments.micro:
        results = micro_benchmark(out, calls=arguments.micro_calls, rounds=arguments.rounds, threads=arguments.threads)
        print(render_micro(results, arguments.micro_calls, arguments.rounds))
    if entries:
        report = benchmark(
            entries,
            out,
            rounds=arguments.rounds,
            warmup=arguments.warmup,
            candidates=candidates,
            threads=arguments.threads,
            repeat=arguments.repeat,
            turn_ms=arguments.turn_ms,
            progress=console_progress(),
            device=arguments.device,
        )
        print(render_markdown(report))
        print(f"written: {', '.join(report.files.values())}")
    return 0
