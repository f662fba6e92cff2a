//! File sets shared by the file targets (posix; cephfs and nfs use the same
//! layout): which files exist, which job uses which, and how many file
//! descriptors that takes; the rules on their options that the targets share
//! (`validate`), and a run's walk over its opened set (`Files`). Each target
//! keeps its own options and I/O.
//!
//! `file_service: job` (fio's default): every job has its own `nrfiles`
//! files, `<prefix>.<job>.<n>`. `shared`: one set of `nrfiles` files,
//! `<prefix>.<n>`, shared by the jobs: with at least as many jobs as files,
//! job `j` uses file `j mod nrfiles` (the 2014 study's mapping: P/F jobs per
//! file); with fewer, job `j` uses files `j, j+P, j+2P, ...`.

use super::Fatal;
use super::block::{Job, Rw};
use crate::io::{OpKind, Slot};
use crate::rng::Rng;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum FileService {
    #[default]
    Job,
    Shared,
}

/// The default file-name prefix.
pub fn prefix() -> String {
    "fathom".into()
}

/// Files in the set.
pub fn count(service: FileService, numjobs: u32, nrfiles: u32) -> u64 {
    match service {
        FileService::Job => numjobs as u64 * nrfiles as u64,
        FileService::Shared => nrfiles as u64,
    }
}

/// The name of file `i` of the set.
pub fn name(prefix: &str, service: FileService, nrfiles: u32, i: u64) -> String {
    match service {
        FileService::Job => format!("{prefix}.{}.{}", i / nrfiles as u64, i % nrfiles as u64),
        FileService::Shared => format!("{prefix}.{i}"),
    }
}

/// The files job `j` uses, as indices into the set.
pub fn of_job(service: FileService, numjobs: u32, nrfiles: u32, j: u32) -> Vec<u64> {
    let (p, f, j) = (numjobs as u64, nrfiles as u64, j as u64);
    match service {
        FileService::Job => (j * f..(j + 1) * f).collect(),
        FileService::Shared if p >= f => vec![j % f],
        FileService::Shared => (j..f).step_by(p as usize).collect(),
    }
}

/// The rules the file-set targets share (`bs`'s bounds are each target's own): `filesize` None is a
/// single file or device's own size.
pub fn validate(
    nrfiles: u32,
    filesize: Option<u64>,
    bs: u64,
    fsync: u32,
    fdatasync: u32,
    prefix: &str,
) -> Result<(), String> {
    if nrfiles == 0 || nrfiles > 1_000_000 {
        return Err(format!("target.nrfiles must be 1..1000000, got {nrfiles}"));
    }
    if let Some(f) = filesize
        && f < bs
    {
        return Err(format!("target.filesize ({f}) must hold at least one block of target.bs ({bs})"));
    }
    if fsync > 0 && fdatasync > 0 {
        return Err("give target.fsync or target.fdatasync, not both".into());
    }
    let ok = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
    if prefix.is_empty() || prefix.len() > 64 || !prefix.chars().all(ok) {
        return Err(format!("target.prefix must be 1..64 of A-Z a-z 0-9 . _ -, got {prefix:?}"));
    }
    Ok(())
}

/// How descriptors are held: one per (job, file) as fio does, or one per
/// file shared by the jobs that use it (pread/pwrite carry their offset,
/// so sharing is safe; the jobs then share the file's readahead state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdPlan {
    PerJob,
    PerFile,
}

/// Choose the plan that fits `budget` descriptors: `pairs` (job, file)
/// uses over `files` distinct files.
pub fn fd_plan(pairs: u64, files: u64, budget: u64) -> Result<FdPlan, String> {
    if pairs <= budget {
        Ok(FdPlan::PerJob)
    } else if files <= budget {
        Ok(FdPlan::PerFile)
    } else {
        Err(format!(
            "the file set needs {files} open files but the descriptor limit allows {budget} \
             (RLIMIT_NOFILE's hard limit, less a reserve; raising it needs CAP_SYS_RESOURCE): \
             use fewer files (nrfiles, or file_service shared) or fewer jobs"
        ))
    }
}

/// What the file-set code needs of a file system (the kernel's, libcephfs'): descriptors are the
/// file system's own, errors are errno values.
pub trait Fs {
    fn open(&self, path: &str, flags: i32) -> Result<i32, i32>;
    /// Bytes in the file; Err(ENOENT) when it does not exist.
    fn size(&self, path: &str) -> Result<u64, i32>;
    fn pwrite(&self, fd: i32, buf: &[u8], off: u64) -> Result<usize, i32>;
    fn fdatasync(&self, fd: i32) -> Result<(), i32>;
    fn close(&self, fd: i32);
}

/// A file set to open in `dir` (see the module comment).
pub struct SetParams<'a> {
    pub dir: &'a str,
    pub prefix: &'a str,
    pub service: FileService,
    pub numjobs: u32,
    pub nrfiles: u32,
    pub filesize: u64,
    pub bs: u64,
    /// The run reads: short files are laid out first.
    pub reads: bool,
    pub prefill: Option<bool>,
    pub verify: bool,
    /// open(2) flags of the run's descriptors (O_CREAT included).
    pub flags: i32,
    pub budget: u64,
}

/// An opened file set: each job's files with their descriptors, what was laid out.
pub struct OpenSet {
    pub jobs: Vec<JobFiles>,
    /// Full path of each file.
    pub names: Vec<String>,
    /// One descriptor per file (for invalidate and end_fsync).
    pub file_fds: Vec<i32>,
    pub all_fds: Vec<i32>,
    /// Set when descriptors are shared by jobs: says so, with the numbers.
    pub fd_note: Option<String>,
    pub laid_out: u64,
    pub layout_s: f64,
}

/// Lay out what the run reads, then open the descriptors by the plan that fits the budget.
pub fn open_set(fs: &dyn Fs, p: &SetParams) -> Result<OpenSet, Fatal> {
    let t0 = crate::clock::mono_ns();
    let n = count(p.service, p.numjobs, p.nrfiles);
    let blocks = p.filesize / p.bs;
    let dir = p.dir.trim_end_matches('/');
    let names: Vec<String> = (0..n).map(|i| format!("{dir}/{}", name(p.prefix, p.service, p.nrfiles, i))).collect();
    let uses: Vec<Vec<u64>> = (0..p.numjobs).map(|j| of_job(p.service, p.numjobs, p.nrfiles, j)).collect();
    let pairs: u64 = uses.iter().map(|u| u.len() as u64).sum();
    let plan = fd_plan(pairs, n, p.budget).map_err(|m| Fatal::ceph(libc::EMFILE, m))?;
    let mut buf = layout_buffer(p.bs);
    let mut laid_out = 0;
    for (i, name) in names.iter().enumerate() {
        crate::process::progress();
        let size = match fs.size(name) {
            Ok(s) => s,
            Err(libc::ENOENT) => 0,
            Err(e) => return Err(path_error(e, "reading", name)),
        };
        let short = size < blocks * p.bs;
        if p.prefill.unwrap_or(p.reads && short) {
            lay_out(fs, name, i as u64, blocks, p.bs, p.verify, &mut buf)
                .map_err(|e| lay_out_error(e, name, n, p.filesize))?;
            laid_out += 1;
        } else if p.reads && short {
            return Err(Fatal::ceph(
                libc::ENODATA,
                format!(
                    "{name} holds {size} bytes, fewer than filesize ({}), and prefill is false: run a write \
                     first, or leave prefill unset",
                    p.filesize
                ),
            ));
        }
    }
    let mut all_fds = Vec::new();
    let mut file_fds = vec![-1; names.len()];
    let mut open = |i: usize, all: &mut Vec<i32>| -> Result<i32, Fatal> {
        let fd = fs.open(&names[i], p.flags).map_err(|e| path_error(e, "opening", &names[i]))?;
        all.push(fd);
        if file_fds[i] < 0 {
            file_fds[i] = fd;
        }
        Ok(fd)
    };
    let mut shared = vec![-1; names.len()];
    if plan == FdPlan::PerFile {
        for (i, fd) in shared.iter_mut().enumerate() {
            *fd = open(i, &mut all_fds)?;
        }
    }
    let mut jobs = Vec::with_capacity(uses.len());
    for u in &uses {
        let mut files = Vec::with_capacity(u.len());
        for &f in u {
            let fd = if plan == FdPlan::PerFile { shared[f as usize] } else { open(f as usize, &mut all_fds)? };
            files.push((Job::new(f, 0, blocks), fd));
        }
        jobs.push(JobFiles::new(files));
    }
    let fd_note = (plan == FdPlan::PerFile).then(|| {
        format!(
            "descriptors shared: {pairs} (job, file) uses exceed the limit of {}, so each of the {n} files has one \
             descriptor shared by its jobs",
            p.budget
        )
    });
    Ok(OpenSet {
        jobs,
        names,
        file_fds,
        all_fds,
        fd_note,
        laid_out,
        layout_s: (crate::clock::mono_ns() - t0) as f64 / 1e9,
    })
}

/// The layout's write buffer: random bytes (verify blocks replace them when verifying).
pub fn layout_buffer(bs: u64) -> Vec<u8> {
    let mut buf = vec![0u8; (1usize << 20).max(bs as usize)];
    let mut fill = Rng::new(0x5eed);
    for c in buf.chunks_mut(8) {
        let w = fill.next_u64().to_le_bytes();
        c.copy_from_slice(&w[..c.len()]);
    }
    buf
}

/// Lay out `blocks` blocks of `bs` bytes of file `index` at `path`: a
/// sequential write (verify-formatted per block when verifying, so any later
/// read can be checked), then fdatasync, so dropping the cache drops it all.
/// Returns an errno (EINTR when a signal asked the engine to stop).
pub fn lay_out(
    fs: &dyn Fs,
    path: &str,
    index: u64,
    blocks: u64,
    bs: u64,
    verify: bool,
    buf: &mut [u8],
) -> Result<(), i32> {
    let fd = fs.open(path, libc::O_WRONLY | libc::O_CREAT)?;
    let per_chunk = (buf.len() as u64 / bs).max(1);
    let mut write_all = || {
        let mut block = 0;
        while block < blocks {
            if crate::interrupt::pending().is_some() {
                return Err(libc::EINTR);
            }
            let n = per_chunk.min(blocks - block);
            let chunk = &mut buf[..(n * bs) as usize];
            if verify {
                for (k, piece) in chunk.chunks_mut(bs as usize).enumerate() {
                    crate::verify::fill(piece, index, (block + k as u64) * bs, 1);
                }
            }
            let mut done = 0usize;
            while done < chunk.len() {
                done += fs.pwrite(fd, &chunk[done..], block * bs + done as u64)?;
            }
            block += n;
            crate::process::progress();
        }
        fs.fdatasync(fd)
    };
    let r = write_all();
    fs.close(fd);
    r
}

/// A failure at a path, with the fix for the usual causes.
pub fn path_error(e: i32, what: &str, path: &str) -> Fatal {
    let why = match e {
        libc::ENOENT => {
            format!("{path} does not exist: create the directory first, or name an existing file or block device")
        }
        libc::EACCES | libc::EPERM => {
            format!("permission denied {what} {path}: run as a user who may, or choose a path this user owns")
        }
        libc::ENOTCONN => format!(
            "{path} is on a FUSE mount whose daemon is gone (a stale mount, left by a crash): unmount it \
             (umount -l); `fathom cluster down` cleans the mounts fathom made"
        ),
        libc::ENOSPC | libc::EDQUOT => format!(
            "no space left {what} {path}: free space on that filesystem, or use a smaller file set (nrfiles, filesize)"
        ),
        libc::EMFILE | libc::ENFILE => {
            format!("too many open files {what} {path}: the descriptor limit is reached; use fewer files or jobs")
        }
        libc::EINVAL => format!(
            "{what} {path} failed with EINVAL: with direct I/O the filesystem may not support O_DIRECT \
             (set direct false), or bs is not a multiple of its block size"
        ),
        _ => format!("{what} {path}: {}", crate::errno::describe(e)),
    };
    Fatal::ceph(e, why)
}

/// A layout failure: an interrupt keeps its exit status; no space names the set's size.
pub fn lay_out_error(e: i32, name: &str, files: u64, filesize: u64) -> Fatal {
    if e == libc::EINTR {
        let sig = crate::interrupt::pending().unwrap_or(libc::SIGTERM);
        return Fatal {
            kind: "interrupted".into(),
            message: format!("interrupted by {} while laying out {name}", crate::interrupt::name(sig)),
            code: 128 + sig,
        };
    }
    let mut f = path_error(e, "laying out", name);
    if e == libc::ENOSPC || e == libc::EDQUOT {
        f.message = format!("{} (the file set is {files} x {filesize} bytes)", f.message);
    }
    f
}

/// The descriptor limit a run may use: the soft limit raised to the hard one
/// (allowed without privilege), less a reserve for everything else.
pub fn fd_budget() -> u64 {
    const RESERVE: u64 = 64;
    // SAFETY: plain get/setrlimit with a valid struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024 - RESERVE;
        }
        if r.rlim_cur < r.rlim_max {
            let raised = libc::rlimit { rlim_cur: r.rlim_max, rlim_max: r.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                r.rlim_cur = r.rlim_max;
            }
        }
        r.rlim_cur.saturating_sub(RESERVE)
    }
}

/// The files of one job: a region walker per file, and the descriptor it uses.
pub struct JobFiles {
    pub files: Vec<(Job, i32)>,
    next: usize,
    writes: u32,
    last: usize,
}

impl JobFiles {
    pub fn new(files: Vec<(Job, i32)>) -> Self {
        JobFiles { files, next: 0, writes: 0, last: 0 }
    }
}

/// Chooses every job's next op over its files, fio's way: random modes pick
/// one of the job's files per op, sequential modes take them in turn; after
/// every `sync_every` writes of a job (0: never) its next op is a sync
/// (kind `fsync`) of the file it wrote last.
pub struct Walker {
    pub jobs: Vec<JobFiles>,
    pub bs: u64,
    pub rw: Rw,
    pub mix: u32,
    pub sync_every: u32,
}

impl Walker {
    /// Op kinds, in report order.
    pub fn kinds(&self) -> Vec<OpKind> {
        let mut k = self.rw.kinds();
        if self.sync_every > 0 {
            k.push(OpKind::Fsync);
        }
        k
    }

    /// Set the slot's op (kind, file index in `obj`, offset, length); returns its descriptor.
    #[inline]
    pub fn next(&mut self, s: &mut Slot, rng: &mut Rng) -> i32 {
        let last_job = self.jobs.len() - 1;
        let j = &mut self.jobs[(s.job as usize).min(last_job)];
        if self.sync_every > 0 && j.writes >= self.sync_every {
            j.writes = 0;
            let (f, fd) = (&j.files[j.last].0, j.files[j.last].1);
            s.kind = OpKind::Fsync;
            s.obj = f.obj;
            s.offset = 0;
            s.len = 0;
            return fd;
        }
        let n = j.files.len();
        let e = if n == 1 {
            0
        } else if self.rw.random() {
            rng.below(n as u64) as usize
        } else {
            let e = j.next;
            j.next = (e + 1) % n;
            e
        };
        let (walk, fd) = &mut j.files[e];
        let (kind, offset) = walk.next(self.rw, self.mix, self.bs, rng);
        s.kind = kind;
        s.obj = walk.obj;
        s.offset = offset;
        s.len = self.bs as usize;
        if kind == OpKind::Write {
            j.writes += 1;
            j.last = e;
        }
        *fd
    }
}

/// A file target's run over its opened set: the walker, the files' names and descriptors, and the
/// descriptor of each slot's current op (set by `next_op`, used by the target's submit).
pub struct Files {
    pub walk: Walker,
    /// Full path of each file of the set.
    pub names: Vec<String>,
    /// One descriptor per file (for invalidate and end_fsync).
    pub file_fds: Vec<i32>,
    pub all_fds: Vec<i32>,
    pub slot_fd: Vec<i32>,
}

impl Files {
    /// `sync_every`: a sync op after every that many writes of a job (0: never).
    pub fn new(set: OpenSet, bs: u64, rw: Rw, mix: u32, sync_every: u32, slots: usize) -> Self {
        Files {
            walk: Walker { jobs: set.jobs, bs, rw, mix, sync_every },
            names: set.names,
            file_fds: set.file_fds,
            all_fds: set.all_fds,
            slot_fd: vec![-1; slots],
        }
    }

    pub fn buf_len(&self) -> usize {
        self.walk.bs as usize
    }

    pub fn jobs(&self) -> u32 {
        self.walk.jobs.len() as u32
    }

    /// Choose the slot's next op and keep its descriptor for the submit.
    #[inline]
    pub fn next_op(&mut self, s: &mut Slot, rng: &mut Rng) -> bool {
        self.slot_fd[s.done.index as usize] = self.walk.next(s, rng);
        true
    }

    /// The file the op touched.
    pub fn describe(&self, s: &Slot) -> String {
        self.names.get(s.obj as usize).cloned().unwrap_or_default()
    }

    /// Sync every file with `sync` (an errno on failure); returns the seconds it took.
    pub fn end_fsync(&self, sync: impl Fn(i32) -> Result<(), i32>) -> Result<f64, Fatal> {
        let t = crate::clock::mono_ns();
        for (i, &fd) in self.file_fds.iter().enumerate().filter(|(_, fd)| **fd >= 0) {
            sync(fd).map_err(|e| path_error(e, "syncing", &self.names[i]))?;
        }
        Ok((crate::clock::mono_ns() - t) as f64 / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_counts() {
        assert_eq!(count(FileService::Job, 10, 3), 30);
        assert_eq!(count(FileService::Shared, 10, 3), 3);
        assert_eq!(name("f", FileService::Job, 3, 7), "f.2.1");
        assert_eq!(name("f", FileService::Shared, 3, 2), "f.2");
    }

    #[test]
    fn study_mapping_gives_every_file_its_share_of_jobs() {
        // 100 jobs over 10 shared files: 10 jobs per file, one file per job.
        let mut per_file = [0; 10];
        for j in 0..100 {
            let f = of_job(FileService::Shared, 100, 10, j);
            assert_eq!(f.len(), 1);
            per_file[f[0] as usize] += 1;
        }
        assert_eq!(per_file, [10; 10]);
        // Fewer jobs than files: every file used by exactly one job.
        let mut all: Vec<u64> = (0..3).flat_map(|j| of_job(FileService::Shared, 3, 10, j)).collect();
        all.sort();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert_eq!(of_job(FileService::Job, 4, 2, 3), [6, 7]);
    }

    #[test]
    fn descriptors_are_shared_only_when_needed() {
        assert_eq!(fd_plan(1000, 100, 19900), Ok(FdPlan::PerJob));
        assert_eq!(fd_plan(100_000, 100, 19900), Ok(FdPlan::PerFile));
        let e = fd_plan(100_000, 100_000, 19900).unwrap_err();
        assert!(e.contains("100000 open files") && e.contains("19900"), "{e}");
    }
}
