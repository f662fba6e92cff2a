"""Line charts as standalone SVG text: no plotting library, nothing fetched.

The same SVG is inlined in HTML and written as a file next to Markdown, so it
carries its own xmlns, fonts and white background. It scales with its container
(viewBox, width 100%).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from html import escape

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
FLAG_COLOR = "#C00000"


@dataclass
class SPoint:
    x: float
    y: float
    label: str = ""
    err_lo: float | None = None  # absolute y of the error bar's ends
    err_hi: float | None = None
    mark: float | None = None  # a second y value drawn as an open triangle (e.g. p99)
    flagged: bool = False


@dataclass
class Series:
    name: str
    points: list[SPoint]
    color: str = ""


@dataclass
class Chart:
    title: str
    x_label: str
    y_label: str
    series: list[Series]
    x_categories: list[str] | None = None  # categorical x: point x values are indexes into this
    log_y: bool | None = None  # None: decide from the data's range
    note: str = ""  # one line under the plot (what bars and marks mean)
    width: int = 640
    height: int = 380
    y_zero: bool = True
    extra: list[str] = field(default_factory=list)
    vmarks: list[tuple[float, str]] = field(default_factory=list)  # dashed vertical lines at x, with a short text
    # the y range from the points' values alone: error bars and second marks beyond it are cut at the axis (a
    # history's rare outlier stretches no axis over runs near one value)
    y_fit_values: bool = False


CHAR_W = 6.2  # px per character at font-size 11 (Helvetica's mean advance): label room


def nice_step(span: float, target: int = 5) -> float:
    raw = span / max(target, 1)
    if raw <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def linear_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    step = nice_step(hi - lo, target)
    start = math.floor(lo / step) * step
    # the last tick is the axis end, so it must reach the data: stop at the first tick >= hi
    n = math.ceil((hi - start) / step - 1e-9)
    return [round(start + i * step, 10) for i in range(n + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    mults = (1, 2, 5) if b - a <= 3 else (1,)
    return [m * 10**e for e in range(a, b + 1) for m in mults]


def fmt_tick(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e4:
        return f"{v / 1e3:g}k"
    if a >= 1:
        return f"{v:g}"
    return f"{v:.3g}"


def render(chart: Chart) -> str:
    W, H = chart.width, chart.height
    ml, mr, mt, mb = 64, 16, 52, 58 if chart.note else 44
    pw, ph = W - ml - mr, H - mt - mb
    pts = [p for s in chart.series for p in s.points]
    ys = [v for p in pts for v in ((p.y,) if chart.y_fit_values else (p.y, p.err_lo, p.err_hi, p.mark))
          if v is not None]
    xs = [p.x for p in pts]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="100%" '
           f'style="max-width:{W}px;height:auto" role="img" aria-label="{escape(chart.title)}" '
           'font-family="Helvetica, Arial, sans-serif" font-size="11">',
           f"<title>{escape(chart.title)}</title>",
           f'<rect x="0" y="0" width="{W}" height="{H}" fill="#ffffff"/>',
           f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14" font-weight="bold">'
           f"{escape(chart.title)}</text>"]
    if not pts:
        out.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle" fill="#666">no data</text></svg>')
        return "\n".join(out)

    pos = [v for v in ys if v > 0]
    log_y = chart.log_y
    if log_y is None:
        log_y = bool(pos) and min(pos) > 0 and max(pos) / min(pos) > 30
    if log_y:
        lo_y, hi_y = min(pos), max(pos)
        yt = [t for t in log_ticks(lo_y, hi_y)]
        lo_y, hi_y = min(yt[0], lo_y), max(yt[-1], hi_y)
        yt = [t for t in yt if lo_y <= t <= hi_y]

        def sy(v: float) -> float:
            v = min(max(v, lo_y), hi_y)
            return mt + ph - (math.log10(v) - math.log10(lo_y)) / (math.log10(hi_y) - math.log10(lo_y)) * ph
    else:
        lo_y = 0.0 if chart.y_zero else min(ys)
        yt = linear_ticks(lo_y, max(ys) if ys else 1.0)
        lo_y, hi_y = yt[0], yt[-1]

        def sy(v: float) -> float:
            return mt + ph - (min(max(v, lo_y), hi_y) - lo_y) / ((hi_y - lo_y) or 1) * ph

    if chart.x_categories is not None:
        n = len(chart.x_categories)
        xt = list(range(n))

        def sx(v: float) -> float:
            return ml + (v + 0.5) / max(n, 1) * pw
    else:
        xt = linear_ticks(0.0, max(xs) if xs else 1.0)
        lo_x, hi_x = xt[0], xt[-1]

        def sx(v: float) -> float:
            return ml + (v - lo_x) / ((hi_x - lo_x) or 1) * pw

    # grid and axes
    for t in yt:
        y = sy(t)
        out.append(f'<path d="M{ml} {y:.1f}H{ml + pw}" stroke="#e3e3e3" fill="none"/>')
        out.append(f'<text x="{ml - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#333">{fmt_tick(t)}</text>')
    every = 1
    if chart.x_categories is not None:  # many runs: every k-th label, as many as fit side by side
        room = max(len(c) for c in chart.x_categories) * CHAR_W + 10 if chart.x_categories else 1.0
        every = max(1, math.ceil(len(xt) / max(1, int(pw // room))))
    for i, t in enumerate(xt):
        x = sx(t)
        if i % every:
            continue
        lab = chart.x_categories[int(t)] if chart.x_categories is not None else fmt_tick(t)
        out.append(f'<path d="M{x:.1f} {mt}V{mt + ph}" stroke="#f0f0f0" fill="none"/>')
        out.append(f'<text x="{x:.1f}" y="{mt + ph + 15}" text-anchor="middle" fill="#333">{escape(lab)}</text>')
    out.append(f'<path d="M{ml} {mt}V{mt + ph}H{ml + pw}" stroke="#555" fill="none"/>')
    out.append(f'<text x="{ml + pw / 2}" y="{mt + ph + 32}" text-anchor="middle">{escape(chart.x_label)}</text>')
    out.append(f'<text transform="translate(14 {mt + ph / 2}) rotate(-90)" text-anchor="middle">'
               f'{escape(chart.y_label)}{" (log scale)" if log_y else ""}</text>')
    if chart.note:
        out.append(f'<text x="{ml}" y="{H - 6}" fill="#555" font-size="10">{escape(chart.note)}</text>')

    # legend, one row under the title
    lx = ml
    for i, s in enumerate(chart.series):
        color = s.color or PALETTE[i % len(PALETTE)]
        out.append(f'<path d="M{lx} 36h16" stroke="{color}" stroke-width="2.5"/>'
                   f'<circle cx="{lx + 8}" cy="36" r="3" fill="{color}"/>'
                   f'<text x="{lx + 21}" y="40">{escape(s.name)}</text>')
        lx += 30 + 6.5 * len(s.name)
    if any(p.flagged for p in pts):
        out.append(f'<circle cx="{lx + 6}" cy="36" r="6" fill="none" stroke="{FLAG_COLOR}" stroke-width="2"/>'
                   f'<text x="{lx + 16}" y="40" fill="{FLAG_COLOR}">anomaly</text>')

    # series: error bars, line, markers, labels
    for i, s in enumerate(chart.series):
        out.extend(_series_marks(s, s.color or PALETTE[i % len(PALETTE)], sx, sy, log_y))
    out.extend(_vmarks(chart.vmarks, sx, mt, ph, ml + pw))
    out.extend(chart.extra)
    out.append("</svg>")
    return "\n".join(out)


def _vmarks(vmarks: list[tuple[float, str]], sx: Callable[[float], float], mt: float, ph: float,
            right: float) -> list[str]:
    """Dashed vertical lines with their labels, each label in the first of three rows where it overlaps none
    before it; the labels that fit nowhere are counted in one line at the top right."""
    out = []
    rows: list[float] = [-1e9] * 3  # each label row's right end
    hidden = 0
    for xv, text in sorted(vmarks):
        x = sx(xv)
        out.append(f'<path class="change" d="M{x:.1f} {mt}V{mt + ph}" stroke="{FLAG_COLOR}" stroke-dasharray="5 3" '
                   'fill="none"/>')
        row = next((r for r, end in enumerate(rows) if x + 3 > end), None)
        if row is None:
            hidden += 1
            continue
        rows[row] = x + 3 + len(text) * CHAR_W * 10 / 11 + 4
        out.append(f'<text class="change-label" x="{x + 3:.1f}" y="{mt + 11 + 12 * row}" fill="{FLAG_COLOR}" '
                   f'font-size="10">{escape(text)}</text>')
    if hidden:
        out.append(f'<text x="{right}" y="{mt - 4}" text-anchor="end" fill="{FLAG_COLOR}" font-size="10">'
                   f'{hidden} more change(s): their labels would overlap (see the table)</text>')
    return out


def _series_marks(s: Series, color: str, sx: Callable[[float], float], sy: Callable[[float], float],
                  log_y: bool) -> list[str]:
    """One series' SVG elements: error bars, the line, and at each point its marker, its second value's
    triangle, an anomaly ring and its label. Points with no y, or none > 0 on a log scale, are left out."""
    out = []
    sp = [p for p in s.points if p.y is not None and (not log_y or p.y > 0)]
    bars = []
    for p in sp:
        if p.err_lo is not None and p.err_hi is not None:
            x = sx(p.x)
            bars.append(f"M{x:.1f} {sy(p.err_lo):.1f}V{sy(p.err_hi):.1f}"
                        f"M{x - 3:.1f} {sy(p.err_lo):.1f}h6M{x - 3:.1f} {sy(p.err_hi):.1f}h6")
    if bars:
        out.append(f'<path class="errbar" d="{"".join(bars)}" stroke="{color}" stroke-opacity="0.55" '
                   'fill="none"/>')
    if len(sp) > 1:
        d = "M" + "L".join(f"{sx(p.x):.1f} {sy(p.y):.1f}" for p in sp)
        out.append(f'<path class="series" data-series="{escape(s.name)}" d="{d}" stroke="{color}" '
                   'stroke-width="2" fill="none"/>')
    for p in sp:
        x, y = sx(p.x), sy(p.y)
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.2" fill="{color}"/>')
        if p.mark is not None and (not log_y or p.mark > 0):
            my = sy(p.mark)
            out.append(f'<path d="M{x - 3.5:.1f} {my - 3:.1f}h7l-3.5 6z" fill="none" stroke="{color}"/>')
        if p.flagged:
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="7" fill="none" stroke="{FLAG_COLOR}" '
                       'stroke-width="2"/>')
        if p.label:
            out.append(f'<text x="{x + 5:.1f}" y="{y - 5:.1f}" font-size="9" fill="{color}">'
                       f"{escape(p.label)}</text>")
    return out
