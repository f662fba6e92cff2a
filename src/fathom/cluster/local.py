"""A disposable single-host Ceph cluster, like vstart.sh, with all state under one directory.

Layout of DIR:
  fathom-cluster.json   marker and state: fsid, ports, options, daemons (no secrets)
  ceph.conf             the cluster's own conf; nothing in /etc/ceph is read or written
  keyring               client.admin and mon. keys (mode 0600)
  s3.json               the RGW user's keys, when RGW runs (mode 0600)
  mon.a/ mgr.x/ osd.N/ mds.a/ rgw/   daemon data
  run/                  admin sockets and one pid file per daemon (written by fathom)
  mnt/, journal.json    mounts and daemons fathom added to the cluster, and their undo journal (cluster.mounts)
  ganesha/, nfs-local/  nfs-ganesha's config and recovery directory, and its local export (cluster.ganesha)
  log/                  daemon logs and their stdout/stderr
  rootfs/               with `ceph` a root file system: the overlay's upper and work dirs (fathom.cluster.cephsrc)

Daemons run in the foreground (-f) in their own session, so fathom knows each pid
from the moment it starts it, and `down` stops exactly those pids.
"""

from __future__ import annotations

import json
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fathom.cluster import box, cephsrc, keys
from fathom.cluster import client as client_mod
from fathom.cluster.client import Client
from fathom.cluster.ceph import Ceph, Connection, require_binaries
from fathom.cluster.cephsrc import CephSource
from fathom.cluster.localconf import (LOOPBACK, bind_address, conf_text, free_port, make_rgw_certificate, rgw_addr,
                                     rgw_keyring, rgw_names)
from fathom.errors import ClusterError, FathomError, UsageError

MARKER = "fathom-cluster.json"
DEFAULT_DIR = Path(".fathom/cluster")
BASE_BINARIES = ("ceph", "ceph-mon", "ceph-mgr", "ceph-osd", "ceph-authtool", "monmaptool")
FS_NAME = "fathomfs"
S3_USER = "fathom"


@dataclass
class Daemon:
    name: str  # e.g. "osd.0", "mon.a", "client.rgw.fathom"
    kind: str  # mon, mgr, osd, mds, rgw
    pid: int | None
    # a process seen in /proc: its cephadm unit's fsid, its argv's conf (what ties a gateway to a cluster)
    fsid: str | None = None
    conf: str | None = None

    @property
    def running(self) -> bool:
        return self.pid is not None and pid_alive(self.pid)


# the order daemons are stopped in: the gateways and MDSs (every kind not named), then the OSDs, the mgr, the mons
STOP_WAVES: tuple[tuple[str, ...], ...] = ((), ("osd",), ("mgr",), ("mon",))
MDS_GRACE_S = 2.0


def _kill(daemons: list[Daemon], sig: int = signal.SIGKILL) -> None:
    for d in daemons:
        with contextlib.suppress(ProcessLookupError):
            os.kill(d.pid, sig)  # type: ignore[arg-type]


def pid_alive(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class LocalCluster:
    """One disposable cluster under `root`. All methods are safe to call repeatedly."""

    def __init__(self, root: Path | str = DEFAULT_DIR, progress: Callable[[str], None] | None = None):
        self.root = Path(root).absolute()
        self.progress = progress or (lambda msg: None)

    # ---- paths and state -------------------------------------------------
    @property
    def conf_path(self) -> Path:
        return self.root / "ceph.conf"

    @property
    def keyring_path(self) -> Path:
        return self.root / "keyring"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    def state(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.root / MARKER).read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def _save_state(self, state: dict[str, Any]) -> None:
        tmp = self.root / (MARKER + ".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.root / MARKER)

    def exists(self) -> bool:
        return self.state() is not None

    def connection(self) -> Connection:
        if not self.exists():
            raise ClusterError(f"no fathom cluster in {self.root}", hint="start one with `fathom cluster up`")
        return Connection(conf=str(self.conf_path), name="client.admin", keyring=str(self.keyring_path),
                          client=self.client())

    def client(self) -> Client:
        """Whose Ceph client reaches this cluster: chosen at `up` (by default its daemons' release)."""
        return Client.from_dict((self.state() or {}).get("client"))

    def ceph(self, timeout: float = 60.0) -> Ceph:
        return Ceph(self.connection(), timeout=timeout)

    def daemons(self) -> list[Daemon]:
        """Every daemon fathom started for this cluster, with the pid from its pid file."""
        out = []
        st = self.state() or {}
        for name in st.get("daemons", []):
            pid = None
            try:
                pid = int((self.run_dir / f"{name}.pid").read_text().strip())
            except (OSError, ValueError):
                pass
            out.append(Daemon(name=name, kind=_kind(name), pid=pid))
        return out

    def source(self) -> CephSource:
        """Where the daemons come from (host, build, rootfs)."""
        return CephSource.from_dict((self.state() or {}).get("ceph_source"))

    def is_up(self) -> bool:
        ds = self.daemons()
        return bool(ds) and all(d.running for d in ds)

    def s3(self) -> dict[str, str] | None:
        """RGW endpoint and keys (for the engine and `cluster env`; never stored in results)."""
        try:
            return json.loads((self.root / "s3.json").read_text())
        except (OSError, json.JSONDecodeError):
            return None

    # ---- up ----------------------------------------------------------------
    def up(self, osds: int = 1, osd_size: int = 10 * 1024**3, objectstore: str = "bluestore",
           rgw: bool = False, mds: bool = False, timeout: float = 120.0,
           settings: dict[str, dict[str, str]] | None = None, bind: str | None = None,
           places: dict[str, dict[str, Any]] | None = None, ceph: str | CephSource | None = None,
           client: str | Client | None = None, hosts: dict[str, Any] | None = None) -> bool:
        """Start the cluster. Returns False (and changes nothing) if it is already up.

        settings: extra ceph.conf options by section ({"osd": {"osd_op_num_shards": "8"}}).
        bind: the IPv4 address every daemon listens on (default 127.0.0.1): one of this host's that
        client hosts reach, for engines on other hosts.
        places: daemons started elsewhere than this host, by name: {"osd.1": {"prefix": [argv that enters the
        other host, e.g. nsenter into a network namespace], "addr": its address there}} (a multi-host
        topology on one machine, as tests build with fathom.hosts.netns).
        ceph: where the daemons come from: a Ceph build directory, a root file system, or a release built with
        `fathom cluster rootfs` (fathom.cluster.cephsrc); default this host's Ceph.
        client: whose Ceph client fathom reaches it with (fathom.cluster.client): default the daemons' own
        release; `host` keeps this host's. hosts: emulated hosts ({n, nic, delay_ms}: fathom.cluster.box).
        """
        addr = bind_address(bind or LOOPBACK)
        if osds < 1:
            raise UsageError(f"--osds: must be at least 1, got {osds}")
        if objectstore not in ("bluestore", "memstore"):
            raise UsageError(f"--objectstore: must be bluestore or memstore, got {objectstore!r}")
        if osd_size < 1024**3:
            raise UsageError(f"--osd-size: must be at least 1GiB, got {osd_size} bytes")
        bins = (list(BASE_BINARIES) + (["radosgw", "radosgw-admin", "openssl"] if rgw else [])
                + (["ceph-mds"] if mds else []))
        src = ceph if isinstance(ceph, CephSource) else cephsrc.resolve(ceph)
        _require(src, bins)
        cl = client if isinstance(client, Client) else (client_mod.resolve(client) if client
                                                          else client_mod.of_source(src.to_dict()))
        if self.exists():
            if self.is_up():
                return False
            raise ClusterError(
                f"{self.root} holds a fathom cluster whose daemons are not all running",
                hint=f"run `fathom cluster down --dir {self.root}` first, then `up` again",
            )
        if self.root.exists() and any(self.root.iterdir()):
            raise ClusterError(
                f"{self.root} exists and is not a fathom cluster directory; fathom will not write into it",
                hint="choose another --dir, or remove that directory yourself",
            )
        t0 = time.monotonic()
        self.progress(f"starting a local cluster in {self.root}")
        for d in (self.root, self.run_dir, self.log_dir):
            d.mkdir(parents=True, exist_ok=True)
        ports: set[int] = set()
        mon_v2 = free_port(addr, avoid=ports)
        mon_v1 = free_port(addr, avoid=ports | {mon_v2})
        ports |= {mon_v1, mon_v2}
        rgw_port = rgw_tls_port = None
        if rgw:
            rgw_port = free_port(addr, avoid=ports)
            ports.add(rgw_port)
            rgw_tls_port = free_port(addr, avoid=ports)
            ports.add(rgw_tls_port)
        state: dict[str, Any] = {
            "fsid": str(uuid.uuid4()), "mon_host": f"[v2:{addr}:{mon_v2},v1:{addr}:{mon_v1}]", "bind": addr,
            "osds": osds, "osd_size": osd_size, "objectstore": objectstore, "rgw": rgw, "mds": mds,
            "rgw_port": rgw_port, "rgw_tls_port": rgw_tls_port, "daemons": [], "created": time.time(), "ready_s": None,
            "settings": settings or {}, "places": places or {}, "ceph_source": src.to_dict(),
            "client": cl.to_dict(),
        }
        self._save_state(state)
        if hosts:  # made as the state records them (`down` removes them after a crash), the daemons placed there
            box.build(state, hosts, osds, mds, (mon_v2, mon_v1), lambda: self._save_state(state))
        self._say_sources(src, cl)
        if src.kind == "rootfs":
            self._holder(state, start=True)  # the namespace first: mkfs runs in it
        if rgw:
            make_rgw_certificate(self.root / "rgw", [rgw_addr(state, n) for n in rgw_names(state)])
        self.conf_path.write_text(conf_text(self.root, state))
        try:
            self._mkfs_mon(state)
            self._start(state, "mon.a", ["ceph-mon", "-i", "a"])
            self.progress("mon.a started")
            ceph = self.ceph(timeout=30)
            self._wait(lambda: _mon_ready(ceph), 30, "mon.a did not answer", ["mon.a"])
            if state.get("aes_for_old_clients"):
                self._mute_insecure_auth(ceph)
            self._start_mgr(state, ceph)
            for i in range(osds):
                self._start_osd(state, ceph, i)
            self._wait(lambda: _osds_up(ceph) >= osds, timeout, f"{osds} OSD(s) did not come up",
                       [f"osd.{i}" for i in range(osds)])
            if mds:
                self._start_mds(state, ceph)
            if rgw:
                self._start_rgw(state, ceph)
            self._wait(lambda: _health(ceph) == "HEALTH_OK", timeout, "cluster did not reach HEALTH_OK",
                       [d for d in state["daemons"]])
        except BaseException:
            self.progress("start-up failed: stopping the daemons already started; logs kept in " + str(self.log_dir))
            self.stop_daemons()
            box.remove(state.get("box"))
            raise
        state["ready_s"] = round(time.monotonic() - t0, 2)
        self._save_state(state)
        return True

    def _say_sources(self, src: CephSource, cl: Client) -> None:
        if src.kind == "rootfs":
            self.progress(f"daemons from the root file system {src.dir} (chrooted, private mount namespace)")
        elif src.kind == "build":
            self.progress(f"daemons from the Ceph build directory {src.dir}")
        if cl.kind != "host":
            self.progress(f"Ceph client: {cl.version() or 'unknown version'} from {cl.dir}")

    def _cmd(self, argv: list[str], st: dict[str, Any] | None = None) -> list[str]:
        """argv of one of the cluster's own programs (a daemon, mkfs, authtool) run from its Ceph source."""
        st = st if st is not None else (self.state() or {})
        src = CephSource.from_dict(st.get("ceph_source"))
        if argv[0] in client_mod.GATEWAYS:  # a FUSE gateway is a client: the cluster's client's
            return client_mod.gateway_argv(Client.from_dict(st.get("client")), argv)
        if argv[0] not in cephsrc.DAEMON_TOOLS:  # rbd-fuse, nfs-ganesha: this host's (checked: _start)
            return argv
        if src.kind == "build":
            b = Path(src.dir or "")
            extra = cephsrc.build_args(b) if argv[0] in cephsrc.CONFIGURED else []
            return [str(b / "bin" / argv[0]), *argv[1:], *extra]
        if src.kind == "rootfs":
            return [*cephsrc.rootfs_prefix(self._holder(st), self.root), *argv]
        return argv

    def _env(self, name: str | None = None) -> dict[str, str]:
        env = dict(os.environ, CEPH_CONF=str(self.conf_path))
        env.pop("CEPH_ARGS", None)
        if name in client_mod.GATEWAYS:
            return self.client().env(env)
        src = self.source()
        return cephsrc.build_env(Path(src.dir or ""), env) if src.kind == "build" else env

    def _holder(self, st: dict[str, Any], start: bool = False) -> int:
        """The pid holding the root file system's mount namespace. start: start one when there is none (`up`,
        or a daemon started again after all were stopped); otherwise its absence is an error."""
        holder = st.get("holder")
        if not cephsrc.holder_alive(holder, self.root):
            if not start:
                raise ClusterError(f"the mount namespace of the cluster in {self.root} is gone (its holder process "
                                   "ended), so its root file system's programs cannot run",
                                   hint=f"`fathom cluster down --dir {self.root}`, then `up` again")
            holder = cephsrc.start_holder(Path(st["ceph_source"]["dir"]), self.root)
            st["holder"] = holder
            self._save_state(st)
        return int(holder["pid"])  # type: ignore[index]

    def _tool(self, *argv: str, timeout: float = 60) -> str:
        env = self._env()
        try:
            proc = subprocess.run(self._cmd(list(argv)), capture_output=True, text=True, timeout=timeout, env=env,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"`{' '.join(argv[:3])}` did not finish within {timeout} s") from None
        if proc.returncode != 0:
            raise ClusterError(f"`{' '.join(argv[:3])} ...` failed: {(proc.stderr or proc.stdout).strip()[-500:]}")
        return proc.stdout

    def _help(self, prog: str) -> str:
        """A cluster tool's usage text (what options its release has)."""
        try:
            p = subprocess.run(self._cmd([prog, "--help"]), capture_output=True, text=True, timeout=30,
                               env=self._env(), stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return p.stdout + p.stderr

    def _mute_insecure_auth(self, ceph: Ceph) -> None:
        """The aes keys an older client needs (fathom.cluster.keys): chosen, so muted on this disposable cluster."""
        for code in keys.AUTH_INSECURE_CHECKS:
            ceph.ceph("health", "mute", code, "--sticky", fmt_json=False)
        self.progress("aes keys for this host's older Ceph clients: the AUTH_INSECURE_* health checks are muted")

    def _mkfs_mon(self, st: dict[str, Any]) -> None:
        kr, r = str(self.keyring_path), self.root
        key_type, ciphers = (keys.cipher_args(self._help, self.client().major()) if self.source().kind != "host"
                             else ([], []))
        self._tool("ceph-authtool", "--create-keyring", kr, "--gen-key", *key_type, "-n", "mon.",
                   "--cap", "mon", "allow *")
        self._tool("ceph-authtool", kr, "--gen-key", *key_type, "-n", "client.admin", "--cap", "mon", "allow *",
                   "--cap", "osd", "allow *", "--cap", "mds", "allow *", "--cap", "mgr", "allow *")
        os.chmod(kr, 0o600)
        if ciphers:
            st["aes_for_old_clients"] = True
            self._save_state(st)
        monmap = r / "monmap"
        self._tool("monmaptool", "--create", "--clobber", "--fsid", st["fsid"],
                   "--addv", "a", st["mon_host"], *ciphers, str(monmap))
        (r / "mon.a").mkdir(exist_ok=True)
        self._tool("ceph-mon", "-c", str(self.conf_path), "--mkfs", "-i", "a", "--monmap", str(monmap),
                   "--keyring", kr)

    def _start(self, st: dict[str, Any], name: str, argv: list[str], ceph_args: bool = True) -> int:
        """Start one daemon in the foreground in its own session; record its pid at once."""
        if argv[0] in client_mod.HOST_ONLY:
            client_mod.check_host_reads(str(self.keyring_path), argv[0])
        out = open(self.log_dir / f"{name}.out", "ab")
        env = self._env(argv[0])
        argv = self._cmd(argv, st)
        extra = ["-c", str(self.conf_path), "-f"] if ceph_args else []
        place = (st.get("places") or {}).get(name)
        if place:  # exec'd by the prefix, so the pid is the daemon's
            argv = [*place["prefix"], *argv, "--public-addr", place["addr"], "--cluster-addr", place["addr"]]
        proc = subprocess.Popen(argv + extra, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True, close_fds=True)
        out.close()
        (self.run_dir / f"{name}.pid").write_text(f"{proc.pid}\n")
        if name not in st["daemons"]:
            st["daemons"].append(name)
            self._save_state(st)
        return proc.pid

    def spawn(self, name: str, argv: list[str], ceph_args: bool = True, **state: Any) -> int:
        """Start a daemon that lives with this cluster (a FUSE daemon, nfs-ganesha) as its own are started: in the
        foreground in its own session, its pid file in run/, listed in the state (telemetry samples it, `down`
        stops it). ceph_args: it takes the cluster's `-c CONF -f`; state: fields to keep in the state with it."""
        st = self.state()
        if st is None:
            raise ClusterError(f"no fathom cluster in {self.root}")
        pid = self._start(st, name, argv, ceph_args)
        if state:
            st.update(state)
            self._save_state(st)
        return pid

    def forget(self, name: str, *fields: str) -> None:
        """Drop a stopped daemon (and state fields kept with it) from the state, and its pid file."""
        st = self.state()
        if st is not None and (name in st.get("daemons", []) or any(f in st for f in fields)):
            if name in st.get("daemons", []):
                st["daemons"].remove(name)
            for f in fields:
                st.pop(f, None)
            self._save_state(st)
        (self.run_dir / f"{name}.pid").unlink(missing_ok=True)

    def start_daemon(self, name: str) -> int:
        """Start again one of this cluster's daemons that is not running (a fault stopped it); returns its pid.

        Its data and keyring are where `up` made them, so it rejoins the cluster as itself."""
        st = self.state()
        if st is None or name not in st.get("daemons", []):
            raise ClusterError(f"{name} is not a daemon of the cluster in {self.root}")
        d = next(d for d in self.daemons() if d.name == name)
        if d.running:
            return d.pid  # type: ignore[return-value]
        kind, ident = _kind(name), name.split(".", 1)[-1]
        argv = {"osd": ["ceph-osd", "-i", ident], "mon": ["ceph-mon", "-i", ident], "mgr": ["ceph-mgr", "-i", ident],
                "mds": ["ceph-mds", "-i", ident],
                "rgw": ["radosgw", "-n", name, "--keyring", str(rgw_keyring(self.root, name))]}.get(kind)
        if argv is None:
            raise ClusterError(f"fathom does not know how to start {name}")
        self.progress(f"starting {name} again")
        if self.source().kind == "rootfs":
            self._holder(st, start=True)
        return self._start(st, name, argv)

    def owns(self, d: Daemon) -> bool:
        """Is d's pid still that daemon of this cluster (not a recycled pid)?"""
        return self._owns(d)

    def _start_mgr(self, st: dict[str, Any], ceph: Ceph) -> None:
        d = self.root / "mgr.x"
        d.mkdir(exist_ok=True)
        ceph.ceph("auth", "get-or-create", "mgr.x", "mon", "allow profile mgr", "osd", "allow *", "mds", "allow *",
                  "-o", str(d / "keyring"), fmt_json=False)
        self._start(st, "mgr.x", ["ceph-mgr", "-i", "x"])
        self.progress("mgr.x started")

    def _start_osd(self, st: dict[str, Any], ceph: Ceph, i: int) -> None:
        osd_uuid = str(uuid.uuid4())
        d = self.root / f"osd.{i}"
        d.mkdir(exist_ok=True)
        key = self._tool("ceph-authtool", "--gen-print-key").strip()
        secret_file = d / "new.json"
        secret_file.write_text(json.dumps({"cephx_secret": key}))
        os.chmod(secret_file, 0o600)
        got = ceph.ceph("osd", "new", osd_uuid, "-i", str(secret_file), fmt_json=False).strip()
        secret_file.unlink()
        self._tool("ceph-authtool", "--create-keyring", str(d / "keyring"), "--name", f"osd.{i}", "--add-key", key)
        os.chmod(d / "keyring", 0o600)
        if got != str(i):
            raise ClusterError(f"expected the new OSD to get id {i}, the mon gave {got!r}")
        self._tool("ceph-osd", "-c", str(self.conf_path), "-i", str(i), "--mkfs", "--key", key,
                   "--osd-uuid", osd_uuid, timeout=120)
        self._start(st, f"osd.{i}", ["ceph-osd", "-i", str(i)])
        self.progress(f"osd.{i} started ({st['objectstore']}, {st['osd_size'] // 1024**3} GiB)")

    def _start_mds(self, st: dict[str, Any], ceph: Ceph) -> None:
        d = self.root / "mds.a"
        d.mkdir(exist_ok=True)
        ceph.ceph("auth", "get-or-create", "mds.a", "mon", "allow profile mds", "osd", "allow rw tag cephfs *=*",
                  "mds", "allow", "mgr", "allow profile mds", "-o", str(d / "keyring"), fmt_json=False)
        for pool in (f"{FS_NAME}_metadata", f"{FS_NAME}_data"):
            ceph.ceph("osd", "pool", "create", pool, "8", fmt_json=False)
        ceph.ceph("fs", "new", FS_NAME, f"{FS_NAME}_metadata", f"{FS_NAME}_data", fmt_json=False)
        self._start(st, "mds.a", ["ceph-mds", "-i", "a"])
        self._wait(lambda: _mds_active(ceph), 60, "the MDS did not become active", ["mds.a"])
        self.progress("mds.a active, file system " + FS_NAME)

    def _start_rgw(self, st: dict[str, Any], ceph: Ceph) -> None:
        d = self.root / "rgw"
        d.mkdir(exist_ok=True)
        names = rgw_names(st)
        for name in names:
            kr = rgw_keyring(self.root, name)
            ceph.ceph("auth", "get-or-create", name, "mon", "allow rw", "osd", "allow rwx", "mgr", "allow rw",
                      "-o", str(kr), fmt_json=False)
            self._start(st, name, ["radosgw", "-n", name, "--keyring", str(kr)])
        addrs = [rgw_addr(st, n) for n in names]
        for name, addr in zip(names, addrs):
            self._wait(lambda a=addr: _http_answers(a, st["rgw_port"]), 90,
                       f"RGW did not answer on http://{addr}:{st['rgw_port']}", [name])
        # RGW makes the keys: they are never on a command line (ps, error messages); only its JSON answer holds them
        info = self._radosgw_admin("user", "create", "--uid", S3_USER, "--display-name", "fathom benchmark user")
        k = next((k for k in (info or {}).get("keys", []) if k.get("user") == S3_USER), None)
        if not k:
            raise ClusterError(f"radosgw-admin user create --uid {S3_USER} returned no S3 keys",
                               hint=f"see {self.log_dir} for RGW's log")
        plain = [f"http://{a}:{st['rgw_port']}" for a in addrs]
        keys: dict[str, Any] = {"endpoint": plain[0], "access_key": k["access_key"], "secret_key": k["secret_key"],
                                "user": S3_USER, "region": "default"}
        if st.get("rgw_tls_port"):
            tls = [f"https://{a}:{st['rgw_tls_port']}" for a in addrs]
            keys.update(tls_endpoint=tls[0], ca_file=str(d / "ca.crt"))
        if len(names) > 1:  # one RGW per emulated host: the s3 interface spreads its engines over them
            keys.update(endpoints=plain, **({"tls_endpoints": tls} if st.get("rgw_tls_port") else {}))
        fd = os.open(self.root / "s3.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(keys, f)
        self.progress(f"RGW answering on {', '.join(plain)}, S3 user {S3_USER}")

    def _radosgw_admin(self, *args: str) -> Any:
        """The cluster's own radosgw-admin (its release's zone and user formats), JSON out."""
        out = self._tool("radosgw-admin", "-c", str(self.conf_path), "-n", "client.admin", "--keyring",
                         str(self.keyring_path), *args, "--format", "json", timeout=60)
        try:
            return json.loads(out)
        except json.JSONDecodeError:
            raise ClusterError(f"radosgw-admin {' '.join(args[:2])} did not answer JSON: {out[-300:]}") from None

    def _wait(self, cond: Callable[[], bool], timeout: float, what: str, names: list[str]) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [d for d in self.daemons() if d.name in names and not d.running]
            if dead:
                raise ClusterError(f"{dead[0].name} exited during start-up\n{self.log_tail(dead[0].name)}",
                                   hint=f"logs are kept in {self.log_dir}; `fathom cluster down --dir {self.root}` "
                                        "removes them")
            try:
                if cond():
                    return
            except ClusterError:
                pass
            time.sleep(0.5)
        raise ClusterError(f"{what} within {timeout:.0f} s\n" + "\n".join(self.log_tail(n) for n in names[:2]),
                           hint=f"logs are kept in {self.log_dir}")

    def log_tail(self, name: str, lines: int = 15) -> str:
        """The last lines of a daemon's stderr and log, and its last error lines (Ceph's level -1) if the
        tail does not hold them: a daemon can log many lines of shutdown after the error that stopped it."""
        parts = []
        for f in (self.log_dir / f"{name}.out", self.log_dir / f"{name}.log"):
            try:
                all_lines = f.read_text(errors="replace").splitlines()
            except OSError:
                continue
            text = all_lines[-lines:]
            errors = [ln for ln in all_lines[:-lines] if " -1 " in ln][-5:]
            if errors:
                parts.append(f"--- last error lines of {f} ---\n" + "\n".join(errors))
            if text:
                parts.append(f"--- last lines of {f} ---\n" + "\n".join(text))
        return "\n".join(parts) or f"(no log for {name} in {self.log_dir})"

    # ---- down ----------------------------------------------------------------
    def stop_daemons(self, timeout: float = 30.0, names: list[str] | None = None) -> list[str]:
        """Undo fathom's mounts (cluster.mounts) when stopping them all, then SIGTERM exactly our daemons (by pid
        file, checked against /proc), then SIGKILL stragglers. names: only these (e.g. RGW, to restart it after
        a zone change); mounts stay."""
        from fathom.cluster import mounts

        if names is None:
            mounts.teardown(self)
        ours = [d for d in self.daemons() if d.pid is not None and d.running and self._owns(d)
                and (names is None or d.name in names)]
        deadline = time.monotonic() + timeout
        # in waves, each before what it needs: an RGW told to stop with its OSDs gone waits out the whole timeout
        # on its ops, and an OSD with no mon left to hear it is down waits out osd_mon_shutdown_timeout (5 s)
        for wave in STOP_WAVES:
            now = [d for d in ours if (d.kind in wave if wave else d.kind not in ("osd", "mgr", "mon")) and d.running]
            _kill(now, signal.SIGTERM)
            # an MDS told to stop takes ~10 s over its own shutdown; a cluster that is going away needs none of it
            grace = time.monotonic() + MDS_GRACE_S if names is None else deadline
            while time.monotonic() < deadline and any(d.running for d in now):
                if time.monotonic() > grace:
                    _kill([d for d in now if d.kind == "mds" and d.running])
                time.sleep(0.05)
        _kill([d for d in ours if d.running])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(d.running for d in ours):
            time.sleep(0.1)
        left = [d.name for d in ours if d.running]
        if left:
            raise ClusterError(f"daemons still running after SIGKILL: {', '.join(left)}")
        if names is None:  # the root file system's mounts and namespace end with the daemons
            cephsrc.stop_holder((self.state() or {}).get("holder"), self.root)
        return [d.name for d in ours]

    def _owns(self, d: Daemon) -> bool:
        """Guard against a recycled pid: the process must be a ceph daemon using our conf (or ganesha using the
        config fathom wrote for this cluster)."""
        try:
            cmd = Path(f"/proc/{d.pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        if self.source().kind == "rootfs" and d.kind in ("mon", "mgr", "osd", "mds", "rgw") \
                and not cephsrc.in_root(d.pid, self.root):  # type: ignore[arg-type]
            return False  # the root's daemons run chrooted in it
        return str(self.conf_path).encode() in cmd or str(self.root / "ganesha" / "ganesha.conf").encode() in cmd

    def down(self) -> list[str]:
        """Stop our daemons, then remove the directory. Refuses a directory fathom did not create."""
        if not self.root.exists():
            return []
        if not self.exists():
            raise ClusterError(
                f"{self.root} is not a fathom cluster directory (no {MARKER}); fathom removes nothing there"
            )
        stopped = self.stop_daemons()
        left = box.remove((self.state() or {}).get("box"))
        if left:
            raise ClusterError(f"the emulated hosts of {self.root} were not all removed: {'; '.join(left)}")
        shutil.rmtree(self.root)
        return stopped

    # ---- status ----------------------------------------------------------------
    def status(self, timeout: float = 15.0) -> dict[str, Any]:
        st = self.state()
        if st is None:
            raise ClusterError(f"no fathom cluster in {self.root}", hint="start one with `fathom cluster up`")
        daemons = [{"name": d.name, "pid": d.pid, "running": d.running} for d in self.daemons()]
        out: dict[str, Any] = {"dir": str(self.root), "conf": str(self.conf_path), "fsid": st["fsid"],
                               "mon_host": st["mon_host"], "objectstore": st["objectstore"],
                               "daemons": daemons, "health": "UNREACHABLE", "osds_up": 0, "osds_in": 0,
                               "pools": [], "usage": None, "ready_s": st.get("ready_s"),
                               "ceph_source": self.source().to_dict(), "client": self.client().describe()}
        if st.get("rgw") and self.s3():
            out["s3_endpoint"] = self.s3()["endpoint"]  # type: ignore[index]
        if not any(d["running"] and d["name"] == "mon.a" for d in daemons):
            out["health"] = "DOWN"
            return out
        try:
            ceph = self.ceph(timeout=timeout)
            s = ceph.ceph("status", timeout=timeout)
            out["health"] = s["health"]["status"]
            out["health_checks"] = {k: v["summary"]["message"] for k, v in s["health"].get("checks", {}).items()}
            osdmap = s["osdmap"].get("osdmap", s["osdmap"])
            out["osds_up"] = int(osdmap.get("num_up_osds", 0))
            out["osds_in"] = int(osdmap.get("num_in_osds", 0))
            df = ceph.ceph("df", timeout=timeout)
            out["pools"] = [{"name": p["name"], "id": p["id"], "stored_bytes": p["stats"].get("stored", 0),
                             "objects": p["stats"].get("objects", 0)} for p in df.get("pools", [])]
            out["usage"] = {k: df["stats"][k] for k in ("total_bytes", "total_used_raw_bytes", "total_avail_bytes")
                            if k in df["stats"]}
        except FathomError as exc:
            out["error"] = exc.message
        return out

    def env_lines(self) -> list[str]:
        conn = self.connection()
        lines = [f"export CEPH_CONF={_q(conn.conf)}", f"export CEPH_KEYRING={_q(conn.keyring or '')}",
                 f"export CEPH_ARGS={_q('--id ' + conn.client_id + ' --keyring ' + (conn.keyring or ''))}"]
        s3 = self.s3()
        if s3:
            lines += [f"export AWS_ENDPOINT_URL={_q(s3['endpoint'])}", f"export S3_ENDPOINT={_q(s3['endpoint'])}",
                      f"export AWS_ACCESS_KEY_ID={_q(s3['access_key'])}",
                      f"export AWS_SECRET_ACCESS_KEY={_q(s3['secret_key'])}",
                      f"export AWS_DEFAULT_REGION={_q(s3['region'])}",
                      f"export S3_KEYS_FILE={_q(str(self.root / 's3.json'))}"]
            if s3.get("tls_endpoint"):
                lines += [f"export S3_TLS_ENDPOINT={_q(s3['tls_endpoint'])}",
                          f"export AWS_CA_BUNDLE={_q(s3['ca_file'])}"]
        if (self.state() or {}).get("mds"):
            lines.append(f"export CEPHFS_NAME={FS_NAME}")
        return lines


def _require(src: CephSource, bins: list[str]) -> None:
    """The host's client tools on PATH; the daemons and their tools in the Ceph source."""
    if src.kind == "host":
        require_binaries(*bins)
        return
    require_binaries(*[b for b in bins if b not in cephsrc.DAEMON_TOOLS])
    missing = cephsrc.missing_programs(src, bins)
    if missing:
        raise ClusterError(f"the Ceph {src.kind} {src.dir} lacks {', '.join(missing)}",
                           hint="a root file system needs ceph-mon, ceph-osd, ceph-mgr, ceph-common (and radosgw "
                                "for --rgw); `fathom cluster rootfs` builds one")


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def _kind(name: str) -> str:
    if name.startswith("client.rgw"):
        return "rgw"
    return name.split(".", 1)[0]


def _mon_ready(ceph: Ceph) -> bool:
    return bool(ceph.ceph("mon", "stat", timeout=10))


def _osds_up(ceph: Ceph) -> int:
    st = ceph.ceph("osd", "stat", timeout=10)
    return int(st.get("num_up_osds", st.get("osdmap", {}).get("num_up_osds", 0)))


def _health(ceph: Ceph) -> str:
    return ceph.ceph("health", timeout=10)["status"]


def _mds_active(ceph: Ceph) -> bool:
    fs = ceph.ceph("fs", "status", FS_NAME, timeout=10) or {}
    return any(m.get("state") == "active" for m in fs.get("mdsmap", []))


def _http_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            return s.recv(12).startswith(b"HTTP/")
    except OSError:
        return False
