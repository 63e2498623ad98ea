"""Writing a benchmark's results: `report.md`, `results.json` and `speedups.png` in one folder.

`report.md` has the settings and environment, one table per model (latency with its spread,
speedup over eager, speed against ONNX Runtime where it is a candidate, whether the outputs
matched, export time, artifact size), notes under each table, and the geometric means.
`results.json` is every raw number (`Report.to_json`).

Example:
    >>> print(_size(1536))
    1.5 KiB
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import first_line
from .machine import busy_note
from .plot import plot_speedups
from .results import ONNXRUNTIME, CandidateResult, Report, round_spread


def write_report(report: Report, out_dir: Path) -> None:
    """Write report.md, results.json and speedups.png; a plot that cannot be drawn is noted in
    report.md rather than failing the run that produced the numbers."""
    report.files = {"report": str(out_dir / "report.md"), "results": str(out_dir / "results.json")}
    markdown = render_markdown(report)
    try:
        plot_speedups(report, out_dir / "speedups.png")
        report.files["plot"] = str(out_dir / "speedups.png")
        markdown += "\n![speedup over eager](speedups.png)\n"
    except Exception as exc:  # matplotlib is an optional extra
        markdown += f"\nspeedups.png not written: {first_line(exc)}\n"
    (out_dir / "report.md").write_text(markdown)
    (out_dir / "results.json").write_text(json.dumps(report.to_json(), indent=1, default=str))


def cell(text: str, limit: int = 160) -> str:
    """Text for a markdown table cell: pipes escaped, one line, at most `limit` characters."""
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    for unit in ("B", "KiB", "MiB"):
        if size < 1024 or unit == "MiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return str(size)


def _verdict(result: CandidateResult) -> str:
    if result.status == "failed":
        # Preparing covers export, compile and load; a run-time failure says "run:" itself.
        prefix = "" if result.exported else "export/load: "
        return f"failed: {prefix}{result.error}"
    if result.status == "WRONG":
        return f"**WRONG**: {result.mismatch}"
    return "yes"


def _speedup_cell(result: CandidateResult) -> str:
    # A wrong answer's speed is not shown as a speedup: it is in results.json for the curious.
    if result.status == "WRONG":
        return "WRONG"
    return f"{result.speedup:.2f}x" if result.speedup else "-"


def _against_cell(result: CandidateResult, rival: CandidateResult | None) -> str:
    """ONNX Runtime's median / the candidate's, with the same ratio's spread over rounds.

    >>> rival = CandidateResult("onnxruntime", latency_ms=7.5, round_ms=[7.5, 9.0, 7.0])
    >>> ours = CandidateResult("ours", latency_ms=6.0, round_ms=[6.0, 6.0, 7.0], against_onnxruntime=1.25)
    >>> _against_cell(ours, rival), _against_cell(rival, rival)
    ('1.25x (1.00-1.50)', 'reference')
    """
    if result.candidate == ONNXRUNTIME:
        return "reference" if result.status == "ok" else "-"
    if result.status == "WRONG":
        return "WRONG"
    if rival is None or not result.against_onnxruntime:
        return "-"
    spread = round_spread(result, rival, result.against_onnxruntime)
    ranged = f" ({spread[0]:.2f}-{spread[1]:.2f})" if spread else ""
    return f"{result.against_onnxruntime:.2f}x{ranged}"


def _calls(settings: dict) -> str:
    """How many calls a round's median is of, as the settings say (`timing.time_turn`).

    >>> _calls({"repeat": 3, "turn_ms": 100.0}), _calls({"repeat": 3})
    ('at least 3 calls (more until they run 100 ms)', '3 calls')
    """
    if not settings.get("turn_ms"):
        return f"{settings['repeat']} calls"
    return f"at least {settings['repeat']} calls (more until they run {settings['turn_ms']:g} ms)"


def render_markdown(report: Report) -> str:
    """The report as markdown: settings, a table per model, then the geometric means."""
    settings = report.settings
    environment = report.environment
    compared = ONNXRUNTIME in settings.get("candidates", {})
    against_text = (
        "Vs ONNX Runtime: its median / the candidate's (above 1: faster than ONNX Runtime), (min-max) "
        "of the same ratio per round. "
        if compared
        else ""
    )
    lines = [
        "# dycl_iree benchmark",
        "",
        (
            f"{settings['rounds']} rounds after {settings['warmup']} warmup call(s) per sample, "
            f"{settings['threads']} threads per candidate, candidates alternating round-robin in one "
            f"process. Latency: per round, each sample's median of {_calls(settings)}, averaged "
            "over the model's samples; the median over rounds, (min-max) in brackets. "
            f"Speedup: eager's median / the candidate's. {against_text}"
            "Matches: outputs equal to eager on every sample by `dycl_iree verify`'s rule (floats within "
            f"atol {settings['float_atol']} + rtol {settings['float_rtol']} x the output's largest "
            "magnitude, or no further from the float64 result than eager's own; ints, bools and shapes "
            "exactly). "
            "Export: model to a runnable callable, compile and load included."
        ),
        "",
        "Environment: " + ", ".join(f"{key} {value}" for key, value in environment.items()),
        "",
        *([f"Device {settings['device']}: {settings['untimed']}.", ""] if settings.get("untimed") else []),
    ]
    busy = busy_note(environment)
    if busy:
        lines += [f"**Warning**: {busy}; latencies are inflated and scattered, the torch candidates most.", ""]
    for model in report.models:
        lines += [f"## {model.name} ({model.sample_count} samples)", ""]
        if model.error:
            lines += [f"Model failed to build: {cell(model.error)}", ""]
            continue
        rival = next((r for r in model.candidates if r.candidate == ONNXRUNTIME), None)
        against = " vs ONNX Runtime (min-max) |" if compared else ""
        lines += [
            f"| candidate | latency ms median (min-max) | speedup vs eager |{against} matches eager? "
            "| export s | size |",
            "|---|---|---|" + ("---|" if compared else "") + "---|---|---|",
        ]
        for result in model.candidates:
            latency = (
                f"{result.latency_ms:.3f} ({result.latency_min_ms:.3f}-{result.latency_max_ms:.3f})"
                if result.latency_ms is not None
                else "-"
            )
            export = f"{result.export_s:.2f}" if result.export_s is not None else "-"
            vs = f" {_against_cell(result, rival)} |" if compared else ""
            lines.append(
                f"| {result.candidate} | {latency} | {_speedup_cell(result)} |{vs} {cell(_verdict(result), 120)} "
                f"| {export} | {_size(result.size_bytes)} |"
            )
        # A verdict too long for its cell is given in full under the table.
        notes = [
            f"- {r.candidate}: {cell(text, 1000)}"
            for r in model.candidates
            for text in ([_verdict(r)] if len(_verdict(r)) > 120 else []) + ([r.note] if r.note else [])
        ]
        lines += ["", *(["Notes:", "", *notes, ""] if notes else [])]
    lines += [
        "## Geometric mean of speedup over eager",
        "",
        "Over the models where the candidate ran and matched eager.",
        "",
        "| candidate | geomean speedup | models |",
        "|---|---|---|",
    ]
    for name, mean in report.geomean.items():
        value = f"{mean['speedup']:.2f}x" if mean["speedup"] else "-"
        lines.append(f"| {name} | {value} | {mean['models']} of {mean['of']} |")
    lines.append("")
    return "\n".join(lines)
