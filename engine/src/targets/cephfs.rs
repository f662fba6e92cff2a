//! CephFS through libcephfs, without a mount: the same file sets as posix
//! (fileset.rs) in a directory of the file system, one shared client mount
//! (one MDS session, as one client machine), one worker thread per slot
//! (libcephfs in Pacific has only blocking I/O calls).
//!
//! The library is loaded at run time by its soname (`libcephfs.so.2`,
//! package libcephfs2) and only Pacific (16.2) symbols are required, so the
//! engine builds and runs without libcephfs when no cephfs point is run.
//! `ceph_ll_nonblocking_readv_writev` (Reef and later) is looked up too and
//! reported in the summary (`cephfs.nonblocking`); ops still go through the
//! worker threads, the path every supported release has.

use super::block::{self, Rw};
use super::fileset::{self, FileService, Files, Fs, path_error};
use super::workers::{self, Cell, Exec, Op, Workers};
use super::{Fatal, Target};
use crate::ceph::{Connection, option_text};
use crate::errno::ErrKind;
use crate::io::{OpKind, Slot};
use crate::rng::Rng;
use crate::spec::{Load, Spec};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::ffi::{CString, c_char, c_int, c_void};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CephfsSpec {
    #[serde(default)]
    pub connection: Connection,
    /// The file system's name (null: the cluster's default).
    #[serde(default)]
    pub fs: Option<String>,
    /// Directory in the file system for the file set (made if missing).
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
    /// O_DIRECT: bypass the client's object cacher.
    #[serde(default)]
    pub direct: bool,
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
}

fn root() -> String {
    "/fathom".into()
}

impl CephfsSpec {
    pub fn validate(&mut self, load: &Load, _verify: bool) -> Result<(), String> {
        self.connection.validate("target.connection")?;
        if !self.path.starts_with('/') || self.path.contains('\0') {
            return Err(format!("target.path must be an absolute path in the file system, got {:?}", self.path));
        }
        if self.bs == 0 || self.bs > (64 << 20) {
            return Err(format!("target.bs must be 1 byte .. 64 MiB, got {}", self.bs));
        }
        block::validate(self.rwmixread, self.numjobs)?;
        fileset::validate(self.nrfiles, Some(self.filesize), self.bs, self.fsync, self.fdatasync, &self.prefix)?;
        let slots = self.numjobs as u64 * load.iodepth as u64;
        if slots > 16384 {
            return Err(format!("cephfs runs a thread per slot: numjobs x iodepth = {slots} is over 16384"));
        }
        if !load.bounded() {
            return Err("a cephfs run needs an end: load.duration_s, load.ops or load.bytes".into());
        }
        Ok(())
    }
}

type Cm = *mut c_void;

/// The Pacific libcephfs calls the target uses, resolved from the library.
struct Lib {
    create: unsafe extern "C" fn(*mut Cm, *const c_char) -> c_int,
    conf_read_file: unsafe extern "C" fn(Cm, *const c_char) -> c_int,
    conf_set: unsafe extern "C" fn(Cm, *const c_char, *const c_char) -> c_int,
    select_filesystem: unsafe extern "C" fn(Cm, *const c_char) -> c_int,
    mount: unsafe extern "C" fn(Cm, *const c_char) -> c_int,
    unmount: unsafe extern "C" fn(Cm) -> c_int,
    release: unsafe extern "C" fn(Cm) -> c_int,
    mkdirs: unsafe extern "C" fn(Cm, *const c_char, libc::mode_t) -> c_int,
    open: unsafe extern "C" fn(Cm, *const c_char, c_int, libc::mode_t) -> c_int,
    close: unsafe extern "C" fn(Cm, c_int) -> c_int,
    lseek: unsafe extern "C" fn(Cm, c_int, i64, c_int) -> i64,
    read: unsafe extern "C" fn(Cm, c_int, *mut c_char, i64, i64) -> c_int,
    write: unsafe extern "C" fn(Cm, c_int, *const c_char, i64, i64) -> c_int,
    fsync: unsafe extern "C" fn(Cm, c_int, c_int) -> c_int,
    nonblocking: bool,
}

const SONAME: &str = "libcephfs.so.2";

impl Lib {
    // Each transmute's target type is the field it fills, declared above from the C header.
    #[allow(clippy::missing_transmute_annotations)]
    fn load() -> Result<Lib, Fatal> {
        let so = CString::new(SONAME).expect("no NUL");
        // SAFETY: dlopen with a valid name; the handle is kept for the life of the process.
        let h = unsafe { libc::dlopen(so.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(Fatal::ceph(
                libc::ENOENT,
                format!("cannot load {SONAME}: install the libcephfs2 package (make install does)"),
            ));
        }
        let sym = |name: &str| -> Result<*mut c_void, Fatal> {
            let c = CString::new(name).expect("no NUL");
            // SAFETY: valid handle and name.
            let p = unsafe { libc::dlsym(h, c.as_ptr()) };
            if p.is_null() {
                Err(Fatal::ceph(libc::ENOSYS, format!("{SONAME} has no {name}: it is older than Ceph 16.2 (Pacific)")))
            } else {
                Ok(p)
            }
        };
        // SAFETY: each symbol has the C signature declared in Pacific's libcephfs.h.
        unsafe {
            Ok(Lib {
                create: std::mem::transmute::<*mut c_void, _>(sym("ceph_create")?),
                conf_read_file: std::mem::transmute::<*mut c_void, _>(sym("ceph_conf_read_file")?),
                conf_set: std::mem::transmute::<*mut c_void, _>(sym("ceph_conf_set")?),
                select_filesystem: std::mem::transmute::<*mut c_void, _>(sym("ceph_select_filesystem")?),
                mount: std::mem::transmute::<*mut c_void, _>(sym("ceph_mount")?),
                unmount: std::mem::transmute::<*mut c_void, _>(sym("ceph_unmount")?),
                release: std::mem::transmute::<*mut c_void, _>(sym("ceph_release")?),
                mkdirs: std::mem::transmute::<*mut c_void, _>(sym("ceph_mkdirs")?),
                open: std::mem::transmute::<*mut c_void, _>(sym("ceph_open")?),
                close: std::mem::transmute::<*mut c_void, _>(sym("ceph_close")?),
                lseek: std::mem::transmute::<*mut c_void, _>(sym("ceph_lseek")?),
                read: std::mem::transmute::<*mut c_void, _>(sym("ceph_read")?),
                write: std::mem::transmute::<*mut c_void, _>(sym("ceph_write")?),
                fsync: std::mem::transmute::<*mut c_void, _>(sym("ceph_fsync")?),
                nonblocking: sym("ceph_ll_nonblocking_readv_writev").is_ok(),
            })
        }
    }
}

/// One client mount, shared by every worker (libcephfs serializes on its client lock and drops it while an op waits).
struct Mount {
    lib: Lib,
    cm: Cm,
}

// SAFETY: libcephfs calls on one mount are thread safe (ceph-fuse and Ganesha share a mount the same way).
unsafe impl Send for Mount {}
unsafe impl Sync for Mount {}

fn cstr(s: &str) -> Result<CString, i32> {
    CString::new(s).map_err(|_| libc::EINVAL)
}

impl Fs for Mount {
    fn open(&self, path: &str, flags: i32) -> Result<i32, i32> {
        let p = cstr(path)?;
        // SAFETY: mounted handle, NUL-terminated path.
        let fd = unsafe { (self.lib.open)(self.cm, p.as_ptr(), flags, 0o644) };
        if fd < 0 { Err(-fd) } else { Ok(fd) }
    }

    fn size(&self, path: &str) -> Result<u64, i32> {
        let fd = self.open(path, libc::O_RDONLY)?;
        // SAFETY: open libcephfs fd.
        let end = unsafe { (self.lib.lseek)(self.cm, fd, 0, libc::SEEK_END) };
        self.close(fd);
        if end < 0 { Err(-end as i32) } else { Ok(end as u64) }
    }

    fn pwrite(&self, fd: i32, buf: &[u8], off: u64) -> Result<usize, i32> {
        // SAFETY: open fd; the buffer is valid for its length.
        let w = unsafe { (self.lib.write)(self.cm, fd, buf.as_ptr().cast(), buf.len() as i64, off as i64) };
        if w < 0 { Err(-w) } else { Ok(w as usize) }
    }

    fn fdatasync(&self, fd: i32) -> Result<(), i32> {
        // SAFETY: open fd.
        let r = unsafe { (self.lib.fsync)(self.cm, fd, 1) };
        if r < 0 { Err(-r) } else { Ok(()) }
    }

    fn close(&self, fd: i32) {
        // SAFETY: open fd, closed once.
        unsafe { (self.lib.close)(self.cm, fd) };
    }
}

impl Exec for Mount {
    fn run(&self, op: Op, fd: i32, buf: *mut u8, len: usize, off: u64) -> i64 {
        // SAFETY: the buffer belongs to the op's slot, which outlives the op (io.rs).
        (unsafe {
            match op {
                Op::Read => (self.lib.read)(self.cm, fd, buf.cast(), len as i64, off as i64),
                Op::Write => (self.lib.write)(self.cm, fd, buf.cast(), len as i64, off as i64),
                Op::Fsync => (self.lib.fsync)(self.cm, fd, 0),
                Op::Fdatasync => (self.lib.fsync)(self.cm, fd, 1),
            }
        }) as i64
    }
}

pub struct Cephfs {
    mount: &'static Mount,
    files: Files,
    cells: &'static [Cell],
    workers: Workers,
    datasync: bool,
    end_fsync: bool,
    extras: Value,
}

/// What the entity name is to ceph_create: the id, without "client.".
fn client_id(c: &Connection) -> Option<String> {
    c.id.clone().or_else(|| c.name.as_ref().map(|n| n.strip_prefix("client.").unwrap_or(n).to_string()))
}

impl Cephfs {
    pub fn open(t: &CephfsSpec, spec: &Spec) -> Result<Self, Fatal> {
        let lib = Lib::load()?;
        let c = &t.connection;
        let done: &'static std::sync::atomic::AtomicBool = Box::leak(Box::default());
        // ceph_mount waits client_mount_timeout for the monitors and an active MDS; the watchdog bounds the rest.
        crate::process::watchdog(
            2.0 * c.timeout_s + 10.0,
            done,
            "ETIMEDOUT",
            format!(
                "mounting the file system and opening the file set made no progress for {:.0} s (no active MDS, or \
                 caps still held by a killed client until the MDS evicts its session)",
                2.0 * c.timeout_s + 10.0
            ),
            3,
        );
        let mut cm: Cm = std::ptr::null_mut();
        let id = client_id(c).map(|i| CString::new(i).map_err(|_| Fatal::spec("connection id contains NUL")));
        let id = id.transpose()?;
        // SAFETY: out-pointer and optional NUL-terminated id.
        let r = unsafe { (lib.create)(&mut cm, id.as_ref().map_or(std::ptr::null(), |s| s.as_ptr())) };
        if r < 0 {
            return Err(Fatal::ceph(r, format!("ceph_create failed: {}", crate::errno::describe(r))));
        }
        let m = Mount { lib, cm };
        let set = |k: &str, v: &str| -> Result<(), Fatal> {
            let (ck, cv) = (CString::new(k).map_err(|_| Fatal::spec("NUL in option"))?, CString::new(v).map_err(|_| Fatal::spec("NUL in option"))?);
            // SAFETY: created handle, NUL-terminated strings.
            let r = unsafe { (m.lib.conf_set)(m.cm, ck.as_ptr(), cv.as_ptr()) };
            if r < 0 {
                return Err(Fatal::spec(format!("Ceph option {k}={v:?} was refused: {}", crate::errno::describe(r))));
            }
            Ok(())
        };
        if let Some(conf) = &c.conf {
            let p = CString::new(conf.as_str()).map_err(|_| Fatal::spec("conf path contains NUL"))?;
            // SAFETY: created handle, NUL-terminated path.
            let r = unsafe { (m.lib.conf_read_file)(m.cm, p.as_ptr()) };
            if r < 0 {
                return Err(Fatal::ceph(r, format!("cannot read {conf}: {}", crate::errno::describe(r))));
            }
        }
        if let Some(k) = &c.keyring {
            set("keyring", k)?;
        }
        let timeout = format!("{}", c.timeout_s.ceil() as u64);
        set("client_mount_timeout", &timeout)?;
        set("rados_mon_op_timeout", &timeout)?;
        for (k, v) in &c.options {
            set(k, &option_text(v))?;
        }
        if let Some(fs) = &t.fs {
            let p = CString::new(fs.as_str()).map_err(|_| Fatal::spec("fs contains NUL"))?;
            // SAFETY: created, not yet mounted handle.
            let r = unsafe { (m.lib.select_filesystem)(m.cm, p.as_ptr()) };
            if r < 0 {
                return Err(Fatal::ceph(r, format!("cannot select file system {fs:?}: {}", crate::errno::describe(r))));
            }
        }
        let rootp = CString::new("/").expect("no NUL");
        // SAFETY: created handle.
        let r = unsafe { (m.lib.mount)(m.cm, rootp.as_ptr()) };
        if r < 0 {
            let why = match -r {
                libc::ENOENT => format!(
                    "file system {} not found: start the cluster with an MDS (fathom cluster up --mds)",
                    t.fs.as_deref().unwrap_or("(default)")
                ),
                libc::ETIMEDOUT => format!(
                    "mounting CephFS timed out after {} s: the monitors or an active MDS were not reached",
                    timeout
                ),
                libc::EACCES | libc::EPERM => "the cluster refused the client's key or caps (mds caps)".into(),
                e => format!("ceph_mount failed: {}", crate::errno::describe(e)),
            };
            return Err(Fatal::ceph(r, why));
        }
        let mount: &'static Mount = Box::leak(Box::new(m));
        let dir = CString::new(t.path.as_str()).map_err(|_| Fatal::spec("path contains NUL"))?;
        // SAFETY: mounted handle.
        let r = unsafe { (mount.lib.mkdirs)(mount.cm, dir.as_ptr(), 0o755) };
        if r < 0 && r != -libc::EEXIST {
            return Err(path_error(-r, "creating", &t.path));
        }
        let mut flags = if t.rw.writes() || t.fsync.max(t.fdatasync) > 0 { libc::O_RDWR } else { libc::O_RDONLY };
        if t.direct {
            flags |= libc::O_DIRECT;
        }
        let opened = fileset::open_set(
            mount,
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
                // libcephfs descriptors are the library's own, not the kernel's: no RLIMIT_NOFILE to share
                budget: u64::MAX,
            },
        )?;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        let slots = t.numjobs as usize * spec.load.iodepth as usize;
        let cells = workers::cells(slots);
        let workers = Workers::start(cells, mount, "cephfs").map_err(|m| Fatal::ceph(libc::EAGAIN, m))?;
        let sync_every = if t.rw.writes() { t.fsync.max(t.fdatasync) } else { 0 };
        let extras = json!({
            "path": t.path, "fs": t.fs, "files": opened.names.len(), "filesize": t.filesize, "direct": t.direct,
            "laid_out": opened.laid_out, "layout_s": opened.layout_s, "library": SONAME,
            "nonblocking": mount.lib.nonblocking, "threads": slots,
        });
        Ok(Cephfs {
            mount,
            files: Files::new(opened, t.bs, t.rw, t.rwmixread, sync_every, slots),
            cells,
            workers,
            datasync: t.fdatasync > 0,
            end_fsync: t.end_fsync,
            extras,
        })
    }
}

impl Target for Cephfs {
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
        let op = Op::of(s.kind, self.datasync);
        self.cells[idx].set(s.done, op, self.files.slot_fd[idx], s.buf.as_mut_ptr(), s.len, s.offset);
        self.workers.post(idx);
        Ok(())
    }

    fn reap(&mut self, s: &mut Slot) -> Result<u64, ErrKind> {
        self.cells[s.done.index as usize].result()
    }

    fn describe(&self, s: &Slot) -> String {
        self.files.describe(s)
    }

    fn finish(&mut self) -> Result<Vec<(String, Value)>, Fatal> {
        let mut x = self.extras.clone();
        if self.end_fsync {
            let m = self.mount;
            // SAFETY: open fds.
            let took = self.files.end_fsync(|fd| match unsafe { (m.lib.fsync)(m.cm, fd, 0) } {
                r if r < 0 => Err(-r),
                _ => Ok(()),
            })?;
            x["end_fsync_s"] = json!(took);
        }
        Ok(vec![("cephfs".into(), x)])
    }

    fn close(&mut self) {
        for &fd in &self.files.all_fds {
            self.mount.close(fd);
        }
        // SAFETY: nothing in flight, descriptors closed; the mount is not used after this.
        unsafe {
            (self.mount.lib.unmount)(self.mount.cm);
            (self.mount.lib.release)(self.mount.cm);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::parse;

    fn cephfs(target: &str, load: &str) -> Result<crate::spec::Spec, String> {
        parse(&format!(r#"{{"target":{{"kind":"cephfs","rw":"randread","filesize":65536{target}}},"load":{load}}}"#))
    }

    #[test]
    fn defaults_and_rules() {
        let s = cephfs("", r#"{"ops":1}"#).unwrap();
        let v = serde_json::to_value(&s.target).unwrap();
        assert_eq!((v["path"].as_str(), v["bs"].as_u64(), v["direct"].as_bool()), (Some("/fathom"), Some(4096), Some(false)));
        let d = r#"{"ops":1}"#;
        for (target, load, field) in [
            (r#","path":"rel""#, d, "path"),
            (r#","bs":0"#, d, "bs"),
            (r#","nrfiles":0"#, d, "nrfiles"),
            (r#","bs":131072"#, d, "filesize"),
            (r#","fsync":1,"fdatasync":2"#, d, "fdatasync"),
            (r#","numjobs":1000"#, r#"{"ops":1,"iodepth":32}"#, "thread per slot"),
            ("", "{}", "end"),
            (r#","connection":{"name":"admin"}"#, d, "connection.name"),
            (r#","ioengine":"sync""#, d, "ioengine"),
        ] {
            let e = cephfs(target, load).unwrap_err();
            assert!(e.contains(field), "{target}: {e}");
        }
    }
}
