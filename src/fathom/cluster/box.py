"""Hosts in a box: fathom's own cluster across emulated hosts on this machine (`fathom cluster up --hosts N`).

Each host is a network namespace with its own hostname (a UTS namespace: `host1`, `host2`, ...), one address on a
bridge fathom makes, and a veth pair to it. An optional tc qdisc on the host's side of its link caps what the
host sends (`--host-nic RATE`: tbf) and delays it (`--host-delay MS`: netem); the cap also holds what it receives
(tbf on the bridge's side of its link: a NIC is capped both ways), the delay only what it sends. A holder process
(`sleep`) keeps each host's namespaces; the daemons placed on a host enter them (nsenter), so Ceph sees that
hostname and CRUSH puts the host's OSDs under a host bucket of that name. The mon and the mgr run on the first
host; this host (the clients) reaches every host on the bridge.

What the box made is in the cluster's state (`box`) before it is made, so `fathom cluster down` removes it, also
after a kill -9: the holders by pid (only while the pid is still a holder), the namespaces and the bridge by name
(the veths go with their namespaces). No host-wide setting changes: no sysctl, no route; traffic stays on the
bridge. What it cannot emulate: the machine's cores, memory and disks are shared by every host.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from fathom.errors import ClusterError, UsageError
from fathom.units import tc_bits, tc_rate

def plan(fsid: str, n: int, nic: str | None = None, delay_ms: float | None = None) -> dict[str, Any]:
    """The box of n hosts a cluster of this fsid gets: its names (short enough for interface names), not made."""
    if n < 1:
        raise UsageError(f"--hosts: at least 1, got {n}")
    if delay_ms is not None and delay_ms < 0:
        raise UsageError(f"--host-delay: 0 ms or more, got {delay_ms:g}")
    tag = "fx" + fsid.replace("-", "")[:6]
    return {"tag": tag, "bridge": f"{tag}br", "prefix": None, "nic": tc_rate(nic) if nic else None,
            "delay_ms": delay_ms,
            "hosts": [{"hostname": f"host{i + 1}", "ns": f"{tag}h{i + 1}", "veth": f"{tag}v{i + 1}", "addr": None,
                       "pid": None} for i in range(n)]}


def qdisc(nic: str | None, delay_ms: float | None) -> list[str]:
    """The root qdisc that shapes what a host sends: tbf for a rate cap alone (its bucket 10 ms of the rate, at
    least 64 KiB), netem when there is a delay (with the rate, if any); [] for neither."""
    if delay_ms is not None:
        return ["netem", "delay", f"{delay_ms:g}ms", *(["rate", nic] if nic else [])]
    if not nic:
        return []
    return tbf(nic)


def tbf(nic: str) -> list[str]:
    """A tbf qdisc sending at most nic: its bucket 10 ms of the rate, at least 64 KiB."""
    bits = tc_bits(nic)
    return ["tbf", "rate", nic, "burst", f"{max(64 * 1024, int(bits / 8 / 100))}b", "latency", "50ms"]


def _ip(*args: str) -> None:
    p = subprocess.run(["ip", *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise ClusterError(f"ip {' '.join(args)}: {p.stderr.strip() or p.returncode}",
                           hint="emulated hosts need root (CAP_NET_ADMIN) and iproute2")


def _subnets_in_use() -> set[str]:
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    return {".".join(m.split(".")[:3]) for m in re.findall(r"inet (\d+\.\d+\.\d+)\.\d+/", out)}


def join(bridge: str, ns: str, veth: str, addr: str) -> str:
    """A network namespace `ns` made and joined to `bridge` by a veth pair (`veth` here, `veth`p in it, holding
    addr/24), its loopback up; returns the name of its side of the link. fathom.hosts.netns's test beds use it."""
    peer = f"{veth}p"
    _ip("netns", "add", ns)
    _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
    _ip("link", "set", veth, "master", bridge)
    _ip("link", "set", veth, "up")
    _ip("link", "set", peer, "netns", ns)
    _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", peer)
    _ip("-n", ns, "link", "set", peer, "up")
    _ip("-n", ns, "link", "set", "lo", "up")
    return peer


def up(box: dict[str, Any], save: Callable[[dict[str, Any]], None]) -> str:
    """Make the box (each step saved first, for `down` after a crash); returns the bridge's address here."""
    used = _subnets_in_use()
    free = [f"10.216.{k}" for k in range(10, 250) if f"10.216.{k}" not in used]
    if not free:
        raise ClusterError("no free 10.216.x.0/24 subnet for the emulated hosts' bridge")
    box["prefix"] = prefix = random.choice(free)
    for i, h in enumerate(box["hosts"]):
        h["addr"] = f"{prefix}.{11 + i}"
    save(box)
    _ip("link", "add", box["bridge"], "type", "bridge")
    _ip("addr", "add", f"{prefix}.1/24", "dev", box["bridge"])
    _ip("link", "set", box["bridge"], "up")
    for h in box["hosts"]:
        peer = join(box["bridge"], h["ns"], h["veth"], h["addr"])
        shape = qdisc(box.get("nic"), box.get("delay_ms"))
        if shape:  # what the host sends: its NIC's cap and the link's delay
            _tc(h, ["ip", "netns", "exec", h["ns"], "tc", "qdisc", "add", "dev", peer, "root", *shape])
        if box.get("nic"):  # what it receives, on the bridge's side of its link: a NIC is capped both ways
            _tc(h, ["tc", "qdisc", "add", "dev", h["veth"], "root", *tbf(box["nic"])])
        # the holder: its own UTS namespace with the host's name, in the host's network namespace; exec'd, so
        # the pid is sleep's (a daemon enters both with nsenter -t PID -n -u)
        holder = subprocess.Popen(["ip", "netns", "exec", h["ns"], "unshare", "--uts", "sh", "-c",
                                   f"hostname {h['hostname']} && exec sleep infinity"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        h["pid"] = holder.pid
        save(box)
    return f"{prefix}.1"


def _tc(h: dict[str, Any], argv: list[str]) -> None:
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        kind = argv[argv.index("root") + 1]
        raise ClusterError(f"tc {kind} on {h['hostname']}: {p.stderr.strip()}",
                           hint=f"this kernel lacks the sch_{kind} qdisc (fathom loads no module)")


def placement(box: dict[str, Any], osds: int, mds: bool = False, rgw: bool = False) -> dict[str, dict[str, Any]]:
    """Where each daemon runs (fathom.cluster.local's `places`): mon, mgr (and MDS) on the first host, OSD i on
    host i mod n, with rgw an RGW on every host (`client.rgw.<hostname>`, as the RGW study ran them)."""
    hosts = box["hosts"]

    def on(h: dict[str, Any]) -> dict[str, Any]:
        return {"prefix": ["nsenter", "-t", str(h["pid"]), "-n", "-u", "--"], "addr": h["addr"],
                "host": h["hostname"]}
    out = {"mon.a": on(hosts[0]), "mgr.x": on(hosts[0]), **{f"osd.{i}": on(hosts[i % len(hosts)])
                                                           for i in range(osds)}}
    if mds:
        out["mds.a"] = on(hosts[0])
    if rgw:
        out.update({f"client.rgw.{h['hostname']}": on(h) for h in hosts})
    return out


def homes(state: dict[str, Any]) -> dict[str, str]:
    """Each placed daemon's emulated host: {daemon name: hostname} (the samplers' per-host rows)."""
    return {name: p["host"] for name, p in (state.get("places") or {}).items() if p.get("host")}


def nics(state: dict[str, Any]) -> list[tuple[str, int, str]]:
    """(hostname, holder pid, the host's side of its link) of each emulated host whose holder still holds it: its
    /proc/<pid>/net/dev is that host's view of its NIC."""
    return [(h["hostname"], int(h["pid"]), f"{h['veth']}p") for h in (state.get("box") or {}).get("hosts") or []
            if _holder(h.get("pid"))]


def capacity(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The emulated hosts' ceilings (fathom.servers.capacity's per-host shape): no cores of their own (they share
    this machine's), each NIC at the box's cap both ways; a NIC with no cap has no speed (a veth has none)."""
    b = state.get("box") or {}
    nic = b.get("nic")
    mbit = tc_bits(nic) / 1e6 if nic else None
    why = f"tc tbf rate {nic} both ways, an emulated NIC" if nic else None
    return {h["hostname"]: {"cores": None,
                            "nics": {f"{h['veth']}p": {"speed_mbit": mbit, "cap_mbit": mbit, "cap": why}}}
            for h in b.get("hosts") or []}


def _holder(pid: int | None) -> bool:
    """Whether pid is still a box's holder (a recycled pid is not ours to kill)."""
    if not pid:
        return False
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"infinity"]
    except OSError:
        return False


def left(box: dict[str, Any]) -> list[str]:
    """What of a box is still on this host: its namespaces, its bridge, its live holders (a zombie is gone)."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    out = [h["ns"] for h in box["hosts"] if h["ns"] in names] + ([box["bridge"]] if f" {box['bridge']}:" in links
                                                                  else [])
    return out + [f"pid {h['pid']}" for h in box["hosts"] if _holder(h.get("pid"))]


def remove(box: dict[str, Any] | None) -> list[str]:
    """Remove what the box made; idempotent. Returns what could not be removed (said by the caller)."""
    if not box:
        return []
    left = []
    have = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for h in box.get("hosts") or []:
        if _holder(h.get("pid")):
            try:
                os.kill(int(h["pid"]), 9)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 5
            while _holder(h["pid"]) and time.monotonic() < deadline:  # gone (a zombie has no command line)
                time.sleep(0.02)
        if re.search(rf"^{re.escape(h['ns'])}\b", have, re.MULTILINE):
            p = subprocess.run(["ip", "netns", "del", h["ns"]], capture_output=True, text=True)
            if p.returncode != 0:
                left.append(f"namespace {h['ns']}: {p.stderr.strip()}")
    if subprocess.run(["ip", "link", "show", box["bridge"]], capture_output=True).returncode == 0:
        p = subprocess.run(["ip", "link", "del", box["bridge"]], capture_output=True, text=True)
        if p.returncode != 0:
            left.append(f"bridge {box['bridge']}: {p.stderr.strip()}")
    return left


def build(state: dict[str, Any], hosts: dict[str, Any], osds: int, mds: bool, mon_ports: tuple[int, int],
          save: Callable[[], None]) -> None:
    """A local cluster's box ({n, nic, delay_ms}) made, kept in its state (`box`) at each step; its daemons'
    places (the `places` given win) and the mons' address (where mon.a runs) in the state. On a failure what was
    made is removed."""
    state["box"] = plan(state["fsid"], hosts["n"], hosts.get("nic"), hosts.get("delay_ms"))
    try:
        up(state["box"], lambda _: save())
    except BaseException:
        remove(state["box"])
        raise
    state["places"] = {**placement(state["box"], osds, mds, bool(state.get("rgw"))), **(state.get("places") or {})}
    mon = state["places"]["mon.a"]["addr"]
    state["mon_host"] = f"[v2:{mon}:{mon_ports[0]},v1:{mon}:{mon_ports[1]}]"
    save()
