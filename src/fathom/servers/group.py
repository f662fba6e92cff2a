"""The run's server hosts together: opened, reconnected before points, windowed per point, closed."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from fathom.servers import capacity, inventory
from fathom.servers.inventory import ClusterDaemon
from fathom.cluster.local import Daemon
from fathom.cluster.journal import SAMPLER_KIND, Entry, Journal
from fathom.companion import Companion, Contribution, Live
from fathom.hosts.ssh import LOOP, key_error, raise_any, sha256_file
from fathom.errors import FathomError, UsageError
from fathom.hosts.clients import ClientHost

from fathom.servers.attribution import PLACED_KINDS, Ours, this_host_identities
from fathom.servers.host import Placed, ServerHost, remove_command
from fathom.servers.sampled import SampledHosts
from fathom.binaries import SAMPLER, sampler_path
from fathom.servers.named import SOURCE, ServersSpec, discovered


class Servers(SampledHosts):
    """Every server host of a run over SSH, connected, clocked and sampling (open), until close()."""

    hosts: list[ServerHost]  # type: ignore[assignment]

    def __init__(self, spec: ServersSpec, placed: dict[str, list[ClusterDaemon]], say: Any = None,
                 journal: Journal | None = None, run: str | None = None):
        super().__init__(spec, placed, say)
        self.journal = journal  # the run's undo journal: the sampler files fathom puts on hosts
        hosts = list(spec.hosts)
        if spec.discover:
            named = {h.host for h in hosts}
            hosts += [h for h in discovered(spec, placed) if h.host not in named]
        if not hosts:
            raise UsageError("servers: no host to sample: the cluster's metadata names none",
                             hint="name them with --server-host USER@HOST")
        opts = spec.ssh_opts()
        # each run's sampler in a directory of its own (its data tag), so no run removes another's; a kept one
        # is shared by the runs that keep it, and removed by none
        mine = None if spec.keep_sampler else run
        self.hosts = [ServerHost(h, opts, spec.interval_s, mine) for h in hosts]
        self.local: Path | None = None
        self.sha = ""
        self.version: str | None = None

    @classmethod
    def open(cls, spec: ServersSpec, placed: dict[str, list[ClusterDaemon]], say: Any = None,
             journal: Journal | None = None, run: str | None = None) -> Servers:
        """Connect to every host at once, install the sampler, check clocks, start sampling; HostError naming
        every host that failed (the others closed again). A sampler fathom uploads goes in a directory of the
        run's (`run`, its data tag: host.sampler_dir), is written in `journal` before it is, and removed at
        close() unless spec.keep_sampler."""
        s = cls(spec, placed, say, journal, run)
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
        if h.capacity is None:  # once per run: what each point's use is set against (fathom.analysis.bound)
            h.capacity = await capacity.remote(h.ssh)

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
            if not self.reached_again(h, err if isinstance(err, BaseException) else None,
                                      f"server host {h.name} answers again",
                                      f"server host {h.name} does not answer again"):
                h.ssh.close()

    def describe(self) -> dict[str, Any]:
        """What a run records of its server hosts (no key material)."""
        return {"source": SOURCE, "interval_s": self.spec.interval_s,
                "hosts": [{"name": h.name, "hostname": h.hostname,
                           "metadata_host": h.metadata_host(self.placed),
                           "clock_offset_s": round(h.offset_s, 6), "clock_rtt_s": round(h.rtt_s or 0.0, 6),
                           "sampler": (h.header or {}).get("version"), "key_file": h.ssh.spec.key_file,
                           "capacity": h.capacity}
                          for h in self.hosts]}

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
    servers: SampledHosts | None = None  # the hosts sampled over SSH or from a Kubernetes DaemonSet
    prometheus: Any = None  # fathom.servers.promquery.PrometheusSource: host figures of the hosts it scrapes
    here: str | None = None  # the metadata's name of this host, when it holds daemons of the cluster
    here_daemons: set[str] = field(default_factory=set)  # those this host's own sampler covers (not SSH's)
    here_host: str = "host"  # this host's host sample: a cluster host's ("host") or a client's ("client_host")
    env: dict[str, Any] = field(default_factory=dict)  # what the run records (servers, prometheus, here)
    metadata_errors: list[str] = field(default_factory=list)  # metadata commands that failed (not strict)
    ours: Ours = field(default_factory=Ours)  # what ties a gateway or client on this host to this run or cluster
    gateways_here: bool = True  # this host's gateways and clients are its own sampler's (no other source's)

    def local(self, candidates: list[Daemon]) -> list[Daemon]:
        """This host's processes of the daemons its own sampler covers, each picked among `candidates` (the
        Ceph processes here) by inventory.local_process, as `fathom cluster status` picks them: never every
        process of a name, which would count another cluster's mon.a on this host too; and its gateways and
        clients (ganesha, ceph-fuse, rbd-fuse) that `ours` ties to this run or cluster, no other."""
        out = []
        for d in self._here():
            proc, _ = inventory.local_process(d, candidates)
            if proc is not None:
                out.append(Daemon(name=d.name, kind=d.kind, pid=proc.pid))
        return out + [Daemon(name=c.name, kind=c.kind, pid=c.pid) for c in self._gateways(candidates, True)]

    def _gateways(self, candidates: list[Daemon], mine: bool) -> list[Daemon]:
        """This host's gateway and client processes that are (mine) or are not this run's or cluster's."""
        if not self.gateways_here:
            return []
        return [c for c in candidates if c.kind not in PLACED_KINDS and c.pid
                and self.ours.claims(c.pid, c.fsid, c.conf) == mine]

    def _here(self) -> list[ClusterDaemon]:
        return [d for ds in self.placed.values() for d in ds if d.name in self.here_daemons]

    def pick_here(self, candidates: list[Daemon]) -> list[Daemon]:
        """local(), recorded (env `here`: the processes counted, the daemons without one and why, and the
        processes here named as one of them that are not it) and handed to the SSH hosts, whose foreign
        processes are these ones when they share this host's PID namespace."""
        picked = self.local(candidates)
        pids: dict[str, int | None] = {}
        for d in picked:  # two gateways of one name (two ceph-fuse as client.admin): each by its pid
            pids[d.name if d.name not in pids else f"{d.name} (pid {d.pid})"] = d.pid
        missing = {}
        for d in self._here():
            if d.name not in pids:
                missing[d.name] = inventory.local_process(d, candidates)[1]
        others: dict[str, list[int]] = {}
        for c in candidates:
            if c.name in self.here_daemons and c.pid and c.pid != pids.get(c.name):
                others.setdefault(c.name, []).append(c.pid)
        for c in self._gateways(candidates, False):  # a gateway or client nothing ties to this run or cluster
            others.setdefault(c.name, []).append(c.pid)  # type: ignore[arg-type]
        self.env["here"] = {"host": self.here, "hostname": inventory.this_host().hostname, "daemons": pids,
                            "missing": missing, "not_counted": others,
                            **({"metadata_errors": self.metadata_errors} if self.metadata_errors else {})}
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
            local: list[Daemon] | None = None, journal: Journal | None = None, run: str = "run",
            strict: bool = True, started: list[int] | None = None) -> Coverage:
    """The placement of the cluster's daemons; the server hosts sampling when spec names any other than this
    one (the samplers fathom uploads written in `journal`, the run's), or the nodes from a DaemonSet named for
    `run` (the run's data tag) when spec.kubernetes; the Prometheus source for the cluster's
    hosts no server host stands for; this host's processes of the daemons placed here that no other source
    covers, picked among `local` (Coverage.pick_here).

    strict: metadata that cannot be read is an error (the server sources need it); otherwise (this host's
    daemons only) what could be read places them, and what could not is said and recorded (env `here`).
    started: the pids of the gateways and clients fathom started here (its local cluster's); with the cluster's
    fsid (the monmap's) and the run's conf, what makes a gateway or client the cluster's (attribution.Ours)."""
    raw, errors = inventory.gather_raw(ceph)
    hint = "the client key needs `mon 'allow r'` and `mgr 'allow r'`"
    if errors and strict:
        raise FathomError(f"the cluster's metadata, which places daemons on hosts, could not be read: "
                          f"{'; '.join(errors)}", hint=hint)
    if errors and say is not None:
        say(f"warning: part of the cluster's metadata could not be read ({'; '.join(errors)}): this host's daemons "
            f"it would place are not sampled ({hint})")
    placed = inventory.placement(raw)
    fsid = (raw.get("mon_dump") or {}).get("fsid") if isinstance(raw.get("mon_dump"), dict) else None
    conf = str(getattr(getattr(ceph, "conn", None), "conf", "") or "")
    confs = frozenset({conf, os.path.realpath(conf)} if conf else set())
    cov = Coverage(placed, metadata_errors=list(errors),
                   ours=Ours(fsid=fsid, confs=confs, pids=frozenset(started or ())))
    here = inventory.this_host()
    mine = [h for h, ds in placed.items() if here.claims(h, set().union(*(d.ips() for d in ds)))]
    cov.here = mine[0] if mine else None
    covered: set[str] = set()
    if spec is not None and spec.kubernetes is not None:  # the nodes sampled from a DaemonSet, this one too
        from fathom.servers.k8s import DaemonSetServers

        cov.servers = DaemonSetServers.open(spec, placed, run, say, journal)
    elif spec is not None:
        remote, here_too = _remote(spec, placed, here, mine, say)
        if remote or not here_too:  # none at all: Servers says the metadata names none
            cov.servers = Servers.open(spec.model_copy(update={"hosts": remote, "discover": False}), placed, say,
                                        journal, run)
    if cov.servers is not None:
        covered = cov.servers.covered()
        cov.env["servers"] = cov.servers.describe()
        cov.servers.ours = Ours(fsid=fsid)  # elsewhere a conf path may be another file, and fathom started nothing
    cov.gateways_here = cov.here is None or cov.here not in covered  # a DaemonSet's pod samples this node
    cov.here_daemons = {d.name for h in mine if h not in covered for d in placed[h]}
    cov.here_host = "host" if cov.here_daemons else "client_host"
    if local is not None:
        cov.pick_here(local)
    if prometheus:
        from fathom.servers import promquery

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

    def __init__(self, servers: SampledHosts):
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
