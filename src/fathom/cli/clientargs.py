"""The client-host options `fathom run` and `fathom bench` share, turned into a fathom.hosts.clients.ClientChoice."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fathom.hosts.clients import ClientChoice


def add_client_args(p: argparse.ArgumentParser, what: str = "the engines") -> None:
    g = p.add_argument_group(f"client hosts ({what} run there; default: one engine on this host)")
    g.add_argument("--client", action="append", metavar="USER@HOST[:PORT]",
                   help="a client host reached over SSH, or `local` for this host; repeatable"
                        + ("; replaces the suite's clients" if what == "the engines" else ""))
    g.add_argument("--clients-file", metavar="FILE", help="client hosts from a file (YAML list, or one per line)")
    g.add_argument("--on-client-loss", choices=("continue", "fail"),
                   help="a client host lost mid-point: keep the others' data and flag the point (continue, the "
                        "default) or fail the point")
    g.add_argument("--known-hosts", metavar="FILE", help="known_hosts file (default ~/.ssh/known_hosts)")
    g.add_argument("--accept-new-host-keys", action="store_true",
                   help="add the key of a host not yet in known_hosts (a changed key is always refused)")
    k = p.add_argument_group("Kubernetes pods as client hosts (fathom makes them for the run and removes them; "
                             "docs/kubernetes.md); any of these adds pods to the hosts above (alone: the pods only) "
                             "and overrides the suite's clients.kubernetes")
    k.add_argument("--k8s-pods", type=int, metavar="N", help="engine pods (hosts pod-0 .. pod-N-1)")
    k.add_argument("--k8s-engines-per-pod", type=int, metavar="N", help="engines in each pod (default 1)")
    k.add_argument("--k8s-namespace", metavar="NS", help="the pods' namespace, which must exist (default: default)")
    k.add_argument("--k8s-image", metavar="IMAGE", help="the engine image (default: the tag `fathom k8s image` "
                                                        "gives this fathom's engine)")
    k.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG, then ~/.kube/config)")
    k.add_argument("--k8s-context", metavar="NAME", help="the kubeconfig's context (default: its current one)")
    k.add_argument("--k8s-node-selector", action="append", metavar="KEY=VALUE", help="node label; repeatable")
    k.add_argument("--k8s-spread", choices=("any", "one-per-node"), help="one pod per node, or any placement")
    k.add_argument("--k8s-requests", metavar="cpu=1,memory=512Mi", help="each pod's resource requests")
    k.add_argument("--k8s-limits", metavar="cpu=2,memory=1Gi", help="each pod's resource limits")
    k.add_argument("--k8s-ready-timeout", type=float, metavar="SECONDS",
                   help="how long the pods may take to run before fathom says why they do not (default 120)")
    k.add_argument("--rook-namespace", metavar="NS",
                   help="the pods reach Ceph with Rook's own mon endpoints and secret in NS (default: a Secret "
                        "fathom makes from the run's conf and keyring)")


def add_server_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("server hosts (an attached cluster's hosts, sampled over SSH: daemon CPU, memory and "
                             "context switches, host CPU, NICs and disks; fathom.servers)")
    g.add_argument("--server-host", action="append", metavar="USER@HOST[:PORT]",
                   help="a host of the cluster, reached over SSH (fathom-sampler is uploaded there); `cluster`: "
                        "every host the cluster's metadata names, at its daemons' address; repeatable. fathom's own "
                        "host is sampled by its /proc, never over SSH")
    g.add_argument("--server-hosts-file", metavar="FILE",
                   help="server hosts and options from a YAML file (hosts, discover, user, key_file, addresses: "
                        "{metadata host name: address}, interval_s, max_clock_offset_s, keep_sampler), or one host "
                        "per line")
    g.add_argument("--server-key", metavar="FILE", help="private key for the server hosts (default: ssh-agent, "
                                                       "then ~/.ssh/id_*)")
    g.add_argument("--keep-sampler", action="store_true",
                   help="leave on each server host the fathom-sampler binary fathom uploaded there (by default it "
                        "is removed at the end of the run; one that was there before is never removed)")
    g.add_argument("--server-k8s", metavar="IMAGE",
                   help="sample the cluster's nodes (Rook) with fathom-sampler in a DaemonSet fathom makes for the run "
                        "from IMAGE (hostPID, read-only, no capability; removed at the end): kubeconfig, context, "
                        "namespace and nodes in the servers file's `kubernetes:` section (docs/kubernetes.md)")
    g.add_argument("--prometheus", metavar="URL",
                   help="an existing Prometheus that scrapes node-exporter on the cluster's hosts (cephadm deploys "
                        "one): host CPU, memory, NIC and disk bytes per point where SSH is not allowed")
    g.add_argument("--mgr-prometheus", action="store_true",
                   help="every daemon's perf counters from the mgr's prometheus module, wherever it runs; each "
                        "point boundary waits for a fresh collection, up to ~20 s. A module that is off is enabled "
                        "and disabled again at the end: each time the active mgr respawns (it restarts all its "
                        "modules: the dashboard, orchestrator and mgr commands such as `ceph pg dump` pause for a "
                        "few seconds, and a standby mgr may take over)")


def server_spec(args: argparse.Namespace) -> Any:
    """The server hosts the options name (a fathom.servers.ServersSpec), or None."""
    if not server_spec_named(args):
        return None
    from fathom.servers import servers_file, servers_from_args

    base = servers_file(args.server_hosts_file) if args.server_hosts_file else None
    return servers_from_args(args.server_host, args.server_key, getattr(args, "known_hosts", None),
                             bool(getattr(args, "accept_new_host_keys", False)), base,
                             bool(getattr(args, "keep_sampler", False)), getattr(args, "server_k8s", None))


def server_words(args: argparse.Namespace) -> list[str]:
    """The server-host options as given, files as absolute paths: what a printed resume command repeats (the run
    keeps them with what it was attached with, fathom.run.reattach)."""
    if not server_spec_named(args):
        return []
    out: list[str] = []
    for h in getattr(args, "server_host", None) or []:
        out += ["--server-host", h]
    for flag, attr in (("--server-hosts-file", "server_hosts_file"), ("--server-key", "server_key"),
                       ("--known-hosts", "known_hosts")):
        if getattr(args, attr, None):
            out += [flag, str(Path(getattr(args, attr)).expanduser().resolve())]
    if getattr(args, "server_k8s", None):
        out += ["--server-k8s", args.server_k8s]
    out += ["--keep-sampler"] if getattr(args, "keep_sampler", False) else []
    out += ["--accept-new-host-keys"] if getattr(args, "accept_new_host_keys", False) else []
    return out


def server_spec_named(args: argparse.Namespace) -> bool:
    """Whether the options name server hosts at all."""
    return any(getattr(args, a, None) for a in ("server_host", "server_hosts_file", "server_k8s"))


def client_choice(args: argparse.Namespace) -> ClientChoice:
    """What the options say of client hosts."""
    from fathom.hosts.clients import ClientChoice  # fathom.hosts.clients loads pydantic: only for the commands that run

    return ClientChoice.of(args)
