"""Server figures on Kubernetes (Rook): fathom-sampler in a DaemonSet fathom makes for the run.

The DaemonSet's pods share the node's PID namespace (hostPID), so their /proc is the node's; nothing else of
the node: no host network, no host path, a read-only root, no privilege escalation, every capability dropped,
running as nobody. The sampler reads only world-readable files of other processes (/proc/PID/stat, status,
cmdline, cgroup, task/*/stat: tried on the test bed as uid 65534 with no capability; /proc/PID/io, which
would need more, it does not read). Each pod's own process is a shell that waits; the sampler is started in
it through the API's exec stream (as client pods' engines are: fathom.hosts.pods), its lines read by the
stream handling SSH's hosts use (fathom.servers.stream), windowed per point as theirs are
(fathom.servers.sampled). Its NIC counters are the pod's own network namespace's: left out.

Nodes and the cluster's metadata: Rook gives every Ceph daemon's container NODE_NAME (the pod's
spec.nodeName), and Ceph takes NODE_NAME, when set, as the hostname it reports (ceph_get_hostname), so
`ceph osd metadata` names a Rook daemon's host by its Kubernetes node name, exactly. A node is matched to
the metadata's host by that name (short names equal), else by one of its addresses being one of its daemons'
(host networking, or a cluster outside Kubernetes), else by `node_hosts:` given by the user. Only the daemons
the metadata places on a node count there (fathom.servers.attribution), whatever a node's /proc shows.

The DaemonSet is written in the run's undo journal (kind `k8s`) before it is made and deleted at the end
(in the foreground: its pods first); `--resume` and `fathom cluster restore` delete what a killed run left,
only while it still carries fathom's labels.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from dataclasses import dataclass
from typing import Any

from fathom.servers.inventory import UNKNOWN_HOST, ClusterDaemon
from fathom.cluster.journal import K8S_KIND, Entry, Journal
from fathom.hosts.pods import IDLE, LABEL_RUN, Api, K8sError, PodHost
from fathom.hosts.ssh import LOOP, raise_any
from fathom.errors import UsageError
from fathom.hosts.k8s import journaled, objects
from fathom.servers.attribution import match_host
from fathom.servers.sampled import SampledHosts
from fathom.binaries import sampler_path
from fathom.servers.named import KubernetesServers, ServersSpec
from fathom.servers.stream import SamplerStream, best_offset

APP = "fathom-sampler"
NOBODY = 65534
# one clock reading per line read: busybox's adjtimex prints the time to the microsecond (its date has no %N)
CLOCK = ("while read -r _; do t=$(adjtimex 2>/dev/null | sed -n 's/.*tv_sec: *//p;s/.*tv_usec: *//p' | "
         "tr '\\n' ' '); [ -n \"$t\" ] && echo \"$t\" || date +'%s %N'; done")
POD_PROBLEMS = (*objects.IMAGE_REASONS, "CrashLoopBackOff",
                "CreateContainerConfigError", "CreateContainerError", "RunContainerError")
# what the sampler's DaemonSet needs in its namespace (docs/kubernetes.md), said when the API forbids a call
RBAC = "daemonsets (apps: get, create, delete); pods (list); pods/exec (create)"


@dataclass(frozen=True)
class Node:
    name: str
    addresses: tuple[str, ...] = ()


def labels(run: str) -> dict[str, str]:
    return objects.labels(run, APP)


def daemonset_name(run: str) -> str:
    return f"{APP}-{objects.dns(run)}"[:63].rstrip("-")


def node_host(node: Node, placed: dict[str, list[ClusterDaemon]], node_hosts: dict[str, str]) -> str | None:
    """The metadata's host a node is: as the user maps it, else by its name (Rook: NODE_NAME), else by an address."""
    if node.name in node_hosts:
        return node_hosts[node.name] if node_hosts[node.name] in placed else None
    for addr in node.addresses or ("",):
        if (m := match_host(placed, node.name, addr)) is not None:
            return m
    return None


def choose_nodes(spec: KubernetesServers, nodes: list[Node], placed: dict[str, list[ClusterDaemon]]) -> list[str]:
    """The nodes the DaemonSet runs on: those named, else (no node selector) the nodes the metadata's hosts
    are; empty with a node selector (it picks them). K8sError when the metadata's hosts are no node."""
    if spec.nodes:
        unknown = sorted(set(spec.nodes) - {n.name for n in nodes})
        if unknown:
            raise K8sError(f"servers.kubernetes.nodes: no node named {', '.join(unknown)}",
                           hint=f"the cluster's nodes: {', '.join(n.name for n in nodes)}")
        return list(spec.nodes)
    if spec.node_selector:
        return []
    out = [n.name for n in nodes if node_host(n, placed, spec.node_hosts)]
    if not out:
        hosts = sorted(h for h in placed if h != UNKNOWN_HOST)
        raise K8sError(f"none of the Kubernetes nodes ({', '.join(n.name for n in nodes) or 'none'}) is a host of "
                       f"the cluster's metadata ({', '.join(hosts) or 'none'}), by name or address",
                       hint="map them with servers.kubernetes.node_hosts {NODE: HOST}, or name the nodes "
                            "(nodes:, node_selector:)")
    return out


def daemonset(spec: KubernetesServers, run: str, nodes: list[str]) -> dict[str, Any]:
    """The DaemonSet's body: hostPID and nothing else of the node; the sampler's shell waits for its exec."""
    lab = labels(run)
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": nodes}]}]}}} if nodes else None
    container = {
        "name": "sampler", "image": spec.image, "imagePullPolicy": "IfNotPresent", "command": IDLE,
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                            "privileged": False, "capabilities": {"drop": ["ALL"]},
                            "runAsUser": NOBODY, "runAsGroup": NOBODY, "runAsNonRoot": True,
                            "seccompProfile": {"type": "RuntimeDefault"}}}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": daemonset_name(run), "namespace": spec.namespace, "labels": lab},
            "spec": {"selector": {"matchLabels": {k: lab[k] for k in ("app.kubernetes.io/name", LABEL_RUN)}},
                     "template": {"metadata": {"labels": lab}, "spec": {
                         "hostPID": True, "automountServiceAccountToken": False, "enableServiceLinks": False,
                         "terminationGracePeriodSeconds": 1, "nodeSelector": spec.node_selector or None,
                         "affinity": affinity, "tolerations": spec.tolerations or None,
                         "containers": [container]}}}}


class PodSampler(SamplerStream):
    """The sampler in one node's pod of the DaemonSet: named by the pod, a host by its node."""

    error = K8sError
    keep_net = False  # the pod's own network namespace

    def __init__(self, api: Api, namespace: str, pod: str, node: Node, meta: str | None, path: str,
                 interval_s: float):
        super().__init__(pod, node.addresses[0] if node.addresses else node.name, interval_s)
        self.node, self.meta, self.path = node, meta, path
        self.pod = PodHost(api, namespace, pod, pod, path)

    @property
    def hostname(self) -> str:
        return self.node.name

    def metadata_host(self, placed: dict[str, list[ClusterDaemon]]) -> str | None:
        return self.meta

    async def clock(self) -> None:
        proc = await self.pod.exec(["/bin/sh", "-c", CLOCK])

        async def ask() -> float | None:
            proc.write("t\n")
            words = (await asyncio.wait_for(proc.readline(), 10)).split()
            return int(words[0]) + int(words[1]) / (1e6 if len(words[1]) <= 6 else 1e9) if len(words) == 2 else None

        try:
            best = await best_offset(ask)
        except (asyncio.TimeoutError, ValueError):
            best = None
        finally:
            proc.release()
        if best is None:
            raise K8sError(f"pod {self.pod.namespace}/{self.name}: no clock reading (adjtimex or date +%N)",
                           hint="use an image with busybox beside fathom-sampler")
        self.offset_s, self.rtt_s = best

    async def start(self, version: str | None) -> None:
        proc = await self.pod.exec([self.path, "--interval", f"{self.interval_s:g}", "--threads-of", "crimson-osd"])
        await self.follow(proc, f"{self.path} in pod {self.name}", version,
                          hint="the image needs fathom-sampler at servers.kubernetes.sampler",
                          fix="use an image with this fathom's fathom-sampler")

    async def stderr(self, proc: Any) -> str:
        await asyncio.sleep(0.5)
        return bytes(proc.stderr).decode(errors="replace")[-300:]

    def ended(self) -> str:
        return f"its exec stream in pod {self.name} ended"

    async def close(self) -> None:
        self._closing = True
        if self.pid is not None and not self.lost:
            try:
                await asyncio.wait_for(self.pod.kill(int(self.pid)), 10)
            except (K8sError, asyncio.TimeoutError):
                pass
        await self.stop_reading()
        self.pod.close()


class DaemonSetServers(SampledHosts):
    """The run's sampler DaemonSet: made (journaled first), its pods sampling, windowed per point, deleted."""

    source = "k8s"
    via = "from a Kubernetes DaemonSet"
    lost_hint = "fathom starts the sampler again in the node's pod before the next point"
    hosts: list[PodSampler]  # type: ignore[assignment]

    def __init__(self, spec: ServersSpec, placed: dict[str, list[ClusterDaemon]], run: str, say: Any = None,
                 journal: Journal | None = None):
        super().__init__(spec, placed, say)
        assert spec.kubernetes is not None
        self.k8s, self.run, self.journal = spec.kubernetes, run, journal
        self.name = daemonset_name(run)
        self.what = f"DaemonSet {self.k8s.namespace}/{self.name}"
        self.api: Api | None = None
        self.version: str | None = None
        self.nodes: dict[str, Node] = {}
        self.made = False  # the DaemonSet was (or may have been) made: deleted at close()

    @classmethod
    def open(cls, spec: ServersSpec, placed: dict[str, list[ClusterDaemon]], run: str, say: Any = None,
             journal: Journal | None = None) -> DaemonSetServers:
        """The DaemonSet made on the nodes of the cluster's daemons, its pods running, each sampling; on any
        failure, deleted again and the error raised."""
        s = cls(spec, placed, run, say, journal)
        if not s.k8s.image:
            raise UsageError("servers.kubernetes: no image named for the sampler's DaemonSet",
                             hint="--server-k8s IMAGE, or `image:` in the servers file's kubernetes: section")
        out = subprocess.run([str(sampler_path()), "--version"], capture_output=True, text=True, timeout=30).stdout
        s.version = out.split()[1] if len(out.split()) > 1 else None
        if journal is not None and journal.holds(K8S_KIND, s.what):  # an earlier attempt's, killed
            s.say(f"removing {s.what}, left by an earlier attempt of this run")
            _, failed = journaled.remove_left(journal, s.say)
            if failed:
                raise K8sError(f"cannot remove what an earlier attempt left: {'; '.join(failed)}")
        try:
            s.api = LOOP.run(Api.open(s.k8s.kubeconfig, s.k8s.context))
            s.nodes = {n.name: n for n in LOOP.run(s._list_nodes())}
            chosen = choose_nodes(s.k8s, list(s.nodes.values()), placed)
            where = ", ".join(chosen) or f"the nodes labelled {s.k8s.node_selector}"
            s.say(f"sampling the cluster's nodes from {s.what} ({s.k8s.image}) on {where}")
            body = daemonset(s.k8s, run, chosen)
            if journal is not None:  # before it is made (on this thread: the journal is the store's)
                journal.write(journaled.entry(s.k8s.kubeconfig or os.environ.get("KUBECONFIG"), s.k8s.context,
                                            s.k8s.namespace, "DaemonSet", s.name, labels(run)))
            s.made = True
            uid = LOOP.run(journaled.create(s.api, s.k8s.namespace, "DaemonSet", body, RBAC,
                                            "the servers file's kubernetes.namespace"))
            if journal is not None:
                journal.write(Entry(K8S_KIND, s.what, data={"uid": uid}))  # added to the entry written before
            pods = LOOP.run(s._running(len(chosen) or None), timeout=s.k8s.ready_timeout_s + 30)
            s.hosts = [PodSampler(s.api, s.k8s.namespace, pod, s.nodes[node],
                                  node_host(s.nodes[node], placed, s.k8s.node_hosts), s.k8s.sampler,
                                  spec.interval_s) for pod, node in pods]

            async def ready() -> list[Any]:
                return await asyncio.gather(*(s._ready(h) for h in s.hosts), return_exceptions=True)

            raise_any(LOOP.run(ready()), lambda: None)
        except BaseException:
            s.close()
            raise
        return s

    async def _ready(self, h: PodSampler) -> None:
        await h.clock()
        if abs(h.offset_s) > self.spec.max_clock_offset_s:
            raise K8sError(f"node {h.hostname}: its clock is {h.offset_s:+.3f} s from this host's (measured "
                           f"through pod {h.name}): too far apart to place its samples on the point's timeline",
                           hint="synchronise the clocks (chrony or NTP on both), or raise servers.max_clock_offset_s")
        await h.start(self.version)

    async def _list_nodes(self) -> list[Node]:
        from kubernetes_asyncio.client.exceptions import ApiException

        assert self.api is not None
        try:
            got = await self.api.core().list_node()
        except ApiException as exc:
            raise K8sError(f"cannot list the cluster's nodes: {exc.status} {exc.reason}",
                           hint="fathom needs `list` on nodes (a ClusterRole): docs/kubernetes.md") from None
        return [Node(n.metadata.name, tuple(a.address for a in n.status.addresses or []
                                            if a.type in ("InternalIP", "ExternalIP")))
                for n in got.items]

    async def _running(self, want: int | None, node: str | None = None,
                       wait_s: float | None = None) -> list[tuple[str, str]]:
        """(pod, node) of each of the DaemonSet's pods (on `node` only, if named) once all run (as many as `want`,
        else as many as it schedules), waiting up to `wait_s` (default: ready_timeout_s); K8sError naming a pod's
        problem (the image not on the node, ...) or why pods wait."""
        from kubernetes_asyncio import client

        assert self.api is not None
        loop = asyncio.get_running_loop()
        wait_s = self.k8s.ready_timeout_s if wait_s is None else wait_s
        deadline = loop.time() + wait_s
        sel = ",".join(f"{k}={v}" for k, v in labels(self.run).items())
        on_node = {"field_selector": f"spec.nodeName={node}"} if node is not None else {}
        apps = client.AppsV1Api(self.api.rest)
        while True:
            ds = await apps.read_namespaced_daemon_set(self.name, self.k8s.namespace)
            n = want if want is not None else (ds.status.desired_number_scheduled
                                               if (ds.status.observed_generation or 0) >= 1 else None)
            pods = (await self.api.core().list_namespaced_pod(self.k8s.namespace, label_selector=sel,
                                                              **on_node)).items
            running = [(p.metadata.name, p.spec.node_name) for p in pods
                       if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
            if n is not None and len(running) >= n > 0:
                return running
            for p in pods:
                for cs in p.status.container_statuses or []:
                    w = cs.state.waiting if cs.state else None
                    if w is not None and w.reason in POD_PROBLEMS:
                        raise K8sError(f"pod {self.k8s.namespace}/{p.metadata.name} on node {p.spec.node_name}: "
                                       f"{w.reason}: {(w.message or '')[:300]}",
                                       hint=f"import {self.k8s.image} into the node's runtime (or push it where the "
                                            "nodes pull from): docs/kubernetes.md")
            if loop.time() > deadline:
                why = [f"{p.metadata.name}: {c.reason}: {c.message}" for p in pods
                       for c in p.status.conditions or [] if c.status == "False" and c.message]
                raise K8sError(f"{self.what}: {len(running)} of {n if n is not None else '?'} pod(s) running"
                               + (f" on node {node}" if node is not None else "") + f" after {wait_s:g} s"
                               + (f" ({'; '.join(why)[:500]})" if why else ""),
                               hint="see `kubectl describe daemonset` in the namespace: taints (tolerations:), "
                                    "node selector, resources")
            await asyncio.sleep(0.25)

    def reconnect(self) -> None:
        """The sampler started again in each lost node's pod (the DaemonSet's controller replaces a deleted one)."""
        gone = [h for h in self.hosts if h.lost]
        if not gone or self.api is None:
            return

        async def again(h: PodSampler) -> None:
            h.forget()
            # a deleted pod's replacement takes the controller and the kubelet a few seconds: waited for; a node
            # that did not come back before the last point (gone) is asked once, not waited for before each point
            pod = (await self._running(1, node=h.node.name, wait_s=0.0 if h.reconnect_error else None))[0][0]
            h.name, h.pod = pod, PodHost(h.pod.api, self.k8s.namespace, pod, pod, h.path)
            await self._ready(h)

        async def each() -> list[Any]:
            limit = self.k8s.ready_timeout_s + 30 + 2 * self.spec.interval_s  # the pod, then the sampler's start
            return await asyncio.gather(*(asyncio.wait_for(again(h), limit) for h in gone), return_exceptions=True)

        for h, r in zip(gone, LOOP.run(each())):
            self.reached_again(h, r if isinstance(r, BaseException) else None,
                               f"node {h.hostname} sampled again from pod {h.name}",
                               f"node {h.hostname}: its sampler does not start again")

    def describe(self) -> dict[str, Any]:
        """What a run records of its sampled nodes (the kubeconfig's path, never its contents)."""
        return {"source": self.source, "interval_s": self.spec.interval_s, "kubeconfig": self.k8s.kubeconfig,
                "context": self.k8s.context, "namespace": self.k8s.namespace, "daemonset": self.name,
                "image": self.k8s.image,
                "hosts": [{"name": h.name, "hostname": h.hostname, "metadata_host": h.meta,
                           "clock_offset_s": round(h.offset_s, 6), "clock_rtt_s": round(h.rtt_s or 0.0, 6),
                           "sampler": (h.header or {}).get("version")} for h in self.hosts]}

    def close(self) -> None:
        """Stop every sampler, delete the DaemonSet (its pods first) and mark it undone in the journal."""
        if self.api is None:
            return
        if not self.made:
            LOOP.run(self.api.close())
            self.api = None
            return

        async def all_() -> tuple[bool, str | None]:
            await asyncio.gather(*(h.close() for h in self.hosts), return_exceptions=True)
            assert self.api is not None
            try:
                return await journaled.delete(self.api, {"kind": "DaemonSet", "namespace": self.k8s.namespace,
                                                       "name": self.name, "labels": labels(self.run)})
            finally:
                await self.api.close()

        try:
            gone, why = LOOP.run(all_(), timeout=journaled.GONE_S + 30)
        except Exception as exc:  # noqa: BLE001 (an API that does not answer: the journal keeps the DaemonSet)
            gone, why = False, str(exc) or type(exc).__name__
        self.api = None
        if gone:
            if self.journal is not None:
                self.journal.drop(K8S_KIND, self.what)
            self.say(f"deleted {self.what} and its pods")
        else:
            self.say(f"warning: {self.what} is left ({why})"
                     + ("; the run's journal keeps it: `fathom run --resume` or `fathom cluster restore` "
                        "deletes it" if self.journal else ""))

