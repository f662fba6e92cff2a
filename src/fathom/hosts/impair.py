"""A host impaired for a fault, and put back: its interface shaped (tc), its routes to its peers cut, its daemons
frozen or killed.

A host is an emulated host of fathom's local cluster (its network namespace on this machine: fathom.cluster.box) or
a server host over SSH (root there, as tc and ip need). Every change is written to the run's undo journal (kind
`fault`) before it is made, with what putting it back needs, so the point's end, Ctrl-C and `fathom cluster restore`
after a kill -9 all undo it the same way (`undo`).

    shape     `tc qdisc replace dev D root ...` (tbf for nic_cap, netem for netem); put back: the qdisc the box gave
              the host, or the interface's default (`tc qdisc del dev D root`). A server host's interface must have
              its default qdisc (noqueue, pfifo_fast, fq_codel, fq, mq): any other is the user's, and not touched.
    cut       a blackhole route to each peer (the cluster's other hosts): the host can send to none of them, and
              peers' packets get no answer; this machine (the clients, the orchestrator) still reaches it. Put
              back: those routes deleted.
    freeze    SIGSTOP to each daemon of an emulated host (a hung host); put back: SIGCONT.
    kill      SIGKILL to each (a crashed host); put back: each started again (fathom.cluster.local).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fathom.cluster.journal import FAULT_KIND, Entry, Journal
from fathom.errors import FathomError
from fathom.hosts.clients import ClientHost, ClientsSpec
from fathom.hosts.ssh import LOOP, HostError, SshHost

DEFAULT_QDISCS = {"noqueue", "pfifo_fast", "fq_codel", "fq", "mq", "noop", "pfifo", "cake"}


@dataclass
class Place:
    """Where a host's faults are made: an emulated host's namespace (ns) or a server host over SSH (ssh)."""

    name: str
    addr: str
    peers: list[str]  # the other hosts' addresses
    ns: str | None = None
    dev: str | None = None  # the host's interface (an SSH host's is found from its address when not given)
    base: list[str] = field(default_factory=list)  # the qdisc the box gave it (none: the interface's default)
    ssh: dict[str, Any] | None = None  # host, port, user, key_file, known_hosts: paths and names, never a key

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "addr": self.addr, "peers": self.peers, "ns": self.ns, "dev": self.dev,
                "base": self.base, "ssh": self.ssh}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Place:
        return Place(name=d["name"], addr=d["addr"], peers=list(d.get("peers") or []), ns=d.get("ns"),
                     dev=d.get("dev"), base=list(d.get("base") or []), ssh=d.get("ssh"))


def box_places(box: dict[str, Any]) -> dict[str, Place]:
    """The emulated hosts of a local cluster's box (its state's `box`), by hostname."""
    from fathom.cluster.box import qdisc

    hosts = box.get("hosts") or []
    base = qdisc(box.get("nic"), box.get("delay_ms"))
    return {h["hostname"]: Place(name=h["hostname"], addr=h["addr"], ns=h["ns"], dev=f"{h['veth']}p", base=base,
                                 peers=[o["addr"] for o in hosts if o is not h and o.get("addr")])
            for h in hosts if h.get("addr")}


def server_places(servers: Any | None) -> dict[str, Place]:
    """The server hosts given (fathom.servers.named.ServersSpec: --server-host), by the name given and by address:
    their peers are the others."""
    hosts = [h for h in (servers.hosts if servers else []) if h.pod is None and h.host != "local"]
    addrs = {h.host: _address(h.host) for h in hosts}
    out: dict[str, Place] = {}
    for h in hosts:
        p = Place(name=h.host, addr=addrs[h.host], peers=[a for k, a in addrs.items() if k != h.host],
                  ssh={"host": h.host, "port": h.port, "user": h.user, "key_file": h.key_file,
                       "known_hosts": servers.known_hosts if servers else None})
        out[h.host] = out[p.addr] = p
    return out


def _address(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


# ---- running a command there --------------------------------------------------------------

def run(place: Place, argv: list[str], timeout: float = 30.0) -> tuple[int, str, str]:
    """argv on the host: in its namespace here, or over SSH. (rc, stdout, stderr)."""
    if place.ns is not None:
        try:
            p = subprocess.run(["ip", "netns", "exec", place.ns, *argv], capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return 124, "", f"timed out after {timeout:g} s"
        return p.returncode, p.stdout, p.stderr
    assert place.ssh is not None
    spec = ClientHost(host=place.ssh["host"], port=place.ssh.get("port") or 22, user=place.ssh.get("user"),
                      key_file=place.ssh.get("key_file"))
    host = SshHost(spec, ClientsSpec(hosts=[spec], known_hosts=place.ssh.get("known_hosts")), role="server host")

    async def go() -> tuple[int, str, str]:
        try:
            await host.connect()
            rc, out, err = await host.run(shlex.join(argv))
            return rc, out, err
        finally:
            await host.aclose()
    try:
        return LOOP.run(go())
    except HostError as exc:
        raise FathomError(f"{place.name}: {exc.message}", hint=exc.hint) from None


def _must(place: Place, argv: list[str], hint: str = "") -> str:
    rc, out, err = run(place, argv)
    if rc != 0:
        raise FathomError(f"{place.name}: `{shlex.join(argv)}` failed (exit {rc}): {err.strip()[-300:]}",
                          hint=hint or ("tc and ip need root (CAP_NET_ADMIN) on that host"))
    return out


def interface(place: Place) -> str:
    """The host's interface: the one holding its address."""
    if place.dev:
        return place.dev
    out = _must(place, ["ip", "-o", "-4", "addr", "show"])
    for line in out.splitlines():
        words = line.split()
        if len(words) > 3 and words[3].split("/")[0] == place.addr:
            place.dev = words[1].split("@")[0]
            return place.dev
    raise FathomError(f"{place.name}: no interface holds {place.addr}",
                      hint="name the host in --server-host by the address its cluster traffic uses")


# ---- the changes --------------------------------------------------------------------------

def shape(place: Place, qdisc: list[str], journal: Journal, why: str) -> None:
    """The host's root qdisc replaced by `qdisc` (journaled first; a second shape keeps the first's way back)."""
    dev = interface(place)
    if place.ns is None:  # a server host: only its default qdisc is ours to replace and put back
        out = _must(place, ["tc", "-j", "qdisc", "show", "dev", dev])
        root = next((q for q in json.loads(out or "[]") if q.get("root")), {})
        if root.get("kind") not in DEFAULT_QDISCS and not journal.holds(FAULT_KIND, f"{place.name} {dev} qdisc"):
            raise FathomError(f"{place.name}: {dev}'s root qdisc is {root.get('kind')!r}, not a default one: "
                              "fathom would not put it back as it was, so it leaves it alone",
                              hint="run the fault on a host whose interface has its default qdisc")
    journal.write(Entry(FAULT_KIND, f"{place.name} {dev} qdisc", undo=shlex.join(_unshape(place, dev)),
                        data={"op": "shape", "place": place.to_dict(), "why": why}))
    rc, _, err = run(place, ["tc", "qdisc", "replace", "dev", dev, "root", *qdisc])
    if rc != 0:
        if "unknown" in err.lower() or "no such file" in err.lower():
            raise FathomError(f"{place.name}: the kernel there has no sch_{qdisc[0]} qdisc (tc: {err.strip()[-200:]})",
                              hint=f"`modprobe sch_{qdisc[0]}` as root there (fathom loads no kernel module), or use "
                                   "another fault")
        raise FathomError(f"{place.name}: tc {qdisc[0]} on {dev}: {err.strip()[-300:]}",
                          hint="tc needs root (CAP_NET_ADMIN) on that host")


def _unshape(place: Place, dev: str) -> list[str]:
    return ["tc", "qdisc", "replace", "dev", dev, "root", *place.base] if place.base else \
        ["tc", "qdisc", "del", "dev", dev, "root"]


def cut(place: Place, journal: Journal, why: str) -> None:
    """A blackhole route from the host to each peer (journaled first)."""
    if not place.peers:
        raise FathomError(f"{place.name} has no peers to be cut off from (one host)")
    journal.write(Entry(FAULT_KIND, f"{place.name} routes", data={"op": "cut", "place": place.to_dict(), "why": why}))
    for peer in place.peers:
        _must(place, ["ip", "route", "replace", "blackhole", f"{peer}/32"])


def freeze(name: str, daemons: list[str], live: list[Any], journal: Journal, why: str, kill: bool, root: str,
           conf: str) -> list[int]:
    """SIGSTOP (kill: SIGKILL) to each running daemon of a host (live: fathom's own, checked by the caller against a
    recycled pid); daemons: every daemon of the host by name (a killed host's are started again); the pids
    signalled."""
    journal.write(Entry(FAULT_KIND, f"{name} daemons", data={
        "op": "kill" if kill else "freeze", "host": name, "root": root, "conf": conf,
        "daemons": daemons, "pids": [d.pid for d in live], "why": why}))
    for d in live:
        os.kill(d.pid, signal.SIGKILL if kill else signal.SIGSTOP)
    return [d.pid for d in live]


# ---- putting back -------------------------------------------------------------------------

def undo(e: Entry, start: Callable[[str], Any] | None = None) -> str | None:
    """Put back one `fault` entry; None when done (or moot: the namespace is gone), else why not. start: starts a
    local cluster's daemon by name (a killed host's), when one is at hand."""
    d = e.data
    op = d.get("op")
    try:
        if op in ("shape", "cut"):
            place = Place.from_dict(d["place"])
            if place.ns is not None and not Path(f"/run/netns/{place.ns}").exists():
                return None  # the emulated host is gone, and with it the change
            if op == "shape":
                argv = shlex.split(e.undo)
                rc, _, err = run(place, argv)
                if rc != 0 and not (argv[2] == "del" and ("handle of zero" in err or "No such file" in err)):
                    return f"`{e.undo}` failed (exit {rc}): {err.strip()[-200:]}"
                return None
            for peer in place.peers:
                rc, _, err = run(place, ["ip", "route", "del", "blackhole", f"{peer}/32"])
                if rc != 0 and "No such process" not in err:
                    return f"`ip route del blackhole {peer}/32` failed (exit {rc}): {err.strip()[-200:]}"
            return None
        if op == "freeze":
            for pid in d.get("pids") or []:
                if _runs_with(pid, d.get("conf") or ""):
                    os.kill(pid, signal.SIGCONT)
            return None
        if op == "kill":
            if start is None:  # the local cluster the entry names, while it is still there
                from fathom.cluster.local import LocalCluster

                local = LocalCluster(Path(d.get("root") or "/nonexistent"))
                if local.state() is None:
                    return None  # that cluster is gone, and its daemons with it
                start = local.start_daemon
                running = {x.name for x in local.daemons() if x.running}
            else:
                running = set()
            for name in d.get("daemons") or []:
                if name not in running:
                    start(name)
            return None
    except (FathomError, OSError) as exc:
        return getattr(exc, "message", None) or str(exc)
    return f"unknown fault entry {op!r}"


def _runs_with(pid: int, conf: str) -> bool:
    """Whether pid still runs with the cluster's conf (a recycled pid is not ours to signal)."""
    try:
        return bool(conf) and conf.encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def undo_all(journal: Journal, say: Callable[[str], None],
             start: Callable[[str], Any] | None = None) -> list[str]:
    """Every pending `fault` entry put back, newest first; what could not be (said)."""
    left = []
    for e in journal.pending(FAULT_KIND):
        why = undo(e, start)
        journal.mark(e, why)
        if why is None:
            say(f"put back {e.what} ({e.data.get('why') or e.data.get('op')})")
        else:
            left.append(f"{e.what}: {why}")
            say(f"could not put back {e.what}: {why}")
    return left
