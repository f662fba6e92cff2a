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
