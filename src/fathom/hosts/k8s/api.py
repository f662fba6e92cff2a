"""One connection to a Kubernetes API (kubeconfig and context): kubernetes_asyncio's REST client and its
websocket client (exec streams), on the caller's asyncio loop."""

from __future__ import annotations

from typing import Any

from fathom.errors import FathomError


class K8sError(FathomError):
    """A pod or the Kubernetes API could not be used; the message names the pod or the call."""

    exit_code = 4


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
