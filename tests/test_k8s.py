"""The Kubernetes transport (fathom.engines.k8s) on the real test bed (tests/k8sbed.py): pods made with labels
and an owner, engines started through exec streams, run as one group with this host's, nothing left after.

Only with FATHOM_TEST_K8S=1 (a fresh machine builds Kubernetes first, minutes).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import k8sbed
import pytest

from fathom.engine_spec import Control, EngineSpec, Load
from fathom.engines import group as group_mod
from fathom.engines.clients import _result
from fathom.engines.fathom_engine import PROTOCOL, check_engine
from fathom.engines.k8s import LABEL_RUN, Pods, PodsSpec
from fathom.engines.ssh import LOOP
from fathom.engines.transport import Transport
from fathom.interfaces.null import Null

pytestmark = [
    pytest.mark.skipif(not os.environ.get("FATHOM_TEST_K8S"),
                       reason="Kubernetes test bed: set FATHOM_TEST_K8S=1 (a fresh machine builds Kubernetes once, "
                              "6 to 12 minutes)"),
    pytest.mark.skipif(k8sbed.available() is not None, reason=f"Kubernetes test bed: {k8sbed.available()}"),
]


@pytest.fixture(scope="module")
def bed():
    k8sbed.ensure_built()
    with k8sbed.K8sBed() as b:
        yield b


def _spec(seconds: float) -> dict[str, Any]:
    return EngineSpec(target=Null(rw="randread", bs=4096, delay_us=200), load=Load(iodepth=2, duration_s=seconds),
                      control=Control(wait=True, heartbeat_timeout_s=group_mod.HEARTBEAT_TIMEOUT_S)).to_json()


def test_null_engines_in_two_pods_and_here_merge_and_leave_nothing(bed):
    engine = check_engine()
    tar, image = k8sbed.engine_image(engine, k8sbed.cache_dir() / "test-images")
    bed.import_image(tar)
    spec = PodsSpec(run="null-test", image=image, pods=2, kubeconfig=str(bed.kubeconfig))
    pods = LOOP.run(Pods.create(spec), timeout=180)
    try:
        labels = bed.kubectl("get", "pods", "-l", f"{LABEL_RUN}=null-test", "-o",
                             "jsonpath={range .items[*]}{.metadata.name} {.metadata.ownerReferences[0].kind}\n{end}")
        assert sorted(labels.stdout.split("\n")[:-1]) == [f"fathom-null-test-{i} ConfigMap" for i in (0, 1)]
        hosts = pods.hosts
        assert all(isinstance(h, Transport) for h in hosts)

        async def provide() -> None:
            await asyncio.gather(*(h.provide_engine(engine, "", PROTOCOL) for h in hosts))

        LOOP.run(provide(), timeout=60)
        instances = [group_mod.Instance(host="local", index=0, spec=_spec(3.0))] + [
            group_mod.Instance(host=h.name, index=n, spec=_spec(3.0), transport=h) for h in hosts for n in range(2)]
        g = group_mod.Group(instances, str(engine), 1.0, "continue", lambda rec: None, lambda e: None)
        group_mod.run_group(g, 60.0, 120.0)
        assert not g.failed and not g.lost_hosts, (g.failed, g.lost_hosts, [i.run.stderr for i in instances])
        assert set(g.clocks) == {"local", *(h.name for h in hosts)}
        assert all(i.run.exit_code == 0 for i in instances), [(i.label, i.run.exit_code) for i in instances]
        res, _ = _result(g)
        rows = {r["host"]: r for r in res.extra["hosts"]}
        assert {h.name for h in hosts} <= set(rows) and all(rows[h.name]["engines"] == 2 for h in hosts)
        total = sum(o.ops for o in res.ops.values() if o.ops)
        assert total == sum(e["ops"] for e in res.extra["engines"]) > 0  # every op counted once
        assert res.extra["start_skew_ms"] is not None
        print(f"pods: start skew {res.extra['start_skew_ms']:.2f} ms, clocks {res.extra['clocks']}")
    finally:
        LOOP.run(pods.delete(), timeout=90)
    left = bed.kubectl("get", "pods,configmaps", "-l", f"{LABEL_RUN}=null-test", "-o", "name").stdout.strip()
    assert left == ""
