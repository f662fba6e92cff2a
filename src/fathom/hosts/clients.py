"""Client hosts: where a point's engines run. "local" is this host; any other is reached over OpenSSH.

A suite names them under `clients:`; `fathom run --client user@host[:port]`
(repeatable) and `--clients-file FILE` name them on the command line and
replace the suite's list. Each host runs `instances` engines (default 1); a
point's load is the sum over every engine of every host.

    clients:
      hosts:
        - local
        - root@10.0.0.12                     # user@host[:port], port 22 by default
        - {host: 10.0.0.13, user: ceph, port: 2222, key_file: ~/.ssh/bench_ed25519,
           instances: 2, engine_dir: /var/tmp/fathom}
      on_loss: continue          # a host lost mid-point: keep the others' data (continue) or fail the point
      known_hosts: ~/.ssh/known_hosts
      accept_new_host_keys: false

`clients: [local, root@10.0.0.12]` is the short form (the defaults for the rest).

Pods on Kubernetes are client hosts too (fathom.hosts.pods makes them for the run and removes them):

    clients:
      kubernetes:
        namespace: bench             # must exist
        pods: 4                      # hosts pod-0 .. pod-3 in records and tables
        engines_per_pod: 2
        image: localhost/fathom-engine:TAG   # `fathom k8s image` writes it (default: this fathom's tag)
        node_selector: {role: client}
        spread: one-per-node         # or any (default)
        requests: {cpu: "1", memory: 512Mi}
        limits: {cpu: "2", memory: 1Gi}
        rook: {namespace: rook-ceph} # Ceph access from Rook's own objects (default: the run's conf and keyring)

Without `hosts:` next to it, the pods are the only client hosts.
A clients file holds either form (YAML), or one host per line.

Keys come from ssh-agent ($SSH_AUTH_SOCK) or key_file; fathom never stores one
(a host's record names the key file, never its content). Host keys are checked
against known_hosts; a host not in it is refused unless accept_new_host_keys
(then its key is added, as OpenSSH's StrictHostKeyChecking=accept-new does); a
host whose key changed is always refused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fathom.errors import UsageError

LOCAL = "local"
DEFAULT_ENGINE_DIR = ".cache/fathom"  # relative: under the remote user's home
_ADDR = re.compile(r"^(?:(?P<user>[^@\s:]+)@)?(?P<host>\[[0-9a-fA-F:.]+\]|[^@\s:\[\]]+)(?::(?P<port>\d+))?$")


class ClientHost(BaseModel):
    """One client host and what runs there."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    host: str = Field(min_length=1)  # "local", a name or an address
    user: str | None = None  # default: the SSH default (the local user name)
    port: int = Field(22, ge=1, le=65535)
    key_file: str | None = None  # private key; default: ssh-agent, then ~/.ssh/id_*
    instances: int = Field(1, ge=1, le=256)  # engine processes on this host
    engine_dir: str = DEFAULT_ENGINE_DIR  # where the engine is uploaded (a versioned subdirectory)
    engine: str | None = None  # an engine already installed there: used as it is, never uploaded
    ceph_conf: str | None = None  # ceph.conf path on that host (default: the same path as here)
    keyring: str | None = None  # keyring path on that host (default: the same path as here)
    pod: int | None = None  # the run's pod number: a Kubernetes pod (clients.kubernetes), not an SSH host

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        return v.strip("[]") if v.startswith("[") else v

    @field_validator("engine_dir")
    @classmethod
    def _home(cls, v: str) -> str:
        # relative paths are under the remote user's home already (exec and SFTP start there)
        return v[2:] or "." if v.startswith("~/") else v

    @property
    def local(self) -> bool:
        return self.host == LOCAL

    @property
    def name(self) -> str:
        """How records, the store and reports name the host: `local`, `host` or `host:port`."""
        if self.local:
            return LOCAL
        if self.pod is not None:
            return self.host
        h = f"[{self.host}]" if ":" in self.host else self.host
        return h if self.port == 22 else f"{h}:{self.port}"

    def describe(self) -> dict[str, Any]:
        """What a run records of the host (no key material: the key file's path at most)."""
        if self.pod is not None:
            return {"name": self.name, "pod": self.pod, "instances": self.instances}
        return {"name": self.name, "user": self.user, "port": self.port, "key_file": self.key_file,
                "instances": self.instances, "engine": self.engine}


class RookSpec(BaseModel):
    """Ceph access for pods from a Rook cluster's own objects (its mon endpoints ConfigMap and mon Secret)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    namespace: str = "rook-ceph"


class KubeSpec(BaseModel):
    """`clients.kubernetes`: the run's engine pods."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kubeconfig: str | None = None  # default: $KUBECONFIG, then ~/.kube/config
    context: str | None = None  # default: the kubeconfig's current context
    namespace: str = Field("default", min_length=1)
    pods: int = Field(1, ge=1, le=1024)
    engines_per_pod: int = Field(1, ge=1, le=256)
    image: str | None = None  # default: the tag `fathom k8s image` gives this fathom's engine
    node_selector: dict[str, str] = Field(default_factory=dict)
    spread: Literal["any", "one-per-node"] = "any"
    requests: dict[str, str] = Field(default_factory=dict)  # {cpu: "1", memory: 512Mi}
    limits: dict[str, str] = Field(default_factory=dict)
    rook: RookSpec | None = None
    ready_timeout_s: float = Field(120.0, gt=0, le=3600)  # pods running, else the scheduler's or kubelet's why

    def hosts(self) -> list[ClientHost]:
        return [ClientHost(host=f"pod-{i}", pod=i, instances=self.engines_per_pod) for i in range(self.pods)]

    def describe(self) -> dict[str, Any]:
        """What a run records (paths and names; the kubeconfig's credentials are never read into it)."""
        return self.model_dump(exclude_none=True)


class ClientsSpec(BaseModel):
    """The `clients:` section of a suite."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    hosts: list[ClientHost] = Field(default_factory=lambda: [ClientHost(host=LOCAL)], min_length=1)
    on_loss: Literal["continue", "fail"] = "continue"
    known_hosts: str | None = None  # default ~/.ssh/known_hosts
    accept_new_host_keys: bool = False
    connect_timeout_s: float = Field(10.0, gt=0, le=300)
    kubernetes: KubeSpec | None = None
    # whose Ceph client this host runs: host, a release built by `fathom cluster rootfs`, a root or build DIR
    # (fathom.cluster.client); default a local cluster's own release, else this host's
    ceph: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _short(cls, v: Any) -> Any:
        if isinstance(v, list):
            v = {"hosts": v}
        if isinstance(v, dict) and isinstance(v.get("hosts"), list):
            v = {**v, "hosts": [parse_client(h) if isinstance(h, str) else h for h in v["hosts"]]}
        if isinstance(v, dict) and v.get("kubernetes") is not None:  # the pods join the hosts named (or are all)
            kube = KubeSpec.model_validate(v["kubernetes"])
            named = [h for h in v.get("hosts") or [] if _pod_of(h) is None]
            v = {**v, "kubernetes": kube, "hosts": named + kube.hosts()}
        return v

    @model_validator(mode="after")
    def _unique(self) -> ClientsSpec:
        names = [h.name for h in self.hosts]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"host {dup[0]} is named twice; give it `instances: N` for several engines there")
        return self

    @property
    def remote(self) -> list[ClientHost]:
        return [h for h in self.hosts if not h.local]

    @property
    def ssh(self) -> list[ClientHost]:
        """The hosts reached over SSH (not this one, not a pod)."""
        return [h for h in self.hosts if not h.local and h.pod is None]

    @property
    def only_local(self) -> bool:
        """Nothing beyond the single local engine of a run without clients."""
        return not self.remote and sum(h.instances for h in self.hosts) == 1

    def describe(self) -> dict[str, Any]:
        out = {"hosts": [h.describe() for h in self.hosts], "on_loss": self.on_loss,
               "engines": sum(h.instances for h in self.hosts)}
        if self.kubernetes is not None:
            out["kubernetes"] = self.kubernetes.describe()
        return out


def _pod_of(h: Any) -> int | None:
    """The pod number of a host entry (a ClientHost or its fields), None for any other host."""
    return h.pod if isinstance(h, ClientHost) else h.get("pod") if isinstance(h, dict) else None


def parse_client(text: str) -> dict[str, Any]:
    """`local`, `host`, `user@host`, `user@host:port` or `user@[v6addr]:port` as ClientHost fields."""
    s = text.strip()
    if s == LOCAL:
        return {"host": LOCAL}
    m = _ADDR.match(s)
    if not m:
        raise ValueError(f"{text!r} is not a client host: write user@host[:port] (or local)")
    out: dict[str, Any] = {"host": m.group("host")}
    if m.group("user"):
        out["user"] = m.group("user")
    if m.group("port"):
        out["port"] = int(m.group("port"))
    return out


@dataclass(frozen=True)
class ClientChoice:
    """The command line's client hosts and options, as given (`fathom run --client ...`): applied over a suite's
    `clients:` by `over`."""

    clients: tuple[str, ...] = ()
    clients_file: str | None = None
    on_loss: str | None = None
    known_hosts: str | None = None
    accept_new: bool = False
    kubernetes: tuple[tuple[str, Any], ...] = ()  # --k8s-* options given, as clients.kubernetes fields

    @classmethod
    def of(cls, args: Any) -> ClientChoice:
        """From the options cli/clientargs.py adds (a command without them chooses nothing)."""
        g = lambda k: getattr(args, k, None)  # noqa: E731
        return cls(tuple(g("client") or ()), g("clients_file"), g("on_client_loss"), g("known_hosts"),
                   bool(g("accept_new_host_keys")), tuple(kube_options(args).items()))

    def given(self) -> bool:
        return bool(self.clients or self.clients_file or self.on_loss or self.known_hosts or self.accept_new
                    or self.kubernetes)

    def to_dict(self) -> dict[str, Any]:
        """What was given, to store (paths and names: a kubeconfig is a path)."""
        path = lambda f: str(Path(f).expanduser().resolve()) if f else f  # noqa: E731 - a resume may run elsewhere
        kube = {k: (path(v) if k == "kubeconfig" else v) for k, v in self.kubernetes}
        return {"clients": list(self.clients), "clients_file": path(self.clients_file), "on_loss": self.on_loss,
                "known_hosts": path(self.known_hosts), "accept_new": self.accept_new, "kubernetes": kube}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClientChoice:
        return cls(tuple(d.get("clients") or ()), d.get("clients_file"), d.get("on_loss"), d.get("known_hosts"),
                   bool(d.get("accept_new")), tuple((d.get("kubernetes") or {}).items()))

    def words(self) -> list[str]:
        """The command line's words that give this choice."""
        out: list[str] = []
        for c in self.clients:
            out += ["--client", c]
        for flag, v in (("--clients-file", self.clients_file), ("--on-client-loss", self.on_loss),
                        ("--known-hosts", self.known_hosts)):
            out += [flag, v] if v else []
        out += ["--accept-new-host-keys"] if self.accept_new else []
        for field, v in self.kubernetes:
            if field == "rook":
                out += ["--rook-namespace", v["namespace"]]
            elif field == "node_selector":
                for k, val in v.items():
                    out += ["--k8s-node-selector", f"{k}={val}"]
            elif field in ("requests", "limits"):
                out += [f"--k8s-{field}", ",".join(f"{k}={val}" for k, val in v.items())]
            else:
                out += [KUBE_FLAGS[field], str(v)]
        return out

    def over(self, base: ClientsSpec | None) -> ClientsSpec | None:
        return clients_from_args(list(self.clients), self.clients_file, base, on_loss=self.on_loss,
                                 known_hosts=self.known_hosts, accept_new=self.accept_new,
                                 kube=dict(self.kubernetes) or None)


KUBE_FLAGS = {"pods": "--k8s-pods", "engines_per_pod": "--k8s-engines-per-pod", "namespace": "--k8s-namespace",
              "image": "--k8s-image", "kubeconfig": "--kubeconfig", "context": "--k8s-context",
              "spread": "--k8s-spread", "ready_timeout_s": "--k8s-ready-timeout"}


def kube_options(args: Any) -> dict[str, Any]:
    """The --k8s-* options given, as clients.kubernetes fields."""
    def pairs(opt: str, items: list[str]) -> dict[str, str]:
        out = {}
        for it in items:
            key, eq, value = it.partition("=")
            if not eq or not key.strip():
                raise UsageError(f"{opt}: {it!r} is not KEY=VALUE")
            out[key.strip()] = value.strip()
        return out

    g = lambda k: getattr(args, k, None)  # noqa: E731
    out: dict[str, Any] = {field: g(flag.lstrip("-").replace("-", "_")) for field, flag in KUBE_FLAGS.items()
                           if g(flag.lstrip("-").replace("-", "_")) is not None}
    if g("k8s_node_selector"):
        out["node_selector"] = pairs("--k8s-node-selector", g("k8s_node_selector"))
    for field in ("requests", "limits"):
        if g(f"k8s_{field}"):
            out[field] = pairs(f"--k8s-{field}", g(f"k8s_{field}").split(","))
    if g("rook_namespace"):
        out["rook"] = {"namespace": g("rook_namespace")}
    return out


def clients_from_args(clients: list[str] | None, clients_file: str | None, base: ClientsSpec | None,
                      on_loss: str | None = None, known_hosts: str | None = None,
                      accept_new: bool = False, kube: dict[str, Any] | None = None) -> ClientsSpec | None:
    """The run's clients: --client/--clients-file replace the suite's hosts; the other flags override its options;
    kube (--k8s-*) over the suite's clients.kubernetes (pods alone unless hosts are named too).

    None when nothing names clients (one engine on this host, as always)."""
    hosts: list[Any] = []
    for c in clients or []:
        try:
            hosts.append(parse_client(c))
        except ValueError as exc:
            raise UsageError(f"--client: {exc}") from None
    file_opts: dict[str, Any] = {}
    if clients_file:
        more, file_opts = _read_clients_file(clients_file)
        hosts += more
    if not hosts and base is None and not (on_loss or known_hosts or accept_new or kube):
        return None
    data: dict[str, Any] = base.model_dump() if base is not None else {}
    data.update(file_opts)
    if hosts:
        data["hosts"] = hosts
    if kube:
        data["kubernetes"] = {**(data.get("kubernetes") or {}), **kube}
        if not hosts and base is not None and base.kubernetes is None:
            data.pop("hosts", None)  # the suite's hosts give way to the pods, as to --client
    if on_loss:
        data["on_loss"] = on_loss
    if known_hosts:
        data["known_hosts"] = known_hosts
    if accept_new:
        data["accept_new_host_keys"] = True
    return validated(ClientsSpec, data, "clients")


def key_file_problem(path: str) -> str | None:
    """Why a private key file named by an option cannot be used, or None; its content is read when connecting
    (fathom.hosts.ssh). Checked first, so a wrong path is not taken for a host that cannot be reached."""
    p = Path(path).expanduser()
    if not p.exists():
        return f"the key file {p} does not exist"
    if not p.is_file():
        return f"the key file {p} is not a file"
    if not os.access(p, os.R_OK):
        return f"the key file {p} cannot be read by this user"
    return None


KEY_FIX = "give the path of an existing private key (the host's authorized_keys holds its .pub), or leave the " \
          "key file out to use ssh-agent, then ~/.ssh/id_*"


def check_key_files(hosts: list[Any], where: str) -> None:
    """UsageError naming `where` and every host's key file that does not exist (hosts: ClientHost fields)."""
    problems = [f"{h.get('host', '?')}: {why}" for h in hosts
                if isinstance(h, dict) and h.get("key_file") and (why := key_file_problem(str(h["key_file"])))]
    if problems:
        raise UsageError(f"{where}: {'; '.join(problems)}", hint=KEY_FIX)


_M = TypeVar("_M", bound=BaseModel)


def validated(model: type[_M], data: dict[str, Any], what: str) -> _M:
    """model from data, or a UsageError naming `what`, the field and the problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(p) for p in e["loc"])
        raise UsageError(f"{what}: {where}: {e['msg'].removeprefix('Value error, ')}") from None


def _read_clients_file(path: str) -> tuple[list[Any], dict[str, Any]]:
    """(hosts, the other options) of a clients file: a `clients:` section, its list, or one host per line."""
    p = Path(path).expanduser()
    try:
        text = p.read_text()
    except OSError as exc:
        raise UsageError(f"--clients-file {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"--clients-file {path}: not YAML: {exc}") from None
    if isinstance(data, str) or data is None:  # one host per line
        data = [ln.split("#", 1)[0].strip() for ln in text.splitlines()]
        data = [d for d in data if d]
    opts: dict[str, Any] = {}
    if isinstance(data, dict):
        opts = {k: v for k, v in data.items() if k != "hosts"}
        data = data.get("hosts", [])
    if not isinstance(data, list) or not data:
        raise UsageError(f"--clients-file {path}: expected a list of hosts (user@host[:port] or mappings)")
    out = []
    for h in data:
        try:
            out.append(parse_client(h) if isinstance(h, str) else h)
        except ValueError as exc:
            raise UsageError(f"--clients-file {path}: {exc}") from None
    check_key_files(out, f"--clients-file {path}")
    return out, opts


def clients_for(suite_clients: ClientsSpec | None, choice: ClientChoice | None, engines: set[str]) \
        -> ClientsSpec | None:
    """A run's client hosts: the command line's (--client, --clients-file) over the suite's; None for one
    engine on this host. `engines`: the engines of the points to run (client hosts run fathom-engine only)."""
    cs = (choice or ClientChoice()).over(suite_clients)
    if cs is None or cs.only_local:
        return None
    other = sorted(e for e in engines if e != "fathom-engine")
    if other:
        raise UsageError(f"client hosts run fathom-engine points only; this run has {', '.join(other)} points",
                         hint="run those workloads on fathom-engine (--engine fathom-engine), or without clients")
    return cs
