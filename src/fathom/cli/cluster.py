"""`fathom cluster up|down|status|env`: the disposable local cluster."""

from __future__ import annotations

import argparse
import json
import sys
import time

from fathom.cluster.local import DEFAULT_DIR, LocalCluster
from fathom.units import parse_size, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="start, inspect and stop a disposable local Ceph cluster")
    csub = p.add_subparsers(dest="cluster_cmd", metavar="ACTION", required=True)

    up = csub.add_parser("up", help="start a local cluster (mon, mgr, OSDs; optional RGW and MDS)")
    _dir(up)
    up.add_argument("--osds", default="1", help="number of OSDs (default 1)")
    up.add_argument("--osd-size", default="10GiB", help="BlueStore block file size per OSD, sparse (default 10GiB)")
    up.add_argument("--objectstore", default="bluestore", choices=("bluestore", "memstore"))
    up.add_argument("--rgw", action="store_true", help="also start an RGW (beast) with an S3 user")
    up.add_argument("--mds", action="store_true", help="also start an MDS with a CephFS file system")
    up.set_defaults(func=cmd_up)

    down = csub.add_parser("down", help="stop this cluster's daemons by pid and remove its directory")
    _dir(down)
    down.set_defaults(func=cmd_down)

    status = csub.add_parser("status", help="health, daemons, pools, usage")
    _dir(status)
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(func=cmd_status)

    env = csub.add_parser("env", help="shell lines exporting CEPH_CONF, client keyring and S3 keys")
    _dir(env)
    env.set_defaults(func=cmd_env)


def _dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", default=str(DEFAULT_DIR), help=f"cluster state directory (default {DEFAULT_DIR})")


def _say(msg: str) -> None:
    print(f"  {msg}", file=sys.stderr, flush=True)


def cmd_up(args: argparse.Namespace) -> int:
    osds = positive_int(args.osds, "--osds")
    size = parse_size(args.osd_size, "--osd-size")
    cluster = LocalCluster(args.dir, progress=_say)
    if cluster.exists() and cluster.is_up():
        print(f"the cluster in {cluster.root} is already up; nothing to do")
        return 0
    t0 = time.monotonic()
    print(f"starting a local cluster in {cluster.root} ...", file=sys.stderr, flush=True)
    if not cluster.up(osds=osds, osd_size=size, objectstore=args.objectstore, rgw=args.rgw, mds=args.mds):
        print(f"the cluster in {cluster.root} is already up; nothing to do")
        return 0
    took = time.monotonic() - t0
    print(f"cluster up and HEALTH_OK in {took:.1f} s: {osds} OSD(s), conf {cluster.conf_path}")
    print(f"  use it: eval \"$(fathom cluster env --dir {args.dir})\"; stop it: fathom cluster down --dir {args.dir}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    cluster = LocalCluster(args.dir)
    if not cluster.root.exists():
        print(f"no cluster in {cluster.root}; nothing to do")
        return 0
    stopped = cluster.down()
    print(f"stopped {', '.join(stopped) if stopped else 'no running daemons'}; removed {cluster.root}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    st = LocalCluster(args.dir).status()
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    print(f"cluster {st['dir']}  health {st['health']}  OSDs up {st['osds_up']}/{st['osds_in']} in")
    for name, msg in st.get("health_checks", {}).items():
        print(f"  {name}: {msg}")
    for d in st["daemons"]:
        print(f"  {d['name']:<20} pid {d['pid'] or '-':<8} {'running' if d['running'] else 'STOPPED'}")
    if st.get("usage"):
        u = st["usage"]
        print(f"  usage: {u.get('total_used_raw_bytes', 0) / 2**20:.0f} MiB used of "
              f"{u.get('total_bytes', 0) / 2**30:.1f} GiB")
    for p in st["pools"]:
        print(f"  pool {p['name']}: {p['objects']} objects, {p['stored_bytes'] / 2**20:.1f} MiB stored")
    if st.get("s3_endpoint"):
        print(f"  S3 endpoint {st['s3_endpoint']}")
    if st.get("error"):
        print(f"  error: {st['error']}")
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    for line in LocalCluster(args.dir).env_lines():
        print(line)
    return 0
