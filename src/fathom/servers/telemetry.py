"""Server- and host-side measurements during a point, on the engine's clock (epoch seconds).

- `Sampler`: a thread reading /proc once a second for every local Ceph daemon
  (CPU as % of one core summed over the process's threads, as top shows it;
  RSS MiB; voluntary/involuntary context switches summed over its threads),
  the host (CPU busy % of all cores, memory) and the engine process. It
  measures its own cost with time.thread_time().
- `perf_dump()`: Ceph perf counters read straight from the admin socket (no
  `ceph` CLI process, which would cost more CPU than the sampling itself);
  fathom.results.usage.perf_deltas turns two dumps into a point's deltas
  (averages become Δsum/Δavgcount), and .summarize the samples into figures.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

from fathom.cluster.local import Daemon
from fathom.servers import hostsample

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
# rgw_op: RGW's op counters from Squid on (reconcile reads them; Tentacle's rgw section has none)
PERF_SECTIONS = ("osd", "bluestore", "bluefs", "rocksdb", "objecter", "mon", "mgr", "rgw", "rgw_op", "mds")
# and every `throttle-*` section: the waits fathom.analysis.bound reads


# ---- /proc readers ------------------------------------------------------------

def _read(path: str) -> bytes:
    # os.open/os.read: a third of the cost of open().read() in a loop over hundreds of threads
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 8192)
    finally:
        os.close(fd)


_VOL = b"\nvoluntary_ctxt_switches:"
_NVOL = b"\nnonvoluntary_ctxt_switches:"


def _field(buf: bytes, key: bytes) -> int:
    i = buf.find(key)
    if i < 0:
        return 0
    j = buf.find(b"\n", i + len(key))
    return int(buf[i + len(key):j if j > 0 else None])


def proc_sample(pid: int) -> dict[str, float] | None:
    """Cumulative CPU seconds, RSS bytes and context switches of a process (all threads), or None if gone."""
    try:
        fields = _read(f"/proc/{pid}/stat").rsplit(b")", 1)[1].split()
        # fields[0] is state (field 3); utime/stime are fields 14/15, num_threads 20, rss pages 24
        cpu_s = (int(fields[11]) + int(fields[12])) / CLK_TCK
        rss = int(fields[21]) * PAGE
        nthreads = int(fields[17])
    except (OSError, IndexError, ValueError):
        return None
    vol = invol = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tasks = []
    for tid in tasks:
        try:
            buf = _read(f"/proc/{pid}/task/{tid}/status")
            vol += _field(buf, _VOL)
            invol += _field(buf, _NVOL)
        except (OSError, ValueError):
            continue  # a thread ended between listdir and open
    return {"cpu_s": cpu_s, "rss": rss, "vctx": vol, "nvctx": invol, "threads": nthreads}


def host_sample() -> dict[str, Any]:
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    vals = [int(x) for x in parts]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    total = sum(vals[:8])  # guest time is already in user
    mem: dict[str, int] = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            if k in ("MemTotal", "MemAvailable"):
                mem[k] = int(v.split()[0]) * 1024
            if len(mem) == 2:
                break
    return {"busy": (total - idle) / CLK_TCK, "total": total / CLK_TCK, "mem_total": mem.get("MemTotal", 0),
            "mem_avail": mem.get("MemAvailable", 0), "disks": disk_times()}


def disk_times() -> dict[str, dict[str, float]]:
    """{device: {io_s (s with I/O in flight), weighted_s}} of /proc/diskstats' used devices (fields 13 and 14, ms),
    as the host sampler keeps them (fathom.servers.hostsample.busy_disks makes the rates of two)."""
    out: dict[str, dict[str, float]] = {}
    try:
        with open("/proc/diskstats") as f:
            for line in f:
                w = line.split()
                if len(w) >= 14 and (w[3] != "0" or w[7] != "0"):  # never used (ram*, idle loops): left out
                    out[w[2]] = {"io_s": int(w[12]) / 1e3, "weighted_s": int(w[13]) / 1e3}
    except (OSError, ValueError):
        pass
    return out


NCPU = os.cpu_count() or 1


def nic_bytes(pid: int, nic: str) -> tuple[int, int] | None:
    """(received, sent) bytes of one interface as the network namespace of pid sees it, None if gone."""
    try:
        text = _read(f"/proc/{pid}/net/dev").decode()
    except OSError:
        return None
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == nic:
            f = rest.split()
            return int(f[0]), int(f[8])
    return None


def boxed(local: Any) -> dict[str, Any]:
    """The Sampler's `homes` and `nics` for fathom's local cluster when it spans emulated hosts, else none."""
    from fathom.cluster import box

    st = local.state() if local is not None else None
    return {"homes": box.homes(st), "nics": box.nics(st)} if st and st.get("box") else {}


class Sampler:
    """Samples once a second between start() and stop(); samples are rates over the previous second.

    On a cluster across emulated hosts (fathom.cluster.box) `homes` names each daemon's host and `nics` each
    host's (hostname, holder pid, interface): the daemons' samples carry their host, and each host gets a host
    sample of its NIC's bytes (as its namespace sees them; its cores are this machine's, so none of its own:
    `shared`)."""

    def __init__(self, daemons: list[Daemon], interval: float = 1.0, host_kind: str = "host",
                 homes: dict[str, str] | None = None, nics: list[tuple[str, int, str]] | None = None):
        self.daemons = [d for d in daemons if d.pid]
        # "client_host" when the cluster's hosts are sampled elsewhere (over SSH) and this is not one of them
        self.host_kind = host_kind
        self.homes, self.nics = homes or {}, nics or []
        self.interval = interval
        self.engine_pid: int | None = None
        self.samples: list[dict[str, Any]] = []
        self._prev: dict[tuple[str, int], tuple[float, dict[str, float]]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.cpu_s = 0.0  # the sampler thread's own CPU time
        self.wall_s = 0.0

    def set_engine_pid(self, pid: int | None) -> None:
        with self._lock:
            self.engine_pid = pid

    def set_daemons(self, daemons: list[Daemon]) -> None:
        """Sample these daemons from now on (a point started one: ceph-fuse, ganesha). A new one's baseline is
        taken at once, so even a point shorter than the sampling interval gets its share from the last sample."""
        now = time.time()
        with self._lock:
            self.daemons = [d for d in daemons if d.pid]
            for d in self.daemons:
                if (d.name, d.pid) not in self._prev and (s := proc_sample(d.pid)) is not None:  # type: ignore[arg-type]
                    self._prev[(d.name, d.pid)] = (now, s)  # type: ignore[index]

    def start(self) -> None:
        self._stop.clear()
        self.samples = []
        self._prev = {}
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="fathom-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> list[dict[str, Any]]:
        """Stop sampling (idempotent) and return this point's samples."""
        if self._thread is None:
            return self.samples
        self._stop.set()
        self._thread.join(timeout=10)
        self._thread = None
        self.wall_s += time.monotonic() - self._t0
        return self.samples

    def _loop(self) -> None:
        c0 = time.thread_time()
        try:
            self.sample(baseline=True)
            while not self._stop.wait(self.interval):
                self.sample()
            self.sample()  # the tail up to stop()
        finally:
            self.cpu_s += time.thread_time() - c0

    def sample(self, baseline: bool = False) -> None:
        now = time.time()
        out: list[dict[str, Any]] = []
        with self._lock:
            procs = [(d.name, d.kind, d.pid) for d in self.daemons]
            if self.engine_pid:
                procs.append(("engine", "engine", self.engine_pid))
        for name, kind, pid in procs:
            s = proc_sample(pid)  # type: ignore[arg-type]
            if s is None:
                continue
            prev = self._prev.get((name, pid))  # type: ignore[arg-type]
            self._prev[(name, pid)] = (now, s)  # type: ignore[index]
            if prev is None:
                continue
            dt = now - prev[0]
            if dt <= 0.05:
                continue
            p = prev[1]
            cpu_pct = 100.0 * (s["cpu_s"] - p["cpu_s"]) / dt
            out.append({"ts": now, "source": name, "kind": kind, "pid": pid, "cpu_pct": cpu_pct,
                        "cores": cpu_pct / 100.0, "rss_mib": s["rss"] / 2**20,
                        "vctx_s": (s["vctx"] - p["vctx"]) / dt, "nvctx_s": (s["nvctx"] - p["nvctx"]) / dt,
                        "threads": s["threads"], "dt": dt, **({"host": self.homes[name]} if name in self.homes
                                                              else {})})
        out += self._box(now)
        h = host_sample()
        prev = self._prev.get(("host", 0))
        self._prev[("host", 0)] = (now, h)  # type: ignore[assignment]
        if prev is not None:
            p = prev[1]
            dtot = h["total"] - p["total"]
            busy = 100.0 * (h["busy"] - p["busy"]) / dtot if dtot > 0 else 0.0
            out.append({"ts": now, "source": "host", "kind": self.host_kind, "pid": None, "cpu_pct": busy,
                        "cores": busy / 100.0 * NCPU, "rss_mib": (h["mem_total"] - h["mem_avail"]) / 2**20,
                        "mem_total_mib": h["mem_total"] / 2**20, "ncpu": NCPU, "dt": now - prev[0],
                        "disks": hostsample.busy_disks({"disk": p["disks"]}, {"disk": h["disks"]}, now - prev[0])})
        if not baseline:
            self.samples.extend(out)

    def _box(self, now: float) -> list[dict[str, Any]]:
        """The emulated hosts' NIC samples: bytes/s received and sent on each host's side of its link."""
        out = []
        for host, pid, nic in self.nics:
            got = nic_bytes(pid, nic)
            if got is None:
                continue
            prev = self._prev.get((host, pid))
            self._prev[(host, pid)] = (now, {"rx": got[0], "tx": got[1]})  # type: ignore[dict-item]
            if prev is None or now - prev[0] <= 0.05:
                continue
            dt = now - prev[0]
            out.append({"ts": now, "source": "host", "kind": "host", "host": host, "pid": None, "dt": dt,
                        "ncpu": NCPU, "shared": True, "net_rx_bytes_s": (got[0] - prev[1]["rx"]) / dt,
                        "net_tx_bytes_s": (got[1] - prev[1]["tx"]) / dt})
        return out

    @property
    def cost_pct(self) -> float | None:
        """The sampler's own CPU, % of one core over the time it ran."""
        return 100.0 * self.cpu_s / self.wall_s if self.wall_s > 0 else None


def asok_command(path: str | Path, prefix: str, timeout: float = 5.0) -> Any:
    """One admin socket command, as `ceph --admin-daemon PATH <prefix>` sends it: JSON + NUL, reply = u32 len + JSON."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall(json.dumps({"prefix": prefix, "format": "json"}).encode() + b"\0")
        head = _recv(s, 4)
        n = struct.unpack(">I", head)[0]
        return json.loads(_recv(s, n))


def _recv(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(1 << 20, n - len(buf)))
        if not chunk:
            raise OSError("admin socket closed early")
        buf += chunk
    return bytes(buf)


def asok_path(daemon: Daemon, run_dir: Path | None) -> Path:
    base = run_dir or Path("/var/run/ceph")
    with_pid = base / f"ceph-{daemon.name}.{daemon.pid}.asok"  # client daemons (RGW): $cluster-$name.$pid.asok
    return with_pid if daemon.pid and with_pid.exists() else base / f"ceph-{daemon.name}.asok"


PERF_KINDS = ("osd", "rgw")  # daemons whose counters are read per point


def perf_dump(daemons: list[Daemon], run_dir: Path | None) -> dict[str, dict[str, Any]]:
    """{daemon: perf dump (selected sections)} for the OSDs and RGWs; unreadable sockets are skipped."""
    out = {}
    for d in daemons:
        if d.kind not in PERF_KINDS:
            continue
        try:
            dump = asok_command(asok_path(d, run_dir), "perf dump")
        except (OSError, ValueError, struct.error):
            continue
        out[d.name] = {k: v for k, v in dump.items() if k in PERF_SECTIONS or k.startswith("throttle-")}
    return out


KEY_COUNTERS = ("osd.op_r", "osd.op_w", "osd.op_rw", "osd.op_r_latency", "osd.op_w_latency", "osd.op_latency",
                "osd.subop", "osd.subop_latency", "bluestore.commit_lat", "bluestore.txc_commit_lat",  # 16, 18+
                "bluestore.kv_flush_lat",
                "bluestore.kv_commit_lat", "bluestore.kv_sync_lat", "bluestore.state_aio_wait_lat")
