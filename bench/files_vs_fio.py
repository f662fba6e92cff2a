#!/usr/bin/env python3
"""fathom-engine's posix target against fio (psync and io_uring engines) on the same file, alternating rounds.

    .venv/bin/python bench/files_vs_fio.py [--rounds 3] [--duration 5] [--dir /var/tmp/...]
                                           [--mount DIR | --ceph-fuse] [--docs docs/benchmarks.md]

Cases: 4 KiB randread and randwrite at queue depth 1 and 16, against fio with
--ioengine=psync and --ioengine=io_uring, on one 1 GiB file, O_DIRECT on both
sides (so the device is measured, not the page cache). Queue depth 16 on psync
is 16 threads with one op each (fio: numjobs=16 --thread; fathom: ioengine sync,
a thread per slot); on io_uring it is 16 ops in flight on one ring (fio:
iodepth=16; fathom: ioengine io_uring). Both sides pick offsets uniformly at
random without fio's random map (--norandommap: the engine keeps none either).
Each run is one whole process measured with os.wait4: client CPU per op is
(user + sys of the process and its threads, start-up included) / ops completed.
The two tools alternate (the order flips every round); medians of each side
and the median and range of the per-round ratios go to
bench/results/files-vs-fio.json. The file lives in --dir (default a new
directory under /var/tmp, on the local disk) or, with --mount, in a directory
on that mount; with --ceph-fuse the script starts a one-OSD local cluster with an
MDS, mounts its CephFS by ceph-fuse (fathom.cluster.mounts), runs there and stops
it all. The table's cases say which.

Targets (issue 14): fathom IOPS >= 1.0 x fio's, fathom CPU/op <= 0.75 x fio's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from docsection import update_docs  # noqa: E402  (bench/ is on sys.path: the script runs from it)
from engine_vs_peers import alternate, case_row, wait4  # noqa: E402
from fathom import engine_spec as es  # noqa: E402
from fathom.cluster import mounts  # noqa: E402
from fathom.cluster.local import LocalCluster  # noqa: E402
from fathom import binaries  # noqa: E402
from fathom.interfaces.posix import Posix  # noqa: E402

RESULTS = REPO / "bench" / "results" / "files-vs-fio.json"
SECTION = "## fathom posix target vs fio"
IOPS_TARGET, CPU_TARGET = 1.0, 0.75
FILE_SIZE = 1 << 30


class Bench:
    def __init__(self, path: Path, duration: int, fuse: bool):
        self.file = path / "bench.file"
        self.duration = duration
        self.fuse = fuse
        self.engine = str(binaries.engine_path())

    def lay_out(self) -> None:
        """Write the file once (fio's layout), so reads hit written blocks and writes overwrite."""
        wait4(["fio", "--name=layout", f"--filename={self.file}", f"--size={FILE_SIZE}", "--rw=write", "--bs=1M",
               "--direct=1", "--end_fsync=1", "--output-format=json"], dict(os.environ))

    def fathom(self, rw: str, qd: int, ioengine: str) -> tuple[float, float, float]:
        target = Posix(path=str(self.file), rw=rw, bs=4096, direct=True, ioengine=ioengine,  # type: ignore[arg-type]
                       prefill=False)
        spec = es.EngineSpec(target=target, load=es.Load(iodepth=qd, duration_s=self.duration)).to_json()
        out, _, cpu, _ = wait4([self.engine], dict(os.environ), json.dumps(spec).encode())
        summary = [json.loads(ln) for ln in out.splitlines() if ln.startswith('{"type":"summary"')][-1]
        o = next(iter(summary["ops"].values()))
        return o["iops"], cpu / max(o["ops"], 1) * 1e6, o["lat_ns"]["mean"]

    def fio(self, rw: str, qd: int, ioengine: str) -> tuple[float, float, float]:
        jobs = ["--numjobs=16", "--thread"] if ioengine == "psync" and qd > 1 else ["--numjobs=1"]
        if ioengine == "io_uring" and self.fuse:
            jobs.append("--force_async=1")  # what fathom's posix target does on FUSE by itself
        out, _, cpu, _ = wait4(["fio", "--name=peer", f"--filename={self.file}", f"--size={FILE_SIZE}",
                                f"--ioengine={ioengine}", f"--rw={rw}", "--bs=4096", "--direct=1",
                                f"--iodepth={1 if ioengine == 'psync' else qd}", *jobs, "--group_reporting",
                                "--norandommap", "--time_based=1", f"--runtime={self.duration}",
                                "--output-format=json"], dict(os.environ))
        job = json.loads(out[out.index("{"):])["jobs"][0]
        d = job["read" if "read" in rw else "write"]
        return d["iops"], cpu / max(d["total_ios"], 1) * 1e6, d["lat_ns"]["mean"]


def section(rows: list[dict], where: str, rounds: int, duration: int) -> str:
    lines = [SECTION, "",
             f"`make bench-files` (bench/files_vs_fio.py): 4 KiB random reads and writes with O_DIRECT on one 1 GiB "
             f"file {where}, fathom-engine's posix target against fio 3.33, {rounds} alternating rounds of "
             f"{duration} s per case. QD 16 with psync is 16 threads of one op each on both sides (fathom: "
             "`ioengine: sync`, a thread per slot); with io_uring 16 ops in flight on one ring. CPU per op is each "
             "whole process's user + sys CPU (os.wait4, start-up included) / ops completed. Values are medians over "
             "the rounds; ratios are medians of the per-round ratios, with their range over the rounds. "
             "On a FUSE mount fathom's io_uring ring marks every op IOSQE_ASYNC (FUSE has no non-blocking path: "
             "without it each op runs inside io_uring_enter, one at a time whatever the queue depth), so fio runs "
             "with `--force_async=1`, its option for the same. "
             f"Targets: IOPS ratio >= {IOPS_TARGET}, CPU ratio <= {CPU_TARGET}.", "",
             "| case | peer | fathom IOPS | fio IOPS | IOPS ratio (range) | fathom CPU µs/op | fio CPU µs/op "
             "| CPU ratio (range) | met |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ir, cr = r["iops_ratio_range"], r["cpu_ratio_range"]
        met = "yes" if r["iops_ratio"] >= IOPS_TARGET and r["cpu_ratio"] <= CPU_TARGET else "no"
        lines.append(f"| {r['case']} | {r['peer']} | {r['fathom_iops']:.0f} | {r['peer_iops']:.0f} | "
                     f"{r['iops_ratio']:.2f} ({ir[0]:.2f}-{ir[1]:.2f}) | {r['fathom_cpu_us_per_op']:.1f} | "
                     f"{r['peer_cpu_us_per_op']:.1f} | {r['cpu_ratio']:.2f} ({cr[0]:.2f}-{cr[1]:.2f}) | {met} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5, help="seconds per run")
    ap.add_argument("--dir", default=None, help="directory for the file (default: a new one under /var/tmp)")
    ap.add_argument("--mount", default=None, help="run on this mount instead (a directory is made on it)")
    ap.add_argument("--ceph-fuse", action="store_true",
                    help="start a local cluster with an MDS, mount its CephFS by ceph-fuse and run there")
    ap.add_argument("--cases", default=None, help="comma-separated subset of case names")
    ap.add_argument("--docs", default=None, help="update this Markdown file's section")
    args = ap.parse_args()
    cluster = None
    if args.ceph_fuse:
        cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="fathom-bench-files-cluster-")) / "cluster",
                               progress=lambda m: print(m, file=sys.stderr))
        cluster.up(osds=1, osd_size=20 * 1024**3, mds=True)
        args.mount = str(mounts.ceph_fuse(cluster))
    base = Path(args.mount) if args.mount else Path(args.dir) if args.dir else Path("/var/tmp")
    work = Path(tempfile.mkdtemp(prefix="fathom-bench-files-", dir=base))
    where = ("on CephFS mounted by ceph-fuse (one-OSD local cluster with an MDS)" if args.ceph_fuse
             else f"on {args.mount} (a mount)" if args.mount else f"in a directory on the local disk ({base})")
    label = "ceph-fuse" if args.ceph_fuse else "mount" if args.mount else "local"
    try:
        fuse = args.ceph_fuse or mounts.mount_table().get(str(args.mount), "").startswith("fuse")
        b = Bench(work, args.duration, fuse)
        b.lay_out()
        cases = []
        for ioengine, fathom_io in (("psync", "sync"), ("io_uring", "io_uring")):
            for rw in ("randread", "randwrite"):
                for qd in (1, 16):
                    peer = f"fio {ioengine}" + (" force_async=1" if fuse and ioengine == "io_uring" else "")
                    cases.append((f"{label} {rw} 4K QD{qd} {ioengine}", peer,
                                  lambda rw=rw, qd=qd, io=fathom_io: b.fathom(rw, qd, io),
                                  lambda rw=rw, qd=qd, io=ioengine: b.fio(rw, qd, io)))
        if args.cases:
            keep = {c.strip() for c in args.cases.split(",")}
            cases = [c for c in cases if c[0] in keep]
        raw = alternate(cases, args.rounds)
        rows = [case_row(name, peer, raw[name], args.rounds, args.duration) for name, peer, _, _ in cases]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if cluster is not None:
            cluster.down()  # unmounts ceph-fuse first
            cluster.root.parent.rmdir()
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    # one file for both places: this run's cases replace those of the same name
    names = {r["case"] for r in rows}
    merged = [r for r in old if r["case"] not in names] + [{**r, "ts": time.time()} for r in rows]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(merged, indent=1) + "\n")
    text = section(rows, where, args.rounds, args.duration)
    print(text)
    if args.docs:
        heading = SECTION if not args.mount else SECTION + (" (ceph-fuse)" if args.ceph_fuse else " (mount)")
        update_docs(Path(args.docs), heading, text.replace(SECTION, heading, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
