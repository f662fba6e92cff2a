//! fathom-engine: runs one benchmark point described by a JSON spec (file
//! argument or stdin) and writes JSON lines to stdout. See PROTOCOL.md.

mod ceph;
mod clock;
mod engine;
mod errno;
mod ffi;
mod interrupt;
mod io;
mod out;
mod rate;
mod rng;
mod spec;
mod stats;
mod target;
mod verify;

use clock::{mono_ns, wall_s};
use engine::{Engine, PhaseEnd, Shared};
use serde_json::json;
use spec::{Spec, TargetKind};
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use target::{Fatal, Target};

const VERSION: &str = env!("CARGO_PKG_VERSION");

const USAGE: &str = "usage: fathom-engine [SPEC.json | -]\n\
Runs one point described by a JSON spec (a file, or stdin when absent or '-')\n\
and writes JSON lines to stdout: start, interval (one per second), summary.\n\
Exit codes: 0 ok, 2 invalid spec, 3 Ceph error / stall / stopped on error, 5 verify mismatch,\n\
128+N stopped by signal N (SIGTERM, SIGINT; the summary is still written).\n\
Protocol: see engine/PROTOCOL.md.";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return;
    }
    if args.iter().any(|a| a == "-V" || a == "--version") {
        println!("fathom-engine {VERSION} (protocol {})", spec::PROTOCOL);
        return;
    }
    if args.len() > 1 {
        out::error("invalid_spec", "give at most one argument: the spec file (or '-' for stdin)", true);
        std::process::exit(2);
    }
    let text = match args.first().map(String::as_str) {
        None | Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map(|_| s)
                .map_err(|e| format!("cannot read the spec from stdin: {e}"))
        }
        Some(p) => std::fs::read_to_string(p).map_err(|e| format!("cannot read the spec file {p:?}: {e}")),
    };
    let spec = match text.and_then(|t| spec::parse(&t)) {
        Ok(s) => s,
        Err(m) => {
            out::error("invalid_spec", &m, true);
            std::process::exit(2);
        }
    };
    interrupt::install();
    // Die with the parent (the orchestrator), through the SIGTERM path: a
    // killed fathom leaves no load running, and the parent needs no code
    // of its own in the child before exec (so it can spawn cheaply).
    // SAFETY: plain prctl/getppid calls.
    unsafe {
        let parent = libc::getppid();
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
        if libc::getppid() != parent {
            std::process::exit(3); // the parent died before the signal was armed
        }
    }
    io::set_batch_callbacks(spec.callback_sched == spec::CallbackSched::Batch);
    let code = match run(&spec) {
        Ok(code) => code,
        Err(f) => {
            out::error(&f.kind, &f.message, true);
            f.code
        }
    };
    exit(code);
}

/// Leave without running C++ static destructors: librados threads may still
/// be running (a handle that was never shut down, ops abandoned in flight),
/// and tearing down the library's globals under them crashes. Records are
/// flushed as they are written, so nothing is lost.
fn exit(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // SAFETY: _exit never returns and touches no Rust state.
    unsafe { libc::_exit(code) }
}

/// Exit the process after `secs` unless `done` is set: no librados call may hang the engine.
fn watchdog(secs: f64, done: &'static AtomicBool, kind: &'static str, message: String, code: i32) {
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs_f64(secs));
        if !done.load(Ordering::SeqCst) {
            if !message.is_empty() {
                out::error(kind, &message, true);
            }
            exit(code);
        }
    });
}

fn run(spec: &Spec) -> Result<i32, Fatal> {
    let t_connect = mono_ns();
    let connected: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let c = &spec.connection;
    watchdog(
        c.timeout_s * 2.0 + 10.0,
        connected,
        "ETIMEDOUT",
        format!(
            "connecting to the cluster and opening pool {:?} did not finish within {} s",
            spec.pool,
            c.timeout_s * 2.0 + 10.0
        ),
        3,
    );
    let l = &spec.load;
    let (jobs, op_bytes) = match (&spec.rados, &spec.rbd) {
        (Some(r), _) => (1, r.op_size.or(r.object_size).unwrap_or(4 << 20)),
        (_, Some(r)) => (r.images.len() as u64 * r.numjobs as u64, r.bs),
        _ => (1, 0),
    };
    let slots = jobs * l.iodepth as u64;
    let cluster = ceph::connect(c, (slots, slots.saturating_mul(op_bytes)))?;
    let time_bounded = l.duration_s.is_some() || l.ops.is_some() || l.bytes.is_some();
    let target: Box<dyn Target> = match spec.target {
        TargetKind::Rados => Box::new(target::rados::Rados::open(
            &cluster,
            &spec.pool,
            spec.rados.as_ref().expect("validated"),
            time_bounded,
            spec.stall_timeout_s,
            spec.verify,
        )?),
        TargetKind::Rbd => {
            Box::new(target::rbd::Rbd::open(&cluster, &spec.pool, spec.rbd.as_ref().expect("validated"))?)
        }
    };
    connected.store(true, Ordering::SeqCst);
    let connect_s = (mono_ns() - t_connect) as f64 / 1e9;

    let nslots = (target.jobs() * l.iodepth) as usize;
    let queue: &'static io::CompletionQueue = Box::leak(Box::new(io::CompletionQueue::new(nslots)));
    let slots = io::alloc_slots(nslots, target.buf_len(), queue);
    for (i, s) in slots.iter_mut().enumerate() {
        s.job = (i / l.iodepth as usize) as u32;
    }
    let spec_json = serde_json::to_value(spec).expect("spec serializes");
    out::emit(&json!({"type": "start", "protocol": spec::PROTOCOL, "engine": "fathom-engine", "version": VERSION,
                      "ts": wall_s(), "pid": std::process::id(), "target": spec.target.name(), "spec": spec_json,
                      "connect_s": connect_s, "slots": nslots}));

    // The engine lives for the rest of the process: library callbacks may
    // reach it until the very end (see Shared).
    let spec_s: &'static Spec = Box::leak(Box::new(spec.clone()));
    let target_s: &'static mut dyn Target = Box::leak(target);
    let sh = Shared::install(Engine::new(spec_s, target_s, slots, queue));
    let mut prefill = serde_json::Value::Null;
    let has_prefill = sh.lock().begin_prefill();
    if has_prefill {
        let t = mono_ns();
        if let PhaseEnd::Stall { in_flight, waited_s } = sh.run(false) {
            return Err(stall(in_flight, waited_s, "prefill"));
        }
        let e = sh.lock();
        if let Some(sig) = e.interrupted {
            return Err(Fatal {
                kind: "interrupted".into(),
                message: format!("interrupted by {} during the prefill", interrupt::name(sig)),
                code: 128 + sig,
            });
        }
        if let Some((kind, msg)) = e.stop_error.clone() {
            return Err(Fatal { kind, message: format!("prefill: {msg}"), code: 3 });
        }
        prefill = json!({"ops": e.finished, "seconds": (mono_ns() - t) as f64 / 1e9});
    }
    sh.lock().begin_main();
    let ended = sh.run(true);
    // Held to the end: late callbacks then leave their slot to the queue.
    let mut eng = sh.lock();
    let measured_s = eng.measured_s();
    let wall = (mono_ns() - eng.phase_start) as f64 / 1e9;
    let mut code = 0;
    let mut trailer: Option<(String, String, bool)> = None;
    let mut stop_reason = eng.stop_reason.clone();
    let mut stopped_early = eng.stopped_early;
    match ended {
        PhaseEnd::Stall { in_flight, waited_s } => {
            let f = stall(in_flight, waited_s, "run");
            stopped_early = true;
            stop_reason = Some(f.message.clone());
            trailer = Some((f.kind, f.message, true));
            code = 3;
        }
        PhaseEnd::Done => {
            if let Some((kind, msg)) = eng.stop_error.clone() {
                trailer = Some((kind, msg, true));
                code = 3;
            } else if let Some(sig) = eng.interrupted {
                // The summary covers what ran; the exit status says it was cut short.
                trailer = Some((
                    "interrupted".into(),
                    format!("interrupted by {} after {measured_s:.1} s of measurement", interrupt::name(sig)),
                    false,
                ));
                code = 128 + sig;
            }
        }
    }
    // Extras (rados metadata) only when the run ended cleanly enough to trust them.
    let mut extras = Vec::new();
    if eng.in_flight == 0 || matches!(ended, PhaseEnd::Done) {
        match eng.target().finish() {
            Ok(x) => extras = x,
            Err(f) => {
                if trailer.is_none() {
                    trailer = Some((f.kind, f.message, true));
                    code = f.code;
                }
            }
        }
    }
    if eng.mismatches > 0 && code == 0 {
        let m = eng.first_mismatch.clone().unwrap_or_default();
        trailer = Some((
            "verify".into(),
            format!(
                "{} verify mismatches; first at {} offset {}: {}",
                eng.mismatches,
                m["object"],
                m["offset"],
                m["reason"].as_str().unwrap_or("")
            ),
            false,
        ));
        code = 5;
    }
    let (user, sys, rss) = clock::rusage();
    let mut summary = json!({
        "type": "summary", "ts": wall_s(), "t": wall,
        "wall_s": wall, "measured_s": measured_s, "ramp_s": l.ramp_s,
        "ops": eng.ops_json(measured_s), "errors": eng.errors.json(), "verify": eng.verify_json(),
        "cpu": {"user_s": user, "sys_s": sys}, "max_rss_kib": rss,
        "schedule": eng.schedule_json(),
        "started": eng.started, "finished": eng.finished,
        "in_flight_abandoned": eng.in_flight,
        "stopped_early": stopped_early, "stop_reason": stop_reason,
        "connect_s": connect_s, "prefill": prefill,
    });
    for (k, v) in extras {
        summary[k] = v;
    }
    out::emit(&summary);
    if let Some((kind, msg, fatal)) = trailer {
        out::error(&kind, &msg, fatal);
    }
    if eng.in_flight == 0 {
        // Clean teardown, bounded: librados shutdown can hang on a sick cluster.
        let done: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        watchdog(10.0, done, "", String::new(), code);
        eng.target().close();
        // SAFETY: every ioctx and image is closed and nothing is in flight.
        unsafe { ffi::rados_shutdown(cluster.h) };
        done.store(true, Ordering::SeqCst);
    }
    // Ops still in flight own their slots: leak everything and exit without shutdown.
    Ok(code)
}

fn stall(in_flight: u32, waited_s: f64, phase: &str) -> Fatal {
    Fatal {
        kind: "stall".into(),
        message: format!(
            "no op completed for {waited_s:.1} s during the {phase} with {in_flight} ops in flight \
             (cluster full, paused or unreachable?)"
        ),
        code: 3,
    }
}
