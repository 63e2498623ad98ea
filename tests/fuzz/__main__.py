"""Command line of the fuzzer: `run`, `table`, `show`, and the `worker` that `run` starts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="check COUNT programs from seed SEED on; print the fallback table")
    run.add_argument("--count", type=int, default=50)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--out", type=Path, default=Path("fuzz-out"))
    run.add_argument("--timeout", type=float, default=600.0, help="seconds per program before it counts as a hang")
    table = commands.add_parser("table", help="the fallback table of a results.jsonl")
    table.add_argument("results", type=Path)
    show = commands.add_parser("show", help="print the calibrated program of one seed")
    show.add_argument("seed", type=int)
    worker = commands.add_parser("worker")
    worker.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    if args.command == "worker":
        from .campaign import worker_main

        worker_main(args.out)
        return 0
    if args.command == "show":
        from .check import prepare

        program, _ = prepare(args.seed)
        print(program.render(), end="")
        return 0
    from .campaign import fallback_table, read_results, run_campaign

    if args.command == "table":
        print(fallback_table(read_results(args.results)))
        return 0
    results = run_campaign(range(args.seed, args.seed + args.count), args.out, args.timeout)
    print(fallback_table(results))
    return 0 if all(r["status"] in ("ok", "unsupported") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
