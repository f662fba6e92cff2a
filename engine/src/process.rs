//! Leaving the process: always through `_exit`, and bounded by watchdogs
//! where a library call could hang.

use std::sync::atomic::{AtomicBool, Ordering};

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

/// Exit the process with `code` after `secs` unless `done` is set by then
/// (an error record first, unless `message` is empty).
pub fn watchdog(secs: f64, done: &'static AtomicBool, kind: &'static str, message: String, code: i32) {
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs_f64(secs));
        if !done.load(Ordering::SeqCst) {
            if !message.is_empty() {
                crate::out::error(kind, &message, true);
            }
            exit(code);
        }
    });
}
