"""`fathom-sampler` on this host with stand-in daemons (real processes named crimson-osd and ceph-osd, no
cluster), checked against telemetry.proc_sample; that it is static (no library at all, so it runs on any Linux
host: in a chroot of nothing but itself and /proc, and in another distribution's root file system) and writes
what `fathom-engine --sample` (the same code, kept as an alias) writes; hostsample's rates on hand-made records."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from fathom.results import usage
from fathom.servers import hostsample, telemetry
from fathom.hosts import netns
from fathom import servers
from fathom.binaries import REPO_SAMPLER

REPO = Path(__file__).resolve().parents[1]
ENGINE = REPO / "engine" / "target" / "release" / "fathom-engine"
SAMPLER = REPO_SAMPLER  # the sampler alone (static, musl), uploaded to hosts
PYTHON = os.path.realpath(sys.executable)  # the interpreter itself: a venv's symlink would lose its prefix
needs_sampler = pytest.mark.skipif(not SAMPLER.exists(), reason=f"{SAMPLER} is not built (make engine)")
# the two ways to start the sampler: the binary that is uploaded to cluster hosts, and the engine's alias
INVOCATIONS = [pytest.param([str(SAMPLER)], id="fathom-sampler", marks=needs_sampler),
               pytest.param([str(ENGINE), "--sample"], id="fathom-engine--sample",
                            marks=pytest.mark.skipif(not ENGINE.exists(), reason=f"{ENGINE} is not built"))]
# another distribution's root file system (Debian 13 with Ceph 18), built by the Reef test bed when it runs
REEF_ROOT = Path.home() / ".cache" / "fathom" / "ceph" / "reef" / "root"

# A crimson stand-in: two threads, one spinning under a reactor's name, the main one asleep.
SPIN = """
import ctypes, threading, time
def spin():
    ctypes.CDLL(None).prctl(15, b"reactor-1", 0, 0, 0)  # PR_SET_NAME
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
time.sleep(300)
"""
# A classic OSD stand-in: asleep until its stdin closes.
IDLE = """
import sys
print("ready", flush=True)
sys.stdin.read()
"""


def _start(argv: list[str], executable: str) -> subprocess.Popen:
    """A real process with this argv (argv[0] as given), once it runs its script."""
    p = subprocess.Popen(argv, executable=executable, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()  # by its pid: only processes this test started
    p.wait()


def _version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True).stdout
    return out.split()[1]  # "fathom-sampler 0.1.0 (sample format 1)", "fathom-engine 0.1.0 (protocol 2)"


def _cpu_lines() -> int:
    with open("/proc/stat") as f:
        return sum(1 for line in f if line.startswith("cpu") and line[3:4].isdigit())


@needs_sampler
@pytest.mark.timeout(120)
def test_sampler_finds_stand_in_daemons_and_agrees_with_proc_sample(tmp_path: Path) -> None:
    link = tmp_path / "bin" / "crimson-osd"  # a full path, as a containerized daemon shows from the host
    link.parent.mkdir()
    link.symlink_to(PYTHON)
    crimson = _start([str(link), "-c", SPIN, "-i", "7"], str(link))
    osd = _start(["ceph-osd", "-c", IDLE, "-i", "3"], PYTHON)
    lines: list[str] = []
    ours: list[dict[str, float] | None] = []  # telemetry's reading of the spinner right after each sample line
    try:
        s = subprocess.Popen([str(SAMPLER), "--interval", "0.5", "--duration", "3"], stdout=subprocess.PIPE,
                             text=True)
        assert s.stdout is not None
        for line in s.stdout:
            lines.append(line)
            if json.loads(line)["type"] == "sample":
                ours.append(telemetry.proc_sample(crimson.pid))
        assert s.wait() == 0
    finally:
        _stop(crimson)
        _stop(osd)
    stream = hostsample.parse(lines, version=_version(SAMPLER))
    assert stream.end is not None and stream.end["stop"] == "duration" and stream.bad_lines == 0
    assert len(stream.samples) == stream.end["samples"] >= 2 and len(ours) == len(stream.samples)

    def proc(sample: dict[str, Any], pid: int) -> dict[str, Any]:
        found = [p for p in sample["procs"] if p["pid"] == pid]
        assert len(found) == 1, f"pid {pid} not sampled once: {sample['procs']}"
        return found[0]

    first, last = stream.samples[0], stream.samples[-1]
    c0, c1, o1 = proc(first, crimson.pid), proc(last, crimson.pid), proc(last, osd.pid)
    assert (c1["daemon"], c1["kind"], c1["name"]) == ("osd.7", "osd", "crimson-osd")
    assert (o1["daemon"], o1["kind"], o1["name"]) == ("osd.3", "osd", "ceph-osd")
    assert c1["rss"] > 0 and o1["rss"] > 0 and c1["threads"] == 2
    assert "tasks" not in o1  # threads are listed for crimson-osd only, by default
    tasks0, tasks1 = ({t["tid"]: t for t in c["tasks"]} for c in (c0, c1))
    assert set(tasks1) == set(tasks0) and crimson.pid in tasks1 and len(tasks1) == 2
    spinner = next(t for t in tasks1.values() if t["comm"] == "reactor-1")

    def used(t: dict[str, Any], t0: dict[str, Any]) -> float:
        return t["utime"] + t["stime"] - t0["utime"] - t0["stime"]

    assert used(spinner, tasks0[spinner["tid"]]) > used(tasks1[crimson.pid], tasks0[crimson.pid])

    # CPU seconds the spinner used between the first and the last sample, by the sampler and by telemetry
    # reading the same kernel counters a few ms later: within 10%, plus 3 clock ticks of rounding.
    sampler_s = used(c1, c0)
    p0, p1 = ours[0], ours[-1]
    assert p0 is not None and p1 is not None
    telemetry_s = p1["cpu_s"] - p0["cpu_s"]
    assert telemetry_s > 0
    assert abs(sampler_s - telemetry_s) <= 0.1 * telemetry_s + 3 / telemetry.CLK_TCK, (sampler_s, telemetry_s)

    assert set(hostsample.CPU_FIELDS) <= set(last["cpu"]) and last["ncpu"] == _cpu_lines()
    assert "lo" in last["net"] and last["mem_total"] >= last["mem_avail"] > 0
    assert stream.header["clk_tck"] == telemetry.CLK_TCK and stream.header["pid"] == s.pid
    assert stream.header["engine"] == "fathom-sampler"

    # the stand-ins only: a cluster another test runs on this host may have an osd.3 or an osd.7 too
    mine = hostsample.HostStream(header=stream.header, samples=[
        {**x, "procs": [p for p in x["procs"] if p["pid"] in (crimson.pid, osd.pid)]} for x in stream.samples])
    w = hostsample.window(mine)
    d = w["daemons"]["osd.7"]
    assert d["pid"] == crimson.pid and d["cpu_pct"] > 0 and d["rss_mib"] > 0
    assert d["cpu_s"] == pytest.approx(sampler_s)
    assert d["tasks"][0]["comm"] == "reactor-1"  # the busiest first
    assert w["daemons"]["osd.3"]["cpu_pct"] is not None and 0 <= w["cpu_pct"] <= 100
    assert w["net"]["lo"]["rx_bytes_s"] >= 0 and w["sampler_cpu_pct"] is not None
    m = hostsample.summarize([w])
    assert m["osd_cpu"] == pytest.approx(d["cpu_pct"] + w["daemons"]["osd.3"]["cpu_pct"])
    assert m["osd_mem_mib"] > 0 and m["hosts"] == 1
    t = usage.summarize(hostsample.interval_samples(mine), first["ts"], last["ts"])
    assert t["osd_cpu"] > 0 and t["host_cpu_pct"] is not None


@needs_sampler
@pytest.mark.timeout(120)
def test_a_daemon_that_ends_is_dropped_and_a_signal_ends_the_sampler() -> None:
    osd = _start(["ceph-osd", "-c", IDLE, "--id=9"], PYTHON)
    s = subprocess.Popen([str(SAMPLER), "--interval", "0.1", "--threads-of", "osd.9"], stdout=subprocess.PIPE,
                         text=True)
    assert s.stdout is not None
    records = []
    try:
        gone = False
        for line in s.stdout:
            rec = json.loads(line)
            records.append(rec)
            if rec["type"] != "sample":
                continue
            mine = [p for p in rec["procs"] if p["pid"] == osd.pid]
            if mine and osd.poll() is None:
                assert mine[0]["daemon"] == "osd.9" and mine[0]["tasks"][0]["tid"] == osd.pid
                assert osd.stdin is not None
                osd.stdin.close()  # it ends (a zombie until poll() reaps it)
            elif not mine and osd.poll() is not None:
                gone = True
                break
        assert gone
        s.send_signal(signal.SIGTERM)
        rest = [json.loads(line) for line in s.stdout]
        assert s.wait() == 0
    finally:
        _stop(osd)
        if s.poll() is None:
            s.kill()
            s.wait()
    assert rest[-1]["type"] == "sample_end" and rest[-1]["stop"] == "SIGTERM"
    assert not [r for r in records + rest if r["type"] == "error"]


@pytest.mark.parametrize("argv", INVOCATIONS)
def test_sampler_arguments(argv: list[str]) -> None:
    binary = Path(argv[0]).name
    h = subprocess.run([*argv, "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "--threads-of" in h.stdout and "--interval" in h.stdout
    assert h.stdout.startswith(f"usage: {' '.join([binary, *argv[1:]])} [--interval")
    v = subprocess.run([*argv, "--version"], capture_output=True, text=True)
    assert v.returncode == 0 and re.fullmatch(rf"{binary} \S+ \(sample format {hostsample.FORMAT}\)\n", v.stdout)
    for bad in (["--interval", "0"], ["--duration"], ["--threads-of"], ["--what"], ["--interval=x"]):
        p = subprocess.run([*argv, *bad], capture_output=True, text=True)
        rec = json.loads(p.stdout)
        assert p.returncode == 2 and rec["kind"] == "invalid_args", (bad, p.stdout)
    one = subprocess.run([*argv, "--duration=0", "--threads-of", "none"], capture_output=True, text=True)
    recs = [json.loads(line) for line in one.stdout.splitlines()]
    assert one.returncode == 0 and [r["type"] for r in recs] == ["sample_start", "sample", "sample_end"]
    assert recs[0]["threads_of"] == [] and recs[0]["engine"] == binary


def _elf_links(binary: Path) -> tuple[str | None, list[str]]:
    """What `binary` needs to start: its program interpreter (PT_INTERP) and the libraries its dynamic section
    names (DT_NEEDED), read from its program headers. A static binary has neither; a static PIE has a dynamic
    section for its own relocations, which it applies itself, naming no library."""
    data = binary.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, f"{binary}: not a 64-bit little-endian ELF"
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, interp, dynamic = [], None, None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1:  # PT_LOAD
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:  # PT_DYNAMIC
            dynamic = data[p_offset:p_offset + p_filesz]
        elif p_type == 3:  # PT_INTERP
            interp = data[p_offset:p_offset + p_filesz].rstrip(b"\0").decode()
    if dynamic is None:
        return interp, []
    entries = [struct.unpack_from("<qQ", dynamic, j) for j in range(0, len(dynamic) - 15, 16)]
    strtab = next((v for tag, v in entries if tag == 5), None)  # DT_STRTAB, a virtual address
    needed = [v for tag, v in entries if tag == 1]  # DT_NEEDED, offsets into the string table
    if not needed:
        return interp, []
    assert strtab is not None, f"{binary}: DT_NEEDED without DT_STRTAB"
    base = next(off + strtab - va for va, off, size in loads if va <= strtab < va + size)
    return interp, [data[base + n:data.index(b"\0", base + n)].decode() for n in needed]


def test_sampler_is_static_and_writes_what_engine_sample_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """fathom-sampler starts on any Linux host, whatever its C library (glibc 2.28 on RHEL 8, 2.31 on Ubuntu
    20.04, musl on Alpine) and with no Ceph library: it needs no interpreter and no library at all."""
    assert SAMPLER.exists() and ENGINE.exists(), "build both binaries: make engine"
    monkeypatch.delenv("FATHOM_ENGINE", raising=False)
    assert servers.sampler_path() == SAMPLER  # the one fathom uploads to server hosts
    interp, needed = _elf_links(ENGINE)
    assert interp and "librados.so.2" in needed, (interp, needed)  # the check sees a dynamic binary's needs
    assert _elf_links(SAMPLER) == (None, []), f"{SAMPLER} is dynamically linked: rebuild it with make engine"

    # the same records as fathom-engine --sample: the same kinds, the same fields, the header naming its binary
    runs = {}
    for argv in ([str(SAMPLER)], [str(ENGINE), "--sample"]):
        p = subprocess.run([*argv, "--duration=0", "--threads-of", "all"], capture_output=True, text=True,
                           timeout=60)  # one sample: the same records whatever the machine's load
        assert p.returncode == 0, p.stderr
        runs[argv[-1]] = [json.loads(line) for line in p.stdout.splitlines()]
    ours, engine = runs[str(SAMPLER)], runs["--sample"]
    assert [r["type"] for r in ours] == [r["type"] for r in engine] == ["sample_start", "sample", "sample_end"]
    assert [set(r) for r in ours] == [set(r) for r in engine]
    assert set(ours[1]["cpu"]) == set(engine[1]["cpu"]) == set(hostsample.CPU_FIELDS)
    assert (ours[0]["engine"], engine[0]["engine"]) == ("fathom-sampler", "fathom-engine")
    assert ours[0]["version"] == engine[0]["version"] == _version(ENGINE) == _version(SAMPLER)
    assert ours[0]["format"] == engine[0]["format"] == hostsample.FORMAT
    for recs in (ours, engine):
        assert hostsample.parse(map(json.dumps, recs), version=_version(ENGINE)).end is not None
    assert "fathom-sampler" in subprocess.run([str(ENGINE), "--help"], capture_output=True, text=True).stdout


def _in_chroot(root: Path, stage: Path | None, binary: str, *args: str) -> subprocess.CompletedProcess:
    """`binary` (a path inside `root`) run chrooted in `root` with /proc mounted there, in a private mount
    namespace: its mounts end with it and are never seen outside. `stage`: a file copied into a tmpfs mounted
    on `root`/tmp first, so that nothing is written into `root` itself."""
    script = 'mount -t proc proc "$1/proc" && exec chroot "$1" "${@:3}"'
    if stage is not None:
        script = 'mount -t tmpfs -o mode=0755 tmpfs "$1/tmp" && cp "$2" "$1/tmp/" && ' + script
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", script, "chroot",
                           str(root), str(stage or ""), binary, *args], capture_output=True, text=True, timeout=60)


def _samples_stand_in(root: Path, stage: Path | None, binary: str) -> None:
    """The sampler, chrooted in `root`, takes one sample of this host's processes, a stand-in OSD among them."""
    osd = _start(["ceph-osd", "-c", IDLE, "--id=5"], PYTHON)
    try:
        p = _in_chroot(root, stage, binary, "--duration=0", "--threads-of", "none")
    finally:
        _stop(osd)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    recs = [json.loads(line) for line in p.stdout.splitlines()]
    assert [r["type"] for r in recs] == ["sample_start", "sample", "sample_end"], p.stdout
    assert recs[0]["engine"] == "fathom-sampler" and recs[1]["ncpu"] == _cpu_lines() and "lo" in recs[1]["net"]
    mine = [x for x in recs[1]["procs"] if x["pid"] == osd.pid]
    assert [(x["daemon"], x["name"]) for x in mine] == [("osd.5", "ceph-osd")], recs[1]["procs"]


needs_chroot = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                  reason="chroot and a mount namespace need root and unshare")


@needs_sampler
@needs_chroot
@pytest.mark.timeout(120)
def test_sampler_runs_in_a_root_of_nothing_but_itself(tmp_path: Path) -> None:
    """No C library, no loader, no /etc, no /sys: only the binary and /proc."""
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    shutil.copy2(SAMPLER, root / SAMPLER.name)
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == [SAMPLER.name, "proc"]
    _samples_stand_in(root, None, f"/{SAMPLER.name}")
    assert not any((root / "proc").iterdir()), "/proc is still mounted outside the namespace"


@needs_sampler
@needs_chroot
@pytest.mark.skipif(not (REEF_ROOT / "usr" / "bin" / "ceph-osd").exists(),
                    reason=f"no Reef root file system at {REEF_ROOT} (the Reef test bed builds it)")
@pytest.mark.timeout(120)
def test_sampler_runs_in_another_distributions_root() -> None:
    """Debian 13's root file system (glibc 2.41, Ceph 18), as a server host of another distribution is. The
    binary goes into a tmpfs of the test's own: the cached root file system is not written to."""
    _samples_stand_in(REEF_ROOT, SAMPLER, f"/tmp/{SAMPLER.name}")


# ---- hostsample on hand-made records -------------------------------------------------------------------

HEADER = {"type": "sample_start", "engine": "fathom-engine", "version": "9.9.9", "format": hostsample.FORMAT,
          "host": "node1", "ncpu": 4}


def _sample(seq: int, t: float, busy: float, procs: list[dict[str, Any]], net: dict | None = None,
            disk: dict | None = None) -> dict[str, Any]:
    """Host CPU: 4 cores, `busy` of them in use since boot at time t (user), the rest idle."""
    cpu = dict.fromkeys(hostsample.CPU_FIELDS, 0.0)
    cpu.update(user=busy * t, idle=(4 - busy) * t)
    return {"type": "sample", "seq": seq, "ts": 1000.0 + t, "mono": t, "cpu": cpu, "ncpu": 4,
            "mem_total": 8 * 2**30, "mem_avail": 6 * 2**30, "net": net or {}, "disk": disk or {}, "procs": procs,
            "self_cpu_s": 0.001 * t}


def _proc(daemon: str, pid: int, cpu_s: float, ctx: int, rss: int = 100 * 2**20, **extra: Any) -> dict[str, Any]:
    return {"pid": pid, "name": "ceph-osd", "kind": daemon.split(".")[0], "daemon": daemon, "start": 1.0,
            "utime": cpu_s * 0.75, "stime": cpu_s * 0.25, "rss": rss, "vctx": ctx, "nvctx": ctx // 10,
            "threads": 60, **extra}


def _lines(*samples: dict[str, Any], header: dict | None = None) -> list[str]:
    return [json.dumps(r) for r in (header or HEADER, *samples)]


def test_window_rates() -> None:
    lo0 = {"rx_bytes": 0, "tx_bytes": 0, "rx_packets": 0, "tx_packets": 0}
    lo1 = {"rx_bytes": 10 * 2**20, "tx_bytes": 5 * 2**20, "rx_packets": 100, "tx_packets": 50}
    d1 = {"reads": 10, "read_bytes": 4 * 2**20, "writes": 20, "write_bytes": 8 * 2**20, "io_s": 0.5,
          "weighted_s": 2.0}
    tasks0 = [{"tid": 5, "comm": "reactor-0", "utime": 1.0, "stime": 0.0, "vctx": 0, "nvctx": 0, "last_cpu": 0}]
    tasks1 = [{"tid": 5, "comm": "reactor-0", "utime": 2.0, "stime": 0.0, "vctx": 10, "nvctx": 0, "last_cpu": 0},
              {"tid": 6, "comm": "reactor-1", "utime": 1.5, "stime": 0.5, "vctx": 0, "nvctx": 4, "last_cpu": 1}]
    stream = hostsample.parse(_lines(
        _sample(0, 10.0, 1.0, [_proc("osd.0", 11, 5.0, 1000), _proc("osd.1", 12, 1.0, 0, tasks=tasks0)],
                net={"lo": lo0}),
        _sample(1, 11.0, 1.0, [_proc("osd.0", 11, 5.5, 1500), _proc("osd.1", 12, 2.0, 100, tasks=tasks1)]),
        _sample(2, 12.0, 1.0, [_proc("osd.0", 11, 6.0, 2000)], net={"lo": lo1}, disk={"sda": d1}),
    ) + ['{"type": "sample", "seq": 3, "ts"'])  # a line cut short
    assert stream.bad_lines == 1 and stream.host == "node1"
    w = hostsample.window(stream)
    assert (w["dt"], w["samples"], w["ncpu"]) == (2.0, 3, 4)
    assert w["cpu_pct"] == pytest.approx(25.0) and w["cores"] == pytest.approx(1.0)
    assert w["mem_used_mib"] == 2048 and w["mem_total_mib"] == 8192
    assert w["net"]["lo"]["rx_bytes_s"] == 5 * 2**20 and w["net"]["lo"]["tx_packets_s"] == 25
    sda = w["disk"]["sda"]  # absent before: it had done no I/O
    assert (sda["read_bytes_s"], sda["write_bytes_s"], sda["util_pct"], sda["queue"]) == (2 * 2**20, 4 * 2**20, 25, 1)
    osd0 = w["daemons"]["osd.0"]
    assert osd0["cpu_pct"] == pytest.approx(50.0) and osd0["cores"] == pytest.approx(0.5)
    assert osd0["vctx_s"] == 500 and osd0["nvctx_s"] == 50 and osd0["ctx_switches_s"] == 550
    assert osd0["rss_mib"] == 100 and osd0["pid"] == 11
    osd1 = w["daemons"]["osd.1"]  # gone after the second sample: its mean over the window (none once gone)
    assert osd1["cpu_pct"] == pytest.approx(50.0) and osd1["seen_s"] == 1.0 and osd1["cpu_s"] == 1.0
    assert [t["comm"] for t in osd1["tasks"]] == ["reactor-1", "reactor-0"]  # busiest first; reactor-1 is new
    assert osd1["tasks"][0]["cpu_pct"] == pytest.approx(200.0) and osd1["tasks"][1]["vctx_s"] == 10
    assert w["sampler_cpu_pct"] == pytest.approx(0.1)
    m = hostsample.summarize([w, w])
    assert m["osd_cpu"] == pytest.approx(200.0) and m["osd_cores"] == pytest.approx(2.0)
    assert m["osd_mem_mib"] == 400 and m["host_cpu_pct"] == pytest.approx(25.0) and m["hosts"] == 2
    # a window in the middle: the samples nearest its ends; one shorter than an interval still gets two
    part = hostsample.window(stream, 1011.1, 1011.9)
    assert (part["ts_from"], part["ts_to"]) == (1011.0, 1012.0)
    assert part["daemons"]["osd.0"]["cpu_pct"] == pytest.approx(50.0)


def test_restarts_and_resets() -> None:
    stream = hostsample.parse(_lines(
        _sample(0, 0.0, 2.0, [_proc("osd.0", 11, 10.0, 100)], net={"eth0": {"rx_bytes": 500, "tx_bytes": 0}}),
        _sample(1, 1.0, 2.0, [_proc("osd.0", 11, 11.0, 200)], net={"eth0": {"rx_bytes": 1500, "tx_bytes": 0}}),
        _sample(2, 2.0, 2.0, [_proc("osd.0", 21, 0.5, 10)], net={"eth0": {"rx_bytes": 100, "tx_bytes": 0}}),
        _sample(3, 3.0, 2.0, [_proc("osd.0", 21, 1.0, 20)], net={"eth0": {"rx_bytes": 300, "tx_bytes": 0}}),
    ))
    w = hostsample.window(stream)
    osd = w["daemons"]["osd.0"]  # restarted: both processes' CPU, over the window (down in between)
    assert osd["pids"] == [11, 21] and osd["pid"] == 21
    assert osd["cpu_s"] == pytest.approx(1.5) and osd["cpu_pct"] == pytest.approx(50.0) and osd["seen_s"] == 2.0
    assert osd["rss_mib"] == 100
    assert w["net"]["eth0"]["rx_bytes_s"] is None  # the counter went down: no rate rather than a wrong one
    iv = hostsample.interval_samples(stream)
    assert [round(x["cpu_pct"]) for x in iv if x["kind"] == "osd"] == [100, 50]  # none across the restart
    assert all(x["host"] == "node1" for x in iv)
    assert [x["cpu_pct"] for x in iv if x["kind"] == "host"] == [50.0, 50.0, 50.0]


def test_two_processes_under_one_name_add_up() -> None:
    """Two clusters on one host, each with its mgr.x: at once, so their CPU and RSS add up."""
    stream = hostsample.parse(_lines(
        _sample(0, 0.0, 1.0, [_proc("mgr.x", 11, 1.0, 0), _proc("mgr.x", 12, 2.0, 0)]),
        _sample(1, 2.0, 1.0, [_proc("mgr.x", 11, 2.0, 20), _proc("mgr.x", 12, 2.5, 20)]),
    ))
    mgr = hostsample.window(stream)["daemons"]["mgr.x"]
    assert mgr["cpu_pct"] == pytest.approx(75.0) and mgr["rss_mib"] == 200 and mgr["vctx_s"] == 20
    assert mgr["pids"] == [11, 12] and mgr["pid"] == 12
    assert "tasks" not in mgr


def test_stacked_interfaces_count_once() -> None:
    """A VLAN on a bond of two NICs: every frame passes a member, the bond and the VLAN; the VLAN alone counts."""
    def nic(mib: int, *upper: str) -> dict[str, Any]:
        return {"rx_bytes": mib * 2**20, "tx_bytes": 0, **({"upper": list(upper)} if upper else {})}

    stream = hostsample.parse(_lines(
        _sample(0, 0.0, 1.0, [], net={"lo": nic(0), "eno1": nic(0, "bond0"), "eno2": nic(0, "bond0"),
                                      "bond0": nic(0, "bond0.100"), "bond0.100": nic(0)}),
        _sample(1, 1.0, 1.0, [], net={"lo": nic(50), "eno1": nic(60, "bond0"), "eno2": nic(40, "bond0"),
                                      "bond0": nic(100, "bond0.100"), "bond0.100": nic(100)}),
    ))
    w = hostsample.window(stream)
    assert hostsample.nics(w["net"]) == (["bond0.100"], {"bond0": "under bond0.100", "eno1": "under bond0",
                                                         "eno2": "under bond0", "lo": "loopback"})
    (rec,) = [r for r in hostsample.interval_samples(stream) if r["kind"] == "host"]
    assert rec["net_rx_bytes_s"] == 100 * 2**20  # not 300 (nor 350 with loopback)


def test_parse_refuses_what_it_cannot_read() -> None:
    with pytest.raises(hostsample.HostSampleError, match="format"):
        hostsample.parse(_lines(header={**HEADER, "format": 99}))
    with pytest.raises(hostsample.HostSampleError, match="expected 1.0"):
        hostsample.parse(_lines(header=HEADER), version="1.0")
    with pytest.raises(hostsample.HostSampleError, match="sample_start"):
        hostsample.parse(['{"type": "start"}'])
    with pytest.raises(hostsample.HostSampleError, match="failed"):
        hostsample.parse(['{"type": "error", "kind": "proc", "message": "cannot open /proc/stat"}'])
    with pytest.raises(hostsample.HostSampleError, match="rates need two"):
        hostsample.window(hostsample.parse(_lines(_sample(0, 1.0, 1.0, []))))
    assert hostsample.parse([b"", *[x.encode() for x in _lines()]]).samples == []


# ---- NIC bytes through a bridge: a real network-namespace test bed ----------------------------------------

SEND = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
block = b"x" * (1 << 20)
for _ in range(int(sys.argv[3])):
    s.sendall(block)
s.close()
"""


def _one_sample() -> list[dict[str, Any]]:
    """One run of the sampler taking one sample: its sample_start and sample records."""
    p = subprocess.run([str(SAMPLER), "--duration=0", "--threads-of", "none"], capture_output=True, text=True,
                       timeout=60, check=True)
    return [r for r in map(json.loads, p.stdout.splitlines()) if r["type"] in ("sample_start", "sample")]


@needs_sampler
@pytest.mark.skipif(netns.available() is not None, reason=f"a test bed: {netns.available()}")
@pytest.mark.timeout(120)
def test_nic_bytes_through_a_bridge_are_counted_once() -> None:
    """64 MiB sent from a namespace host to this host's bridge address cross the host's veth (a port of the
    bridge) and the bridge: both count them, so only the bridge, at the top of its stack, counts; the port is
    named as left out, under the bridge."""
    mib = 64
    with netns.Testbed(hosts=1) as tb:
        h = tb.hosts[0]
        with socket.socket() as listener:
            listener.bind((tb.bridge_addr, 0))
            listener.listen(1)
            got: list[int] = []

            def receive() -> None:
                conn, _ = listener.accept()
                with conn:
                    n = 0
                    while chunk := conn.recv(1 << 20):
                        n += len(chunk)
                got.append(n)

            t = threading.Thread(target=receive, daemon=True)
            before = _one_sample()
            t.start()
            subprocess.run(["ip", "netns", "exec", h.name, PYTHON, "-c", SEND, tb.bridge_addr,
                            str(listener.getsockname()[1]), str(mib)], check=True, timeout=60)
            t.join(60)
            after = _one_sample()
        assert got == [mib << 20]
    stream = hostsample.parse(map(json.dumps, [*before, after[1]]))
    w = hostsample.window(stream)
    ours = {n: w["net"][n] for n in (tb.bridge, h.veth)}  # the test bed's side here: other traffic stays out
    received = hostsample.nic_total(ours, "rx_bytes_s") * w["dt"]
    print(f"{received / 2**20:.1f} MiB counted for {mib} MiB sent")
    assert mib << 20 <= received <= 1.1 * (mib << 20)  # once, with the headers; twice would be 2x
    counted, left = hostsample.nics(w["net"])
    assert tb.bridge in counted and h.veth not in counted and left[h.veth] == f"under {tb.bridge}"
    assert left["lo"] == "loopback"
    # the host's record: the bridge's bytes in the host's total, the port's not
    (rec,) = [r for r in hostsample.interval_samples(stream) if r["kind"] == "host"]
    assert rec["net_rx_bytes_s"] == pytest.approx(sum(w["net"][n]["rx_bytes_s"] or 0.0 for n in counted))
