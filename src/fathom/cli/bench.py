"""`fathom bench rados|rbd|s3` and `fathom cleanup`: drop-ins for rados bench / rbd bench, and an S3 check.

The work lives in fathom.dropin; this module only declares the arguments (the
same as the Ceph tools take) and imports the rest when a command runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from fathom.cli.clientargs import add_client_args
from fathom.cli.live import linger_s, metrics_arg

DEFAULT_DB = "fathom-results.db"  # fathom.results.store.DEFAULT_DB, without importing sqlite3 for every command


def _connection_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster connection (as the rados and rbd commands take it)")
    g.add_argument("-c", "--conf", help="ceph.conf path (default: $CEPH_CONF, then /etc/ceph/ceph.conf)")
    g.add_argument("--id", "--user", dest="id", help="client id, e.g. admin (client.admin)")
    g.add_argument("-n", "--name", "--client-name", dest="name", metavar="NAME",
                   help="full client name, e.g. client.admin (--client-name: the same, as the other commands spell it)")
    g.add_argument("-k", "--keyring", help="keyring path")
    g.add_argument("--client-ceph", metavar="host|RELEASE|DIR",
                   help="whose Ceph client (the rados and rbd calls, the engine's librados and librbd): host, a "
                        "release built by `fathom cluster rootfs` (reef, tentacle), a root or build directory; "
                        "default: a local cluster's own release, else this host's")
    g.add_argument("--connect-timeout", type=float, default=15.0, metavar="SECONDS",
                   help="give up reaching the monitors after this long (default 15)")


def _common_tail(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stall-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="stop when no op completes for this long with ops in flight, and report the cluster's "
                        "health (default 60)")
    p.add_argument("--db", default=str(DEFAULT_DB), help=f"results store (default ./{DEFAULT_DB})")
    metrics_arg(p)


def register(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("bench", help="rados bench / rbd bench drop-ins with percentiles, JSON and a stored run")
    bsub = b.add_subparsers(dest="bench_cmd", metavar="TOOL", required=True)

    r = bsub.add_parser(
        "rados", help="rados bench: -p POOL SECONDS write|seq|rand",
        description="Same arguments and output as `rados bench`, plus latency percentiles, honest JSON, "
                    "a stored run and a stall timeout. seq and rand read what `write --no-cleanup` left "
                    "under the same --run-name.")
    r.add_argument("-p", "--pool", required=True, help="pool to benchmark")
    r.add_argument("seconds", metavar="SECONDS", help="run time (seq also stops after one pass over the objects)")
    r.add_argument("mode", metavar="write|seq|rand", help="write objects, or read back what a write left")
    r.add_argument("-t", "--concurrent-ios", default="16", metavar="N", help="concurrent ops (default 16)")
    r.add_argument("-b", "--block-size", default=None, metavar="SIZE", help="op size for write (default 4M)")
    r.add_argument("-O", "--object-size", default=None, metavar="SIZE", help="object size (default: op size)")
    r.add_argument("--no-cleanup", action="store_true", help="keep the written objects (for seq/rand)")
    r.add_argument("--run-name", default=None, metavar="NAME",
                   help="names this run's objects (fathom_bench.NAME.*); default 'default'")
    r.add_argument("--max-objects", default=0, metavar="N", help="write at most N objects")
    r.add_argument("-f", "--format", default="plain", metavar="plain|json|json-pretty", help="output format")
    r.add_argument("--no-hints", action="store_true",
                   help="plain writes, without the allocation hint rados bench (and by default fathom) sends "
                        "with each write")
    _connection_args(r)
    _common_tail(r)
    add_client_args(r, "the bench's engines")
    r.set_defaults(func=_rados)

    d = bsub.add_parser(
        "rbd", help="rbd bench: POOL/IMAGE --io-type read|write|readwrite",
        description="Same arguments and per-second output as `rbd bench`, plus latency, percentiles, JSON "
                    "and a stored run.")
    d.add_argument("image", metavar="POOL/IMAGE", help="image spec (pool/image, or image with --pool)")
    d.add_argument("-p", "--pool", default=None, help="pool, when IMAGE has no pool part (default rbd)")
    d.add_argument("--image", dest="image_opt", default=None, help=argparse.SUPPRESS)
    d.add_argument("--io-type", required=True, metavar="read|write|readwrite|rw", help="IO type")
    d.add_argument("--io-size", default="4K", metavar="SIZE", help="IO size (default 4K)")
    d.add_argument("--io-threads", default="16", metavar="N", help="IOs in flight (default 16)")
    d.add_argument("--io-total", default="1G", metavar="SIZE", help="total bytes to transfer (default 1G)")
    d.add_argument("--io-pattern", default="seq", metavar="seq|rand|full-seq", help="IO pattern (default seq)")
    d.add_argument("--rw-mix-read", default="50", metavar="PERCENT", help="read share of readwrite (default 50)")
    d.add_argument("-f", "--format", default="plain", metavar="plain|json|json-pretty", help="output format")
    d.add_argument("--rbd-cache", action="store_true",
                   help="turn librbd's client cache on, as rbd bench has it with Ceph's defaults "
                        "(default: off, so the cluster is measured rather than the client's memory)")
    _connection_args(d)
    _common_tail(d)
    add_client_args(d, "the bench's engines")
    d.set_defaults(func=_rbd)

    s = bsub.add_parser(
        "s3", help="S3 (RGW) put|get|mixed, warp's vocabulary",
        description="PUT, GET or a GET/HEAD/PUT/DELETE mix against the local cluster's RGW (fathom cluster env) "
                    "or any S3 endpoint, with rados bench's per-second table and summary, percentiles, time to "
                    "first byte, JSON and a stored run. get and mixed first put --objects objects (not measured). "
                    "What a run wrote is removed at its end unless --noclear (then: fathom cleanup --bucket).")
    s.add_argument("mode", metavar="put|get|mixed", help="what to run")
    s.add_argument("--obj-size", "--obj.size", dest="obj_size", default="4MiB", metavar="SIZE",
                   help="object size (default 4MiB)")
    s.add_argument("--concurrent", default="20", metavar="N", help="requests in flight, one connection each "
                                                                     "(default 20, as warp)")
    s.add_argument("--duration", default="30s", metavar="TIME", help="measured time, e.g. 30s or 5m (default 30s)")
    s.add_argument("--objects", default="100", metavar="N", help="get/mixed: objects put first (default 100)")
    s.add_argument("--get-distrib", default="45", metavar="W", help="mixed: weight of GET (default 45)")
    s.add_argument("--stat-distrib", default="30", metavar="W", help="mixed: weight of HEAD (default 30)")
    s.add_argument("--put-distrib", default="15", metavar="W", help="mixed: weight of PUT (default 15)")
    s.add_argument("--delete-distrib", default="10", metavar="W",
                   help="mixed: weight of DELETE, of objects this run put (default 10)")
    s.add_argument("--noclear", "--no-cleanup", dest="noclear", action="store_true",
                   help="keep what the run wrote (remove it later with fathom cleanup --bucket)")
    s.add_argument("--run-name", default=None, metavar="NAME",
                   help="names this run's objects (fathom_bench.NAME/...); default 'default'")
    s.add_argument("--on-error", default="continue", choices=("continue", "stop"),
                   help="a failed request is counted and the run goes on (default), or the run stops")
    s.add_argument("-f", "--format", default="plain", metavar="plain|json|json-pretty", help="output format")
    _s3_args(s, bucket_default=None)
    _common_tail(s)
    add_client_args(s, "the bench's engines")
    s.set_defaults(func=_s3)

    c = sub.add_parser(
        "cleanup", help="remove the objects a fathom bench rados or s3 run left (and nothing else)",
        description="Removes fathom_bench.NAME.<n> and fathom_bench.NAME.meta for one run name (or the "
                    "objects of one fathom bench prefix) from a pool (-p), or a fathom bench s3 run's objects "
                    "and the bucket it created (--bucket). Objects of other runs, tools and users stay.")
    c.add_argument("-p", "--pool", default=None, help="pool (rados)")
    c.add_argument("--run-name", default=None, metavar="NAME", help="the bench's --run-name (default 'default')")
    c.add_argument("--prefix", default=None, metavar="PREFIX", help="the bench's object prefix, as it printed it")
    c.add_argument("-t", "--concurrent-ios", default="16", metavar="N", help="concurrent removes (default 16)")
    g = c.add_argument_group("client hosts of the bench (S3: they name its engines' object prefixes; a pool "
                             "is listed, so -p finds every client's objects without them)")
    g.add_argument("--client", action="append", metavar="USER@HOST[:PORT]", help="as the bench had it; repeatable")
    g.add_argument("--clients-file", metavar="FILE", help="as the bench had it")
    _connection_args(c)
    _s3_args(c, bucket_default=None)
    c.set_defaults(func=_cleanup)


def _s3_args(p: argparse.ArgumentParser, bucket_default: str | None) -> None:
    g = p.add_argument_group("S3 endpoint (default: the local cluster's, from fathom cluster env)")
    g.add_argument("--endpoint", "--host", dest="endpoint", default=None, metavar="URL",
                   help="http(s)://HOST:PORT, or HOST:PORT (https with --tls)")
    g.add_argument("--keys-file", default=None, metavar="PATH",
                   help="JSON with access_key and secret_key (default: $S3_KEYS_FILE, else the local cluster's "
                        "s3.json)")
    g.add_argument("--bucket", default=bucket_default, metavar="NAME",
                   help="bench: an existing bucket (default fathom-bench, created and removed by fathom); "
                        "cleanup: the bucket of the run to remove (S3 instead of -p)")
    g.add_argument("--tls", action="store_true", help="https (the local cluster's TLS endpoint)")
    g.add_argument("--ca", default=None, metavar="PATH",
                   help="PEM CA certificate for https (default: the local cluster's CA for its endpoint, "
                        "else $AWS_CA_BUNDLE, else the system bundle)")
    if not any(a.dest == "connect_timeout" for a in p._actions):
        g.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS",
                       help="give up opening a connection after this long (default 10)")


def _rados(args: argparse.Namespace) -> int:
    from fathom.dropin.rados import run_bench

    return _live(args, run_bench)


def _rbd(args: argparse.Namespace) -> int:
    from fathom.dropin.rbd import run_bench

    return _live(args, run_bench)


def _s3(args: argparse.Namespace) -> int:
    from fathom.dropin.s3 import run_bench

    return _live(args, run_bench)


def _live(args: argparse.Namespace, run_bench: Callable[[argparse.Namespace], int]) -> int:
    """With --metrics: the live server bound before the bench starts, fed by its engine records, closed at
    its end whatever happens."""
    if not args.metrics:
        return run_bench(args)
    from fathom import live
    from fathom.dropin import engine

    sess = live.Session(args.metrics, linger_s=linger_s(args))
    engine.LIVE = sess.observer  # the bench names itself to it once its arguments are read (engine.named)
    status = "failed"
    try:
        rc = run_bench(args)
        status = "done" if rc == 0 else "failed"
        return rc
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        engine.LIVE = None
        sess.close(status)


def _cleanup(args: argparse.Namespace) -> int:
    from fathom.errors import UsageError

    if bool(args.pool) == bool(args.bucket):
        raise UsageError("name what to clean up: -p POOL (fathom bench rados) or --bucket NAME (fathom bench s3)")
    if args.bucket:
        from fathom.dropin.s3 import run_cleanup as s3_cleanup

        if args.prefix:
            raise UsageError("--prefix applies to -p POOL; give --run-name with --bucket")
        return s3_cleanup(args)
    from fathom.dropin.rados import run_cleanup

    return run_cleanup(args)
