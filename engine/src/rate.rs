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
    fn lag_stats() {
        let mut l = Lag::default();
        l.record(10);
        l.record(30);
        assert_eq!(l.mean(), 20.0);
        assert_eq!(l.max, 30);
    }
}
