#!/usr/bin/env python3
"""fathom bench rados vs rados bench: IOPS and client CPU per op, alternating rounds on one fresh cluster.

    .venv/bin/python bench/bench_vs_rados_bench.py [--rounds 3] [--seconds 10] [-b 4M -b 4K] [-t 16]
                                                   [--docs docs/benchmarks.md]

Starts its own local cluster (fathom.cluster.local.LocalCluster in a temporary
directory, one BlueStore OSD) and stops it at the end. Each round runs, for
each tool in turn (the order alternates between rounds so neither always
goes first): write --no-cleanup, seq, rand, then removes that round's objects
(cleanup is not measured). Each measured command is one whole process; its
CPU (user + sys, children included) comes from os.wait4, so fathom's figure
includes the Python orchestrator and the fathom-engine child, and rados
bench's is the rados process. CPU per op = CPU seconds / ops completed.
Each op size (-b, repeatable; default rados bench's 4M, then 4K) gets its
own rounds and its own table.

The requirement checked: fathom's IOPS >= rados bench's, and fathom's CPU/op
<= 0.75 x rados bench's, per mode (medians over rounds).
With --docs, the section "## fathom bench rados vs rados bench" of that file
is replaced (created if absent); other sections are left as they are.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from fathom.cluster.local import LocalCluster  # noqa: E402
from docsection import update_docs  # noqa: E402  (bench/ is on sys.path: the script runs from it)

FATHOM = str(REPO / ".venv" / "bin" / "fathom")
SECTION = "## fathom bench rados vs rados bench"
MODES = ("write", "seq", "rand")


def run_measured(argv: list[str], env: dict[str, str]) -> tuple[int, str, str, float, float]:
    """Run argv to completion; (rc, stdout, stderr, cpu seconds user+sys, wall seconds) from os.wait4."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (proc.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                ru.ru_utime + ru.ru_stime, wall)


def first_json(text: str) -> dict:
    """rados bench -f json prints 'hints = 1' before its JSON; take the first JSON object."""
    i = text.find("{")
    if i < 0:
        raise ValueError(f"no JSON in output: {text[:300]!r}")
    obj, _ = json.JSONDecoder().raw_decode(text, i)
    return obj


def ops_of(doc: dict, mode: str) -> int:
    return int(float(doc["total_writes_made" if mode == "write" else "total_reads_made"]))


def one(tool: str, mode: str, pool: str, seconds: int, bs: str, threads: int, run_name: str, conf: str,
        db: str, env: dict[str, str]) -> dict:
    if tool == "rados bench":
        argv = ["rados", "-c", conf, "-p", pool, "bench", str(seconds), mode, "-t", str(threads),
                "--run-name", run_name, "-f", "json"]
        if mode == "write":
            argv += ["-b", bs, "--no-cleanup"]
    else:
        argv = [FATHOM, "bench", "rados", "-c", conf, "-p", pool, str(seconds), mode, "-t", str(threads),
                "--run-name", run_name, "-f", "json", "--db", db]
        if mode == "write":
            argv += ["-b", bs, "--no-cleanup"]
    rc, out, err, cpu, wall = run_measured(argv, env)
    if rc != 0:
        raise SystemExit(f"{tool} {mode} failed (exit {rc}):\n{out[-2000:]}\n{err[-2000:]}")
    doc = first_json(out)
    ops = ops_of(doc, mode)
    t = float(doc["total_time_run"])
    x = {"tool": tool, "mode": mode, "ops": ops, "iops": ops / t, "time_s": t, "cpu_s": cpu, "wall_s": wall,
         "cpu_us_per_op": cpu / ops * 1e6 if ops else float("nan")}
    if tool == "fathom":  # the orchestrator's share: the whole command minus the engine's own getrusage
        e = (doc.get("fathom") or {}).get("engine_cpu_s") or {}
        x["engine_cpu_s"] = float(e.get("user", 0)) + float(e.get("sys", 0))
        x["orchestrator_cpu_s"] = cpu - x["engine_cpu_s"]
    return x


def cleanup(tool: str, pool: str, run_name: str, conf: str, env: dict[str, str]) -> None:
    if tool == "rados bench":
        argv = ["rados", "-c", conf, "-p", pool, "cleanup", "--run-name", run_name]
    else:
        argv = [FATHOM, "cleanup", "-c", conf, "-p", pool, "--run-name", run_name]
    subprocess.run(argv, env=env, check=True, capture_output=True, timeout=600)


def sizes_of(results: list[dict]) -> list[str]:
    return list(dict.fromkeys(x.get("bs", "") for x in results))


def summarize(results: list[dict]) -> list[dict]:
    rows = []
    for bs, mode in ((bs, mode) for bs in sizes_of(results) for mode in MODES):
        r = {t: [x for x in results if x["tool"] == t and x["mode"] == mode and x.get("bs", "") == bs]
             for t in ("rados bench", "fathom")}
        if not r["fathom"] or not r["rados bench"]:
            continue
        rb_iops = statistics.median(x["iops"] for x in r["rados bench"])
        fa_iops = statistics.median(x["iops"] for x in r["fathom"])
        rb_cpu = statistics.median(x["cpu_us_per_op"] for x in r["rados bench"])
        fa_cpu = statistics.median(x["cpu_us_per_op"] for x in r["fathom"])
        rows.append({"bs": bs, "mode": mode, "rados_iops": rb_iops, "fathom_iops": fa_iops,
                     "iops_ratio": fa_iops / rb_iops,
                     "rados_cpu_us": rb_cpu, "fathom_cpu_us": fa_cpu, "cpu_ratio": fa_cpu / rb_cpu,
                     "pass": fa_iops >= rb_iops and fa_cpu <= 0.75 * rb_cpu,
                     "rounds": len(r["fathom"])})
    return rows


def markdown(rows: list[dict], results: list[dict], args: argparse.Namespace, facts: dict) -> str:
    fa = [x for x in results if x["tool"] == "fathom" and "orchestrator_cpu_s" in x]
    orch_s = statistics.median(x["orchestrator_cpu_s"] for x in fa) if fa else float("nan")
    orch_us = {bs: statistics.median(x["orchestrator_cpu_s"] / x["ops"] * 1e6 for x in fa
                                     if x["ops"] and x.get("bs", "") == bs)
               for bs in sizes_of(fa)}
    lines = [SECTION, "",
             f"Measured {time.strftime('%Y-%m-%d')} on {facts['host']} ({facts['cpus']} CPUs, {facts['ceph']}), "
             f"one local BlueStore OSD on a file, pool size 1, started fresh by the script; "
             f"{facts['engine']}, fathom at commit {facts['commit']}.",
             f"Op size {' and '.join(args.block_size)} (objects of one op each), {args.threads} concurrent ops, "
             f"{args.seconds} s per mode, {args.rounds} alternating rounds per op size; medians over rounds. "
             "CPU is user+sys of the whole process (os.wait4): for fathom that is the Python orchestrator plus "
             "the fathom-engine child.", "",
             "Command:", "", "```",
             f"make bench-rados   # = .venv/bin/python bench/bench_vs_rados_bench.py --rounds {args.rounds} "
             f"--seconds {args.seconds} {' '.join('-b ' + b for b in args.block_size)} -t {args.threads}", "```", ""]
    for bs in sizes_of(results):
        lines += [f"Op size {bs}:" if bs else "", "",
                  "| mode | rados bench IOPS | fathom IOPS | IOPS ratio | rados bench CPU us/op | fathom CPU us/op "
                  "| CPU ratio | target met (IOPS >= 1x, CPU <= 0.75x) |",
                  "|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in (r for r in rows if r.get("bs", "") == bs):
            lines.append(f"| {r['mode']} | {r['rados_iops']:.0f} | {r['fathom_iops']:.0f} | {r['iops_ratio']:.2f} | "
                         f"{r['rados_cpu_us']:.1f} | {r['fathom_cpu_us']:.1f} | {r['cpu_ratio']:.2f} | "
                         f"{'yes' if r['pass'] else 'NO'} |")
        lines += ["", f"Every round at {bs} (IOPS / CPU us per op):", "", "| round | tool | write | seq | rand |",
                  "|---|---|---|---|---|"]
        by_round: dict[tuple[int, str], dict[str, dict]] = {}
        for x in (x for x in results if x.get("bs", "") == bs):
            by_round.setdefault((x["round"], x["tool"]), {})[x["mode"]] = x
        for (rnd, tool), modes in sorted(by_round.items()):
            cells = [f"{modes[m]['iops']:.0f} / {modes[m]['cpu_us_per_op']:.1f}" if m in modes else "-"
                     for m in MODES]
            lines.append(f"| {rnd} | {tool} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["Notes:", "",
              "- seq stops after one pass over what the write left (both tools), so it runs shorter than the "
              "write; on this host client and OSD share the same CPUs, so IOPS also move with the client's CPU "
              "use and with anything else running.",
              f"- fathom's figure includes its Python orchestrator (start-up, reading the engine's records, "
              f"printing, storing the run): the whole command's CPU minus the engine's own was "
              f"{orch_s * 1e3:.0f} ms per command (median over fathom's runs), "
              + ", ".join(f"{v:.1f} us per op at {bs}" for bs, v in orch_us.items()) + ". "
              "On longer runs this mostly fixed part shrinks per op.",
              "- Both tools send an allocation hint with each write (rados bench's `hints = 1`; fathom's "
              "`--no-hints` turns it off like rados bench's).",
              "- Client CPU per op falls as IOPS rise (more completions per wake-up), so rounds at different "
              "IOPS differ; engine/PROTOCOL.md and the section \"Engine vs peers\" say where the CPU goes.", ""]
    return "\n".join(lines)




def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("-b", "--block-size", action="append", default=None,
                    help="op size, repeatable (default: 4M, then 4K)")
    ap.add_argument("--osd-size", type=int, default=40, help="OSD block file size in GiB, sparse (default 40)")
    ap.add_argument("-t", "--threads", type=int, default=16)
    ap.add_argument("--docs", default=None, help="replace the section of this Markdown file with the results")
    ap.add_argument("--json", default=None, help="also write every measurement to this JSON file")
    ap.add_argument("--from-json", default=None, help="re-render the Markdown from a --json file, measure nothing")
    args = ap.parse_args()
    args.block_size = args.block_size or ["4M", "4K"]
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        for k in ("rounds", "seconds", "block_size", "threads"):
            setattr(args, k, saved["args"][k])
        if isinstance(args.block_size, str):
            args.block_size = [args.block_size]
        md = markdown(summarize(saved["results"]), saved["results"], args, saved["facts"])
        print(md)
        if args.docs:
            update_docs(Path(args.docs), SECTION, md)
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="fathom-bench-rados-"))
    cluster = LocalCluster(tmp / "cluster", progress=lambda m: print(f"  {m}", file=sys.stderr))
    results: list[dict] = []
    try:
        cluster.up(osds=1, osd_size=args.osd_size * 1024**3)
        ceph = cluster.ceph()
        pool = "bench"
        ceph.ceph("osd", "pool", "create", pool, "32", fmt_json=False)
        ceph.ceph("osd", "pool", "application", "enable", pool, "rados", fmt_json=False)
        conf = str(cluster.conf_path)
        env = dict(os.environ, CEPH_CONF=conf)
        env.pop("CEPH_ARGS", None)
        # An installed fathom runs from compiled bytecode; a PYTHONDONTWRITEBYTECODE environment would make
        # every run recompile the package. Keep bytecode in the temp dir, compiled once before measuring.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-m", "compileall", "-q", str(REPO / "src" / "fathom")],
                       env=env, check=True, capture_output=True)
        db = str(tmp / "results.db")
        from fathom.binaries import engine_path

        eng = str(engine_path())
        facts = {"engine": subprocess.run([eng, "--version"], capture_output=True, text=True).stdout.strip(),
                 "commit": subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                          capture_output=True, text=True).stdout.strip() or "unknown",
                 "host": platform.node(), "cpus": os.cpu_count(),
                 "ceph": subprocess.run(["ceph", "--version"], capture_output=True, text=True).stdout.split("(")[0]
                 .strip()}
        tools = ["rados bench", "fathom"]
        for bs in args.block_size:
            for rnd in range(1, args.rounds + 1):
                order = tools if rnd % 2 else tools[::-1]
                for tool in order:
                    run_name = f"r{rnd}{bs}{'rb' if tool == 'rados bench' else 'fa'}"
                    for mode in MODES:
                        x = one(tool, mode, pool, args.seconds, bs, args.threads, run_name, conf, db, env)
                        x["round"], x["bs"] = rnd, bs
                        results.append(x)
                        print(f"{bs} round {rnd} {tool:11} {mode:5} {x['iops']:9.0f} IOPS "
                              f"{x['cpu_us_per_op']:7.1f} us/op ({x['ops']} ops, {x['cpu_s']:.2f} s CPU)",
                              file=sys.stderr, flush=True)
                    cleanup(tool, pool, run_name, conf, env)
    finally:
        cluster.down()
        for f in tmp.glob("results.db*"):  # the store this script created
            f.unlink()
        shutil.rmtree(tmp / "pycache", ignore_errors=True)  # the bytecode this script compiled
        try:
            tmp.rmdir()
        except OSError:
            pass
    rows = summarize(results)
    md = markdown(rows, results, args, facts)
    print(md)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "results": results, "facts": facts,
                                               "args": {k: getattr(args, k) for k in
                                                        ("rounds", "seconds", "block_size", "threads")}}, indent=2))
    if args.docs:
        update_docs(Path(args.docs), SECTION, md)
    return 0 if rows and all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
