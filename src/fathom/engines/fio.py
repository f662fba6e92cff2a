"""fio as an engine: librbd (`ioengine=rbd`) or librados (`ioengine=rados`), json+ output.

Like the Crimson study, one job section per RBD image, `numjobs` jobs each,
time based with a ramp. No group_reporting, so every job is reported and
client CPU is summed over jobs the way fio-parse-jsons.py sums it. Latency
percentiles come from json+ `bins` of every job, merged into one HDR
histogram (values in ns), so percentiles are of all I/Os, never averaged.
Live rates come from fio's eta lines (`--eta=always --eta-newline=1`); they
are approximate per-second IOPS without latency, and are stored as such.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from typing import Any

from fathom import interfaces
from fathom.interfaces.base import PointContext
from fathom.engines.base import ceph_env, run_child
from fathom.errors import FathomError
from fathom.results.model import PERCENTILES, OpStats, PointResult, pooled_mean_stdev

_ETA_IOPS = re.compile(r"\]\[([rw])=([\d.]+)([kM]?) IOPS(?:,([rw])=([\d.]+)([kM]?) IOPS)?\]")
_SCALE = {"": 1.0, "k": 1e3, "M": 1e6}
HIST_HIGHEST_NS = 3600 * 10**9


def hdr_from_bins(bins: dict[int, int]) -> tuple[str | None, dict[str, float]]:
    """Base64 HDR V2 histogram and percentiles (ns) from fio's clat bins {ns value: count}."""
    if not bins:
        return None, {}
    from hdrh.histogram import HdrHistogram

    h = HdrHistogram(1, HIST_HIGHEST_NS, 3)
    for v, c in bins.items():
        if c:
            h.record_value(min(max(int(v), 1), HIST_HIGHEST_NS), int(c))
    pct = {k: float(h.get_value_at_percentile(p)) for k, p in PERCENTILES.items()}
    return h.encode().decode(), pct


def parse_output(doc: dict[str, Any]) -> tuple[dict[str, OpStats], dict[str, Any]]:
    """OpStats per op kind from a fio json/json+ document, plus facts for `extra`."""
    jobs = doc.get("jobs") or []
    if not jobs:
        raise FathomError("fio reported no jobs")
    ops: dict[str, OpStats] = {}
    for kind in ("read", "write"):
        parts = [j[kind] for j in jobs if j.get(kind, {}).get("total_ios", 0) > 0]
        if not parts:
            continue
        n = sum(int(p["total_ios"]) for p in parts)
        nbytes = sum(int(p["io_bytes"]) for p in parts)
        runtime_s = sum(p["runtime"] for p in parts) / len(parts) / 1000.0  # jobs run side by side
        mean, stdev = pooled_mean_stdev([(int(p["clat_ns"]["N"]), float(p["clat_ns"]["mean"]),
                                          float(p["clat_ns"]["stddev"])) for p in parts])
        bins: dict[int, int] = {}
        for p in parts:
            for v, c in (p["clat_ns"].get("bins") or {}).items():
                bins[int(v)] = bins.get(int(v), 0) + int(c)
        hist, pct = hdr_from_bins(bins)
        if not pct and len(parts) == 1:  # plain json: fio's own percentiles of a single job
            fp = parts[0]["clat_ns"].get("percentile") or {}
            want = {"p50": "50.000000", "p90": "90.000000", "p99": "99.000000", "p999": "99.900000"}
            pct = {k: float(fp[v]) for k, v in want.items() if v in fp}
        ops[kind] = OpStats(
            ops=n, bytes=nbytes, runtime_s=runtime_s, lat_mean_ns=mean, lat_stdev_ns=stdev,
            lat_min_ns=float(min(p["clat_ns"]["min"] for p in parts)),
            lat_max_ns=float(max(p["clat_ns"]["max"] for p in parts)),
            percentiles_ns=pct, hist=hist, errors=0,
        )
    errs = [{"op": "job", "kind": f"fio error {j['error']}", "count": 1, "job": j.get("jobname")}
            for j in jobs if j.get("error")]
    extra = {
        "fio_version": doc.get("fio version"),
        "jobs": len(jobs),
        "fio_usr_cpu": sum(float(j.get("usr_cpu", 0.0)) for j in jobs),  # % summed over jobs
        "fio_sys_cpu": sum(float(j.get("sys_cpu", 0.0)) for j in jobs),
        "ctx": sum(int(j.get("ctx", 0)) for j in jobs),
        "errors": errs,
    }
    return ops, extra


def _rbd_section(p: dict[str, Any], ctx: PointContext) -> tuple[list[str], list[str]]:
    return ["ioengine=rbd"], [ln for img in ctx.images for ln in (f"[{img}]", f"rbdname={img}", "")]


def _rados_section(p: dict[str, Any], ctx: PointContext) -> tuple[list[str], list[str]]:
    return ["ioengine=rados"], [f"[{ctx.run_tag}]", f"filename={ctx.run_tag}", ""]


# interface -> (its [global] lines, its job sections): what fio runs on each interface
WRITERS = {"rbd": _rbd_section, "rados": _rados_section}  # the interfaces fio drives here: their job sections
SIZED = {"rados"}  # fio's rados ioengine has no object set to end in: `size` bounds what each job writes


def job_file(p: dict[str, Any], ctx: PointContext) -> str:
    """fio job text for one point (librbd: one section per image)."""
    engine_lines, jobs = WRITERS[p["interface"]](p, ctx)
    g = [
        "[global]",
        *engine_lines,
        f"clientname={ctx.conn.client_id}",
        f"pool={ctx.pool}",
        f"rw={p['rw']}",
        f"bs={p['bs']}",
        f"iodepth={p['iodepth']}",
        f"numjobs={p['numjobs']}",
        "time_based=1",
        f"runtime={int(round(p['runtime'] * 1000))}ms",
        f"ramp_time={int(round(p['ramp_time'] * 1000))}ms",
        "direct=1",
        "thread=1",
        "invalidate=0",
    ]
    if p["rw"] in ("rw", "readwrite", "randrw"):
        g.append(f"rwmixread={p['rwmixread']}")
    region = p.get("size") or (ctx.image_size if interfaces.get(p["interface"]).needs_images else None)
    if region and int(p["numjobs"]) > 1:
        # each job its own slice of the image, as fathom-engine does (fio's offset_increment)
        per_job = region // int(p["numjobs"]) // int(p["bs"]) * int(p["bs"])
        g += [f"size={per_job}", f"offset_increment={per_job}"]
    elif p.get("size"):
        g.append(f"size={p['size']}")
    return "\n".join(g + [""] + jobs)


class FioAdapter:
    name = "fio"
    binary_hint = "install fio with `make install` (Debian package fio)"

    def unsupported(self, w: Any) -> str | None:
        if w.interface not in WRITERS:
            return f"fio runs here on {', '.join(WRITERS)}, not {w.interface}"
        if w.rate is not None:
            return ("rate (open loop) runs on fathom-engine: fio's rate_iops times each op from its submission, "
                    "so the queueing behind a slow cluster would not be in its latency")
        if w.interface in SIZED and not w.size:
            return f"fio on {w.interface} needs size (bytes written per job, e.g. size: 256MiB)"
        return None

    def check(self) -> None:
        if not shutil.which("fio"):
            raise FathomError("fio is not installed", hint=self.binary_hint, exit_code=4)

    def run(self, params: dict[str, Any], ctx: PointContext) -> PointResult:
        self.check()
        if interfaces.get(params["interface"]).needs_images and not ctx.images:
            raise FathomError(f"fio on {params['interface']} needs images, and prep made none")
        jobf = ctx.workdir / "point.fio"
        outf = ctx.workdir / "point-fio.json"
        jobf.write_text(job_file(params, ctx))
        outf.unlink(missing_ok=True)
        ramp = float(params["ramp_time"])
        t0 = time.time()

        def on_chunk(line: str) -> None:
            m = _ETA_IOPS.search(line)
            if not m:
                return
            rec: dict[str, Any] = {"ts": time.time(), "approx": True, "ops": {}}
            rec["t"] = rec["ts"] - t0
            rec["ramp"] = rec["t"] < ramp
            for k, v, s in ((m.group(1), m.group(2), m.group(3)), (m.group(4), m.group(5), m.group(6))):
                if k:
                    kind = "read" if k == "r" else "write"
                    rec["ops"][kind] = {"ops": float(v) * _SCALE[s], "bytes": None, "errors": 0, "lat_mean_ns": None}
            ctx.on_interval(rec)

        argv = ["fio", "--output-format=json+", f"--output={outf}", "--eta=always", "--eta-newline=1",
                "--eta-interval=1", str(jobf)]
        child = run_child(argv, ctx, env=ceph_env(ctx.conn, ctx.workdir), on_chunk=on_chunk)
        try:
            text = outf.read_text()
        except OSError:
            text = ""
        doc = _fio_json(text)
        if child.rc != 0 or doc is None:
            tail = (child.stderr.strip() or child.stdout.strip())[-600:]
            raise FathomError(f"fio exited with code {child.rc}: {tail or 'no output'}")
        ops, extra = parse_output(doc)
        extra["job_file"] = jobf.read_text()
        extra["max_rss_kib"] = child.max_rss_kib
        errs = extra.pop("errors")
        return PointResult(engine=self.name, ops=ops, runtime_s=max((o.runtime_s for o in ops.values()), default=0.0),
                           client_user_s=child.user_s, client_sys_s=child.sys_s, wall_s=child.wall_s, errors=errs,
                           extra=extra)

    def cleanup(self, ctx: PointContext) -> None:
        return None  # fio writes into prepared images; rados objects go with the pool


def _fio_json(text: str) -> dict[str, Any] | None:
    # fio sometimes prints `fio: ...` lines before the JSON document
    i = text.find("{")
    if i < 0:
        return None
    try:
        return json.loads(text[i:])
    except json.JSONDecodeError:
        from fathom.engines.base import last_json

        d = last_json(text)
        return d if isinstance(d, dict) else None


ADAPTER = FioAdapter()
