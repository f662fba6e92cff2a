"""The fault actions beyond a signal or an `osd` command: a host's (fathom.hosts.impair), the failovers, and the
mClock profile. Each returns the fault's record (outcome, effect_ts, effect, and its own figures)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fathom.cluster.box import tbf
from fathom.cluster.journal import SETTING, Journal
from fathom.cluster.restore import Restorer, ceph_args
from fathom.errors import FathomError
from fathom.hosts import impair
from fathom.suite.faults import Fault

FAILOVER_WAIT_S = 120.0  # a failover not over by then is recorded as such
MCLOCK = "config osd osd_mclock_profile"


def _now(what: str) -> dict[str, Any]:
    return {"effect_ts": time.time(), "effect": what}


class Hosts:
    """The host actions of one run: its emulated hosts (the local cluster's box) and its server hosts (--server-host,
    a fathom.servers.named.ServersSpec)."""

    def __init__(self, local: Any | None, journal: Journal | None, servers: Any | None,
                 start: Callable[[str], Any] | None = None):
        self.local, self.journal, self.servers = local, journal, servers
        self.start = start  # starts a local cluster's daemon that is not running (fathom.run.faults.Executor.start)
        self._places: dict[str, impair.Place] | None = None

    def place(self, host: str) -> impair.Place:
        if self._places is None:
            box = ((self.local.state() or {}).get("box") if self.local is not None else None) or {}
            self._places = {**impair.server_places(self.servers), **impair.box_places(box)}
        p = self._places.get(host)
        if p is None:
            known = sorted({p.name for p in self._places.values()})
            raise FathomError(f"no host {host!r} to fault: " + (
                f"hosts: {', '.join(known)}" if known else "the cluster has no emulated hosts and no --server-host"),
                hint="name an emulated host (host2) or a host given with --server-host")
        return p

    def run(self, f: Fault) -> dict[str, Any]:
        a, why = f.action, f"{f.describe()} at {f.at_s:g} s"
        if a in ("host_down", "host_up"):
            return self._daemons(f, why)
        p = self.place(f.host or "")
        assert self.journal is not None
        if a == "nic_cap":
            impair.shape(p, tbf(f.rate or ""), self.journal, why)
            return {"outcome": "done", **_now(f"tbf {f.rate} on {p.name}'s {p.dev}")}
        if a == "netem":
            args = ["netem"] + (["delay", f"{f.delay_ms:g}ms"] if f.delay_ms else []) + \
                ([f"{f.jitter_ms:g}ms"] if f.jitter_ms else []) + (["loss", f"{f.loss_pct:g}%"] if f.loss_pct else [])
            impair.shape(p, args, self.journal, why)
            return {"outcome": "done", **_now(f"{' '.join(args)} on {p.name}'s {p.dev}")}
        if a == "partition":
            impair.cut(p, self.journal, why)
            return {"outcome": "done", "peers": p.peers,
                    **_now(f"blackhole routes on {p.name} to {', '.join(p.peers)}")}
        what = f"{p.name} routes" if a == "heal" else f"{p.name} {impair.interface(p)} qdisc"
        return self._put_back(what, a)

    def _put_back(self, what: str, action: str) -> dict[str, Any]:
        assert self.journal is not None
        entries = [e for e in self.journal.pending(impair.FAULT_KIND) if e.what == what]
        if not entries:
            return {"outcome": f"nothing to {action}: no fault of this run holds {what}"}
        for e in entries:
            why = impair.undo(e, self.start)
            self.journal.mark(e, why)
            if why is not None:
                raise FathomError(f"{action} {what}: {why}")
        return {"outcome": "done", **_now(f"{what} put back")}

    def _daemons(self, f: Fault, why: str) -> dict[str, Any]:
        if self.local is None:
            raise FathomError(f"{f.action} acts on the emulated hosts of fathom's local cluster")
        self.place(f.host or "")  # known, or refused naming the hosts
        places = (self.local.state() or {}).get("places") or {}
        daemons = [d for d in self.local.daemons() if (places.get(d.name) or {}).get("host") == f.host]
        if f.action == "host_up":
            return self._put_back(f"{f.host} daemons", "host_up")
        assert self.journal is not None
        mine = [d for d in daemons if d.running and self.local.owns(d)]  # a recycled pid is not ours to signal
        pids = impair.freeze(f.host or "", [d.name for d in daemons], mine, self.journal, why, f.mode == "kill",
                             str(self.local.root), str(self.local.conf_path))
        if f.mode == "kill":
            deadline = time.monotonic() + 10
            while any(d.running for d in mine) and time.monotonic() < deadline:
                time.sleep(0.05)
        state = "gone" if f.mode == "kill" else "stopped (SIGSTOP)"
        return {"outcome": "done", "pids": pids, "daemons": [d.name for d in daemons],
                **_now(f"pids {', '.join(map(str, pids))} {state}")}


def mgr_failover(ceph: Any) -> dict[str, Any]:
    """`ceph mgr fail` of the active mgr; the time until a mgr is active again (`ceph mgr stat`)."""
    before = ceph.ceph("mgr", "stat", timeout=30) or {}
    name = before.get("active_name")
    if not name:
        raise FathomError("no active mgr to fail")
    ceph.ceph("mgr", "fail", name, fmt_json=False, timeout=30)
    effect = _now(f"mgr.{name} failed (mgrmap epoch after {before.get('epoch')})")
    t0 = time.monotonic()
    while time.monotonic() - t0 < FAILOVER_WAIT_S:
        st = ceph.ceph("mgr", "stat", timeout=30) or {}
        if st.get("available") and int(st.get("epoch") or 0) > int(before.get("epoch") or 0):
            s = round(time.time() - effect["effect_ts"], 3)
            return {"outcome": "done", "failover_s": s, "active": st.get("active_name"), **effect,
                    "effect": effect["effect"] + f"; mgr.{st.get('active_name')} active {s:.1f} s later"}
        time.sleep(0.2)
    return {"outcome": f"no mgr active {FAILOVER_WAIT_S:.0f} s after the failure", "failover_s": None, **effect}


def mon_failover(ceph: Any, kill: Callable[[str], dict[str, Any]], start: Callable[[str], Any]) -> dict[str, Any]:
    """The leader mon SIGKILLed (fathom's local cluster: kill and start are fathom.run.faults.Executor's, by recorded
    pid); the time until a quorum answers again. One mon has no other to take over: it is started again at once,
    and the time is its restart's."""
    qs = ceph.ceph("quorum_status", timeout=30) or {}
    leader = f"mon.{qs.get('quorum_leader_name')}"
    mons = [m.get("name") for m in (qs.get("monmap") or {}).get("mons") or []]
    killed = kill(leader)
    if killed.get("outcome") != "done":
        raise FathomError(f"the leader {leader} was not killed: {killed.get('outcome')}")
    effect = _now(f"{leader} (leader, pid {killed.get('pid')}) gone")
    alone = len(mons) < 2
    if alone:
        start(leader)
    t0 = time.monotonic()
    while time.monotonic() - t0 < FAILOVER_WAIT_S:
        try:
            q = ceph.ceph("quorum_status", timeout=5) or {}
        except FathomError:
            continue
        if q.get("quorum_leader_name") and (alone or f"mon.{q['quorum_leader_name']}" != leader):
            s = round(time.time() - effect["effect_ts"], 3)
            how = "restarted (one mon: no other to take over)" if alone else f"new leader mon.{q['quorum_leader_name']}"
            return {"outcome": "done", "quorum_s": s, "mons": len(mons), **effect,
                    "effect": effect["effect"] + f"; quorum {s:.1f} s later, {how}"}
    return {"outcome": f"no quorum {FAILOVER_WAIT_S:.0f} s after the leader died", "quorum_s": None, **effect}


def mclock(ceph: Any, journal: Journal, profile: str) -> dict[str, Any]:
    """osd_mclock_profile set in the config db (journaled; put back by `mclock_reset` or the point's end). Said
    when an OSD schedules with another queue (wpq), where the profile changes nothing."""
    Restorer(ceph, journal).config_set("osd", "osd_mclock_profile", profile)
    effect = _now(f"osd_mclock_profile {profile} in the config db")
    queue = None
    try:  # the OSD's own value (ceph.conf counts; the config db alone does not know it)
        first = (ceph.ceph("osd", "ls", timeout=10) or [None])[0]
        got = ceph.ceph("tell", f"osd.{first}", "config", "get", "osd_op_queue", timeout=10) or {}
        queue = str(got.get("osd_op_queue") or "") or None
    except (FathomError, IndexError, AttributeError):
        pass
    if queue and queue != "mclock_scheduler":
        effect["effect"] += f"; the OSDs' op queue is {queue}: the profile has no effect there"
    return {"outcome": "done", "profile": profile, "op_queue": queue, **effect}


def mclock_reset(ceph: Any, journal: Journal) -> dict[str, Any]:
    entries = [e for e in journal.pending(SETTING) if e.what == MCLOCK]
    if not entries:
        return {"outcome": "nothing to put back: this run did not set osd_mclock_profile"}
    for e in entries:
        ceph.ceph(*ceph_args(e), fmt_json=False, timeout=60)
        journal.mark(e)
    return {"outcome": "done", **_now(f"osd_mclock_profile put back ({entries[-1].undo})")}
