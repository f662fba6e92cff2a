//! JSON lines on stdout, flushed per record so a reader sees progress live.

use serde_json::{Value, json};
use std::io::Write;

pub fn emit(v: &Value) {
    let mut line = serde_json::to_vec(v).expect("records are valid JSON");
    line.push(b'\n');
    let mut o = std::io::stdout().lock();
    // A closed stdout (reader gone) must not panic the engine mid-run.
    let _ = o.write_all(&line);
    let _ = o.flush();
}

pub fn error(kind: &str, message: &str, fatal: bool) {
    emit(&json!({"type": "error", "ts": crate::clock::wall_s(), "kind": kind, "message": message, "fatal": fatal}));
}
