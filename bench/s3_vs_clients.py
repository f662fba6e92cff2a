"""fathom-engine against S3 client libraries on one RGW: minio-go v7 (warp's client) and aws-sdk-go-v2.

warp itself is not installable from the package registries, so the peers are
reference load loops on the client libraries (bench/s3peer, Go, built here from
the Go module proxy): UNSIGNED-PAYLOAD, no multipart, no retries, one keep-alive
connection per worker, like fathom-engine. Starts a fresh local cluster with
RGW (one BlueStore OSD on a sparse file), then per case runs fathom-engine and
both peers alternately (the order flips every round), same object size,
concurrency and duration. CPU per request = user + sys of the whole process
(os.wait4: all threads, start-up and connection set-up included) / requests it
completed. PUTs cycle over a fixed set of keys per tool (overwrites: the space
stays bounded); GETs read, at random, one set that fathom-engine put before the
rounds.

    .venv/bin/python bench/s3_vs_clients.py --go GO [--rounds 3] [--duration 10] [--docs docs/benchmarks.md]

Targets (issue 13): fathom CPU per request <= 0.5 x minio-go's, throughput >= 1.0 x.
Writes bench/results/s3-vs-clients.json: one row per case and peer, medians over
the rounds plus the per-round ratios' median and range, and every round.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from docsection import update_docs  # noqa: E402  (bench/ is on sys.path: the script runs from it)
from engine_vs_peers import wait4  # noqa: E402
from fathom.cluster.local import LocalCluster  # noqa: E402
from fathom.engine_spec import EngineSpec, Load  # noqa: E402
from fathom import binaries  # noqa: E402
from fathom.interfaces.s3 import S3  # noqa: E402

RESULTS = REPO / "bench" / "results" / "s3-vs-clients.json"
PEER_DIR = REPO / "bench" / "s3peer"
SECTION = "## fathom-engine vs S3 client libraries"
CPU_TARGET, OPS_TARGET = 0.5, 1.0
KIB, MIB = 1024, 1024 * 1024
SIZES = ((64 * KIB, "64KiB", 256), (4 * MIB, "4MiB", 64))  # size, label, objects in a set
BUCKET = "s3bench"
OSD_SIZE = 200 * 1024**3


def module_version(path: str) -> str:
    """The version bench/s3peer/go.mod pins for a module."""
    m = re.search(rf"^\s*{re.escape(path)} (v\S+)", (PEER_DIR / "go.mod").read_text(), re.M)
    return m.group(1) if m else "?"


PEERS = {"minio": f"minio-go {module_version('github.com/minio/minio-go/v7')}",
         "aws": f"aws-sdk-go-v2 s3 {module_version('github.com/aws/aws-sdk-go-v2/service/s3')}"}


def build_peer(go: str, out: Path) -> str:
    env = {**os.environ, "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "auto"), "GOFLAGS": "-mod=readonly"}
    p = subprocess.run([go, "build", "-trimpath", "-o", str(out), "."], cwd=PEER_DIR, env=env, capture_output=True,
                       text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"building bench/s3peer with {go} failed:\n{p.stderr[-3000:]}")
    return subprocess.run([go, "version"], cwd=PEER_DIR, env=env, capture_output=True, text=True).stdout.strip()


class Bench:
    def __init__(self, cluster: LocalCluster, keys_file: str, peer: Path, duration: int):
        self.keys_file = keys_file
        self.peer = str(peer)
        self.duration = duration
        self.env = dict(os.environ)
        self.engine = str(binaries.engine_path())

    @staticmethod
    def limit(duration: int | None) -> float:
        """How long one run may take before it is killed: the set-up puts (no duration), or the run's time."""
        return 900.0 if duration is None else duration * 3 + 120.0

    def engine_run(self, target: S3, conc: int, duration: int | None) -> tuple[dict, float]:
        spec = EngineSpec(target=target, load=Load(iodepth=conc, duration_s=duration)).to_json()
        out, _, cpu, _ = wait4([self.engine], self.env, json.dumps(spec).encode(), timeout=self.limit(duration))
        summary = [json.loads(ln) for ln in out.splitlines() if ln.startswith('{"type":"summary"')][-1]
        if summary["errors"]:
            raise RuntimeError(f"fathom-engine errors: {summary['errors']}")
        return summary, cpu

    def prepare(self) -> None:
        for size, label, n in SIZES:
            self.engine_run(S3(keys_file=self.keys_file, buckets=[BUCKET], create_buckets=True, op="put",
                               prefix=f"set-{label}", object_size=size, objects=n), 16, None)

    def fathom(self, op: str, size: int, label: str, n: int, conc: int) -> dict:
        if op == "put":
            t = S3(keys_file=self.keys_file, buckets=[BUCKET], op="put", prefix=f"fathom-{label}", object_size=size,
                   objects=n)
        else:
            t = S3(keys_file=self.keys_file, buckets=[BUCKET], op="get", pattern="rand", prefix=f"set-{label}")
        summary, cpu = self.engine_run(t, conc, self.duration)
        o = summary["ops"]["write" if op == "put" else "read"]
        return {"ops_s": o["iops"], "cpu_us_per_op": cpu / max(o["ops"], 1) * 1e6, "ops": o["ops"]}

    def peer_run(self, client: str, op: str, size: int, label: str, n: int, conc: int) -> dict:
        prefix = f"{client}-{label}" if op == "put" else f"set-{label}"
        out, _, cpu, _ = wait4([self.peer, "-client", client, "-op", op, "-keys-file", self.keys_file,
                                "-bucket", BUCKET, "-prefix", prefix, "-size", str(size), "-objects", str(n),
                                "-concurrent", str(conc), "-duration", f"{self.duration}s"], self.env,
                               timeout=self.limit(self.duration))
        r = json.loads(out.strip().splitlines()[-1])
        if r["errors"]:
            raise RuntimeError(f"{client} errors: {r['errors']} ({r['first_error']})")
        return {"ops_s": r["ops"] / r["seconds"], "cpu_us_per_op": cpu / max(r["requests"], 1) * 1e6,
                "ops": r["ops"]}


def ratio_stats(xs: list[float]) -> tuple[float, list[float]]:
    return round(statistics.median(xs), 3), [round(min(xs), 3), round(max(xs), 3)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--go", default=os.environ.get("GO", "go"), help="the Go toolchain (bench/go-toolchain.sh)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10, help="seconds per run")
    ap.add_argument("--dir", default=None, help="cluster directory (default: a new one under /tmp)")
    ap.add_argument("--cases", default=None, help="comma-separated subset of case names")
    ap.add_argument("--docs", type=Path, default=None, help="update this file's section (docs/benchmarks.md)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fathom-bench-s3-"))
    go_version = build_peer(args.go, tmp / "s3peer")
    root = Path(args.dir) if args.dir else tmp / "cluster"
    cluster = LocalCluster(root, progress=lambda m: print(m, file=sys.stderr))
    # PUTs overwrite their keys: RGW keeps the old data for GC, 2 h by default, and 5 rounds of 4 MiB PUTs would
    # fill this disk first. Collected after 30 s, the OSD reuses the space.
    cluster.up(osds=1, osd_size=OSD_SIZE, rgw=True,
               settings={"client": {"rgw_gc_obj_min_wait": "30", "rgw_gc_processor_period": "30"}})
    cases = [(f"{op.upper()} {label} c{conc}", op, size, label, n, conc)
             for size, label, n in SIZES for op in ("put", "get") for conc in (16, 64)]
    if args.cases:
        keep = {c.strip() for c in args.cases.split(",")}
        cases = [c for c in cases if c[0] in keep]
    raw: dict[str, dict[str, list[dict]]] = {c[0]: {w: [] for w in ("fathom", *PEERS)} for c in cases}
    try:
        b = Bench(cluster, str(root / "s3.json"), tmp / "s3peer", args.duration)
        b.prepare()
        for r in range(args.rounds):
            for name, op, size, label, n, conc in cases:
                order = ["minio", "aws", "fathom"] if r % 2 == 0 else ["fathom", "aws", "minio"]
                for who in order:
                    res = (b.fathom(op, size, label, n, conc) if who == "fathom"
                           else b.peer_run(who, op, size, label, n, conc))
                    raw[name][who].append(res)
                    print(f"round {r + 1} {name:16s} {who:6s} {res['ops_s']:8.1f} req/s "
                          f"{res['cpu_us_per_op']:7.1f} us/req", file=sys.stderr, flush=True)
    finally:
        cluster.down()
        shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    for name, *_ in cases:
        f = raw[name]["fathom"]
        for peer, label in PEERS.items():
            p = raw[name][peer]
            ops_r = ratio_stats([a["ops_s"] / c["ops_s"] for a, c in zip(f, p)])
            cpu_r = ratio_stats([a["cpu_us_per_op"] / c["cpu_us_per_op"] for a, c in zip(f, p)])
            rows.append({"case": name, "peer": label,
                         "fathom_ops_s": round(statistics.median(x["ops_s"] for x in f), 1),
                         "peer_ops_s": round(statistics.median(x["ops_s"] for x in p), 1),
                         "fathom_cpu_us_per_op": round(statistics.median(x["cpu_us_per_op"] for x in f), 1),
                         "peer_cpu_us_per_op": round(statistics.median(x["cpu_us_per_op"] for x in p), 1),
                         "ops_ratio": ops_r[0], "ops_ratio_range": ops_r[1],
                         "cpu_ratio": cpu_r[0], "cpu_ratio_range": cpu_r[1],
                         "rounds": args.rounds, "duration_s": args.duration,
                         "raw": {"fathom": f, "peer": p}})
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(rows, indent=1) + "\n")
    table = markdown(rows, raw, cases)
    print(table)
    if args.docs:
        update_docs(args.docs, SECTION, section(table, args, go_version))
    print(f"\nwritten: {RESULTS.relative_to(REPO)}", file=sys.stderr)
    return 0


def markdown(rows: list[dict], raw: dict, cases: list) -> str:
    out = ["| case | peer | fathom req/s | peer req/s | throughput ratio (range) | fathom CPU µs/req "
           "| peer CPU µs/req | CPU ratio (range) | targets |",
           "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        minio = r["peer"].startswith("minio")
        met = r["ops_ratio"] >= OPS_TARGET and r["cpu_ratio"] <= CPU_TARGET
        verdict = ("met" if met else "not met") if minio else "(reference)"
        orr, cr = r["ops_ratio_range"], r["cpu_ratio_range"]
        out.append(f"| {r['case']} | {r['peer']} | {r['fathom_ops_s']:.0f} | {r['peer_ops_s']:.0f} | "
                   f"{r['ops_ratio']:.2f} ({orr[0]:.2f}-{orr[1]:.2f}) | {r['fathom_cpu_us_per_op']:.0f} | "
                   f"{r['peer_cpu_us_per_op']:.0f} | {r['cpu_ratio']:.2f} ({cr[0]:.2f}-{cr[1]:.2f}) | {verdict} |")
    out += ["", "Every round (req/s / CPU µs per request): fathom-engine, minio-go, aws-sdk-go-v2:", "",
            "| case | " + " | ".join(f"round {i + 1}" for i in range(len(raw[cases[0][0]]["fathom"]))) + " |",
            "|---|" + "---|" * len(raw[cases[0][0]]["fathom"])]
    for name, *_ in cases:
        cells = []
        for i in range(len(raw[name]["fathom"])):
            cells.append(", ".join(f"{raw[name][w][i]['ops_s']:.0f} / {raw[name][w][i]['cpu_us_per_op']:.0f}"
                                   for w in ("fathom", "minio", "aws")))
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def section(table: str, args: argparse.Namespace, go_version: str) -> str:
    intro = (
        f"fathom-engine's `s3` target against reference S3 load loops on the client libraries (`bench/s3peer`, "
        f"Go): {PEERS['minio']} (warp's own client library; warp itself cannot be installed from the package "
        f"registries) and {PEERS['aws']}, built with {go_version}. Measured {time.strftime('%Y-%m-%d')} on this "
        f"{os.cpu_count()}-CPU VM (Ceph 16.2.15), a fresh local cluster with one BlueStore OSD (sparse file) and "
        f"one RGW (beast, plain HTTP on 127.0.0.1; overwritten data collected after 30 s, not 2 h, so the rounds' PUTs "
        f"do not fill the disk) started by the script. All three clients: UNSIGNED-PAYLOAD, no "
        f"multipart, no retries, path-style requests, one keep-alive connection per request in flight. fathom-engine "
        f"sends PUT bodies from one memfd-backed buffer with sendfile(2) (its summary says so: `s3.put_body`), so the "
        f"kernel does not copy them in from user memory; the Go clients write them from one buffer in memory. "
        f"PUTs cycle over a fixed set of keys per client (256 objects of 64 KiB, 64 of 4 MiB); GETs read one set that "
        f"fathom-engine put before the rounds, at random. {args.duration} s per run, **{args.rounds} rounds**, the "
        f"order flipping every round (minio-go, aws, fathom / fathom, aws, minio-go). Client CPU per request = "
        f"user+sys of the whole process from `os.wait4` (all threads, start-up and connection set-up included) / "
        f"requests it completed; throughput = requests per second of the timed window. Ratios are fathom / peer "
        f"per round (the tools ran back to back), median and range over the rounds. Targets against minio-go: "
        f"throughput ratio >= {OPS_TARGET}, CPU ratio <= {CPU_TARGET}; aws-sdk-go-v2 is a second reference.")
    trust = ("How much to trust it: RGW, the OSD and the client share the two cores, so a client that spends less "
             "CPU leaves more to the server; throughput ratios near 1.0 mean the server was the limit for every "
             "client. Single rounds scatter (ranges above); compare ratios, not absolute rates, across dates.")
    return "\n".join([SECTION, "", intro, "", "```",
                      "make bench-s3   # bench/go-toolchain.sh, then bench/s3_vs_clients.py --go GO --docs ...",
                      "```", "", table, "", trust, ""])


if __name__ == "__main__":
    sys.exit(main())
