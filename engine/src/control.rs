//! The control channel: JSON lines on stdin, read by one thread that sets
//! atomics the submitter polls (as interrupt.rs does for signals) and wakes
//! it. Only when the spec's `control` is set; otherwise stdin is not read.
//!
//! Lines: `{"type":"stop","reason":"..."}` (stop cleanly, exit 0),
//! `{"type":"go","at":<epoch s>}` (start the main phase then, with
//! `control.wait`), `{"type":"heartbeat"}`, `{"type":"ping","id":N}`
//! (answered at once by a `pong` record with this host's CLOCK_REALTIME, so
//! the orchestrator can measure the clock offset over the same channel the
//! records travel). Any line counts as a heartbeat.
//! A line that is not JSON, or of an unknown type, is ignored with a
//! non-fatal `invalid_control` error record, so a newer orchestrator's
//! line never ends a run. EOF on stdin means the orchestrator is gone.
//!
//! The same "orchestrator lost" request is made by out.rs when stdout is
//! closed, with or without a control channel: nobody reads the records.

use crate::clock::{mono_ns, wall_s};
use crate::io::CompletionQueue;
use crate::spec::Control;
use std::io::BufRead;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

const NONE: u8 = 0;
const STOP: u8 = 1;
const LOST: u8 = 2;

/// The first request wins: a `stop` followed by EOF is still a clean stop.
static REQUEST: AtomicU8 = AtomicU8::new(NONE);
static REASON: Mutex<String> = Mutex::new(String::new());
/// `go` time as f64 bits; u64::MAX: none yet.
static GO_AT: AtomicU64 = AtomicU64::new(u64::MAX);
static LAST_LINE_NS: AtomicU64 = AtomicU64::new(0);
/// 0: no heartbeat timeout.
static HEARTBEAT_NS: AtomicU64 = AtomicU64::new(0);
static QUEUE: OnceLock<&'static CompletionQueue> = OnceLock::new();
/// Wakes `wait_go` (the submitter is not in its completion queue then).
static WAITER: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());

/// What the orchestrator (or its absence) asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `stop` line: end cleanly, exit 0.
    Stop(String),
    /// EOF on stdin, heartbeats stopped, or stdout closed: end cleanly, exit 6.
    Lost(String),
}

/// Start the reader thread.
pub fn start(c: &Control) {
    LAST_LINE_NS.store(mono_ns(), Ordering::Relaxed);
    if let Some(h) = c.heartbeat_timeout_s {
        HEARTBEAT_NS.store(((h * 1e9) as u64).max(1), Ordering::Relaxed);
    }
    let wait = c.wait;
    std::thread::Builder::new().name("control".into()).spawn(move || read(wait)).expect("spawn a thread");
}

/// The submitter's queue, woken when a request arrives.
pub fn set_queue(q: &'static CompletionQueue) {
    let _ = QUEUE.set(q);
}

fn read(wait: bool) {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock();
    let mut line = String::new();
    loop {
        line.clear();
        match lines.read_line(&mut line) {
            Ok(0) => {
                lost("the orchestrator closed the control channel (EOF on stdin)".into());
                return;
            }
            Err(e) => {
                lost(format!("cannot read the control channel: {e}"));
                return;
            }
            Ok(_) => {}
        }
        LAST_LINE_NS.store(mono_ns(), Ordering::Relaxed);
        if let Some(pong) = pong(line.trim()) {
            crate::out::emit(&pong);
            continue;
        }
        if let Err(m) = handle(line.trim(), wait) {
            crate::out::error("invalid_control", &format!("{m} (ignored)"), false);
        }
    }
}

/// The answer to a `ping` line: the clock read as soon as the line is in.
fn pong(line: &str) -> Option<serde_json::Value> {
    if !line.contains("\"ping\"") {
        return None;
    }
    let ts = wall_s();
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v.get("type").and_then(|t| t.as_str()) != Some("ping") {
        return None;
    }
    let id = v.get("id").cloned().unwrap_or(serde_json::Value::Null);
    Some(serde_json::json!({"type": "pong", "id": id, "ts": ts}))
}

fn handle(line: &str, wait: bool) -> Result<(), String> {
    if line.is_empty() {
        return Ok(());
    }
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("control line is not JSON ({e}): {line:.200}"))?;
    match v.get("type").and_then(|t| t.as_str()) {
        Some("heartbeat") => Ok(()),
        Some("stop") => {
            let reason = v.get("reason").and_then(|r| r.as_str()).unwrap_or("stopped by the orchestrator");
            request(STOP, reason.to_string());
            Ok(())
        }
        Some("go") => {
            let at = v.get("at").and_then(|a| a.as_f64()).filter(|a| a.is_finite());
            let Some(at) = at else {
                return Err(format!("go needs \"at\": epoch seconds (CLOCK_REALTIME), got {line:.200}"));
            };
            if !wait {
                return Err("go without control.wait: the run started when it was ready".into());
            }
            GO_AT.store(at.to_bits(), Ordering::SeqCst);
            wake();
            Ok(())
        }
        Some("ping") => Ok(()),
        Some(t) => Err(format!("unknown control line type {t:?}; known: stop, go, heartbeat, ping")),
        None => Err(format!("control line without a \"type\": {line:.200}")),
    }
}

fn request(kind: u8, reason: String) {
    let mut r = REASON.lock().unwrap_or_else(|p| p.into_inner());
    if REQUEST.load(Ordering::SeqCst) == NONE {
        *r = reason;
        REQUEST.store(kind, Ordering::SeqCst);
    }
    drop(r);
    wake();
}

fn wake() {
    if let Some(q) = QUEUE.get() {
        q.wake();
    }
    let _g = WAITER.0.lock().unwrap_or_else(|p| p.into_inner());
    WAITER.1.notify_all();
}

/// The orchestrator is gone (or no longer reads): stop cleanly, exit 6.
pub fn lost(reason: String) {
    request(LOST, reason);
}

/// Hot path: has anything been requested? One relaxed load.
#[inline]
pub fn pending() -> bool {
    REQUEST.load(Ordering::Relaxed) != NONE
}

pub fn request_made() -> Option<Request> {
    let r = REASON.lock().unwrap_or_else(|p| p.into_inner());
    match REQUEST.load(Ordering::SeqCst) {
        STOP => Some(Request::Stop(r.clone())),
        LOST => Some(Request::Lost(r.clone())),
        _ => None,
    }
}

/// When the heartbeat timeout expires (monotonic ns), if there is one.
pub fn heartbeat_deadline() -> Option<u64> {
    match HEARTBEAT_NS.load(Ordering::Relaxed) {
        0 => None,
        h => Some(LAST_LINE_NS.load(Ordering::Relaxed).saturating_add(h)),
    }
}

/// Called by the submitter: turn an expired heartbeat timeout into a request.
pub fn check_heartbeat(now: u64) {
    if let Some(d) = heartbeat_deadline()
        && now >= d
        && !pending()
    {
        let h = HEARTBEAT_NS.load(Ordering::Relaxed) as f64 / 1e9;
        lost(format!("the orchestrator's heartbeats stopped: no control line for {h} s (control.heartbeat_timeout_s)"));
    }
}

/// After `ready`: wait for `go` and then until its time. Ok(()) when the
/// main phase should start; Err(()) when a request or a signal came first.
pub fn wait_go() -> Result<(), ()> {
    let stop = || {
        check_heartbeat(mono_ns());
        pending() || crate::interrupt::pending().is_some()
    };
    let nap = std::time::Duration::from_millis(50);
    let at = loop {
        if stop() {
            return Err(());
        }
        let bits = GO_AT.load(Ordering::SeqCst);
        if bits != u64::MAX {
            break f64::from_bits(bits);
        }
        let g = WAITER.0.lock().unwrap_or_else(|p| p.into_inner());
        // Re-check under the lock: a request made since is not missed.
        if pending() || GO_AT.load(Ordering::SeqCst) != u64::MAX {
            continue;
        }
        let _ = WAITER.1.wait_timeout(g, nap).unwrap_or_else(|p| p.into_inner());
    };
    // Until `at` in naps that a stop interrupts, the last stretch in one
    // absolute sleep on CLOCK_REALTIME (the clock `at` is on).
    loop {
        if stop() {
            return Err(());
        }
        let left = at - wall_s();
        if left <= 0.0 {
            return Ok(());
        }
        if left > 0.1 {
            let g = WAITER.0.lock().unwrap_or_else(|p| p.into_inner());
            if !pending() {
                let _ = WAITER.1.wait_timeout(g, nap).unwrap_or_else(|p| p.into_inner());
            }
            continue;
        }
        let ts =
            libc::timespec { tv_sec: at.floor() as libc::time_t, tv_nsec: ((at - at.floor()) * 1e9) as libc::c_long };
        // SAFETY: valid timespec; EINTR (a signal) just returns early and the loop re-checks.
        unsafe { libc::clock_nanosleep(libc::CLOCK_REALTIME, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the statics are process-wide.
    #[test]
    fn lines_and_requests() {
        assert!(handle("", true).is_ok());
        assert!(handle(r#"{"type":"heartbeat"}"#, true).is_ok());
        assert!(handle("{oops", true).unwrap_err().contains("not JSON"));
        assert!(handle(r#"{"type":"pause"}"#, true).unwrap_err().contains("unknown control line type \"pause\""));
        assert!(handle(r#"{"kind":"stop"}"#, true).unwrap_err().contains("type"));
        assert!(handle(r#"{"type":"go"}"#, true).unwrap_err().contains("at"));
        assert!(pong(r#"{"type":"heartbeat"}"#).is_none());
        assert!(pong(r#"{"type":"stop","reason":"ping"}"#).is_none());
        let p = pong(r#"{"type":"ping","id":7}"#).expect("a pong");
        assert_eq!(p["type"], "pong");
        assert_eq!(p["id"], 7);
        assert!(p["ts"].as_f64().is_some_and(|t| t > 1.6e9));
        assert!(handle(r#"{"type":"go","at":1}"#, false).unwrap_err().contains("control.wait"));
        assert!(!pending() && request_made().is_none());
        assert!(handle(r#"{"type":"go","at":1.5}"#, true).is_ok());
        assert_eq!(f64::from_bits(GO_AT.load(Ordering::SeqCst)), 1.5);
        // `at` in the past: go at once.
        assert_eq!(wait_go(), Ok(()));
        assert!(handle(r#"{"type":"stop","reason":"steady"}"#, true).is_ok());
        assert!(pending());
        lost("eof".into()); // the first request wins
        assert_eq!(request_made(), Some(Request::Stop("steady".into())));
        assert_eq!(wait_go(), Err(()));
    }
}
