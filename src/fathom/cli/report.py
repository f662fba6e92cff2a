"""`fathom report`, `fathom compare` and `fathom import`."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from fathom.errors import FathomError, UsageError
from fathom.results.store import DEFAULT_DB, Store

from fathom.analysis.compare import EXIT_REGRESSION  # 5: a workload regressed beyond --fail-on-regression

if TYPE_CHECKING:
    from fathom.analysis.data import RunData


def parse_pct(value: str, option: str) -> float:
    """'10%', '10' or '0.1%' -> a fraction (0.10)."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*%?\s*$", str(value))
    if not m:
        raise UsageError(f"{option}: expected a percentage such as 10% or 5, got {value!r}")
    pct = float(m.group(1))
    if pct >= 100:
        raise UsageError(f"{option}: must be under 100%, got {value!r}")
    return pct / 100.0


def _store(args: argparse.Namespace, must_exist: bool = True) -> Store:
    path = Path(args.db)
    if must_exist and not path.exists():
        raise FathomError(f"no results store at {path}", hint="pass --db FILE, or run or import something first")
    return Store(path)


def cmd_report(args: argparse.Namespace) -> int:
    from fathom.analysis.data import load_run
    from fathom.report import html, markdown, tables

    out = Path(args.output)
    if out.suffix.lower() not in (".html", ".htm", ".md", ".markdown"):
        raise UsageError(f"-o {out}: the report format comes from the extension: use .html or .md")
    with _store(args) as store:
        runs = [load_run(store, r) for r in args.runs]
        linked = next((r.env["baseline_run"] for r in runs if r.env.get("baseline_run")), None)  # suite's baseline:
        ref = args.baseline or (str(linked) if linked is not None else None)
        base = load_run(store, ref) if ref else None
    if base is not None and base.kind != "baseline":
        raise UsageError(f"--baseline {args.baseline}: run {base.name} is of kind {base.kind}",
                         hint="name a run `fathom baseline` stored (`fathom ls` shows each run's kind)")
    doc = tables.build(runs, args.title, base)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix.lower() in (".html", ".htm"):
            out.write_text(html.render(doc))
            written = [out]
        else:
            text, files = markdown.render(doc, out)
            out.write_text(text)
            for p, content in files.items():
                p.write_text(content)
            written = [out, *files]
    except OSError as exc:
        raise FathomError(f"cannot write {out}: {exc.strerror or exc}") from None
    n_anom = sum(len(s.anomalies) for s in doc.sections)
    print(f"wrote {out}" + (f" and {len(written) - 1} SVG charts beside it" if len(written) > 1 else "")
          + f": {len(doc.sections)} workloads, {len(runs)} runs, {n_anom} points flagged")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from fathom.analysis.compare import compare
    from fathom.analysis.data import load_run
    from fathom.report import compare_text

    tol = parse_pct(args.tolerance, "--tolerance")
    gate = parse_pct(args.fail_on_regression, "--fail-on-regression") if args.fail_on_regression is not None \
        else None
    refs = [args.base, args.new, *args.more]
    if args.repeat is not None:
        refs = run_trials(args, refs)
    with _store(args) as store:
        base = load_run(store, refs[0])
        news = [load_run(store, r) for r in refs[1:]]
    from fathom.analysis import rgw_gains

    if any(rgw_gains.is_gains_table(r) for r in [base, *news]):
        return _compare_gains(args, base, news)
    from fathom.analysis import slo

    if slo.answer_of(base.env) and all(slo.answer_of(n.env) for n in news):
        return _compare_slo(base, news, gate, args.format)
    c = compare(base, news, tol, gate)
    if not c.workloads:
        raise FathomError(f"nothing to compare: {base.name} and {', '.join(n.name for n in news)} share no "
                          "workload with completed points",
                          hint="workloads: " + "; ".join(f"{r.name}: {', '.join(r.workloads()) or 'none'}"
                                                          for r in [base, *news]))
    if args.format == "json":
        json.dump(c.to_dict(), sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(compare_text.render(c))
    if c.regressed:
        print("fathom: regression (above 1 is better): " + ", ".join(f"{w.workload} ({w.new}: {w.fired_text()})"
                                                                      for w in c.regressed), file=sys.stderr)
        return EXIT_REGRESSION
    return 0


def runnable(ref: str) -> bool:
    """A built-in suite's name or a suite file: something `fathom run` can run again."""
    from fathom.suite import spec

    return ref in spec.builtin_names() or (ref.endswith((".yaml", ".yml")) and Path(ref).is_file())


def run_trials(args: argparse.Namespace, refs: list[str]) -> list[str]:
    """`--repeat N`: run every side N times, interleaved (A, B, A, B, ...: drift over time falls on both
    sides alike), each trial a run of its own in the store; the sides as groups of their runs ("a,b,c")."""
    if args.repeat < 1:
        raise UsageError(f"--repeat: expected a number of trials of at least 1, got {args.repeat}")
    stored = [r for r in refs if not runnable(r)]
    if stored:
        raise UsageError(f"--repeat runs its sides again, but {', '.join(map(repr, stored))} "
                         f"{'is' if len(stored) == 1 else 'are'} not a built-in suite or suite file",
                         hint="name suites (`fathom suites`) or YAML files to compare with --repeat; a stored run "
                              "cannot be run again: run its suite with `fathom run SUITE --name NAME` several "
                              "times and compare the groups as 'a,b,c'")
    from fathom.cli import run as run_cli

    parser = argparse.ArgumentParser(prog="fathom")
    run_cli.register(parser.add_subparsers(dest="command"))  # `fathom run` alone (the table would import us)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    names: dict[str, list[str]] = {r: [] for r in refs}
    for trial in range(1, args.repeat + 1):
        for side, ref in enumerate(refs):
            name = f"{Path(ref).stem}-{'ABCDEFGHIJ'[side] if side < 10 else side}{trial}-{stamp}"
            argv = ["run", ref, "--db", args.db, "--name", name] + (["--quick"] if args.quick else [])
            print(f"fathom compare --repeat: trial {trial}/{args.repeat} of {ref} as run {name}", file=sys.stderr)
            ns = parser.parse_args(argv)
            with contextlib.redirect_stdout(sys.stderr):  # stdout is the comparison's alone (--format json parses)
                rc = ns.func(ns)
            if rc:
                raise FathomError(f"--repeat: trial {trial} of {ref} (run {name}) ended with exit code {rc}",
                                  hint=f"see `fathom show {name}`; the trials that finished are stored")
            names[ref].append(name)
    return [",".join(names[r]) for r in refs]


def _compare_slo(base: RunData, news: list[RunData], gate: float | None, fmt: str) -> int:
    """Two or more SLO searches: how much load each holds under the same targets (analysis.slo)."""
    from fathom.analysis import slo
    from fathom.units import format_rate

    b = slo.answer_of(base.env)
    results = [{"base": base.name, "new": n.name, **slo.compare_answers(b, slo.answer_of(n.env), gate)}
               for n in news]  # type: ignore[arg-type]
    if fmt == "json":
        json.dump({"kind": "slo", "targets": b["settings"]["targets"], "results": results}, sys.stdout,  # type: ignore[index]
                  indent=2, default=str)
        sys.stdout.write("\n")
    else:
        t = slo.Targets(**b["settings"]["targets"])  # type: ignore[index]

        def load(x: float | None, unit: str | None) -> str:
            return "none" if x is None else (format_rate(x) if unit == "ops/s" else f"iodepth {x:g}")

        out = [f"fathom compare: SLO searches, {t.describe()}", ""]
        for r in results:
            change = f"{(r['ratio'] - 1) * 100:+.1f}%" if r["ratio"] is not None else "n/a"
            out.append(f"{r['new']} holds {load(r['new_load'], r['unit'])}, {r['base']} "
                       f"{load(r['base_load'], r['unit'])}: {change}, {r['verdict']}"
                       + (f" ({r['why']})" if r.get("why") else ""))
        out += ["", "A verdict only where the searches' brackets (highest load met, lowest failed) do not overlap: "
                    "each answer is known to its search's resolution, no finer."]
        sys.stdout.write("\n".join(out) + "\n")
    bad = [r for r in results if r["regressed"]]
    if bad:
        print("fathom: regression: " + ", ".join(f"{r['new']} holds {r['ratio']:.3f}x the load of {r['base']}"
                                                 for r in bad), file=sys.stderr)
        return EXIT_REGRESSION
    return 0


def _compare_gains(args: argparse.Namespace, base: object, news: list) -> int:
    """A run of the rgw suite against the RGW study's published gains table (or two such): shapes, not magnitudes."""
    from fathom.analysis import rgw_gains
    from fathom.report import compare_text
    from fathom.report.doc import fmt

    runs = [base, *news]
    gains = {r.name: (rgw_gains.published_gains(r) if rgw_gains.is_gains_table(r)  # type: ignore[attr-defined]
                      else rgw_gains.measured_gains([r])) for r in runs}  # type: ignore[list-item]
    empty = [n for n, g in gains.items() if not g]
    if empty:
        raise FathomError(f"nothing to compare: {', '.join(empty)} has no replica 3 vs EC 2+2 gains (workload "
                          f"{rgw_gains.STUDY_WORKLOAD}, points done on both placements rep3 and ec22)",
                          hint="compare the published table with a run of the rgw suite (`fathom run rgw`)")
    b = base.name  # type: ignore[attr-defined]
    results = [{"base": b, "new": n.name, **rgw_gains.shape(gains[b], gains[n.name])} for n in news]
    if args.format == "json":
        json.dump({"kind": "rgw replica 3 vs EC 2+2 gains", "results": results}, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return 0
    o = [f"fathom compare: replica 3 vs EC 2+2 gains per object size, BASE {b} vs NEW "
         + ", ".join(n.name for n in news), ""]
    for r in runs:
        if r.source:  # type: ignore[attr-defined]
            o.append(f"source of {r.name}: {r.source}")  # type: ignore[attr-defined]
    o += [""] + [f"  {d}" for d in rgw_gains.DEFINITIONS] + [""]
    names = {"put_throughput_gain_pct": "PUT throughput", "get_throughput_gain_pct": "GET throughput",
             "put_latency_gain_pct": "PUT latency", "get_latency_gain_pct": "GET latency"}
    for res in results:
        o.append(f"{res['new']} against {res['base']}, at the sizes both have ({', '.join(res['sizes']) or 'none'})")
        o += compare_text.columns(["size", "gain", "BASE", "NEW", "sign"],
                                  [[r["size"], names[r["gain"]], fmt(r["study_pct"], "pct"),
                                    fmt(r["fathom_pct"], "pct"),
                                    {True: "same", False: "DIFFERS", None: "n/a"}[r["sign_agrees"]]]
                                   for r in res["rows"]], {2, 3})
        o.append(f"signs agree in {res['signs_agree']} of {res['signs_compared']} cells (within "
                 f"±{res['tolerance_pct_points']:g} points counts as no difference)")
        for col, t in res["trends"].items():
            o.append(f"  {names[col]} with object size: BASE {t['study']}, NEW {t['fathom']}"
                     + ("" if t["study"] == t["fathom"] else "  (differs)"))
        o += [f"note: {res['note']}", ""]
    sys.stdout.write("\n".join(o))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    new = not Path(args.db).exists()
    try:
        return _import(args)
    except BaseException:
        if new:  # a refused import leaves no results store behind (one with a run stored is kept)
            _drop_if_empty(Path(args.db))
        raise


def _drop_if_empty(path: Path) -> None:
    """Remove a store this command made when no run was stored in it."""
    with contextlib.suppress(FathomError, OSError):
        with Store(path) as store:
            if store.runs():
                return
        for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            p.unlink(missing_ok=True)


def _import(args: argparse.Namespace) -> int:
    from fathom.results import importers

    with _store(args, must_exist=False) as store:
        if args.source == "fio":
            ids = [importers.import_fio(store, args.files, args.name)]
        elif args.source == "rados-bench":
            ids = [importers.import_rados_bench(store, args.files, args.name, args.mode, args.threads)]
        else:
            ids = importers.import_table(store, args.file, args.split_by, args.name)
        for i in ids:
            r = store.run(i)
            print(f"imported run {r.id} {r.name!r}: {len(store.points(r.id))} points")
            print(f"  source: {r.source}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    def db(p: argparse.ArgumentParser) -> None:
        p.add_argument("--db", default=str(DEFAULT_DB), help=f"results store (default {DEFAULT_DB})")

    p = sub.add_parser("report", help="tables and charts of one or more runs, as HTML or Markdown",
                       description="Per workload: the OSD study's detail table per run, latency-vs-throughput, "
                                   "OSD CPU and efficiency charts, a summary (peak, knee), anomalies and each run's "
                                   "environment. HTML is one self-contained file; Markdown gets SVG files beside it.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run id, name or 'latest'; 'a,b' groups runs as repetitions")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="FILE.html or FILE.md")
    p.add_argument("--title", help="report title")
    p.add_argument("--baseline", metavar="RUN", help="a run of `fathom baseline` on the same cluster: each point is "
                                                     "set against the ceiling its figures allow")
    db(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help="BASE against NEW: every level's throughput and latency, verdicts",
                       description="Verdicts per workload: better, worse, equivalent, inconclusive, or no verdict "
                                   "with one trial (unless beyond 2x). With repetitions (run groups 'a,b,c', or "
                                   "--repeat N) a t interval of each ratio at every matched level and over the "
                                   "levels must lie wholly beyond the tolerance (docs/measurement.md). "
                                   "Exit codes: 0 done, 1 error, 2 bad usage, "
                                   f"{EXIT_REGRESSION} a workload regressed by more than --fail-on-regression.")
    p.add_argument("base", metavar="BASE", help="run id, name or 'latest'; 'a,b' groups runs as repetitions")
    p.add_argument("new", metavar="NEW")
    p.add_argument("more", nargs="*", metavar="MORE", help="further runs, each compared with BASE")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--tolerance", default="10%", help="ratios within ±this are equivalent (default 10%%)")
    p.add_argument("--fail-on-regression", metavar="PCT",
                   help=f"exit {EXIT_REGRESSION} if a figure of NEW (throughput or latency at a level, or over the "
                        "levels) is worse than BASE's with its whole interval beyond PCT (one trial: only a change "
                        "beyond 2x counts)")
    p.add_argument("--repeat", type=int, metavar="N",
                   help="BASE and NEW are suites (built-in names or YAML files): run each N times, interleaved "
                        "A, B, A, B, store every trial, then compare the groups")
    p.add_argument("--quick", action="store_true", help="with --repeat: run the suites' quick variants")
    db(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("import", help="store results from fio, rados bench or a published table",
                       description="Imported runs record where their numbers came from and what they lack.")
    isub = p.add_subparsers(dest="source", metavar="SOURCE", required=True)
    q = isub.add_parser("fio", help="fio --output-format=json or json+ files, one point per file")
    q.add_argument("files", nargs="+", metavar="FILE.json")
    q.add_argument("--name", help="run name (default: the first file's name)")
    db(q)
    q.set_defaults(func=cmd_import)
    q = isub.add_parser("rados-bench", help="rados bench -f json output files, one point per file")
    q.add_argument("files", nargs="+", metavar="FILE")
    q.add_argument("--name", help="run name (default: the first file's name)")
    q.add_argument("--mode", choices=("seq", "rand"), help="for read benchmarks: which one it was "
                                                           "(rados bench's JSON does not say)")
    q.add_argument("-t", "--threads", type=int, help="the -t (concurrent ops) the bench ran with; stored as iodepth")
    db(q)
    q.set_defaults(func=cmd_import)
    q = isub.add_parser("table", help="a published table (CSV) such as crimson-vs-classic-2025.csv")
    q.add_argument("file", metavar="FILE.csv")
    q.add_argument("--split-by", metavar="COLUMN", help="column whose values become runs (default: backend, "
                                                        "target, run or config; none of them: one run of every row)")
    q.add_argument("--name", help="prefix for the run names (NAME-value)")
    db(q)
    q.set_defaults(func=cmd_import)
