"""Benchmark dycl_iree against the other ways of running a dynamic network, side by side.

A dynamic network's speed only means something next to the alternatives, measured the same way:
in one process, on the same inputs, with the same thread budget, and with every candidate's outputs
checked against PyTorch eager on every sample, because a traced or mis-compiled network is often
fast exactly because it skips the path the input should have taken. So each candidate is
*prepared* once (exported and compiled; that time is the export time), checked on every sample,
and then timed in rounds that alternate the candidates round-robin, so a slow drift of the
machine (other jobs, frequency scaling) spreads over all of them instead of biasing one.

The package, one concern per module:

- `peers/`: the candidates, one module each (`eager`, `torchscript`, `torch-compile`,
  `onnxruntime`, `iree-onnx`, `dycl-<host>-<driver>`), each a `Peer` with `prepare` and `run`;
  `candidates` turns `--candidates` into peers.
- `models`: which models run (the zoo, or `FILE.py:FACTORY`).
- `driver`: prepare, check and time every candidate on every model (`benchmark`).
- `outputs`: checking outputs against eager with `dycl_iree.verify`'s rule.
- `timing`: the round-robin timing; `results`: what was measured; `machine`: versions and load.
- `report` and `plot`: `report.md`, `results.json`, `speedups.png`.
- `micro`: what one data-dependent decision costs on each host (`--micro`).
- `progress` and `quiet`: what the user sees while it runs; `cli`: `main(argv)`.

Example (from the repository root):

    python -m dycl_iree bench --models my_model.py:make --rounds 3 --out bench-out
"""

from __future__ import annotations

from .candidates import CANDIDATE_GROUPS, CANDIDATES, resolve_candidates
from .cli import build_parser, main
from .driver import benchmark, benchmark_model
from .errors import BenchError, ExporterMissingError, PeerError, first_line
from .micro import MicroResult, micro_benchmark, render_micro
from .models import ModelEntry, select_entries, zoo_entries
from .outputs import compare_outputs, flatten_outputs
from .peers import DRIVERS as DYCL_DRIVERS
from .peers import HOSTS as DYCL_HOSTS
from .peers import PEERS, ModelContext, Peer
from .progress import LogProgress, PlainProgress, Progress, RichProgress, console_progress
from .report import render_markdown, write_report
from .results import CandidateResult, ModelResult, Report

__all__ = [
    "CANDIDATES",
    "CANDIDATE_GROUPS",
    "DYCL_DRIVERS",
    "DYCL_HOSTS",
    "PEERS",
    "BenchError",
    "CandidateResult",
    "ExporterMissingError",
    "LogProgress",
    "MicroResult",
    "ModelContext",
    "ModelEntry",
    "ModelResult",
    "Peer",
    "PeerError",
    "PlainProgress",
    "Progress",
    "Report",
    "RichProgress",
    "benchmark",
    "benchmark_model",
    "build_parser",
    "compare_outputs",
    "console_progress",
    "first_line",
    "flatten_outputs",
    "main",
    "micro_benchmark",
    "render_markdown",
    "render_micro",
    "resolve_candidates",
    "select_entries",
    "write_report",
    "zoo_entries",
]
