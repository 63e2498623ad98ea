"""`speedups.png`: every candidate's speedup over eager per model, with its spread over rounds.

Grouped bars on a log scale, because speedups multiply: 0.5x and 2x are the same distance from
eager, and a bar starts at eager's 1x line so a slower candidate points down. Each bar's whisker
is the spread over rounds (min-max of eager's time / the candidate's in the same round: the
candidates alternate within a round, so a round's ratio is measured under the same conditions). A
candidate that failed or was WRONG on a model gets no bar but a label, so a missing bar is never
mistaken for a slow one. When the machine was busy at the start, the figure says so.

Example:
    >>> result = CandidateResult("fast", round_ms=[1.0, 2.0], speedup=3.0)
    >>> _spread(result, CandidateResult("eager", round_ms=[3.0, 4.0]))
    (2.0, 3.0)
"""

from __future__ import annotations

from pathlib import Path

from .machine import busy_note
from .results import CandidateResult, Report, round_spread


def _times(speedup: float) -> str:
    return f"{speedup:.0f}x" if speedup >= 10 else f"{speedup:.2g}x"


def _spread(result: CandidateResult, eager: CandidateResult | None) -> tuple[float, float] | None:
    """Lowest and highest per-round speedup over eager, widened to include the bar's own value."""
    return None if eager is None else round_spread(result, eager, result.speedup)


def plot_speedups(report: Report, path: Path) -> None:
    """Draw the speedups of `report` into `path` (PNG; needs matplotlib, the `bench` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    names = [name for name in report.settings["candidates"] if name != "eager"]
    models = [model for model in report.models if not model.error]
    shown = [
        (result, next((r for r in model.candidates if r.candidate == "eager"), None))
        for model in models
        for result in model.candidates
        if result.candidate != "eager" and result.status == "ok" and result.speedup
    ]
    extremes = [value for result, eager in shown for value in (_spread(result, eager) or (result.speedup,))]
    low, high = min([0.5, *extremes]) / 1.5, max([2.0, *extremes]) * 1.5
    width_inches = min(22.0, max(7.0, 2.5 + 0.3 * len(names) * max(len(models), 1)))
    figure, axes = plt.subplots(figsize=(width_inches, 4.8))
    width = 0.8 / max(len(names), 1)
    colors = plt.get_cmap("tab10")
    for index, name in enumerate(names):
        color = colors(index % 10)
        axes.bar(0, 0, 0, color=color, label=name)  # one legend entry even if it never ran
        for position, model in enumerate(models):
            result = next((r for r in model.candidates if r.candidate == name), None)
            eager = next((r for r in model.candidates if r.candidate == "eager"), None)
            x = position - 0.4 + width * (index + 0.5)
            if result is not None and result.status == "ok" and result.speedup:
                axes.bar(x, result.speedup - 1.0, width, bottom=1.0, color=color)
                spread = _spread(result, eager)
                top = result.speedup
                if spread is not None:
                    below, above = result.speedup - spread[0], spread[1] - result.speedup
                    axes.errorbar(x, result.speedup, yerr=[[below], [above]], fmt="none", ecolor="black", lw=0.6)
                    top = spread[1] if result.speedup >= 1 else spread[0]
                where = "bottom" if result.speedup >= 1 else "top"
                axes.text(x, top, _times(result.speedup), ha="center", va=where, fontsize=6)
            elif result is not None:
                label = "WRONG" if result.status == "WRONG" else "failed"
                axes.text(x, 1.05, label, rotation=90, ha="center", va="bottom", fontsize=7, color=color)
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_yscale("log")
    axes.set_ylim(low, high)
    ticks = [base * 10.0**power for power in range(-3, 4) for base in (1, 2, 5)]
    axes.set_yticks([tick for tick in ticks if low <= tick <= high])
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    axes.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    axes.set_xlim(-0.5, len(models) - 0.5)
    axes.set_xticks(range(len(models)), [model.name for model in models], rotation=20, ha="right")
    axes.set_ylabel("speedup over PyTorch eager (log scale)")
    axes.set_title(
        "Speedup over eager: median over rounds of the mean latency per sample\n"
        "(whiskers: lowest to highest per-round speedup)",
        fontsize=10,
    )
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: never over a bar
    busy = busy_note(report.environment)
    if busy:
        note = f"Warning: {busy}; latencies are inflated and scattered."
        figure.text(0.01, 0.01, note, fontsize=8, color="firebrick", wrap=True)
        figure.tight_layout(rect=(0, 0.08, 1, 1))
    else:
        figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
