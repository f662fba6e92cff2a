"""RGW preparation on a real 4-OSD local cluster with RGW: placement targets for replica 3 and EC 2+2
(failure domain osd), a user of fathom's own, pinned index shards, a purge that bypasses GC, and a cleanup
that removes exactly what fathom made."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fathom.cluster import health, rgw
from fathom.cluster.prep import Prep
from fathom.errors import ClusterError


@pytest.fixture(scope="module")
def four_osds(shared_rgw_cluster4):
    """conftest's 4-OSD cluster with RGW, shared with test_rgw_suite (this test removes all it makes)."""
    return shared_rgw_cluster4


def engine_put(engine: Path, tmp_path: Path, keys: Path, bucket: str, placement: str) -> dict:
    spec = {"protocol": 2, "target": {"kind": "s3", "keys_file": str(keys), "buckets": [bucket], "op": "put",
                                      "create_buckets": True, "location_constraint": rgw.location(placement),
                                      "prefix": "p", "object_size": 65536, "objects": 6},
            "load": {"iodepth": 2}}
    f = tmp_path / f"{bucket}.json"
    f.write_text(json.dumps(spec))
    p = subprocess.run([str(engine), str(f)], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    return next(json.loads(x) for x in p.stdout.splitlines() if x.startswith('{"type":"summary"'))


def test_placements_per_scheme_users_shards_purge_and_cleanup(four_osds, engine_ready, tmp_path):
    ceph = four_osds.ceph()
    prep = Prep(ceph, progress=lambda m: print(m, file=sys.stderr))
    prep.ec_profile("fathom-ec22", 2, 2, "osd")
    prep.pool("fathom.rgw.index", pg_num=8, size=3, application="rgw")
    prep.pool("fathom.rgw.non-ec", pg_num=8, size=3, application="rgw")
    prep.pool("fathom.rgw.rep3", pg_num=16, size=3, application="rgw")
    prep.pool("fathom.rgw.ec22", pg_num=16, application="rgw", ec_profile="fathom-ec22")
    for scheme in ("rep3", "ec22"):
        rgw.add_placement(prep, scheme, f"fathom.rgw.{scheme}", "fathom.rgw.index", "fathom.rgw.non-ec")
    rgw.pin_index_shards(prep, 11)
    rgw.restart_local_rgw(four_osds)
    got = rgw.placements(prep)
    assert got["ec22-placement"] == {"data_pool": "fathom.rgw.ec22", "index_pool": "fathom.rgw.index",
                                     "data_extra_pool": "fathom.rgw.non-ec"}, got
    keys = rgw.create_user(prep, "fathom-prep-test", tmp_path / "keys.json", four_osds.s3()["endpoint"])
    assert keys.stat().st_mode & 0o777 == 0o600 and prep.made("rgw_user") == ["fathom-prep-test"]
    secret = json.loads(keys.read_text())["secret_key"]

    for scheme in ("rep3", "ec22"):
        s = engine_put(engine_ready, tmp_path, keys, f"b-{scheme}", scheme)
        assert s["ops"]["write"]["ops"] == 6 and s["s3"]["buckets_created"] == [f"b-{scheme}"]
        stats = ceph.radosgw_admin("bucket", "stats", "--bucket", f"b-{scheme}")
        assert stats["placement_rule"] == f"{scheme}-placement" and stats["owner"] == "fathom-prep-test", stats
        # every object (head and data) in the scheme's own pool
        names = ceph.rados("-p", f"fathom.rgw.{scheme}", "ls", fmt_json=False).split()
        assert len([n for n in names if n.endswith(tuple(f"p/0/{i}" for i in range(6)))]) == 6, names
    shards = {b["bucket"]: b["num_shards"] for u in ceph.radosgw_admin("bucket", "limit", "check")
              for b in u.get("buckets", [])}
    assert shards == {"b-rep3": 11, "b-ec22": 11}, shards

    rgw.purge_bucket(prep, "b-ec22")
    assert "b-ec22" not in (ceph.radosgw_admin("bucket", "list") or [])
    assert health.gate(ceph, timeout=120, rgw=True).ok  # nothing left to GC

    with pytest.raises(ClusterError, match="still use the pools"):
        prep.cleanup()  # the pools go after what uses them
    removed = rgw.cleanup(prep)
    assert not prep.made("rgw_user") and prep.cleanup()["pools"]
    assert removed["rgw_users"] == ["fathom-prep-test"] and removed["rgw_placements"] == ["ec22-placement",
                                                                                           "rep3-placement"]
    assert "fathom-prep-test" not in ceph.radosgw_admin("user", "list")
    assert "b-rep3" not in (ceph.radosgw_admin("bucket", "list") or [])
    assert {"ec22-placement", "rep3-placement"}.isdisjoint(rgw.placements(prep))
    assert "default-placement" in rgw.placements(prep)  # RGW's own stays
    assert not [p for p in ceph.ceph("osd", "pool", "ls") if p.startswith("fathom.rgw")]
    # the cluster's own user stays, and the test user's secret was written to its keys file only
    assert "fathom" in ceph.radosgw_admin("user", "list")
    logs = b"".join(p.read_bytes() for p in four_osds.log_dir.glob("*") if p.is_file())
    assert secret.encode() not in logs
    prep.restorer.restore(lambda m: None)
