"""The typed engine spec against the engine itself: `fathom-engine --check` validates what Python builds.

Python's defaults and limits (fathom.engine_spec) must be the engine's
(engine/src/spec.rs and the target modules): every point of every built-in
suite is built as the runner builds it and checked by the binary, and a minimal
spec of each target comes back from the engine unchanged in every field Python
sets. No cluster is needed: --check parses and validates only.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fathom import engine_spec as es
from fathom import interfaces
from fathom.suite import plan, spec
from fathom.cluster.ceph import Connection
from fathom.interfaces.base import PointContext
from fathom.engines.fathom_engine import point_spec
from fathom.interfaces.nfs import Nfs
from fathom.interfaces.null import Null
from fathom.interfaces.rados import Rados
from fathom.interfaces.rbd import Rbd
from fathom.interfaces.s3 import S3, Range


def check(engine: Path, doc: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    f = tmp_path / "spec.json"
    f.write_text(json.dumps(doc))
    return subprocess.run([str(engine), "--check", str(f)], capture_output=True, text=True, timeout=30)


def normalized(engine: Path, doc: dict, tmp_path: Path) -> dict:
    p = check(engine, doc, tmp_path)
    assert p.returncode == 0, f"{doc}\n{p.stdout}{p.stderr}"
    rec = json.loads(p.stdout.strip().splitlines()[-1])
    assert rec["type"] == "spec" and rec["protocol"] == es.PROTOCOL
    return rec["spec"]


def ctx(tmp_path: Path) -> PointContext:
    return PointContext(conn=Connection(conf=str(tmp_path / "ceph.conf"), name="client.admin"), pool="pool",
                        images=["fio_test_0", "fio_test_1"], run_tag="fathom-1-abc", workdir=tmp_path, timeout=60,
                        image_size=1 << 30)


@pytest.mark.parametrize("name", spec.builtin_names())
def test_every_builtin_point_is_a_valid_engine_spec(name, engine_ready, tmp_path):
    suites = [spec.load(name), spec.load(name, quick=True)]
    try:  # the same study with every workload on fathom-engine, where the engine runs it
        suites.append(spec.load(name, engine="fathom-engine"))
    except spec.SuiteError:
        pass
    checked = 0
    for loaded in suites:
        for pt in plan.expand(loaded.suite):
            if pt.engine != "fathom-engine":
                continue
            # built before any prepare step, as `fathom plan` does: no mount, no ganesha, no directory made
            params, c = pt.params, ctx(tmp_path)
            if loaded.suite.prep.rgw is not None:  # what fathom.cluster.rgw.prepare hands the s3 interface
                c.s3 = {"keys_file": str(tmp_path / "keys.json"), "bucket_tag": "fathom-1-abc",
                        "placements": {n: f"default:{n}-placement" for n in loaded.suite.prep.rgw.placements},
                        "endpoint": "http://127.0.0.1:7480", "tls_endpoint": "https://127.0.0.1:7443",
                        "ca_file": str(tmp_path / "ca.crt")}
            doc = point_spec(params, c).to_json()
            p = check(engine_ready, doc, tmp_path)
            assert p.returncode == 0, f"{name} {pt.key}: {p.stdout}{p.stderr}"
            assert not c.prepared
            checked += 1
    assert checked > 0
    assert sorted(os.listdir(tmp_path)) == ["spec.json"]  # nothing made but the spec file


def minimal_targets(tmp_path: Path) -> list[es.Target]:
    conn = es.Connection(conf=str(tmp_path / "ceph.conf"), name="client.admin")
    return [
        Rados(connection=conn, pool="p", op="write", prefix="x", object_size=4096, op_size=4096),
        Rbd(connection=conn, pool="p", rw="randwrite", images=["i"]),
        Null(),
        Nfs(export="/export", rw="randread", filesize=65536),
        S3(keys_file=str(tmp_path / "s3.json"), buckets=["b-0"], op="put", object_size=4096, objects=8),
        S3(keys_file=str(tmp_path / "s3.json"), buckets=["b-0", "b-1"], op="get", prefix="x", jobs=2,
           range=Range(size=4096), payload="sha256", endpoint="https://127.0.0.1:7443", ca_file="/ca.crt"),
    ]


def assert_subset(mine: dict, back: dict, where: str) -> None:
    """Every field Python sets comes back from the engine with the same value (the engine adds its own)."""
    for k, v in mine.items():
        if isinstance(v, dict):
            assert_subset(v, back[k], f"{where}.{k}")
        else:
            assert back[k] == v, f"{where}.{k}: python {v!r}, engine {back[k]!r}"


def test_python_defaults_are_the_engines(engine_ready, tmp_path):
    for target in minimal_targets(tmp_path):
        doc = es.EngineSpec(target=target, load=es.Load(duration_s=1.0)).to_json()
        back = normalized(engine_ready, doc, tmp_path)
        assert_subset(doc, back, target.kind)
        # the engine's defaults for what Python leaves out agree with Python's dataclass defaults
        conn = back["target"].get("connection")
        if conn is not None:
            assert conn["timeout_s"] == es.Connection().timeout_s
            assert conn["engine_defaults"] is es.Connection().engine_defaults


def test_limits_agree_on_iodepth(engine_ready, tmp_path):
    from fathom.suite.workload import Workload

    top = Workload.model_fields["iodepth"].metadata
    high = next(m.le for m in top if hasattr(m, "le"))
    ok = es.EngineSpec(target=Null(), load=es.Load(iodepth=high, duration_s=1.0)).to_json()
    assert check(engine_ready, ok, tmp_path).returncode == 0
    bad = es.EngineSpec(target=Null(), load=es.Load(iodepth=0, duration_s=1.0)).to_json()
    p = check(engine_ready, bad, tmp_path)
    assert p.returncode == 2 and "iodepth" in p.stdout


def test_every_interface_builds_a_spec_the_engine_takes(engine_ready, tmp_path):
    params = {"rw": "randread", "bs": 4096, "rwmixread": 50, "numjobs": 1, "size": None, "object_size": None,
              "iodepth": 4, "runtime": 1.0, "ramp_time": 0.0}
    for name in interfaces.names():
        iface = interfaces.get(name)
        rw = "randread" if "randread" in iface.rw_modes else iface.rw_modes[0]
        path = {"path": str(tmp_path)} if iface.needs_path else {}
        if name == "nfs":  # a server of one's own (fathom's ganesha needs a running local cluster)
            path = {"server": "127.0.0.1:2049", "export": "/export"}
        doc = point_spec({**params, **path, "interface": name, "rw": rw}, ctx(tmp_path)).to_json()
        assert doc["target"]["kind"] == name
        assert check(engine_ready, doc, tmp_path).returncode == 0, name
