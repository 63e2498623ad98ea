"""Element-wise functions as real programs use them on their activations: log-likelihood terms
(`lgamma`, `digamma`, `xlogy`), normal quantiles and tails (`erfinv`, `erfc`, `log_ndtr`), angles
and magnitudes (`hypot`, `copysign`, `signbit`, `sin`, `sinh`, `asinh`, `atanh`), masks of invalid
values (`isfinite`), histograms (`histc`) and grouped reductions (`index_reduce`).

One such line on the running tensor `h` (it keeps `h` at [batch, features], its values finite for
finite `h`) now and then, in 40% of the programs, drawn from the builder's fourth random stream
(`Builder.functions`), so that a program of an earlier seed keeps every construct, name, weight and
condition it had and only gains these lines.
"""

from __future__ import annotations

from .generate import Builder


def _lines(f: int) -> list[str]:
    return [
        "h = torch.lgamma(h.abs() + 0.5) - 0.5",
        "h = torch.digamma(h.abs() + 1.0) * 0.5",
        "h = torch.erfinv(torch.tanh(h) * 0.9) * 0.5",
        "h = torch.special.log_ndtr(h * 2.0) * 0.25 + torch.erfc(h) * 0.5",
        "h = torch.hypot(h, h * 0.5 + 0.25) - 0.5",
        "h = torch.copysign(h.abs() + 0.1, h - 0.05)",
        "h = torch.where(torch.signbit(h - 0.1), h * 0.5, h)",
        "h = torch.sin(h * 3.0) + torch.sinh(h * 0.25)",
        "h = torch.xlogy(h.abs(), 2.0) - torch.xlogy(2.0, h.abs() + 1.0) * 0.25",
        "h = torch.asinh(h) + torch.atanh(torch.tanh(h) * 0.5)",
        "h = torch.where(torch.isfinite(torch.log(h)), h, -h * 0.5)",
        f"h = h + torch.histc(h, {f}, -1.0, 1.0)[None, :] * 0.1",
        f"h = h.index_reduce(1, torch.arange({f}) // 2, h * 0.5, 'mean')",
    ]


def maybe_function(b: Builder) -> None:
    """In 40% of the programs, now and then, one line of `_lines`, chosen by the fourth stream."""
    if b.functions_on and b.functions.random() < 0.25:
        b.emit(b.functions.choice(_lines(b.features)))
