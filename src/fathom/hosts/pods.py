"""Client hosts as Kubernetes pods: the `k8s` transport (fathom.hosts.transport).

fathom makes the run's pods itself: first an owner object (a ConfigMap named for the run, labelled), then
each pod with the same labels and an ownerReference to it, so that deleting the owner removes every pod
(the cluster's garbage collector). A pod runs a shell that waits; each engine is started in it through the
API's exec stream (a websocket: no SSH, no open port, no service), its records on the stream's stdout, its
control lines on stdin, its exit code on the stream's status channel. The engine is in the image (fathom-
engine and the Ceph client libraries it links); `provide_engine` checks that it runs and speaks the protocol.

The pods reach Ceph through a Secret fathom makes (fathom.hosts.k8s.access: from the run's conf and keyring, or
from Rook's own objects), an ownerReference to the same owner; before any engine starts, each pod is shown
to reach a mon. Every object is named in the run's undo journal before it is made (fathom.hosts.k8s.objects);
closing the last pod host deletes the owner and waits until the pods are gone.

The client is kubernetes_asyncio: asyncio like asyncssh, on the same loop (fathom.hosts.ssh.LOOP), with
the whole generated API (pods, owner references, events, RBAC) and the exec websocket as a raw stream.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import os
import platform
from pathlib import Path
from typing import Any

from fathom.hosts.clients import ClientsSpec, KubeSpec
from fathom.hosts.k8s import objects
from fathom.hosts.k8s.api import Api, K8sError
from fathom.hosts.k8s.image import ENGINE_IN_IMAGE
from fathom.cluster.client import HOST
from fathom.hosts.k8s.access import MOUNT, ROOK_ENDPOINTS, ROOK_SECRET, CephAccess, from_conn, from_rook, mon_addrs

STDIN, STDOUT, STDERR, STATUS = 0, 1, 2, 3
STREAM_LIMIT = 64 << 20  # a summary line with many histograms
LABEL_RUN = objects.LABEL_RUN
# the pod's own process: waits, ends at once on SIGTERM (a deletion takes no grace period)
IDLE = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]


class PodProcess:
    """An engine on an exec websocket: frames carry a channel byte, then the data."""

    pid: int | None = None  # the engine's `start` record names it

    def __init__(self, ws: Any):
        self.ws = ws
        self.stdout = asyncio.StreamReader(limit=STREAM_LIMIT)
        self.stderr = bytearray()
        self.exit_code: int | None = None
        self.closed = asyncio.Event()
        self.broke = False  # the stream ended without an exit status: the pod was deleted, or its node is gone
        self.gone: Any = None  # a coroutine function: why the pod is gone, or None (PodHost.gone)
        self._out: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._tasks = [asyncio.ensure_future(self._recv()), asyncio.ensure_future(self._send())]

    async def _recv(self) -> None:
        import aiohttp

        try:
            async for msg in self.ws:
                if msg.type != aiohttp.WSMsgType.BINARY or not msg.data:
                    continue
                ch, data = msg.data[0], msg.data[1:]
                if ch == STDOUT:
                    self.stdout.feed_data(data)
                elif ch == STDERR:
                    self.stderr += data
                elif ch == STATUS and data:
                    self.exit_code = exit_code(data)
        finally:
            self.stdout.feed_eof()
            self.closed.set()
            self.broke = self.exit_code is None

    async def _send(self) -> None:
        while (data := await self._out.get()) is not None:
            await self.ws.send_bytes(bytes([STDIN]) + data)

    async def readline(self) -> str:
        line = await self.stdout.readline()
        if not line:  # the status came before the end: a deleted pod's engine is killed, with an exit code
            why = await self.gone() if self.gone is not None and (self.broke or self.exit_code != 0) else None
            if why or self.broke:
                raise OSError(why or "the exec stream ended without the engine's exit status (the pod was "
                                     "deleted, or its node is gone)")
        return line.decode(errors="replace")

    async def read_stderr(self) -> str:
        await self.closed.wait()
        return self.stderr.decode(errors="replace")

    def write(self, data: str) -> None:
        if self.closed.is_set():
            raise OSError("the exec stream is closed")
        self._out.put_nowait(data.encode())  # one writer task keeps the lines in order

    async def wait(self) -> int | None:
        await self.closed.wait()
        return self.exit_code

    def release(self) -> None:
        self._out.put_nowait(None)
        for t in self._tasks:
            t.cancel()
        asyncio.ensure_future(self.ws.close())


def exit_code(status: bytes) -> int | None:
    """The exit code from the exec stream's status (a metav1.Status: Success, or NonZeroExitCode with it)."""
    try:
        st = json.loads(status)
    except ValueError:
        return None
    if st.get("status") == "Success":
        return 0
    for c in (st.get("details") or {}).get("causes") or []:
        if c.get("reason") == "ExitCode":
            return int(c.get("message"))
    return None


def image_id(pod: Any) -> str | None:
    """The image the pod's container runs, by the kubelet's ID of it: a pulled image's repo@sha256 digest, an
    imported one's config digest (which names its layers' digests)."""
    statuses = (pod.status.container_statuses or []) if pod is not None and pod.status else []
    return next((cs.image_id for cs in statuses if cs.image_id), None)


class PodHost:
    """One pod of the run as a client host."""

    remote = True
    start_hint = ""

    def __init__(self, api: Api, namespace: str, name: str, pod: str, engine: str, pods: Pods | None = None):
        self.api, self.namespace, self.name, self.pod, self.engine_path = api, namespace, name, pod, engine
        self.pods = pods  # the run's pods: closing any of their hosts removes them all (once)
        self.engine: str | None = None
        self.lost: str | None = None
        self.connection: dict[str, str] = {}  # the engines' Ceph connection fields here (fathom.hosts.k8s.access)
        self.facts: dict[str, Any] = {"pod": pod, "namespace": namespace}
        self._procs: list[PodProcess] = []

    async def exec(self, argv: list[str]) -> PodProcess:
        try:
            ctx = await self.api.core(ws=True).connect_get_namespaced_pod_exec(
                self.pod, self.namespace, command=argv, stdin=True, stdout=True, stderr=True, tty=False,
                _preload_content=False)
            ws = await ctx  # the request's context manager: awaited, the websocket
        except Exception as exc:  # noqa: BLE001 - aiohttp's and the API's errors alike: the pod is not usable
            raise K8sError(f"pod {self.namespace}/{self.pod}: exec failed: {exc}") from None
        p = PodProcess(ws)
        p.gone = self.gone
        self._procs.append(p)
        return p

    async def run(self, argv: list[str], timeout: float = 60.0) -> tuple[int | None, str, str]:
        p = await self.exec(argv)
        try:
            out = await asyncio.wait_for(p.stdout.read(), timeout)
            rc = await asyncio.wait_for(p.wait(), timeout)
        except asyncio.TimeoutError:
            raise K8sError(f"pod {self.namespace}/{self.pod}: `{' '.join(argv)[:60]}` took over {timeout:g} s") \
                from None
        finally:
            p.release()
            self._procs.remove(p)
        return rc, out.decode(errors="replace"), p.stderr.decode(errors="replace")

    async def provide_engine(self, local: Path, sha: str, protocol: int) -> str:
        """The image's engine, checked to run and speak `protocol` (nothing is copied into a pod)."""
        rc, out, err = await self.run([self.engine_path, "--version"])
        if rc != 0:
            raise K8sError(f"pod {self.pod}: `{self.engine_path} --version` failed (exit {rc}): "
                           f"{(err or out).strip()[-300:]}", hint="use an image with fathom-engine and the Ceph "
                                                                  "client libraries it links")
        m = re.search(r"\(protocol (\d+)\)", out)
        if not m or int(m.group(1)) != protocol:
            raise K8sError(f"pod {self.pod}: the image's engine speaks protocol {m.group(1) if m else '?'}, this "
                           f"fathom needs {protocol}", hint="use an image made by this fathom")
        self.engine = self.engine_path
        self.facts["engine_version"] = out.strip()
        return self.engine

    async def start(self, spec_json: str) -> PodProcess:
        """The engine with its spec on fd 3 (a here-document, as over SSH); exec, so its status is the engine's.
        Its parent is the runtime's exec launcher, which exits once the engine runs: no parent-death signal (it
        would stop the engine at its start; engine/PROTOCOL.md), the heartbeats stand for fathom."""
        assert self.engine is not None
        script = (f"export FATHOM_ENGINE_NO_PDEATHSIG=1; exec {shlex.quote(self.engine)} /dev/fd/3 "
                  f"3<<'FATHOM_SPEC_END'\n"
                  f"{spec_json}\nFATHOM_SPEC_END\n")
        return await self.exec(["/bin/sh", "-c", script])

    async def gone(self) -> str | None:
        """Why this pod is gone (deleted, being deleted, ended), or None; once known, the host is lost."""
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            pod = await self.api.core().read_namespaced_pod(self.pod, self.namespace)
        except ApiException as exc:
            why = f"pod {self.namespace}/{self.pod} was deleted" if exc.status == 404 else None
        except Exception:  # noqa: BLE001 - the API unreachable: nothing known of the pod
            why = None
        else:
            why = (f"pod {self.namespace}/{self.pod} is being deleted" if pod.metadata.deletion_timestamp else
                   f"pod {self.namespace}/{self.pod} ended ({pod.status.phase})"
                   if pod.status.phase in ("Failed", "Succeeded") else None)
        if why:
            self.lost = why
        return why

    async def kill(self, pid: int, sig: str = "TERM") -> None:
        await self.run(["kill", f"-{sig}", str(int(pid))])

    async def alive(self, pid: int) -> bool:
        if self.lost:
            return False
        rc, _, _ = await self.run(["kill", "-0", str(int(pid))])
        return rc == 0

    def close(self) -> None:
        for p in self._procs:
            p.release()
        self._procs.clear()

    async def aclose(self) -> None:
        self.close()
        if self.pods is not None:
            await self.pods.delete()


class Pods:
    """The run's pods: made (owner first, each object journaled before), waited for, removed (the owner: the
    pods and the Secret go with it)."""

    def __init__(self, spec: KubeSpec, run: str, api: Api, journal: Any = None, say: Any = print):
        self.spec, self.run, self.api, self.journal, self.say = spec, run, api, journal, say
        self.names = objects.Names(run, spec.pods)
        self.hosts: list[PodHost] = []
        self.access: CephAccess | None = None
        self.entry: Any = None
        self._deleted = False

    @classmethod
    async def create(cls, spec: KubeSpec, run: str, image: str, conn: Any = None, journal: Any = None,
                     say: Any = print) -> Pods:
        """Pods for `run` from `image`; conn (a fathom.cluster.ceph.Connection): the conf and keyring they get
        (unless spec.rook)."""
        pods = cls(spec, run, await Api.open(spec.kubeconfig, spec.context), journal, say)
        try:
            await pods._create(image, conn)
        except BaseException:
            try:
                await pods.delete()
            except Exception:  # noqa: BLE001 - the first error is the one to name; the journal keeps what is left
                pass
            raise
        return pods

    def labels(self) -> dict[str, str]:
        return objects.labels(self.run)

    async def _create(self, image: str, conn: Any) -> None:
        s, n, core = self.spec, self.names, self.api.core()
        call = objects.Call(self.api.server, s.namespace)
        if s.rook is not None:  # read in Rook's namespace: a refusal names that one
            rook = objects.Call(self.api.server, s.rook.namespace,
                                needs=f"get on ConfigMap {ROOK_ENDPOINTS} and Secret {ROOK_SECRET}",
                                where="kubernetes.rook.namespace (--rook-namespace)")
            self.access = await rook(f"read Rook's mon endpoints in {s.rook.namespace}",
                                     from_rook(core, s.rook.namespace))
        elif conn is not None:
            self.access = await asyncio.to_thread(from_conn, conn.conf, conn.name, conn.keyring,
                                                    getattr(conn, "client", HOST))
        if self.journal is not None:  # before anything is made: what a killed run leaves is found and removed
            self.entry = self.journal.write(objects.entry(s, n, secret=self.access is not None))
        self.say(f"kubernetes: {s.pods} pod(s) in {s.namespace} from {image}"
                 + (f", Ceph access from {self.access.source}" if self.access else ""))
        owner = await call(f"create the run's owner ConfigMap {n.owner}", core.create_namespaced_config_map(
            s.namespace, {"metadata": {"name": n.owner, "labels": self.labels()},
                          "data": {"run": self.run, "pods": str(s.pods), "host": platform.node(),
                                   "pid": str(os.getpid())}}))
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": n.owner, "uid": owner.metadata.uid,
               "blockOwnerDeletion": True}
        meta = {"labels": self.labels(), "ownerReferences": [ref]}
        if self.access is not None:
            await call(f"create the Secret {n.secret}", core.create_namespaced_secret(s.namespace, {
                "metadata": {"name": n.secret, **meta}, "type": "Opaque", "data": self.access.secret_data()}))

        async def one(i: int) -> None:
            await call(f"create pod {n.pod(i)}", core.create_namespaced_pod(
                s.namespace, {"metadata": {"name": n.pod(i), **meta}, "spec": self._pod_spec(image)}))

        await asyncio.gather(*(one(i) for i in range(s.pods)))
        for i in range(s.pods):
            h = PodHost(self.api, s.namespace, f"pod-{i}", n.pod(i), ENGINE_IN_IMAGE, self)
            if self.access is not None:
                h.connection = self.access.connection()
            self.hosts.append(h)
        running = await objects.wait_running(core, s, n, image, self.say)
        for h in self.hosts:  # the run records what each pod runs: by default its client's image (Ceph libraries)
            h.facts["image"] = image
            h.facts["image_id"] = image_id(running.get(h.pod))
        if self.access is not None:
            await self._reach_mons()

    def _pod_spec(self, image: str) -> dict[str, Any]:
        s = self.spec
        container: dict[str, Any] = {"name": "engine", "image": image, "imagePullPolicy": "IfNotPresent",
                                     "command": IDLE}
        if s.requests or s.limits:
            container["resources"] = {k: v for k, v in (("requests", s.requests), ("limits", s.limits)) if v}
        spec: dict[str, Any] = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                                "enableServiceLinks": False, "automountServiceAccountToken": False,
                                "containers": [container]}
        if s.node_selector:
            spec["nodeSelector"] = dict(s.node_selector)
        if s.spread == "one-per-node":
            spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {objects.LABEL_RUN: self.labels()[objects.LABEL_RUN]}},
                 "topologyKey": "kubernetes.io/hostname"}]}}
        if self.access is not None:
            container["volumeMounts"] = [{"name": "ceph", "mountPath": MOUNT, "readOnly": True}]
            spec["volumes"] = [{"name": "ceph", "secret": {"secretName": self.names.secret, "defaultMode": 0o400}}]
        return spec

    async def _reach_mons(self) -> None:
        """Each pod connects to a mon (TCP) before any engine starts: a network policy or a cluster bound to an
        address pods cannot reach fails here, by name, not as an engine's connect timeout."""
        assert self.access is not None
        addrs = mon_addrs(self.access.mon_host)
        script = "; ".join(f"nc -w 3 {ip} {port} -e /bin/true >/dev/null 2>&1 && echo {ip}:{port}"
                           for ip, port in addrs) + "; true"

        async def one(h: PodHost) -> str | None:
            rc, out, err = await h.run(["/bin/sh", "-c", script], timeout=30)
            return None if out.strip() else h.pod

        cut = [p for p in await asyncio.gather(*(one(h) for h in self.hosts)) if p]
        if cut:
            raise K8sError(f"pod(s) {', '.join(cut)} cannot reach any of the cluster's mons "
                           f"({', '.join(f'{ip}:{port}' for ip, port in addrs)}, from {self.access.source})",
                           hint="the mons' addresses must be reachable from the pod network: for fathom's own "
                                "cluster, --bind an address of this host the pods reach; check network policies")

    async def delete(self) -> None:
        """The owner, in the foreground: the pods and the Secret are gone when this returns (once)."""
        if self._deleted:
            return
        self._deleted = True
        for h in self.hosts:
            h.close()
        try:
            await objects.delete_run(self.api.core(), self.spec.namespace, self.names)
            if self.entry is not None:
                self.journal.drop(self.entry.kind, self.entry.what)
        finally:
            await self.api.close()


async def open_transports(spec: ClientsSpec, engine: Path, protocol: int, ctx: Any = None) -> list[PodHost]:
    """The transport's entry (fathom.hosts.transport.TABLE): the pods of spec.kubernetes, made for the run
    (ctx: fathom.hosts.transport.OpenContext), each checked to run the image's engine."""
    kube = spec.kubernetes
    if kube is None:
        return []
    image = kube.image
    if image is None:
        from fathom.hosts.k8s.image import default_tag

        # the image `fathom k8s image` makes for the client the run reaches its cluster with (--client-ceph)
        image = default_tag(engine, getattr(getattr(ctx, "conn", None), "client", HOST))
    run = ctx.run if ctx is not None else f"run-{os.getpid()}"
    if getattr(ctx, "journal", None) is not None:  # what a killed attempt of this run left goes first
        await objects.remove_left(ctx.journal, ctx.say)
    pods = await Pods.create(kube, run, image,
                             conn=getattr(ctx, "conn", None), journal=getattr(ctx, "journal", None),
                             say=getattr(ctx, "say", print))
    try:
        await asyncio.gather(*(h.provide_engine(engine, "", protocol) for h in pods.hosts))
    except BaseException:
        await pods.delete()
        raise
    return pods.hosts
