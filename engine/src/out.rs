//! JSON lines on stdout, flushed per record so a reader sees progress live.

use serde_json::{Value, json};
use std::io::Write;

pub fn emit(v: &Value) {
    let mut line = serde_json::to_vec(v).expect("records are valid JSON");
    line.push(b'\n');
    let mut o = std::io::stdout().lock();
    // A closed stdout (EPIPE: Rust ignores SIGPIPE) must not kill the engine
    // mid-run with ops in flight: nobody reads the records any more, so the
    // run stops cleanly (exit 6) through the control module's request.
    if let Err(e) = o.write_all(&line).and_then(|_| o.flush()) {
        drop(o);
        crate::control::lost(format!("stdout is closed: nobody reads the records ({e})"));
    }
}

pub fn error(kind: &str, message: &str, fatal: bool) {
    emit(&json!({"type": "error", "ts": crate::clock::wall_s(), "kind": kind, "message": message, "fatal": fatal}));
}
