//! The target seam: one trait, one module per target, like fio's ioengine
//! ops table. The engine owns scheduling, timing, statistics and memory
//! lifetime; a target only chooses and issues ops. Each target module also
//! owns its part of the spec (the `target` object, tagged by `kind`) and
//! validates it, as fio keeps each engine's options in the engine's file.
//!
//! Completion contract: after `submit` returns Ok, the target (its library)
//! must call `slot.done.complete()` exactly once, from any thread, when the
//! op is over. An aio library calls it from its completion callback; a
//! blocking library (libcephfs on Pacific) would hand the op to one of its
//! own worker threads and call it there; an HTTP client from its reactor;
//! the null target from its timer thread, or inside `submit` itself.
//! Nothing here requires async Rust.

pub mod block;
pub mod fileset;
pub mod workers;

use crate::errno::ErrKind;
use crate::io::{OpKind, Phase, Slot};
use crate::rng::Rng;
use crate::spec::{Load, Spec};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The one list of targets: `Variant => module::Target(module::SpecStruct)`.
/// It makes the spec's tagged enum (`"kind"`: the module's name), its
/// validation and `open`, so adding a target is its module plus one line here.
macro_rules! targets {
    ($($variant:ident => $module:ident :: $target:ident ($spec:ident)),* $(,)?) => {
        $(pub mod $module;)*

        /// The spec's `target` object: `{"kind": "<module name>", ...that target's fields}`.
        #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
        #[serde(tag = "kind", rename_all = "lowercase")]
        pub enum TargetSpec {
            $($variant($module::$spec)),*
        }

        impl TargetSpec {
            pub fn kind(&self) -> &'static str {
                match self {
                    $(TargetSpec::$variant(_) => stringify!($module)),*
                }
            }

            /// The target's own rules, given the generic load and verify settings.
            pub fn validate(&mut self, load: &Load, verify: bool) -> Result<(), String> {
                match self {
                    $(TargetSpec::$variant(t) => t.validate(load, verify)),*
                }
            }
        }

        /// Connect (if the target has a service to connect to) and open the target.
        pub fn open(spec: &Spec) -> Result<Box<dyn Target>, Fatal> {
            match &spec.target {
                $(TargetSpec::$variant(t) => Ok(Box::new($module::$target::open(t, spec)?))),*
            }
        }
    };
}

targets! {
    Rados => rados::Rados(RadosSpec),
    Rbd => rbd::Rbd(RbdSpec),
    Null => null::Null(NullSpec),
    S3 => s3::S3(S3Spec),
    Posix => posix::Posix(PosixSpec),
    Cephfs => cephfs::Cephfs(CephfsSpec),
    Nfs => nfs::Nfs(NfsSpec),
}

/// A failure that ends the run: error record with this kind, exit `code`.
#[derive(Debug)]
pub struct Fatal {
    pub kind: String,
    pub message: String,
    pub code: i32,
}

impl Fatal {
    /// A Ceph (or other service) failure: kind = errno name, exit 3.
    pub fn ceph(errno: i32, message: impl Into<String>) -> Self {
        Fatal { kind: crate::errno::name(errno), message: message.into(), code: 3 }
    }
    pub fn spec(message: impl Into<String>) -> Self {
        Fatal { kind: "invalid_spec".into(), message: message.into(), code: 2 }
    }
}

pub trait Target {
    /// Op kinds this workload issues, in report order.
    fn kinds(&self) -> Vec<OpKind>;
    /// Latency phases measured for ops of `kind`, besides the total (each
    /// gets its own histogram; the target sets `Slot::phases` in `reap`).
    fn phases(&self, _kind: OpKind) -> &'static [Phase] {
        &[]
    }
    /// Bytes of buffer one op needs.
    fn buf_len(&self) -> usize;
    /// Independent streams; slot `i` belongs to job `i / iodepth`.
    fn jobs(&self) -> u32;
    /// Choose the next op for `slot`: set kind, obj, offset, len (and name).
    /// false: the workload has nothing more to issue (object set done).
    fn next_op(&mut self, slot: &mut Slot, rng: &mut Rng) -> bool;
    /// Issue the op. Err if the library refused it synchronously (then no
    /// completion will come).
    fn submit(&mut self, slot: &mut Slot) -> Result<(), ErrKind>;
    /// The op has completed: collect its result and release library state.
    /// Returns the bytes transferred.
    fn reap(&mut self, slot: &mut Slot) -> Result<u64, ErrKind>;
    /// A successful completion (measured or not), for bookkeeping.
    fn on_success(&mut self, _slot: &Slot) {}
    /// Name of what the op touched, for error and verify reports.
    fn describe(&self, slot: &Slot) -> String;
    /// Switch to the preparation phase (prefill); false if there is none.
    fn begin_prefill(&mut self) -> bool {
        false
    }
    /// Switch to the measured workload.
    fn begin_main(&mut self) {}
    /// After the run, nothing in flight: write metadata, return extra
    /// summary fields (name, value).
    fn finish(&mut self) -> Result<Vec<(String, Value)>, Fatal> {
        Ok(Vec::new())
    }
    /// Release handles and the session (only called when nothing is in
    /// flight; bounded by a watchdog).
    fn close(&mut self) {}
}

/// Write `prefix.N\0` into `out` without allocating (capacity is reserved).
pub fn object_name(out: &mut Vec<u8>, prefix: &[u8], n: u64) {
    out.clear();
    out.extend_from_slice(prefix);
    out.push(b'.');
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut v = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
    out.push(0);
}

#[cfg(test)]
mod tests {
    use super::TargetSpec;

    #[test]
    fn kind_is_the_tag_and_unknown_fields_are_refused_beside_it() {
        for (j, kind) in [
            (r#"{"kind":"rados","pool":"p","op":"write"}"#, "rados"),
            (r#"{"kind":"rbd","pool":"p","rw":"read","images":["i"]}"#, "rbd"),
            (r#"{"kind":"null","rw":"read"}"#, "null"),
            (r#"{"kind":"s3","keys_file":"k","buckets":["b"],"op":"put"}"#, "s3"),
            (r#"{"kind":"posix","path":"/tmp","rw":"read"}"#, "posix"),
            (r#"{"kind":"cephfs","rw":"read","filesize":4096}"#, "cephfs"),
            (r#"{"kind":"nfs","export":"/e","rw":"read","filesize":4096}"#, "nfs"),
        ] {
            let t: TargetSpec = serde_json::from_str(j).unwrap();
            assert_eq!(t.kind(), kind);
            assert_eq!(serde_json::to_value(&t).unwrap()["kind"], kind);
            // deny_unknown_fields holds inside a tagged variant.
            let bad = j.replacen('{', r#"{"bogus":1,"#, 1);
            let e = serde_json::from_str::<TargetSpec>(&bad).unwrap_err().to_string();
            assert!(e.contains("bogus"), "{kind}: {e}");
        }
        // A field of another target is unknown too.
        let e = serde_json::from_str::<TargetSpec>(r#"{"kind":"null","rw":"read","pool":"p"}"#).unwrap_err();
        assert!(e.to_string().contains("pool"), "{e}");
        let e = serde_json::from_str::<TargetSpec>(r#"{"kind":"smb"}"#).unwrap_err();
        assert!(e.to_string().contains("smb"), "{e}");
    }

    #[test]
    fn names() {
        let mut v = Vec::with_capacity(64);
        super::object_name(&mut v, b"run1", 0);
        assert_eq!(v, b"run1.0\0");
        super::object_name(&mut v, b"run1", 1234567);
        assert_eq!(v, b"run1.1234567\0");
    }
}
