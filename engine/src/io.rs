//! Slots (one per outstanding op) and the completion queue.
//!
//! Memory rule at the FFI seam: a slot owns the buffer, the object name and
//! the completion argument of its op. Slots are allocated once, leaked
//! (`&'static`), and never resized or freed, so whatever happens to the run
//! (timeout, stop, error, exit), memory that librados/librbd may still write
//! to stays valid until the process exits. A timed-out op keeps its slot
//! (state `Zombie`) until the library reports completion.

use crate::clock::mono_ns;
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

/// Completed slot indices, pushed from library threads, drained in batches
/// by the submitter. The callback only wakes the submitter when it sleeps.
pub struct CompletionQueue {
    inner: Mutex<Ready>,
    cv: Condvar,
}

struct Ready {
    idx: Vec<u32>,
    /// The submitter sleeps and wants to be woken at this many ready slots (0: awake).
    want: usize,
    /// A wake() that came while the submitter was awake: its next take() returns at once.
    kick: bool,
}

impl CompletionQueue {
    pub fn new(capacity: usize) -> Self {
        CompletionQueue {
            inner: Mutex::new(Ready { idx: Vec::with_capacity(capacity), want: 0, kick: false }),
            cv: Condvar::new(),
        }
    }

    /// Called from library callback threads: O(1), no allocation (capacity
    /// covers every slot), one futex wake only when the sleeping submitter's
    /// batch is complete.
    pub fn push(&self, i: u32) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.idx.push(i);
        let wake = g.want != 0 && g.idx.len() >= g.want;
        if wake {
            g.want = 0;
        }
        drop(g);
        if wake {
            self.cv.notify_one();
        }
    }

    /// Wake the submitter if it sleeps (used by the fast path when a phase may be over).
    pub fn wake(&self) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let wake = g.want != 0;
        g.want = 0;
        g.kick = true;
        drop(g);
        if wake {
            self.cv.notify_one();
        }
    }

    /// Swap ready indices into `out` (empty, with capacity). With fewer than
    /// `batch` ready, sleep until `batch` are or until `deadline_ns`
    /// (monotonic), whichever comes first. Batching saves wake-ups of this
    /// thread and, because submissions then come in bursts, of the
    /// messenger thread too; end timestamps are taken in the callbacks, so
    /// batching never changes a measured latency.
    pub fn take(&self, out: &mut Vec<u32>, deadline_ns: u64, batch: usize) {
        let batch = batch.max(1);
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if std::mem::take(&mut g.kick) {
            std::mem::swap(&mut g.idx, out);
            return;
        }
        while g.idx.len() < batch {
            let now = mono_ns();
            if deadline_ns <= now {
                break;
            }
            g.want = batch;
            let (g2, _) = self
                .cv
                .wait_timeout(g, std::time::Duration::from_nanos(deadline_ns - now))
                .unwrap_or_else(|p| p.into_inner());
            g = g2;
            g.want = 0;
            if std::mem::take(&mut g.kick) {
                break;
            }
        }
        std::mem::swap(&mut g.idx, out);
    }
}

static FAST_PATH: std::sync::atomic::AtomicPtr<()> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

static BATCH_CALLBACKS: AtomicBool = AtomicBool::new(false);

/// Run completion callbacks at SCHED_BATCH (see spec::CallbackSched).
pub fn set_batch_callbacks(on: bool) {
    BATCH_CALLBACKS.store(on, Ordering::Relaxed);
}

thread_local!(static SCHED_SET: Cell<bool> = const { Cell::new(false) });

/// Once per library thread, on its first callback: the library creates its
/// threads itself, so this is the first moment the engine runs on them.
#[inline]
fn sched_callback_thread() {
    if SCHED_SET.with(|c| c.replace(true)) || !BATCH_CALLBACKS.load(Ordering::Relaxed) {
        return;
    }
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; failure leaves the policy as it was.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &p) };
}

/// The calling thread keeps its scheduling policy even when it completes
/// ops itself (the submitter, when a target completes inline in submit).
pub fn keep_thread_sched() {
    SCHED_SET.with(|c| c.set(true));
}

/// Install the completion fast path (see Done::complete).
pub fn set_fast_path(f: fn(u32) -> bool) {
    FAST_PATH.store(f as *mut (), Ordering::Release);
}

/// The part of a slot that a library thread touches: address is stable
/// for the life of the process, passed as the callback argument.
pub struct Done {
    pub index: u32,
    pub end_ns: AtomicU64,
    pub queue: &'static CompletionQueue,
}

impl Done {
    /// The end timestamp of an op is taken here, in the library's callback.
    /// Then the engine's fast path may account the op and reissue the slot
    /// on this thread; if it cannot (lock busy, open loop), the index goes
    /// to the submitter's queue.
    #[inline]
    pub fn complete(&self) {
        self.end_ns.store(mono_ns(), Ordering::Relaxed);
        sched_callback_thread();
        let fp = FAST_PATH.load(Ordering::Acquire);
        if !fp.is_null() {
            // SAFETY: only ever set from a `fn(u32) -> bool` in set_fast_path.
            let f: fn(u32) -> bool = unsafe { std::mem::transmute::<*mut (), fn(u32) -> bool>(fp) };
            if f(self.index) {
                return;
            }
        }
        self.queue.push(self.index);
    }

    pub fn arg(&'static self) -> *mut c_void {
        self as *const Done as *mut c_void
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Free,
    InFlight,
    /// Timed out and already counted as an error; the library still owns it.
    Zombie,
}

/// Every op kind a target may issue, fixed once for all targets (S3 and
/// file targets included). Statistics are indexed by `kind as usize`; a
/// run's records carry only the kinds its target reports (`Target::kinds`).
// Stat .. Part are for the S3 and file targets to come.
#[allow(dead_code)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpKind {
    Read = 0,
    Write = 1,
    Remove = 2,
    Stat = 3,
    List = 4,
    Create = 5,
    Open = 6,
    Close = 7,
    Fsync = 8,
    /// One part of a multipart upload.
    Part = 9,
}

impl OpKind {
    pub const COUNT: usize = 10;
    #[cfg(test)]
    pub const ALL: [OpKind; OpKind::COUNT] = [
        OpKind::Read,
        OpKind::Write,
        OpKind::Remove,
        OpKind::Stat,
        OpKind::List,
        OpKind::Create,
        OpKind::Open,
        OpKind::Close,
        OpKind::Fsync,
        OpKind::Part,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Remove => "remove",
            OpKind::Stat => "stat",
            OpKind::List => "list",
            OpKind::Create => "create",
            OpKind::Open => "open",
            OpKind::Close => "close",
            OpKind::Fsync => "fsync",
            OpKind::Part => "part",
        }
    }
}

/// A named part of an op's latency that some targets measure besides the
/// total (an HTTP response's header time, time to first byte...). Each has
/// its own histogram in the op kind's statistics; a target lists the phases
/// each of its op kinds has (`Target::phases`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Response headers received, from the op's latency origin.
    Hdr = 0,
    /// First byte of the response body received, from the op's latency origin.
    Ttfb = 1,
    /// Response headers received after the last request body byte was handed to the connection.
    Server = 2,
}

impl Phase {
    pub const COUNT: usize = 3;

    pub fn name(self) -> &'static str {
        match self {
            Phase::Hdr => "hdr",
            Phase::Ttfb => "ttfb",
            Phase::Server => "server",
        }
    }
}

pub struct Slot {
    pub done: &'static Done,
    pub buf: &'static mut [u8],
    /// NUL-terminated object name, rewritten in place (capacity reserved).
    pub name: Vec<u8>,
    /// The library's completion handle while in flight.
    pub handle: *mut c_void,
    pub state: State,
    pub kind: OpKind,
    pub job: u32,
    /// What the op touches, as the target numbers it: object (rados), image (rbd), job (null).
    pub obj: u64,
    pub offset: u64,
    pub len: usize,
    pub intended_ns: u64,
    pub start_ns: u64,
    pub ramp: bool,
    /// Phase latencies of the op (ns; 0: not measured), indexed by `Phase`,
    /// set by the target in `reap`.
    pub phases: [u64; Phase::COUNT],
}

/// A slot buffer for the life of the process, 4 KiB aligned. Buffers of 2 MiB or more go on
/// transparent huge pages where the kernel offers them (`madvise` mode): 512
/// times fewer page faults to fill them, fewer TLB misses when librados
/// checksums and sends them.
fn alloc_buf(len: usize) -> &'static mut [u8] {
    const HUGE: usize = 2 << 20;
    if len >= HUGE {
        let size = len.div_ceil(HUGE) * HUGE;
        // SAFETY: a fresh private anonymous mapping, one huge page larger
        // than needed so an aligned range fits; never unmapped.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                size + HUGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p != libc::MAP_FAILED {
                let start = (p as usize).next_multiple_of(HUGE);
                libc::madvise(start as *mut c_void, size, libc::MADV_HUGEPAGE);
                return std::slice::from_raw_parts_mut(start as *mut u8, len);
            }
        }
    }
    // 4 KiB aligned, so file targets can use the buffer for direct I/O (O_DIRECT).
    let layout = std::alloc::Layout::from_size_align(len.max(1), 4096).expect("buffer layout");
    // SAFETY: non-zero size; the memory is zeroed and never freed (a slot lives for the process).
    unsafe {
        let p = std::alloc::alloc_zeroed(layout);
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        std::slice::from_raw_parts_mut(p, len)
    }
}

/// Incompressible, non-zero data.
pub fn fill_random(buf: &mut [u8], rng: &mut crate::rng::Rng) {
    for c in buf.chunks_mut(8) {
        let w = rng.next_u64().to_le_bytes();
        c.copy_from_slice(&w[..c.len()]);
    }
}

/// One buffer of incompressible data for the process's life: the body every
/// slot sends when no slot writes its own (writes without verify headers).
pub fn shared_random(len: usize) -> &'static [u8] {
    let buf = alloc_buf(len);
    fill_random(buf, &mut crate::rng::Rng::new(0x5eed));
    buf
}

/// Allocate `n` slots for the life of the process.
pub fn alloc_slots(n: usize, buf_len: usize, queue: &'static CompletionQueue) -> &'static mut [Slot] {
    let mut v = Vec::with_capacity(n);
    let mut fill = crate::rng::Rng::new(0x5eed);
    for i in 0..n {
        let done: &'static Done = Box::leak(Box::new(Done { index: i as u32, end_ns: AtomicU64::new(0), queue }));
        // Incompressible, non-zero data so compression or zero detection does not flatter writes.
        let buf = alloc_buf(buf_len);
        fill_random(buf, &mut fill);
        v.push(Slot {
            done,
            buf,
            name: Vec::with_capacity(256),
            handle: std::ptr::null_mut(),
            state: State::Free,
            kind: OpKind::Write,
            job: 0,
            obj: 0,
            offset: 0,
            len: 0,
            intended_ns: 0,
            start_ns: 0,
            ramp: false,
            phases: [0; Phase::COUNT],
        });
    }
    Box::leak(v.into_boxed_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_wakes_a_sleeping_taker_and_batches() {
        let q: &'static CompletionQueue = Box::leak(Box::new(CompletionQueue::new(8)));
        let mut out = Vec::with_capacity(8);
        q.take(&mut out, mono_ns() + 1_000_000, 1);
        assert!(out.is_empty());
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            q.push(3);
            q.push(5);
        });
        let t0 = mono_ns();
        // One wake for the batch of two.
        q.take(&mut out, mono_ns() + 5_000_000_000, 2);
        assert!(mono_ns() - t0 < 4_000_000_000);
        assert_eq!(out, vec![3, 5]);
        t.join().unwrap();
        // A wake() while nobody sleeps is not lost: the next take returns at once.
        q.wake();
        let t1 = mono_ns();
        let mut none = Vec::with_capacity(8);
        q.take(&mut none, mono_ns() + 5_000_000_000, 1);
        assert!(none.is_empty() && mono_ns() - t1 < 1_000_000_000);
        // And it wakes a sleeper.
        let w = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            q.wake();
        });
        let t2 = mono_ns();
        q.take(&mut none, mono_ns() + 5_000_000_000, 1);
        assert!(mono_ns() - t2 < 4_000_000_000);
        w.join().unwrap();
    }

    #[test]
    fn op_kinds_index_their_table() {
        for (i, k) in OpKind::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i, "{}", k.name());
        }
        let names: std::collections::BTreeSet<_> = OpKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), OpKind::COUNT);
    }
}
