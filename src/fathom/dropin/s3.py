"""`fathom bench s3 put|get|mixed` and `fathom cleanup --bucket`: a quick S3 check with warp's vocabulary.

put    new objects of --obj-size for --duration
get    --objects objects put first (not measured), then GETs at random over them for --duration
mixed  the same set, then GET/HEAD/PUT/DELETE drawn from --get/--stat/--put/--delete-distrib
       (warp's defaults 45/30/15/10); deletes remove objects this run's PUTs made, never the set

The endpoint and keys: --endpoint and --keys-file, else the local cluster's
(`fathom cluster env`: $S3_KEYS_FILE, or s3.json beside $CEPH_CONF). The keys
file is JSON with access_key and secret_key; only its path goes into the spec,
the store and the output. Objects are `fathom_bench.<run-name>/0/<n>` in the
bucket, with `fathom_bench.<run-name>.meta` naming the set; the default bucket
(fathom-bench) is created when missing and removed again at cleanup, an
explicit --bucket must exist. Output: rados bench's per-second table and
summary over all requests, then per request type the percentiles and (GET)
the time to first byte.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fathom.dropin import output as fmt
from fathom.dropin.record import check_db
from fathom.dropin.engine import named, run_engine
from fathom.dropin.rados import DEFAULT_RUN, Out, check_run_name, dump_json, object_prefix
from fathom.engine_spec import EngineSpec, Load
from fathom.errors import FathomError, UsageError
from fathom.interfaces.s3 import KEYS_FILE, S3, Mix
from fathom.units import parse_duration, parse_size, positive_int

if TYPE_CHECKING:
    from fathom.engines.records import EngineRun

DEFAULT_BUCKET = "fathom-bench"
MODES = ("put", "get", "mixed")
UNREACHABLE = ("ECONNREFUSED", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "ECONNRESET", "ECONNABORTED")


class S3BenchError(FathomError):
    exit_code = 3


class FullError(S3BenchError):
    """The bench stopped on a full cluster: deletes would hang too, so its objects stay for a later cleanup."""


@dataclass
class Endpoint:
    """Where to send requests, and with what: paths only, never key material."""

    url: str
    keys_file: str
    ca_file: str | None

    def describe(self) -> dict[str, Any]:
        return {"endpoint": self.url, "keys_file": self.keys_file, "ca_file": self.ca_file}


def keys_file_path(given: str | None) -> Path:
    """--keys-file, else $S3_KEYS_FILE, else the local cluster's s3.json beside $CEPH_CONF or in its default dir."""
    from fathom.cluster.local import DEFAULT_DIR

    if given:
        p = Path(given)
        if not p.is_file():
            raise UsageError(f"--keys-file {given}: no such file",
                             hint="give a JSON file with access_key and secret_key (mode 0600)")
        return p
    candidates = [os.environ.get("S3_KEYS_FILE")]
    if os.environ.get("CEPH_CONF"):
        candidates.append(str(Path(os.environ["CEPH_CONF"]).parent / KEYS_FILE))
    candidates.append(str(Path(DEFAULT_DIR) / KEYS_FILE))
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    raise UsageError("no S3 keys: give --keys-file (JSON with access_key and secret_key, and --endpoint)",
                     hint="or start a local cluster with RGW (fathom cluster up --rgw) and "
                          "eval \"$(fathom cluster env)\"")


def _public_fields(path: Path) -> dict[str, Any]:
    """The keys file's endpoint fields; the keys themselves are left to the engine."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        # the message names the file and the position, never its text
        where = f"line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else exc.strerror
        raise UsageError(f"cannot read the keys file {path}: {where}",
                         hint="it must be JSON with access_key and secret_key") from None
    if not isinstance(doc, dict):
        raise UsageError(f"the keys file {path} is not a JSON object with access_key and secret_key")
    return {k: doc.get(k) for k in ("endpoint", "tls_endpoint", "ca_file")}


def resolve_endpoint(endpoint: str | None, keys_file: str | None, tls: bool, ca: str | None) -> Endpoint:
    """--endpoint (a URL, or host:port with --tls choosing https), else the keys file's (tls_endpoint with --tls).
    The CA: --ca, else the keys file's ca_file for its own TLS endpoint, else $AWS_CA_BUNDLE."""
    kf = keys_file_path(keys_file)
    pub = _public_fields(kf)
    if endpoint:
        url = endpoint if "://" in endpoint else ("https://" if tls else "http://") + endpoint
        if tls and url.startswith("http://"):
            raise UsageError(f"--tls with a plain http endpoint {endpoint}", hint="give an https:// URL or drop --tls")
    elif tls:
        url = pub.get("tls_endpoint") or ""
        if not url:
            raise UsageError(f"--tls: the keys file {kf} names no TLS endpoint",
                             hint="give --endpoint https://HOST:PORT")
    else:
        url = pub.get("endpoint") or ""
        if not url:
            raise UsageError(f"no endpoint: give --endpoint, or an endpoint in the keys file {kf}")
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--endpoint {endpoint!r} must be http(s)://HOST[:PORT] or HOST:PORT")
    if ca and not url.startswith("https://"):
        raise UsageError(f"--ca applies to an https endpoint, not {url}", hint="add --tls or give an https:// URL")
    if url.startswith("https://") and not ca:
        ca = pub.get("ca_file") if url.rstrip("/") == (pub.get("tls_endpoint") or "").rstrip("/") else None
        ca = ca or os.environ.get("AWS_CA_BUNDLE") or None
    if ca and not Path(ca).is_file():
        raise UsageError(f"--ca {ca}: no such file", hint="give the PEM certificate of the CA that signed the "
                                                          "endpoint's certificate")
    return Endpoint(url=url.rstrip("/"), keys_file=str(kf), ca_file=ca)


# ---- RGW's own counters (the local cluster's RGW) ----------------------------------------

def local_rgw_asok(ep: Endpoint) -> Path | None:
    """The admin socket of the local cluster's RGW when the endpoint is it (keys file in the cluster's dir)."""
    from urllib.parse import urlparse

    from fathom.cluster.local import LocalCluster
    from fathom.cluster.localconf import rgw_addr, rgw_names

    c = LocalCluster(Path(ep.keys_file).parent)
    st = c.state() or {}
    url = urlparse(ep.url)
    if not st.get("rgw") or url.port not in (st.get("rgw_port"), st.get("rgw_tls_port")):
        return None
    names = rgw_names(st)  # the RGW the URL names (the only one, whatever name it gives this host)
    name = next((n for n in names if rgw_addr(st, n) == url.hostname), names[0] if len(names) == 1 else None)
    d = next((d for d in c.daemons() if d.name == name and d.running), None)
    if d is None:
        return None
    return next((p for p in (c.run_dir / f"ceph-{name}.{d.pid}.asok", c.run_dir / f"ceph-{name}.asok")
                 if p.exists()), None)


def local_cluster_ceph(ep: Endpoint) -> Any:
    """A `ceph` handle on the local cluster whose RGW the endpoint is (keys file in the cluster's dir), else None."""
    from urllib.parse import urlparse

    from fathom.cluster.local import LocalCluster

    c = LocalCluster(Path(ep.keys_file).parent)
    st = c.state() or {}
    if not st.get("rgw") or urlparse(ep.url).port not in (st.get("rgw_port"), st.get("rgw_tls_port")):
        return None
    return c.ceph(timeout=30)


def stop_error(r: S3Args, fatal: dict[str, Any]) -> S3BenchError:
    """The error of a bench that stopped: a full cluster named as such (its writes hang at RGW until the stall
    timeout), RGW's 503s named as overload; otherwise the engine's own words."""
    from fathom.cluster import full

    kind, msg = fatal.get("kind", ""), fatal.get("message", "")
    ceph = local_cluster_ceph(r.ep) if kind == "stall" or kind.startswith("HTTP 5") else None
    state = full.full_state(ceph) if ceph is not None else {}
    if state:
        return FullError(f"the bench stopped because the cluster is full ({full.describe(state)}): {msg}",
                         hint="free space (delete objects: `" + cleanup_command(r) + "`) or raise the pool's "
                              "quota (ceph osd pool set-quota POOL max_bytes 0), then run again")
    if kind == "stall":
        return S3BenchError(f"the bench stopped: {msg}; stopped after --stall-timeout {r.stall_timeout:g} s",
                            hint="check the cluster (ceph health detail: full, paused or OSDs down) and RGW")
    if kind == "HTTP 503 SlowDown":
        return S3BenchError(f"the bench stopped: RGW refused a request as overloaded ({kind}): {msg}",
                            hint="lower --concurrent, raise RGW's rgw_max_concurrent_requests, or count the "
                                 "503s and go on with --on-error continue")
    return S3BenchError(f"the bench stopped: {msg}")


def rgw_dump(asok: Path | None) -> dict[str, Any] | None:
    from fathom.servers.telemetry import asok_command

    if asok is None:
        return None
    try:
        return asok_command(asok, "perf dump")
    except (OSError, ValueError):
        return None


def check_counters(r: S3Args, before: dict[str, Any] | None, after: dict[str, Any] | None,
                   summary: dict[str, Any], intervals: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """Every request of the run (its intervals' ops, ramp included; the prefill, multipart parts and retries
    from the summary) against RGW's counters over the same span (fathom.interfaces.reconcile)."""
    from fathom.interfaces import reconcile

    if not before or not after:
        return None
    client = reconcile.client_ops(intervals) if intervals else \
        {k: dict(v) for k, v in (summary.get("ops") or {}).items()}
    rgw = reconcile.deltas(before, after)
    out = reconcile.reconcile(client, rgw, buckets=1, max_object=r.obj_size, extra=reconcile.beyond_ops([summary]))
    out["rgw"] = rgw
    return out


def counters_lines(rec: dict[str, Any] | None) -> list[str]:
    if not rec:
        return []
    rows = "   ".join(f"{r['counter']} {r['rgw']:g} (client {r['client']:g})" for r in rec["rows"])
    verdict = "match" if rec["ok"] else "MISMATCH: " + "; ".join(
        f"{r['counter']} off by {r['diff']:+g} ({r['allowed']:g} allowed)" for r in rec["rows"] if not r["ok"])
    used = f" ({rec['counters']})" if rec.get("counters") else ""
    return [f"RGW counters{used}: {rows}   failed_req {rec['failed_req'] or 0:g}: {verdict}"]


# ---- one bench ---------------------------------------------------------------------------

@dataclass
class S3Args:
    mode: str
    ep: Endpoint
    bucket: str
    create_bucket: bool
    obj_size: int
    concurrent: int
    duration: float
    objects: int
    mix: Mix
    run_name: str
    cleanup: bool
    format: str
    on_error: str
    connect_timeout: float
    stall_timeout: float
    db: str
    clients_args: str = ""  # the bench's --client/--clients-file options, for the cleanup command it prints

    @property
    def names(self) -> tuple[str, str]:
        """The stored run's name and its point's key (the live view's `run` and `point` too)."""
        return f"bench-s3-{self.mode}-{self.run_name}", f"s3-{self.mode}"


def parse_args(a: Any) -> S3Args:
    if a.mode not in MODES:
        raise UsageError(f"unknown s3 bench {a.mode!r}: use put, get or mixed")
    duration = parse_duration(a.duration, "--duration")
    if duration <= 0:
        raise UsageError("--duration must be positive (e.g. 30s or 5m)")
    obj_size = parse_size(a.obj_size, "--obj-size")
    if not 0 < obj_size <= 5 << 30:
        raise UsageError(f"--obj-size {a.obj_size}: must be 1 byte .. 5 GiB (S3's single PUT limit)")
    fmt_name = (a.format or "plain").lower()
    if fmt_name not in ("plain", "json", "json-pretty"):
        raise UsageError(f"-f/--format: {a.format!r}: use plain, json or json-pretty")
    mix = Mix(get=positive_int(a.get_distrib, "--get-distrib", minimum=0),
              head=positive_int(a.stat_distrib, "--stat-distrib", minimum=0),
              put=positive_int(a.put_distrib, "--put-distrib", minimum=0),
              delete=positive_int(a.delete_distrib, "--delete-distrib", minimum=0))
    if a.mode == "mixed" and not (mix.get or mix.head or mix.put or mix.delete):
        raise UsageError("mixed needs a positive weight in at least one of --get/--stat/--put/--delete-distrib")
    stall = float(a.stall_timeout)
    connect = float(a.connect_timeout)
    if not (stall > 0 and connect > 0):
        raise UsageError("--stall-timeout and --connect-timeout must be positive numbers of seconds")
    bucket = a.bucket or DEFAULT_BUCKET
    return S3Args(mode=a.mode, ep=resolve_endpoint(a.endpoint, a.keys_file, a.tls, a.ca), bucket=bucket,
                  create_bucket=a.bucket is None, obj_size=obj_size,
                  concurrent=positive_int(a.concurrent, "--concurrent"), duration=duration,
                  objects=positive_int(a.objects, "--objects"), mix=mix,
                  run_name=check_run_name(a.run_name or DEFAULT_RUN), cleanup=not a.noclear, format=fmt_name,
                  on_error=a.on_error, connect_timeout=connect, stall_timeout=stall, db=a.db)


def _target(r: S3Args, **kw: Any) -> S3:
    return S3(keys_file=r.ep.keys_file, endpoint=r.ep.url, ca_file=r.ep.ca_file, buckets=[r.bucket],
              prefix=object_prefix(r.run_name), connect_timeout_s=r.connect_timeout, **kw)


def build_spec(r: S3Args) -> EngineSpec:
    """put: new objects until the duration ends; get and mixed: a prefilled set, then the draw (get = GET only)."""
    if r.mode == "put":
        t = _target(r, op="put", object_size=r.obj_size, create_buckets=r.create_bucket)
    else:
        mix = r.mix if r.mode == "mixed" else Mix(get=1)
        t = _target(r, op="mixed", mix=mix, object_size=r.obj_size, objects=r.objects,
                    create_buckets=r.create_bucket)
    # like warp: a slow request is slow, not failed; a stuck endpoint is caught by the stall timeout
    return EngineSpec(target=t, load=Load(iodepth=r.concurrent, duration_s=r.duration), on_error=r.on_error,  # type: ignore[arg-type]
                      stall_timeout_s=r.stall_timeout, op_timeout_s=None)


def preamble(r: S3Args) -> list[str]:
    what = {"put": "PUTs", "get": "GETs", "mixed": "mixed requests"}[r.mode]
    lines = [f"Maintaining {r.concurrent} concurrent {what} of {r.obj_size} bytes for up to {r.duration:g} seconds "
             f"in bucket {r.bucket} at {r.ep.url}",
             f"Object prefix: {object_prefix(r.run_name)}"]
    if r.mode == "mixed":
        lines.append(f"Mix: GET {r.mix.get}, HEAD {r.mix.head}, PUT {r.mix.put}, DELETE {r.mix.delete}")
    if r.mode != "put":
        lines.append(f"Preparing {r.objects} objects (not measured)")
    return lines


def claim_bucket(r: S3Args) -> None:
    """Before a bench on client hosts: one small object under the run's own prefix, put by a local engine
    that creates the bucket when missing, so the client engines do not race to create it; its metadata
    names the bucket as this run's, and the cleanup of the run's own prefix (last) removes it once empty."""
    spec = EngineSpec(target=_target(r, op="put", object_size=4096, objects=1, create_buckets=True),
                      load=Load(iodepth=1), stall_timeout_s=r.stall_timeout, op_timeout_s=None)
    oc = run_engine(spec, None, timeout=3 * r.connect_timeout + r.stall_timeout + 60)
    if oc.start is None or oc.fatal or oc.exit_code != 0:
        raise early_error(oc.fatal, oc, r.ep, r.bucket, r.connect_timeout)


def client_prefixes(cs: Any, run_name: str) -> list[str]:
    """The object prefixes of a bench's client engines (fathom.engines.clients.client_prefix), in order."""
    from fathom.engines.clients import client_prefix

    return [client_prefix(object_prefix(run_name), h.name, n) for h in cs.hosts for n in range(h.instances)]


def run_bench(a: Any) -> int:
    from fathom.dropin import multihost

    r = parse_args(a)
    named(*r.names, f"fathom bench s3 {r.mode}", r.db)
    check_db(r.db)
    out = Out(json_mode=r.format != "plain")
    cs = multihost.from_args(a)
    r.clients_args = _clients_args(a) if cs is not None else ""
    spec = build_spec(r)
    if cs is not None and r.create_bucket:
        claim_bucket(r)
        spec.target.create_buckets = False  # type: ignore[attr-defined]
    table = fmt.RadosTable(fmt.ALL_KINDS)
    started = [False]

    def on_record(rec: dict[str, Any]) -> None:
        t = rec.get("type")
        if t == "start":
            out.table(preamble(r) + ([multihost.preamble(cs)] if cs is not None else []))
        elif t == "interval":
            lines = [] if started[0] else table.start(rec.get("ts"))
            started[0] = True
            out.table(lines + table.interval(rec))

    timeout = r.duration + r.stall_timeout * 2 + 3 * r.connect_timeout + 3600
    asok = local_rgw_asok(r.ep)
    before = rgw_dump(asok)
    try:
        outcome = run_engine(spec, None, timeout=timeout, on_record=on_record, clients=cs)
    except KeyboardInterrupt:
        sys.stderr.write(f"fathom: what was written so far stays in bucket {r.bucket}; remove it with "
                         f"`{cleanup_command(r)}`\n")
        raise
    counters = check_counters(r, before, rgw_dump(asok), outcome.summary, outcome.intervals) \
        if outcome.summary else None
    return finish(r, out, table, outcome, spec, counters)


def cleanup_command(r: S3Args) -> str:
    ep = f" --endpoint {r.ep.url}" + (f" --ca {r.ep.ca_file}" if r.ep.ca_file else "")
    return (f"fathom cleanup --bucket {r.bucket} --run-name {r.run_name} --keys-file {r.ep.keys_file}{ep}"
            + r.clients_args)


def _clients_args(a: Any) -> str:
    """The --client/--clients-file options as given (cleanup derives the client engines' prefixes from them)."""
    import shlex

    return "".join(f" --client {shlex.quote(c)}" for c in a.client or []) + (
        f" --clients-file {shlex.quote(a.clients_file)}" if a.clients_file else "")


def early_error(fatal: dict[str, Any] | None, outcome: "EngineRun", ep: Endpoint, bucket: str,
                connect_timeout: float) -> FathomError:
    """The failure of a run that never started, named, with what to change."""
    if not fatal:
        return FathomError(f"fathom-engine ended (exit code {outcome.exit_code}) before starting: "
                           f"{outcome.stderr.strip()[-400:] or 'no output'}", exit_code=3)
    kind, msg = fatal.get("kind", ""), fatal.get("message", "")
    if kind.startswith("HTTP 403"):
        code = kind.split(" ", 2)[-1]
        why = {"SignatureDoesNotMatch": "the secret key does not match the access key",
               "InvalidAccessKeyId": "the endpoint knows no user with this access key"}.get(code, "access denied")
        return S3BenchError(f"{ep.url} refused the keys in {ep.keys_file}: {kind} ({why})",
                            hint="check access_key and secret_key in the keys file (--keys-file) against the "
                                 "endpoint's user (radosgw-admin user info --uid USER)")
    if kind == "HTTP 404 NoSuchBucket":
        return S3BenchError(f"bucket {bucket} does not exist at {ep.url}",
                            hint=f"create it first, or leave --bucket out: fathom then uses {DEFAULT_BUCKET}, "
                                 "which it creates and removes again")
    if kind.startswith("TLS"):
        return S3BenchError(f"TLS with {ep.url} failed: {kind}"
                            + (f" (CA {ep.ca_file})" if ep.ca_file else " (system CA bundle)"),
                            hint="give the PEM certificate of the CA that signed the endpoint's certificate "
                                 "with --ca PATH (the local cluster's: $AWS_CA_BUNDLE from fathom cluster env)")
    if kind in UNREACHABLE:
        return S3BenchError(f"cannot reach the S3 endpoint {ep.url} (--connect-timeout {connect_timeout:g} s): "
                            f"{kind}",
                            hint="is RGW running there? check --endpoint (local cluster: fathom cluster status)")
    if kind == "invalid_spec":
        return FathomError(f"fathom-engine refused the bench: {msg}", exit_code=2)
    return S3BenchError(f"the S3 bench could not start: {msg}")


def finish(r: S3Args, out: Out, table: fmt.RadosTable, outcome: "EngineRun", spec: EngineSpec,
           counters: dict[str, Any] | None = None) -> int:
    from fathom.dropin.record import save_bench

    fatal = outcome.fatal
    if outcome.start is None:
        raise early_error(fatal, outcome, r.ep, r.bucket, r.connect_timeout)
    status, error = "done", None
    if fatal:
        status = "failed"
        error = stop_error(r, fatal)
    elif outcome.exit_code != 0 or outcome.summary is None:
        status = "failed"
        error = S3BenchError(f"fathom-engine ended with exit code {outcome.exit_code} and no summary: "
                             f"{outcome.stderr.strip()[-400:]}")
    summary_rec = outcome.summary or {"measured_s": sum(float(i.get("dt") or 0) for i in outcome.intervals),
                                      "ops": {}}
    summary = fmt.s3_summary(summary_rec, table, r.obj_size)
    out.result(fmt.format_s3_summary(summary) + counters_lines(counters))
    clients = getattr(outcome, "clients", None)
    if clients:
        from fathom.dropin.multihost import host_lines

        out.result(host_lines(clients))

    written = (outcome.summary or {}).get("objects") or {}
    cleanup_info = None
    if isinstance(error, FullError):  # the PUTs RGW holds land once there is room: their objects too
        out.note(f"objects kept (the cluster is full: deletes would wait for room too); once there is room, "
                 f"remove them with `{cleanup_command(r)}`")
    elif r.cleanup and clients:  # every engine's set, then the run's own prefix (the bucket, once empty)
        infos = [cleanup_run(r.ep, r.bucket, p, r.concurrent, out, r.connect_timeout, r.stall_timeout)
                 for p in [*outcome.prefixes, object_prefix(r.run_name)]]  # type: ignore[attr-defined]
        cleanup_info = _sum_cleanups(infos)
    elif r.cleanup and written.get("count"):
        cleanup_info = cleanup_run(r.ep, r.bucket, object_prefix(r.run_name), r.concurrent, out,
                                   r.connect_timeout, r.stall_timeout)
    elif written.get("count"):
        out.note(f"objects kept (--noclear); remove them with `{cleanup_command(r)}`")
    s3 = (outcome.summary or {}).get("s3") or {}
    params = {"interface": "s3", "op": r.mode, "object_size": r.obj_size, "concurrent": r.concurrent,
              "iodepth": r.concurrent, "numjobs": 1, "runtime": r.duration, "objects": r.objects,
              "bucket": r.bucket, "run_name": r.run_name, "object_prefix": object_prefix(r.run_name),
              "endpoint": r.ep.url, "cleanup": r.cleanup, "on_error": r.on_error, "payload": s3.get("payload"),
              "tls": s3.get("tls")}
    if r.mode == "mixed":
        params["mix"] = r.mix.to_json()
    run_id = None
    try:
        run_id = save_bench(r.db, *r.names, params, None, outcome, status,
                            error=error.message if error else None, extra_env={"s3": r.ep.describe()},
                            result_extra={"s3_bench_summary": summary, "cleanup": cleanup_info,
                                          "rgw_counters": counters})
    except FathomError as exc:
        out.warn(f"the results store {r.db} did not take this run: {exc.message}")
    if r.format != "plain":
        doc: dict[str, Any] = {"op": r.mode, "endpoint": r.ep.url, "bucket": r.bucket, "concurrent": r.concurrent,
                               "duration": r.duration, "objects": r.objects if r.mode != "put" else None,
                               "object_prefix": object_prefix(r.run_name), "datas": table.datas}
        if r.mode == "mixed":
            doc["mix"] = r.mix.to_json()
        doc.update(summary)
        doc["fathom"] = {"run_id": run_id, "db": r.db, "status": status, "s3": s3,
                         "prefill": (outcome.summary or {}).get("prefill"),
                         "engine_cpu_s": {"user": outcome.user_s, "sys": outcome.sys_s}, "cleanup": cleanup_info,
                         "rgw_counters": counters}
        if clients:
            from fathom.dropin.multihost import json_part

            doc["fathom"]["clients"] = json_part(clients)
        if error:
            doc["fathom"]["error"] = {"kind": (fatal or {}).get("kind", "engine"), "message": error.message}
        dump_json(doc, r.format == "json-pretty")
    elif run_id is not None:
        sys.stderr.write(f"fathom: stored as run {run_id} in {r.db}\n")
    if error:
        raise error
    return 0


# ---- cleanup -----------------------------------------------------------------------------

def cleanup_run(ep: Endpoint, bucket: str, prefix: str, concurrent: int, out: Out, connect_timeout: float,
                stall_timeout: float = 60.0) -> dict[str, Any]:
    """Remove the set the metadata of prefix names (objects, then the metadata), then the buckets that set's
    run created, once empty. Nothing else in the bucket is touched."""
    import time

    t0 = time.monotonic()
    out.note("Cleaning up (deleting benchmark objects)")
    spec = EngineSpec(target=S3(keys_file=ep.keys_file, endpoint=ep.url, ca_file=ep.ca_file, buckets=[bucket],
                                op="delete", prefix=prefix, connect_timeout_s=connect_timeout),
                      load=Load(iodepth=concurrent), on_error="continue", stall_timeout_s=stall_timeout,
                      op_timeout_s=None)
    oc = run_engine(spec, None, timeout=3600 + stall_timeout)
    if oc.start is None:
        f = oc.fatal or {}
        if f.get("kind") == "ENOENT" and "nothing to read" in f.get("message", ""):
            return {"removed": 0, "buckets_removed": [], "seconds": time.monotonic() - t0, "nothing": True}
        raise early_error(oc.fatal, oc, ep, bucket, connect_timeout)
    if oc.fatal:
        raise S3BenchError(f"cleanup of {prefix} in bucket {bucket} stopped: {oc.fatal.get('message')}")
    objs = (oc.summary or {}).get("objects") or {}
    errors = sum(int(e.get("count") or 0) for e in (oc.summary or {}).get("errors") or [])
    info = {"removed": int(objs.get("removed") or 0), "errors": errors,
            "buckets_removed": objs.get("buckets_removed") or [], "buckets_kept": objs.get("buckets_kept") or [],
            "seconds": time.monotonic() - t0}
    out.note(f"Removed {info['removed']} objects" + (f", {errors} deletes failed" if errors else "")
             + "".join(f"; removed bucket {b}" for b in info["buckets_removed"])
             + "".join(f"; bucket {b} kept (not empty)" for b in info["buckets_kept"]))
    out.note(f"Clean up completed and total clean up time :{fmt.cpp_g(info['seconds'])}")
    return info


def _sum_cleanups(infos: list[dict[str, Any]]) -> dict[str, Any]:
    return {"removed": sum(i["removed"] for i in infos), "errors": sum(int(i.get("errors") or 0) for i in infos),
            "buckets_removed": [b for i in infos for b in i.get("buckets_removed") or []],
            "buckets_kept": [b for i in infos for b in i.get("buckets_kept") or []],
            "seconds": sum(i["seconds"] for i in infos), "nothing": all(i.get("nothing") for i in infos)}


def run_cleanup(a: Any) -> int:
    from fathom.hosts.clients import clients_from_args

    run_name = check_run_name(a.run_name or DEFAULT_RUN)
    prefix = object_prefix(run_name)
    ep = resolve_endpoint(a.endpoint, a.keys_file, a.tls, a.ca)
    cs = clients_from_args(getattr(a, "client", None), getattr(a, "clients_file", None), None)
    # a bench on client hosts: each engine's set first, the run's own prefix (and the bucket) last
    prefixes = [*(client_prefixes(cs, run_name) if cs is not None and not cs.only_local else []), prefix]
    infos = [cleanup_run(ep, a.bucket, p, positive_int(a.concurrent_ios, "-t"), Out(json_mode=False),
                         float(a.connect_timeout)) for p in prefixes]
    info = _sum_cleanups(infos)
    if info.get("nothing"):
        sys.stderr.write(f"fathom: nothing to clean up for {prefix} in bucket {a.bucket} "
                         f"(no {prefix}.meta there)\n")
    return 0
