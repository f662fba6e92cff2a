//! One worker thread per slot for blocking I/O (pread/pwrite, and libcephfs
//! on Pacific, which has no non-blocking call): the op is handed to the
//! slot's thread, which runs it and completes it there. `complete()` runs
//! the engine's fast path on that thread, which in a closed loop reissues
//! the same slot: the worker finds its next op pending and runs it without
//! sleeping, so a closed loop costs no wake-up per op.

use crate::errno::ErrKind;
use crate::io::{Done, OpKind};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::thread::Thread;

/// What a worker does with an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Read = 0,
    Write = 1,
    Fsync = 2,
    Fdatasync = 3,
}

impl Op {
    /// The op for a slot's kind: a sync is an fdatasync when `datasync`, else an fsync.
    pub fn of(kind: OpKind, datasync: bool) -> Op {
        match kind {
            OpKind::Read => Op::Read,
            OpKind::Write => Op::Write,
            _ if datasync => Op::Fdatasync,
            _ => Op::Fsync,
        }
    }

    fn from_u8(v: u8) -> Op {
        match v {
            0 => Op::Read,
            1 => Op::Write,
            2 => Op::Fsync,
            _ => Op::Fdatasync,
        }
    }
}

/// Runs one blocking op: returns bytes transferred (or 0) or -errno.
pub trait Exec: Send + Sync + 'static {
    fn run(&self, op: Op, fd: i32, buf: *mut u8, len: usize, off: u64) -> i64;
}

/// The op of one slot, handed from the submitter to the slot's worker.
/// Fields are written before `pending` is set (Release) and read after it
/// is taken (Acquire); the result is written before `complete()`.
#[derive(Default)]
pub struct Cell {
    pending: AtomicBool,
    op: AtomicU8,
    fd: AtomicI32,
    buf: AtomicPtr<u8>,
    len: AtomicUsize,
    off: AtomicU64,
    pub res: AtomicI64,
    done: AtomicPtr<Done>,
    thread: OnceLock<Thread>,
}

impl Cell {
    /// Record the op's parameters (before `post` or an io_uring submission).
    pub fn set(&self, done: &'static Done, op: Op, fd: i32, buf: *mut u8, len: usize, off: u64) {
        self.done.store(done as *const Done as *mut Done, Ordering::Relaxed);
        self.op.store(op as u8, Ordering::Relaxed);
        self.fd.store(fd, Ordering::Relaxed);
        self.buf.store(buf, Ordering::Relaxed);
        self.len.store(len, Ordering::Relaxed);
        self.off.store(off, Ordering::Relaxed);
    }

    /// The completed op's result: bytes transferred, or its errno.
    pub fn result(&self) -> Result<u64, ErrKind> {
        let r = self.res.load(Ordering::Relaxed);
        if r < 0 { Err(ErrKind::errno(r as i32)) } else { Ok(r as u64) }
    }

    /// Store the result and complete the op (end timestamp, fast path).
    pub fn finish(&self, res: i64) {
        self.res.store(res, Ordering::Relaxed);
        let d = self.done.load(Ordering::Acquire);
        // SAFETY: set() stored the slot's &'static Done before the op was issued.
        unsafe { (*d).complete() };
    }
}

/// Per-slot cells, leaked for the life of the process (a worker may still
/// run an abandoned op when the run ends).
pub fn cells(n: usize) -> &'static [Cell] {
    Box::leak((0..n).map(|_| Cell::default()).collect::<Vec<_>>().into_boxed_slice())
}

/// A thread per cell, each running its cell's ops with `exec`.
pub struct Workers {
    cells: &'static [Cell],
}

impl Workers {
    /// Stack of each worker: the fast path (accounting, reissue) runs on it too.
    const STACK: usize = 256 << 10;

    pub fn start<E: Exec>(cells: &'static [Cell], exec: &'static E, name: &str) -> Result<Self, String> {
        for (i, c) in cells.iter().enumerate() {
            let t = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .stack_size(Self::STACK)
                .spawn(move || work(c, exec))
                .map_err(|e| format!("cannot start worker thread {i} of {}: {e}", cells.len()))?;
            let _ = c.thread.set(t.thread().clone());
        }
        Ok(Workers { cells })
    }

    /// Hand slot `i`'s op (already `set`) to its worker.
    #[inline]
    pub fn post(&self, i: usize) {
        let c = &self.cells[i];
        c.pending.store(true, Ordering::Release);
        if let Some(t) = c.thread.get() {
            // A no-op when the worker is not parked (it is the caller itself in a closed loop).
            t.unpark();
        }
    }
}

fn work<E: Exec>(c: &'static Cell, exec: &'static E) {
    // The engine's own thread, blocked in the kernel or a library between ops: SCHED_BATCH (for library
    // callback threads) would delay its wake-ups. 16 threads writing one file on ceph-fuse queue on its inode
    // lock, and with SCHED_BATCH the kernel spun: 510-525 against 768-788 writes/s, 700-775 against 195-200 µs
    // of CPU per write.
    crate::io::keep_thread_sched();
    loop {
        if !c.pending.swap(false, Ordering::Acquire) {
            std::thread::park();
            continue;
        }
        let op = Op::from_u8(c.op.load(Ordering::Relaxed));
        let (fd, buf, len, off) = (
            c.fd.load(Ordering::Relaxed),
            c.buf.load(Ordering::Relaxed),
            c.len.load(Ordering::Relaxed),
            c.off.load(Ordering::Relaxed),
        );
        let r = exec.run(op, fd, buf, len, off);
        c.finish(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::CompletionQueue;

    struct Echo;
    impl Exec for Echo {
        fn run(&self, op: Op, fd: i32, _buf: *mut u8, len: usize, off: u64) -> i64 {
            (op as i64) * 1_000_000 + fd as i64 * 1000 + len as i64 + off as i64
        }
    }

    #[test]
    fn each_op_runs_on_its_worker_and_completes_once() {
        let q: &'static CompletionQueue = Box::leak(Box::new(CompletionQueue::new(4)));
        let done: Vec<&'static Done> =
            (0..3).map(|i| &*Box::leak(Box::new(Done { index: i, end_ns: Default::default(), queue: q }))).collect();
        let cells = cells(3);
        let w = Workers::start(cells, Box::leak(Box::new(Echo)), "t").unwrap();
        for (i, d) in done.iter().enumerate() {
            cells[i].set(d, Op::Write, i as i32, std::ptr::null_mut(), 10, 5);
            w.post(i);
        }
        let mut out = Vec::with_capacity(4);
        let deadline = crate::clock::mono_ns() + 10_000_000_000;
        while out.len() < 3 && crate::clock::mono_ns() < deadline {
            let mut got = Vec::with_capacity(4);
            q.take(&mut got, deadline, 1);
            out.extend(got);
        }
        out.sort();
        assert_eq!(out, [0, 1, 2]);
        for (i, c) in cells.iter().enumerate() {
            assert_eq!(c.res.load(Ordering::Relaxed), 1_000_000 + i as i64 * 1000 + 15);
        }
    }
}
