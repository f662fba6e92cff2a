"""The daemons `ceph tell` is sent to (fathom.servers.tell): the pure rules; a real cluster: test_releases."""

from __future__ import annotations

from fathom.servers.tell import named


def test_the_daemons_are_named_from_node_ls_in_number_order() -> None:
    nodes = {"mon": {"h1": ["a"]}, "osd": {"h1": [0, 10], "h2": [2, 1]}, "mds": {"h2": ["fs.h2.x"]}, "mgr": {}}
    assert named(nodes, ("osd", "mds")) == ["mds.fs.h2.x", "osd.0", "osd.1", "osd.2", "osd.10"]
    assert named({}, ("osd",)) == [] and named({"osd": {}}, ("osd",)) == []
