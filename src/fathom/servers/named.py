"""Server hosts as the user names them: --server-host, --server-hosts-file, `cluster` discovery."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fathom.hosts.k8s.image import SAMPLER_IN_IMAGE
from fathom.servers.inventory import UNKNOWN_HOST, ClusterDaemon
from fathom.errors import UsageError
from fathom.hosts.clients import (KEY_FIX, ClientHost, ClientsSpec, check_key_files, key_file_problem, parse_client,
                                  validated)

SOURCE = "ssh"
DISCOVER = "cluster"  # --server-host cluster: every host of the cluster's metadata


class KubernetesServers(BaseModel):
    """The cluster's nodes sampled by fathom-sampler in a DaemonSet fathom makes for the run (fathom.servers.k8s):
    `kubernetes:` of a servers file, --server-k8s IMAGE on the command line."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    image: str | None = None  # holds fathom-sampler (at `sampler`) and a shell (busybox); --server-k8s IMAGE
    kubeconfig: str | None = None  # default: $KUBECONFIG, then ~/.kube/config
    context: str | None = None
    namespace: str = "default"
    sampler: str = SAMPLER_IN_IMAGE  # its path in the image
    nodes: list[str] = Field(default_factory=list)  # the nodes to sample (default: those the metadata's hosts are)
    node_selector: dict[str, str] = Field(default_factory=dict)  # or every node these labels select
    node_hosts: dict[str, str] = Field(default_factory=dict)  # node name -> the metadata's host name, where they differ
    tolerations: list[dict[str, Any]] = Field(default_factory=list)  # for tainted storage nodes, as a pod spec has them
    ready_timeout_s: float = Field(120.0, gt=0, le=3600)


class ServersSpec(BaseModel):
    """The cluster's hosts to sample over SSH (`servers:` in a suite; --server-host on the command line)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    hosts: list[ClientHost] = Field(default_factory=list)  # user@host[:port], or mappings as client hosts
    discover: bool = False  # also every host the cluster's metadata names, at its first address
    user: str | None = None  # for discovered hosts
    key_file: str | None = None  # for discovered hosts
    addresses: dict[str, str] = Field(default_factory=dict)  # metadata host name -> where SSH reaches it
    known_hosts: str | None = None
    accept_new_host_keys: bool = False
    connect_timeout_s: float = Field(10.0, gt=0, le=300)
    interval_s: float = Field(1.0, ge=0.1, le=60)
    max_clock_offset_s: float = Field(2.0, gt=0, le=3600)
    keep_sampler: bool = False  # leave the sampler fathom uploaded on each host at the end (--keep-sampler)
    kubernetes: KubernetesServers | None = None  # sample the nodes from a DaemonSet instead of over SSH

    def ssh_opts(self) -> ClientsSpec:
        return ClientsSpec(known_hosts=self.known_hosts, accept_new_host_keys=self.accept_new_host_keys,
                           connect_timeout_s=self.connect_timeout_s)


def servers_file(path: str) -> ServersSpec:
    """A servers file: YAML with ServersSpec's fields (hosts as user@host[:port] or mappings, discover, user,
    key_file, addresses: {metadata host name: address}, ...), or a list of hosts, or one host per line."""
    import yaml

    try:
        text = Path(path).expanduser().read_text()
        data = yaml.safe_load(text)
    except OSError as exc:
        raise UsageError(f"--server-hosts-file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--server-hosts-file {path}: not YAML: {exc}") from None
    if isinstance(data, str) or data is None:
        data = [ln.split("#", 1)[0].strip() for ln in text.splitlines() if ln.split("#", 1)[0].strip()]
    if isinstance(data, list):
        data = {"hosts": data}
    if not isinstance(data, dict):
        raise UsageError(f"--server-hosts-file {path}: expected a mapping of server options or a list of hosts")
    hosts, discover = _hosts(data.get("hosts") or [], f"--server-hosts-file {path}")
    if data.get("kubernetes") and (hosts or discover):
        raise UsageError(f"--server-hosts-file {path}: name hosts (SSH) or `kubernetes:` (a DaemonSet), not both")
    check_key_files([*hosts, {"host": "key_file", "key_file": data.get("key_file")}], f"--server-hosts-file {path}")
    return validated(ServersSpec, {**data, "hosts": hosts, "discover": data.get("discover") or discover},
                     f"--server-hosts-file {path}")


def _hosts(items: list[Any], where: str) -> tuple[list[Any], bool]:
    """(hosts as ClientHost fields, whether `cluster` asked for discovery) of a list of user@host[:port]
    strings or mappings."""
    out, discover = [], False
    for h in items:
        if h == DISCOVER:
            discover = True
            continue
        try:
            out.append(parse_client(h) if isinstance(h, str) else h)
        except ValueError as exc:
            raise UsageError(f"{where}: {exc}".replace("client host", "server host")) from None
    return out, discover


def servers_from_args(hosts: list[str] | None, key_file: str | None = None, known_hosts: str | None = None,
                      accept_new: bool = False, base: ServersSpec | None = None,
                      keep_sampler: bool = False, k8s_image: str | None = None) -> ServersSpec | None:
    """--server-host (repeatable; `cluster` discovers) or --server-k8s IMAGE over a servers file's; None when
    nothing names one."""
    data: dict[str, Any] = base.model_dump() if base is not None else {}
    if hosts:
        data["hosts"], discover = _hosts(hosts, "--server-host")
        data["discover"] = data.get("discover") or discover
    if k8s_image:
        data["kubernetes"] = {**(data.get("kubernetes") or {}), "image": k8s_image}
    if data.get("kubernetes") and (data.get("hosts") or data.get("discover")):
        raise UsageError("servers: the cluster's hosts are sampled over SSH (--server-host) or from a Kubernetes "
                         "DaemonSet (--server-k8s, `kubernetes:`), not both")
    if not data or not (data.get("hosts") or data.get("discover") or data.get("kubernetes")):
        return None
    if key_file:
        if why := key_file_problem(key_file):
            raise UsageError(f"--server-key: {why}", hint=KEY_FIX)
        data["key_file"] = key_file
        data["hosts"] = [{**h, "key_file": h.get("key_file") or key_file} for h in data.get("hosts", [])]
    if known_hosts:
        data["known_hosts"] = known_hosts
    if accept_new:
        data["accept_new_host_keys"] = True
    if keep_sampler:
        data["keep_sampler"] = True
    return validated(ServersSpec, data, "servers")


def discovered(spec: ServersSpec, placed: dict[str, list[ClusterDaemon]]) -> list[ClientHost]:
    """The metadata's hosts as SSH hosts: at spec.addresses[name], else the first address its daemons have."""
    out = []
    for name, daemons in placed.items():
        if name == UNKNOWN_HOST:
            continue
        addr = spec.addresses.get(name)
        if addr is None:
            ips = sorted({a.ip for d in daemons for vec in d.addrs.values() for a in vec
                          if not a.ip.startswith("127.") and a.ip != "::1"})
            addr = ips[0] if ips else name
        out.append(ClientHost(host=addr, user=spec.user, key_file=spec.key_file))
    return out


