"""Running one fathom-engine point for the bench commands, and naming what went wrong.

The shared launcher (fathom.engines.fathom_engine.run_point) runs the engine as
a child in its own session: records reach `on_record` as they arrive, Ctrl-C
stops the child, and the child's CPU comes from os.wait4.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from fathom.cluster.ceph import Connection, _mon_host
from fathom.engine_spec import EngineSpec
from fathom.errors import ClusterError, FathomError


@dataclass
class EngineOutcome:
    rc: int
    start: dict[str, Any] | None = None
    intervals: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)  # `error` records
    stderr: str = ""
    user_s: float = 0.0
    sys_s: float = 0.0
    wall_s: float = 0.0
    max_rss_kib: int = 0
    started: float = 0.0

    @property
    def fatal(self) -> dict[str, Any] | None:
        return next((e for e in self.errors if e.get("fatal")), None)


def run_engine(spec: EngineSpec, conn: Connection, timeout: float,
               on_record: Callable[[dict[str, Any]], None] | None = None) -> EngineOutcome:
    """Run one point to its end through the shared launcher; every record goes to on_record as it arrives."""
    from fathom.engines.fathom_engine import run_point

    started = time.time()
    er = run_point(spec.to_json(), on_record=on_record, timeout=timeout, check=False)
    return EngineOutcome(rc=er.exit_code if er.exit_code is not None else -1, start=er.start,
                         intervals=er.intervals, summary=er.summary, errors=er.errors, stderr=er.stderr,
                         user_s=er.user_s, sys_s=er.sys_s, wall_s=er.wall_s, max_rss_kib=er.max_rss_kib,
                         started=started)


def connect_failure(err: dict[str, Any], conn: Connection, timeout_s: float) -> FathomError | None:
    """A clear error for a failure to reach the cluster, or None when err is about something else."""
    kind = err.get("kind", "")
    msg = err.get("message", "")
    if kind in ("ECONNREFUSED", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH") or "monitor" in msg:
        mons = _mon_host(conn.conf) or "not set"
        return ClusterError(
            f"cannot reach the cluster of {conn.conf} (mon_host {mons}) as {conn.name} within {timeout_s:g} s: {msg}",
            hint="check that the mons are running and reachable, and the --conf/--id/--keyring you gave",
        )
    if kind in ("EACCES", "EPERM", "EKEYREJECTED"):
        return ClusterError(f"the cluster refused {conn.name}: {msg}",
                            hint="check --id/--name and --keyring (the key and the user's caps)")
    return None
