"""The health gate: measure only on a quiet, clean cluster.

Before a point is measured, wait until every PG is active+clean and nothing is
recovering, backfilling or scrubbing, and no health check that distorts
measurements is raised. The verdict is returned (and stored by the runner) whether
it passed or not, so a report can say under what conditions a point was measured.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from fathom.cluster.ceph import Ceph
from fathom.errors import ClusterError, FathomError

# PG state words that mean "not settled": measurements taken now would include this work.
BUSY_STATES = ("peering", "activating", "creating", "unknown", "recover", "backfill", "scrub", "degraded",
               "undersized", "remapped", "stale", "down", "incomplete", "inactive", "peered", "repair", "wait")

# Health checks that are about configuration, not about the cluster doing extra work right now.
IGNORABLE_CHECKS = {
    "OSDMAP_FLAGS",  # noscrub/nodeep-scrub: set on purpose by hygiene
    "POOL_NO_REDUNDANCY", "POOL_APP_NOT_ENABLED", "TOO_FEW_OSDS", "MON_DISK_LOW", "RECENT_CRASH",
    "AUTH_INSECURE_GLOBAL_ID_RECLAIM_ALLOWED", "MGR_MODULE_DEPENDENCY", "POOL_TOO_FEW_PGS", "POOL_TOO_MANY_PGS",
    "TOO_MANY_PGS", "BLUESTORE_NO_PER_POOL_OMAP", "BLUESTORE_NO_PER_PG_OMAP", "OSD_NO_DOWN_OUT_INTERVAL",
    "MDS_INSUFFICIENT_STANDBY",  # one MDS and no standby: how a small (or fathom's local) cluster is made
    # Ceph 20: keys and tickets of the cipher clients before 20 need (a cluster serving them chose that)
    "AUTH_INSECURE_CLIENT_KEY_TYPE", "AUTH_INSECURE_KEYS_ALLOWED", "AUTH_INSECURE_KEYS_CREATABLE",
    "AUTH_INSECURE_SERVICE_TICKETS", "AUTH_INSECURE_ROTATING_SERVICE_KEY_TYPE", "AUTH_INSECURE_SERVICE_KEY_TYPE",
}


@dataclass
class GateVerdict:
    ok: bool
    waited_s: float
    reason: str  # why it passed or what still blocks it
    health: str | None = None
    pg_states: dict[str, int] = field(default_factory=dict)
    checks: dict[str, str] = field(default_factory=dict)  # health checks seen at the end

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def assess(status: dict[str, Any]) -> tuple[bool, str, dict[str, int], dict[str, str]]:
    """Is this `ceph status` JSON quiet and clean? Returns (ok, reason, pg_states, checks)."""
    pgmap = status.get("pgmap", {})
    states = {s["state_name"]: int(s["count"]) for s in pgmap.get("pgs_by_state", [])}
    total = int(pgmap.get("num_pgs", sum(states.values())))
    checks = {k: v.get("summary", {}).get("message", "") for k, v in status.get("health", {}).get("checks", {}).items()}
    osdmap = status.get("osdmap", {})
    osdmap = osdmap.get("osdmap", osdmap)
    if int(osdmap.get("num_up_osds", 0)) < int(osdmap.get("num_osds", 0)):
        return False, f"{osdmap.get('num_osds', 0) - osdmap.get('num_up_osds', 0)} OSD(s) down", states, checks
    busy = {s: n for s, n in states.items() if any(w in s for w in BUSY_STATES) or s != "active+clean"}
    clean = states.get("active+clean", 0)
    if busy:
        desc = ", ".join(f"{n} {s}" for s, n in sorted(busy.items(), key=lambda kv: -kv[1]))
        return False, f"{clean} of {total} PGs active+clean; not settled: {desc}", states, checks
    if clean != total:
        return False, f"{clean} of {total} PGs active+clean (others not yet reported)", states, checks
    if any(k in pgmap for k in ("recovering_objects_per_sec", "recovering_bytes_per_sec", "degraded_objects",
                                "misplaced_objects")):
        return False, "recovery or misplaced objects reported", states, checks
    muted = {k for k, v in status.get("health", {}).get("checks", {}).items() if v.get("muted")}
    blocking = {k: v for k, v in checks.items() if k not in IGNORABLE_CHECKS and k not in muted}
    if blocking:
        return False, "; ".join(f"{k}: {v}" for k, v in blocking.items()), states, checks
    return True, f"all {total} PGs active+clean, nothing recovering or scrubbing", states, checks


def rgw_idle(ceph: Ceph) -> tuple[bool, str]:
    """Is RGW's background work done: no bucket queued for resharding, nothing waiting in garbage collection?
    (Deleted tails stay in GC for rgw_gc_obj_min_wait, 2 h by default, and GC then competes with the load.)"""
    reshard = ceph.radosgw_admin("reshard", "list", timeout=60) or []
    if reshard:
        return False, f"RGW reshard queue: {len(reshard)} bucket(s) queued"
    gc = ceph.radosgw_admin("gc", "list", "--include-all", timeout=120) or []
    if gc:
        return False, (f"RGW garbage collection: {len(gc)} entries waiting "
                       "(purge with --bypass-gc, or radosgw-admin gc process --include-all)")
    return True, "RGW reshard queue and GC empty"


def gate(ceph: Ceph, timeout: float = 300.0, poll: float = 1.0, require: bool = False,
         settle: float = 2.0, rgw: bool = False) -> GateVerdict:
    """Wait until the cluster is clean and has stayed clean for `settle` seconds.

    One clean reading is not enough: right after a pool is created or resized the
    mon can still report the previous PG states, so the first reading may be stale.
    With rgw=True, RGW's reshard queue and GC must be empty too (rgw_idle).
    With require=True, a timeout raises ClusterError.
    """
    t0 = time.monotonic()
    last: tuple[bool, str, dict[str, int], dict[str, str]] = (False, "no status yet", {}, {})
    health = None
    clean_since: float | None = None
    while True:
        try:
            st = ceph.ceph("status", timeout=30)
            health = st.get("health", {}).get("status")
            last = assess(st)
            if last[0] and rgw:
                idle, why = rgw_idle(ceph)
                last = (idle, f"{last[1]}; {why}", last[2], last[3])
        except FathomError as exc:
            last = (False, f"cluster did not answer: {exc.message}", {}, {})
        now = time.monotonic()
        waited = now - t0
        if last[0]:
            clean_since = now if clean_since is None else clean_since
            if now - clean_since >= settle:
                return GateVerdict(True, round(waited, 2), last[1], health, last[2], last[3])
        else:
            clean_since = None
        if waited >= timeout:
            reason = last[1] if not last[0] else f"clean for less than {settle:.0f} s: {last[1]}"
            if require:
                raise ClusterError(
                    f"health gate: cluster not clean after {timeout:.0f} s: {reason}",
                    hint="check `ceph -s`; raise the gate timeout if the cluster is still settling",
                )
            return GateVerdict(False, round(waited, 2), reason, health, last[2], last[3])
        time.sleep(poll)
