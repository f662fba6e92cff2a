"""What a point's resources can give: each host's cores and NIC ceilings, each local daemon's allowed cores.

fathom.analysis.bound sets a point's measured use against these. Read, never estimated:
- a host's cores: `getconf _NPROCESSORS_ONLN` there;
- a NIC's ceiling: its link speed (`/sys/class/net/IF/speed`, Mbit/s; none for loopback, bridges and a link
  down) and a rate cap set on it by a tc qdisc (`tc qdisc show`: tbf's or netem's `rate`): the lower of the two;
- a daemon's cores on this host: the CPUs it may run on (sched_getaffinity) and its cgroup's CPU quota (v2
  `cpu.max`, or v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`, of its cgroup and every parent, the tightest): the
  lower of the two.
- each OSD's device: for fathom's own cluster, the block device its BlueStore file (or device) lives on, by the
  file's st_dev (/sys/dev/block/MAJ:MIN); for an attached cluster, the devices `ceph osd metadata` names and the
  host it names.
One probe per host per run (a shell line, over SSH for server hosts: PROBE), one read per daemon per point.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any, Callable

from fathom.companion import Companion, Contribution
from fathom.errors import FathomError

# one line per NIC ("nic NAME SPEED"), then tc's qdiscs, then the online CPUs ("cpus N")
PROBE = ("for d in /sys/class/net/*; do printf 'nic %s %s\\n' \"${d##*/}\" \"$(cat \"$d/speed\" 2>/dev/null)\"; "
         "done; tc qdisc show 2>/dev/null; printf 'cpus %s\\n' \"$(getconf _NPROCESSORS_ONLN)\"")
_UNITS = {"": 1e-6, "K": 1e-3, "M": 1.0, "G": 1e3, "T": 1e6}  # to Mbit/s
_TC = re.compile(r"^qdisc (\S+) \S+ dev (\S+) .*?\brate ([\d.]+)([KMGT]?)bit\b")
CGROUP = Path("/sys/fs/cgroup")


def parse(text: str) -> dict[str, Any]:
    """PROBE's output as {cores, nics: {name: {speed_mbit, cap_mbit, cap, ceiling_mbit}}}; a NIC with neither a
    speed nor a cap has ceiling None (the kernel does not know it: loopback, a bridge, a link down)."""
    nics: dict[str, dict[str, Any]] = {}
    cores = None
    for line in text.splitlines():
        words = line.split()
        if line.startswith("nic ") and len(words) >= 2:
            speed = int(words[2]) if len(words) > 2 and words[2].lstrip("-").isdigit() else None
            nics[words[1]] = {"speed_mbit": speed if speed and speed > 0 else None, "cap_mbit": None, "cap": None}
        elif line.startswith("cpus ") and len(words) == 2 and words[1].isdigit():
            cores = int(words[1])
        elif (m := _TC.match(line)) is not None:
            name = m.group(2)
            nic = nics.setdefault(name, {"speed_mbit": None, "cap_mbit": None, "cap": None})
            rate = float(m.group(3)) * _UNITS[m.group(4)]
            if nic["cap_mbit"] is None or rate < nic["cap_mbit"]:
                nic["cap_mbit"], nic["cap"] = rate, f"tc {m.group(1)} rate {m.group(3)}{m.group(4)}bit"
    for nic in nics.values():
        known = [v for v in (nic["speed_mbit"], nic["cap_mbit"]) if v]
        nic["ceiling_mbit"] = min(known) if known else None
    return {"cores": cores, "nics": nics}


def here() -> dict[str, Any]:
    """This host's PROBE, run here."""
    try:
        p = subprocess.run(["sh", "-c", PROBE], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"cores": os.cpu_count(), "nics": {}, "error": str(exc)}
    return parse(p.stdout)


async def remote(ssh: Any) -> dict[str, Any]:
    """A server host's PROBE over its SSH connection (fathom.hosts.ssh.SshHost)."""
    try:
        rc, out, err = await ssh.run(PROBE)
    except Exception as exc:  # noqa: BLE001 - a host that cannot say has no ceilings: named, never fatal
        return {"cores": None, "nics": {}, "error": str(exc)[-200:]}
    got = parse(out)
    if rc != 0 and not got["nics"]:
        got["error"] = (err or f"exit {rc}").strip()[-200:]
    return got


def quota(text: str) -> float | None:
    """cgroup v2 `cpu.max` ("QUOTA PERIOD" or "max PERIOD") as cores; None for no quota."""
    words = text.split()
    if len(words) != 2 or words[0] == "max":
        return None
    try:
        return int(words[0]) / int(words[1])
    except (ValueError, ZeroDivisionError):
        return None


def quota_v1(quota_us: str, period_us: str) -> float | None:
    """cgroup v1 `cpu.cfs_quota_us` over `cpu.cfs_period_us` as cores; None for no quota (-1)."""
    try:
        q, p = int(quota_us), int(period_us)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _limits(pid: int, root: Path) -> list[tuple[Path, Path, Any]]:
    """(hierarchy root, the process's cgroup there, its reader of a directory's quota) for cgroup v2's cpu.max
    and v1's cpu controller, whichever this host mounts (a hybrid host has both)."""
    out: list[tuple[Path, Path, Any]] = []
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        num, ctrls, path = (line.split(":", 2) + ["", ""])[:3]
        rel = path.strip().lstrip("/")
        if num == "0" and ctrls == "":
            for top in (root, root / "unified"):
                if (top / "cgroup.controllers").exists():
                    out.append((top, top / rel, lambda d: quota(_text(d / "cpu.max"))))
        elif "cpu" in ctrls.split(","):
            top = next((root / n for n in (ctrls, "cpu", "cpu,cpuacct") if (root / n / "cpu.cfs_quota_us").exists()),
                       None)
            if top is not None:
                out.append((top, top / rel, lambda d: quota_v1(_text(d / "cpu.cfs_quota_us"),
                                                                _text(d / "cpu.cfs_period_us"))))
    return out


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def daemon_cores(pid: int, root: Path = CGROUP) -> tuple[float | None, str]:
    """The cores a process may use, and why: min(its CPU affinity, its cgroups' CPU quotas up the tree)."""
    try:
        cpus = len(os.sched_getaffinity(pid))
    except OSError:
        return None, "gone"
    cores, why = float(cpus), f"{cpus} CPU(s) it may run on"
    for top, d, read in _limits(pid, root):
        while True:
            q = read(d)
            if q is not None and q < cores:
                where = "/" + str(d.relative_to(top)) if d != top else "/"
                cores, why = q, f"cgroup {where} CPU quota {q:g} core(s)"
            if d == top or top not in d.parents:
                break
            d = d.parent
    return cores, why


def block_device(path: Path) -> str | None:
    """The kernel's name (as /proc/diskstats has it: sda1, dm-0, loop3) of the block device that is `path`, or
    that holds the file system `path` is on; None on a file system with no device (tmpfs, overlay)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    dev = st.st_rdev if stat.S_ISBLK(st.st_mode) else st.st_dev
    uevent = _text(Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/uevent"))
    return next((ln[len("DEVNAME="):] for ln in uevent.splitlines() if ln.startswith("DEVNAME=")), None)


def local_osd_devices(root: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """{osd.N: {host (None: any sampled host: they share this kernel), devices, why}} of fathom's own cluster under
    root, whose OSDs keep their BlueStore in ROOT/osd.N/block.data (fathom.cluster.localconf)."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        block = root / name / "block.data"
        if not block.exists():
            continue  # memstore: no device
        dev = block_device(block)
        out[name] = {"host": None, "devices": [dev] if dev else [],
                     "why": f"its BlueStore file {block}" + ("" if dev else " is on a file system with no device")}
    return out


def metadata_osd_devices(meta: Any) -> dict[str, dict[str, Any]]:
    """The same from `ceph osd metadata` (a list of per-OSD dicts): the devices under each OSD and its host."""
    out: dict[str, dict[str, Any]] = {}
    for m in meta if isinstance(meta, list) else []:
        if not isinstance(m, dict) or m.get("id") is None:
            continue
        devs = [d for d in str(m.get("devices") or "").split(",") if d]
        out[f"osd.{m['id']}"] = {"host": m.get("hostname"), "devices": devs,
                                 "why": "its devices by `ceph osd metadata`" if devs else
                                 "`ceph osd metadata` names no device"}
    return out


def osd_devices(local: Any, ceph: Any) -> dict[str, dict[str, Any]]:
    """Each OSD's devices: fathom's own cluster's (a fathom.cluster.local.LocalCluster) by their files, an
    attached one's by `ceph osd metadata` (none when the mons cannot say)."""
    if local is not None:
        return local_osd_devices(local.root, [d.name for d in local.daemons() if d.kind == "osd"])
    if ceph is None:
        return {}
    try:
        return metadata_osd_devices(ceph.ceph("osd", "metadata", timeout=30))
    except FathomError:
        return {}


class CapacityCompanion(Companion):
    """Each point's `capacity` event: the hosts' ceilings probed once for the run, and this host's daemons'
    allowed cores read at the point's end (a cgroup or an affinity may change between points)."""

    def __init__(self, here_name: str, hosts: dict[str, dict[str, Any]], daemons: Callable[[], list[Any]],
                 osds: dict[str, dict[str, Any]] | None = None):
        self.here_name, self.hosts, self.daemons, self.osds = here_name, hosts, daemons, osds or {}

    def stop(self) -> Contribution:
        mine: dict[str, Any] = {}
        for d in self.daemons():
            if d.pid:
                cores, why = daemon_cores(int(d.pid))
                if cores is not None:
                    mine[d.name] = {"cores": round(cores, 3), "why": why}
        data = {"here": self.here_name, "hosts": self.hosts, "daemons": mine, "osds": self.osds}
        return Contribution(events=[{"kind": "capacity", "data": data,
                                     "message": f"ceilings of {len(self.hosts)} host(s), {len(mine)} daemon(s)"}])


def companion(servers: Any, daemons: Callable[[], list[Any]], osds: dict[str, dict[str, Any]] | None = None,
              state: dict[str, Any] | None = None) -> CapacityCompanion:
    """The run's CapacityCompanion: this host probed now, the SSH server hosts as they were when connected, the
    emulated hosts of a local cluster's state (fathom.cluster.box: their NICs' caps); osds: each OSD's devices
    (local_osd_devices, metadata_osd_devices)."""
    from fathom.cluster import box

    here_name = os.uname().nodename
    hosts = {here_name: here(), **box.capacity(state or {})}
    for h in getattr(servers, "hosts", None) or []:
        if getattr(h, "capacity", None) is not None:
            hosts[h.hostname] = h.capacity
    return CapacityCompanion(here_name, hosts, daemons, osds)
