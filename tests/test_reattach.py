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


def test_the_client_hosts_and_the_client_ceph_are_kept_and_given_back_as_given(tmp_path, capsys):
    import argparse

    from fathom.cli.clientargs import add_client_args
    from fathom.cluster import client
    from fathom.hosts.clients import ClientChoice

    p = argparse.ArgumentParser()
    add_client_args(p)
    (tmp_path / "kube").write_text("")
    argv = ["--client", "root@h1", "--client", "local", "--k8s-pods", "2", "--kubeconfig", str(tmp_path / "kube"),
            "--k8s-node-selector", "a=b", "--k8s-limits", "cpu=2,memory=1Gi", "--rook-namespace", "rook-ceph",
            "--on-client-loss", "fail", "--accept-new-host-keys"]
    choice = ClientChoice.of(p.parse_args(argv))
    first = attached(tmp_path)
    first.clients = choice
    root = tmp_path / "root"  # a root file system with a Ceph client, as --client-ceph DIR names one
    (root / "usr/bin").mkdir(parents=True)
    for prog in ("ceph", "rados"):
        (root / "usr/bin" / prog).write_text("")
    first.attach.conn = first.attach.conn.with_client(client.resolve(str(root)))  # type: ignore[union-attr]
    rec = record(first)
    assert rec["conn"]["client_ceph"] == str(root)
    words = command(7, "r.db", rec).split()
    assert words[words.index("--client-ceph") + 1] == str(root)
    # the words parse back into the same choice
    again = ClientChoice.of(p.parse_args(ClientChoice.from_dict(rec["clients"]).words()))
    assert again == choice
    with Store(tmp_path / "r.db") as st:
        rid = st.create_run("r")
        st.merge_state(rid, attached_with=rec)
        got = resumed(RunOptions(suite_ref=None, resume="r"), st)
        assert got.clients == choice and got.attach.conn.client == client.resolve(str(root))  # type: ignore[union-attr]
        given = ClientChoice.of(p.parse_args(["--client", "root@h2"]))
        assert resumed(RunOptions(suite_ref=None, resume="r", clients=given), st).clients == given  # given wins


def test_a_known_hosts_file_for_server_and_client_hosts_is_said_once_in_the_resume_command():
    rec = {"servers": {"hosts": []}, "server_args": ["--server-host", "root@h1", "--known-hosts", "/k"],
           "clients": {"clients": [], "known_hosts": "/k"}}
    words_ = command(3, "r.db", rec).split()
    assert words_.count("--known-hosts") == 1 and words_[words_.index("--known-hosts") + 1] == "/k", words_
