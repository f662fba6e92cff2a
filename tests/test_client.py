"""Whose Ceph client fathom runs (fathom.cluster.client) and the key types a client can read (fathom.cluster.keys):
the pure rules. The clients themselves run against real clusters in tests/test_releases.py."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import pytest

from fathom.cluster import client, keys
from fathom.cluster.ceph import Connection, conf_keyring
from fathom.engine_spec import Connection as SpecConnection
from fathom.errors import UsageError


def keyring(path: Path, name: str, key_type: int, secret_len: int) -> Path:
    """A keyring with one key of the given CryptoKey type (its encoding: u16 type, u32+u32 created, u16 length)."""
    raw = struct.pack("<HIIH", key_type, 1, 2, secret_len) + b"\x07" * secret_len
    path.write_text(f"[{name}]\n\tkey = {base64.b64encode(raw).decode()}\n")
    return path


def test_key_types_are_read_from_the_keyring_and_only_an_older_client_is_told(tmp_path: Path) -> None:
    new = keyring(tmp_path / "new", "client.admin", 2, 32)
    old = keyring(tmp_path / "old", "client.admin", 1, 16)
    assert keys.key_type(str(new), "client.admin") == "aes256k"
    assert keys.key_type(str(old), "client.admin") == "aes"
    assert keys.key_type(str(new), "client.other") is None and keys.key_type(str(tmp_path / "none"), "x") is None
    why = keys.unreadable_key(str(new), "client.admin", 16, "")
    assert why and "aes256k" in why and "Ceph 16" in why
    assert keys.unreadable_key(str(new), "client.admin", 20, "Malformed input") is None  # a Tentacle client reads it
    assert keys.unreadable_key(str(old), "client.admin", 16, "") is None
    # no keyring to look at: the older client's own words say it
    assert keys.unreadable_key(None, "client.admin", 16, "error reading file: Malformed input") is not None
    assert keys.unreadable_key(None, "client.admin", 16, "connection refused") is None


def test_a_newer_client_keeps_the_release_s_key_type_and_an_older_one_gets_aes() -> None:
    helps = {"monmaptool": "--auth-allowed-ciphers", "ceph-authtool": "--key-type"}
    assert keys.cipher_args(lambda prog: helps[prog], 20) == ([], [])
    key_type, ciphers = keys.cipher_args(lambda prog: helps[prog], 16)
    assert key_type == ["--key-type", "aes"] and "--auth-preferred-cipher" in ciphers
    assert keys.cipher_args(lambda prog: "", 16) == ([], [])  # tools before Ceph 20: one key type, nothing to choose


def test_a_root_s_programs_run_through_its_loader_and_the_ceph_cli_on_its_python(tmp_path: Path) -> None:
    c = client.Client(client.ROOTFS_KIND, str(tmp_path), "tentacle")
    rados = c.argv("rados")
    assert rados[0] == str(tmp_path / "lib64/ld-linux-x86-64.so.2") and rados[1] == "--library-path"
    assert rados[-1] == str(tmp_path / "usr/bin/rados")
    assert rados[2].split(":")[0] == str(tmp_path / "usr/lib/x86_64-linux-gnu/ceph")
    assert c.argv("ceph")[-2:] == [str(tmp_path / "usr/bin/python3"), str(tmp_path / "usr/bin/ceph")]
    assert c.env({"PYTHONPATH": "/mine"})["PYTHONHOME"] == str(tmp_path / "usr")
    assert "PYTHONPATH" not in c.env({"PYTHONPATH": "/mine"})
    assert c.engine_argv("/e")[-1] == "/e" and c.engine_argv("/e")[0] == rados[0]
    assert c.library_dir() == str(tmp_path.resolve())
    b = client.Client(client.BUILD_KIND, str(tmp_path))
    assert b.argv("rbd") == [str(tmp_path / "bin/rbd")] and b.engine_argv("/e") == ["/e"]
    assert b.engine_env({})["LD_LIBRARY_PATH"] == str(tmp_path / "lib")
    assert client.HOST.argv("rados") == ["rados"] and client.HOST.library_dir() is None
    assert client.HOST.env({"A": "1"}) == {"A": "1"}


def test_a_client_is_named_by_host_a_release_or_a_directory(tmp_path: Path) -> None:
    assert client.resolve(None) is client.HOST and client.resolve("host") is client.HOST
    (tmp_path / "usr/bin").mkdir(parents=True)
    for prog in ("ceph", "rados"):
        (tmp_path / "usr/bin" / prog).write_text("")
    assert client.resolve(str(tmp_path)) == client.Client(client.ROOTFS_KIND, str(tmp_path))
    with pytest.raises(UsageError, match="neither|not `host`"):
        client.resolve(str(tmp_path / "usr"))
    build = tmp_path / "build"
    (build / "bin").mkdir(parents=True)
    assert client.of_source({"kind": "build", "dir": str(build)}) is client.HOST  # its daemons only
    (build / "bin/ceph").write_text("")
    assert client.of_source({"kind": "build", "dir": str(build)}) == client.Client(client.BUILD_KIND, str(build))
    assert client.of_source({"kind": "host"}) is client.HOST


def test_the_engine_spec_names_the_client_s_library_directory(tmp_path: Path) -> None:
    conn = Connection(conf="/c", client=client.Client(client.ROOTFS_KIND, str(tmp_path)))
    assert SpecConnection.of(conn).to_json()["library_dir"] == str(tmp_path.resolve())
    assert "library_dir" not in SpecConnection.of(Connection(conf="/c")).to_json()


def test_the_keyring_a_client_finds_without_keyring_is_the_conf_s(tmp_path: Path) -> None:
    kr = tmp_path / "ceph.client.admin.keyring"
    kr.write_text("")
    conf = tmp_path / "ceph.conf"
    conf.write_text(f"[global]\n  fsid = x\n[client]\n  keyring = {tmp_path}/$cluster.$name.keyring\n")
    assert conf_keyring(str(conf), "client.admin") == str(kr)
    conf.write_text(f"[client.admin]\nkeyring = {tmp_path}/missing, {kr}\n")  # the first that exists
    assert conf_keyring(str(conf), "client.admin") == str(kr)
