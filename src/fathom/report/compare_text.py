"""`fathom compare` as plain text for a terminal or a CI log."""

from __future__ import annotations

from fathom.analysis import anomalies as anom
from fathom.analysis.compare import VERDICT_RULES, Comparison, Judgment, WorkloadCmp
from fathom.report.doc import fmt


def columns(headers: list[str], rows: list[list[str]], right: set[int] | None = None) -> list[str]:
    right = right if right is not None else set(range(1, len(headers)))
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    out = []
    for r in [headers, *rows]:
        out.append("  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                             for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    out.insert(1, "  ".join("-" * w for w in widths))
    return out


def _tp(v: float | None, unit: str) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.0f} {unit}" if unit == "IOPS" else f"{v:,.2f} {unit}"


def _ci(w: WorkloadCmp) -> str:
    return f"[{w.ci[0]:.3f}, {w.ci[1]:.3f}]" if w.ci else "none (1 trial)"


def _interval(j: Judgment) -> str:
    return f"[{j.ci[0]:.3f}, {j.ci[1]:.3f}] at {j.confidence:.1%}" if j.ci and j.confidence else "none (1 trial)"


def figure_rows(w: WorkloadCmp) -> list[list[str]]:
    """Every judged figure of a workload: level, figure, ratio (above 1: NEW better), interval, verdict."""
    rows = [[w.workload, lv.label, j.what, f"{j.ratio:.3f}x", _interval(j), j.verdict]
            for lv in w.levels for j in (lv.tp, lv.lat) if j]
    rows += [[w.workload, "all", j.what, f"{j.ratio:.3f}x", _interval(j), j.verdict]
             for j in (w.tp_all, w.lat_all) if j]
    return rows


def _stats(w: WorkloadCmp) -> str:
    def one(name: str, s: object) -> str:
        if s is None:
            return f"{name}: no samples"
        sd = f" ± {s.stdev:,.2f}" if s.stdev is not None else ""  # type: ignore[attr-defined]
        outl = f", {s.outliers} outlier(s)" if s.outliers else ""  # type: ignore[attr-defined]
        return (f"{name} peak {s.mean:,.2f}{sd} {w.unit} (mean{' ± stdev' if sd else ''}, "  # type: ignore[attr-defined]
                f"n={s.n}{outl})")  # type: ignore[attr-defined]
    return f"{w.workload} vs {w.new}: {one('BASE', w.base_peak_stats)}; {one('NEW', w.new_peak_stats)}; " \
           f"peak ratio {w.ratio:.3f}; throughput over levels {_ci(w)}: {w.verdict} ({w.reason})"


def render(c: Comparison) -> str:
    base = c.base
    o = [f"fathom compare: BASE {base.name} (run {','.join(map(str, base.ids))}) vs NEW "
         + ", ".join(f"{n.name} (run {','.join(map(str, n.ids))})" for n in c.news)
         + f"; tolerance ±{c.tolerance * 100:g}%", "Rule: " + VERDICT_RULES, ""]
    for r in [base, *c.news]:
        if r.source:
            o.append(f"source of {r.name}: {r.source}")
    if any(r.source for r in [base, *c.news]):
        o.append("")
    if c.environment:
        o.append("Environments differ (a ratio below is between these as well as between builds of fathom's load)")
        o += columns(["", *(r.name for r in [base, *c.news])],
                     [[d["field"], *d["values"]] for d in c.environment], set())
        o.append("")
    o.append("Peak throughput (highest mean over the sweep); ratio = NEW / BASE")
    o += columns(["workload", "NEW", "BASE peak (at)", "NEW peak (at)", "ratio", "trials", "verdict"],
                 [[w.workload, w.new, f"{_tp(w.base_peak, w.unit)} ({w.base_peak_at})",
                   f"{_tp(w.new_peak, w.unit)} ({w.new_peak_at})", f"{w.ratio:.3f}x", f"{w.trials[0]}/{w.trials[1]}",
                   w.verdict + (" REGRESSION" if w.regression else "")] for w in c.workloads], {2, 3, 4, 5})
    o += ["", "Every figure judged: ratio of geometric means, NEW / BASE (latency BASE / NEW): above 1 is NEW better"]
    o += columns(["workload", "level", "figure", "ratio", "interval", "verdict"],
                 [r for w in c.workloads for r in figure_rows(w)], {3})
    o += ["", "Relative difference, positive = NEW better (as in the RGW study's Table 1)"]
    o += columns(["workload", "NEW", "throughput gain", "latency gain", "latency levels used"],
                 [[w.workload, w.new, fmt(w.tp_gain_pct, "pct"), fmt(w.lat_gain_pct, "pct"),
                   str(w.lat_levels_used)] for w in c.workloads], {2, 3, 4})
    o.append("throughput gain = (NEW/BASE peak - 1) x 100; latency gain = (BASE/NEW mean latency - 1) x 100, "
             "geometric mean over matched levels without collapsed, short-window or failed points")
    for w in c.workloads:
        o += ["", f"Latency at matched level: {w.workload}, {w.base} -> {w.new}"]
        has_p99 = any(lv.base_p99_ms is not None or lv.new_p99_ms is not None for lv in w.levels)
        heads = [w.axis, f"BASE {w.unit}", f"NEW {w.unit}", "BASE clat (ms)", "NEW clat (ms)"]
        heads += ["BASE p99 (ms)", "NEW p99 (ms)"] if has_p99 else []
        rows = []
        for lv in w.levels:
            row = [lv.label, _tp(lv.base_tp, w.unit), _tp(lv.new_tp, w.unit), fmt(lv.base_clat_ms),
                   fmt(lv.new_clat_ms)]
            row += [fmt(lv.base_p99_ms), fmt(lv.new_p99_ms)] if has_p99 else []
            rows.append(row + [fmt(lv.lat_gain_pct, "pct"), ", ".join(lv.flagged)])
        o += columns(heads + ["latency gain", "flags"], rows, set(range(0, len(heads) + 1)))
        if not w.levels:
            o.append("no level was run by both (their sweeps differ, e.g. in numjobs): only peaks compare")
        elif not has_p99:
            o.append("no percentiles: neither run has latency histograms for this workload")
    o += ["", "Statistics"] + [_stats(w) for w in c.workloads]
    if c.unmatched:
        o += ["", "Not compared"]
        o += [f"{u['workload']}: " + (f"only in {u['only_in']}" if u.get("only_in") else u.get("why", ""))
              for u in c.unmatched]
    o += ["", f"Anomalies ({len(c.anomalies)})"]
    o += [f"{run} {wl} at {', '.join(lv)}: {kind}: {what}"
          for run, wl, kind, lv, what in anom.grouped(c.anomalies)] or ["none"]
    counts: dict[str, int] = {}
    for w in c.workloads:
        counts[w.verdict] = counts.get(w.verdict, 0) + 1
    o += ["", "Verdicts: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none")]
    if c.fail_on_regression is not None:
        reg = c.regressed
        o.append(f"Regression gate ({c.fail_on_regression * 100:g}%): " + (
            "FAILED: " + ", ".join(f"{w.workload} ({w.new}: {w.fired_text()})" for w in reg)
            if reg else "passed"))
    return "\n".join(o) + "\n"
