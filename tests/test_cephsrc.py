"""Where a local cluster's daemons come from (fathom.cluster.cephsrc) and the cached roots (fathom.cluster.rootfs):
the pure rules. The clusters of other releases run in tests/test_releases.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fathom.cluster import cephsrc, rootfs
from fathom.cluster.localconf import network_lines
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
    assert network_lines("127.0.0.1") == "public_network = 127.0.0.0/8"
    assert network_lines("10.1.0.1", ["10.1.0.11", "10.1.0.12"]).splitlines() == [
        "public_network = 10.1.0.1/32, 10.1.0.11/32, 10.1.0.12/32", "public_addr = 10.1.0.1"]


def test_the_cache_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert rootfs.root_path("reef") == Path(os.path.expanduser("~")) / ".cache/fathom/ceph/reef/root"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert rootfs.root_path("reef") == tmp_path / "fathom/ceph/reef/root"


def fake_build_tree(tmp: Path) -> Path:
    """This host's Ceph laid out as a build tree is: bin/ with the programs, lib/ with libceph-common, the
    compressor and crypto plugin directories, and the erasure-code and object-class libraries side by side,
    and the mgr's modules at ../src/pybind/mgr."""
    host_lib = Path("/usr/lib/x86_64-linux-gnu")
    build = tmp / "build"
    (build / "bin").mkdir(parents=True)
    (build / "lib").mkdir()
    for prog in ("ceph-mon", "ceph-mgr", "ceph-osd", "ceph-authtool", "monmaptool"):
        (build / "bin" / prog).symlink_to(f"/usr/bin/{prog}")
    for f in (host_lib / "ceph").iterdir():
        if f.name != "erasure-code":
            (build / "lib" / f.name).symlink_to(f)
    for f in [*(host_lib / "ceph/erasure-code").iterdir(), *(host_lib / "rados-classes").iterdir()]:
        (build / "lib" / f.name).symlink_to(f)
    (tmp / "src/pybind").mkdir(parents=True)
    (tmp / "src/pybind/mgr").symlink_to("/usr/share/ceph/mgr")
    return build


@pytest.mark.cluster
def test_a_cluster_from_a_build_tree_runs_its_programs_with_its_libraries_and_plugins(tmp_path):
    """The daemons are the build tree's programs, with its lib/ first on LD_LIBRARY_PATH and vstart.sh's plugin,
    erasure-code, object-class and mgr module paths; the host's clients (`ceph`) work against it as they are."""
    from fathom.cluster.local import LocalCluster, pid_alive

    build = fake_build_tree(tmp_path)
    c = LocalCluster(tmp_path / "cluster")
    c.up(osds=1, osd_size=1024**3, objectstore="memstore", ceph=str(build))
    pids = [d.pid for d in c.daemons()]
    try:
        assert c.source() == cephsrc.CephSource("build", str(build))
        lib = str(build / "lib")
        for d in c.daemons():
            argv = Path(f"/proc/{d.pid}/cmdline").read_bytes().split(b"\0")
            assert argv[0].decode() == str(build / "bin" / f"ceph-{d.kind}"), argv
            environ = Path(f"/proc/{d.pid}/environ").read_bytes().split(b"\0")
            env = dict(kv.split(b"=", 1) for kv in environ if b"=" in kv)
            assert env[b"LD_LIBRARY_PATH"].decode().split(":")[0] == lib
        ceph = c.ceph()

        def running(daemon: str, key: str) -> str:
            # asked of the daemon's admin socket: `ceph config show` answers from what the daemon last reported
            # to the mgr, which a daemon just started may not have done yet (ENOENT)
            asok = tmp_path / f"cluster/run/ceph-{daemon}.asok"
            out = subprocess.run(["ceph", "--admin-daemon", str(asok), "config", "get", key], capture_output=True,
                                 text=True, timeout=30, check=True).stdout
            return json.loads(out)[key]

        for key, want in (("plugin_dir", lib), ("erasure_code_dir", lib), ("osd_class_dir", lib)):
            assert running("osd.0", key) == want, key
        assert running("mgr.x", "mgr_module_path") == str(tmp_path / "src/pybind/mgr")
        # an object class and an erasure-code profile load from the tree's lib/
        ceph.ceph("osd", "pool", "create", "t", "8", fmt_json=False)
        ceph.rados("-p", "t", "lock", "get", "o", "l", fmt_json=False)  # cls_lock
        ceph.ceph("osd", "erasure-code-profile", "set", "p", "k=2", "m=1", "crush-failure-domain=osd",
                  fmt_json=False)
        assert lib not in c.conf_path.read_text()  # the host's clients read the conf: none of the tree's paths
    finally:
        c.down()
    assert not [p for p in pids if p and pid_alive(p)]


def test_run_ceph_is_checked_before_anything_is_made(tmp_path):
    """`fathom run SUITE --ceph X`: a directory that is no Ceph, or an attached cluster, is refused with the fix
    before a cluster starts or a run is stored."""
    from conftest import run_fathom

    db = tmp_path / "r.db"
    p = run_fathom("run", "osd-classic", "--quick", "--ceph", str(tmp_path), "--db", str(db))
    assert p.returncode == 2 and f"--ceph {tmp_path}: neither a Ceph build directory" in p.stderr, p.stderr
    suite = tmp_path / "a.yaml"
    suite.write_text(f"name: a\ncluster: {{kind: attached, conf: {tmp_path}/ceph.conf}}\n"
                     "workloads: [{name: w, interface: null, runtime: 1s}]\n")
    p = run_fathom("run", str(suite), "--ceph", "reef", "--db", str(db))
    assert p.returncode == 2 and "--ceph picks the Ceph the disposable local cluster runs" in p.stderr, p.stderr
    from fathom.results.store import Store

    assert not db.exists() or Store(db).runs() == []


def test_run_ceph_names_the_source_on_the_suites_cluster(tmp_path):
    """An accepted --ceph is set on the loaded suite's (frozen) cluster, so the suite's own cluster starts from it;
    the suite as loaded before is left as it was."""
    from fathom.suite import spec

    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/ceph-mon").write_text("")
    loaded = spec.load("osd-classic", quick=True)
    before = loaded.suite
    spec.use_ceph(loaded, str(root), attached=False)
    assert loaded.suite.cluster.ceph == loaded.ceph == str(root)
    assert before.cluster.ceph is None
    assert loaded.suite.workloads == before.workloads
