"""Cluster hosts' CPU, memory, NIC and disk figures from a Prometheus that scrapes node-exporter.

Where fathom may not SSH to the cluster's hosts (so no `fathom-sampler` runs there), the Prometheus that
cephadm deploys (port 9095, scraping node-exporter on every host) already holds the same /proc counters.
`PromSource.window(t_from, t_to)` turns them into one dict per host shaped as `hostsample.window()`'s, so
`hostsample.summarize(windows)` takes them unchanged.

Honest numbers, by hostsample's rule: rate()/irate() extrapolate to the range's edges and hide resets, so
this module fetches the raw samples (a range selector evaluated at one instant) and, per series, takes the
samples nearest the window's ends: (last - first) / (their time difference). A counter that went down in
between (an exporter or host restart, a NIC re-created) gives None, never a negative rate. The sample
times actually used are reported (ts_from, ts_to), at most half a scrape interval off the window's ends.

Times are the Prometheus server's clock (a scrape's start), not fathom's: `clock_offset` measures the
difference when the two may disagree. node-exporter has no per-process figures: `daemons` is always {}
(hostsample.summarize then gives no per-kind keys) and `sampler_cpu_pct` None.

HTTP through urllib only; the pure part (API JSON -> windows) is `series`, `select` and `host_windows`.
"""

from __future__ import annotations

import http.client
import json
import re
import statistics
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from fathom.companion import Companion, Contribution, Live
from fathom.errors import FathomError
from fathom.servers.hostsample import CPU_FIELDS, MIB, host_cpu

SOURCE = "prometheus"
MAX_WAIT_S = 60.0  # the longest a point's end waits for a scrape past it
CPU = "node_cpu_seconds_total"
MEM_TOTAL = "node_memory_MemTotal_bytes"
MEM_AVAIL = "node_memory_MemAvailable_bytes"
UNAME = "node_uname_info"
BOOT = "node_boot_time_seconds"
SAME_BOOT_S = 1.0  # two targets whose host booted within this of each other are one host scraped twice
# hostsample's net and disk keys, from node-exporter's counters (device label)
NET = {"node_network_receive_bytes_total": "rx_bytes_s", "node_network_transmit_bytes_total": "tx_bytes_s",
       "node_network_receive_packets_total": "rx_packets_s", "node_network_transmit_packets_total": "tx_packets_s",
       "node_network_receive_drop_total": "rx_drop_s", "node_network_transmit_drop_total": "tx_drop_s",
       "node_network_receive_errs_total": "rx_errs_s", "node_network_transmit_errs_total": "tx_errs_s"}
DISK = {"node_disk_read_bytes_total": "read_bytes_s", "node_disk_written_bytes_total": "write_bytes_s",
        "node_disk_reads_completed_total": "reads_s", "node_disk_writes_completed_total": "writes_s",
        "node_disk_io_time_seconds_total": "util_pct", "node_disk_io_time_weighted_seconds_total": "queue"}
METRICS = (CPU, MEM_TOTAL, MEM_AVAIL, *NET, *DISK)
DEFAULT_PAD = 60.0  # s fetched beyond the window's ends when the scrape interval is unknown
HINT_URL = ("give the Prometheus server's own URL, e.g. http://HOST:9095 for cephadm's "
            "(`ceph orch ps --daemon-type prometheus` shows its host)")

Sample = tuple[float, float]  # (ts, value)
Series = tuple[dict[str, str], list[Sample]]  # (labels, samples by time)


class PrometheusError(FathomError):
    """Prometheus cannot give the hosts' figures: unreachable, not a Prometheus, or no data for the window."""

    def __init__(self, message: str, hint: str | None = None, status: int | None = None):
        super().__init__(message, hint)
        self.status = status  # the HTTP status, when the server answered with an error


def parse_duration(text: str) -> float | None:
    """Seconds in a Prometheus duration ('15s', '1m30s', '500ms'); None if it is not one."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", text or "")
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(int(n) * units[u] for n, u in parts)


def _data(body: Any, what: str, url: str) -> Any:
    """The `data` of an API answer; PrometheusError for an error answer or one that is not Prometheus's."""
    if not isinstance(body, dict) or "status" not in body:
        raise PrometheusError(f"{url} answered {what} with something other than Prometheus's API", HINT_URL)
    if body["status"] != "success":
        raise PrometheusError(f"Prometheus at {url} refused {what}: {body.get('errorType')}: {body.get('error')}")
    return body.get("data")


def series(data: dict[str, Any]) -> list[Series]:
    """A range query's matrix (the answer's `data`) as (labels, [(ts, value)] by time)."""
    if data.get("resultType") != "matrix":
        raise PrometheusError(f"expected a matrix from a range selector, got {data.get('resultType')}")
    return [(r["metric"], sorted((float(t), float(v)) for t, v in r["values"])) for r in data["result"]]


def names(data: dict[str, Any]) -> dict[str, str]:
    """instance -> host name (nodename) from an instant query of node_uname_info (the answer's `data`)."""
    out: dict[str, str] = {}
    for r in data.get("result", []):
        m = r["metric"]
        if "instance" in m:
            out.setdefault(m["instance"], m.get("nodename") or m["instance"])
    return out


def node_targets(targets: dict[str, Any], uname: dict[str, Any]) -> list[dict[str, Any]]:
    """node-exporter's targets among /api/v1/targets' active ones: those whose (job, instance) exports
    node_uname_info (the `data` of an instant query of it), and those of a job named like node-exporter's
    (a target down now exports nothing, yet is worth naming)."""
    known = {(r["metric"].get("job"), r["metric"].get("instance")): r["metric"].get("nodename")
             for r in uname.get("result", [])}
    out = []
    for t in targets.get("activeTargets", []):
        labels = t.get("labels", {})
        key = (labels.get("job"), labels.get("instance"))
        if key not in known and "node" not in (key[0] or ""):
            continue
        every = t.get("scrapeInterval") or t.get("discoveredLabels", {}).get("__scrape_interval__", "")
        out.append({"job": key[0], "instance": key[1], "host": known.get(key), "health": t.get("health"),
                    "scrape_interval_s": parse_duration(every), "last_error": t.get("lastError") or None,
                    "scrape_url": t.get("scrapeUrl")})
    return sorted(out, key=lambda t: (t["job"] or "", t["instance"] or ""))


def _short(name: str) -> str:
    """A host's name without port or domain ('node1.lab:9100' -> 'node1'; an address keeps its dots), so that
    `fathom`'s host names match an instance or a nodename however either is written."""
    host = name.rsplit(":", 1)[0] if name.count(":") == 1 or name.startswith("[") else name
    host = host.strip("[]")
    return host if re.fullmatch(r"[\d.:a-fA-F]+", host) else host.split(".")[0]


def select(instances: dict[str, str], hosts: list[str] | None = None) -> dict[str, str]:
    """The instances to measure, one per host name (a host scraped under two instances counts once): all, or
    those of `hosts`, each named by nodename, instance, or either without port or domain."""
    by_name: dict[str, str] = {}
    for inst in sorted(instances):
        by_name.setdefault(instances[inst], inst)
    if hosts is None:
        return {inst: name for name, inst in by_name.items()}
    out: dict[str, str] = {}
    missing = []
    for h in hosts:
        if h in instances:  # a target named as such: that one, whichever other reports its hostname
            out[h] = instances[h]
            continue
        found = [(inst, name) for name, inst in by_name.items() if h in (name, inst)] or \
                [(inst, name) for name, inst in by_name.items() if _short(h) in (_short(name), _short(inst))]
        if not found:
            missing.append(h)
        else:
            out.update(found[:1])
    if missing:
        known = ", ".join(f"{n} ({i})" for n, i in sorted(by_name.items())) or "none"
        raise PrometheusError(f"Prometheus scrapes no node-exporter on {', '.join(missing)}; it scrapes: {known}",
                              "deploy node-exporter there (cephadm: `ceph orch apply node-exporter`) or name the "
                              "host as node_uname_info's nodename")
    return out


def shared_names(instances: dict[str, str], hosts: list[str]) -> dict[str, list[str]]:
    """The host names of `hosts` (as select matches them) that several node-exporter targets report, each with
    those targets: one host scraped twice, or two hosts with one hostname, which select alone cannot tell."""
    out: dict[str, list[str]] = {}
    for inst, name in sorted(instances.items()):
        if any(_short(h) in (_short(name), _short(inst)) for h in hosts):
            out.setdefault(name, []).append(inst)
    return {name: insts for name, insts in out.items() if len(insts) > 1}


def boot_times(data: dict[str, Any]) -> dict[str, float]:
    """instance -> its host's boot time (epoch s) from an instant query of node_boot_time_seconds."""
    return {r["metric"]["instance"]: float(r["value"][1]) for r in data.get("result", [])
            if "instance" in r.get("metric", {})}


def one_host_each(twice: dict[str, list[str]], boots: dict[str, float]) -> None:
    """PrometheusError naming every host name that two node-exporters report without being one host (their
    hosts booted at different times, or a boot time is unknown): fathom would give one's figures to the other."""
    bad = []
    for name, insts in sorted(twice.items()):
        known = [boots[i] for i in insts if i in boots]
        if len(known) < len(insts) or max(known) - min(known) > SAME_BOOT_S:
            why = "booted at different times" if len(known) == len(insts) else f"no {BOOT} to tell"
            bad.append(f"{name} at {' and '.join(insts)} ({why})")
    if bad:
        raise PrometheusError(
            f"node-exporters on different hosts report one hostname: {'; '.join(bad)}; fathom cannot tell which "
            "is the cluster's host and would give one's figures to the other",
            "give each host its own hostname (node_uname_info's nodename), or drop the target that is not the "
            "cluster's host from Prometheus's node-exporter job")


def _nearest(samples: list[Sample], ts: float) -> int:
    return min(range(len(samples)), key=lambda i: abs(samples[i][0] - ts))


def _delta(samples: list[Sample], ts0: float, ts1: float, tol: float) -> tuple[float, float] | None:
    """(value change, time difference) of a counter between its samples nearest ts0 and ts1; None when it has
    none within `tol` s of either end, or went down anywhere in between (a reset)."""
    if not samples:
        return None
    i0, i1 = _nearest(samples, ts0), _nearest(samples, ts1)
    (t0, v0), (t1, v1) = samples[i0], samples[i1]
    if i1 <= i0 or abs(t0 - ts0) > tol or abs(t1 - ts1) > tol:
        return None
    if any(b[1] < a[1] for a, b in zip(samples[i0:i1], samples[i0 + 1:i1 + 1])):
        return None
    return v1 - v0, t1 - t0


def _rate(samples: list[Sample], ts0: float, ts1: float, tol: float) -> float | None:
    d = _delta(samples, ts0, ts1, tol)
    return None if d is None or d[1] <= 0 else d[0] / d[1]


def _bounds(stamps: list[float], t_from: float, t_to: float, interval: float | None,
            where: str) -> tuple[float, float, float]:
    """The scrape times nearest t_from and t_to (two different ones) and the tolerance (half an interval);
    PrometheusError when fewer than two scrapes fall in the window (give or take that half interval)."""
    if interval is None:
        interval = statistics.median(b - a for a, b in zip(stamps, stamps[1:])) if len(stamps) > 1 else 0.0
    tol = interval / 2 + 1e-3
    near = [s for s in stamps if t_from - tol <= s <= t_to + tol]
    if len(near) < 2:
        every = f"{interval:g} s" if interval else "unknown"
        stored = f"; its samples fetched span {stamps[0]:.3f}..{stamps[-1]:.3f}" if stamps else ""
        raise PrometheusError(
            f"{where}: {len(near)} scrape(s) in the window {t_from:.3f}..{t_to:.3f} ({t_to - t_from:.1f} s; "
            f"scrape interval {every}){stored}: rates need two",
            "make the point longer than two scrape intervals, or lower the node-exporter job's scrape_interval "
            "(and ask for the window once a scrape after its end has happened)")
    i0 = min(range(len(near)), key=lambda i: abs(near[i] - t_from))
    i1 = min(range(len(near)), key=lambda i: abs(near[i] - t_to))
    if i1 <= i0:
        i0, i1 = 0, len(near) - 1
    return near[i0], near[i1], tol


def host_window(host_series: list[Series], t_from: float, t_to: float, host: str, instance: str,
                interval: float | None = None) -> dict[str, Any]:
    """One host's window from its series (those of one instance), in `hostsample.window()`'s shape.

    The window's ends are the CPU scrapes nearest t_from and t_to; every series is read at its samples nearest
    those (a series with none within half an interval of an end, as a NIC that appeared meanwhile, gives None).
    `interval`: the scrape interval (s); None: the median spacing of the samples.
    """
    by: dict[str, list[Series]] = {}
    for s in host_series:
        by.setdefault(s[0].get("__name__", ""), []).append(s)
    cpu = by.get(CPU, [])
    stamps = sorted({t for _, vals in cpu for t, _ in vals})
    if not stamps:
        raise PrometheusError(f"{host} ({instance}): no {CPU} samples around {t_from:.3f}..{t_to:.3f}",
                              "check that node-exporter runs there with its cpu collector, and that the window "
                              "is within Prometheus's retention")
    ts0, ts1, tol = _bounds(stamps, t_from, t_to, interval, f"{host} ({instance})")
    out: dict[str, Any] = {"host": host, "instance": instance, "ts_from": ts0, "ts_to": ts1, "dt": ts1 - ts0,
                           "samples": sum(1 for t in stamps if ts0 <= t <= ts1),
                           "ncpu": len({labels.get("cpu") for labels, _ in cpu}) or None}
    # host_cpu on (0, Δ per mode summed over the CPUs): its busy/idle rule (iowait counted idle), unchanged
    deltas = {m: 0.0 for m in CPU_FIELDS}
    reset = False
    for labels, vals in cpu:
        mode = labels.get("mode", "")
        if mode in deltas:
            d = _delta(vals, ts0, ts1, tol)
            reset = reset or d is None
            deltas[mode] += d[0] if d else 0.0
    zero = {m: 0.0 for m in CPU_FIELDS}
    out.update(host_cpu({"cpu": zero}, {"cpu": zero if reset else deltas, "ncpu": out["ncpu"] or 1}))
    out.update(_memory(by, ts0, ts1))
    out["net"] = _devices(by, NET, ts0, ts1, tol)
    out["disk"] = _devices(by, DISK, ts0, ts1, tol)
    for d in out["disk"].values():
        if d["util_pct"] is not None:
            d["util_pct"] = min(d["util_pct"] * 100.0, 100.0)
    out["daemons"] = {}  # node-exporter exports no per-process figures
    out["sampler_cpu_pct"] = None
    out["source"] = SOURCE
    return out


def _memory(by: dict[str, list[Series]], ts0: float, ts1: float) -> dict[str, float | None]:
    """MemTotal at the window's end; in use = MemTotal - MemAvailable, the mean over the window's samples."""
    total = by.get(MEM_TOTAL, [({}, [])])[0][1]
    avail = by.get(MEM_AVAIL, [({}, [])])[0][1]
    out: dict[str, float | None] = {"mem_total_mib": None, "mem_used_mib": None}
    if total:
        out["mem_total_mib"] = total[_nearest(total, ts1)][1] / MIB
        at = dict(total)
        used = [at.get(t, total[_nearest(total, t)][1]) - v for t, v in avail if ts0 - 1e-3 <= t <= ts1 + 1e-3]
        if used:
            out["mem_used_mib"] = sum(used) / len(used) / MIB
    return out


def _devices(by: dict[str, list[Series]], metrics: dict[str, str], ts0: float, ts1: float,
             tol: float) -> dict[str, dict[str, float | None]]:
    """Per device label, each metric's rate under its hostsample key (None where it cannot be had)."""
    out: dict[str, dict[str, float | None]] = {}
    for metric, key in metrics.items():
        for labels, vals in by.get(metric, []):
            dev = labels.get("device", "")
            out.setdefault(dev, dict.fromkeys(metrics.values()))[key] = _rate(vals, ts0, ts1, tol)
    return dict(sorted(out.items()))


def host_windows(all_series: list[Series], t_from: float, t_to: float, instances: dict[str, str],
                 interval: float | None = None) -> list[dict[str, Any]]:
    """One window per instance of `instances` (instance -> host name), by host name. A target scraped by two
    jobs counts once (the first job's series)."""
    by_inst: dict[str, dict[str, list[Series]]] = {}
    for s in all_series:
        inst = s[0].get("instance", "")
        if inst in instances:
            by_inst.setdefault(inst, {}).setdefault(s[0].get("job", ""), []).append(s)
    out = []
    for inst, host in sorted(instances.items(), key=lambda kv: kv[1]):
        jobs = by_inst.get(inst, {})
        chosen = jobs[min(jobs)] if jobs else []
        out.append(host_window(chosen, t_from, t_to, host, inst, interval))
    return out


def interval_records(all_series: list[Series], t_from: float, t_to: float, instances: dict[str, str],
                     interval: float | None = None) -> list[dict[str, Any]]:
    """Per host and per scrape interval within [t_from, t_to], one record in telemetry.Sampler's host-sample
    shape ({ts, dt, kind "host", source "host", host, cpu_pct, cores, ncpu, rss_mib (memory in use),
    mem_total_mib, net_rx_bytes_s, net_tx_bytes_s (interfaces but loopback: node-exporter does not say how
    they stack)}, via "prometheus"), on Prometheus's clock: usage.summarize averages them over the point's
    window like the other sources'."""
    from fathom.servers.hostsample import nic_total

    tol = (interval or 0.0) / 2 + 1e-3
    out = []
    for inst, host in sorted(instances.items()):  # each target is scraped at its own phase
        mine = [x for x in all_series if x[0].get("instance") == inst]
        stamps = sorted({t for labels, vals in mine if labels.get("__name__") == CPU for t, _ in vals})
        inside = [t for t in stamps if t_from - tol <= t <= t_to + tol]
        for a, b in zip(inside, inside[1:]):
            try:
                (w,) = host_windows(mine, a, b, {inst: host}, interval)
            except PrometheusError:
                continue  # a series without both scrapes: no record for that interval
            if w["cpu_pct"] is None:
                continue
            out.append({"ts": w["ts_to"], "dt": w["dt"], "kind": "host", "source": "host", "pid": None,
                        "host": w["host"], "via": SOURCE, "cpu_pct": w["cpu_pct"], "cores": w["cores"],
                        "ncpu": w["ncpu"], "rss_mib": w.get("mem_used_mib"), "mem_total_mib": w.get("mem_total_mib"),
                        "net_rx_bytes_s": nic_total(w["net"], "rx_bytes_s"),
                        "net_tx_bytes_s": nic_total(w["net"], "tx_bytes_s")})
    return out


def _promql_regex(values: list[str]) -> str:
    """A PromQL string literal of a regex matching exactly these values."""
    rx = "|".join(re.escape(v) for v in values)
    return '"' + rx.replace("\\", "\\\\").replace('"', '\\"') + '"'


class PromSource:
    """A Prometheus server's HTTP API, read for node-exporter's host figures."""

    def __init__(self, url: str, timeout: float = 10.0):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._interval: float | None = None  # node-exporter's scrape interval, once known

    def _api(self, path: str, params: dict[str, str] | None = None, post: bool = False) -> Any:
        """The `data` of one API call, or a PrometheusError that says what to fix."""
        what = path
        body = urllib.parse.urlencode(params or {})
        if post:
            req = urllib.request.Request(self.url + path, data=body.encode(),
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        else:
            req = urllib.request.Request(self.url + path + (f"?{body}" if body else ""))
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)
            except ValueError:
                err = None
            if isinstance(err, dict) and err.get("status") == "error":
                raise PrometheusError(f"Prometheus at {self.url} refused {what}: {err.get('errorType')}: "
                                      f"{err.get('error')}", status=e.code) from None
            if e.code in (401, 403):
                raise PrometheusError(f"Prometheus at {self.url} asks for credentials (HTTP {e.code})",
                                      "fathom reads it without authentication: give the URL of an endpoint "
                                      "that allows reads (e.g. Prometheus itself on its host)", e.code) from None
            raise PrometheusError(f"{self.url} is not a Prometheus: {what} answered HTTP {e.code} {e.reason}",
                                  HINT_URL, e.code) from None
        except http.client.HTTPException as e:  # something answered, not in HTTP (an SSH port, say)
            raise PrometheusError(f"{self.url} is not a Prometheus: {what} got no HTTP answer ({e!r})",
                                  HINT_URL) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {reason}",
                                  "check the URL and that Prometheus runs there and is reachable from this host; "
                                  + HINT_URL) from None
        try:
            doc = json.loads(raw)
        except ValueError:
            raise PrometheusError(f"{self.url} is not a Prometheus: {what} did not answer JSON", HINT_URL) from None
        return _data(doc, what, self.url)

    def query(self, promql: str, at: float | None = None) -> dict[str, Any]:
        """An instant query's `data` (at `at`, epoch s, Prometheus's clock; None: now). POST: long selectors
        stay clear of URL length limits."""
        params = {"query": promql} | ({"time": f"{at:.3f}"} if at is not None else {})
        return self._api("/api/v1/query", params, post=True)

    def check(self) -> dict[str, Any]:
        """That the URL is a Prometheus that scrapes node-exporter: {url, version, targets [{job, instance, host,
        health, scrape_interval_s, last_error, scrape_url}], scrape_interval_s (the longest of those up)}."""
        try:
            version = self._api("/api/v1/status/buildinfo").get("version")
        except PrometheusError as e:
            if e.status != 404:  # before 2.14 there is no buildinfo: the targets tell
                raise
            version = None
        targets = node_targets(self._api("/api/v1/targets", {"state": "active"}), self.query(UNAME))
        hint = ("deploy node-exporter (cephadm: `ceph orch apply node-exporter`) and a scrape job for it in "
                "Prometheus (cephadm configures one)")
        if not targets:
            raise PrometheusError(f"Prometheus at {self.url} scrapes no node-exporter (no {UNAME} series)", hint)
        up = [t for t in targets if t["health"] == "up"]
        if not up:
            errors = "; ".join(f"{t['instance']}: {t['last_error']}" for t in targets)
            raise PrometheusError(f"none of the node-exporter targets of {self.url} is up ({errors})",
                                  "start node-exporter on the hosts, or fix what the scrape errors say")
        every = [t["scrape_interval_s"] for t in up if t["scrape_interval_s"]]
        self._interval = max(every) if every else None
        return {"url": self.url, "version": version, "targets": targets, "scrape_interval_s": self._interval}

    def scrape_interval(self) -> float | None:
        """node-exporter's scrape interval (s; the longest over its targets), None if the API does not say."""
        if self._interval is None:
            targets = node_targets(self._api("/api/v1/targets", {"state": "active"}), self.query(UNAME))
            every = [t["scrape_interval_s"] for t in targets if t["scrape_interval_s"]]
            self._interval = max(every) if every else None
        return self._interval

    def hosts(self) -> dict[str, str]:
        """node-exporter instance -> its host name (node_uname_info's nodename), of the targets scraped now."""
        out = names(self.query(UNAME))
        if not out:
            raise PrometheusError(f"Prometheus at {self.url} has no node-exporter series ({UNAME})",
                                  "deploy node-exporter (cephadm: `ceph orch apply node-exporter`) and have "
                                  "Prometheus scrape it")
        return out

    def window(self, t_from: float, t_to: float, hosts: list[str] | None = None,
               per_scrape: bool = False) -> list[dict[str, Any]]:
        """One dict per host (all node-exporter hosts, or `hosts`: nodenames or instances) over [t_from, t_to]
        (epoch s, Prometheus's clock), shaped as `hostsample.window()`'s, plus instance and source; daemons
        is {} (node-exporter has no per-process figures) and sampler_cpu_pct None.

        Ask once a scrape after t_to has happened (a scrape interval later), or the window ends at the last
        scrape before it. Two queries (and one of the targets, once): the hosts, then every counter's raw
        samples over the window plus 1.5 scrape intervals each side, in one range selector. per_scrape: one
        record per host and scrape interval instead (interval_records), for usage.summarize.
        """
        if t_to <= t_from:
            raise PrometheusError(f"empty window {t_from:.3f}..{t_to:.3f}", "t_to must be after t_from")
        interval = self.scrape_interval()
        pad = 1.5 * interval if interval else DEFAULT_PAD
        at, span = t_to + pad, t_to - t_from + 2 * pad
        seen = names(self.query(f"max_over_time({UNAME}[{int(span * 1000)}ms])", at))  # down since, or not
        if not seen:
            every = f"{interval:g} s" if interval else "unknown"
            raise PrometheusError(f"Prometheus at {self.url} has no node-exporter samples around the window "
                                  f"{t_from:.3f}..{t_to:.3f} (scrape interval {every})",
                                  "the window may be before node-exporter was scraped or past Prometheus's "
                                  "retention; fathom's and Prometheus's clocks may differ (clock_offset)")
        chosen = select(seen, hosts)
        selector = (f'{{__name__=~"{"|".join(METRICS)}",instance=~{_promql_regex(sorted(chosen))}}}'
                    f"[{int(span * 1000)}ms]")
        all_series = series(self.query(selector, at))
        if per_scrape:
            return interval_records(all_series, t_from, t_to, chosen, interval)
        return host_windows(all_series, t_from, t_to, chosen, interval)


def clock_offset(source: PromSource) -> float:
    """Prometheus's clock minus this host's (s), to within half a round trip: add it to fathom's times before
    asking for a window (sample times are the server's)."""
    t0 = time.time()
    data = source.query("time()")
    t1 = time.time()
    return float(data["result"][1]) - (t0 + t1) / 2


# ---- the run's source ---------------------------------------------------------------------------------

class PrometheusSource(Companion):
    """The cluster's hosts' CPU, memory and NIC bytes over each point from Prometheus (`--prometheus URL`).

    At the point's end it waits for a scrape past the end (one scrape interval, at most MAX_WAIT_S), then
    reads one record per host and scrape interval (interval_records), moved onto this host's clock by the
    offset measured when the run connected."""

    def __init__(self, src: PromSource, chosen: dict[str, str], offset_s: float):
        self.src, self.chosen, self.offset_s = src, chosen, offset_s
        self._t0 = 0.0

    def start(self, live: Live) -> None:
        self._t0 = time.time()

    def stop(self) -> Contribution:
        t1 = time.time()
        time.sleep(max(0.0, min(MAX_WAIT_S, (self.src.scrape_interval() or 15.0) + 0.5)))
        off = self.offset_s
        data = {"source": SOURCE, "url": self.src.url, "hosts": sorted(self.chosen.values())}
        try:
            recs = self.src.window(self._t0 + off, t1 + off, list(self.chosen), per_scrape=True)
        except PrometheusError as exc:
            return Contribution(events=[{"kind": "sources", "data": {**data, "error": exc.message},
                                         "message": f"no host figures from Prometheus: {exc.message}"}])
        for r in recs:
            r["ts"] -= off
        return Contribution(samples=recs, events=[{
            "kind": "sources", "data": data, "message": f"host figures of {len(self.chosen)} host(s) from "
            f"Prometheus at {self.src.url} (node-exporter; no per-daemon figures there)"}])


def connect(url: str, cluster_hosts: list[str], skip: set[str]) -> tuple[PrometheusSource, dict[str, Any]]:
    """The run's Prometheus source for the cluster's hosts (the metadata's names) but those in `skip` (sampled
    over SSH), and what the run records of it. PrometheusError when it covers none of them."""
    src = PromSource(url)
    info = src.check()
    seen = src.hosts()
    want = [h for h in cluster_hosts if h not in skip]
    twice = shared_names(seen, want)
    if twice:  # one host scraped twice counts once; two hosts with one name are refused, both named
        every = sorted({i for insts in twice.values() for i in insts})
        one_host_each(twice, boot_times(src.query(f"{BOOT}{{instance=~{_promql_regex(every)}}}")))
    chosen = {i: n for i, n in select(seen).items() if any(_short(n) == _short(h) or _short(i) == _short(h)
                                                            for h in want)}
    if not chosen:
        raise PrometheusError(f"Prometheus at {url} scrapes none of the cluster's hosts ({', '.join(want) or 'none'}"
                              f"; it scrapes {', '.join(sorted(seen.values())) or 'nothing'})",
                              "point --prometheus at the cluster's own Prometheus (cephadm: `ceph mgr services`), "
                              "with node-exporter on its hosts")
    offset = clock_offset(src)
    desc = {"url": src.url, "version": info.get("version"), "scrape_interval_s": info.get("scrape_interval_s"),
            "clock_offset_s": round(offset, 6), "hosts": sorted(chosen.values()),
            "not_scraped": sorted(h for h in want if not any(_short(h) == _short(n) for n in chosen.values())),
            "scraped_twice": {name: [i for i in insts if i in chosen] + [i for i in insts if i not in chosen]
                              for name, insts in twice.items()}}
    return PrometheusSource(src, chosen, offset), desc
