"""A real single-node Kubernetes on this host, for tests: etcd, kube-apiserver, controller-manager, scheduler,
containerd + runc, kubelet. Nothing is mocked and nothing is pulled: the binaries come from the user's cache
(scripts/k8s-build.sh builds them once from the Go module proxy), the images are written here as OCI archives
(fathom.hosts.k8s.image).

    with K8sBed() as bed:               # needs root, the binaries (built when missing) and Debian's containerd
        bed.kubeconfig                   # admin kubeconfig (client certificate)
        bed.kubectl("get", "nodes")
        bed.node_ip                      # this host's address on the bed's bridge: API, kubelet, pods' gateway
        bed.import_image(tar)            # an OCI archive into the node's runtime

Everything lives under one state directory (FATHOM_K8S_DIR, default /tmp/fathom-k8sbed), one bed per
machine at a time (a lock file). Host-wide state is left as found:
- net.ipv4.ip_forward: the pods' bridge is made here with the gateway address; the CNI plugin runs with
  isGateway and ipMasq off, so it never turns forwarding on; no kube-proxy, and the kubelet finds no
  iptables on its PATH: no rule is added. Pods reach each other and this host, nothing beyond.
- the kubelet's sysctls (vm.overcommit_memory, vm.panic_on_oom, kernel.panic, kernel.panic_on_oops): it runs
  in a private mount namespace where files holding the values it wants are bound over /proc/sys, so it
  finds them set; its root directory is an rshared bind mount, so the volumes it mounts reach runc.
- containerd's restrict_oom_score_adj: without CAP_SYS_RESOURCE a negative oom_score_adj fails runc.
- the few host paths the runtime, CNI and kubelet hard-code (/run/containerd, /var/lib/cni,
  /var/lib/kubelet, /var/log/containers) are noted before the start when missing and removed at the stop;
  pod network namespaces, logs and state stay under the state directory.
Every process is started here and recorded by pid (with its start time) before anything waits on it; the
stop ends those pids only, the runtime's shims by the bed's own socket in their command line, unmounts
what is mounted under the state directory, removes the bridge and the cgroups it made. A bed a crash left
is stopped the same way by the next start.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from fathom.hosts.k8s import image
from fathom.hosts.k8s.image import busybox_tree, write_image

K8S_VERSION = "1.34.4"
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl", "etcd", "pause")
REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "scripts" / "k8s-build.sh"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
MINIMAL_IMAGE = "localhost/fathom-minimal:1"
HOST_PATHS = ("/run/containerd", "/var/lib/cni", "/var/lib/kubelet", "/var/log/containers")
CGROUP_DIRS = ("kubepods", "k8s.io")
# values the kubelet insists on: the bed shows it these instead of the host's (private mount namespace)
KUBELET_SYSCTLS = {"vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10",
                   "kernel/panic_on_oops": "1"}
STOP_ORDER = ("kubelet", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd", "containerd")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fathom" / "k8s" / K8S_VERSION


def bin_dir() -> Path:
    return cache_dir() / "bin"


def available() -> str | None:
    """Why a bed cannot start here, or None (the binaries may still need building: `ensure_built`)."""
    if os.geteuid() != 0:
        return "needs root (containerd, mounts, a bridge)"
    for tool in ("containerd", "ctr", "runc", "unshare", "ip"):
        if shutil.which(tool) is None:
            return f"needs {tool} (Debian: containerd runc containernetworking-plugins)"
    if not Path("/usr/lib/cni/bridge").exists():
        return "needs the CNI plugins (Debian: containernetworking-plugins)"
    if not Path("/bin/busybox").exists():
        return "needs /bin/busybox (Debian: busybox-static) for the minimal image"
    go = os.environ.get("GO") or shutil.which("go") or Path("/usr/local/go/bin/go").exists()
    if not (bin_dir() / ".complete").exists() and not go:
        return "needs Go >= 1.24 to build Kubernetes once (or a complete cache in " + str(bin_dir()) + ")"
    return None


def ensure_built(say: Any = print) -> Path:
    """The binaries, built first when the cache has none (minutes, niced); the images, made when missing."""
    if not (bin_dir() / ".complete").exists():
        say(f"building Kubernetes {K8S_VERSION} into {bin_dir()} (once per machine, a few minutes)")
        env = dict(os.environ, K8S_VERSION=K8S_VERSION)
        if not shutil.which("go") and Path("/usr/local/go/bin/go").exists():
            env["GO"] = "/usr/local/go/bin/go"
        subprocess.run([str(BUILD)], check=True, env=env)
    images = cache_dir() / "images"
    images.mkdir(parents=True, exist_ok=True)
    if not (images / "pause.tar").exists():
        write_image(images / "pause.tar", PAUSE_IMAGE, {"pause": bin_dir() / "pause"}, ["/pause"])
    if not (images / "minimal.tar").exists():
        write_image(images / "minimal.tar", MINIMAL_IMAGE, busybox_tree(), ["/bin/sh"])
    return bin_dir()


# ---- images: single-layer OCI archives (fathom.hosts.k8s.image), no registry ------------------------------
def engine_image(engine: Path, out_dir: Path) -> tuple[Path, str]:
    """fathom's engine image for `engine` (`fathom k8s image`): its archive in out_dir, made once per engine
    build, and its name."""
    name = image.default_tag(engine)
    out = out_dir / image.default_file(engine).name
    if not out.exists():
        image.engine_image(engine, out, name, say=lambda _: None)
    return out, name


# ---- certificates --------------------------------------------------------------------------------
def _certs(pki: Path, node: str, ips: list[str]) -> None:
    """A CA, the API server's and kubelet's serving certificates, each client's certificate, the service
    account key: ECDSA P-256 (fast to make), ten days."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    pki.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)

    def key(name: str) -> Any:
        k = ec.generate_private_key(ec.SECP256R1())
        (pki / f"{name}.key").write_bytes(k.private_bytes(serialization.Encoding.PEM,
                                                          serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
        os.chmod(pki / f"{name}.key", 0o600)
        return k

    def subject(cn: str, org: str | None = None) -> Any:
        attrs = ([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)] if org else []) + \
            [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        return x509.Name(attrs)

    ca_key = key("ca")
    ca = (x509.CertificateBuilder().subject_name(subject("fathom-k8sbed-ca")).issuer_name(subject("fathom-k8sbed-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=10))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    (pki / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    sa = key("sa")
    (pki / "sa.pub").write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                              serialization.PublicFormat.SubjectPublicKeyInfo))
    sans = [x509.DNSName(n) for n in ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                                      "kubernetes.default.svc.cluster.local", "localhost", node)] + \
        [x509.IPAddress(ipaddress.ip_address(a)) for a in ["127.0.0.1", "10.96.0.1", *ips]]
    server = ExtendedKeyUsageOID.SERVER_AUTH
    client = ExtendedKeyUsageOID.CLIENT_AUTH
    for name, cn, org, usage, alt in [
            ("apiserver", "kube-apiserver", None, server, sans),
            ("kubelet-server", node, None, server, sans),
            ("apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters", client, None),
            ("admin", "kubernetes-admin", "system:masters", client, None),
            ("controller-manager", "system:kube-controller-manager", None, client, None),
            ("scheduler", "system:kube-scheduler", None, client, None),
            ("kubelet", f"system:node:{node}", "system:nodes", client, None)]:
        k = key(name)
        b = (x509.CertificateBuilder().subject_name(subject(cn, org)).issuer_name(ca.subject)
             .public_key(k.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=10))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True)
             .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if alt:
            b = b.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        (pki / f"{name}.crt").write_bytes(b.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))


def _kubeconfig(path: Path, server: str, pki: Path, user: str) -> None:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fathom-k8sbed",
        "clusters": [{"name": "fathom-k8sbed", "cluster": {"server": server,
                                                           "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": user, "user": {"client-certificate": str(pki / f"{user}.crt"),
                                          "client-key": str(pki / f"{user}.key")}}],
        "contexts": [{"name": "fathom-k8sbed", "context": {"cluster": "fathom-k8sbed", "user": user}}],
    }, indent=1))
    os.chmod(path, 0o600)


# ---- processes and mounts ------------------------------------------------------------------------
def _starttime(pid: int) -> str | None:
    """The process's start time in clock ticks (/proc/PID/stat field 22): a pid with another is another process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _mounts_under(root: Path) -> list[str]:
    """Mount points at or under root in this mount namespace, deepest first."""
    out = []
    prefix = str(root).rstrip("/") + "/"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")  # octal escapes (\040 for a space)
        if point.startswith(prefix) or point == str(root):
            out.append(point)
    return sorted(set(out), key=lambda p: (-p.count("/"), p))


def _cgroup_roots() -> list[Path]:
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():  # cgroup v2 alone
        return [base]
    return [p for p in base.iterdir() if p.is_dir() and not p.is_symlink()]


class K8sBed:
    def __init__(self, state: str | None = None, subnet: str = "10.247.0", bridge: str = "fk8sbr0",
                 say: Any = None):
        self.dir = Path(state or os.environ.get("FATHOM_K8S_DIR") or "/tmp/fathom-k8sbed")
        self.run_dir, self.logs, self.pki, self.etc = (self.dir / d for d in ("run", "logs", "pki", "etc"))
        self.bridge = bridge
        self.node_ip = f"{subnet}.1"
        self.pod_subnet = f"{subnet}.0/24"
        self.node = "fathom-k8sbed"
        self.bin = bin_dir()
        self.kubeconfig = self.etc / "admin.kubeconfig"
        self.sock = self.run_dir / "containerd" / "containerd.sock"
        self.record = self.dir / "bed.json"
        self.say = say or (lambda msg: None)
        self.timings: dict[str, float] = {}
        self._lock: Any = None
        self._rec: dict[str, Any] = {}

    # ---- the record: written before each thing is made, so a crash leaves what to undo ------------
    def _save(self) -> None:
        tmp = self.record.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._rec, indent=1))
        tmp.rename(self.record)

    def env(self) -> dict[str, str]:
        """The environment for kubectl and clients: the bed's kubeconfig, its cache under the state directory."""
        return dict(os.environ, KUBECONFIG=str(self.kubeconfig), KUBECACHEDIR=str(self.run_dir / "kube-cache"),
                    PATH=f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}")

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60,
                input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bin / "kubectl"), *args], env=self.env(), capture_output=True, text=True,
                              check=check, timeout=timeout, input=input)

    def ctr(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(["ctr", "-a", str(self.sock), "-n", "k8s.io", *args], capture_output=True,
                              text=True, check=check, timeout=timeout)

    def import_image(self, tar: Path) -> None:
        self.ctr("images", "import", str(tar), timeout=120)

    def user_kubeconfig(self, user: str) -> Path:
        """A kubeconfig for `user`, a client certificate the bed's CA signs: the API knows the user, and no
        role grants it anything."""
        import datetime

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        ca_key = serialization.load_pem_private_key((self.pki / "ca.key").read_bytes(), None)
        ca = x509.load_pem_x509_certificate((self.pki / "ca.crt").read_bytes())
        k = ec.generate_private_key(ec.SECP256R1())
        (self.pki / f"{user}.key").write_bytes(k.private_bytes(serialization.Encoding.PEM,
                                                               serialization.PrivateFormat.PKCS8,
                                                               serialization.NoEncryption()))
        now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
        cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, user)]))
                .issuer_name(ca.subject).public_key(k.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        (self.pki / f"{user}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        out = self.etc / f"{user}.kubeconfig"
        _kubeconfig(out, f"https://{self.node_ip}:6443", self.pki, user)
        return out

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.logs / f"{name}.log", "ab")
        try:
            p = subprocess.Popen(["nice", "-n", "19", *argv], stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        finally:
            log.close()
        self._rec.setdefault("pids", {})[name] = [p.pid, _starttime(p.pid)]
        self._save()

    @contextlib.contextmanager
    def frozen(self, name: str) -> Any:
        """One of the bed's processes stopped (SIGSTOP) until the block ends: the kubelet frozen is a node gone
        silent, as when its host hangs or is cut off (its streams stall; nothing resets them)."""
        pid = self._rec["pids"][name][0]
        assert self._alive(name), f"the bed's {name} is not running"
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            if self._alive(name):
                os.kill(pid, signal.SIGCONT)

    def _alive(self, name: str) -> bool:
        pid, st = self._rec.get("pids", {}).get(name, (None, None))
        return pid is not None and st is not None and _starttime(pid) == st

    def _wait(self, what: str, limit: float, ok: Any, proc: str | None = None) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit:
            try:
                if ok():
                    self.timings[what] = time.monotonic() - self._t0
                    return
            except (subprocess.SubprocessError, OSError):
                pass
            if proc and not self._alive(proc):
                break
            time.sleep(0.2)
        tail = ""
        if proc and (self.logs / f"{proc}.log").exists():
            tail = "\n".join((self.logs / f"{proc}.log").read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"k8s bed: {what} not ready within {limit:.0f} s\n{tail}")

    def _ok(self, *args: str) -> bool:
        return self.kubectl(*args, check=False, timeout=10).returncode == 0

    # ---- start ----------------------------------------------------------------------------------
    def __enter__(self) -> K8sBed:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        why = available()
        if why:
            raise RuntimeError(f"k8s bed: {why}")
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        self._lock = open(f"{self.dir}.lock", "w")
        fcntl.flock(self._lock, fcntl.LOCK_EX)  # one bed per state directory (and per machine: fixed ports)
        if self.record.exists():
            self.say(f"k8s bed: stopping what a previous bed left in {self.dir}")
            self._rec = json.loads(self.record.read_text())
            self._teardown()
        ensure_built(self.say)
        self._t0 = time.monotonic()
        try:
            self._up()
        except BaseException:
            self.stop()
            raise
        self.timings["usable"] = time.monotonic() - self._t0

    def _up(self) -> None:
        for d in (self.run_dir / "pids", self.logs, self.etc / "cni", self.run_dir / "kubelet",
                  self.run_dir / "pod-logs"):
            d.mkdir(parents=True, exist_ok=True)
        self._rec = {"host_paths": [p for p in HOST_PATHS if not os.path.lexists(p)],
                     "cgroups": [str(r / d) for r in _cgroup_roots() for d in CGROUP_DIRS if not (r / d).exists()],
                     "pids": {}}
        self._save()
        _certs(self.pki, self.node, [self.node_ip])
        server = f"https://{self.node_ip}:6443"
        for user in ("admin", "controller-manager", "scheduler", "kubelet"):
            _kubeconfig(self.etc / f"{user}.kubeconfig", server, self.pki, user)
        self._configs()
        if subprocess.run(["ip", "link", "show", self.bridge], capture_output=True).returncode != 0:
            self._rec["bridge"] = self.bridge
            self._save()
            subprocess.run(["ip", "link", "add", self.bridge, "type", "bridge"], check=True)
            subprocess.run(["ip", "addr", "add", f"{self.node_ip}/24", "dev", self.bridge], check=True)
            subprocess.run(["ip", "link", "set", self.bridge, "up"], check=True)
        b, r, p = self.bin, self.run_dir, self.pki
        self._start("etcd", [str(b / "etcd"), "--name", "node", "--data-dir", str(r / "etcd"), "--log-level", "warn",
                             "--unsafe-no-fsync", "--listen-client-urls", "http://127.0.0.1:2379",
                             "--advertise-client-urls", "http://127.0.0.1:2379",
                             "--listen-peer-urls", "http://127.0.0.1:2380",
                             "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
                             "--initial-cluster", "node=http://127.0.0.1:2380", "--listen-metrics-urls", ""])
        self._start("containerd", ["containerd", "--config", str(self.etc / "containerd.toml")])
        self._start("kube-apiserver", [
            str(b / "kube-apiserver"), "--etcd-servers=http://127.0.0.1:2379", f"--bind-address={self.node_ip}",
            "--secure-port=6443", f"--advertise-address={self.node_ip}", f"--tls-cert-file={p}/apiserver.crt",
            f"--tls-private-key-file={p}/apiserver.key", f"--client-ca-file={p}/ca.crt",
            f"--kubelet-client-certificate={p}/apiserver-kubelet-client.crt",
            f"--kubelet-client-key={p}/apiserver-kubelet-client.key",
            "--kubelet-preferred-address-types=InternalIP,Hostname", f"--service-account-key-file={p}/sa.pub",
            f"--service-account-signing-key-file={p}/sa.key",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction", "--allow-privileged=true", "--profiling=false"])
        self._wait("containerd", 30, lambda: self.ctr("version", check=False).returncode == 0, "containerd")
        for tar in sorted((cache_dir() / "images").glob("*.tar")):
            self.import_image(tar)
        self.timings["images imported"] = time.monotonic() - self._t0
        self._wait("kube-apiserver", 120, lambda: self._ok("get", "--raw", "/readyz"), "kube-apiserver")
        e = self.etc
        self._start("kube-controller-manager", [
            str(b / "kube-controller-manager"), f"--kubeconfig={e}/controller-manager.kubeconfig",
            f"--authentication-kubeconfig={e}/controller-manager.kubeconfig",
            f"--authorization-kubeconfig={e}/controller-manager.kubeconfig", "--bind-address=127.0.0.1",
            "--leader-elect=false", "--use-service-account-credentials=true",
            f"--service-account-private-key-file={p}/sa.key", f"--root-ca-file={p}/ca.crt",
            f"--cluster-signing-cert-file={p}/ca.crt", f"--cluster-signing-key-file={p}/ca.key",
            "--service-cluster-ip-range=10.96.0.0/16"])
        self._start("kube-scheduler", [
            str(b / "kube-scheduler"), f"--kubeconfig={e}/scheduler.kubeconfig",
            f"--authentication-kubeconfig={e}/scheduler.kubeconfig",
            f"--authorization-kubeconfig={e}/scheduler.kubeconfig", "--bind-address=127.0.0.1",
            "--leader-elect=false"])
        self._kubelet()
        self._wait(f"node {self.node}", 180, lambda: self._ok("wait", "--for=condition=Ready", f"node/{self.node}",
                                                              "--timeout=1s"), "kubelet")
        self._wait("default service account", 60, lambda: self._ok("get", "serviceaccount", "default"),
                   "kube-controller-manager")

    def _kubelet(self) -> None:
        """The kubelet in a private mount namespace: the sysctls it sets are files there (the host's stay as
        they are); its root directory an rshared bind mount first, so its volume mounts reach runc."""
        root = self.run_dir / "kubelet"
        self._rec["bind"] = str(root)
        self._save()
        if str(root) not in _mounts_under(root):
            subprocess.run(["mount", "--bind", str(root), str(root)], check=True)
            subprocess.run(["mount", "--make-rshared", str(root)], check=True)
        fake = self.run_dir / "sysctl"
        fake.mkdir(exist_ok=True)
        binds = []
        for key, value in KUBELET_SYSCTLS.items():
            f = fake / key.replace("/", "_")
            f.write_text(value + "\n")
            binds.append(f"mount --bind {f} /proc/sys/{key}")
        # no iptables on its PATH: it would add chains to this host's tables
        script = " && ".join(binds) + ' && exec env PATH=/usr/local/bin:/usr/bin:/bin "$@"'
        self._start("kubelet", ["unshare", "-m", "--propagation", "unchanged", "/bin/sh", "-c", script, "kubelet",
                                str(self.bin / "kubelet"), f"--config={self.etc}/kubelet.yaml",
                                f"--kubeconfig={self.etc}/kubelet.kubeconfig", f"--root-dir={root}",
                                f"--node-ip={self.node_ip}", f"--hostname-override={self.node}"])

    def _configs(self) -> None:
        r, e, p = self.run_dir, self.etc, self.pki
        (e / "containerd.toml").write_text(f'''version = 2
root = "{r}/containerd/root"
state = "{r}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.internal.v1.tracing",
  "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{e}/cni"
''')
        # isGateway and ipMasq off: the plugin would turn ip_forward on and add NAT rules; the bridge has
        # the gateway address already
        (e / "cni" / "10-fathom.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "fathom-k8sbed", "plugins": [{
                "type": "bridge", "bridge": self.bridge, "isGateway": False, "ipMasq": False, "hairpinMode": True,
                "ipam": {"type": "host-local", "dataDir": f"{r}/cni-ipam",
                         "ranges": [[{"subnet": self.pod_subnet, "gateway": self.node_ip}]],
                         "routes": [{"dst": "0.0.0.0/0"}]}}]}))
        (e / "kubelet.yaml").write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": f"{p}/ca.crt"}},
            "authorization": {"mode": "Webhook"}, "address": self.node_ip,
            "tlsCertFile": f"{p}/kubelet-server.crt", "tlsPrivateKeyFile": f"{p}/kubelet-server.key",
            "cgroupDriver": "cgroupfs", "failCgroupV1": False,  # 1.34 runs on v1 hosts too "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.sock}", "podLogsDir": f"{r}/pod-logs",
            "healthzBindAddress": "127.0.0.1", "readOnlyPort": 0, "resolvConf": "/etc/resolv.conf",
            "clusterDomain": "cluster.local", "clusterDNS": [],
            # images cannot be pulled again: never collect them
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "rotateCertificates": False, "serializeImagePulls": False}, indent=1))

    # ---- stop -------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop what the bed started, by its pids, and remove what it made; then the state directory."""
        t0 = time.monotonic()
        try:
            if self._rec:
                self._teardown()
                self.timings["stop"] = time.monotonic() - t0
        finally:
            if self._lock is not None:
                self._lock.close()
                self._lock = None

    def _teardown(self) -> None:
        if self._alive("kube-apiserver") and self._alive("kubelet"):
            # controllers first, so nothing makes the pods again; the pods while the kubelet can stop them
            self.kubectl("delete", "daemonsets,deployments,replicasets,jobs,pods", "--all", "-A",
                         "--grace-period=1", "--wait=true", "--timeout=60s", check=False, timeout=90)
        for name in STOP_ORDER:
            if name == "containerd" and self._alive(name):
                self._remove_tasks()
            self._stop(name)
        self._kill_cgroup_procs()
        for sig in (signal.SIGTERM, signal.SIGKILL):  # the runtime's shims, named by the bed's own socket
            for pid in self._shims():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)
        for m in _mounts_under(self.run_dir):
            if subprocess.run(["umount", m], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", m], capture_output=True)
        for cg in self._rec.get("cgroups", []):
            if os.path.isdir(cg):
                for d, _, _ in sorted(os.walk(cg), key=lambda w: -w[0].count("/")):
                    try:
                        os.rmdir(d)
                    except OSError:
                        pass
        if self._rec.get("bridge"):
            subprocess.run(["ip", "link", "del", self._rec["bridge"]], capture_output=True)
        for path in self._rec.get("host_paths", []):
            if os.path.lexists(path) and not _mounts_under(Path(path)):
                shutil.rmtree(path, ignore_errors=True)
        left = _mounts_under(self.dir)
        if left:  # never remove a tree that still holds a mount: it may be a bind of another directory
            raise RuntimeError(f"k8s bed: mounts left under {self.dir}: {', '.join(left[:5])}")
        shutil.rmtree(self.dir, ignore_errors=True)
        self._rec = {}

    def _stop(self, name: str, grace_s: float = 10.0) -> None:
        if not self._alive(name):
            return
        pid = self._rec["pids"][name][0]
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
            t0 = time.monotonic()
            while time.monotonic() - t0 < wait:
                try:  # reap it when it is our child; a previous bed's is not
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        return
                except ChildProcessError:
                    if not self._alive(name):
                        return
                time.sleep(0.1)

    def _remove_tasks(self) -> None:
        """Every container the runtime still runs: killed, then deleted (its shim unmounts the root and exits)."""
        tasks = self.ctr("tasks", "ls", "-q", check=False).stdout.split()
        for t in tasks:
            self.ctr("tasks", "kill", "-s", "SIGKILL", t, check=False)
        for t in tasks:
            self.ctr("tasks", "delete", "-f", t, check=False)
        for c in self.ctr("containers", "ls", "-q", check=False).stdout.split():
            self.ctr("containers", "delete", c, check=False)

    def _shims(self) -> list[int]:
        needle = f"-address\0{self.sock}\0".encode()
        out = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    cmd = (d / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"containerd-shim" in cmd and needle in cmd:
                    out.append(int(d.name))
        return out

    def _kill_cgroup_procs(self) -> None:
        """Processes still in the cgroups the bed made (containers a crash left): SIGKILL by pid."""
        for cg in self._rec.get("cgroups", []):
            for d, _, files in os.walk(cg):
                if "cgroup.procs" in files:
                    for pid in Path(d, "cgroup.procs").read_text().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except (ProcessLookupError, ValueError):
                            pass


def main() -> None:
    """`python tests/k8sbed.py build|start|stop`: the bed by hand (start prints the kubeconfig to export)."""
    import sys

    cmd = sys.argv[1] if len(sys.argv) > 1 else "start"
    if cmd == "build":
        ensure_built()
        return
    bed = K8sBed(say=print)
    if cmd == "stop":
        bed._lock = open(f"{bed.dir}.lock", "w")
        fcntl.flock(bed._lock, fcntl.LOCK_EX)
        if bed.record.exists():
            bed._rec = json.loads(bed.record.read_text())
        bed.stop()
        print("k8s bed: stopped")
        return
    bed.start()
    bed._lock.close()  # the bed stays up after this process: `stop` takes the lock again
    for k, v in bed.timings.items():
        print(f"  {k}: {v:.1f} s")
    print(f"export KUBECONFIG={bed.kubeconfig} KUBECACHEDIR={bed.run_dir}/kube-cache PATH={bed.bin}:$PATH")


if __name__ == "__main__":
    main()
