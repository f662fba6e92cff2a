"""A full cluster, named: which of Ceph's full states (`ceph health detail`) holds client writes back.

A pool over its quota (POOL_FULL) or an OSD past the full ratio (OSD_FULL) makes
writes wait in the client; the engine's stall or op timeout then ends the point.
Its error alone says only that ops hung: this names the cluster's state instead.
"""

from __future__ import annotations

from typing import Any

from fathom.errors import FathomError

FULL_CHECKS = ("POOL_FULL", "OSD_FULL")


def full_state(ceph: Any) -> dict[str, str]:
    """{check: what Ceph says} for each full state raised now ({} when none, or the cluster did not answer)."""
    try:
        detail = ceph.ceph("health", "detail", timeout=30) or {}
    except FathomError:
        return {}
    out: dict[str, str] = {}
    for name, check in (detail.get("checks") or {}).items():
        if name not in FULL_CHECKS:
            continue
        summary = (check.get("summary") or {}).get("message", "")
        lines = [d.get("message", "") for d in (check.get("detail") or [])][:3]
        out[name] = summary + (f" ({'; '.join(lines)})" if lines else "")
    return out


def describe(state: dict[str, str]) -> str:
    return "; ".join(f"{k}: {v}" for k, v in state.items())


def on_full(store: Any, run_id: int, point: Any, state: dict[str, str], policy: str, resume: str) -> None:
    """A point failed on a full cluster, and every write after it would too. Policy `stop` ends the run (the
    rest stays to do: `resume`, the command that resumes the run, runs it once there is room); `skip` records
    the writes left as skipped, each with why, and still runs the reads (a full cluster serves them)."""
    why = f"the cluster is full ({describe(state)})"
    if policy != "skip":
        raise FathomError(f"point {point.key} ended because {why}; run {run_id} stopped, finished points kept",
                          hint=f"free space (or raise the pool's quota), then `{resume}`")
    store.add_event(run_id, "skipped", f"point {point.key} failed because {why}: the writes after it are "
                    "skipped, the reads run (--on-full skip)", data={"full": state, "point": point.key})


def skip(store: Any, run_id: int, point: Any, state: dict[str, str], say: Any) -> None:
    """Record a write point left under --on-full skip as skipped, with why."""
    why = f"the cluster is full ({describe(state)})"
    store.record_point(run_id, point.idx, point.key, point.workload, point.engine, point.params, "skipped",
                       error=f"skipped: {why}; it writes (--on-full skip)",
                       events=[{"kind": "skipped", "message": f"skipped: {why}"}])
    say(f"{point.key} skipped: it writes and {why}")
