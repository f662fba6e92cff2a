//! The target seam: one trait, one module per target, like fio's ioengine
//! ops table. The engine owns scheduling, timing, statistics and memory
//! lifetime; a target only chooses and issues ops.
//!
//! Completion contract: after `submit` returns Ok, the target (its library)
//! must call `slot.done.complete()` exactly once, from any thread, when the
//! op is over. An aio library calls it from its completion callback; a
//! blocking library (libcephfs on Pacific) would hand the op to one of its
//! own worker threads and call it there; an HTTP client from its reactor.
//! Nothing here requires async Rust.

pub mod rados;
pub mod rbd;

use crate::io::{OpKind, Slot};
use crate::rng::Rng;
use serde_json::Value;

/// A failure that ends the run: error record with this kind, exit `code`.
#[derive(Debug)]
pub struct Fatal {
    pub kind: String,
    pub message: String,
    pub code: i32,
}

impl Fatal {
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
    /// Bytes of buffer one op needs.
    fn buf_len(&self) -> usize;
    /// Independent streams; slot `i` belongs to job `i / iodepth`.
    fn jobs(&self) -> u32;
    /// Choose the next op for `slot`: set kind, obj, offset, len (and name).
    /// false: the workload has nothing more to issue (object set done).
    fn next_op(&mut self, slot: &mut Slot, rng: &mut Rng) -> bool;
    /// Issue the op. Err(errno) if the library refused it synchronously
    /// (then no completion will come).
    fn submit(&mut self, slot: &mut Slot) -> Result<(), i32>;
    /// The op has completed: collect its result and release library state.
    /// Returns bytes transferred (>= 0) or -errno.
    fn reap(&mut self, slot: &mut Slot) -> i64;
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
    /// Release handles (only called when nothing is in flight).
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
    #[test]
    fn names() {
        let mut v = Vec::with_capacity(64);
        super::object_name(&mut v, b"run1", 0);
        assert_eq!(v, b"run1.0\0");
        super::object_name(&mut v, b"run1", 1234567);
        assert_eq!(v, b"run1.1234567\0");
    }
}
