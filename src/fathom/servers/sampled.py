"""The sampled hosts of a run together, whatever reaches them (SSH, a Kubernetes DaemonSet): each point's
window of their samples, their daemons attributed by the cluster's metadata, their losses said and flagged."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

from fathom.servers import hostsample
from fathom.servers.inventory import ClusterDaemon
from fathom.hosts.ssh import LOOP
from fathom.servers.attribution import Identities, Ours, attribute, identities, not_counted
from fathom.servers.named import ServersSpec
from fathom.servers.stream import SamplerStream

THREADS_SHOWN = 8  # per daemon sampled thread by thread


def _threads(stream: hostsample.HostStream, t_from: float, t_to: float, host: str) -> list[dict[str, Any]]:
    """An event per daemon sampled thread by thread (crimson-osd's reactors): its busiest threads over the
    point, % of one core each (a reactor near 100% is the OSD's limit, whatever the process total says)."""
    if not any("tasks" in p for s in stream.samples for p in s.get("procs", [])):
        return []
    out = []
    for name, d in hostsample.window(stream, t_from, t_to)["daemons"].items():
        tasks = [t for t in d.get("tasks") or [] if t["cpu_pct"] is not None][:THREADS_SHOWN]
        if tasks:
            out.append({"kind": "threads", "data": {"host": host, "daemon": name, "threads": tasks},
                        "message": f"{name} on {host}, busiest threads (% of one core): " + ", ".join(
                            f"{t['comm'] or t['tid']} {t['cpu_pct']:.0f}" for t in tasks)})
    return out


def _at(ts: float) -> str:
    """A moment as a full local time with its zone (a time of day alone names no day and no zone)."""
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def _when(ts: float, t0: float) -> str:
    """A moment as seconds into the point that began at t0 and as a full local time with its zone."""
    at = _at(ts)
    if ts >= t0:
        return f"{ts - t0:.1f} s into the point (at {at})"
    return f"{t0 - ts:.1f} s before the point began (at {at})"


class SampledHosts:
    """The run's sampled hosts (a subclass connects them and fills `hosts`), windowed per point."""

    source = "ssh"  # the records' `via`, and the `sources` event's source
    via = "over SSH"  # how the hosts are reached, as said
    lost_hint = "fathom tries to reach it again before the next point"

    def __init__(self, spec: ServersSpec, placed: dict[str, list[ClusterDaemon]], say: Any = None):
        self.spec, self.placed = spec, placed
        self.here: Identities = (0, {})  # the processes this host's own sampler counts
        self.ours = Ours()  # what ties a gateway or client on a sampled host to this cluster (its fsid)
        self.say = say or (lambda msg: None)
        self.events: list[dict[str, Any]] = []  # what happened between points, for the next point's events
        self.hosts: list[SamplerStream] = []

    def reconnect(self) -> None:
        """Reach each lost host again between points (a subclass's way); by default they stay lost."""

    def reached_again(self, h: SamplerStream, err: BaseException | None, back: str, not_back: str) -> bool:
        """After a try to sample a lost host again: said, and its loss forgotten with an event (`back`: what
        says so), or why it failed kept (`not_back`: what failed)."""
        if err is not None:
            h.reconnect_error = getattr(err, "message", None) or str(err) or type(err).__name__
            self.say(f"  {not_back} ({h.reconnect_error}): this point runs without it and is flagged")
            return False
        was, lost_at = h.lost, h.lost_at
        h.lost = h.lost_at = h.reconnect_error = None
        h.announced = False
        msg = f"{back} (lost at {_at(lost_at or time.time())}: {was}): sampled anew from this point on"
        self.say(f"  {msg}")
        self.events.append({"kind": "servers", "message": msg,
                            "data": {"host": h.name, "reconnected": True, "was_lost": was, "lost_at": lost_at}})
        return True

    def describe(self) -> dict[str, Any]:
        """What a run records of its sampled hosts (never key material)."""
        return {"source": self.source, "interval_s": self.spec.interval_s, "hosts": []}

    def close(self) -> None:
        """Stop sampling; remove what was made for it."""

    def announce(self, t0: float) -> None:
        """Say on the console, once, that a host was lost (the point that began at t0 is flagged for it)."""
        for h in self.hosts:
            if h.lost and not h.announced:
                h.announced = True
                self.say(f"  server host {h.name} lost {_when(h.lost_at or time.time(), t0)} ({h.lost}): this point "
                         "is flagged and its figures lack the host from then on; " + self.lost_hint)

    def covered(self) -> set[str]:
        """The metadata's hosts that a sampled host stands for."""
        return {m for h in self.hosts if (m := h.metadata_host(self.placed))}

    def window(self, t_from: float, t_to: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(per-interval records, events) over [t_from, t_to] on this host's clock, once every host that
        is still there has sent a sample past t_to."""
        wait = 2 * self.spec.interval_s + 1.0

        async def settle() -> list[bool]:
            return list(await asyncio.gather(*(h.wait_past(t_to, wait) for h in self.hosts)))

        arrived = LOOP.run(settle())
        records: list[dict[str, Any]] = []
        events, self.events = self.events, []
        covered: dict[str, Any] = {}
        seen: dict[str, tuple[Identities, Identities]] = {}  # host -> its processes', those it counted
        for h, ok in zip(self.hosts, arrived):
            pad = 1.5 * self.spec.interval_s
            win = [s for s in h.samples if t_from - pad <= s["ts"] <= t_to + pad]
            meta = h.metadata_host(self.placed)
            att = attribute([p for s in win for p in s.get("procs", [])], meta, self.placed, self.ours)
            seen[h.hostname] = (identities(h.header, win), identities(h.header, win, att.keep))
            lost = h.lost is not None and (h.lost_at or 0) <= t_to + pad
            if lost:  # its daemons were not sampled (from the loss on): that says nothing of whether they run
                att.missing = []
            if len(win) >= 2 and h.header is not None:
                kept = [{**s, "procs": [p for p in s.get("procs", []) if int(p["pid"]) in att.keep]} for s in win]
                stream = hostsample.HostStream(header=h.header, samples=kept)
                for r in hostsample.interval_samples(stream):
                    r["host"], r["via"] = h.hostname, self.source
                    if meta is None and r["kind"] == "host":  # none of the cluster's hosts: a client's figures
                        r["kind"] = "client_host"
                    records.append(r)
                events += _threads(stream, t_from, t_to, h.hostname)
            cost = None
            if len(win) >= 2 and win[-1]["mono"] > win[0]["mono"]:  # the sampler's own CPU there, % of one core
                cost = hostsample.rate(win[0].get("self_cpu_s"), win[-1].get("self_cpu_s"),
                                        win[-1]["mono"] - win[0]["mono"], 100.0)
            counted, left = hostsample.nics(win[-1].get("net") or {}) if win else ([], {})
            if not h.keep_net:
                left = {"*": "the sampler's pod has a network namespace of its own: the node's NICs are not seen"}
            covered[h.hostname] = {"metadata_host": meta, "daemons": att.found, "missing": att.missing,
                                   "foreign": att.foreign, "ambiguous": att.ambiguous, "samples": len(win),
                                   "sampler_cpu_pct": cost, "nics": {"counted": counted, "left_out": left},
                                   "lost": h.lost if lost else None}
            if lost:
                events.append(self._lost_event(h, meta, t_from))
            elif not ok:
                events.append({"kind": "server_late", "message": f"server host {h.name}: no sample after the "
                               f"point's end within {wait:g} s; its figures stop at its last sample",
                               "data": {"host": h.name, "hostname": h.hostname}})
            if meta is None:
                events.append({"kind": "servers", "message": f"server host {h.name} ({h.hostname}) holds no "
                               "daemon of this cluster by its metadata: not counted as one of the cluster's hosts "
                               "(server_hosts, host_cpu_pct, NIC figures), as a client host is not; if it is one, "
                               "its hostname or the address it was reached at must be its daemons'"})
            for name in att.missing:
                events.append({"kind": "servers", "message": f"{name}: the cluster's metadata places it on "
                               f"{meta}, but no process of that name runs on server host {h.name} (not running, "
                               "or named otherwise: the sampler reads `-i`/`--id`/`-n` or the cephadm unit)"})
            for name in att.ambiguous:
                events.append({"kind": "servers", "message": f"{name}: several processes on {h.name} have its "
                               "name and none the pid its addresses carry; all are counted"})
            h.trim(t_from - pad)
        for name, c in covered.items():
            c["foreign"] = not_counted(c["foreign"], seen[name][0], [v[1] for k, v in seen.items() if k != name]
                                       + [self.here])
        events.append({"kind": "sources", "message": f"server hosts {self.via}: {len(self.hosts)} sampled",
                       "data": {"source": self.source, "hosts": covered}})
        return records, events

    def _lost_event(self, h: SamplerStream, meta: str | None, t_from: float) -> dict[str, Any]:
        """The point's flag for a host lost during it (its figures partial) or before it and not reached again
        (none): what the sums over hosts lack."""
        daemons = sorted(d.name for d in self.placed.get(meta or "", []))
        at = h.lost_at or t_from
        partial = at >= t_from
        lacks = f"the sums over hosts (its daemons {', '.join(daemons)}, host CPU, NIC)" if daemons else \
            "the sums over hosts (host CPU, NIC)"
        if partial:
            msg = (f"server host {h.name} lost {_when(at, t_from)} ({h.lost}): its figures are partial, covering "
                   f"the point up to then; {lacks} lack it from then on; the other hosts' are whole")
        else:
            again = f"; not reached again before the point ({h.reconnect_error})" if h.reconnect_error else ""
            msg = (f"server host {h.name} lost {_when(at, t_from)} ({h.lost}){again}: none of its figures in this "
                   f"point; {lacks} lack it")
        return {"kind": "server_lost", "message": msg,
                "data": {"host": h.name, "hostname": h.hostname, "why": h.lost, "lost_at": h.lost_at,
                         "into_point_s": round(at - t_from, 3), "partial": partial, "daemons": daemons,
                         "reconnect_error": h.reconnect_error}}
