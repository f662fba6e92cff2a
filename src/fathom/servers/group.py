"""The run's server hosts together: opened, reconnected before points, windowed per point, closed."""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import time
from datetime import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from fathom import hostsample
from fathom.cluster import inventory
from fathom.cluster.inventory import ClusterDaemon
from fathom.cluster.local import Daemon
from fathom.cluster.journal import SAMPLER_KIND, Entry, Journal
from fathom.companion import Companion, Contribution, Live
from fathom.engines.ssh import LOOP, key_error, raise_any, sha256_file
from fathom.errors import FathomError, UsageError
from fathom.hosts import ClientHost

from fathom.servers.attribution import (Identities, attribute, identities, match_host, not_counted,
                                        this_host_identities)
from fathom.servers.host import Placed, ServerHost, remove_command
from fathom.servers.spec import SAMPLER, SOURCE, ServersSpec, discovered, sampler_path

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



class Servers:
    """Every server host of a run, connected, clocked and sampling (open), until close()."""

    def __init__(self, spec: ServersSpec, placed: dict[str, list[ClusterDaemon]], say: Any = None,
                 journal: Journal | None = None):
        self.spec, self.placed = spec, placed
        self.here: Identities = (0, {})  # the processes this host's own sampler counts
        self.say = say or (lambda msg: None)
        self.journal = journal  # the run's undo journal: the sampler files fathom puts on hosts
        self.events: list[dict[str, Any]] = []  # what happened between points, for the next point's events
        hosts = list(spec.hosts)
        if spec.discover:
            named = {h.host for h in hosts}
            hosts += [h for h in discovered(spec, placed) if h.host not in named]
        if not hosts:
            raise UsageError("servers: no host to sample: the cluster's metadata names none",
                             hint="name them with --server-host USER@HOST")
        opts = spec.ssh_opts()
        self.hosts = [ServerHost(h, opts, spec.interval_s) for h in hosts]
        self.local: Path | None = None
        self.sha = ""
        self.version: str | None = None

    @classmethod
    def open(cls, spec: ServersSpec, placed: dict[str, list[ClusterDaemon]], say: Any = None,
             journal: Journal | None = None) -> Servers:
        """Connect to every host at once, install the sampler, check clocks, start sampling; HostError naming
        every host that failed (the others closed again). A sampler fathom uploads is written in `journal`
        before it is, and removed at close() unless spec.keep_sampler."""
        s = cls(spec, placed, say, journal)
        raise_any([key_error(h.ssh) for h in s.hosts], lambda: None)  # every key file, before any connection
        s.say(f"connecting to {len(s.hosts)} server host(s): {', '.join(h.name for h in s.hosts)}")
        s.local = sampler_path()
        s.sha = sha256_file(s.local)
        version = subprocess.run([str(s.local), "--version"], capture_output=True, text=True,
                                 timeout=30).stdout.split()
        s.version = version[1] if len(version) > 1 else None

        async def look() -> list[Any]:
            return await asyncio.gather(*(h.look(s.sha) for h in s.hosts), return_exceptions=True)

        raise_any(LOOP.run(look()), s.close)
        s._own(s.hosts)  # on this thread: the journal is the store's

        async def ready() -> list[Any]:
            return await asyncio.gather(*(s._ready(h) for h in s.hosts), return_exceptions=True)

        raise_any(LOOP.run(ready()), s.close)
        return s

    async def _ready(self, h: ServerHost) -> None:
        assert self.local is not None
        await h.ready(self.local, self.sha, self.version, self.spec.max_clock_offset_s)

    def _own(self, hosts: list[ServerHost]) -> None:
        """Which sampler files are fathom's to remove: one not there before it looked (written in the journal
        before the upload), one an earlier attempt of this run put there (pending in the journal), or one this
        run put there before the host was lost. A file that was there otherwise is never removed."""
        for h in hosts:
            if h.path is None or h.ssh.spec.engine:
                continue
            what = f"{h.name}:{h.path}"
            if h.placed is not None and h.placed.path == h.path and h.had_file:
                continue  # this run's, still there after a reconnect
            if not h.had_file:
                h.placed = Placed(h.path, h.missing_dirs)
                if self.journal is not None and not self.spec.keep_sampler:
                    spec = h.ssh.spec
                    dest = f"{spec.user}@{spec.host}" if spec.user else spec.host
                    self.journal.write(Entry(SAMPLER_KIND, what, undo=shlex.join(
                        ["ssh", *(["-p", str(spec.port)] if spec.port != 22 else []), dest,
                         remove_command(h.path, h.missing_dirs)]), data={
                        "host": spec.host, "port": spec.port, "user": spec.user, "key_file": spec.key_file,
                        "known_hosts": self.spec.known_hosts, "path": h.path, "dirs": h.missing_dirs}))
            elif self.journal is not None and self.journal.holds(SAMPLER_KIND, what):
                e = next(e for e in self.journal.pending(SAMPLER_KIND) if e.what == what)
                h.placed = Placed(h.path, list(e.data.get("dirs") or []))
            else:
                h.placed = None

    def reconnect(self) -> None:
        """Reach each lost host again (between points, before the next one starts): one that answers is sampled
        anew from here on, one that does not stays lost, and the next point is flagged for it."""
        gone = [h for h in self.hosts if h.lost]
        if not gone:
            return
        bound = 2 * self.spec.connect_timeout_s + 10 + 2 * self.spec.interval_s

        async def look(h: ServerHost) -> None:
            h.fresh()
            await asyncio.wait_for(h.look(self.sha), bound)

        async def each(fn: Any, hosts: list[ServerHost]) -> list[Any]:
            return await asyncio.gather(*(fn(h) for h in hosts), return_exceptions=True)

        looked = LOOP.run(each(look, gone))
        found = [h for h, r in zip(gone, looked) if not isinstance(r, BaseException)]
        self._own(found)
        started = dict(zip(found, LOOP.run(each(lambda h: asyncio.wait_for(self._ready(h), bound), found))))
        for h, r in zip(gone, looked):
            err = r if isinstance(r, BaseException) else started.get(h)
            if isinstance(err, BaseException):
                h.reconnect_error = getattr(err, "message", None) or str(err) or type(err).__name__
                h.ssh.close()
                self.say(f"  server host {h.name} does not answer again ({h.reconnect_error}): this point runs "
                         "without it and is flagged")
                continue
            was, lost_at = h.lost, h.lost_at
            h.lost = h.lost_at = h.reconnect_error = None
            h.announced = False
            msg = (f"server host {h.name} answers again (lost at {_at(lost_at or time.time())}: {was}): "
                   "sampled anew from this point on")
            self.say(f"  {msg}")
            self.events.append({"kind": "servers", "message": msg,
                                "data": {"host": h.name, "reconnected": True, "was_lost": was, "lost_at": lost_at}})

    def announce(self, t0: float) -> None:
        """Say on the console, once, that a host was lost (the point that began at t0 is flagged for it)."""
        for h in self.hosts:
            if h.lost and not h.announced:
                h.announced = True
                self.say(f"  server host {h.name} lost {_when(h.lost_at or time.time(), t0)} ({h.lost}): this point "
                         "is flagged and its figures lack the host from then on; fathom tries to reach it again "
                         "before the next point")

    def describe(self) -> dict[str, Any]:
        """What a run records of its server hosts (no key material)."""
        return {"source": SOURCE, "interval_s": self.spec.interval_s,
                "hosts": [{"name": h.name, "hostname": h.hostname,
                           "metadata_host": match_host(self.placed, h.hostname, h.address),
                           "clock_offset_s": round(h.offset_s, 6), "clock_rtt_s": round(h.rtt_s or 0.0, 6),
                           "sampler": (h.header or {}).get("version"), "key_file": h.ssh.spec.key_file}
                          for h in self.hosts]}

    def covered(self) -> set[str]:
        """The metadata's hosts that a sampled host stands for."""
        return {m for h in self.hosts if (m := match_host(self.placed, h.hostname, h.address))}

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
            meta = match_host(self.placed, h.hostname, h.address)
            att = attribute([p for s in win for p in s.get("procs", [])], meta, self.placed)
            seen[h.hostname] = (identities(h.header, win), identities(h.header, win, att.keep))
            lost = h.lost is not None and (h.lost_at or 0) <= t_to + pad
            if lost:  # its daemons were not sampled (from the loss on): that says nothing of whether they run
                att.missing = []
            if len(win) >= 2 and h.header is not None:
                kept = [{**s, "procs": [p for p in s.get("procs", []) if int(p["pid"]) in att.keep]} for s in win]
                stream = hostsample.HostStream(header=h.header, samples=kept)
                for r in hostsample.interval_samples(stream):
                    r["host"], r["via"] = h.hostname, SOURCE
                    if meta is None and r["kind"] == "host":  # none of the cluster's hosts: a client's figures
                        r["kind"] = "client_host"
                    records.append(r)
                events += _threads(stream, t_from, t_to, h.hostname)
            cost = None
            if len(win) >= 2 and win[-1]["mono"] > win[0]["mono"]:  # the sampler's own CPU there, % of one core
                cost = hostsample.rate(win[0].get("self_cpu_s"), win[-1].get("self_cpu_s"),
                                        win[-1]["mono"] - win[0]["mono"], 100.0)
            counted, left = hostsample.nics(win[-1].get("net") or {}) if win else ([], {})
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
        events.append({"kind": "sources", "message": f"server hosts over SSH: {len(self.hosts)} sampled",
                       "data": {"source": SOURCE, "hosts": covered}})
        return records, events

    def _lost_event(self, h: ServerHost, meta: str | None, t_from: float) -> dict[str, Any]:
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

    def close(self) -> None:
        """Stop every sampler; remove the sampler files fathom put there (unless spec.keep_sampler), marking each
        done in the journal, and say what was removed or left."""
        remove = not self.spec.keep_sampler

        async def all_() -> list[Any]:
            return await asyncio.gather(*(h.close(remove) for h in self.hosts), return_exceptions=True)

        try:
            results = LOOP.run(all_(), timeout=15 + 2 * self.spec.connect_timeout_s)
        except Exception:  # noqa: BLE001 (closing: a host that does not answer is aborted)
            for h in self.hosts:
                h.ssh.close()
            results = ["closing timed out"] * len(self.hosts)
        removed = []
        for h, r in zip(self.hosts, results):
            if not remove or h.placed is None:
                continue
            if r is None:
                removed.append(h.name)
                if self.journal is not None:
                    self.journal.drop(SAMPLER_KIND, f"{h.name}:{h.placed.path}")
            else:
                self.say(f"warning: {SAMPLER} left at {h.placed.path} on server host {h.name}: {r}"
                         + ("; the run's journal keeps it: `fathom run --resume` removes it" if self.journal else ""))
        if removed:
            self.say(f"removed {SAMPLER} from {len(removed)} server host(s) ({', '.join(removed)}); "
                     "--keep-sampler keeps it")


@dataclass
class Coverage:
    """Which source samples which of the cluster's hosts, from the metadata's placement."""

    placed: dict[str, list[ClusterDaemon]]
    servers: Servers | None = None  # the hosts sampled over SSH
    prometheus: Any = None  # fathom.promquery.PrometheusSource: host figures of the hosts it scrapes
    here: str | None = None  # the metadata's name of this host, when it holds daemons of the cluster
    here_daemons: set[str] = field(default_factory=set)  # those this host's own sampler covers (not SSH's)
    here_host: str = "host"  # this host's host sample: a cluster host's ("host") or a client's ("client_host")
    env: dict[str, Any] = field(default_factory=dict)  # what the run records (servers, prometheus, here)

    def local(self, candidates: list[Daemon]) -> list[Daemon]:
        """This host's processes of the daemons its own sampler covers, each picked among `candidates` (the
        Ceph processes here) by inventory.local_process, as `fathom cluster status` picks them: never every
        process of a name, which would count another cluster's mon.a on this host too."""
        out = []
        for d in self._here():
            proc, _ = inventory.local_process(d, candidates)
            if proc is not None:
                out.append(Daemon(name=d.name, kind=d.kind, pid=proc.pid))
        return out

    def _here(self) -> list[ClusterDaemon]:
        return [d for ds in self.placed.values() for d in ds if d.name in self.here_daemons]

    def pick_here(self, candidates: list[Daemon]) -> list[Daemon]:
        """local(), recorded (env `here`: the processes counted, the daemons without one and why, and the
        processes here named as one of them that are not it) and handed to the SSH hosts, whose foreign
        processes are these ones when they share this host's PID namespace."""
        picked = self.local(candidates)
        pids = {d.name: d.pid for d in picked}
        missing = {}
        for d in self._here():
            if d.name not in pids:
                missing[d.name] = inventory.local_process(d, candidates)[1]
        others: dict[str, list[int]] = {}
        for c in candidates:
            if c.name in self.here_daemons and c.pid and c.pid != pids.get(c.name):
                others.setdefault(c.name, []).append(c.pid)
        self.env["here"] = {"host": self.here, "hostname": inventory.this_host().hostname, "daemons": pids,
                            "missing": missing, "not_counted": others}
        if self.servers is not None:
            self.servers.here = this_host_identities([p for p in pids.values() if p])
        return picked

    def companions(self, say: Any = None) -> list[Companion]:
        """say: the console during points (a lost host is said there when it is seen)."""
        if self.servers is not None and say is not None:
            self.servers.say = say
        out: list[Companion] = [ServerSource(self.servers)] if self.servers is not None else []
        return out + ([self.prometheus] if self.prometheus is not None else [])

    def close(self) -> None:
        if self.servers is not None:
            self.servers.close()


def _remote(spec: ServersSpec, placed: dict[str, list[ClusterDaemon]], here: inventory.ThisHost,
            mine: list[str], say: Any) -> tuple[list[ClientHost], list[str]]:
    """(the hosts to sample over SSH, those left out as this host): fathom's own host is sampled here from
    /proc whether the metadata names it (`cluster`) or a --server-host is at one of its addresses."""
    hosts, local = [], []
    for h in spec.hosts:
        if h.host == "localhost" or h.host in here.addresses:
            local.append(h.host)
        else:
            hosts.append(h)
    if spec.discover:
        named = {h.host for h in spec.hosts}
        hosts += [h for h in discovered(spec, {n: ds for n, ds in placed.items() if n not in mine})
                  if h.host not in named]
        local += mine
    if local and say is not None:
        say(f"{', '.join(local)}: this host, whose daemons fathom samples here from /proc, not over SSH")
    return hosts, local


def connect(ceph: Any, spec: ServersSpec | None, prometheus: str | None, say: Any,
            local: list[Daemon] | None = None, journal: Journal | None = None) -> Coverage:
    """The placement of the cluster's daemons; the server hosts sampling when spec names any other than this
    one (the samplers fathom uploads written in `journal`, the run's); the Prometheus source for the cluster's
    hosts no server host stands for; this host's processes of the daemons placed here that no other source
    covers, picked among `local` (Coverage.pick_here)."""
    raw, errors = inventory.gather_raw(ceph)
    if errors:
        raise FathomError(f"the cluster's metadata, which places daemons on hosts, could not be read: "
                          f"{'; '.join(errors)}", hint="the client key needs `mon 'allow r'` and `mgr 'allow r'`")
    placed = inventory.placement(raw)
    cov = Coverage(placed)
    here = inventory.this_host()
    mine = [h for h, ds in placed.items() if here.claims(h, set().union(*(d.ips() for d in ds)))]
    cov.here = mine[0] if mine else None
    covered: set[str] = set()
    if spec is not None:
        remote, here_too = _remote(spec, placed, here, mine, say)
        if remote or not here_too:  # none at all: Servers says the metadata names none
            cov.servers = Servers.open(spec.model_copy(update={"hosts": remote, "discover": False}), placed, say,
                                        journal)
            covered = cov.servers.covered()
            cov.env["servers"] = cov.servers.describe()
    cov.here_daemons = {d.name for h in mine if h not in covered for d in placed[h]}
    cov.here_host = "host" if cov.here_daemons else "client_host"
    if local is not None:
        cov.pick_here(local)
    if prometheus:
        from fathom import promquery

        try:
            cov.prometheus, cov.env["prometheus"] = promquery.connect(prometheus, sorted(placed), covered)
        except BaseException:
            cov.close()
            raise
        if cov.here is None or cov.here in cov.env["prometheus"]["hosts"]:  # its figures stand for this host's
            cov.here_host = "client_host"
    return cov


class ServerSource(Companion):
    """The server hosts' records over each point (see Servers.window)."""

    def __init__(self, servers: Servers):
        self.servers = servers
        self._t0 = 0.0

    def start(self, live: Live) -> None:
        self.servers.reconnect()  # a host lost earlier: sampled again if it answers, else this point is flagged
        self._t0 = time.time()
        self.servers.announce(self._t0)

    def on_interval(self, rec: dict[str, Any]) -> None:
        self.servers.announce(self._t0)

    def stop(self) -> Contribution:
        self.servers.announce(self._t0)
        records, events = self.servers.window(self._t0, time.time())
        return Contribution(samples=records, events=events, metrics={
            "server_hosts_lost": sum(1 for e in events if e["kind"] == "server_lost")})
