//! The point spec, protocol 2: parsed strictly (unknown fields are errors),
//! validated, and normalized (defaults filled in) so the start record and
//! `--check` can echo it. This file holds what every target shares; each
//! target's own section (`target`, tagged by `kind`) lives in and is
//! validated by its module under targets/.

use crate::targets::TargetSpec;
use serde::{Deserialize, Serialize};

pub const PROTOCOL: u32 = 2;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[serde(default = "protocol")]
    pub protocol: u32,
    pub target: TargetSpec,
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
    /// Scheduling policy of the threads that run completion callbacks.
    #[serde(default)]
    pub callback_sched: CallbackSched,
    /// The control channel on stdin (null: none; stdin is not read).
    #[serde(default)]
    pub control: Option<Control>,
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

/// JSON lines on stdin while the engine runs (see control.rs).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Control {
    /// Connect, open and prefill, emit `ready`, then wait for a `go` line.
    #[serde(default)]
    pub wait: bool,
    /// Stop (exit 6) when no control line arrives for this long (null: never).
    #[serde(default)]
    pub heartbeat_timeout_s: Option<f64>,
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
    /// Outstanding ops per job.
    #[serde(default = "sixteen")]
    pub iodepth: u32,
    #[serde(default)]
    pub duration_s: Option<f64>,
    #[serde(default)]
    pub ramp_s: f64,
    /// Each job stops after this many ops (counted after the ramp), as fio's number_ios.
    #[serde(default)]
    pub ops: Option<u64>,
    /// Each job stops after this many bytes (counted after the ramp), as fio's size.
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

impl Load {
    /// Something other than the workload itself ends the run.
    pub fn bounded(&self) -> bool {
        self.duration_s.is_some() || self.ops.is_some() || self.bytes.is_some()
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
    // Look at the protocol and the shape first: a protocol 1 spec should be
    // told so, not get serde's word about an enum it never meant.
    let raw: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("spec is not valid JSON: {e}"))?;
    if let Some(p) = raw.get("protocol")
        && p.as_u64() != Some(PROTOCOL as u64)
    {
        return Err(format!("protocol {p} is not supported; this engine speaks protocol {PROTOCOL}"));
    }
    if raw.get("target").is_some_and(|t| t.is_string()) {
        return Err(format!(
            "target must be an object with a kind ({{\"kind\": \"rados\", ...}}): a target name with sibling \
             sections is protocol 1; this engine speaks protocol {PROTOCOL}"
        ));
    }
    let mut spec: Spec = serde_json::from_value(raw).map_err(|e| format!("spec is not valid: {e}"))?;
    validate(&mut spec)?;
    Ok(spec)
}

pub fn positive(name: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v > 0.0 { Ok(()) } else { Err(format!("{name} must be a positive number, got {v}")) }
}

pub fn validate(s: &mut Spec) -> Result<(), String> {
    if s.protocol != PROTOCOL {
        return Err(format!("protocol {} is not supported; this engine speaks protocol {PROTOCOL}", s.protocol));
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
    if let Some(c) = &s.control
        && let Some(h) = c.heartbeat_timeout_s
    {
        positive("control.heartbeat_timeout_s", h)?;
    }
    s.target.validate(&s.load, s.verify)?;
    // Resolve the submit batch so the start record echoes what runs. The default keeps every
    // slot busy: iodepth means that many ops in flight, as in fio and rados bench, so a
    // study's points and a peer comparison measure the same queue depth. Bursts are opt-in.
    if s.load.rate.is_none() && s.load.submit_batch.is_none() {
        s.load.submit_batch = Some(1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A null-target spec with `extra` fields appended at the top level.
    fn null(extra: &str) -> String {
        format!(r#"{{"protocol":2,"target":{{"kind":"null","rw":"randread"}},"load":{{"duration_s":1}}{extra}}}"#)
    }

    #[test]
    fn minimal_spec_gets_defaults() {
        let s = parse(&null("")).unwrap();
        assert_eq!(s.load.iodepth, 16);
        assert_eq!(s.load.submit_batch, Some(1));
        assert_eq!(s.stall_timeout_s, 60.0);
        assert_eq!(s.op_timeout_s, Some(30.0));
        assert_eq!(s.on_error, OnError::Stop);
        assert_eq!(s.callback_sched, CallbackSched::Batch);
        assert_eq!(s.control, None);
        // Open loop keeps submit_batch unset: every op goes when the schedule says.
        let s = parse(&null("").replace(r#""duration_s":1"#, r#""duration_s":1,"rate":10"#)).unwrap();
        assert_eq!(s.load.submit_batch, None);
        // protocol may be left out; it is 2.
        let s = parse(r#"{"target":{"kind":"null","rw":"read"},"load":{"ops":1}}"#).unwrap();
        assert_eq!(s.protocol, 2);
    }

    #[test]
    fn unknown_fields_are_rejected_at_every_level() {
        let e = parse(&null(r#","iodepht":4"#)).unwrap_err();
        assert!(e.contains("iodepht"), "{e}");
        let e = parse(&null("").replace(r#""duration_s":1"#, r#""duration_s":1,"opz":3"#)).unwrap_err();
        assert!(e.contains("opz"), "{e}");
        let e = parse(&null(r#","control":{"wait":true,"hb":1}"#)).unwrap_err();
        assert!(e.contains("hb"), "{e}");
    }

    #[test]
    fn protocol_and_shape_of_protocol_1_are_named() {
        let e = parse(&null("").replace(r#""protocol":2"#, r#""protocol":1"#)).unwrap_err();
        assert!(e.contains("protocol 1 is not supported") && e.contains("protocol 2"), "{e}");
        let e = parse(r#"{"target":"rados","pool":"p","rados":{"op":"write"}}"#).unwrap_err();
        assert!(e.contains("protocol 1"), "{e}");
        let e = parse("{not json").unwrap_err();
        assert!(e.contains("JSON"), "{e}");
        let e = parse(r#"{"protocol":2,"target":{"kind":"tape"}}"#).unwrap_err();
        assert!(e.contains("tape"), "{e}");
        let e = parse(r#"{"protocol":2,"target":{"rw":"read"}}"#).unwrap_err();
        assert!(e.contains("kind"), "{e}");
    }

    #[test]
    fn load_limits() {
        let with = |load: &str| parse(&format!(r#"{{"target":{{"kind":"null","rw":"read"}},"load":{load}}}"#));
        for (load, field) in [
            (r#"{"iodepth":0,"ops":1}"#, "iodepth"),
            (r#"{"iodepth":65537,"ops":1}"#, "iodepth"),
            (r#"{"duration_s":0}"#, "duration_s"),
            (r#"{"duration_s":1,"ramp_s":1}"#, "ramp_s"),
            (r#"{"duration_s":1,"ramp_s":-1}"#, "ramp_s"),
            (r#"{"ops":0}"#, "load.ops"),
            (r#"{"bytes":0}"#, "load.bytes"),
            (r#"{"ops":1,"rate":0}"#, "rate"),
            (r#"{"ops":1,"submit_batch":0}"#, "submit_batch"),
            (r#"{"ops":1,"arrival":"bursty"}"#, "bursty"),
        ] {
            let e = with(load).unwrap_err();
            assert!(e.contains(field), "{load}: {e}");
        }
        assert_eq!(with(r#"{"iodepth":65536,"ops":1}"#).unwrap().load.iodepth, 65536);
    }

    #[test]
    fn generic_limits() {
        for (extra, field) in [
            (r#","op_timeout_s":0"#, "op_timeout_s"),
            (r#","stall_timeout_s":-1"#, "stall_timeout_s"),
            (r#","interval_s":0"#, "interval_s"),
            (r#","on_error":"ignore""#, "ignore"),
            (r#","callback_sched":"fifo""#, "fifo"),
            (r#","control":{"heartbeat_timeout_s":0}"#, "heartbeat_timeout_s"),
        ] {
            let e = parse(&null(extra)).unwrap_err();
            assert!(e.contains(field), "{extra}: {e}");
        }
        let s = parse(&null(r#","op_timeout_s":null,"control":{"wait":true,"heartbeat_timeout_s":3}"#)).unwrap();
        assert_eq!(s.op_timeout_s, None);
        assert_eq!(s.control, Some(Control { wait: true, heartbeat_timeout_s: Some(3.0) }));
        let s = parse(&null(r#","control":{}"#)).unwrap();
        assert_eq!(s.control, Some(Control::default()));
    }

    #[test]
    fn normalized_spec_roundtrips() {
        let s = parse(&null(r#","control":{"wait":true}"#)).unwrap();
        let text = serde_json::to_string(&s).unwrap();
        assert!(text.contains(r#""kind":"null""#), "{text}");
        assert_eq!(parse(&text).unwrap(), s);
    }
}
