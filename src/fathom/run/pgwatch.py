"""The placement groups while a point with faults runs: `ceph pg stat` every PERIOD_S seconds on a thread of its own,
for the phases of a degraded run (fathom.analysis.phases): when the cluster was active+clean again, and how fast it
recovered (the objects and bytes per second Ceph reports recovering).

Each `ceph` call is a process (about half a second of a core here), so the period is 2 s: time to active+clean is
known to that resolution. A call that fails (a mon being failed over) is a gap, not a sample."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from fathom.errors import FathomError

PERIOD_S = 2.0
SETTLE_S = 600.0  # after the point, how long the watch waits for active+clean before it says it never was


def sample(stat: dict[str, Any]) -> dict[str, Any]:
    """One `ceph pg stat -f json` as a sample: PGs, those active+clean, recovery rates (absent: 0)."""
    m = stat.get("pg_summary", stat)  # Pacific nests it; later releases do not
    states = {s["name"]: int(s["num"]) for s in m.get("num_pg_by_state") or []}
    total = int(m.get("num_pgs") or sum(states.values()))
    clean = states.get("active+clean", 0)
    out = {"pgs": total, "clean_pgs": clean,
           "recovering_objects_per_sec": float(m.get("recovering_objects_per_sec") or 0.0),
           "recovering_bytes_per_sec": float(m.get("recovering_bytes_per_sec") or 0.0),
           "degraded_objects": int(m.get("degraded_objects") or 0),
           "misplaced_objects": int(m.get("misplaced_objects") or 0)}
    out["clean"] = total > 0 and clean == total and not (out["degraded_objects"] or out["misplaced_objects"])
    return out


class PgWatch:
    """Samples the PGs until stopped; `settle` then waits for active+clean (bounded)."""

    def __init__(self, ceph: Any, period_s: float = PERIOD_S):
        self.ceph, self.period_s = ceph, period_s
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _one(self) -> dict[str, Any] | None:
        ts = time.time()
        try:
            s = sample(self.ceph.ceph("pg", "stat", timeout=10) or {})
        except (FathomError, KeyError, TypeError, ValueError):
            return None
        s["ts"] = round(ts, 3)
        self.samples.append(s)
        return s

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            self._one()
            self._stop.wait(max(self.period_s - (time.monotonic() - t0), 0.05))

    def start(self) -> None:
        if self.ceph is None:  # no cluster to watch
            return
        self._thread = threading.Thread(target=self._loop, name="fathom-pgwatch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def settle(self, since_ts: float, say: Callable[[str], None], limit_s: float = SETTLE_S) -> float | None:
        """After the point: sample until active+clean after since_ts (the last fault's effect), at most limit_s; the
        wall time it was first seen clean, or None."""
        t_end = time.monotonic() + (limit_s if self.ceph is not None else 0.0)
        last_say = 0.0
        while True:
            seen = next((s for s in self.samples if s["ts"] >= since_ts and s["clean"]), None)
            if seen is not None:
                return float(seen["ts"])
            if time.monotonic() > t_end:
                return None
            s = self._one()
            if s is not None and time.monotonic() - last_say > 30:
                say(f"  waiting for active+clean after the faults: {s['clean_pgs']} of {s['pgs']} PGs, "
                    f"recovering {s['recovering_objects_per_sec']:.0f} objects/s")
                last_say = time.monotonic()
            time.sleep(self.period_s)
