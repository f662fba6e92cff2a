"""Faults during load, as they run: the checks against the cluster a run uses, the executor (signals by recorded
pid on fathom's local cluster, Ceph commands anywhere) and FaultCompanion, which runs a workload's schedule
(fathom.suite.faults: the model) on the engine's clock and puts back what it broke."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from fathom.analysis import phases, recovery
from fathom.run import actions
from fathom.run import pgwatch
from fathom.run.pgwatch import PgWatch
from fathom.companion import Companion, Contribution, Live
from fathom.errors import FathomError
from fathom.suite.faults import (BOX_ACTIONS, CEPH_ACTIONS, HOST_ACTIONS, LOCAL_ACTIONS, STOP_WAIT_S, UNDO, Fault,
                                 ceph_name, did_you_mean, osd_id)


def check_cluster(schedules: dict[str, list[Fault]], ceph: Any, local: Any | None, servers: Any | None = None) -> None:
    """Refuse, all at once, faults the cluster a run uses cannot take: a daemon or host it does not have, a kill or
    start where fathom knows no pids (an attached cluster). Called before the first point."""
    problems: list[str] = []
    hosts = actions.Hosts(local, None, servers)
    osd_ids: set[int] | None = None
    names = {d.name for d in local.daemons()} if local is not None else None
    for wl, faults in schedules.items():
        for f in faults:
            what = f"workload {wl!r}: fault {f.describe()} at {f.at_s:g} s"
            if f.action in BOX_ACTIONS and local is None:
                problems.append(f"{what}: {f.action} acts on the emulated hosts of fathom's local cluster "
                                "(cluster: {hosts: N}); an attached cluster's daemons are not fathom's")
                continue
            if f.action in HOST_ACTIONS:
                try:
                    hosts.place(f.host or "")
                except FathomError as exc:
                    problems.append(f"{what}: {exc.message}")
                continue
            if f.action in LOCAL_ACTIONS and local is None:
                problems.append(f"{what}: this cluster is attached, and an attached cluster's daemons are not "
                                f"fathom's to {f.action} (no pids known); allowed there: {', '.join(CEPH_ACTIONS)}")
                continue
            if names is not None and f.daemon is not None:
                if ceph_name(f.daemon) not in names:
                    problems.append(f"{what}: the cluster has no daemon {f.daemon!r}"
                                    f"{did_you_mean(f.daemon, sorted(names))} (daemons: {', '.join(sorted(names))})")
                continue
            oid = osd_id(f.daemon or "")
            if oid is not None:
                if osd_ids is None:
                    osd_ids = {int(i) for i in (ceph.ceph("osd", "ls", timeout=30) or [])}
                if oid not in osd_ids:
                    problems.append(f"{what}: the cluster has no {f.daemon} (OSDs: "
                                    f"{', '.join(f'osd.{i}' for i in sorted(osd_ids)) or 'none'})")
    if problems:
        raise FathomError(problems[0] if len(problems) == 1 else
                          f"{len(problems)} faults cannot run on this cluster:\n" +
                          "\n".join(f"  {p}" for p in problems), exit_code=2,
                          hint="fix the suite's faults: schedules, or run it on a cluster that has these daemons")


# ---- doing it ---------------------------------------------------------------------------

class Executor:
    """Performs fault actions: Ceph commands on any cluster, signals and starts on fathom's local one."""

    def __init__(self, ceph: Any, local: Any | None = None, journal: Any | None = None, servers: Any | None = None):
        self.ceph, self.local, self.journal = ceph, local, journal
        self.hosts = actions.Hosts(local, journal, servers, self.start) if journal is not None else None

    def _daemon(self, daemon: str) -> Any:
        name = ceph_name(daemon)
        d = next((d for d in self.local.daemons() if d.name == name), None)
        if d is None:
            raise FathomError(f"the local cluster has no daemon {daemon!r}")
        return d

    def _signal(self, daemon: str, sig: int, wait_s: float) -> dict[str, Any]:
        d = self._daemon(daemon)
        if not d.running:
            return {"outcome": "not running; nothing to do", "pid": d.pid}
        if not self.local.owns(d):  # a recycled pid is not ours to signal
            raise FathomError(f"pid {d.pid} of {d.name} is no longer that daemon; not signalled")
        os.kill(d.pid, sig)
        deadline = time.monotonic() + wait_s
        while d.running and time.monotonic() < deadline:
            time.sleep(0.05)
        if d.running and sig != signal.SIGKILL:
            os.kill(d.pid, signal.SIGKILL)
            while d.running and time.monotonic() < deadline + 10:
                time.sleep(0.05)
            return {"outcome": f"did not exit within {wait_s:.0f} s of SIGTERM: killed", "pid": d.pid,
                    **_effect(f"pid {d.pid} gone")}
        if d.running:
            raise FathomError(f"{d.name} (pid {d.pid}) still runs {wait_s:.0f} s after SIGKILL")
        return {"outcome": "done", "pid": d.pid, **_effect(f"pid {d.pid} gone")}

    def start(self, daemon: str) -> dict[str, Any]:
        d = self._daemon(daemon)
        if d.running:
            return {"outcome": "already running; nothing to do", "pid": d.pid}
        pid = self.local.start_daemon(d.name)
        return {"outcome": "done", "pid_before": d.pid, "pid": pid, **_effect(f"pid {pid} running")}

    def run(self, f: Fault) -> dict[str, Any]:
        a, t = f.action, f.daemon
        if a in LOCAL_ACTIONS and self.local is None:
            raise FathomError(f"{a} needs fathom's local cluster (its daemons' pids)")
        if a == "kill":
            return self._signal(t, signal.SIGKILL, 10.0)  # type: ignore[arg-type]
        if a == "stop":
            return self._signal(t, signal.SIGTERM, STOP_WAIT_S)  # type: ignore[arg-type]
        if a == "start":
            return self.start(t)  # type: ignore[arg-type]
        if a == "restart":
            stopped = self._signal(t, signal.SIGTERM, STOP_WAIT_S)  # type: ignore[arg-type]
            started = self.start(t)  # type: ignore[arg-type]
            return {"outcome": started["outcome"], "pid_before": stopped.get("pid"), "pid": started.get("pid"),
                    **{k: started[k] for k in ("effect_ts", "effect") if k in started}}
        if a in HOST_ACTIONS + ("mclock", "mclock_reset"):
            if self.journal is None or self.hosts is None:
                raise FathomError(f"{a} needs the run's undo journal")
            if a == "mclock":
                return actions.mclock(self.ceph, self.journal, f.profile or "")
            return actions.mclock_reset(self.ceph, self.journal) if a == "mclock_reset" else self.hosts.run(f)
        if a == "mgr_failover":
            return actions.mgr_failover(self.ceph)
        if a == "mon_failover":
            return actions.mon_failover(self.ceph, lambda d: self._signal(d, signal.SIGKILL, 10.0), self.start)
        if a in ("pause", "unpause"):
            self.ceph.ceph("osd", a, fmt_json=False, timeout=30)
        else:
            self.ceph.ceph("osd", a.split("_", 1)[1], str(osd_id(t or "")), fmt_json=False, timeout=30)
        # the mons answer once the new osdmap is committed: that epoch carries the change
        done = _effect("")
        try:
            od = self.ceph.ceph("osd", "dump", timeout=30) or {}
            done["effect"] = f"osdmap epoch {od.get('epoch')}" + (f" (flags {od['flags']})" if od.get("flags") else "")
            done["epoch"] = od.get("epoch")
        except FathomError as exc:
            done["effect"] = f"committed (osdmap epoch not read: {exc.message})"
        return {"outcome": "done", **done}


def _effect(what: str) -> dict[str, Any]:
    """When an action took effect (now, wall clock) and what says so."""
    return {"effect_ts": time.time(), "effect": what}


NO_EFFECT = "no effect within the point"


class FaultCompanion(Companion):
    """Runs one point's fault schedule on the engine's clock; see the module docstring."""

    def __init__(self, faults: list[Fault], executor: Executor, say: Callable[[str], None] = lambda msg: None):
        self.faults = sorted(faults, key=lambda f: f.at_s)
        self.executor = executor
        self.say = say  # each fault as it happens, on the run's progress
        self.intervals: list[dict[str, Any]] = []
        self._origin: float | None = None  # epoch time of t = 0 on the engine's clock
        self._clock = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._events: list[dict[str, Any]] = []
        self._done = 0  # faults run (or tried) so far
        self._down: dict[str, float] = {}  # daemons the schedule killed or stopped -> at_s
        self._out: dict[str, float] = {}  # OSDs it marked out -> at_s
        self._paused: float | None = None
        self._open: dict[tuple[str, str | None], float] = {}  # (the action that puts it back, host) -> at_s
        self._thread: threading.Thread | None = None
        self.live: Live | None = None
        self.watch = PgWatch(executor.ceph)  # the PGs, for the phases (time to active+clean, recovery rates)

    # ---- companion protocol ----
    def start(self, live: Live) -> None:
        self.live = live
        self._thread = threading.Thread(target=self._loop, name="fathom-faults", daemon=True)
        self._thread.start()
        self.watch.start()

    def on_interval(self, rec: dict[str, Any]) -> None:
        self.intervals.append(rec)
        if self._origin is None and rec.get("t") is not None and rec.get("ts") is not None:
            self._origin = float(rec["ts"]) - float(rec["t"])
            self._clock.set()

    def stop(self) -> Contribution:
        self._stop.set()
        self._clock.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_WAIT_S + 90)  # a fault in progress finishes (its commands are bounded)
        now_t = self._now_t()
        with self._lock:
            for f in self.faults[self._done:]:
                self._events.append({"kind": "fault", "ts": time.time(),
                                     "message": f"fault {f.describe()} at {f.at_s:g} s not run: the point ended "
                                                f"at t={now_t:.1f} s" if now_t is not None else
                                                f"fault {f.describe()} at {f.at_s:g} s not run: the engine sent no "
                                                "interval record, so its clock never started",
                                     "data": {"at_s": f.at_s, "action": f.action, "daemon": f.daemon,
                                              "outcome": "not run", "t_s": None}})
        self._late(now_t)
        self._undo(now_t)
        self.watch.stop()
        acted = recovery.acted([e["data"] for e in self._events])
        metrics, windows = recovery.point_metrics(self.intervals, acted)
        events = list(self._events)
        phased = self._phases(acted)
        if phased:
            events.append(phased)
        if windows:
            rec = "; ".join(f"{w.describe()} at {w.t_s:.1f} s: " + (
                f"back to {1 - recovery.RECOVERY_BAND:.0%} of the pre-fault median after {w.recovery_s:.1f} s"
                if w.recovery_s is not None else "throughput not back before the window ended") for w in windows)
            events.append({"kind": "recovery", "ts": time.time(), "message": f"recovery: {rec}",
                           "data": {"prefault_iops": metrics.get("prefault_iops"),
                                    "windows": [w.to_dict() for w in windows]}})
        return Contribution(events=events, metrics=metrics)

    def _phases(self, acted: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The point's phases (fathom.analysis.phases) as an event, once the cluster is active+clean again (the
        watch goes on after the point for that, bounded) or said not to be."""
        if not acted or self._origin is None:
            return None
        origin = self._origin
        last = max(float(f["t_s"]) for f in acted) + origin
        clean_ts = self.watch.settle(last, self.say, 0.0 if self.interrupted else pgwatch.SETTLE_S)
        watch = [{**w, "t": round(w["ts"] - origin, 3)} for w in self.watch.samples]
        profile = next((e["data"].get("profile") for e in self._events if e["data"].get("action") == "mclock"
                        and e["data"].get("outcome") == "done"), None)
        data = phases.split(self.intervals, acted, watch, clean_ts - origin if clean_ts is not None else None, profile)
        if not data:
            return None
        data["watch"] = watch
        before = next((p for p in data["phases"] if p["phase"] == "before"), None)
        parts = []
        for p in data["phases"]:
            vs = p["vs_before"].get("p99_ms") if before and p is not before else None
            parts.append(f"{p['phase']} {p['seconds']:.0f} s: {p['iops']:.0f} ops/s, p99 "
                         f"{p['p99_ms'] if p['p99_ms'] is not None else '-'} ms" + (f" (x{vs:.2f})" if vs else ""))
        clean = f"active+clean {data['clean_s']:.0f} s after the first fault" if data["clean_s"] is not None else \
            "not active+clean within the watch"
        return {"kind": "phases", "ts": time.time(), "data": data,
                "message": f"phases: {'; '.join(parts)}; {clean}; longest stall {data['stall_s']:.0f} s"}

    def _late(self, now_t: float | None) -> None:
        """Faults issued in the point whose effect came after its last record (a `ceph` call slow on a loaded
        host), or never: said, flagged (NO_EFFECT), and left out of the recovery figures."""
        end = max((float(r["t"]) for r in self.intervals if r.get("t") is not None), default=now_t)
        with self._lock:
            for e in self._events:
                d = e["data"]
                if d.get("undo") or d.get("error") or d.get("outcome") == "not run" or "effect" not in d:
                    continue
                t = d.get("t_s")
                if t is None or end is None or t > end:
                    issued = d.get("issued_t_s")
                    d["outcome"] = NO_EFFECT
                    e["message"] += (f"; {NO_EFFECT}: issued at t={issued:.1f} s, " if issued is not None else "; ") + (
                        f"took effect at t={t:.1f} s, after the point's last record at t={end:.1f} s"
                        if t is not None and end is not None else "its effect was not seen") + \
                        ": the point is flagged and no recovery is reported for it"

    # ---- the schedule ----
    def _now_t(self) -> float | None:
        return time.time() - self._origin if self._origin is not None else None

    def _loop(self) -> None:
        self._clock.wait()
        for f in self.faults:
            if self._stop.is_set() or self._origin is None:
                return
            due = self._origin + f.at_s
            if self._stop.wait(max(due - time.time(), 0.0)):
                return
            self._do(f)

    def _do(self, f: Fault, undo: str | None = None) -> None:
        t_s = self._now_t()
        data: dict[str, Any] = {"at_s": None if undo else f.at_s, "t_s": round(t_s, 3) if t_s is not None else None,
                                "issued_t_s": round(t_s, 3) if t_s is not None else None,
                                "action": f.action, "daemon": f.daemon}
        try:
            data.update(self.executor.run(f))
        except (FathomError, OSError) as exc:
            data.update(outcome="failed", error=getattr(exc, "message", None) or str(exc))
        effect_ts = data.pop("effect_ts", None)
        if effect_ts is not None and self._origin is not None:  # its phases start where it took effect
            data["t_s"] = round(effect_ts - self._origin, 3)
        if undo:
            data["undo"] = True
        ok = not data.get("error")
        with self._lock:
            if ok and f.daemon:
                if f.action in ("kill", "stop"):
                    self._down.setdefault(f.daemon, f.at_s)
                elif f.action in ("start", "restart"):
                    self._down.pop(f.daemon, None)
                elif f.action == "osd_out":
                    self._out.setdefault(f.daemon, f.at_s)
                elif f.action == "osd_in":
                    self._out.pop(f.daemon, None)
            if ok and f.action in UNDO:
                self._open.setdefault((UNDO[f.action], f.host), f.at_s)
            elif ok and f.action in UNDO.values():
                self._open.pop((f.action, f.host), None)
            if ok and f.action == "pause":
                self._paused = f.at_s if self._paused is None else self._paused
            elif ok and f.action == "unpause":
                self._paused = None
            pids = "".join(f" (pid {data[k]})" for k in ("pid",) if data.get(k) and f.action in ("kill", "stop"))
            if f.action in ("start", "restart") and data.get("pid"):
                pids = f" (pid {data.get('pid_before')} -> {data['pid']})" if data.get("pid_before") else \
                    f" (pid {data['pid']})"
            when = f"t={t_s:.1f} s" if t_s is not None else "at point end"
            took = f" (took effect at t={data['t_s']:.1f} s: {data['effect']})" if data.get("effect") and \
                data.get("t_s") is not None and t_s is not None else ""
            msg = f"{when}: {f.describe()}{pids}: {data.get('error') or data['outcome']}{took}"
            event = {"kind": "fault", "ts": time.time(), "message": f"{undo}: {msg}" if undo else msg, "data": data}
            self._events.append(event)
            if not undo:
                self._done += 1
        if self.live is not None:  # the live view marks it as it happens (a structured event, not the text)
            self.live.notify(event)
        self.say(f"  fault {msg}" if not undo else f"  fault put back, {msg}")

    def _undo(self, now_t: float | None) -> None:
        """Put back what the schedule left broken: start what it stopped, unpause, mark in."""
        end = f"the point ended at t={now_t:.1f} s" if now_t is not None else "the point ended"
        scheduled = {(f.action, f.daemon): f.at_s for f in self.faults}
        for daemon, at in list(self._down.items()):
            planned = next((s for (a, t), s in scheduled.items() if t == daemon and a in ("start", "restart")
                            and s > at), None)
            why = (f"{daemon}, down since {at:g} s, was to start at {planned:g} s, but {end}" if planned is not None
                   else f"{daemon} was left down by the schedule ({at:g} s) when {end}")
            self._do(Fault(at_s=0, action="start", daemon=daemon), undo=f"{why}; started so the cluster is whole")
        if self._paused is not None:
            self._do(Fault(at_s=0, action="unpause"),
                     undo=f"client I/O paused since {self._paused:g} s when {end}; unpaused")
        for (action, host), at in list(self._open.items()):
            self._do(Fault(at_s=0, action=action, host=host),
                     undo=f"{host or 'the cluster'} was left faulted ({at:g} s) when {end}; {action}")
        for daemon, at in list(self._out.items()):
            self._do(Fault(at_s=0, action="osd_in", daemon=daemon),
                     undo=f"{daemon} marked out at {at:g} s when {end}; marked in")


def faulted(events: list[dict[str, Any]]) -> bool:
    """Did these point events include a fault that ran?"""
    return any(e.get("kind") == "fault" and (e.get("data") or {}).get("outcome") not in (None, "not run")
               for e in events)
