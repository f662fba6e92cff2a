"""S3 buckets a run makes or writes into, in its undo journal, and their removal: an attached cluster is left as found.

Kind `s3_bucket` (fathom.cluster.journal): what is the bucket's name; data says how to reach it (endpoint,
keys_file, ca_file: paths, never a key), the run's object prefix (its data tag: every object a run writes is
`<prefix>/...` or `<prefix>.<...>`: the metadata object, the per-engine sets of client hosts), whether fathom
made it (`made`: the bucket was not there when first written down) and the RGW user fathom made that owns
it (`user`, with prep.rgw). The s3 interface's prepare step writes a PUT point's buckets down before its
engine creates or writes them; what is written is decided once: a bucket already pending in the journal
keeps its record (a resumed run's bucket is still the run's own, not one it found).

Removal, newest first, at the end of every attempt (done, failed, Ctrl-C) and by `fathom cluster restore`
after a kill -9: the objects under the run's prefix, then the bucket if fathom made it and it is empty
then. A bucket that was there keeps every object the run did not write; a bucket of an RGW user fathom made
goes with that user (fathom.cluster.rgw.cleanup purges it bypassing GC). The requests are S3's own
(ListObjectsV2, DeleteObjects, DeleteBucket), signed with SigV4 by the keys that wrote the objects, so no
admin access to RGW is needed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import shlex
import ssl
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from fathom.cluster import full as full_state
from fathom.cluster.journal import S3_KIND, Entry, Journal
from fathom.errors import ClusterError

TIMEOUT_S = 30.0  # one request
RETRIES_503 = 4  # a 503 (SlowDown: RGW's throttle) is sent again, backing off


class Unreachable(ClusterError):
    """The endpoint did not answer (refused, timed out, TLS failed): the other buckets there are not tried."""


def _q(s: str, safe: str = "-_.~") -> str:
    return quote(s, safe=safe)


def _query(query: dict[str, str]) -> str:
    """The canonical query string (SigV4): names and values encoded, sorted by name."""
    return "&".join(f"{_q(k)}={_q(v)}" for k, v in sorted(query.items()))


def _tag(el: ET.Element) -> str:
    return el.tag.rsplit("}", 1)[-1]


def _texts(root: ET.Element, name: str) -> list[str]:
    return [el.text or "" for el in root.iter() if _tag(el) == name]


class Client:
    """A few S3 requests on one keep-alive connection; the secret stays in this object."""

    def __init__(self, endpoint: str | None, keys_file: str, ca_file: str | None = None, timeout: float = TIMEOUT_S):
        try:
            keys = json.loads(Path(keys_file).read_text())
            self._access, self._secret = str(keys["access_key"]), str(keys["secret_key"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not JSON with access_key and secret_key"
            raise ClusterError(f"S3 keys file {keys_file}: {why}",
                               hint="the keys that wrote the objects are needed to remove them") from None
        self.url = endpoint or keys.get("endpoint")
        if not self.url:
            raise ClusterError(f"S3 keys file {keys_file} names no endpoint and none was given")
        u = urlparse(self.url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ClusterError(f"S3 endpoint {self.url!r} is not http(s)://host[:port]")
        self.region = keys.get("region") or "us-east-1"
        self.keys_file, self.ca_file, self.timeout = keys_file, ca_file, timeout
        self._u, self._conn = u, None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            u = self._u
            if u.scheme == "https":
                ctx = ssl.create_default_context(cafile=self.ca_file)
                self._conn = http.client.HTTPSConnection(u.hostname, u.port, timeout=self.timeout, context=ctx)
            else:
                self._conn = http.client.HTTPConnection(u.hostname, u.port, timeout=self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _headers(self, method: str, path: str, query: dict[str, str], body: bytes, extra: dict[str, str],
                 amz: str | None = None) -> dict[str, str]:
        """The request's headers, signed (AWS Signature Version 4) at amz (YYYYMMDDTHHMMSSZ; None: now)."""
        amz = amz or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        h = {"host": self._u.netloc, "x-amz-date": amz, "x-amz-content-sha256": hashlib.sha256(body).hexdigest(),
             **{k.lower(): v for k, v in extra.items()}}
        names = sorted(h)
        canonical = "\n".join([method, _q(path, "/-_.~"), _query(query),
                               "".join(f"{k}:{h[k].strip()}\n" for k in names), ";".join(names),
                               h["x-amz-content-sha256"]])
        scope = f"{amz[:8]}/{self.region}/s3/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{amz}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        key = ("AWS4" + self._secret).encode()
        for part in (amz[:8], self.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        sig = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        h["authorization"] = (f"AWS4-HMAC-SHA256 Credential={self._access}/{scope}, SignedHeaders={';'.join(names)}, "
                              f"Signature={sig}")
        return h

    def request(self, method: str, path: str, query: dict[str, str] | None = None, body: bytes = b"",
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """(status, body); a dropped keep-alive connection is reopened once, a 503 sent again with backoff."""
        query = query or {}
        target = _q(path, "/-_.~") + ("?" + _query(query) if query else "")
        for attempt in range(RETRIES_503 + 1):
            for reconnect in (False, True):
                try:
                    c = self._connection()
                    c.request(method, target, body=body or None,
                              headers=self._headers(method, path, query, body, headers or {}))
                    r = c.getresponse()
                    status, data = r.status, r.read()
                    break
                except (OSError, http.client.HTTPException) as exc:
                    self.close()
                    if reconnect or isinstance(exc, (TimeoutError, ssl.SSLError, ConnectionRefusedError)):
                        raise Unreachable(f"S3 {method} {path} at {self.url}: {exc or type(exc).__name__}",
                                          hint="check that RGW answers at that endpoint") from None
            if status != 503 or attempt == RETRIES_503:
                return status, data
            time.sleep(0.25 * 2**attempt)
        raise AssertionError("unreachable")

    def fail(self, what: str, status: int, body: bytes) -> ClusterError:
        try:
            code = next(iter(_texts(ET.fromstring(body), "Code")), "") if body.startswith(b"<") else ""
        except ET.ParseError:
            code = ""
        return ClusterError(f"S3 {what} at {self.url} failed: HTTP {status}{f' {code}' if code else ''}",
                            hint="the keys in " + self.keys_file + " must be those that wrote the objects")

    # ---- the requests ---------------------------------------------------------------
    def exists(self, bucket: str) -> bool:
        """Whether the bucket is there (HEAD; 403: it is, someone else's)."""
        status, body = self.request("HEAD", f"/{bucket}")
        if status in (200, 403):
            return True
        if status == 404:
            return False
        raise self.fail(f"HEAD bucket {bucket}", status, body)

    def keys(self, bucket: str, prefix: str = "") -> list[str] | None:
        """Every key under prefix (ListObjectsV2, page by page); None when the bucket is gone."""
        out: list[str] = []
        token = None
        while True:
            q = {"list-type": "2", "prefix": prefix, "max-keys": "1000",
                 **({"continuation-token": token} if token else {})}
            status, body = self.request("GET", f"/{bucket}", q)
            if status == 404:
                return None
            if status != 200:
                raise self.fail(f"listing bucket {bucket}", status, body)
            root = ET.fromstring(body)
            out += [k for el in root if _tag(el) == "Contents" for k in _texts(el, "Key")]
            token = next(iter(_texts(root, "NextContinuationToken")), None)
            if "true" not in _texts(root, "IsTruncated") or not token:
                return out

    def delete(self, bucket: str, keys: list[str]) -> int:
        """Delete keys, 1000 a request (DeleteObjects, quiet); how many went. A key that failed is an error."""
        for i in range(0, len(keys), 1000):
            doc = ET.Element("Delete")
            ET.SubElement(doc, "Quiet").text = "true"
            for k in keys[i:i + 1000]:
                ET.SubElement(ET.SubElement(doc, "Object"), "Key").text = k
            body = ET.tostring(doc)
            md5 = base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode()
            status, data = self.request("POST", f"/{bucket}", {"delete": ""}, body,
                                        {"content-md5": md5, "content-type": "application/xml"})
            if status != 200:
                raise self.fail(f"deleting objects in bucket {bucket}", status, data)
            bad = [el for el in ET.fromstring(data) if _tag(el) == "Error"] if data else []
            if bad:
                first = bad[0]
                raise ClusterError(f"S3 delete of {len(bad)} object(s) in bucket {bucket} at {self.url} failed: "
                                   f"{_texts(first, 'Key')[:1]} {_texts(first, 'Code')[:1]}")
        return len(keys)

    def remove_bucket(self, bucket: str) -> bool:
        """Delete the bucket; False when it still holds objects (409 BucketNotEmpty). Gone already: True."""
        status, body = self.request("DELETE", f"/{bucket}")
        if status in (200, 204, 404):
            return True
        if status == 409:
            return False
        raise self.fail(f"deleting bucket {bucket}", status, body)


def run_objects(keys: list[str], prefix: str) -> list[str]:
    """The keys a run with this prefix wrote: `<prefix>/...` and `<prefix>.<...>` (its metadata, its client hosts'
    sets), nothing else."""
    return [k for k in keys if k.startswith((f"{prefix}/", f"{prefix}."))]


# ---- the journal ------------------------------------------------------------------------

def claim(journal: Journal, bucket: str, prefix: str, endpoint: str | None, keys_file: str,
          ca_file: str | None = None, user: str | None = None) -> Entry:
    """Write the bucket down before a point's engine creates it or writes into it. A bucket pending in the journal
    keeps its record; otherwise `made` is whether it is missing now (the engine then creates it)."""
    for e in journal.pending(S3_KIND):
        if e.what == bucket:
            return e
    c = Client(endpoint, keys_file, ca_file)
    try:
        made = not c.exists(bucket)
    finally:
        c.close()
    data: dict[str, Any] = {"endpoint": c.url, "keys_file": keys_file, "ca_file": ca_file, "prefix": prefix,
                            "made": made}
    if user and made:  # goes with the user
        data["user"] = user
    return journal.note(S3_KIND, bucket, **data)


def _undo(e: Entry) -> str:
    """Remove what one entry names; what was done, said."""
    d = e.data
    prefix, b = d["prefix"], e.what
    c = Client(d.get("endpoint"), d["keys_file"], d.get("ca_file"))
    try:
        keys = c.keys(b, prefix)
        if keys is None:
            return f"S3 bucket {b} is gone already"
        n = c.delete(b, run_objects(keys, prefix))
        if not d.get("made"):
            return (f"removed the {n} object(s) this run wrote under {prefix} in S3 bucket {b}; the bucket was there "
                    "before the run and keeps every other object")
        if c.remove_bucket(b):
            return f"removed S3 bucket {b} and the {n} object(s) this run wrote in it"
        return (f"removed the {n} object(s) this run wrote in S3 bucket {b}; the bucket, which this run made, is kept: "
                "it holds objects this run did not write")
    finally:
        c.close()


def remove(journal: Journal, say: Callable[[str], None], full: Callable[[], str | None] = lambda: None) \
        -> tuple[list[str], list[str]]:
    """Undo the journal's pending S3 buckets, newest first, each marked as it goes and said. Returns (what was
    done, what could not be: each with why, left pending for `fathom cluster restore`). full(): why deletes would
    wait now (a full cluster), or None; then nothing is tried."""
    todo = journal.pending(S3_KIND)
    if not todo:
        return [], []
    why = full()
    if why:
        return [], [f"S3 bucket {e.what} ({why}: deletes would wait)" for e in todo]
    users = set(journal.names("rgw_user"))
    done, left = [], []
    down: dict[str, str] = {}  # endpoint -> why it did not answer
    for e in todo:
        if e.data.get("user") in users:
            msg = f"S3 bucket {e.what} goes with RGW user {e.data['user']}, which fathom made"
        elif e.data.get("endpoint") in down:
            left.append(f"S3 bucket {e.what} (not tried: {down[e.data['endpoint']]})")
            continue
        else:
            try:
                msg = _undo(e)
            except (ClusterError, ET.ParseError, KeyError) as exc:
                why = exc.message if isinstance(exc, ClusterError) else f"{type(exc).__name__}: {exc}"
                if isinstance(exc, Unreachable):
                    down[e.data.get("endpoint")] = why
                journal.mark(e, why)
                left.append(f"S3 bucket {e.what} ({why})")
                continue
        journal.mark(e)
        say(msg)
        done.append(msg)
    return done, left


def full_now(ceph: Any) -> str | None:
    """The cluster's full state said (POOL_FULL, OSD_FULL), or None: RGW's deletes would wait on a full cluster."""
    return full_state.describe(full_state.full_state(ceph)) or None


def at_end(journal: Journal, ceph: Any, say: Callable[[str], None], errors: list[str], event: Callable[[str], None],
           db: Any, run_id: int) -> bool:
    """A run's end on an attached cluster: its S3 objects and the buckets it made removed, said and kept as an
    event; what could not be added to errors with the command that removes it later. True when any went."""
    done, left = remove(journal, say, lambda: full_now(ceph))
    if done:
        event("; ".join(done))
    restore = shlex.join(["fathom", "cluster", "restore", "--conf", str(ceph.conn.conf), "--db", str(db), "--run",
                          str(run_id)])
    errors += [f"could not remove {x}; it is left for `{restore}` once that is fixed" for x in left]
    return bool(done)
