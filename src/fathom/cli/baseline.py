"""`fathom baseline`: the raw ceilings of a cluster's hosts (fathom.dropin.baseline), stored as a run of kind
baseline that `fathom report --baseline` sets each point against (fathom.analysis.ceiling)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from fathom.cli.bench import DEFAULT_DB


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "baseline", help="measure the raw ceilings of a cluster's hosts: the engine, the OSD devices, the network",
        description="Measure what the hardware allows before Ceph is in the way: fathom-engine on the null target on "
                    "each client host; the OSDs' devices (read-only: they hold data) on the --server-host hosts, "
                    "or the file system under fathom's own cluster (--dir; a scratch file, removed); iperf3 both "
                    "ways between each client host and each server host. Stored as a run of kind baseline; "
                    "`fathom report RUN --baseline BASELINE` shows each point against the ceiling they allow.")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--dir", type=Path, metavar="DIR", help="fathom's own cluster (made by `fathom cluster up`)")
    g.add_argument("--conf", metavar="CONF", help="an attached cluster's ceph.conf: its OSDs' devices and hosts "
                                                 "from `ceph osd metadata`")
    p.add_argument("--client-name", default="client.admin", metavar="NAME", help="with --conf (default client.admin)")
    p.add_argument("--keyring", metavar="FILE", help="with --conf: the client's keyring")
    p.add_argument("--client", action="append", default=[], metavar="USER@HOST[:PORT]",
                   help="a client host, over SSH (`local`: this host); repeatable (default: this host)")
    p.add_argument("--server-host", action="append", default=[], metavar="USER@HOST[:PORT]",
                   help="a host of the cluster, over SSH: its OSD devices and the network to it; repeatable")
    p.add_argument("--server-key", metavar="FILE", help="private key for the server hosts")
    p.add_argument("--known-hosts", metavar="FILE", help="known_hosts file (default ~/.ssh/known_hosts)")
    p.add_argument("--accept-new-host-keys", action="store_true",
                   help="add the key of a host not yet in known_hosts (a changed key is always refused)")
    p.add_argument("--runtime", type=float, default=10.0, metavar="SECONDS",
                   help="each measurement's length, after a 1 s ramp (default 10)")
    p.add_argument("--name", help="the run's name (default baseline-DATE-TIME)")
    p.add_argument("--db", default=str(DEFAULT_DB), help=f"results store (default ./{DEFAULT_DB})")
    p.set_defaults(func=cmd_baseline)


def cmd_baseline(args: argparse.Namespace) -> int:
    from fathom.dropin import baseline
    from fathom.errors import UsageError
    from fathom.results.store import Store

    if args.runtime <= 0:
        raise UsageError(f"--runtime {args.runtime:g}: give a length in seconds above 0")
    conn = None
    if args.conf:
        from fathom.cluster.ceph import Connection

        conn = Connection(conf=str(Path(args.conf).absolute()), name=args.client_name,
                          keyring=str(Path(args.keyring).absolute()) if args.keyring else None)
    elif not (args.dir / "ceph.conf").exists():
        raise UsageError(f"--dir {args.dir}: no ceph.conf there", hint="name the directory `fathom cluster up` made")
    name = args.name or f"baseline-{time.strftime('%Y%m%d-%H%M%S')}"
    run_id = baseline.run(baseline.Options(
        clients=baseline.hosts(args.client), servers=baseline.hosts(args.server_host),
        local_dir=args.dir.absolute() if args.dir else None,
        db=args.db, name=name, runtime_s=args.runtime, server_key=args.server_key, known_hosts=args.known_hosts,
        accept_new_host_keys=args.accept_new_host_keys, conn=conn))
    with Store(args.db) as store:
        points = store.points(run_id)
    print(f"baseline {name} (run {run_id}) in {args.db}:")
    for line in baseline.lines(points):
        print(f"  {line}")
    failed = [q for q in points if q["status"] != "done"]
    return 3 if failed and len(failed) == len(points) else 0


def before_points(held: Any, opts: Any, runtime_s: float) -> int:
    """A suite's `baseline:` (fathom.run.runner calls it once its cluster is prepared): `fathom baseline` on that
    cluster, its client hosts and its server hosts, stored in the run's store; the baseline run's id."""
    from fathom.dropin import baseline

    local = held.attached.local if held.attached is not None else None
    clients = held.clients.spec.hosts if held.clients is not None else []
    servers = opts.servers.hosts if opts.servers is not None else []
    known = opts.servers.known_hosts if opts.servers is not None else None
    return baseline.run(baseline.Options(
        clients=list(clients), servers=list(servers), local_dir=local.root if local is not None else None,
        db=str(opts.db), name=f"{opts.name or 'run'}-baseline-{time.strftime('%Y%m%d-%H%M%S')}",
        runtime_s=runtime_s, known_hosts=known, conn=held.ceph.conn if local is None else None),
        say=lambda m: print(f"  {m}", file=sys.stderr))
