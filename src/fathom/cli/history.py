"""`fathom history` (many runs in order, their change points, a gate) and `fathom label` (tags on stored runs)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fathom.suite import labels
from fathom.errors import FathomError, UsageError
from fathom.results.store import DEFAULT_DB, Store

EXIT_CHANGE = 5  # --fail-on-change fired (the same code as compare's --fail-on-regression)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="line up many runs of a suite, find where figures changed, gate on it",
                       description="For each workload, level and figure, the matching points of many runs in "
                                   "order (the rule compare uses), change points by E-Divisive means with a "
                                   "significance test, and trend charts. No SUITE or RUN: every suite's runs "
                                   "and every imported table's, one overview page.")
    p.add_argument("refs", nargs="*", metavar="SUITE|RUN",
                   help="suite names (every stored run of each; imports: table:FILE, import:fio, "
                        "import:rados-bench) or runs (id, name, or a,b,c)")
    p.add_argument("--by", default="time", metavar="time|LABEL",
                   help="order by when runs were made (default), or by a label's value (numbers as numbers: "
                        "nodes=4, 8, 12 draw each figure against nodes); ceph and fathom are the recorded versions")
    p.add_argument("--workload", action="append", default=[], metavar="W", help="only this workload (repeatable)")
    p.add_argument("--figure", metavar="F,F", help="metric columns, e.g. iops,p99_ms (default: throughput, IOPS "
                                                   "or MiB/s as reports use, and p99 latency); see `fathom export "
                                                   "--columns`")
    p.add_argument("--since", metavar="WHEN", help="only runs made since a date (2026-11-01) or an age (7d, 12h)")
    p.add_argument("--fail-on-change", metavar="PCT",
                   help=f"exit {EXIT_CHANGE} when the newest run begins a significant change beyond PCT in the bad "
                        "direction (throughput down, latency up)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="what stdout carries")
    p.add_argument("-o", "--output", metavar="FILE", help="also write the page: .html (self-contained) or .md (SVG "
                                                          "charts beside it)")
    p.add_argument("--db", default=str(DEFAULT_DB), help=f"results store (default {DEFAULT_DB})")
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("label", help="add, change or remove labels of a stored run",
                       description="Labels tag runs (build=abc123, ceph=19.2.1, nodes=8); `fathom history --by "
                                   "LABEL` orders runs by them. New runs take them with `fathom run --label`.")
    p.add_argument("run", help="run id or name")
    p.add_argument("pairs", nargs="*", metavar="KEY=VALUE")
    p.add_argument("--remove", action="append", default=[], metavar="KEY", help="remove this label (repeatable)")
    p.add_argument("--db", default=str(DEFAULT_DB), help=f"results store (default {DEFAULT_DB})")
    p.set_defaults(func=cmd_label)


def _existing(path: str) -> Store:
    if not Path(path).exists():
        raise FathomError(f"no results store at {path}", hint="run something first, or name one with --db")
    return Store(path)


def cmd_history(args: argparse.Namespace) -> int:
    from fathom.analysis import history
    from fathom.report import history as page
    from fathom.cli.report import parse_pct

    tol = parse_pct(args.fail_on_change, "--fail-on-change") if args.fail_on_change is not None else None
    figures = history.figures_of(args.figure)
    since = history.parse_since(args.since) if args.since else None
    with _existing(args.db) as store:
        h = history.build(store, args.refs, by=args.by, workloads=args.workload, figures=figures, since=since,
                          tolerance=tol)
    if args.output:
        out = Path(args.output)
        written = page.write(h, out)
        print(f"wrote {out}" + (f" and {len(written) - 1} SVG charts beside it" if len(written) > 1 else ""),
              file=sys.stderr)
    if args.format == "json":
        # compact, in one go (json.dump streams through the pure-Python encoder: seconds for 1,000 runs)
        sys.stdout.write(json.dumps(h.to_dict(), default=str) + "\n")
    else:
        sys.stdout.write(page.text(h))
    if h.lacking:  # the gate judges the newest run only: say what it could not judge
        print("\n".join(f"fathom: {x}" if i == 0 else x for i, x in enumerate(page.lacking_lines(h))),
              file=sys.stderr)
    if h.fired:  # one line per fired series: a night that moves a hundred figures must stay readable
        print(f"fathom: change beyond {tol * 100:g}% at the newest run in {len(h.fired)} series:",  # type: ignore[operator]
              *(f"  {f.text()}" for f in h.fired), sep="\n", file=sys.stderr)
        return EXIT_CHANGE
    return 0


def cmd_label(args: argparse.Namespace) -> int:
    add = labels.parse(args.pairs, "label")
    for key in args.remove:
        if labels.key_problem(key):
            raise UsageError(f"--remove {key!r}: {labels.key_problem(key)}")
    if not add and not args.remove:
        raise UsageError("label: name KEY=VALUE pairs to set, or --remove KEY", hint="fathom label 12 build=abc123")
    with _existing(args.db) as store:
        r = store.run(args.run)
        now = {**(r.env.get("labels") or {}), **add}
        for key in args.remove:
            now.pop(key, None)
        store.merge_env(r.id, labels=now)
    print(f"run {r.id} {r.name}: labels " + (", ".join(f"{k}={v}" for k, v in now.items()) or "none"))
    return 0
