"""Which hosts a cluster's daemons run on, and which of fathom's server-side sources reach each of them.

Daemons are placed on hosts by the cluster's own metadata (what each daemon reported when it started:
`ceph osd|mon|mgr|mds metadata`, RGW's entry in `ceph service dump`; addresses from `ceph mon dump` and
`ceph mgr dump`), never by this host's /proc: on a shared host a process named osd.1 may belong to another
cluster while this cluster's osd.1 runs elsewhere. /proc only tells which of the daemons the metadata puts
on this host are processes fathom can sample here. `ceph node ls` is not read: the mons build it from the
same metadata's hostnames.

Sources of server-side figures:
- local: a daemon on this host: /proc (CPU, memory, context switches: fathom.servers.telemetry.Sampler) and, for
  OSDs and RGWs, its admin socket (perf counters).
- mgr-prometheus: the active mgr's prometheus module (fathom.servers.mgrprom): perf counters of every OSD, MON, MDS
  and RGW wherever it runs; no CPU or memory, and no mgr's own counters.
- ssh: fathom-sampler on the host over SSH (fathom.servers), during a run given --server-host: CPU, memory and
  context switches of its daemons, host CPU, NICs and disks. Status does not connect to hosts, so it says
  per host other than this one that CPU and memory come only that way.

Everything but `gather`, `this_host` and `listening` is pure: it takes the commands' JSON, so captured outputs test it.
Metadata keys differ between releases; a missing one leaves its field empty, never an error.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fathom.servers import telemetry
from fathom.cluster.ceph import Ceph
from fathom.cluster.local import Daemon
from fathom.errors import FathomError
from fathom.servers.mgrprom import MODULE, SOURCE

LOCAL = "local"
EXPORTED_KINDS = ("osd", "mon", "mds", "rgw")  # daemons whose counters the prometheus module exports
ASOK_KINDS = telemetry.PERF_KINDS  # daemons whose admin socket fathom reads on this host
PID_MAX = 4194304  # a messenger nonce above this is random, not a pid
UNKNOWN_HOST = "(no hostname)"
NO_SSH = "not this host: sample it over SSH (fathom run --server-host USER@HOST)"
COMMANDS = {"osd": ("osd", "metadata"), "mon": ("mon", "metadata"), "mgr": ("mgr", "metadata"),
            "mds": ("mds", "metadata"), "service": ("service", "dump"), "mon_dump": ("mon", "dump"),
            "mgr_dump": ("mgr", "dump")}


@dataclass(frozen=True)
class Addr:
    """One entry of a Ceph address vector: `v2:10.0.0.2:6800/1234` (type, ip, port, nonce)."""

    ip: str
    port: int | None = None
    type: str = ""
    nonce: int = 0

    def bare(self) -> str:
        """ip:port, IPv6 in brackets; the IP alone when there is no port."""
        ip = f"[{self.ip}]" if ":" in self.ip else self.ip
        return ip if self.port is None else f"{ip}:{self.port}"

    def __str__(self) -> str:
        if self.type in ("http", "https"):
            return f"{self.type}://{self.bare()}"
        return f"{self.type}:{self.bare()}" if self.type else self.bare()


@dataclass
class ClusterDaemon:
    """A daemon as the cluster's metadata describes it."""

    name: str  # osd.0, mon.a, mgr.x, mds.a, client.rgw.<id>: the names perf dumps and mgrprom use
    kind: str
    host: str | None
    addrs: dict[str, list[Addr]] = field(default_factory=dict)  # role (front, back, public, frontend) -> vector
    pids: set[int] = field(default_factory=set)  # what the metadata says its pid may be (nonces, RGW's pid)
    info: dict[str, Any] = field(default_factory=dict)  # version, objectstore, osd_type, mgr state

    def ips(self) -> set[str]:
        return {a.ip for vec in self.addrs.values() for a in vec}


@dataclass(frozen=True)
class ThisHost:
    """How this host is recognised in the metadata: its hostname and every address it has."""

    hostname: str
    addresses: frozenset[str]

    def claims(self, host: str | None, ips: set[str]) -> str | None:
        """Why a host of the metadata is this one ("hostname vm", "address 10.0.0.1"), or None."""
        if host and host.split(".")[0] == self.hostname.split(".")[0]:
            return f"hostname {host}"
        found = sorted(ip for ip in ips if ip in self.addresses)
        return f"address {found[0]}" if found else None


# ---- parsing -----------------------------------------------------------------------------------------

def _addr(part: str) -> Addr | None:
    """`v2:1.2.3.4:6800/99`, `1.2.3.4:6800/99`, `[::1]:6800/0`, `1.2.3.4`; None for what is no address."""
    kind = ""
    for t in ("v1", "v2", "any"):
        if part.startswith(t + ":"):
            kind, part = t, part[len(t) + 1:]
    hostport, _, nonce = part.partition("/")
    if hostport.startswith("["):
        ip, _, rest = hostport[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif hostport.count(":") == 1:
        ip, _, port = hostport.partition(":")
    else:
        ip, port = hostport, ""
    try:
        parsed = ipaddress.ip_address(ip)
    except ValueError:
        return None
    if parsed.is_unspecified:
        return None
    return Addr(ip=str(parsed), port=int(port) if port.isdigit() else None, type=kind,
                nonce=int(nonce) if nonce.isdigit() else 0)


def parse_addrs(text: Any) -> list[Addr]:
    """A metadata address string: `[v2:a:p/n,v1:a:p/n]` or one address; [] for '-', '' or junk."""
    if not isinstance(text, str):
        return []
    s = text.strip()
    if s.startswith("[") and s.endswith("]") and s[1:].startswith(("v1:", "v2:", "any:")):
        s = s[1:-1]
    return [a for a in (_addr(p.strip()) for p in s.split(",")) if a is not None]


def addrvec(obj: Any) -> list[Addr]:
    """`{"addrvec": [{"type", "addr", "nonce"}]}` as `ceph mon dump` and `ceph mgr dump` print it."""
    out = []
    for e in obj.get("addrvec") or [] if isinstance(obj, dict) else []:
        a = _addr(str(e.get("addr", "")))
        if a is not None:
            out.append(Addr(a.ip, a.port, str(e.get("type") or ""), int(e.get("nonce") or 0)))
    return out


def _records(metadata: Any) -> list[dict[str, Any]]:
    """A `ceph * metadata` answer's entries; anything else (None, an error object) is none."""
    return [md for md in metadata if isinstance(md, dict)] if isinstance(metadata, list) else []


def _version(md: dict[str, Any]) -> str | None:
    short = md.get("ceph_version_short")
    if short:
        return str(short)
    words = str(md.get("ceph_version") or "").split()  # "ceph version 16.2.15 (sha) pacific (stable)"
    return words[2] if len(words) > 2 and words[:2] == ["ceph", "version"] else None


def _pids(vectors: list[list[Addr]], *extra: Any) -> set[int]:
    """Candidate pids: a daemon's messenger nonce is its pid unless it chose a random one."""
    out = {a.nonce for vec in vectors for a in vec if 1 < a.nonce <= PID_MAX}
    return out | {int(x) for x in extra if str(x).isdigit()}


def _daemon(kind: str, ident: Any, md: dict[str, Any], addrs: dict[str, list[Addr]],
            *raw: Any) -> ClusterDaemon:
    info = {k: v for k, v in (("version", _version(md)), ("release", md.get("ceph_release"))) if v}
    return ClusterDaemon(name=f"{kind}.{ident}", kind=kind, host=md.get("hostname") or None,
                         addrs={r: v for r, v in addrs.items() if v},
                         pids=_pids(list(addrs.values()) + [parse_addrs(x) for x in raw]), info=info)


def osds(metadata: list[dict[str, Any]]) -> list[ClusterDaemon]:
    out = []
    for md in _records(metadata):
        if "id" not in md:
            continue
        d = _daemon("osd", md["id"], md, {"front": parse_addrs(md.get("front_addr")),
                                          "back": parse_addrs(md.get("back_addr"))})
        for key, as_key in (("osd_objectstore", "objectstore"), ("osd_type", "osd_type")):
            if md.get(key):  # osd_type: "crimson" for a crimson-osd; classic OSDs do not set it
                d.info[as_key] = md[key]
        out.append(d)
    return out


def mons(metadata: list[dict[str, Any]], mon_dump: dict[str, Any] | None = None) -> list[ClusterDaemon]:
    """Mons by metadata; their public addresses from the monmap, also for a mon that never reported."""
    listed = mon_dump.get("mons") if isinstance(mon_dump, dict) else None
    public = {m.get("name"): addrvec(m.get("public_addrs")) or parse_addrs(m.get("public_addr") or m.get("addr"))
              for m in _records(listed)}
    out = []
    for md in _records(metadata):
        name = md.get("name")
        if name is not None:
            out.append(_daemon("mon", name, md, {"public": public.get(name) or parse_addrs(md.get("addrs"))}))
    seen = {d.name for d in out}
    out += [_daemon("mon", n, {}, {"public": v}) for n, v in public.items() if n and f"mon.{n}" not in seen]
    return out


def mgrs(metadata: list[dict[str, Any]], mgr_dump: dict[str, Any] | None = None) -> list[ClusterDaemon]:
    """Mgrs by metadata; the active one's public addresses from the mgr map (a standby's metadata has its IP)."""
    dump = mgr_dump if isinstance(mgr_dump, dict) else {}
    active = dump.get("active_name")
    out = []
    for md in _records(metadata):
        name = md.get("name")
        if name is None:
            continue
        public = addrvec(dump.get("active_addrs")) if name == active else []
        d = _daemon("mgr", name, md, {"public": public or parse_addrs(md.get("addr"))}, md.get("addrs"))
        if active:
            d.info["state"] = "active" if name == active else "standby"
        out.append(d)
    return out


def mdss(metadata: list[dict[str, Any]]) -> list[ClusterDaemon]:
    return [_daemon("mds", md["name"], md, {"public": parse_addrs(md.get("addr") or md.get("addrs"))})
            for md in _records(metadata) if md.get("name") is not None]


def _frontends(md: dict[str, Any], fallback_ip: str | None) -> list[Addr]:
    """RGW's listening endpoints from `frontend_config#N`: beast endpoint=/ssl_endpoint=, port=/ssl_port=."""
    out = []
    for key in sorted(k for k in md if k.startswith("frontend_config")):
        for word in str(md[key]).split():
            opt, _, value = word.partition("=")
            if opt in ("endpoint", "ssl_endpoint"):
                a = _addr(value)
                if a is not None:
                    out.append(Addr(a.ip, a.port, "https" if opt.startswith("ssl") else "http"))
            elif opt in ("port", "ssl_port") and fallback_ip:
                for p in value.split("+"):  # civetweb: port=80+443s
                    digits = p.rstrip("s")
                    if digits.isdigit():
                        out.append(Addr(fallback_ip, int(digits), "https" if opt == "ssl_port" or p.endswith("s")
                                        else "http"))
    return out


def rgws(service_dump: dict[str, Any]) -> list[ClusterDaemon]:
    """RGWs from the service map (keyed by gid, or by name before Octopus); name client.rgw.<id> as their
    admin socket and fathom.servers.mgrprom name them."""
    services = service_dump.get("services") if isinstance(service_dump, dict) else None
    daemons = ((services or {}).get("rgw") or {}).get("daemons") or {}
    out = []
    for key, entry in daemons.items():
        if not isinstance(entry, dict):  # the map's "summary" string
            continue
        md = entry.get("metadata") or {}
        client = parse_addrs(entry.get("addr"))
        ident = md.get("id") or key
        d = _daemon("rgw", ident, md, {"frontend": _frontends(md, client[0].ip if client else None)},
                    md.get("pid"), entry.get("addr"))
        d.name = f"client.rgw.{ident}"
        out.append(d)
    return out


def cluster_daemons(raw: dict[str, Any]) -> list[ClusterDaemon]:
    """Every daemon from the commands' JSON (keys of COMMANDS; a missing one contributes nothing)."""
    return (osds(raw.get("osd") or []) + mons(raw.get("mon") or [], raw.get("mon_dump"))
            + mgrs(raw.get("mgr") or [], raw.get("mgr_dump")) + mdss(raw.get("mds") or [])
            + rgws(raw.get("service") or {}))


def module_state(mgr_dump: dict[str, Any] | None) -> dict[str, Any]:
    """The prometheus module as the mgr map has it: enabled, its URL, whether it can run, in words."""
    if not mgr_dump or not isinstance(mgr_dump, dict):
        return {"enabled": None, "url": None, "usable": False, "state": "unknown: no mgr map"}
    always = mgr_dump.get("always_on_modules") or []
    if isinstance(always, dict):  # {release: [modules]}
        always = [m for mods in always.values() for m in mods]
    enabled = MODULE in set(mgr_dump.get("modules") or []) | set(always)
    url = (mgr_dump.get("services") or {}).get(MODULE)
    avail = next((m for m in mgr_dump.get("available_modules") or [] if m.get("name") == MODULE), None)
    can_run = bool(avail.get("can_run", True)) if avail else None
    out = {"enabled": enabled, "url": url, "can_run": can_run, "active_mgr": mgr_dump.get("active_name"),
           "usable": enabled or bool(can_run)}
    if enabled:
        out["state"] = f"enabled at {url}" if url else "enabled, no endpoint in `ceph mgr services` yet"
    elif can_run:
        out["state"] = "off (its counters reach fathom only once it is enabled: `ceph mgr module enable prometheus`)"
    elif avail:
        out["state"] = f"off and cannot run: {avail.get('error_string') or 'no reason given'}"
    else:
        out["state"] = "not installed on the mgr"
    return out


# ---- hosts and sources ---------------------------------------------------------------------------------

KIND_ORDER = ("mon", "mgr", "osd", "mds", "rgw")


def _order(d: ClusterDaemon) -> tuple[int, int, str]:
    ident = d.name.rsplit(".", 1)[-1]
    kind = KIND_ORDER.index(d.kind) if d.kind in KIND_ORDER else len(KIND_ORDER)
    return (kind, int(ident), "") if ident.isdigit() else (kind, -1, ident)


def local_process(d: ClusterDaemon, local: list[Daemon],
                  listens: dict[int, set[tuple[str, int]]] | None = None) -> tuple[Daemon | None, str]:
    """The process of a daemon the metadata puts on this host: by pid (its addresses' nonce, RGW's pid),
    else by the address it listens on, else by name when one process alone has it.

    Several clusters on one host may each have a mon.a: the pid settles it for daemons whose nonce is their
    pid (mgr, OSD, MDS); a mon's nonce is 0, and two processes cannot listen on one address, so its address
    settles it. listens: pid -> its listening (ip, port), read from this host's /proc when not given.
    """
    same = [p for p in local if p.kind == d.kind and p.pid]
    by_pid = [p for p in same if p.pid in d.pids]
    if len(by_pid) == 1:
        return by_pid[0], ""
    named = [p for p in local if p.name == d.name]
    wanted = {(a.ip, a.port) for vec in d.addrs.values() for a in vec if a.port}
    if wanted and (len(named) != 1 or d.pids):
        socks = listens if listens is not None else listening([p.pid for p in same if p.pid])
        by_addr = [p for p in same if _listens_on(socks.get(p.pid or 0, set()), wanted)]
        if len(by_addr) == 1:
            return by_addr[0], ""
    if len(named) == 1:
        return named[0], ""
    if named:
        return None, (f"{len(named)} processes here have its name, and none the pid its addresses carry "
                      "nor listens on its addresses")
    return None, "no such process here (not running, or in a PID namespace fathom cannot see)"


def _listens_on(socks: set[tuple[str, int]], wanted: set[tuple[str, int]]) -> bool:
    """Whether a process listens on one of a daemon's addresses (or on every address, at its port)."""
    ports = {port for _, port in wanted}
    return bool(socks & wanted) or any(ip in ("0.0.0.0", "::") and port in ports for ip, port in socks)


def _sockets(table: str) -> dict[str, tuple[str, int]]:
    """Listening TCP sockets of this network namespace (/proc/net/tcp or tcp6): inode -> (ip, port)."""
    out: dict[str, tuple[str, int]] = {}
    try:
        lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
    except OSError:
        return out
    for line in lines:
        f = line.split()
        if len(f) < 10 or f[3] != "0A":  # 0A: LISTEN
            continue
        hexip, hexport = f[1].split(":")
        raw = bytes.fromhex(hexip)
        # the kernel prints each 32-bit word of the address in host (little-endian) order
        ip = ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)))
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        out[f[9]] = (str(mapped or ip), int(hexport, 16))
    return out


def listening(pids: list[int]) -> dict[int, set[tuple[str, int]]]:
    """pid -> the (ip, port) each of these processes listens on in this network namespace."""
    socks = {**_sockets("tcp"), **_sockets("tcp6")}
    out: dict[int, set[tuple[str, int]]] = {}
    for pid in pids:
        found: set[tuple[str, int]] = set()
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and (a := socks.get(link[8:-1])) is not None:
                found.add(a)
        out[pid] = found
    return out


def _sources(d: ClusterDaemon, proc: Daemon | None, module: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if proc is not None:
        gives = ["cpu", "memory"] + (["perf counters"] if d.kind in ASOK_KINDS else [])
        out.append({"source": LOCAL, "pid": proc.pid, "gives": gives})
    if d.kind in EXPORTED_KINDS and module.get("usable"):
        out.append({"source": SOURCE, "state": "enabled" if module.get("enabled") else "off",
                    "gives": ["perf counters"]})
    return out


def _host(name: str, ds: list[ClusterDaemon], here: ThisHost, local: list[Daemon],
          module: dict[str, Any], listens: dict[int, set[tuple[str, int]]] | None) -> dict[str, Any]:
    """One host: its addresses, its daemons with their sources, and what no source covers, with why."""
    ips: set[str] = set().union(*(d.ips() for d in ds))
    why = here.claims(None if name == UNKNOWN_HOST else name, ips)
    rows: list[dict[str, Any]] = []
    no_proc: dict[str, list[str]] = {}  # reason -> daemons
    no_counters: list[str] = []
    for d in sorted(ds, key=_order):
        proc, reason = local_process(d, local, listens) if why else (None, "")
        if why and proc is None:
            no_proc.setdefault(reason, []).append(d.name)
        srcs = _sources(d, proc, module)
        if d.kind in EXPORTED_KINDS and not any("perf counters" in s["gives"] for s in srcs):
            no_counters.append(d.name)
        rows.append({"name": d.name, "kind": d.kind, **d.info,
                     "addrs": {role: [str(a) for a in vec] for role, vec in d.addrs.items()}, "sources": srcs})
    missing = [] if why else [f"CPU and memory of the host and its daemons: {NO_SSH}"]
    missing += [f"{', '.join(names)}: on this host by the metadata, but {reason}" for reason, names in no_proc.items()]
    if no_counters:
        where = "" if why else ", not this host"
        missing.append(f"perf counters of {', '.join(no_counters)}: mgr-prometheus {module.get('state')}{where}")
    return {"host": name, "this_host": why is not None, "matched_by": why, "addresses": _sorted_ips(ips),
            "daemons": rows, "missing": missing}


def _sorted_ips(ips: set[str] | frozenset[str]) -> list[str]:
    return sorted(ips, key=lambda ip: (ipaddress.ip_address(ip).version, ipaddress.ip_address(ip)))


def inventory(raw: dict[str, Any], here: ThisHost, local: list[Daemon], errors: list[str] | None = None,
              listens: dict[int, set[tuple[str, int]]] | None = None) -> dict[str, Any]:
    """Hosts -> daemons -> sources from the commands' JSON (keys of COMMANDS), this host first.

    local: the Ceph processes on this host (Attachment.local_daemons()); they only say which of the daemons
    the metadata puts here fathom can sample, never where a daemon is. listens: their listening addresses
    (local_process reads them from /proc when not given).
    """
    module = module_state(raw.get("mgr_dump"))
    hosts = [_host(name, ds, here, local, module, listens) for name, ds in placement(raw).items()]
    hosts.sort(key=lambda h: (not h["this_host"], h["host"] == UNKNOWN_HOST, h["host"]))
    return {"this_host": {"hostname": here.hostname, "addresses": _sorted_ips(here.addresses)},
            "mgr_prometheus": module, "hosts": hosts, "inventory_errors": list(errors or [])}


def this_host() -> ThisHost:
    """This host's name and addresses: IPv4 from the kernel's local routes, IPv6 from its interfaces."""
    addrs = {"127.0.0.1", "::1"}
    try:
        last = None
        for line in Path("/proc/net/fib_trie").read_text().splitlines():
            if "|--" in line:
                last = line.split()[-1]
            elif last and line.strip() == "/32 host LOCAL":
                addrs.add(last)
    except OSError:
        pass
    try:
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            addrs.add(str(ipaddress.IPv6Address(int(line.split()[0], 16))))
    except (OSError, ValueError, IndexError):
        pass
    return ThisHost(socket.gethostname(), frozenset(addrs))


def gather_raw(ceph: Ceph, timeout: float = 20.0) -> tuple[dict[str, Any], list[str]]:
    """The metadata commands' JSON (keys of COMMANDS) and the errors of those that failed. The commands run
    side by side, each bounded by timeout; one that fails is named and the rest still count."""
    raw: dict[str, Any] = {}
    errors = []
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {k: pool.submit(ceph.ceph, *args, timeout=timeout) for k, args in COMMANDS.items()}
        for key, fut in futures.items():
            try:
                raw[key] = fut.result()
            except FathomError as exc:
                errors.append(exc.message)
    return raw, errors


def gather(ceph: Ceph, local: list[Daemon], timeout: float = 20.0, here: ThisHost | None = None) -> dict[str, Any]:
    """The inventory of a reachable cluster (gather_raw, then inventory)."""
    raw, errors = gather_raw(ceph, timeout)
    return inventory(raw, here or this_host(), local, errors)


def placement(raw: dict[str, Any]) -> dict[str, list[ClusterDaemon]]:
    """Host name (as the metadata has it) -> the daemons the metadata puts there."""
    by_host: dict[str, list[ClusterDaemon]] = {}
    for d in cluster_daemons(raw):
        by_host.setdefault(d.host or UNKNOWN_HOST, []).append(d)
    return by_host


# ---- text --------------------------------------------------------------------------------------------

def _bare(addr: str) -> str:
    return addr.split(":", 1)[1] if addr.startswith(("v1:", "v2:", "any:")) else addr


def _describe(d: dict[str, Any]) -> str:
    words = [str(d[k]) for k in ("version", "objectstore", "osd_type", "state") if d.get(k)]
    for role, vec in d["addrs"].items():
        if role == "frontend":
            words += vec
        else:  # its v2 address stands for the vector
            words.append(f"{role} {_bare(next((a for a in vec if a.startswith('v2:')), vec[0]))}")
    return " ".join(words)


def _source_text(s: dict[str, Any]) -> str:
    return f"local pid {s['pid']}" if s["source"] == LOCAL else f"{s['source']} ({s['state']})"


def text_lines(inv: dict[str, Any]) -> list[str]:
    """The hosts section of `fathom cluster status`, one line per host, daemon and missing figure."""
    here = inv["this_host"]
    out = [f"hosts, by the cluster's metadata (this host: {here['hostname']} {' '.join(here['addresses'])}):"]
    for h in inv["hosts"]:
        tag = f"this host, by {h['matched_by']}" if h["this_host"] else "not this host"
        out.append(f"  {h['host']} ({tag}): {' '.join(h['addresses']) or 'no address'}")
        for d in h["daemons"]:
            srcs = ", ".join(_source_text(s) for s in d["sources"]) or "no source"
            out.append(f"    {d['name']:<18} {_describe(d):<56} {srcs}")
        out += [f"    missing: {m}" for m in h["missing"]]
    out.append(f"mgr-prometheus: {inv['mgr_prometheus']['state']}")
    out += [f"inventory: {e}" for e in inv["inventory_errors"]]
    return out
