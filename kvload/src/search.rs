//! Capacity at an SLO: the highest open-loop rate whose latency meets a bound
//! (`--search p99<=200us`), with its confidence interval, and the latency–throughput
//! curve (`--ramp`).
//!
//! The algorithm is pure (`knee` takes a function that measures one run at a rate) so
//! that it is tested against simulated curves; `steps` drives it with real runs of the
//! engine, each a warm-up and a measured window cut into short windows (`--window`).
//!
//! **A rate is judged by many windows, not one.** Each run's windows are checked for
//! the host disturbing them (kvload falling behind its send schedule, steal time on the
//! server's or the load's CPUs, another task on the server's CPUs: [`judge_window`]);
//! those are dropped and counted, never averaged in. The rate's percentile is the one of
//! the pooled good windows of every run at that rate, and its 95% interval comes from a
//! bootstrap over those windows. The rate passes when the whole interval meets the SLO,
//! fails when none of it does, and is in doubt otherwise: a rate in doubt is measured
//! again (more windows) up to `max_runs_per_rate` times, then decided by its estimate
//! and marked doubtful. A run most of whose windows the host disturbed is measured
//! again; three such runs in a row end the search ("host disturbed"), never a knee.
//!
//! **No monotonicity is assumed.** On a VM whose idle CPUs halt between requests, p99
//! can be worse at a low rate than at a moderate one. Capacity is the highest rate that
//! meets the SLO: the bracket is the highest pass and the lowest fail *above* it; a fail
//! below the highest pass is a dip in the curve, reported in its shape, and says
//! nothing about higher rates. Going down from a fail that finds no pass down to the
//! range's bottom, the search goes up from its first rate until the server saturates
//! before it says that no rate met the SLO.
//!
//! Choosing the rates: a short closed-loop burst estimates the server's peak
//! throughput X; the first step runs at 0.8 X (or in the middle of `--search-range`);
//! a pass moves up by `GROWTH`, a fail down, each further move the same way squaring
//! the factor (at most `MAX_FACTOR`); inside the bracket, interpolation of 1/latency
//! (which falls about linearly with the rate on a queue's curve and reaches zero at
//! saturation), or bisection when it misleads, until the bracket is within the
//! precision. A saturated run is a fail; a client-bound run is a ceiling (the client
//! cannot drive that rate): the search continues below it, and ends without a knee
//! (client_bound) when the server still meets the SLO just below it.
//!
//! **The host is watched across the search.** A reference rate (half the first rate)
//! is measured first, again halfway and again at the end; when its percentile moved
//! beyond the intervals of the first measurement, it is measured once more, and when
//! that confirms the move the search ends "host changed" — never a knee that is the
//! host's.
//!
//! **The knee comes with its interval**: the curve through every rate's pooled
//! percentile (saturated rates at infinite latency), its last up-crossing of the bound
//! interpolated in 1/latency; the interval is the 2.5 and 97.5 percentiles of that
//! crossing over bootstrap resamples of every rate's windows.

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Gamma};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde_json::{Value, json};

/// A pass moves the next rate up by this factor, a fail down by its inverse.
pub const GROWTH: f64 = 1.25;
/// The largest bracketing move.
pub const MAX_FACTOR: f64 = 4.0;
/// After this many interpolated steps in a row that moved the same end of the
/// bracket, the next step bisects.
pub const SAME_SIDE_LIMIT: usize = 2;
/// The search starts at this fraction of the closed-loop burst's throughput.
pub const START_FRACTION: f64 = 0.8;
/// Without a range, the lowest rate searched is this fraction of the burst's throughput.
pub const LOW_FRACTION: f64 = 0.1;
/// The host watch's reference rate, as a fraction of the first step's rate.
pub const REFERENCE_FRACTION: f64 = 0.5;
/// kvload's largest open-loop rate, req/s (config::spec owns it: the rates parsed there
/// are checked against it).
pub use crate::config::spec::MAX_RATE;
pub const DEFAULT_PRECISION: f64 = 0.02;
pub const DEFAULT_MAX_STEPS: usize = 24;
/// Runs at one rate whose answer is in doubt, at most (the first included).
pub const DEFAULT_RUNS_PER_RATE: usize = 2;
/// Bootstrap resamples for a rate's interval and the knee's.
pub const BOOTSTRAP: usize = 400;
/// The two-sided level of every interval.
pub const LEVEL: f64 = 0.95;
/// A run needs at least this share of its windows undisturbed to count.
pub const MIN_GOOD_SHARE: f64 = 0.5;
/// This many disturbed runs in a row end the search: the host, not the server.
pub const DISTURBED_LIMIT: usize = 3;
/// Steal time, or CPU time of other tasks on the server's CPUs, above this share of a
/// window disturbs it.
pub const HOST_SHARE: f64 = 0.10;

/// Which latency an SLO bounds: a percentile of the corrected latency (from the
/// intended send time) or of the service latency (from the actual send).
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    pub quantile: f64,
    pub label: String,
    pub service: bool,
    pub strict: bool,
    pub bound_us: f64,
}

impl Slo {
    /// `p99<=200us`, `p99.9<=1ms`, `p50<0.5ms`, `service.p99<=200us` (µs when no
    /// unit is given). Err names what is wrong.
    pub fn parse(text: &str) -> Result<Slo, String> {
        let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let (service, rest) = match t.strip_prefix("service.") {
            Some(r) => (true, r),
            None => (false, t.strip_prefix("corrected.").unwrap_or(&t)),
        };
        let (left, strict, right) = if let Some((l, r)) = rest.split_once("<=") {
            (l, false, r)
        } else if let Some((l, r)) = rest.split_once('<') {
            (l, true, r)
        } else {
            return Err(format!(
                "'{text}' is not an SLO such as p99<=200us, p99.9<=1ms or service.p99<=200us"
            ));
        };
        let quantile = match left {
            "p50" => 0.5,
            "p90" => 0.9,
            "p99" => 0.99,
            "p99.9" | "p999" => 0.999,
            "p99.99" | "p9999" => 0.9999,
            _ => {
                return Err(format!(
                    "'{left}' is not a latency percentile (p50, p90, p99, p99.9, p99.99)"
                ));
            }
        };
        // A bare number is µs (the metric's unit); else a duration in the one grammar.
        let bad = || format!("'{right}' is not a latency bound such as 200us or 1ms");
        let bound_us = if crate::config::spec::plain_number(right) {
            right.parse::<f64>().map_err(|_| bad())?
        } else {
            crate::config::spec::parse_duration(right).map_err(|_| bad())? as f64 / 1e3
        };
        if !bound_us.is_finite() || bound_us <= 0.0 {
            return Err(format!("the bound {right} must be a positive latency"));
        }
        if bound_us > 60e6 {
            return Err(format!(
                "the bound {right} is above 60 s: not a latency SLO"
            ));
        }
        if bound_us < 1.0 {
            return Err(format!(
                "the bound {right} is below 1 us: below what kvload measures"
            ));
        }
        Ok(Slo {
            quantile,
            label: left.replace("p999", "p99.9").replace("p9999", "p99.99"),
            service,
            strict,
            bound_us,
        })
    }

    pub fn text(&self) -> String {
        format!(
            "{}{}{}{}us",
            if self.service { "service." } else { "" },
            self.label,
            if self.strict { "<" } else { "<=" },
            self.bound_us
        )
    }

    pub fn meets(&self, latency_us: f64) -> bool {
        if self.strict {
            latency_us < self.bound_us
        } else {
            latency_us <= self.bound_us
        }
    }
}

/// How one run ended, as kvload's run verdict says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunVerdict {
    Ok,
    Saturated,
    ClientBound,
}

/// Why a window does not count toward its rate's percentile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disturbance {
    /// kvload fell behind its send schedule: its own delay would decide the tail.
    ClientLate,
    /// Steal time on the server's or the load's CPUs.
    Steal,
    /// Another task ran on the server's CPUs.
    Others,
}

impl Disturbance {
    pub const ALL: [Disturbance; 3] = [
        Disturbance::ClientLate,
        Disturbance::Steal,
        Disturbance::Others,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Disturbance::ClientLate => "client_late",
            Disturbance::Steal => "steal",
            Disturbance::Others => "others",
        }
    }

    /// What it means, for messages.
    pub fn says(self) -> &'static str {
        match self {
            Disturbance::ClientLate => "kvload fell behind its send schedule",
            Disturbance::Steal => "steal time on the server's or the load's CPUs",
            Disturbance::Others => "another task ran on the server's CPUs",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What the generator and the host did in one window (`steps` reads it from the
/// engine's windows and host watch); NaN where unmeasured, which disturbs nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowFacts {
    /// Share of the window's requests that kvload's own lateness put over the bound: over
    /// it from the intended send time (corrected), within it from the actual send
    /// (service).
    pub late_share: f64,
    /// The larger steal share of the server's and the load's CPUs.
    pub steal: f64,
    /// Share of the server's CPUs' time used by other tasks.
    pub others: f64,
}

/// Whether the host disturbed a window, and how. A window counts unless another task or
/// steal time took more than `HOST_SHARE` of the server's CPUs, or the generator's own
/// lateness put over the bound more than half the share of requests the SLO allows over
/// it (its delay, not the server's, would then decide the window).
///
/// A service-latency SLO (`service.`) is measured from the actual send, so the
/// generator's lateness does not enter it and is not checked.
pub fn judge_window(slo: &Slo, f: &WindowFacts) -> Option<Disturbance> {
    // The host's own signals first: a task on the server's CPUs or steal time also makes
    // kvload late, and the cause is what is said.
    if f.others > HOST_SHARE {
        Some(Disturbance::Others)
    } else if f.steal > HOST_SHARE {
        Some(Disturbance::Steal)
    } else if !slo.service && f.late_share > (1.0 - slo.quantile) / 2.0 {
        Some(Disturbance::ClientLate)
    } else {
        None
    }
}

/// The windows of a run in time order, each one after a disturbed window disturbed too
/// (for the same reason): the backlog a stall leaves drains into the next window, whose
/// own figures look clean.
pub fn spill(windows: &[WindowSample]) -> Vec<WindowSample> {
    let mut out = windows.to_vec();
    for i in 1..out.len() {
        if out[i].disturbed.is_none() {
            out[i].disturbed = windows[i - 1].disturbed;
        }
    }
    out
}

/// One window of a run: the SLO's latency (corrected or service) and whether the host
/// disturbed it.
#[derive(Debug, Clone)]
pub struct WindowSample {
    pub latency: Histogram<u64>,
    pub disturbed: Option<Disturbance>,
    /// Arrivals intended in the window, and those skipped (every connection full).
    pub scheduled: u64,
    pub skipped: u64,
}

/// One run at one rate.
#[derive(Debug, Clone)]
pub struct Measured {
    pub verdict: RunVerdict,
    pub windows: Vec<WindowSample>,
    /// Every figure of the run, for the JSON.
    pub figures: Value,
}

/// A rate's judgement after a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The whole interval meets the SLO.
    Pass,
    /// None of the interval meets it.
    Fail,
    /// The server could not keep up: a fail.
    Saturated,
    /// The client could not drive the rate: a ceiling of the search.
    ClientBound,
    /// The interval straddles the bound: measured again.
    Doubt,
    /// The host disturbed most of the run's windows: measured again.
    Disturbed,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Saturated => "saturated",
            Outcome::ClientBound => "client_bound",
            Outcome::Doubt => "doubt",
            Outcome::Disturbed => "disturbed",
        }
    }

    fn fails(self) -> bool {
        matches!(self, Outcome::Fail | Outcome::Saturated)
    }
}

/// Why a run was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Search,
    /// The host watch's reference rate (start, middle, end).
    Reference,
}

impl Purpose {
    pub fn name(self) -> &'static str {
        match self {
            Purpose::Search => "search",
            Purpose::Reference => "reference",
        }
    }
}

/// One run, and what its rate's judgement became.
#[derive(Debug, Clone)]
pub struct Step {
    pub rate: f64,
    pub purpose: Purpose,
    /// The rate's judgement after this run (a decided pass or fail also when a doubt
    /// was decided by the estimate: `doubtful`).
    pub outcome: Outcome,
    pub doubtful: bool,
    /// This run is the n-th at its rate (1: the first).
    pub run: usize,
    /// This run's own percentile over its good windows (µs; NaN without any).
    pub run_latency_us: f64,
    /// The rate's percentile over the good windows of its runs so far, and its 95%
    /// interval.
    pub latency_us: f64,
    pub ci: (f64, f64),
    /// The share of those windows' requests over the bound, and its 95% interval: what
    /// decides the rate (pass when the whole interval is at most 1 − q).
    pub exceed: f64,
    pub exceed_ci: (f64, f64),
    pub windows: usize,
    /// Windows dropped, by `Disturbance`.
    pub dropped: [usize; 3],
    pub figures: Value,
}

#[derive(Debug, Clone)]
pub struct Params {
    pub precision: f64,
    /// Runs at most, every purpose and repeat included.
    pub max_steps: usize,
    pub min_rate: f64,
    pub max_rate: f64,
    /// Runs at one rate in doubt, at most.
    pub runs_per_rate: usize,
    /// The host watch's reference rate (None: no watch).
    pub reference: Option<f64>,
    /// Seeds the bootstrap.
    pub seed: u64,
}

impl Params {
    pub fn new(min_rate: f64, max_rate: f64) -> Params {
        Params {
            precision: DEFAULT_PRECISION,
            max_steps: DEFAULT_MAX_STEPS,
            min_rate,
            max_rate,
            runs_per_rate: DEFAULT_RUNS_PER_RATE,
            reference: None,
            seed: 1,
        }
    }
}

/// The host watch: the reference rate's percentile at each visit.
#[derive(Debug, Clone)]
pub struct Visit {
    pub when: &'static str,
    pub latency_us: f64,
    pub ci: (f64, f64),
    /// Beyond the first visit's interval (and the first's beyond this one's).
    pub moved: bool,
}

/// The search's answer.
#[derive(Debug, Clone)]
pub struct Knee {
    /// ok (converged), imprecise (runs ran out before the precision), no_pass (no rate
    /// met the SLO from the range's bottom up to saturation), range_top (even the
    /// highest rate passes), client_bound (the client was the limit: no knee),
    /// host_disturbed (the host disturbed run after run), host_changed (the reference
    /// rate moved during the search).
    pub verdict: &'static str,
    pub reason: String,
    pub knee: Option<f64>,
    /// The knee's 95% interval (bootstrap over every rate's windows).
    pub ci: Option<(f64, f64)>,
    pub highest_pass: Option<f64>,
    pub lowest_fail: Option<f64>,
    /// Rates below the highest pass that failed: the curve falls before it rises.
    pub dips: Vec<f64>,
    pub reference: Vec<Visit>,
    pub steps: Vec<Step>,
}

impl Knee {
    /// Windows measured and dropped (by `Disturbance`) over every run.
    pub fn windows(&self) -> (usize, [usize; 3]) {
        let mut d = [0; 3];
        let mut n = 0;
        for s in &self.steps {
            n += s.windows;
            for (a, b) in d.iter_mut().zip(s.dropped) {
                *a += b;
            }
        }
        (n, d)
    }
}

/// The windows of one rate, pooled: distinct bucket values and each window's counts,
/// so that a resample's percentile is a weighted scan; and each window's requests over
/// the SLO's bound and in all, so that a resample's share over the bound is a ratio of
/// sums.
struct Pool {
    values: Vec<u64>,
    counts: Vec<Vec<u64>>,
    over: Vec<u64>,
    total: Vec<u64>,
}

/// The requests of `h` over the SLO's bound (at or over it for a strict `<`).
pub fn over_bound(slo: &Slo, h: &Histogram<u64>) -> u64 {
    let b = (slo.bound_us * 1000.0) as u64;
    let within = if slo.strict {
        h.count_between(0, b.saturating_sub(1))
    } else {
        h.count_between(0, b)
    };
    h.len().saturating_sub(within)
}

impl Pool {
    fn with_bound(windows: &[&Histogram<u64>], slo: &Slo) -> Pool {
        let mut p = Pool::of(windows);
        p.over = windows.iter().map(|h| over_bound(slo, h)).collect();
        p.total = windows.iter().map(|h| h.len()).collect();
        p
    }

    /// The share of requests over the bound of the windows taken `mult[w]` times each.
    fn exceed(&self, mult: &[u32]) -> f64 {
        let (mut a, mut n) = (0u64, 0u64);
        for ((&o, &t), &m) in self.over.iter().zip(&self.total).zip(mult) {
            a += m as u64 * o;
            n += m as u64 * t;
        }
        if n == 0 {
            f64::NAN
        } else {
            a as f64 / n as f64
        }
    }

    fn exceed_estimate(&self) -> f64 {
        self.exceed(&vec![1; self.len()])
    }

    /// The requests over the bound and in all, and the overdispersion φ of the windows'
    /// counts over the bound (their variance over the binomial one, at least 1): events
    /// over a bound come in bursts (a queue's busy period, a stall), so the windows' own
    /// spread says how many independent events the count is worth.
    fn counts(&self) -> (f64, f64, f64) {
        let x: u64 = self.over.iter().sum();
        let n: u64 = self.total.iter().sum();
        let (x, n) = (x as f64, n as f64);
        let w = self.total.iter().filter(|&&t| t > 0).count();
        if n == 0.0 || x == 0.0 || w < 2 {
            return (x, n, 1.0);
        }
        let e = x / n;
        let chi2: f64 = self
            .over
            .iter()
            .zip(&self.total)
            .filter(|(_, t)| **t > 0)
            .map(|(&a, &t)| {
                let m = e * t as f64;
                (a as f64 - m).powi(2) / (m * (1.0 - e)).max(1e-12)
            })
            .sum();
        (x, n, (chi2 / (w - 1) as f64).max(1.0))
    }

    /// One draw of the share over the bound from what the windows say of it: the windows
    /// resampled (their own spread, bad windows included as often as they were seen),
    /// then Jeffreys' posterior of a Poisson rate for the resample's count, Gamma(x/φ + ½,
    /// n/φ), counting the events a bursty process is worth (`counts`): a share of zero
    /// requests over the bound still has an upper end, and a few bursts a wide interval.
    fn draw_exceed(&self, rng: &mut Xoshiro256PlusPlus) -> f64 {
        let (_, n, phi) = self.counts();
        if n == 0.0 {
            return f64::NAN;
        }
        let m = if self.len() >= 2 {
            self.resample(rng)
        } else {
            vec![1; self.len()]
        };
        let (mut x, mut n) = (0.0, 0.0);
        for ((&o, &t), &k) in self.over.iter().zip(&self.total).zip(&m) {
            x += (k as u64 * o) as f64;
            n += (k as u64 * t) as f64;
        }
        let g = Gamma::new(x / phi + 0.5, phi / n.max(1.0)).expect("a positive shape and scale");
        g.sample(rng).min(1.0)
    }

    /// The 95% interval of the share over the bound: the percentiles of `draw_exceed`.
    fn exceed_interval(&self, rng: &mut Xoshiro256PlusPlus) -> (f64, f64) {
        if self.len() == 0 {
            return (f64::NAN, f64::NAN);
        }
        let est = self.exceed_estimate();
        let mut v: Vec<f64> = (0..BOOTSTRAP * 5).map(|_| self.draw_exceed(rng)).collect();
        v.sort_by(f64::total_cmp);
        let (lo, hi) = percentiles(&v);
        (lo.min(est), hi.max(est))
    }

    fn of(windows: &[&Histogram<u64>]) -> Pool {
        let mut values: Vec<u64> = windows
            .iter()
            .flat_map(|h| h.iter_recorded().map(|v| v.value_iterated_to()))
            .collect();
        values.sort_unstable();
        values.dedup();
        let counts = windows
            .iter()
            .map(|h| {
                let mut c = vec![0u64; values.len()];
                for v in h.iter_recorded() {
                    if let Ok(i) = values.binary_search(&v.value_iterated_to()) {
                        c[i] += v.count_at_value();
                    }
                }
                c
            })
            .collect();
        Pool {
            values,
            counts,
            over: Vec::new(),
            total: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.counts.len()
    }

    /// The q-quantile (µs) of the windows taken `mult[w]` times each; NaN when empty.
    /// The rank is HdrHistogram's (`value_at_quantile`).
    fn quantile(&self, mult: &[u32], q: f64) -> f64 {
        let total: u64 = self
            .counts
            .iter()
            .zip(mult)
            .map(|(c, &m)| m as u64 * c.iter().sum::<u64>())
            .sum();
        if total == 0 {
            return f64::NAN;
        }
        let rank = ((q * total as f64) + 0.5).max(1.0) as u64;
        let mut cum = 0u64;
        for i in 0..self.values.len() {
            for (c, &m) in self.counts.iter().zip(mult) {
                if m > 0 {
                    cum += m as u64 * c[i];
                }
            }
            if cum >= rank {
                return self.values[i] as f64 / 1000.0;
            }
        }
        self.values.last().map_or(f64::NAN, |&v| v as f64 / 1000.0)
    }

    fn estimate(&self, q: f64) -> f64 {
        self.quantile(&vec![1; self.len()], q)
    }

    /// One bootstrap resample's weights.
    fn resample(&self, rng: &mut Xoshiro256PlusPlus) -> Vec<u32> {
        let n = self.len();
        let mut m = vec![0u32; n];
        for _ in 0..n {
            m[rng.random_range(0..n)] += 1;
        }
        m
    }

    /// The bootstrap interval of the q-quantile at `LEVEL`, widened for the few windows
    /// it resamples (`small_sample_widening`), in log latency.
    fn interval(&self, q: f64, rng: &mut Xoshiro256PlusPlus) -> (f64, f64) {
        if self.len() == 0 {
            return (f64::NAN, f64::NAN);
        }
        if self.len() < 2 {
            // One window says nothing of how much windows vary.
            return (0.0, f64::INFINITY);
        }
        let est = self.estimate(q);
        let mut v: Vec<f64> = (0..BOOTSTRAP)
            .map(|_| self.quantile(&self.resample(rng), q))
            .collect();
        v.sort_by(f64::total_cmp);
        let (lo, hi) = percentiles(&v);
        let k = small_sample_widening(self.len());
        let widen = |x: f64| {
            if x > 0.0 && est > 0.0 {
                est * (x / est).powf(k)
            } else {
                x
            }
        };
        (widen(lo).min(est), widen(hi).max(est))
    }
}

/// How much wider than the percentile bootstrap's an interval from `n` resampled
/// windows is made: the bootstrap's spread is the plug-in one (variance × (n − 1)/n) and
/// its quantiles are normal ones, while a mean of n windows has Student's t with n − 1
/// degrees of freedom: t(0.975, n − 1) / 1.96 × √(n / (n − 1)). 1.44 at 6 windows, 1.17
/// at 12, 1.08 at 24; checked for coverage in the tests and in bench/capacity.
pub fn small_sample_widening(n: usize) -> f64 {
    if n < 2 {
        return 1.0;
    }
    let df = (n - 1) as f64;
    // Student's t quantile at 0.975 (Hill's approximation via Cornish–Fisher terms).
    let z: f64 = 1.959_964;
    let g1 = (z.powi(3) + z) / 4.0;
    let g2 = (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / 96.0;
    let g3 = (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z) / 384.0;
    let g4 = (79.0 * z.powi(9) + 776.0 * z.powi(7) + 1482.0 * z.powi(5)
        - 1920.0 * z.powi(3)
        - 945.0 * z)
        / 92160.0;
    let t = z + g1 / df + g2 / df.powi(2) + g3 / df.powi(3) + g4 / df.powi(4);
    t / z * (n as f64 / df).sqrt()
}

/// One run's figures over its undisturbed windows (after `spill`): what `--profile` and
/// `--ramp --ramp-slo` report.
#[derive(Debug, Clone, Copy)]
pub struct RunFigures {
    pub latency_us: f64,
    pub ci: (f64, f64),
    pub exceed: f64,
    pub exceed_ci: (f64, f64),
    pub good: usize,
    pub dropped: [usize; 3],
}

/// The percentile and the share over the bound, each with its 95% interval, of one run's
/// undisturbed windows, and how many windows counted and were dropped by kind.
pub fn run_figures(slo: &Slo, windows: &[WindowSample], seed: u64) -> RunFigures {
    let mut dropped = [0usize; 3];
    let mut good = Vec::new();
    for w in &spill(windows) {
        match w.disturbed {
            Some(d) => dropped[d.index()] += 1,
            None => good.push(w.latency.clone()),
        }
    }
    let pool = Pool::with_bound(&good.iter().collect::<Vec<_>>(), slo);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    RunFigures {
        latency_us: pool.estimate(slo.quantile),
        ci: pool.interval(slo.quantile, &mut rng),
        exceed: pool.exceed_estimate(),
        exceed_ci: pool.exceed_interval(&mut rng),
        good: good.len(),
        dropped,
    }
}

fn percentiles(sorted: &[f64]) -> (f64, f64) {
    let a = (1.0 - LEVEL) / 2.0;
    let at =
        |p: f64| sorted[((p * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1)];
    (at(a), at(1.0 - a))
}

/// Everything measured at one rate.
struct RateData {
    rate: f64,
    good: Vec<Histogram<u64>>,
    /// Runs that counted (not disturbed), and how many of them saturated.
    runs: usize,
    saturated: usize,
}

impl RateData {
    fn saturated(&self) -> bool {
        self.runs > 0 && self.saturated * 2 > self.runs
    }
}

/// The last up-crossing of the curve through `pts` (rate, share of requests over the
/// bound), sorted by rate (a saturated rate's share is 1), over `alpha` = 1 − q: the
/// highest rate whose share is at most alpha, interpolated in the log of the share toward
/// the next rate above it (exact for an M/M/1 queue, whose share over a bound B is
/// exp(−(μ − λ)·B)). Shares of zero count as half a request (`floor`, per rate). None
/// when no rate meets it.
fn crossing(alpha: f64, pts: &[(f64, f64, f64)]) -> Option<f64> {
    let i = pts.iter().rposition(|&(_, e, _)| e <= alpha)?;
    let Some(&(rj, ej, fj)) = pts.get(i + 1) else {
        return Some(pts[i].0);
    };
    let (ri, ei, fi) = pts[i];
    let (yi, yj, ya) = (ei.max(fi).ln(), ej.max(fj).ln(), alpha.ln());
    if yj <= yi {
        return Some(ri);
    }
    Some((ri + (rj - ri) * (ya - yi) / (yj - yi)).clamp(ri, rj))
}

/// A run's good windows (None: the host disturbed it), its verdict and its step.
type RunResult = (Option<Vec<Histogram<u64>>>, RunVerdict, Step);
/// A rate's (percentile, its interval) and (share over the bound, its interval).
type Judged = ((f64, (f64, f64)), (f64, (f64, f64)));

struct Search<'a, E, M: FnMut(f64, Purpose) -> Result<Measured, E>> {
    slo: &'a Slo,
    measure: M,
    /// Told of every run once its rate is judged.
    progress: &'a mut dyn FnMut(&Step),
    steps: Vec<Step>,
    rates: Vec<RateData>,
    /// Decided rates of the search and the reference: (rate, Pass | Fail | Saturated |
    /// ClientBound).
    decided: Vec<(f64, Outcome)>,
    disturbed_in_row: usize,
    host_disturbed: bool,
    rng: Xoshiro256PlusPlus,
    /// Runs at most (the reference's last looks may raise it).
    budget: usize,
}

impl<E, M: FnMut(f64, Purpose) -> Result<Measured, E>> Search<'_, E, M> {
    fn data(&mut self, rate: f64) -> &mut RateData {
        let i = match self.rates.iter().position(|d| d.rate == rate) {
            Some(i) => i,
            None => {
                self.rates.push(RateData {
                    rate,
                    good: Vec::new(),
                    runs: 0,
                    saturated: 0,
                });
                self.rates.len() - 1
            }
        };
        &mut self.rates[i]
    }

    fn push(&mut self, step: Step) {
        (self.progress)(&step);
        self.steps.push(step);
    }

    fn out_of_runs(&self) -> bool {
        self.steps.len() >= self.budget
    }

    /// The rate's pooled share over the bound (1 when saturated, NaN when unmeasured),
    /// at least half a request.
    fn exceed_at(&self, rate: f64) -> f64 {
        self.rates
            .iter()
            .find(|d| d.rate == rate)
            .map(|d| {
                if d.saturated() {
                    1.0
                } else {
                    let pool = Pool::with_bound(&d.good.iter().collect::<Vec<_>>(), self.slo);
                    let n: u64 = pool.total.iter().sum();
                    pool.exceed_estimate().max(0.5 / n.max(1) as f64)
                }
            })
            .unwrap_or(f64::NAN)
    }

    /// One run at `rate`: its windows are judged and pooled with the rate's earlier
    /// runs. Returns the run's good windows (None: the run was disturbed) and verdict.
    fn run(&mut self, rate: f64, purpose: Purpose) -> Result<RunResult, E> {
        let m = (self.measure)(rate, purpose)?;
        let mut dropped = [0usize; 3];
        let mut good = Vec::new();
        for w in &spill(&m.windows) {
            match w.disturbed {
                Some(d) => dropped[d.index()] += 1,
                None => good.push(w.latency.clone()),
            }
        }
        let n = m.windows.len();
        // A run said saturated because of what a disturbed window did (a stall's backlog
        // filled every connection): its undisturbed windows say whether the server kept
        // up.
        let mut verdict = m.verdict;
        if verdict == RunVerdict::Saturated && dropped.iter().sum::<usize>() > 0 {
            let (sched, skip) = spill(&m.windows)
                .iter()
                .filter(|w| w.disturbed.is_none())
                .fold((0u64, 0u64), |(a, b), w| (a + w.scheduled, b + w.skipped));
            if sched > 0 && (skip as f64) <= crate::output::SATURATED_SKIP_FRACTION * sched as f64 {
                verdict = RunVerdict::Ok;
            }
        }
        let counted = verdict == RunVerdict::Saturated
            || (n > 0 && good.len() as f64 >= MIN_GOOD_SHARE * n as f64 && !good.is_empty());
        let own = if good.is_empty() {
            f64::NAN
        } else {
            Pool::of(&good.iter().collect::<Vec<_>>()).estimate(self.slo.quantile)
        };
        let step = Step {
            rate,
            purpose,
            outcome: Outcome::Disturbed,
            doubtful: false,
            run: 0,
            run_latency_us: own,
            latency_us: f64::NAN,
            ci: (f64::NAN, f64::NAN),
            exceed: f64::NAN,
            exceed_ci: (f64::NAN, f64::NAN),
            windows: n,
            dropped,
            figures: m.figures,
        };
        Ok((counted.then_some(good), verdict, step))
    }

    /// The rate's percentile and share over the bound, with their intervals, over its
    /// good windows.
    fn judge(&mut self, rate: f64) -> Judged {
        let q = self.slo.quantile;
        let d = self
            .rates
            .iter()
            .find(|d| d.rate == rate)
            .expect("measured");
        if d.saturated() {
            let inf = f64::INFINITY;
            return ((inf, (inf, inf)), (1.0, (1.0, 1.0)));
        }
        let pool = Pool::with_bound(&d.good.iter().collect::<Vec<_>>(), self.slo);
        (
            (pool.estimate(q), pool.interval(q, &mut self.rng)),
            (pool.exceed_estimate(), pool.exceed_interval(&mut self.rng)),
        )
    }

    /// Runs at `rate` until its answer is known (or in doubt after `runs_per_rate`
    /// runs: decided by the estimate, marked doubtful). None when the runs ran out or
    /// the host disturbed the search.
    fn visit(
        &mut self,
        rate: f64,
        purpose: Purpose,
        max_runs: usize,
        seen: &mut Vec<Histogram<u64>>,
    ) -> Result<Option<(Outcome, f64)>, E> {
        let mut runs = 0usize;
        loop {
            if self.out_of_runs() {
                return Ok(None);
            }
            let (good, verdict, mut step) = self.run(rate, purpose)?;
            let Some(good) = good else {
                self.disturbed_in_row += 1;
                step.run = runs + 1;
                self.push(step);
                if self.disturbed_in_row >= DISTURBED_LIMIT {
                    self.host_disturbed = true;
                    return Ok(None);
                }
                continue;
            };
            self.disturbed_in_row = 0;
            runs += 1;
            step.run = runs;
            if verdict == RunVerdict::ClientBound {
                step.outcome = Outcome::ClientBound;
                self.push(step);
                return Ok(Some((Outcome::ClientBound, f64::NAN)));
            }
            {
                let d = self.data(rate);
                d.runs += 1;
                d.saturated += (verdict == RunVerdict::Saturated) as usize;
                d.good.extend(good.iter().cloned());
            }
            seen.extend(good);
            let ((est, ci), (ex, ex_ci)) = self.judge(rate);
            step.latency_us = est;
            step.ci = ci;
            step.exceed = ex;
            step.exceed_ci = ex_ci;
            let alpha = 1.0 - self.slo.quantile;
            let outcome = if est.is_infinite() {
                Outcome::Saturated
            } else if ex_ci.1 <= alpha {
                Outcome::Pass
            } else if ex_ci.0 > alpha {
                Outcome::Fail
            } else {
                Outcome::Doubt
            };
            if outcome == Outcome::Doubt && runs < max_runs {
                step.outcome = outcome;
                self.push(step);
                continue;
            }
            let (outcome, doubtful) = match outcome {
                Outcome::Doubt if self.slo.meets(est) => (Outcome::Pass, true),
                Outcome::Doubt => (Outcome::Fail, true),
                o => (o, false),
            };
            step.outcome = outcome;
            step.doubtful = doubtful;
            self.push(step);
            return Ok(Some((outcome, est)));
        }
    }
}

/// The knee of the latency–rate curve that `measure` samples, starting at `start`
/// req/s. `measure` runs one open-loop run (its own warm-up and windows) at the rate it
/// is given.
pub fn knee<E>(
    slo: &Slo,
    p: &Params,
    start: f64,
    measure: impl FnMut(f64, Purpose) -> Result<Measured, E>,
    progress: &mut dyn FnMut(&Step),
) -> Result<Knee, E> {
    let mut s = Search {
        slo,
        measure,
        progress,
        steps: Vec::new(),
        rates: Vec::new(),
        decided: Vec::new(),
        disturbed_in_row: 0,
        host_disturbed: false,
        rng: Xoshiro256PlusPlus::seed_from_u64(p.seed ^ 0xC0FF_EE00),
        budget: p.max_steps,
    };
    // The host watch's first look: also the curve's first point.
    let mut visits: Vec<(Visit, Vec<Histogram<u64>>)> = Vec::new();
    let reference = p.reference.map(|r| r.clamp(p.min_rate, p.max_rate));
    if let Some(r) = reference {
        let mut seen = Vec::new();
        if let Some((o, _)) = s.visit(r, Purpose::Reference, 1, &mut seen)? {
            s.decided.push((r, o));
            visits.push((look(slo, "start", &seen, &mut s.rng), seen));
        }
    }
    let mut rate = start.clamp(p.min_rate, p.max_rate);
    // The bracketing factor: squared on each move in the same direction.
    let mut factor = GROWTH;
    let mut last_move: Option<bool> = None;
    let mut step = |up: bool| {
        factor = if last_move == Some(up) {
            (factor * factor).min(MAX_FACTOR)
        } else {
            GROWTH
        };
        last_move = Some(up);
        factor
    };
    let mut same_side = (0usize, false);
    // No pass below the first rate down to the range's bottom: going up from it.
    let mut upward = false;
    let mut search_runs_at_mid = None;
    let ending: (&'static str, String) = loop {
        if s.host_disturbed || s.out_of_runs() {
            break ("imprecise", String::new());
        }
        // The host watch's middle look, once half the runs are spent.
        if let Some(r) = reference
            && visits.len() == 1
            && search_runs_at_mid.is_none()
            && s.steps.len() * 2 >= p.max_steps
        {
            search_runs_at_mid = Some(s.steps.len());
            let mut seen = Vec::new();
            if s.visit(r, Purpose::Reference, 1, &mut seen)?.is_some() {
                let v = look(slo, "middle", &seen, &mut s.rng);
                visits.push((v, seen));
            }
            continue;
        }
        let mut seen = Vec::new();
        let Some((outcome, _)) = s.visit(rate, Purpose::Search, p.runs_per_rate, &mut seen)? else {
            continue;
        };
        s.decided.push((rate, outcome));
        let moved_lo = outcome == Outcome::Pass;
        let hp = s
            .decided
            .iter()
            .filter(|(_, o)| *o == Outcome::Pass)
            .map(|&(r, _)| r)
            .fold(None, |a: Option<f64>, r| Some(a.map_or(r, |a| a.max(r))));
        let lf = s
            .decided
            .iter()
            .filter(|&&(r, o)| o.fails() && hp.is_none_or(|h| r > h))
            .map(|&(r, _)| r)
            .fold(None, |a: Option<f64>, r| Some(a.map_or(r, |a| a.min(r))));
        let ceiling = s
            .decided
            .iter()
            .filter(|(_, o)| *o == Outcome::ClientBound)
            .map(|&(r, _)| r)
            .fold(None, |a: Option<f64>, r| Some(a.map_or(r, |a| a.min(r))));
        rate = match (hp, lf) {
            (Some(l), Some(h)) => {
                if h / l - 1.0 <= p.precision {
                    break (
                        "ok",
                        format!(
                            "converged: highest pass {l:.0}, lowest fail above it {h:.0} req/s \
                             ({:.1}% apart)",
                            (h / l - 1.0) * 100.0
                        ),
                    );
                }
                let interpolated = if same_side.0 >= SAME_SIDE_LIMIT {
                    None
                } else {
                    next_rate(
                        1.0 - slo.quantile,
                        p.precision,
                        (l, s.exceed_at(l)),
                        (h, s.exceed_at(h)),
                    )
                };
                match interpolated {
                    Some(r) => {
                        same_side = if same_side.1 == moved_lo && same_side.0 > 0 {
                            (same_side.0 + 1, moved_lo)
                        } else {
                            (1, moved_lo)
                        };
                        r
                    }
                    None => {
                        same_side = (0, moved_lo);
                        (l * h).sqrt()
                    }
                }
            }
            (Some(l), None) => match ceiling {
                Some(c) if c > l => {
                    if c / l - 1.0 <= p.precision {
                        let util = client_util(&s.steps, c);
                        break (
                            "client_bound",
                            format!(
                                "the load generator was the limit at {c:.0} req/s (its CPUs \
                                 {:.0}% busy) while the server still met the SLO at {l:.0} \
                                 req/s: no knee (a figure here would be the client's); give \
                                 kvload more CPUs, the server fewer (or a CPU quota), or run \
                                 the load from another host",
                                util * 100.0
                            ),
                        );
                    }
                    (l * step(true)).min((l * c).sqrt())
                }
                _ => {
                    if l >= p.max_rate {
                        break (
                            "range_top",
                            format!(
                                "even the highest rate of the range, {:.0} req/s, meets the \
                                 SLO: the capacity is above it (widen --search-range)",
                                p.max_rate
                            ),
                        );
                    }
                    (l * step(true)).min(p.max_rate)
                }
            },
            (None, _) => {
                // No pass yet. Down from the lowest fail to the range's bottom, then up
                // from the highest until the server saturates (or the client or the
                // range stops it): only then is no rate said to meet the SLO.
                let fails: Vec<f64> = s
                    .decided
                    .iter()
                    .filter(|(_, o)| o.fails())
                    .map(|&(r, _)| r)
                    .collect();
                let lowest = fails.iter().copied().fold(f64::INFINITY, f64::min);
                let highest = fails.iter().copied().fold(0.0, f64::max);
                let top_saturated = s
                    .decided
                    .iter()
                    .any(|&(r, o)| r >= highest && o == Outcome::Saturated);
                if fails.is_empty() {
                    // Only client-bound runs so far: below the lowest.
                    let c = ceiling.expect("a rate passes, fails or is client-bound");
                    if c <= p.min_rate {
                        break (
                            "client_bound",
                            format!(
                                "the load generator was the limit even at the lowest rate of \
                                 the range, {:.0} req/s (its CPUs {:.0}% busy): no knee",
                                p.min_rate,
                                client_util(&s.steps, c) * 100.0
                            ),
                        );
                    }
                    (c / step(false)).max(p.min_rate)
                } else if !upward && lowest > p.min_rate {
                    (lowest / step(false)).max(p.min_rate)
                } else {
                    upward = true;
                    let limit = ceiling.unwrap_or(p.max_rate).min(p.max_rate);
                    if top_saturated || highest >= limit * (1.0 - p.precision) {
                        let why = if top_saturated {
                            format!("the server saturated at {highest:.0} req/s")
                        } else if ceiling.is_some() {
                            format!("the load generator's limit is {limit:.0} req/s")
                        } else {
                            "the range's top".to_string()
                        };
                        break (
                            "no_pass",
                            format!(
                                "no rate met the SLO: every rate tried from {lowest:.0} \
                                 req/s up to {highest:.0} req/s missed it ({why})"
                            ),
                        );
                    }
                    // Steps of GROWTH, never squared: a pass between two fails is what is
                    // looked for.
                    (highest * GROWTH).min(limit * (1.0 - 0.5 * p.precision))
                }
            }
        };
    };
    // The host watch's last look; a move beyond the first look's interval is looked at
    // once more before it is believed.
    let mut host_changed = None;
    if let Some(r) = reference
        && !visits.is_empty()
        && !s.host_disturbed
    {
        for when in ["end", "end, again"] {
            // The last looks may run past the budget: they are what makes a knee count.
            let mut seen = Vec::new();
            s.budget = s.budget.max(s.steps.len() + 3);
            let r_ok = s.visit(r, Purpose::Reference, 1, &mut seen)?;
            if r_ok.is_none() {
                break;
            }
            let mut v = look(
                slo,
                if when == "end" { "end" } else { "end, again" },
                &seen,
                &mut s.rng,
            );
            v.moved = moved(&visits[0].0, &v);
            let moved_now = v.moved;
            visits.push((v, seen));
            if !moved_now {
                break;
            }
            if when != "end" {
                let (a, b) = (&visits[0].0, &visits[visits.len() - 1].0);
                host_changed = Some(format!(
                    "the host changed during the search: at the reference rate {r:.0} req/s \
                     the {} was {:.0} us (95% CI {:.0} … {:.0}) at the start and {:.0} us \
                     (95% CI {:.0} … {:.0}) at the end, measured twice",
                    slo.label, a.latency_us, a.ci.0, a.ci.1, b.latency_us, b.ci.0, b.ci.1
                ));
            }
        }
        // The middle look counts when the end confirms it.
        if visits.len() >= 2 && host_changed.is_none() {
            let first = visits[0].0.clone();
            for (v, _) in visits.iter_mut().skip(1) {
                v.moved = moved(&first, v);
            }
        }
    }
    finish(s, slo, p, ending, host_changed, visits)
}

/// The percentile and interval of one look at the reference rate.
fn look(
    slo: &Slo,
    when: &'static str,
    seen: &[Histogram<u64>],
    rng: &mut Xoshiro256PlusPlus,
) -> Visit {
    let pool = Pool::of(&seen.iter().collect::<Vec<_>>());
    Visit {
        when,
        latency_us: pool.estimate(slo.quantile),
        ci: pool.interval(slo.quantile, rng),
        moved: false,
    }
}

/// Whether a look moved beyond the first one: their intervals are disjoint.
fn moved(first: &Visit, v: &Visit) -> bool {
    let (a, b) = (first.ci, v.ci);
    [a.0, a.1, b.0, b.1].iter().all(|x| x.is_finite()) && (b.0 > a.1 || b.1 < a.0)
}

fn client_util(steps: &[Step], rate: f64) -> f64 {
    steps
        .iter()
        .rev()
        .find(|s| s.rate == rate && s.outcome == Outcome::ClientBound)
        .and_then(|s| {
            s.figures
                .pointer("/client_cpu/utilization")
                .and_then(Value::as_f64)
        })
        .unwrap_or(f64::NAN)
}

/// The knee, its interval and the verdict, from everything measured.
fn finish<E, M: FnMut(f64, Purpose) -> Result<Measured, E>>(
    mut s: Search<'_, E, M>,
    slo: &Slo,
    p: &Params,
    ending: (&'static str, String),
    host_changed: Option<String>,
    visits: Vec<(Visit, Vec<Histogram<u64>>)>,
) -> Result<Knee, E> {
    let hp = s
        .decided
        .iter()
        .filter(|(_, o)| *o == Outcome::Pass)
        .map(|&(r, _)| r)
        .fold(None, |a: Option<f64>, r| Some(a.map_or(r, |a| a.max(r))));
    let lf = s
        .decided
        .iter()
        .filter(|&&(r, o)| o.fails() && hp.is_some_and(|h| r > h))
        .map(|&(r, _)| r)
        .fold(None, |a: Option<f64>, r| Some(a.map_or(r, |a| a.min(r))));
    let mut dips: Vec<f64> = s
        .decided
        .iter()
        .filter(|&&(r, o)| o.fails() && hp.is_some_and(|h| r < h))
        .map(|&(r, _)| r)
        .collect();
    dips.sort_by(f64::total_cmp);
    dips.dedup();
    let (mut verdict, mut reason) = ending;
    if s.host_disturbed {
        let (n, d) = {
            let mut d = [0usize; 3];
            let mut n = 0;
            for st in &s.steps {
                n += st.windows;
                for (a, b) in d.iter_mut().zip(st.dropped) {
                    *a += b;
                }
            }
            (n, d)
        };
        let worst = Disturbance::ALL
            .iter()
            .copied()
            .max_by_key(|x| d[x.index()])
            .expect("three kinds");
        verdict = "host_disturbed";
        reason = format!(
            "the host disturbed {DISTURBED_LIMIT} runs in a row (at most {:.0}% of their \
             windows undisturbed); {} of {n} windows were dropped, most because {}",
            MIN_GOOD_SHARE * 100.0,
            d.iter().sum::<usize>(),
            worst.says()
        );
        if worst == Disturbance::ClientLate {
            let lag = s
                .steps
                .iter()
                .filter_map(|st| {
                    st.figures
                        .pointer("/schedule_lag/p99_us")
                        .and_then(Value::as_f64)
                })
                .fold(f64::NAN, f64::min);
            reason.push_str(&format!(
                ": its send delay (p99 {lag:.0} us at best) put requests over the {:.0} us \
                 bound by itself; either its CPUs were busy or the SLO is tighter than this \
                 host can measure (a service. SLO leaves the send delay out)",
                slo.bound_us
            ));
        }
    } else if let Some(why) = host_changed {
        verdict = "host_changed";
        reason = why;
    } else if verdict == "imprecise" {
        reason = match (hp, lf) {
            (Some(l), Some(h)) => format!(
                "{} runs ran out with the bracket {l:.0}…{h:.0} req/s ({:.1}% apart, \
                 precision {:.1}%)",
                p.max_steps,
                (h / l - 1.0) * 100.0,
                p.precision * 100.0
            ),
            _ => format!(
                "{} runs ran out before a pass and a fail above it",
                p.max_steps
            ),
        };
    }
    // The curve: every rate's pooled share over the bound (1 when saturated).
    let alpha = 1.0 - slo.quantile;
    let mut pts: Vec<(f64, Pool, bool)> = s
        .rates
        .iter()
        .filter(|d| d.runs > 0 && (d.saturated() || !d.good.is_empty()))
        .map(|d| {
            (
                d.rate,
                Pool::with_bound(&d.good.iter().collect::<Vec<_>>(), slo),
                d.saturated(),
            )
        })
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let curve: Vec<(f64, f64, f64)> = pts
        .iter()
        .map(|(r, pool, sat)| {
            let n: u64 = pool.total.iter().sum();
            let e = if *sat { 1.0 } else { pool.exceed_estimate() };
            (*r, e, 0.5 / n.max(1) as f64)
        })
        .collect();
    let has_knee = matches!(verdict, "ok" | "imprecise") && hp.is_some() && lf.is_some();
    let (knee, ci) = if has_knee {
        // A rate still in doubt after its runs is decided by its percentile (`visit`),
        // which the pooled share may not follow to the letter: when the curve through the
        // shares has no crossing, the knee is the highest rate the search passed.
        let k = crossing(alpha, &curve).or(hp);
        // Every rate's share drawn from what its windows say of it (`draw_exceed`), the
        // crossing of each draw: its percentiles are the knee's interval.
        let mut boot: Vec<f64> = (0..BOOTSTRAP * 2)
            .map(|_| {
                let c: Vec<(f64, f64, f64)> = pts
                    .iter()
                    .map(|(r, pool, sat)| {
                        let n: u64 = pool.total.iter().sum();
                        let e = if *sat {
                            1.0
                        } else {
                            pool.draw_exceed(&mut s.rng)
                        };
                        (*r, e, 0.5 / n.max(1) as f64)
                    })
                    .collect();
                // A draw in which no rate meets the SLO puts the knee at or below the
                // lowest rate the search may measure.
                crossing(alpha, &c).unwrap_or(p.min_rate)
            })
            .collect();
        boot.sort_by(f64::total_cmp);
        let ci = percentiles(&boot);
        // Widened as a mean of few windows is (`small_sample_widening`), by the fewest
        // windows of the two rates that bracket the crossing.
        let n = k
            .and_then(|k| {
                let below = pts.iter().rev().find(|(r, ..)| *r <= k)?;
                let above = pts.iter().find(|(r, ..)| *r > k);
                Some(match above {
                    Some(a) if !a.2 => below.1.len().min(a.1.len()),
                    _ => below.1.len(),
                })
            })
            .unwrap_or(2);
        let w = small_sample_widening(n);
        (
            k,
            k.map(|k| {
                let lo = (k - w * (k - ci.0)).min(k).max(p.min_rate.min(k));
                (lo, (k + w * (ci.1 - k)).max(k))
            }),
        )
    } else {
        (None, None)
    };
    let reference = visits.into_iter().map(|(v, _)| v).collect();
    Ok(Knee {
        verdict,
        reason,
        knee,
        ci,
        highest_pass: hp,
        lowest_fail: lf,
        dips,
        reference,
        steps: s.steps,
    })
}

/// The next rate inside the bracket (l, h), from the shares of requests over the bound
/// measured at its ends: the rate where `alpha` lies on the line through (rate, log
/// share) — exact for a queue, whose share over a bound falls exponentially with the
/// spare capacity (a saturated end has share 1). The step is placed just below the
/// estimate when the bracket's low end is still far from it, else just above, so that the
/// estimate's two neighbours close the bracket to the precision. None (bisect) when the
/// shares give no estimate inside the bracket.
pub fn next_rate(alpha: f64, precision: f64, lo: (f64, f64), hi: (f64, f64)) -> Option<f64> {
    let ((l, el), (h, eh)) = (lo, hi);
    if !(el > 0.0 && eh > 0.0) {
        return None;
    }
    let (yl, yh, ya) = (el.ln(), eh.ln(), alpha.ln());
    if !(yl.is_finite() && yh.is_finite()) || yl >= ya || yh <= ya || yl >= yh {
        return None;
    }
    let est = l + (h - l) * (ya - yl) / (yh - yl);
    // Keep each step a real cut of the bracket: at least a fifth of the precision from
    // either end.
    let margin = 1.0 + 0.2 * precision;
    let (floor, ceil) = (l * margin, h / margin);
    if floor >= ceil {
        return None;
    }
    let below = est * (1.0 - 0.45 * precision);
    let r = if below > l * (1.0 + 0.5 * precision) {
        below
    } else {
        est * (1.0 + 0.45 * precision)
    };
    Some(r.clamp(floor, ceil))
}

/// The JSON of one run (schema `kvload/search/2`).
pub fn step_json(n: usize, s: &Step) -> Value {
    let fin = |x: f64| if x.is_finite() { json!(x) } else { Value::Null };
    let mut dropped = serde_json::Map::new();
    for d in Disturbance::ALL {
        dropped.insert(d.name().into(), json!(s.dropped[d as usize]));
    }
    json!({
        "n": n,
        "rate": s.rate,
        "purpose": s.purpose.name(),
        "outcome": s.outcome.name(),
        "doubtful": s.doubtful,
        "run": s.run,
        "repeat": s.run > 1,
        "latency_us": if s.latency_us.is_infinite() { Value::Null } else { fin(s.latency_us) },
        "ci": [fin(s.ci.0), fin(s.ci.1)],
        "exceed": fin(s.exceed),
        "exceed_ci": [fin(s.exceed_ci.0), fin(s.exceed_ci.1)],
        "run_latency_us": fin(s.run_latency_us),
        "windows": s.windows,
        "dropped": dropped,
        "figures": s.figures,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_distr::{Exp1, StandardNormal};

    fn slo(bound: f64) -> Slo {
        Slo::parse(&format!("p99<={bound}us")).unwrap()
    }

    /// A latency curve sampled in windows: each window's latencies are exponential with
    /// the p99 the curve gives at the rate, times a log-normal window factor (σ `noise`);
    /// saturated from `cap`, client-bound above `client`; `dip` adds latency below a rate
    /// (the idle path); `disturb` marks a share of the windows disturbed.
    struct Curve {
        p99: fn(f64) -> f64,
        cap: f64,
        client: f64,
        noise: f64,
        disturb: f64,
        /// Multiplies the curve from this run on (the host changing).
        shift: Option<(usize, f64)>,
        runs: usize,
        rng: Xoshiro256PlusPlus,
    }

    impl Curve {
        fn new(p99: fn(f64) -> f64, cap: f64, seed: u64) -> Curve {
            Curve {
                p99,
                cap,
                client: f64::INFINITY,
                noise: 0.1,
                disturb: 0.0,
                shift: None,
                runs: 0,
                rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            }
        }

        fn at(&mut self, r: f64) -> Result<Measured, ()> {
            self.runs += 1;
            let verdict = if r > self.client {
                RunVerdict::ClientBound
            } else if r >= self.cap {
                RunVerdict::Saturated
            } else {
                RunVerdict::Ok
            };
            let mut target = if r < self.cap { (self.p99)(r) } else { 1e6 };
            if let Some((from, f)) = self.shift
                && self.runs > from
            {
                target *= f;
            }
            let windows = (0..6)
                .map(|_| {
                    let z: f64 = StandardNormal.sample(&mut self.rng);
                    let mean = target * (self.noise * z).exp() / 100f64.ln();
                    let mut h = crate::metrics::coarse_histogram();
                    for _ in 0..1000 {
                        let x: f64 = Exp1.sample(&mut self.rng);
                        h.saturating_record((x * mean * 1000.0) as u64 + 1);
                    }
                    let disturbed =
                        (self.rng.random::<f64>() < self.disturb).then_some(Disturbance::Others);
                    WindowSample {
                        latency: h,
                        disturbed,
                        scheduled: 1000,
                        skipped: 0,
                    }
                })
                .collect();
            let util = if r > self.client { 0.97 } else { 0.5 };
            Ok(Measured {
                verdict,
                windows,
                figures: json!({"client_cpu": {"utilization": util}}),
            })
        }
    }

    /// M/M/1-like: 100 µs unloaded, rising as 1/(1 − ρ) to saturation at 40k.
    fn queue(r: f64) -> f64 {
        100.0 / (1.0 - r / 40_000.0)
    }

    fn queue_truth(bound: f64) -> f64 {
        40_000.0 * (1.0 - 100.0 / bound)
    }

    fn search(c: &mut Curve, bound: f64, p: &Params, start: f64) -> Knee {
        knee(&slo(bound), p, start, |r, _| c.at(r), &mut |_| {}).unwrap()
    }

    fn params() -> Params {
        let mut p = Params::new(1000.0, MAX_RATE);
        p.precision = 0.03;
        p
    }

    #[test]
    fn parses_slos_and_refuses_the_rest() {
        let s = Slo::parse("p99<=200us").unwrap();
        assert_eq!(
            (s.quantile, s.bound_us, s.strict, s.service),
            (0.99, 200.0, false, false)
        );
        let s = Slo::parse("service.p99.9 < 1ms").unwrap();
        assert_eq!(
            (s.quantile, s.bound_us, s.strict, s.service),
            (0.999, 1000.0, true, true)
        );
        assert_eq!(Slo::parse("p50<=150").unwrap().bound_us, 150.0);
        for bad in [
            "hit<=2",
            "p99>=200us",
            "p99<=-5us",
            "p99<=0",
            "p99<=abc",
            "p98<=1ms",
        ] {
            assert!(Slo::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_pooled_quantile_is_the_quantile_of_every_window_together() {
        let mut a = crate::metrics::coarse_histogram();
        let mut b = crate::metrics::coarse_histogram();
        let mut all = crate::metrics::coarse_histogram();
        for v in 1..=1000u64 {
            a.record(v * 1000).unwrap();
            b.record(v * 3000).unwrap();
            all.record(v * 1000).unwrap();
            all.record(v * 3000).unwrap();
        }
        let pool = Pool::of(&[&a, &b]);
        for q in [0.5, 0.9, 0.99] {
            assert_eq!(
                pool.estimate(q),
                all.value_at_quantile(q) as f64 / 1000.0,
                "q {q}"
            );
        }
        // Weights: b taken twice, a not at all, is b's own quantile.
        assert_eq!(
            pool.quantile(&[0, 2], 0.99),
            b.value_at_quantile(0.99) as f64 / 1000.0
        );
    }

    #[test]
    fn the_crossing_is_the_last_one_up() {
        // Shares over the bound (alpha 1%): too many fail low (the idle path), few in the
        // middle, too many high: the last pass and the fail above it bracket the answer,
        // interpolated in the log of the share.
        let f = 1e-6;
        let pts = [
            (2000.0, 0.05, f),
            (8000.0, 0.004, f),
            (16000.0, 0.002, f),
            (20000.0, 0.04, f),
        ];
        let k = crossing(0.01, &pts).unwrap();
        let want =
            16000.0 + 4000.0 * (0.01f64.ln() - 0.002f64.ln()) / (0.04f64.ln() - 0.002f64.ln());
        assert!((k - want).abs() < 1e-6, "{k} vs {want}");
        // A saturated end is a share of 1; a share of zero counts as its floor.
        let k = crossing(0.01, &[(1000.0, 0.0, 1e-4), (2000.0, 1.0, f)]).unwrap();
        let want = 1000.0 + 1000.0 * (0.01f64.ln() - 1e-4f64.ln()) / (0.0 - 1e-4f64.ln());
        assert!((k - want).abs() < 1e-6, "{k} vs {want}");
        assert!(crossing(0.01, &[(1000.0, 0.5, f)]).is_none());
        assert_eq!(
            crossing(0.01, &[(1000.0, 0.001, f), (2000.0, 0.002, f)]),
            Some(2000.0)
        );
    }

    #[test]
    fn a_share_over_the_bound_is_pooled_and_its_interval_holds_it() {
        let s = slo(1000.0);
        // Two windows: one with 2 of 1000 requests over 1 ms, one with 30 of 1000.
        let mut a = crate::metrics::coarse_histogram();
        let mut b = crate::metrics::coarse_histogram();
        for i in 0..1000u64 {
            a.record(if i < 2 { 5_000_000 } else { 100_000 }).unwrap();
            b.record(if i < 30 { 5_000_000 } else { 100_000 }).unwrap();
        }
        let pool = Pool::with_bound(&[&a, &b], &s);
        assert!((pool.exceed_estimate() - 0.016).abs() < 1e-12);
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        let (lo, hi) = pool.exceed_interval(&mut rng);
        assert!(lo <= 0.016 && (0.016..=1.0).contains(&hi), "{lo} {hi}");
        assert_eq!(over_bound(&s, &a), 2);
        assert_eq!(over_bound(&Slo::parse("p99<4ms").unwrap(), &b), 30);
    }

    #[test]
    fn finds_the_knee_with_an_interval_that_holds_it() {
        let truth = queue_truth(500.0);
        let (mut covered, mut errors, mut runs) = (0, Vec::new(), Vec::new());
        for seed in 0..100u64 {
            let mut c = Curve::new(queue, 40_000.0, seed);
            let mut p = params();
            p.seed = seed;
            p.reference = Some(16_000.0);
            let k = search(&mut c, 500.0, &p, 32_000.0);
            assert!(matches!(k.verdict, "ok" | "imprecise"), "{}", k.reason);
            let (est, (lo, hi)) = (k.knee.unwrap(), k.ci.unwrap());
            assert!(lo <= est && est <= hi);
            covered += (lo <= truth && truth <= hi) as usize;
            errors.push((est / truth - 1.0).abs());
            runs.push(k.steps.len());
            assert!(k.dips.is_empty() && k.reference.len() >= 2);
        }
        errors.sort_by(f64::total_cmp);
        runs.sort();
        eprintln!(
            "window noise 0.1: coverage {covered}/100, median |error| {:.3}, p90 {:.3}, median runs {}",
            errors[50], errors[90], runs[50]
        );
        assert!(covered >= 88, "{covered} of 100 intervals hold the truth");
        assert!(errors[90] < 0.05, "p90 error {}", errors[90]);
    }

    #[test]
    fn a_converged_search_always_has_a_knee_inside_its_positive_interval() {
        // Noisy windows near the SLO: the rates' pooled shares and the search's own pass
        // and fail decisions may disagree (a draw may have no crossing at all); a search
        // that decided a pass and a fail above it still says a knee, inside an interval
        // that stays at or above the lowest rate it may measure.
        // p99 on the bound itself below 30k (every rate in doubt, decided by its
        // percentile), a queue above.
        fn on_the_bound(r: f64) -> f64 {
            if r < 30_000.0 { 500.0 } else { queue(r) * 4.0 }
        }
        let mut checked = 0;
        for seed in 0..60u64 {
            let mut c = Curve::new(
                if seed % 2 == 0 { queue } else { on_the_bound },
                40_000.0,
                seed,
            );
            c.noise = 0.35;
            let mut p = params();
            p.seed = seed;
            p.reference = Some(16_000.0);
            let k = search(&mut c, 500.0, &p, 32_000.0);
            if matches!(k.verdict, "ok" | "imprecise")
                && k.highest_pass.is_some()
                && k.lowest_fail.is_some()
            {
                let est = k.knee.expect("a converged search says its knee");
                let (lo, hi) = k.ci.expect("and its interval");
                assert!(
                    p.min_rate <= lo && lo <= est && est <= hi,
                    "seed {seed}: {lo} {est} {hi}"
                );
                checked += 1;
            }
        }
        assert!(checked >= 30, "{checked} searches converged");
    }

    #[test]
    fn a_curve_that_falls_before_it_rises_is_searched_to_its_last_crossing() {
        // p99 3 ms below 10k (the idle path), 300 µs to 30k, then a queue to 40k.
        fn idle(r: f64) -> f64 {
            if r < 10_000.0 {
                3000.0
            } else {
                300.0 / (1.0 - r / 40_000.0) * 0.75
            }
        }
        let truth = 40_000.0 * (1.0 - 225.0 / 1000.0);
        for (seed, start) in [(1u64, 5_000.0), (2, 35_000.0), (3, 2_000.0)] {
            let mut c = Curve::new(idle, 40_000.0, seed);
            c.noise = 0.05;
            let mut p = params();
            p.reference = Some(start / 2.0);
            let k = search(&mut c, 1000.0, &p, start);
            assert!(matches!(k.verdict, "ok" | "imprecise"), "{}", k.reason);
            let est = k.knee.unwrap();
            assert!(
                (est / truth - 1.0).abs() < 0.05,
                "start {start}: {est} vs {truth}"
            );
            if start < 10_000.0 {
                assert!(!k.dips.is_empty(), "{:?}", k.dips);
            }
        }
    }

    #[test]
    fn no_pass_is_said_only_after_the_rates_up_to_saturation() {
        fn slow(_: f64) -> f64 {
            5000.0
        }
        let mut c = Curve::new(slow, 40_000.0, 4);
        let k = search(&mut c, 1000.0, &params(), 20_000.0);
        assert_eq!(k.verdict, "no_pass", "{}", k.reason);
        assert!(k.knee.is_none());
        assert!(k.steps.iter().any(|s| s.outcome == Outcome::Saturated));
        assert!(
            k.steps.iter().any(|s| s.rate <= 1000.0 + 1e-9),
            "down to the range's bottom"
        );
    }

    #[test]
    fn a_disturbed_host_ends_the_search_without_a_knee() {
        let mut c = Curve::new(queue, 40_000.0, 5);
        c.disturb = 0.8;
        let k = search(&mut c, 500.0, &params(), 32_000.0);
        assert_eq!(k.verdict, "host_disturbed", "{}", k.reason);
        assert!(
            k.knee.is_none() && k.reason.contains("another task"),
            "{}",
            k.reason
        );
        // A few disturbed windows are dropped and counted; the knee stands.
        let mut c = Curve::new(queue, 40_000.0, 6);
        c.disturb = 0.15;
        let k = search(&mut c, 500.0, &params(), 32_000.0);
        assert!(matches!(k.verdict, "ok" | "imprecise"), "{}", k.reason);
        assert!(k.windows().1[Disturbance::Others as usize] > 0);
    }

    #[test]
    fn a_host_that_changes_during_the_search_is_said_not_measured() {
        let mut c = Curve::new(queue, 40_000.0, 7);
        c.shift = Some((3, 3.0));
        let mut p = params();
        p.reference = Some(16_000.0);
        let k = search(&mut c, 500.0, &p, 32_000.0);
        assert_eq!(k.verdict, "host_changed", "{}", k.reason);
        assert!(k.knee.is_none());
        assert!(k.reference.iter().any(|v| v.moved));
    }

    #[test]
    fn a_client_bound_step_is_a_ceiling_or_the_end() {
        // The client cannot drive 30k; the server's knee is above it: no knee.
        let mut c = Curve::new(queue, 40_000.0, 8);
        c.client = 30_000.0;
        let k = search(&mut c, 2000.0, &params(), 36_000.0);
        assert_eq!(k.verdict, "client_bound", "{}", k.reason);
        assert!(k.knee.is_none() && k.reason.contains("97%"), "{}", k.reason);
        // The client limit above the knee: a ceiling, and the server's knee is found.
        let mut c = Curve::new(queue, 40_000.0, 9);
        c.client = 34_000.0;
        let truth = queue_truth(500.0);
        let k = search(&mut c, 500.0, &params(), 38_000.0);
        assert!(matches!(k.verdict, "ok" | "imprecise"), "{}", k.reason);
        assert!((k.knee.unwrap() / truth - 1.0).abs() < 0.05);
        assert_eq!(k.steps[0].outcome, Outcome::ClientBound);
    }

    #[test]
    fn the_range_top_is_reported() {
        let mut c = Curve::new(queue, 40_000.0, 10);
        let narrow = Params {
            min_rate: 1000.0,
            max_rate: 2000.0,
            ..params()
        };
        let k = search(&mut c, 5000.0, &narrow, 1500.0);
        assert_eq!(k.verdict, "range_top");
    }

    #[test]
    fn the_widening_is_students_t_over_the_normal() {
        // t(0.975, 5) = 2.5706, t(0.975, 11) = 2.2010, t(0.975, 29) = 2.0452.
        for (n, t) in [(6usize, 2.5706), (12, 2.2010), (30, 2.0452)] {
            let want = t / 1.959_964 * (n as f64 / (n - 1) as f64).sqrt();
            let got = small_sample_widening(n);
            assert!((got / want - 1.0).abs() < 0.003, "n {n}: {got} vs {want}");
        }
        assert_eq!(small_sample_widening(1), 1.0);
    }

    #[test]
    fn the_next_rate_interpolates_the_log_share() {
        // The log share over the bound rises linearly from 0.1% at 50k to 10% at 100k:
        // 1% is at 75k; the step goes just below it (the low end is far).
        let r = next_rate(0.01, 0.02, (50_000.0, 0.001), (100_000.0, 0.1)).unwrap();
        assert!((r / (75_000.0 * 0.991) - 1.0).abs() < 1e-9, "{r}");
        let r = next_rate(0.01, 0.02, (74_700.0, 0.0099), (100_000.0, 0.1)).unwrap();
        assert!(r > 75_000.0 && r < 76_000.0, "{r}");
        // A saturated end is a share of 1.
        assert!(next_rate(0.01, 0.02, (50_000.0, 0.001), (100_000.0, 1.0)).is_some());
        // Shares that do not straddle alpha give no estimate: bisect.
        assert!(next_rate(0.01, 0.02, (50_000.0, 0.02), (100_000.0, 0.1)).is_none());
        assert!(next_rate(0.01, 0.02, (50_000.0, f64::NAN), (100_000.0, 0.1)).is_none());
        assert!(next_rate(0.01, 0.02, (50_000.0, 0.001), (50_300.0, 0.1)).is_none());
    }
}
