"""fathom-engine's memory over a long S3 run of large objects: does it stay flat?

Issue 13's bound: engine RSS <= slots x largest object + 64 MiB for a 10-minute run
at 256 MiB objects (body buffers reused, no per-request growth). Starts a fresh
local cluster with RGW (one BlueStore OSD on a sparse file), puts a set of
objects (the engine's prefill), then runs GETs and PUTs of that set, nine to
one, for the duration: both the receive and the send path (overwritten data waits in
RGW's garbage collection for 2 h, so PUTs fill the disk: 10 minutes of PUTs alone
would write more than this machine's free space). The engine's RSS is
read from /proc/PID/status every few seconds while it runs; its peak (VmHWM) comes
from its own summary.

    .venv/bin/python bench/s3_memory.py [--minutes 10] [--concurrent 4] [--docs docs/benchmarks.md]

Writes bench/results/s3-memory.json: {"object_mib", "slots", "duration_s", "bound_mib",
"peak_rss_mib", "rss_mib_after_first_minute", "rss_mib_last", "requests", "samples": [[t_s, rss_mib], ...]}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from docsection import update_docs  # noqa: E402  (bench/ is on sys.path: the script runs from it)
from fathom.cluster.local import LocalCluster  # noqa: E402
from fathom.engine_spec import EngineSpec, Load  # noqa: E402
from fathom import binaries  # noqa: E402
from fathom.interfaces.s3 import S3, Mix  # noqa: E402
from fathom.servers.telemetry import proc_sample  # noqa: E402

RESULTS = REPO / "bench" / "results" / "s3-memory.json"
SECTION = "## fathom-engine memory over a long S3 run"
MIB = 1024 * 1024
OBJECT = 256 * MIB
OBJECTS = 8
OVERHEAD_MIB = 64
OSD_SIZE = 200 * 1024**3
SAMPLE_S = 5.0


def rss_mib(pid: int) -> float | None:
    s = proc_sample(pid)
    return s["rss"] / MIB if s else None


def run(keys_file: str, slots: int, seconds: int) -> tuple[dict, list[list[float]]]:
    target = S3(keys_file=keys_file, buckets=["s3memory"], create_buckets=True, op="mixed", mix=Mix(get=9, put=1),
                prefix="memory", object_size=OBJECT, objects=OBJECTS)
    spec = EngineSpec(target=target, load=Load(iodepth=slots, duration_s=seconds)).to_json()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen([str(binaries.engine_path())], stdin=subprocess.PIPE, stdout=out, stderr=err)
        assert p.stdin is not None
        p.stdin.write(json.dumps(spec).encode())
        p.stdin.close()
        t0, samples = time.monotonic(), []
        while p.poll() is None:
            r = rss_mib(p.pid)
            if r is not None:
                samples.append([round(time.monotonic() - t0, 1), round(r, 1)])
            time.sleep(SAMPLE_S)
        out.seek(0)
        err.seek(0)
        lines, stderr = out.read().decode().splitlines(), err.read().decode(errors="replace")
    summaries = [json.loads(ln) for ln in lines if ln.startswith('{"type":"summary"')]
    if p.returncode != 0 or not summaries:
        errors = [ln[:2000] for ln in lines if ln.startswith('{"type":"error"')]
        raise SystemExit(f"fathom-engine exited {p.returncode}: {errors} {stderr[-2000:]}")
    return summaries[-1], samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--concurrent", type=int, default=4, help="slots: requests in flight, one connection each")
    ap.add_argument("--docs", type=Path, default=None)
    args = ap.parse_args()
    seconds = int(args.minutes * 60)
    with tempfile.TemporaryDirectory(prefix="fathom-s3mem-") as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster", progress=lambda m: print(m, file=sys.stderr))
        # overwritten objects wait for RGW's GC (2 h by default): collected after 30 s, the OSD reuses the space
        cluster.up(osds=1, osd_size=OSD_SIZE, rgw=True,
                   settings={"client": {"rgw_gc_obj_min_wait": "30", "rgw_gc_processor_period": "30"}})
        try:
            print(f"{args.concurrent} slots, {OBJECTS} objects of {OBJECT // MIB} MiB, GET/PUT 9:1, "
                  f"{seconds} s", file=sys.stderr)
            summary, samples = run(str(cluster.root / "s3.json"), args.concurrent, seconds)
        finally:
            cluster.down()
    bound = args.concurrent * OBJECT / MIB + OVERHEAD_MIB
    ops = summary["ops"]
    after_first = next((r for t, r in samples if t >= 60), samples[0][1])
    res = {"object_mib": OBJECT // MIB, "slots": args.concurrent, "duration_s": seconds, "bound_mib": bound,
           "peak_rss_mib": round(int(summary["max_rss_kib"]) / 1024, 1),
           "rss_mib_after_first_minute": after_first, "rss_mib_last": samples[-1][1],
           "requests": {k: int(v["ops"]) for k, v in ops.items()},
           "errors": summary.get("errors"), "samples": samples}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(res, indent=1) + "\n")
    verdict = "met" if res["peak_rss_mib"] <= bound else "NOT met"
    print(json.dumps({k: v for k, v in res.items() if k != "samples"}))
    print(f"peak RSS {res['peak_rss_mib']} MiB, bound {bound:g} MiB: {verdict}")
    if args.docs:
        rs = [r for t, r in samples if t >= 60] or [samples[-1][1]]  # after the first minute: start-up and buffers
        mib = sum(int(v["bytes"]) for v in ops.values()) / MIB if all("bytes" in v for v in ops.values()) else None
        section = "\n".join([
            SECTION, "",
            f"`bench/s3_memory.py --minutes {args.minutes:g} --concurrent {args.concurrent}`: a fresh local cluster "
            f"(one BlueStore OSD on a sparse file, one RGW), {OBJECTS} objects of {OBJECT // MIB} MiB put first, "
            f"then GETs and PUTs of them, nine to one, for {seconds} s with {args.concurrent} requests in flight. "
            f"RSS read from /proc every {SAMPLE_S:g} s; peak = the engine's VmHWM.", "",
            "| figure | value |", "|---|---:|",
            f"| requests (GET / PUT) | {res['requests'].get('read', 0)} / {res['requests'].get('write', 0)} |",
            *([f"| data moved, MiB | {mib:,.0f} |"] if mib is not None else []),
            f"| RSS after the first minute, MiB | {after_first:.1f} |",
            f"| RSS at the end, MiB | {res['rss_mib_last']:.1f} |",
            f"| RSS min / max after the first minute, MiB | {min(rs):.1f} / {max(rs):.1f} |",
            f"| peak RSS (VmHWM), MiB | {res['peak_rss_mib']:.1f} |",
            f"| bound: slots x object + {OVERHEAD_MIB} MiB | {bound:g} ({verdict}) |",
            f"| failed requests | {sum(int(e.get('count') or 0) for e in res['errors'] or [])} |",
            ""])
        update_docs(args.docs, SECTION, section)
    return 0 if res["peak_rss_mib"] <= bound else 1


if __name__ == "__main__":
    raise SystemExit(main())
