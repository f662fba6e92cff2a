"""Points with faults, second by second: a timeline chart, the seconds around the faults, recovery figures.

For each point that ran a `faults:` schedule: one SVG of three stacked panels on
the engine's clock (throughput, p99 latency and op errors per second) with every
fault as a labelled vertical line; a table of the seconds around the faults (what
Markdown readers see without opening the SVG); and, per workload, one row per
faulted point with its recovery figures (fathom.analysis.recovery).
"""

from __future__ import annotations

from html import escape
from typing import Any

from fathom.analysis.anomalies import fault_data
from fathom.analysis.data import RunData, StoredPoint, Throughput, throughput_for
from fathom.analysis.recovery import DEFINITION, MIN_DT_S, acted, point_metrics
from fathom.results.series import Sample, samples
from fathom.report import svg
from fathom.report.doc import ChartOut, Table

FAULT_COLOR = "#C00000"
UNDO_COLOR = "#888888"
AROUND_BEFORE_S = 3  # table rows: seconds before the first fault
AROUND_AFTER_S = 12  # ... and after each fault
MAX_ROWS = 60


def _faulted(run: RunData, wl: str) -> list[tuple[StoredPoint, list[dict[str, Any]]]]:
    out = []
    for p in run.curve(wl):
        fs = [f for f in fault_data(run, p) if f.get("t_s") is not None]
        if fs and p.intervals:
            out.append((p, sorted(fs, key=lambda f: float(f["t_s"]))))
    return out


def _label(f: dict[str, Any]) -> str:
    what = f"{f.get('action')} {f.get('daemon') or f.get('host') or ''}".strip()
    return f"{what} (at end)" if f.get("undo") else what


def _rate(s: Sample, tp: Throughput) -> float:
    return s.iops if tp.unit == "IOPS" else s.mib_s


def chart(title: str, ss: list[Sample], faults: list[dict[str, Any]], tp: Throughput, width: int = 640) -> str:
    """Three panels sharing the engine-time axis, fault markers across all of them."""
    ss = [s for s in ss if s.dt >= MIN_DT_S]  # a last partial interval's rate is noise (its few ops over a sliver)
    ml, mr, mt, gap, ph = 64, 16, 34, 26, 110
    panels = [(f"throughput ({tp.unit})", [_rate(s, tp) for s in ss], svg.PALETTE[0]),
              ("p99 latency (ms)", [s.p99_ms for s in ss], svg.PALETTE[1]),
              ("op errors per second", [s.errors / s.dt if s.dt > 0 else 0.0 for s in ss], FAULT_COLOR)]
    height = mt + len(panels) * (ph + gap) + 30
    pw = width - ml - mr
    t_max = max([s.t for s in ss] + [float(f["t_s"]) for f in faults] + [1.0])
    xt = svg.linear_ticks(0.0, t_max)

    def sx(t: float) -> float:
        return ml + t / (xt[-1] or 1) * pw

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
         f'style="max-width:{width}px;height:auto" role="img" aria-label="{escape(title)}" '
         'font-family="Helvetica, Arial, sans-serif" font-size="11">', f"<title>{escape(title)}</title>",
         f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
         f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14" font-weight="bold">{escape(title)}</text>']
    for k, (name, ys, color) in enumerate(panels):
        top = mt + k * (ph + gap)
        vals = [y for y in ys if y is not None]
        yt = svg.linear_ticks(0.0, max(vals, default=1.0) or 1.0, 3)

        def sy(v: float, top: float = top, hi: float = yt[-1]) -> float:
            return top + ph - v / (hi or 1) * ph

        for t in yt:
            o.append(f'<path d="M{ml} {sy(t):.1f}H{ml + pw}" stroke="#e3e3e3" fill="none"/>'
                     f'<text x="{ml - 6}" y="{sy(t) + 4:.1f}" text-anchor="end" fill="#333">{svg.fmt_tick(t)}</text>')
        o.append(f'<path d="M{ml} {top}V{top + ph}H{ml + pw}" stroke="#555" fill="none"/>')
        o.append(f'<text x="{ml + 4}" y="{top - 4}" fill="#333" font-weight="bold">{escape(name)}</text>')
        pts = [(sx(s.t), sy(y)) for s, y in zip(ss, ys) if y is not None]
        if pts:
            d = "M" + "L".join(f"{x:.1f} {y:.1f}" for x, y in pts)
            o.append(f'<path class="series" data-series="{escape(name)}" d="{d}" stroke="{color}" '
                     'stroke-width="1.8" fill="none"/>')
    bottom = mt + len(panels) * (ph + gap) - gap
    for t in xt:
        o.append(f'<text x="{sx(t):.1f}" y="{bottom + 15}" text-anchor="middle" fill="#333">{svg.fmt_tick(t)}</text>')
    o.append(f'<text x="{ml + pw / 2}" y="{bottom + 28}" text-anchor="middle">engine time (s)</text>')
    for i, f in enumerate(faults):
        x = sx(float(f["t_s"]))
        color = UNDO_COLOR if f.get("undo") else FAULT_COLOR
        o.append(f'<path class="fault" d="M{x:.1f} {mt - 6}V{bottom}" stroke="{color}" stroke-dasharray="4 3" '
                 'fill="none"/>')
        o.append(f'<text x="{x + 3:.1f}" y="{mt + 10 + 12 * (i % 3)}" fill="{color}" font-size="10">'
                 f'{escape(_label(f))} @ {float(f["t_s"]):.1f} s</text>')
    o.append("</svg>")
    return "\n".join(o)


def _fmt(v: float | None, nd: int = 2) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.{nd}f}"


def _int(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


def around_rows(ss: list[Sample], faults: list[dict[str, Any]], tp: Throughput) -> list[list[str]]:
    """One row per second near the faults: from a few seconds before each to a while after it."""
    keep = [s for s in ss if any(float(f["t_s"]) - AROUND_BEFORE_S < s.t <= float(f["t_s"]) + AROUND_AFTER_S
                                 for f in faults)][:MAX_ROWS]
    rows = []
    for s in keep:
        here = [_label(f) for f in faults if s.t - s.dt < float(f["t_s"]) <= s.t]
        rate = f"{s.iops:,.0f}" if tp.unit == "IOPS" else f"{s.mib_s:,.2f}"
        rows.append([f"{s.t:.0f}", rate, _fmt(s.p99_ms), str(s.errors), ", ".join(here)])
    return rows


def charts(runs: list[RunData], wl: str) -> list[ChartOut]:
    out = []
    for r in runs:
        tp = throughput_for(r.curve(wl))
        for p, fs in _faulted(r, wl):
            title = f"{wl} {p.label}: {r.name} timeline"
            out.append(ChartOut(f"timeline-{r.ids[0]}-{p.point_id}", title, chart(title, samples(p.intervals), fs, tp)))
    return out


def tables(runs: list[RunData], wl: str) -> list[Table]:
    out = []
    rec_rows = []
    for r in runs:
        tp = throughput_for(r.curve(wl))
        for p, fs in _faulted(r, wl):
            ss = samples(p.intervals)
            m, ws = point_metrics(p.intervals, acted(fs))  # from the stored records, by today's definition
            for w in ws:  # a row per fault: its window runs to the next fault or the point's end
                rec = "not recovered" if w.recovery_s is None else _fmt(w.recovery_s, 1)
                rec_rows.append([r.name, p.label, f"{w.describe()} @ {w.t_s:.1f} s", _int(m.get("prefault_iops")),
                                 _int(w.min_iops), _fmt(w.max_p99_ms), _fmt(w.first_error_s, 1),
                                 _fmt(w.below_band_s, 1), f"{rec} (no dip)" if w.note else rec,
                                 _int(p.m("errors")), _fmt(p.m("p99_all_ms"))])
            out.append(Table(f"{wl} {p.label}: {r.name}: timeline around the faults",
                             ["t (s)", f"throughput ({tp.unit})", "p99 (ms)", "op errors", "fault"],
                             around_rows(ss, fs, tp), ["r", "r", "r", "r", "l"],
                             [f"Engine time; each row is the second ending at t. Rows from {AROUND_BEFORE_S} s before "
                              f"to {AROUND_AFTER_S} s after each fault. '(at end)': put back when the point ended."]))
    if rec_rows:
        out.insert(0, Table(f"{wl}: recovery from faults",
                            ["run", "level", "fault (engine time)", "pre-fault IOPS (median)", "min IOPS",
                             "max p99 (ms)", "first error after (s)", "below band (s)", "recovery (s)",
                             "op errors (point)", "p99 incl. errors (point, ms)"],
                            rec_rows, ["l", "l", "l", "r", "r", "r", "r", "r", "r", "r", "r"],
                            [f"{DEFINITION} A point with intended faults is labelled 'fault (intended)', "
                             "not counted as an anomaly. Below band: seconds of the window under the band; "
                             "'(no dip)': the fault never showed in throughput. Max p99 is of successful ops, "
                             "second by second; p99 incl. errors is the whole point's, failed and timed-out ops "
                             "included (their latency to the failure or timeout; n/a without errors)."]))
    return out
