//! The null target: ops that touch nothing. With `delay_us` 0 an op
//! completes inside `submit`; with a delay, one timer thread of the target's
//! own completes it that long after submission. No cluster, no I/O: it
//! tests the engine's loop anywhere and measures the engine's own overhead
//! (CPU per op, the highest op rate the loop sustains).
//!
//! Jobs and offsets follow fio's names (`rw`, `bs`, `numjobs`, `size`);
//! each job ranges over its own `size` bytes. With `verify` on, reads
//! return data in the verify format (filled at completion, as a real read
//! would deliver it), so every read block is checked and none mismatches:
//! a verify run measures what verification costs.

use super::block::{self, Job, Rw};
use super::{Fatal, Target};
use crate::errno::ErrKind;
use crate::io::{Done, OpKind, Slot};
use crate::rng::Rng;
use crate::spec::{Load, Spec};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NullSpec {
    pub rw: Rw,
    /// Percentage of reads for rw/randrw.
    #[serde(default = "block::fifty")]
    pub rwmixread: u32,
    #[serde(default = "block::four_k")]
    pub bs: u64,
    #[serde(default = "block::one_u32")]
    pub numjobs: u32,
    /// Bytes per job that offsets range over.
    #[serde(default = "gib")]
    pub size: u64,
    /// Completion delay after submission, in µs (0: complete inside submit).
    #[serde(default)]
    pub delay_us: u64,
}

fn gib() -> u64 {
    1 << 30
}

/// One hour: longer is surely a typo, and no timer should outlive a run by that much.
const MAX_DELAY_US: u64 = 3_600_000_000;

impl NullSpec {
    pub fn validate(&mut self, load: &Load, _verify: bool) -> Result<(), String> {
        if self.bs == 0 || self.bs > (64 << 20) {
            return Err(format!("target.bs must be 1 byte .. 64 MiB, got {}", self.bs));
        }
        block::validate(self.rwmixread, self.numjobs)?;
        if self.size < self.bs {
            return Err(format!("target.size ({}) must hold at least one block of target.bs ({})", self.size, self.bs));
        }
        if self.delay_us > MAX_DELAY_US {
            return Err(format!("target.delay_us must be at most {MAX_DELAY_US} (one hour), got {}", self.delay_us));
        }
        if !load.bounded() {
            return Err("a null run needs an end: load.duration_s, load.ops or load.bytes".into());
        }
        Ok(())
    }
}

pub struct Null {
    jobs: Vec<Job>,
    bs: u64,
    rw: Rw,
    mix: u32,
    delay_ns: u64,
    verify: bool,
    timer: Option<&'static Timer>,
}

impl Null {
    pub fn open(t: &NullSpec, spec: &Spec) -> Result<Self, Fatal> {
        let blocks = t.size / t.bs;
        let jobs = (0..t.numjobs as u64).map(|j| Job::new(j, 0, blocks)).collect();
        let timer = (t.delay_us > 0).then(|| Timer::start(spec.load.iodepth as usize * t.numjobs as usize));
        Ok(Null { jobs, bs: t.bs, rw: t.rw, mix: t.rwmixread, delay_ns: t.delay_us * 1000, verify: spec.verify, timer })
    }
}

impl Target for Null {
    fn kinds(&self) -> Vec<OpKind> {
        self.rw.kinds()
    }

    fn buf_len(&self) -> usize {
        self.bs as usize
    }

    fn jobs(&self) -> u32 {
        self.jobs.len() as u32
    }

    fn next_op(&mut self, s: &mut Slot, rng: &mut Rng) -> bool {
        let last = self.jobs.len() - 1;
        let j = &mut self.jobs[(s.job as usize).min(last)];
        let (kind, offset) = j.next(self.rw, self.mix, self.bs, rng);
        s.kind = kind;
        s.obj = j.obj;
        s.offset = offset;
        s.len = self.bs as usize;
        true
    }

    fn submit(&mut self, s: &mut Slot) -> Result<(), ErrKind> {
        match self.timer {
            None => s.done.complete(),
            Some(t) => t.add(s.start_ns + self.delay_ns, s.done),
        }
        Ok(())
    }

    fn reap(&mut self, s: &mut Slot) -> Result<u64, ErrKind> {
        if self.verify && s.kind == OpKind::Read {
            crate::verify::fill(&mut s.buf[..s.len], s.obj, s.offset, 0);
        }
        Ok(s.len as u64)
    }

    fn describe(&self, s: &Slot) -> String {
        format!("null job {}", s.obj)
    }
}

/// Completes ops when they are due, on its own thread. Every op has the
/// same delay, so due times arrive in order: a FIFO is a timer queue.
struct Timer {
    due: Mutex<VecDeque<(u64, &'static Done)>>,
    cv: Condvar,
}

impl Timer {
    fn start(capacity: usize) -> &'static Timer {
        let t: &'static Timer =
            Box::leak(Box::new(Timer { due: Mutex::new(VecDeque::with_capacity(capacity)), cv: Condvar::new() }));
        std::thread::Builder::new().name("null-timer".into()).spawn(move || t.run(capacity)).expect("spawn a thread");
        t
    }

    /// O(1); wakes the timer thread only when it sleeps on an empty queue
    /// (otherwise it sleeps until an earlier due time and finds this one then).
    fn add(&self, due_ns: u64, done: &'static Done) {
        let mut q = self.due.lock().unwrap_or_else(|p| p.into_inner());
        let was_empty = q.is_empty();
        q.push_back((due_ns, done));
        drop(q);
        if was_empty {
            self.cv.notify_one();
        }
    }

    fn run(&self, capacity: usize) {
        // 1 ns timer slack instead of the default 50 µs: a due time is a measured latency.
        // SAFETY: plain prctl on the calling thread.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64) };
        let mut ready: Vec<&'static Done> = Vec::with_capacity(capacity);
        let mut q = self.due.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let Some(&(first, _)) = q.front() else {
                q = self.cv.wait(q).unwrap_or_else(|p| p.into_inner());
                continue;
            };
            let now = crate::clock::mono_ns();
            if first > now {
                q = self
                    .cv
                    .wait_timeout(q, std::time::Duration::from_nanos(first - now))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                continue;
            }
            while let Some(&(due, done)) = q.front() {
                if due > now {
                    break;
                }
                ready.push(done);
                q.pop_front();
            }
            // Complete without the queue lock: completion may reissue and add to it.
            drop(q);
            for d in ready.drain(..) {
                d.complete();
            }
            q = self.due.lock().unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse;
    use crate::targets::TargetSpec;

    fn null(target: &str, load: &str) -> Result<Spec, String> {
        parse(&format!(r#"{{"protocol":2,"target":{{"kind":"null","rw":"randrw"{target}}},"load":{load}}}"#))
    }

    #[test]
    fn defaults() {
        let s = null("", r#"{"duration_s":1}"#).unwrap();
        let TargetSpec::Null(t) = &s.target else { panic!("{:?}", s.target) };
        assert_eq!((t.rwmixread, t.bs, t.numjobs, t.size, t.delay_us), (50, 4096, 1, 1 << 30, 0));
    }

    #[test]
    fn rules_name_the_field() {
        let d = r#"{"ops":10}"#;
        for (target, load, field) in [
            (r#","bs":0"#, d, "bs"),
            (r#","bs":134217728"#, d, "bs"),
            (r#","rwmixread":101"#, d, "rwmixread"),
            (r#","numjobs":0"#, d, "numjobs"),
            (r#","numjobs":1025"#, d, "numjobs"),
            (r#","bs":8192,"size":4096"#, d, "size"),
            (r#","delay_us":3600000001"#, d, "delay_us"),
            ("", "{}", "end"),
            (r#","rw":"trim""#, d, "trim"),
            (r#","pool":"p""#, d, "pool"),
            (r#","connection":{}"#, d, "connection"),
        ] {
            let e = null(target, load).unwrap_err();
            assert!(e.contains(field), "{target}: {e}");
        }
        // Odd block sizes are fine without Ceph; verify is allowed (reads return verify data).
        assert!(null(r#","bs":100,"size":1000"#, r#"{"bytes":1}"#).is_ok());
        assert!(parse(r#"{"target":{"kind":"null","rw":"read"},"load":{"ops":1},"verify":true}"#).is_ok());
    }

    #[test]
    fn timer_completes_in_due_order() {
        use crate::io::CompletionQueue;
        let q: &'static CompletionQueue = Box::leak(Box::new(CompletionQueue::new(4)));
        let done: Vec<&'static Done> =
            (0..3).map(|i| &*Box::leak(Box::new(Done { index: i, end_ns: Default::default(), queue: q }))).collect();
        let t = Timer::start(4);
        let now = crate::clock::mono_ns();
        for (i, d) in done.iter().enumerate() {
            t.add(now + 1_000_000 * (i as u64 + 1), d);
        }
        let mut out = Vec::with_capacity(4);
        q.take(&mut out, now + 10_000_000_000, 3);
        assert_eq!(out, [0, 1, 2]);
        for (i, d) in done.iter().enumerate() {
            let end = d.end_ns.load(std::sync::atomic::Ordering::Relaxed);
            assert!(end >= now + 1_000_000 * (i as u64 + 1), "op {i} completed before it was due");
        }
    }
}
