//! The point spec: parsed strictly (unknown fields are errors), validated,
//! and normalized (defaults filled in) so the start record can echo it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const PROTOCOL: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[serde(default = "protocol")]
    pub protocol: u32,
    pub target: TargetKind,
    #[serde(default)]
    pub connection: Connection,
    pub pool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rados: Option<RadosSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rbd: Option<RbdSpec>,
    #[serde(default)]
    pub load: Load,
    /// An op not completed after this long counts as an ETIMEDOUT error (null: never).
    #[serde(default = "op_timeout")]
    pub op_timeout_s: Option<f64>,
    #[serde(default)]
    pub on_error: OnError,
    /// No completion at all for this long while ops are in flight: stall error, exit 3.
    #[serde(default = "stall_timeout")]
    pub stall_timeout_s: f64,
    #[serde(default)]
    pub verify: bool,
    #[serde(default = "seed")]
    pub seed: u64,
    #[serde(default = "one")]
    pub interval_s: f64,
    /// Scheduling policy of the library threads that run completion callbacks.
    #[serde(default)]
    pub callback_sched: CallbackSched,
}

/// `batch` (default): SCHED_BATCH, so a woken callback thread does not
/// preempt the messenger thread that is still reading replies; the
/// messenger finishes its burst, then the callbacks run together. `normal`
/// leaves the library's threads as they are. See PROTOCOL.md.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum CallbackSched {
    #[default]
    Batch,
    Normal,
}

fn protocol() -> u32 {
    PROTOCOL
}
fn op_timeout() -> Option<f64> {
    Some(30.0)
}
fn stall_timeout() -> f64 {
    60.0
}
fn seed() -> u64 {
    1
}
fn one() -> f64 {
    1.0
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    Rados,
    Rbd,
}

impl TargetKind {
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::Rados => "rados",
            TargetKind::Rbd => "rbd",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Connection {
    /// ceph.conf path; null reads the library default search path (CEPH_CONF, /etc/ceph).
    #[serde(default)]
    pub conf: Option<String>,
    /// Full entity name ("client.admin"); `id` is the short form ("admin").
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub keyring: Option<String>,
    /// Extra client config (rbd_cache=false, objecter_inflight_ops=...), applied after
    /// the conf file and after the engine's own defaults, so they win.
    #[serde(default)]
    pub options: BTreeMap<String, serde_json::Value>,
    /// Bound on reaching the monitors and on each monitor command.
    #[serde(default = "connect_timeout")]
    pub timeout_s: f64,
    /// Apply the engine's client tuning defaults (see PROTOCOL.md).
    #[serde(default = "yes")]
    pub engine_defaults: bool,
}

fn connect_timeout() -> f64 {
    10.0
}
fn yes() -> bool {
    true
}

impl Default for Connection {
    fn default() -> Self {
        Connection {
            conf: None,
            name: None,
            id: None,
            keyring: None,
            options: BTreeMap::new(),
            timeout_s: connect_timeout(),
            engine_defaults: true,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RadosOp {
    Write,
    Read,
    Remove,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    #[default]
    Seq,
    Rand,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RadosSpec {
    pub op: RadosOp,
    #[serde(default)]
    pub pattern: Pattern,
    /// Object names are `<prefix>.<n>`, metadata goes to `<prefix>.meta`.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Bytes per object (write); reads and removes take it from the metadata object.
    #[serde(default)]
    pub object_size: Option<u64>,
    /// Bytes per op; default: the whole object.
    #[serde(default)]
    pub op_size: Option<u64>,
    /// Size of the object set (write); null: new objects until the run ends.
    #[serde(default)]
    pub objects: Option<u64>,
    /// Write every object of the set in full before the measured run (not measured).
    #[serde(default)]
    pub prefill: bool,
    /// Writes carry an allocation hint (expected object and write size,
    /// sequential/append-only/immutable), as rados bench's writes do.
    #[serde(default)]
    pub alloc_hint: bool,
    /// Seq reads: one pass over the set, even when time-bounded (rados bench seq).
    #[serde(default)]
    pub once: bool,
}

// fio's names, `rw` included.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    Read,
    Write,
    Randread,
    Randwrite,
    /// Sequential mix.
    Rw,
    Randrw,
}

impl Rw {
    pub fn random(self) -> bool {
        matches!(self, Rw::Randread | Rw::Randwrite | Rw::Randrw)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RbdSpec {
    pub rw: Rw,
    /// Percentage of reads for rw/randrw.
    #[serde(default = "fifty")]
    pub rwmixread: u32,
    #[serde(default = "four_k")]
    pub bs: u64,
    pub images: Vec<String>,
    #[serde(default = "one_u32")]
    pub numjobs: u32,
    /// Bytes of each image to use (from offset 0); null: the whole image.
    #[serde(default)]
    pub size: Option<u64>,
}

fn fifty() -> u32 {
    50
}
fn four_k() -> u64 {
    4096
}
fn one_u32() -> u32 {
    1
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Arrival {
    #[default]
    Uniform,
    Poisson,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Load {
    /// Outstanding ops per job (rados: one job).
    #[serde(default = "sixteen")]
    pub iodepth: u32,
    #[serde(default)]
    pub duration_s: Option<f64>,
    #[serde(default)]
    pub ramp_s: f64,
    /// Stop after this many ops (counted after the ramp).
    #[serde(default)]
    pub ops: Option<u64>,
    /// Stop after this many bytes (counted after the ramp).
    #[serde(default)]
    pub bytes: Option<u64>,
    /// Open loop: target ops/s over the whole engine; null = closed loop.
    #[serde(default)]
    pub rate: Option<f64>,
    #[serde(default)]
    pub arrival: Arrival,
    /// Closed loop: reissue completed slots once this many are free, as a
    /// burst (null or 1: keep every slot busy, like fio and rados bench;
    /// N > 1: opt-in bursts, like fio's iodepth_low). See PROTOCOL.md.
    #[serde(default)]
    pub submit_batch: Option<u32>,
}

fn sixteen() -> u32 {
    16
}

impl Default for Load {
    fn default() -> Self {
        Load {
            iodepth: 16,
            duration_s: None,
            ramp_s: 0.0,
            ops: None,
            bytes: None,
            rate: None,
            arrival: Arrival::Uniform,
            submit_batch: None,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    #[default]
    Stop,
    Continue,
}

/// Parse and validate; the error text names the field and what is allowed.
pub fn parse(text: &str) -> Result<Spec, String> {
    let mut spec: Spec = serde_json::from_str(text).map_err(|e| format!("spec is not valid: {e}"))?;
    validate(&mut spec)?;
    Ok(spec)
}

fn positive(name: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v > 0.0 { Ok(()) } else { Err(format!("{name} must be a positive number, got {v}")) }
}

pub fn validate(s: &mut Spec) -> Result<(), String> {
    if s.protocol != PROTOCOL {
        return Err(format!("protocol {} is not supported; this engine speaks protocol {PROTOCOL}", s.protocol));
    }
    if s.pool.is_empty() {
        return Err("pool must not be empty".into());
    }
    if s.connection.name.is_some() && s.connection.id.is_some() {
        return Err("connection: give name or id, not both".into());
    }
    if let Some(n) = &s.connection.name
        && !n.contains('.')
    {
        return Err(format!("connection.name {n:?} must be a full entity name like client.admin"));
    }
    positive("connection.timeout_s", s.connection.timeout_s)?;
    for (k, v) in &s.connection.options {
        if !(v.is_string() || v.is_number() || v.is_boolean()) {
            return Err(format!("connection.options.{k} must be a string, number or boolean"));
        }
    }
    let l = &s.load;
    if l.iodepth == 0 || l.iodepth > 65536 {
        return Err(format!("load.iodepth must be 1..65536, got {}", l.iodepth));
    }
    if let Some(d) = l.duration_s {
        positive("load.duration_s", d)?;
    }
    if !(l.ramp_s.is_finite() && l.ramp_s >= 0.0) {
        return Err(format!("load.ramp_s must be >= 0, got {}", l.ramp_s));
    }
    if let Some(d) = l.duration_s
        && l.ramp_s >= d
    {
        return Err(format!("load.ramp_s ({}) must be shorter than load.duration_s ({d})", l.ramp_s));
    }
    if l.ops == Some(0) || l.bytes == Some(0) {
        return Err("load.ops and load.bytes must be positive when given".into());
    }
    if let Some(r) = l.rate {
        positive("load.rate", r)?;
    }
    if l.submit_batch == Some(0) {
        return Err("load.submit_batch must be at least 1 when given".into());
    }
    if let Some(t) = s.op_timeout_s {
        positive("op_timeout_s", t)?;
    }
    positive("stall_timeout_s", s.stall_timeout_s)?;
    positive("interval_s", s.interval_s)?;
    let bounded = l.duration_s.is_some() || l.ops.is_some() || l.bytes.is_some();
    match s.target {
        TargetKind::Rados => {
            if s.rbd.is_some() {
                return Err("target rados takes a `rados` section, not `rbd`".into());
            }
            let r = s.rados.as_mut().ok_or("target rados needs a `rados` section")?;
            if let Some(p) = &r.prefix
                && (p.is_empty() || p.contains('/') || p.len() > 200)
            {
                return Err(format!("rados.prefix {p:?} must be 1..200 characters without '/'"));
            }
            if r.objects == Some(0) {
                return Err("rados.objects must be positive when given".into());
            }
            if r.object_size == Some(0) || r.op_size == Some(0) {
                return Err("rados.object_size and rados.op_size must be positive".into());
            }
            match r.op {
                RadosOp::Write => {
                    let os = *r.object_size.get_or_insert(4 << 20);
                    let op = *r.op_size.get_or_insert(os);
                    if op > os || os % op != 0 {
                        return Err(format!("rados.op_size ({op}) must divide rados.object_size ({os})"));
                    }
                    if os > (90 << 20) {
                        return Err(format!("rados.object_size {os} is above the OSD's 90 MiB object limit"));
                    }
                    if r.pattern == Pattern::Rand && r.objects.is_none() {
                        return Err("rados rand writes need rados.objects (the size of the object set)".into());
                    }
                    if !bounded && r.objects.is_none() {
                        return Err(
                            "a rados write needs an end: load.duration_s, load.ops, load.bytes or rados.objects".into(),
                        );
                    }
                    if r.prefix.is_none() {
                        r.prefix = Some(default_prefix());
                    }
                    if r.once {
                        return Err("rados.once applies to seq reads only".into());
                    }
                }
                RadosOp::Read | RadosOp::Remove => {
                    if r.prefix.is_none() {
                        return Err(format!(
                            "rados {} needs rados.prefix (the prefix of an earlier write)",
                            if r.op == RadosOp::Read { "read" } else { "remove" }
                        ));
                    }
                    if r.prefill {
                        return Err("rados.prefill applies to writes only".into());
                    }
                    if r.alloc_hint {
                        return Err("rados.alloc_hint applies to writes only".into());
                    }
                    if r.once && (r.op != RadosOp::Read || r.pattern != Pattern::Seq) {
                        return Err("rados.once applies to seq reads only".into());
                    }
                    if r.op == RadosOp::Remove && r.pattern == Pattern::Rand {
                        return Err("rados remove is sequential only".into());
                    }
                    if r.op == RadosOp::Remove && s.verify {
                        return Err("verify does not apply to remove".into());
                    }
                    if let (Some(os), Some(op)) = (r.object_size, r.op_size)
                        && (op > os || os % op != 0)
                    {
                        return Err(format!("rados.op_size ({op}) must divide rados.object_size ({os})"));
                    }
                }
            }
            if s.verify && r.op_size.is_some_and(|o| o < 64) {
                return Err("verify needs rados.op_size >= 64".into());
            }
        }
        TargetKind::Rbd => {
            if s.rados.is_some() {
                return Err("target rbd takes an `rbd` section, not `rados`".into());
            }
            let r = s.rbd.as_ref().ok_or("target rbd needs an `rbd` section")?;
            if r.images.is_empty() || r.images.iter().any(|i| i.is_empty()) {
                return Err("rbd.images must list at least one image name".into());
            }
            if r.bs == 0 || r.bs % 512 != 0 || r.bs > (64 << 20) {
                return Err(format!("rbd.bs must be a multiple of 512 up to 64 MiB, got {}", r.bs));
            }
            if r.rwmixread > 100 {
                return Err(format!("rbd.rwmixread is a percentage 0..100, got {}", r.rwmixread));
            }
            if r.numjobs == 0 || r.numjobs > 1024 {
                return Err(format!("rbd.numjobs must be 1..1024, got {}", r.numjobs));
            }
            if let Some(sz) = r.size
                && sz < r.bs * r.numjobs as u64
            {
                return Err(format!("rbd.size ({sz}) must hold at least one block per job"));
            }
            if !bounded {
                return Err("an rbd run needs an end: load.duration_s, load.ops or load.bytes".into());
            }
        }
    }
    // Resolve the submit batch so the start record echoes what runs. The default keeps every
    // slot busy: iodepth means that many ops in flight, as in fio and rados bench, so a
    // study's points and a peer comparison measure the same queue depth. Bursts are opt-in.
    if s.load.rate.is_none() && s.load.submit_batch.is_none() {
        s.load.submit_batch = Some(1);
    }
    Ok(())
}

fn default_prefix() -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    format!("fathom.{t}.{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rados(extra: &str) -> String {
        format!(
            r#"{{"target":"rados","pool":"p","rados":{{"op":"write","object_size":4096}},"load":{{"duration_s":1}}{extra}}}"#
        )
    }

    #[test]
    fn minimal_rados_write_gets_defaults() {
        let s = parse(&rados("")).unwrap();
        let r = s.rados.unwrap();
        assert_eq!(r.op_size, Some(4096));
        assert!(r.prefix.unwrap().starts_with("fathom."));
        assert_eq!(s.load.iodepth, 16);
        assert_eq!(s.load.submit_batch, Some(1));
        assert_eq!(s.stall_timeout_s, 60.0);
        assert_eq!(s.op_timeout_s, Some(30.0));
    }

    #[test]
    fn unknown_field_is_rejected() {
        let e = parse(&rados(r#","iodepht":4"#)).unwrap_err();
        assert!(e.contains("iodepht"), "{e}");
    }

    #[test]
    fn bad_values_are_named() {
        let e = parse(r#"{"target":"rados","pool":"p","rados":{"op":"write","object_size":4096,"op_size":3000},"load":{"duration_s":1}}"#).unwrap_err();
        assert!(e.contains("op_size"), "{e}");
        let e = parse(r#"{"target":"rados","pool":"p","rados":{"op":"read"},"load":{"duration_s":1}}"#).unwrap_err();
        assert!(e.contains("prefix"), "{e}");
        let e = parse(r#"{"target":"rbd","pool":"p","rbd":{"rw":"randwrite","images":[]},"load":{"duration_s":1}}"#)
            .unwrap_err();
        assert!(e.contains("images"), "{e}");
        let e = parse(
            r#"{"target":"rbd","pool":"p","rbd":{"rw":"randwrite","images":["a"],"bs":1000},"load":{"duration_s":1}}"#,
        )
        .unwrap_err();
        assert!(e.contains("bs"), "{e}");
        let e = parse(r#"{"target":"rbd","pool":"p","rbd":{"rw":"randwrite","images":["a"]}}"#).unwrap_err();
        assert!(e.contains("end"), "{e}");
        let e = parse(&rados(r#","protocol":2"#)).unwrap_err();
        assert!(e.contains("protocol"), "{e}");
        let e = parse(r#"{"target":"rados","pool":"p","rados":{"op":"write"},"load":{"duration_s":1,"ramp_s":2}}"#)
            .unwrap_err();
        assert!(e.contains("ramp_s"), "{e}");
        let e = parse(r#"{"target":"nfs","pool":"p"}"#).unwrap_err();
        assert!(e.contains("nfs"), "{e}");
    }

    #[test]
    fn once_and_alloc_hint_belong_to_their_ops() {
        let read = |extra: &str| {
            format!(
                r#"{{"target":"rados","pool":"p","rados":{{"op":"read","prefix":"x"{extra}}},"load":{{"duration_s":1}}}}"#
            )
        };
        assert!(parse(&read(r#","once":true"#)).unwrap().rados.unwrap().once);
        let e = parse(&read(r#","once":true,"pattern":"rand""#)).unwrap_err();
        assert!(e.contains("once"), "{e}");
        let e = parse(&read(r#","alloc_hint":true"#)).unwrap_err();
        assert!(e.contains("alloc_hint"), "{e}");
        let w = parse(r#"{"target":"rados","pool":"p","rados":{"op":"write","object_size":4096,"alloc_hint":true},"load":{"duration_s":1}}"#).unwrap();
        assert!(w.rados.unwrap().alloc_hint);
        let e = parse(r#"{"target":"rados","pool":"p","rados":{"op":"write","object_size":4096,"once":true},"load":{"duration_s":1}}"#).unwrap_err();
        assert!(e.contains("once"), "{e}");
        assert_eq!(parse(&rados("")).unwrap().callback_sched, CallbackSched::Batch);
        let e = parse(&rados(r#","callback_sched":"fifo""#)).unwrap_err();
        assert!(e.contains("callback_sched") || e.contains("fifo"), "{e}");
    }

    #[test]
    fn normalized_spec_roundtrips() {
        let s = parse(&rados("")).unwrap();
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(parse(&text).unwrap(), s);
    }
}
