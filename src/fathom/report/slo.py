"""The SLO search's section of a report: the answer, every probe with its verdict, a chart of the targeted
percentiles against the load (fathom.analysis.slo; the run's env holds the search)."""

from __future__ import annotations

from typing import Any

from fathom.analysis import slo
from fathom.analysis.data import RunData
from fathom.results.merge import KEPT_TOLERANCE
from fathom.report import svg
from fathom.report.doc import ChartOut, Section, Table
from fathom.units import format_rate

RULE = ("A probe meets the targets when each targeted percentile's whole 95% interval is at or below its target "
        "and errors are within theirs; it fails when an interval lies wholly above, errors exceed theirs, or (open "
        "loop) the schedule was not kept (arrivals left unissued, or the achieved rate over "
        f"{KEPT_TOLERANCE:.0%} short of theirs). A percentile's interval is the wider of two, both read from the "
        "probe's merged histogram: the order statistics' (the binomial spread of the rank: no assumption about "
        "the latency distribution, but the ops taken as independent) and the batch means' (the probe's "
        f"per-second interval histograms in at most {slo.MAX_BATCHES} batches, Student's t on how their "
        "fractions of ops over the estimate disagree: latency that comes in bursts widens it); with fewer than "
        f"{slo.MIN_BATCHES} seconds of ops, the order statistics' alone (docs/slo.md). A target inside an "
        f"interval repeats the probe at the same load, merged, up to {slo.MAX_REPEATS} times; then the estimate "
        f"decides and the answer says so. A probe that would fail with the client's busiest thread at "
        f"{slo.CLIENT_BOUND_PCT:.0f}% of a core or more ends the search: the load generator's limit is not the "
        "cluster's. Latency in open loop is from each op's intended start, and the answer is never above the "
        f"rate its meeting probe achieved. Halving stops once {slo.FLAT_HALVINGS} successive halvings leave a "
        f"failing percentile where it was (intervals overlapping or within {slo.FLAT_FRACTION:.0%}).")


def _load(unit: str, x: float | None) -> str:
    if x is None:
        return "n/a"
    return format_rate(x) if unit == "ops/s" else f"iodepth {x:g}"


def _probe_rows(found: dict[str, Any], keys: list[str]) -> list[list[str]]:
    unit = found.get("unit", "ops/s")
    rows = []
    for i, p in enumerate(found["result"]["probes"], start=1):
        o = p["obs"]
        cells = []
        for k in keys:
            v = o["percentiles"].get(k)
            cells.append(f"{v[0]:.3g} ({v[1]:.3g}-{v[2]:.3g})" if v else "n/a")
        kept = o.get("schedule_kept")
        sched = "n/a" if kept is None else ("kept" if kept else
                                            f"NOT kept ({format_rate(o['achieved'])})" if o.get("achieved")
                                            else "NOT kept")
        client = f"{o['client_thread_pct']:.0f}" if o.get("client_thread_pct") is not None else "n/a"
        verdict = p["outcome"] + (" (by estimate)" if p.get("decided_by_estimate") else "")
        rows.append([str(i), _load(unit, p["load"]), f"{o['ops']:,}", *cells, f"{o['errors']:,}", sched, client,
                     str(o.get("probes", 1)), verdict, "; ".join(p["reasons"])])
    return rows


def _chart(run: RunData, found: dict[str, Any], keys: list[str]) -> ChartOut | None:
    unit = found.get("unit", "ops/s")
    targets = found["settings"]["targets"]["latency_ms"]
    series = []
    for j, k in enumerate(keys):
        pts = [svg.SPoint(p["load"], p["obs"]["percentiles"][k][0], "", p["obs"]["percentiles"][k][1],
                          p["obs"]["percentiles"][k][2], flagged=p["outcome"] != "meets")
               for p in found["result"]["probes"] if k in p["obs"]["percentiles"]]
        if pts:
            series.append(svg.Series(f"{slo.NAMES[k]} (target {targets[k]:g} ms)", sorted(pts, key=lambda s: s.x),
                                     svg.PALETTE[j % len(svg.PALETTE)]))
    if not series:
        return None
    title = f"SLO search {run.name}: targeted percentiles per probe"
    return ChartOut("slo", title, svg.render(svg.Chart(
        title, "offered rate (ops/s)" if unit == "ops/s" else "iodepth", "latency (ms)", series,
        note="bars: 95% interval of the percentile; red rings: probes that did not meet the targets")))


def sections(runs: list[RunData]) -> list[Section]:
    out = []
    for r in runs:
        found = slo.answer_of(r.env)
        if found is None:
            continue
        s, res = found["settings"], found["result"]
        unit = found.get("unit", "ops/s")
        keys = sorted(s["targets"]["latency_ms"], key=lambda k: slo.QUANTILES[k])
        targets = slo.Targets(s["targets"]["latency_ms"], s["targets"]["error_rate"])
        cal = found.get("calibration")
        notes = [RULE, f"Probes ran at least {s['probe_s']:g} s and long enough for {targets.min_ops():,} ops "
                       f"(at most {s['max_probe_s']:g} s); the search stops when its bracket is within "
                       f"{s['resolution'] * 100:g}% (iodepth: neighbours)."]
        if cal:
            notes.append(f"The search started from a closed-loop probe at iodepth {cal['iodepth']}: "
                         f"{format_rate(cal['iops'])}; it searched from half that up to twice it.")
        answer = Table(f"SLO search: {r.name}", ["targets", "workload", "searched", "answer", "status",
                                                 "next step", "why", "probes"],
                       [[targets.describe(), s.get("workload") or "", "rate (open loop)" if unit == "ops/s" else
                         "iodepth (closed loop)", _load(unit, res["load"]), res["status"],
                         _load(unit, res["failed_at"]), "; ".join(res["why"]), str(len(res["probes"]))]],
                       ["l", "l", "l", "r", "l", "r", "l", "r"], [res["message"], *notes])
        probes = Table(f"SLO search: {r.name}: probes", ["probe", "load", "ops", *(f"{slo.NAMES[k]} ms (95% CI)"
                                                                                    for k in keys),
                                                         "errors", "schedule", "client thread (%)", "merged",
                                                         "verdict", "why"],
                       _probe_rows(found, keys), ["r", "r", "r", *(["r"] * len(keys)), "r", "l", "r", "r", "l", "l"],
                       ["merged: probes at this load whose histograms were merged for the verdict."])
        chart = _chart(r, found, keys)
        out.append(Section(f"SLO search ({r.name})", unit, [chart] if chart else [], [answer, probes], []))
    return out
