"""Recovery figures of a point with faults: what clients saw while the cluster broke and healed.

Pure: from the point's interval records (the engine's, one a second) and its fault
events (kind "fault", `data.t_s` on the same clock: `t` of the interval records).

Per fault (its window runs to the next fault or the end of the point):
    first_error_s   from the fault to the end of the first interval that counted an
                    error (1 s resolution); None: no error
    min_iops, min_mib_s, max_p99_ms   the dip: lowest throughput, highest p99 over the
                    whole window
    below_band_s    seconds of the window's intervals below RECOVERY_BAND of the pre-fault
                    median (0: the fault never showed; `note` says so)
    recovery_s      from the fault until throughput is back within RECOVERY_BAND (10%) of
                    the pre-fault median (at least 90% of it: more counts as back) and stays
                    there for RECOVERY_RUN intervals in a row, judged only after the window's
                    first interval out of the band (the fault's effect may start seconds
                    late) and after its last relapse (an interval below RELAPSE, half the
                    median: a restarted OSD's peering stalls I/O after a first return): the
                    start of that run minus the fault time; 0 when throughput never left
                    the band; None: not recovered
The point's figures (metrics, keys in model.METRIC_COLUMNS) summarise them: the first
error after the first fault, the deepest dip over all windows, and the recovery after
the last fault (its final recovery). The pre-fault median is over the measured
(non-ramp) intervals that end before the first fault.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from fathom.analysis.phases import CONDITIONS
from fathom.results.series import Sample, samples

RECOVERY_BAND = 0.10  # back: at most 10% below the pre-fault median
RECOVERY_RUN = 3  # consecutive intervals in the band
RELAPSE = 0.5  # below half the pre-fault median after a return: the fault's effect was not over
DEFINITION = (f"Recovery: seconds from a fault until IOPS is back to at least {1 - RECOVERY_BAND:.0%} of the "
              f"pre-fault median for {RECOVERY_RUN} s in a row, with no fall below {RELAPSE:.0%} of it after that "
              "before the next fault or the point's end, judged from the first second out of that band (a dip "
              "that starts late is not a recovery in 0 s). Min IOPS and max p99: over the fault's whole window.")
NEVER_LEFT = (f"throughput never fell below {1 - RECOVERY_BAND:.0%} of the pre-fault median in this window: "
              "no dip, recovery 0 s")
MIN_DT_S = 0.5  # shorter intervals (the engine's last, partial one) are too short to judge a rate by

# Health checks a fault is expected to raise: an intended fault that raises only these is not an
# anomaly. By the daemon kind it hits, and by action for the commands that hit no daemon.
_PG = {"PG_DEGRADED", "PG_AVAILABILITY", "PG_DEGRADED_FULL", "SLOW_OPS", "OBJECT_MISPLACED", "PG_RECOVERY_FULL",
       "OSD_SLOW_PING_TIME_BACK", "OSD_SLOW_PING_TIME_FRONT"}
EXPECTED_CHECKS: dict[str, set[str]] = {
    "osd": {"OSD_DOWN", "OSD_HOST_DOWN", "OSD_ROOT_DOWN", "OSD_OUT", *_PG},
    "mon": {"MON_DOWN", *_PG},
    "mgr": {"MGR_DOWN", *_PG},
    "mds": {"FS_DEGRADED", "MDS_ALL_DOWN", "FS_WITH_FAILED_MDS", "MDS_INSUFFICIENT_STANDBY", "MDS_UP_LESS_THAN_MAX",
            *_PG},
    "rgw": {*_PG},
    "pause": {"OSDMAP_FLAGS", *_PG},
    # a host's faults: its OSDs (and mon, mgr on the first host) down or slow
    "host": {"OSD_DOWN", "OSD_HOST_DOWN", "OSD_ROOT_DOWN", "OSD_OUT", "MON_DOWN", "MGR_DOWN", "SLOW_OPS", *_PG},
    "mclock": {*_PG},
}
BY_ACTION = {"pause": "pause", "unpause": "pause", "mgr_failover": "mgr", "mon_failover": "mon", "mclock": "mclock",
             "mclock_reset": "mclock", **{a: "host" for a in ("host_down", "host_up", "nic_cap", "netem", "link_reset",
                                                               "partition", "heal")}}


def expected_checks(faults: list[dict[str, Any]]) -> set[str]:
    """Health checks these fault events (their `data`) may raise."""
    out: set[str] = set()
    for f in faults:
        action, daemon = f.get("action") or "", f.get("daemon") or ""
        if action in BY_ACTION:
            out |= EXPECTED_CHECKS[BY_ACTION[action]]
        else:
            kind = "rgw" if "rgw" in daemon else daemon.split(".", 1)[0]
            out |= EXPECTED_CHECKS.get(kind, _PG)
    return out


@dataclass
class FaultWindow:
    t_s: float
    action: str
    daemon: str | None
    first_error_s: float | None
    min_iops: float | None
    min_mib_s: float | None
    max_p99_ms: float | None
    recovery_s: float | None  # None: not back in the band before the window ended
    below_band_s: float | None = None  # seconds below the band in the window; None without a baseline
    note: str | None = None  # why a figure reads as it does (a fault that never showed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return f"{self.action} {self.daemon}" if self.daemon else self.action  # daemon: or a host action's host


def _in_band(x: float, base: float) -> bool:
    # at most 10% below the median; more than before (e.g. writes to fewer replicas with an OSD down) counts
    return x >= (1.0 - RECOVERY_BAND) * base


def _recovered_at(window: list[Sample], base: float) -> float | None:
    """Start time of the first run of RECOVERY_RUN intervals in the band after the window's first interval out
    of it and after the last relapse, or None. A window that never leaves the band recovered at its start.

    Recovery is judged only once the fault has shown: a dip that begins seconds after the fault (an OSD marked
    out, backfill starting) would otherwise follow a "recovery" in the first in-band seconds."""
    judged = [s for s in window if s.dt >= MIN_DT_S]
    first_out = next((i for i, s in enumerate(judged) if not _in_band(s.iops, base)), None)
    if first_out is None:
        return judged[0].t - judged[0].dt if judged else None
    last_relapse = max((i for i, s in enumerate(judged) if s.iops < RELAPSE * base), default=-1)
    run: list[Sample] = []
    for s in judged[max(first_out, last_relapse) + 1:]:
        run = run + [s] if _in_band(s.iops, base) else []
        if len(run) >= RECOVERY_RUN:
            return run[0].t - run[0].dt
    return None


def baseline(ss: list[Sample], t_fault: float) -> float | None:
    """Median throughput (IOPS) of the measured intervals that end before the fault (all of them if none is
    measured, the fault falling in the ramp)."""
    before = [s for s in ss if s.t <= t_fault and s.dt >= MIN_DT_S]
    measured = [s.iops for s in before if not s.ramp] or [s.iops for s in before]
    return statistics.median(measured) if measured else None


def windows(ss: list[Sample], faults: list[dict[str, Any]]) -> tuple[float | None, list[FaultWindow]]:
    """(pre-fault median IOPS, one FaultWindow per fault in time order)."""
    fs = sorted((f for f in faults if f.get("t_s") is not None), key=lambda f: float(f["t_s"]))
    if not fs:
        return None, []
    base = baseline(ss, float(fs[0]["t_s"]))
    out = []
    for i, f in enumerate(fs):
        t0 = float(f["t_s"])
        t1 = float(fs[i + 1]["t_s"]) if i + 1 < len(fs) else float("inf")
        win = [s for s in ss if t0 < s.t and s.t - s.dt < t1]
        err = next((s for s in win if s.errors), None)
        rec_at = _recovered_at(win, base) if base else None
        dip = [s for s in win if s.dt >= MIN_DT_S]  # the whole window: a dip may start after a first return
        p99s = [s.p99_ms for s in dip if s.p99_ms is not None]
        below = round(sum(s.dt for s in dip if not _in_band(s.iops, base)), 3) if base else None
        out.append(FaultWindow(
            t0, str(f.get("action") or ""), f.get("daemon") or f.get("host"),
            round(max(err.t - t0, 0.0), 3) if err else None,
            min((s.iops for s in dip), default=None), min((s.mib_s for s in dip), default=None),
            max(p99s, default=None), round(max(rec_at - t0, 0.0), 3) if rec_at is not None else None,
            below, NEVER_LEFT if dip and below == 0 else None))
    return base, out


def acted(faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The faults that acted while the point ran: timed (t_s: when each took effect; from before effects were
    recorded, when it was issued), carried out, in effect before the point's last record, not the put-back at its
    end. The mClock profile is a condition of the point, not a fault (phases.CONDITIONS)."""
    return [f for f in faults if f.get("t_s") is not None and not f.get("undo")
            and f.get("outcome") not in ("not run", "no effect within the point") and not f.get("error")
            and f.get("action") not in CONDITIONS]


def point_metrics(intervals: list[dict[str, Any]], faults: list[dict[str, Any]]) -> tuple[dict[str, Any],
                                                                                          list[FaultWindow]]:
    """The point's recovery metrics (METRIC_COLUMNS keys; {} without a fault) and the per-fault windows."""
    base, ws = windows(samples(intervals), faults)
    if not ws:
        return {}, []
    first_err = next((w for w in ws if w.first_error_s is not None), None)
    mins = [w.min_iops for w in ws if w.min_iops is not None]
    mibs = [w.min_mib_s for w in ws if w.min_mib_s is not None]
    p99s = [w.max_p99_ms for w in ws if w.max_p99_ms is not None]
    last = ws[-1]
    return {
        "faults": len(ws),
        "fault_at_s": ws[0].t_s,
        "prefault_iops": base,
        "fault_first_error_s": (first_err.t_s - ws[0].t_s + first_err.first_error_s) if first_err else None,
        "fault_min_iops": min(mins, default=None),
        "fault_min_mib_s": min(mibs, default=None),
        "fault_max_p99_ms": max(p99s, default=None),
        "fault_recovery_s": last.recovery_s,
        "fault_recovered": last.recovery_s is not None,
    }, ws
