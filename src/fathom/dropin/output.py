"""rados bench and rbd bench output, rebuilt from fathom-engine records.

Pure functions and small stateful formatters: nothing here talks to Ceph or
to the engine, so every layout is unit-tested against hand-made records.

Layouts were copied from Ceph 16.2 (pacific) `rados bench` and `rbd bench`
run on a local cluster. As in those tools, "MB" means MiB (bytes / 1048576),
plain numbers are printed like a C++ ostream at its default precision (six
significant digits) and rbd bench's byte rates use Ceph's byte_u_t rules.

Where rados bench is wrong, fathom is right and says so in docs:
- Stddev IOPS is the sample standard deviation of the per-second IOPS (rados
  bench prints an integer-formatted double, i.e. garbage, in JSON).
- Per-second rates divide by the interval's real length, not by an assumed 1 s.
- JSON values are numbers (rados bench quotes them), absent values are null,
  and the document is the only thing on stdout.
"""

from __future__ import annotations

import math
import time
import zlib
from datetime import datetime
from typing import Any, Iterable

MIB = 1048576.0
NS = 1e9
# Percentile keys as the engine names them -> as fathom prints them.
PCTS = (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9"))
# A trailing interval shorter than this fraction of a second is too short for a rate sample.
MIN_SAMPLE_S = 0.5


# ---- number formatting ---------------------------------------------------------------

def cpp_g(x: float | int | None) -> str:
    """A double as C++ `ostream << x` prints it by default: %g with 6 significant digits."""
    if x is None:
        return "0"
    return format(float(x), "g")


def byte_u(v: float | int) -> str:
    """Ceph's byte_u_t: '81 MiB', '9.7 MiB', '512 B' (binary units, at most 7 characters)."""
    v = max(0, int(v))
    units = (" B", " KiB", " MiB", " GiB", " TiB", " PiB", " EiB")
    n, index = v, 0
    while n >= 1024 and index < 6:
        n //= 1024
        index += 1
    mult = 1 << (10 * index)
    if index == 0 or v % mult == 0:
        return f"{n}{units[index]}"
    for decimals in (2, 1, 0):
        s = f"{v / mult:.{decimals}f}{units[index]}"
        if len(s) <= 7:
            return s
    return s


def stdev(values: Iterable[float]) -> float:
    """Sample standard deviation (n-1), 0 for fewer than two values (as rados bench's vec_stddev)."""
    v = list(values)
    if len(v) < 2:
        return 0.0
    mean = sum(v) / len(v)
    return math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1))


def ceph_localtime(ts: float) -> str:
    """utime_t::localtime: 2026-11-21T21:04:43.349574+0000."""
    return datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%dT%H:%M:%S.%f%z")


def _s(ns: float | None) -> float | None:
    return None if ns is None else ns / NS


# ---- rados bench ---------------------------------------------------------------------

RADOS_HEADER = (f"{'sec':>5}{'Cur ops':>8}{'started':>10}{'finished':>10}{'avg MB/s':>10}{'cur MB/s':>10}"
                f"{'last lat(s)':>12}{'avg lat(s)':>12}")


ALL_KINDS = "*"


def combine_kinds(kinds: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One interval's stats over several op kinds: counts added, mean weighted by ops, max of maxima."""
    out: dict[str, Any] = {"ops": 0, "bytes": 0, "errors": 0}
    lat_sum = 0.0
    for o in kinds:
        n = int(o.get("ops", 0))
        out["ops"] += n
        out["bytes"] += int(o.get("bytes", 0))
        out["errors"] += int(o.get("errors", 0))
        if n:
            lat_sum += float(o.get("lat_mean_ns") or 0.0) * n
            if o.get("lat_max_ns") is not None:
                out["lat_max_ns"] = max(out.get("lat_max_ns") or 0, o["lat_max_ns"])
            if o.get("last_lat_ns") is not None:
                out["last_lat_ns"] = o["last_lat_ns"]
    if out["ops"]:
        out["lat_mean_ns"] = lat_sum / out["ops"]
    return out


class RadosTable:
    """rados bench's per-second table, fed one engine record at a time.

    kind: the engine's op kind ("write" or "read"), or ALL_KINDS for every
    kind together (a mixed S3 run). Also collects what the summary and the
    JSON need: the rows (`datas`) and the per-second bandwidth and IOPS samples.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self.i = 0  # rows printed, as rados bench's counter (header every 20)
        self.datas: list[dict[str, Any]] = []
        self.bw_samples: list[float] = []  # MiB/s per interval
        self.iops_samples: list[float] = []
        self.cum_ops = 0
        self.cum_bytes = 0
        self.cum_errors = 0
        self.lat_sum_ns = 0.0
        self.lat_max_ns: float | None = None
        self.last_t = 0.0
        self.hists: list[str] = []  # interval histograms since start (for the min latency line)

    # rows ------------------------------------------------------------------
    def _emit(self, sec: int, cur_ops: int, started: int, finished: int, avg_bw: float,
              cur_bw: float | None, last_lat: float | None, avg_lat: float, ts: float) -> list[str]:
        lines = []
        if self.i % 20 == 0:
            if self.i > 0:
                lines.append(f"{ceph_localtime(ts)} min lat: {cpp_g(self.min_lat_s())} "
                             f"max lat: {cpp_g(_s(self.lat_max_ns) or 0)} avg lat: {cpp_g(avg_lat)}")
            lines.append(RADOS_HEADER)
        if cur_bw is None or last_lat is None:  # nothing finished in this second, as rados bench shows it
            cur_txt, last_txt = "0", "-"
        else:
            cur_txt, last_txt = cpp_g(cur_bw), cpp_g(last_lat)
        lines.append(f"{sec:>5} {cur_ops:>7} {started:>9} {finished:>9} {cpp_g(avg_bw):>9} {cur_txt:>9} "
                     f"{last_txt:>11} {cpp_g(avg_lat):>11}")
        self.datas.append(self._data(sec, cur_ops, started, finished, avg_bw, cur_bw, last_lat, avg_lat))
        self.i += 1
        return lines

    @staticmethod
    def _data(sec: int, cur_ops: int, started: int, finished: int, avg_bw: float, cur_bw: float | None,
              last_lat: float | None, avg_lat: float) -> dict[str, Any]:
        return {"sec": sec, "cur_ops": cur_ops, "started": started, "finished": finished, "avg_bw": avg_bw,
                "cur_bw": cur_bw if cur_bw is not None else 0.0, "last_lat": last_lat, "avg_lat": avg_lat}

    def start(self, ts: float | None = None) -> list[str]:
        """The `sec 0` row rados bench prints before the first op completes."""
        return self._emit(0, 0, 0, 0, 0.0, 0.0, None, 0.0, ts or time.time())

    def interval(self, rec: dict[str, Any]) -> list[str]:
        if rec.get("ramp"):
            return []
        kinds = rec.get("ops") or {}
        o = combine_kinds(kinds.values()) if self.kind == ALL_KINDS else kinds.get(self.kind) or {}
        ops = int(o.get("ops", 0))
        nbytes = int(o.get("bytes", 0))
        dt = float(rec.get("dt") or 0.0)
        t = float(rec.get("t") or (self.last_t + dt))
        self.last_t = t
        self.cum_ops += ops
        self.cum_bytes += nbytes
        self.cum_errors += int(o.get("errors", 0))
        if ops:
            self.lat_sum_ns += float(o.get("lat_mean_ns") or 0.0) * ops
            mx = o.get("lat_max_ns")
            if mx is not None:
                self.lat_max_ns = mx if self.lat_max_ns is None else max(self.lat_max_ns, mx)
        self.hists += [k["hist"] for k in (kinds.values() if self.kind == ALL_KINDS else [o]) if k.get("hist")]
        cur_bw = nbytes / dt / MIB if dt > 0 else 0.0
        if dt >= MIN_SAMPLE_S:
            self.bw_samples.append(cur_bw)
            self.iops_samples.append(ops / dt)
        avg_bw = self.cum_bytes / t / MIB if t > 0 else 0.0
        avg_lat = self.lat_sum_ns / self.cum_ops / NS if self.cum_ops else 0.0
        last = o.get("last_lat_ns")
        last_lat = last / NS if ops and last is not None else None
        row = (int(t + 0.5), int(rec.get("in_flight", 0)), int(rec.get("started", self.cum_ops)),
               int(rec.get("finished", self.cum_ops)), avg_bw, cur_bw if ops else None, last_lat, avg_lat)
        if dt < MIN_SAMPLE_S:
            # the drain after the last whole second: counted, kept in the JSON, not printed (as rados bench)
            self.datas.append(self._data(*row))
            return []
        return with_slowest(self._emit(*row, float(rec.get("ts") or time.time())), rec, self.datas)

    def min_lat_s(self) -> float:
        """Smallest latency so far, from the interval histograms (0 when none could be read)."""
        if not self.hists:
            return 0.0
        from fathom.results import hdr

        try:
            m = hdr.merge(h for h in self.hists if h)
        except (ValueError, zlib.error):  # a decoration line must never stop a bench
            return 0.0
        return hdr.min_ns(m) / NS if hdr.count(m) else 0.0


def with_slowest(lines: list[str], rec: dict[str, Any], datas: list[dict[str, Any]]) -> list[str]:
    """A merged interval of several client hosts: the slowest host (fewest ops/s per engine) after the row,
    and in the row's JSON."""
    slow = rec.get("slowest")
    if not slow or not lines:
        return lines
    datas[-1]["slowest"] = slow
    return lines[:-1] + [f"{lines[-1]}   slowest: {slow['host']} {cpp_g(round(slow['iops'], 1))} op/s per engine"]


def rate_stats(samples: list[float], overall: float) -> tuple[float, float, float]:
    """(stddev, max, min) of per-second samples; a run shorter than a sample counts as one sample."""
    s = samples or [overall]
    return stdev(s), max(s), min(s)


def summary_rates(t: float, ops: int, nbytes: int, table: RadosTable) -> dict[str, float]:
    """Bandwidth (MiB/s) and IOPS over the run, with stddev, max and min of the per-second samples."""
    bw = nbytes / t / MIB if t > 0 else 0.0
    iops = ops / t if t > 0 else 0.0
    sd_bw, max_bw, min_bw = rate_stats(table.bw_samples, bw)
    sd_iops, max_iops, min_iops = rate_stats(table.iops_samples, iops)
    return {"bandwidth": bw, "stddev_bandwidth": sd_bw, "max_bandwidth": max_bw, "min_bandwidth": min_bw,
            "average_iops": iops, "stddev_iops": sd_iops, "max_iops": max_iops, "min_iops": min_iops}


def rados_summary(mode: str, summary: dict[str, Any], table: RadosTable, op_size: int,
                  object_size: int) -> dict[str, Any]:
    """rados bench's summary fields (JSON names, numbers in s and MiB/s) plus latency percentiles."""
    kind = table.kind
    o = (summary.get("ops") or {}).get(kind) or {}
    t = float(summary.get("measured_s") or 0.0)
    ops = int(o.get("ops", 0))
    rates = summary_rates(t, ops, int(o.get("bytes", 0)), table)
    lat = o.get("lat_ns") or {}
    made, size = ("total_writes_made", "write_size") if mode == "write" else ("total_reads_made", "read_size")
    has = ops > 0
    out: dict[str, Any] = {
        "total_time_run": t,
        made: ops,
        size: op_size,
        "object_size": object_size,
        **rates,
        "average_latency": _s(lat.get("mean")) if has else None,
        "stddev_latency": _s(lat.get("stdev")) if has else None,
        "max_latency": _s(lat.get("max")) if has else None,
        "min_latency": _s(lat.get("min")) if has else None,
        "latency_percentiles": {name: (_s(lat.get(key)) if has else None) for key, name in PCTS},
    }
    out["latency_percentiles"]["max"] = _s(lat.get("max")) if has else None
    out.update(measured_facts(summary))
    return out


def format_rados_summary(mode: str, s: dict[str, Any]) -> list[str]:
    """The summary block as rados bench prints it, then fathom's percentile lines."""
    w = 24 if mode == "write" else 22
    made, size = ("Total writes made:", "Write size:") if mode == "write" else ("Total reads made:", "Read size:")
    made_v = s["total_writes_made" if mode == "write" else "total_reads_made"]
    size_v = s["write_size" if mode == "write" else "read_size"]
    p = s["latency_percentiles"]

    def row(label: str, value: str) -> str:
        return f"{label:<{w}}{value}" if len(label) < w else f"{label} {value}"

    def num(v: float | None) -> str:
        return cpp_g(v if v is not None else 0)

    return [
        row("Total time run:", cpp_g(s["total_time_run"])),
        row(made, str(made_v)),
        row(size, str(size_v)),
        row("Object size:", str(s["object_size"])),
        *rate_rows(s, row),
        row("Average Latency(s):", num(s["average_latency"])),
        row("Stddev Latency(s):", num(s["stddev_latency"])),
        row("Max latency(s):", num(s["max_latency"])),
        row("Min latency(s):", num(s["min_latency"])),
        row("Latency p50(s):", num(p["p50"])),
        row("Latency p90(s):", num(p["p90"])),
        row("Latency p99(s):", num(p["p99"])),
        row("Latency p99.9(s):", num(p["p99.9"])),
        row("Latency max(s):", num(p["max"])),
        *facts_rows(s, row),
    ]


def rate_rows(s: dict[str, Any], row: Any) -> list[str]:
    """rados bench's bandwidth and IOPS lines of a summary (row: label, value -> line)."""
    return [
        row("Bandwidth (MB/sec):", cpp_g(s["bandwidth"])),
        row("Stddev Bandwidth:", cpp_g(s["stddev_bandwidth"])),
        row("Max bandwidth (MB/sec):", cpp_g(s["max_bandwidth"])),
        row("Min bandwidth (MB/sec):", cpp_g(s["min_bandwidth"])),
        row("Average IOPS:", str(int(s["average_iops"]))),
        row("Stddev IOPS:", cpp_g(s["stddev_iops"])),
        row("Max IOPS:", str(int(round(s["max_iops"])))),
        row("Min IOPS:", str(int(round(s["min_iops"])))),
    ]


# a drain (stop -> last measured completion) over this share of the measured time is called out
DRAIN_NOTE_FRACTION = 0.05


def measured_facts(summary: dict[str, Any]) -> dict[str, Any]:
    """What fathom adds to a bench's summary from the engine's record, when there: the open-loop schedule
    (offered and achieved rate, unissued ops, kept or not), the window and drain the rates divide by, and
    the p99 latency including failed and timed-out ops (s)."""
    from fathom.results.model import p99_with_errors_ms

    out: dict[str, Any] = {}
    sch = summary.get("schedule")
    if sch:
        out["schedule"] = {k: sch.get(k) for k in ("offered_rate", "achieved_rate", "intended_ops", "issued_ops",
                                                   "unissued_ops", "schedule_kept", "max_lag_ns", "mean_lag_ns")}
        if out["schedule"]["offered_rate"] is None:  # records from before the offered/achieved fields
            out["schedule"]["offered_rate"] = sch.get("rate")
    if summary.get("drain_s") is not None:
        out["window_s"], out["drain_s"] = summary.get("window_s"), float(summary["drain_s"])
    kinds = [o for o in (summary.get("ops") or {}).values() if int(o.get("ops", 0))]
    try:
        p99 = p99_with_errors_ms([o.get("hist") for o in kinds], summary.get("errors") or [])
    except (ValueError, zlib.error):  # a histogram we cannot read leaves the figure out, never fails a bench
        p99 = None
    if p99 is not None:
        out["latency_p99_all"] = p99 / 1e3
    return out


def facts_rows(s: dict[str, Any], row: Any) -> list[str]:
    """The lines of measured_facts under a summary (row: label, value -> line), with a warning where the
    schedule was not kept or the drain is a sizeable part of the measured time."""
    lines = []
    sch = s.get("schedule")
    if sch:
        lines += [row("Offered rate (op/s):", cpp_g(sch["offered_rate"])),
                  row("Achieved rate (op/s):", cpp_g(sch["achieved_rate"]) if sch["achieved_rate"] is not None
                      else "n/a"),
                  row("Unissued ops:", str(sch["unissued_ops"]) if sch["unissued_ops"] is not None else "n/a")]
    if s.get("latency_p99_all") is not None:
        lines.append(row("Latency p99 incl. errors(s):", cpp_g(s["latency_p99_all"])))
    if sch and sch.get("schedule_kept") is False:
        lines.append(f"Warning: the open-loop schedule was not kept: {sch['unissued_ops']} of the "
                     f"{sch['intended_ops']} arrivals intended in the window were never issued, or the achieved "
                     "rate fell over 5% short of theirs; the rates above are what the cluster took under a "
                     "backlog, not the offered rate")
    lines += drain_note(s.get("window_s"), s.get("drain_s"))
    return lines


def drain_note(window_s: float | None, drain_s: float | None) -> list[str]:
    """A note when the wait for the slowest op is over DRAIN_NOTE_FRACTION of the measured time."""
    if window_s is None or drain_s is None or window_s + drain_s <= 0:
        return []
    if drain_s <= DRAIN_NOTE_FRACTION * (window_s + drain_s):
        return []
    return [f"Note: the rates divide by {cpp_g(round(window_s, 3))} s of window plus {cpp_g(round(drain_s, 3))} s "
            "waiting for the slowest op to return"]


def rados_write_preamble(concurrent: int, op_size: int, object_size: int, seconds: int, max_objects: int,
                         prefix: str) -> list[str]:
    return [f"Maintaining {concurrent} concurrent writes of {op_size} bytes to objects of size {object_size} "
            f"for up to {seconds} seconds or {max_objects} objects",
            f"Object prefix: {prefix}"]


def rados_json(mode: str, table: RadosTable, summary: dict[str, Any], head: dict[str, Any] | None,
               extra: dict[str, Any]) -> dict[str, Any]:
    """rados bench's JSON document (same names, real numbers) with fathom's additions last."""
    doc: dict[str, Any] = {}
    if mode == "write" and head:
        doc.update(head)  # concurrent_ios, object_size, op_size, seconds_to_run, max_objects, object_prefix
    doc["datas"] = table.datas
    doc.update(summary)
    doc["fathom"] = extra
    return doc


# ---- rbd bench -----------------------------------------------------------------------

RBD_HEADER = f"{'SEC':>5}{'OPS':>10}{'OPS/SEC':>10}{'BYTES/SEC':>12}"
RBD_WINDOW = 5  # rbd bench's OPS/SEC and BYTES/SEC are a rolling window of five samples


def rbd_preamble(io_type: str, io_size: int, io_threads: int, total: int, pattern: str, mix_read: int) -> str:
    kind = io_type if io_type != "readwrite" else f"readwrite read:write={mix_read}:{100 - mix_read}"
    pat = {"seq": "sequential", "rand": "random", "full-seq": "full sequential"}[pattern]
    return f"bench  type {kind} io_size {io_size} io_threads {io_threads} bytes {total} pattern {pat}"


class RbdTable:
    """rbd bench's per-second rows from engine intervals (all op kinds together)."""

    def __init__(self) -> None:
        self.window: list[tuple[float, int, int]] = []  # (dt, ops, bytes)
        self.cum_ops = 0
        self.datas: list[dict[str, Any]] = []

    def header(self) -> list[str]:
        return [RBD_HEADER]

    def interval(self, rec: dict[str, Any]) -> list[str]:
        if rec.get("ramp"):
            return []
        ops = sum(int(o.get("ops", 0)) for o in (rec.get("ops") or {}).values())
        nbytes = sum(int(o.get("bytes", 0)) for o in (rec.get("ops") or {}).values())
        dt = float(rec.get("dt") or 0.0)
        self.cum_ops += ops
        self.window = (self.window + [(dt, ops, nbytes)])[-RBD_WINDOW:]
        span = sum(w[0] for w in self.window)
        ops_s = sum(w[1] for w in self.window) / span if span > 0 else 0.0
        bytes_s = sum(w[2] for w in self.window) / span if span > 0 else 0.0
        sec = int(float(rec.get("t") or 0.0) + 1e-6)
        if dt < MIN_SAMPLE_S:  # rbd bench prints a row per whole second only
            return []
        self.datas.append({"sec": sec, "ops": self.cum_ops, "ops_per_sec": ops_s, "bytes_per_sec": bytes_s})
        return with_slowest([f"{sec:>5}{self.cum_ops:>10}{cpp_g(ops_s):>10}{byte_u(bytes_s):>10}/s"], rec,
                            self.datas)


def _lat_block(o: dict[str, Any]) -> dict[str, Any]:
    lat = o.get("lat_ns") or {}
    has = int(o.get("ops", 0)) > 0
    d = {"mean": _s(lat.get("mean")), "stddev": _s(lat.get("stdev")), "min": _s(lat.get("min")),
         "max": _s(lat.get("max"))}
    for key, name in PCTS:
        d[name] = _s(lat.get(key))
    return d if has else {k: None for k in d}


def rbd_summary(summary: dict[str, Any], merged_pct_ns: dict[str, float] | None = None) -> dict[str, Any]:
    """rbd bench's totals (elapsed, ops, ops/sec, bytes/sec) per op kind, with latency in seconds."""
    t = float(summary.get("measured_s") or 0.0)
    kinds = summary.get("ops") or {}
    ops = sum(int(o.get("ops", 0)) for o in kinds.values())
    nbytes = sum(int(o.get("bytes", 0)) for o in kinds.values())
    out: dict[str, Any] = {"elapsed": t, "ops": ops, "ops_per_sec": ops / t if t > 0 else 0.0,
                           "bytes_per_sec": nbytes / t if t > 0 else 0.0, "bytes": nbytes}
    for kind in ("read", "write"):
        if kind in kinds:
            o = kinds[kind]
            n, b = int(o.get("ops", 0)), int(o.get("bytes", 0))
            out[kind] = {"ops": n, "ops_per_sec": n / t if t > 0 else 0.0, "bytes": b,
                         "bytes_per_sec": b / t if t > 0 else 0.0, "latency": _lat_block(o)}
    present = [k for k in ("read", "write") if k in kinds and int(kinds[k].get("ops", 0)) > 0]
    pct: dict[str, float | None] = {name: None for _, name in PCTS}
    pct["max"] = None
    if len(present) == 1:
        lat = out[present[0]]["latency"]
        pct = {name: lat[name] for _, name in PCTS}
        pct["max"] = lat["max"]
    elif merged_pct_ns:
        pct = {name: _s(merged_pct_ns.get(key)) for key, name in PCTS}
        pct["max"] = max((out[k]["latency"]["max"] or 0.0) for k in present) if present else None
    out["latency_percentiles"] = pct
    out.update(measured_facts(summary))
    return out


def format_rbd_summary(s: dict[str, Any], io_type: str) -> list[str]:
    lines = [f"elapsed: {int(s['elapsed'])}   ops: {s['ops']}   ops/sec: {cpp_g(s['ops_per_sec'])}   "
             f"bytes/sec: {byte_u(s['bytes_per_sec'])}/s"]
    kinds = ["read", "write"] if io_type == "readwrite" else []
    for k in kinds:
        if k in s:
            d = s[k]
            lines.append(f"{k}_ops: {d['ops']}   {k}_ops/sec: {cpp_g(d['ops_per_sec'])}   "
                         f"{k}_bytes/sec: {byte_u(d['bytes_per_sec'])}/s")
    for k in ("read", "write"):
        if k not in s or not s[k]["ops"]:
            continue
        lat = s[k]["latency"]
        tag = f"{k}_lat" if io_type == "readwrite" else "lat"
        lines.append(f"{tag} avg(s): {cpp_g(lat['mean'])}   stddev(s): {cpp_g(lat['stddev'])}   "
                     f"min(s): {cpp_g(lat['min'])}   max(s): {cpp_g(lat['max'])}")
        lines.append(f"{tag} p50(s): {cpp_g(lat['p50'])}   p90(s): {cpp_g(lat['p90'])}   "
                     f"p99(s): {cpp_g(lat['p99'])}   p99.9(s): {cpp_g(lat['p99.9'])}   max(s): {cpp_g(lat['max'])}")
    return lines + facts_rows(s, lambda label, value: f"{label} {value}")


# ---- fathom bench s3 -----------------------------------------------------------------

# engine op kind -> S3 request, in report order
S3_OPS = (("read", "GET"), ("stat", "HEAD"), ("write", "PUT"), ("remove", "DELETE"), ("list", "LIST"))


def s3_summary(summary: dict[str, Any], table: RadosTable, object_size: int) -> dict[str, Any]:
    """rados bench's totals over every request, then per S3 request: rate, latency and its phases
    (GET: time to first byte; PUT: the server's time after the body), all in seconds and MiB/s."""
    t = float(summary.get("measured_s") or 0.0)
    kinds = summary.get("ops") or {}
    ops = sum(int(o.get("ops", 0)) for o in kinds.values())
    nbytes = sum(int(o.get("bytes", 0)) for o in kinds.values())
    out: dict[str, Any] = {"total_time_run": t, "total_ops_made": ops, "object_size": object_size,
                           **summary_rates(t, ops, nbytes, table), "requests": {}}
    for kind, name in S3_OPS:
        o = kinds.get(kind)
        if not o or not (int(o.get("ops", 0)) or int(o.get("errors", 0))):
            continue
        n, b = int(o.get("ops", 0)), int(o.get("bytes", 0))
        req: dict[str, Any] = {"ops": n, "errors": int(o.get("errors", 0)), "bytes": b,
                               "ops_per_sec": n / t if t > 0 else 0.0, "bandwidth": b / t / MIB if t > 0 else 0.0,
                               "latency": _lat_block(o)}
        for phase in ("ttfb", "server"):
            ph = (o.get("phases") or {}).get(phase)
            if ph:
                req[phase] = _lat_block({"ops": ph.get("count", 0), "lat_ns": ph.get("lat_ns") or {}})
        out["requests"][name] = req
    out["errors"] = [{"request": dict(S3_OPS).get(e.get("op", ""), e.get("op")), "kind": e.get("kind"),
                      "count": e.get("count"), "first": e.get("first")} for e in summary.get("errors") or []]
    out.update(measured_facts(summary))
    return out


def format_s3_summary(s: dict[str, Any]) -> list[str]:
    """rados bench's summary block over all requests, then a latency block per S3 request."""
    w = 24

    def row(label: str, value: str) -> str:
        return f"{label:<{w}}{value}"

    def pct(lat: dict[str, Any]) -> str:
        return "   ".join(f"{k}: {cpp_g(lat[k] or 0)}" for k in ("p50", "p90", "p99", "p99.9", "max"))

    lines = [
        row("Total time run:", cpp_g(s["total_time_run"])),
        row("Total requests made:", str(s["total_ops_made"])),
        row("Object size:", str(s["object_size"])),
        *rate_rows(s, row),
    ]
    for name, r in s["requests"].items():
        lat = r["latency"]
        lines.append(f"{name}: {r['ops']} requests   {cpp_g(r['ops_per_sec'])} req/s   "
                     f"{cpp_g(r['bandwidth'])} MB/s   {r['errors']} errors")
        lines.append(f"  latency(s) avg: {cpp_g(lat['mean'] or 0)}   stddev: {cpp_g(lat['stddev'] or 0)}   "
                     f"min: {cpp_g(lat['min'] or 0)}")
        lines.append(f"  latency(s) {pct(lat)}")
        if r.get("ttfb"):
            lines.append(f"  TTFB(s)    {pct(r['ttfb'])}")
        if r.get("server"):
            lines.append(f"  server(s)  {pct(r['server'])}   (after the last body byte was sent)")
    for e in s["errors"]:
        lines.append(f"Errors: {e['request']} {e['kind']}: {e['count']} (first: {e['first']})")
    return lines + facts_rows(s, lambda label, value: row(label, value) if len(label) < w else f"{label} {value}")
