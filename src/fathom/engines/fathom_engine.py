"""fathom-engine, the Rust load generator: the binary, its run, and its adapter.

The engine takes one point spec (JSON, protocol 2, engine/PROTOCOL.md; built by
fathom.engine_spec) as a file argument and writes JSON lines: `start`, one
`interval` a second, `summary`, and `error` records. When the spec's
"control" is set, the engine's stdin is the control channel (JSON lines:
stop, go, heartbeat). This module finds the binary and checks the protocol it
speaks, runs one engine on this host through the engine group that also runs a
many-host point's engines (fathom.engines.group: records parsed as they arrive,
CPU from wait4), turns an engine failure into a FathomError carrying the
engine's own message (fathom.engines.records), and is the "fathom-engine"
adapter of a suite's points.

Public API (stable):
    PROTOCOL (= engine_spec.PROTOCOL)
    engine_path() -> Path
        $FATHOM_ENGINE, else engine/target/release/fathom-engine in this
        checkout, else `fathom-engine` on PATH; FathomError naming
        `make install` when none exists.
    sampler_beside(engine: Path) -> Path
        The fathom-sampler that goes with that engine: this checkout's static
        (musl) build for this checkout's engine, else the file beside it.
    engine_protocol(path: Path) -> int
        The protocol the binary speaks, from `fathom-engine --version`.
    check_engine() -> Path
        engine_path() that speaks PROTOCOL; FathomError naming both protocol
        versions and `make install` otherwise (cached per binary and mtime).
    connection_spec(conn, timeout_s=None) -> dict
        A Ceph target's "connection" section (paths only, no secrets).
    run_spec(spec: dict, on_record=None, timeout=None, check=True, on_start=None,
              on_proc=None, drain_s=30.0) -> EngineRun
        Run one point. on_record gets every record as it arrives; on_start the
        child's pid once it runs and None when it ends; on_proc the
        EngineControl handle (its send/stop/go reach the engine only when
        spec["control"] is set; heartbeats go every second, or every third of
        control.heartbeat_timeout_s when that is shorter). With control.wait
        the group starts the engine once it is ready (`go`). timeout: hard
        wall-clock limit (then stop, SIGTERM, SIGKILL and FathomError).
        Ctrl-C: the engine is told to stop (control line, else SIGTERM) and
        up to drain_s more is read, so its
        final summary is kept: the KeyboardInterrupt carries `.engine_run`.
        check=True: a non-zero exit raises EngineError (.run holds the EngineRun).
    point_spec(params, ctx) -> EngineSpec      a planned point as the engine runs it
    result_from_summary(summary, wall_s, user_s, sys_s) -> PointResult

Exit codes: 0 ok (also a control stop), 2 invalid spec, 3 target error /
stall / stopped on error, 5 verify mismatch, 6 orchestrator lost (control
channel EOF, heartbeats stopped, stdout closed), 128+N signal N.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fathom import engine_spec, interfaces
from fathom.results import merge
from fathom.engine_spec import Control, EngineSpec, Load
from fathom.engines import group as engine_group
from fathom.engines.records import EngineError as EngineError  # re-exported: the public API names it here
from fathom.engines.records import EngineRun, engine_error
from fathom.interfaces.base import PointContext
from fathom.binaries import BINARY, INSTALL_HINT, engine_path
from fathom.errors import FathomError
from fathom.cluster.client import HOST, Client
from fathom.hosts.clients import LOCAL
from fathom.hosts.ssh import LOOP
from fathom.results.model import PERCENTILES, OpStats, PointResult

PROTOCOL = engine_spec.PROTOCOL
def engine_protocol(path: Path) -> int:
    """The protocol `path` speaks, from its `--version` line "fathom-engine X (protocol N)"."""
    try:
        p = subprocess.run([str(path), "--version"], check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FathomError(f"cannot run {path} --version: {exc}", hint=INSTALL_HINT, exit_code=4) from None
    m = re.search(r"\(protocol (\d+)\)", p.stdout)
    if p.returncode != 0 or not m:
        out = (p.stdout.strip() or p.stderr.strip())[:200]
        raise FathomError(f"{path} --version did not name a protocol (exit {p.returncode}: {out!r}); "
                          f"is it fathom-engine?", hint=INSTALL_HINT, exit_code=4)
    return int(m.group(1))


_protocols: dict[tuple[str, int, int], int] = {}


def check_engine() -> Path:
    """engine_path(), refused unless it speaks PROTOCOL (asked once per binary version)."""
    path = engine_path()
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _protocols:
        _protocols[key] = engine_protocol(path)
    got = _protocols[key]
    if got != PROTOCOL:
        raise FathomError(f"{path} speaks fathom-engine protocol {got}, but this fathom needs protocol {PROTOCOL}",
                          hint="rebuild the engine with `make install` (or set FATHOM_ENGINE to a build of this "
                               "checkout)", exit_code=4)
    return path


def connection_spec(conn: Any, timeout_s: float | None = None) -> dict[str, Any]:
    """The connection section of a Ceph target (rados, rbd) for a fathom.cluster.ceph.Connection."""
    return engine_spec.Connection.of(conn, timeout_s).to_json()


class EngineControl:
    """The engine of a run_spec as its caller sees it: its pid and, with a control channel, a way to talk to it.

    send/stop/go are thread-safe and never raise: they return False when the line cannot be delivered (no
    control channel, or the engine has exited); a line is handed to the group's loop, which writes it.
    """

    def __init__(self, group: engine_group.Group, inst: engine_group.Instance):
        self.pid = inst.pid
        self._group, self._inst = group, inst

    def send(self, line: dict[str, Any]) -> bool:
        if not self._inst.reachable:
            return False
        LOOP.call(self._inst.send, line)
        return True

    def stop(self, reason: str) -> bool:
        """Stop cleanly: nothing new is issued, in-flight ops drain, the summary says why (exit 0)."""
        if not self._inst.reachable:
            return False
        LOOP.call(self._group.stop_all, reason)
        return True

    def go(self, at: float) -> bool:
        """Start the main phase at `at` (epoch seconds, CLOCK_REALTIME); needs control.wait."""
        return self.send({"type": "go", "at": float(at)})


def run_spec(spec: dict[str, Any], on_record: Callable[[dict[str, Any]], None] | None = None,
             timeout: float | None = None, check: bool = True,
             on_start: Callable[[int | None], None] | None = None,
             on_proc: Callable[[EngineControl], None] | None = None, drain_s: float = 30.0,
             client: Client = HOST) -> EngineRun:
    """Run one point spec on one engine of this host to completion; see the module docstring. The engine group
    supervises it as it does a many-host point's engines (one supervisor): heartbeats, Ctrl-C, kill by pid."""
    inst = engine_group.Instance(host=LOCAL, index=0, spec=spec)
    g = engine_group.Group([inst], str(check_engine()), float(spec.get("interval_s") or 1.0), "fail",
                           lambda rec: None, lambda event: None, client=client)
    g.on_record = lambda i, rec: on_record(rec) if on_record is not None else None

    def spawned(i: engine_group.Instance) -> None:
        if on_start:
            on_start(i.pid)
        if on_proc:
            on_proc(EngineControl(g, i))

    g.on_spawn = spawned
    conn = (spec.get("target") or {}).get("connection") or {}
    ready = 2 * float(conn.get("timeout_s") or 10.0) + 10 + engine_group.READY_GRACE_S
    try:
        engine_group.run_group(g, ready, timeout, drain_s)
    except KeyboardInterrupt as exc:
        exc.engine_run = inst.run  # type: ignore[attr-defined]
        raise
    finally:
        if on_start:
            on_start(None)
    run = inst.run
    if g.failed and not run.errors:
        run.errors.append({"type": "error", "kind": "spawn", "fatal": True, "message": g.failed})
    if check and run.exit_code != 0:
        raise engine_error(run)
    return run


# ---- the adapter: a suite's point on fathom-engine -------------------------------------

# a dead orchestrator must never leave load running: the engine stops itself when heartbeats stop
HEARTBEAT_TIMEOUT_S = 30.0


def point_spec(p: dict[str, Any], ctx: PointContext) -> EngineSpec:
    """The engine spec of one planned point: the interface's target section plus the generic load.

    The engine runs the ramp and the measured window itself (duration_s covers both). The workload's
    on_error, op_timeout and stall_timeout are the engine's (a point survives a failover with
    `on_error: continue` and an op timeout shorter than the fault).
    """
    op_timeout = p.get("op_timeout", 30.0)
    iface = interfaces.get(p["interface"])
    per_job = interfaces.per_job_bytes(p)
    return EngineSpec(target=iface.section(p, ctx),
                      load=Load(iodepth=int(p["iodepth"]), duration_s=float(p["runtime"]) + float(p["ramp_time"]),
                                ramp_s=float(p["ramp_time"]), bytes=per_job, rate=p.get("rate"),
                                arrival=p.get("arrival") or "uniform"),
                      on_error=p.get("on_error") or "stop", seed=ctx.seed,
                      op_timeout_s=float(op_timeout) if op_timeout is not None else None,
                      stall_timeout_s=float(p.get("stall_timeout") or 60.0))


def result_from_summary(summary: dict[str, Any], wall_s: float | None, user_s: float | None,
                        sys_s: float | None) -> PointResult:
    """The engine's summary record as a PointResult (CPU from wait4 when given, else the engine's own)."""
    measured = float(summary.get("measured_s") or 0.0)
    ops: dict[str, OpStats] = {}
    for kind, o in (summary.get("ops") or {}).items():
        lat = o.get("lat_ns") or {}
        errs = o.get("errors", 0)
        ops[kind] = OpStats(
            ops=int(o.get("ops", 0)), bytes=int(o.get("bytes", 0)), runtime_s=measured,
            lat_mean_ns=lat.get("mean"), lat_stdev_ns=lat.get("stdev"), lat_min_ns=lat.get("min"),
            lat_max_ns=lat.get("max"), percentiles_ns={k: float(lat[k]) for k in PERCENTILES if lat.get(k) is not None},
            hist=o.get("hist"), errors=int(errs if isinstance(errs, int) else sum((errs or {}).values())),
        )
    phases = {kind: o["phases"] for kind, o in (summary.get("ops") or {}).items() if o.get("phases")}
    errors = summary.get("errors") or []
    if isinstance(errors, dict):
        errors = [{"op": k, "kind": kk, "count": v} for k, d in errors.items() for kk, v in
                  (d.items() if isinstance(d, dict) else [("error", d)])]
    cpu = summary.get("cpu") or {}
    return PointResult(
        engine="fathom-engine", ops=ops, runtime_s=measured,
        client_user_s=user_s if user_s is not None else cpu.get("user_s"),
        client_sys_s=sys_s if sys_s is not None else cpu.get("sys_s"),
        wall_s=wall_s, errors=list(errors),
        stopped_early=bool(summary.get("stopped_early")), stop_reason=summary.get("stop_reason"),
        extra={"engine_cpu": cpu, "max_rss_kib": summary.get("max_rss_kib"), "ramp_s": summary.get("ramp_s"),
               "in_flight_abandoned": summary.get("in_flight_abandoned"), "connect_s": summary.get("connect_s"),
               "stop": summary.get("stop"),
               # the measured phase's own CPU (no connect, prefill, ramp, teardown): the base of usr_cpu and CPU
               # per op; client_user_s/sys_s stay the whole process's (wait4 when given)
               "cpu_measured": merge.measured_cpu(cpu.get("measured")),
               "busiest_thread": merge.busiest_thread([cpu]),  # client_bound: one thread at a full core
               # context switches per op of the measured phase (whole engine process), for the file study's chart
               "ctx_per_op": {k: cpu.get(f"{k}_ctx_per_op") for k in ("voluntary", "involuntary")},
               # open loop (else None): offered and achieved rate, intended/issued/unissued ops, schedule_kept, lag
               "schedule": summary.get("schedule"),
               # measured_s = window_s (ramp end -> stop) + drain_s (stop -> last measured completion)
               "window_s": summary.get("window_s"), "drain_s": summary.get("drain_s"),
               **{k: summary[k] for k in ("posix", "s3", "objects", "prefill") if summary.get(k) is not None},
               # s3 latency phases (ttfb, hdr, server) per op kind: totals and percentiles, histograms merged exactly
               **({"phases": phases} if phases else {})},
    )


class FathomEngineAdapter:
    name = BINARY
    binary_hint = INSTALL_HINT

    def unsupported(self, w: Any) -> str | None:
        return interfaces.get(w.interface).unsupported(w.rw)

    def check(self) -> None:
        check_engine()

    def run(self, params: dict[str, Any], ctx: PointContext) -> PointResult:
        if ctx.clients is not None:
            return ctx.clients.run(params, ctx)
        spec = point_spec(params, ctx)
        spec.control = Control(heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S)
        doc = spec.to_json()

        def on_record(rec: dict[str, Any]) -> None:
            if rec.get("type") == "interval":
                ctx.on_interval(rec)

        try:
            er = run_spec(doc, on_record=on_record, timeout=ctx.timeout, check=False, on_start=ctx.on_child,
                           on_proc=ctx.on_control, client=ctx.conn.client if ctx.conn is not None else HOST)
        except KeyboardInterrupt as exc:
            er = getattr(exc, "engine_run", None)
            if er is not None and er.summary:
                # what ran until the interrupt, with its full histograms: stored with the interrupted point
                exc.result = self._result(er, doc)  # type: ignore[attr-defined]
            raise
        if not er.summary or er.exit_code != 0:
            raise engine_error(er) if er.exit_code != 0 else FathomError(
                f"fathom-engine ended without a summary (exit code {er.exit_code})")
        return self._result(er, doc)

    @staticmethod
    def _result(er: EngineRun, doc: dict[str, Any]) -> PointResult:
        res = result_from_summary(er.summary or {}, er.wall_s, er.user_s, er.sys_s)
        res.extra["spec"] = doc
        res.extra["libraries"] = (er.start or {}).get("libraries")  # the Ceph client library files it loaded
        return res

    def cleanup(self, ctx: PointContext) -> None:
        return None  # rados objects written by the engine go with the run's pool


ADAPTER = FathomEngineAdapter()
