//! fathom-engine: runs one benchmark point described by a JSON spec (file
//! argument or stdin) and writes JSON lines to stdout. See PROTOCOL.md.

mod ceph;
mod control;
mod engine;
mod errno;
mod ffi;
mod interrupt;
mod io;
mod libs;
mod out;
mod process;
mod rate;
mod rng;
mod spec;
mod stats;
mod targets;
mod verify;

// clock and sample are the library's (src/lib.rs), shared with fathom-sampler.
use fathom_engine::{clock, sample};

use clock::{mono_ns, wall_s};
use engine::{Engine, PhaseEnd, Shared, StopCause};
use process::{exit, watchdog};
use serde_json::json;
use spec::Spec;
use std::io::Read;
use std::sync::atomic::AtomicBool;
use targets::{Fatal, Target};

const VERSION: &str = env!("CARGO_PKG_VERSION");

const USAGE: &str = "usage: fathom-engine [SPEC.json | -]\n\
       fathom-engine --check [SPEC.json | -]\n\
       fathom-engine --version\n\
       fathom-engine --sample [--interval S] [--duration S] [--threads-of NAME]... (see --sample --help)\n\
Runs one point described by a JSON spec (protocol 2; a file, or stdin when absent or '-')\n\
and writes JSON lines to stdout: start, interval (one per interval_s), summary.\n\
With the spec's `control` set (spec from a file only), stdin is the control channel:\n\
JSON lines {\"type\":\"stop\",\"reason\":..}, {\"type\":\"go\",\"at\":<epoch s>}, {\"type\":\"heartbeat\"}.\n\
--check: validate the spec without connecting; prints {\"type\":\"spec\",\"protocol\":2,\"spec\":..}.\n\
--sample: sample this host's CPU, memory, network, disks and Ceph daemons from /proc, a JSON line per interval\n\
(also the binary fathom-sampler, which links no Ceph library: for hosts with Ceph in containers).\n\
Exit codes: 0 ok (also a control stop), 2 invalid spec, 3 target error / stall / stopped on error,\n\
5 verify mismatch, 6 orchestrator lost (control EOF, heartbeats stopped, stdout closed),\n\
128+N stopped by signal N (SIGTERM, SIGINT; the summary is still written).\n\
Protocol: see engine/PROTOCOL.md.";

fn invalid(message: &str) -> ! {
    out::error("invalid_spec", message, true);
    exit(2)
}

/// Set (to anything) by an orchestrator whose engine's parent is not itself: no death signal from the parent.
const NO_PDEATHSIG: &str = "FATHOM_ENGINE_NO_PDEATHSIG";

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "--sample") {
        sample::main("fathom-engine --sample", &args[1..]); // host sampling: its own arguments and records
    }
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return;
    }
    if args.iter().any(|a| a == "-V" || a == "--version") {
        println!("fathom-engine {VERSION} (protocol {})", spec::PROTOCOL);
        return;
    }
    let check = args.first().is_some_and(|a| a == "--check");
    if check {
        args.remove(0);
    }
    if args.len() > 1 || args.first().is_some_and(|a| a.starts_with("--")) {
        invalid("give at most one argument: the spec file (or '-' for stdin), after --check if checking only");
    }
    let from_stdin = matches!(args.first().map(String::as_str), None | Some("-"));
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
        Err(m) => invalid(&m),
    };
    if from_stdin && spec.control.is_some() {
        invalid(
            "control needs stdin for the control channel: give the spec as a file argument, or set control to null",
        );
    }
    if check {
        let spec_json = serde_json::to_value(&spec).expect("spec serializes");
        out::emit(&json!({"type": "spec", "protocol": spec::PROTOCOL, "spec": spec_json}));
        exit(0);
    }
    interrupt::install();
    // Die with the parent (the orchestrator), through the SIGTERM path: a
    // killed fathom leaves no load running, and the parent needs no code
    // of its own in the child before exec (so it can spawn cheaply). Not
    // where the parent is a launcher that exits once the engine runs (a
    // pod's exec: `runc exec --detach`), whose exit would stop the engine at
    // its start; there the heartbeats stand for the orchestrator.
    if std::env::var_os(NO_PDEATHSIG).is_none() {
        // SAFETY: plain prctl/getppid calls.
        unsafe {
            let parent = libc::getppid();
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if libc::getppid() != parent {
                std::process::exit(3); // the parent died before the signal was armed
            }
        }
    }
    io::set_batch_callbacks(spec.callback_sched == spec::CallbackSched::Batch);
    // SCHED_BATCH is for library callback threads; the submitter keeps its
    // policy even when a target completes ops inline (null, delay_us 0).
    io::keep_thread_sched();
    if let Some(c) = &spec.control {
        control::start(c);
    }
    let code = match run(&spec) {
        Ok(code) => code,
        Err(f) => {
            out::error(&f.kind, &f.message, true);
            f.code
        }
    };
    exit(code);
}

fn run(spec: &Spec) -> Result<i32, Fatal> {
    let t_connect = mono_ns();
    let target = targets::open(spec)?;
    let connect_s = (mono_ns() - t_connect) as f64 / 1e9;
    let l = &spec.load;

    let nslots = (target.jobs() * l.iodepth) as usize;
    let queue: &'static io::CompletionQueue = Box::leak(Box::new(io::CompletionQueue::new(nslots)));
    control::set_queue(queue);
    let slots = io::alloc_slots(nslots, target.buf_len(), queue);
    for (i, s) in slots.iter_mut().enumerate() {
        s.job = (i / l.iodepth as usize) as u32;
    }
    let spec_json = serde_json::to_value(spec).expect("spec serializes");
    let libraries = libs::loaded();
    if let Some(dir) = spec_json["target"]["connection"]["library_dir"].as_str() {
        libs::check(dir, &libraries)?;
    }
    out::emit(&json!({"type": "start", "protocol": spec::PROTOCOL, "engine": "fathom-engine", "version": VERSION,
                      "ts": wall_s(), "pid": std::process::id(), "target": spec.target.kind(), "spec": spec_json,
                      "connect_s": connect_s, "slots": nslots, "libraries": libraries}));

    // The engine lives for the rest of the process: library callbacks may
    // reach it until the very end (see Shared).
    let spec_s: &'static Spec = Box::leak(Box::new(spec.clone()));
    let target_s: &'static mut dyn Target = Box::leak(target);
    let sh = Shared::install(Engine::new(spec_s, target_s, slots, queue));
    let mut prefill = serde_json::Value::Null;
    // The main phase runs unless a control request or a signal comes first.
    let mut go = true;
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
        let complete = e.requested.is_none();
        go = complete;
        prefill = json!({"ops": e.finished, "seconds": (mono_ns() - t) as f64 / 1e9, "complete": complete});
    }
    // Reset before waiting: clearing the histograms touches all their pages, and with many engines
    // per core that work, done after the start time, would spread the engines' starts.
    sh.lock().begin_main();
    if go && spec.control.as_ref().is_some_and(|c| c.wait) {
        out::emit(&json!({"type": "ready", "ts": wall_s()}));
        go = control::wait_go().is_ok();
    }
    let ended = if go {
        sh.run(true)
    } else {
        sh.lock().skip_main();
        PhaseEnd::Done
    };
    // Held to the end: late callbacks then leave their slot to the queue.
    let mut eng = sh.lock();
    let measured_s = eng.measured_s();
    let wall = (mono_ns() - eng.phase_start) as f64 / 1e9;
    let mut code = 0;
    let mut trailer: Option<(String, String, bool)> = None;
    match ended {
        PhaseEnd::Stall { in_flight, waited_s } => {
            let f = stall(in_flight, waited_s, "run");
            eng.stop = None; // the stall is what ended it, whatever was asked before
            eng.set_stop(StopCause::Stall, Some(f.message.clone()));
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
            } else if let Some(control::Request::Lost(why)) = eng.requested.clone() {
                trailer = Some(("orchestrator_lost".into(), why, false));
                code = 6;
            }
        }
    }
    // Extras (rados metadata) only when the run ended cleanly enough to trust
    // them, and never after an incomplete prefill (its object set is not whole).
    let mut extras = Vec::new();
    let prefill_whole = prefill.get("complete").is_none_or(|c| c == true);
    // Ops abandoned because the orchestrator was lost: the cluster may be out of reach too, so
    // nothing more is sent to it (a metadata write would wait for the network).
    let lost_abandoned = eng.in_flight > 0 && matches!(eng.requested, Some(control::Request::Lost(_)));
    if (eng.in_flight == 0 || matches!(ended, PhaseEnd::Done)) && prefill_whole && !lost_abandoned {
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
    let ctx = clock::ctx_switches();
    let measured_ops: u64 = eng.total.iter().map(|k| k.ops + k.errors).sum();
    let (window_s, drain_s) = eng.window_drain_s();
    // The measured phase's own CPU and context switches: per op, over the ops it measured (the 2014 file
    // study's chart); the ramp, connect, prefill and teardown are left out of both.
    let (measured_cpu, threads, mctx) =
        eng.measured_cpu_json().map_or((json!(null), json!([]), None), |(m, t, c)| (m, t, Some(c)));
    let ctx_per_op = |n: Option<i64>| match n {
        Some(n) if measured_ops > 0 => json!(n as f64 / measured_ops as f64),
        _ => serde_json::Value::Null,
    };
    let mut summary = json!({
        "type": "summary", "ts": wall_s(), "t": wall,
        "wall_s": wall, "measured_s": measured_s, "window_s": window_s, "drain_s": drain_s, "ramp_s": l.ramp_s,
        "ops": eng.ops_json(measured_s), "errors": eng.errors.json(), "verify": eng.verify_json(),
        "cpu": {"user_s": user, "sys_s": sys, "voluntary_ctx": ctx.0, "involuntary_ctx": ctx.1,
                "voluntary_ctx_per_op": ctx_per_op(mctx.map(|c| c.0)),
                "involuntary_ctx_per_op": ctx_per_op(mctx.map(|c| c.1)),
                "measured": measured_cpu, "threads": threads},
        "max_rss_kib": rss,
        "schedule": eng.schedule_json(),
        "started": eng.started, "finished": eng.finished,
        "in_flight_abandoned": eng.in_flight,
        "stop": eng.stop.unwrap_or(StopCause::Done).name(),
        "stopped_early": eng.stopped_early, "stop_reason": eng.stop_reason,
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
        // Clean teardown, bounded: a library's shutdown can hang on a sick cluster.
        let done: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        watchdog(10.0, done, "", String::new(), code);
        eng.target().close();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
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
