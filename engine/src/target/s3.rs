//! S3 objects over HTTP/1.1 (Ceph RGW or any S3 endpoint): PUT, GET (whole
//! or a byte range), HEAD, DELETE and LIST, signed with SigV4 (sigv4.rs),
//! one keep-alive connection per slot (http.rs).
//!
//! The object set: job `j` owns keys `<prefix>/<j>/<n>` in bucket
//! `buckets[j % len]`. A put stage leaves `<prefix>.meta` in the first
//! bucket, so a later get, head or delete with the same prefix knows the
//! set (as the rados target does). Credentials come from a keys file; the
//! spec names the file only.

mod http;
mod sigv4;

use super::rados::Pattern;
use super::{Fatal, Target};
use crate::errno::ErrKind;
use crate::io::{OpKind, Phase, Slot};
use crate::rng::Rng;
use crate::spec::{Load, Spec};
use ::http::Method;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::time::Duration;

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum S3Op {
    Put,
    Get,
    Head,
    Delete,
    List,
}

/// What `x-amz-content-sha256` carries.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Payload {
    /// `UNSIGNED-PAYLOAD`: the body is not hashed (warp over TLS, most benchmarks).
    #[default]
    Unsigned,
    /// The body's SHA-256, computed per request (client CPU per byte).
    Sha256,
}

/// A GET of part of each object: `size` bytes at `offset`, or (offset null)
/// at a random multiple of `size` inside the object.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RangeSpec {
    pub size: u64,
    #[serde(default)]
    pub offset: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct S3Spec {
    /// `http(s)://host[:port]`; null: the keys file's `endpoint`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// JSON file with `access_key` and `secret_key` (and optionally `endpoint`, `region`).
    pub keys_file: String,
    /// SigV4 region; null: the keys file's `region`, else us-east-1.
    #[serde(default)]
    pub region: Option<String>,
    /// PEM CA certificates for an https endpoint (null: the system bundle).
    #[serde(default)]
    pub ca_file: Option<String>,
    /// Job `j` uses `buckets[j % len]`; reads find the set's buckets in the metadata object.
    pub buckets: Vec<String>,
    /// Create the buckets before the run (an existing bucket of ours is fine).
    #[serde(default)]
    pub create_buckets: bool,
    /// CreateBucket's LocationConstraint (RGW: `<zonegroup>:<placement-id>`).
    #[serde(default)]
    pub location_constraint: Option<String>,
    pub op: S3Op,
    #[serde(default)]
    pub pattern: Pattern,
    /// Keys are `<prefix>/<job>/<n>`, metadata `<prefix>.meta`.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Bytes per object (put); reads take it from the metadata object.
    #[serde(default)]
    pub object_size: Option<u64>,
    /// Objects per job (put); null: new objects until the run ends.
    #[serde(default)]
    pub objects: Option<u64>,
    /// Independent streams, `iodepth` slots each.
    #[serde(default = "one")]
    pub jobs: u32,
    /// Put every object of the set before the measured run (not measured).
    #[serde(default)]
    pub prefill: bool,
    #[serde(default)]
    pub range: Option<RangeSpec>,
    /// LIST: keys per request.
    #[serde(default = "thousand")]
    pub max_keys: u32,
    #[serde(default)]
    pub payload: Payload,
    /// Threads running the HTTP connections (each a current-thread runtime).
    #[serde(default = "one")]
    pub io_threads: u32,
    /// Bound on opening one connection (TCP and TLS).
    #[serde(default = "ten")]
    pub connect_timeout_s: f64,
}

fn one() -> u32 {
    1
}
fn thousand() -> u32 {
    1000
}
fn ten() -> f64 {
    10.0
}

/// S3's single-PUT limit.
const MAX_OBJECT: u64 = 5 << 30;
/// Object index bits in a slot's `obj` (the job is above them): the verify header's object.
const N_BITS: u32 = 40;

fn valid_bucket(b: &str) -> bool {
    let bytes = b.as_bytes();
    (3..=63).contains(&b.len())
        && bytes.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'.' || *c == b'-')
        && bytes[0].is_ascii_alphanumeric()
        && bytes[b.len() - 1].is_ascii_alphanumeric()
}

impl S3Spec {
    pub fn validate(&mut self, load: &Load, verify: bool) -> Result<(), String> {
        if self.keys_file.is_empty() {
            return Err("target.keys_file must name the file with the S3 keys".into());
        }
        if let Some(e) = &self.endpoint
            && !(e.starts_with("http://") || e.starts_with("https://"))
        {
            return Err(format!("target.endpoint {e:?} must start with http:// or https://"));
        }
        if self.buckets.is_empty() {
            return Err("target.buckets needs at least one bucket".into());
        }
        if let Some(b) = self.buckets.iter().find(|b| !valid_bucket(b)) {
            return Err(format!("target.buckets: {b:?} is not a valid bucket name (3..63 of a-z 0-9 . -)"));
        }
        if self.location_constraint.is_some() && !self.create_buckets {
            return Err("target.location_constraint applies when target.create_buckets is true".into());
        }
        if let Some(p) = &self.prefix
            && (p.is_empty()
                || p.len() > 200
                || !p.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_' | b'/')))
        {
            return Err(format!("target.prefix {p:?} must be 1..200 characters of A-Z a-z 0-9 . - _ /"));
        }
        if self.jobs == 0 || self.jobs > 1024 {
            return Err(format!("target.jobs must be 1..1024, got {}", self.jobs));
        }
        if self.io_threads == 0 || self.io_threads > 64 {
            return Err(format!("target.io_threads must be 1..64, got {}", self.io_threads));
        }
        crate::spec::positive("target.connect_timeout_s", self.connect_timeout_s)?;
        if self.max_keys == 0 || self.max_keys > 1000 {
            return Err(format!("target.max_keys must be 1..1000, got {}", self.max_keys));
        }
        if self.objects == Some(0) || self.object_size == Some(0) {
            return Err("target.objects and target.object_size must be positive when given".into());
        }
        if self.range.is_some() && self.op != S3Op::Get {
            return Err("target.range applies to get only".into());
        }
        if let Some(r) = self.range {
            if r.size == 0 {
                return Err("target.range.size must be positive".into());
            }
            if verify && (r.size % 512 != 0 || r.offset.is_some_and(|o| o % 512 != 0)) {
                return Err("verify checks 512-byte blocks: target.range.size and offset must be multiples of 512".into());
            }
        }
        if self.prefill && self.op != S3Op::Put {
            return Err("target.prefill applies to put only".into());
        }
        let bounded = load.bounded();
        match self.op {
            S3Op::Put => {
                let os = *self.object_size.get_or_insert(4 << 20);
                if os > MAX_OBJECT {
                    return Err(format!("target.object_size {os} is above S3's 5 GiB single PUT limit"));
                }
                if self.pattern == Pattern::Rand && self.objects.is_none() {
                    return Err("s3 rand puts need target.objects (objects per job)".into());
                }
                if self.prefill && self.objects.is_none() {
                    return Err("target.prefill needs target.objects".into());
                }
                if !bounded && self.objects.is_none() {
                    return Err(
                        "an s3 put needs an end: load.duration_s, load.ops, load.bytes or target.objects".into()
                    );
                }
                if self.prefix.is_none() {
                    self.prefix = Some(default_prefix());
                }
            }
            op => {
                if self.prefix.is_none() {
                    return Err(format!("s3 {} needs target.prefix (the prefix of an earlier put)", op_name(op)));
                }
                if self.object_size.is_some() || self.objects.is_some() {
                    return Err(format!(
                        "s3 {} takes the object set from the metadata object: leave target.object_size and \
                         target.objects out",
                        op_name(op)
                    ));
                }
                if matches!(op, S3Op::Delete | S3Op::List) && verify {
                    return Err(format!("verify does not apply to {}", op_name(op)));
                }
                if op == S3Op::Delete && self.pattern == Pattern::Rand {
                    return Err("s3 delete is sequential only".into());
                }
                if op == S3Op::List && !bounded {
                    return Err("an s3 list needs an end: load.duration_s, load.ops or load.bytes".into());
                }
            }
        }
        Ok(())
    }
}

fn op_name(op: S3Op) -> &'static str {
    match op {
        S3Op::Put => "put",
        S3Op::Get => "get",
        S3Op::Head => "head",
        S3Op::Delete => "delete",
        S3Op::List => "list",
    }
}

fn default_prefix() -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    format!("fathom.{t}.{}", std::process::id())
}

/// The keys file: read here, kept in the signer only.
#[derive(Deserialize)]
struct Keys {
    access_key: Option<String>,
    secret_key: Option<String>,
    endpoint: Option<String>,
    region: Option<String>,
}

fn read_keys(path: &str) -> Result<Keys, Fatal> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Fatal::ceph(e.raw_os_error().unwrap_or(libc::EIO), format!("cannot read the keys file {path} (target.keys_file): {e}"))
    })?;
    // serde_json's messages name a line and column, never the text.
    let k: Keys = serde_json::from_str(&text).map_err(|e| {
        Fatal::ceph(libc::EINVAL, format!("the keys file {path} is not JSON with access_key and secret_key: {e}"))
    })?;
    if k.access_key.as_deref().is_none_or(str::is_empty) || k.secret_key.as_deref().is_none_or(str::is_empty) {
        return Err(Fatal::ceph(libc::EINVAL, format!("the keys file {path} needs both access_key and secret_key")));
    }
    Ok(k)
}

pub struct S3 {
    io: http::Io,
    net: &'static http::Net,
    keys_file: String,
    op: S3Op,
    pattern: Pattern,
    prefix: String,
    /// Where the set lives: put: the spec's buckets; reads: the metadata's.
    set_buckets: Vec<String>,
    /// This run's buckets (LIST, bucket creation, the metadata object's home).
    buckets: Vec<String>,
    created: Vec<String>,
    object_size: u64,
    /// Objects per write job: put: the spec's (None: unbounded); reads: the metadata's.
    objects: Option<u64>,
    /// Write jobs of the set.
    set_jobs: u64,
    jobs: u32,
    /// Per job (bounded puts) or one shared cursor (cursors[0]: passes over the whole set).
    cursors: Vec<u64>,
    /// Revisit the set when the run is bounded by time/ops/bytes rather than by the set.
    wrap: bool,
    /// Puts walk the whole set once with one cursor (a set and no other bound).
    one_pass: bool,
    prefill: bool,
    in_prefill: bool,
    /// Per write job: highest object written successfully, plus one.
    written: Vec<u64>,
    removed: u64,
    range: Option<RangeSpec>,
    list_query: String,
    copy_reads: bool,
    meta_timeout: Duration,
    region: String,
    payload: Payload,
    slots: usize,
    io_threads: usize,
}

impl S3 {
    pub fn open(t: &S3Spec, spec: &Spec) -> Result<Self, Fatal> {
        let keys = read_keys(&t.keys_file)?;
        let url = t.endpoint.clone().or(keys.endpoint.clone()).ok_or_else(|| {
            Fatal::spec(format!("no endpoint: set target.endpoint, or an endpoint in the keys file {}", t.keys_file))
        })?;
        let region = t.region.clone().or(keys.region.clone()).unwrap_or_else(|| "us-east-1".into());
        let ep = http::Endpoint::parse(&url).map_err(|m| Fatal::ceph(libc::EHOSTUNREACH, m))?;
        let tls = if ep.tls {
            let cfg = http::tls_config(t.ca_file.as_deref()).map_err(|m| Fatal::ceph(libc::EINVAL, m))?;
            // An IP address is checked against the certificate's IP SANs, a name against its DNS names.
            let name = match ep.host.parse::<std::net::IpAddr>() {
                Ok(ip) => rustls::pki_types::ServerName::from(ip),
                Err(_) => rustls::pki_types::ServerName::try_from(ep.host.clone())
                    .map_err(|e| Fatal::spec(format!("target.endpoint {url}: {e}")))?,
            };
            Some((cfg, name))
        } else {
            if t.ca_file.is_some() {
                return Err(Fatal::spec(format!("target.ca_file applies to an https endpoint, not {url}")));
            }
            None
        };
        let signer = sigv4::Signer::new(
            keys.access_key.expect("checked in read_keys"),
            keys.secret_key.expect("checked in read_keys"),
            region.clone(),
        );
        let slots = (t.jobs * spec.load.iodepth) as usize;
        let timeout = Duration::from_secs_f64(t.connect_timeout_s);
        let net = http::Net::new(ep, tls, timeout, signer, t.payload == Payload::Sha256, slots);
        let io = http::Io::start(net, slots, t.io_threads as usize).map_err(|(kind, msg)| connect_fatal(&url, t, kind, &msg))?;
        let prefix = t.prefix.clone().expect("validated: prefix set");
        let list_query = format!("list-type=2&max-keys={}&prefix={}", t.max_keys, sigv4::encode(&format!("{prefix}/")));
        let mut s = S3 {
            io,
            net,
            keys_file: t.keys_file.clone(),
            op: t.op,
            pattern: t.pattern,
            prefix,
            set_buckets: t.buckets.clone(),
            buckets: t.buckets.clone(),
            created: Vec::new(),
            object_size: t.object_size.unwrap_or(0),
            objects: t.objects,
            set_jobs: t.jobs as u64,
            jobs: t.jobs,
            cursors: vec![0; t.jobs as usize],
            wrap: spec.load.bounded(),
            one_pass: t.op == S3Op::Put && t.objects.is_some() && !spec.load.bounded(),
            prefill: t.prefill,
            in_prefill: false,
            written: vec![0; t.jobs as usize],
            removed: 0,
            range: t.range,
            list_query,
            copy_reads: spec.verify,
            meta_timeout: Duration::from_secs_f64(spec.stall_timeout_s),
            region,
            payload: t.payload,
            slots,
            io_threads: t.io_threads.min(slots.max(1) as u32) as usize,
        };
        let mut unique = t.buckets.clone();
        unique.sort();
        unique.dedup();
        if t.create_buckets {
            for b in &unique {
                s.create_bucket(b, t.location_constraint.as_deref())?;
            }
            s.created = unique.clone();
        }
        for b in &unique {
            s.probe_bucket(b)?;
        }
        if t.op != S3Op::Put && t.op != S3Op::List {
            s.read_meta()?;
        }
        if let Some(r) = s.range {
            let end = r.offset.unwrap_or(0) + r.size;
            if end > s.object_size {
                return Err(Fatal::spec(format!(
                    "target.range ({} bytes at {}) reaches past the objects of prefix {} ({} bytes)",
                    r.size,
                    r.offset.unwrap_or(0),
                    s.prefix,
                    s.object_size
                )));
            }
        }
        Ok(s)
    }

    fn call(&self, method: Method, path: String, query: String, body: Bytes) -> Result<http::Response, Fatal> {
        let what = format!("{method} {path}");
        self.io.call(http::Req { method, path, query, range: None, body }, self.meta_timeout).map_err(|e| {
            let hint = if e == ErrKind::Timeout {
                format!("no answer within {} s: is the S3 endpoint overloaded or the cluster full?", self.meta_timeout.as_secs_f64())
            } else {
                e.describe()
            };
            Fatal { kind: e.name(), message: format!("{what} at {} failed: {hint}", self.net.ep.url), code: 3 }
        })
    }

    /// An HTTP error of a setup request, named, with the likely fix.
    fn http_fatal(&self, what: &str, r: &http::Response) -> Fatal {
        let kind = ErrKind::Http { status: r.status, code: r.code.clone() };
        let fix = match (r.status, r.code.as_str()) {
            (403, "SignatureDoesNotMatch") => format!("the secret key in {} does not match its access key", self.keys_file),
            (403, "InvalidAccessKeyId") => format!("the endpoint knows no user with the access key in {}", self.keys_file),
            (403, _) => format!("the keys in {} are refused or lack permission", self.keys_file),
            (404, "NoSuchBucket") => "create the bucket first, or set target.create_buckets".to_string(),
            (503, _) => "the endpoint is overloaded or unavailable".to_string(),
            _ => "see the endpoint's log".to_string(),
        };
        Fatal { kind: kind.name(), message: format!("{what} at {}: {} ({fix})", self.net.ep.url, kind.name()), code: 3 }
    }

    fn create_bucket(&self, bucket: &str, location: Option<&str>) -> Result<(), Fatal> {
        let body = match location {
            Some(l) => Bytes::from(format!(
                "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
                 <LocationConstraint>{l}</LocationConstraint></CreateBucketConfiguration>"
            )),
            None => Bytes::new(),
        };
        let r = self.call(Method::PUT, format!("/{bucket}"), String::new(), body)?;
        // 409: it exists; the probe that follows tells whether it is ours.
        if (200..300).contains(&r.status) || r.status == 409 {
            return Ok(());
        }
        Err(self.http_fatal(&format!("creating bucket {bucket}"), &r))
    }

    /// A LIST of no keys: the bucket exists and the keys are accepted.
    fn probe_bucket(&self, bucket: &str) -> Result<(), Fatal> {
        let r = self.call(Method::GET, format!("/{bucket}"), "list-type=2&max-keys=0".into(), Bytes::new())?;
        if (200..300).contains(&r.status) {
            return Ok(());
        }
        Err(self.http_fatal(&format!("bucket {bucket}"), &r))
    }

    fn meta_path(&self) -> String {
        format!("/{}/{}.meta", self.buckets[0], self.prefix)
    }

    fn read_meta(&mut self) -> Result<(), Fatal> {
        let r = self.call(Method::GET, self.meta_path(), String::new(), Bytes::new())?;
        let (bucket, prefix) = (&self.buckets[0], &self.prefix);
        if r.status == 404 && r.code == "NoSuchKey" {
            return Err(Fatal::ceph(
                libc::ENOENT,
                format!("nothing to read for prefix {prefix} in bucket {bucket}: run a put with no cleanup first"),
            ));
        }
        if !(200..300).contains(&r.status) {
            return Err(self.http_fatal(&format!("reading {prefix}.meta in bucket {bucket}"), &r));
        }
        let bad = |what: &str| Fatal::ceph(libc::EINVAL, format!("{prefix}.meta in bucket {bucket} is not fathom metadata: {what}"));
        let m: Value = serde_json::from_slice(&r.body).map_err(|e| bad(&e.to_string()))?;
        let objects = m["objects"].as_u64().unwrap_or(0);
        let size = m["object_size"].as_u64().unwrap_or(0);
        let jobs = m["jobs"].as_u64().unwrap_or(0);
        let buckets: Vec<String> =
            m["buckets"].as_array().map(|a| a.iter().filter_map(|b| b.as_str().map(String::from)).collect()).unwrap_or_default();
        if objects == 0 || size == 0 || jobs == 0 || buckets.is_empty() {
            return Err(Fatal::ceph(
                libc::ENOENT,
                format!("nothing to read for prefix {prefix} in bucket {bucket}: the put stage wrote no objects"),
            ));
        }
        if let Some(b) = buckets.iter().find(|b| !valid_bucket(b)) {
            return Err(bad(&format!("bucket {b:?}")));
        }
        (self.objects, self.object_size, self.set_jobs, self.set_buckets) = (Some(objects), size, jobs, buckets);
        // Reads bounded by time/ops/bytes revisit the set; otherwise one pass. Delete: one pass.
        self.wrap = self.wrap && self.op != S3Op::Delete;
        Ok(())
    }

    /// (bucket, key path) of object `n` of write job `wj`: `/<bucket>/<prefix>/<wj>/<n>`.
    fn object_path(&self, obj: u64) -> String {
        let (wj, n) = (obj >> N_BITS, obj & ((1 << N_BITS) - 1));
        let b = &self.set_buckets[(wj % self.set_buckets.len() as u64) as usize];
        format!("/{b}/{}/{wj}/{n}", self.prefix)
    }

    /// The next object of the whole set (reads, and puts in one pass or prefill):
    /// None when a pass is over and the run does not revisit the set.
    fn next_in_set(&mut self, rng: &mut Rng, rand: bool, wrap: bool) -> Option<u64> {
        let per = self.objects.unwrap_or(0);
        let total = self.set_jobs * per;
        if total == 0 {
            return None;
        }
        let g = if rand {
            rng.below(total)
        } else {
            let mut g = self.cursors[0];
            if g >= total {
                if !wrap {
                    return None;
                }
                g %= total;
            }
            self.cursors[0] += 1;
            g
        };
        Some(((g / per) << N_BITS) | (g % per))
    }
}

/// A connection failure at open, named, with what to check.
fn connect_fatal(url: &str, t: &S3Spec, kind: ErrKind, msg: &str) -> Fatal {
    let message = match &kind {
        ErrKind::Tls(_) => format!(
            "TLS with {url} failed: {msg} ({}): give the CA certificate that signed the endpoint's certificate as \
             target.ca_file{}",
            kind.name(),
            t.ca_file.as_deref().map(|c| format!(" (now {c})")).unwrap_or_default()
        ),
        _ => format!(
            "cannot connect to {url}: {msg} ({}): is the S3 endpoint up and reachable? (target.endpoint, \
             target.connect_timeout_s {} s)",
            kind.name(),
            t.connect_timeout_s
        ),
    };
    Fatal { kind: kind.name(), message, code: 3 }
}

impl Target for S3 {
    fn kinds(&self) -> Vec<OpKind> {
        vec![match self.op {
            S3Op::Put => OpKind::Write,
            S3Op::Get => OpKind::Read,
            S3Op::Head => OpKind::Stat,
            S3Op::Delete => OpKind::Remove,
            S3Op::List => OpKind::List,
        }]
    }

    fn phases(&self, kind: OpKind) -> &'static [Phase] {
        match kind {
            OpKind::Read => &[Phase::Hdr, Phase::Ttfb],
            OpKind::Write => &[Phase::Hdr, Phase::Server],
            _ => &[Phase::Hdr],
        }
    }

    fn buf_len(&self) -> usize {
        match self.op {
            S3Op::Put => self.object_size as usize,
            S3Op::Get => self.range.map_or(self.object_size, |r| r.size) as usize,
            _ => 0,
        }
    }

    fn jobs(&self) -> u32 {
        self.jobs
    }

    fn begin_prefill(&mut self) -> bool {
        if self.op == S3Op::Put && self.prefill && self.objects.is_some() {
            self.in_prefill = true;
            self.cursors.iter_mut().for_each(|c| *c = 0);
            true
        } else {
            false
        }
    }

    fn begin_main(&mut self) {
        self.in_prefill = false;
        self.cursors.iter_mut().for_each(|c| *c = 0);
    }

    fn next_op(&mut self, s: &mut Slot, rng: &mut Rng) -> bool {
        let j = s.job as u64;
        let (kind, obj, offset, len) = if self.in_prefill {
            let Some(obj) = self.next_in_set(rng, false, false) else { return false };
            (OpKind::Write, obj, 0, self.object_size)
        } else {
            match self.op {
                S3Op::Put if self.one_pass => {
                    let Some(obj) = self.next_in_set(rng, false, false) else { return false };
                    (OpKind::Write, obj, 0, self.object_size)
                }
                S3Op::Put => {
                    let n = match (self.pattern, self.objects) {
                        (Pattern::Rand, Some(per)) => rng.below(per),
                        (_, per) => {
                            let c = &mut self.cursors[j as usize];
                            let n = per.map_or(*c, |p| *c % p);
                            *c += 1;
                            n
                        }
                    };
                    (OpKind::Write, (j << N_BITS) | n, 0, self.object_size)
                }
                S3Op::List => (OpKind::List, j, 0, 0),
                op => {
                    let Some(obj) = self.next_in_set(rng, self.pattern == Pattern::Rand, self.wrap) else {
                        return false;
                    };
                    match op {
                        S3Op::Get => match self.range {
                            None => (OpKind::Read, obj, 0, self.object_size),
                            Some(r) => {
                                let off = r.offset.unwrap_or_else(|| rng.below(self.object_size / r.size) * r.size);
                                (OpKind::Read, obj, off, r.size)
                            }
                        },
                        S3Op::Head => (OpKind::Stat, obj, 0, 0),
                        _ => (OpKind::Remove, obj, 0, 0),
                    }
                }
            }
        };
        s.kind = kind;
        s.obj = obj;
        s.offset = offset;
        s.len = len as usize;
        true
    }

    fn submit(&mut self, s: &mut Slot) -> Result<(), ErrKind> {
        let (method, path, query, range, body) = match s.kind {
            OpKind::Write => {
                // SAFETY: the slot's buffer lives for the process (leaked) and the engine does not
                // touch it until the op completes, so hyper may send from it without a copy.
                let data: &'static [u8] = unsafe { std::slice::from_raw_parts(s.buf.as_ptr(), s.len) };
                (Method::PUT, self.object_path(s.obj), String::new(), None, Bytes::from_static(data))
            }
            OpKind::Read => {
                let range = self.range.map(|_| (s.offset, s.offset + s.len as u64 - 1));
                (Method::GET, self.object_path(s.obj), String::new(), range, Bytes::new())
            }
            OpKind::Stat => (Method::HEAD, self.object_path(s.obj), String::new(), None, Bytes::new()),
            OpKind::Remove => (Method::DELETE, self.object_path(s.obj), String::new(), None, Bytes::new()),
            _ => {
                let b = &self.buckets[(s.obj % self.buckets.len() as u64) as usize];
                (Method::GET, format!("/{b}"), self.list_query.clone(), None, Bytes::new())
            }
        };
        let copy = s.kind == OpKind::Read && self.copy_reads;
        let op = http::Op {
            req: http::Req { method, path, query, range, body },
            copy_to: if copy { s.buf.as_mut_ptr() } else { std::ptr::null_mut() },
            len: s.buf.len(),
            done: s.done,
        };
        self.io.send(s.done.index as usize, op)
    }

    fn reap(&mut self, s: &mut Slot) -> Result<u64, ErrKind> {
        let o = std::mem::take(&mut *self.net.outcomes[s.done.index as usize].lock().unwrap_or_else(|p| p.into_inner()));
        // Phases from the op's latency origin (its intended start), like the total.
        if o.hdr_ns > 0 {
            s.phases[Phase::Hdr as usize] = o.hdr_ns.saturating_sub(s.intended_ns).max(1);
        }
        if s.kind == OpKind::Read && o.first_ns > 0 {
            s.phases[Phase::Ttfb as usize] = o.first_ns.saturating_sub(s.intended_ns).max(1);
        }
        if s.kind == OpKind::Write && o.sent_ns > 0 && o.hdr_ns > o.sent_ns {
            s.phases[Phase::Server as usize] = o.hdr_ns - o.sent_ns;
        }
        match (s.kind, o.result) {
            (OpKind::Write, Ok(_)) => Ok(s.len as u64),
            (_, r) => r,
        }
    }

    fn on_success(&mut self, s: &Slot) {
        match s.kind {
            OpKind::Write => {
                let (wj, n) = ((s.obj >> N_BITS) as usize, s.obj & ((1 << N_BITS) - 1));
                if let Some(w) = self.written.get_mut(wj) {
                    *w = (*w).max(n + 1);
                }
            }
            OpKind::Remove => self.removed += 1,
            _ => {}
        }
    }

    fn describe(&self, s: &Slot) -> String {
        match s.kind {
            OpKind::List => format!("bucket {} prefix {}/", self.buckets[(s.obj % self.buckets.len() as u64) as usize], self.prefix),
            _ => self.object_path(s.obj)[1..].to_string(),
        }
    }

    fn finish(&mut self) -> Result<Vec<(String, Value)>, Fatal> {
        let meta = format!("{}.meta", self.prefix);
        let objects = match self.op {
            S3Op::Put => {
                // A prefilled or fully written set is whole; otherwise what every job has, up to its highest object.
                let count = if self.prefill { self.objects.unwrap_or(0) } else { self.written.iter().copied().min().unwrap_or(0) };
                if count > 0 {
                    let m = json!({"fathom_meta": 1, "objects": count, "object_size": self.object_size,
                                   "jobs": self.set_jobs, "buckets": self.set_buckets, "prefix": self.prefix});
                    let r = self.call(Method::PUT, self.meta_path(), String::new(), Bytes::from(m.to_string()))?;
                    if !(200..300).contains(&r.status) {
                        return Err(self.http_fatal(&format!("writing {meta} in bucket {}", self.buckets[0]), &r));
                    }
                }
                json!({"prefix": self.prefix, "count": count, "jobs": self.set_jobs, "object_size": self.object_size,
                       "buckets": self.set_buckets, "meta": meta})
            }
            S3Op::Delete => {
                let r = self.call(Method::DELETE, self.meta_path(), String::new(), Bytes::new())?;
                if !(200..300).contains(&r.status) && r.status != 404 {
                    return Err(self.http_fatal(&format!("removing {meta} in bucket {}", self.buckets[0]), &r));
                }
                json!({"prefix": self.prefix, "removed": self.removed})
            }
            S3Op::List => json!({"prefix": self.prefix, "buckets": self.buckets}),
            _ => json!({"prefix": self.prefix, "count": self.objects, "jobs": self.set_jobs,
                        "object_size": self.object_size, "buckets": self.set_buckets}),
        };
        let tls = self
            .net
            .tls_info
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(p, c)| json!({"protocol": p, "cipher": c}));
        let s3 = json!({
            "endpoint": self.net.ep.url, "region": self.region,
            "payload": match self.payload { Payload::Unsigned => sigv4::UNSIGNED, Payload::Sha256 => "sha256" },
            "connections": self.slots, "io_threads": self.io_threads,
            "reconnects": self.net.reconnects.load(std::sync::atomic::Ordering::Relaxed),
            "tls": tls, "buckets_created": self.created,
        });
        Ok(vec![("objects".into(), objects), ("s3".into(), s3)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse;
    use crate::target::TargetSpec;

    fn spec(target: &str, rest: &str) -> Result<Spec, String> {
        parse(&format!(
            r#"{{"protocol":2,"target":{{"kind":"s3","keys_file":"/k.json","buckets":["b-0"]{target}}}{rest}}}"#
        ))
    }

    fn s3(s: &Spec) -> &S3Spec {
        match &s.target {
            TargetSpec::S3(t) => t,
            other => panic!("not s3: {other:?}"),
        }
    }

    const D: &str = r#","load":{"duration_s":1}"#;

    #[test]
    fn put_gets_defaults() {
        let s = spec(r#","op":"put""#, D).unwrap();
        let t = s3(&s);
        assert_eq!(t.object_size, Some(4 << 20));
        assert!(t.prefix.as_ref().unwrap().starts_with("fathom."));
        assert_eq!((t.jobs, t.io_threads, t.max_keys, t.payload), (1, 1, 1000, Payload::Unsigned));
        assert_eq!((t.endpoint.as_deref(), t.region.as_deref(), t.connect_timeout_s), (None, None, 10.0));
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(parse(&text).unwrap(), s);
        // A set with no other bound is one pass.
        assert!(spec(r#","op":"put","objects":4"#, "").is_ok());
    }

    #[test]
    fn rules_name_the_field() {
        for (target, rest, field) in [
            (r#","op":"put","buckets":[]"#, D, "buckets"),
            (r#","op":"put","buckets":["Bad_Name"]"#, D, "bucket name"),
            (r#","op":"put","buckets":["ab"]"#, D, "bucket name"),
            (r#","op":"put","keys_file":"""#, D, "keys_file"),
            (r#","op":"put","endpoint":"ftp://x""#, D, "endpoint"),
            (r#","op":"put","location_constraint":"default:p""#, D, "create_buckets"),
            (r#","op":"put","prefix":"a b""#, D, "prefix"),
            (r#","op":"put","jobs":0"#, D, "jobs"),
            (r#","op":"put","io_threads":0"#, D, "io_threads"),
            (r#","op":"put","connect_timeout_s":0"#, D, "connect_timeout_s"),
            (r#","op":"put","max_keys":1001"#, D, "max_keys"),
            (r#","op":"put","object_size":6000000000"#, D, "5 GiB"),
            (r#","op":"put","pattern":"rand""#, D, "objects"),
            (r#","op":"put","prefill":true"#, D, "objects"),
            (r#","op":"put""#, "", "end"),
            (r#","op":"put","range":{"size":10}"#, D, "range"),
            (r#","op":"get""#, D, "prefix"),
            (r#","op":"get","prefix":"p","object_size":10"#, D, "metadata"),
            (r#","op":"get","prefix":"p","prefill":true"#, D, "prefill"),
            (r#","op":"get","prefix":"p","range":{"size":0}"#, D, "range.size"),
            (r#","op":"delete","prefix":"p","pattern":"rand""#, D, "sequential"),
            (r#","op":"list","prefix":"p""#, "", "end"),
            (r#","op":"post""#, D, "post"),
            (r#","op":"put","pool":"p""#, D, "pool"),
            (r#","op":"put","secret_key":"x""#, D, "secret_key"),
        ] {
            let e = spec(target, rest).unwrap_err();
            assert!(e.contains(field), "{target}: {e}");
        }
        let e = spec(r#","op":"get","prefix":"p","range":{"size":100}"#, r#","verify":true,"load":{"ops":1}"#).unwrap_err();
        assert!(e.contains("512"), "{e}");
        let e = spec(r#","op":"delete","prefix":"p""#, r#","verify":true"#).unwrap_err();
        assert!(e.contains("verify"), "{e}");
        assert!(spec(r#","op":"get","prefix":"p","range":{"size":4096,"offset":8192}"#, r#","verify":true"#).is_ok());
    }

    #[test]
    fn keys_files_are_checked_without_echoing_them() {
        let dir = std::env::temp_dir().join(format!("fathom-s3-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("k.json");
        std::fs::write(&f, r#"{"access_key":"AK","secret_key":""}"#).unwrap();
        let e = read_keys(f.to_str().unwrap()).err().unwrap();
        assert!(e.message.contains("secret_key") && !e.message.contains("AK"), "{}", e.message);
        std::fs::write(&f, "{\"access_key\":\"AK\",\"secret_key\":\"S3CRET\"").unwrap();
        let e = read_keys(f.to_str().unwrap()).err().unwrap();
        assert!(!e.message.contains("S3CRET"), "{}", e.message);
        std::fs::write(&f, r#"{"access_key":"AK","secret_key":"S3CRET","endpoint":"http://h:1"}"#).unwrap();
        assert_eq!(read_keys(f.to_str().unwrap()).ok().unwrap().endpoint.as_deref(), Some("http://h:1"));
        let e = read_keys(dir.join("none.json").to_str().unwrap()).err().unwrap();
        assert_eq!(e.kind, "ENOENT");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
