"""Running one fathom-engine point for the bench commands, and naming what went wrong.

The engine is a child process in its own session (base.run_child): records are
handed to `on_record` as they arrive, Ctrl-C stops the child, and the child's
CPU comes from os.wait4.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fathom.cluster.ceph import Connection, _mon_host
from fathom.engines.base import PointContext, run_child
from fathom.errors import ClusterError, FathomError

ENGINE_HINT = "build it with `make engine` (binary engine/target/release/fathom-engine) or set FATHOM_ENGINE"
REPO_ENGINE = Path(__file__).resolve().parents[3] / "engine" / "target" / "release" / "fathom-engine"


def engine_binary() -> str:
    """FATHOM_ENGINE, else the launcher's lookup, else the checkout's release build, else PATH."""
    env = os.environ.get("FATHOM_ENGINE")
    if env:
        if not os.access(env, os.X_OK):
            raise FathomError(f"FATHOM_ENGINE={env} is not an executable file", hint=ENGINE_HINT, exit_code=4)
        return env
    try:
        from fathom.engines.fathom_engine import engine_path  # the shared launcher, when present

        p = engine_path()
        if p:
            return str(p)
    except ImportError:
        pass
    except FathomError:
        pass
    if os.access(REPO_ENGINE, os.X_OK):
        return str(REPO_ENGINE)
    found = shutil.which("fathom-engine")
    if found:
        return found
    raise FathomError("fathom-engine not found", hint=ENGINE_HINT, exit_code=4)


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


def spec_connection(conn: Connection, timeout_s: float) -> dict[str, Any]:
    c: dict[str, Any] = {"conf": conn.conf, "name": conn.name, "timeout_s": float(timeout_s)}
    if conn.keyring:
        c["keyring"] = conn.keyring
    return c


def run_engine(spec: dict[str, Any], conn: Connection, timeout: float,
               on_record: Callable[[dict[str, Any]], None] | None = None) -> EngineOutcome:
    """Run one point to its end; every record goes to on_record as it arrives."""
    binary = engine_binary()
    out = EngineOutcome(rc=-1)

    def on_line(line: str) -> None:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            return  # the engine writes only JSON lines; anything else is not ours to parse
        kind = rec.get("type")
        if kind == "interval":
            out.intervals.append(rec)
        elif kind == "start":
            out.start = rec
        elif kind == "summary":
            out.summary = rec
        elif kind == "error":
            out.errors.append(rec)
        if on_record:
            on_record(rec)

    with tempfile.TemporaryDirectory(prefix="fathom-bench-") as tmp:
        spec_file = Path(tmp) / "spec.json"
        spec_file.write_text(json.dumps(spec))
        ctx = PointContext(conn=conn, pool=spec.get("pool"), images=[], run_tag="", workdir=Path(tmp),
                           timeout=timeout)
        env = conn.env()
        child = run_child([binary, str(spec_file)], ctx, env=env, on_chunk=on_line)
    out.rc = child.rc
    out.stderr = child.stderr
    out.user_s, out.sys_s, out.wall_s = child.user_s, child.sys_s, child.wall_s
    out.max_rss_kib, out.started = child.max_rss_kib, child.started
    return out


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
