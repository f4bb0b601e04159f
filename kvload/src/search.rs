//! Capacity at an SLO: the highest open-loop rate whose latency meets a bound
//! (`--search p99<=200us`), and the latency–throughput curve (`--ramp`).
//!
//! The algorithm is pure (`knee` takes a function that measures one step) so
//! that it is tested against simulated latency curves; `app` drives it with real
//! runs of the engine, one warm-up and window per step.
//!
//! Choosing the rates copes with noise:
//! - a short closed-loop burst estimates the server's peak throughput X; the
//!   first step runs at 0.8 X (or in the middle of `--search-range`);
//! - bracketing: a pass moves up by `GROWTH`, a fail down by `1/GROWTH`, until
//!   a pass and a fail are known; each further move the same way squares the
//!   factor (1.25, 1.56, 2.44, at most `MAX_FACTOR`), so that a first rate far
//!   from the knee costs a few steps, not a dozen;
//! - then, inside the bracket, interpolation: 1/latency falls about linearly
//!   with the rate on a queue's curve (latency ~ 1/(1 − ρ)), so the line through
//!   the bracket's ends estimates where the bound is crossed, and the next step is
//!   placed just below that estimate (or just above it once the low end is near),
//!   so that two steps can close the bracket; bisection at the geometric mean
//!   when the ends give no estimate or interpolation moved the same end twice in
//!   a row; until the highest pass and the lowest fail are within the precision
//!   (default 2%);
//! - a step in doubt is measured again, and a third time when the two runs
//!   disagree (the majority decides): a pass within one noise unit of the bound
//!   (in log latency), any fail the server was not saturated for (a stall
//!   inflates a window's tail to the stall's length whatever the rate: false
//!   fails are the common error), or an answer that contradicts the bracket (a
//!   fail at or below the highest pass, a pass at or above the lowest fail); a
//!   contradiction the majority confirms replaces the bracket's end it
//!   contradicts. The noise unit starts at ln 1.25 and is learned from the
//!   pairs of runs at one rate (the variance of their log difference is 2σ²;
//!   the prior counts as one pair), so a quiet server is not measured twice as
//!   often as a noisy one. A step whose latency is so close to the bound that,
//!   on the bracket's slope, it lies within half the precision of the knee is
//!   not measured again: either answer moves the knee by less than the
//!   precision;
//! - a saturated step (the schedule lag grows: the server cannot keep up) is a
//!   fail; a client-bound step is a ceiling (the client cannot drive that
//!   rate): the search goes on below it, and when the server still meets the
//!   SLO just below the ceiling the search ends without a knee (verdict
//!   client_bound): the figure would be the client's, not the server's.

use serde_json::{Value, json};

/// A pass moves the next rate up by this factor, a fail down by its inverse.
pub const GROWTH: f64 = 1.25;
/// The largest bracketing move.
pub const MAX_FACTOR: f64 = 4.0;
/// The run-to-run noise of a step's log latency assumed before any step was measured
/// twice (ln 1.25: a pass within 20% of the bound is in doubt). Each pair of runs at one
/// rate refines it (`Noise`).
pub const PRIOR_NOISE: f64 = 0.223;
/// A pass is in doubt within this many noise units of the bound (in log latency).
pub const PASS_DOUBT: f64 = 1.0;
/// The steepest latency curve assumed (d ln latency / d ln rate) when a step near the
/// bound is judged not worth a second run: an M/M/1 queue at 90% load has 9, and a stall
/// at one end of the bracket would otherwise make the curve look steeper than it is.
pub const MAX_ELASTICITY: f64 = 10.0;
/// After this many interpolated steps in a row that moved the same end of the
/// bracket, the next step bisects (the interpolation is then misled by the curve's
/// shape or by noise; bisection still halves the bracket).
pub const SAME_SIDE_LIMIT: usize = 2;
/// The search starts at this fraction of the closed-loop burst's throughput.
pub const START_FRACTION: f64 = 0.8;
/// Without a range, the lowest rate searched is this fraction of the burst's throughput.
pub const LOW_FRACTION: f64 = 0.1;
/// kvload's largest open-loop rate, req/s.
pub const MAX_RATE: f64 = 1e7;
pub const DEFAULT_PRECISION: f64 = 0.02;
pub const DEFAULT_MAX_STEPS: usize = 20;

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
        let (num, scale) = if let Some(n) = right.strip_suffix("us") {
            (n, 1.0)
        } else if let Some(n) = right.strip_suffix("µs") {
            (n, 1.0)
        } else if let Some(n) = right.strip_suffix("ms") {
            (n, 1000.0)
        } else {
            (right, 1.0)
        };
        let v: f64 = num
            .parse()
            .map_err(|_| format!("'{right}' is not a latency bound such as 200us or 1ms"))?;
        let bound_us = v * scale;
        if !bound_us.is_finite() || bound_us <= 0.0 {
            return Err(format!("the bound {right} must be a positive latency"));
        }
        if bound_us > 60e6 {
            return Err(format!(
                "the bound {right} is above 60 s: not a latency SLO"
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

/// One run at one rate.
#[derive(Debug, Clone)]
pub struct Measured {
    pub verdict: RunVerdict,
    /// The SLO's latency (µs) in this run.
    pub latency_us: f64,
    /// Every figure of the run, for the JSON.
    pub figures: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail,
    Saturated,
    ClientBound,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Saturated => "saturated",
            Outcome::ClientBound => "client_bound",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Step {
    pub rate: f64,
    pub outcome: Outcome,
    pub latency_us: f64,
    /// A borderline step measured again (this is the second run).
    pub repeat: bool,
    pub figures: Value,
}

#[derive(Debug, Clone)]
pub struct Params {
    pub precision: f64,
    pub max_steps: usize,
    pub min_rate: f64,
    pub max_rate: f64,
}

/// The search's answer.
#[derive(Debug, Clone)]
pub struct Knee {
    /// ok (converged), imprecise (steps ran out before the precision), no_pass
    /// (even the lowest rate fails), range_top (even the highest rate passes),
    /// client_bound (the client was the limit: no knee).
    pub verdict: &'static str,
    pub reason: String,
    pub knee: Option<f64>,
    pub highest_pass: Option<f64>,
    pub lowest_fail: Option<f64>,
    pub steps: Vec<Step>,
}

fn classify(slo: &Slo, m: &Measured) -> Outcome {
    match m.verdict {
        RunVerdict::ClientBound => Outcome::ClientBound,
        RunVerdict::Saturated => Outcome::Saturated,
        RunVerdict::Ok if slo.meets(m.latency_us) => Outcome::Pass,
        RunVerdict::Ok => Outcome::Fail,
    }
}

/// The knee of the latency–rate curve that `measure` samples, starting at
/// `start` req/s. `measure` runs one open-loop step (its own warm-up and
/// window) at the rate it is given.
pub fn knee<E>(
    slo: &Slo,
    p: &Params,
    start: f64,
    mut measure: impl FnMut(f64) -> Result<Measured, E>,
) -> Result<Knee, E> {
    let mut steps: Vec<Step> = Vec::new();
    let (mut lo, mut hi): (Option<f64>, Option<f64>) = (None, None);
    // The latency measured at the bracket's ends (infinite for a saturated fail), for the
    // interpolation, and how many interpolated steps in a row moved the same end.
    let (mut lo_lat, mut hi_lat) = (f64::NAN, f64::NAN);
    let mut same_side = (0usize, false);
    let mut noise = Noise::default();
    let mut rate = start.clamp(p.min_rate, p.max_rate);
    // The lowest rate the client could not drive (a client-bound step), and its CPU.
    let mut ceiling: Option<f64> = None;
    let mut ceiling_util = f64::NAN;
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
    let done = |verdict: &'static str, reason: String, knee: Option<f64>, lo, hi, steps| Knee {
        verdict,
        reason,
        knee,
        highest_pass: lo,
        lowest_fail: hi,
        steps,
    };
    loop {
        if steps.len() >= p.max_steps {
            return Ok(match (lo, hi) {
                (Some(l), Some(h)) => done(
                    "imprecise",
                    format!(
                        "{} steps ran out with the bracket {:.0}…{:.0} req/s ({:.1}% apart, \
                         precision {:.1}%)",
                        p.max_steps,
                        l,
                        h,
                        (h / l - 1.0) * 100.0,
                        p.precision * 100.0
                    ),
                    Some(l),
                    lo,
                    hi,
                    steps,
                ),
                _ => done(
                    "imprecise",
                    format!("{} steps ran out before a pass and a fail", p.max_steps),
                    None,
                    lo,
                    hi,
                    steps,
                ),
            });
        }
        // One run, and up to two more when its answer is in doubt: a borderline latency,
        // or an answer that contradicts the bracket (a fail at or below the highest pass,
        // a pass at or above the lowest fail). Two runs that agree decide; otherwise the
        // third is the majority. A client-bound run ends the search.
        let mut votes: Vec<Outcome> = Vec::with_capacity(3);
        let outcome = loop {
            let m = measure(rate)?;
            let o = classify(slo, &m);
            // In doubt: a latency near the bound, or any fail the server was not
            // saturated for: a stall inflates one window's tail far more often than
            // luck deflates it, and a false fail would trap the search below the knee.
            // How steeply latency rises with the rate across the bracket (d ln latency /
            // d ln rate): a step whose latency is this close to the bound is within half
            // the precision of the knee, and either answer there moves the knee by less
            // than the precision, so it is not worth a second run.
            let elasticity = match (lo, hi) {
                (Some(l), Some(h)) if h > l && lo_lat > 0.0 && hi_lat.is_finite() => {
                    ((hi_lat / lo_lat).ln() / (h / l).ln()).min(MAX_ELASTICITY)
                }
                _ => f64::NAN,
            };
            let doubt = m.verdict == RunVerdict::Ok && {
                let gap = (m.latency_us / slo.bound_us).ln();
                let sigma = noise.sigma();
                if elasticity > 0.0 && gap.abs() < 0.5 * elasticity * p.precision {
                    false
                } else if slo.meets(m.latency_us) {
                    -gap <= PASS_DOUBT * sigma
                } else {
                    // Any fail the server was not saturated for: a stall inflates a
                    // window's tail to the stall's length (10–20 ms on a loaded VM)
                    // whatever the rate, far more often than luck deflates it, and a
                    // false fail would trap the search below the knee.
                    true
                }
            };
            if let Some(prev) = steps.last()
                && !votes.is_empty()
                && matches!(prev.outcome, Outcome::Pass | Outcome::Fail)
                && m.verdict == RunVerdict::Ok
            {
                noise.pair(prev.latency_us, m.latency_us);
            }
            steps.push(Step {
                rate,
                outcome: o,
                latency_us: m.latency_us,
                repeat: !votes.is_empty(),
                figures: m.figures,
            });
            if o == Outcome::ClientBound {
                break o;
            }
            votes.push(o);
            let passes = votes.iter().filter(|&&v| v == Outcome::Pass).count();
            let fails = votes.len() - passes;
            let now = if passes > fails {
                Outcome::Pass
            } else if fails > passes {
                // A saturated run among the fails is said as such.
                *votes
                    .iter()
                    .rev()
                    .find(|&&v| v != Outcome::Pass)
                    .expect("a fail")
            } else {
                o
            };
            let contradicts = match now {
                Outcome::Pass => hi.is_some_and(|h| rate >= h),
                _ => lo.is_some_and(|l| rate <= l),
            };
            let decided = match votes.len() {
                1 => !(doubt || contradicts),
                2 => passes != fails,
                _ => true,
            };
            if decided || steps.len() >= p.max_steps {
                break now;
            }
        };
        // The latency at this rate: the median of its runs that agree with the decision.
        let at_rate: Vec<f64> = steps
            .iter()
            .rev()
            .take_while(|s| s.rate == rate)
            .filter(|s| (s.outcome == Outcome::Pass) == (outcome == Outcome::Pass))
            .map(|s| {
                if s.outcome == Outcome::Saturated {
                    f64::INFINITY
                } else {
                    s.latency_us
                }
            })
            .collect();
        let rate_lat = median(&at_rate);
        let moved_lo = outcome == Outcome::Pass;
        match outcome {
            Outcome::ClientBound => {
                // The client cannot drive this rate: it is a ceiling of the search, not a
                // fail of the server. A fail at or above it may be the client's: dropped.
                ceiling = Some(ceiling.map_or(rate, |c: f64| c.min(rate)));
                ceiling_util = steps
                    .last()
                    .and_then(|s| {
                        s.figures
                            .pointer("/client_cpu/utilization")
                            .and_then(Value::as_f64)
                    })
                    .unwrap_or(f64::NAN);
                if hi.is_some_and(|h| h >= rate) {
                    hi = None;
                }
                if lo.is_some_and(|l| l >= rate) {
                    lo = None;
                }
            }
            Outcome::Pass => {
                // A confirmed pass at or above the lowest fail: that fail was the noise.
                if hi.is_some_and(|h| rate >= h) {
                    hi = None;
                }
                if lo.is_none_or(|l| rate >= l) {
                    lo = Some(rate);
                    lo_lat = rate_lat;
                }
            }
            Outcome::Fail | Outcome::Saturated => {
                // A confirmed fail at or below the highest pass: that pass was the noise.
                if lo.is_some_and(|l| rate <= l) {
                    lo = None;
                }
                if hi.is_none_or(|h| rate <= h) {
                    hi = Some(rate);
                    hi_lat = rate_lat;
                }
            }
        }
        rate = match (lo, hi) {
            (Some(l), Some(h)) => {
                if h / l - 1.0 <= p.precision {
                    return Ok(done(
                        "ok",
                        format!(
                            "converged: highest pass {l:.0}, lowest fail {h:.0} req/s \
                             ({:.1}% apart)",
                            (h / l - 1.0) * 100.0
                        ),
                        Some(l),
                        lo,
                        hi,
                        steps,
                    ));
                }
                let interpolated = if same_side.0 >= SAME_SIDE_LIMIT {
                    None
                } else {
                    next_rate(slo.bound_us, p.precision, (l, lo_lat), (h, hi_lat))
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
            (Some(l), None) if ceiling.is_some() => {
                let c = ceiling.expect("a ceiling");
                if c / l - 1.0 <= p.precision {
                    return Ok(done(
                        "client_bound",
                        format!(
                            "the load generator was the limit at {c:.0} req/s (its CPUs \
                             {:.0}% busy) while the server still met the SLO at {l:.0} \
                             req/s: no knee (a figure here would be the client's); give \
                             kvload more CPUs, the server fewer (or a CPU quota), or run the \
                             load from another host",
                            ceiling_util * 100.0
                        ),
                        None,
                        lo,
                        hi,
                        steps,
                    ));
                }
                (l * step(true)).min((l * c).sqrt())
            }
            (Some(l), None) => {
                if l >= p.max_rate {
                    return Ok(done(
                        "range_top",
                        format!(
                            "even the highest rate of the range, {:.0} req/s, meets the SLO: \
                             the capacity is above it (widen --search-range)",
                            p.max_rate
                        ),
                        None,
                        lo,
                        hi,
                        steps,
                    ));
                }
                (l * step(true)).min(p.max_rate)
            }
            (None, Some(h)) => {
                if h <= p.min_rate {
                    return Ok(done(
                        "no_pass",
                        format!(
                            "even the lowest rate of the range, {:.0} req/s, misses the SLO",
                            p.min_rate
                        ),
                        None,
                        lo,
                        hi,
                        steps,
                    ));
                }
                (h / step(false)).max(p.min_rate)
            }
            (None, None) => {
                // Only client-bound steps so far: below the lowest.
                let c = ceiling.expect("a step passes, fails or is client-bound");
                if c <= p.min_rate {
                    return Ok(done(
                        "client_bound",
                        format!(
                            "the load generator was the limit even at the lowest rate of the \
                             range, {:.0} req/s (its CPUs {:.0}% busy): no knee",
                            p.min_rate,
                            ceiling_util * 100.0
                        ),
                        None,
                        lo,
                        hi,
                        steps,
                    ));
                }
                (c / step(false)).max(p.min_rate)
            }
        };
    }
}

/// The run-to-run noise of a step's log latency, from the pairs of runs at one rate:
/// the difference of two runs' log latencies has variance 2σ²; the prior counts as one
/// pair.
#[derive(Debug, Clone, Copy)]
struct Noise {
    sum_sq: f64,
    pairs: f64,
}

impl Default for Noise {
    fn default() -> Self {
        Noise {
            sum_sq: PRIOR_NOISE * PRIOR_NOISE,
            pairs: 1.0,
        }
    }
}

impl Noise {
    fn pair(&mut self, a: f64, b: f64) {
        let d = (a / b).ln();
        if d.is_finite() {
            self.sum_sq += d * d / 2.0;
            self.pairs += 1.0;
        }
    }

    fn sigma(&self) -> f64 {
        (self.sum_sq / self.pairs).sqrt()
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

/// The next rate inside the bracket (l, h), from the latencies measured at its ends:
/// the rate where the bound lies on the line through (rate, 1/latency) — a queue's
/// latency grows as 1/(1 − ρ), so its inverse falls about linearly with the rate and
/// reaches zero at saturation (a saturated end has 1/latency = 0). The step is placed
/// just below the estimate when the bracket's low end is still far from it, else just
/// above, so that the estimate's two neighbours close the bracket to the precision.
/// None (bisect) when the latencies give no estimate inside the bracket.
pub fn next_rate(bound: f64, precision: f64, lo: (f64, f64), hi: (f64, f64)) -> Option<f64> {
    let ((l, ll), (h, hl)) = (lo, hi);
    let (yl, yh, yb) = (1.0 / ll, 1.0 / hl, 1.0 / bound);
    if !(yl.is_finite() && yh.is_finite()) || yl <= yb || yh >= yb || yl <= yh {
        return None;
    }
    let est = l + (h - l) * (yl - yb) / (yl - yh);
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

/// The JSON of one step (schema `kvload/search/1`).
pub fn step_json(n: usize, s: &Step) -> Value {
    json!({
        "n": n,
        "rate": s.rate,
        "outcome": s.outcome.name(),
        "latency_us": s.latency_us,
        "repeat": s.repeat,
        "figures": s.figures,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slo(bound: f64) -> Slo {
        Slo::parse(&format!("p99<={bound}us")).unwrap()
    }

    /// An M/M/1-like curve: latency = base / (1 - rate/cap), saturated at cap,
    /// with multiplicative noise from a small deterministic generator; the client
    /// is the limit above `client`.
    struct Curve {
        base: f64,
        cap: f64,
        client: f64,
        noise: f64,
        state: u64,
    }

    impl Curve {
        fn jitter(&mut self) -> f64 {
            self.state = self
                .state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (self.state >> 11) as f64 / (1u64 << 53) as f64;
            1.0 + self.noise * (2.0 * u - 1.0)
        }
        fn jitter_unit(&mut self) -> f64 {
            self.state = self
                .state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.state >> 11) as f64 / (1u64 << 53) as f64
        }
        fn at(&mut self, r: f64) -> Result<Measured, ()> {
            let verdict = if r > self.client {
                RunVerdict::ClientBound
            } else if r >= self.cap {
                RunVerdict::Saturated
            } else {
                RunVerdict::Ok
            };
            let lat = if r < self.cap {
                self.base / (1.0 - r / self.cap) * self.jitter()
            } else {
                1e9
            };
            Ok(Measured {
                verdict,
                latency_us: lat,
                figures: json!({"client_cpu": {"utilization": if r > self.client { 0.97 } else { 0.5 }}}),
            })
        }
        /// The rate at which the noise-free latency equals `bound`.
        fn truth(&self, bound: f64) -> f64 {
            self.cap * (1.0 - self.base / bound)
        }
    }

    /// The median and p90 of the searches' |relative error|, printed with their median
    /// runs (a search without a knee counts as an error of 1).
    fn error_quantiles(what: &str, mut errors: Vec<f64>, mut runs: Vec<usize>) -> (f64, f64) {
        errors.sort_by(f64::total_cmp);
        runs.sort();
        let (p50, p90) = (errors[errors.len() / 2], errors[errors.len() * 9 / 10]);
        eprintln!(
            "{what}: median |error| {p50:.3}, p90 {p90:.3}, median runs {}",
            runs[runs.len() / 2]
        );
        (p50, p90)
    }

    fn params() -> Params {
        Params {
            precision: 0.02,
            max_steps: DEFAULT_MAX_STEPS,
            min_rate: 1000.0,
            max_rate: MAX_RATE,
        }
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
    fn finds_the_knee_within_the_precision_in_at_most_eight_steps() {
        let mut worst_steps = 0;
        for seed in 0..200u64 {
            let mut c = Curve {
                base: 40.0,
                cap: 150_000.0,
                client: 1e9,
                noise: 0.03,
                state: seed,
            };
            let truth = c.truth(200.0);
            let k = knee(&slo(200.0), &params(), 0.8 * c.cap, |r| c.at(r)).unwrap();
            assert_eq!(k.verdict, "ok", "{}", k.reason);
            let est = k.knee.unwrap();
            // The bracket is within 2%, and the noise moves the knee by a few %.
            assert!(
                (est / truth - 1.0).abs() < 0.06,
                "seed {seed}: {est} vs {truth}"
            );
            let (l, h) = (k.highest_pass.unwrap(), k.lowest_fail.unwrap());
            assert!(h / l - 1.0 <= 0.02 + 1e-12);
            worst_steps = worst_steps.max(k.steps.iter().filter(|s| !s.repeat).count());
        }
        assert!(worst_steps <= 8, "{worst_steps} rates");
    }

    #[test]
    fn heavy_noise_is_voted_down_not_followed() {
        // p99 that moves by a factor of up to 1.6 either way from run to run (as near the
        // knee on a loaded 2-CPU VM): the knee lands near the median curve's crossing.
        let mut errors = Vec::new();
        let mut steps = Vec::new();
        for seed in 0..400u64 {
            let mut c = Curve {
                base: 100.0,
                cap: 40_000.0,
                client: 1e9,
                noise: 0.0,
                state: seed,
            };
            let truth = c.truth(500.0);
            let k = knee(&slo(500.0), &params(), 0.8 * c.cap, |r| {
                let mut m = c.at(r)?;
                let u = c.jitter_unit();
                m.latency_us *= (0.47 * (2.0 * u - 1.0)).exp();
                Ok::<Measured, ()>(m)
            })
            .unwrap();
            errors.push(k.knee.map_or(1.0, |est| (est / truth - 1.0).abs()));
            steps.push(k.steps.len());
        }
        let (p50, p90) = error_quantiles("heavy noise", errors, steps);
        assert!(p50 < 0.05, "median error {p50}");
        assert!(p90 < 0.12, "p90 error {p90}");
    }

    #[test]
    fn noise_free_curves_converge_on_the_truth() {
        for (base, bound) in [(20.0, 100.0), (50.0, 200.0), (90.0, 100.0), (5.0, 1000.0)] {
            let mut c = Curve {
                base,
                cap: 100_000.0,
                client: 1e9,
                noise: 0.0,
                state: 1,
            };
            let truth = c.truth(bound);
            // 80k is up to 8x from the knee, and where the unloaded latency is 90% of
            // the bound every step is borderline (measured twice): more steps than
            // the default.
            let p = Params {
                max_steps: 30,
                ..params()
            };
            let k = knee(&slo(bound), &p, 80_000.0, |r| c.at(r)).unwrap();
            assert_eq!(k.verdict, "ok", "{}", k.reason);
            let (l, h) = (k.highest_pass.unwrap(), k.lowest_fail.unwrap());
            assert!(l <= truth && truth <= h, "{l} {truth} {h}");
            assert!(h / l - 1.0 <= 0.02 + 1e-12);
        }
    }

    #[test]
    fn the_next_rate_interpolates_the_inverse_latency() {
        // 1/latency falls linearly from 1/200 at 50k to 1/800 at 100k: the bound 400 µs
        // is at 83.3k; the step goes just below it (the low end is far), then, with
        // the low end near the estimate, just above it.
        let r = next_rate(400.0, 0.02, (50_000.0, 200.0), (100_000.0, 800.0)).unwrap();
        let est = 50_000.0 + 50_000.0 * (1.0 / 200.0 - 1.0 / 400.0) / (1.0 / 200.0 - 1.0 / 800.0);
        assert!((r / (est * 0.991) - 1.0).abs() < 1e-9, "{r} vs {est}");
        let r = next_rate(400.0, 0.02, (est * 0.995, 399.0), (100_000.0, 800.0)).unwrap();
        assert!(r > est && r < est * 1.01, "{r}");
        // A saturated end (infinite latency) is 1/latency = 0.
        assert!(next_rate(400.0, 0.02, (50_000.0, 200.0), (100_000.0, f64::INFINITY)).is_some());
        // Latencies that do not straddle the bound give no estimate: bisect.
        assert!(next_rate(400.0, 0.02, (50_000.0, 500.0), (100_000.0, 800.0)).is_none());
        assert!(next_rate(400.0, 0.02, (50_000.0, f64::NAN), (100_000.0, 800.0)).is_none());
        // A bracket already within the precision's margins gives none either.
        assert!(next_rate(400.0, 0.02, (50_000.0, 200.0), (50_300.0, 800.0)).is_none());
    }

    #[test]
    fn a_borderline_step_is_measured_again() {
        let mut c = Curve {
            base: 40.0,
            cap: 100_000.0,
            client: 1e9,
            noise: 0.0,
            state: 3,
        };
        // Start right at the knee: latency equals the bound.
        let truth = c.truth(200.0);
        let k = knee(&slo(200.0), &params(), truth, |r| c.at(r)).unwrap();
        assert!(k.steps[1].repeat && k.steps[1].rate == k.steps[0].rate);
    }

    #[test]
    fn stalls_below_the_knee_are_voted_down() {
        // One run in five stalls (p99 15 ms) whatever the rate: false fails below the
        // knee, far more common than false passes. Each unsaturated fail is measured
        // again and the majority decides, so the knee stays near the truth (a false fail
        // survives its votes when a second run stalls too: the tail of the errors).
        let (mut runs, mut errors) = (Vec::new(), Vec::new());
        for seed in 0..200u64 {
            let mut c = Curve {
                base: 40.0,
                cap: 100_000.0,
                client: 1e9,
                noise: 0.02,
                state: seed,
            };
            let truth = c.truth(200.0);
            let k = knee(&slo(200.0), &params(), 0.6 * c.cap, |r| {
                let mut m = c.at(r)?;
                if m.verdict == RunVerdict::Ok && c.jitter_unit() < 0.2 {
                    m.latency_us = 15_000.0;
                }
                Ok::<Measured, ()>(m)
            })
            .unwrap();
            runs.push(k.steps.len());
            errors.push(k.knee.map_or(1.0, |est| (est / truth - 1.0).abs()));
        }
        let (p50, p90) = error_quantiles("stalls", errors, runs);
        assert!(p50 < 0.02 && p90 < 0.15, "median error {p50}, p90 {p90}");
    }

    #[test]
    fn a_client_bound_step_gives_no_knee() {
        let mut c = Curve {
            base: 40.0,
            cap: 200_000.0,
            client: 120_000.0,
            noise: 0.0,
            state: 1,
        };
        let k = knee(&slo(500.0), &params(), 100_000.0, |r| c.at(r)).unwrap();
        assert_eq!(k.verdict, "client_bound");
        assert!(k.knee.is_none() && k.reason.contains("97%"), "{}", k.reason);
    }

    #[test]
    fn a_client_limit_above_the_knee_is_a_ceiling_not_the_answer() {
        // The client cannot drive 90k, the server's knee is at 80k: the search starts
        // client-bound at 120k, goes below, and finds the server's knee.
        let mut c = Curve {
            base: 40.0,
            cap: 100_000.0,
            client: 90_000.0,
            noise: 0.0,
            state: 1,
        };
        let truth = c.truth(200.0);
        let k = knee(&slo(200.0), &params(), 120_000.0, |r| c.at(r)).unwrap();
        assert_eq!(k.verdict, "ok", "{}", k.reason);
        let est = k.knee.unwrap();
        assert!(est <= truth && est > 0.97 * truth, "{est} vs {truth}");
        assert_eq!(k.steps[0].outcome, Outcome::ClientBound);
    }

    #[test]
    fn saturation_is_a_fail_and_the_range_ends_are_reported() {
        let mut c = Curve {
            base: 1.0,
            cap: 50_000.0,
            client: 1e9,
            noise: 0.0,
            state: 1,
        };
        // A bound so loose that only saturation fails: the knee is just below the cap.
        let k = knee(&slo(1e6), &params(), 40_000.0, |r| c.at(r)).unwrap();
        assert_eq!(k.verdict, "ok");
        assert!(k.steps.iter().any(|s| s.outcome == Outcome::Saturated));
        assert!(k.knee.unwrap() < 50_000.0 && k.knee.unwrap() > 48_000.0);
        let narrow = Params {
            min_rate: 1000.0,
            max_rate: 2000.0,
            ..params()
        };
        let k = knee(&slo(1e6), &narrow, 1500.0, |r| c.at(r)).unwrap();
        assert_eq!(k.verdict, "range_top");
        let k = knee(&slo(0.5), &params(), 40_000.0, |r| c.at(r)).unwrap();
        assert_eq!(k.verdict, "no_pass");
    }
}
