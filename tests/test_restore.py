"""An attached cluster is left exactly as fathom found it: hygiene's settings are recorded before
they change and put back when the run ends, fails, is interrupted, or (after SIGKILL) by
`fathom cluster restore`, which also removes what the run's journal says it made (and nothing else). The
journal's pure logic is tested without a cluster."""

from __future__ import annotations

import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import FATHOM, run_fathom

from fathom.run.attempt import Attempt
from fathom.cluster.ceph import Ceph, Connection
from fathom.cluster.journal import Entry, Journal
from fathom.cluster.restore import (
    Restorer,
    balancer_entries,
    ceph_args,
    config_entry,
    describe_prior,
    flag_entry,
    last_process,
    pool_entry,
    repair_commands,
    run_alive,
    run_gone,
    setting,
    unrestored_message,
)
from fathom.errors import ClusterError
from fathom.results.store import Store

# ---- the journal's logic for settings (no cluster) -------------------------------------------


def test_flag_already_set_is_left_alone_and_unset_one_is_recorded():
    assert flag_entry(["sortbitwise", "noscrub"], "noscrub") is None
    e = flag_entry(["sortbitwise"], "nodeep-scrub")
    assert e is not None and e.prior == "unset" and e.wanted == "set"
    assert e.undo == "ceph osd unset nodeep-scrub" and ceph_args(e) == ["osd", "unset", "nodeep-scrub"]


def test_balancer_off_already_is_left_alone():
    assert balancer_entries({"active": False, "mode": "upmap"}, []) == []


def test_balancer_restore_turns_it_on_then_removes_the_option_balancer_on_wrote():
    es = balancer_entries({"active": True, "mode": "crush-compat"}, [])
    assert [e.undo for e in Journal(entries=es).pending()] == ["ceph balancer on",
                                                              "ceph config rm mgr mgr/balancer/active"]
    assert es[1].prior == "on (mode crush-compat)"
    # the option set explicitly before: put back its value, no rm
    es = balancer_entries({"active": True, "mode": "upmap"},
                          [{"section": "mgr", "name": "mgr/balancer/active", "value": "true", "mask": ""}])
    assert [e.undo for e in Journal(entries=es).pending()] == ["ceph balancer on",
                                                       "ceph config set mgr mgr/balancer/active true"]


def test_config_not_set_restores_by_rm_and_set_restores_the_prior_value():
    dump = [{"section": "client", "name": "rbd_cache", "value": "true", "mask": ""},
            {"section": "client", "name": "rbd_io_scheduler", "value": "none", "mask": "host:h1"},
            {"section": "osd", "name": "rbd_io_scheduler", "value": "simple", "mask": ""}]
    e = config_entry(dump, "client", "rbd_cache", "false")
    assert e is not None and e.prior == "true" and e.undo == "ceph config set client rbd_cache true"
    assert config_entry(dump, "client", "rbd_cache", "true") is None  # already wanted
    # a masked entry and another section are other settings: this one was not set
    e = config_entry(dump, "client", "rbd_io_scheduler", "none")
    assert e is not None and e.prior is None and e.undo == "ceph config rm client rbd_io_scheduler"
    assert describe_prior(e) == "not set in the config db"


def test_pool_setting_and_quoting_of_odd_values():
    assert pool_entry("p", "pg_autoscale_mode", "off", "off") is None
    e = pool_entry("p", "pg_autoscale_mode", "warn", "off")
    assert e is not None and e.undo == "ceph osd pool set p pg_autoscale_mode warn"
    e = config_entry([{"section": "global", "name": "x", "value": "a b'c", "mask": ""}], "global", "x", "d")
    assert e is not None and ceph_args(e) == ["config", "set", "global", "x", "a b'c"]


def test_restore_order_is_reverse_and_skips_restored():
    a, b, c = (setting(n, "unset", "set", f"ceph osd unset {n}") for n in ("a", "b", "c"))
    b.undone = True
    pool = Entry("pool", "p1")
    j = Journal(entries=[a, pool, b, c])
    assert [e.what for e in Restorer(Ceph(Connection(conf="x")), j).pending()] == ["c", "a"]
    assert Entry.from_dict(c.to_dict()) == c and Entry.from_dict(pool.to_dict()) == pool


def test_repair_commands_carry_the_connection_in_the_order_given():
    es = [setting("osd flag noscrub", "unset", "set", "ceph osd unset noscrub"),
          setting("config client rbd_cache", None, "false", "ceph config rm client rbd_cache")]
    cmds = repair_commands(es, {"conf": "/etc/my ceph.conf", "name": "client.ops", "keyring": "/k/ring"})
    assert cmds == ["ceph --conf '/etc/my ceph.conf' --name client.ops --keyring /k/ring osd unset noscrub",
                    "ceph --conf '/etc/my ceph.conf' --name client.ops --keyring /k/ring config rm client rbd_cache"]


def test_unreachable_cluster_leaves_entries_unrestored_with_their_commands(tmp_path):
    """A real ceph CLI against a mon that is not there: nothing restored, every command reported and saved."""
    conf = tmp_path / "ceph.conf"
    conf.write_text("[global]\nmon_host = 127.0.0.1:9\n")
    saved: list[dict] = []
    ceph = Ceph(Connection(conf=str(conf)))
    j = Journal(saved.append, [setting("osd flag noscrub", "unset", "set", "ceph osd unset noscrub"),
                               setting("balancer", "on (mode upmap)", "off", "ceph balancer on")],
                fsid="11111111-2222-3333-4444-555555555555", conn=ceph.conn.describe())
    r = Restorer(ceph, j)
    left = r.restore(lambda m: None, probe_timeout=3)
    assert [e.what for e in left] == ["balancer", "osd flag noscrub"]
    assert all(e.error and not e.undone for e in left)
    assert saved and all(not e["undone"] and e["error"] for e in saved[-1]["entries"])
    msg = unrestored_message(left, j.to_dict(), "r.db")
    assert f"ceph --conf {conf} --name client.admin balancer on" in msg
    assert msg.index("balancer on") < msg.index("osd unset noscrub")
    assert f"fathom cluster restore --conf {conf} --db r.db" in msg


def test_a_runs_process_is_alive_gone_or_not_to_be_told():
    """Restore leaves a run whose process runs alone, and ends one only when it knows the process is gone."""
    here = platform.node()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "fathom", "run"])
    try:
        deadline = time.monotonic() + 10  # its command line is fathom's once it has exec'd
        while b"fathom" not in Path(f"/proc/{child.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        live = {"attempts": [{"tag": "a1"}, {"tag": "a2", "host": here, "pid": child.pid}],
                "journal": {"host": here, "pid": 1}}
        assert last_process(live) == {"host": here, "pid": child.pid}
        assert run_alive(live) and run_gone(live) is None
        # an attempt of an older fathom names no process: its journal's last writer does
        old = {"attempts": [{"tag": "a1"}], "journal": {"host": here, "pid": child.pid}}
        assert last_process(old) == {"host": here, "pid": child.pid} and run_alive(old)
        # the journal's writer alive (a newer attempt's record lost) is alive too: never touched
        assert run_alive({"attempts": [{"tag": "a1", "host": here, "pid": 1}], "journal": old["journal"]})
    finally:
        child.kill()
        child.wait()
    assert not run_alive(live) and run_gone(live) == f"its process (pid {child.pid} on {here}) is gone"
    elsewhere = {"attempts": [{"tag": "a1", "host": "not-" + here, "pid": child.pid}]}
    assert not run_alive(elsewhere) and run_gone(elsewhere) is None  # another host's pid: cannot be told
    assert last_process({}) == {} and run_gone({"attempts": [{"tag": "a1"}]}) is None


# ---- real cluster ----------------------------------------------------------------------------

SUITE = """\
name: restore-check
prep:
  pools: [{name: p, pg_num: 8, size: 1, application: rados}]
  hygiene: true
defaults: {engine: fathom-engine, target: rados, pool: p, bs: 4k, iodepth: 4, runtime: 2s, ramp_time: 0s}
workloads:
  - {name: w1, rw: write}
  - {name: w2, rw: write}
"""
# config-db options hygiene touches; `ceph balancer on|off` writes mgr/balancer/active
HYGIENE_OPTIONS = (("global", "osd_pool_default_pg_autoscale_mode"), ("client", "rbd_cache"),
                   ("client", "rbd_io_scheduler"), ("mgr", "mgr/balancer/active"))
CHANGED = {"osd flag noscrub", "osd flag nodeep-scrub", "balancer", "config mgr mgr/balancer/active",
           "config global osd_pool_default_pg_autoscale_mode", "config client rbd_cache",
           "config client rbd_io_scheduler"}


def state(ceph: Ceph) -> dict:
    """What the tests compare before and after: OSD flags, the whole config db, the balancer."""
    bal = ceph.ceph("balancer", "status", timeout=60)
    return {"flags": set(ceph.ceph("osd", "dump")["flags"].split(",")),
            "config": {(e["section"], e["name"], e["value"]) for e in ceph.ceph("config", "dump")},
            "balancer": (bal["mode"], bal["active"])}


def _put(ceph: Ceph, flags: set[str], config: set[tuple[str, str, str]], balancer_on: bool) -> None:
    for f in ("noscrub", "nodeep-scrub"):
        ceph.ceph("osd", "set" if f in flags else "unset", f, fmt_json=False)
    ceph.ceph("balancer", "on" if balancer_on else "off", fmt_json=False, timeout=60)
    for section, name in HYGIENE_OPTIONS:
        ceph.ceph("config", "rm", section, name, fmt_json=False)
    for section, name, value in config:
        if (section, name) in HYGIENE_OPTIONS:
            ceph.ceph("config", "set", section, name, value, fmt_json=False)


@pytest.fixture
def found(ceph: Ceph):
    """A known start (scrubbing and balancer on, none of hygiene's options set); the session cluster put back after."""
    saved = state(ceph)
    _put(ceph, set(), set(), True)
    try:
        yield
    finally:
        _put(ceph, saved["flags"], saved["config"], saved["balancer"][1])


def attach(cluster) -> list[str]:
    return ["--conf", str(cluster.conf_path), "--keyring", str(cluster.keyring_path)]


def suite_file(tmp_path: Path) -> str:
    p = tmp_path / "restore-check.yaml"
    p.write_text(SUITE)
    return str(p)


def record(db: Path) -> tuple[int, dict]:
    with Store(db) as st:
        run = st.run("latest")
        return run.id, run.state["journal"]


def settings(rec: dict) -> dict[str, dict]:
    """The journal's setting entries by what they change."""
    return {e["what"]: e for e in rec["entries"] if e["kind"] == "setting"}


def remove_run_pools(ceph: Ceph, run_id: int) -> None:
    for p in ceph.ceph("osd", "pool", "ls"):
        if p.startswith(f"fathom-{run_id}-"):
            ceph.ceph("osd", "pool", "rm", p, p, "--yes-i-really-really-mean-it", fmt_json=False)


def start_until_first_point(argv: list[str], timeout: float = 180) -> tuple[subprocess.Popen, list[str]]:
    """Start `fathom run` and return once it prints the first point's line on stderr."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True).start()
    deadline = time.monotonic() + timeout
    while not any(line.startswith("[1/") for line in list(lines)):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("fathom run did not start its first point:\n" + "".join(lines))
        time.sleep(0.05)
    return proc, lines


@pytest.mark.cluster
def test_normal_end_puts_every_setting_back(cluster, ceph, engine_ready, found, tmp_path):
    db = tmp_path / "n.db"
    before = state(ceph)
    assert "noscrub" not in before["flags"] and before["balancer"][1] is True
    p = run_fathom("run", suite_file(tmp_path), "--db", str(db), *attach(cluster), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert state(ceph) == before
    _, rec = record(db)
    assert rec["fsid"] == ceph.ceph("fsid")["fsid"] and rec["disposable"] is False
    assert set(settings(rec)) == CHANGED and all(e["undone"] for e in rec["entries"])
    assert "restored osd flag noscrub to unset (ceph osd unset noscrub)" in p.stderr
    # put back newest first: the last change (rbd_io_scheduler) is the first restored
    assert p.stderr.index("config client rbd_io_scheduler") < p.stderr.index("osd flag noscrub to unset")


@pytest.mark.cluster
def test_sigint_during_a_point_puts_every_setting_back(cluster, ceph, engine_ready, found, tmp_path):
    db = tmp_path / "i.db"
    before = state(ceph)
    proc, lines = start_until_first_point([FATHOM, "run", suite_file(tmp_path), "--db", str(db), *attach(cluster)])
    try:
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, "".join(lines)
    assert state(ceph) == before
    run_id, rec = record(db)
    with Store(db) as st:
        assert st.run(run_id).status == "interrupted" and st.points(run_id)[0]["status"] == "interrupted"
    assert set(settings(rec)) == CHANGED and all(e["undone"] for e in rec["entries"])
    assert not [p for p in ceph.ceph("osd", "pool", "ls") if p.startswith(f"fathom-{run_id}-")]


@pytest.mark.cluster
def test_sigkill_leaves_settings_that_cluster_restore_puts_back(cluster, ceph, engine_ready, found, tmp_path):
    db = tmp_path / "k.db"
    before = state(ceph)
    proc, _ = start_until_first_point([FATHOM, "run", suite_file(tmp_path), "--db", str(db), *attach(cluster)])
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    run_id, rec = record(db)
    try:
        killed = state(ceph)
        assert {"noscrub", "nodeep-scrub"} <= killed["flags"] and killed["balancer"][1] is False
        assert ("client", "rbd_cache", "false") in killed["config"]
        assert set(settings(rec)) == CHANGED and not any(e["undone"] for e in settings(rec).values())

        # entries recorded for another cluster are refused, and nothing is applied
        with Store(db) as st:
            st.merge_state(run_id, journal={**rec, "fsid": "00000000-0000-0000-0000-000000000000"})
        p = run_fathom("cluster", "restore", *attach(cluster), "--db", str(db), "--run", str(run_id))
        assert p.returncode != 0 and "refusing to restore" in p.stderr, p.stdout + p.stderr
        p = run_fathom("cluster", "restore", *attach(cluster), "--db", str(db))
        assert p.returncode == 0 and "not on this one" in p.stdout and "nothing to restore" in p.stdout
        assert state(ceph) == killed
        with Store(db) as st:
            st.merge_state(run_id, journal=rec)

        # the run's pool is there, and one of the same shape that the journal does not name stays
        made = [e["what"] for e in rec["entries"] if e["kind"] == "pool"]
        assert made == [f"{rec_tag(db)}-p"] and made[0] in ceph.ceph("osd", "pool", "ls")
        other = f"{made[0]}-not-fathoms"
        ceph.ceph("osd", "pool", "create", other, "8", fmt_json=False)
        p = run_fathom("cluster", "restore", *attach(cluster), "--db", str(db))
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"run {run_id} " in p.stdout and "restored osd flag noscrub to unset" in p.stdout
        assert state(ceph) == before
        # what the run made goes too, as its journal says, and the output names it; nothing else goes
        assert f"removed pool {made[0]}" in p.stdout, p.stdout
        pools = ceph.ceph("osd", "pool", "ls")
        assert made[0] not in pools and other in pools
        _, rec = record(db)
        assert all(e["undone"] for e in rec["entries"])
        with Store(db) as st:
            said = [e["message"] for e in st.events(run_id) if e["kind"] == "restore"]
        assert said and f"pool {made[0]}" in said[-1], said
        p = run_fathom("cluster", "restore", *attach(cluster), "--db", str(db))
        assert p.returncode == 0 and "nothing to restore" in p.stdout, p.stdout + p.stderr
    finally:
        remove_run_pools(ceph, run_id)


@pytest.mark.cluster
def test_cluster_restore_ends_a_killed_run_and_leaves_a_live_one_alone(cluster, ceph, engine_ready, found,
                                                                       tmp_path):
    """While the run's process lives, restore touches nothing of it; once it is killed (kill -9: it cannot mark
    its end), restore undoes what it left and marks it interrupted, as Ctrl-C leaves a run, saying so."""
    db = tmp_path / "e.db"
    suite = tmp_path / "slow.yaml"
    suite.write_text(SUITE.replace("runtime: 2s", "runtime: 8s"))  # restore runs during the first point
    before = state(ceph)
    proc, _ = start_until_first_point([FATHOM, "run", str(suite), "--db", str(db), "--name", "ended",
                                       *attach(cluster)])
    try:
        run_id, _ = record(db)
        changed = state(ceph)
        p = run_fathom("cluster", "restore", *attach(cluster), "--db", str(db))
        assert p.returncode == 0 and f"skipped run {run_id} (ended) is still running (pid {proc.pid})" in p.stdout, \
            p.stdout + p.stderr
        assert proc.poll() is None and state(ceph) == changed
        with Store(db) as st:
            run = st.run(run_id)
            assert run.status == "running" and not any(e["undone"] for e in run.state["journal"]["entries"])
        deadline = time.monotonic() + 60
        while not stored_points(db) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert stored_points(db) == 1
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    try:
        assert ls_status(db, "ended") == "running"  # killed: nobody marked its end
        p = run_fathom("cluster", "restore", *attach(cluster), "--db", str(db))
        assert p.returncode == 0, p.stdout + p.stderr
        assert state(ceph) == before
        assert f"run {run_id} (ended) was still marked running, but its process (pid {proc.pid} on " in p.stdout
        assert f"resume with: fathom run --resume {run_id} --db {db} --conf {cluster.conf_path}" in p.stdout
        assert ls_status(db, "ended") == "interrupted"
        with Store(db) as st:
            run = st.run(run_id)
            assert run.status == "interrupted" and run.finished is not None
            ends = [e for e in st.events(run_id) if e["kind"] == "interrupt"]
            assert len(ends) == 1 and ends[0]["message"].startswith("`fathom cluster restore`: ")
            assert ends[0]["data"]["pid"] == proc.pid and ends[0]["data"]["by"] == "fathom cluster restore"
        # a second restore finds nothing: the run is no longer running, and nothing of it is left
        p = run_fathom("cluster", "restore", *attach(cluster), "--db", str(db))
        assert p.returncode == 0 and "nothing to restore" in p.stdout, p.stdout + p.stderr
    finally:
        remove_run_pools(ceph, run_id)


def stored_points(db: Path) -> int:
    with Store(db) as st:
        return len(st.points(st.run("latest").id))


def ls_status(db: Path, name: str) -> str:
    """The run's status as `fathom ls` shows it."""
    out = run_fathom("ls", "--db", str(db), check=True).stdout
    row = next(line for line in out.splitlines() if line.split()[1:2] == [name])
    return row.split()[3]


def rec_tag(db: Path) -> str:
    with Store(db) as st:
        return st.run("latest").state["data_tag"]


@pytest.mark.cluster
def test_settings_found_in_place_are_kept(cluster, ceph, engine_ready, found, tmp_path):
    ceph.ceph("osd", "set", "noscrub", fmt_json=False)
    ceph.ceph("config", "set", "client", "rbd_cache", "true", fmt_json=False)
    db = tmp_path / "p.db"
    before = state(ceph)
    p = run_fathom("run", suite_file(tmp_path), "--db", str(db), *attach(cluster), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    after = state(ceph)
    assert after == before
    assert "noscrub" in after["flags"] and ("client", "rbd_cache", "true") in after["config"]
    _, rec = record(db)
    by_what = settings(rec)
    assert "osd flag noscrub" not in by_what  # already wanted: not recorded, so not "restored" away
    assert by_what["config client rbd_cache"]["undo"] == "ceph config set client rbd_cache true"
    assert by_what["config client rbd_io_scheduler"]["prior"] is None


@pytest.mark.cluster
def test_a_resumed_restorer_keeps_the_killed_attempts_priors(ceph, found, tmp_path):
    """The journal of a killed attempt: carried on for the same cluster, refused for another one."""
    fsid = ceph.ceph("fsid")["fsid"]
    ceph.ceph("osd", "set", "noscrub", fmt_json=False)  # as the killed attempt left it
    prev = {"fsid": fsid, "conn": ceph.conn.describe(), "disposable": False,
            "entries": [setting("osd flag noscrub", "unset", "set", "ceph osd unset noscrub").to_dict(),
                        Entry("pool", "fathom-1-x-p").to_dict()]}
    with Store(tmp_path / "j.db") as st:
        rid = st.create_run("resumed")

        def attempt(journal: dict) -> Attempt:
            st.merge_state(rid, journal=journal)
            return Attempt.begin(st, rid, 1, lambda m: None)

        r = Restorer(ceph, attempt(prev).journal(fsid, ceph.conn.describe(), disposable=False))
        r.osd_flags(["noscrub", "nodeep-scrub"])
        assert [e.what for e in reversed(r.pending())] == ["osd flag noscrub", "osd flag nodeep-scrub"]
        saved = st.run(rid).state["journal"]
        assert saved["entries"][0]["prior"] == "unset" and saved["entries"][1]["what"] == "fathom-1-x-p"
        assert r.restore(lambda m: None) == []
        assert not {"noscrub", "nodeep-scrub"} & set(ceph.ceph("osd", "dump")["flags"].split(","))

        other = {**prev, "fsid": "00000000-0000-0000-0000-000000000000"}
        with pytest.raises(ClusterError, match="another cluster") as exc:
            attempt(other).journal(fsid, ceph.conn.describe(), disposable=False)
        assert "fathom cluster restore" in str(exc.value.hint)
        j = attempt({**other, "disposable": True}).journal(fsid, ceph.conn.describe(), disposable=False)
        assert j.pending() == [] and j.fsid == fsid  # that cluster is gone, and what was made on it
