"""What a run was attached with, kept for `--resume` (fathom.run.reattach): the record, the printed resume command,
and which options a resume takes from the store. No cluster: a results store and a conf and keyring in a temporary
directory (a connection is only checked to name files that exist); tests/test_run.py resumes a real run."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from fathom.cluster.attach import Attachment
from fathom.cluster.ceph import Connection
from fathom.errors import ClusterError
from fathom.results.store import Store
from fathom.run.reattach import command, record, resumed, stored
from fathom.run.work import RunOptions
from fathom.servers.named import servers_from_args


def files(tmp_path: Path, name: str = "ceph") -> tuple[Path, Path]:
    conf, keyring = tmp_path / f"{name}.conf", tmp_path / f"{name}.keyring"
    conf.write_text("[global]\nmon_host = 127.0.0.1:9\n")
    keyring.write_text("[client.admin]\n\tkey = AQBsecretsecretsecretsecretsecretsecretQ==\n")
    return conf, keyring


def attached(tmp_path: Path, **kw) -> RunOptions:
    conf, keyring = files(tmp_path)
    return RunOptions(suite_ref="s.yaml", attach=Attachment(Connection.from_args(str(conf), None, None, str(keyring))),
                      servers=servers_from_args(["root@h1:2222"]), server_args=["--server-host", "root@h1:2222"],
                      prometheus="http://me:pw@prom:9090/", mgr_prometheus=True, **kw)


def test_the_record_holds_paths_and_names_and_the_resume_command_repeats_them(tmp_path):
    conf, keyring = files(tmp_path)
    rec = record(attached(tmp_path))
    assert rec["conn"] == {"conf": str(conf), "name": "client.admin", "keyring": str(keyring)}
    assert rec["servers"]["hosts"][0]["host"] == "h1" and rec["server_args"] == ["--server-host", "root@h1:2222"]
    assert rec["prometheus"] == "http://me@prom:9090/"  # no password is stored (fathom never sends one)
    assert "secret" not in json.dumps(rec) and "pw" not in json.dumps(rec)
    assert command(7, "r.db", rec) == (f"fathom run --resume 7 --db r.db --conf {conf} --client-name client.admin "
                                       f"--keyring {keyring} --server-host root@h1:2222 --prometheus "
                                       "http://me@prom:9090/ --mgr-prometheus")
    assert record(RunOptions(suite_ref="s.yaml")) == {}  # a disposable cluster: nothing to attach again
    assert command(7, "my runs.db", {}) == "fathom run --resume 7 --db 'my runs.db'"


def test_a_bare_resume_takes_what_the_run_was_attached_with_and_given_options_win(tmp_path, capsys):
    first = attached(tmp_path)
    conf = first.attach.conn.conf  # type: ignore[union-attr]
    with Store(tmp_path / "r.db") as st:
        rid = st.create_run("r")
        st.merge_state(rid, attached_with=record(first))
        bare = RunOptions(suite_ref=None, resume="r")
        got = resumed(bare, st)
        assert got.attach is not None and got.attach.conn == first.attach.conn  # type: ignore[union-attr]
        assert got.servers == first.servers and got.server_args == first.server_args
        assert got.prometheus == "http://me@prom:9090/" and got.mgr_prometheus
        err = capsys.readouterr().err
        assert f"resuming run {rid} (r) with what it was attached with, stored with the run, as the command line " \
               f"gives none of it: --conf {conf} --client-name client.admin" in err
        ev = [e for e in st.events(rid) if e["kind"] == "resume"]
        assert len(ev) == 1 and ev[0]["data"]["used"][:2] == ["--conf", conf]

        # the command line's own cluster wins (the rest still comes from the store), and that is said
        other, _ = files(tmp_path, "other")
        given = replace(bare, attach=Attachment(Connection.from_args(str(other), "bench", None, None)))
        got = resumed(given, st)
        assert got.attach.conn.conf == str(other) and got.attach.conn.name == "client.bench"  # type: ignore
        assert got.prometheus == "http://me@prom:9090/"
        assert f"the command line's own options win over the stored --conf {conf}" in capsys.readouterr().err
        # ... but CEPH_CONF alone is no option given: the run's own cluster wins over the environment's
        assert resumed(replace(given, attach_env=True), st).attach.conn.conf == conf  # type: ignore[union-attr]
        assert "CEPH_CONF names a cluster, not the command line" in capsys.readouterr().err

        # not a resume, or nothing stored: the options as given
        assert resumed(replace(bare, resume=None), st) == replace(bare, resume=None)
        plain = st.create_run("disposable")
        st.merge_state(plain, attached_with={})
        assert resumed(replace(bare, resume="disposable"), st) == replace(bare, resume="disposable")

        # a run stored before runs kept the record: its environment's connection
        old = st.create_run("old", env={"cluster": {"kind": "attached", "connection": first.attach.conn.describe()}})
        assert stored(st.run(old)) == {"conn": record(first)["conn"]}
        assert resumed(replace(bare, resume="old"), st).attach.conn == first.attach.conn  # type: ignore

        # a stored conf that is gone: said, with the fix
        Path(conf).unlink()
        with pytest.raises(ClusterError, match=f"run {rid} \\(r\\) was attached with --conf {conf} .*stored with "
                                               "the run: ceph config .* does not exist") as exc:
            resumed(bare, st)
        assert "given options win" in str(exc.value.hint)
