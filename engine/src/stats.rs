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
