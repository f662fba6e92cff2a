"""Where a local cluster's daemons come from (fathom.cluster.cephsrc) and the cached roots (fathom.cluster.rootfs):
the pure rules. The Reef cluster itself runs in tests/test_reef.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fathom.cluster import cephsrc, rootfs
from fathom.cluster.local import _network_lines
from fathom.errors import UsageError


def test_a_directory_is_a_build_tree_or_a_root_by_where_ceph_mon_is(tmp_path):
    build, root = tmp_path / "build", tmp_path / "root"
    (build / "bin").mkdir(parents=True)
    (build / "bin/ceph-mon").write_text("")
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/ceph-mon").write_text("")
    assert cephsrc.resolve(str(build)) == cephsrc.CephSource("build", str(build))
    assert cephsrc.resolve(str(root)) == cephsrc.CephSource("rootfs", str(root))
    assert cephsrc.resolve(None) == cephsrc.HOST
    with pytest.raises(UsageError, match="neither a Ceph build directory"):
        cephsrc.resolve(str(tmp_path))
    # programs the source lacks are named; the host's client tools are not asked of it
    assert cephsrc.missing_programs(cephsrc.CephSource("build", str(build)), ["ceph", "ceph-mon", "ceph-osd"]) \
        == ["ceph-osd"]


def test_a_release_name_needs_its_cached_root(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert rootfs.cache_dir() == tmp_path / "fathom/ceph"
    with pytest.raises(UsageError, match="no cached reef root") as exc:
        cephsrc.resolve("reef")
    assert "fathom cluster rootfs reef" in (exc.value.hint or "")
    r = rootfs.root_path("reef")
    (r / "usr/bin").mkdir(parents=True)
    (r / "usr/bin/ceph-mon").write_text("")
    (r.parent / rootfs.INFO).write_text('{"release": "reef"}')
    assert cephsrc.resolve("reef") == cephsrc.CephSource("rootfs", str(r))


def test_a_build_tree_gets_vstarts_paths_on_the_daemons_command_line(tmp_path):
    src, build = tmp_path / "src-tree", tmp_path / "build"
    (src / "src/pybind/mgr").mkdir(parents=True)
    (build / "lib/cython_modules/lib.3").mkdir(parents=True)
    (build / "CMakeCache.txt").write_text(f"ceph_SOURCE_DIR:STATIC={src}\n")
    args = cephsrc.build_args(build)
    lib = str(build / "lib")
    for opt in ("--plugin-dir", "--erasure-code-dir", "--osd-class-dir"):
        assert args[args.index(opt) + 1] == lib
    assert args[args.index("--mgr-module-path") + 1] == str(src / "src/pybind/mgr")
    env = cephsrc.build_env(build, {"LD_LIBRARY_PATH": "/x"})
    assert env["LD_LIBRARY_PATH"] == f"{lib}:/x"
    assert env["PYTHONPATH"].split(":") == [str(build / "lib/cython_modules/lib.3"), str(src / "src/pybind")]
    # without CMakeCache.txt: the source tree beside the build directory, as vstart.sh run in it finds it
    (build / "CMakeCache.txt").unlink()
    (tmp_path / "src/pybind/mgr").mkdir(parents=True)
    assert cephsrc.mgr_module_path(build) == tmp_path / "src/pybind/mgr"


def test_the_holder_is_known_by_pid_and_start_time_not_by_pid_alone(tmp_path):
    p = subprocess.Popen(["sleep", "30"])
    try:
        me = {"pid": p.pid, "start": cephsrc._start_time(p.pid)}
        assert cephsrc.holder_alive(me, tmp_path)
        assert not cephsrc.holder_alive({"pid": p.pid, "start": me["start"] - 1}, tmp_path)  # a recycled pid
        assert not cephsrc.holder_alive(None, tmp_path)
    finally:
        p.kill()
        p.wait()
    assert not cephsrc.holder_alive(me, tmp_path)


MGR_UTIL = '''import os
import bcrypt
import socket


def password_hash(password: Optional[str], salt_password: Optional[str] = None) -> Optional[str]:
    if not password:
        return None
    return bcrypt.hashpw(password.encode('utf8'), salt).decode('utf8')
'''


def test_the_mgr_bcrypt_import_moves_into_the_one_function_that_uses_it(tmp_path):
    new = rootfs.move_bcrypt_import(MGR_UTIL)
    assert "\nimport bcrypt\n" not in new
    body = new.split("def password_hash", 1)[1]
    assert body.splitlines()[1].strip().startswith("import bcrypt")
    compile(new, "mgr_util.py", "exec")
    assert rootfs.move_bcrypt_import(new) == new  # idempotent
    f = tmp_path / "usr/share/ceph/mgr/mgr_util.py"
    f.parent.mkdir(parents=True)
    f.write_text(MGR_UTIL)
    assert rootfs.patch_root(tmp_path) == [rootfs.BCRYPT_NOTE]
    assert rootfs.patch_root(tmp_path) == []  # done once, recorded once


def test_the_public_network_holds_the_places_addresses():
    """From Reef on, an OSD outside public_network is reported unreachable (HEALTH_ERR)."""
    assert _network_lines("127.0.0.1") == "public_network = 127.0.0.0/8"
    assert _network_lines("10.1.0.1", ["10.1.0.11", "10.1.0.12"]).splitlines() == [
        "public_network = 10.1.0.1/32, 10.1.0.11/32, 10.1.0.12/32", "public_addr = 10.1.0.1"]


def test_the_cache_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert rootfs.root_path("reef") == Path(os.path.expanduser("~")) / ".cache/fathom/ceph/reef/root"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert rootfs.root_path("reef") == tmp_path / "fathom/ceph/reef/root"
