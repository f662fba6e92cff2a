"""Client hosts as Kubernetes pods: the `k8s` transport (fathom.engines.transport).

fathom makes the run's pods itself: first an owner object (a ConfigMap named for the run, labelled), then
each pod with the same labels and an ownerReference to it, so that deleting the owner removes every pod
(the cluster's garbage collector). A pod runs a shell that waits; each engine is started in it through the
API's exec stream (a websocket: no SSH, no open port, no service), its records on the stream's stdout, its
control lines on stdin, its exit code on the stream's status channel. The engine is in the image (fathom-
engine and the Ceph client libraries it links); `provide_engine` checks that it runs and speaks the protocol.

The client is kubernetes_asyncio: asyncio like asyncssh, on the same loop (fathom.engines.ssh.LOOP), with
the whole generated API (pods, owner references, events, RBAC) and the exec websocket as a raw stream.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fathom.errors import FathomError
from fathom.hosts import ClientsSpec

STDIN, STDOUT, STDERR, STATUS = 0, 1, 2, 3
STREAM_LIMIT = 64 << 20  # a summary line with many histograms
LABEL_RUN = "fathom.io/run"
LABELS = {"app.kubernetes.io/managed-by": "fathom", "app.kubernetes.io/name": "fathom-engine"}
POD_READY_S = 120.0
# the pod's own process: waits, ends at once on SIGTERM (a deletion takes no grace period)
IDLE = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]


class K8sError(FathomError):
    """A pod or the Kubernetes API could not be used; the message names the pod or the call."""

    exit_code = 4


@dataclass
class PodsSpec:
    """The run's pods: where, how many, from which image."""

    run: str  # the run's tag: names the owner and the pods, and their fathom.io/run label
    image: str
    pods: int = 1
    namespace: str = "default"
    kubeconfig: str | None = None  # default: $KUBECONFIG, then ~/.kube/config
    context: str | None = None
    engine: str = "/usr/bin/fathom-engine"  # its path in the image
    node_selector: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def owner_name(self) -> str:
        return f"fathom-{_dns(self.run)}"

    def pod_name(self, i: int) -> str:
        return f"fathom-{_dns(self.run)}-{i}"


def _dns(s: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", s.lower()).strip("-")[:40] or "run"


class Api:
    """One API connection (kubeconfig and context), a REST client and a websocket client."""

    def __init__(self, rest: Any, ws: Any):
        self.rest, self.ws = rest, ws

    @classmethod
    async def open(cls, kubeconfig: str | None, context: str | None) -> Api:
        from kubernetes_asyncio import client, config
        from kubernetes_asyncio.stream import WsApiClient

        cfg = client.Configuration()
        try:
            await config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
        except (config.ConfigException, OSError) as exc:
            raise K8sError(f"no usable kubeconfig ({kubeconfig or 'KUBECONFIG, ~/.kube/config'}): {exc}",
                           hint="name one with kubeconfig: (and context:), or set KUBECONFIG") from None
        return cls(client.ApiClient(cfg), WsApiClient(cfg))

    def core(self, ws: bool = False) -> Any:
        from kubernetes_asyncio import client

        return client.CoreV1Api(self.ws if ws else self.rest)

    async def close(self) -> None:
        await self.rest.close()
        await self.ws.close()


class PodProcess:
    """An engine on an exec websocket: frames carry a channel byte, then the data."""

    pid: int | None = None  # the engine's `start` record names it

    def __init__(self, ws: Any):
        self.ws = ws
        self.stdout = asyncio.StreamReader(limit=STREAM_LIMIT)
        self.stderr = bytearray()
        self.exit_code: int | None = None
        self.closed = asyncio.Event()
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

    async def _send(self) -> None:
        while (data := await self._out.get()) is not None:
            await self.ws.send_bytes(bytes([STDIN]) + data)

    async def readline(self) -> str:
        return (await self.stdout.readline()).decode(errors="replace")

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


class PodHost:
    """One pod of the run as a client host."""

    remote = True
    start_hint = ""

    def __init__(self, api: Api, namespace: str, pod: str, engine: str):
        self.api, self.namespace, self.name, self.engine_path = api, namespace, pod, engine
        self.engine: str | None = None
        self.lost: str | None = None
        self.facts: dict[str, Any] = {"pod": pod, "namespace": namespace}
        self._procs: list[PodProcess] = []

    async def exec(self, argv: list[str]) -> PodProcess:
        try:
            ctx = await self.api.core(ws=True).connect_get_namespaced_pod_exec(
                self.name, self.namespace, command=argv, stdin=True, stdout=True, stderr=True, tty=False,
                _preload_content=False)
            ws = await ctx  # the request's context manager: awaited, the websocket
        except Exception as exc:  # noqa: BLE001 - aiohttp's and the API's errors alike: the pod is not usable
            raise K8sError(f"pod {self.namespace}/{self.name}: exec failed: {exc}") from None
        p = PodProcess(ws)
        self._procs.append(p)
        return p

    async def run(self, argv: list[str], timeout: float = 60.0) -> tuple[int | None, str, str]:
        p = await self.exec(argv)
        try:
            out = await asyncio.wait_for(p.stdout.read(), timeout)
            rc = await asyncio.wait_for(p.wait(), timeout)
        except asyncio.TimeoutError:
            raise K8sError(f"pod {self.namespace}/{self.name}: `{' '.join(argv)[:60]}` took over {timeout:g} s") \
                from None
        finally:
            p.release()
            self._procs.remove(p)
        return rc, out.decode(errors="replace"), p.stderr.decode(errors="replace")

    async def provide_engine(self, local: Path, sha: str, protocol: int) -> str:
        """The image's engine, checked to run and speak `protocol` (nothing is copied into a pod)."""
        rc, out, err = await self.run([self.engine_path, "--version"])
        if rc != 0:
            raise K8sError(f"pod {self.name}: `{self.engine_path} --version` failed (exit {rc}): "
                           f"{(err or out).strip()[-300:]}", hint="use an image with fathom-engine and the Ceph "
                                                                  "client libraries it links")
        m = re.search(r"\(protocol (\d+)\)", out)
        if not m or int(m.group(1)) != protocol:
            raise K8sError(f"pod {self.name}: the image's engine speaks protocol {m.group(1) if m else '?'}, this "
                           f"fathom needs {protocol}", hint="use an image made by this fathom")
        self.engine = self.engine_path
        self.facts["engine_version"] = out.strip()
        return self.engine

    async def start(self, spec_json: str) -> PodProcess:
        """The engine with its spec on fd 3 (a here-document, as over SSH); exec, so its status is the engine's."""
        assert self.engine is not None
        script = (f"exec {shlex.quote(self.engine)} /dev/fd/3 3<<'FATHOM_SPEC_END'\n"
                  f"{spec_json}\nFATHOM_SPEC_END\n")
        return await self.exec(["/bin/sh", "-c", script])

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


class Pods:
    """The run's pods: made (owner first), waited for, and removed (the owner; the pods go with it)."""

    def __init__(self, spec: PodsSpec, api: Api):
        self.spec, self.api = spec, api
        self.hosts: list[PodHost] = []
        self.owner_uid: str | None = None

    @classmethod
    async def create(cls, spec: PodsSpec) -> Pods:
        pods = cls(spec, await Api.open(spec.kubeconfig, spec.context))
        try:
            await pods._create()
        except BaseException:
            await pods.delete()
            raise
        return pods

    def labels(self) -> dict[str, str]:
        return {**LABELS, LABEL_RUN: _dns(self.spec.run)}

    async def _create(self) -> None:
        from kubernetes_asyncio.client.exceptions import ApiException

        s, core = self.spec, self.api.core()
        try:
            owner = await core.create_namespaced_config_map(s.namespace, {
                "metadata": {"name": s.owner_name, "labels": self.labels()},
                "data": {"run": s.run, "pods": str(s.pods)}})
        except ApiException as exc:
            raise K8sError(f"cannot make the run's owner ConfigMap {s.namespace}/{s.owner_name}: "
                           f"{exc.status} {exc.reason}") from None
        self.owner_uid = owner.metadata.uid
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": s.owner_name, "uid": self.owner_uid,
               "blockOwnerDeletion": True}
        for i in range(s.pods):
            body = {"metadata": {"name": s.pod_name(i), "labels": self.labels(), "ownerReferences": [ref]},
                    "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                             "enableServiceLinks": False, "automountServiceAccountToken": False,
                             "nodeSelector": s.node_selector or None,
                             "containers": [{"name": "engine", "image": s.image, "imagePullPolicy": "IfNotPresent",
                                             "command": IDLE,
                                             "env": [{"name": k, "value": v} for k, v in s.env.items()]}]}}
            await core.create_namespaced_pod(s.namespace, body)
            self.hosts.append(PodHost(self.api, s.namespace, s.pod_name(i), s.engine))
        await self._wait_running()

    async def _wait_running(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + POD_READY_S
        core = self.api.core()
        waiting = {h.name for h in self.hosts}
        while waiting:
            for name in sorted(waiting):
                pod = await core.read_namespaced_pod(name, self.spec.namespace)
                if pod.status.phase == "Running":
                    waiting.discard(name)
                elif pod.status.phase in ("Failed", "Succeeded"):
                    raise K8sError(f"pod {self.spec.namespace}/{name} ended ({pod.status.phase}) before any engine")
            if waiting and loop.time() > deadline:
                raise K8sError(f"pods not running within {POD_READY_S:g} s: {', '.join(sorted(waiting))}")
            if waiting:
                await asyncio.sleep(0.2)

    async def delete(self) -> None:
        """The owner, in the foreground: the pods are gone when this returns."""
        from kubernetes_asyncio.client.exceptions import ApiException

        for h in self.hosts:
            h.close()
        core = self.api.core()
        try:
            await core.delete_namespaced_config_map(self.spec.owner_name, self.spec.namespace,
                                                    body={"propagationPolicy": "Foreground"})
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while loop.time() < deadline:
                left = await core.list_namespaced_pod(self.spec.namespace,
                                                      label_selector=f"{LABEL_RUN}={_dns(self.spec.run)}")
                if not left.items:
                    break
                await asyncio.sleep(0.2)
        except ApiException as exc:
            if exc.status != 404:
                raise
        finally:
            await self.api.close()


async def open_transports(spec: ClientsSpec, engine: Path, protocol: int) -> list[PodHost]:
    """The transport's entry (fathom.engines.transport.MODULES): none yet from a suite or the command line
    (its `kubernetes:` section is the next step); Pods.create makes them for a caller that names them."""
    return []
