//! NFS through libnfs, a user-space NFSv4.0 client, without a mount: the
//! same file sets as posix and cephfs (fileset.rs) in a directory of an
//! export, reached over `connections` TCP connections, each its own libnfs
//! context (its own NFSv4 client id) served by its own thread. libnfs 4.0
//! is not thread safe and has no threading of its own, so a context is only
//! ever touched by its service thread: that thread polls the socket and an
//! eventfd, runs `nfs_service`, and issues the ops posted to it. Slots are
//! spread over the connections (slot i on connection i mod connections); an
//! op reissued by the fast path on its own connection's thread is issued at
//! once, any other is posted to that connection's queue.
//!
//! libnfs has no page cache (unless asked for one, which this target does
//! not do): every read and write is an RPC, unlike the kernel's NFS client.
//!
//! The library is loaded at run time by its soname, `libnfs.so.13` (Debian
//! 12's libnfs13, libnfs 4.0.0): the engine builds without libnfs-dev and
//! runs without libnfs when no nfs point is run, as with libcephfs; and the
//! soname pins the 4.0 API, whose `nfs_pread_async` hands the callback
//! libnfs' own buffer (copied into the slot here; libnfs 6 changed that call).
//!
//! libnfs 4.0 encodes an NFSv4 COMPOUND into a fixed 4 KiB buffer, so one
//! WRITE RPC carries at most about 3.9 KiB of data (a larger one fails with
//! "Failed to encode COMPOUND4args"; fixed upstream after 4.0.0, libnfs
//! PR #319). A write op of `bs` bytes is therefore sent as ceil(bs / 3 KiB)
//! WRITE RPCs, all in flight at once, and completes when the last one does
//! (reported as `nfs.write_rpc_bytes`). Reads have no such limit.

use super::block::{self, Rw};
use super::fileset::{self, FileService, Files, Fs, path_error};
use super::{Fatal, Target};
use crate::errno::ErrKind;
use crate::io::{Done, OpKind, Slot};
use crate::rng::Rng;
use crate::spec::{Load, Spec};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::cell::{Cell, RefCell};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NfsSpec {
    /// The server's address (an IPv4 address or a host name).
    #[serde(default = "loopback")]
    pub server: String,
    #[serde(default = "nfs_port")]
    pub port: u16,
    /// The export's NFSv4 pseudo path, e.g. "/cephfs".
    pub export: String,
    /// Directory in the export for the file set (made if missing).
    #[serde(default = "root")]
    pub path: String,
    pub rw: Rw,
    #[serde(default = "block::fifty")]
    pub rwmixread: u32,
    #[serde(default = "block::four_k")]
    pub bs: u64,
    #[serde(default = "block::one_u32")]
    pub numjobs: u32,
    #[serde(default = "block::one_u32")]
    pub nrfiles: u32,
    pub filesize: u64,
    #[serde(default)]
    pub file_service: FileService,
    #[serde(default)]
    pub fsync: u32,
    #[serde(default)]
    pub fdatasync: u32,
    #[serde(default)]
    pub end_fsync: bool,
    #[serde(default)]
    pub prefill: Option<bool>,
    #[serde(default = "fileset::prefix")]
    pub prefix: String,
    /// TCP connections (libnfs contexts, one service thread each); null: one per 8 slots.
    #[serde(default)]
    pub connections: Option<u32>,
    /// Bound on mounting and opening the file set, in seconds.
    #[serde(default = "ten")]
    pub timeout_s: f64,
}

fn loopback() -> String {
    "127.0.0.1".into()
}
fn nfs_port() -> u16 {
    2049
}
fn root() -> String {
    "/fathom".into()
}
fn ten() -> f64 {
    10.0
}

/// Largest op: Ganesha's default MaxRead and MaxWrite.
const MAX_BS: u64 = 1 << 20;
/// Data bytes per WRITE RPC (libnfs 4.0's 4 KiB COMPOUND buffer, less room for the RPC and AUTH_SYS headers).
const WRITE_RPC: usize = 3072;
const MAX_CONNECTIONS: u32 = 1024;

impl NfsSpec {
    pub fn validate(&mut self, load: &Load, _verify: bool) -> Result<(), String> {
        let url_safe = |s: &str| !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || "?&#\0".contains(c));
        if !url_safe(&self.server) || self.server.contains('/') {
            return Err(format!("target.server must be an address or host name, got {:?}", self.server));
        }
        if !self.export.starts_with('/') || !url_safe(&self.export) {
            return Err(format!("target.export must be the export's absolute pseudo path, got {:?}", self.export));
        }
        if !self.path.starts_with('/') || self.path.contains('\0') {
            return Err(format!("target.path must be an absolute path in the export, got {:?}", self.path));
        }
        if self.port == 0 {
            return Err("target.port must be 1..65535".into());
        }
        if self.bs == 0 || self.bs > MAX_BS {
            return Err(format!("target.bs must be 1 byte .. 1 MiB (the server's usual maximum), got {}", self.bs));
        }
        block::validate(self.rwmixread, self.numjobs)?;
        fileset::validate(self.nrfiles, Some(self.filesize), self.bs, self.fsync, self.fdatasync, &self.prefix)?;
        let slots = self.numjobs as u64 * load.iodepth as u64;
        if let Some(c) = self.connections
            && (c == 0 || c > MAX_CONNECTIONS || c as u64 > slots)
        {
            return Err(format!(
                "target.connections must be 1..{}, at most numjobs x iodepth ({slots}), got {c}",
                MAX_CONNECTIONS
            ));
        }
        if !(self.timeout_s > 0.0 && self.timeout_s <= 3600.0) {
            return Err(format!("target.timeout_s must be in (0, 3600], got {}", self.timeout_s));
        }
        if !load.bounded() {
            return Err("an nfs run needs an end: load.duration_s, load.ops or load.bytes".into());
        }
        Ok(())
    }

    fn connections(&self, slots: u32) -> u32 {
        self.connections.unwrap_or_else(|| slots.div_ceil(8).clamp(1, 128))
    }
}

type Ctx = *mut c_void;
type Fh = *mut c_void;
type Cb = unsafe extern "C" fn(c_int, Ctx, *mut c_void, *mut c_void);

#[repr(C)]
struct Url {
    server: *mut c_char,
    path: *mut c_char,
    file: *mut c_char,
}

/// The libnfs 4.0 calls the target uses, resolved from the library.
struct Lib {
    init_context: unsafe extern "C" fn() -> Ctx,
    destroy_context: unsafe extern "C" fn(Ctx),
    parse_url_dir: unsafe extern "C" fn(Ctx, *const c_char) -> *mut Url,
    destroy_url: unsafe extern "C" fn(*mut Url),
    set_client_name: unsafe extern "C" fn(Ctx, *const c_char),
    set_timeout: unsafe extern "C" fn(Ctx, c_int),
    get_error: unsafe extern "C" fn(Ctx) -> *mut c_char,
    mount: unsafe extern "C" fn(Ctx, *const c_char, *const c_char) -> c_int,
    mkdir: unsafe extern "C" fn(Ctx, *const c_char) -> c_int,
    open2: unsafe extern "C" fn(Ctx, *const c_char, c_int, c_int, *mut Fh) -> c_int,
    close: unsafe extern "C" fn(Ctx, Fh) -> c_int,
    stat64: unsafe extern "C" fn(Ctx, *const c_char, *mut [u64; 17]) -> c_int,
    fsync: unsafe extern "C" fn(Ctx, Fh) -> c_int,
    get_fd: unsafe extern "C" fn(Ctx) -> c_int,
    which_events: unsafe extern "C" fn(Ctx) -> c_int,
    service: unsafe extern "C" fn(Ctx, c_int) -> c_int,
    pread_async: unsafe extern "C" fn(Ctx, Fh, u64, u64, Cb, *mut c_void) -> c_int,
    pwrite_async: unsafe extern "C" fn(Ctx, Fh, u64, u64, *const c_void, Cb, *mut c_void) -> c_int,
    fsync_async: unsafe extern "C" fn(Ctx, Fh, Cb, *mut c_void) -> c_int,
}

const SONAME: &str = "libnfs.so.13";

impl Lib {
    // Each transmute's target type is the field it fills, declared above from libnfs 4.0's header.
    #[allow(clippy::missing_transmute_annotations)]
    fn load() -> Result<&'static Lib, Fatal> {
        let so = CString::new(SONAME).expect("no NUL");
        // SAFETY: dlopen with a valid name; the handle is kept for the life of the process.
        let h = unsafe { libc::dlopen(so.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(Fatal::ceph(
                libc::ENOENT,
                format!("cannot load {SONAME}: install the libnfs13 package (make install does)"),
            ));
        }
        let sym = |name: &str| -> Result<*mut c_void, Fatal> {
            let c = CString::new(name).expect("no NUL");
            // SAFETY: valid handle and name.
            let p = unsafe { libc::dlsym(h, c.as_ptr()) };
            if p.is_null() {
                Err(Fatal::ceph(libc::ENOSYS, format!("{SONAME} has no {name}: it is not libnfs 4.0")))
            } else {
                Ok(p)
            }
        };
        // SAFETY: each symbol has the C signature declared in libnfs 4.0's libnfs.h.
        let lib = unsafe {
            Lib {
                init_context: std::mem::transmute::<*mut c_void, _>(sym("nfs_init_context")?),
                destroy_context: std::mem::transmute::<*mut c_void, _>(sym("nfs_destroy_context")?),
                parse_url_dir: std::mem::transmute::<*mut c_void, _>(sym("nfs_parse_url_dir")?),
                destroy_url: std::mem::transmute::<*mut c_void, _>(sym("nfs_destroy_url")?),
                set_client_name: std::mem::transmute::<*mut c_void, _>(sym("nfs4_set_client_name")?),
                set_timeout: std::mem::transmute::<*mut c_void, _>(sym("nfs_set_timeout")?),
                get_error: std::mem::transmute::<*mut c_void, _>(sym("nfs_get_error")?),
                mount: std::mem::transmute::<*mut c_void, _>(sym("nfs_mount")?),
                mkdir: std::mem::transmute::<*mut c_void, _>(sym("nfs_mkdir")?),
                open2: std::mem::transmute::<*mut c_void, _>(sym("nfs_open2")?),
                close: std::mem::transmute::<*mut c_void, _>(sym("nfs_close")?),
                stat64: std::mem::transmute::<*mut c_void, _>(sym("nfs_stat64")?),
                fsync: std::mem::transmute::<*mut c_void, _>(sym("nfs_fsync")?),
                get_fd: std::mem::transmute::<*mut c_void, _>(sym("nfs_get_fd")?),
                which_events: std::mem::transmute::<*mut c_void, _>(sym("nfs_which_events")?),
                service: std::mem::transmute::<*mut c_void, _>(sym("nfs_service")?),
                pread_async: std::mem::transmute::<*mut c_void, _>(sym("nfs_pread_async")?),
                pwrite_async: std::mem::transmute::<*mut c_void, _>(sym("nfs_pwrite_async")?),
                fsync_async: std::mem::transmute::<*mut c_void, _>(sym("nfs_fsync_async")?),
            }
        };
        Ok(Box::leak(Box::new(lib)))
    }

    fn error(&self, ctx: Ctx) -> String {
        // SAFETY: live context; libnfs returns NULL or a NUL-terminated string it owns.
        let p = unsafe { (self.get_error)(ctx) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: checked non-null above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// Open (creating it if asked and missing) with the sync API. Whether the file exists is asked first
    /// (GETATTR), for two faults of libnfs 4.0's NFSv4 OPEN: with O_CREAT it is an exclusive create (EEXIST
    /// on an existing file), and after an OPEN that failed (NFS4ERR_NOENT) every later OPEN on the context
    /// fails too (the open-owner's sequence id goes out of step with the server's).
    fn open_fh(&self, ctx: Ctx, path: &str, flags: i32) -> Result<Fh, i32> {
        let p = CString::new(path).map_err(|_| libc::EINVAL)?;
        let mut st = [0u64; 17];
        // SAFETY: live context; st has struct nfs_stat_64's 17 u64 fields.
        let exists = match -unsafe { (self.stat64)(ctx, p.as_ptr(), &mut st) } {
            0 => true,
            libc::ENOENT => false,
            e => return Err(e),
        };
        if !exists && flags & libc::O_CREAT == 0 {
            return Err(libc::ENOENT);
        }
        let mut f = flags & (libc::O_ACCMODE | libc::O_SYNC | libc::O_TRUNC);
        if !exists {
            f |= libc::O_CREAT;
        }
        let mut fh: Fh = std::ptr::null_mut();
        // SAFETY: live context, NUL-terminated path, out-pointer.
        let r = unsafe { (self.open2)(ctx, p.as_ptr(), f, 0o644, &mut fh) };
        if r < 0 { Err(-r) } else { Ok(fh) }
    }
}

/// A connection's context while only the setup thread uses it (before the service threads start and after
/// they stop): the sync API, and the file-set code's view of the export.
struct Setup {
    lib: &'static Lib,
    ctx: Ctx,
    /// Every handle opened on the context, by index (the file set's "descriptors"): path, flags, handle.
    table: RefCell<Vec<(String, i32, Fh)>>,
}

impl Fs for Setup {
    fn open(&self, path: &str, flags: i32) -> Result<i32, i32> {
        let fh = self.lib.open_fh(self.ctx, path, flags)?;
        let mut t = self.table.borrow_mut();
        t.push((path.to_string(), flags & !libc::O_CREAT, fh));
        Ok(t.len() as i32 - 1)
    }

    fn size(&self, path: &str) -> Result<u64, i32> {
        let p = CString::new(path).map_err(|_| libc::EINVAL)?;
        let mut st = [0u64; 17];
        // SAFETY: live context; st has struct nfs_stat_64's 17 u64 fields.
        let r = unsafe { (self.lib.stat64)(self.ctx, p.as_ptr(), &mut st) };
        if r < 0 { Err(-r) } else { Ok(st[7]) }
    }

    /// The layout's writes: every WRITE RPC of the buffer in flight at once (one at a time, a 10 MiB file
    /// would take 3414 round trips), then a service loop on this thread until the last is answered.
    fn pwrite(&self, fd: i32, buf: &[u8], off: u64) -> Result<usize, i32> {
        let fh = self.table.borrow()[fd as usize].2;
        let n = buf.len().div_ceil(WRITE_RPC);
        let state = Box::new(Batch { left: Cell::new(n), bytes: Cell::new(0), err: Cell::new(0) });
        let pr = &*state as *const Batch as *mut c_void;
        for k in 0..n {
            let at = k * WRITE_RPC;
            let l = WRITE_RPC.min(buf.len() - at);
            // SAFETY: open handle; the range lies inside buf, which outlives the loop below; `state` too.
            let r = unsafe {
                (self.lib.pwrite_async)(self.ctx, fh, off + at as u64, l as u64, buf[at..].as_ptr().cast(), batch_cb, pr)
            };
            if r < 0 {
                state.err.set(libc::EIO);
                state.left.set(state.left.get() - (n - k));
                break;
            }
        }
        while state.left.get() > 0 {
            // SAFETY: this thread owns the context (no service thread runs yet).
            let mut pfd = unsafe {
                libc::pollfd { fd: (self.lib.get_fd)(self.ctx), events: (self.lib.which_events)(self.ctx) as i16, revents: 0 }
            };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut pfd, 1, 1000) } > 0
                && unsafe { (self.lib.service)(self.ctx, pfd.revents as c_int) } < 0
            {
                std::mem::forget(state); // RPCs still queued may yet call back into it
                return Err(libc::ENOTCONN);
            }
        }
        match state.err.get() {
            0 if state.bytes.get() == buf.len() => Ok(buf.len()),
            0 => Err(libc::EIO),
            e => Err(e),
        }
    }

    fn fdatasync(&self, fd: i32) -> Result<(), i32> {
        let fh = self.table.borrow()[fd as usize].2;
        // SAFETY: open handle.
        let r = unsafe { (self.lib.fsync)(self.ctx, fh) };
        if r < 0 { Err(-r) } else { Ok(()) }
    }

    fn close(&self, fd: i32) {
        let fh = std::mem::replace(&mut self.table.borrow_mut()[fd as usize].2, std::ptr::null_mut());
        if !fh.is_null() {
            // SAFETY: open handle, closed once.
            unsafe { (self.lib.close)(self.ctx, fh) };
        }
    }
}

/// The layout's WRITE RPCs of one buffer (on the setup thread).
struct Batch {
    left: Cell<usize>,
    bytes: Cell<usize>,
    err: Cell<i32>,
}

unsafe extern "C" fn batch_cb(err: c_int, _ctx: Ctx, _data: *mut c_void, pr: *mut c_void) {
    // SAFETY: pr is the setup thread's Batch, alive until its last RPC is answered (leaked if that never comes).
    let b = unsafe { &*(pr as *const Batch) };
    if err < 0 {
        if b.err.get() == 0 {
            b.err.set(-err);
        }
    } else {
        b.bytes.set(b.bytes.get() + err as usize);
    }
    b.left.set(b.left.get() - 1);
}

const READ: u8 = 0;
const WRITE: u8 = 1;
const SYNC: u8 = 2;

/// One slot's op, handed to its connection's thread. Written before it is posted (the queue's mutex, or the
/// same thread) and read there; the chunk counters are only touched by that thread.
struct Op {
    done: AtomicPtr<Done>,
    kind: AtomicU8,
    fd: AtomicUsize,
    buf: AtomicPtr<u8>,
    len: AtomicUsize,
    off: AtomicU64,
    left: AtomicU32,
    bytes: AtomicI64,
    err: AtomicI64,
    res: AtomicI64,
    conn: usize,
}

impl Op {
    fn finish(&self, res: i64) {
        self.res.store(res, Ordering::Relaxed);
        let d = self.done.load(Ordering::Acquire);
        // SAFETY: submit stored the slot's &'static Done before the op was issued.
        unsafe { (*d).complete() };
    }
}

/// One libnfs context and the thread that serves it.
struct Conn {
    lib: &'static Lib,
    ctx: Ctx,
    /// Handles by file-set descriptor (null where none of this connection's slots use the file).
    handles: Vec<Fh>,
    queue: Mutex<Vec<u32>>,
    efd: c_int,
    stop: AtomicBool,
    dead: AtomicBool,
    index: usize,
}

// SAFETY: a context and its handles are only used by one thread at a time: the setup thread, then the
// connection's service thread (started after setup, joined before teardown); other threads only post
// slot indices through the mutex and the eventfd.
unsafe impl Send for Conn {}
unsafe impl Sync for Conn {}

thread_local! {
    /// The connection this thread serves (usize::MAX: none), and whether it is inside `issue`.
    static SERVING: Cell<usize> = const { Cell::new(usize::MAX) };
    static ISSUING: Cell<bool> = const { Cell::new(false) };
}

unsafe extern "C" fn read_cb(err: c_int, _ctx: Ctx, data: *mut c_void, pr: *mut c_void) {
    // SAFETY: pr is the slot's leaked Op (issue); data holds `err` bytes when err > 0.
    let op = unsafe { &*(pr as *const Op) };
    if err > 0 && !data.is_null() {
        let n = (err as usize).min(op.len.load(Ordering::Relaxed));
        // SAFETY: the slot buffer holds len bytes and outlives the op; libnfs' buffer holds err bytes.
        unsafe { std::ptr::copy_nonoverlapping(data as *const u8, op.buf.load(Ordering::Relaxed), n) };
    }
    op.finish(err as i64);
}

unsafe extern "C" fn write_cb(err: c_int, _ctx: Ctx, _data: *mut c_void, pr: *mut c_void) {
    // SAFETY: pr is the slot's leaked Op.
    let op = unsafe { &*(pr as *const Op) };
    chunk_done(op, err as i64);
}

unsafe extern "C" fn sync_cb(err: c_int, _ctx: Ctx, _data: *mut c_void, pr: *mut c_void) {
    // SAFETY: pr is the slot's leaked Op.
    let op = unsafe { &*(pr as *const Op) };
    op.finish(if err < 0 { err as i64 } else { 0 });
}

/// One WRITE RPC of an op is over (r: bytes or -errno); the op completes with the last one.
fn chunk_done(op: &Op, r: i64) {
    if r < 0 {
        if op.err.load(Ordering::Relaxed) == 0 {
            op.err.store(r, Ordering::Relaxed);
        }
    } else {
        op.bytes.fetch_add(r, Ordering::Relaxed);
    }
    if op.left.fetch_sub(1, Ordering::Relaxed) == 1 {
        let e = op.err.load(Ordering::Relaxed);
        op.finish(if e < 0 { e } else { op.bytes.load(Ordering::Relaxed) });
    }
}

impl Conn {
    /// Issue a posted op (on this connection's service thread only).
    fn issue(&self, op: &'static Op) {
        if self.dead.load(Ordering::Relaxed) {
            op.finish(-(libc::ENOTCONN as i64));
            return;
        }
        let was = ISSUING.with(|i| i.replace(true));
        let fh = self.handles[op.fd.load(Ordering::Relaxed)];
        let (buf, len, off) =
            (op.buf.load(Ordering::Relaxed), op.len.load(Ordering::Relaxed), op.off.load(Ordering::Relaxed));
        let pr = op as *const Op as *mut c_void;
        // SAFETY: this thread owns the context; the handle is open on it; the slot buffer outlives the op.
        unsafe {
            match op.kind.load(Ordering::Relaxed) {
                READ => {
                    if (self.lib.pread_async)(self.ctx, fh, off, len as u64, read_cb, pr) < 0 {
                        op.finish(-(libc::EIO as i64));
                    }
                }
                WRITE => {
                    let n = len.div_ceil(WRITE_RPC).max(1);
                    op.left.store(n as u32, Ordering::Relaxed);
                    op.bytes.store(0, Ordering::Relaxed);
                    op.err.store(0, Ordering::Relaxed);
                    for k in 0..n {
                        let at = k * WRITE_RPC;
                        let l = WRITE_RPC.min(len - at);
                        let r = (self.lib.pwrite_async)(
                            self.ctx,
                            fh,
                            off + at as u64,
                            l as u64,
                            buf.add(at) as *const c_void,
                            write_cb,
                            pr,
                        );
                        if r < 0 {
                            // the RPCs not queued fail now; the op completes with the last one in flight
                            for _ in k..n {
                                chunk_done(op, -(libc::EIO as i64));
                            }
                            break;
                        }
                    }
                }
                _ => {
                    if (self.lib.fsync_async)(self.ctx, fh, sync_cb, pr) < 0 {
                        op.finish(-(libc::EIO as i64));
                    }
                }
            }
        }
        ISSUING.with(|i| i.set(was));
    }

    fn post(&self, idx: u32) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).push(idx);
        self.wake();
    }

    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: valid eventfd; 8 bytes from a u64.
        unsafe { libc::write(self.efd, (&one as *const u64).cast(), 8) };
    }

    fn serve(&self, ops: &'static [Op]) {
        SERVING.with(|s| s.set(self.index));
        let mut batch: Vec<u32> = Vec::with_capacity(64);
        while !self.stop.load(Ordering::Acquire) {
            loop {
                std::mem::swap(&mut batch, &mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()));
                if batch.is_empty() {
                    break;
                }
                for idx in batch.drain(..) {
                    self.issue(&ops[idx as usize]);
                }
            }
            let dead = self.dead.load(Ordering::Relaxed);
            // SAFETY: this thread owns the context.
            let (fd, ev) = unsafe { ((self.lib.get_fd)(self.ctx), (self.lib.which_events)(self.ctx)) };
            let mut pfd = [
                libc::pollfd { fd: self.efd, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: if dead { -1 } else { fd }, events: ev as i16, revents: 0 },
            ];
            // SAFETY: two valid pollfd entries.
            let n = unsafe { libc::poll(pfd.as_mut_ptr(), 2, 1000) };
            if n <= 0 {
                continue;
            }
            if pfd[0].revents != 0 {
                let mut v: u64 = 0;
                // SAFETY: valid eventfd; reads its 8-byte counter.
                unsafe { libc::read(self.efd, (&mut v as *mut u64).cast(), 8) };
            }
            if pfd[1].revents != 0 {
                // SAFETY: this thread owns the context; callbacks run here.
                if unsafe { (self.lib.service)(self.ctx, pfd[1].revents as c_int) } < 0 {
                    // the connection cannot be used again: ops still in it wait for the engine's op_timeout
                    self.dead.store(true, Ordering::Relaxed);
                    eprintln!("nfs connection {} failed: {}", self.index, self.lib.error(self.ctx));
                }
            }
        }
    }
}

pub struct Nfs {
    lib: &'static Lib,
    conns: &'static [Conn],
    threads: Vec<std::thread::JoinHandle<()>>,
    ops: &'static [Op],
    files: Files,
    end_fsync: bool,
    extras: Value,
}

impl Nfs {
    pub fn open(t: &NfsSpec, spec: &Spec) -> Result<Self, Fatal> {
        let lib = Lib::load()?;
        let where_ = format!("nfs://{}:{}{}", t.server, t.port, t.export);
        let bound = 2.0 * t.timeout_s + 10.0;
        let done: &'static AtomicBool = Box::leak(Box::default());
        crate::process::watchdog(
            bound,
            done,
            "ETIMEDOUT",
            format!("mounting {where_} (NFSv4.0) and opening the file set made no progress for {bound:.0} s"),
            3,
        );
        let slots = (t.numjobs * spec.load.iodepth) as usize;
        let nconn = t.connections(slots as u32) as usize;
        let ctxs = (0..nconn).map(|c| mount(lib, t, c, &where_)).collect::<Result<Vec<_>, _>>()?;
        let setup = Setup { lib, ctx: ctxs[0], table: RefCell::new(Vec::new()) };
        let mut made = String::new();
        for part in t.path.split('/').filter(|p| !p.is_empty()) {
            made.push('/');
            made.push_str(part);
            if setup.size(&made).is_ok() {
                continue;
            }
            let p = CString::new(made.as_str()).map_err(|_| Fatal::spec("path contains NUL"))?;
            // SAFETY: mounted context, NUL-terminated path.
            let r = unsafe { (lib.mkdir)(setup.ctx, p.as_ptr()) };
            if r < 0 && r != -libc::EEXIST {
                return Err(path_error(-r, "creating", &format!("{where_}{made}")));
            }
        }
        let flags = if t.rw.writes() || t.fsync.max(t.fdatasync) > 0 { libc::O_RDWR } else { libc::O_RDONLY };
        let files = fileset::count(t.file_service, t.numjobs, t.nrfiles);
        let opened = fileset::open_set(
            &setup,
            &fileset::SetParams {
                dir: &t.path,
                prefix: &t.prefix,
                service: t.file_service,
                numjobs: t.numjobs,
                nrfiles: t.nrfiles,
                filesize: t.filesize,
                bs: t.bs,
                reads: t.rw.reads(),
                prefill: t.prefill,
                verify: spec.verify,
                flags: flags | libc::O_CREAT,
                // NFS file handles are not kernel descriptors: one handle per file and connection is enough
                budget: files,
            },
        )?;
        // Each connection opens the files its slots use (slot i is job i / iodepth's, on connection i mod n).
        let table = setup.table.into_inner();
        let mut need = vec![vec![false; table.len()]; nconn];
        for (j, job) in opened.jobs.iter().enumerate() {
            for s in j * spec.load.iodepth as usize..(j + 1) * spec.load.iodepth as usize {
                for &(_, fd) in &job.files {
                    need[s % nconn][fd as usize] = true;
                }
            }
        }
        let mut conns = Vec::with_capacity(nconn);
        for (c, &ctx) in ctxs.iter().enumerate() {
            let mut handles = vec![std::ptr::null_mut(); table.len()];
            for (fd, (path, fl, fh)) in table.iter().enumerate() {
                if c == 0 {
                    handles[fd] = *fh;
                } else if need[c][fd] {
                    handles[fd] = lib.open_fh(ctx, path, *fl).map_err(|e| path_error(e, "opening", path))?;
                }
            }
            // SAFETY: plain eventfd creation.
            let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            if efd < 0 {
                return Err(Fatal::ceph(libc::EMFILE, "cannot create an eventfd for an NFS connection"));
            }
            // SAFETY: mounted context; no timeout while running (the engine's op_timeout bounds ops).
            unsafe { (lib.set_timeout)(ctx, -1) };
            conns.push(Conn {
                lib,
                ctx,
                handles,
                queue: Mutex::new(Vec::with_capacity(slots / nconn + 1)),
                efd,
                stop: AtomicBool::new(false),
                dead: AtomicBool::new(false),
                index: c,
            });
        }
        done.store(true, Ordering::SeqCst);
        let conns: &'static [Conn] = Box::leak(conns.into_boxed_slice());
        let ops: &'static [Op] = Box::leak(
            (0..slots)
                .map(|i| Op {
                    done: AtomicPtr::new(std::ptr::null_mut()),
                    kind: AtomicU8::new(READ),
                    fd: AtomicUsize::new(0),
                    buf: AtomicPtr::new(std::ptr::null_mut()),
                    len: AtomicUsize::new(0),
                    off: AtomicU64::new(0),
                    left: AtomicU32::new(0),
                    bytes: AtomicI64::new(0),
                    err: AtomicI64::new(0),
                    res: AtomicI64::new(0),
                    conn: i % nconn,
                })
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let mut threads = Vec::with_capacity(nconn);
        for c in conns {
            threads.push(
                std::thread::Builder::new()
                    .name(format!("nfs-{}", c.index))
                    .stack_size(256 << 10)
                    .spawn(move || c.serve(ops))
                    .map_err(|e| Fatal::ceph(libc::EAGAIN, format!("cannot start NFS service thread: {e}")))?,
            );
        }
        let sync_every = if t.rw.writes() { t.fsync.max(t.fdatasync) } else { 0 };
        let extras = json!({
            "server": t.server, "port": t.port, "export": t.export, "path": t.path, "version": "4.0",
            "files": opened.names.len(), "filesize": t.filesize, "connections": nconn,
            "laid_out": opened.laid_out, "layout_s": opened.layout_s, "library": SONAME,
            "write_rpc_bytes": WRITE_RPC, "page_cache": false,
        });
        Ok(Nfs {
            lib,
            conns,
            threads,
            ops,
            files: Files::new(opened, t.bs, t.rw, t.rwmixread, sync_every, slots),
            end_fsync: t.end_fsync,
            extras,
        })
    }

    /// Stop and join the service threads; the contexts are the calling thread's again.
    fn stop(&mut self) {
        for c in self.conns {
            c.stop.store(true, Ordering::Release);
            c.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A mounted context for connection `c`, its own NFSv4 client.
fn mount(lib: &'static Lib, t: &NfsSpec, c: usize, where_: &str) -> Result<Ctx, Fatal> {
    // SAFETY: plain constructor.
    let ctx = unsafe { (lib.init_context)() };
    if ctx.is_null() {
        return Err(Fatal::ceph(libc::ENOMEM, "nfs_init_context failed"));
    }
    let url = CString::new(format!("nfs://{}{}?version=4&nfsport={}", t.server, t.export, t.port))
        .map_err(|_| Fatal::spec("server or export contains NUL"))?;
    // A client id of its own: contexts sharing one would take each other's state (a new SETCLIENTID with the
    // same id and another verifier is a client reboot to the server).
    let id = CString::new(format!("fathom-engine-{}-{}-{}", std::process::id(), c, crate::clock::mono_ns()))
        .expect("no NUL");
    // SAFETY: live context, NUL-terminated strings; the url struct is freed after the mount.
    unsafe {
        (lib.set_client_name)(ctx, id.as_ptr());
        (lib.set_timeout)(ctx, (t.timeout_s * 1000.0).ceil() as c_int);
        let u = (lib.parse_url_dir)(ctx, url.as_ptr());
        if u.is_null() {
            return Err(Fatal::spec(format!("libnfs cannot read the URL {where_}: {}", lib.error(ctx))));
        }
        let r = (lib.mount)(ctx, (*u).server, (*u).path);
        (lib.destroy_url)(u);
        if r < 0 {
            let msg = lib.error(ctx);
            let why = match -r {
                libc::ENOENT => format!("the server at {}:{} has no export {}", t.server, t.port, t.export),
                libc::EACCES | libc::EPERM => format!("the server refused this client access to {}", t.export),
                _ => format!(
                    "is an NFSv4 server listening at {}:{} with minor version 0 enabled? (fathom starts nfs-ganesha \
                     for its local cluster)",
                    t.server, t.port
                ),
            };
            return Err(Fatal::ceph(r, format!("mounting {where_} (NFSv4.0) failed: {msg}: {why}")));
        }
    }
    Ok(ctx)
}

impl Target for Nfs {
    fn kinds(&self) -> Vec<OpKind> {
        self.files.walk.kinds()
    }

    fn buf_len(&self) -> usize {
        self.files.buf_len()
    }

    fn jobs(&self) -> u32 {
        self.files.jobs()
    }

    fn next_op(&mut self, s: &mut Slot, rng: &mut Rng) -> bool {
        self.files.next_op(s, rng)
    }

    fn submit(&mut self, s: &mut Slot) -> Result<(), ErrKind> {
        let idx = s.done.index as usize;
        let ops: &'static [Op] = self.ops;
        let op = &ops[idx];
        op.done.store(s.done as *const Done as *mut Done, Ordering::Relaxed);
        op.kind.store(
            match s.kind {
                OpKind::Read => READ,
                OpKind::Write => WRITE,
                _ => SYNC,
            },
            Ordering::Relaxed,
        );
        op.fd.store(self.files.slot_fd[idx] as usize, Ordering::Relaxed);
        op.buf.store(s.buf.as_mut_ptr(), Ordering::Relaxed);
        op.len.store(s.len, Ordering::Relaxed);
        op.off.store(s.offset, Ordering::Relaxed);
        let c = &self.conns[op.conn];
        // On its own connection's thread (a reissue from a callback) the op goes out at once; inside `issue`
        // (a completion of an op that failed to queue) it waits for the loop, so the stack does not grow.
        if SERVING.with(|x| x.get()) == op.conn && !ISSUING.with(|x| x.get()) {
            c.issue(op);
        } else {
            c.post(idx as u32);
        }
        Ok(())
    }

    fn reap(&mut self, s: &mut Slot) -> Result<u64, ErrKind> {
        let r = self.ops[s.done.index as usize].res.load(Ordering::Relaxed);
        if r < 0 { Err(ErrKind::errno(r as i32)) } else { Ok(r as u64) }
    }

    fn describe(&self, s: &Slot) -> String {
        self.files.describe(s)
    }

    fn finish(&mut self) -> Result<Vec<(String, Value)>, Fatal> {
        self.stop();
        let mut x = self.extras.clone();
        if self.end_fsync {
            let (lib, c) = (self.lib, &self.conns[0]);
            // SAFETY: the service threads are stopped; open handles (COMMIT syncs the file on the server).
            let took = self.files.end_fsync(|fd| match unsafe { (lib.fsync)(c.ctx, c.handles[fd as usize]) } {
                r if r < 0 => Err(-r),
                _ => Ok(()),
            })?;
            x["end_fsync_s"] = json!(took);
        }
        Ok(vec![("nfs".into(), x)])
    }

    fn close(&mut self) {
        self.stop();
        for c in self.conns {
            for &fh in c.handles.iter().filter(|h| !h.is_null()) {
                // SAFETY: service threads stopped; each handle closed once (unstable writes are committed).
                unsafe { (self.lib.close)(c.ctx, fh) };
            }
            // SAFETY: nothing uses the context after this.
            unsafe { (self.lib.destroy_context)(c.ctx) };
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::parse;

    fn nfs(target: &str, load: &str) -> Result<crate::spec::Spec, String> {
        parse(&format!(
            r#"{{"target":{{"kind":"nfs","export":"/local","rw":"randread","filesize":65536{target}}},"load":{load}}}"#
        ))
    }

    #[test]
    fn defaults_and_rules() {
        let s = nfs("", r#"{"ops":1}"#).unwrap();
        let v = serde_json::to_value(&s.target).unwrap();
        assert_eq!(
            (v["server"].as_str(), v["port"].as_u64(), v["path"].as_str(), v["bs"].as_u64()),
            (Some("127.0.0.1"), Some(2049), Some("/fathom"), Some(4096))
        );
        let d = r#"{"ops":1}"#;
        for (target, load, field) in [
            (r#","export":"local""#, d, "export"),
            (r#","server":"a/b""#, d, "server"),
            (r#","path":"rel""#, d, "path"),
            (r#","bs":2097152,"filesize":4194304"#, d, "bs"),
            (r#","bs":131072"#, d, "filesize"),
            (r#","fsync":1,"fdatasync":2"#, d, "fdatasync"),
            (r#","connections":0"#, d, "connections"),
            (r#","connections":3"#, r#"{"ops":1,"iodepth":2}"#, "connections"),
            ("", "{}", "end"),
            (r#","direct":true"#, d, "direct"),
        ] {
            let e = nfs(target, load).unwrap_err();
            assert!(e.contains(field), "{target}: {e}");
        }
    }

    #[test]
    fn one_connection_per_eight_slots_by_default() {
        let s = nfs("", r#"{"ops":1,"iodepth":1}"#).unwrap();
        let crate::targets::TargetSpec::Nfs(t) = &s.target else { panic!("not nfs") };
        assert_eq!(t.connections(1), 1);
        assert_eq!(t.connections(10), 2);
        assert_eq!(t.connections(1000), 125);
        assert_eq!(t.connections(100_000), 128);
    }
}
