"""Degraded points by phase: before, fault, recovery, after (fathom.analysis.phases), and the mClock profiles set
against each other during recovery.

Per faulted point, a table of its phases: seconds, throughput, p50/p99/p99.9 (each also against the before phase),
errors, the recovery rate Ceph reported; under it the point's time to active+clean, its clients' longest stall and
its failover times. Per run with mClock profiles set by `mclock` faults, one table of the recovery phase's client
p99 against the recovery rate, a row per profile.
"""

from __future__ import annotations

from typing import Any

from fathom.analysis.anomalies import phase_data
from fathom.analysis.data import RunData
from fathom.report.doc import Section, Table

DEFINITIONS = ("Phases: before (to the first fault's effect), fault (to the effect of the action that put it back, "
               "or a failover's own outage), recovery (to the first PG sample with every PG active+clean and nothing "
               "degraded or misplaced; `ceph pg stat` every 2 s), after (to the point's end). An interval counts in "
               "the phase its middle falls in. Percentiles are of each phase's merged histograms; '×' is against the "
               "before phase. Recovery rates: the mean of what `ceph pg stat` reported in the phase. Longest stall: "
               "the longest run of seconds with no op completed (1 s resolution).")


def _f(v: float | None, nd: int = 1) -> str:
    return "-" if v is None else f"{v:,.{nd}f}"


def _x(v: float | None) -> str:
    return "" if v is None else f" (×{v:.2f})"


def _summary(d: dict[str, Any]) -> str:
    parts = [f"time to active+clean: {_f(d.get('clean_s'))} s after the first fault" if d.get("clean_s") is not None
             else "not active+clean again within the watch",
             f"longest stall: {_f(d.get('stall_s'))} s"]
    if d.get("failover_s") is not None:
        parts.append(f"mgr failover: {_f(d['failover_s'])} s")
    if d.get("quorum_s") is not None:
        parts.append(f"mon quorum again after {_f(d['quorum_s'])} s")
    if d.get("profile"):
        parts.append(f"osd_mclock_profile {d['profile']}")
    return "; ".join(parts)


def tables(runs: list[RunData], wl: str) -> list[Table]:
    out = []
    for r in runs:
        for p in r.curve(wl):
            d = phase_data(r, p)
            if not d or not d.get("phases"):
                continue
            rows = [[ph["phase"], f"{_f(ph['start_s'])}–{_f(ph['end_s'])}", _f(ph["seconds"], 0),
                     _f(ph["iops"], 0) + _x(ph["vs_before"].get("iops") if ph["phase"] != "before" else None),
                     _f(ph["mib_s"], 2),
                     *[_f(ph[k], 2) + _x(ph["vs_before"].get(k) if ph["phase"] != "before" else None)
                       for k in ("p50_ms", "p99_ms", "p999_ms")],
                     str(ph["errors"]), _f(ph.get("recovering_objects_s")), _f(ph.get("recovering_mib_s"), 2)]
                    for ph in d["phases"]]
            out.append(Table(f"{wl} {p.label}: {r.name}: phases", [
                "phase", "engine time (s)", "seconds", "ops/s", "MiB/s", "p50 (ms)", "p99 (ms)", "p99.9 (ms)",
                "op errors", "recovering objects/s", "recovering MiB/s"], rows,
                ["l", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r"], [_summary(d), DEFINITIONS]))
    return out


def sections(runs: list[RunData]) -> list[Section]:
    """The mClock profiles against each other: the recovery phase's client p99 and the recovery rate."""
    rows = []
    for r in runs:
        for wl in r.workloads():
            for p in r.curve(wl):
                d = phase_data(r, p)
                if not d or not d.get("profile"):
                    continue
                rec = next((ph for ph in d["phases"] if ph["phase"] == "recovery"), None) or {}
                before = next((ph for ph in d["phases"] if ph["phase"] == "before"), None) or {}
                rows.append([r.name, wl, d["profile"], _f(before.get("p99_ms"), 2),
                             _f(rec.get("p99_ms"), 2) + _x((rec.get("vs_before") or {}).get("p99_ms")),
                             _f(rec.get("iops"), 0), _f(rec.get("recovering_objects_s")),
                             _f(rec.get("recovering_mib_s"), 2), _f(d.get("clean_s"))])
    if not rows:
        return []
    return [Section("mClock profiles during recovery", "", [], [Table(
        "Client p99 against recovery rate, by osd_mclock_profile",
        ["run", "workload", "profile", "p99 before (ms)", "p99 in recovery (ms)", "ops/s in recovery",
         "recovering objects/s", "recovering MiB/s", "time to active+clean (s)"], rows,
        ["l", "l", "l", "r", "r", "r", "r", "r", "r"],
        ["Each row is one point: the profile set by its `mclock` fault before the host went down. A profile "
         "favouring clients should show the lower p99 and the slower recovery. " + DEFINITIONS])], [])]
