"""One connection to a Kubernetes API (kubeconfig and context): kubernetes_asyncio's REST client and its
websocket client (exec streams), on the caller's asyncio loop."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fathom.errors import FathomError

KUBECONFIG_FIX = ("give an existing kubeconfig with --kubeconfig (kubeconfig: in the suite's clients.kubernetes or "
                  "the servers file's kubernetes:), or set KUBECONFIG to one")


class K8sError(FathomError):
    """A pod or the Kubernetes API could not be used; the message names the pod or the call."""

    exit_code = 4


def kubeconfig_files(given: str | None) -> list[str]:
    """The files a client reads, as it reads them: the one given, else each of $KUBECONFIG's, else
    ~/.kube/config (user-expanded)."""
    listed = [given] if given else [f for f in os.environ.get("KUBECONFIG", "").split(os.pathsep) if f]
    return [str(Path(f).expanduser()) for f in listed or ["~/.kube/config"]]


def existing_kubeconfig(given: str | None) -> list[str]:
    """The kubeconfig files a client reads (kubeconfig_files), when one of them is there; else K8sError naming
    them, who named them, and the fix. The client itself skips files that are not there and then asks the empty
    config for its current-context ("Invalid kube-config file. Expected key current-context")."""
    files = kubeconfig_files(given)
    if not any(os.path.exists(f) for f in files):
        raise K8sError(f"no usable kubeconfig: {missing(given, files)}", hint=KUBECONFIG_FIX)
    return files


def missing(given: str | None, files: list[str]) -> str:
    """Which kubeconfig is not there, and who named it."""
    if given:
        return f"{files[0]} does not exist (given with --kubeconfig or kubeconfig:)"
    if any(os.environ.get("KUBECONFIG", "").split(os.pathsep)):
        return f"{', '.join(files)}, which KUBECONFIG names, {'does' if len(files) == 1 else 'do'} not exist"
    return f"{files[0]} does not exist, and KUBECONFIG is not set"


class Api:
    """One API connection (kubeconfig and context), a REST client and a websocket client."""

    def __init__(self, rest: Any, ws: Any):
        self.rest, self.ws = rest, ws

    @classmethod
    async def open(cls, kubeconfig: str | None, context: str | None) -> Api:
        from kubernetes_asyncio import client, config
        from kubernetes_asyncio.stream import WsApiClient

        files = existing_kubeconfig(kubeconfig)
        cfg = client.Configuration()
        try:
            await config.load_kube_config(config_file=os.pathsep.join(files), context=context,
                                          client_configuration=cfg)
        except (config.ConfigException, OSError) as exc:
            raise K8sError(f"no usable kubeconfig ({kubeconfig or 'KUBECONFIG, ~/.kube/config'}): {exc}",
                           hint=KUBECONFIG_FIX + "; a context other than its current one with --k8s-context "
                                                 "(context:)") from None
        api = cls(client.ApiClient(cfg), WsApiClient(cfg))
        api.server = cfg.host
        return api

    server = ""

    def core(self, ws: bool = False) -> Any:
        from kubernetes_asyncio import client

        return client.CoreV1Api(self.ws if ws else self.rest)

    async def close(self) -> None:
        await self.rest.close()
        await self.ws.close()
