//! Per-op-kind counters and HDR histograms (ns, 3 significant digits,
//! 1 ns .. 1 hour), and their JSON forms for interval and summary records.

use crate::io::Phase;
use base64::Engine as _;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use serde_json::{Map, Value, json};

pub const HIST_MAX_NS: u64 = 3_600_000_000_000;

pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_NS, 3).expect("valid histogram bounds")
}

/// V2 + deflate, base64: what Python's `hdrh.histogram.HdrHistogram.decode` reads.
pub fn encode(h: &Histogram<u64>) -> String {
    let mut out = Vec::with_capacity(256);
    V2DeflateSerializer::new().serialize(h, &mut out).expect("serialize histogram");
    base64::engine::general_purpose::STANDARD.encode(out)
}

#[derive(Clone)]
pub struct KindStats {
    pub ops: u64,
    pub bytes: u64,
    pub errors: u64,
    pub lat_sum: u128,
    pub lat_min: u64,
    pub lat_max: u64,
    pub last_lat: u64,
    pub hist: Histogram<u64>,
    /// The latency phases this op kind reports (see io::Phase), each its own series.
    pub phases: Vec<(Phase, PhaseStats)>,
}

/// One latency phase of an op kind: its own count, sum, max and histogram.
#[derive(Clone)]
pub struct PhaseStats {
    pub count: u64,
    pub sum: u128,
    pub min: u64,
    pub max: u64,
    pub hist: Histogram<u64>,
}

impl Default for PhaseStats {
    fn default() -> Self {
        PhaseStats { count: 0, sum: 0, min: u64::MAX, max: 0, hist: new_hist() }
    }
}

impl PhaseStats {
    fn record(&mut self, ns: u64) {
        let v = ns.max(1);
        self.count += 1;
        self.sum += v as u128;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.hist.saturating_record(v);
    }

    fn mean(&self) -> f64 {
        if self.count == 0 { 0.0 } else { self.sum as f64 / self.count as f64 }
    }

    fn reset(&mut self) {
        (self.count, self.sum, self.min, self.max) = (0, 0, u64::MAX, 0);
        self.hist.reset();
    }

    fn absorb(&mut self, o: &PhaseStats) {
        self.count += o.count;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.hist.add(&o.hist).expect("histograms of one shape");
    }
}

impl Default for KindStats {
    fn default() -> Self {
        KindStats {
            ops: 0,
            bytes: 0,
            errors: 0,
            lat_sum: 0,
            lat_min: u64::MAX,
            lat_max: 0,
            last_lat: 0,
            hist: new_hist(),
            phases: Vec::new(),
        }
    }
}

impl KindStats {
    pub fn with_phases(phases: &[Phase]) -> Self {
        KindStats { phases: phases.iter().map(|p| (*p, PhaseStats::default())).collect(), ..KindStats::default() }
    }

    /// Record the phases the op measured (0: not measured).
    #[inline]
    pub fn record_phases(&mut self, ns: &[u64; Phase::COUNT]) {
        for (p, st) in self.phases.iter_mut() {
            let v = ns[*p as usize];
            if v > 0 {
                st.record(v);
            }
        }
    }

    #[inline]
    pub fn record(&mut self, lat_ns: u64, bytes: u64) {
        let v = lat_ns.max(1);
        self.ops += 1;
        self.bytes += bytes;
        self.lat_sum += v as u128;
        self.lat_min = self.lat_min.min(v);
        self.lat_max = self.lat_max.max(v);
        self.last_lat = v;
        self.hist.saturating_record(v);
    }

    pub fn mean(&self) -> f64 {
        if self.ops == 0 { 0.0 } else { self.lat_sum as f64 / self.ops as f64 }
    }

    pub fn reset(&mut self) {
        self.ops = 0;
        self.bytes = 0;
        self.errors = 0;
        self.lat_sum = 0;
        self.lat_min = u64::MAX;
        self.lat_max = 0;
        self.last_lat = 0;
        self.hist.reset();
        for (_, p) in self.phases.iter_mut() {
            p.reset();
        }
    }

    /// Add `o`'s ops (recorded after this one's) to these.
    pub fn absorb(&mut self, o: &KindStats) {
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.errors += o.errors;
        self.lat_sum += o.lat_sum;
        self.lat_min = self.lat_min.min(o.lat_min);
        self.lat_max = self.lat_max.max(o.lat_max);
        if o.ops > 0 {
            self.last_lat = o.last_lat;
        }
        self.hist.add(&o.hist).expect("histograms of one shape");
        for ((_, p), (_, q)) in self.phases.iter_mut().zip(o.phases.iter()) {
            p.absorb(q);
        }
    }

    pub fn interval_json(&self) -> Value {
        let mut v = json!({
            "ops": self.ops, "bytes": self.bytes, "errors": self.errors,
            "lat_mean_ns": self.mean(), "lat_max_ns": self.lat_max, "last_lat_ns": self.last_lat,
            "hist": encode(&self.hist),
        });
        if !self.phases.is_empty() {
            let m: Map<String, Value> = self
                .phases
                .iter()
                .map(|(p, st)| {
                    let j = json!({"count": st.count, "lat_mean_ns": st.mean(), "lat_max_ns": st.max,
                                   "hist": encode(&st.hist)});
                    (p.name().to_string(), j)
                })
                .collect();
            v["phases"] = Value::Object(m);
        }
        v
    }

    pub fn summary_json(&self, measured_s: f64) -> Value {
        let rate = |n: u64| if measured_s > 0.0 { n as f64 / measured_s } else { 0.0 };
        let h = &self.hist;
        let q = |p: f64| if self.ops == 0 { 0 } else { h.value_at_quantile(p) };
        let mut v = json!({
            "ops": self.ops, "bytes": self.bytes, "errors": self.errors,
            "iops": rate(self.ops), "bw_bytes_s": rate(self.bytes),
            "lat_ns": {
                "mean": self.mean(),
                "stdev": if self.ops == 0 { 0.0 } else { h.stdev() },
                "min": if self.ops == 0 { 0 } else { self.lat_min },
                "max": self.lat_max,
                "p50": q(0.50), "p90": q(0.90), "p99": q(0.99), "p999": q(0.999),
            },
            "hist": encode(h),
        });
        if !self.phases.is_empty() {
            let m: Map<String, Value> = self
                .phases
                .iter()
                .map(|(p, st)| {
                    let h = &st.hist;
                    let q = |p: f64| if st.count == 0 { 0 } else { h.value_at_quantile(p) };
                    let j = json!({
                        "count": st.count,
                        "lat_ns": {
                            "mean": st.mean(),
                            "stdev": if st.count == 0 { 0.0 } else { h.stdev() },
                            "min": if st.count == 0 { 0 } else { st.min },
                            "max": st.max,
                            "p50": q(0.50), "p90": q(0.90), "p99": q(0.99), "p999": q(0.999),
                        },
                        "hist": encode(h),
                    });
                    (p.name().to_string(), j)
                })
                .collect();
            v["phases"] = Value::Object(m);
        }
        v
    }
}

/// The next grid point after `t`: every `interval` ns up to `ramp_end`, one exactly at it, then every `interval`
/// from there (engine.rs, interval records).
pub fn grid_after(t: u64, interval: u64, ramp_end: u64) -> u64 {
    if t < ramp_end { (t + interval).min(ramp_end) } else { t + interval }
}

/// Interval statistics split at a grid point, so that a record written late holds exactly the ops that
/// completed in the span it names. `cur`: ops that completed before `at`; `next`: from `at` to `until`, the
/// grid point after it. `at` is the first grid point not yet written, moved on by ops that completed past
/// `until` (the record was not written for more than an interval while ops kept completing: it will span
/// those grid points); so `at` is never after the last grid point passed when the record is written.
pub struct Split {
    pub cur: Vec<KindStats>,
    next: Vec<KindStats>,
    at: u64,
    until: u64,
    interval: u64,
    ramp_end: u64,
}

impl Split {
    pub fn new(stats: Vec<KindStats>) -> Self {
        Split { next: stats.clone(), cur: stats, at: u64::MAX, until: u64::MAX, interval: 0, ramp_end: 0 }
    }

    /// A phase's grid (see grid_after) from its first grid point `first`; `interval` 0: no grid (a
    /// preparation pass), every op goes to `cur`.
    pub fn begin(&mut self, first: u64, interval: u64, ramp_end: u64) {
        self.reset();
        (self.interval, self.ramp_end) = (interval, ramp_end);
        (self.at, self.until) = if interval == 0 { (u64::MAX, u64::MAX) } else { (first, self.grid(first)) };
    }

    fn grid(&self, t: u64) -> u64 {
        grid_after(t, self.interval, self.ramp_end)
    }

    /// The statistics of an op that completed at `end` (monotonic ns).
    #[inline]
    pub fn at(&mut self, end: u64) -> &mut [KindStats] {
        if end < self.at {
            return &mut self.cur;
        }
        if end >= self.until {
            // past next's span: the record not yet written will span the grid points up to the one before `end`
            self.fold();
            let mut g = self.until;
            while self.grid(g) <= end {
                g = self.grid(g);
            }
            (self.at, self.until) = (g, self.grid(g));
        }
        &mut self.next
    }

    fn fold(&mut self) {
        for (c, n) in self.cur.iter_mut().zip(self.next.iter_mut()) {
            if n.ops + n.errors > 0 {
                c.absorb(n);
                n.reset();
            }
        }
    }

    /// Make `cur` the record that ends at grid point `g`, the last one passed (None: the phase's tail, every op
    /// so far). Returns the ops (errors included) that completed after `g`, left for the next record.
    pub fn close(&mut self, g: Option<u64>) -> u64 {
        match g {
            Some(g) if self.at >= g => self.next.iter().map(|k| k.ops + k.errors).sum(),
            _ => {
                self.fold();
                0
            }
        }
    }

    /// After the record was written from `cur`: the ops that completed after its end begin the next record,
    /// which ends at grid point `next_tick` or later.
    pub fn reopen(&mut self, next_tick: u64) {
        for k in self.cur.iter_mut() {
            k.reset();
        }
        std::mem::swap(&mut self.cur, &mut self.next);
        (self.at, self.until) = (next_tick, self.grid(next_tick));
    }

    pub fn reset(&mut self) {
        for k in self.cur.iter_mut().chain(self.next.iter_mut()) {
            k.reset();
        }
    }

    /// Whether any op or error is waiting for a record.
    pub fn any(&self) -> bool {
        self.cur.iter().chain(self.next.iter()).any(|k| k.ops + k.errors > 0)
    }
}

/// Errors of one (op kind, errno) pair with their own latency.
pub struct ErrorStats {
    pub op: &'static str,
    pub kind: String,
    pub count: u64,
    pub hist: Histogram<u64>,
    pub first: String,
}

#[derive(Default)]
pub struct Errors {
    pub list: Vec<ErrorStats>,
}

impl Errors {
    pub fn record(&mut self, op: &'static str, kind: &str, lat_ns: u64, what: impl FnOnce() -> String) {
        if let Some(e) = self.list.iter_mut().find(|e| e.op == op && e.kind == kind) {
            e.count += 1;
            e.hist.saturating_record(lat_ns.max(1));
            return;
        }
        let mut hist = new_hist();
        hist.saturating_record(lat_ns.max(1));
        self.list.push(ErrorStats { op, kind: kind.to_string(), count: 1, hist, first: what() });
    }

    pub fn json(&self) -> Value {
        Value::Array(
            self.list
                .iter()
                .map(|e| json!({"op": e.op, "kind": e.kind, "count": e.count, "first": e.first, "hist": encode(&e.hist)}))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::Deserializer;

    #[test]
    fn histogram_roundtrips_through_base64() {
        let mut k = KindStats::default();
        for v in [1_000u64, 2_000, 3_000, 1_000_000, 5_000_000_000] {
            k.record(v, 4096);
        }
        k.record(HIST_MAX_NS * 10, 0); // saturates instead of failing
        let b = base64::engine::general_purpose::STANDARD.decode(encode(&k.hist)).unwrap();
        let h: Histogram<u64> = Deserializer::new().deserialize(&mut &b[..]).unwrap();
        assert_eq!(h.len(), 6);
        assert!(h.equivalent(h.max(), HIST_MAX_NS));
        assert!(h.equivalent(h.value_at_quantile(0.5), 3_000));
        assert!(encode(&k.hist).starts_with("HISTFAAA"));
    }

    #[test]
    fn summary_math() {
        let mut k = KindStats::default();
        for i in 1..=100u64 {
            k.record(i * 1000, 4096);
        }
        let s = k.summary_json(2.0);
        assert_eq!(s["iops"], 50.0);
        assert_eq!(s["bw_bytes_s"], 50.0 * 4096.0);
        assert_eq!(s["lat_ns"]["mean"], 50_500.0);
        assert_eq!(s["lat_ns"]["min"], 1000);
        assert_eq!(s["lat_ns"]["max"], 100_000);
        let p50 = s["lat_ns"]["p50"].as_u64().unwrap();
        assert!((50_000..=50_100).contains(&p50), "{p50}");
        k.reset();
        assert_eq!(k.summary_json(1.0)["lat_ns"]["min"], 0);
    }

    /// ops (errors included) of a record's statistics
    fn n(stats: &[KindStats]) -> u64 {
        stats.iter().map(|k| k.ops + k.errors).sum()
    }

    #[test]
    fn a_record_holds_the_ops_that_completed_in_its_span() {
        // grid every 1,000 ns from 0; the record of tick 1 is written late, at 1,400: the ops after 1,000
        // belong to tick 2's record, not to tick 1's
        let mut s = Split::new(vec![KindStats::default()]);
        s.begin(1_000, 1_000, 0);
        for end in [100, 900, 1_000, 1_300] {
            s.at(end)[0].record(10, 1);
        }
        s.at(950)[0].errors += 1; // completions need not come in order
        assert_eq!(s.close(Some(1_000)), 2);
        assert_eq!((s.cur[0].ops, s.cur[0].errors), (2, 1));
        s.reopen(2_000);
        assert_eq!(n(&s.cur), 2);
        s.at(1_999)[0].record(10, 1);
        assert_eq!(s.close(Some(2_000)), 0);
        assert_eq!(n(&s.cur), 3);
    }

    #[test]
    fn a_record_late_by_several_ticks_spans_them_and_no_more() {
        // the submitter stalls from 500 to 3,200 while completions go on (another thread): its record spans
        // ticks 1-3 (0..3,000) and the op at 3,100 is the next record's
        let mut s = Split::new(vec![KindStats::default()]);
        s.begin(1_000, 1_000, 0);
        for end in [400, 1_500, 2_500, 2_999, 3_100] {
            s.at(end)[0].record(10, 1);
        }
        s.at(2_000)[0].record(10, 1); // late in arriving: still inside the span
        assert_eq!(s.close(Some(3_000)), 1);
        assert_eq!(n(&s.cur), 5);
        assert_eq!(s.cur[0].last_lat, 10);
        s.reopen(4_000);
        assert_eq!(n(&s.cur), 1);
        // the last grid point passed may lie beyond every op: the record still takes all of them
        s.at(4_200)[0].record(10, 1);
        assert_eq!(s.close(Some(6_000)), 0);
        assert_eq!(n(&s.cur), 2);
        s.reopen(7_000);
        assert_eq!(n(&s.cur), 0);
        // the tail takes everything
        s.at(7_500)[0].record(10, 1);
        s.at(8_100)[0].record(10, 1);
        assert_eq!(s.close(None), 0);
        assert_eq!(n(&s.cur), 2);
    }

    #[test]
    fn the_grid_has_a_point_at_the_ramps_end() {
        let mut s = Split::new(vec![KindStats::default()]);
        s.begin(1_000, 1_000, 1_500); // ramp ends at 1,500: grid 1,000, 1,500, 2,500
        s.at(1_600)[0].record(10, 1);
        s.at(2_600)[0].record(10, 1);
        // the first record, written at 2,600, spans grid points 1,000, 1,500 and 2,500; the op at 2,600 is after them
        assert_eq!(s.close(Some(2_500)), 1);
        assert_eq!(n(&s.cur), 1);
        assert_eq!(grid_after(1_000, 1_000, 1_500), 1_500);
        assert_eq!(grid_after(1_500, 1_000, 1_500), 2_500);
    }

    #[test]
    fn a_preparation_pass_has_no_grid() {
        let mut s = Split::new(vec![KindStats::default()]);
        s.begin(0, 0, 0);
        s.at(u64::MAX - 1)[0].record(10, 1);
        assert_eq!(n(&s.cur), 1);
    }

    #[test]
    fn absorb_adds_counts_and_histograms() {
        let (mut a, mut b) = (KindStats::default(), KindStats::default());
        a.record(1_000, 10);
        b.record(3_000, 20);
        b.record(2_000, 20);
        a.absorb(&b);
        assert_eq!((a.ops, a.bytes, a.lat_min, a.lat_max, a.last_lat), (3, 50, 1_000, 3_000, 2_000));
        assert_eq!(a.hist.len(), 3);
        assert_eq!(a.mean(), 2_000.0);
    }

    #[test]
    fn errors_group_by_op_and_kind() {
        let mut e = Errors::default();
        e.record("write", "ENOENT", 10, || "a".into());
        e.record("write", "ENOENT", 20, || "b".into());
        e.record("read", "ENOENT", 30, || "c".into());
        let j = e.json();
        assert_eq!(j[0]["count"], 2);
        assert_eq!(j[0]["first"], "a");
        assert_eq!(j[1]["op"], "read");
    }
}
