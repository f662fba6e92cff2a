"""Preparing RGW for a study: a placement target per data-protection scheme, users, pinned index shards, purges.

A scheme's placement target (`<name>-placement`) has its own data pool (replicated
or erasure-coded) and shares a replicated index pool and data-extra pool (EC pools
have no omap: the bucket index and incomplete multipart uploads need replicated
pools). A bucket picks its placement at creation through its LocationConstraint
(`default:<name>-placement`, see `location()`), so the head and the data of every
object go to that scheme's pool; a storage class instead would keep heads in the
STANDARD pool. Placement changes take effect when RGW restarts (`restart`).

Users and placements fathom makes are written to the run's undo journal first (kinds
`rgw_user`, `rgw_placement`; a user's buckets go with it) and `cleanup()` removes exactly
those; index shards and resharding are settings the Prep's Restorer writes down and puts back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fathom.cluster.journal import RGW_KINDS
from fathom.cluster.prep import Prep
from fathom.errors import ClusterError

ZONEGROUP, ZONE = "default", "default"


def placement_id(scheme: str) -> str:
    return f"{scheme}-placement"


def location(scheme: str) -> str:
    """The LocationConstraint that puts a new bucket on the scheme's placement target."""
    return f"{ZONEGROUP}:{placement_id(scheme)}"


def add_placement(prep: Prep, scheme: str, data_pool: str, index_pool: str, extra_pool: str) -> str:
    """Add the placement target `<scheme>-placement` (zonegroup and zone) over existing pools; returns its id."""
    pid = placement_id(scheme)
    ceph = prep.ceph
    zg = ceph.radosgw_admin("zonegroup", "get", "--rgw-zonegroup", ZONEGROUP, timeout=60)
    if any(t.get("name") == pid for t in zg.get("placement_targets", [])) and pid not in prep.made("rgw_placement"):
        raise ClusterError(f"RGW placement target {pid} exists and fathom did not create it",
                           hint="choose another scheme name, or remove it with radosgw-admin zonegroup placement rm")
    prep.journal.note("rgw_placement", pid)
    ceph.radosgw_admin("zonegroup", "placement", "add", "--rgw-zonegroup", ZONEGROUP, "--placement-id", pid,
                       timeout=60)
    ceph.radosgw_admin("zone", "placement", "add", "--rgw-zone", ZONE, "--placement-id", pid,
                       "--data-pool", data_pool, "--index-pool", index_pool, "--data-extra-pool", extra_pool,
                       timeout=60)
    prep.progress(f"RGW placement {pid}: data {data_pool}, index {index_pool}, data-extra {extra_pool}")
    return pid


def restart_local_rgw(cluster: Any, timeout: float = 90.0) -> None:
    """Restart the local cluster's RGWs (by pid) so zone and zonegroup changes take effect; wait until each
    answers."""
    import time

    from fathom.cluster.local import _http_answers
    from fathom.cluster.localconf import rgw_addr, rgw_names

    st = cluster.state() or {}
    names = rgw_names(st)
    cluster.stop_daemons(names=names)
    for name in names:
        cluster.start_daemon(name)
    deadline = time.monotonic() + timeout
    for name in names:
        while not _http_answers(rgw_addr(st, name), st["rgw_port"]):
            if time.monotonic() > deadline:
                raise ClusterError(f"{name} did not answer on port {st['rgw_port']} within {timeout:.0f} s of a "
                                   "restart", hint=f"see {cluster.log_dir}/{name}.out")
            time.sleep(0.5)


def placements(prep: Prep) -> dict[str, dict[str, Any]]:
    """The zone's placement targets as RGW has them: id -> {data_pool, index_pool, data_extra_pool}."""
    zone = prep.ceph.radosgw_admin("zone", "get", "--rgw-zone", ZONE, timeout=60)
    out = {}
    for p in zone.get("placement_pools", []):
        v = p.get("val", {})
        data = (v.get("storage_classes", {}).get("STANDARD") or {}).get("data_pool") or v.get("data_pool")
        out[p["key"]] = {"data_pool": data, "index_pool": v.get("index_pool"),
                         "data_extra_pool": v.get("data_extra_pool")}
    return out


def pin_index_shards(prep: Prep, shards: int = 11) -> None:
    """Every new bucket gets `shards` index shards and keeps them: dynamic resharding off (restored at the end)."""
    prep.restorer.config_set("client", "rgw_override_bucket_index_max_shards", str(shards))
    prep.restorer.config_set("client", "rgw_dynamic_resharding", "false")
    prep.settings.update({"client rgw_override_bucket_index_max_shards": str(shards),
                          "client rgw_dynamic_resharding": "false"})


def create_user(prep: Prep, uid: str, keys_path: Path, endpoint: str, region: str = "default") -> Path:
    """An S3 user of fathom's own, its keys in a 0600 JSON file (the only place they are written)."""
    if uid in prep.made("rgw_user"):
        return keys_path
    existing = prep.ceph.radosgw_admin("user", "list", timeout=60) or []
    if uid in existing:
        raise ClusterError(f"RGW user {uid} exists and fathom did not create it", hint="choose another user id")
    prep.journal.note("rgw_user", uid)
    # RGW makes the keys: they are never on a command line (ps, error messages); only its JSON answer holds them
    info = prep.ceph.radosgw_admin("user", "create", "--uid", uid, "--display-name", f"fathom {uid}", timeout=60)
    k = next((k for k in (info or {}).get("keys", []) if k.get("user") == uid), None)
    if not k:
        raise ClusterError(f"radosgw-admin user create --uid {uid} returned no S3 keys")
    access, secret = k["access_key"], k["secret_key"]
    keys_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(keys_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"endpoint": endpoint, "access_key": access, "secret_key": secret, "user": uid,
                   "region": region}, f)
    return keys_path


def purge_bucket(prep: Prep, bucket: str) -> None:
    """Remove a bucket and its objects at once, bypassing GC (deleted tails would otherwise wait there for
    rgw_gc_obj_min_wait, 2 h by default, and be collected during a later point). Only buckets of fathom's users."""
    owner = (prep.ceph.radosgw_admin("bucket", "stats", "--bucket", bucket, timeout=60) or {}).get("owner")
    if owner not in prep.made("rgw_user"):
        raise ClusterError(f"bucket {bucket} belongs to {owner!r}, not to a user fathom created: not removing it")
    prep.ceph.radosgw_admin("bucket", "rm", "--bucket", bucket, "--purge-objects", "--bypass-gc", fmt_json=False,
                            timeout=3600)


def cleanup(prep: Prep) -> dict[str, list[str]]:
    """Remove fathom's RGW users (with their buckets and objects, bypassing GC) and placement targets, newest
    first, each marked undone in the journal; nothing else. What is already gone is skipped."""
    removed: dict[str, list[str]] = {"rgw_users": [], "rgw_placements": []}
    todo = prep.journal.pending(*RGW_KINDS)
    ceph = prep.ceph
    users = set(ceph.radosgw_admin("user", "list", timeout=60) or []) if todo else set()
    for e in todo:
        if e.kind == "rgw_user" and e.what in users:
            for b in ceph.radosgw_admin("bucket", "list", "--uid", e.what, timeout=60) or []:
                ceph.radosgw_admin("bucket", "rm", "--bucket", b, "--purge-objects", "--bypass-gc",
                                   fmt_json=False, timeout=3600)
            ceph.radosgw_admin("user", "rm", "--uid", e.what, "--purge-data", fmt_json=False, timeout=600)
            removed["rgw_users"].append(e.what)
        elif e.kind == "rgw_placement":
            ceph.radosgw_admin("zone", "placement", "rm", "--rgw-zone", ZONE, "--placement-id", e.what,
                               fmt_json=False, check=False, timeout=60)
            ceph.radosgw_admin("zonegroup", "placement", "rm", "--rgw-zonegroup", ZONEGROUP, "--placement-id",
                               e.what, fmt_json=False, check=False, timeout=60)
            removed["rgw_placements"].append(e.what)
        prep.journal.mark(e)
    return removed


# ---- a suite's RGW preparation (prep.rgw) and the purge between points ---------------------

def write_keys(prep: Prep, uid: str, keys_path: Path, endpoint: str, region: str = "default") -> Path:
    """The keys file of a user fathom made earlier (a resumed run's new scratch directory has none yet)."""
    info = prep.ceph.radosgw_admin("user", "info", "--uid", uid, timeout=60) or {}
    k = next((k for k in info.get("keys", []) if k.get("user") == uid), None)
    if not k:
        raise ClusterError(f"RGW user {uid} has no S3 keys", hint="start a new run of the suite")
    keys_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(keys_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"endpoint": endpoint, "access_key": k["access_key"], "secret_key": k["secret_key"], "user": uid,
                   "region": region}, f)
    return keys_path


def prepare(prep: Prep, spec: Any, pools: dict[str, str], local: Any, tag: str, attached: bool,
            workdir: Path) -> dict[str, Any]:
    """A suite's prep.rgw on fathom's local cluster: a placement target per scheme over the prepared pools,
    index shards pinned (resharding off), RGW restarted so they take effect, and a user of the run's own.
    Returns what the s3 interface needs per point (paths and names only, no key material)."""
    if local is None:
        raise ClusterError("prep.rgw needs fathom's local cluster (its RGW is restarted so new placement targets "
                           "take effect, and its endpoints are known)",
                           hint="run on a disposable cluster (cluster: {kind: local, rgw: true}) or attach to one "
                                "from `fathom cluster up --rgw` with --conf")
    s3 = local.s3()
    if not s3:
        raise ClusterError(f"the local cluster in {local.root} has no RGW",
                           hint="start it with `fathom cluster up --rgw`, or let the run start one (rgw: true)")
    schemes: dict[str, str] = {}
    have = placements(prep)
    for name, pl in spec.placements.items():
        scheme = f"{tag}-{name}" if attached else name  # on a shared cluster every name carries the run's tag
        pid = placement_id(scheme)
        if pid in have and pid in prep.made("rgw_placement"):
            schemes[name] = location(scheme)
            continue
        add_placement(prep, scheme, pools[pl.data_pool], pools[pl.index_pool], pools[pl.data_extra_pool])
        schemes[name] = location(scheme)
    pin_index_shards(prep, spec.index_shards)
    restart_local_rgw(local)
    got = placements(prep)
    for name, loc in schemes.items():
        pl = spec.placements[name]
        want = {"data_pool": pools[pl.data_pool], "index_pool": pools[pl.index_pool],
                "data_extra_pool": pools[pl.data_extra_pool]}
        pid = loc.split(":", 1)[1]
        if got.get(pid) != want:
            raise ClusterError(f"RGW placement {pid} is {got.get(pid)}, not {want}",
                               hint="check `radosgw-admin zone get`; another process may have changed the zone")
    uid = tag
    keys = workdir / "s3-keys.json"
    if uid in prep.made("rgw_user") and uid in (prep.ceph.radosgw_admin("user", "list", timeout=60) or []):
        write_keys(prep, uid, keys, s3["endpoint"])
    else:
        create_user(prep, uid, keys, s3["endpoint"])
    prep.progress(f"RGW ready: placements {', '.join(f'{n} ({loc})' for n, loc in schemes.items())}, "
                  f"{spec.index_shards} index shards, user {uid}")
    return {"keys_file": str(keys), "user": uid, "placements": schemes, "endpoint": s3["endpoint"],
            "tls_endpoint": s3.get("tls_endpoint"), "ca_file": s3.get("ca_file"), "bucket_tag": tag,
            **{k: s3[k] for k in ("endpoints", "tls_endpoints") if s3.get(k)}}


def purge_user_buckets(prep: Prep, uid: str) -> list[str]:
    """Remove every bucket of a user fathom made, objects included, bypassing GC: a PUT point then starts on
    empty buckets, never overwriting (overwritten tails would go to GC) and never short of space."""
    if uid not in prep.made("rgw_user"):
        raise ClusterError(f"user {uid} was not made by fathom: not purging its buckets")
    buckets = prep.ceph.radosgw_admin("bucket", "list", "--uid", uid, timeout=60) or []
    for b in buckets:
        prep.ceph.radosgw_admin("bucket", "rm", "--bucket", b, "--purge-objects", "--bypass-gc", fmt_json=False,
                                timeout=3600)
    return list(buckets)
