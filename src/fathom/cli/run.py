"""`fathom suites|plan|run|ls|show|export`: from a suite file to stored, exported results."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from fathom.suite import labels
from fathom.errors import FathomError, UsageError
from fathom.results.store import DEFAULT_DB, Store
from fathom.cluster.attach import add_attach_args, attach_from_args
from fathom.cli.live import linger_s, metrics_arg
from fathom.cli.clientargs import add_client_args, add_server_args, client_choice, server_spec, server_words


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("suites", help="list the built-in suites, or print one (`suites show NAME`)")
    p.add_argument("action", nargs="?", choices=("list", "show"), default="list")
    p.add_argument("suite", nargs="?", help="suite name (for show)")
    p.set_defaults(func=cmd_suites)

    p = sub.add_parser("plan", help="print every point a suite would run, without touching any cluster")
    p.add_argument("suite", help="built-in suite name or path to a suite YAML file")
    p.add_argument("--quick", action="store_true", help="apply the suite's quick overrides (small and fast)")
    p.add_argument("--json", action="store_true", help="print a JSON list of points")
    _engine(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("run", help="run a suite: start (or attach to) a cluster, prepare, sweep, store")
    p.add_argument("suite", nargs="?", help="built-in suite name or suite YAML file (optional with --resume)")
    p.add_argument("--quick", action="store_true", help="apply the suite's quick overrides (small and fast)")
    _db(p)
    p.add_argument("--name", help="run name (default: suite name and time)")
    _engine(p)
    p.add_argument("--resume", metavar="RUN", help="continue run RUN (id or name): only points not done are run, "
                                                   "on the cluster (and server hosts) it was attached with unless "
                                                   "options here name others")
    _label(p)
    p.add_argument("--keep-cluster", action="store_true", help="leave the disposable local cluster running")
    p.add_argument("--gate-timeout", default="300s", help="wait at most this long for a clean cluster before "
                                                          "each point (default 300s)")
    p.add_argument("--on-full", choices=("stop", "skip"), default="stop",
                   help="when a point fails because the cluster or its pool is full: stop the run (default; "
                        "--resume continues it once there is room) or skip the points left that write and "
                        "run those that read")
    add_attach_args(p, name_alias=False)  # --name is the run's name here
    add_client_args(p)
    add_server_args(p)
    p.add_argument("--bind", metavar="ADDR", help="the disposable local cluster listens on ADDR instead of "
                                                  "127.0.0.1 (so that client hosts other than this one reach it)")
    p.add_argument("--ceph", metavar="DIR|RELEASE", help="run the disposable local cluster's daemons from "
                   "another Ceph: a build directory (bin/, lib/), a root file system, or a release built by "
                   "`fathom cluster rootfs` (reef, tentacle); default this host's (docs/clusters.md)")
    metrics_arg(p).set_defaults(func=cmd_run)

    p = sub.add_parser("slo", help="the highest load that meets latency targets: search a workload's rate "
                                   "(open loop) or iodepth by bracketing and bisection, stored as a run",
                       description="Each probe runs long enough for its percentiles (a p99 needs 1,000 ops, a "
                                   "p99.9 10,000) and is judged by the 95%% interval of each percentile; probes "
                                   "near the boundary are repeated and merged. Defaults come from the suite's "
                                   "slo: section; see docs/slo.md.")
    p.add_argument("suite", help="built-in suite name or suite YAML file")
    p.add_argument("--quick", action="store_true", help="apply the suite's quick overrides (small and fast)")
    p.add_argument("--workload", help="the workload to search (needed when the suite has several)")
    for key, name in (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9")):
        p.add_argument(f"--{key}", metavar="LATENCY", help=f"{name} target, e.g. 5ms")
    p.add_argument("--error-rate", metavar="PCT", help="highest share of failed ops, e.g. 0.1%%")
    p.add_argument("--by", choices=("rate", "iodepth"), help="search the open-loop rate (default) or the iodepth")
    p.add_argument("--from", dest="start", metavar="LOAD", help="first probe (ops/s or iodepth; default: rate "
                                                                   "from a closed-loop probe, the workload's iodepth)")
    p.add_argument("--min", metavar="LOAD", help="lowest load to probe")
    p.add_argument("--max", metavar="LOAD", help="highest load to probe (default: 2x the closed-loop rate)")
    p.add_argument("--resolution", metavar="PCT", help="stop when the bracket is this narrow (default 5%%)")
    p.add_argument("--probe", metavar="SECONDS", help="shortest probe (default 10s)")
    p.add_argument("--max-probe", metavar="SECONDS", help="longest probe (default 120s)")
    _db(p)
    p.add_argument("--name", help="run name (default: suite name, 'slo' and time)")
    _label(p)
    p.add_argument("--keep-cluster", action="store_true", help="leave the disposable local cluster running")
    p.add_argument("--gate-timeout", default="300s", help="wait at most this long for a clean cluster before "
                                                          "each probe (default 300s)")
    add_attach_args(p, name_alias=False)
    add_client_args(p)
    add_server_args(p)
    p.add_argument("--bind", metavar="ADDR", help="the disposable local cluster listens on ADDR instead of "
                                                  "127.0.0.1 (so that client hosts other than this one reach it)")
    p.add_argument("--ceph", metavar="DIR|RELEASE", help="run the disposable local cluster's daemons from "
                   "another Ceph: a build directory (bin/, lib/), a root file system, or a release built by "
                   "`fathom cluster rootfs` (reef, tentacle); default this host's (docs/clusters.md)")
    metrics_arg(p).set_defaults(func=cmd_slo)

    p = sub.add_parser("ls", help="list the runs in a results store")
    _db(p)
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser("show", help="one run: environment, an SLO search's answer and probes, and a table of its "
                                    "points (the fields it sweeps, bs and rate among them, as columns)")
    p.add_argument("run", nargs="?", default="latest", help="run id or name (default: latest)")
    _db(p)
    p.add_argument("--json", action="store_true", help="print the run and its points as JSON")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("export", help="one row per point as CSV, JSON or Parquet; or, with --table, each host's and "
                                      "daemon's figures or the perf counters, one row per figure, the per-second "
                                      "intervals, the events or the runs")
    p.add_argument("run", nargs="?", help="run id or name (default: latest; --table runs: every run)")
    _db(p)
    p.add_argument("--format", choices=("csv", "json", "parquet"), help="default: from the -o suffix, else csv")
    p.add_argument("-o", "--output", help="output file (default: stdout for csv and json)")
    p.add_argument("--table", choices=("points", "servers", "counters", "intervals", "events", "runs"),
                   default="points", help=TABLE_HELP)
    p.add_argument("--columns", action="store_true",
                   help="instead of the rows: every column's meaning, the window it covers and its source "
                        "(csv or json; Parquet files carry them as field metadata)")
    p.set_defaults(func=cmd_export)


TABLE_HELP = ("points (default): one row per point; servers: per point, host and daemon, each daemon's CPU, RSS and "
              "context switches and each host's CPU, memory and NIC MiB/s over the point's telemetry window; "
              "counters: per point and daemon, each perf counter's change over the point. The long tables have one "
              "row per figure: ..., host, daemon, figure, value, unit. intervals: per point, second and op kind, its "
              "ops, IOPS, MiB/s and percentiles; events: the run's events; runs: one row per run of the store")


def _engine(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", help="run every workload on this engine (fathom-engine, fio, rados-bench) "
                                    "instead of the suite's choice")


def _label(p: argparse.ArgumentParser) -> None:
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                   help="tag the run, e.g. build=abc123 or nodes=8 (repeatable; over the suite's labels:); "
                        "`fathom history --by KEY` orders runs by it")


def _db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default=str(DEFAULT_DB), help=f"results store (default {DEFAULT_DB})")


def _open_existing(path: str) -> Store:
    if not Path(path).is_file():
        raise FathomError(f"no results store at {path}", hint="pass --db FILE, or run a suite first with `fathom run`")
    return Store(path)


# ---- suites and plan --------------------------------------------------------------

def cmd_suites(args: argparse.Namespace) -> int:
    from fathom.suite import spec

    if args.action == "show":
        if not args.suite:
            raise UsageError("suites show: name a suite", hint=f"built-in suites: {', '.join(spec.builtin_names())}")
        sys.stdout.write(spec.builtin_text(args.suite))
        return 0
    for name in spec.builtin_names():
        s = spec.parse(spec.builtin_text(name), name)
        from fathom.suite.plan import expand

        print(f"{name:<14} {len(expand(s)):>4} points  {s.description}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from fathom.suite import plan, spec

    loaded = spec.load(args.suite, quick=args.quick, engine=args.engine)
    points = plan.expand(loaded.suite)
    if args.json:
        print(json.dumps([p.to_dict() for p in points], indent=1))
        return 0
    s = loaded.suite
    total = plan.total_estimate_s(points)
    from fathom import interfaces

    needs = any(interfaces.cluster_needed(p.params) for p in points)
    size = "at most" if any(p.capped for p in points) else "about"
    print(f"suite {s.name} ({loaded.source}{', quick' if args.quick else ''}): {len(points)} points, "
          f"{size} {_dur(total)} of load" + (" plus cluster start and prep" if needs else "; no cluster needed"))
    if s.cluster.levels():
        print(f"  cluster shape sweep: {', '.join(map(str, s.cluster.levels() or []))} emulated hosts, one run and one "
              "disposable cluster each (labelled nodes=N), every point above in each")
    if s.prep.images:
        im = s.prep.images
        print(f"  prep: {im.count} RBD image(s) of {im.size / 2**20:.0f} MiB in pool {im.pool}"
              f"{', prefilled' if s.prep.prefill else ''}{', hygiene on' if s.prep.hygiene.enabled else ''}")
    from fathom.units import format_size

    w = max([14, *(len(p.workload) for p in points)])
    print(f"  {'#':>4}  {'workload':<{w}} {'engine':<13} {'rw':<9} {'bs':>7} {'iodepth':>7} {'numjobs':>7} "
          f"{'runtime':>8} {'ramp':>6}")
    for p in points:
        q = p.params
        rep = f"  rep {p.rep}" if s.repetitions > 1 else ""
        bs = interfaces.op_size(q)  # s3: the object size; placement and TLS say where it goes
        s3 = "".join(f"  {k} {q[k]}" for k in ("placement", "tls") if q.get(k) is not None)
        print(f"  {p.idx + 1:>4}  {p.workload:<{w}} {p.engine:<13} {q['rw']:<9} {format_size(bs):>7} "
              f"{q['iodepth']:>7} {q['numjobs']:>7} {_secs(q['runtime']):>8} {_secs(q['ramp_time']):>6}{rep}{s3}")
        for line in _companions(q):
            print(f"{'':8}{line}")
    return 0


def _companions(q: dict) -> list[str]:
    """What watches or acts on a point besides its load: its steady-state stop and its fault schedule."""
    from fathom.suite import faults, steady

    out = []
    crit = steady.Criteria.of(q)
    if crit is not None:
        out.append(f"steady state: stops once {crit.describe()}")
    schedule = [faults.Fault.model_validate(f) for f in q.get("faults") or []]
    if schedule:
        out.append("faults: " + ", ".join(f"{f.describe()} at {f.at_s:g} s" for f in schedule))
    return out


def _secs(s: float) -> str:
    return f"{s:g}s" if s < 120 else f"{s / 60:g}m"


def _dur(s: float) -> str:
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


# ---- run ------------------------------------------------------------------------

def cmd_run(args: argparse.Namespace) -> int:
    from fathom.run import work
    from fathom.units import parse_duration

    if not args.suite and not args.resume:
        raise UsageError("run: name a suite (built-in name or YAML file), or --resume RUN",
                         hint="see `fathom suites`")
    attach = attach_from_args(args, probe_timeout=None)
    from fathom.cli.baseline import before_points as baseline_first

    opts = work.RunOptions(
        suite_ref=args.suite, quick=args.quick, engine=args.engine, db=Path(args.db), name=args.name,
        resume=args.resume,
        keep_cluster=args.keep_cluster, gate_timeout=parse_duration(args.gate_timeout, "--gate-timeout"),
        on_full=args.on_full, bind=args.bind, ceph=args.ceph, client_ceph=args.client_ceph, attach=attach,
        attach_env=attach is not None and not any((args.conf, args.client_id, args.client_name, args.keyring)),
        clients=client_choice(args), servers=server_spec(args), server_args=server_words(args),
        mgr_prometheus=args.mgr_prometheus, prometheus=args.prometheus, labels=labels.parse(args.label),
        baseline=baseline_first,
    )
    if args.suite and not args.resume:
        from fathom.suite import spec

        levels = spec.load(args.suite, quick=args.quick, engine=args.engine).suite.cluster.levels()
        if levels:
            return _shape_sweep(opts, levels, args.metrics, linger_s(args))
    return _run_live(opts, args.metrics, linger_s(args))


def _shape_sweep(opts: Any, levels: list[int], metrics: str | None, linger: float) -> int:
    """A suite whose cluster.hosts is a list: one run per level, each on its own disposable cluster of that many
    emulated hosts (stopped before the next), labelled nodes=N so the report and `fathom history --by nodes` draw
    its figures against the hosts."""
    import dataclasses

    from fathom.results.store import Store

    if "nodes" in opts.labels:
        raise UsageError("--label nodes: a sweep of cluster.hosts labels each level's run nodes=N itself")
    if opts.keep_cluster or opts.attach is not None:
        raise UsageError("cluster.hosts sweeps the shape of fathom's disposable cluster: one per level, each "
                         "stopped before the next", hint="leave out --keep-cluster and --conf")
    ids: list[str] = []
    for i, n in enumerate(levels, 1):
        print(f"cluster shape {i}/{len(levels)}: {n} emulated host(s), run labelled nodes={n}", flush=True)
        rc = _run_live(dataclasses.replace(opts, hosts_level=n, labels={**opts.labels, "nodes": str(n)},
                                           name=f"{opts.name}-nodes{n}" if opts.name else None), metrics, linger)
        with Store(opts.db) as st:
            ids.append(str(st.runs()[-1].id))
        if rc != 0:
            print(f"cluster shape sweep stopped at {n} hosts (exit {rc}); runs so far: {','.join(ids)}")
            return rc
    print(f"cluster shape sweep done: runs {','.join(ids)} ({', '.join(f'nodes={n}' for n in levels)}); together: "
          f"fathom report {','.join(ids)} --db {opts.db}")
    return 0


def cmd_slo(args: argparse.Namespace) -> int:
    from fathom.run import work
    from fathom.units import parse_duration

    given = {k: getattr(args, k) for k in ("workload", "p50", "p90", "p99", "p999", "by", "start", "min", "max",
                                           "resolution", "probe")}
    given.update(error_rate=args.error_rate, max_probe=args.max_probe)
    name = args.name or f"{Path(args.suite).stem}-slo-{time.strftime('%Y%m%d-%H%M%S')}"
    opts = work.RunOptions(suite_ref=args.suite, quick=args.quick, db=Path(args.db), name=name,
                             keep_cluster=args.keep_cluster,
                             gate_timeout=parse_duration(args.gate_timeout, "--gate-timeout"), bind=args.bind,
                             ceph=args.ceph, client_ceph=args.client_ceph,
                             slo=given, attach=attach_from_args(args, probe_timeout=None), clients=client_choice(args),
                             servers=server_spec(args), server_args=server_words(args),
                             mgr_prometheus=args.mgr_prometheus,
                             prometheus=args.prometheus, labels=labels.parse(args.label))
    return _run_live(opts, args.metrics, linger_s(args))


def _run_live(opts: Any, metrics: str | None, linger: float) -> int:
    """runner.run, with --metrics: the live server bound first (a busy port fails before anything is made),
    closed whatever happens."""
    from fathom import live
    from fathom.run import runner

    sess = live.session(metrics, linger)
    if sess is None:
        return runner.run(opts).exit_code
    status = "failed"
    try:
        opts.live = sess.observer
        outcome = runner.run(opts)
        status = outcome.status
        return outcome.exit_code
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        sess.close(status)


# ---- ls / show / export ---------------------------------------------------------------

def cmd_ls(args: argparse.Namespace) -> int:
    with _open_existing(args.db) as st:
        runs = st.runs()
        if not runs:
            print(f"no runs in {args.db}")
            return 0
        print(f"{'id':>4}  {'name':<32} {'suite':<14} {'status':<12} {'points':>9}  created")
        for r in runs:
            pts = st.points(r.id)
            done = sum(1 for p in pts if p["status"] == "done")
            total = r.env.get("plan_points", len(pts))
            created = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created))
            print(f"{r.id:>4}  {r.name[:32]:<32} {(r.suite or '-')[:14]:<14} {r.status:<12} "
                  f"{done:>4}/{total:<4}  {created}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with _open_existing(args.db) as st:
        r = st.run(args.run)
        pts = st.points(r.id)
        hosts = _host_rows(st, r, pts)
        if args.json:
            print(json.dumps({"run": {k: v for k, v in r.__dict__.items()}, "points": pts, "hosts": hosts}, indent=1,
                             default=str))
            return 0
        env = r.env
        print(f"run {r.id} {r.name}: suite {r.suite}, {r.status}, {len(pts)} points stored")
        for k in ("ceph_version", "fathom_version", "labels", "cluster", "report", "telemetry_cost"):
            v = env.get(k)
            if v is not None:
                print(f"  {k}: {json.dumps(v) if isinstance(v, dict) else ', '.join(v) if isinstance(v, list) else v}")
        host = env.get("host") or {}
        if isinstance(host, dict) and host:
            print(f"  host: {host.get('cpu_model')}, {host.get('cores')} cores, "
                  f"{(host.get('mem_bytes') or 0) / 2**30:.1f} GiB, kernel {host.get('kernel')}")
        elif isinstance(host, str):  # a bench's or a baseline's: the host's name, its CPUs beside it
            print(f"  host: {host}, {env.get('cpus')} CPU(s), {env.get('os')}")
        if r.kind == "baseline":
            from fathom.dropin.baseline import lines

            for line in lines(pts):
                print(f"  {line}")
            for why in (env.get("baseline") or {}).get("not_measured") or []:
                print(f"  not measured: {why}")
        found = env.get("slo")
        if isinstance(found, dict) and found.get("result"):
            for line in _slo_lines(found):
                print(f"  {line}")
        axes = _point_axes(pts)
        head = ["#", "workload", "engine", *("rate ops/s" if a == "rate" else a for a in axes), "iodepth", "jobs",
                "status", "IOPS", "MiB/s", "clat ms", "p99 ms", "OSD cpu%", "OSD MiB"]
        rows = []
        for p in pts:
            m, q = p["metrics"] or {}, p["params"] or {}
            rows.append([str(p["idx"] + 1), p["workload"], p["engine"], *(_axis_value(a, q) for a in axes),
                         str(q.get("iodepth", "")), str(q.get("numjobs", "")), _status(p["status"], m),
                         _f(m.get("iops"), 0),
                         _f(m.get("bw_mib_s"), 1), _f(m.get("clat_ms"), 3), _f(m.get("p99_ms"), 3),
                         _f(m.get("osd_cpu"), 0), _f(m.get("osd_mem_mib"), 0)])
        for line in _text_table(head, rows, left={"workload", "engine", "status"}):
            print(f"  {line}")
        verdicts = [(p["idx"], ((p["result"] or {}).get("extra") or {}).get("bound")) for p in pts]
        if any(v for _, v in verdicts):  # fathom.analysis.bound: docs/measurement.md, "What bounds a point"
            print("  what bounds each point (use over the telemetry window against each resource's ceiling; at 90% "
                  "or more it bounds the point):")
            for idx, v in verdicts:
                if v:
                    print(f"    #{idx + 1} {v['bound']}: {v['summary']}")
                    for why in v.get("missing") or []:
                        print(f"       not judged: {why}")
        clients = _client_rows(pts, env)
        if clients:  # the engines' hosts (SSH hosts, Kubernetes pods), as the report's per-host tables have them
            print("  per client host (SSH host or Kubernetes pod), each point's engines there (client CPU: % of one "
                  "core; the point's own figures are the exact merge of every engine):")
            for line in _client_table(clients):
                print(f"  {line}")
        if any(h["daemons"] for h in hosts):  # a cluster's hosts; a run without one has only this host's CPU
            print("  per host, over each point's telemetry window (host CPU: % of its cores; daemons: CPU % of one "
                  "core, RSS and context switches summed over its daemons; each daemon's: `fathom export --table "
                  "servers`):")
            for line in _host_table(hosts):
                print(f"  {line}")
    return 0


def _status(status: str, m: dict) -> str:
    """A point's status, and the server hosts it lacks (lost: OSD cpu% and the other sums over hosts lack them)."""
    n = m.get("server_hosts_lost")
    return f"{status}, {n} server host{'s' if n > 1 else ''} lost" if n else status


def _host_rows(st: Store, run: Any, pts: list[dict]) -> list[dict[str, Any]]:
    """Per point and host: its daemons and figures (export.host_figures); daemons' figures summed on the host."""
    from fathom.results import export

    out = []
    for p in pts:
        for host, h in export.host_figures(st, run, p).items():
            ds = list(h["daemons"].values())
            out.append({"idx": p["idx"], "host": host, "source": h["source"], "partial": h["partial"],
                        "daemons": sorted(f"{n} (summed)" if d.get("summed") else n for n, d in h["daemons"].items()),
                        "host_cpu_pct": h["host"].get("host_cpu_pct"),
                        "mem_used_mib": h["host"].get("mem_used_mib"), "daemons_cpu_pct": _sum(ds, "cpu_pct"),
                        "daemons_rss_mib": _sum(ds, "rss_mib"), "daemons_ctx_switches_s": _sum(ds, "ctx_switches_s"),
                        "net_rx_mib_s": h["host"].get("net_rx_mib_s"), "net_tx_mib_s": h["host"].get("net_tx_mib_s")})
    return out


def _client_rows(pts: list[dict], env: dict[str, Any]) -> list[dict[str, Any]]:
    """Per point and client host, what its engines did (the point's `hosts`, merge.host_rows), with how the host
    was reached: `pod` (a Kubernetes pod, by the run's clients), `ssh` or `local`."""
    pods = {h.get("name") for h in (env.get("clients") or {}).get("hosts") or [] if h.get("pod") is not None}
    out = []
    for p in pts:
        extra = (p["result"] or {}).get("extra") or {}
        clocks = extra.get("clocks") or {}
        lost = extra.get("clients_lost") or {}
        for h in extra.get("hosts") or []:
            name = h["host"]
            c = clocks.get(name) or {}
            status = "lost" if h.get("lost") or name in lost else "much slower" if h.get("slow") else "ok"
            out.append({"idx": p["idx"], "host": name,
                        "via": "pod" if name in pods else "local" if name == "local" else "ssh",
                        "engines": h.get("engines"), "iops": h.get("iops"), "mib_s": h.get("mib_s"),
                        "p99_ms": h.get("p99_ms"), "client_cpu_pct": h.get("client_cpu_pct"),
                        "offset_ms": c.get("offset_ms"), "rtt_ms": c.get("rtt_ms"), "status": status})
    return out


def _client_table(rows: list[dict[str, Any]]) -> list[str]:
    head = ["#", "client host", "via", "engines", "IOPS", "MiB/s", "p99 ms", "client CPU %", "clock offset ms",
            "status"]
    cells = [[str(r["idx"] + 1), r["host"], r["via"], str(r["engines"] or "-"), _f(r["iops"], 0), _f(r["mib_s"], 1),
              _f(r["p99_ms"], 3), _f(r["client_cpu_pct"], 1),
              "-" if r["offset_ms"] is None else f"{r['offset_ms']:+.3f} ± {(r['rtt_ms'] or 0.0) / 2:.3f}",
              r["status"]] for r in rows]
    return _text_table(head, cells, left={"client host", "via", "status"})


def _sum(ds: list[dict[str, Any]], figure: str) -> float | None:
    vs = [d[figure] for d in ds if d.get(figure) is not None]
    return sum(vs) if vs else None


def _host_table(hosts: list[dict[str, Any]]) -> list[str]:
    head = ["#", "host", "source", "daemons", "host CPU %", "mem used MiB", "daemons CPU %", "daemons RSS MiB",
            "ctx switches/s", "NIC rx MiB/s", "NIC tx MiB/s"]
    rows = [[str(h["idx"] + 1), h["host"] + (" (partial)" if h["partial"] else ""), h["source"],
             ",".join(h["daemons"]) or "-", _f(h["host_cpu_pct"], 1), _f(h["mem_used_mib"], 0),
             _f(h["daemons_cpu_pct"], 1), _f(h["daemons_rss_mib"], 0), _f(h["daemons_ctx_switches_s"], 0),
             _f(h["net_rx_mib_s"], 1), _f(h["net_tx_mib_s"], 1)] for h in hosts]
    return _text_table(head, rows, left={"host", "source", "daemons"})


def _point_axes(pts: list[dict]) -> list[str]:
    """Point fields shown as columns of `show` besides iodepth and jobs: bs and the open-loop rate when the run
    sweeps them (its keys name them: `rr/bs=4096`, an SLO probe's `rr/slo/3/rate=2000`) or they differ across
    points, then any other field the run sweeps, so no two rows of different points look alike."""
    swept: list[str] = []
    for p in pts:
        for part in p["key"].split("/")[1:]:
            name = part.split("=", 1)[0] if "=" in part else None
            if name and name not in ("rep", "iodepth", "numjobs", *swept):
                swept.append(name)
    axes = [a for a in ("bs", "rate") if a in swept or len({repr((p["params"] or {}).get(a)) for p in pts}) > 1]
    return axes + [a for a in swept if a not in axes]


def _axis_value(axis: str, q: dict) -> str:
    from fathom.units import format_size

    v = q.get(axis)
    if axis == "rate":  # open loop's offered ops/s; a point without one ran closed loop
        return "closed" if v is None else f"{v:,.0f}" if v >= 10 else f"{v:g}"
    if v is None:
        return "-"
    if axis in ("bs", "size", "object_size", "filesize") and isinstance(v, int):
        return format_size(v)
    return f"{v:g}" if isinstance(v, float) else str(v)


def _slo_lines(found: dict) -> list[str]:
    """An SLO run's search (`fathom slo`, stored in its environment): what it searched, the answer, why the
    step above failed, and every probe with its load, figures and verdict."""
    from fathom.analysis import slo
    from fathom.units import format_rate

    s, res = found.get("settings") or {}, found["result"]
    unit = found.get("unit", "ops/s")

    def load(x: float | None) -> str:
        return "n/a" if x is None else format_rate(x) if unit == "ops/s" else f"iodepth {x:g}"

    t = s.get("targets") or {}
    targets = slo.Targets(t.get("latency_ms") or {}, t.get("error_rate"))
    keys = sorted(targets.latency_ms, key=lambda k: slo.QUANTILES[k])
    by = "rate (open loop)" if unit == "ops/s" else "iodepth (closed loop)"
    out = [f"SLO search: {targets.describe()}, workload {s.get('workload') or '-'}, by {by}",
           f"  answer: {'none' if res.get('load') is None else load(res['load'])}"
           + (f" ({res['status']})" if res.get("status") not in ("found", "none") else "")
           + (f"; failed at {load(res['failed_at'])}" if res.get("failed_at") is not None else "")
           + (f"; why: {'; '.join(res['why'])}" if res.get("why") else ""),
           f"  {res.get('message', '')}"]
    cal = found.get("calibration")
    if cal:
        out.append(f"  closed-loop probe at iodepth {cal.get('iodepth')}: {format_rate(cal['iops'])}; "
                   "the search ran from half that up to twice it")
    rows = []
    for i, pr in enumerate(res.get("probes") or [], start=1):
        o = pr.get("obs") or {}
        pcts = [(lambda v: f"{v[0]:.3g} ({v[1]:.3g}-{v[2]:.3g})" if v else "n/a")((o.get("percentiles") or {})
                                                                                  .get(k)) for k in keys]
        kept = o.get("schedule_kept")
        sched = "n/a" if kept is None else "kept" if kept else "NOT kept"
        client = o.get("client_thread_pct")
        rows.append([str(i), load(pr.get("load")), f"{o.get('ops', 0):,}", *pcts, f"{o.get('errors', 0):,}", sched,
                     "n/a" if client is None else f"{client:.0f}", str(o.get("probes", 1)),
                     str(pr.get("outcome")) + (" (by estimate)" if pr.get("decided_by_estimate") else ""),
                     "; ".join(pr.get("reasons") or [])])
    head = ["probe", "load", "ops", *(f"{slo.NAMES[k]} ms (95% CI)" for k in keys), "errors", "schedule",
            "client %", "merged", "verdict", "why"]
    return out + [f"  {line}" for line in _text_table(head, rows, left={"schedule", "verdict", "why"})]


def _text_table(head: list[str], rows: list[list[str]], left: set[str]) -> list[str]:
    """Columns as wide as their widest cell; text columns (left) to the left, figures to the right; the last
    column unpadded."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(head)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if h in left else c.rjust(w) for c, w, h in zip(cells, widths, head)).rstrip()

    return [line(head), *(line(r) for r in rows)]


def _f(v: float | None, nd: int) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def cmd_export(args: argparse.Namespace) -> int:
    from fathom.results import export

    fmt = args.format
    if not fmt:
        suffix = Path(args.output).suffix.lstrip(".") if args.output else ""
        fmt = suffix if suffix in ("csv", "json", "parquet") else "csv"
    if args.columns:
        if fmt == "parquet":
            raise UsageError("export --columns writes csv or json; a Parquet export carries them as field metadata")
        export.write(export.table_dictionary(args.table), fmt, args.output, export.DICTIONARY_COLUMNS)
        return 0
    if fmt == "parquet" and not args.output:
        raise UsageError("export --format parquet needs -o FILE (Parquet is binary)")
    with _open_existing(args.db) as st:
        if args.table == "runs" and args.run is None:
            n = export.write(export.run_rows(st), fmt, args.output, table="runs")
            of = "every run"
        else:
            r = st.run(args.run or "latest")
            n = export.write(export.table_rows(st, r.id, args.table), fmt, args.output, table=args.table)
            of = f"run {r.id} ({r.name})"
    if args.output:
        what = "point(s)" if args.table == "points" else f"row(s) of the {args.table} table"
        print(f"wrote {n} {what} of {of} to {args.output} as {fmt}", file=sys.stderr)
    return 0
