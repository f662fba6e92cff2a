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

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from fathom.errors import UsageError
from fathom.units import parse_duration

LOCAL_ACTIONS = ("kill", "stop", "start", "restart")
CEPH_ACTIONS = ("osd_down", "osd_out", "osd_in", "pause", "unpause")
ACTIONS = LOCAL_ACTIONS + CEPH_ACTIONS
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
        if a in ("pause", "unpause"):
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

    def describe(self) -> str:
        return f"{self.action} {self.daemon}" if self.daemon else self.action


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
                      engine: str) -> list[tuple[int, str, str]]:
    """(fault index, field, what is wrong) for every problem of one workload's schedule."""
    out: list[tuple[int, str, str]] = []
    known = local_daemons(osds)
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
