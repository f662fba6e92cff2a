"""Shared fixtures: one real local Ceph cluster per test session (never a mock).

Tests that need Ceph take the `cluster` fixture; it starts a one-OSD BlueStore
cluster under a temporary directory and stops exactly its daemons at the end.
Tests that need RGW or an MDS start their own cluster (it costs ~25 s).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from fathom.cluster.ceph import Ceph
from fathom.cluster.local import LocalCluster, pid_alive

REPO = Path(__file__).resolve().parents[1]
FATHOM = str(REPO / ".venv" / "bin" / "fathom")
SRC = {"PYTHONPATH": str(REPO / "src")}


def run_fathom(*args: str, check: bool = False, timeout: float = 600, env: dict | None = None,
               input_data: str | None = None, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """Run the installed CLI as a user would; returns the completed process (text)."""
    proc = subprocess.run([FATHOM, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, input=input_data, cwd=cwd,
                          stdin=None if input_data is not None else subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise AssertionError(f"fathom {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def kill_after_first_point(argv: list[str], db: Path, limit_s: float = 300,
                           sig: int = signal.SIGKILL) -> str:
    """Start `fathom ARGV`, SIGKILL it (or send sig) once its run has a point stored (or at limit_s); its output
    once it ended."""
    import time

    from fathom.results.store import Store

    proc = subprocess.Popen([FATHOM, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and proc.poll() is None:  # the first point stored: then killed
            try:
                with Store(db) as st:
                    run = st.run("latest")
                    if run is not None and st.points(run.id):
                        break
            except Exception:  # noqa: BLE001 (the store may not exist yet)
                pass
            time.sleep(0.5)
        proc.send_signal(sig)
    finally:
        proc.wait()
    return proc.stdout.read() if proc.stdout else ""


def export_table(db: Path, table: str, tmp_path: Path, run: str = "latest") -> list[dict]:
    """`fathom export RUN --table TABLE` in CSV, JSON and Parquet, checked to hold the same rows in the same
    columns; returns the JSON rows."""
    import csv
    import json

    import pyarrow.parquet as pq

    stem = tmp_path / f"{table}-{run}"
    run_fathom("export", run, "--db", str(db), "--table", table, "-o", f"{stem}.csv", check=True)
    run_fathom("export", run, "--db", str(db), "--table", table, "-o", f"{stem}.parquet", check=True)
    js = json.loads(run_fathom("export", run, "--db", str(db), "--table", table, "--format", "json",
                               check=True).stdout)
    with open(f"{stem}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    pq_rows = pq.read_table(f"{stem}.parquet").to_pylist()
    assert len(rows) == len(js) == len(pq_rows)
    for c, j, q in zip(rows, js, pq_rows):
        assert list(c) == list(j) == list(q)
        for k, v in j.items():
            if isinstance(v, bool):
                assert (c[k], q[k]) == (str(v), v), k
            elif isinstance(v, (int, float)):
                assert float(c[k]) == float(q[k]) == v, k
            else:
                assert c[k] == ("" if v is None else str(v)) and q[k] == v, k
    return js


def perf_rows(perf: dict[str, dict]) -> dict[tuple[str, str], float]:
    """A point's stored perf counters as the counters table's (daemon, figure) -> value."""
    out = {}
    for daemon, counters in perf.items():
        for name, v in counters.items():
            if isinstance(v, dict):
                out.update({(daemon, f"{name}.{part}"): v[part] for part in ("count", "sum", "avg") if part in v})
            else:
                out[(daemon, name)] = v
    return out


@contextmanager
def mds_cluster(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[tuple[LocalCluster, list[int]]]:
    """A one-OSD cluster with an MDS for a module, and a list the tests add the pids they start to. At the end
    `fathom cluster down` stops it, and no daemon of it (nor pid of the list) and no mount of it is left."""
    from fathom.cluster import mounts

    root = tmp_path_factory.mktemp(name) / "cluster"
    c = LocalCluster(root)
    c.up(osds=1, osd_size=10 * 1024**3, mds=True)
    pids: list[int] = []
    try:
        yield c, pids
    finally:
        pids += [d.pid for d in c.daemons() if d.pid]
        run_fathom("cluster", "down", "--dir", str(root), env=SRC, timeout=300)
        assert not [p for p in pids if pid_alive(p)], "a daemon is left running"
        assert not mounts.leftovers(c), mounts.leftovers(c)


@contextmanager
def bound_cluster(tmp_path_factory: pytest.TempPathFactory, name: str, bind: str) -> Iterator[LocalCluster]:
    """A one-OSD memstore cluster listening on `bind` (an address other hosts or pods reach), stopped at the end."""
    c = LocalCluster(tmp_path_factory.mktemp(name) / "cluster", progress=lambda m: print(m, file=sys.stderr))
    c.up(osds=1, osd_size=4 * 1024**3, objectstore="memstore", bind=bind)
    try:
        yield c
    finally:
        c.down()


@contextmanager
def rgw_cluster4(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[LocalCluster]:
    """A 4-OSD cluster with RGW for a module, stopped at the end."""
    root = tmp_path_factory.mktemp(name) / "cluster"
    c = LocalCluster(root, progress=lambda m: print(m, file=sys.stderr))
    # four OSDs on a shared 2-core box: small caches keep the memory in bounds
    c.up(osds=4, osd_size=6 * 1024**3, rgw=True, settings={"osd": {"osd_memory_target": "939524096"}})
    try:
        yield c
    finally:
        c.down()


_STOP_AFTER_LAST_USE: dict[str, ExitStack] = {}
# the mgr's prometheus module collecting every 5 s and the daemons reporting every 2 s (defaults 15 s and 5 s), for
# tests that wait for a fresh collection: each wait is up to one of each, never for a count it would miss
QUICK_MGR_STATS = (("mgr/prometheus/scrape_interval", "5"), ("mgr_stats_period", "2"))
# the Kubernetes test bed's modules run last: a fresh machine builds the bed's binaries meanwhile (scripts/test.sh)
BED_LAST = ("test_k8sbed.py", "test_k8s.py", "test_k8s_sampler.py")
# `make test` runs the tests in two lanes side by side (scripts/test.sh; FATHOM_TEST_LANE=main|side picks one):
# the tests spend most of their time waiting (clusters reaching HEALTH_OK, points of fixed length, timeouts that
# are the behaviour under test), so on two cores a serial run kept the CPU 42% busy. The side lane holds modules
# that mostly wait and assert nothing of speed; a session fixture's users stay in one lane (quick_runs:
# test_run and test_report; shared_rgw_cluster4: test_rgw_prep and test_rgw_suite), and the bed's modules,
# last, in the side lane. Test beds of both lanes pick their own names and subnets (fathom.hosts.netns).
SIDE_LANE = frozenset({
    *BED_LAST, "test_releases.py", "test_slo_run.py", "test_restore.py", "test_s3.py", "test_rgw_prep.py",
    "test_rgw_suite.py", "test_mounts.py", "test_telemetry.py", "test_transport.py", "test_open_loop.py",
    "test_mgrprom.py", "test_nfs.py", "test_steady_run.py", "test_bound_run.py", "test_rgw_scaling.py",
})


# `make check` (FATHOM_CHECK=1): the tests that start no Ceph daemon, test bed or browser, for everyday work in
# minutes. A test is left out when it takes one of these fixtures (each starts such a component) or lives in a
# module whose tests start them themselves; `make test` runs everything.
REAL_FIXTURES = frozenset({
    "cluster", "ceph", "rbd_pool", "rados_pool", "quick_runs", "quick_osd_run", "quick_reef_run",
    "shared_rgw_cluster4", "k8s_bed", "k8s_cluster", "bed", "bed_cluster", "bound_cluster", "ec_cluster",
    "faults_run", "four_osds", "fs_cluster", "image", "killed_attempts", "module_cluster", "nfs_cluster",
    "other_cluster", "paused_osds", "pod_cluster", "prom", "prom_scraping", "quick_run", "newer", "rgw",
    "rgw_cluster", "topology", "quick_mgr_stats", "_ec_cluster_starts_with_the_module",
    "_faults_run_starts_with_the_module",
})
REAL_MODULES = frozenset({
    "test_bench_rados.py", "test_bench_rbd.py", "test_cephsrc.py", "test_cleanup.py", "test_cluster.py",
    "test_faults.py", "test_hosts.py", "test_box.py", "test_degraded.py", "test_k8s.py", "test_k8s_sampler.py",
    "test_k8sbed.py", "test_live.py",
    "test_mounts.py", "test_nfs.py", "test_null_run.py", "test_posix.py", "test_releases.py", "test_reef_compare.py",
    "test_restore.py", "test_resume.py", "test_rgw_prep.py", "test_rgw_suite.py", "test_rgw_scaling.py", "test_run.py",
    "test_s3.py",
    "test_servers.py", "test_slo_run.py", "test_steady_run.py",
})


# single tests of otherwise quick modules that start a cluster, a browser or many runs of fathom themselves
REAL_TESTS = frozenset({
    "test_sampler_sees_rgw_and_mds_of_a_real_cluster", "test_real_runs_a_raised_delay_is_found_at_the_sixth_run_and_"
    "fires_the_gate", "test_html_renders_in_chromium", "test_frames_equal_fathom_export",
    "test_the_example_notebook_prints_the_stores_figures", "test_a_rate_sweep_runs_on_two_engines",
    "test_an_image_with_tentacle_s_client_runs_its_engine_on_tentacle_s_libraries",
})
MODULE_FIXTURES = {"test_api.py": "db"}  # a module's own fixture that runs a suite with fathom


def check_only(item: pytest.Item) -> bool:
    """Whether `make check` runs this test: it starts no real component."""
    names = set(getattr(item, "fixturenames", ()))
    return item.path.name not in REAL_MODULES and getattr(item, "originalname", item.name) not in REAL_TESTS \
        and not REAL_FIXTURES & names and MODULE_FIXTURES.get(item.path.name) not in names


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("FATHOM_CHECK") == "1":
        left = [i for i in items if not check_only(i)]
        items[:] = [i for i in items if check_only(i)]
        config.hook.pytest_deselected(items=left)
    lane = os.environ.get("FATHOM_TEST_LANE")
    if lane in ("main", "side"):
        left = [i for i in items if (i.path.name in SIDE_LANE) != (lane == "side")]
        items[:] = [i for i in items if (i.path.name in SIDE_LANE) == (lane == "side")]
        config.hook.pytest_deselected(items=left)
    items.sort(key=lambda i: i.path.name in BED_LAST)  # stable: the order within each part is kept


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """A cluster several modules share (a session fixture named in _STOP_AFTER_LAST_USE) stops after the last
    collected test that takes it, as a module's would, not at the session's end: no idle cluster is left to share
    the two cores with the tests after it."""
    if not _STOP_AFTER_LAST_USE:
        return
    items = item.session.items
    later = items[items.index(item) + 1:] if nextitem is not None else []
    for name in [n for n in _STOP_AFTER_LAST_USE if not any(n in getattr(i, "fixturenames", ()) for i in later)]:
        _STOP_AFTER_LAST_USE.pop(name).close()


def _until_last_use(fixture: str, cm: Any) -> Iterator[Any]:
    """A session fixture's body: what `cm` gives, ended after the last test that takes `fixture`."""
    with ExitStack() as stack:
        _STOP_AFTER_LAST_USE[fixture] = stack
        yield stack.enter_context(cm)
        _STOP_AFTER_LAST_USE.pop(fixture, None)


@pytest.fixture(scope="session")
def shared_rgw_cluster4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """rgw_cluster4 shared by test_rgw_prep and test_rgw_suite, stopped after the last test that takes it. Each
    test removes what it made, and checks that it did (the suite test compares with what it found)."""
    yield from _until_last_use("shared_rgw_cluster4", rgw_cluster4(tmp_path_factory, "ceph-rgw4"))


@pytest.fixture(scope="session")
def k8s_bed() -> Iterator:
    """The Kubernetes test bed (tests/k8sbed.py) shared by test_k8s and test_k8s_sampler, stopped after the last
    test that takes it (test_k8sbed starts and stops beds of its own after it)."""
    import k8sbed

    k8sbed.ensure_built()
    yield from _until_last_use("k8s_bed", k8sbed.K8sBed())


@pytest.fixture(scope="session")
def k8s_cluster(k8s_bed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A one-OSD cluster bound to the bed's node address (the pods reach it), shared as the bed is."""
    yield from _until_last_use("k8s_cluster", bound_cluster(tmp_path_factory, "k8s", k8s_bed.node_ip))


@pytest.fixture(scope="session")
def engine_ready() -> Path:
    """The fathom-engine binary. `make test` builds it, so a missing one is a failure, never a skip."""
    from fathom.binaries import engine_path

    return engine_path()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """A running one-OSD local cluster shared by the session."""
    root = tmp_path_factory.mktemp("ceph") / "cluster"
    c = LocalCluster(root, progress=lambda m: print(m, file=sys.stderr))
    c.up(osds=1, osd_size=10 * 1024**3)
    try:
        yield c
    finally:
        c.down()


@pytest.fixture(scope="session")
def ceph(cluster: LocalCluster) -> Ceph:
    return cluster.ceph()


@pytest.fixture(scope="session")
def rbd_pool(ceph: Ceph) -> str:
    """A replicated size-1 pool with the rbd application, shared by the session."""
    name = "rbd-test"
    ceph.ceph("osd", "pool", "create", name, "16", fmt_json=False)
    ceph.ceph("osd", "pool", "application", "enable", name, "rbd", fmt_json=False)
    ceph.rbd("pool", "init", name, fmt_json=False)
    return name


@pytest.fixture(scope="session")
def rados_pool(ceph: Ceph) -> str:
    name = "rados-test"
    ceph.ceph("osd", "pool", "create", name, "16", fmt_json=False)
    ceph.ceph("osd", "pool", "application", "enable", name, "rados", fmt_json=False)
    return name


def session_wants(request: pytest.FixtureRequest, fixture: str) -> bool:
    """Does any test collected in this session take `fixture`?"""
    return any(fixture in getattr(item, "fixturenames", ()) for item in request.session.items)


@pytest.fixture(scope="session")
def quick_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`fathom run osd-classic --quick` with no target options, run "oc" in one store, shared by the session; and,
    when the session holds a test that takes `quick_reef_run` (FATHOM_TEST_REEF=1: test_reef_compare), the same
    suite with `--ceph reef`, run "oc-reef", into the same store at the same time.

    Each takes the user's path: fathom starts its own disposable cluster, runs all 40 points on fathom-engine,
    stops the cluster. The two go side by side because their points are time based (a point lasts its ramp and
    runtime whatever the load), so together they take about as long as one; what the tests assert of them (points
    done, I/O and CPU above zero, versions, environments, compare's levels) does not depend on how fast the
    machine is. Returns each run's completed process (None for a run not asked for) and, for Reef, why not.
    """
    from fathom.cluster import rootfs

    tmp = tmp_path_factory.mktemp("quick")
    db = tmp / "quick.db"
    env = {k: v for k, v in os.environ.items() if k not in ("CEPH_CONF", "CEPH_ARGS")}  # no cluster to attach
    argv = {"oc": [FATHOM, "run", "osd-classic", "--quick", "--db", str(db), "--name", "oc"]}
    reef_skip = None
    if session_wants(request, "quick_reef_run") and os.environ.get("FATHOM_TEST_REEF"):
        try:
            rootfs.build("reef", progress=lambda m: print(m, file=sys.stderr))
            argv["oc-reef"] = [*argv["oc"][:-1], "oc-reef", "--ceph", "reef"]
        except rootfs.NetworkUnreachable as exc:
            reef_skip = f"no cached reef root file system and {exc.message}"
    procs = {}
    for name, args in argv.items():
        cwd = tmp / name
        cwd.mkdir()
        procs[name] = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                       cwd=cwd, stdin=subprocess.DEVNULL)
    done = {}
    try:
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=3600)
            done[name] = subprocess.CompletedProcess(argv[name], proc.returncode, out, err)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return {"db": db, "cwd": tmp, "oc": done["oc"], "oc-reef": done.get("oc-reef"), "reef_skip": reef_skip}


@pytest.fixture(scope="session")
def quick_osd_run(quick_runs: dict) -> dict:
    """The session's `fathom run osd-classic --quick` on this host's Ceph, run "oc" (its store may also hold the
    Reef run "oc-reef": name the run)."""
    p = quick_runs["oc"]
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return {"db": quick_runs["db"], "name": "oc", "stdout": p.stdout, "stderr": p.stderr, "cwd": quick_runs["cwd"]}


@pytest.fixture(scope="session")
def quick_reef_run(quick_runs: dict) -> dict:
    """The session's `fathom run osd-classic --quick --ceph reef`, run "oc-reef", in the store of "oc"."""
    if quick_runs["reef_skip"]:
        pytest.skip(quick_runs["reef_skip"])
    p = quick_runs["oc-reef"]
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return {"db": quick_runs["db"], "name": "oc-reef", "stdout": p.stdout, "stderr": p.stderr}


def release_root(release: str) -> Path:
    """The root file system of a Ceph release (`fathom cluster rootfs`), built when the cache has none; the test is
    skipped when it cannot be built (no network and nothing cached)."""
    from fathom.cluster import rootfs

    try:
        rootfs.build(release, progress=lambda m: print(m, file=sys.stderr))
    except rootfs.NetworkUnreachable as exc:
        pytest.skip(f"no cached {release} root file system and {exc.message}")
    return rootfs.root_path(release)
