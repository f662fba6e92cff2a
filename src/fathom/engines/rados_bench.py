"""`rados bench` as an engine (study 3): write --no-cleanup, then seq and rand reads, then cleanup.

rw maps to the bench mode: write -> write, read -> seq, randread -> rand;
iodepth -> -t, bs -> -b (writes only), object_size -> -O. Every point of a run
shares one --run-name (the run's data tag, the same in every attempt of a resumed
run), so reads find what the write left and concurrent runs never touch each
other's objects; cleanup removes exactly that run's objects.
Output is `-f json`: a stray line may precede the JSON, and stddev_iops is not
trustworthy (it is computed from integer per-second samples), so it is kept
only in `extra`, named so. rados bench reports no percentiles.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

from fathom.interfaces.base import PointContext
from fathom.engines.base import last_json, run_child
from fathom.errors import FathomError
from fathom.results.model import OpStats, PointResult

MODES = {"write": "write", "read": "seq", "randread": "rand"}
NO_DATA = "Must write data before running a read benchmark"  # rados bench seq/rand without the write's metadata


def parse_output(doc: dict[str, Any], mode: str) -> tuple[OpStats, dict[str, Any]]:
    kind = "write" if mode == "write" else "read"
    made = doc.get("total_writes_made" if kind == "write" else "total_reads_made")
    if made is None:
        raise FathomError(f"rados bench printed no total_{kind}s_made: {str(doc)[:300]}")
    runtime = float(doc["total_time_run"])
    size = int(doc.get("write_size") or doc.get("read_size") or doc.get("object_size") or 0)
    ns = 1e9
    op = OpStats(ops=int(made), bytes=int(made) * size, runtime_s=runtime,
                 lat_mean_ns=float(doc["average_latency"]) * ns,
                 lat_stdev_ns=float(doc.get("stddev_latency", 0.0)) * ns,
                 lat_min_ns=float(doc["min_latency"]) * ns, lat_max_ns=float(doc["max_latency"]) * ns)
    extra = {"rados_bench": {k: v for k, v in doc.items()
                             if k not in ("stddev_iops",)},
             "rados_bench_stddev_iops_untrusted": doc.get("stddev_iops"), "mode": mode}
    return op, extra


class RadosBenchAdapter:
    name = "rados-bench"
    binary_hint = "install Ceph's client tools with `make install` (Debian package ceph-common)"

    def unsupported(self, w: Any) -> str | None:
        if w.interface != "rados":
            return "rados-bench runs against a pool: set interface: rados"
        if w.rw not in MODES:
            return f"rados-bench runs rw write (bench write), read (seq) or randread (rand), not {w.rw!r}"
        if w.numjobs != 1:
            return "rados-bench runs one client per point: numjobs must be 1"
        if w.rate is not None:
            return "rados bench has no open loop (rate): run rate on fathom-engine"
        if w.ramp_time:
            return "rados bench has no ramp: set ramp_time: 0"
        if w.runtime < 1:
            return "rados bench counts whole seconds: runtime must be at least 1s"
        return None

    def check(self) -> None:
        if not shutil.which("rados"):
            raise FathomError("the rados tool is not installed", hint=self.binary_hint, exit_code=4)

    def run(self, params: dict[str, Any], ctx: PointContext) -> PointResult:
        self.check()
        if not ctx.pool:
            raise FathomError("rados-bench needs a pool")
        mode = MODES[params["rw"]]
        if params.get("drop_caches") and mode != "write":
            _drop_caches()
        argv = [*ctx.conn.tool("rados"), *ctx.conn.args(), "-p", ctx.pool, "bench",
                str(max(1, int(round(params["runtime"])))), mode, "-t", str(params["iodepth"]),
                "--run-name", ctx.run_tag, "-f", "json"]
        if mode == "write":
            argv += ["-b", str(params["bs"]), "-O", str(params.get("object_size") or params["bs"]), "--no-cleanup"]
        t0 = time.time()
        child = run_child(argv, ctx, env=ctx.conn.env())
        doc = last_json(child.stdout)
        if child.rc != 0 or not isinstance(doc, dict):
            tail = (child.stderr.strip() or child.stdout.strip())[-600:]
            if mode != "write" and NO_DATA in child.stderr + child.stdout:
                # the point keeps only the message: it names the fix too
                raise FathomError(
                    f"rados bench {mode} found nothing to read in pool {ctx.pool}: no object {ctx.run_tag!r}, which "
                    f"`rados bench write --no-cleanup --run-name {ctx.run_tag}` leaves; a read point reads what "
                    "the run's last earlier rados-bench write on the same pool left, so put a workload with "
                    "rw: write before the reads in the suite")
            raise FathomError(f"rados bench {mode} exited with code {child.rc}: {tail or 'no output'}")
        op, extra = parse_output(doc, mode)
        extra["max_rss_kib"] = child.max_rss_kib
        extra["started"] = t0
        kind = "write" if mode == "write" else "read"
        return PointResult(engine=self.name, ops={kind: op}, runtime_s=op.runtime_s, client_user_s=child.user_s,
                           client_sys_s=child.sys_s, wall_s=child.wall_s, extra=extra)

    def cleanup(self, ctx: PointContext) -> bool:
        if not ctx.pool:
            return False
        argv = [*ctx.conn.tool("rados"), *ctx.conn.args(), "-p", ctx.pool, "cleanup", "--run-name", ctx.run_tag]
        child = run_child(argv, ctx, env=ctx.conn.env())
        if child.rc != 0:
            raise FathomError(f"rados cleanup --run-name {ctx.run_tag} failed: {child.stderr.strip()[-300:]}")
        return True


def _drop_caches() -> None:
    """The study drops page caches before reads; only root can, others go on with a note in the result."""
    if os.geteuid() != 0:
        return
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


ADAPTER = RadosBenchAdapter()
