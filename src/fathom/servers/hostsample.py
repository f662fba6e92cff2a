"""Server-side measurements of a cluster host from `fathom-sampler` (`fathom-engine --sample`; run there over SSH).

The sampler writes JSON lines of cumulative counters read from /proc: a `sample_start` header (engine
version, record format), one `sample` per interval (host CPU seconds, memory, NIC and disk counters;
per Ceph daemon process CPU seconds, RSS and context switches summed over its threads; crimson's threads
one by one), and `sample_end`. This module turns them into rates, pure Python (no /proc access here):

- `parse(lines)` -> `HostStream`: the records, checked (format, and the version when given).
- `window(stream, t_from, t_to)`: per-host and per-daemon rates between the samples nearest the window's
  ends, in telemetry.py's units: CPU as % of one core for a daemon (`cpu_pct`, `cores`), % of all cores
  for the host; `rss_mib`; `vctx_s`/`nvctx_s`; NIC bytes/s per interface; disk bytes/s per device.
- `interval_samples(stream)`: one record per daemon and per host per interval, shaped as
  `telemetry.Sampler.samples` (so `usage.summarize` reads them), tagged with `host`.
- `summarize(windows)`: several hosts' windows as `usage.summarize`'s keys (`{kind}_cpu`, `_cores`,
  `_mem_mib`, `_ctx_switches_s`, `host_cpu_pct`), summed over the cluster's hosts.

Cumulative counters make a missed line harmless: a rate spans whichever two samples bound it. A counter
that went down (a NIC or a daemon restarted) gives None for that rate, never a negative one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

FORMAT = 1  # the sampler's record format this module reads
MIB = 2**20
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
NET_RATES = (("rx_bytes", "rx_bytes_s"), ("tx_bytes", "tx_bytes_s"), ("rx_packets", "rx_packets_s"),
             ("tx_packets", "tx_packets_s"), ("rx_drop", "rx_drop_s"), ("tx_drop", "tx_drop_s"),
             ("rx_errs", "rx_errs_s"), ("tx_errs", "tx_errs_s"))
DISK_RATES = (("read_bytes", "read_bytes_s"), ("write_bytes", "write_bytes_s"), ("reads", "reads_s"),
              ("writes", "writes_s"))


class HostSampleError(ValueError):
    """The sampler's output cannot be used (wrong format or version, no samples)."""


@dataclass
class HostStream:
    """One sampler run's records."""

    header: dict[str, Any]
    samples: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: int = 0  # lines that were not JSON (a connection cut mid-line)

    @property
    def host(self) -> str:
        return str(self.header.get("host", ""))


def parse(lines: Iterable[str | bytes], version: str | None = None) -> HostStream:
    """The sampler's records from its output lines; `version`: the engine version the header must carry.

    Raises HostSampleError when the first record is not a `sample_start` of FORMAT (or of another version).
    """
    stream: HostStream | None = None
    bad = 0
    for raw in lines:
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        if not text.strip():
            continue
        try:
            rec = json.loads(text)
        except ValueError:
            bad += 1
            continue
        kind = rec.get("type") if isinstance(rec, dict) else None
        if stream is None:
            if kind == "error":
                raise HostSampleError(f"the sampler failed: {rec.get('message')}")
            check_header(rec, version)
            stream = HostStream(header=rec)
        elif kind == "sample":
            stream.samples.append(rec)
        elif kind == "sample_end":
            stream.end = rec
        elif kind == "error":
            stream.errors.append(rec)
    if stream is None:
        raise HostSampleError("no sample_start record: is this fathom-sampler output?")
    stream.bad_lines = bad
    stream.samples.sort(key=lambda s: s["mono"])
    return stream


def check_header(rec: Any, version: str | None) -> None:
    """HostSampleError unless rec is a sample_start of FORMAT (and of `version`, when given)."""
    if not isinstance(rec, dict) or rec.get("type") != "sample_start":
        raise HostSampleError("the first record is not sample_start: is this fathom-sampler output?")
    if rec.get("format") != FORMAT:
        raise HostSampleError(f"sampler record format {rec.get('format')}, this fathom reads {FORMAT}: "
                              f"upload the matching engine")
    if version is not None and rec.get("version") != version:
        raise HostSampleError(f"the sampler on {rec.get('host')} is fathom-engine {rec.get('version')}, "
                              f"expected {version}")


def _delta(a: float | None, b: float | None) -> float | None:
    """b - a for a cumulative counter; None if either is missing or it went down (a reset)."""
    if a is None or b is None or b < a:
        return None
    return b - a


def rate(a: float | None, b: float | None, dt: float, scale: float = 1.0) -> float | None:
    """(b - a) * scale / dt for a cumulative counter; None when either is missing or it went down."""
    d = _delta(a, b)
    return None if d is None or dt <= 0 else d * scale / dt


def _nearest(samples: list[dict[str, Any]], ts: float) -> int:
    return min(range(len(samples)), key=lambda i: abs(samples[i]["ts"] - ts))


def bounds(stream: HostStream, t_from: float | None = None, t_to: float | None = None) -> tuple[int, int]:
    """Indexes of the samples nearest t_from and t_to (wall-clock epoch s; None: the first / the last),
    two different samples whenever there are two."""
    s = stream.samples
    if len(s) < 2:
        raise HostSampleError(f"{stream.host or 'a host'}: {len(s)} samples, rates need two")
    i0 = 0 if t_from is None else _nearest(s, t_from)
    i1 = len(s) - 1 if t_to is None else _nearest(s, t_to)
    if i1 <= i0:  # a window shorter than the interval: the closest pair around it
        i1 = min(i0 + 1, len(s) - 1)
        i0 = i1 - 1
    return i0, i1


def host_cpu(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float | None]:
    """Host CPU between two samples: busy % of all cores (as telemetry's host sample), busy cores, iowait %
    and steal % of all cores."""
    ca, cb = a["cpu"], b["cpu"]
    total = _delta(sum(ca.get(k, 0.0) for k in CPU_FIELDS), sum(cb.get(k, 0.0) for k in CPU_FIELDS))
    idle = _delta(ca["idle"] + ca.get("iowait", 0.0), cb["idle"] + cb.get("iowait", 0.0))
    if not total or idle is None:
        return {"cpu_pct": None, "cores": None, "iowait_pct": None, "steal_pct": None}
    busy = max(0.0, min(100.0, 100.0 * (total - idle) / total))
    iowait = _delta(ca.get("iowait", 0.0), cb.get("iowait", 0.0))
    steal = _delta(ca.get("steal", 0.0), cb.get("steal", 0.0))
    return {"cpu_pct": busy, "cores": busy / 100.0 * b.get("ncpu", 1),
            "iowait_pct": None if iowait is None else 100.0 * iowait / total,
            "steal_pct": None if steal is None else 100.0 * steal / total}


def _net(a: dict[str, Any], b: dict[str, Any], dt: float) -> dict[str, dict[str, Any]]:
    """Per interface rates, and `upper` (the interfaces stacked on it, as of b) where the sampler gave any; one
    missing from the first sample is new (its counters started at zero)."""
    out: dict[str, dict[str, Any]] = {}
    for name, cb in b.get("net", {}).items():
        ca = a.get("net", {}).get(name, {})
        out[name] = {r: rate(ca.get(k, 0), cb.get(k), dt) for k, r in NET_RATES}
        if cb.get("upper"):
            out[name]["upper"] = list(cb["upper"])
    return out


def _disk(a: dict[str, Any], b: dict[str, Any], dt: float) -> dict[str, dict[str, float | None]]:
    """Per device rates; the sampler leaves out devices that never did I/O, so a missing one counts zero.
    util_pct: % of the time with I/O in flight; queue: mean requests in flight."""
    out = {}
    for name, db in b.get("disk", {}).items():
        da = a.get("disk", {}).get(name, {})
        r = {rk: rate(da.get(k, 0), db.get(k), dt) for k, rk in DISK_RATES}
        util = rate(da.get("io_s", 0.0), db.get("io_s"), dt, 100.0)
        r["util_pct"] = None if util is None else min(util, 100.0)
        r["queue"] = rate(da.get("weighted_s", 0.0), db.get("weighted_s"), dt)
        out[name] = r
    return out


def busy_disks(a: dict[str, Any], b: dict[str, Any], dt: float) -> dict[str, dict[str, float]]:
    """The devices busy between two samples, {util_pct, queue} each (what fathom.analysis.bound reads of its
    OSDs'); an idle one is left out, and a reader counts it 0."""
    return {n: {"util_pct": round(r["util_pct"], 2), "queue": round(r["queue"] or 0.0, 3)}
            for n, r in _disk(a, b, dt).items() if r["util_pct"] or r["queue"]}


def _procs(sample: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(p["daemon"], p["pid"]): p for p in sample.get("procs", [])}


def _tasks(pa: dict[str, Any], pb: dict[str, Any], dt: float) -> list[dict[str, Any]]:
    """Per thread CPU % of one core and context switches/s, busiest first. A thread missing from the first
    sample is new (its process was there): its counters started at zero."""
    before = {t["tid"]: t for t in pa.get("tasks", [])}
    out = []
    for t in pb.get("tasks", []):
        ta = before.get(t["tid"], {})
        cpu = rate(ta.get("utime", 0.0) + ta.get("stime", 0.0), t["utime"] + t["stime"], dt, 100.0)
        out.append({"tid": t["tid"], "comm": t.get("comm", ""), "cpu_pct": cpu, "last_cpu": t.get("last_cpu"),
                    "vctx_s": rate(ta.get("vctx", 0), t["vctx"], dt),
                    "nvctx_s": rate(ta.get("nvctx", 0), t["nvctx"], dt)})
    out.sort(key=lambda x: -(x["cpu_pct"] or 0.0))
    return out


def _proc_rates(pa: dict[str, Any], pb: dict[str, Any], dt: float) -> dict[str, Any]:
    """One process between two samples, in telemetry's per-daemon sample units."""
    cpu = rate(pa["utime"] + pa["stime"], pb["utime"] + pb["stime"], dt, 100.0)
    vctx, nvctx = rate(pa["vctx"], pb["vctx"], dt), rate(pa["nvctx"], pb["nvctx"], dt)
    return {"cpu_pct": cpu, "cores": None if cpu is None else cpu / 100.0, "rss_mib": pb["rss"] / MIB,
            "vctx_s": vctx, "nvctx_s": nvctx, "threads": pb.get("threads")}


def _daemons(win: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per daemon over the window's samples `win`, as means over the whole window: CPU and context switches
    each process of the daemon used between its first and its last sample in the window, over the window's
    time (a daemon down for part of it used nothing then; one restarted counts both processes; two at once
    under one name, as two clusters on a host, add up), RSS summed over its processes at each sample and
    averaged over the samples it was seen in (as usage.summarize). seen_s: the time its processes were
    seen, summed; tasks: its last process's threads over that process's time."""
    dt_win = win[-1]["mono"] - win[0]["mono"]
    obs: dict[str, dict[int, list[tuple[dict[str, Any], dict[str, Any]]]]] = {}
    rss: dict[str, list[int]] = {}
    for s in win:
        here: dict[str, int] = {}
        for p in s.get("procs", []):
            obs.setdefault(p["daemon"], {}).setdefault(p["pid"], []).append((s, p))
            here[p["daemon"]] = here.get(p["daemon"], 0) + p["rss"]
        for name, r in here.items():
            rss.setdefault(name, []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for name, procs in obs.items():
        cpu_s, vctx, nvctx, seen, rated, complete = 0.0, 0, 0, 0.0, False, True
        for o in procs.values():
            (sa, pa), (sb, pb) = o[0], o[-1]
            dt = sb["mono"] - sa["mono"]
            if dt <= 0:
                continue  # seen once: no rate from this process
            cpu = _delta(pa["utime"] + pa["stime"], pb["utime"] + pb["stime"])
            dv, dn = _delta(pa["vctx"], pb["vctx"]), _delta(pa["nvctx"], pb["nvctx"])
            if cpu is None or dv is None or dn is None:
                complete = False
                continue
            cpu_s, vctx, nvctx, seen, rated = cpu_s + cpu, vctx + dv, nvctx + dn, seen + dt, True
        last_pid, last = max(procs.items(), key=lambda kv: (kv[1][-1][0]["mono"], kv[0]))
        (sa, pa), (sb, pb) = last[0], last[-1]
        ok = rated and dt_win > 0
        cpu_pct = 100.0 * cpu_s / dt_win if ok else None
        d = {"daemon": name, "kind": pb["kind"], "name": pb["name"], "pid": last_pid, "pids": sorted(procs),
             "cpu_pct": cpu_pct, "cores": None if cpu_pct is None else cpu_pct / 100.0,
             "cpu_s": cpu_s if ok else None, "rss_mib": sum(rss[name]) / len(rss[name]) / MIB,
             "vctx_s": vctx / dt_win if ok else None, "nvctx_s": nvctx / dt_win if ok else None,
             "ctx_switches_s": (vctx + nvctx) / dt_win if ok else None, "threads": pb.get("threads"),
             "seen_s": seen, "complete": complete}
        if "tasks" in pb and sb["mono"] > sa["mono"]:
            d["tasks"] = _tasks(pa, pb, sb["mono"] - sa["mono"])
        out[name] = d
    return out


def window(stream: HostStream, t_from: float | None = None, t_to: float | None = None) -> dict[str, Any]:
    """Host and daemon rates over [t_from, t_to] (wall-clock epoch s; None: the stream's first / last sample),
    measured between the samples nearest those times (so at most half an interval off at either end).

    Keys: host, ts_from, ts_to, dt (s, monotonic), samples, ncpu, cpu_pct (% of all cores), cores,
    iowait_pct, steal_pct, mem_total_mib, mem_used_mib (total - available, mean), net {iface: {rx_bytes_s,
    tx_bytes_s, rx_packets_s, tx_packets_s, .., [upper]}}, disk {dev: {read_bytes_s, write_bytes_s, reads_s, writes_s,
    util_pct, queue}}, daemons {name: {daemon, kind, name, pid, pids, cpu_pct (% of one core), cores, cpu_s,
    rss_mib, vctx_s, nvctx_s, ctx_switches_s, threads, seen_s, complete[, tasks]}} (see _daemons),
    sampler_cpu_pct (the sampler's own CPU, % of one core).
    """
    i0, i1 = bounds(stream, t_from, t_to)
    win = stream.samples[i0:i1 + 1]
    a, b = win[0], win[-1]
    dt = b["mono"] - a["mono"]
    out: dict[str, Any] = {"host": stream.host, "ts_from": a["ts"], "ts_to": b["ts"], "dt": dt, "samples": len(win),
                           "ncpu": b.get("ncpu")}
    out.update(host_cpu(a, b))
    out["mem_total_mib"] = b["mem_total"] / MIB
    out["mem_used_mib"] = sum(s["mem_total"] - s["mem_avail"] for s in win) / len(win) / MIB
    out["net"] = _net(a, b, dt)
    out["disk"] = _disk(a, b, dt)
    out["daemons"] = _daemons(win)
    out["sampler_cpu_pct"] = rate(a.get("self_cpu_s"), b.get("self_cpu_s"), dt, 100.0)
    return out


def nics(net: dict[str, dict[str, Any]]) -> tuple[list[str], dict[str, str]]:
    """(the interfaces whose bytes count, {interface left out: why}) of a sample's or a window's `net`.

    Each byte once: only interfaces at the top of their stack count. A bridge's port, a bond's member and a
    VLAN's parent carry the same bytes as the interface stacked on them (the sampler's `upper`), so they are
    left out, as is loopback (docs/measurement.md, "Server figures"). Without `upper` (node-exporter's
    figures) every interface but loopback counts."""
    counted, left = [], {}
    for name, r in sorted(net.items()):
        if name == "lo":
            left[name] = "loopback"
        elif r.get("upper"):
            left[name] = f"under {', '.join(r['upper'])}"
        else:
            counted.append(name)
    return counted, left


def nic_total(net: dict[str, dict[str, Any]], rate: str) -> float:
    """A rate summed over the interfaces that count (nics): each byte once."""
    return sum(net[name].get(rate) or 0.0 for name in nics(net)[0])


def interval_samples(stream: HostStream) -> list[dict[str, Any]]:
    """Per interval, one record per daemon process (seen at both ends) and one for the host, shaped as
    telemetry.Sampler's samples ({ts, source, kind, pid, cpu_pct, cores, rss_mib, vctx_s, nvctx_s, threads,
    dt}; host: cpu_pct of all cores, rss_mib = memory in use, mem_total_mib), each with `host`.

    usage.summarize groups them by `host`, then by `ts` (hosts sample at different instants), and sums
    the hosts, as `summarize(windows)` does over whole windows.
    """
    out: list[dict[str, Any]] = []
    host = stream.host
    for a, b in zip(stream.samples, stream.samples[1:]):
        dt = b["mono"] - a["mono"]
        if dt <= 0:
            continue
        before = _procs(a)
        for key, pb in _procs(b).items():
            pa = before.get(key)
            if pa is None:
                continue
            r = _proc_rates(pa, pb, dt)
            if r["cpu_pct"] is None:
                continue  # a counter went down: not the same process's counters
            out.append({"ts": b["ts"], "source": key[0], "kind": pb["kind"], "pid": key[1], **r, "dt": dt,
                        "host": host})
        c = host_cpu(a, b)
        if c["cpu_pct"] is not None:
            rec = {"ts": b["ts"], "source": "host", "kind": "host", "pid": None, "cpu_pct": c["cpu_pct"],
                   "cores": c["cores"], "ncpu": b.get("ncpu"), "rss_mib": (b["mem_total"] - b["mem_avail"]) / MIB,
                   "mem_total_mib": b["mem_total"] / MIB, "dt": dt, "host": host}
            if "net" in a and "net" in b:  # none from a source that cannot see the host's NICs: no figure, not 0
                net = _net(a, b, dt)
                rec.update(net_rx_bytes_s=nic_total(net, "rx_bytes_s"), net_tx_bytes_s=nic_total(net, "tx_bytes_s"))
            if "disk" in b:
                rec["disks"] = busy_disks(a, b, dt)
            out.append(rec)
    return out


def summarize(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """Several hosts' `window()`s as usage.summarize's keys, over the whole cluster.

    Per daemon kind: `{kind}_cpu` (% of one core) and `{kind}_cores`, `{kind}_mem_mib`, `{kind}_ctx_switches_s`,
    each summed over that kind's daemons on all hosts (a kind with no daemon gets no keys). host_cpu_pct:
    the hosts' busy cores as % of all their cores. Also hosts, telemetry_samples (the fewest samples of a
    host's window) and sampler_cpu_pct (the costliest host's sampler, % of one core).
    """
    out: dict[str, Any] = {}
    kinds: dict[str, dict[str, float]] = {}
    for w in windows:
        for d in w["daemons"].values():
            k = kinds.setdefault(d["kind"], {"cpu": 0.0, "mem": 0.0, "ctx": 0.0, "rated": 0})
            k["mem"] += d["rss_mib"] or 0.0
            if d["cpu_pct"] is not None:
                k["cpu"] += d["cpu_pct"]
                k["ctx"] += d["ctx_switches_s"] or 0.0
                k["rated"] += 1
    for kind in sorted(kinds):
        k = kinds[kind]
        cpu = k["cpu"] if k["rated"] else None
        out[f"{kind}_cpu"] = cpu
        out[f"{kind}_cores"] = None if cpu is None else cpu / 100.0
        out[f"{kind}_mem_mib"] = k["mem"]
        out[f"{kind}_ctx_switches_s"] = k["ctx"] if k["rated"] else None
    busy = [w["cores"] for w in windows if w.get("cores") is not None]
    ncpu = sum(w["ncpu"] or 0 for w in windows if w.get("cores") is not None)
    out["host_cpu_pct"] = 100.0 * sum(busy) / ncpu if busy and ncpu else None
    out["hosts"] = len(windows)
    out["telemetry_samples"] = min((w["samples"] for w in windows), default=0)
    costs = [w["sampler_cpu_pct"] for w in windows if w.get("sampler_cpu_pct") is not None]
    out["sampler_cpu_pct"] = max(costs) if costs else None
    return out
