"""Server hosts: the cluster's hosts sampled over SSH by fathom-sampler, on the point's timeline.

    fathom run SUITE --conf /etc/ceph/ceph.conf --server-host root@10.0.0.21 --server-host root@10.0.0.22
    fathom run SUITE --conf ... --server-host cluster        # every host the cluster's metadata names

Each host gets the sampler binary (uploaded by SFTP when missing or different, hash-checked, as client hosts
get the engine; it links no Ceph library, so cephadm and Rook hosts run it), started once for the run:
`fathom-sampler --interval 1` streams raw cumulative counters over its SSH channel until fathom stops it by
pid (or, fathom gone, until its next write finds nobody reading). Host keys follow the client hosts' rules.

- Clocks: each host's offset to this one is measured over SSH before sampling (the reply with the shortest
  round trip; good to half of it) and every sample is moved onto this host's clock by it. An offset beyond
  `max_clock_offset_s` is an error naming the fix (sync the clocks).
- Attribution: a host is matched to the cluster's metadata by its hostname or the address fathom reached it
  at. Only the daemons the metadata places on that host count there, never what its /proc shows: a process
  named osd.1 on a host the metadata does not put osd.1 on is another cluster's (listed as `foreign`). Of
  several processes with one name, the one whose pid the daemon's addresses carry (their nonce) is taken.
  Daemons the metadata places on a host where no process has their name are `missing`, with why.
- Loss: a host whose connection or sampler ends mid-run is flagged in each point it touches (an event,
  `server_lost`) and its samples up to the loss are kept; the other hosts go on.

The companion (ServerSource) hands each point its hosts' per-interval records (hostsample.interval_samples:
telemetry.summarize reads them, per host, then summed) tagged `via: ssh`, and an event saying what it
covered and what was missing.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fathom import hostsample
from fathom.cluster import inventory
from fathom.cluster.inventory import UNKNOWN_HOST, ClusterDaemon
from fathom.companion import Companion, Contribution, Live
from fathom.engines.ssh import LOOP, HostError, SshHost, key_error, raise_any, sha256_file
from fathom.errors import FathomError, UsageError
from fathom.hosts import KEY_FIX, ClientHost, ClientsSpec, check_key_files, key_file_problem, parse_client, validated

SOURCE = "ssh"
SAMPLER = "fathom-sampler"
DISCOVER = "cluster"  # --server-host cluster: every host of the cluster's metadata
CLOCK_PINGS = 5
# daemon kinds the cluster's metadata places; others the sampler finds (ganesha, FUSE) count where they run
PLACED_KINDS = ("osd", "mon", "mgr", "mds", "rgw")
THREADS_SHOWN = 8  # per daemon sampled thread by thread


class ServersSpec(BaseModel):
    """The cluster's hosts to sample over SSH (`servers:` in a suite; --server-host on the command line)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    hosts: list[ClientHost] = Field(default_factory=list)  # user@host[:port], or mappings as client hosts
    discover: bool = False  # also every host the cluster's metadata names, at its first address
    user: str | None = None  # for discovered hosts
    key_file: str | None = None  # for discovered hosts
    addresses: dict[str, str] = Field(default_factory=dict)  # metadata host name -> where SSH reaches it
    known_hosts: str | None = None
    accept_new_host_keys: bool = False
    connect_timeout_s: float = Field(10.0, gt=0, le=300)
    interval_s: float = Field(1.0, ge=0.1, le=60)
    max_clock_offset_s: float = Field(2.0, gt=0, le=3600)

    def ssh_opts(self) -> ClientsSpec:
        return ClientsSpec(known_hosts=self.known_hosts, accept_new_host_keys=self.accept_new_host_keys,
                           connect_timeout_s=self.connect_timeout_s)


def servers_file(path: str) -> ServersSpec:
    """A servers file: YAML with ServersSpec's fields (hosts as user@host[:port] or mappings, discover, user,
    key_file, addresses: {metadata host name: address}, ...), or a list of hosts, or one host per line."""
    import yaml

    try:
        text = Path(path).expanduser().read_text()
        data = yaml.safe_load(text)
    except OSError as exc:
        raise UsageError(f"--server-hosts-file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--server-hosts-file {path}: not YAML: {exc}") from None
    if isinstance(data, str) or data is None:
        data = [ln.split("#", 1)[0].strip() for ln in text.splitlines() if ln.split("#", 1)[0].strip()]
    if isinstance(data, list):
        data = {"hosts": data}
    if not isinstance(data, dict):
        raise UsageError(f"--server-hosts-file {path}: expected a mapping of server options or a list of hosts")
    hosts, discover = _hosts(data.get("hosts") or [], f"--server-hosts-file {path}")
    check_key_files([*hosts, {"host": "key_file", "key_file": data.get("key_file")}], f"--server-hosts-file {path}")
    return validated(ServersSpec, {**data, "hosts": hosts, "discover": data.get("discover") or discover},
                     f"--server-hosts-file {path}")


def _hosts(items: list[Any], where: str) -> tuple[list[Any], bool]:
    """(hosts as ClientHost fields, whether `cluster` asked for discovery) of a list of user@host[:port]
    strings or mappings."""
    out, discover = [], False
    for h in items:
        if h == DISCOVER:
            discover = True
            continue
        try:
            out.append(parse_client(h) if isinstance(h, str) else h)
        except ValueError as exc:
            raise UsageError(f"{where}: {exc}".replace("client host", "server host")) from None
    return out, discover


def servers_from_args(hosts: list[str] | None, key_file: str | None = None, known_hosts: str | None = None,
                      accept_new: bool = False, base: ServersSpec | None = None) -> ServersSpec | None:
    """--server-host (repeatable; `cluster` discovers) over a servers file's; None when nothing names one."""
    data: dict[str, Any] = base.model_dump() if base is not None else {}
    if hosts:
        data["hosts"], discover = _hosts(hosts, "--server-host")
        data["discover"] = data.get("discover") or discover
    if not data or not (data.get("hosts") or data.get("discover")):
        return None
    if key_file:
        if why := key_file_problem(key_file):
            raise UsageError(f"--server-key: {why}", hint=KEY_FIX)
        data["key_file"] = key_file
        data["hosts"] = [{**h, "key_file": h.get("key_file") or key_file} for h in data.get("hosts", [])]
    if known_hosts:
        data["known_hosts"] = known_hosts
    if accept_new:
        data["accept_new_host_keys"] = True
    return validated(ServersSpec, data, "servers")


def sampler_path() -> Path:
    """The sampler binary built with the engine (static: it runs whatever the host's C library)."""
    from fathom.engines.fathom_engine import engine_path, sampler_beside

    p = sampler_beside(engine_path())
    if not p.exists():
        raise FathomError(f"{p} is missing: the server hosts' sampler is built with the engine",
                          hint="run `make engine` (or `make install`)")
    return p


def discovered(spec: ServersSpec, placed: dict[str, list[ClusterDaemon]]) -> list[ClientHost]:
    """The metadata's hosts as SSH hosts: at spec.addresses[name], else the first address its daemons have."""
    out = []
    for name, daemons in placed.items():
        if name == UNKNOWN_HOST:
            continue
        addr = spec.addresses.get(name)
        if addr is None:
            ips = sorted({a.ip for d in daemons for vec in d.addrs.values() for a in vec
                          if not a.ip.startswith("127.") and a.ip != "::1"})
            addr = ips[0] if ips else name
        out.append(ClientHost(host=addr, user=spec.user, key_file=spec.key_file))
    return out


# ---- attribution (pure) -------------------------------------------------------------------------------

@dataclass
class Attribution:
    """Which of a host's sampled processes count for it."""

    metadata_host: str | None  # the metadata's name of this host (None: it holds no daemon of the cluster)
    keep: set[int] = field(default_factory=set)  # pids that count
    found: dict[str, list[int]] = field(default_factory=dict)  # daemon -> its pids here
    missing: list[str] = field(default_factory=list)  # placed here by the metadata, no process of that name
    foreign: dict[str, list[int]] = field(default_factory=dict)  # processes of daemons placed elsewhere
    ambiguous: list[str] = field(default_factory=list)  # several processes of one name, none by pid: all counted


def match_host(placed: dict[str, list[ClusterDaemon]], hostname: str, address: str) -> str | None:
    """The metadata's name for a sampled host: by its hostname (short names equal), else by the address SSH
    reached it at being one of its daemons' addresses."""
    short = hostname.split(".")[0]
    for name in placed:
        if name != UNKNOWN_HOST and name.split(".")[0] == short:
            return name
    for name, daemons in placed.items():
        if any(address in d.ips() for d in daemons):
            return name
    return None


def attribute(procs: list[dict[str, Any]], metadata_host: str | None,
              placed: dict[str, list[ClusterDaemon]]) -> Attribution:
    """The processes (a sample's `procs`, any number of samples' worth) that count for a host."""
    here = {_key(d.name): d for d in placed.get(metadata_host or "", [])} if metadata_host else {}
    by_name: dict[str, set[int]] = {}
    kinds: dict[str, str] = {}
    for p in procs:
        by_name.setdefault(p["daemon"], set()).add(int(p["pid"]))
        kinds[p["daemon"]] = p["kind"]
    out = Attribution(metadata_host)
    for name, pids in sorted(by_name.items()):
        d = here.get(_key(name))
        if d is None:
            if kinds[name] in PLACED_KINDS and placed:
                out.foreign[name] = sorted(pids)
            else:  # not a daemon the metadata places (ganesha, a FUSE client): it counts where it runs
                out.keep |= pids
                out.found[name] = sorted(pids)
            continue
        chosen = pids & d.pids or pids
        if len(chosen) > 1:
            out.ambiguous.append(name)
        out.keep |= chosen
        out.found[name] = sorted(chosen)
    found = {_key(n) for n in out.found}
    out.missing = sorted(d.name for k, d in here.items() if k not in found)
    return out


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


def _when(ts: float, t0: float) -> str:
    """A moment as seconds into the point that began at t0 and as a full local time with its zone (a time of
    day alone names no day and no zone)."""
    at = datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")
    if ts >= t0:
        return f"{ts - t0:.1f} s into the point (at {at})"
    return f"{t0 - ts:.1f} s before the point began (at {at})"


def _key(name: str) -> str:
    """A daemon's name as both sides can write it: RGW is client.rgw.ID in the service map and its admin
    socket, rgw.ID in a cephadm unit."""
    return name.removeprefix("client.")


def _seconds(text: str, host: str) -> float:
    """Epoch seconds as a host printed them (a locale may write a decimal comma)."""
    try:
        return float(text.strip().replace(",", "."))
    except ValueError:
        raise HostError(f"server host {host}: a clock reading printed {text.strip()[:40]!r}, not seconds "
                        "(bash 5 or GNU date is needed there)") from None


# ---- one host --------------------------------------------------------------------------------------

class ServerHost:
    """One cluster host: its SSH connection, its sampler's stream, its clock offset."""

    def __init__(self, spec: ClientHost, opts: ClientsSpec, interval_s: float):
        self.ssh = SshHost(spec, opts, role="server host")
        self.name = spec.name
        self.address = spec.host
        self.interval_s = interval_s
        self.header: dict[str, Any] | None = None
        self.samples: list[dict[str, Any]] = []  # ts on this host's clock (ts_host: the host's own)
        self.offset_s = 0.0  # host clock minus this one's
        self.rtt_s: float | None = None
        self.lost: str | None = None
        self.lost_at: float | None = None
        self.proc: Any = None
        self.pid: int | None = None
        self.errors: list[str] = []
        self._reader: asyncio.Task | None = None
        self._header = asyncio.Event()
        self._closing = False

    @property
    def hostname(self) -> str:
        return str((self.header or {}).get("host") or self.name)

    async def clock(self) -> None:
        """The host's clock offset: CLOCK_PINGS replies, the one with the shortest round trip. One shell reads
        a line and answers its time (bash's $EPOCHREALTIME: no process started between the two, so the round
        trip is the network's and the bound tight); without bash, `date` per reply (a looser bound)."""
        best: tuple[float, float] | None = None
        proc = await self.ssh.conn.create_process(
            "exec bash -c 'while read -r _; do echo \"${EPOCHREALTIME:-$(date +%s.%N)}\"; done' 2>/dev/null",
            encoding="utf-8", errors="replace")
        try:
            for _ in range(CLOCK_PINGS):
                t0 = time.time()
                proc.stdin.write("t\n")
                line = await asyncio.wait_for(proc.stdout.readline(), self.ssh.opts.connect_timeout_s)
                t1 = time.time()
                if not line.strip():
                    break  # no bash there
                remote = _seconds(line, self.name)
                if best is None or t1 - t0 < best[1]:
                    best = (remote - (t0 + t1) / 2, t1 - t0)
        except asyncio.TimeoutError:
            raise HostError(f"server host {self.name}: no answer to a clock reading within "
                            f"{self.ssh.opts.connect_timeout_s:g} s") from None
        finally:
            proc.close()
        for _ in range(0 if best else CLOCK_PINGS):
            t0 = time.time()
            rc, out, _ = await self.ssh.run("date +%s.%N")
            t1 = time.time()
            if rc != 0:
                raise HostError(f"server host {self.name}: `date` failed there (exit {rc})")
            remote = _seconds(out, self.name)
            if best is None or t1 - t0 < best[1]:
                best = (remote - (t0 + t1) / 2, t1 - t0)
        assert best is not None
        self.offset_s, self.rtt_s = best

    async def start(self, path: str, version: str | None) -> None:
        """Start the sampler there; HostError unless its header is the record format this fathom reads, from
        the version of the sampler fathom would upload (`version`)."""
        cmd = f"exec {shlex.quote(path)} --interval {self.interval_s:g} --threads-of crimson-osd"
        self.proc = await self.ssh.conn.create_process(cmd, encoding="utf-8", errors="replace")
        self._reader = asyncio.ensure_future(self._read())
        try:
            await asyncio.wait_for(self._header.wait(), 10 + 2 * self.interval_s)
        except asyncio.TimeoutError:
            err = ""
            try:
                err = (await asyncio.wait_for(self.proc.stderr.read(), 1))[-300:]
            except (asyncio.TimeoutError, OSError):
                pass
            raise HostError(f"server host {self.name}: {SAMPLER} sent no header within {10 + 2 * self.interval_s:g} s"
                            f"{': ' + err.strip() if err.strip() else ''}",
                            hint="it needs a Linux /proc and glibc 2.34 or newer there") from None
        try:
            hostsample.check_header(self.header, version)
        except hostsample.HostSampleError as exc:
            raise HostError(f"server host {self.name}: {path}: {exc}",
                            hint="leave out the host's `engine:` setting, so fathom uploads its own sampler") from None

    async def _read(self) -> None:
        try:
            async for line in self.proc.stdout:
                self._line(line)
        except Exception as exc:  # noqa: BLE001 (a broken channel is a lost host, whatever asyncssh raised)
            self._lose(f"its sampler's stream broke: {exc or type(exc).__name__}")
            return
        self._lose(self.ssh.lost or "its sampler's stream ended")

    def _line(self, line: str) -> None:
        try:
            rec = json.loads(line)
        except ValueError:
            return  # a line cut by a lost connection
        kind = rec.get("type")
        if kind == "sample" and self.header is not None:
            rec["ts_host"] = rec["ts"]
            rec["ts"] = rec["ts"] - self.offset_s
            self.samples.append(rec)
        elif kind == "sample_start":
            self.header = rec
            self.pid = rec.get("pid")
            self._header.set()
        elif kind == "error":
            self.errors.append(str(rec.get("message")))

    def _lose(self, why: str) -> None:
        if self.lost is None and not self._closing:
            self.lost = why
            self.lost_at = self.samples[-1]["ts"] if self.samples else time.time()

    async def wait_past(self, ts: float, timeout: float) -> bool:
        """Until a sample at or after ts (this host's clock) has arrived; False when lost or late."""
        deadline = time.monotonic() + timeout
        while not (self.samples and self.samples[-1]["ts"] >= ts):
            if self.lost or time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def trim(self, before: float) -> None:
        """Drop samples older than `before`, keeping one before it (the baseline of the next rate)."""
        i = next((k for k, s in enumerate(self.samples) if s["ts"] >= before), len(self.samples))
        if i > 1:
            del self.samples[: i - 1]

    async def close(self) -> None:
        self._closing = True
        if self.pid is not None and self.ssh.conn is not None and not self.lost:
            try:
                await self.ssh.kill(int(self.pid))
            except HostError:
                pass
        if self._reader is not None:
            try:
                await asyncio.wait_for(self._reader, 3)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._reader.cancel()
        await self.ssh.aclose()


# ---- the source ------------------------------------------------------------------------------------

class Servers:
    """Every server host of a run, connected, clocked and sampling (open), until close()."""

    def __init__(self, spec: ServersSpec, placed: dict[str, list[ClusterDaemon]]):
        self.spec, self.placed = spec, placed
        hosts = list(spec.hosts)
        if spec.discover:
            named = {h.host for h in hosts}
            hosts += [h for h in discovered(spec, placed) if h.host not in named]
        if not hosts:
            raise UsageError("servers: no host to sample: the cluster's metadata names none",
                             hint="name them with --server-host USER@HOST")
        opts = spec.ssh_opts()
        self.hosts = [ServerHost(h, opts, spec.interval_s) for h in hosts]

    @classmethod
    def open(cls, spec: ServersSpec, placed: dict[str, list[ClusterDaemon]], say: Any = None) -> Servers:
        """Connect to every host at once, install the sampler, check clocks, start sampling; HostError naming
        every host that failed (the others closed again)."""
        s = cls(spec, placed)
        raise_any([key_error(h.ssh) for h in s.hosts], lambda: None)  # every key file, before any connection
        if say is not None:
            say(f"connecting to {len(s.hosts)} server host(s): {', '.join(h.name for h in s.hosts)}")
        local = sampler_path()
        sha = sha256_file(local)
        version = subprocess.run([str(local), "--version"], capture_output=True, text=True, timeout=30).stdout.split()

        async def one(h: ServerHost) -> None:
            await h.ssh.connect()
            path = h.ssh.spec.engine or await h.ssh.install(local, sha, SAMPLER)
            await h.clock()
            if abs(h.offset_s) > spec.max_clock_offset_s:
                raise HostError(f"server host {h.name}: its clock is {h.offset_s:+.3f} s from this host's "
                                f"(measured over SSH, +-{(h.rtt_s or 0) / 2:.3f} s): too far apart to place its "
                                "samples on the point's timeline",
                                hint="synchronise the clocks (chrony or NTP on both), or raise "
                                     f"servers.max_clock_offset_s above {abs(h.offset_s):.1f}")
            await h.start(path, version[1] if len(version) > 1 else None)

        async def all_() -> list[Any]:
            return await asyncio.gather(*(one(h) for h in s.hosts), return_exceptions=True)

        raise_any(LOOP.run(all_()), s.close)
        return s

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
        events: list[dict[str, Any]] = []
        covered: dict[str, Any] = {}
        for h, ok in zip(self.hosts, arrived):
            pad = 1.5 * self.spec.interval_s
            win = [s for s in h.samples if t_from - pad <= s["ts"] <= t_to + pad]
            meta = match_host(self.placed, h.hostname, h.address)
            att = attribute([p for s in win for p in s.get("procs", [])], meta, self.placed)
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
                                   "sampler_cpu_pct": cost, "nics": {"counted": counted, "left_out": left}}
            if h.lost and (h.lost_at or 0) <= t_to + pad:
                events.append({"kind": "server_lost", "message":
                               f"server host {h.name} lost {_when(h.lost_at or t_from, t_from)} ({h.lost}): its "
                               "figures cover the point up to then, the other hosts' are whole",
                               "data": {"host": h.name, "why": h.lost, "lost_at": h.lost_at,
                                        "into_point_s": round((h.lost_at or t_from) - t_from, 3)}})
            elif not ok:
                events.append({"kind": "server_late", "message": f"server host {h.name}: no sample after the "
                               f"point's end within {wait:g} s; its figures stop at its last sample",
                               "data": {"host": h.name}})
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
        events.append({"kind": "sources", "message": f"server hosts over SSH: {len(self.hosts)} sampled",
                       "data": {"source": SOURCE, "hosts": covered}})
        return records, events

    def close(self) -> None:
        async def all_() -> None:
            await asyncio.gather(*(h.close() for h in self.hosts), return_exceptions=True)

        try:
            LOOP.run(all_(), timeout=15)
        except Exception:  # noqa: BLE001 (closing: a host that does not answer is aborted)
            for h in self.hosts:
                h.ssh.close()


@dataclass
class Coverage:
    """Which source samples which of the cluster's hosts, from the metadata's placement."""

    placed: dict[str, list[ClusterDaemon]]
    servers: Servers | None = None  # the hosts sampled over SSH
    prometheus: Any = None  # fathom.promquery.PrometheusSource: host figures of the hosts it scrapes
    here: str | None = None  # the metadata's name of this host, when it holds daemons of the cluster
    here_daemons: set[str] = field(default_factory=set)  # those this host's own sampler covers (not SSH's)
    here_host: str = "host"  # this host's host sample: a cluster host's ("host") or a client's ("client_host")
    env: dict[str, Any] = field(default_factory=dict)  # what the run records (servers, prometheus)

    def companions(self) -> list[Companion]:
        out: list[Companion] = [ServerSource(self.servers)] if self.servers is not None else []
        return out + ([self.prometheus] if self.prometheus is not None else [])

    def close(self) -> None:
        if self.servers is not None:
            self.servers.close()


def connect(ceph: Any, spec: ServersSpec | None, prometheus: str | None, say: Any) -> Coverage:
    """The placement of the cluster's daemons; the server hosts sampling when spec names any; the Prometheus
    source for the cluster's hosts no server host stands for."""
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
        cov.servers = Servers.open(spec, placed, say)
        covered = cov.servers.covered()
        cov.env["servers"] = cov.servers.describe()
    cov.here_daemons = {d.name for h in mine if h not in covered for d in placed[h]}
    cov.here_host = "host" if cov.here_daemons else "client_host"
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
        self._t0 = time.time()

    def stop(self) -> Contribution:
        records, events = self.servers.window(self._t0, time.time())
        return Contribution(samples=records, events=events)
