"""fathom-engine against its peers on the same points: `rados bench` and `fio --ioengine=rbd`.

Starts a fresh local cluster, then for every case runs the peer and fathom-engine
alternately (the order flips every round), same block size, queue depth and
duration, and measures each whole process with os.wait4: client CPU per op is
(user + sys of the process, all threads, start-up included) / ops completed.
Medians over the rounds go to bench/results/engine-vs-peers.json, the table to
stdout (Markdown, for docs/benchmarks.md).

    .venv/bin/python bench/engine_vs_peers.py [--rounds 5] [--duration 10] [--dir /tmp/...]

Targets (issue 3): fathom IOPS >= 0.95 x peer, fathom CPU/op <= 0.75 x peer's.
Each case reports the median of the per-round ratios and their range. Every
run is also appended to bench/results/engine-vs-peers-history.json; a case is
called "met" only when the median met both targets in each of the last three
runs of this script.
Both sides get the same client settings apart from the engine's documented
defaults (engine/PROTOCOL.md); fio gets rbd_cache=false like the engine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from fathom.cluster.local import LocalCluster  # noqa: E402
from fathom import engine_spec as es  # noqa: E402
from fathom.interfaces.rados import Rados  # noqa: E402
from fathom.interfaces.rbd import Rbd  # noqa: E402
from fathom import binaries  # noqa: E402

RESULTS = REPO / "bench" / "results" / "engine-vs-peers.json"
HISTORY = REPO / "bench" / "results" / "engine-vs-peers-history.json"
IOPS_TARGET, CPU_TARGET = 0.95, 0.75
IMAGE_SIZE = 1 << 30
OSD_SIZE = 200 * 1024**3


def wait4(argv: list[str], env: dict[str, str], stdin: bytes | None = None,
          timeout: float | None = None) -> tuple[str, str, float, float]:
    """Run to completion; (stdout, stderr, CPU s of the whole process, wall s). timeout: kill it after that many
    seconds and raise (a peer waiting on a stuck server would otherwise hold the bench, and its clean-up, forever)."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                             stdout=out, stderr=err, env=env)
        timer = threading.Timer(timeout, p.kill) if timeout else None
        if timer:
            timer.start()
        if stdin is not None:
            p.stdin.write(stdin)
            p.stdin.close()
        _, status, ru = os.wait4(p.pid, 0)
        if timer:
            timer.cancel()
            if time.monotonic() - t0 >= timeout:  # type: ignore[operator]
                raise RuntimeError(f"{argv[0]} did not finish within {timeout:.0f} s; killed")
        wall = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        so, se = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{argv[0]} exited {code}: {se[-2000:]}{so[-2000:]}")
    return so, se, ru.ru_utime + ru.ru_stime, wall


class Bench:
    def __init__(self, cluster: LocalCluster, duration: int):
        self.c = cluster
        self.conn = cluster.connection()
        self.duration = duration
        self.env = self.conn.env()
        self.fio_conf = cluster.root / "fio-client.conf"
        self.fio_conf.write_text(Path(self.conn.conf).read_text() + "\n[client]\nrbd_cache = false\n")
        self.engine = str(binaries.engine_path())
        self.n = 0

    def tool(self, *argv: str) -> str:
        p = subprocess.run([argv[0], *self.conn.args(), *argv[1:]], capture_output=True, text=True,
                           env=self.env, timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {p.stderr}")
        return p.stdout

    def prepare(self) -> None:
        self.tool("ceph", "osd", "pool", "create", "bench", "32")
        self.tool("ceph", "osd", "pool", "application", "enable", "bench", "rados")
        self.tool("ceph", "osd", "pool", "create", "rbdbench", "32")
        self.tool("ceph", "osd", "pool", "application", "enable", "rbdbench", "rbd")
        self.tool("rbd", "pool", "init", "rbdbench")
        self.tool("rbd", "create", "rbdbench/img", "--size", f"{IMAGE_SIZE >> 20}")  # MiB
        # Reads must hit written data: fill the image once.
        self.tool("rbd", "bench", "--io-type", "write", "--io-pattern", "seq", "--io-size", "4M",
                  "--io-threads", "4", "--io-total", f"{IMAGE_SIZE >> 20}M", "rbdbench/img")

    def fathom(self, target: es.Target, qd: int) -> tuple[float, float, float]:
        spec = es.EngineSpec(target=target, load=es.Load(iodepth=qd, duration_s=self.duration)).to_json()
        out, _, cpu, _ = wait4([self.engine], self.env, json.dumps(spec).encode())
        summary = [json.loads(ln) for ln in out.splitlines() if ln.startswith('{"type":"summary"')][-1]
        o = next(iter(summary["ops"].values()))
        return o["iops"], cpu / max(o["ops"], 1) * 1e6, o["lat_ns"]["mean"]

    def rados_fathom(self, qd: int) -> tuple[float, float, float]:
        self.n += 1
        return self.fathom(Rados(connection=es.Connection.of(self.conn), pool="bench", op="write",
                                    object_size=4096, prefix=f"fe{self.n}"), qd)

    def rados_peer(self, qd: int) -> tuple[float, float, float]:
        self.n += 1
        out, _, cpu, _ = wait4(["rados", *self.conn.args(), "-p", "bench", "bench", str(self.duration), "write",
                                "-b", "4096", "-O", "4096", "-t", str(qd), "--no-cleanup",
                                "--run-name", f"rb{self.n}"], self.env)
        ops = int(re.search(r"Total writes made:\s+(\d+)", out).group(1))
        t = float(re.search(r"Total time run:\s+([\d.]+)", out).group(1))
        lat = float(re.search(r"Average Latency\(s\):\s+([\d.]+)", out).group(1))
        return ops / t, cpu / ops * 1e6, lat * 1e9

    def rbd_fathom(self, rw: str, qd: int) -> tuple[float, float, float]:
        return self.fathom(Rbd(connection=es.Connection.of(self.conn), pool="rbdbench", rw=rw,  # type: ignore[arg-type]
                                  images=["img"], bs=4096), qd)

    def rbd_peer(self, rw: str, qd: int) -> tuple[float, float, float]:
        env = {**self.env, "CEPH_CONF": str(self.fio_conf)}
        out, _, cpu, _ = wait4(["fio", "--name=peer", "--ioengine=rbd", f"--clientname={self.conn.client_id}",
                                "--pool=rbdbench", "--rbdname=img", f"--rw={rw}", "--bs=4096",
                                f"--iodepth={qd}", "--numjobs=1", "--time_based=1",
                                f"--runtime={self.duration}", "--invalidate=0", "--output-format=json"], env)
        job = json.loads(out[out.index("{"):])["jobs"][0]
        d = job["read" if "read" in rw else "write"]
        return d["iops"], cpu / max(d["total_ios"], 1) * 1e6, d["lat_ns"]["mean"]


Case = tuple[str, str, Callable[[], tuple[float, float, float]], Callable[[], tuple[float, float, float]]]


def alternate(cases: list[Case], rounds: int) -> dict[str, dict[str, list]]:
    """Run every case's (name, peer, fathom fn, peer fn) for `rounds` rounds, the order of the two flipping
    each round; each fn returns (IOPS, CPU µs per op, mean latency ns). The raw results per case and side."""
    raw: dict[str, dict[str, list]] = {c[0]: {"fathom": [], "peer": []} for c in cases}
    for r in range(rounds):
        for name, _, ffn, pfn in cases:
            order = [("peer", pfn), ("fathom", ffn)] if r % 2 == 0 else [("fathom", ffn), ("peer", pfn)]
            for who, fn in order:
                iops, cpu, lat = fn()
                raw[name][who].append({"iops": iops, "cpu_us_per_op": cpu, "lat_mean_ns": lat})
                print(f"round {r + 1} {name:24s} {who:6s} {iops:9.0f} IOPS {cpu:6.1f} us/op "
                      f"{lat / 1e6:7.2f} ms", file=sys.stderr, flush=True)
    return raw


def case_row(name: str, peer: str, raw: dict[str, list], rounds: int, duration: float) -> dict:
    """One case's result: medians of each side, and the median and range of the per-round ratios."""
    med = {who: {k: statistics.median(x[k] for x in raw[who]) for k in
                 ("iops", "cpu_us_per_op", "lat_mean_ns")} for who in ("fathom", "peer")}
    # per-round ratios: the two tools ran back to back, so a round's ratio cancels most of the box's drift
    iops_r = [f["iops"] / p["iops"] for f, p in zip(raw["fathom"], raw["peer"])]
    cpu_r = [f["cpu_us_per_op"] / p["cpu_us_per_op"] for f, p in zip(raw["fathom"], raw["peer"])]
    return {
        "case": name, "peer": peer,
        "fathom_iops": round(med["fathom"]["iops"], 1), "peer_iops": round(med["peer"]["iops"], 1),
        "fathom_cpu_us_per_op": round(med["fathom"]["cpu_us_per_op"], 1),
        "peer_cpu_us_per_op": round(med["peer"]["cpu_us_per_op"], 1),
        "fathom_lat_mean_ms": round(med["fathom"]["lat_mean_ns"] / 1e6, 3),
        "peer_lat_mean_ms": round(med["peer"]["lat_mean_ns"] / 1e6, 3),
        "iops_ratio": round(statistics.median(iops_r), 3),
        "iops_ratio_range": [round(min(iops_r), 3), round(max(iops_r), 3)],
        "cpu_ratio": round(statistics.median(cpu_r), 3),
        "cpu_ratio_range": [round(min(cpu_r), 3), round(max(cpu_r), 3)],
        "rounds": rounds, "duration_s": duration, "raw": raw,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=int, default=10, help="seconds per run")
    ap.add_argument("--dir", default=None, help="cluster directory (default: a new one under /tmp)")
    ap.add_argument("--cases", default=None, help="comma-separated subset of case names")
    args = ap.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="fathom-bench-engine-")) / "cluster"
    cluster = LocalCluster(root, progress=lambda m: print(m, file=sys.stderr))
    # 4 KiB objects take a whole allocation unit each (64 KiB on a file-backed OSD), and 5 rounds of
    # rados writes at 10k IOPS leave close to a million of them: a 10 GiB OSD fills up and stalls
    # the cluster. The OSD file is sparse, so only what is written uses disk.
    cluster.up(osds=1, osd_size=OSD_SIZE)
    rows: list[dict] = []
    try:
        b = Bench(cluster, args.duration)
        b.prepare()
        cases = []
        for qd in (16, 64):
            cases.append((f"rados write 4K QD{qd}", "rados bench", lambda qd=qd: b.rados_fathom(qd),
                          lambda qd=qd: b.rados_peer(qd)))
        for rw in ("randwrite", "randread"):
            for qd in (16, 64):
                cases.append((f"rbd {rw} 4K QD{qd}", "fio rbd", lambda rw=rw, qd=qd: b.rbd_fathom(rw, qd),
                              lambda rw=rw, qd=qd: b.rbd_peer(rw, qd)))
        if args.cases:
            keep = {c.strip() for c in args.cases.split(",")}
            cases = [c for c in cases if c[0] in keep]
        raw = alternate(cases, args.rounds)
        rows = [case_row(name, peer, raw[name], args.rounds, args.duration) for name, peer, _, _ in cases]
    finally:
        cluster.down()
        if not args.dir:
            root.parent.rmdir()  # the empty temporary directory made above
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(rows, indent=1) + "\n")
    history = json.loads(HISTORY.read_text()) if HISTORY.exists() else []
    if not args.cases:  # only whole runs count towards "met in three runs"
        history.append({"ts": time.time(), "rounds": args.rounds, "duration_s": args.duration,
                        "cases": [{k: r[k] for k in ("case", "iops_ratio", "iops_ratio_range", "cpu_ratio",
                                                     "cpu_ratio_range")} for r in rows]})
        HISTORY.write_text(json.dumps(history, indent=1) + "\n")
    last3 = history[-3:]
    print("| case | peer | fathom IOPS | peer IOPS | IOPS ratio (range) | fathom CPU µs/op | peer CPU µs/op "
          "| CPU ratio (range) | met in last 3 runs |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        met = [next((c for c in h["cases"] if c["case"] == r["case"]), None) for h in last3]
        n_met = sum(1 for c in met if c and c["iops_ratio"] >= IOPS_TARGET and c["cpu_ratio"] <= CPU_TARGET)
        verdict = "met" if len(last3) == 3 and n_met == 3 else f"{n_met} of {len(last3)}"
        ir, cr = r["iops_ratio_range"], r["cpu_ratio_range"]
        print(f"| {r['case']} | {r['peer']} | {r['fathom_iops']:.0f} | {r['peer_iops']:.0f} | "
              f"{r['iops_ratio']:.2f} ({ir[0]:.2f}-{ir[1]:.2f}) | {r['fathom_cpu_us_per_op']:.1f} | "
              f"{r['peer_cpu_us_per_op']:.1f} | {r['cpu_ratio']:.2f} ({cr[0]:.2f}-{cr[1]:.2f}) | {verdict} |")
    print(f"\nwritten: {RESULTS.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
