"""fathom-engine's s3 target against a real RGW on a local cluster (one cluster for the module, never a mock).

Every run's stdout and stderr are searched for the secret key: it must never appear.
A second, independent SigV4 signer (stdlib only, below) plays the other client:
it overwrites or deletes objects behind the engine's back.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from fathom.cluster.local import LocalCluster

KIB = 1024


class Keys(dict):
    """The cluster's S3 keys; printed (in a failing test's traceback) without the secret."""

    def __repr__(self) -> str:
        return repr({k: ("***" if k == "secret_key" else v) for k, v in self.items()})


@pytest.fixture(scope="module")
def rgw_cluster(tmp_path_factory: pytest.TempPathFactory):
    """A one-OSD local cluster with RGW, for the module."""
    root = tmp_path_factory.mktemp("ceph-s3") / "cluster"
    c = LocalCluster(root, progress=lambda m: print(m, file=sys.stderr))
    c.up(osds=1, osd_size=10 * 1024**3, rgw=True)
    try:
        yield c
    finally:
        c.down()


@pytest.fixture(scope="module")
def rgw(rgw_cluster: LocalCluster) -> "Keys":
    """The cluster's S3 keys (endpoint, access_key, secret_key, region) and their file."""
    keys = rgw_cluster.s3()
    assert keys, "the local cluster wrote no s3.json"
    return Keys({**keys, "file": str(rgw_cluster.root / "s3.json")})


def run(engine: Path, tmp_path: Path, secret: str, target: dict[str, Any], timeout: float = 120,
        **top: Any) -> tuple[int, list[dict], str]:
    """Run the engine on a spec; returns (exit code, records, stdout+stderr). Asserts the secret is nowhere in it."""
    spec = {"protocol": 2, "target": {"kind": "s3", **target}, **top}
    f = tmp_path / f"spec-{time.monotonic_ns()}.json"
    f.write_text(json.dumps(spec))
    p = subprocess.run([str(engine), str(f)], capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    out = p.stdout + p.stderr
    assert secret.encode() not in out, "the secret key reached the engine's output"
    text = out.decode()
    recs = [json.loads(line) for line in p.stdout.decode().splitlines() if line.startswith("{")]
    return p.returncode, recs, text


def summary(recs: list[dict]) -> dict:
    return next(r for r in recs if r["type"] == "summary")


def error(recs: list[dict]) -> dict:
    return next(r for r in recs if r["type"] == "error")


def sigv4_request(keys: dict, method: str, path: str, body: bytes = b"", query: str = "") -> tuple[int, bytes]:
    """One request signed by this test's own SigV4 (hashlib/hmac), independent of the engine's signer."""
    ep = urlparse(keys["endpoint"])
    amz = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    date, region = amz[:8], keys.get("region") or "us-east-1"
    payload = hashlib.sha256(body).hexdigest()
    headers = {"host": ep.netloc, "x-amz-content-sha256": payload, "x-amz-date": amz}
    names = sorted(headers)
    canonical = "\n".join([method, path, query, "".join(f"{k}:{headers[k]}\n" for k in names), ";".join(names),
                           payload])
    scope = f"{date}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    k = ("AWS4" + keys["secret_key"]).encode()
    for part in (date, region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={keys['access_key']}/{scope}, "
                                f"SignedHeaders={';'.join(names)}, Signature={sig}")
    conn = http.client.HTTPConnection(ep.hostname, ep.port, timeout=30)
    try:
        conn.request(method, path + (f"?{query}" if query else ""), body=body, headers=headers)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def base(rgw: dict, bucket: str, **kw: Any) -> dict:
    return {"keys_file": rgw["file"], "buckets": [bucket], **kw}


def test_put_get_head_list_delete_round_trip_with_verify(rgw, engine_ready, tmp_path):
    secret, size = rgw["secret_key"], 64 * KIB
    buckets = ["rt-0", "rt-1"]
    put = {**base(rgw, "x"), "buckets": buckets, "create_buckets": True, "op": "put", "prefix": "rt",
           "object_size": size, "objects": 8, "jobs": 2}
    code, recs, text = run(engine_ready, tmp_path, secret, put, load={"iodepth": 4}, verify=True)
    assert code == 0, text
    s = summary(recs)
    w = s["ops"]["write"]
    assert (w["ops"], w["bytes"], w["errors"], s["stop"]) == (16, 16 * size, 0, "done"), text
    assert w["phases"]["hdr"]["count"] == 16 and w["phases"]["server"]["count"] == 16
    assert 0 < w["phases"]["server"]["lat_ns"]["p50"] <= w["lat_ns"]["max"]
    assert s["objects"]["count"] == 8 and s["objects"]["buckets"] == buckets
    assert s["s3"]["payload"] == "UNSIGNED-PAYLOAD" and s["s3"]["connections"] == 8
    assert s["s3"]["tls"] is None and sorted(s["s3"]["buckets_created"]) == buckets
    start = next(r for r in recs if r["type"] == "start")
    assert start["slots"] == 8 and start["target"] == "s3"
    # Each job's objects are in its own bucket.
    for j, b in enumerate(buckets):
        status, body = sigv4_request(rgw, "GET", f"/{b}", query="list-type=2&prefix=rt%2F")
        assert status == 200, body
        assert body.count(b"<Key>") == 8 and f"<Key>rt/{j}/7</Key>".encode() in body, body

    code, recs, text = run(engine_ready, tmp_path, secret, {**base(rgw, "rt-0"), "op": "get", "prefix": "rt"},
                           load={"iodepth": 4}, verify=True)
    assert code == 0, text
    s = summary(recs)
    r = s["ops"]["read"]
    assert (r["ops"], r["bytes"], r["errors"]) == (16, 16 * size, 0), text
    assert s["verify"]["mismatches"] == 0 and s["verify"]["checked"] == 16 * size // 512
    assert r["phases"]["ttfb"]["count"] == 16 and r["phases"]["hdr"]["count"] == 16
    assert r["phases"]["hdr"]["lat_ns"]["p50"] <= r["phases"]["ttfb"]["lat_ns"]["p50"] <= r["lat_ns"]["max"]
    intervals = [x for x in recs if x["type"] == "interval"]
    assert sum(i["ops"]["read"]["phases"]["ttfb"]["count"] for i in intervals) == 16

    code, recs, text = run(engine_ready, tmp_path, secret, {**base(rgw, "rt-0"), "op": "head", "prefix": "rt",
                                                            "pattern": "rand"}, load={"ops": 20, "iodepth": 2})
    assert code == 0, text
    st = summary(recs)["ops"]["stat"]
    assert (st["ops"], st["errors"]) == (20, 0)

    code, recs, text = run(engine_ready, tmp_path, secret, {**base(rgw, "rt-1"), "op": "list", "prefix": "rt",
                                                            "max_keys": 5}, load={"ops": 3, "iodepth": 1})
    assert code == 0, text
    li = summary(recs)["ops"]["list"]
    assert li["ops"] == 3 and li["bytes"] > 3 * 5 * len("<Key>rt/1/0</Key>")

    code, recs, text = run(engine_ready, tmp_path, secret, {**base(rgw, "rt-0"), "op": "delete", "prefix": "rt"},
                           load={"iodepth": 4})
    assert code == 0, text
    s = summary(recs)
    assert s["ops"]["remove"]["ops"] == 16 and s["objects"]["removed"] == 16
    # The buckets the put created went with the set, once empty.
    assert sorted(s["objects"]["buckets_removed"]) == buckets and s["objects"]["buckets_kept"] == [], s["objects"]
    for b in buckets:
        status, body = sigv4_request(rgw, "GET", f"/{b}", query="list-type=2")
        assert status == 404 and b"NoSuchBucket" in body, body
    # In a bucket it did not create, the delete takes the set and its metadata only: nothing to read now.
    assert sigv4_request(rgw, "PUT", "/kept")[0] == 200
    put = {**base(rgw, "kept"), "create_buckets": True, "op": "put", "prefix": "k", "object_size": 4096, "objects": 2}
    assert run(engine_ready, tmp_path, secret, put)[0] == 0
    code, recs, text = run(engine_ready, tmp_path, secret, {**base(rgw, "kept"), "op": "delete", "prefix": "k"})
    assert code == 0 and summary(recs)["objects"]["buckets_removed"] == [], text
    code, recs, text = run(engine_ready, tmp_path, secret, {**base(rgw, "kept"), "op": "get", "prefix": "k"})
    assert code == 3 and error(recs)["kind"] == "ENOENT" and "nothing to read" in error(recs)["message"], text
    assert sigv4_request(rgw, "DELETE", "/kept")[0] == 204


def test_ranges_fixed_and_random_are_verified(rgw, engine_ready, tmp_path):
    secret, size = rgw["secret_key"], 256 * KIB
    put = {**base(rgw, "ranges"), "create_buckets": True, "op": "put", "prefix": "rg", "object_size": size,
           "objects": 4}
    code, recs, text = run(engine_ready, tmp_path, secret, put, load={"iodepth": 4}, verify=True)
    assert code == 0, text
    for rng in ({"size": 4096, "offset": 8192}, {"size": 16 * KIB, "offset": None}):
        spec = {**base(rgw, "ranges"), "op": "get", "prefix": "rg", "pattern": "rand", "range": rng}
        code, recs, text = run(engine_ready, tmp_path, secret, spec, load={"ops": 40, "iodepth": 4}, verify=True)
        assert code == 0, text
        s = summary(recs)
        r = s["ops"]["read"]
        assert (r["ops"], r["bytes"], r["errors"]) == (40, 40 * rng["size"], 0), text
        assert s["verify"]["mismatches"] == 0 and s["verify"]["checked"] == 40 * rng["size"] // 512
    # A range past the objects is refused before the run.
    spec = {**base(rgw, "ranges"), "op": "get", "prefix": "rg", "range": {"size": 4096, "offset": size}}
    code, recs, text = run(engine_ready, tmp_path, secret, spec, load={"ops": 1})
    assert code == 2 and "reaches past" in error(recs)["message"], text


def test_verify_catches_an_object_overwritten_by_another_client(rgw, engine_ready, tmp_path):
    secret = rgw["secret_key"]
    put = {**base(rgw, "corrupt"), "create_buckets": True, "op": "put", "prefix": "cv", "object_size": 8 * KIB,
           "objects": 4}
    code, recs, text = run(engine_ready, tmp_path, secret, put, load={"iodepth": 2}, verify=True)
    assert code == 0, text
    status, body = sigv4_request(rgw, "PUT", "/corrupt/cv/0/2", body=b"\x01" * (8 * KIB))
    assert status == 200, body
    code, recs, text = run(engine_ready, tmp_path, secret, {**base(rgw, "corrupt"), "op": "get", "prefix": "cv"},
                           load={"iodepth": 2}, verify=True)
    assert code == 5, text
    v = summary(recs)["verify"]
    assert v["mismatches"] == 1 and v["first_mismatch"]["object"] == "corrupt/cv/0/2", v
    assert "no verify header" in v["first_mismatch"]["reason"]
    assert error(recs)["kind"] == "verify"


def test_errors_are_keyed_by_status_and_s3_code_without_retries(rgw, engine_ready, tmp_path):
    secret = rgw["secret_key"]
    put = {**base(rgw, "gone"), "create_buckets": True, "op": "put", "prefix": "g", "object_size": 4 * KIB,
           "objects": 4}
    code, recs, text = run(engine_ready, tmp_path, secret, put, load={"iodepth": 2})
    assert code == 0, text
    status, _ = sigv4_request(rgw, "DELETE", "/gone/g/0/1")
    assert status == 204
    spec = {**base(rgw, "gone"), "op": "get", "prefix": "g"}
    code, recs, text = run(engine_ready, tmp_path, secret, spec, load={"iodepth": 1}, on_error="continue")
    assert code == 0, text
    s = summary(recs)
    assert (s["ops"]["read"]["ops"], s["ops"]["read"]["errors"]) == (3, 1), text
    assert [(e["op"], e["kind"], e["count"], e["first"]) for e in s["errors"]] == \
        [("read", "HTTP 404 NoSuchKey", 1, "read of gone/g/0/1")]
    # on_error=stop names it and exits 3.
    code, recs, text = run(engine_ready, tmp_path, secret, spec, load={"iodepth": 1})
    assert code == 3 and error(recs)["kind"] == "HTTP 404 NoSuchKey", text


def test_wrong_keys_and_missing_buckets_are_named(rgw, engine_ready, tmp_path):
    secret = rgw["secret_key"]
    wrong_secret = tmp_path / "wrong-secret.json"
    wrong_secret.write_text(json.dumps({**{k: rgw[k] for k in ("endpoint", "access_key", "region")},
                                        "secret_key": "not-the-secret-0123456789"}))
    wrong_access = tmp_path / "wrong-access.json"
    wrong_access.write_text(json.dumps({**{k: rgw[k] for k in ("endpoint", "secret_key", "region")},
                                        "access_key": "NOSUCHACCESSKEY00000"}))
    target = {"buckets": ["keys-test"], "op": "put", "create_buckets": True, "object_size": 4096, "objects": 1}
    for keys_file, kind in ((wrong_secret, "HTTP 403 SignatureDoesNotMatch"),
                            (wrong_access, "HTTP 403 InvalidAccessKeyId")):
        code, recs, text = run(engine_ready, tmp_path, secret, {**target, "keys_file": str(keys_file)})
        e = error(recs)
        assert code == 3 and e["kind"] == kind and str(keys_file) in e["message"], text
        assert not any(r["type"] == "summary" for r in recs)
    code, recs, text = run(engine_ready, tmp_path, secret, {**base(rgw, "no-such-bucket"), "op": "put",
                                                            "objects": 1, "object_size": 4096})
    e = error(recs)
    assert code == 3 and e["kind"] == "HTTP 404 NoSuchBucket" and "no-such-bucket" in e["message"], text
    assert "create_buckets" in e["message"]


def test_unreachable_endpoints_fail_in_bounded_time(rgw, engine_ready, tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target = {**base(rgw, "b-0"), "endpoint": f"http://127.0.0.1:{port}", "op": "put", "objects": 1,
              "connect_timeout_s": 2}
    t0 = time.monotonic()
    code, recs, text = run(engine_ready, tmp_path, rgw["secret_key"], target, load={"iodepth": 4})
    e = error(recs)
    assert code == 3 and e["kind"] == "ECONNREFUSED" and f"127.0.0.1:{port}" in e["message"], text
    assert time.monotonic() - t0 < 30
    # https to a plain-HTTP server: a TLS failure, named as one, with the option to look at.
    target = {**target, "endpoint": rgw["endpoint"].replace("http://", "https://")}
    code, recs, text = run(engine_ready, tmp_path, rgw["secret_key"], target)
    e = error(recs)
    assert code == 3 and e["kind"].startswith("TLS ") and "target.ca_file" in e["message"], text


def test_signed_payload_runs_and_is_recorded(rgw, engine_ready, tmp_path):
    secret = rgw["secret_key"]
    put = {**base(rgw, "signed"), "create_buckets": True, "op": "put", "prefix": "sp", "object_size": 300 * KIB,
           "objects": 3, "payload": "sha256"}
    code, recs, text = run(engine_ready, tmp_path, secret, put, load={"iodepth": 2}, verify=True)
    assert code == 0, text
    s = summary(recs)
    assert s["s3"]["payload"] == "sha256" and s["ops"]["write"]["ops"] == 3 and not s["errors"], text
    code, recs, text = run(engine_ready, tmp_path, secret, {**base(rgw, "signed"), "op": "get", "prefix": "sp",
                                                            "payload": "sha256"}, verify=True)
    assert code == 0 and summary(recs)["verify"]["mismatches"] == 0, text


def test_tls_endpoint_with_the_clusters_ca(rgw, engine_ready, tmp_path):
    secret = rgw["secret_key"]
    assert rgw["tls_endpoint"].startswith("https://127.0.0.1:") and Path(rgw["ca_file"]).is_file()
    tls = {"endpoint": rgw["tls_endpoint"], "ca_file": rgw["ca_file"]}
    put = {**base(rgw, "tls"), **tls, "create_buckets": True, "op": "put", "prefix": "t", "object_size": 512 * KIB,
           "objects": 4}
    code, recs, text = run(engine_ready, tmp_path, secret, put, load={"iodepth": 2}, verify=True)
    assert code == 0, text
    s = summary(recs)
    assert s["ops"]["write"]["ops"] == 4 and not s["errors"], text
    # AES-128-GCM is offered first, as Go's clients do; the server took it.
    assert s["s3"]["tls"] == {"protocol": "TLSv1_3", "cipher": "TLS13_AES_128_GCM_SHA256"}, s["s3"]
    code, recs, text = run(engine_ready, tmp_path, secret, {**base(rgw, "tls"), **tls, "op": "get", "prefix": "t"},
                           load={"iodepth": 2}, verify=True)
    s = summary(recs)
    assert code == 0 and s["ops"]["read"]["bytes"] == 4 * 512 * KIB and s["verify"]["mismatches"] == 0, text
    # Without the cluster's CA the certificate is refused, named as a TLS failure pointing at target.ca_file.
    code, recs, text = run(engine_ready, tmp_path, secret, {**put, "ca_file": None})
    e = error(recs)
    assert code == 3 and e["kind"] == "TLS certificate UnknownIssuer" and "target.ca_file" in e["message"], text


def test_time_bounded_closed_and_open_loop_keep_memory_flat(rgw, engine_ready, tmp_path):
    secret, size, depth = rgw["secret_key"], 1024 * KIB, 4
    put = {**base(rgw, "timed"), "create_buckets": True, "op": "put", "prefix": "tb", "object_size": size}
    code, recs, text = run(engine_ready, tmp_path, secret, put, load={"iodepth": depth, "duration_s": 3})
    assert code == 0, text
    s = summary(recs)
    n = s["ops"]["write"]["ops"]
    assert n > 0 and s["stop"] == "duration" and s["objects"]["count"] >= n - depth, text
    # Body buffers are the slots' own, reused: RSS stays under slots x object size + 64 MiB.
    assert s["max_rss_kib"] * KIB <= depth * size + (64 << 20), s["max_rss_kib"]
    assert s["s3"]["reconnects"] == 0
    get = {**base(rgw, "timed"), "op": "get", "prefix": "tb", "pattern": "rand"}
    code, recs, text = run(engine_ready, tmp_path, secret, get, load={"iodepth": 2, "duration_s": 3, "rate": 20})
    assert code == 0, text
    s = summary(recs)
    assert s["schedule"]["rate"] == 20 and 20 <= s["ops"]["read"]["ops"] <= 80 and not s["errors"], text
    assert s["ops"]["read"]["phases"]["ttfb"]["count"] == s["ops"]["read"]["ops"]


def test_multipart_puts_in_parts_with_parts_in_flight_and_reads_back_verified(rgw, engine_ready, tmp_path):
    secret, size = rgw["secret_key"], 12 * 1024 * KIB
    mp = {"threshold": 8 * 1024 * KIB, "part_size": 5 * 1024 * KIB, "parts_in_flight": 2}
    put = {**base(rgw, "multi"), "create_buckets": True, "op": "put", "prefix": "mp", "object_size": size,
           "objects": 2, "multipart": mp}
    code, recs, text = run(engine_ready, tmp_path, secret, put, load={"iodepth": 2}, verify=True)
    assert code == 0, text
    s = summary(recs)
    assert s["ops"]["write"]["ops"] == 2 and s["ops"]["write"]["bytes"] == 2 * size and not s["errors"], text
    m = s["s3"]["multipart"]
    assert (m["uploads"], m["parts"], m["aborted"], m["parts_in_flight"]) == (2, 6, 0, 2), m
    code, recs, text = run(engine_ready, tmp_path, secret, {**base(rgw, "multi"), "op": "get", "prefix": "mp"},
                           verify=True)
    s = summary(recs)
    assert code == 0 and s["ops"]["read"]["bytes"] == 2 * size and s["verify"]["mismatches"] == 0, text
    # Completed uploads leave no parts behind; the object is one object of the whole size.
    status, body = sigv4_request(rgw, "GET", "/multi", query="uploads=")
    assert status == 200 and b"<Upload>" not in body, body
    status, body = sigv4_request(rgw, "GET", "/multi", query="list-type=2&prefix=mp%2F")
    assert status == 200 and body.count(f"<Size>{size}</Size>".encode()) == 2, body


def test_sizes_from_weighted_buckets_are_known_again_by_the_reads(rgw, engine_ready, tmp_path):
    secret = rgw["secret_key"]
    put = {**base(rgw, "sizes"), "create_buckets": True, "op": "put", "prefix": "sz", "objects": 24,
           "sizes": {"buckets": [[4 * KIB, 1], [64 * KIB, 1]]}}
    code, recs, text = run(engine_ready, tmp_path, secret, put, load={"iodepth": 4}, verify=True)
    assert code == 0, text
    w = summary(recs)["ops"]["write"]
    assert w["ops"] == 24 and 24 * 4 * KIB < w["bytes"] < 24 * 64 * KIB, w
    code, recs, text = run(engine_ready, tmp_path, secret, {**base(rgw, "sizes"), "op": "get", "prefix": "sz"},
                           load={"iodepth": 4}, verify=True)
    s = summary(recs)
    assert code == 0 and s["ops"]["read"]["bytes"] == w["bytes"] and s["verify"]["mismatches"] == 0, text
    status, body = sigv4_request(rgw, "GET", "/sizes", query="list-type=2&prefix=sz%2F")
    sizes = {int(x.split("</Size>")[0]) for x in body.decode().split("<Size>")[1:]}
    assert sizes == {4 * KIB, 64 * KIB}, sizes


def _splitmix_bytes(seed: int, words: int) -> bytes:
    """The engine's incompressible fill (rng.rs, splitmix64), little-endian words."""
    m, x, out = (1 << 64) - 1, seed ^ 0x9E3779B97F4A7C15, b""
    for _ in range(words):
        x = (x + 0x9E3779B97F4A7C15) & m
        z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        out += (z ^ (z >> 31)).to_bytes(8, "little")
    return out


def test_puts_without_verify_send_the_shared_body_intact_by_sendfile(rgw, engine_ready, tmp_path):
    secret = rgw["secret_key"]
    put = {**base(rgw, "shared"), "create_buckets": True, "op": "put", "prefix": "sb", "objects": 8,
           "sizes": {"buckets": [[4 * KIB, 1], [1024 * KIB, 1]]}}
    code, recs, text = run(engine_ready, tmp_path, secret, put, load={"iodepth": 4})
    assert code == 0, text
    assert summary(recs)["s3"]["put_body"] == "sendfile", summary(recs)["s3"]
    status, listing = sigv4_request(rgw, "GET", "/shared", query="list-type=2&prefix=sb%2F")
    objs = {}  # size -> one key of that size
    for c in listing.decode().split("<Contents>")[1:]:
        objs[int(c.split("<Size>")[1].split("</Size>")[0])] = c.split("<Key>")[1].split("</Key>")[0]
    assert status == 200 and set(objs) == {4 * KIB, 1024 * KIB}, objs
    small = sigv4_request(rgw, "GET", f"/shared/{objs[4 * KIB]}")[1]
    large = sigv4_request(rgw, "GET", f"/shared/{objs[1024 * KIB]}")[1]
    # every object is the start of the one body: the engine's fill, byte for byte, at every offset sent
    expect = _splitmix_bytes(0x5EED, 1024 * KIB // 8)
    assert len(large) == 1024 * KIB and large == expect and small == expect[:4 * KIB]


def test_retries_are_explicit_and_counted(rgw, engine_ready, tmp_path):
    secret = rgw["secret_key"]
    put = {**base(rgw, "retry"), "create_buckets": True, "op": "put", "prefix": "rt", "object_size": 4 * KIB,
           "objects": 3}
    code, recs, text = run(engine_ready, tmp_path, secret, put, load={"iodepth": 1})
    assert code == 0, text
    assert sigv4_request(rgw, "DELETE", "/retry/rt/0/1")[0] == 204
    spec = {**base(rgw, "retry"), "op": "get", "prefix": "rt",
            "retry": {"max": 2, "on": ["HTTP 404", "HTTP 503"], "backoff_ms": 20}}
    code, recs, text = run(engine_ready, tmp_path, secret, spec, load={"iodepth": 1}, on_error="continue")
    assert code == 0, text
    s = summary(recs)
    # The missing object: sent three times, one error; the other two never retried.
    assert s["s3"]["retries"] == {"HTTP 404 NoSuchKey": 2} and s["s3"]["retry"]["max"] == 2, s["s3"]
    assert (s["ops"]["read"]["ops"], s["ops"]["read"]["errors"]) == (2, 1)
    from fathom.results import hdr

    # ... and its latency covers every attempt: two backoffs of 20 and 40 ms at least.
    assert s["errors"][0]["kind"] == "HTTP 404 NoSuchKey", s["errors"]
    assert hdr.min_ns(hdr.merge([s["errors"][0]["hist"]])) >= 60e6


def test_health_gate_waits_for_rgw_garbage_collection(rgw, rgw_cluster, engine_ready, tmp_path):
    from fathom.cluster import health

    secret = rgw["secret_key"]
    # 8 MiB objects have a tail beyond RGW's 4 MiB head: deleting them leaves it to GC (for 2 h by default).
    put = {**base(rgw, "gc-test"), "create_buckets": True, "op": "put", "prefix": "gc", "object_size": 8 * 1024 * KIB,
           "objects": 2}
    assert run(engine_ready, tmp_path, secret, put, load={"iodepth": 2})[0] == 0
    ceph = rgw_cluster.ceph()
    assert health.gate(ceph, timeout=60, rgw=True).ok
    code, recs, text = run(engine_ready, tmp_path, secret, {**base(rgw, "gc-test"), "op": "delete", "prefix": "gc"})
    assert code == 0 and summary(recs)["objects"]["buckets_removed"] == ["gc-test"], text
    v = health.gate(ceph, timeout=3, rgw=True)
    assert not v.ok and "RGW garbage collection" in v.reason, v
    assert health.gate(ceph, timeout=30).ok  # the Ceph part alone is clean
    ceph.radosgw_admin("gc", "process", "--include-all", fmt_json=False, timeout=120)
    v = health.gate(ceph, timeout=60, rgw=True)
    assert v.ok and "GC empty" in v.reason, v


# ---- fathom bench s3 and fathom cleanup --bucket (the CLI, on the same RGW) --------------------------------

def bench(rgw: dict, tmp_path: Path, *args: str, timeout: float = 300) -> "subprocess.CompletedProcess[str]":
    """`fathom bench s3 ...` (or any fathom command) with the cluster's keys file as $S3_KEYS_FILE."""
    from conftest import run_fathom

    p = run_fathom(*args, env={"S3_KEYS_FILE": rgw["file"], "CEPH_CONF": "", "AWS_CA_BUNDLE": ""},
                   timeout=timeout, cwd=tmp_path)
    assert rgw["secret_key"] not in p.stdout + p.stderr, "the secret key reached fathom's output"
    assert "Traceback" not in p.stderr, p.stderr
    return p


def bucket_keys(rgw: dict, bucket: str) -> list[str] | None:
    """The keys in bucket (None: no such bucket), listed by this test's own signer."""
    status, body = sigv4_request(rgw, "GET", f"/{bucket}", query="list-type=2")
    if status == 404:
        return None
    assert status == 200, body
    return [k.split("</Key>")[0] for k in body.decode().split("<Key>")[1:]]


def test_bench_s3_put_json_is_stored_without_the_secret_and_cleanup_removes_it(rgw, engine_ready, tmp_path):
    db = tmp_path / "r.db"
    p = bench(rgw, tmp_path, "bench", "s3", "put", "--duration", "3s", "--concurrent", "4", "--obj-size", "64KiB",
              "--noclear", "--run-name", "p1", "-f", "json", "--db", str(db))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    put = doc["requests"]["PUT"]
    assert doc["op"] == "put" and doc["object_size"] == 64 * KIB and put["errors"] == 0, doc
    assert put["ops"] == doc["total_ops_made"] > 0 and put["bytes"] == put["ops"] * 64 * KIB
    lat = put["latency"]
    # percentiles from the HDR histogram (3 significant digits), the max exact
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p99.9"] <= lat["max"] * 1.001, lat
    assert put["server"]["p50"] > 0 and len(doc["datas"]) >= 3
    assert doc["fathom"]["s3"]["buckets_created"] == ["fathom-bench"] and doc["fathom"]["run_id"] == 1
    # RGW's own counters over the run agree with the client's (the local RGW's admin socket)
    rc = doc["fathom"]["rgw_counters"]
    # (req: every request; failed_req: at most the client's errors and retries, none here)
    assert rc["ok"] and {(x["counter"], x["client"]) for x in rc["rows"]} == {
        ("put", put["ops"]), ("put_b", put["bytes"]), ("req", put["ops"]), ("failed_req", 0)}, rc
    keys = bucket_keys(rgw, "fathom-bench")
    assert keys is not None and "fathom_bench.p1.meta" in keys
    status, body = sigv4_request(rgw, "GET", "/fathom-bench", query="list-type=2&prefix=fathom_bench.p1%2F0%2F")
    assert status == 200 and body.count(b"<Key>") == min(put["ops"], 1000), body[:300]
    # A second run's objects in the same bucket: cleanup of p1 leaves them, and so the bucket.
    p = bench(rgw, tmp_path, "bench", "s3", "put", "--duration", "1s", "--concurrent", "2", "--obj-size", "4KiB",
              "--noclear", "--run-name", "p2", "--db", str(db))
    assert p.returncode == 0 and "Bandwidth (MB/sec):" in p.stdout and "PUT: " in p.stdout, p.stdout + p.stderr
    assert "p99.9: " in p.stdout and "fathom cleanup --bucket fathom-bench --run-name p2" in p.stdout
    p = bench(rgw, tmp_path, "cleanup", "--bucket", "fathom-bench", "--run-name", "p1")
    assert p.returncode == 0 and "bucket fathom-bench kept (not empty)" in p.stdout, p.stdout + p.stderr
    keys = bucket_keys(rgw, "fathom-bench")
    assert keys and all(k.startswith("fathom_bench.p2") for k in keys), keys
    # p2's cleanup empties the bucket, but p2 found it there: the bucket stays (fathom removes what it created).
    p = bench(rgw, tmp_path, "cleanup", "--bucket", "fathom-bench", "--run-name", "p2")
    assert p.returncode == 0 and bucket_keys(rgw, "fathom-bench") == [], p.stdout + p.stderr
    p = bench(rgw, tmp_path, "cleanup", "--bucket", "fathom-bench", "--run-name", "p2")
    assert p.returncode == 0 and "nothing to clean up" in p.stderr, p.stdout + p.stderr
    assert sigv4_request(rgw, "DELETE", "/fathom-bench")[0] == 204
    # Every byte the store holds, searched for the secret.
    assert rgw["secret_key"].encode() not in db.read_bytes()
    p = bench(rgw, tmp_path, "ls", "--db", str(db))
    assert "bench-s3-put-p1" in p.stdout and "bench-s3-put-p2" in p.stdout, p.stdout + p.stderr


def test_bench_s3_get_and_mixed_prepare_their_objects_and_remove_everything(rgw, engine_ready, tmp_path):
    db = str(tmp_path / "r.db")
    p = bench(rgw, tmp_path, "bench", "s3", "get", "--duration", "2s", "--concurrent", "4", "--obj-size", "32KiB",
              "--objects", "8", "--db", db)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Preparing 8 objects" in p.stdout and "GET: " in p.stdout and "TTFB(s)" in p.stdout, p.stdout
    assert "PUT: " not in p.stdout and "removed bucket fathom-bench" in p.stdout, p.stdout
    assert bucket_keys(rgw, "fathom-bench") is None
    p = bench(rgw, tmp_path, "bench", "s3", "mixed", "--duration", "3s", "--concurrent", "4", "--obj-size", "16KiB",
              "--objects", "16", "--put-distrib", "30", "--delete-distrib", "20", "-f", "json", "--db", db)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    req = doc["requests"]
    assert set(req) == {"GET", "HEAD", "PUT", "DELETE"} and doc["mix"]["delete"] == 20, doc
    # Reads only see the prepared set, deletes only objects this run put: nothing is ever missing.
    assert all(r["errors"] == 0 for r in req.values()) and not doc["errors"], doc["errors"]
    assert 0 < req["DELETE"]["ops"] <= req["PUT"]["ops"] and req["GET"]["ttfb"]["p50"] > 0, req
    assert doc["fathom"]["prefill"]["complete"] and doc["fathom"]["prefill"]["ops"] == 16
    assert doc["fathom"]["cleanup"]["buckets_removed"] == ["fathom-bench"]
    assert bucket_keys(rgw, "fathom-bench") is None


def test_bench_s3_errors_name_the_cause_and_the_fix(rgw, engine_ready, tmp_path):
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({**{k: rgw[k] for k in ("endpoint", "access_key", "region")},
                                 "secret_key": "not-the-secret-0123456789"}))
    p = bench(rgw, tmp_path, "bench", "s3", "put", "--duration", "1s", "--keys-file", str(wrong))
    assert p.returncode == 3 and "HTTP 403 SignatureDoesNotMatch" in p.stderr and str(wrong) in p.stderr, p.stderr
    p = bench(rgw, tmp_path, "bench", "s3", "put", "--duration", "1s", "--bucket", "no-such-bucket")
    assert p.returncode == 3 and "bucket no-such-bucket does not exist" in p.stderr, p.stderr
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    p = bench(rgw, tmp_path, "bench", "s3", "put", "--duration", "1s", "--endpoint", f"127.0.0.1:{port}",
              "--connect-timeout", "2")
    assert p.returncode == 3 and f"cannot reach the S3 endpoint http://127.0.0.1:{port}" in p.stderr, p.stderr
    assert "ECONNREFUSED" in p.stderr and time.monotonic() - t0 < 30
    # TLS: the cluster's CA by default for its TLS endpoint; another CA is refused, pointing at --ca.
    p = bench(rgw, tmp_path, "bench", "s3", "put", "--tls", "--duration", "1s", "--concurrent", "2",
              "--obj-size", "8KiB", "-f", "json", "--db", str(tmp_path / "r.db"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["endpoint"] == rgw["tls_endpoint"] and doc["fathom"]["s3"]["tls"]["protocol"] == "TLSv1_3"
    assert doc["requests"]["PUT"]["ops"] > 0 and bucket_keys(rgw, "fathom-bench") is None
    p = bench(rgw, tmp_path, "bench", "s3", "put", "--tls", "--duration", "1s",
              "--ca", "/etc/ssl/certs/ca-certificates.crt")
    assert p.returncode == 3 and "TLS with " + rgw["tls_endpoint"] in p.stderr and "--ca" in p.stderr, p.stderr
    assert "UnknownIssuer" in p.stderr
    # No run was stored for a bench that could not start.
    assert not (tmp_path / "fathom-results.db").exists() or "bench-s3" not in \
        bench(rgw, tmp_path, "ls").stdout


def test_bench_s3_on_several_engines_merges_them_and_removes_every_engines_objects(rgw, engine_ready, tmp_path):
    # two engines on this host through the client-host path (no SSH needed for `local`): the same
    # start, merge, per-engine prefixes and cleanup as on remote hosts (tests/test_hosts.py)
    cf = tmp_path / "clients.yaml"
    cf.write_text(json.dumps({"hosts": [{"host": "local", "instances": 2}]}))
    p = bench(rgw, tmp_path, "bench", "s3", "put", "--duration", "2s", "--concurrent", "2", "--obj-size", "16KiB",
              "--run-name", "mc", "--noclear", "-f", "json", "--clients-file", str(cf), "--db", str(tmp_path / "r.db"))
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    engines = doc["fathom"]["clients"]["engines"]
    assert [e["prefix"] for e in engines] == ["fathom_bench.mc.local.0", "fathom_bench.mc.local.1"]
    put = doc["requests"]["PUT"]
    assert put["ops"] == sum(e["ops"] for e in engines) == doc["fathom"]["clients"]["hosts"][0]["ops"] > 0
    keys = bucket_keys(rgw, "fathom-bench")
    assert {k.split("/")[0] for k in keys} >= {"fathom_bench.mc.local.0", "fathom_bench.mc.local.1"}
    assert f"--clients-file {cf}" in p.stderr, p.stderr  # the cleanup command names the clients
    p = bench(rgw, tmp_path, "cleanup", "--bucket", "fathom-bench", "--run-name", "mc", "--clients-file", str(cf))
    assert p.returncode == 0 and "removed bucket fathom-bench" in p.stdout, p.stdout + p.stderr
    assert bucket_keys(rgw, "fathom-bench") is None


# ---- RGW overloaded (503 SlowDown) and a full cluster, through the user's commands ---------------------------

def rgw_option(rgw_cluster: LocalCluster, name: str, value: str | None = None) -> str:
    """Get (and with value, set) one of the running RGW's options through its admin socket: at once, and gone
    with the process (the module's other tests see the setting only while a test holds it)."""
    from fathom.cluster.localconf import RGW_NAME

    (asok,) = rgw_cluster.run_dir.glob(f"ceph-{RGW_NAME}.*.asok")
    if value is not None:
        subprocess.run(["ceph", "--admin-daemon", str(asok), "config", "set", name, value], check=True,
                       capture_output=True, timeout=30)
    p = subprocess.run(["ceph", "--admin-daemon", str(asok), "config", "get", name], check=True,
                       capture_output=True, timeout=30, text=True)
    return json.loads(p.stdout)[name]


def test_bench_s3_counts_rgw_503s_by_code_and_stops_on_them_by_policy(rgw, rgw_cluster, engine_ready, tmp_path):
    db = str(tmp_path / "r.db")
    old = rgw_option(rgw_cluster, "rgw_max_concurrent_requests")
    try:
        # RGW's throttler answers 503 SlowDown beyond this many requests in progress
        assert rgw_option(rgw_cluster, "rgw_max_concurrent_requests", "2") == "2"
        p = bench(rgw, tmp_path, "bench", "s3", "put", "--duration", "2s", "--concurrent", "16", "--obj-size",
                  "64KiB", "--run-name", "slow1", "--noclear", "-f", "json", "--db", db)
        assert p.returncode == 0, p.stderr  # --on-error continue (the default): counted, the run goes on
        doc = json.loads(p.stdout)
        put = doc["requests"]["PUT"]
        slow = [e for e in doc["errors"] if e["kind"] == "HTTP 503 SlowDown"]
        assert len(slow) == 1 and slow[0]["request"] == "PUT" and slow[0]["count"] > 0, doc["errors"]
        assert put["errors"] == sum(e["count"] for e in doc["errors"]) and put["ops"] > 0, put
        p = bench(rgw, tmp_path, "bench", "s3", "put", "--duration", "2s", "--concurrent", "16", "--obj-size",
                  "64KiB", "--run-name", "slow2", "--noclear", "--on-error", "stop", "--db", db)
        assert p.returncode == 3, p.stdout + p.stderr
        assert "RGW refused a request as overloaded (HTTP 503 SlowDown)" in p.stderr, p.stderr
        assert "rgw_max_concurrent_requests" in p.stderr and "Errors: PUT HTTP 503 SlowDown: " in p.stdout
    finally:
        rgw_option(rgw_cluster, "rgw_max_concurrent_requests", old)
    for name in ("slow2", "slow1"):  # slow1 made the bucket: its cleanup removes it, once empty
        p = bench(rgw, tmp_path, "cleanup", "--bucket", "fathom-bench", "--run-name", name)
        assert p.returncode == 0, p.stdout + p.stderr
    assert bucket_keys(rgw, "fathom-bench") is None



SLOW_SUITE = """\
name: s3-slow
cluster: {kind: attached}
workloads:
  - {name: first, interface: null, rw: randread, runtime: 1s}
  - {name: counted, interface: s3, rw: write, object_size: 64KiB, iodepth: 16, runtime: 2s, on_error: continue}
  - {name: stops, interface: s3, rw: write, object_size: 64KiB, iodepth: 16, runtime: 30s}
"""


def test_run_counts_rgw_503s_or_fails_the_point_on_them_by_policy(rgw, rgw_cluster, engine_ready, tmp_path):
    from conftest import run_fathom

    from fathom.results.store import Store

    suite = tmp_path / "slow.yaml"
    suite.write_text(SLOW_SUITE)
    db = tmp_path / "slow.db"
    old = rgw_option(rgw_cluster, "rgw_max_concurrent_requests")
    try:
        assert rgw_option(rgw_cluster, "rgw_max_concurrent_requests", "2") == "2"
        t0 = time.monotonic()
        p = run_fathom("run", str(suite), "--db", str(db), "--name", "slow", "--conf", str(rgw_cluster.conf_path),
                       "--keyring", str(rgw_cluster.keyring_path), timeout=300)
        took = time.monotonic() - t0
    finally:
        rgw_option(rgw_cluster, "rgw_max_concurrent_requests", old)
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stdout + p.stderr
    assert rgw["secret_key"] not in p.stdout + p.stderr
    with Store(db) as store:
        pts = {q["workload"]: q for q in store.points(store.run("slow").id)}
    assert pts["first"]["status"] == "done"
    # on_error continue: the point is done, every refused PUT counted under its status and code
    c = pts["counted"]
    assert c["status"] == "done", (c["status"], c.get("error"), p.stderr[-3000:])
    slow = [e for e in c["result"]["errors"] if e["kind"] == "HTTP 503 SlowDown"]
    assert slow and slow[0]["count"] > 0 and c["result"]["ops"]["write"]["ops"] > 0, c["result"]["errors"]
    # on_error stop (the default): the first 503 fails the point, well before its 30 s
    s = pts["stops"]
    assert s["status"] == "failed" and "HTTP 503 SlowDown" in s["error"], s
    assert "503 SlowDown" in p.stderr and took < 120, (took, p.stderr[-3000:])


FULL_SUITE = """\
name: s3-full
cluster: {kind: attached}
workloads:
  - {name: first, interface: null, rw: randread, runtime: 1s}
  - {name: fill, interface: s3, rw: write, object_size: 64KiB, iodepth: 4, runtime: 120s, stall_timeout: 6s,
     op_timeout: null}
  - {name: after, interface: s3, rw: write, object_size: 4KiB, runtime: 1s}
"""
DATA_POOL = "default.rgw.buckets.data"


def pool_full(ceph: Any) -> bool:
    return "POOL_FULL" in ((ceph.ceph("health", "detail") or {}).get("checks") or {})


def wait_for(what: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def test_full_rgw_pool_is_named_by_run_and_bench_in_bounded_time(rgw, rgw_cluster, engine_ready, tmp_path):
    from conftest import run_fathom

    from fathom.cluster.localconf import RGW_NAME
    from fathom.results.store import Store
    from fathom.servers.telemetry import asok_command

    ceph = rgw_cluster.ceph()
    (asok,) = rgw_cluster.run_dir.glob(f"ceph-{RGW_NAME}.*.asok")
    suite = tmp_path / "full.yaml"
    suite.write_text(FULL_SUITE)
    db = tmp_path / "full.db"
    buckets0 = set(ceph.radosgw_admin("bucket", "list", timeout=60))

    def active() -> int:  # requests RGW is working on
        return int(asok_command(asok, "perf dump")["rgw"]["qactive"])

    active0 = active()
    # one object in RGW's data pool, then a quota below it: the pool is full (POOL_FULL) and RGW's writes wait
    assert sigv4_request(rgw, "PUT", "/full-seed")[0] == 200
    assert sigv4_request(rgw, "PUT", "/full-seed/o", body=b"x" * (64 * KIB))[0] == 200
    ceph.ceph("osd", "pool", "set-quota", DATA_POOL, "max_bytes", "1", fmt_json=False)
    try:
        assert wait_for(lambda: pool_full(ceph), 60), "the quota did not make the pool full"
        t0 = time.monotonic()
        p = run_fathom("run", str(suite), "--db", str(db), "--name", "full", "--gate-timeout", "3s",
                       "--conf", str(rgw_cluster.conf_path), "--keyring", str(rgw_cluster.keyring_path),
                       timeout=300)
        assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
        assert rgw["secret_key"] not in p.stdout + p.stderr
        assert "POOL_FULL" in p.stderr and DATA_POOL in p.stderr, p.stderr[-3000:]
        assert "finished points kept" in p.stderr and "--resume" in p.stderr, p.stderr[-3000:]
        assert time.monotonic() - t0 < 100  # the stall timeout ends it, well before the fill's 120 s
        with Store(db) as store:
            pts = {q["workload"]: q for q in store.points(store.run("full").id)}
        assert pts["first"]["status"] == "done"  # finished points are kept
        assert pts["fill"]["status"] == "failed" and "the cluster is full" in pts["fill"]["error"], pts["fill"]
        assert "POOL_FULL" in pts["fill"]["error"] and "after" not in pts
        # the bench: the same full state named, with the fix, in bounded time
        t0 = time.monotonic()
        p = bench(rgw, tmp_path, "bench", "s3", "put", "--duration", "60s", "--concurrent", "2", "--obj-size",
                  "64KiB", "--stall-timeout", "5", "--db", str(db))
        assert p.returncode == 3 and time.monotonic() - t0 < 45, p.stdout + p.stderr
        assert "the bench stopped because the cluster is full (POOL_FULL: " in p.stderr, p.stderr
        assert f"pool '{DATA_POOL}' is full (running out of quota)" in p.stderr and "set-quota" in p.stderr
        assert "objects kept (the cluster is full" in p.stdout and "fathom cleanup --bucket fathom-bench" in p.stdout
    finally:
        ceph.ceph("osd", "pool", "set-quota", DATA_POOL, "max_bytes", "0", fmt_json=False)
        assert wait_for(lambda: not pool_full(ceph), 60)
        # the PUTs that waited at RGW complete now: let them land before their buckets go
        assert wait_for(lambda: active() <= active0, 60), (active(), active0)
        for b in set(ceph.radosgw_admin("bucket", "list", timeout=60)) - buckets0:
            ceph.radosgw_admin("bucket", "rm", "--bucket", b, "--purge-objects", "--bypass-gc", fmt_json=False,
                               timeout=120)


# ---- a run on an attached cluster leaves it as found: its objects and the buckets it made go --------------

ATTACHED_SUITE = """\
name: s3-attached
cluster: {kind: attached}
defaults: {interface: s3, object_size: 4KiB, runtime: 1s}
workloads:
  - {name: put, rw: write, numjobs: 2}
  - {name: get, rw: randread, numjobs: 2}
  - {name: found, rw: write, bucket: s3-found}
  - {name: found-get, rw: randread, bucket: s3-found}
  - {name: named, rw: write, bucket: s3-named}
"""


def attached_run(rgw_cluster: LocalCluster, tmp_path: Path, text: str) -> tuple[list[str], Path]:
    """`fathom run` of a suite on the module's cluster attached (--conf, --keyring; its s3.json beside the conf)."""
    suite, db = tmp_path / "s.yaml", tmp_path / "r.db"
    suite.write_text(text)
    return ["run", str(suite), "--db", str(db), "--conf", str(rgw_cluster.conf_path), "--keyring",
            str(rgw_cluster.keyring_path)], db


def s3_entries(db: Path) -> tuple[str, dict[str, dict]]:
    """The run's data tag and its journal's S3 bucket entries by bucket."""
    from fathom.results.store import Store

    with Store(db) as store:
        st = store.run("latest").state
    return st["data_tag"], {e["what"]: e for e in st["journal"]["entries"] if e["kind"] == "s3_bucket"}


def test_run_on_an_attached_cluster_removes_what_it_wrote_and_the_buckets_it_made(rgw, rgw_cluster, engine_ready,
                                                                                    tmp_path):
    from conftest import run_fathom

    from fathom.results.store import Store

    ceph = rgw_cluster.ceph()
    # the user's bucket, with an object of the user's: fathom writes into it (bucket: s3-found) and reads back
    assert sigv4_request(rgw, "PUT", "/s3-found")[0] == 200
    assert sigv4_request(rgw, "PUT", "/s3-found/theirs/o", body=b"x" * 100)[0] == 200
    try:
        before = set(ceph.radosgw_admin("bucket", "list", timeout=60))
        argv, db = attached_run(rgw_cluster, tmp_path, ATTACHED_SUITE)
        p = run_fathom(*argv, timeout=300)
        assert p.returncode == 0 and rgw["secret_key"] not in p.stdout + p.stderr, p.stdout + p.stderr[-3000:]
        with Store(db) as store:  # the reads found what the writes left
            assert {q["workload"]: q["status"] for q in store.points(store.run("latest").id)} == dict.fromkeys(
                ("put", "get", "found", "found-get", "named"), "done")
        tag, entries = s3_entries(db)
        # each written down before it was made or written into, made or found as it was then; all undone
        assert {b: e["data"]["made"] for b, e in entries.items()} == {f"{tag}-0": True, f"{tag}-1": True,
                                                                       "s3-found": False, "s3-named": True}
        assert all(e["undone"] and e["data"]["prefix"] == tag for e in entries.values()), entries
        assert set(ceph.radosgw_admin("bucket", "list", timeout=60)) == before
        assert bucket_keys(rgw, "s3-found") == ["theirs/o"]  # every object fathom did not write, and only those
        for b in (f"{tag}-0", f"{tag}-1", "s3-named"):
            assert f"removed S3 bucket {b} and the " in p.stderr, p.stderr[-3000:]
        assert f"under {tag} in S3 bucket s3-found; the bucket was there before the run and keeps every other " \
               "object" in p.stderr, p.stderr[-3000:]
    finally:
        sigv4_request(rgw, "DELETE", "/s3-found/theirs/o")
        sigv4_request(rgw, "DELETE", "/s3-found")


KILLED_SUITE = """\
name: s3-killed
cluster: {kind: attached}
defaults: {interface: s3, object_size: 4KiB}
workloads:
  - {name: put, rw: write, runtime: 1s}
  - {name: get, rw: randread, runtime: 120s}
"""


def test_a_killed_runs_bucket_stays_until_cluster_restore_removes_it(rgw, rgw_cluster, engine_ready, tmp_path):
    from conftest import kill_after_first_point, run_fathom

    ceph = rgw_cluster.ceph()
    before = set(ceph.radosgw_admin("bucket", "list", timeout=60))
    argv, db = attached_run(rgw_cluster, tmp_path, KILLED_SUITE)
    kill_after_first_point(argv, db)  # SIGKILL during the GET: nothing is cleaned up
    tag, entries = s3_entries(db)
    bucket = f"{tag}-0"
    assert set(ceph.radosgw_admin("bucket", "list", timeout=60)) - before == {bucket}
    assert f"{tag}.meta" in (bucket_keys(rgw, bucket) or [])
    assert list(entries) == [bucket] and entries[bucket]["data"]["made"] and not entries[bucket]["undone"]
    p = run_fathom("cluster", "restore", "--conf", str(rgw_cluster.conf_path), "--keyring",
                   str(rgw_cluster.keyring_path), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 S3 bucket(s)" in p.stdout and f"removed S3 bucket {bucket} and the " in p.stdout, p.stdout
    assert set(ceph.radosgw_admin("bucket", "list", timeout=60)) == before
    assert s3_entries(db)[1][bucket]["undone"]
    p = run_fathom("cluster", "restore", "--conf", str(rgw_cluster.conf_path), "--keyring",
                   str(rgw_cluster.keyring_path), "--db", str(db), timeout=300)
    assert p.returncode == 0 and "nothing to restore" in p.stdout, p.stdout + p.stderr


INTERRUPTED_SUITE = """\
name: s3-interrupted
cluster: {kind: attached}
defaults: {interface: s3, object_size: 4KiB}
workloads:
  - {name: put, rw: write, runtime: 1s}
  - {name: get, rw: randread, runtime: 3s}
"""


def test_ctrl_c_removes_what_the_run_wrote_and_resume_writes_it_again_for_its_gets(rgw, rgw_cluster, engine_ready,
                                                                                     tmp_path):
    import signal

    from conftest import kill_after_first_point, run_fathom

    from fathom.results.store import Store

    ceph = rgw_cluster.ceph()
    before = set(ceph.radosgw_admin("bucket", "list", timeout=60))
    argv, db = attached_run(rgw_cluster, tmp_path, INTERRUPTED_SUITE)
    out = kill_after_first_point(argv, db, sig=signal.SIGINT)  # Ctrl-C once the PUT is stored
    tag, entries = s3_entries(db)
    assert f"removed S3 bucket {tag}-0 and the " in out, out
    assert set(ceph.radosgw_admin("bucket", "list", timeout=60)) == before and entries[f"{tag}-0"]["undone"]
    # the GET reads what the PUT wrote: written again, unmeasured, before it; then removed again at the end
    with Store(db) as store:
        run_id = store.run("latest").id
    p = run_fathom("run", "--resume", str(run_id), *argv[2:], timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "writing it again, unmeasured, before get" in p.stderr and f"removed S3 bucket {tag}-0" in p.stderr
    with Store(db) as store:
        assert [(q["workload"], q["status"]) for q in store.points(run_id)] == [("put", "done"), ("get", "done")]
        assert [e for e in store.events(run_id) if e["kind"] == "rewrite"]
    assert set(ceph.radosgw_admin("bucket", "list", timeout=60)) == before
