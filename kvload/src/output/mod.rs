//! Results: the [`Report`] computed from a run (rates, verdict), rendered as
//! the versioned JSON document ([`json`]) and the terminal summary ([`text`]).

pub mod json;
pub mod text;

use crate::config::{Config, Mode, Verb};
use crate::engine::RunResult;
use crate::metrics::Percentiles;

/// Client utilization at or above which a run is `client_bound`.
pub const CLIENT_BOUND_UTILIZATION: f64 = 0.9;
/// Saturation: skipped or timed-out arrivals above this fraction of the scheduled ones.
pub const SATURATED_SKIP_FRACTION: f64 = 0.001;
/// Saturation: achieved rate below this fraction of the offered rate.
pub const SATURATED_RATE_FRACTION: f64 = 0.9;
/// Saturation: last-second mean lag above this multiple of the first second's, and above
/// `SATURATED_LAG_FLOOR_US`.
pub const SATURATED_LAG_GROWTH: f64 = 10.0;
pub const SATURATED_LAG_FLOOR_US: f64 = 1000.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Saturated,
    ClientBound,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Saturated => "saturated",
            Verdict::ClientBound => "client_bound",
        }
    }
}

/// One second of the series.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesPoint {
    pub t: usize,
    pub completed: u64,
    pub rate: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Mean schedule lag of requests sent in this second (open mode).
    pub lag_mean_us: f64,
    pub errors: u64,
}

/// The figures of a completed run.
pub struct Report<'a> {
    pub cfg: &'a Config,
    pub run: &'a RunResult,
    pub duration_s: f64,
    pub offered_rate: Option<f64>,
    pub achieved_rate: f64,
    pub utilization: f64,
    pub series: Vec<SeriesPoint>,
    pub verdict: Verdict,
    pub verdict_reason: String,
}

impl<'a> Report<'a> {
    pub fn new(cfg: &'a Config, run: &'a RunResult) -> Self {
        let duration_s = run.window_ns as f64 / 1e9;
        let offered_rate = match cfg.mode {
            Mode::Open => Some(
                cfg.phases
                    .iter()
                    .zip(crate::config::phase_spans(&cfg.phases, cfg.duration_ns))
                    .map(|(p, span)| p.rate.unwrap_or(0.0) * span as f64)
                    .sum::<f64>()
                    / cfg.duration_ns as f64,
            ),
            Mode::Closed => None,
        };
        let c = &run.metrics.counters;
        let achieved_rate = c.received_in_window as f64 / duration_s;
        // Busy-polling (--spin-us) is waiting, so it does not count as work.
        let busy = (run.user_ns + run.sys_ns).saturating_sub(run.spin_ns);
        let utilization = busy as f64 / (run.window_ns as f64 * cfg.threads as f64);
        let full_seconds = (run.window_ns / 1_000_000_000) as usize;
        let series = run
            .metrics
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let len_s = if i < full_seconds {
                    1.0
                } else {
                    (run.window_ns % 1_000_000_000) as f64 / 1e9
                };
                let q = |h: &hdrhistogram::Histogram<u64>, q: f64| {
                    if h.is_empty() {
                        0.0
                    } else {
                        h.value_at_quantile(q) as f64 / 1000.0
                    }
                };
                SeriesPoint {
                    t: i + 1,
                    completed: s.completed,
                    rate: if len_s > 0.0 {
                        s.completed as f64 / len_s
                    } else {
                        0.0
                    },
                    p50_us: q(&s.latency, 0.5),
                    p99_us: q(&s.latency, 0.99),
                    lag_mean_us: run.metrics.lag_mean_us(i).unwrap_or(0.0),
                    errors: s.errors,
                }
            })
            .collect::<Vec<_>>();
        let (verdict, verdict_reason) = verdict(
            c,
            offered_rate,
            achieved_rate,
            utilization,
            &series,
            duration_s,
        );
        Report {
            cfg,
            run,
            duration_s,
            offered_rate,
            achieved_rate,
            utilization,
            series,
            verdict,
            verdict_reason,
        }
    }

    pub fn total(&self) -> (Percentiles, Percentiles) {
        (
            Percentiles::of(&self.run.metrics.total_corrected()),
            Percentiles::of(&self.run.metrics.total_service()),
        )
    }

    /// Verbs that were issued in the window, with (corrected, service) percentiles.
    pub fn per_verb(&self) -> Vec<(Verb, Percentiles, Percentiles)> {
        Verb::ALL
            .iter()
            .filter(|v| !self.run.metrics.corrected[v.index()].is_empty())
            .map(|&v| {
                (
                    v,
                    Percentiles::of(&self.run.metrics.corrected[v.index()]),
                    Percentiles::of(&self.run.metrics.service[v.index()]),
                )
            })
            .collect()
    }

    pub fn hit_ratio(&self) -> Option<f64> {
        let c = &self.run.metrics.counters;
        let n = c.hits + c.misses;
        (n > 0).then(|| c.hits as f64 / n as f64)
    }
}

fn verdict(
    c: &crate::metrics::Counters,
    offered: Option<f64>,
    achieved: f64,
    utilization: f64,
    series: &[SeriesPoint],
    duration_s: f64,
) -> (Verdict, String) {
    if utilization >= CLIENT_BOUND_UTILIZATION {
        return (
            Verdict::ClientBound,
            format!(
                "client CPU utilization {:.0}% >= {:.0}%: the client, not the server, may limit this run",
                utilization * 100.0,
                CLIENT_BOUND_UTILIZATION * 100.0
            ),
        );
    }
    let Some(offered) = offered else {
        return (Verdict::Ok, String::new());
    };
    let sched = c.scheduled.max(1) as f64;
    if c.skipped as f64 > SATURATED_SKIP_FRACTION * sched {
        return (
            Verdict::Saturated,
            format!(
                "{} of {} scheduled requests skipped (every connection had max-outstanding requests in flight)",
                c.skipped, c.scheduled
            ),
        );
    }
    if c.timeouts as f64 > SATURATED_SKIP_FRACTION * sched {
        return (
            Verdict::Saturated,
            format!("{} of {} requests timed out", c.timeouts, c.scheduled),
        );
    }
    // Against the arrivals the schedule drew in the window, not the nominal rate: a
    // short window at a low rate draws a Poisson count that may be 10% below it by
    // chance, and that is not the server falling behind.
    let scheduled_rate = if c.scheduled > 0 && duration_s > 0.0 {
        c.scheduled as f64 / duration_s
    } else {
        offered
    };
    if achieved < SATURATED_RATE_FRACTION * scheduled_rate {
        return (
            Verdict::Saturated,
            format!(
                "achieved {achieved:.0} req/s < 90% of the {scheduled_rate:.0} req/s scheduled \
                 in the window (offered {offered:.0} req/s)"
            ),
        );
    }
    let full: Vec<&SeriesPoint> = series.iter().filter(|s| s.completed > 0).collect();
    if full.len() >= 2 {
        let first = full[0].lag_mean_us;
        let last = full[full.len() - 1].lag_mean_us;
        if last > SATURATED_LAG_FLOOR_US && last > SATURATED_LAG_GROWTH * first.max(1.0) {
            return (
                Verdict::Saturated,
                format!(
                    "schedule lag grew: mean {first:.0} us in the first second, {last:.0} us in the last"
                ),
            );
        }
    }
    (Verdict::Ok, String::new())
}
