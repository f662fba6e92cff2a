"""The undo journal (cluster/journal.py): written before, undone newest first, adopted on its own cluster only;
the records it replaced (prep's ledger, the settings record, mounts.json) read into it. No cluster needed."""

from __future__ import annotations

import json

import pytest

from fathom.cluster import mounts
from fathom.cluster.journal import Entry, Journal
from fathom.cluster.local import LocalCluster
from fathom.results.migrate import journal_from_legacy


def test_journal_round_trips_with_its_cluster():
    j = Journal(entries=[Entry("ec_profile", "p-ec"), Entry("pool", "p"), Entry("image", "p/img0", undone=True)],
                fsid="f-1", conn={"conf": "/c"})
    back = Journal.from_dict(j.to_dict())
    assert back.entries == j.entries and back.fsid == "f-1" and back.conn == {"conf": "/c"}
    assert [e.what for e in back.pending()] == ["p", "p-ec"] and back.names("image") == []
    assert Journal.from_dict({}).entries == [] and Journal.from_dict(None).fsid is None


def test_journal_writes_each_thing_once_and_before_it_is_done():
    saved: list[dict] = []
    j = Journal(saved.append)
    j.note("loop", "/f")
    j.note("loop", "/f", dev="/dev/loop3")  # the device, learnt after attaching, joins its entry
    j.note("pool", "p")
    assert [e.to_dict() for e in j.entries] == [{"kind": "loop", "what": "/f", "undone": False,
                                                 "data": {"dev": "/dev/loop3"}},
                                                {"kind": "pool", "what": "p", "undone": False}]
    assert len(saved) == 3 and saved[-1]["entries"] == [e.to_dict() for e in j.entries]
    j.drop("pool", "p")
    assert not j.holds("pool", "p") and j.pending() == [j.entries[0]]
    j.note("pool", "p")  # made again after it was removed: a new entry, the old one stays as history
    assert [e.undone for e in j.entries] == [False, True, False]


def test_legacy_ledger_and_restore_record_become_one_journal():
    state = {"prep_created": {"pools": ["fathom-7-x-a"], "ec_profiles": ["fathom-7-x-ec"],
                              "images": ["fathom-7-x-a/img0"], "fsid": "f-1", "rgw_users": ["fathom-7-x"],
                              "rgw_placements": ["s-placement"]},
             "restore": {"fsid": "f-1", "conn": {"conf": "/c"}, "disposable": False, "host": "h", "pid": 9,
                         "moot": None, "entries": [{"what": "osd flag noscrub", "prior": "unset", "wanted": "set",
                                                    "command": "ceph osd unset noscrub", "restored": True}]}}
    j = Journal.from_dict(journal_from_legacy(state, 7))
    assert j.fsid == "f-1" and j.conn == {"conf": "/c"}
    assert [(e.kind, e.what) for e in j.pending()] == [("rgw_user", "fathom-7-x"), ("rgw_placement", "s-placement"),
                                                        ("image", "fathom-7-x-a/img0"), ("pool", "fathom-7-x-a"),
                                                        ("ec_profile", "fathom-7-x-ec")]
    s = j.entries[-1]
    assert (s.kind, s.undo, s.prior, s.undone) == ("setting", "ceph osd unset noscrub", "unset", True)
    # a ledger that named no cluster: only what carries the run's name is the run's
    old = Journal.from_dict(journal_from_legacy({"prep_created": {"pools": ["fathom-7-x-a", "users-pool"]}}, 7))
    assert old.names("pool") == ["fathom-7-x-a"] and old.fsid is None
    assert journal_from_legacy({"data_tag": "t"}, 7) is None



def test_an_attempt_adopts_the_journal_of_its_own_cluster_only(tmp_path):
    from fathom.run.attempt import Attempt
    from fathom.errors import ClusterError
    from fathom.results.store import Store

    setting = {"kind": "setting", "what": "osd flag noscrub", "undo": "ceph osd unset noscrub", "prior": "unset",
               "wanted": "set", "undone": False}
    pool = {"kind": "pool", "what": "fathom-1-x-p", "undone": False}
    with Store(tmp_path / "j.db") as st:
        rid = st.create_run("r")

        def journal(rec: dict | None, fsid: str = "f-1") -> Journal:
            st.merge_state(rid, journal=rec)
            a = Attempt.begin(st, rid, 1, lambda m: None)
            try:
                return a.journal(fsid, {"conf": "/c"}, disposable=False)
            finally:
                a.close()

        same = journal({"fsid": "f-1", "entries": [pool, setting]})
        assert [e.what for e in same.pending()] == ["osd flag noscrub", "fathom-1-x-p"]
        assert st.run(rid).state["journal"]["fsid"] == "f-1"
        with pytest.raises(ClusterError, match="another cluster") as exc:
            journal({"fsid": "f-0", "conn": {"conf": "/old"}, "entries": [pool, setting]})
        assert "fathom cluster restore --conf /old" in str(exc.value.hint)
        # a stopped disposable cluster: gone with what was made and changed on it
        assert journal({"fsid": "f-0", "disposable": True, "entries": [pool, setting]}).pending() == []
        # objects alone on another attached cluster are not here: dropped, and said so
        assert journal({"fsid": "f-0", "entries": [pool]}).pending() == []
        assert any("not adopted" in e["message"] for e in st.events(rid))
        # a journal that named no cluster keeps what carries the run's name
        legacy = journal({"entries": [pool, {**pool, "what": "users-pool"}]})
        assert legacy.names("pool") == ["fathom-1-x-p"] and legacy.fsid == "f-1"


def test_a_local_clusters_mounts_record_of_before_becomes_its_journal(tmp_path):
    (tmp_path / mounts.LEGACY).write_text(json.dumps([
        {"kind": "fuse", "name": "rbd_fuse.fs", "path": str(tmp_path / "mnt/rbd-fuse")},
        {"kind": "loop", "file": str(tmp_path / "mnt/rbd-fuse/img"), "dev": "/dev/loop7"},
        {"kind": "mount", "path": str(tmp_path / "mnt/rbd-ext4")}, {"kind": "daemon", "name": "ganesha.nfs"}]))
    j = mounts.journal(LocalCluster(tmp_path))
    assert [(e.kind, e.what) for e in j.pending()] == [
        ("daemon", "ganesha.nfs"), ("mount", str(tmp_path / "mnt/rbd-ext4")),
        ("loop", str(tmp_path / "mnt/rbd-fuse/img")), ("fuse", "rbd_fuse.fs")]
    assert j.pending()[2].data == {"dev": "/dev/loop7"}
    assert not (tmp_path / mounts.LEGACY).exists()  # read once: the journal file holds it now
    assert mounts.journal(LocalCluster(tmp_path)).to_dict()["entries"] == j.to_dict()["entries"]


def test_s3_requests_are_signed_as_aws_signs_them(tmp_path):
    """fathom.cluster.buckets' SigV4 signer on AWS's own example (S3 API reference, "GET Object" with a Range)."""
    from fathom.cluster.buckets import Client

    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"access_key": "AKIAIOSFODNN7EXAMPLE", "region": "us-east-1",
                                "secret_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}))
    c = Client("https://examplebucket.s3.amazonaws.com", str(keys))
    h = c._headers("GET", "/test.txt", {}, b"", {"Range": "bytes=0-9"}, amz="20130524T000000Z")
    assert h["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    assert "wJalr" not in repr(c.__dict__.get("url")) and c.region == "us-east-1"


def test_s3_buckets_are_journaled_once_and_removed_by_what_the_journal_says(tmp_path):
    """What a run wrote is its prefix's objects only; a bucket pending in the journal keeps its record (no request);
    a bucket of an RGW user fathom made goes with the user; on a full cluster nothing is tried, all is left."""
    from fathom.cluster import buckets
    from fathom.cluster.journal import S3_KIND

    keys = ["fathom-7-ab12cd/0/0", "fathom-7-ab12cd.meta", "fathom-7-ab12cd.host-b.0/1/5", "fathom-7-ab12cde/0/0",
            "fathom-7-ab12cd", "theirs/fathom-7-ab12cd/0", "fathom-7-ab12"]
    assert buckets.run_objects(keys, "fathom-7-ab12cd") == keys[:3]
    j = Journal()
    j.note("rgw_user", "fathom-7-ab12cd")
    mine = j.note(S3_KIND, "b-0", endpoint="http://127.0.0.1:1", keys_file=str(tmp_path / "none.json"),
                  prefix="fathom-7-ab12cd", made=True, user="fathom-7-ab12cd")
    # pending: kept as recorded, no keys file read, no request sent
    assert buckets.claim(j, "b-0", "fathom-7-ab12cd", None, str(tmp_path / "none.json")) is mine
    j.note(S3_KIND, "b-1", endpoint="http://127.0.0.1:1", keys_file=str(tmp_path / "none.json"),
           prefix="fathom-7-ab12cd", made=False)
    said: list[str] = []
    assert buckets.remove(j, said.append, full=lambda: "POOL_FULL: 1 pool(s) full") == \
        ([], ["S3 bucket b-1 (POOL_FULL: 1 pool(s) full: deletes would wait)",
              "S3 bucket b-0 (POOL_FULL: 1 pool(s) full: deletes would wait)"])
    assert len(j.pending(S3_KIND)) == 2 and said == []
    done, left = buckets.remove(j, said.append)
    assert done == said == ["S3 bucket b-0 goes with RGW user fathom-7-ab12cd, which fathom made"]
    assert left == [f"S3 bucket b-1 (S3 keys file {tmp_path / 'none.json'}: No such file or directory)"]
    assert [e.what for e in j.pending(S3_KIND)] == ["b-1"] and "No such file" in j.pending(S3_KIND)[0].error
