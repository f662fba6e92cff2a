"""The Kubernetes objects fathom makes for a run, their names and labels, the undo journal's entry for them,
and the API's failures turned into errors that name the problem and the fix.

A run's objects: an owner ConfigMap `fathom-<run>` (its data names the run, the host and the pid that made
it), and, each with an ownerReference to it, the pods `fathom-<run>-<i>` and the Secret `fathom-<run>-ceph`.
All carry the labels below. Deleting the owner in the foreground removes them all; anything found without
the owner is deleted by its labels, and only then: fathom never deletes an object it did not label.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, TypeVar

from fathom.cluster.journal import K8S_KIND
from fathom.errors import FathomError
from fathom.hosts.k8s.api import Api, K8sError, kubeconfig_files

LABEL_RUN = "fathom.io/run"
MANAGED_BY = ("app.kubernetes.io/managed-by", "fathom")  # on every object fathom makes
KIND = K8S_KIND  # the undo journal's kind for a run's Kubernetes objects
IMAGE_REASONS = ("ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName")
# what fathom asks of the API (docs/kubernetes.md gives the Role): (API group, resource, verbs)
RBAC = (("", "pods", "create get list delete"), ("", "pods/exec", "create get"),
        ("", "configmaps", "create get delete"), ("", "secrets", "create get list delete"), ("", "events", "list"))
IMAGE_FIX = ("make the image with `fathom k8s image -o engine.tar` and import it on every node that runs the pods "
             "(containerd: `ctr -n k8s.io images import engine.tar`), or push it to a registry the nodes pull "
             "from and name it in kubernetes.image")
WHERE = "kubernetes.namespace (--k8s-namespace)"  # where the pods' namespace is named
T = TypeVar("T")


def dns(s: str) -> str:
    """s as a DNS label part (names and label values): lower case, digits and `-`, at most 40 characters."""
    return re.sub(r"[^a-z0-9-]", "-", s.lower()).strip("-")[:40].strip("-") or "run"


def labels(run: str, app: str = "fathom-engine") -> dict[str, str]:
    """The labels of what fathom makes for `run`: the engine pods and their objects, or another `app`'s."""
    return {MANAGED_BY[0]: MANAGED_BY[1], "app.kubernetes.io/name": app, LABEL_RUN: dns(run)}


@dataclass(frozen=True)
class Names:
    run: str
    pods: int

    @property
    def owner(self) -> str:
        return f"fathom-{dns(self.run)}"

    @property
    def secret(self) -> str:
        return f"{self.owner}-ceph"

    def pod(self, i: int) -> str:
        return f"{self.owner}-{i}"

    @property
    def selector(self) -> str:
        return f"{LABEL_RUN}={dns(self.run)}"


def kubeconfig_path(given: str | None) -> str:
    """The kubeconfig a client would read (as written in the journal, so that a later restore reads the same)."""
    return str(Path(kubeconfig_files(given)[0]).resolve())


def entry(spec: Any, names: Names, secret: bool) -> Any:
    """The journal entry written before the run's first object is made: every name it will make."""
    from fathom.cluster.journal import Entry

    return Entry(KIND, f"pods {spec.namespace}/{names.owner}", data={
        "kubeconfig": kubeconfig_path(spec.kubeconfig), "context": spec.context, "namespace": spec.namespace,
        "run": names.run, "owner": names.owner, "pods": [names.pod(i) for i in range(names.pods)],
        "secret": names.secret if secret else None})


def rbac_text() -> str:
    return "; ".join(f"{r} ({v.replace(' ', ', ')})" for _, r, v in RBAC)


def _status_message(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(getattr(exc, "reason", exc))


class Call:
    """An API call whose failure becomes a K8sError naming what was done, the problem and its fix (needs, where:
    as api_error takes them)."""

    def __init__(self, server: str, namespace: str, needs: str | None = None, where: str = WHERE):
        self.server, self.namespace, self.needs, self.where = server, namespace, needs, where

    async def __call__(self, doing: str, aw: Awaitable[T]) -> T:
        import aiohttp
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            return await aw
        except ApiException as exc:
            raise self.error(doing, exc) from None
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise K8sError(f"the Kubernetes API at {self.server} is unreachable ({doing}): "
                           f"{exc or type(exc).__name__}",
                           hint="check the kubeconfig's server and context (`kubectl cluster-info` with the same "
                                "kubeconfig), and that this host reaches it") from None

    def error(self, doing: str, exc: Any) -> K8sError:
        return api_error(doing, exc, self.namespace, self.needs, self.where)


def api_error(doing: str, exc: Any, namespace: str, needs: str | None = None, where: str = WHERE) -> K8sError:
    """The API's refusal of `doing` in `namespace` (an ApiException) as an error naming the problem and the fix:
    the one wording of every refusal of a call fathom makes in a namespace. needs: what the caller must be
    allowed there (default: the engine pods' RBAC); where: the setting that names the namespace."""
    msg = _status_message(exc)
    if exc.status == 403:
        # to a user bound only to a Role in the namespace, the API answers 403, not 404, for a namespace that is
        # not there: the RBAC alone would send them after verbs they may well have
        return K8sError(f"forbidden to {doing}: {msg}; namespace {namespace} may also not exist (to a user with "
                        f"only a Role in it, the API answers a missing namespace with 403)",
                        hint=f"check it with `kubectl get namespace {namespace}` (create it, or name an existing "
                             f"one in {where}); if it exists, fathom needs, in namespace {namespace}: "
                             f"{needs or rbac_text()}; docs/kubernetes.md gives a Role and RoleBinding")
    if exc.status == 401:
        return K8sError(f"the Kubernetes API refused the kubeconfig's credentials ({doing}): {msg}",
                        hint="renew the kubeconfig's credentials, or name another context")
    if exc.status == 404 and "namespaces" in msg:
        return K8sError(f"namespace {namespace} does not exist ({doing})",
                        hint=f"create it (`kubectl create namespace {namespace}`) or name an existing one in {where}")
    return K8sError(f"cannot {doing}: {exc.status} {msg}")


async def wait_running(core: Any, spec: Any, names: Names, image: str, say: Any) -> dict[str, Any]:
    """Every pod of the run Running (returned by name, as the API last listed them); else the kubelet's reason (an
    image not on the node, a pod that ended) at once, or, after spec.ready_timeout_s, why the pods still wait,
    from the scheduler's events."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    call = Call("", spec.namespace)
    said = t0
    while True:
        listed = await call("list the run's pods", core.list_namespaced_pod(spec.namespace,
                                                                            label_selector=names.selector))
        by = {p.metadata.name: p for p in listed.items}
        waiting: list[str] = []
        for i in range(names.pods):
            name = names.pod(i)
            pod = by.get(name)
            phase = pod.status.phase if pod is not None and pod.status else None
            if phase == "Running":
                continue
            if phase in ("Failed", "Succeeded"):
                raise K8sError(f"pod {spec.namespace}/{name} ended ({phase}: {pod.status.reason or ''} "
                               f"{pod.status.message or ''}) before any engine started")
            for cs in (pod.status.container_statuses or []) if pod is not None else []:
                w = cs.state.waiting if cs.state else None
                if w is not None and w.reason in IMAGE_REASONS:
                    raise K8sError(f"the image {image} is not on node {pod.spec.node_name} "
                                   f"(pod {name}: {w.reason}: {(w.message or '').strip()[:300]})", hint=IMAGE_FIX)
            waiting.append(name)
        if not waiting:
            say(f"kubernetes: {names.pods} pod(s) running in {loop.time() - t0:.1f} s")
            return by
        now = loop.time()
        if now - t0 > spec.ready_timeout_s:
            why = await _pending_why(core, spec.namespace, waiting[0])
            raise K8sError(f"{len(waiting)} of {names.pods} pod(s) not running after {spec.ready_timeout_s:g} s "
                           f"({', '.join(waiting[:4])}{' ...' if len(waiting) > 4 else ''}): {why}",
                           hint="free or add nodes that match kubernetes.node_selector, lower the pods' requests, "
                                "or use spread: any; kubernetes.ready_timeout_s waits longer")
        if now - said > 10:
            say(f"kubernetes: {len(waiting)} pod(s) not running yet after {now - t0:.0f} s")
            said = now
        await asyncio.sleep(0.25)


async def _pending_why(core: Any, namespace: str, pod: str) -> str:
    """The newest warning about a pod (the scheduler's FailedScheduling says which nodes and why), or its phase."""
    try:
        evs = await core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}")
    except Exception:  # noqa: BLE001 - the reason is a courtesy: the error stands without it
        return "no events readable"
    warn = [e for e in evs.items if e.type == "Warning"] or evs.items
    if not warn:
        return "no event yet (is a scheduler running?)"
    e = max(warn, key=lambda e: (e.last_timestamp or e.event_time or e.metadata.creation_timestamp or 0,))
    return f"{e.reason}: {(e.message or '').strip()[:400]}"


async def delete_run(core: Any, namespace: str, names: Names) -> list[str]:
    """The run's objects removed: the owner in the foreground, then any pod or Secret still carrying the run's
    labels; waits (60 s at most) until no pod is left. Returns what was deleted by name."""
    from kubernetes_asyncio.client.exceptions import ApiException

    gone: list[str] = []

    async def absent(aw: Awaitable[Any], what: str) -> None:
        try:
            await aw
            gone.append(what)
        except ApiException as exc:
            if exc.status != 404:
                raise

    owner = None
    try:
        owner = await core.read_namespaced_config_map(names.owner, namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise
    if owner is not None and (owner.metadata.labels or {}).get(LABEL_RUN) == dns(names.run):
        await absent(core.delete_namespaced_config_map(names.owner, namespace,
                                                       body={"propagationPolicy": "Foreground"}),
                     f"ConfigMap {namespace}/{names.owner}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        pods = (await core.list_namespaced_pod(namespace, label_selector=names.selector)).items
        secrets = (await core.list_namespaced_secret(namespace, label_selector=names.selector)).items
        left = [p for p in pods if p.metadata.deletion_timestamp is None]
        for p in left:  # made but not (yet) collected with the owner: by its labels
            await absent(core.delete_namespaced_pod(p.metadata.name, namespace, grace_period_seconds=1),
                         f"pod {namespace}/{p.metadata.name}")
        for s in secrets:
            await absent(core.delete_namespaced_secret(s.metadata.name, namespace), f"Secret {namespace}/"
                                                                                     f"{s.metadata.name}")
        if not pods and not secrets:
            return gone
        if loop.time() > deadline:
            raise K8sError(f"the run's pods in {namespace} were not gone 60 s after their deletion: "
                           f"{', '.join(p.metadata.name for p in pods)}",
                           hint=f"see `kubectl -n {namespace} get pods -l {names.selector}`; "
                                "`fathom cluster restore` tries again")
        await asyncio.sleep(0.25)


async def remove_left(journal: Any, say: Any) -> tuple[list[str], list[str]]:
    """What a killed attempt's journal says it made on Kubernetes, removed (by name and fathom's labels only):
    (removed, failed with why). An entry removed is marked undone; one that failed stays for a later try."""
    removed, failed = [], []
    for e in journal.pending(KIND):
        d = e.data
        if "owner" not in d:  # a single object (the sampler's DaemonSet): fathom.hosts.k8s.journaled removes it
            continue
        try:
            api = await Api.open(d.get("kubeconfig"), d.get("context"))
            try:
                ns = d["namespace"]
                await Call(api.server, ns)(f"remove the run's objects in {ns}",
                                           delete_run(api.core(), ns, Names(d["run"], len(d.get("pods") or []))))
            finally:
                await api.close()
        except FathomError as exc:
            failed.append(f"{e.what}: {exc.message}")
            say(f"could not remove {e.what}: {exc.message}")
            continue
        journal.drop(KIND, e.what)
        removed.append(e.what)
        say(f"removed the Kubernetes objects fathom made: {e.what} (its owner, pods and Secret)")
    return removed, failed
