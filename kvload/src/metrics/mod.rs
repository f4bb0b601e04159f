//! Per-thread measurements: HdrHistograms in nanoseconds (3 significant
//! digits) per verb and in total, counters, and a per-second series. A thread
//! owns its [`Metrics`]; the main thread merges them at the end.

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::config::Verb;
use crate::protocol::{ErrorKind, Outcome};

/// Largest latency a histogram holds (larger values saturate).
pub const HIST_MAX_NS: u64 = 60_000_000_000;

/// A histogram of nanoseconds, 1 ns to 60 s, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_NS, 3).expect("valid histogram bounds")
}

/// The per-second series uses 2 significant digits to stay small.
pub fn coarse_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_NS, 2).expect("valid histogram bounds")
}

/// Errors by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ErrorCounts {
    pub total: u64,
    pub server_error: u64,
    pub out_of_memory: u64,
    pub client_error: u64,
    pub error: u64,
    /// Malformed responses; fatal to a run, so 0 in any completed run.
    pub protocol: u64,
    /// Lost connections; fatal to a run, so 0 in any completed run.
    pub connection: u64,
}

impl ErrorCounts {
    #[inline]
    pub fn count(&mut self, kind: ErrorKind) {
        self.total += 1;
        match kind {
            ErrorKind::ServerError => self.server_error += 1,
            ErrorKind::OutOfMemory => self.out_of_memory += 1,
            ErrorKind::ClientError => self.client_error += 1,
            ErrorKind::Error => self.error += 1,
        }
    }

    fn add(&mut self, o: &ErrorCounts) {
        self.total += o.total;
        self.server_error += o.server_error;
        self.out_of_memory += o.out_of_memory;
        self.client_error += o.client_error;
        self.error += o.error;
        self.protocol += o.protocol;
        self.connection += o.connection;
    }
}

/// Request counters of the measured window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Arrivals whose intended time fell in the window (open mode) or requests sent in it (closed).
    pub scheduled: u64,
    pub sent: u64,
    /// Responses to window requests, including those that arrived while draining.
    pub completed: u64,
    /// Arrivals dropped because every connection had `max_outstanding` requests in flight.
    pub skipped: u64,
    /// Responses later than `--timeout` after the send, or never received.
    pub timeouts: u64,
    pub hits: u64,
    pub misses: u64,
    /// Responses of any request received inside the window (the achieved rate).
    pub received_in_window: u64,
    pub errors: ErrorCounts,
}

impl Counters {
    fn add(&mut self, o: &Counters) {
        self.scheduled += o.scheduled;
        self.sent += o.sent;
        self.completed += o.completed;
        self.skipped += o.skipped;
        self.timeouts += o.timeouts;
        self.hits += o.hits;
        self.misses += o.misses;
        self.received_in_window += o.received_in_window;
        self.errors.add(&o.errors);
    }
}

/// One second of the measured window.
#[derive(Debug, Clone)]
pub struct Second {
    pub completed: u64,
    pub errors: u64,
    /// Corrected latency of responses received in this second.
    pub latency: Histogram<u64>,
    /// Sum and count of the schedule lag of window requests sent in this second.
    pub lag_sum_ns: u64,
    pub lag_count: u64,
}

/// One short window of the measured window (`--window`): the requests whose intended
/// send time fell in it, so that the windows of a run partition its requests and their
/// histograms pool to the run's. A capacity search judges a rate by many of them.
#[derive(Debug, Clone)]
pub struct Window {
    /// Arrivals intended in this window (open mode) or sent in it (closed).
    pub scheduled: u64,
    /// Of those, the ones written to a connection (skipped ones never are).
    pub sent: u64,
    pub skipped: u64,
    /// Responses to this window's requests.
    pub completed: u64,
    pub errors: u64,
    /// Schedule lag (actual minus intended send time) of this window's requests.
    pub lag_sum_ns: u64,
    pub lag_max_ns: u64,
    /// Schedule lag of this window's requests, 2 significant digits.
    pub lag: Histogram<u64>,
    /// Latency from the intended send time, 2 significant digits.
    pub corrected: Histogram<u64>,
    /// Latency from the actual send time, 2 significant digits.
    pub service: Histogram<u64>,
}

impl Window {
    pub fn new() -> Self {
        Window {
            scheduled: 0,
            sent: 0,
            skipped: 0,
            completed: 0,
            errors: 0,
            lag_sum_ns: 0,
            lag_max_ns: 0,
            lag: coarse_histogram(),
            corrected: coarse_histogram(),
            service: coarse_histogram(),
        }
    }

    pub fn add(&mut self, o: &Window) {
        self.scheduled += o.scheduled;
        self.sent += o.sent;
        self.skipped += o.skipped;
        self.completed += o.completed;
        self.errors += o.errors;
        self.lag_sum_ns += o.lag_sum_ns;
        self.lag_max_ns = self.lag_max_ns.max(o.lag_max_ns);
        self.lag.add(&o.lag).expect("histograms of equal bounds");
        self.corrected
            .add(&o.corrected)
            .expect("histograms of equal bounds");
        self.service
            .add(&o.service)
            .expect("histograms of equal bounds");
    }

    /// Mean schedule lag of the window's sent requests, µs.
    pub fn lag_mean_us(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.lag_sum_ns as f64 / self.sent as f64 / 1000.0
        }
    }
}

impl Default for Window {
    fn default() -> Self {
        Window::new()
    }
}

/// Everything one thread measured.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Intended send time to response, per verb (`Verb::index`); the total is
    /// merged from these at the end ([`Metrics::total_corrected`]), which keeps
    /// the per-request path to one record per histogram kind.
    pub corrected: Vec<Histogram<u64>>,
    /// Actual send time to response, indexed like `corrected`.
    pub service: Vec<Histogram<u64>>,
    /// Actual minus intended send time.
    pub lag: Histogram<u64>,
    pub counters: Counters,
    pub series: Vec<Second>,
    /// `--window`: the measured window cut into windows of `window_ns` (empty without).
    pub windows: Vec<Window>,
    pub window_ns: u64,
}

impl Metrics {
    /// Allocates everything up front for a window of `seconds` (rounded up).
    pub fn new(seconds: usize) -> Self {
        Metrics {
            corrected: (0..4).map(|_| histogram()).collect(),
            service: (0..4).map(|_| histogram()).collect(),
            lag: histogram(),
            counters: Counters::default(),
            series: (0..seconds)
                .map(|_| Second {
                    completed: 0,
                    errors: 0,
                    latency: coarse_histogram(),
                    lag_sum_ns: 0,
                    lag_count: 0,
                })
                .collect(),
            windows: Vec::new(),
            window_ns: 0,
        }
    }

    /// Also keeps `n` windows of `window_ns` each (`--window`).
    pub fn with_windows(mut self, n: usize, window_ns: u64) -> Self {
        self.windows = (0..n).map(|_| Window::new()).collect();
        self.window_ns = window_ns;
        self
    }

    /// The window of an intended send time `since_start` ns after the window start.
    #[inline]
    pub fn window_of(&mut self, since_start: u64) -> Option<&mut Window> {
        if self.window_ns == 0 {
            return None;
        }
        let i = (since_start / self.window_ns) as usize;
        self.windows.get_mut(i)
    }

    /// Records one completed window request. `service` is `None` in closed
    /// mode, where it equals `corrected` and is filled in by [`Metrics::service_from_corrected`].
    #[inline]
    pub fn record_response(
        &mut self,
        verb: Verb,
        corrected: u64,
        service: Option<u64>,
        outcome: &Outcome,
    ) {
        let v = verb.index();
        self.corrected[v].saturating_record(corrected);
        if let Some(service) = service {
            self.service[v].saturating_record(service);
        }
        let c = &mut self.counters;
        c.completed += 1;
        if verb.is_read() {
            c.hits += outcome.hits as u64;
            c.misses += outcome.misses as u64;
        }
        if let Some(kind) = outcome.error {
            c.errors.count(kind);
        }
    }

    /// Records a response received during second `sec` of the window.
    #[inline]
    pub fn record_second(&mut self, sec: usize, corrected: u64, error: bool) {
        self.counters.received_in_window += 1;
        if let Some(s) = self.series.get_mut(sec) {
            s.completed += 1;
            s.errors += error as u64;
            s.latency.saturating_record(corrected);
        }
    }

    /// Records the schedule lag of a window request sent during second `sec`.
    #[inline]
    pub fn record_lag(&mut self, sec: usize, lag: u64) {
        self.counters.sent += 1;
        self.lag.saturating_record(lag);
        if let Some(s) = self.series.get_mut(sec) {
            s.lag_sum_ns += lag;
            s.lag_count += 1;
        }
    }

    /// Adds another thread's measurements (histograms are merged bucket by bucket).
    pub fn merge(&mut self, o: &Metrics) {
        for (a, b) in self.corrected.iter_mut().zip(&o.corrected) {
            a.add(b).expect("histograms of equal bounds");
        }
        for (a, b) in self.service.iter_mut().zip(&o.service) {
            a.add(b).expect("histograms of equal bounds");
        }
        self.lag.add(&o.lag).expect("histograms of equal bounds");
        self.counters.add(&o.counters);
        if self.series.len() < o.series.len() {
            self.series.resize(o.series.len(), o.series[0].clone());
        }
        for (a, b) in self.series.iter_mut().zip(&o.series) {
            a.completed += b.completed;
            a.errors += b.errors;
            a.latency
                .add(&b.latency)
                .expect("histograms of equal bounds");
            a.lag_sum_ns += b.lag_sum_ns;
            a.lag_count += b.lag_count;
        }
        if self.windows.len() < o.windows.len() {
            self.windows.resize_with(o.windows.len(), Window::new);
            self.window_ns = o.window_ns;
        }
        for (a, b) in self.windows.iter_mut().zip(&o.windows) {
            a.add(b);
        }
    }

    /// Closed mode: service time is the corrected latency (the intended send
    /// time is the send time), recorded once per request on the hot path.
    pub fn service_from_corrected(&mut self) {
        self.service = self.corrected.clone();
        for w in &mut self.windows {
            w.service = w.corrected.clone();
        }
    }

    /// Corrected latency over all verbs.
    pub fn total_corrected(&self) -> Histogram<u64> {
        merged(&self.corrected)
    }

    /// Service time over all verbs.
    pub fn total_service(&self) -> Histogram<u64> {
        merged(&self.service)
    }
}

fn merged(hs: &[Histogram<u64>]) -> Histogram<u64> {
    let mut t = histogram();
    for h in hs {
        t.add(h).expect("histograms of equal bounds");
    }
    t
}

impl Metrics {
    /// Mean schedule lag of second `sec` in µs, if anything was sent then.
    pub fn lag_mean_us(&self, sec: usize) -> Option<f64> {
        let s = self.series.get(sec)?;
        (s.lag_count > 0).then(|| s.lag_sum_ns as f64 / s.lag_count as f64 / 1000.0)
    }
}

/// The percentiles reported for one histogram, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub p9999_us: f64,
    pub max_us: f64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Self {
        let us = |ns: u64| ns as f64 / 1000.0;
        if h.is_empty() {
            return Percentiles {
                count: 0,
                mean_us: 0.0,
                p50_us: 0.0,
                p90_us: 0.0,
                p99_us: 0.0,
                p999_us: 0.0,
                p9999_us: 0.0,
                max_us: 0.0,
            };
        }
        Percentiles {
            count: h.len(),
            mean_us: h.mean() / 1000.0,
            p50_us: us(h.value_at_quantile(0.5)),
            p90_us: us(h.value_at_quantile(0.9)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            p9999_us: us(h.value_at_quantile(0.9999)),
            max_us: us(h.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_equals_recording_everything_in_one() {
        let mut a = Metrics::new(2);
        let mut b = Metrics::new(3);
        let mut all = histogram();
        let ok = Outcome {
            hits: 1,
            misses: 0,
            error: None,
        };
        let err = Outcome::err(ErrorKind::OutOfMemory);
        for i in 0..10_000u64 {
            let v = 1000 + i * 37 % 50_000;
            let (m, o) = if i % 3 == 0 {
                (&mut a, &err)
            } else {
                (&mut b, &ok)
            };
            m.record_response(
                if i % 2 == 0 { Verb::Get } else { Verb::Set },
                v,
                Some(v / 2),
                o,
            );
            m.record_second((i % 3) as usize, v, o.error.is_some());
            all.record(v).unwrap();
        }
        a.merge(&b);
        let merged = &a.total_corrected();
        assert_eq!(merged.len(), 10_000);
        for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(merged.value_at_quantile(q), all.value_at_quantile(q));
        }
        assert_eq!(
            a.corrected[Verb::Get.index()].len() + a.corrected[Verb::Set.index()].len(),
            10_000
        );
        assert_eq!(a.counters.errors.out_of_memory, 3334);
        assert_eq!(a.counters.errors.total, 3334);
        assert_eq!(a.counters.hits, 3333);
        assert_eq!(a.series.len(), 3);
        assert_eq!(a.series.iter().map(|s| s.completed).sum::<u64>(), 10_000);
        assert_eq!(a.series[0].errors, 3334);
    }

    #[test]
    fn percentiles_are_within_three_digits() {
        let mut h = histogram();
        for v in 1..=100_000u64 {
            h.record(v * 10).unwrap();
        }
        let p = Percentiles::of(&h);
        assert!((p.p50_us - 500.0).abs() / 500.0 < 0.001, "{}", p.p50_us);
        assert!((p.p99_us - 990.0).abs() / 990.0 < 0.001, "{}", p.p99_us);
        assert!((p.max_us - 1000.0).abs() / 1000.0 < 0.001);
        assert_eq!(p.count, 100_000);
    }
}
