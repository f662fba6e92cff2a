"""Which process on a sampled host is which daemon of the cluster: by its metadata, never by /proc alone."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from fathom.servers.inventory import UNKNOWN_HOST, ClusterDaemon

# daemon kinds the cluster's metadata places; the others the sampler finds (ganesha, FUSE clients: gateways and
# clients) count only where something ties them to this run or this cluster (Ours)
PLACED_KINDS = ("osd", "mon", "mgr", "mds", "rgw")
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Ours:
    """What ties a gateway or client process (nfs-ganesha, ceph-fuse, rbd-fuse: the cluster's metadata places
    none) to this run or this cluster: a pid fathom recorded when it started it, the cluster's fsid (a cephadm
    unit's, `ceph-FSID@...`), or the conf the run uses named in its command line (on this host only: a path
    elsewhere may be another file). Nothing else does: a name like ganesha.nfsd says nothing of whose it is."""

    fsid: str | None = None
    confs: frozenset[str] = frozenset()  # this host's paths of the run's conf (as given and resolved)
    pids: frozenset[int] = frozenset()  # the processes fathom started on this host

    def claims(self, pid: int, fsid: str | None = None, conf: str | None = None) -> bool:
        return pid in self.pids or bool(fsid and fsid == self.fsid) or bool(conf and conf in self.confs)


@dataclass
class Attribution:
    """Which of a host's sampled processes count for it."""

    metadata_host: str | None  # the metadata's name of this host (None: it holds no daemon of the cluster)
    keep: set[int] = field(default_factory=set)  # pids that count
    found: dict[str, list[int]] = field(default_factory=dict)  # daemon -> its pids here
    missing: list[str] = field(default_factory=list)  # placed here by the metadata, no process of that name
    foreign: dict[str, list[int]] = field(default_factory=dict)  # named as a daemon, not it: not counted (also
    # gateways and clients nothing ties to this run or cluster)
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
              placed: dict[str, list[ClusterDaemon]], ours: Ours | None = None) -> Attribution:
    """The processes (a sample's `procs`, any number of samples' worth) that count for a host: the daemons the
    metadata places there, and the gateways and clients `ours` claims (by pid, or the fsid or conf a sampler
    read from the process); other gateways and clients are foreign, as another cluster's mon is."""
    here = {daemon_key(d.name): d for d in placed.get(metadata_host or "", [])} if metadata_host else {}
    by_name: dict[str, set[int]] = {}
    kinds: dict[str, str] = {}
    claimed: set[int] = set()
    for p in procs:
        pid = int(p["pid"])
        by_name.setdefault(p["daemon"], set()).add(pid)
        kinds[p["daemon"]] = p["kind"]
        if ours is not None and ours.claims(pid, p.get("fsid"), p.get("conf")):
            claimed.add(pid)
    out = Attribution(metadata_host)
    for name, pids in sorted(by_name.items()):
        d = here.get(daemon_key(name))
        if d is None:
            if kinds[name] in PLACED_KINDS:
                if placed:  # placed elsewhere (or nowhere): not this one
                    out.foreign[name] = sorted(pids)
                else:  # no metadata to place anything: what runs here is all there is
                    out.keep |= pids
                    out.found[name] = sorted(pids)
                continue
            # a gateway or client: the metadata places none, so only what ties it to this run or cluster counts
            mine, theirs = pids & claimed, pids - claimed
            if mine:
                out.keep |= mine
                out.found[name] = sorted(mine)
            if theirs:
                out.foreign[name] = sorted(theirs)
            continue
        chosen = pids & d.pids or pids
        if len(chosen) > 1:
            out.ambiguous.append(name)
        elif pids - chosen:  # its namesakes here: another cluster's
            out.foreign[name] = sorted(pids - chosen)
        out.keep |= chosen
        out.found[name] = sorted(chosen)
    found = {daemon_key(n) for n in out.found}
    out.missing = sorted(d.name for k, d in here.items() if k not in found)
    return out


Identities = tuple[int, dict[int, float]]  # a host's boot time (epoch s) and pid -> start (s after boot)


def identities(header: dict[str, Any] | None, win: list[dict[str, Any]], pids: set[int] | None = None) -> Identities:
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
    """This host's processes of `pids`, as identities gives a sampler's (its /proc's btime and start times)."""
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


def daemon_key(name: str) -> str:
    """A daemon's name as both sides can write it: RGW is client.rgw.ID in the service map and its admin
    socket, rgw.ID in a cephadm unit."""
    return name.removeprefix("client.")
