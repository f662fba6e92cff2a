"""Client hosts for tests and benchmarks: network namespaces on a bridge, each with its own sshd.

    with Testbed(hosts=2) as tb:       # needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and openssh-server
        tb.bridge_addr                  # this host's address on the bridge (bind the cluster there)
        tb.hosts[0].addr                # 10.x.y.11, sshd on port 22 in its own namespace and hostname
        tb.key_file, tb.known_hosts     # a client key they accept and their host key

A bridge with one address in this namespace, one namespace per host joined by a
veth pair, `sshd -D` in each (with its own UTS namespace, so `hostname` differs).
The namespaces share this host's file system and pid namespace: a pid an
engine reports there is a pid here. `no_ceph_libs=True` runs that host's sshd
in a mount namespace where /usr/lib/<arch> is a farm of links to the real
files without librados and librbd: a host without the Ceph client libraries.
`cut(i)` takes host i's link down (its network is gone, its processes run on); `stop_sshd(i)` kills its sshd
and SSH sessions by pid (connections refused) and `start_sshd(i)` starts it again.
Everything made is removed on exit, also after a failure; names carry "fh" and
this process's id and a letter per testbed, so neither two test runs nor two testbeds of one collide.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from fathom.cluster import box

SSHD = "/usr/sbin/sshd"


def available() -> str | None:
    """Why a testbed cannot be made here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, a bridge)"
    for tool in ("ip", "unshare", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if not os.path.exists(SSHD):
        return "needs openssh-server (sshd)"
    return None


@dataclass
class NsHost:
    name: str  # the namespace
    addr: str
    veth: str  # this side of its link (down = cut)
    pid: int | None = None  # sshd's


class Testbed:
    _made = 0  # testbeds made by this process: each gets its own names and subnet

    def __init__(self, hosts: int = 2, no_ceph_libs: tuple[int, ...] = (), max_sessions: int = 100):
        n, Testbed._made = Testbed._made, Testbed._made + 1
        tag = f"fh{os.getpid() % 100000}{chr(ord('a') + n % 26)}"
        self.bridge = f"{tag}br"
        net = 20 + (os.getpid() + 7 * n) % 200
        self.prefix = f"10.215.{net}"
        self.bridge_addr = f"{self.prefix}.1"
        self.hosts = [NsHost(f"{tag}c{i}", f"{self.prefix}.{11 + i}", f"{tag}v{i}") for i in range(hosts)]
        self.no_ceph_libs = set(no_ceph_libs)
        self.max_sessions = max_sessions
        self.dir = Path(tempfile.mkdtemp(prefix=f"{tag}-sshd-"))
        self.key_file = str(self.dir / "id_ed25519")
        self.known_hosts = str(self.dir / "known_hosts")
        self.host_key = self.dir / "ssh_host_ed25519_key"
        self._made_run_sshd = False
        self._procs: list[subprocess.Popen] = []

    def __enter__(self) -> Testbed:
        try:
            self._up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def _up(self) -> None:
        d = self.dir
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.key_file, "-C", "fathom-testbed")
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_key), "-C", "fathom-testbed-host")
        shutil.copy(self.key_file + ".pub", d / "authorized_keys")
        pub = (d / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        Path(self.known_hosts).write_text("".join(f"{h.addr} {' '.join(pub)}\n" for h in self.hosts))
        if not os.path.isdir("/run/sshd"):
            os.makedirs("/run/sshd", mode=0o755)
            self._made_run_sshd = True
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        self._claim_subnet()
        _sh("ip", "link", "set", self.bridge, "up")
        for i, h in enumerate(self.hosts):
            box.join(self.bridge, h.name, h.veth, h.addr)
            conf = d / f"sshd-{i}.conf"
            conf.write_text(f"""ListenAddress {h.addr}:22
HostKey {self.host_key}
PidFile {d}/sshd-{i}.pid
AuthorizedKeysFile {d}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxSessions {self.max_sessions}
MaxStartups 100
ClientAliveInterval 2
ClientAliveCountMax 2
Subsystem sftp internal-sftp
""")
            _sh(SSHD, "-t", "-f", str(conf))
            self._procs.append(self._sshd(i))
        for i, h in enumerate(self.hosts):
            self._wait_listening(i, h)

    def _claim_subnet(self) -> None:
        """The bridge's /24, one no other interface of this host has: test beds of processes side by side (a
        test run's lanes) pick theirs at once, so each checks after adding its address and moves on if another
        holds the same subnet (both move when both added at once; each picks its next at random)."""
        for _ in range(50):
            _sh("ip", "addr", "add", f"{self.bridge_addr}/24", "dev", self.bridge)
            if not _subnet_elsewhere(self.prefix, self.bridge):
                return
            _sh("ip", "addr", "del", f"{self.bridge_addr}/24", "dev", self.bridge)
            self._number(random.randrange(20, 220))
        raise RuntimeError(f"no free 10.215.x.0/24 subnet for the test bed's bridge {self.bridge}")

    def _number(self, net: int) -> None:
        self.prefix = f"10.215.{net}"
        self.bridge_addr = f"{self.prefix}.1"
        for i, h in enumerate(self.hosts):
            h.addr = f"{self.prefix}.{11 + i}"
        Path(self.known_hosts).write_text("".join(f"{h.addr} {' '.join(self._host_pub())}\n" for h in self.hosts))

    def _host_pub(self) -> list[str]:
        return (self.dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]

    def _sshd(self, i: int) -> subprocess.Popen:
        """Host i's sshd started (its config written by _up); h.pid is its pid."""
        h, d = self.hosts[i], self.dir
        body = f"hostname {h.name}; exec {SSHD} -D -f {d}/sshd-{i}.conf -E {d}/sshd-{i}.log"
        if i in self.no_ceph_libs:
            body = _without_ceph_libs(d / f"lib-{i}") + body
        # ip netns exec, unshare and sh all exec: this process is sshd
        p = subprocess.Popen(["ip", "netns", "exec", h.name, "unshare", "--uts", "--mount", "sh", "-c", body],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        h.pid = p.pid
        return p

    def stop_sshd(self, i: int) -> None:
        """Host i's sshd and every SSH session under it killed by pid (SIGKILL): the host stops answering SSH
        (connections are refused) while its other processes run on."""
        listener = self.hosts[i].pid
        assert listener is not None
        for pid in [*_descendants(listener), listener]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._procs[i].wait(10)

    def start_sshd(self, i: int) -> None:
        """Host i's sshd again, after stop_sshd: it answers SSH once this returns."""
        self._procs[i] = self._sshd(i)
        self._wait_listening(i, self.hosts[i])

    def _wait_listening(self, i: int, h: NsHost) -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self._procs[i].poll() is not None:
                raise RuntimeError(f"sshd in {h.name} exited: {self._procs[i].stderr.read().decode()[-500:]}"
                                   f"{(self.dir / f'sshd-{i}.log').read_text()[-500:]}")
            out = subprocess.run(["ip", "netns", "exec", h.name, "ss", "-Hltn", "sport = :22"],
                                 capture_output=True, text=True).stdout
            if h.addr in out:
                return
            time.sleep(0.05)
        raise RuntimeError(f"sshd in {h.name} did not listen on {h.addr}:22 within 15 s")

    def cut(self, i: int) -> None:
        """Host i's network is gone (its link down); its processes keep running."""
        _sh("ip", "link", "set", self.hosts[i].veth, "down")

    def down(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self._procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for h in self.hosts:
            subprocess.run(["ip", "netns", "del", h.name], capture_output=True)  # removes its veth pair too
            subprocess.run(["ip", "link", "del", h.veth], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        if self._made_run_sshd and not _running("sshd"):  # another sshd (another test bed's) still needs it
            shutil.rmtree("/run/sshd", ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def _subnet_elsewhere(prefix: str, mine: str) -> bool:
    """Whether an interface other than `mine` has an address in prefix.0/24."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    return any(f.split()[1] != mine and f.split()[3].startswith(prefix + ".") for f in out.splitlines()
               if len(f.split()) > 3)


def _running(comm: str) -> bool:
    """Whether any process of that name is alive on this host (zombies aside)."""
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and Path(f"/proc/{d}/comm").read_text().strip() == comm and \
                    Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                return True
        except OSError:
            pass
    return False


def _descendants(pid: int) -> list[int]:
    """Every process under pid (children first found, then theirs), read from /proc."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                parent[int(d)] = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    out, todo = [], [pid]
    while todo:
        cur = todo.pop()
        kids = [p for p, pp in parent.items() if pp == cur]
        out += kids
        todo += kids
    return out


def _without_ceph_libs(d: Path) -> str:
    """Shell lines (run inside the host's own mount namespace) that hide librados and librbd: the library
    directory becomes a directory of links to every other file of the real one (made before it is mounted
    over the real one: every program needs that directory to start)."""
    lib = "/usr/lib/x86_64-linux-gnu"
    return (f"mkdir -p {d}/real {d}/farm && mount --bind {lib} {d}/real && "
            f"for f in {d}/real/*; do case ${{f##*/}} in librados.so*|librbd.so*) ;; *) ln -s \"$f\" {d}/farm/;; "
            f"esac; done && mount --bind {d}/farm {lib} && ")


def _sh(*argv: str) -> None:
    p = subprocess.run(list(argv), capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` failed: {p.stderr.strip()}")
