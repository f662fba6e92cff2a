"""`fathom cluster up|down|status|env`: the disposable local cluster; `restore`: any cluster a run changed."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from fathom.cluster.local import DEFAULT_DIR, LocalCluster
from fathom.cluster.attach import Attachment, add_attach_args, attach_from_args
from fathom.errors import ClusterError, UsageError
from fathom.units import parse_size, positive_int

if TYPE_CHECKING:
    from fathom.cluster.ceph import Ceph
    from fathom.cluster.journal import Journal
    from fathom.results.store import Run, Store

SECTIONS = ("global", "mon", "mgr", "osd", "mds", "client")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="start, inspect and stop a disposable local Ceph cluster")
    csub = p.add_subparsers(dest="cluster_cmd", metavar="ACTION", required=True)

    up = csub.add_parser("up", help="start a local cluster (mon, mgr, OSDs; optional RGW and MDS)")
    _dir(up)
    up.add_argument("--osds", default="1", help="number of OSDs (default 1)")
    up.add_argument("--osd-size", default="10GiB", help="BlueStore block file size per OSD, sparse (default 10GiB)")
    up.add_argument("--objectstore", default="bluestore", choices=("bluestore", "memstore"))
    up.add_argument("--rgw", action="store_true", help="also start an RGW (beast) with an S3 user; with --hosts, "
                    "one on each host (client.rgw.<hostname>)")
    up.add_argument("--mds", action="store_true", help="also start an MDS with a CephFS file system")
    up.add_argument("--hosts", type=int, default=None, metavar="N",
                    help="emulated hosts: N network namespaces with their own hostnames on a bridge fathom makes, "
                         "the OSDs spread over them (mon and mgr on the first), CRUSH host buckets by hostname; "
                         "the machine's cores and disks stay shared (docs/clusters.md)")
    up.add_argument("--host-nic", metavar="RATE", help="with --hosts: what each host may send, e.g. 10gbit (tc tbf)")
    up.add_argument("--host-delay", type=float, metavar="MS",
                    help="with --hosts: each host's link delay in ms (tc netem)")
    up.add_argument("--bind", metavar="ADDR", default="127.0.0.1",
                    help="address the daemons listen on (default 127.0.0.1); an address of this host that "
                         "client hosts reach, for engines on other hosts")
    up.add_argument("--set", action="append", default=[], metavar="[SECTION.]KEY=VALUE",
                    help="extra ceph.conf setting, repeatable; SECTION is global (default), mon, mgr, osd, mds, "
                         "client, e.g. --set osd.osd_op_num_shards=8")
    up.add_argument("--ceph", metavar="DIR", default=None,
                    help="run the daemons from another Ceph: a build directory as vstart.sh uses it (DIR/bin, "
                         "DIR/lib), a root file system (DIR/usr/bin/ceph-mon: chrooted in a private mount "
                         "namespace), or a release built by `fathom cluster rootfs` (e.g. reef); fathom's "
                         "client is that release's too, unless --client-ceph says otherwise")
    up.add_argument("--client-ceph", metavar="host|RELEASE|DIR", default=None,
                    help="whose Ceph client fathom reaches this cluster with (every ceph, rados, rbd call and the "
                         "engine's libraries): host (this host's: an older client meets a newer cluster; a Ceph 20 "
                         "cluster then makes aes keys for it), a release, a root or build directory; default: "
                         "--ceph's")
    up.set_defaults(func=cmd_up)

    rf = csub.add_parser("rootfs", help="build (once, cached) a root file system with another Ceph release for "
                                        "`cluster up --ceph`")
    rf.add_argument("release", choices=("reef", "tentacle"),
                    help="reef: Ceph 18 from Debian 13 (trixie); tentacle: Ceph 20 from Debian unstable (sid)")
    rf.add_argument("--rebuild", action="store_true", help="build again even if a cached root exists")
    rf.add_argument("--mirror", default=None, help="Debian mirror (default http://deb.debian.org/debian)")
    rf.add_argument("--json", action="store_true", help="print the root's record as JSON")
    rf.set_defaults(func=cmd_rootfs)

    down = csub.add_parser("down", help="stop this cluster's daemons by pid and remove its directory")
    _dir(down)
    down.set_defaults(func=cmd_down)

    mount = csub.add_parser("mount", help="mount the cluster's CephFS by ceph-fuse, or ext4 on RBD (rbd-fuse + loop), "
                                          "or serve NFS (nfs-ganesha on loopback)")
    _dir(mount)
    mount.add_argument("what", choices=("ceph-fuse", "rbd-ext4", "nfs"),
                       help="ceph-fuse: CephFS (the cluster needs --mds); rbd-ext4: ext4 on an RBD image; nfs: "
                            "nfs-ganesha serving CephFS (with --mds) and a local directory over NFSv4")
    mount.add_argument("--size", default="4GiB", help="rbd-ext4: size of the RBD image (default 4GiB)")
    mount.set_defaults(func=cmd_mount)

    umount = csub.add_parser("umount", help="undo every mount fathom made on this cluster (also after a crash)")
    _dir(umount)
    umount.set_defaults(func=cmd_umount)

    status = csub.add_parser("status", help="health, daemons, pools, usage; hosts, their daemons and which of "
                                            "fathom's server-side sources reach each")
    _dir(status)
    status.add_argument("--json", action="store_true", help="print one JSON object (hosts under `hosts`)")
    add_attach_args(status)
    status.set_defaults(func=cmd_status)

    rs = csub.add_parser("restore", help="undo what a killed run left on an attached cluster: put back the settings "
                                         "it changed and remove what its journal says it made (pools, images, EC "
                                         "profiles, RGW users and placements, S3 buckets and the objects it wrote "
                                         "in them), naming each; nothing else. A killed run still marked running "
                                         "is marked interrupted")
    add_attach_args(rs)
    rs.add_argument("--db", default="fathom-results.db", help="results store of the runs (default ./fathom-results.db)")
    rs.add_argument("--run", help="only this run (id, name or latest); default: every run that changed this cluster")
    rs.set_defaults(func=cmd_restore)

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
    settings = parse_settings(args.set)
    cluster = LocalCluster(args.dir, progress=_say)
    if cluster.exists() and cluster.is_up():
        print(f"the cluster in {cluster.root} is already up; nothing to do")
        return 0
    t0 = time.monotonic()
    if (args.host_nic or args.host_delay is not None) and not args.hosts:
        raise UsageError("--host-nic and --host-delay shape emulated hosts: give --hosts N too")
    hosts = {"n": args.hosts, "nic": args.host_nic, "delay_ms": args.host_delay} if args.hosts else None
    if not cluster.up(osds=osds, osd_size=size, objectstore=args.objectstore, rgw=args.rgw, mds=args.mds,
                      settings=settings, bind=args.bind, ceph=args.ceph, client=args.client_ceph, hosts=hosts):
        print(f"the cluster in {cluster.root} is already up; nothing to do")
        return 0
    took = time.monotonic() - t0
    print(f"cluster up and HEALTH_OK in {took:.1f} s: {osds} OSD(s), conf {cluster.conf_path}")
    for h in (cluster.state() or {}).get("box", {}).get("hosts", []):
        on = sorted(n for n, p in (cluster.state() or {}).get("places", {}).items() if p.get("host") == h["hostname"])
        print(f"  {h['hostname']}: {h['addr']} ({', '.join(on) or 'no daemon'})")
    print(f"  use it: eval \"$(fathom cluster env --dir {args.dir})\"; stop it: fathom cluster down --dir {args.dir}")
    return 0


def cmd_rootfs(args: argparse.Namespace) -> int:
    from fathom.cluster import rootfs

    rec = rootfs.build(args.release, rebuild=args.rebuild, mirror=args.mirror or rootfs.MIRROR, progress=_say)
    path = rootfs.root_path(args.release)
    if args.json:
        print(json.dumps({"path": str(path), **rec}, indent=2))
        return 0
    print(f"{path}: Ceph {rec['ceph_version']} (Debian {rec['suite']}), {rec['size_bytes'] / 2**20:.0f} MiB, "
          f"built {rec['built']} in {rec['build_s']:.0f} s")
    for note in rec.get("patches") or []:
        print(f"  patched: {note}")
    print(f"  use it: fathom cluster up --ceph {args.release}   (or --ceph {path})")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    cluster = LocalCluster(args.dir)
    if not cluster.root.exists():
        print(f"no cluster in {cluster.root}; nothing to do")
        return 0
    stopped = cluster.down()
    print(f"stopped {', '.join(stopped) if stopped else 'no running daemons'}; removed {cluster.root}")
    return 0


def cmd_mount(args: argparse.Namespace) -> int:
    from fathom.cluster import mounts

    cluster = LocalCluster(args.dir, progress=_say)
    if not cluster.exists() or not cluster.is_up():
        raise ClusterError(f"no running fathom cluster in {cluster.root}",
                           hint=f"start one with `fathom cluster up --dir {args.dir}`" +
                                (" --mds" if args.what == "ceph-fuse" else ""))
    if args.what == "nfs":
        from fathom.cluster import ganesha

        srv = ganesha.ganesha(cluster)
        for which in ganesha.EXPORTS:
            if which != "cephfs" or (cluster.state() or {}).get("ganesha_cephfs"):
                print(f"nfs://{srv.host}:{srv.port}{srv.export(which)}")
        return 0
    mnt = mounts.ceph_fuse(cluster) if args.what == "ceph-fuse" else mounts.rbd_ext4(
        cluster, parse_size(args.size, "--size"))
    print(mnt)
    return 0


def cmd_umount(args: argparse.Namespace) -> int:
    from fathom.cluster import mounts

    cluster = LocalCluster(args.dir)
    done = mounts.teardown(cluster) if cluster.exists() else []
    print("; ".join(done) if done else "no mounts to undo")
    return 0


def parse_settings(items: list[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for item in items:
        key, eq, value = item.partition("=")
        section, dot, name = key.partition(".")
        if not dot:
            section, name = "global", key
        if not eq or not name.strip() or section not in SECTIONS:
            raise UsageError(f"--set: cannot read {item!r}",
                             hint=f"use [SECTION.]KEY=VALUE with SECTION one of {', '.join(SECTIONS)}")
        out.setdefault(section, {})[name.strip()] = value.strip()
    return out


def cmd_status(args: argparse.Namespace) -> int:
    from fathom.servers import inventory

    attached = attach_from_args(args)
    if attached and not attached.local:
        st = attached_status(attached)
    else:
        cluster = LocalCluster(attached.local.root if attached and attached.local else args.dir)
        st = cluster.status()
        if st["health"] not in ("DOWN", "UNREACHABLE") and not st.get("error"):  # answering: a second look is cheap
            st.update(inventory.gather(cluster.ceph(timeout=15), [d for d in cluster.daemons() if d.running], 15))
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    print(f"cluster {st.get('dir') or st['conf']}  health {st['health']}  OSDs up {st['osds_up']}/{st['osds_in']} in")
    src = st.get("ceph_source") or {}
    if src.get("kind") not in (None, "host"):
        print(f"  daemons from the Ceph {src['kind']} {src['dir']}")
    if st.get("client"):
        print(f"  client: {st['client'].get('version') or 'unknown version'} "
              f"({st['client'].get('dir') or 'this host'})")
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
    if "hosts" in st:
        for line in inventory.text_lines(st):
            print(f"  {line}")
    if st.get("error"):
        print(f"  error: {st['error']}")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    """Undo what killed runs left on this cluster (matched by fsid), newest run first: the settings they changed put
    back, then what their journals say they made (the objects their PUTs wrote and the S3 buckets they made, RGW
    users and placements, images, pools, EC profiles, the fathom-sampler on server hosts, the Kubernetes objects
    fathom made) removed. A run still marked running whose process is gone is marked interrupted; a run whose
    process still runs is left alone."""
    from fathom.cluster import restore
    from fathom.cluster.journal import (FAULT_KIND, K8S_KIND, OBJECT_KINDS, RGW_KINDS, S3_KIND, SAMPLER_KIND, SETTING,
                                        Journal)
    from fathom.results.store import Store

    if not Path(args.db).is_file():
        raise UsageError(f"no results store {args.db}", hint="pass --db with the file the run wrote its results to")
    attached = attach_from_args(args)
    if attached is None:
        raise UsageError("name the cluster whose settings to restore",
                         hint="pass --conf PATH (and --id/--keyring as for the ceph tools), or set CEPH_CONF")
    ceph = attached.ceph()
    fsid = restore.read_fsid(ceph)
    undone = failed = ended = 0
    with Store(args.db) as store:
        runs = [store.run(args.run)] if args.run else list(reversed(store.runs()))
        for run in runs:
            rec = run.state.get("journal") or {}
            pending = [] if rec.get("moot") else [
                e for e in rec.get("entries", []) if not e.get("undone")
                and e.get("kind") in (SETTING, *OBJECT_KINDS, *RGW_KINDS, S3_KIND, SAMPLER_KIND, K8S_KIND, FAULT_KIND)]
            # a bench with no Ceph connection (S3 on pods) names no cluster: what it left is found from any
            here = rec.get("fsid") == fsid or (run.kind == "bench" and rec.get("fsid") is None and "pid" in rec)
            # a run on this cluster still marked running: killed, it could not mark its end (restore does)
            stale = run.status == "running" and here and not rec.get("moot")
            if not pending and not stale:
                continue
            who = f"run {run.id} ({run.name})"
            what = _left(pending)
            if not here:
                msg = (f"{who} left {what} on cluster {rec.get('fsid')} "
                       f"(conf {(rec.get('conn') or {}).get('conf')}), not on this one ({fsid})")
                if args.run:
                    raise ClusterError(f"refusing to restore: {msg}",
                                       hint="pass the --conf of the cluster the run used")
                print(f"skipped {msg}")
                continue
            if restore.run_alive(run.state):
                msg = (f"{who} is still running (pid {restore.last_process(run.state).get('pid')}); it restores "
                       "its settings when it ends")
                if args.run:
                    raise ClusterError(msg, hint="wait for it to end, or stop it with Ctrl-C or SIGTERM")
                print(f"skipped {msg}")
                continue
            if pending:
                print(f"{who}: undoing {what} on cluster {fsid}")
                journal = Journal.from_dict(rec, persist=lambda d, rid=run.id: store.merge_state(rid, journal=d))
                n, bad = _undo_run(store, run.id, ceph, journal, args.db)
                undone, failed = undone + n, failed + bad
            if stale:
                ended += _end_killed(store, run, args.db)
    if undone == failed == ended == 0:
        print(f"nothing to restore on cluster {fsid}: no run in {args.db} left a setting changed or a pool, image, "
              "RGW user or S3 bucket it made there")
    return 3 if failed else 0


def _end_killed(store: Store, run: Run, db: str) -> int:
    """A run still marked running whose process is gone (SIGKILL, the OOM killer, a reboot: it could not mark its
    end) marked interrupted, as Ctrl-C leaves a run, with an event saying restore ended it; 1 when it was. One whose
    process restore cannot see (another host, none recorded) keeps its status, said so."""
    from fathom.cluster import restore
    from fathom.run import reattach

    who = f"run {run.id} ({run.name})"
    why = restore.run_gone(run.state)
    if why is None:
        proc = restore.last_process(run.state)
        where = (f"its process ran on {proc['host']}, not on this host: `fathom cluster restore` there ends it"
                 if proc else "no process of it is recorded (an attempt of an older fathom)")
        print(f"  {who} stays marked running: {where}; restore cannot tell that it ended")
        return 0
    msg = (f"`fathom cluster restore`: {who} was still marked running, but {why}: it was killed before it could "
           "mark its end. Marked interrupted; finished points kept")
    store.finish_run(run.id, "interrupted")
    store.add_event(run.id, "interrupt", msg, data={**restore.last_process(run.state), "by": "fathom cluster restore"})
    if run.kind == "suite" and not run.env.get("slo"):
        msg += f"; resume with: {reattach.command(run.id, db, reattach.stored(run))}"
    print(f"  {msg}")
    return 1


def _left(entries: list[dict]) -> str:
    """'7 setting(s), 1 pool(s)': what a journal still holds, by kind."""
    from collections import Counter

    n = Counter(e["kind"] for e in entries)
    return ", ".join(f"{c} {_kind_name(k)}(s)" for k, c in sorted(n.items(), key=lambda kc: kc[0] != "setting"))


def _undo_run(store: Store, run_id: int, ceph: Ceph, journal: Journal, db: str) -> tuple[int, int]:
    """One run's journal undone: settings put back, then what it made removed (the objects its PUTs wrote and the S3
    buckets they made, RGW users and placements before the pools they use, images with their pools; samplers on
    server hosts), each named as it goes. Returns (undone, failed)."""
    from fathom import servers
    from fathom.cluster import buckets, restore, rgw
    from fathom.cluster.journal import OBJECT_KINDS, RGW_KINDS
    from fathom.cluster.prep import Prep
    from fathom.errors import FathomError

    from fathom.hosts import impair

    n_faults = len(journal.pending(impair.FAULT_KIND))
    faults_left = impair.undo_all(journal, lambda m: print(f"  {m}"))  # the hosts first: the cluster whole again
    if faults_left:
        store.add_event(run_id, "warning", f"could not put back {'; '.join(faults_left)}", data={"left": faults_left})
    restorer = restore.Restorer(ceph, journal)
    settings = len(restorer.pending())
    left = restorer.restore(lambda m: print(f"  {m}"))
    said = [f"restored {settings - len(left)} setting(s) of {settings}"] if settings else []
    if left:
        msg = restore.unrestored_message(left, journal.to_dict(), db)
        store.add_event(run_id, "warning", msg, data={"unrestored": [e.to_dict() for e in left],
                                                      "commands": restorer.repair_commands(left)})
        print(msg)
    s3_done, s3_left = buckets.remove(journal, lambda m: print(f"  {m}"), lambda: buckets.full_now(ceph))
    said += s3_done
    if s3_left:
        msg = f"could not remove {'; '.join(s3_left)}: run `fathom cluster restore` again once that is fixed"
        store.add_event(run_id, "warning", msg, data={"left": s3_left})
        print(msg)
    made = journal.pending(*RGW_KINDS, *OBJECT_KINDS)
    removed: dict[str, list[str]] = {}
    error = None
    if made:
        prep = Prep(ceph, journal=journal)
        try:
            removed = rgw.cleanup(prep)  # RGW's users and placements before the pools they use
            removed.update(prep.cleanup())
        except FathomError as exc:
            error = exc.message
    names = [f"{_kind_name(kind[:-1])} {x}" for kind, xs in removed.items() for x in xs]
    for name in names:
        print(f"  removed {name}")
    gone = [f"{_kind_name(e.kind)} {e.what}" for e in made if e.undone]
    gone = [g for g in gone if g not in names]
    if gone:  # written down before it was made, and the run was killed before it was (or removed by hand)
        print(f"  already gone: {', '.join(gone)}")
    if names:
        said.append("removed what the run made: " + ", ".join(names))
    still = [f"{_kind_name(e.kind)} {e.what}" for e in journal.pending(*RGW_KINDS, *OBJECT_KINDS)]
    if still:
        msg = (f"could not remove what run {run_id} made ({', '.join(still)}): {error or 'not reached'}; "
               f"run `fathom cluster restore` again when the cluster answers")
        store.add_event(run_id, "warning", msg, data={"left": still})
        print(msg)
    samplers, bad = servers.remove_samplers(journal, lambda m: print(f"  {m}"))
    _said_left(store, run_id, said, removed, "samplers", samplers, bad, "the fathom-sampler it put at ",
               "the fathom-sampler it put on server hosts", "the hosts answer")
    objs, bad_objs = _remove_k8s(journal)
    _said_left(store, run_id, said, removed, "k8s", objs, bad_objs, "the Kubernetes objects it made: ",
               "the Kubernetes objects it made", "the API answers")
    if said:
        store.add_event(run_id, "restore", f"`fathom cluster restore` {'; '.join(said)}", data={"removed": removed})
    return (settings - len(left) + len(s3_done) + len(made) - len(still) + len(samplers) + len(objs) + n_faults -
            len(faults_left), len(left) + len(s3_left) + len(still) + len(bad) + len(bad_objs) + len(faults_left))


def _said_left(store: Store, run_id: int, said: list[str], removed: dict[str, list[str]], key: str,
               gone: list[str], bad: list[str], what: str, where: str, answers: str) -> None:
    """What one kind of undo removed, added to what restore says; what it could not, a warning of the run."""
    if gone:
        said.append(f"removed {what}" + ", ".join(gone))
        removed[key] = gone
    if bad:
        msg = (f"could not remove {where.replace('it ', f'run {run_id} ', 1)} ({'; '.join(bad)}); "
               f"run `fathom cluster restore` again when {answers}")
        store.add_event(run_id, "warning", msg, data={"left": bad})
        print(msg)


def _remove_k8s(journal: Journal) -> tuple[list[str], list[str]]:
    """The Kubernetes objects the journal names, deleted where they still carry fathom's labels."""
    from fathom.cluster.journal import K8S_KIND

    if not journal.pending(K8S_KIND):
        return [], []
    from fathom.hosts.ssh import LOOP
    from fathom.hosts.k8s import journaled, objects

    say = lambda m: print(f"  {m}")  # noqa: E731
    pods, bad = LOOP.run(objects.remove_left(journal, say), timeout=600)  # a run's pods, owner and Secret
    more, bad_more = journaled.remove_left(journal, say)  # single objects: the sampler's DaemonSet
    return pods + more, bad + bad_more


def _kind_name(kind: str) -> str:
    """A journal kind as said: 'pool', 'image', 'ec profile', 'rgw user', 'rgw placement', 'S3 bucket'."""
    return {"k8s": "Kubernetes object", "s3_bucket": "S3 bucket"}.get(kind, kind.replace("_", " "))


def cmd_env(args: argparse.Namespace) -> int:
    for line in LocalCluster(args.dir).env_lines():
        print(line)
    return 0


def attached_status(attached: Attachment) -> dict:
    """Status of a cluster fathom did not start: what the mons say, the processes seen on this host, and the
    hosts, daemons and sources by the cluster's metadata (fathom.servers.inventory)."""
    from fathom.servers import inventory

    ceph = attached.ceph(timeout=30)
    s = ceph.probe(timeout=30)
    osdmap = s["osdmap"].get("osdmap", s["osdmap"])
    df = ceph.ceph("df")
    here = attached.local_daemons()
    return {
        "dir": None, "conf": attached.conn.conf, "fsid": s.get("fsid"), "health": s["health"]["status"],
        "client": attached.conn.client.describe(),
        "health_checks": {k: v["summary"]["message"] for k, v in s["health"].get("checks", {}).items()},
        "osds_up": int(osdmap.get("num_up_osds", 0)), "osds_in": int(osdmap.get("num_in_osds", 0)),
        "daemons": [{"name": d.name, "pid": d.pid, "running": True} for d in here],
        "pools": [{"name": p["name"], "id": p["id"], "stored_bytes": p["stats"].get("stored", 0),
                   "objects": p["stats"].get("objects", 0)} for p in df.get("pools", [])],
        "usage": {k: df["stats"][k] for k in ("total_bytes", "total_used_raw_bytes", "total_avail_bytes")
                  if k in df["stats"]},
        **inventory.gather(ceph, here, timeout=30),
    }
