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
  named osd.1 on a host the metadata does not put osd.1 on is not counted there. It is listed as `foreign`
  (another cluster's) unless it is the very process counted for osd.1 on its own host, seen through a
  shared PID namespace (same boot, pid and start time). Of several processes with one name, the one whose
  pid the daemon's addresses carry (their nonce) is taken. Daemons the metadata places on a host where no
  process has their name are `missing`, with why.
- fathom's own host is never sampled over SSH: a host the metadata names that is this one (by hostname or
  address), and a --server-host at one of this host's addresses, is sampled here from /proc, each daemon's
  process picked as `fathom cluster status` picks it (inventory.local_process: by the pid its addresses
  carry, else by the address it listens on, else by its name when one process alone has it), so another
  cluster's mon.a on this host is not counted.
- Loss: a host whose connection or sampler ends mid-run is flagged in each point it touches (an event,
  `server_lost`) and its samples up to the loss are kept; the other hosts go on.

The companion (ServerSource) hands each point its hosts' per-interval records (hostsample.interval_samples:
telemetry.summarize reads them, per host, then summed) tagged `via: ssh`, and an event saying what it
covered and what was missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fathom import hostsample
from fathom.cluster import inventory
from fathom.cluster.inventory import UNKNOWN_HOST, ClusterDaemon
from fathom.cluster.local import Daemon
from fathom.cluster.journal import SAMPLER_KIND, Entry, Journal
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
CLK_TCK = os.sysconf("SC_CLK_TCK")


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
    keep_sampler: bool = False  # leave the sampler fathom uploaded on each host at the end (--keep-sampler)

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
                      accept_new: bool = False, base: ServersSpec | None = None,
                      keep_sampler: bool = False) -> ServersSpec | None:
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
    if keep_sampler:
        data["keep_sampler"] = True
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
    foreign: dict[str, list[int]] = field(default_factory=dict)  # named as a daemon, not it: not counted
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
        elif pids - chosen:  # its namesakes here: another cluster's
            out.foreign[name] = sorted(pids - chosen)
        out.keep |= chosen
        out.found[name] = sorted(chosen)
    found = {_key(n) for n in out.found}
    out.missing = sorted(d.name for k, d in here.items() if k not in found)
    return out


Identities = tuple[int, dict[int, float]]  # a host's boot time (epoch s) and pid -> start (s after boot)


def _identities(header: dict[str, Any] | None, win: list[dict[str, Any]], pids: set[int] | None = None) -> Identities:
    """The processes (of `pids`, else all) as a sampler saw them: enough to know the same process seen from
    another host that shares its PID namespace (a network-namespace host, a container sharing its pids)."""
    starts = {int(p["pid"]): float(p["start"]) for s in win for p in s.get("procs", [])
              if (pids is None or int(p["pid"]) in pids) and p.get("start") is not None}
    return int((header or {}).get("boot_time") or 0), starts


def not_counted(foreign: dict[str, list[int]], mine: Identities, others: list[Identities]) -> dict[str, list[int]]:
    """The foreign processes of a host (named as one of the cluster's daemons, not counted there) that no
    other source counted either: one with the boot (btime may read a second apart), pid and start time of a
    process counted elsewhere is that process, seen here through a shared PID namespace, and was counted."""
    boot, starts = mine
    out = {}
    for name, pids in foreign.items():
        left = [pid for pid in pids if not any(
            abs(b - boot) <= 1 and pid in st and round(st[pid], 2) == round(starts.get(pid, -1.0), 2)
            for b, st in others)]
        if left:
            out[name] = left
    return out


def this_host_identities(pids: list[int]) -> Identities:
    """This host's processes of `pids`, as _identities gives a sampler's (its /proc's btime and start times)."""
    boot = 0
    try:
        boot = next(int(ln.split()[1]) for ln in Path("/proc/stat").read_text().splitlines() if ln.startswith("btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    starts = {}
    for pid in pids:
        try:
            starts[pid] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]) / CLK_TCK
        except (OSError, ValueError, IndexError):
            continue
    return boot, starts


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

@dataclass
class Placed:
    """The sampler file fathom put on a host (it was not there before): removed at the end of the run."""

    path: str
    dirs: list[str]  # the directories its upload made, outermost first (removed when empty, innermost first)


def remove_command(path: str, dirs: list[str]) -> str:
    """The shell command that removes a sampler fathom put on a host, and the directories made for it if empty."""
    return "; ".join([f"rm -f {shlex.quote(path)}", *(f"rmdir {shlex.quote(d)} 2>/dev/null" for d in reversed(dirs)),
                      "true"])


def remove_samplers(journal: Journal, say: Any) -> tuple[list[str], list[str]]:
    """The samplers a killed run's journal says fathom put on server hosts, removed over SSH with what the entry
    names (host, port, user, key file and known_hosts paths; never a key): (removed, failed with why). An
    entry removed is marked undone; one that failed stays for a later try."""
    async def one(e: Entry) -> str | None:
        d = e.data
        spec = ClientHost(host=d["host"], port=d.get("port") or 22, user=d.get("user"), key_file=d.get("key_file"))
        ssh = SshHost(spec, ClientsSpec(hosts=[spec], known_hosts=d.get("known_hosts")), role="server host")
        try:
            await ssh.connect()
            rc, _, err = await ssh.run(remove_command(d["path"], list(d.get("dirs") or [])))
        except HostError as exc:
            return exc.message
        finally:
            await ssh.aclose()
        return None if rc == 0 else f"`rm -f {d['path']}` there failed (exit {rc}): {err.strip()[-200:]}"

    removed, failed = [], []
    for e in journal.pending(SAMPLER_KIND):
        why = LOOP.run(one(e))
        if why is None:
            journal.drop(SAMPLER_KIND, e.what)
            removed.append(e.what)
            say(f"removed the fathom-sampler fathom put at {e.what}")
        else:
            failed.append(f"{e.what}: {why}")
            say(f"could not remove the fathom-sampler at {e.what}: {why}")
    return removed, failed


class ServerHost:
    """One cluster host: its SSH connection, its sampler's stream, its clock offset."""

    def __init__(self, spec: ClientHost, opts: ClientsSpec, interval_s: float):
        self.spec, self.opts = spec, opts
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
        self.reconnect_error: str | None = None  # why the last try to reach it again failed
        self.announced = False  # the console was told of its loss
        self.path: str | None = None  # the sampler there
        self.had_file = False  # a file was at that path before fathom looked: never fathom's to remove
        self.current = False  # ... and it was this sampler (same hash): nothing to upload
        self.missing_dirs: list[str] = []  # the path's directories that were not there
        self.placed: Placed | None = None  # the sampler file fathom put there, to remove at the end
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

    async def look(self, sha: str) -> None:
        """Connect; where the sampler goes, whether a file is there already (and is this sampler), and which of
        its directories are missing (the upload makes them: fathom's to remove)."""
        await self.ssh.connect()
        if self.ssh.spec.engine:  # the host's own sampler, used as it is
            self.path, self.had_file, self.current = self.ssh.spec.engine, True, True
            return
        d = f"{self.ssh.spec.engine_dir.rstrip('/')}/{sha[:16]}"
        self.path = f"{d}/{SAMPLER}"
        dirs = [str(x) for x in reversed(PurePosixPath(d).parents) if str(x) not in (".", "/")] + [d]
        each = ' '.join(map(shlex.quote, dirs))
        _, out, _ = await self.ssh.run(f"sha256sum {shlex.quote(self.path)} 2>/dev/null; "
                                       f"for d in {each}; do [ -d \"$d\" ] || echo \"missing $d\"; done")
        lines = out.splitlines()
        self.missing_dirs = [ln[len("missing "):] for ln in lines if ln.startswith("missing ")]
        sums = [ln.split()[0] for ln in lines if ln.strip() and not ln.startswith("missing ")]
        self.had_file, self.current = bool(sums), sums[:1] == [sha]

    async def ready(self, local: Path, sha: str, version: str | None, max_offset_s: float) -> None:
        """After look(): the sampler uploaded unless it is there, the clock measured, sampling started."""
        if not self.current:
            await self.ssh.install(local, sha, SAMPLER)
        assert self.path is not None
        await self.clock()
        if abs(self.offset_s) > max_offset_s:
            raise HostError(f"server host {self.name}: its clock is {self.offset_s:+.3f} s from this host's "
                            f"(measured over SSH, +-{(self.rtt_s or 0) / 2:.3f} s): too far apart to place its "
                            "samples on the point's timeline",
                            hint="synchronise the clocks (chrony or NTP on both), or raise "
                                 f"servers.max_clock_offset_s above {abs(self.offset_s):.1f}")
        await self.start(self.path, version)

    def fresh(self) -> None:
        """Forget a lost connection and its sampler (on the loop's thread), to reach the host again: the old
        stream's lines and end are ignored from now on, and its samples go (a new sampler starts its counters
        anew)."""
        self.proc = None
        if self._reader is not None:
            self._reader.cancel()
            self._reader = None
        self.ssh.close()
        self.ssh = SshHost(self.spec, self.opts, role="server host")
        self.samples, self.pid, self._header = [], None, asyncio.Event()

    async def start(self, path: str, version: str | None) -> None:
        """Start the sampler there; HostError unless its header is the record format this fathom reads, from
        the version of the sampler fathom would upload (`version`)."""
        cmd = f"exec {shlex.quote(path)} --interval {self.interval_s:g} --threads-of crimson-osd"
        self.proc = await self.ssh.conn.create_process(cmd, encoding="utf-8", errors="replace")
        self._reader = asyncio.ensure_future(self._read(self.proc))
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

    async def _read(self, proc: Any) -> None:
        """One sampler's lines, until its stream ends (the host lost, unless fathom closes it); a stream fathom
        has since replaced (fresh) is no longer read."""
        try:
            async for line in proc.stdout:
                if proc is not self.proc:
                    return
                self._line(line)
        except Exception as exc:  # noqa: BLE001 (a broken channel is a lost host, whatever asyncssh raised)
            if proc is self.proc:
                self._lose(f"its sampler's stream broke: {exc or type(exc).__name__}")
            return
        if proc is self.proc:
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

    async def close(self, remove: bool) -> str | None:
        """Stop the sampler; with `remove`, delete the sampler file fathom put there (a lost host is reached
        again for it). None when nothing was to remove or it was removed, else why it is still there."""
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
        left = None
        if remove and self.placed is not None:
            left = await self._remove(self.placed)
        await self.ssh.aclose()
        return left

    async def _remove(self, placed: Placed) -> str | None:
        try:
            if self.lost or self.ssh.conn is None:
                self.ssh.close()
                self.ssh = SshHost(self.spec, self.opts, role="server host")
                await self.ssh.connect()
            rc, _, err = await self.ssh.run(remove_command(placed.path, placed.dirs))
        except HostError as exc:
            return exc.message
        return None if rc == 0 else f"`rm -f {placed.path}` there failed (exit {rc}): {err.strip()[-200:]}"


# ---- the source ------------------------------------------------------------------------------------

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
            seen[h.hostname] = (_identities(h.header, win), _identities(h.header, win, att.keep))
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
