//! The daemons' processes: found by argv[0] in /proc, then read every sample
//! through files held open (a pread at offset 0 makes procfs regenerate the
//! text, without a path lookup; a held file also stays bound to its process,
//! so a reused pid is never mistaken for the daemon: the read fails instead).

use super::parse::{self, Program};
use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A single-record /proc file (stat, status, meminfo): one pread from offset 0,
/// again with a larger buffer while the buffer comes back full.
pub fn read_single(f: &File, buf: &mut Vec<u8>) -> io::Result<usize> {
    loop {
        let n = f.read_at(buf, 0)?;
        if n < buf.len() {
            return Ok(n);
        }
        buf.resize(buf.len() * 2, 0);
    }
}

/// A /proc file of many records (net/dev, diskstats): a page at most comes back
/// per read, so read on until end of file.
pub fn read_seq(f: &File, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut off = 0;
    loop {
        if off == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let n = f.read_at(&mut buf[off..], off as u64)?;
        if n == 0 {
            return Ok(off);
        }
        off += n;
    }
}

/// File descriptors this process may still hold open (set from RLIMIT_NOFILE).
/// Past it, per-thread files are opened for each read instead.
static FD_BUDGET: AtomicUsize = AtomicUsize::new(0);

/// Raise the soft open-file limit to the hard one and budget the held files.
pub fn init_fd_budget() {
    // SAFETY: plain getrlimit/setrlimit calls on a local struct.
    let soft = unsafe {
        let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            1024
        } else {
            let want = r.rlim_max.min(1 << 16);
            if want > r.rlim_cur {
                let raised = libc::rlimit { rlim_cur: want, rlim_max: r.rlim_max };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    r.rlim_cur = want;
                }
            }
            r.rlim_cur
        }
    };
    FD_BUDGET.store((soft as usize).saturating_sub(64), Ordering::Relaxed);
}

fn take_fd() -> bool {
    FD_BUDGET.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok()
}

/// A per-thread file: held open while the budget lasts, else opened per read.
enum Src {
    Held(File),
    Path(String),
}

impl Src {
    fn open(path: String) -> io::Result<Src> {
        if !take_fd() {
            return Ok(Src::Path(path));
        }
        File::open(&path).map(Src::Held).inspect_err(|_| {
            FD_BUDGET.fetch_add(1, Ordering::Relaxed);
        })
    }

    fn read(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        match self {
            Src::Held(f) => read_single(f, buf),
            Src::Path(p) => read_single(&File::open(p)?, buf),
        }
    }
}

impl Drop for Src {
    fn drop(&mut self) {
        if let Src::Held(_) = self {
            FD_BUDGET.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A directory read again from its start each time (rewinddir), through
/// libc's buffer: no allocation per listing.
pub struct Dir(*mut libc::DIR);

impl Dir {
    pub fn open(path: &str) -> Option<Dir> {
        let c = CString::new(path).ok()?;
        // SAFETY: a valid NUL-terminated path.
        let d = unsafe { libc::opendir(c.as_ptr()) };
        (!d.is_null()).then_some(Dir(d))
    }

    /// Every entry whose name is a number (a pid, a tid), into `out`.
    pub fn numbers(&mut self, out: &mut Vec<u32>) {
        out.clear();
        // SAFETY: self.0 is an open DIR; readdir's entry is valid until the next call.
        unsafe {
            libc::rewinddir(self.0);
            loop {
                let e = libc::readdir(self.0);
                if e.is_null() {
                    break;
                }
                let name = std::ffi::CStr::from_ptr((*e).d_name.as_ptr()).to_bytes();
                if let Some(n) = parse::num(name).filter(|_| name.iter().all(u8::is_ascii_digit)) {
                    out.push(n as u32);
                }
            }
        }
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: opened by opendir, closed once.
        unsafe { libc::closedir(self.0) };
    }
}

/// One thread's counters as last read.
pub struct Thread {
    pub tid: u32,
    status: Src,
    stat: Option<Src>,
    /// the gate: None where the kernel has no schedstat
    sched: Option<Src>,
    last_sched: Option<(u64, u64)>,
    comm: [u8; 32],
    comm_len: u8,
    pub utime: u64,
    pub stime: u64,
    pub vctx: u64,
    pub nvctx: u64,
    pub processor: u64,
    seen: u64,
}

impl Thread {
    pub fn comm(&self) -> &[u8] {
        &self.comm[..self.comm_len as usize]
    }
}

/// A daemon process and its counters as last read. CPU times are clock ticks.
pub struct Daemon {
    pub pid: u32,
    pub prog: &'static Program,
    pub id: String,
    /// the cluster it names: the FSID of its cephadm unit, the conf its argv gives
    pub fsid: Option<String>,
    pub conf: Option<String>,
    /// start time, clock ticks after boot
    pub start: u64,
    pub per_thread: bool,
    stat: File,
    tasks: Dir,
    pub threads: Vec<Thread>,
    fresh: Vec<Thread>,
    /// context switches of threads that have ended since it was found
    dead: (u64, u64),
    pub utime: u64,
    pub stime: u64,
    pub num_threads: u64,
    pub rss: u64,
    pub vctx: u64,
    pub nvctx: u64,
}

impl Daemon {
    fn open(
        pid: u32,
        prog: &'static Program,
        cmdline: &[u8],
        per_thread: &dyn Fn(&Program, &str) -> bool,
        buf: &mut Vec<u8>,
    ) -> Option<Daemon> {
        let stat = File::open(format!("/proc/{pid}/stat")).ok()?;
        let n = read_single(&stat, buf).ok()?;
        let start = parse::stat(&buf[..n]).filter(|s| s.state != b'Z' && s.state != b'X')?.start;
        let tasks = Dir::open(&format!("/proc/{pid}/task"))?;
        let cgroup = std::fs::read(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let unnamed = || match prog.entity {
            Some("client") => "client.admin".into(), // Ceph's default name
            _ => format!("{}.{pid}", prog.kind),
        };
        let id = parse::daemon_id(prog, cmdline).or_else(|| parse::cephadm_unit(&cgroup)).unwrap_or_else(unnamed);
        Some(Daemon {
            pid,
            prog,
            per_thread: per_thread(prog, &id),
            id,
            fsid: parse::cephadm_fsid(&cgroup),
            conf: parse::conf_arg(cmdline),
            start,
            stat,
            tasks,
            threads: Vec::new(),
            fresh: Vec::new(),
            dead: (0, 0),
            utime: 0,
            stime: 0,
            num_threads: 0,
            rss: 0,
            vctx: 0,
            nvctx: 0,
        })
    }

    /// Read its counters now; false when the process is gone (or a zombie).
    /// CPU and RSS are the process's (/proc/PID/stat, exited threads' CPU
    /// included). Context switches are summed over its threads (/proc/PID/status
    /// has the main thread's only), plus those of threads that ended since it
    /// was found.
    fn read(&mut self, round: u64, page: u64, buf: &mut Vec<u8>, tids: &mut Vec<u32>) -> bool {
        let Ok(n) = read_single(&self.stat, buf) else { return false };
        let Some(s) = parse::stat(&buf[..n]) else { return false };
        if s.state == b'Z' || s.state == b'X' {
            return false;
        }
        (self.utime, self.stime, self.num_threads, self.rss) = (s.utime, s.stime, s.num_threads, s.rss_pages * page);
        let mut live = 0;
        for t in self.threads.iter_mut() {
            read_thread(t, round, buf);
            live += (t.seen == round) as u64;
        }
        // The threads are listed again only when they may have changed: a thread
        // gone (its read failed) or a count that differs. A thread that started
        // as another ended is caught by the one gone.
        if live != self.threads.len() as u64 || live != self.num_threads || self.threads.is_empty() {
            self.tasks.numbers(tids);
            for &tid in tids.iter() {
                if self.threads.binary_search_by_key(&tid, |t| t.tid).is_err()
                    && let Some(mut t) = self.new_thread(tid)
                {
                    read_thread(&mut t, round, buf);
                    self.fresh.push(t);
                }
            }
        }
        let dead = &mut self.dead;
        self.threads.retain(|t| {
            if t.seen != round {
                dead.0 += t.vctx;
                dead.1 += t.nvctx;
            }
            t.seen == round
        });
        if !self.fresh.is_empty() {
            self.threads.extend(self.fresh.drain(..).filter(|t| t.seen == round));
            self.threads.sort_unstable_by_key(|t| t.tid);
        }
        self.vctx = self.dead.0 + self.threads.iter().map(|t| t.vctx).sum::<u64>();
        self.nvctx = self.dead.1 + self.threads.iter().map(|t| t.nvctx).sum::<u64>();
        true
    }

    fn new_thread(&self, tid: u32) -> Option<Thread> {
        let base = format!("/proc/{}/task/{tid}", self.pid);
        let status = Src::open(format!("{base}/status")).ok()?;
        let stat = if self.per_thread { Some(Src::open(format!("{base}/stat")).ok()?) } else { None };
        let sched = Src::open(format!("{base}/schedstat")).ok();
        Some(Thread {
            tid,
            status,
            stat,
            sched,
            last_sched: None,
            comm: [0; 32],
            comm_len: 0,
            utime: 0,
            stime: 0,
            vctx: 0,
            nvctx: 0,
            processor: 0,
            seen: 0,
        })
    }
}

/// Read one thread; a thread that ended meanwhile is left unseen this round.
/// One that has not run since the last read (its schedstat unchanged) keeps
/// its counters without reading the costlier status (and stat) files.
fn read_thread(t: &mut Thread, round: u64, buf: &mut Vec<u8>) {
    let now = match &t.sched {
        Some(src) => {
            let Ok(n) = src.read(buf) else { return };
            parse::schedstat(&buf[..n])
        }
        None => None,
    };
    if now.is_some() && now == t.last_sched {
        t.seen = round;
        return;
    }
    t.last_sched = None; // set again once the counters below are read
    let Ok(n) = t.status.read(buf) else { return };
    let Some(ctx) = parse::status_ctx(&buf[..n]) else { return };
    (t.vctx, t.nvctx) = ctx;
    if !read_task_stat(t, buf) {
        return;
    }
    t.last_sched = now;
    t.seen = round;
}

/// A listed thread's CPU, last CPU and name (threads of daemons in --threads-of only).
fn read_task_stat(t: &mut Thread, buf: &mut Vec<u8>) -> bool {
    let Some(src) = &t.stat else { return true };
    let Ok(n) = src.read(buf) else { return false };
    let Some(s) = parse::stat(&buf[..n]) else { return false };
    (t.utime, t.stime, t.processor) = (s.utime, s.stime, s.processor);
    let c = &s.comm[..s.comm.len().min(t.comm.len())];
    t.comm[..c.len()].copy_from_slice(c);
    t.comm_len = c.len() as u8;
    true
}

/// A pid of /proc: when it was last listed, and the sample at which to read its
/// argv again (never, while it is a daemon).
struct Known {
    seen: u64,
    recheck: u64,
}

/// Every daemon process of the host, found by argv[0] and kept up to date.
pub struct Procs {
    proc_dir: Dir,
    pub daemons: Vec<Daemon>,
    known: HashMap<u32, Known>,
    pids: Vec<u32>,
    tids: Vec<u32>,
    cmdline: Vec<u8>,
    threads_of: Vec<String>,
    /// samples between two reads of a non-daemon's argv (it may exec a daemon)
    rescan: u64,
    round: u64,
    me: u32,
    page: u64,
}

impl Procs {
    pub fn new(threads_of: Vec<String>, rescan: u64) -> Option<Procs> {
        Some(Procs {
            proc_dir: Dir::open("/proc")?,
            daemons: Vec::new(),
            known: HashMap::new(),
            pids: Vec::new(),
            tids: Vec::new(),
            cmdline: Vec::new(),
            threads_of,
            rescan: rescan.max(1),
            round: 0,
            me: std::process::id(),
            // SAFETY: plain sysconf call.
            page: match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
                p if p > 0 => p as u64,
                _ => 4096,
            },
        })
    }

    /// List /proc, classify pids not seen before (and, every `rescan` samples,
    /// the others again), then read every daemon; the ones gone are dropped.
    /// A new pid is read again at the next sample too: caught between fork and
    /// exec, it still showed its parent's argv.
    pub fn sample(&mut self, buf: &mut Vec<u8>) {
        self.round += 1;
        let round = self.round;
        self.proc_dir.numbers(&mut self.pids);
        let mut added = false;
        for i in 0..self.pids.len() {
            let pid = self.pids[i];
            if pid == self.me {
                continue;
            }
            let due = match self.known.get_mut(&pid) {
                Some(k) => {
                    k.seen = round;
                    k.recheck <= round
                }
                None => true,
            };
            if !due {
                continue;
            }
            let first = !self.known.contains_key(&pid);
            let recheck = if first { round + 1 } else { round + self.rescan };
            let daemon = self.classify(pid, buf);
            added |= daemon;
            self.known.insert(pid, Known { seen: round, recheck: if daemon { u64::MAX } else { recheck } });
        }
        self.known.retain(|_, k| k.seen == round);
        if added {
            self.daemons.sort_by(|a, b| a.id.cmp(&b.id).then(a.pid.cmp(&b.pid)));
        }
        let (known, tids, page) = (&mut self.known, &mut self.tids, self.page);
        self.daemons.retain_mut(|d| {
            let alive = d.read(round, page, buf, tids);
            if !alive {
                known.remove(&d.pid); // a new process under this pid is classified afresh
            }
            alive
        });
    }

    /// Is `pid` a daemon? If so it joins `daemons`. A process gone meanwhile is not.
    fn classify(&mut self, pid: u32, buf: &mut Vec<u8>) -> bool {
        self.cmdline.clear();
        let mut path = [0u8; 32];
        let p = fmt_path(&mut path, pid);
        let Ok(mut f) = File::open(p) else { return false };
        if f.read_to_end(&mut self.cmdline).is_err() {
            return false;
        }
        let Some(prog) = parse::program(&self.cmdline) else { return false };
        let threads_of = &self.threads_of;
        let per_thread =
            |p: &Program, id: &str| threads_of.iter().any(|t| t == "all" || t == p.name || t == p.kind || t == id);
        match Daemon::open(pid, prog, &self.cmdline, &per_thread, buf) {
            Some(d) => {
                self.daemons.push(d);
                true
            }
            None => false,
        }
    }
}

/// "/proc/PID/cmdline" in a stack buffer (no allocation for the common case).
fn fmt_path(buf: &mut [u8; 32], pid: u32) -> &str {
    use std::io::Write;
    let mut c = io::Cursor::new(&mut buf[..]);
    let _ = write!(c, "/proc/{pid}/cmdline");
    let n = c.position() as usize;
    std::str::from_utf8(&buf[..n]).unwrap_or("/proc/self/cmdline")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_threads_are_listed_and_read() {
        let mut d = Dir::open("/proc/self/task").unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        d.numbers(&mut a);
        d.numbers(&mut b); // the rewind works
        assert!(!a.is_empty() && a == b, "{a:?} {b:?}");
        // SAFETY: plain gettid call.
        assert!(a.contains(&(unsafe { libc::gettid() } as u32)));
    }

    #[test]
    fn seq_files_are_read_whole_with_a_small_buffer() {
        let f = File::open("/proc/self/status").unwrap();
        let mut buf = vec![0u8; 16];
        let n = read_single(&f, &mut buf).unwrap();
        assert!(parse::status_ctx(&buf[..n]).is_some());
        let f = File::open("/proc/net/dev").unwrap();
        let mut buf = vec![0u8; 16];
        let n = read_seq(&f, &mut buf).unwrap();
        let again = read_seq(&f, &mut buf).unwrap(); // re-read from offset 0
        assert!(n > 16 && again > 16);
        assert!(buf[..again].split(|&b| b == b'\n').filter_map(parse::net_dev).any(|(name, _)| name == b"lo"));
    }

    #[test]
    fn context_switches_are_summed_over_threads_and_kept_when_they_end() {
        use std::sync::mpsc;
        use std::time::Duration;
        let mut buf = vec![0u8; 4096];
        let ceph_osd = &parse::PROGRAMS[0];
        let mut d =
            Daemon::open(std::process::id(), ceph_osd, b"ceph-osd\0-i\x0042\0", &|_, _| true, &mut buf).unwrap();
        assert_eq!((d.id.as_str(), d.per_thread), ("osd.42", true));
        let (go, go_rx) = mpsc::channel::<u32>();
        let (done_tx, done) = mpsc::channel::<()>();
        let h = std::thread::Builder::new()
            .name("sleeper".into())
            .spawn(move || {
                while let Ok(n) = go_rx.recv() {
                    for _ in 0..n {
                        std::thread::sleep(Duration::from_millis(1)); // one voluntary switch each
                    }
                    done_tx.send(()).unwrap();
                }
            })
            .unwrap();
        let mut tids = Vec::new();
        let mut round = 0;
        let mut read = |d: &mut Daemon| {
            round += 1;
            assert!(d.read(round, 4096, &mut buf, &mut tids));
            let sleeper = d.threads.iter().find(|t| t.comm() == b"sleeper").map(|t| t.vctx);
            assert!(d.vctx >= d.threads.iter().map(|t| t.vctx).sum::<u64>() && d.rss > 0 && d.num_threads >= 2);
            (sleeper, d.vctx)
        };
        go.send(5).unwrap();
        done.recv().unwrap();
        let (Some(v1), total1) = read(&mut d) else { panic!("the sleeper is not listed") };
        let (Some(v2), total2) = read(&mut d) else { panic!("the sleeper is not listed") };
        assert!(v1 >= 5 && v2 == v1 && total2 >= total1, "{v1} {v2}"); // idle in between: kept
        go.send(20).unwrap();
        done.recv().unwrap();
        let (Some(v3), total3) = read(&mut d) else { panic!("the sleeper is not listed") };
        assert!(v3 >= v1 + 20 && total3 >= total2 + 20, "{v1} {v3}"); // it ran: read again
        drop(go);
        h.join().unwrap();
        let (gone, total4) = read(&mut d);
        assert!(gone.is_none() && total4 >= total3, "an ended thread's switches stay counted");
    }

    #[test]
    fn cmdline_paths() {
        let mut b = [0u8; 32];
        assert_eq!(fmt_path(&mut b, 4194304), "/proc/4194304/cmdline");
    }
}
