//! Leaving the process: always through `_exit`, and bounded by watchdogs
//! where a library call could hang.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Leave without running C++ static destructors: librados threads may still
/// be running (a handle that was never shut down, ops abandoned in flight),
/// and tearing down the library's globals under them crashes. Records are
/// flushed as they are written, so nothing is lost.
pub fn exit(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // SAFETY: _exit never returns and touches no Rust state.
    unsafe { libc::_exit(code) }
}

/// Bumped by set-up work that may rightly take long under a watchdog (laying
/// out a file set of gigabytes over NFS): the watchdogs wait for no progress.
static PROGRESS: AtomicU64 = AtomicU64::new(0);

/// Set-up is moving: every watchdog starts its wait again.
pub fn progress() {
    PROGRESS.fetch_add(1, Ordering::Relaxed);
}

/// Exit the process with `code` once `secs` pass with neither `done` set nor
/// any `progress()` (an error record first, unless `message` is empty).
pub fn watchdog(secs: f64, done: &'static AtomicBool, kind: &'static str, message: String, code: i32) {
    use std::time::{Duration, Instant};
    std::thread::spawn(move || {
        let wait = Duration::from_secs_f64(secs);
        let (mut seen, mut deadline) = (PROGRESS.load(Ordering::Relaxed), Instant::now() + wait);
        loop {
            let now = Instant::now();
            if now >= deadline || done.load(Ordering::SeqCst) {
                break;
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(500)));
            let p = PROGRESS.load(Ordering::Relaxed);
            if p != seen {
                (seen, deadline) = (p, Instant::now() + wait);
            }
        }
        if !done.load(Ordering::SeqCst) {
            if !message.is_empty() {
                crate::out::error(kind, &message, true);
            }
            exit(code);
        }
    });
}
