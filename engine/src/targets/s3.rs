//! S3 objects over HTTP/1.1 (Ceph RGW or any S3 endpoint): PUT, GET (whole
//! or a byte range), HEAD, DELETE and LIST, signed with SigV4 (sigv4.rs),
//! one keep-alive connection per slot (http.rs).
//!
//! The object set: job `j` owns keys `<prefix>/<j>/<n>` in bucket
//! `buckets[j % len]`. A put stage leaves `<prefix>.meta` in the first
//! bucket, so a later get, head or delete with the same prefix knows the
//! set (as the rados target does). Credentials come from a keys file; the
//! spec names the file only.
//!
//! `mixed` (warp's mixed benchmark): the set is put first (prefill, not
//! measured), then each op is drawn from the weights. Gets and heads read
//! the prefilled set only; puts write new objects after it; deletes remove
//! the oldest new object whose put completed. So no op can meet an object
//! that another op in flight is removing, and a 404 is always an error.

mod http;
mod sendfile;
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
    Mixed,
}

/// Relative weights of a mixed run's ops (warp's `--get-distrib` etc.).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Mix {
    #[serde(default)]
    pub get: u32,
    #[serde(default)]
    pub head: u32,
    #[serde(default)]
    pub put: u32,
    #[serde(default)]
    pub delete: u32,
}

impl Mix {
    fn total(&self) -> u64 {
        self.get as u64 + self.head as u64 + self.put as u64 + self.delete as u64
    }

    /// The op for a draw in 0..total.
    fn pick(&self, mut x: u64) -> S3Op {
        for (w, op) in [(self.get, S3Op::Get), (self.head, S3Op::Head), (self.put, S3Op::Put)] {
            if x < w as u64 {
                return op;
            }
            x -= w as u64;
        }
        S3Op::Delete
    }
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

/// Object sizes drawn per object (put, mixed): `{"buckets": [[size, weight], ...]}`
/// or `{"log_uniform": {"min": a, "max": b}}` (log2 of the size uniform, as warp's
/// `--obj.randsize`). An object's size is a function of its name, so reads of the set
/// know it again from the metadata.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SizeDist {
    Buckets(Vec<(u64, u32)>),
    LogUniform { min: u64, max: u64 },
}

impl SizeDist {
    fn validate(&self) -> Result<(), String> {
        let (lo, hi) = self.range();
        match self {
            SizeDist::Buckets(b) if b.is_empty() || b.iter().all(|&(_, w)| w == 0) => {
                return Err("target.sizes.buckets needs a positive weight".into());
            }
            SizeDist::LogUniform { min, max } if min > max => {
                return Err(format!("target.sizes.log_uniform: min {min} is above max {max}"));
            }
            _ => {}
        }
        if lo == 0 || hi > MAX_OBJECT {
            return Err(format!("target.sizes: sizes must be 1 byte .. 5 GiB, got {lo} .. {hi}"));
        }
        Ok(())
    }

    /// (smallest, largest) size.
    fn range(&self) -> (u64, u64) {
        match self {
            SizeDist::Buckets(b) => {
                let live = b.iter().filter(|&&(_, w)| w > 0).map(|&(s, _)| s);
                (live.clone().min().unwrap_or(0), live.max().unwrap_or(0))
            }
            SizeDist::LogUniform { min, max } => (*min, *max),
        }
    }

    /// The size of the object with this name (job << N_BITS | n).
    fn size_of(&self, obj: u64) -> u64 {
        let h = splitmix(obj ^ 0x5eed_5133_c0de_f00d);
        match self {
            SizeDist::Buckets(b) => {
                let total: u64 = b.iter().map(|&(_, w)| w as u64).sum();
                let mut x = h % total;
                for &(size, w) in b {
                    if x < w as u64 {
                        return size;
                    }
                    x -= w as u64;
                }
                unreachable!("x < total")
            }
            SizeDist::LogUniform { min, max } => {
                let u = (h >> 11) as f64 / (1u64 << 53) as f64;
                let (a, b) = ((*min as f64).ln(), (*max as f64).ln());
                ((a + u * (b - a)).exp().round() as u64).clamp(*min, *max)
            }
        }
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// PUTs of `threshold` bytes or more go as multipart uploads of `part_size`
/// parts, `parts_in_flight` of them at a time (each on its own connection of the slot).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Multipart {
    pub threshold: u64,
    pub part_size: u64,
    #[serde(default = "one")]
    pub parts_in_flight: u32,
}

/// S3's smallest part (all but the last), and most parts per upload.
const MIN_PART: u64 = 5 << 20;
const MAX_PARTS: u64 = 10_000;

/// An explicit retry policy: a failed request whose kind is in `on` (`"HTTP
/// 503"` covers every 503, `"HTTP 503 SlowDown"` that code only, or an errno
/// name) is sent again, at most `max` times, after `backoff_ms` doubling per
/// retry (at most 10 s). Every retry is counted by kind (`summary.s3.retries`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Retry {
    pub max: u32,
    pub on: Vec<String>,
    #[serde(default = "hundred")]
    pub backoff_ms: f64,
}

fn hundred() -> f64 {
    100.0
}

impl Retry {
    pub fn covers(&self, e: &ErrKind) -> bool {
        let name = e.name();
        self.on.iter().any(|k| name == *k || name.starts_with(&format!("{k} ")))
    }

    pub fn backoff(&self, attempt: u32) -> Duration {
        Duration::from_secs_f64((self.backoff_ms / 1e3 * 2f64.powi(attempt.min(20) as i32)).min(10.0))
    }
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
    /// mixed: the op weights.
    #[serde(default)]
    pub mix: Option<Mix>,
    /// Sizes per object (put, mixed) instead of one object_size.
    #[serde(default)]
    pub sizes: Option<SizeDist>,
    #[serde(default)]
    pub multipart: Option<Multipart>,
    /// None: no request is ever retried.
    #[serde(default)]
    pub retry: Option<Retry>,
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
        if self.prefill && !matches!(self.op, S3Op::Put | S3Op::Mixed) {
            return Err("target.prefill applies to put only".into());
        }
        if let Some(d) = &self.sizes {
            if !matches!(self.op, S3Op::Put | S3Op::Mixed) {
                return Err("target.sizes applies to put and mixed (reads take the sizes from the metadata)".into());
            }
            if self.object_size.is_some() {
                return Err("give target.object_size or target.sizes, not both".into());
            }
            d.validate()?;
            if verify && d.range().0 < 512 {
                return Err("verify needs objects of at least 512 bytes: raise the smallest of target.sizes".into());
            }
            self.object_size = Some(d.range().1);
        }
        if let Some(m) = &self.multipart {
            if !matches!(self.op, S3Op::Put | S3Op::Mixed) {
                return Err("target.multipart applies to put and mixed".into());
            }
            if m.part_size < MIN_PART || m.part_size > MAX_OBJECT {
                return Err(format!("target.multipart.part_size must be 5 MiB .. 5 GiB (S3's limits), got {}", m.part_size));
            }
            if m.threshold == 0 {
                return Err("target.multipart.threshold must be positive".into());
            }
            if m.parts_in_flight == 0 || m.parts_in_flight > 64 {
                return Err(format!("target.multipart.parts_in_flight must be 1..64, got {}", m.parts_in_flight));
            }
        }
        if let Some(r) = &self.retry
            && (r.max == 0 || r.max > 100 || r.on.is_empty() || !(r.backoff_ms >= 0.0 && r.backoff_ms.is_finite()))
        {
            return Err("target.retry needs max 1..100, a list of error kinds in on, and backoff_ms >= 0".into());
        }
        if self.mix.is_some() != (self.op == S3Op::Mixed) {
            return Err("target.mix (the op weights) goes with op mixed, and only with it".into());
        }
        let bounded = load.bounded();
        match self.op {
            S3Op::Mixed => {
                let os = *self.object_size.get_or_insert(4 << 20);
                if os > self.max_object() {
                    return Err(format!("target.object_size {os} is above S3's 5 GiB single PUT limit"));
                }
                if self.mix.is_some_and(|m| m.total() == 0) {
                    return Err("target.mix needs a positive weight for at least one op".into());
                }
                if self.objects.is_none() {
                    return Err("s3 mixed needs target.objects (objects per job, put before the run)".into());
                }
                if !bounded {
                    return Err("an s3 mixed run needs an end: load.duration_s, load.ops or load.bytes".into());
                }
                self.prefill = true;
                if self.prefix.is_none() {
                    self.prefix = Some(default_prefix());
                }
            }
            S3Op::Put => {
                let os = *self.object_size.get_or_insert(4 << 20);
                if os > self.max_object() {
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

impl S3Spec {
    /// The largest object a put may write: 5 GiB in one PUT, more in parts.
    fn max_object(&self) -> u64 {
        match self.multipart {
            Some(m) if m.threshold <= MAX_OBJECT => MAX_OBJECT.max(m.part_size * MAX_PARTS),
            _ => MAX_OBJECT,
        }
    }
}

fn op_name(op: S3Op) -> &'static str {
    match op {
        S3Op::Put => "put",
        S3Op::Get => "get",
        S3Op::Head => "head",
        S3Op::Delete => "delete",
        S3Op::List => "list",
        S3Op::Mixed => "mixed",
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
    mix: Option<Mix>,
    /// Per-object sizes (None: every object is object_size, the largest otherwise).
    sizes: Option<SizeDist>,
    multipart: Option<Multipart>,
    /// mixed, per job: the next new object (after the prefilled set).
    new_next: Vec<u64>,
    /// mixed, per job: new objects whose put completed, oldest first (what deletes take).
    new_done: Vec<std::collections::VecDeque<u64>>,
    /// mixed: deletes issued (the set has holes when > 0).
    deletes: u64,
    /// Buckets the set's put created (from the metadata; delete removes them once empty).
    meta_created: Vec<String>,
    list_query: String,
    copy_reads: bool,
    /// Without verify, every PUT sends from this one buffer and slots hold
    /// none: nothing writes into a body then, and 64 slots of 256 MiB objects
    /// would cost 16 GiB of memory, and the time to fill it, for one body's worth.
    body: Option<&'static [u8]>,
    /// How PUT bodies went out, for the summary: "slot" (each slot's own buffer, verify
    /// headers), "shared" (the one buffer, written), "sendfile" (the one buffer, from its memfd).
    put_body: &'static str,
    meta_timeout: Duration,
    /// Setup and finishing requests answered 503 and sent again (see `call`).
    setup_503s: std::cell::Cell<u64>,
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
        let net = http::Net::new(ep, tls, timeout, signer, t.payload == Payload::Sha256, t.retry.clone(), slots);
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
            mix: t.mix,
            sizes: t.sizes.clone(),
            multipart: t.multipart,
            new_next: vec![t.objects.unwrap_or(0); t.jobs as usize],
            new_done: vec![std::collections::VecDeque::new(); t.jobs as usize],
            deletes: 0,
            meta_created: Vec::new(),
            list_query,
            copy_reads: spec.verify,
            body: None,
            put_body: "slot",
            meta_timeout: Duration::from_secs_f64(spec.stall_timeout_s),
            setup_503s: std::cell::Cell::new(0),
            region,
            payload: t.payload,
            slots,
            io_threads: t.io_threads.min(slots.max(1) as u32) as usize,
        };
        let mut unique = t.buckets.clone();
        unique.sort();
        unique.dedup();
        for b in &unique {
            // Created only when missing, so `buckets_created` names what this run made (and may remove).
            if let Err(e) = s.probe_bucket(b) {
                if !(t.create_buckets && e.kind == "HTTP 404 NoSuchBucket") {
                    return Err(e);
                }
                s.create_bucket(b, t.location_constraint.as_deref())?;
                s.created.push(b.clone());
                s.probe_bucket(b)?;
            }
        }
        if !matches!(t.op, S3Op::Put | S3Op::List | S3Op::Mixed) {
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
        if !s.copy_reads && matches!(s.op, S3Op::Put | S3Op::Mixed) {
            let len = s.object_size as usize;
            let fill = |b: &mut [u8]| crate::io::fill_random(b, &mut crate::rng::Rng::new(0x5eed));
            s.body = match sendfile::body(len, fill) {
                Some(b) => {
                    s.put_body = if s.net.tls.is_none() { "sendfile" } else { "shared" };
                    Some(b)
                }
                None => {
                    s.put_body = "shared";
                    Some(crate::io::shared_random(len))
                }
            };
        }
        Ok(s)
    }

    /// A setup or finishing request (bucket, metadata). RGW answers 503 while its request throttle is full, also
    /// just after a point's last op, on a loaded host: such a request is sent again, after 20 ms doubling to 1 s,
    /// until `meta_timeout`; the last answer stands. Counted (`summary.s3.setup_503s`); never an op of the point.
    fn call(&self, method: Method, path: String, query: String, body: Bytes) -> Result<http::Response, Fatal> {
        let what = format!("{method} {path}");
        let deadline = std::time::Instant::now() + self.meta_timeout;
        let mut pause = Duration::from_millis(20);
        loop {
            let req = http::Req { method: method.clone(), path: path.clone(), query: query.clone(), range: None, body: body.clone() };
            let r = self.io.call(req, self.meta_timeout).map_err(|e| {
                let hint = if e == ErrKind::Timeout {
                    format!("no answer within {} s: is the S3 endpoint overloaded or the cluster full?", self.meta_timeout.as_secs_f64())
                } else {
                    e.describe()
                };
                Fatal { kind: e.name(), message: format!("{what} at {} failed: {hint}", self.net.ep.url), code: 3 }
            })?;
            if r.status != 503 || std::time::Instant::now() + pause > deadline {
                return Ok(r);
            }
            self.setup_503s.set(self.setup_503s.get() + 1);
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(1));
        }
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
        if m["holes"].as_bool() == Some(true) && self.op != S3Op::Delete {
            return Err(Fatal::ceph(
                libc::EINVAL,
                format!(
                    "the objects of prefix {prefix} in bucket {bucket} have holes (a mixed run deleted some): \
                     only a delete reads that set"
                ),
            ));
        }
        self.sizes = match m.get("sizes") {
            None | Some(Value::Null) => None,
            Some(d) => Some(serde_json::from_value(d.clone()).map_err(|e| bad(&format!("sizes: {e}")))?),
        };
        if self.sizes.is_some() && self.range.is_some() {
            return Err(Fatal::spec(format!(
                "target.range: the objects of prefix {prefix} have sizes of their own (target.sizes); read them whole"
            )));
        }
        self.meta_created = m["buckets_created"]
            .as_array()
            .map(|a| a.iter().filter_map(|b| b.as_str().map(String::from)).filter(|b| valid_bucket(b)).collect())
            .unwrap_or_default();
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

    /// A mixed run's next op for job `j`: drawn from the weights; a delete
    /// with no completed new object of the job to take becomes a put.
    fn next_mixed(&mut self, j: u64, rng: &mut Rng) -> (OpKind, u64, u64, u64) {
        let m = self.mix.expect("validated: mixed has a mix");
        let mut op = m.pick(rng.below(m.total()));
        if op == S3Op::Delete {
            match self.new_done[j as usize].pop_front() {
                Some(n) => {
                    self.deletes += 1;
                    return (OpKind::Remove, (j << N_BITS) | n, 0, 0);
                }
                None => op = S3Op::Put,
            }
        }
        if op == S3Op::Put {
            let n = self.new_next[j as usize];
            self.new_next[j as usize] += 1;
            let obj = (j << N_BITS) | n;
            return (OpKind::Write, obj, 0, self.size_of(obj));
        }
        let obj = self.next_in_set(rng, true, true).expect("validated: mixed has a prefilled set");
        if op == S3Op::Get { (OpKind::Read, obj, 0, self.size_of(obj)) } else { (OpKind::Stat, obj, 0, 0) }
    }

    fn size_of(&self, obj: u64) -> u64 {
        self.sizes.as_ref().map_or(self.object_size, |d| d.size_of(obj))
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
        match (self.op, self.mix) {
            // The prefill puts, so write is always there.
            (S3Op::Mixed, Some(m)) => {
                let mut k = vec![OpKind::Write];
                for (w, kind) in [(m.get, OpKind::Read), (m.head, OpKind::Stat), (m.delete, OpKind::Remove)] {
                    if w > 0 {
                        k.push(kind);
                    }
                }
                k
            }
            (op, _) => vec![match op {
                S3Op::Put | S3Op::Mixed => OpKind::Write,
                S3Op::Get => OpKind::Read,
                S3Op::Head => OpKind::Stat,
                S3Op::Delete => OpKind::Remove,
                S3Op::List => OpKind::List,
            }],
        }
    }

    fn phases(&self, kind: OpKind) -> &'static [Phase] {
        match kind {
            OpKind::Read => &[Phase::Hdr, Phase::Ttfb],
            OpKind::Write => &[Phase::Hdr, Phase::Server],
            _ => &[Phase::Hdr],
        }
    }

    fn buf_len(&self) -> usize {
        // Slots need buffers only to write verify headers into and to check the bodies read.
        if !self.copy_reads {
            return 0;
        }
        match self.op {
            S3Op::Put | S3Op::Mixed => self.object_size as usize,
            S3Op::Get => self.range.map_or(self.object_size, |r| r.size) as usize,
            _ => 0,
        }
    }

    fn jobs(&self) -> u32 {
        self.jobs
    }

    fn begin_prefill(&mut self) -> bool {
        if matches!(self.op, S3Op::Put | S3Op::Mixed) && self.prefill && self.objects.is_some() {
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
            (OpKind::Write, obj, 0, self.size_of(obj))
        } else {
            match self.op {
                S3Op::Put if self.one_pass => {
                    let Some(obj) = self.next_in_set(rng, false, false) else { return false };
                    (OpKind::Write, obj, 0, self.size_of(obj))
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
                    let obj = (j << N_BITS) | n;
                    (OpKind::Write, obj, 0, self.size_of(obj))
                }
                S3Op::List => (OpKind::List, j, 0, 0),
                S3Op::Mixed => self.next_mixed(j, rng),
                op => {
                    let Some(obj) = self.next_in_set(rng, self.pattern == Pattern::Rand, self.wrap) else {
                        return false;
                    };
                    match op {
                        S3Op::Get => match self.range {
                            None => (OpKind::Read, obj, 0, self.size_of(obj)),
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
                let data: &'static [u8] = match self.body {
                    Some(b) => &b[..s.len],
                    None => unsafe { std::slice::from_raw_parts(s.buf.as_ptr(), s.len) },
                };
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
        let multipart = match self.multipart {
            Some(m) if s.kind == OpKind::Write && s.len as u64 >= m.threshold => Some((m.part_size, m.parts_in_flight)),
            _ => None,
        };
        let op = http::Op {
            req: http::Req { method, path, query, range, body },
            multipart,
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
                if self.op == S3Op::Mixed && !self.in_prefill && n >= self.objects.unwrap_or(0) {
                    self.new_done[wj].push_back(n);
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
            S3Op::Put | S3Op::Mixed => {
                // A prefilled or fully written set is whole; otherwise what every job has, up to its highest object.
                // Mixed: every name any job used (new objects follow the set), holes where deletes were.
                let count = if self.op == S3Op::Mixed {
                    self.new_next.iter().copied().max().unwrap_or(0)
                } else if self.prefill {
                    self.objects.unwrap_or(0)
                } else {
                    self.written.iter().copied().min().unwrap_or(0)
                };
                if count > 0 {
                    let mut m = json!({"fathom_meta": 1, "objects": count, "object_size": self.object_size,
                                   "jobs": self.set_jobs, "buckets": self.set_buckets, "prefix": self.prefix,
                                   "buckets_created": self.created, "sizes": self.sizes});
                    if self.deletes > 0 {
                        m["holes"] = json!(true);
                    }
                    let r = self.call(Method::PUT, self.meta_path(), String::new(), Bytes::from(m.to_string()))?;
                    if !(200..300).contains(&r.status) {
                        return Err(self.http_fatal(&format!("writing {meta} in bucket {}", self.buckets[0]), &r));
                    }
                }
                let mut o = json!({"prefix": self.prefix, "count": count, "jobs": self.set_jobs,
                                   "object_size": self.object_size, "buckets": self.set_buckets, "meta": meta});
                if self.op == S3Op::Mixed {
                    o["prefilled"] = json!(self.objects.unwrap_or(0));
                    o["deleted"] = json!(self.deletes);
                }
                o
            }
            S3Op::Delete => {
                let r = self.call(Method::DELETE, self.meta_path(), String::new(), Bytes::new())?;
                if !(200..300).contains(&r.status) && r.status != 404 {
                    return Err(self.http_fatal(&format!("removing {meta} in bucket {}", self.buckets[0]), &r));
                }
                // Then the buckets the put created, once empty: another user's object keeps one.
                let (mut removed, mut kept) = (Vec::new(), Vec::new());
                for b in std::mem::take(&mut self.meta_created) {
                    let r = self.call(Method::DELETE, format!("/{b}"), String::new(), Bytes::new())?;
                    match r.status {
                        200..300 | 404 => removed.push(b),
                        409 => kept.push(b),
                        _ => return Err(self.http_fatal(&format!("removing bucket {b}"), &r)),
                    }
                }
                json!({"prefix": self.prefix, "removed": self.removed, "buckets_removed": removed,
                       "buckets_kept": kept})
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
            "connections": self.slots, "io_threads": self.io_threads, "put_body": self.put_body,
            "reconnects": self.net.reconnects.load(std::sync::atomic::Ordering::Relaxed),
            "tls": tls, "buckets_created": self.created,
            "setup_503s": self.setup_503s.get(),
            "retry": self.net.retry, "retries": self.net.retries.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            "multipart": self.multipart.map(|m| json!({"threshold": m.threshold, "part_size": m.part_size,
                "parts_in_flight": m.parts_in_flight,
                "uploads": self.net.mp_uploads.load(std::sync::atomic::Ordering::Relaxed),
                "parts": self.net.mp_parts.load(std::sync::atomic::Ordering::Relaxed),
                "aborted": self.net.mp_aborted.load(std::sync::atomic::Ordering::Relaxed)})),
        });
        Ok(vec![("objects".into(), objects), ("s3".into(), s3)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse;
    use crate::targets::TargetSpec;

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
            (r#","op":"put","mix":{"get":1}"#, D, "mix"),
            (r#","op":"mixed","objects":4"#, D, "mix"),
            (r#","op":"mixed","mix":{"get":1}"#, D, "objects"),
            (r#","op":"mixed","objects":4,"mix":{"get":0}"#, D, "positive weight"),
            (r#","op":"mixed","objects":4,"mix":{"get":1}"#, "", "end"),
            (r#","op":"mixed","objects":4,"mix":{"post":1}"#, D, "post"),
            (r#","op":"put","sizes":{"buckets":[]}"#, D, "positive weight"),
            (r#","op":"put","sizes":{"log_uniform":{"min":10,"max":5}}"#, D, "above max"),
            (r#","op":"put","sizes":{"log_uniform":{"min":0,"max":5}}"#, D, "1 byte"),
            (r#","op":"put","object_size":5,"sizes":{"buckets":[[5,1]]}"#, D, "not both"),
            (r#","op":"get","prefix":"p","sizes":{"buckets":[[5,1]]}"#, D, "metadata"),
            (r#","op":"put","multipart":{"threshold":1,"part_size":1024}"#, D, "part_size"),
            (r#","op":"put","multipart":{"threshold":1,"part_size":5242880,"parts_in_flight":0}"#, D, "parts_in_flight"),
            (r#","op":"put","object_size":6000000000,"multipart":{"threshold":6000000000,"part_size":5242880}"#, D, "5 GiB"),
            (r#","op":"put","retry":{"max":0,"on":["HTTP 503"]}"#, D, "target.retry"),
            (r#","op":"put","retry":{"max":3,"on":[]}"#, D, "target.retry"),
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
    fn mixed_runs_prefill_and_draw_ops_by_weight() {
        let s = spec(r#","op":"mixed","objects":4,"mix":{"get":45,"head":30,"put":15,"delete":10}"#, D).unwrap();
        let t = s3(&s);
        assert!(t.prefill && t.object_size == Some(4 << 20) && t.prefix.is_some());
        let m = t.mix.unwrap();
        assert_eq!(m.total(), 100);
        let picks: Vec<S3Op> = [0, 44, 45, 74, 75, 89, 90, 99].iter().map(|&x| m.pick(x)).collect();
        use S3Op::*;
        assert_eq!(picks, vec![Get, Get, Head, Head, Put, Put, Delete, Delete]);
        let only_put = Mix { get: 0, head: 0, put: 3, delete: 0 };
        assert!((0..3).all(|x| only_put.pick(x) == Put));
    }

    #[test]
    fn sizes_are_a_function_of_the_object_and_follow_the_weights() {
        let d = SizeDist::Buckets(vec![(1000, 3), (5000, 1), (7, 0)]);
        let n = 40_000u64;
        let big = (0..n).filter(|&o| d.size_of(o) == 5000).count() as f64 / n as f64;
        assert!((0.23..0.27).contains(&big), "{big}");
        assert!((0..n).all(|o| matches!(d.size_of(o), 1000 | 5000)) && d.size_of(77) == d.size_of(77));
        assert_eq!(d.range(), (1000, 5000));
        let l = SizeDist::LogUniform { min: 1 << 10, max: 1 << 20 };
        let sizes: Vec<u64> = (0..n).map(|o| l.size_of(o)).collect();
        assert!(sizes.iter().all(|s| (1 << 10..=1 << 20).contains(s)));
        // log2 uniform: each of the ten octaves holds about a tenth
        let low = sizes.iter().filter(|&&s| s < 1 << 11).count() as f64 / n as f64;
        assert!((0.08..0.12).contains(&low), "{low}");
        let s = spec(r#","op":"put","sizes":{"log_uniform":{"min":1024,"max":1048576}}"#, D).unwrap();
        assert_eq!(s3(&s).object_size, Some(1 << 20));
        assert!(spec(r#","op":"put","sizes":{"buckets":[[100,1]]}"#, r#","verify":true,"load":{"ops":1}"#).is_err());
        let mp = r#","op":"put","object_size":6000000000,"multipart":{"threshold":5242880,"part_size":16777216}"#;
        assert!(spec(mp, D).is_ok());
    }

    #[test]
    fn retries_cover_the_named_kinds_with_a_doubling_backoff() {
        let r = Retry { max: 3, on: vec!["HTTP 503".into(), "ECONNRESET".into()], backoff_ms: 100.0 };
        assert!(r.covers(&ErrKind::Http { status: 503, code: "SlowDown".into() }));
        assert!(r.covers(&ErrKind::Http { status: 503, code: String::new() }));
        assert!(r.covers(&ErrKind::Errno(libc::ECONNRESET)));
        assert!(!r.covers(&ErrKind::Http { status: 5031, code: String::new() }));
        assert!(!r.covers(&ErrKind::Http { status: 404, code: "NoSuchKey".into() }));
        let slow = Retry { max: 1, on: vec!["HTTP 503 SlowDown".into()], backoff_ms: 100.0 };
        assert!(!slow.covers(&ErrKind::Http { status: 503, code: "ServiceUnavailable".into() }));
        assert_eq!((r.backoff(0), r.backoff(2), r.backoff(30)), (
            Duration::from_millis(100),
            Duration::from_millis(400),
            Duration::from_secs(10)
        ));
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
