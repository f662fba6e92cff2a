"""Faults during load: a workload's `faults:` schedule, run against the cluster on the engine's clock.

    faults:
      - {at_s: 20, action: kill, daemon: osd.1}      # SIGKILL by the pid fathom recorded
      - {at_s: 60, action: start, daemon: osd.1}

`daemon:` was called `target:` before; schedules that use the former name still load.

`at_s` is on the engine's clock: `t` of its interval records, seconds from the
start of the engine's main phase (the ramp included). The clock is read from the
first interval record (its `ts - t`), about a second in; a fault due before that
runs when that record arrives. Its event records when it really ran.

Actions:
    kill       SIGKILL a daemon, by the pid fathom recorded when it started it   (local cluster)
    stop       SIGTERM a daemon and wait until it has exited                       (local cluster)
    start      start a daemon of the cluster that is not running                   (local cluster)
    restart    stop, then start (e.g. `daemon: rgw`, or `mds.a`)                   (local cluster)
    osd_down, osd_out, osd_in    `ceph osd down|out|in N`                           (any cluster)
    pause, unpause               `ceph osd pause|unpause`: all client I/O held     (any cluster)
    mgr_failover                 `ceph mgr fail`: time until a mgr is active again  (any cluster)
    mon_failover                 the leader mon SIGKILLed: time to a new quorum     (local cluster)
    mclock       `osd_mclock_profile` set to `profile:` (high_client_ops, balanced, high_recovery_ops) (any cluster)
    mclock_reset                 osd_mclock_profile as it was before               (any cluster)

A host's actions (`host:` an emulated host of `cluster: {hosts: N}`, `host2`; or, for the network ones, a server
host given with --server-host, by its name or address: tc and ip over SSH, as root there):
    host_down    every daemon of the host frozen (SIGSTOP; `mode: kill`: SIGKILL)   (emulated hosts)
    host_up      the host's daemons continued (or started again)                   (emulated hosts)
    nic_cap      the host's interface sends at most `rate:` (tc tbf: 1gbit, 200mbit)
    netem        delay (`delay_ms`, `jitter_ms`) and loss (`loss_pct`) on what the host sends (tc netem)
    link_reset   the host's interface as it was before nic_cap or netem
    partition    the host cut off from the cluster's other hosts (a blackhole route to each), clients still reach it
    heal         those routes removed

What a host action or mclock changes is written to the run's undo journal before it is made and put back when the
point ends (`host_up`, `heal`, `link_reset`, the profile before), also by `fathom cluster restore` after a kill -9.

An attached cluster's daemons are not fathom's: only the commands Ceph offers are
allowed there. The FaultCompanion runs the schedule on its own thread, records
each fault as an event (kind "fault": engine time, action, daemon, outcome, pids)
and leaves nothing broken when the point ends: a daemon the schedule killed or
stopped and that is still down is started again, a pause is undone, an OSD marked
out is marked in, each with an event saying so. Only pids of the local cluster's
own daemons (fathom started them) are ever signalled.
"""


from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from fathom.errors import UsageError
from fathom.units import TC_RATE, tc_norm
from fathom.units import parse_duration

LOCAL_ACTIONS = ("kill", "stop", "start", "restart", "mon_failover")
CEPH_ACTIONS = ("osd_down", "osd_out", "osd_in", "pause", "unpause", "mgr_failover", "mclock", "mclock_reset")
BOX_ACTIONS = ("host_down", "host_up")  # the daemons of an emulated host: fathom's own
LINK_ACTIONS = ("nic_cap", "netem", "link_reset", "partition", "heal")  # an emulated host, or a server host over SSH
HOST_ACTIONS = BOX_ACTIONS + LINK_ACTIONS
ACTIONS = LOCAL_ACTIONS + CEPH_ACTIONS + HOST_ACTIONS
NO_DAEMON = ("pause", "unpause", "mgr_failover", "mon_failover", "mclock", "mclock_reset") + HOST_ACTIONS
EXTRA_FIELDS = ("host", "mode", "rate", "delay_ms", "jitter_ms", "loss_pct", "profile")
MCLOCK_PROFILES = ("high_client_ops", "balanced", "high_recovery_ops")
# what puts each host fault back: the action that undoes it, run at the point's end when the schedule did not
UNDO = {"host_down": "host_up", "nic_cap": "link_reset", "netem": "link_reset", "partition": "heal",
        "mclock": "mclock_reset"}
DAEMON_KINDS = ("osd", "mon", "mgr", "mds", "rgw")
RECOVERY_GATE_S = 900.0  # the health gate after a point with faults waits at least this long for a clean cluster
STOP_WAIT_S = 30.0  # a stopped daemon is SIGKILLed if it has not exited by then


class Fault(BaseModel):
    """One scheduled action."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    at_s: float
    action: Literal[ACTIONS]  # type: ignore[valid-type]
    # osd.1, mon.a, mgr.x, mds.a, rgw; osd.N for osd_*; none for pause. `target`: its former name, still read
    daemon: str | None = Field(None, validation_alias=AliasChoices("daemon", "target"))
    host: str | None = None  # a host action's host: host2 (emulated), or a --server-host host's name or address
    mode: Literal["freeze", "kill"] = "freeze"  # host_down: SIGSTOP (a hung host) or SIGKILL (a crashed one)
    rate: str | None = None  # nic_cap: a tc rate (1gbit, 200mbit)
    delay_ms: float | None = Field(None, ge=0, le=60000)  # netem
    jitter_ms: float | None = Field(None, ge=0, le=60000)
    loss_pct: float | None = Field(None, ge=0, le=100)
    profile: Literal[MCLOCK_PROFILES] | None = None  # type: ignore[valid-type]  # mclock

    @field_validator("at_s", mode="before")
    @classmethod
    def _at(cls, v: Any) -> float:
        try:
            return parse_duration(v, "at_s")
        except UsageError:
            raise ValueError("expected seconds on the engine's clock, such as 20 or 20s") from None

    @field_validator("daemon", mode="before")
    @classmethod
    def _daemon(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            return f"osd.{v}"  # `daemon: 1` for an osd_* action
        return v

    @model_validator(mode="after")
    def _shape(self) -> Fault:
        a, t = self.action, self.daemon
        self._params()
        if a in HOST_ACTIONS:
            if t is not None or not self.host:
                raise ValueError(f"{a} acts on a host: give host (host2, or a --server-host host), not daemon")
        elif self.host is not None:
            raise ValueError(f"{a} takes no host (host actions: {', '.join(HOST_ACTIONS)})")
        if a in NO_DAEMON:
            if t is not None:
                raise ValueError(f"{a} acts on the whole cluster: leave out daemon ({t!r})")
        elif t is None:
            raise ValueError(f"{a} needs a daemon ({'osd.N' if a.startswith('osd_') else 'such as osd.1'})")
        elif a.startswith("osd_"):
            if osd_id(t) is None:
                raise ValueError(f"{a} needs an OSD as daemon (osd.N), not {t!r}")
        elif daemon_kind(t) is None:
            raise ValueError(f"{t!r} is not a daemon name; expected osd.N, mon.X, mgr.X, mds.X or rgw")
        return self

    @model_serializer(mode="wrap")
    def _compact(self, handler: Any) -> dict[str, Any]:
        """Host and mClock parameters only where given: a schedule without them dumps (and keys its points) as
        before they existed."""
        d = handler(self)
        return {k: v for k, v in d.items() if not (k in EXTRA_FIELDS and v in (None, "freeze"))}

    def _params(self) -> None:
        """Each action's own parameters, and only its own."""
        a = self.action
        own = {"nic_cap": ("rate",), "netem": ("delay_ms", "jitter_ms", "loss_pct"), "mclock": ("profile",)}.get(a, ())
        for name in ("rate", "delay_ms", "jitter_ms", "loss_pct", "profile"):
            if getattr(self, name) is not None and name not in own:
                raise ValueError(f"{name} is not a parameter of {a}")
        if a == "nic_cap":
            if not self.rate or not TC_RATE.match(tc_norm(self.rate)):
                raise ValueError(f"nic_cap needs rate: a tc rate such as 1gbit or 200mbit, not {self.rate!r}")
        if a == "netem" and not (self.delay_ms or self.loss_pct):
            raise ValueError("netem needs delay_ms, loss_pct or both")
        if a == "netem" and self.jitter_ms and not self.delay_ms:
            raise ValueError("netem's jitter_ms varies a delay: give delay_ms too")
        if a == "mclock" and self.profile is None:
            raise ValueError(f"mclock needs profile: one of {', '.join(MCLOCK_PROFILES)}")
        if self.mode != "freeze" and a != "host_down":
            raise ValueError(f"mode is host_down's (freeze or kill), not {a}'s")

    def describe(self) -> str:
        what = self.daemon or self.host
        extra = {"nic_cap": self.rate, "mclock": self.profile,
                 "host_down": "killed" if self.mode == "kill" else None,
                 "netem": ", ".join(x for x in (
                     f"{self.delay_ms:g} ms" if self.delay_ms else "",
                     f"± {self.jitter_ms:g} ms" if self.jitter_ms else "",
                     f"{self.loss_pct:g}% loss" if self.loss_pct else "") if x)}.get(self.action)
        return " ".join(x for x in (self.action, what, f"({extra})" if extra else "") if x)


def osd_id(name: str) -> int | None:
    kind, _, ident = name.partition(".")
    return int(ident) if kind == "osd" and ident.isdigit() else None


def daemon_kind(name: str) -> str | None:
    if name == "rgw" or name.startswith("client.rgw"):
        return "rgw"
    kind, _, ident = name.partition(".")
    return kind if kind in DAEMON_KINDS and ident else None


# ---- checks of a suite's schedules (spec.py reports them with file:line) --------------------

def local_daemons(osds: int) -> list[str]:
    """The daemons of a suite's local cluster (fathom.cluster.local: one mon, one mgr, the OSDs)."""
    return ["mon.a", "mgr.x"] + [f"osd.{i}" for i in range(osds)]


def schedule_problems(faults: list[Fault], cluster_kind: str, osds: int, end_s: float, needs_cluster: bool,
                      engine: str, hosts: int | None = None) -> list[tuple[int, str, str]]:
    """(fault index, field, what is wrong) for every problem of one workload's schedule; hosts: the local
    cluster's emulated hosts (None: one host, no box)."""
    out: list[tuple[int, str, str]] = []
    known = local_daemons(osds)
    names = [f"host{i + 1}" for i in range(hosts or 0)]
    for j, f in enumerate(faults):
        what = f"fault {f.describe()} at {f.at_s:g} s"
        if not needs_cluster:
            out.append((j, "action", f"{what}: the workload drives no Ceph cluster, so there is nothing to fault"))
            continue
        if f.at_s > end_s:
            out.append((j, "at_s", f"{what} is past the point's end ({end_s:g} s: runtime plus ramp_time; at_s is "
                                   "on the engine's clock, from its start)"))
        if cluster_kind == "attached" and f.action in LOCAL_ACTIONS:
            out.append((j, "action", f"{what}: an attached cluster's daemons are not fathom's to {f.action} (it "
                                     f"knows no pids there); attached clusters allow {', '.join(CEPH_ACTIONS)}"))
        elif cluster_kind == "attached" and f.action in BOX_ACTIONS:
            out.append((j, "action", f"{what}: an attached cluster's daemons are not fathom's to stop; {f.action} "
                                     "acts on the emulated hosts of a local cluster (cluster: {hosts: N}); on "
                                     "attached server hosts: partition, nic_cap, netem"))
        elif cluster_kind == "local" and f.host is not None and f.host not in names:
            out.append((j, "host", f"{what}: " + (
                f"the suite's local cluster has no host {f.host!r}{did_you_mean(f.host, names)} (hosts: "
                f"{', '.join(names)})" if names else "the suite's local cluster is one host: emulated hosts "
                "come with cluster: {hosts: N}")))
        elif cluster_kind == "local" and f.daemon is not None and ceph_name(f.daemon) not in known:
            out.append((j, "daemon", f"{what}: the suite's local cluster has no daemon {f.daemon!r}"
                                     f"{did_you_mean(f.daemon, known)} (daemons: {', '.join(known)})"))
    if faults and engine not in ("fathom-engine",):
        out.append((0, "action", f"faults run on fathom-engine's interval clock; this workload runs on {engine}"))
    return out


def ceph_name(daemon: str) -> str:
    return "client.rgw.fathom" if daemon == "rgw" else daemon


def did_you_mean(word: str, known: list[str]) -> str:
    close = difflib.get_close_matches(word, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
