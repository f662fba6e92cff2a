"""The command table in cli/main.py must name exactly what each module registers."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import FATHOM, SRC, run_fathom

from fathom.cli.main import COMMANDS, build_parser, main
from fathom.results.store import Store

GROUPS: dict[str, tuple[str, ...]] = {}
for _cmd, _mod in COMMANDS.modules.items():
    GROUPS[_mod] = GROUPS.get(_mod, ()) + (_cmd,)


@pytest.mark.parametrize("module, commands", list(GROUPS.items()))
def test_each_module_registers_exactly_its_commands(module: str, commands: tuple[str, ...]) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    importlib.import_module(module).register(sub)
    assert tuple(sub.choices) == commands


def test_one_command_builds_only_its_group_and_help_builds_all() -> None:
    sub = next(a for a in build_parser("bench")._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == {"bench", "cleanup"}
    sub = next(a for a in build_parser(None)._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS.names())


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["nosuch"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "slo"])
def test_mgr_prometheus_help_says_the_mgr_respawns(command: str) -> None:
    """Enabling or disabling a mgr module restarts the active mgr's modules: the option must say so."""
    sub = next(a for a in build_parser(command)._actions if isinstance(a, argparse._SubParsersAction))
    (opt,) = [a for a in sub.choices[command]._actions if "--mgr-prometheus" in a.option_strings]
    assert "respawns" in opt.help and "disabled again at the end" in opt.help, opt.help


# a suite with 1,000 points and no cluster: `fathom plan` prints more than a pipe holds (64 KiB)
BIG_SUITE = """\
name: big
defaults: {engine: fathom-engine, interface: "null", runtime: 1s, ramp_time: 0s, bs: 4k}
workloads:
""" + "".join(f"  - {{name: w{i}, rw: randread}}\n" for i in range(10)) + "sweep:\n  iodepth: [" + ", ".join(
    str(d) for d in range(1, 101)) + "]\n"


def _head(argv: list[str], buffered: bool, lines: int = 1) -> tuple[int, str]:
    """`fathom ARGV | head -LINES`: read that many lines (none: the pipe closed before any output), close the
    pipe; the exit status and stderr. Buffered: stdout as Python buffers a pipe (written at exit when short);
    unbuffered: each print written at once (PYTHONUNBUFFERED)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen([FATHOM, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=env)
    assert proc.stdout is not None and proc.stderr is not None
    for _ in range(lines):
        assert proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    return proc.wait(timeout=60), err


@pytest.fixture(scope="module")
def many_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of 1,500 runs: `fathom ls` prints about 140 KiB, more than a pipe holds."""
    db = tmp_path_factory.mktemp("ls") / "many.db"
    with Store(db) as st:
        for i in range(1500):
            st.finish_run(st.create_run(f"run-{i}", suite="x.yaml"), "done")
    return db


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("what", ["ls", "plan"])
def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path: Path, many_runs: Path, what: str,
                                                      buffered: bool) -> None:
    """`fathom ls | head -1`, `fathom plan SUITE | head -1`: quiet, exit 0 or 141 (128 + SIGPIPE)."""
    if what == "ls":
        argv = ["ls", "--db", str(many_runs)]
    else:
        (tmp_path / "big.yaml").write_text(BIG_SUITE)
        argv = ["plan", str(tmp_path / "big.yaml")]
    rc, err = _head(argv, buffered)
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err, err
    assert rc in (0, 141), (rc, err)


@pytest.mark.parametrize("argv", [["plan", "osd-classic", "--quick"], ["suites"]])
def test_a_pipe_closed_before_the_output_is_flushed_at_exit_gets_no_traceback(argv: list[str]) -> None:
    """A short output is written when Python flushes stdout at exit: a reader gone by then is no traceback either."""
    rc, err = _head(argv, buffered=True, lines=0)
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err, err
    assert rc in (0, 141), (rc, err)


@pytest.mark.parametrize("argv", [
    ["run", "nosuchsuite"],
    ["run", "SUITE", "--server-host", "h1"],  # refused after the suite is planned: no attached cluster to sample
    ["run", "--resume", "3"],
    ["slo", "nosuchsuite", "--p99", "5ms"],
    ["import", "table", "nosuch.csv"],
], ids=["no-suite", "refused-option", "resume-nothing", "slo-no-suite", "import-no-file"])
def test_a_refused_run_creates_no_results_store(tmp_path: Path, argv: list[str]) -> None:
    """No results file unless a run is stored: a refused `fathom run` (or import) leaves --db as it found it."""
    db = tmp_path / "sub" / "x.db"
    db.parent.mkdir()
    (tmp_path / "null.yaml").write_text(BIG_SUITE)
    p = run_fathom(*[str(tmp_path / "null.yaml") if a == "SUITE" else a for a in argv], "--db", str(db))
    assert p.returncode != 0, p.stdout + p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    assert not db.exists() and list(db.parent.iterdir()) == [], (p.stderr, list(db.parent.iterdir()))


@pytest.mark.parametrize("argv, dest, name_is_the_runs", [
    (["run", "osd-classic"], "client_name", True), (["slo", "osd-classic"], "client_name", True),
    (["cluster", "status"], "client_name", False), (["cluster", "restore"], "client_name", False),
    (["bench", "rados", "-p", "p", "10", "write"], "name", False), (["cleanup", "-p", "p"], "name", False)])
def test_one_spelling_for_the_ceph_client_name_on_every_command(argv: list[str], dest: str,
                                                                 name_is_the_runs: bool) -> None:
    """--client-name names the Ceph client everywhere; --name stays its alias where it means nothing else."""
    args = build_parser(argv[0]).parse_args([*argv, "--client-name", "client.bench"])
    assert getattr(args, dest) == "client.bench"
    args = build_parser(argv[0]).parse_args([*argv, "--name", "x"])
    assert getattr(args, dest) == (None if name_is_the_runs else "x")
    assert not name_is_the_runs or args.name == "x"  # run and slo: the run's name


# an attached cluster that is not there: its one mon's port refuses, so any `ceph` call fails (after its timeout)
NO_CLUSTER_CONF = "[global]\nmon_host = 127.0.0.1:1\n"
RADOS_SUITE = """\
name: far
prep: {pools: [{name: far, application: rados, pg_num: 8}]}
defaults: {engine: fathom-engine, interface: rados, pool: far, bs: 4k, iodepth: 1, runtime: 2s}
workloads: [{name: w, rw: write}]
"""


def _engine_child(parent: int) -> int | None:
    """The fathom-engine process `parent` started, if one runs."""
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text() if proc.name.isdigit() else ""
            if stat and int(stat.rsplit(")", 1)[1].split()[1]) == parent and \
                    os.readlink(proc / "exe").endswith("fathom-engine"):
                return int(proc.name)
        except OSError:
            continue
    return None


def _running(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_bench_started_with_sigint_ignored_still_stops_on_sigint(tmp_path: Path, engine_ready: Path) -> None:
    """A shell starts a script's background jobs with SIGINT ignored, and Python keeps it so: the CLI entry
    undoes that for every command, so `fathom bench` stops on SIGINT as `fathom run` does (exit 130, its engine
    stopped) instead of running on to its own end. Here the bench waits for a cluster whose mon refuses, up to
    --connect-timeout, and gets SIGINT meanwhile (its engine, told to stop, still ends its mon connect first)."""
    conf = tmp_path / "ceph.conf"
    conf.write_text(NO_CLUSTER_CONF)
    proc = subprocess.Popen([FATHOM, "bench", "rados", "-p", "p", "10", "write", "--conf", str(conf),
                             "--connect-timeout", "5", "--db", str(tmp_path / "b.db")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            env={**os.environ, **SRC},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        engine = None
        while engine is None and proc.poll() is None:  # the engine runs: fathom's handlers are set by then
            engine = _engine_child(proc.pid)
            time.sleep(0.05)
        assert engine is not None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "fathom: interrupted" in err, (proc.returncode, err)
    assert "cannot reach the cluster" not in err and "Traceback" not in err, err
    assert not _running(engine)  # no engine left behind


def test_a_bad_client_host_is_named_before_the_cluster_is_asked_anything(tmp_path: Path, engine_ready: Path) -> None:
    """SSH client hosts are connected before any `ceph` call: with a host that refuses SSH and an attached cluster
    that is not there either, the host's error is the one said (had the cluster's checks gone first, its probe
    would have waited for the mon and failed on the cluster), and the refused run makes no store."""
    conf, suite, db = tmp_path / "ceph.conf", tmp_path / "far.yaml", tmp_path / "r.db"
    conf.write_text(NO_CLUSTER_CONF)
    suite.write_text(RADOS_SUITE)
    p = run_fathom("run", str(suite), "--conf", str(conf), "--client", "root@127.0.0.1:1", "--db", str(db),
                   env=SRC, timeout=120)
    assert p.returncode == 4, p.stdout + p.stderr
    assert "client host 127.0.0.1:1 is unreachable over SSH (port 1)" in p.stderr, p.stderr
    assert "hint: check the address, that sshd runs there" in p.stderr, p.stderr
    assert "cannot reach the cluster" not in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not db.exists()
