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
