//! Clocks: monotonic ns for latency and schedule, realtime seconds for `ts`.

pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer; CLOCK_MONOTONIC always exists on Linux (vDSO, no syscall).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn wall_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Engine CPU (user, sys seconds) and peak RSS (KiB) from getrusage(RUSAGE_SELF).
pub fn rusage() -> (f64, f64, i64) {
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (tv(ru.ru_utime), tv(ru.ru_stime), peak_rss_kib().unwrap_or(ru.ru_maxrss))
}

/// This process's own peak RSS (`VmHWM`). `ru_maxrss` is not: Linux carries it
/// over from the parent across fork and exec, so a child of a large process
/// (a test runner, the orchestrator) reports the parent's size as its own.
fn peak_rss_kib() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Context switches of the whole process so far: (voluntary, involuntary),
/// every thread's included (getrusage(RUSAGE_SELF)).
pub fn ctx_switches() -> (i64, i64) {
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    (ru.ru_nvcsw, ru.ru_nivcsw)
}

/// One thread's CPU so far, from /proc/self/task/TID/stat.
#[derive(Clone)]
pub struct ThreadCpu {
    pub tid: u32,
    pub name: String,
    /// user + system time, in clock ticks
    pub ticks: u64,
}

/// Every thread of this process with its CPU so far. A thread that ends
/// between the listing and its read is skipped.
pub fn thread_cpu() -> Vec<ThreadCpu> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    let mut out = Vec::with_capacity(32);
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        if let Some((name, ticks)) = parse_stat(&stat) {
            out.push(ThreadCpu { tid, name, ticks });
        }
    }
    out
}

/// (comm, utime + stime) of a /proc stat line. comm may hold spaces and
/// parentheses, so it ends at the last ')'; utime and stime are the 12th and
/// 13th fields after it.
fn parse_stat(stat: &str) -> Option<(String, u64)> {
    let (a, b) = (stat.find('(')?, stat.rfind(')')?);
    let mut f = stat.get(b + 1..)?.split_whitespace().skip(11);
    let u: u64 = f.next()?.parse().ok()?;
    let s: u64 = f.next()?.parse().ok()?;
    Some((stat.get(a + 1..b)?.to_string(), u + s))
}

/// Seconds per clock tick of /proc's CPU times.
pub fn tick_s() -> f64 {
    // SAFETY: plain sysconf call.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1.0 / if hz > 0 { hz as f64 } else { 100.0 }
}

/// Per-thread CPU since `then`: (tid, name, seconds), busiest first. A
/// thread born since counts from zero.
pub fn thread_delta(then: &[ThreadCpu], now: &[ThreadCpu]) -> Vec<(u32, String, f64)> {
    let tick = tick_s();
    let mut d: Vec<(u32, String, f64)> = now
        .iter()
        .map(|t| {
            let before = then.iter().find(|p| p.tid == t.tid).map_or(0, |p| p.ticks);
            (t.tid, t.name.clone(), t.ticks.saturating_sub(before) as f64 * tick)
        })
        .collect();
    d.sort_by(|a, b| b.2.total_cmp(&a.2));
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_thread_names_parse() {
        let line = "4242 (msgr-worker-0) S 1 2 3 0 -1 4194368 10 0 0 0 250 75 0 0 20 0 9 0 100 0 0";
        assert_eq!(parse_stat(line), Some(("msgr-worker-0".into(), 325)));
        let odd = "7 (a (b) c) R 1 2 3 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 1 0 0";
        assert_eq!(parse_stat(odd), Some(("a (b) c".into(), 7)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn a_busy_thread_is_told_apart_from_an_idle_one() {
        let before = thread_cpu();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        // Spins until the kernel has charged it 100 ms, however loaded the machine.
        let h = std::thread::Builder::new()
            .name("spinner".into())
            .spawn(move || {
                let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                loop {
                    // SAFETY: valid pointer.
                    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
                    if ts.tv_sec > 0 || ts.tv_nsec > 100_000_000 {
                        break;
                    }
                }
                tx.send(()).unwrap();
                let _ = done_rx.recv(); // listed until the test has read it
            })
            .unwrap();
        rx.recv().unwrap();
        let d = thread_delta(&before, &thread_cpu());
        // SAFETY: plain gettid call.
        let me = unsafe { libc::gettid() } as u32;
        let cpu = |pred: &dyn Fn(&(u32, String, f64)) -> bool| d.iter().find(|t| pred(t)).map(|t| t.2);
        let spinner = cpu(&|t| t.1 == "spinner").expect("the spinner is listed");
        let idle = cpu(&|t| t.0 == me).expect("this thread is listed");
        assert!(spinner >= 0.08 && spinner > idle, "{d:?}");
        done_tx.send(()).unwrap();
        h.join().unwrap();
    }
}
