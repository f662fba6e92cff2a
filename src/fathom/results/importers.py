"""Bring outside numbers into the store: fio JSON, rados bench JSON, published tables.

Every imported run records in `source` where its numbers came from and what they lack,
and reports print that next to the numbers. Metrics use METRIC_COLUMNS; what a source
does not have stays None (never guessed).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
import time
from pathlib import Path
from typing import Any

from fathom.errors import FathomError
from fathom.results.model import METRIC_COLUMNS, PERCENTILES, OpStats, PointResult, pooled_mean_stdev
from fathom.results import studies
from fathom.results.store import Store
from fathom.units import format_size, parse_size

_WL_RE = re.compile(r"^(randread|randwrite|randrw|seqread|seqwrite|read|write|rw|readwrite)[-_]?(\d+[kmgKMG]?)$")
_RW_NAME = {"read": "seqread", "write": "seqwrite", "rw": "seqrw", "readwrite": "seqrw"}
_RW_FIO = {"seqread": "read", "seqwrite": "write", "seqrw": "rw"}


def workload_name(rw: str, bs: int | None) -> str:
    """'randread4k', 'seqwrite64k': the OSD study's names."""
    size = format_size(bs).replace("iB", "").lower() if bs else ""
    return f"{_RW_NAME.get(rw, rw)}{size}"


def parse_workload(name: str) -> dict[str, Any]:
    """rw and bs from a workload name like 'randread4k' or 'seqwrite64k' (empty if it is not one)."""
    m = _WL_RE.match(name.strip())
    if not m:
        return {}
    return {"rw": _RW_FIO.get(m.group(1), m.group(1)), "bs": parse_size(m.group(2))}


def _empty_metrics() -> dict[str, Any]:
    return {k: None for k in METRIC_COLUMNS}


def _describe_file(path: Path, data: bytes) -> str:
    return f"{path.name} (sha256 {hashlib.sha256(data).hexdigest()[:12]}, imported {time.strftime('%Y-%m-%d')})"


def _read(path: str | Path) -> tuple[Path, bytes]:
    p = Path(path)
    try:
        return p, p.read_bytes()
    except OSError as exc:
        raise FathomError(f"cannot read {p}: {exc.strerror or exc}") from None


def _json_after_noise(text: str, what: str, path: Path) -> Any:
    """The JSON document in `text`, skipping any lines before it (fio and rados print warnings first)."""
    start = None
    for m in re.finditer(r"^[ \t]*[{\[]", text, re.MULTILINE):
        start = m.start()
        try:
            obj, _ = json.JSONDecoder().raw_decode(text[start:].lstrip())
            return obj
        except json.JSONDecodeError:
            continue
    hint = "it has no JSON document" if start is None else "its JSON does not parse"
    raise FathomError(f"{path} is not {what} output: {hint}",
                      hint=f"produce it with {'--output-format=json+' if 'fio' in what else '-f json'}")


# ---- fio ---------------------------------------------------------------------------------------
def _opt(job: dict[str, Any], glob: dict[str, Any], key: str) -> Any:
    return (job.get("job options") or {}).get(key, glob.get(key))


def _bins_percentiles(bins: dict[str, int]) -> dict[str, float]:
    """Percentiles (ns) from fio json+ latency bins merged over jobs: exact to fio's bucket width."""
    items = sorted((int(float(k)), int(v)) for k, v in bins.items() if int(v) > 0)
    total = sum(c for _, c in items)
    out: dict[str, float] = {}
    if not total:
        return out
    for key, q in PERCENTILES.items():
        need, acc = math.ceil(q / 100.0 * total), 0
        for val, c in items:
            acc += c
            if acc >= need:
                out[key] = float(val)
                break
    return out


def parse_fio(doc: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any], PointResult, list[str]]:
    """One fio run (all its jobs summed, as fio-parse-jsons does) -> workload, params, metrics, result, notes."""
    jobs = doc.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise FathomError("fio output has no jobs", hint="produce it with --output-format=json or json+")
    glob = doc.get("global options") or {}
    notes: list[str] = []
    rw = str(_opt(jobs[0], glob, "rw") or _opt(jobs[0], glob, "readwrite") or "unknown")
    bs_raw = _opt(jobs[0], glob, "bs") or _opt(jobs[0], glob, "blocksize")
    try:
        bs = parse_size(str(bs_raw).split(",")[0]) if bs_raw else None
    except FathomError:
        bs = None
    iodepth = _opt(jobs[0], glob, "iodepth")
    numjobs_opt = _opt(jobs[0], glob, "numjobs")
    ops: dict[str, OpStats] = {}
    parts: dict[str, list[tuple[int, float, float]]] = {}
    bins: dict[str, dict[str, int]] = {}
    single_pct: dict[str, dict[str, float]] = {}
    usr = sys_ = 0.0
    errors = 0
    for job in jobs:
        usr += float(job.get("usr_cpu") or 0.0)
        sys_ += float(job.get("sys_cpu") or 0.0)
        if job.get("error"):
            errors += 1
        for kind in ("read", "write", "trim"):
            d = job.get(kind) or {}
            n = int(d.get("total_ios") or 0)
            if not n:
                continue
            clat = d.get("clat_ns") or {}
            o = ops.setdefault(kind, OpStats(ops=0, bytes=0, runtime_s=0.0))
            o.ops += n
            o.bytes += int(d.get("io_bytes") or 0)
            o.runtime_s = max(o.runtime_s, float(d.get("runtime") or 0) / 1000.0)
            o.lat_min_ns = min(filter(None, [o.lat_min_ns, clat.get("min")]), default=None)
            o.lat_max_ns = max(filter(None, [o.lat_max_ns, clat.get("max")]), default=None)
            parts.setdefault(kind, []).append((n, float(clat.get("mean") or 0.0), float(clat.get("stddev") or 0.0)))
            if clat.get("bins"):
                b = bins.setdefault(kind, {})
                for k, v in clat["bins"].items():
                    b[k] = b.get(k, 0) + int(v)
            if clat.get("percentile"):
                single_pct[kind] = {key: float(clat["percentile"][f"{q:.6f}"]) for key, q in PERCENTILES.items()
                                    if f"{q:.6f}" in clat["percentile"]}
    if not ops:
        raise FathomError("fio output has no completed I/O in any job")
    for kind, o in ops.items():
        o.lat_mean_ns, o.lat_stdev_ns = pooled_mean_stdev(parts[kind])
        if kind in bins:
            o.percentiles_ns = _bins_percentiles(bins[kind])
        elif len(jobs) == 1 and kind in single_pct:
            o.percentiles_ns = single_pct[kind]
    runtime = max(o.runtime_s for o in ops.values())
    # Summed I/O over the longest op runtime: fio's jobs run concurrently over the same window.
    res = PointResult(engine="fio", ops=ops, runtime_s=runtime, errors=[],
                      extra={"fio_version": doc.get("fio version")})
    m = _empty_metrics()
    m.update(runtime_s=runtime, total_ios=sum(o.ops for o in ops.values()),
             iops=sum(o.ops / o.runtime_s for o in ops.values() if o.runtime_s),
             bw_mib_s=sum(o.bytes / o.runtime_s for o in ops.values() if o.runtime_s) / 2**20,
             usr_cpu=usr, sys_cpu=sys_, errors=errors)
    for kind in ("read", "write"):
        if kind in ops and ops[kind].runtime_s:
            m[f"{kind}_iops"] = ops[kind].iops
            m[f"{kind}_bw_mib_s"] = ops[kind].bw_bytes_s / 2**20
    mean, stdev = pooled_mean_stdev([p for k in parts for p in parts[k]])
    m["clat_ms"] = mean / 1e6 if mean is not None else None
    m["clat_stdev_ms"] = stdev / 1e6 if stdev is not None else None
    m["lat_min_ms"] = min((o.lat_min_ns for o in ops.values() if o.lat_min_ns), default=None)
    m["lat_max_ms"] = max((o.lat_max_ns for o in ops.values() if o.lat_max_ns), default=None)
    for k in ("lat_min_ms", "lat_max_ms"):
        m[k] = m[k] / 1e6 if m[k] is not None else None
    if len(ops) == 1:
        pct = next(iter(ops.values())).percentiles_ns
    else:
        pct = {}
        merged: dict[str, int] = {}
        if len(bins) == len(ops):
            for b in bins.values():
                for k, v in b.items():
                    merged[k] = merged.get(k, 0) + v
            pct = _bins_percentiles(merged)
    for key in PERCENTILES:
        m[f"{key}_ms"] = pct[key] / 1e6 if key in pct else None
    if not pct:
        notes.append("no latency percentiles: fio's per-job percentiles cannot be merged; use json+ output "
                     "(latency bins) for exact merged percentiles")
    elif bins:
        notes.append("percentiles from fio json+ latency bins merged over jobs")
    else:
        notes.append("percentiles as fio reported them (one job)")
    nj = len(jobs) if numjobs_opt is None or len(jobs) > 1 else int(numjobs_opt)
    params: dict[str, Any] = {"rw": rw, "bs": bs, "iodepth": int(iodepth) if iodepth else None, "numjobs": nj,
                              "ioengine": _opt(jobs[0], glob, "ioengine")}
    return workload_name(rw, bs), params, m, res, notes


def import_fio(store: Store, files: list[str], name: str | None = None) -> int:
    """One run holding one point per fio output file (e.g. one file per iodepth of a sweep)."""
    points = []
    descs, notes = [], []
    for f in files:
        path, data = _read(f)
        doc = _json_after_noise(data.decode("utf-8", "replace"), "fio JSON", path)
        if not isinstance(doc, dict):
            raise FathomError(f"{path} is not fio JSON output: expected an object with 'jobs'")
        try:
            points.append(parse_fio(doc))
        except FathomError as exc:
            raise FathomError(f"{path}: {exc.message}", hint=exc.hint) from None
        descs.append(_describe_file(path, data))
        notes.extend(points[-1][4])
    source = ("fio output: " + "; ".join(descs) + ". Measured by fio; fathom did not run it, so there is no OSD "
              "telemetry, no health gate, no per-second intervals and no HDR histograms. "
              + " ".join(sorted(set(notes))))
    run_id = store.create_run(name or Path(files[0]).stem, kind="import", suite="fio", source=source, status="done",
                              env={"fio_version": points[0][3].extra.get("fio_version")})
    for idx, (wl, params, m, res, _) in enumerate(points):
        store.save_point(run_id, idx, f"{wl}-{idx}", wl, "fio", params, "done", metrics=m, result=res.to_dict())
    return run_id


# ---- rados bench ------------------------------------------------------------------------------
def parse_rados_bench(doc: dict[str, Any], mode: str | None, threads: int | None
                      ) -> tuple[str, dict[str, Any], dict[str, Any], PointResult, list[str]]:
    if "total_writes_made" in doc:
        kind, mode, ops = "write", "write", int(doc["total_writes_made"])
    elif "total_reads_made" in doc:
        kind, mode, ops = "read", (mode or "read"), int(doc["total_reads_made"])
    else:
        raise FathomError("rados bench output has neither total_writes_made nor total_reads_made",
                          hint="run rados bench with -f json")
    t = float(doc.get("total_time_run") or 0.0)
    size = int(doc.get("write_size") or doc.get("read_size") or doc.get("op_size") or doc.get("object_size") or 0)
    notes = ["rados bench reports no latency percentiles and no histogram; its per-second table is kept in "
             "the point's result (extra.datas)",
             "its stddev_iops is not used (it is not a standard deviation of the IOPS samples)"]
    lat_s, lat_sd = doc.get("average_latency"), doc.get("stddev_latency")
    o = OpStats(ops=ops, bytes=ops * size, runtime_s=t,
                lat_mean_ns=float(lat_s) * 1e9 if lat_s is not None else None,
                lat_stdev_ns=float(lat_sd) * 1e9 if lat_sd is not None else None,
                lat_min_ns=float(doc["min_latency"]) * 1e9 if doc.get("min_latency") is not None else None,
                lat_max_ns=float(doc["max_latency"]) * 1e9 if doc.get("max_latency") is not None else None)
    res = PointResult(engine="rados-bench", ops={kind: o}, runtime_s=t,
                      extra={k: doc[k] for k in ("bandwidth", "average_iops", "max_iops", "min_iops",
                                                 "stddev_bandwidth", "object_prefix", "datas") if k in doc})
    m = _empty_metrics()
    m.update(runtime_s=t, total_ios=ops, iops=ops / t if t else None,
             bw_mib_s=ops * size / t / 2**20 if t else None, errors=0,
             clat_ms=o.lat_mean_ns / 1e6 if o.lat_mean_ns is not None else None,
             clat_stdev_ms=o.lat_stdev_ns / 1e6 if o.lat_stdev_ns is not None else None,
             lat_min_ms=o.lat_min_ns / 1e6 if o.lat_min_ns is not None else None,
             lat_max_ms=o.lat_max_ns / 1e6 if o.lat_max_ns is not None else None)
    m[f"{kind}_iops"], m[f"{kind}_bw_mib_s"] = m["iops"], m["bw_mib_s"]
    if threads is None and doc.get("concurrent_ios") is not None:
        threads = int(doc["concurrent_ios"])  # newer rados bench JSON records -t
    if threads is None and m["iops"] and lat_s:
        est = m["iops"] * float(lat_s)  # Little's law: outstanding ops = throughput x latency
        notes.append(f"concurrency (-t) not given: estimated {est:.1f} outstanding ops from IOPS x mean latency, "
                     "not stored as iodepth")
    params = {"rw": mode, "bs": size, "iodepth": threads, "object_size": doc.get("object_size")}
    return workload_name(f"rados-{mode}", size), params, m, res, notes


def import_rados_bench(store: Store, files: list[str], name: str | None = None, mode: str | None = None,
                       threads: int | None = None) -> int:
    points, descs, notes = [], [], []
    for f in files:
        path, data = _read(f)
        doc = _json_after_noise(data.decode("utf-8", "replace"), "rados bench JSON", path)
        if not isinstance(doc, dict):
            raise FathomError(f"{path} is not rados bench -f json output")
        try:
            points.append(parse_rados_bench(doc, mode, threads))
        except FathomError as exc:
            raise FathomError(f"{path}: {exc.message}", hint=exc.hint) from None
        descs.append(_describe_file(path, data))
        notes.extend(points[-1][4])
    source = ("rados bench output: " + "; ".join(descs) + ". Measured by rados bench; fathom did not run it: "
              "no OSD telemetry, no client CPU, no health gate. " + "; ".join(dict.fromkeys(notes)) + ".")
    run_id = store.create_run(name or Path(files[0]).stem, kind="import", suite="rados-bench", source=source,
                              status="done")
    for idx, (wl, params, m, res, _) in enumerate(points):
        store.save_point(run_id, idx, f"{wl}-{idx}", wl, "rados-bench", params, "done", metrics=m,
                         result=res.to_dict())
    return run_id


# ---- published tables ------------------------------------------------------------------------
_NUM_RE = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")
_PARAM_COLS = ("iodepth", "numjobs", "bs", "rw", "files", "clients", "threads")
OSD_MEM_NOTE = ("the published OSD_mem column is top's %MEM summed over the OSD's threads, not a size: it is kept "
                "as published (osd_mem_published) and OSD memory in MiB is unknown")
# 2014 study scenarios: block size, file size, pattern (from reference/STUDIES.md)
_SCENARIOS_2014 = {"db": ("randrw", 8192, 65536), "logs": ("write", 65536, 2**20),
                   "office": ("randrw", 65536, 524288), "images": ("read", 131072, 10 * 2**20)}


def _num(v: str) -> Any:
    v = v.strip()
    if v == "":
        return None
    if _NUM_RE.match(v):
        f = float(v)
        return int(f) if f.is_integer() and "." not in v else f
    return v


def import_table(store: Store, file: str, split_by: str | None = None, name: str | None = None) -> list[int]:
    """Each value of the split column becomes one run; rows become points."""
    path, data = _read(file)
    rows = list(csv.DictReader(data.decode("utf-8-sig").splitlines()))
    if not rows:
        raise FathomError(f"{path} has no rows", hint="expected a CSV with a header line")
    cols = list(rows[0].keys())
    if {"object_size", *GAIN_COLUMNS} <= set(cols) and split_by is None:
        return [_import_gains(store, path, data, rows, name)]
    is2014 = {"scenario", "direction", "kib_s"} <= set(cols)
    split = split_by or next((c for c in ("backend", "target", "run", "config") if c in cols), None)
    if split_by is not None and split_by not in cols:
        raise FathomError(f"{path}: no column {split_by!r}", hint=f"pass --split-by with one of: {', '.join(cols)}")
    if split is None:  # nothing to split by: the whole table is one run, named after the file
        split = ""
    if not is2014 and "workload" not in cols:
        raise FathomError(f"{path}: no 'workload' column", hint=f"columns are: {', '.join(cols)}")
    groups: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        groups.setdefault(r[split] if split else path.stem, []).append(r)
    desc = _describe_file(path, data)
    ids = []
    for value, grp in groups.items():
        missing = ["no latency histograms, so no percentiles (p50/p99)", "no per-second intervals",
                   "no health events", "no environment beyond what the table says"]
        if "osd_mem" in cols and not is2014:
            missing.append(OSD_MEM_NOTE)
        if is2014:
            missing.append("only throughput (KiB/s) was published: no latency, no CPU")
        which = f"rows where {split} = {value}" if split else "all rows"
        source = f"published table {desc}, {which} ({len(grp)} rows). Missing: " + "; ".join(missing) + "."
        run_name = (f"{name}-{value}" if split else name) if name else value
        # the split value under its column's name (the 2014 table's `target` is the study's word); the 2014
        # table is the files study's published figures, reported in its section beside a run of it
        run_id = store.create_run(run_name, kind="import", suite=f"table:{path.name}", source=source, status="done",
                                  env={"published_table": path.name, **({split: value} if split else {}),
                                       **({studies.ENV_KEY: [studies.FILES_STUDY]} if is2014 else {})})
        for idx, r in enumerate(grp):
            wl, params, m, pub = (_row_2014 if is2014 else _row_table)(r, split)
            key = f"{wl}-" + "-".join(f"{k}{params[k]}" for k in _PARAM_COLS if params.get(k) is not None
                                       and k not in ("bs", "rw"))
            res = {"engine": "published", "published_row": pub}
            store.save_point(run_id, idx, f"{key}-{idx}", wl, "published", params, "done", metrics=m, result=res)
        ids.append(run_id)
    return ids


GAIN_COLUMNS = ("put_throughput_gain_pct", "get_throughput_gain_pct", "put_latency_gain_pct", "get_latency_gain_pct")
GAINS_SOURCE = ("relative differences replica 3 vs EC 2+2 per object size, positive = replica 3 better (ceph.io "
                "2025, IBM, part 2: 4 nodes, SSL at the gateway, 512 threads, elbencho); how the latency gain was "
                "computed is not published, and the rows do not satisfy Little's law")


def _import_gains(store: Store, path: Path, data: bytes, rows: list[dict[str, str]], name: str | None) -> int:
    """The RGW study's gains table: one run, a point per object size, workload rep3-vs-ec22 (the rgw suite's)."""
    bad = [r.get("object_size") for r in rows if not _size_or_none(r.get("object_size"))]
    if bad:
        raise FathomError(f"{path}: object_size {bad[0]!r} is not a size", hint="sizes such as 64KiB or 4MiB")
    source = (f"published table {_describe_file(path, data)}: {GAINS_SOURCE}. Missing: absolute throughput and "
              "latency, percentiles, time to first byte, RGW CPU and memory, errors: only the four gains per size.")
    run_id = store.create_run(name or path.stem, kind="import", suite=f"table:{path.name}", source=source,
                              status="done", env={"published_table": path.name, "gains": "replica 3 vs EC 2+2",
                                                  studies.ENV_KEY: [studies.RGW_STUDY]})
    for idx, r in enumerate(rows):
        size = _size_or_none(r["object_size"])
        params = {"interface": "s3", "object_size": size, "placement": "rep3 vs ec22"}
        pub = {k: _num(v) for k, v in r.items()}
        store.save_point(run_id, idx, f"rep3-vs-ec22/object_size={size}", "rep3-vs-ec22", "published", params,
                         "done", metrics=_empty_metrics(), result={"engine": "published", "published_row": pub})
    return run_id


def _size_or_none(v: str | None) -> int | None:
    try:
        return parse_size(str(v).strip()) if v else None
    except FathomError:
        return None


def _row_table(r: dict[str, str], split: str) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    wl = r["workload"].strip()
    params: dict[str, Any] = dict(parse_workload(wl))
    m = _empty_metrics()
    pub = {k: _num(v) for k, v in r.items() if k != split}
    for k, v in r.items():
        if k in (split, "workload"):
            continue
        val = _num(v)
        if k in _PARAM_COLS:
            params[k] = parse_size(val) if k == "bs" and isinstance(val, str) else val
        elif k in METRIC_COLUMNS:
            m[k] = val
        elif k not in ("osd_mem",):
            params.setdefault(k, val)
    return wl, params, m, pub


def _row_2014(r: dict[str, str], split: str) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    scen, direction = r["scenario"].strip(), r["direction"].strip()
    rw, bs, fsize = _SCENARIOS_2014.get(scen, (None, None, None))
    params = {"scenario": scen, "rw": rw, "bs": bs, "file_size": fsize, "direction": direction,
              "numjobs": _num(r["parallel"]), "files": _num(r["files"])}
    m = _empty_metrics()
    kib = _num(r["kib_s"])
    if isinstance(kib, (int, float)):
        m["bw_mib_s"] = kib / 1024.0
        m[f"{direction}_bw_mib_s"] = kib / 1024.0
    return f"{scen}-{direction}", params, m, {k: _num(v) for k, v in r.items() if k != split}
