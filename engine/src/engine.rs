//! The submitter: one thread keeps every slot busy (closed loop) or
//! follows the arrival schedule (open loop), reaps completions in batches,
//! records statistics, and emits interval records. Library callbacks only
//! stamp the end time and queue the slot index (io.rs).

use crate::clock::{ThreadCpu, mono_ns, wall_s};
use crate::control;
use crate::errno::ErrKind;
use crate::io::{CompletionQueue, OpKind, Slot, State};
use crate::out;
use crate::rate::{Lag, Schedule, schedule_kept};
use crate::rng::Rng;
use crate::spec::{OnError, Spec};
use crate::stats::{Errors, KindStats, Split, grid_after};
use crate::targets::Target;
use crate::verify;
use serde_json::{Map, Value, json};
use std::sync::atomic::Ordering;

const NS: f64 = 1e9;

pub enum PhaseEnd {
    /// Finished (time, op/byte bound, object set done, or stopped on error).
    Done,
    /// No completion for stall_timeout_s with ops in flight.
    Stall { in_flight: u32, waited_s: f64 },
}

/// Why the run ended: the summary's machine-readable `stop` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    Duration,
    Ops,
    Bytes,
    /// The workload has nothing more to issue (rados object set done).
    Done,
    /// A `stop` line on the control channel.
    Control,
    Signal,
    /// An op error with on_error=stop.
    Error,
    Stall,
    /// Control channel EOF, heartbeats stopped, or stdout closed.
    OrchestratorLost,
}

impl StopCause {
    pub fn name(self) -> &'static str {
        match self {
            StopCause::Duration => "duration",
            StopCause::Ops => "ops",
            StopCause::Bytes => "bytes",
            StopCause::Done => "done",
            StopCause::Control => "control",
            StopCause::Signal => "signal",
            StopCause::Error => "error",
            StopCause::Stall => "stall",
            StopCause::OrchestratorLost => "orchestrator_lost",
        }
    }
}

const NO_KIND: u8 = u8::MAX;

/// The process at one instant: CPU (s), context switches and each thread's CPU.
struct Mark {
    at: u64,
    user: f64,
    sys: f64,
    vol: i64,
    invol: i64,
    threads: Vec<ThreadCpu>,
}

/// How long ops in flight may drain after the orchestrator was lost.
const LOST_DRAIN_NS: u64 = 2_000_000_000;

/// State of the running phase (shared by the submitter and the callback fast path).
#[derive(Default)]
struct Phase {
    end: Option<u64>,
    interval_ns: u64,
    /// The next grid point (see `grid_next`) and how many have passed.
    next_tick: u64,
    tick_no: u64,
    prev_emit: u64,
    timeout: Option<u64>,
    scan_every: u64,
    next_scan: u64,
    stall: u64,
    last_progress: u64,
    sched: Option<Schedule>,
    /// load.ops / load.bytes apply per job (fio's number_ios and size).
    per_job_bound: bool,
    stopping: bool,
    /// Open loop, after the window's end: (stop, deadline). Arrivals intended before the stop that are
    /// still waiting are issued and measured until the deadline (the drain of the window's backlog).
    backlog: Option<(u64, u64)>,
    zombie_grace: Option<u64>,
    /// When ops still in flight after the orchestrator was lost are abandoned.
    lost_grace: Option<u64>,
    retry_soon: bool,
    inline: bool,
}

pub struct Engine<'a> {
    ph: Phase,
    /// The fast path reissues once this many slots are free, so submissions
    /// reach the messenger thread in bursts that share one wake-up.
    submit_batch: usize,
    spec: &'a Spec,
    target: &'a mut dyn Target,
    slots: &'static mut [Slot],
    queue: &'static CompletionQueue,
    free: Vec<u32>,
    rng: Rng,
    kinds: Vec<OpKind>,
    /// Index of each op kind's statistics (NO_KIND: not one of the target's kinds).
    kidx: [u8; OpKind::COUNT],
    /// The interval records' statistics, split at the grid (a late record holds its span's ops, no more).
    interval: Split,
    pub total: Vec<KindStats>,
    /// Per job in the measured phase: ops and bytes issued after the ramp.
    job_ops: Vec<u64>,
    job_bytes: Vec<u64>,
    jobs_done: usize,
    /// Free slots of jobs that reached their bound: never reissued this phase.
    parked: Vec<u32>,
    /// Process CPU (user, sys s) at the last interval record.
    cpu_mark: (f64, f64),
    /// Each thread's CPU at the last interval record.
    threads_mark: Vec<ThreadCpu>,
    /// The process at the ramp's end: the measured phase's CPU and context switches start here.
    measured_mark: Option<Mark>,
    /// ... and at the phase's end (before teardown).
    end_mark: Option<Mark>,
    /// Open loop: ops issued whose intended start fell inside the ramp, and ops issued after the ramp.
    intended_in_ramp: u64,
    issued_measured: u64,
    pub errors: Errors,
    pub lag: Lag,
    open_loop: bool,
    pub started: u64,
    pub finished: u64,
    /// Ops the library still owns, including timed-out ones.
    pub in_flight: u32,
    zombies: u32,
    pub verify_checked: u64,
    pub mismatches: u64,
    pub first_mismatch: Option<Value>,
    generation: u64,
    writes: u64,
    pub stopped_early: bool,
    pub stop_reason: Option<String>,
    /// What ended the run first.
    pub stop: Option<StopCause>,
    /// The first op error when on_error=stop: (error kind name, sentence).
    pub stop_error: Option<(String, String)>,
    /// SIGTERM/SIGINT asked the run to stop (see interrupt.rs).
    pub interrupted: Option<i32>,
    /// The control channel asked to stop (see control.rs).
    pub requested: Option<control::Request>,
    // Phase state (monotonic ns).
    pub phase_start: u64,
    pub ramp_end: u64,
    measured_end: u64,
    /// The stop (duration, bound, request), or the ramp's end if it came earlier.
    window_end: u64,
    stop_at: Option<u64>,
    measuring: bool,
}

impl<'a> Engine<'a> {
    pub fn new(
        spec: &'a Spec,
        target: &'a mut dyn Target,
        slots: &'static mut [Slot],
        queue: &'static CompletionQueue,
    ) -> Self {
        let kinds = target.kinds();
        let stats: Vec<KindStats> = kinds.iter().map(|k| KindStats::with_phases(target.phases(*k))).collect();
        let mut kidx = [NO_KIND; OpKind::COUNT];
        for (i, k) in kinds.iter().enumerate() {
            kidx[*k as usize] = i as u8;
        }
        let n = slots.len();
        let jobs = slots.iter().map(|s| s.job as usize + 1).max().unwrap_or(1);
        Engine {
            ph: Phase::default(),
            submit_batch: spec.load.submit_batch.map_or(1, |b| b as usize).clamp(1, n.max(1)),
            spec,
            target,
            slots,
            queue,
            free: Vec::with_capacity(n),
            rng: Rng::new(spec.seed),
            interval: Split::new(stats.clone()),
            total: stats,
            kinds,
            kidx,
            job_ops: vec![0; jobs],
            job_bytes: vec![0; jobs],
            jobs_done: 0,
            parked: Vec::with_capacity(n),
            cpu_mark: (0.0, 0.0),
            threads_mark: Vec::new(),
            measured_mark: None,
            end_mark: None,
            intended_in_ramp: 0,
            issued_measured: 0,
            errors: Errors::default(),
            lag: Lag::default(),
            open_loop: spec.load.rate.is_some(),
            started: 0,
            finished: 0,
            in_flight: 0,
            zombies: 0,
            verify_checked: 0,
            mismatches: 0,
            first_mismatch: None,
            generation: (spec.seed << 32) ^ (wall_s() as u64),
            writes: 0,
            stopped_early: false,
            stop_reason: None,
            stop: None,
            stop_error: None,
            interrupted: None,
            requested: None,
            phase_start: 0,
            ramp_end: 0,
            measured_end: 0,
            window_end: 0,
            stop_at: None,
            measuring: false,
        }
    }

    /// Note what ends the run: `stop` keeps the first cause; an early stop's
    /// sentence goes to `stop_reason` (the later one when several come, as in
    /// protocol 1).
    pub fn set_stop(&mut self, cause: StopCause, reason: Option<String>) {
        self.stop.get_or_insert(cause);
        if reason.is_some() {
            self.stopped_early = true;
            self.stop_reason = reason;
        }
    }

    /// The statistics of `kind`. A target issuing a kind it did not list
    /// in `kinds()` is a bug in that target.
    #[inline]
    fn ki(&self, kind: OpKind) -> usize {
        let i = self.kidx[kind as usize];
        debug_assert!(i != NO_KIND, "the target issued {} but does not list it in kinds()", kind.name());
        i as usize
    }

    fn stop_on_error(&mut self, kind: OpKind, e: &ErrKind, what: String) {
        // A preparation pass (prefill) must be clean whatever on_error says.
        let stop = self.spec.on_error == OnError::Stop || !self.measuring;
        if stop && self.stop_error.is_none() {
            let name = e.name();
            let msg =
                format!("{} of {what} failed with {name} ({}); stopping (on_error=stop)", kind.name(), e.describe());
            self.set_stop(StopCause::Error, Some(msg.clone()));
            self.stop_error = Some((name, msg));
        }
    }

    /// `at`: when the op ended (its completion, its timeout, its failed submission), which decides its interval.
    fn record_error(&mut self, idx: usize, e: ErrKind, lat: u64, at: u64) {
        let s = &self.slots[idx];
        let (kind, ramp) = (s.kind, s.ramp);
        let ki = self.ki(kind);
        self.interval.at(at)[ki].errors += 1;
        let what = self.target.describe(s);
        if self.measuring && !ramp {
            self.total[ki].errors += 1;
            let w = what.clone();
            self.errors.record(kind.name(), &e.name(), lat, move || format!("{} of {w}", kind.name()));
        }
        self.stop_on_error(kind, &e, what);
    }

    fn complete(&mut self, idx: usize) {
        let end = self.slots[idx].done.end_ns.load(Ordering::Relaxed);
        let rc = self.target.reap(&mut self.slots[idx]);
        self.in_flight -= 1;
        self.free.push(idx as u32);
        let s = &mut self.slots[idx];
        if s.state == State::Zombie {
            // Already counted as ETIMEDOUT when it timed out.
            self.zombies -= 1;
            s.state = State::Free;
            return;
        }
        s.state = State::Free;
        self.finished += 1;
        let lat = end.saturating_sub(s.intended_ns);
        let (kind, ramp) = (s.kind, s.ramp);
        match rc {
            Err(e) => self.record_error(idx, e, lat, end),
            Ok(n) => self.completed(idx, kind, ramp, lat, n, end),
        }
        if self.measuring && !ramp {
            self.measured_end = self.measured_end.max(end);
        }
    }

    #[inline]
    fn completed(&mut self, idx: usize, kind: OpKind, ramp: bool, lat: u64, n: u64, end: u64) {
        {
            let s = &self.slots[idx];
            self.target.on_success(s);
            if self.spec.verify && kind == OpKind::Read {
                let n = (n as usize).min(s.buf.len());
                let (checked, bad) = verify::check(&s.buf[..n], s.obj, s.offset);
                self.verify_checked += checked;
                if let Some(m) = bad {
                    self.mismatches += 1;
                    if self.first_mismatch.is_none() {
                        self.first_mismatch =
                            Some(json!({"object": self.target.describe(s), "offset": m.offset, "reason": m.reason}));
                    }
                }
            }
        }
        let ki = self.ki(kind);
        let phases = &self.slots[idx].phases;
        let iv = &mut self.interval.at(end)[ki];
        iv.record(lat, n);
        iv.record_phases(phases);
        if self.measuring && !ramp {
            self.total[ki].record(lat, n);
            self.total[ki].record_phases(phases);
        }
    }

    /// Issue one op in free slot `idx`. Ok(false): workload exhausted.
    fn issue(&mut self, idx: usize, intended: u64) -> Result<bool, ()> {
        let s = &mut self.slots[idx];
        if !self.target.next_op(s, &mut self.rng) {
            return Ok(false);
        }
        if self.spec.verify && s.kind == OpKind::Write {
            self.writes += 1;
            verify::fill(&mut s.buf[..s.len], s.obj, s.offset, self.generation.wrapping_add(self.writes));
        }
        let now = mono_ns();
        s.intended_ns = if self.open_loop && self.measuring { intended } else { now };
        // By issue time, also in open loop: an op issued after the ramp from the ramp's backlog is measured
        // (its latency, from the intended start, keeps the queueing), so in overload the window's
        // completions are all counted instead of being spent on uncounted backlog.
        s.ramp = now < self.ramp_end;
        s.start_ns = now;
        s.phases = [0; crate::io::Phase::COUNT];
        match self.target.submit(s) {
            Ok(()) => {
                s.state = State::InFlight;
                self.in_flight += 1;
                self.started += 1;
                if self.open_loop && self.measuring && !s.ramp {
                    self.lag.record(now.saturating_sub(intended));
                }
                Ok(true)
            }
            Err(e) => {
                let lat = now.saturating_sub(s.intended_ns);
                self.started += 1;
                self.finished += 1;
                self.record_error(idx, e, lat, now);
                Err(())
            }
        }
    }

    fn scan_timeouts(&mut self, now: u64, timeout: u64) {
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if s.state == State::InFlight && now.saturating_sub(s.start_ns) >= timeout {
                let lat = now.saturating_sub(s.intended_ns);
                self.slots[i].state = State::Zombie;
                self.zombies += 1;
                self.finished += 1;
                self.record_error(i, ErrKind::Timeout, lat, now);
            }
        }
    }

    /// The grid point after `t`: every interval from the phase start, one exactly at the ramp's end, then
    /// every interval from there. No interval straddles the ramp's end (a fractional ramp included), and
    /// engines started together share the grid, so records with one `tick` cover one span.
    fn grid_next(&self, t: u64) -> u64 {
        grid_after(t, self.ph.interval_ns, self.ramp_end)
    }

    /// The process's CPU, context switches and threads now.
    fn mark(at: u64, cpu: (f64, f64), threads: Vec<ThreadCpu>) -> Mark {
        let (vol, invol) = crate::clock::ctx_switches();
        Mark { at, user: cpu.0, sys: cpu.1, vol, invol, threads }
    }

    /// `grid`: the grid point this record ends at (the last one passed by `now`) and how many it spans; None for
    /// the phase's tail, which ends `now`. A record covers its span exactly, however late it is written (a
    /// stalled submitter, a stopped process): it ends at its grid point, holds the ops that completed in its
    /// span (those after it wait in `interval` for the next record), and the next record starts there. So no
    /// time is in two records and ops / dt is the rate of those seconds. CPU, `started` and `in_flight` are
    /// read when it is written.
    fn emit_interval(&mut self, now: u64, grid: Option<(u64, u64)>) {
        let (end, ticks, tail) = match grid {
            Some((g, n)) => (g, n, false),
            None => (now, 1, true),
        };
        // `ts` is the wall time of `end`, read before the histograms are encoded and the CPU read: so `ts - t`
        // is the phase's start on the wall clock, however late this record is written (many engines on few
        // cores are preempted here; the skew across hosts is read from it).
        let ts = wall_s() - mono_ns().saturating_sub(end) as f64 / NS;
        let after = self.interval.close(grid.map(|(g, _)| g));
        let mut ops = Map::new();
        for (k, st) in self.kinds.iter().zip(self.interval.cur.iter()) {
            ops.insert(k.name().to_string(), st.interval_json());
        }
        let (user, sys, _) = crate::clock::rusage();
        let (u0, s0) = std::mem::replace(&mut self.cpu_mark, (user, sys));
        let threads = crate::clock::thread_cpu();
        let busiest = crate::clock::thread_delta(&self.threads_mark, &threads).into_iter().next();
        self.ph.tick_no += ticks;
        let mut rec = json!({
            "type": "interval", "ts": ts,
            "t": (end - self.phase_start) as f64 / NS, "dt": end.saturating_sub(self.ph.prev_emit) as f64 / NS,
            "tick": self.ph.tick_no, "ticks": ticks,
            "ramp": end <= self.ramp_end && self.ramp_end > self.phase_start,
            // completions up to the record's end: the records so far add up to it
            "in_flight": self.in_flight, "started": self.started, "finished": self.finished - after,
            "ops": ops,
            // The engine's own CPU in this interval (all threads), so it travels with the data; and its busiest
            // thread's, which says whether the engine itself (one submitter, one callback thread) was the limit.
            "cpu": {"user_s": (user - u0).max(0.0), "sys_s": (sys - s0).max(0.0),
                    "thread_max_s": busiest.as_ref().map_or(0.0, |b| b.2),
                    "thread_max": busiest.map(|b| b.1)},
        });
        if tail {
            rec["tail"] = json!(true);
        }
        out::emit(&rec);
        self.ph.prev_emit = end;
        if tail {
            self.interval.reset();
        } else {
            self.interval.reopen(self.ph.next_tick);
        }
        if self.measured_mark.is_none() && end >= self.ramp_end {
            self.measured_mark = Some(Self::mark(now, (user, sys), threads.clone()));
        }
        self.threads_mark = threads;
    }

    /// Start a phase. `measuring`: the main phase (statistics, intervals,
    /// ramp, bounds, schedule); otherwise a quiet preparation pass (prefill)
    /// that runs the target's op stream to its end.
    fn begin_phase(&mut self, measuring: bool) {
        let spec = self.spec;
        let l = &spec.load;
        self.measuring = measuring;
        self.free.clear();
        self.parked.clear();
        self.job_ops.iter_mut().for_each(|n| *n = 0);
        self.job_bytes.iter_mut().for_each(|n| *n = 0);
        self.jobs_done = 0;
        (self.measured_mark, self.end_mark) = (None, None);
        (self.intended_in_ramp, self.issued_measured) = (0, 0);
        self.lag = Lag::default();
        for i in (0..self.slots.len()).rev() {
            if self.slots[i].state == State::Free {
                self.free.push(i as u32);
            }
        }
        let start = mono_ns();
        self.phase_start = start;
        let secs = |s: f64| (s * NS) as u64;
        self.ramp_end = if measuring { start + secs(l.ramp_s) } else { start };
        (self.measured_end, self.window_end) = (self.ramp_end, self.ramp_end);
        if measuring {
            let (u, s, _) = crate::clock::rusage();
            self.cpu_mark = (u, s);
            self.threads_mark = crate::clock::thread_cpu();
            if self.ramp_end == start {
                self.measured_mark = Some(Self::mark(start, (u, s), self.threads_mark.clone()));
            }
        }
        let timeout = spec.op_timeout_s.map(secs);
        let scan_every = timeout.map_or(u64::MAX, |t| (t / 10).clamp(1_000_000, 100_000_000));
        let interval_ns = secs(spec.interval_s).max(1_000_000);
        self.ph = Phase {
            end: if measuring { l.duration_s.map(|d| start + secs(d)) } else { None },
            interval_ns,
            next_tick: start,
            tick_no: 0,
            prev_emit: start,
            timeout,
            scan_every,
            next_scan: start.saturating_add(scan_every),
            stall: secs(spec.stall_timeout_s),
            last_progress: start,
            sched: if measuring { l.rate.map(|r| Schedule::new(start, r, l.arrival, spec.seed)) } else { None },
            per_job_bound: measuring && (l.ops.is_some() || l.bytes.is_some()),
            stopping: false,
            backlog: None,
            zombie_grace: None,
            lost_grace: None,
            retry_soon: false,
            // Closed loop: completion callbacks may reissue their slot directly.
            inline: l.rate.is_none() || !measuring,
        };
        self.ph.next_tick = self.grid_next(start);
        // ops go to the record of the grid span they complete in (a preparation pass has no grid)
        self.interval.begin(self.ph.next_tick, if measuring { interval_ns } else { 0 }, self.ramp_end);
    }

    /// Fill free slots (closed loop) or issue what the schedule has due (open loop).
    fn refill(&mut self) {
        let mut now = mono_ns();
        while !self.ph.stopping || self.ph.backlog.is_some_and(|(_, until)| now < until) {
            let Some(&idx) = self.free.last() else { break };
            let idx = idx as usize;
            if self.ph.per_job_bound && self.job_exhausted(self.slots[idx].job as usize) {
                self.free.pop();
                self.parked.push(idx as u32);
                continue;
            }
            let intended = match &self.ph.sched {
                Some(s) => {
                    let t = s.peek();
                    if t > now || self.ph.backlog.is_some_and(|(stop, _)| t >= stop) {
                        break;
                    }
                    t
                }
                None => now,
            };
            self.free.pop();
            if self.in_flight == 0 {
                self.ph.last_progress = now;
            }
            match self.issue(idx, intended) {
                Ok(true) => {
                    self.arrival_taken(idx, intended);
                    let s = &self.slots[idx];
                    if self.ph.per_job_bound && !s.ramp {
                        let (j, len) = (s.job as usize, s.len as u64);
                        self.job_ops[j] += 1;
                        self.job_bytes[j] += len;
                        if self.job_exhausted(j) {
                            self.job_reached_bound(j, now);
                        }
                    }
                }
                Ok(false) => {
                    self.free.push(idx as u32);
                    self.ph.stopping = true;
                    self.ph.backlog = None;
                    self.stop_at.get_or_insert(now);
                    self.set_stop(StopCause::Done, None);
                }
                Err(()) => {
                    self.free.push(idx as u32);
                    self.arrival_taken(idx, intended);
                    self.ph.retry_soon = true;
                    break;
                }
            }
            now = mono_ns();
        }
    }

    /// Open loop: the schedule's next arrival was issued in slot `idx` (or failed to submit).
    #[inline]
    fn arrival_taken(&mut self, idx: usize, intended: u64) {
        if let Some(s) = self.ph.sched.as_mut() {
            s.advance();
            self.intended_in_ramp += u64::from(intended < self.ramp_end);
            self.issued_measured += u64::from(!self.slots[idx].ramp);
        }
    }

    #[inline]
    fn job_exhausted(&self, j: usize) -> bool {
        let l = &self.spec.load;
        l.ops.is_some_and(|n| self.job_ops[j] >= n) || l.bytes.is_some_and(|b| self.job_bytes[j] >= b)
    }

    /// Job `j` just issued its last op; the phase ends when every job has.
    fn job_reached_bound(&mut self, j: usize, now: u64) {
        self.jobs_done += 1;
        if self.jobs_done >= self.target.jobs() as usize {
            let by_ops = self.spec.load.ops.is_some_and(|n| self.job_ops[j] >= n);
            self.ph.stopping = true;
            self.ph.backlog = None;
            self.stop_at.get_or_insert(now);
            self.set_stop(if by_ops { StopCause::Ops } else { StopCause::Bytes }, None);
        }
    }

    /// Signals and control requests, polled by the submitter and the fast path.
    fn note_external_stop(&mut self) {
        if let Some(sig) = crate::interrupt::pending()
            && self.interrupted.is_none()
        {
            self.interrupted = Some(sig);
            self.set_stop(StopCause::Signal, Some(format!("interrupted by {}", crate::interrupt::name(sig))));
        }
        if control::pending()
            && self.requested.is_none()
            && let Some(r) = control::request_made()
        {
            let (cause, reason) = match &r {
                control::Request::Stop(m) => (StopCause::Control, m.clone()),
                control::Request::Lost(m) => (StopCause::OrchestratorLost, m.clone()),
            };
            self.requested = Some(r);
            self.set_stop(cause, Some(reason));
        }
    }

    fn check_stop(&mut self, now: u64) {
        self.note_external_stop();
        let ended = self.ph.end.is_some_and(|e| now >= e);
        if ended {
            self.set_stop(StopCause::Duration, None);
        }
        let abort = self.stop_error.is_some() || self.interrupted.is_some() || self.requested.is_some();
        if abort || ended {
            if !self.ph.stopping {
                let stop = now.min(self.ph.end.unwrap_or(now));
                self.stop_at = Some(stop);
                if !abort && self.open_loop && self.measuring && self.ph.sched.is_some() {
                    self.ph.backlog = Some((stop, now + self.backlog_bound(stop)));
                }
            }
            self.ph.stopping = true;
            if abort {
                self.ph.backlog = None;
            }
        }
    }

    /// How long the window's backlog may drain after its end: a tenth of the window, 1 to 30 s. A stall at
    /// the end (a flush) drains well within it and is judged by its ops' latencies; a backlog that does not
    /// drain in it is overload, and its arrivals stay unissued (the schedule not kept).
    fn backlog_bound(&self, stop: u64) -> u64 {
        (stop.saturating_sub(self.ramp_end) / 10).clamp(1_000_000_000, 30_000_000_000)
    }

    /// Arrivals of the window still to issue after its end, within the backlog's deadline.
    fn backlog_left(&self, now: u64) -> bool {
        match (self.ph.backlog, &self.ph.sched) {
            (Some((stop, until)), Some(s)) => now < until && s.peek() < stop,
            _ => false,
        }
    }

    /// The completion fast path, on a library callback thread with the
    /// engine lock held: account the op and reissue the slot at once, so a
    /// closed loop costs no submitter wake-up per op. Returns false when
    /// the submitter must handle it (open loop, between phases).
    pub fn on_callback(&mut self, idx: u32) -> bool {
        if !self.ph.inline {
            return false;
        }
        self.complete(idx as usize);
        let now = mono_ns();
        self.ph.last_progress = now;
        self.check_stop(now);
        if !self.ph.stopping && !self.ph.retry_soon && self.free.len() >= self.submit_batch {
            self.refill();
        }
        if self.ph.stopping && self.in_flight == self.zombies {
            // The phase may be over: let the submitter see it now.
            self.queue.wake();
        }
        true
    }

    /// One turn of the submitter: reap what is queued, emit intervals, scan
    /// for timeouts, submit. Returns when to wake next, or the phase's end.
    fn step(&mut self, ready: &mut Vec<u32>) -> Result<u64, PhaseEnd> {
        let had = ready.len();
        for &i in ready.iter() {
            self.complete(i as usize);
        }
        ready.clear();
        let now = mono_ns();
        if had > 0 {
            self.ph.last_progress = now;
        }
        if self.measuring && now >= self.ph.next_tick {
            // A submitter late by more than an interval writes one record spanning several grid points.
            let (mut last, mut n) = (self.ph.next_tick, 0);
            while self.ph.next_tick <= now {
                (last, n) = (self.ph.next_tick, n + 1);
                self.ph.next_tick = self.grid_next(self.ph.next_tick);
            }
            self.emit_interval(now, Some((last, n)));
        }
        if let Some(t) = self.ph.timeout
            && now >= self.ph.next_scan
        {
            self.scan_timeouts(now, t);
            self.ph.next_scan = now + self.ph.scan_every;
        }
        control::check_heartbeat(now);
        self.check_stop(now);
        if self.in_flight > 0 && now.saturating_sub(self.ph.last_progress) >= self.ph.stall {
            return Err(PhaseEnd::Stall {
                in_flight: self.in_flight,
                waited_s: (now - self.ph.last_progress) as f64 / NS,
            });
        }
        self.ph.retry_soon = false;
        self.refill();
        let now = mono_ns();
        if self.ph.stopping
            && self.in_flight > self.zombies
            && matches!(self.requested, Some(control::Request::Lost(_)))
        {
            // The orchestrator's host (or this one's network) is gone, and with it maybe the cluster: a
            // short drain, then the ops still in flight are abandoned, so the process ends within seconds.
            let g = *self.ph.lost_grace.get_or_insert(now + LOST_DRAIN_NS);
            if now >= g {
                return Err(PhaseEnd::Done);
            }
        }
        if self.ph.stopping && self.in_flight == self.zombies && !self.backlog_left(now) {
            if self.zombies == 0 {
                return Err(PhaseEnd::Done);
            }
            // Timed-out ops may never come back: give them a moment, then abandon them.
            let g = *self.ph.zombie_grace.get_or_insert(now + 1_000_000_000);
            if now >= g {
                return Err(PhaseEnd::Done);
            }
        }
        let p = &self.ph;
        let mut d = if self.measuring { p.next_tick } else { now + 100_000_000 };
        if !p.stopping {
            if let Some(e) = p.end {
                d = d.min(e);
            }
            if let Some(s) = &p.sched
                && !self.free.is_empty()
            {
                d = d.min(s.peek());
            }
        }
        if let Some((_, until)) = p.backlog
            && now < until
        {
            d = d.min(until); // the backlog's deadline ends the drain
        }
        if self.in_flight > 0 {
            d = d.min(p.last_progress + p.stall);
            if p.timeout.is_some() {
                d = d.min(p.next_scan);
            }
        }
        if let Some(g) = p.zombie_grace {
            d = d.min(g);
        }
        if let Some(g) = p.lost_grace {
            d = d.min(g);
        }
        if let Some(h) = control::heartbeat_deadline() {
            d = d.min(h.max(now + 1_000_000));
        }
        if p.retry_soon {
            d = d.min(now + 1_000_000);
        }
        Ok(d)
    }

    fn end_phase(&mut self) {
        self.ph.inline = false;
        let now = mono_ns();
        if self.measuring {
            // The tail since the last tick, so intervals add up to the totals.
            if self.interval.any() {
                self.emit_interval(now, None);
            }
            let stop = self.stop_at.unwrap_or(now);
            self.window_end = stop.clamp(self.ramp_end, now.max(self.ramp_end));
            self.measured_end = self.measured_end.max(self.window_end);
            if self.measured_mark.is_some() {
                let (u, s, _) = crate::clock::rusage();
                self.end_mark = Some(Self::mark(now, (u, s), crate::clock::thread_cpu()));
            }
        }
    }

    /// From the ramp's end to the last completion of a measured op: the window and its drain.
    pub fn measured_s(&self) -> f64 {
        self.measured_end.saturating_sub(self.ramp_end) as f64 / NS
    }

    /// (window_s, drain_s): the ramp's end to the stop, and the stop to the last measured completion.
    pub fn window_drain_s(&self) -> (f64, f64) {
        (
            self.window_end.saturating_sub(self.ramp_end) as f64 / NS,
            self.measured_end.saturating_sub(self.window_end) as f64 / NS,
        )
    }

    /// The whole process over the measured phase (the ramp's end to the phase's end: no connect,
    /// prefill, ramp or teardown): CPU, context switches and the busiest threads. None when the phase
    /// ended inside the ramp.
    pub fn measured_cpu_json(&self) -> Option<(Value, Value, (i64, i64))> {
        let (a, b) = (self.measured_mark.as_ref()?, self.end_mark.as_ref()?);
        let ctx = (b.vol - a.vol, b.invol - a.invol);
        let threads: Vec<Value> = crate::clock::thread_delta(&a.threads, &b.threads)
            .into_iter()
            .take(8)
            .map(|(tid, name, cpu_s)| json!({"tid": tid, "name": name, "cpu_s": cpu_s}))
            .collect();
        let m = json!({"seconds": b.at.saturating_sub(a.at) as f64 / NS,
                       "user_s": (b.user - a.user).max(0.0), "sys_s": (b.sys - a.sys).max(0.0),
                       "voluntary_ctx": ctx.0, "involuntary_ctx": ctx.1});
        Some((m, Value::Array(threads), ctx))
    }

    pub fn ops_json(&self, measured_s: f64) -> Value {
        let mut m = Map::new();
        for (k, st) in self.kinds.iter().zip(&self.total) {
            m.insert(k.name().to_string(), st.summary_json(measured_s));
        }
        Value::Object(m)
    }

    pub fn verify_json(&self) -> Value {
        if !self.spec.verify {
            return Value::Null;
        }
        json!({"checked": self.verify_checked, "unit": "block", "mismatches": self.mismatches,
               "first_mismatch": self.first_mismatch})
    }

    /// Open loop: what the schedule asked of the measured window and what ran. Arrivals never issued are
    /// counted by playing the rest of the schedule (same seed) up to the stop.
    pub fn schedule_json(&self) -> Value {
        let (Some(rate), Some(sched)) = (self.spec.load.rate, self.ph.sched.as_ref()) else {
            return Value::Null;
        };
        let stop = self.window_end;
        let mut rest = sched.clone();
        let (mut left_in_ramp, mut left_in_window) = (0u64, 0u64);
        while rest.peek() < stop {
            if rest.peek() < self.ramp_end {
                left_in_ramp += 1;
            } else {
                left_in_window += 1;
            }
            rest.advance();
        }
        let intended = sched.taken() - self.intended_in_ramp + left_in_window;
        let unissued = left_in_ramp + left_in_window;
        let done: u64 = self.total.iter().map(|k| k.ops).sum();
        let measured = self.measured_s();
        let (window, _) = self.window_drain_s();
        json!({"rate": rate, "arrival": self.spec.load.arrival, "offered_rate": rate,
               "intended_ops": intended, "issued_ops": self.issued_measured, "unissued_ops": unissued,
               "intended_rate": if window > 0.0 { intended as f64 / window } else { 0.0 },
               "achieved_rate": if measured > 0.0 { done as f64 / measured } else { 0.0 },
               // after the window's backlog drained (backlog_bound): few arrivals left unissued and the achieved
               // rate close to the arrivals' (rate::schedule_kept)
               "schedule_kept": schedule_kept(intended, unissued, done, window, measured),
               "ops": self.lag.n, "max_lag_ns": self.lag.max, "mean_lag_ns": self.lag.mean()})
    }

    pub fn begin_prefill(&mut self) -> bool {
        self.target.begin_prefill()
    }

    /// After a clean prefill: switch the target to its measured workload and
    /// forget the preparation pass's counters.
    pub fn begin_main(&mut self) {
        self.target.begin_main();
        self.started = 0;
        self.finished = 0;
        self.stop_at = None;
        self.interval.reset();
        for k in self.total.iter_mut() {
            k.reset();
        }
        let now = mono_ns();
        (self.phase_start, self.ramp_end, self.measured_end, self.window_end) = (now, now, now, now);
    }

    /// The main phase will not run (a stop, EOF or signal came while
    /// waiting for `go`, or during the prefill): note why, for a summary of zero ops.
    pub fn skip_main(&mut self) {
        self.note_external_stop();
        let now = mono_ns();
        (self.phase_start, self.ramp_end, self.measured_end, self.window_end) = (now, now, now, now);
    }

    pub fn target(&mut self) -> &mut dyn Target {
        self.target
    }
}

/// The engine behind its lock, for the submitter and the library callback
/// threads. Everything in it is only touched with the lock held; it is
/// leaked, so a late callback (an abandoned op) never sees freed memory.
pub struct Shared(pub std::sync::Mutex<Engine<'static>>);

// SAFETY: the raw library handles and slot pointers inside Engine are only
// used by whichever thread holds the mutex; librados/librbd calls are thread safe.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

static SHARED: std::sync::OnceLock<&'static Shared> = std::sync::OnceLock::new();

impl Shared {
    pub fn install(e: Engine<'static>) -> &'static Shared {
        let sh: &'static Shared = Box::leak(Box::new(Shared(std::sync::Mutex::new(e))));
        let _ = SHARED.set(sh);
        crate::io::set_fast_path(fast_path);
        sh
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Engine<'static>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Run one phase to its end (see Engine::begin_phase).
    pub fn run(&self, measuring: bool) -> PhaseEnd {
        let queue = {
            let mut e = self.lock();
            e.begin_phase(measuring);
            e.queue
        };
        let mut ready = Vec::with_capacity(1024);
        loop {
            let d = {
                let mut e = self.lock();
                match e.step(&mut ready) {
                    Ok(d) => d,
                    Err(end) => {
                        e.end_phase();
                        return end;
                    }
                }
            };
            // Sleep until a completion the fast path could not take, or the
            // next thing that needs doing.
            queue.take(&mut ready, d, 1);
        }
    }
}

/// Called by `Done::complete` on a library thread. try_lock, never lock: the
/// submitter may hold the lock while calling into the library, and a library
/// may complete an op inside that call; then the index goes to the queue.
fn fast_path(idx: u32) -> bool {
    let Some(sh) = SHARED.get() else { return false };
    match sh.0.try_lock() {
        Ok(mut e) => e.on_callback(idx),
        Err(_) => false,
    }
}
