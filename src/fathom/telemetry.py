"""Server- and host-side measurements during a point, on the engine's clock (epoch seconds).

- `Sampler`: a thread reading /proc once a second for every local Ceph daemon
  (CPU as % of one core summed over the process's threads, as top shows it;
  RSS MiB; voluntary/involuntary context switches summed over its threads),
  the host (CPU busy % of all cores, memory) and the engine process. It
  measures its own cost with time.thread_time().
- `perf_dump()` / `perf_deltas()`: Ceph perf counters read straight from the
  admin socket (no `ceph` CLI process, which would cost more CPU than the
  sampling itself), turned into deltas per point; averages become
  Δsum/Δavgcount.
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

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
PERF_SECTIONS = ("osd", "bluestore", "bluefs", "rocksdb", "objecter", "mon", "mgr", "rgw", "mds")


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


def host_sample() -> dict[str, float]:
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
            "mem_avail": mem.get("MemAvailable", 0)}


NCPU = os.cpu_count() or 1


class Sampler:
    """Samples once a second between start() and stop(); samples are rates over the previous second."""

    def __init__(self, daemons: list[Daemon], interval: float = 1.0, host_kind: str = "host"):
        self.daemons = [d for d in daemons if d.pid]
        # "client_host" when the cluster's hosts are sampled elsewhere (over SSH) and this is not one of them
        self.host_kind = host_kind
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
                        "threads": s["threads"], "dt": dt})
        h = host_sample()
        prev = self._prev.get(("host", 0))
        self._prev[("host", 0)] = (now, h)  # type: ignore[assignment]
        if prev is not None:
            p = prev[1]
            dtot = h["total"] - p["total"]
            busy = 100.0 * (h["busy"] - p["busy"]) / dtot if dtot > 0 else 0.0
            out.append({"ts": now, "source": "host", "kind": self.host_kind, "pid": None, "cpu_pct": busy,
                        "cores": busy / 100.0 * NCPU, "rss_mib": (h["mem_total"] - h["mem_avail"]) / 2**20,
                        "mem_total_mib": h["mem_total"] / 2**20, "ncpu": NCPU, "dt": now - prev[0]})
        if not baseline:
            self.samples.extend(out)

    @property
    def cost_pct(self) -> float | None:
        """The sampler's own CPU, % of one core over the time it ran."""
        return 100.0 * self.cpu_s / self.wall_s if self.wall_s > 0 else None


NOT_DAEMONS = ("host", "engine", "client_host")  # sample kinds that are not Ceph (or gateway) daemons
MIB = 2**20


def in_window(samples: list[dict[str, Any]], t_from: float, t_to: float) -> list[dict[str, Any]]:
    """The samples whose span's middle is in [t_from, t_to] (the last one up to 0.5 s past it); all of them when
    none is (a very short window: what there is)."""
    win = [s for s in samples if t_from <= s["ts"] - s.get("dt", 1.0) / 2 and s["ts"] <= t_to + 0.5]
    return win or samples


def summarize(samples: list[dict[str, Any]], t_from: float, t_to: float) -> dict[str, Any]:
    """Server-side metrics over [t_from, t_to]: per host, means over its sample times of per-kind sums; then
    summed over the hosts (each host samples at its own instants, so times are never matched across hosts).

    For every daemon kind in the samples (osd, mon, mgr, rgw, mds, or any other Daemon.kind):
    `{kind}_cpu` (% of one core), `{kind}_cores`, `{kind}_mem_mib` (RSS) and `{kind}_ctx_switches_s`
    (voluntary + involuntary), each summed over that kind's daemons at a host's sample time, averaged over
    that host's sample times where the kind was seen, and summed over hosts. A kind with no samples gets no
    keys at all. Plus host_cpu_pct (busy cores of the sampled hosts over all their cores), server_hosts (hosts
    with a host sample: the cluster's hosts, since a server source's host holding none of the cluster's daemons
    is `client_host`, as this host is when it is a client; given whenever a server source sampled),
    net_rx_mib_s / net_tx_mib_s (each host's interfaces that count, hostsample.nics, summed),
    net_busiest_host_mib_s (the host whose received or sent MiB/s was highest), engine_cpu_pct (% of one core)
    and telemetry_samples (the fewest sample times of a host). A sample's `host` (default: this host) names
    its host; kind `client_host` is a host that is not one of the cluster's (left out of host_cpu_pct).
    """
    win = in_window(samples, t_from, t_to)
    hosts: dict[str, dict[float, dict[str, list[dict[str, Any]]]]] = {}
    for s in win:
        hosts.setdefault(s.get("host") or "local", {}).setdefault(s["ts"], {}).setdefault(s["kind"], []).append(s)

    def mean_of(by_ts: dict[float, dict[str, list[dict[str, Any]]]], kind: str, value: Any) -> float | None:
        """Mean over one host's sample times of value(sample) summed over the kind's sources at that time."""
        sums = [sum(value(x) for x in group[kind]) for group in by_ts.values() if kind in group]
        return sum(sums) / len(sums) if sums else None

    def total(kind: str, value: Any) -> float | None:
        means = [m for by_ts in hosts.values() if (m := mean_of(by_ts, kind, value)) is not None]
        return sum(means) if means else None

    out: dict[str, Any] = {}
    kinds = {s["kind"] for s in win} - set(NOT_DAEMONS)
    for kind in sorted(kinds):
        cpu = total(kind, lambda x: x["cpu_pct"])
        out[f"{kind}_cpu"] = cpu
        out[f"{kind}_cores"] = cpu / 100.0 if cpu is not None else None
        out[f"{kind}_mem_mib"] = total(kind, lambda x: x["rss_mib"])
        out[f"{kind}_ctx_switches_s"] = total(kind, lambda x: (x.get("vctx_s") or 0.0) + (x.get("nvctx_s") or 0.0))
    busy = ncpu = 0.0
    rx = tx = None
    busiest: float | None = None
    for by_ts in hosts.values():
        cores = mean_of(by_ts, "host", lambda x: x.get("cores", x["cpu_pct"] / 100.0 * (x.get("ncpu") or NCPU)))
        if cores is None:
            continue
        recs = [g["host"][0] for g in by_ts.values() if "host" in g]
        busy += cores
        ncpu += recs[-1].get("ncpu") or NCPU
        if any("net_rx_bytes_s" in r for r in recs):
            r_ = (mean_of(by_ts, "host", lambda x: x.get("net_rx_bytes_s") or 0.0) or 0.0) / MIB
            t_ = (mean_of(by_ts, "host", lambda x: x.get("net_tx_bytes_s") or 0.0) or 0.0) / MIB
            rx, tx = (rx or 0.0) + r_, (tx or 0.0) + t_
            busiest = max(busiest or 0.0, r_, t_)
    server_hosts = sum(1 for by_ts in hosts.values() if any("host" in g for g in by_ts.values()))
    out["host_cpu_pct"] = 100.0 * busy / ncpu if ncpu else None
    if server_hosts > 1 or rx is not None or any(s.get("via") for s in win):  # a server source sampled
        out["server_hosts"] = server_hosts
    if rx is not None:
        out["net_rx_mib_s"], out["net_tx_mib_s"], out["net_busiest_host_mib_s"] = rx, tx, busiest
    engine = [m for by_ts in hosts.values() if (m := mean_of(by_ts, "engine", lambda x: x["cpu_pct"])) is not None]
    out["engine_cpu_pct"] = sum(engine) if engine else None
    out["telemetry_samples"] = min((len(by_ts) for by_ts in hosts.values()), default=0)
    return out


def per_host(samples: list[dict[str, Any]], t_from: float, t_to: float,
             lost: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """summarize() per host (the cluster's hosts and this one), for tables per node: each host's CPU busy %
    of its cores, NIC MiB/s, and per daemon kind its CPU and RSS; `via` names the source of its samples.

    `coverage` says how much of the window a host's figures cover: `whole`, or for a host in `lost` (hostname ->
    why it was lost during or before the point) `partial` (covered_s of window_s: its samples stop at the loss)
    or `missing` (no sample in the window: no figures at all, where summarize would take any it has)."""
    hosts: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        hosts.setdefault(s.get("host") or "local", []).append(s)
    lost = lost or {}
    window_s = round(t_to - t_from, 1)
    out: dict[str, dict[str, Any]] = {}
    for host, mine in sorted(hosts.items()):
        inside = [s for s in mine if t_from <= s["ts"] - s.get("dt", 1.0) / 2 and s["ts"] <= t_to + 0.5]
        if host in lost and not inside:
            continue
        m = summarize(mine, t_from, t_to)
        keep = {k: v for k, v in m.items() if v is not None and (k in ("host_cpu_pct", "net_rx_mib_s", "net_tx_mib_s")
                                                                  or k.endswith(("_cpu", "_mem_mib")))}
        if keep:  # a client host (this one, when it holds no daemon) has none
            out[host] = {**keep, "via": ", ".join(sorted({str(s.get("via") or "local") for s in mine})),
                         "coverage": "whole"}
            if host in lost:
                first = max(t_from, min(s["ts"] - s.get("dt", 1.0) for s in inside))
                last = min(t_to, max(s["ts"] for s in inside))
                out[host].update(coverage="partial", covered_s=round(max(0.0, last - first), 1), window_s=window_s,
                                 lost=lost[host])
    for host, why in sorted(lost.items()):
        if host not in out:
            out[host] = {"via": "ssh", "coverage": "missing", "covered_s": 0.0, "window_s": window_s, "lost": why}
    return out


# ---- admin socket perf counters ----------------------------------------------------

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
        out[d.name] = {k: v for k, v in dump.items() if k in PERF_SECTIONS}
    return out


def perf_deltas(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Counter deltas per daemon ('section.counter'); averages as {count, sum, avg} with avg = Δsum/Δcount.

    Zero deltas are left out; gauges (values that can fall) keep their after-value under 'gauge'.
    """
    out: dict[str, dict[str, Any]] = {}
    for name, a in after.items():
        b = before.get(name) or {}
        d: dict[str, Any] = {}
        for sec, counters in a.items():
            if not isinstance(counters, dict):
                continue
            bsec = b.get(sec) or {}
            for key, v in counters.items():
                bv = bsec.get(key)
                full = f"{sec}.{key}"
                if isinstance(v, dict) and "avgcount" in v:
                    bc = (bv or {}).get("avgcount", 0)
                    bs = (bv or {}).get("sum", 0.0)
                    dc = v["avgcount"] - bc
                    ds = v.get("sum", 0.0) - bs
                    if dc:
                        d[full] = {"count": dc, "sum": ds, "avg": ds / dc}
                elif isinstance(v, (int, float)) and isinstance(bv, (int, float)):
                    if v != bv:
                        d[full] = v - bv
        out[name] = d
    return out


KEY_COUNTERS = ("osd.op_r", "osd.op_w", "osd.op_rw", "osd.op_r_latency", "osd.op_w_latency", "osd.op_latency",
                "osd.subop", "osd.subop_latency", "bluestore.commit_lat", "bluestore.txc_commit_lat",  # 16, 18+
                "bluestore.kv_flush_lat",
                "bluestore.kv_commit_lat", "bluestore.kv_sync_lat", "bluestore.state_aio_wait_lat")
