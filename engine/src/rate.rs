//! Open-loop arrivals: the intended start time of each op, uniform or
//! Poisson, independent of when the cluster completes anything, so latency
//! measured from it includes queueing (no coordinated omission).

use crate::rng::Rng;
use crate::spec::Arrival;

#[derive(Clone)]
pub struct Schedule {
    start_ns: u64,
    period_ns: f64,
    poisson: bool,
    n: u64,
    next_ns: f64,
    rng: Rng,
}

impl Schedule {
    pub fn new(start_ns: u64, rate: f64, arrival: Arrival, seed: u64) -> Self {
        let mut s = Schedule {
            start_ns,
            period_ns: 1e9 / rate,
            poisson: arrival == Arrival::Poisson,
            n: 0,
            next_ns: 0.0,
            rng: Rng::new(seed ^ 0xa11),
        };
        s.next_ns = s.gap();
        s
    }

    fn gap(&mut self) -> f64 {
        if self.poisson { -self.rng.unit().ln() * self.period_ns } else { 0.0 }
    }

    /// Intended start of the next op (monotonic ns).
    pub fn peek(&self) -> u64 {
        self.start_ns + self.next_ns as u64
    }

    /// Arrivals taken so far (issued, or failed to submit).
    pub fn taken(&self) -> u64 {
        self.n
    }

    pub fn advance(&mut self) {
        self.n += 1;
        // Uniform: computed from n, so rounding never accumulates into drift.
        self.next_ns = if self.poisson { self.next_ns + self.gap() } else { self.n as f64 * self.period_ns };
    }
}

/// How far the achieved rate may fall short of the rate the window's arrivals came at and the schedule still
/// count as kept. The drain issues the window's backlog after its end (up to a tenth of the window), so
/// unissued arrivals alone let an overload of up to about that much pass; a shortfall in the achieved rate
/// shows it. 5% spares a stall at the end of up to about a twentieth of the window, and the last ops' latency.
pub const KEPT_TOLERANCE: f64 = 0.05;

/// Whether an open-loop window kept its schedule: at most 1% of its arrivals (or one op) never issued, and
/// the achieved rate (`done` successful ops over `measured_s`, the window and its drain) at least
/// 1 - KEPT_TOLERANCE of the arrivals' rate (`intended` over `window_s`: the offered rate, or for Poisson
/// arrivals the rate its draws came at, so their scatter is not read as a shortfall), one op spared.
pub fn schedule_kept(intended: u64, unissued: u64, done: u64, window_s: f64, measured_s: f64) -> bool {
    if unissued > 1.max(intended / 100) {
        return false;
    }
    if intended == 0 || window_s <= 0.0 || measured_s <= 0.0 {
        return true;
    }
    done as f64 / measured_s >= ((1.0 - KEPT_TOLERANCE) * intended as f64 - 1.0) / window_s
}

/// Running lag statistics: how far behind schedule ops were submitted.
#[derive(Default)]
pub struct Lag {
    pub n: u64,
    pub sum: u128,
    pub max: u64,
}

impl Lag {
    pub fn record(&mut self, lag_ns: u64) {
        self.n += 1;
        self.sum += lag_ns as u128;
        self.max = self.max.max(lag_ns);
    }
    pub fn mean(&self) -> f64 {
        if self.n == 0 { 0.0 } else { self.sum as f64 / self.n as f64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_gap(arrival: Arrival) -> (f64, f64) {
        let mut s = Schedule::new(1000, 1000.0, arrival, 3);
        let first = s.peek();
        let mut gaps = Vec::new();
        let mut prev = first;
        for _ in 0..20_000 {
            s.advance();
            gaps.push((s.peek() - prev) as f64);
            prev = s.peek();
        }
        let m = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - m).powi(2)).sum::<f64>() / gaps.len() as f64;
        (m, var.sqrt())
    }

    #[test]
    fn uniform_rate_is_exact() {
        let mut s = Schedule::new(1000, 3.0, Arrival::Uniform, 1);
        assert_eq!(s.peek(), 1000);
        for _ in 0..3 {
            s.advance();
        }
        assert_eq!(s.peek(), 1000 + 1_000_000_000);
        let (m, sd) = mean_gap(Arrival::Uniform);
        assert!((m - 1e6).abs() < 1.0 && sd < 1.0);
    }

    #[test]
    fn poisson_has_the_rate_and_exponential_spread() {
        let (m, sd) = mean_gap(Arrival::Poisson);
        assert!((m / 1e6 - 1.0).abs() < 0.03, "mean gap {m}");
        assert!((sd / m - 1.0).abs() < 0.05, "cv {}", sd / m);
    }

    #[test]
    fn a_kept_schedule_achieves_its_arrivals_rate() {
        // on time: 1,000 arrivals in 10 s, done over the window and a 20 ms drain
        assert!(schedule_kept(1000, 0, 1000, 10.0, 10.02));
        // a stall at the end drained in 0.3 s: 3% short, kept
        assert!(schedule_kept(1000, 0, 1000, 10.0, 10.3));
        // 10% overload the drain absorbed: 100/s arrived, 91/s done over the window and its 1 s drain
        assert!(!schedule_kept(1000, 0, 1000, 10.0, 11.0));
        // nothing left over but errors: successful ops are what was delivered
        assert!(!schedule_kept(1000, 0, 900, 10.0, 10.0));
        // arrivals left unissued: not kept whatever the rate
        assert!(!schedule_kept(1000, 11, 989, 10.0, 10.0));
        assert!(schedule_kept(1000, 10, 990, 10.0, 10.0));
        // few arrivals: one op spared (3 in 3 s, the last taking 0.2 s, is 6% short)
        assert!(schedule_kept(3, 0, 3, 3.0, 3.2));
        assert!(!schedule_kept(3, 0, 1, 3.0, 3.0));
        // nothing intended (a run that ended in its ramp)
        assert!(schedule_kept(0, 0, 0, 0.0, 0.0));
    }

    #[test]
    fn lag_stats() {
        let mut l = Lag::default();
        l.record(10);
        l.record(30);
        assert_eq!(l.mean(), 20.0);
        assert_eq!(l.max, 30);
    }
}
