"""Single Kubernetes objects fathom makes for a run (the sampler's DaemonSet): written in the run's undo journal
(kind `k8s`) before each is made, labelled as fathom's, and removed only while they still carry those labels (and
the uid fathom was given), so fathom never touches an object it did not make. A run's engine pods, their owner
and Secret are one entry of fathom.hosts.k8s.objects.

An entry's data names how to reach the object and which it is: kubeconfig (a path, never its contents),
context, namespace, kind, name, the labels fathom gave it, and its uid once the API answered. A run killed
between the entry and the answer leaves an entry without a uid: the labels alone then say it is fathom's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fathom.cluster.journal import K8S_KIND, Entry, Journal
from fathom.hosts.k8s.api import Api, K8sError
from fathom.hosts.k8s.objects import LABEL_RUN, MANAGED_BY, WHERE, api_error
from fathom.hosts.ssh import LOOP

# kind -> (API group class, the snake name of its namespaced calls)
KINDS = {"DaemonSet": ("AppsV1Api", "daemon_set"), "ConfigMap": ("CoreV1Api", "config_map"),
         "Pod": ("CoreV1Api", "pod"), "Secret": ("CoreV1Api", "secret")}
GONE_S = 90.0


def entry(kubeconfig: str | None, context: str | None, namespace: str, kind: str, name: str,
          labels: dict[str, str]) -> Entry:
    """The journal entry of an object fathom is about to make."""
    return Entry(K8S_KIND, f"{kind} {namespace}/{name}", data={
        "kubeconfig": kubeconfig, "context": context, "namespace": namespace, "kind": kind, "name": name,
        "labels": dict(labels)})


def fathoms(obj_labels: dict[str, str] | None, want: dict[str, str], obj_uid: str | None,
            uid: str | None) -> str | None:
    """None when an object is the one fathom made (its labels carry fathom's and the run's; its uid is the one
    recorded, when one was), else why it is not fathom's to touch."""
    have = obj_labels or {}
    k, v = MANAGED_BY
    if have.get(k) != v or (LABEL_RUN in want and have.get(LABEL_RUN) != want[LABEL_RUN]):
        return f"it does not carry fathom's labels ({k}={v}, {LABEL_RUN}={want.get(LABEL_RUN)})"
    if uid and obj_uid != uid:
        return f"its uid is {obj_uid}, not the {uid} fathom made"
    return None


def _api(api: Api, kind: str) -> tuple[Any, str]:
    from kubernetes_asyncio import client

    group, snake = KINDS[kind]
    return getattr(client, group)(api.rest), snake


async def create(api: Api, namespace: str, kind: str, body: dict[str, Any], needs: str | None = None,
                 where: str = WHERE) -> str:
    """Make the object (its entry written already); its uid. needs, where: what the caller must be allowed in
    the namespace, and the setting that names it, said when the API refuses (objects.api_error)."""
    from kubernetes_asyncio.client.exceptions import ApiException

    group, snake = _api(api, kind)
    try:
        obj = await getattr(group, f"create_namespaced_{snake}")(namespace, body)
    except ApiException as exc:
        raise api_error(f"make {kind} {namespace}/{body['metadata']['name']}", exc, namespace, needs,
                        where) from None
    return str(obj.metadata.uid)


async def delete(api: Api, data: dict[str, Any], wait_s: float = GONE_S) -> tuple[bool, str | None]:
    """The object an entry names deleted (in the foreground: what it owns first) and waited for:
    (removed or already gone, why it was left)."""
    from kubernetes_asyncio.client.exceptions import ApiException

    group, snake = _api(api, data["kind"])
    ns, name, uid = data["namespace"], data["name"], data.get("uid")
    read = getattr(group, f"read_namespaced_{snake}")
    try:
        obj = await read(name, ns)
    except ApiException as exc:
        if exc.status == 404:
            return True, None
        return False, f"{exc.status} {exc.reason}"
    why = fathoms(obj.metadata.labels, data.get("labels") or {}, obj.metadata.uid, uid)
    if why:
        return False, f"left alone: {why}"
    body = {"propagationPolicy": "Foreground", "preconditions": {"uid": obj.metadata.uid}}
    try:
        await getattr(group, f"delete_namespaced_{snake}")(name, ns, body=body)
    except ApiException as exc:
        if exc.status != 404:
            return False, f"{exc.status} {exc.reason}"
    deadline = asyncio.get_running_loop().time() + wait_s
    while asyncio.get_running_loop().time() < deadline:
        try:
            await read(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return True, None
        await asyncio.sleep(0.25)
    return False, f"still there {wait_s:g} s after its deletion"


def remove_left(journal: Journal, say: Any) -> tuple[list[str], list[str]]:
    """The objects a killed run's journal names, deleted where they are still fathom's: (removed, failed with
    why). An entry removed, already gone or not fathom's object is marked done; one that failed stays."""
    async def one(e: Entry) -> tuple[bool, str | None]:
        try:
            api = await Api.open(e.data.get("kubeconfig"), e.data.get("context"))
        except K8sError as exc:
            return False, exc.message
        try:
            return await delete(api, e.data)
        finally:
            await api.close()

    removed, failed = [], []
    for e in journal.pending(K8S_KIND):
        if "kind" not in e.data:  # a run's pods, their owner and Secret: fathom.hosts.k8s.objects removes them
            continue
        try:
            gone, why = LOOP.run(one(e), timeout=GONE_S + 30)
        except Exception as exc:  # noqa: BLE001 (an API that does not answer: tried again by a later restore)
            gone, why = False, str(exc) or type(exc).__name__
        if gone:
            journal.drop(K8S_KIND, e.what)
            removed.append(e.what)
            say(f"removed {e.what}, which fathom made")
        elif why and why.startswith("left alone"):
            journal.drop(K8S_KIND, e.what)
            say(f"{e.what}: {why}")
        else:
            failed.append(f"{e.what}: {why}")
            say(f"could not remove {e.what}: {why}")
    return removed, failed
