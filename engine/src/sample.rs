//! `fathom-sampler` (also `fathom-engine --sample`): server-side measurements of
//! a cluster host, where the Ceph daemons run and no Python is (the binary is
//! uploaded and run over SSH). Every interval one JSON line on stdout with the
//! host's CPU, memory, network and disk counters and every Ceph daemon
//! process's CPU, RSS and context switches (per thread for crimson's reactors).
//! Counters are cumulative and raw: the consumer (fathom.hostsample)
//! differences them, so a line it misses loses nothing.
//!
//! `fathom-sampler` is this module alone (src/bin/fathom-sampler.rs): it links
//! nothing of Ceph, so it starts on cephadm and Rook hosts, where Ceph's
//! libraries live only in the containers. So this module uses nothing of the
//! engine's but `crate::clock` and `crate::VERSION` (the library, src/lib.rs).
//!
//! Records (units: bytes, seconds; `ts` wall-clock epoch s, `mono` CLOCK_MONOTONIC s):
//! - `sample_start`: engine (the binary: fathom-sampler or fathom-engine), version,
//!   format, host, pid, interval_s, duration_s, clk_tck, page_size, ncpu,
//!   boot_time, programs ({argv0: kind}), threads_of.
//! - `sample`: seq, ts, mono, cpu {user nice system idle iowait irq softirq steal}
//!   (s, all CPUs), ncpu, mem_total, mem_avail, net {iface: {rx_bytes rx_packets
//!   rx_errs rx_drop tx_bytes tx_packets tx_errs tx_drop [upper]}}, disk {dev: {reads
//!   read_bytes read_s writes write_bytes write_s in_flight io_s weighted_s}}
//!   (devices that never did I/O are left out), procs [{pid name kind daemon [fsid]
//!   [conf] start utime stime rss vctx nvctx threads [tasks: [{tid comm utime stime
//!   vctx nvctx last_cpu}]]}], self_cpu_s (the sampler's own CPU so far).
//!   An interface's `upper`: the interfaces stacked on it, which count its bytes
//!   again (/sys/class/net/IF/upper_*: a bridge port's bridge, a bond member's
//!   bond, a VLAN parent's VLANs; re-read every 10 s); left out when none.
//!   A proc: `name` is argv[0]'s basename, `kind` fathom's daemon kind, `daemon`
//!   the Ceph name from argv (`-i 3` of ceph-osd: osd.3; `-n client.rgw.x`), else
//!   from a cephadm unit in /proc/PID/cgroup, else client.admin (radosgw) or
//!   KIND.PID (ganesha); `fsid` the cluster of its cephadm unit (`ceph-FSID@...`),
//!   `conf` the conf argv names (`-c`, `--conf`), each when there is one: what
//!   tells a gateway's or client's cluster (the metadata places none); `start` s after boot; utime/stime s of the whole process
//!   (ended threads included); rss bytes (/proc/PID/stat); vctx/nvctx voluntary and
//!   involuntary context switches summed over its threads (/proc/PID/status has the
//!   main thread's only), ended threads included from when the sampler saw them;
//!   `tasks` for daemons named by --threads-of, `last_cpu` the CPU a thread last ran on.
//! - `sample_end`: ts, mono, samples, stop (duration, SIGTERM, SIGINT, SIGHUP), self_cpu_s, wall_s.

mod parse;
mod procs;
mod stack;

use crate::VERSION;
use crate::clock::{mono_ns, wall_s};
use parse::{CPU_FIELDS, NET_FIELDS};
use procs::{Procs, read_seq, read_single};
use stack::Stack;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicI32, Ordering};

/// The record format; a consumer checks it with the version.
pub const FORMAT: u32 = 1;

/// The help text; `invocation` is how the sampler was started (`fathom-sampler`, `fathom-engine --sample`).
pub fn usage(invocation: &str) -> String {
    format!(
        r#"usage: {invocation} [--interval SECONDS] [--duration SECONDS] [--threads-of NAME]...
       {invocation} --version
Samples this host's CPU, memory, network and disks and its Ceph daemons (by argv[0]: ceph-osd, crimson-osd,
ceph-mon, ceph-mgr, ceph-mds, radosgw, ganesha.nfsd, ceph-fuse, rbd-fuse; also in containers) from /proc,
one JSON line per interval on stdout: a sample_start record (version, format), then `sample` records of
cumulative counters (the consumer differences them), then sample_end.
  --interval SECONDS   time between samples (default 1; 0.01 to 3600)
  --duration SECONDS   stop after this long (default: until SIGTERM, SIGINT or SIGHUP; 0: one sample)
  --threads-of NAME    also list the threads of these daemons: a program (crimson-osd), a kind (osd),
                       a daemon (osd.3), `all` or `none`; repeatable (default: crimson-osd)
Exit codes: 0 done (the duration ran out, or stopped by a signal), 2 invalid arguments,
3 /proc unreadable, 6 stdout closed. Record fields: engine/src/sample.rs.
fathom-sampler and `fathom-engine --sample` are the same sampler; fathom-sampler links no Ceph library."#
    )
}

struct Options {
    interval: f64,
    duration: Option<f64>,
    threads_of: Vec<String>,
}

/// Leave through `_exit`, as the engine does (stdout flushed first: the help text goes through it).
fn exit(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    // SAFETY: _exit never returns and touches no Rust state.
    unsafe { libc::_exit(code) }
}

fn error(kind: &str, message: &str) {
    emit(&serde_json::json!({"type": "error", "ts": wall_s(), "kind": kind, "message": message, "fatal": true}));
}

fn invalid(message: &str) -> ! {
    error("invalid_args", message);
    exit(2)
}

fn seconds(flag: &str, v: Option<String>, lo: f64, hi: f64) -> f64 {
    let Some(v) = v else { invalid(&format!("{flag} needs a value (seconds)")) };
    match v.parse::<f64>() {
        Ok(s) if s.is_finite() && (lo..=hi).contains(&s) => s,
        _ => invalid(&format!("{flag} {v:?}: give seconds from {lo} to {hi}")),
    }
}

fn options(invocation: &str, args: &[String]) -> Options {
    let mut o = Options { interval: 1.0, duration: None, threads_of: Vec::new() };
    let mut threads_of: Option<Vec<String>> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned());
        match flag {
            "--interval" => o.interval = seconds(flag, value(), 0.01, 3600.0),
            "--duration" => o.duration = Some(seconds(flag, value(), 0.0, 1e9)),
            "--threads-of" => match value() {
                Some(v) if !v.is_empty() && !v.starts_with('-') => threads_of.get_or_insert_default().push(v),
                _ => invalid("--threads-of needs a name: a program, a kind, a daemon, all or none"),
            },
            _ => invalid(&format!("unknown argument {a:?} for {invocation} (see {invocation} --help)")),
        }
    }
    o.threads_of = threads_of.unwrap_or_else(|| vec!["crimson-osd".into()]);
    o.threads_of.retain(|t| t != "none");
    o
}

static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::Relaxed);
}

fn install_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with a plain handler that stores an atomic.
        // SA_RESTART keeps reads going; the sleep (clock_nanosleep) still ends with EINTR.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Sleep until `deadline_ns` (CLOCK_MONOTONIC); false if a signal came.
fn sleep_until(deadline_ns: u64) -> bool {
    let ts = libc::timespec { tv_sec: (deadline_ns / 1_000_000_000) as _, tv_nsec: (deadline_ns % 1_000_000_000) as _ };
    loop {
        if SIGNAL.load(Ordering::Relaxed) != 0 {
            return false; // it came while sampling
        }
        // SAFETY: a valid timespec; no remainder is needed with TIMER_ABSTIME.
        let rc =
            unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
        if rc != libc::EINTR {
            return true;
        }
    }
}

/// The sampler's own CPU so far (user + system, s).
fn self_cpu_s() -> f64 {
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    // whole microseconds (exact in an f64), divided once: the shortest decimal prints
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    (us(ru.ru_utime) + us(ru.ru_stime)) / 1e6
}

fn sysconf(name: libc::c_int, default: i64) -> i64 {
    // SAFETY: plain sysconf call.
    let v = unsafe { libc::sysconf(name) };
    if v > 0 { v as i64 } else { default }
}

fn hostname() -> String {
    let mut b = [0u8; 256];
    // SAFETY: the buffer's length is passed; gethostname NUL-terminates within it on success.
    if unsafe { libc::gethostname(b.as_mut_ptr().cast(), b.len()) } != 0 {
        return String::new();
    }
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}

/// The host-wide /proc files, held open and re-read from offset 0.
struct Host {
    stat: File,
    meminfo: File,
    net: Option<File>,
    disk: Option<File>,
}

/// JSON text into a reused buffer (no serde Value per sample).
struct Line {
    b: Vec<u8>,
}

impl Line {
    fn raw(&mut self, s: &str) {
        self.b.extend_from_slice(s.as_bytes());
    }

    /// A JSON string: escaped, and invalid UTF-8 replaced (a thread may name itself anything).
    fn str(&mut self, s: &[u8]) {
        self.b.push(b'"');
        for c in String::from_utf8_lossy(s).chars() {
            match c {
                '"' => self.raw("\\\""),
                '\\' => self.raw("\\\\"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(self.b, "\\u{:04x}", c as u32);
                }
                c => {
                    let mut t = [0u8; 4];
                    self.raw(c.encode_utf8(&mut t));
                }
            }
        }
        self.b.push(b'"');
    }

    /// `"key":` (keys are plain ASCII)
    fn key(&mut self, k: &str) {
        self.b.push(b'"');
        self.raw(k);
        self.raw("\":");
    }

    fn s(&mut self, k: &str, v: &[u8]) {
        self.key(k);
        self.str(v);
        self.b.push(b',');
    }

    fn u(&mut self, k: &str, v: u64) {
        self.key(k);
        let _ = write!(self.b, "{v},");
    }

    fn f(&mut self, k: &str, v: f64) {
        self.key(k);
        let _ = write!(self.b, "{v},");
    }

    /// Drop a trailing comma, then close with `c`.
    fn close(&mut self, c: u8) {
        if self.b.last() == Some(&b',') {
            self.b.pop();
        }
        self.b.push(c);
    }
}

struct Sampler {
    host: Host,
    procs: Procs,
    stack: Stack,
    buf: Vec<u8>,
    line: Line,
    /// clock ticks per second (CPU times are divided, not multiplied by 1/hz: the shortest decimal prints)
    hz: f64,
    seq: u64,
}

impl Sampler {
    /// One `sample` record into self.line. None if /proc/stat or meminfo cannot be read.
    fn sample(&mut self) -> Option<()> {
        let (ts, mono) = (wall_s(), mono_ns() as f64 / 1e9);
        let l = &mut self.line;
        l.b.clear();
        l.raw("{\"type\":\"sample\",");
        l.u("seq", self.seq);
        l.f("ts", ts);
        l.f("mono", mono);
        let n = read_single(&self.host.stat, &mut self.buf).ok()?;
        let cpu = parse::proc_stat(&self.buf[..n])?;
        l.key("cpu");
        l.raw("{");
        for (k, t) in CPU_FIELDS.iter().zip(cpu.ticks) {
            l.f(k, t as f64 / self.hz);
        }
        l.close(b'}');
        l.raw(",");
        l.u("ncpu", cpu.ncpu as u64);
        let n = read_single(&self.host.meminfo, &mut self.buf).ok()?;
        let (total, avail) = parse::meminfo(&self.buf[..n])?;
        l.u("mem_total", total);
        l.u("mem_avail", avail);
        if let Some(f) = &self.host.net
            && let Ok(n) = read_seq(f, &mut self.buf)
        {
            l.key("net");
            l.raw("{");
            self.stack.tick();
            for (name, v) in self.buf[..n].split(|&b| b == b'\n').filter_map(parse::net_dev) {
                l.str(name);
                l.raw(":{");
                for (k, x) in NET_FIELDS.iter().zip(v) {
                    l.u(k, x);
                }
                let up = self.stack.uppers(name);
                if !up.is_empty() {
                    l.key("upper");
                    l.raw("[");
                    for u in up {
                        l.str(u);
                        l.raw(",");
                    }
                    l.close(b']');
                }
                l.close(b'}');
                l.raw(",");
            }
            l.close(b'}');
            l.raw(",");
        }
        if let Some(f) = &self.host.disk
            && let Ok(n) = read_seq(f, &mut self.buf)
        {
            l.key("disk");
            l.raw("{");
            for (name, d) in self.buf[..n].split(|&b| b == b'\n').filter_map(parse::diskstats) {
                if d.reads == 0 && d.writes == 0 && d.in_flight == 0 {
                    continue; // never used (ram*, idle loop devices): all zero, so a consumer loses nothing
                }
                l.str(name);
                l.raw(":{");
                l.u("reads", d.reads);
                l.u("read_bytes", d.read_bytes);
                l.f("read_s", d.read_ms as f64 / 1e3);
                l.u("writes", d.writes);
                l.u("write_bytes", d.write_bytes);
                l.f("write_s", d.write_ms as f64 / 1e3);
                l.u("in_flight", d.in_flight);
                l.f("io_s", d.io_ms as f64 / 1e3);
                l.f("weighted_s", d.weighted_ms as f64 / 1e3);
                l.close(b'}');
                l.raw(",");
            }
            l.close(b'}');
            l.raw(",");
        }
        self.procs.sample(&mut self.buf);
        self.procs_json();
        let l = &mut self.line;
        l.f("self_cpu_s", self_cpu_s());
        l.close(b'}');
        l.b.push(b'\n');
        self.seq += 1;
        Some(())
    }

    fn procs_json(&mut self) {
        let (l, hz) = (&mut self.line, self.hz);
        l.key("procs");
        l.raw("[");
        for d in &self.procs.daemons {
            l.raw("{");
            l.u("pid", d.pid as u64);
            l.s("name", d.prog.name.as_bytes());
            l.s("kind", d.prog.kind.as_bytes());
            l.s("daemon", d.id.as_bytes());
            if let Some(f) = &d.fsid {
                l.s("fsid", f.as_bytes());
            }
            if let Some(c) = &d.conf {
                l.s("conf", c.as_bytes());
            }
            l.f("start", d.start as f64 / hz);
            l.f("utime", d.utime as f64 / hz);
            l.f("stime", d.stime as f64 / hz);
            l.u("rss", d.rss);
            l.u("vctx", d.vctx);
            l.u("nvctx", d.nvctx);
            l.u("threads", d.num_threads);
            if d.per_thread {
                l.key("tasks");
                l.raw("[");
                for t in &d.threads {
                    l.raw("{");
                    l.u("tid", t.tid as u64);
                    l.s("comm", t.comm());
                    l.f("utime", t.utime as f64 / hz);
                    l.f("stime", t.stime as f64 / hz);
                    l.u("vctx", t.vctx);
                    l.u("nvctx", t.nvctx);
                    l.u("last_cpu", t.processor);
                    l.close(b'}');
                    l.raw(",");
                }
                l.close(b']');
            }
            l.close(b'}');
            l.raw(",");
        }
        l.close(b']');
        l.raw(",");
    }
}

/// Write a record to stdout in one write (no buffering: a reader sees it at once).
fn write_out(b: &[u8]) {
    use std::os::fd::FromRawFd;
    // SAFETY: fd 1 stays open for the process's life; ManuallyDrop never closes it.
    let mut out = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(1) });
    if out.write_all(b).is_err() {
        exit(6); // nobody reads the records any more
    }
}

fn emit(v: &serde_json::Value) {
    let mut line = serde_json::to_vec(v).expect("records are valid JSON");
    line.push(b'\n');
    write_out(&line);
}

fn fatal(message: String) -> ! {
    error("proc", &message);
    exit(3)
}

/// Run the sampler to its end and exit. `invocation`: how it was started, `fathom-sampler` or
/// `fathom-engine --sample` (its first word, the binary, goes in the header); `args` follow that.
pub fn main(invocation: &str, args: &[String]) -> ! {
    let binary = invocation.split(' ').next().unwrap_or(invocation);
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{}", usage(invocation));
        exit(0);
    }
    if args.iter().any(|a| a == "-V" || a == "--version") {
        println!("{binary} {VERSION} (sample format {FORMAT})");
        exit(0);
    }
    let o = options(invocation, args);
    install_signals();
    procs::init_fd_budget();
    let open = |p: &str| File::open(p).unwrap_or_else(|e| fatal(format!("cannot open {p}: {e}")));
    let host = Host {
        stat: open("/proc/stat"),
        meminfo: open("/proc/meminfo"),
        net: File::open("/proc/net/dev").ok(),
        disk: File::open("/proc/diskstats").ok(),
    };
    let rescan = (10.0 / o.interval).ceil() as u64; // a non-daemon's argv is read again every 10 s
    let procs = Procs::new(o.threads_of.clone(), rescan).unwrap_or_else(|| fatal("cannot list /proc".into()));
    let hz = sysconf(libc::_SC_CLK_TCK, 100) as f64;
    let stack = Stack::new("/sys/class/net", rescan);
    let mut s = Sampler {
        host,
        procs,
        stack,
        buf: vec![0; 1 << 16],
        line: Line { b: Vec::with_capacity(1 << 16) },
        hz,
        seq: 0,
    };
    let n = read_single(&s.host.stat, &mut s.buf).unwrap_or_else(|e| fatal(format!("cannot read /proc/stat: {e}")));
    let cpu = parse::proc_stat(&s.buf[..n]).unwrap_or_else(|| fatal("/proc/stat has no cpu line".into()));
    let programs: serde_json::Map<String, serde_json::Value> =
        parse::PROGRAMS.iter().map(|p| (p.name.to_string(), p.kind.into())).collect();
    let t0 = mono_ns();
    emit(&serde_json::json!({
        "type": "sample_start", "engine": binary, "version": VERSION, "format": FORMAT,
        "host": hostname(), "pid": std::process::id(), "ts": wall_s(), "mono": t0 as f64 / 1e9,
        "interval_s": o.interval, "duration_s": o.duration, "clk_tck": sysconf(libc::_SC_CLK_TCK, 100),
        "page_size": sysconf(libc::_SC_PAGESIZE, 4096), "ncpu": cpu.ncpu, "boot_time": cpu.btime,
        "programs": programs, "threads_of": o.threads_of,
    }));
    let step = (o.interval * 1e9) as u64;
    let end = o.duration.map(|d| t0 + (d * 1e9) as u64);
    let mut k: u64 = 0;
    let stop = loop {
        if s.sample().is_none() {
            fatal("cannot read /proc/stat or /proc/meminfo".into());
        }
        write_out(&s.line.b);
        // The next tick on the grid t0 + k * interval; ticks missed (a stalled host) are skipped.
        let now = mono_ns();
        k = (k + 1).max((now.saturating_sub(t0)) / step + 1);
        let next = t0 + k * step;
        if end.is_some_and(|e| next > e + 1_000_000) {
            break "duration";
        }
        if !sleep_until(next) {
            break match SIGNAL.load(Ordering::Relaxed) {
                libc::SIGTERM => "SIGTERM",
                libc::SIGINT => "SIGINT",
                _ => "SIGHUP",
            };
        }
    };
    emit(&serde_json::json!({
        "type": "sample_end", "ts": wall_s(), "mono": mono_ns() as f64 / 1e9, "samples": s.seq, "stop": stop,
        "self_cpu_s": self_cpu_s(), "wall_s": (mono_ns() - t0) as f64 / 1e9,
    }));
    exit(0)
}
