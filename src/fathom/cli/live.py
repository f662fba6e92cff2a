"""`fathom watch`: the live page for a run in a results store (another process writing it, or finished)."""

from __future__ import annotations

import argparse
import sys
import threading

DEFAULT_DB = "fathom-results.db"  # fathom.results.store.DEFAULT_DB, without importing sqlite3 for every command
DEFAULT_LISTEN = "127.0.0.1:9465"


LINGER_S = 5.0  # fathom.live.LINGER_S, without importing the live view for every command


def metrics_arg(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """--metrics on run, slo and bench: Prometheus metrics and the live page while the run goes."""
    p.add_argument("--metrics", metavar="ADDR:PORT",
                   help="serve Prometheus metrics (/metrics) and a live page (/) here while the run goes, e.g. "
                        "127.0.0.1:9464 (:PORT is loopback; 0.0.0.0:PORT every address; docs/live.md); bound "
                        "before the run starts, closed when it ends (and --metrics-linger has passed)")
    p.add_argument("--metrics-linger", metavar="SECONDS", default=f"{LINGER_S:g}s",
                   help=f"with --metrics: go on serving the run's final state this long after it ends, so the last "
                        f"scrapes see its final status and last second (default {LINGER_S:g}s; 0: close at once; "
                        f"Ctrl-C ends the wait)")
    return p


def linger_s(args: argparse.Namespace) -> float:
    from fathom.units import parse_duration

    return parse_duration(args.metrics_linger, "--metrics-linger")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("watch", help="serve the live page for a run in a results store, as it is written or "
                                     "after it finished (read-only: never blocks the run writing it)")
    p.add_argument("run", nargs="?", help="run id or name (default: the newest run, following new ones)")
    p.add_argument("--db", default=DEFAULT_DB, help=f"results store (default {DEFAULT_DB})")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="ADDR:PORT",
                   help=f"where to serve the page (default {DEFAULT_LISTEN}; PORT 0: any free port)")
    p.set_defaults(func=cmd_watch)


def cmd_watch(args: argparse.Namespace) -> int:
    from fathom.live.server import LiveServer
    from fathom.live.watch import StoreView

    view = StoreView(args.db, args.run)
    try:
        server = LiveServer(args.listen, view.snapshot, None, "--listen")
        try:
            print(f"fathom watch: {server.url} (run {args.run or 'latest'} in {args.db}); Ctrl-C stops",
                  file=sys.stderr, flush=True)
            threading.Event().wait()  # until Ctrl-C or SIGTERM
        finally:
            server.close()
    finally:
        view.close()
    return 0
