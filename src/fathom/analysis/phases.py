"""The phases of a degraded point: what clients saw before a fault, during it, while the cluster recovered, after.

Pure: from the point's interval records (the engine's, `t` on its clock), the data of its fault events (`t_s`: when
each took effect, same clock) and the PG watch's samples (fathom.run.pgwatch, put on the same clock: `t`).

    before    from the first measured second to the first fault's effect
    fault     from there to the end of the fault: the effect of the schedule's last action (the one that puts the
              fault back: host_up, heal, start, ...) plus its own outage (a failover's time to a new mgr or quorum);
              a fault with nothing putting it back (a kill alone, a failover) lasts its own outage only
    recovery  from the end of the fault until the PG watch first saw every PG active+clean with nothing degraded or
              misplaced (or the point's end)
    after     from active+clean to the point's end

An interval belongs to the phase its middle falls in. Per phase: its seconds, ops/s and MiB/s, p50, p99 and p99.9
from the phase's histograms merged, errors, and the mean recovery rate Ceph reported (objects/s, MiB/s); throughput
and percentiles are also given against the before phase (a ratio). The mClock profile is a condition of the point,
not a fault: `mclock` and `mclock_reset` start no phase.

Per point: time to active+clean, from the first fault's effect to the first clean sample (the watch's period, 2 s,
is its resolution; after the point's end the watch goes on until clean); the clients' longest stall, the longest
run of consecutive intervals in which no op completed (1 s resolution; 0: every second had a completion).
"""

from __future__ import annotations

from typing import Any

from fathom.results import hdr
from fathom.results.series import Sample, samples

CONDITIONS = ("mclock", "mclock_reset")  # actions that set how the point runs, not faults
# actions that put a fault back: they end a fault phase, they start none (a put-back whose fault failed)
RESTORES = ("start", "osd_in", "unpause", "host_up", "heal", "link_reset")
PHASES = ("before", "fault", "recovery", "after")
PERCENTILES = {"p50_ms": 50.0, "p99_ms": 99.0, "p999_ms": 99.9}


def _outage(f: dict[str, Any]) -> float:
    return float(f.get("failover_s") or f.get("quorum_s") or 0.0)


def bounds(faults: list[dict[str, Any]], end_t: float, clean_t: float | None) -> dict[str, tuple[float, float]]:
    """Each phase's (start, end) on the engine's clock; faults: the acted ones (recovery.acted), in time order."""
    fs = sorted((f for f in faults if f.get("action") not in CONDITIONS), key=lambda f: float(f["t_s"]))
    while fs and fs[0].get("action") in RESTORES:
        fs = fs[1:]
    if not fs:
        return {}
    t0 = float(fs[0]["t_s"])
    t1 = max(float(f["t_s"]) + _outage(f) for f in fs)
    t1 = min(max(t1, t0), end_t)
    t2 = end_t if clean_t is None else min(max(clean_t, t1), end_t)
    return {"before": (float("-inf"), t0), "fault": (t0, t1), "recovery": (t1, t2), "after": (t2, end_t)}


def _merged_pct(ss: list[Sample]) -> dict[str, float | None]:
    hists = [h for s in ss for h in s.hists]
    merged = hdr.merge(hists) if hists else None
    if not merged or not merged.get_total_count():
        return {k: None for k in PERCENTILES}
    return {k: round(hdr.percentile(merged, q) / 1e6, 3) for k, q in PERCENTILES.items()}


def stall_s(ss: list[Sample]) -> float:
    """The longest run of consecutive measured intervals with no completion, in seconds."""
    best = run = 0.0
    for s in ss:
        run = run + s.dt if s.ops == 0 else 0.0
        best = max(best, run)
    return round(best, 3)


def _ratio(x: float | None, base: float | None) -> float | None:
    return round(x / base, 3) if x is not None and base else None


def split(intervals: list[dict[str, Any]], faults: list[dict[str, Any]], watch: list[dict[str, Any]],
          clean_t: float | None, profile: str | None = None) -> dict[str, Any]:
    """The phases of one point ({} without a fault that acted); watch: PG samples with `t` on the engine clock;
    profile: the osd_mclock_profile the point ran with (an `mclock` action), if any."""
    ss = [s for s in samples(intervals) if not s.ramp]
    if not ss:
        return {}
    b = bounds(faults, ss[-1].t, clean_t)
    if not b:
        return {}
    out: list[dict[str, Any]] = []
    for name in PHASES:
        lo, hi = b[name]
        part = [s for s in ss if lo <= s.t - s.dt / 2 < hi]
        secs = sum(s.dt for s in part)
        if secs <= 0:
            continue
        rec = [w for w in watch if lo <= float(w["t"]) < hi]
        ph = {"phase": name, "start_s": round(max(lo, ss[0].t - ss[0].dt), 3), "end_s": round(hi, 3),
              "seconds": round(secs, 3), "iops": round(sum(s.ops for s in part) / secs, 1),
              "mib_s": round(sum(s.bytes for s in part) / secs / 2**20, 3), "errors": sum(s.errors for s in part),
              **_merged_pct(part),
              "recovering_objects_s": round(sum(w["recovering_objects_per_sec"] for w in rec) / len(rec), 1)
              if rec else None,
              "recovering_mib_s": round(sum(w["recovering_bytes_per_sec"] for w in rec) / len(rec) / 2**20, 3)
              if rec else None}
        out.append(ph)
    before = next((p for p in out if p["phase"] == "before"), None)
    for p in out:
        p["vs_before"] = {k: _ratio(p[k], before[k]) if before else None for k in ("iops", "mib_s", *PERCENTILES)}
    t0 = b["fault"][0]
    acted = [f for f in faults if f.get("action") not in CONDITIONS]
    return {"phases": out, "fault_t_s": t0, "clean_t_s": clean_t,
            "clean_s": round(clean_t - t0, 3) if clean_t is not None else None,
            "stall_s": stall_s([s for s in ss if s.t - s.dt / 2 >= t0]),
            "failover_s": next((f["failover_s"] for f in acted if f.get("failover_s") is not None), None),
            "quorum_s": next((f["quorum_s"] for f in acted if f.get("quorum_s") is not None), None),
            "profile": profile}
