//! `--search` and `--ramp`: runs open-loop steps with the engine, one warm-up
//! and window each (cut into `--window` windows), and writes the `kvload/search/2`
//! document.
//!
//! A step's rate is the window's mean offered rate: phases from a workload
//! file keep their proportions (each phase's rate is scaled by the same
//! factor). The keyspace is preloaded once, before the first step.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Instant;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde_json::{Value, json};

use crate::Error;
use crate::config::spec::parse_rate;
use crate::config::{Cli, Config, Mode, phase_spans};
use crate::engine;
use crate::output::{Report, Verdict, json as doc};
use crate::search::{
    self, Knee, Measured, Params, Purpose, RunVerdict, Slo, Step, WindowFacts, WindowSample,
};

/// Requests in flight across the connections in the closed-loop burst, at least.
pub const BURST_DEPTH: usize = 64;

/// The windows a step is cut into when --window is not given.
pub const DEFAULT_WINDOW_NS: u64 = 250_000_000;

/// What the command line asked for beyond one run.
#[derive(Debug, Clone)]
pub enum Plan {
    Search {
        slo: Slo,
        params: Params,
        /// The first step's rate (--rate); None: estimated by a closed-loop burst.
        start: Option<f64>,
        /// Whether --search-range was given (its geometric middle is the start).
        ranged: bool,
        /// --reference: Some(None) turns the host watch off; None: half the first rate.
        reference: Option<Option<f64>>,
    },
    Ramp {
        rates: Vec<f64>,
        shuffled: bool,
        /// --ramp-slo: each step judged by its windows against it.
        slo: Option<Slo>,
    },
    /// --profile: the host's floor, the server's peak and the client's cost.
    Profile { slo: Slo, floor_rate: f64 },
}

/// The floor's rate when --profile is given no --rate, req/s.
pub const PROFILE_FLOOR_RATE: f64 = 1000.0;
/// The floor is measured this long (at least), the half-peak step as long as --duration.
pub const PROFILE_FLOOR_NS: u64 = 3_000_000_000;

fn usage<T>(m: impl Into<String>) -> Result<T, Error> {
    Err(Error::usage(m))
}

fn parse_precision(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(n) => n.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("'{s}' is not a precision such as 2% or 0.02"))?;
    if !(0.001..=0.5).contains(&v) {
        return Err(format!("{s} is outside 0.1%..50%"));
    }
    Ok(v)
}

impl Plan {
    /// The plan the flags ask for, None for a single run. Errors name the flag.
    pub fn from_cli(cli: &Cli) -> Result<Option<Plan>, Error> {
        let only_search = [
            ("--precision", cli.precision.is_some()),
            ("--search-range", cli.search_range.is_some()),
            ("--max-steps", cli.max_steps.is_some()),
        ];
        let only_search = [
            only_search[0],
            only_search[1],
            only_search[2],
            ("--runs-per-rate", cli.runs_per_rate.is_some()),
            ("--reference", cli.reference.is_some()),
        ];
        if cli.ramp.is_none() && cli.ramp_slo.is_some() {
            return usage("--ramp-slo needs --ramp");
        }
        if cli.search.is_none()
            && let Some((flag, _)) = only_search.iter().find(|(_, given)| *given)
        {
            return usage(format!("{flag} needs --search"));
        }
        if [
            cli.search.is_some(),
            cli.ramp.is_some(),
            cli.profile.is_some(),
        ]
        .iter()
        .filter(|&&x| x)
        .count()
            > 1
        {
            return usage("give one of --search, --ramp and --profile");
        }
        if let Some(text) = &cli.profile {
            let slo = Slo::parse(text).map_err(|e| Error::usage(format!("--profile: {e}")))?;
            let floor_rate = cli.rate.unwrap_or(PROFILE_FLOOR_RATE);
            if cli.dump_arrivals.is_some() {
                return usage("--dump-arrivals records one run: not with --profile");
            }
            return Ok(Some(Plan::Profile { slo, floor_rate }));
        }
        if (cli.search.is_some() || cli.ramp.is_some()) && cli.dump_arrivals.is_some() {
            return usage("--dump-arrivals records one run: not with --search or --ramp");
        }
        if let Some(text) = &cli.search {
            let slo = Slo::parse(text).map_err(|e| Error::usage(format!("--search: {e}")))?;
            let precision = match &cli.precision {
                Some(p) => {
                    parse_precision(p).map_err(|e| Error::usage(format!("--precision: {e}")))?
                }
                None => search::DEFAULT_PRECISION,
            };
            let (min_rate, max_rate) = match &cli.search_range {
                Some(r) => {
                    let bad = || {
                        Error::usage(format!(
                            "--search-range: '{r}' is not LOW:HIGH, e.g. 10k:300k"
                        ))
                    };
                    let (lo, hi) = r.split_once(':').ok_or_else(bad)?;
                    let lo =
                        parse_rate(lo).map_err(|e| Error::usage(format!("--search-range: {e}")))?;
                    let hi =
                        parse_rate(hi).map_err(|e| Error::usage(format!("--search-range: {e}")))?;
                    if hi <= lo * (1.0 + precision) {
                        return usage(format!(
                            "--search-range: {r} is narrower than the precision; HIGH must exceed LOW"
                        ));
                    }
                    if hi > search::MAX_RATE {
                        return usage("--search-range: HIGH is above 10M requests/s");
                    }
                    (lo, hi)
                }
                None => (1000.0, search::MAX_RATE),
            };
            let max_steps = cli.max_steps.unwrap_or(search::DEFAULT_MAX_STEPS);
            if !(2..=100).contains(&max_steps) {
                return usage("--max-steps must be between 2 and 100");
            }
            let runs_per_rate = cli.runs_per_rate.unwrap_or(search::DEFAULT_RUNS_PER_RATE);
            if !(1..=10).contains(&runs_per_rate) {
                return usage("--runs-per-rate must be between 1 and 10");
            }
            let reference = match cli.reference.as_deref() {
                None => None,
                Some("off") => Some(None),
                Some(r) => {
                    let v = parse_rate(r).map_err(|e| Error::usage(format!("--reference: {e}")))?;
                    if !(min_rate..=max_rate).contains(&v) {
                        return usage(format!("--reference {r} is outside --search-range"));
                    }
                    Some(Some(v))
                }
            };
            if let Some(r) = cli.rate
                && !(min_rate..=max_rate).contains(&r)
            {
                return usage(format!(
                    "--rate {r} (the first step) is outside --search-range"
                ));
            }
            return Ok(Some(Plan::Search {
                slo,
                params: Params {
                    precision,
                    max_steps,
                    min_rate,
                    max_rate,
                    runs_per_rate,
                    reference: None,
                    seed: cli.seed.unwrap_or(1),
                },
                start: cli.rate,
                ranged: cli.search_range.is_some(),
                reference,
            }));
        }
        if let Some(text) = &cli.ramp {
            let bad = || {
                Error::usage(format!(
                    "--ramp: '{text}' is not START:END:STEP[:shuffle], e.g. 20k:200k:20k"
                ))
            };
            let parts: Vec<&str> = text.split(':').collect();
            let shuffled = match parts.len() {
                3 => false,
                4 if parts[3] == "shuffle" => true,
                _ => return Err(bad()),
            };
            let r = |s: &str| parse_rate(s).map_err(|e| Error::usage(format!("--ramp: {e}")));
            let (start, end, step) = (r(parts[0])?, r(parts[1])?, r(parts[2])?);
            if end < start {
                return usage("--ramp: END is below START");
            }
            let n = ((end - start) / step + 1e-9).floor() as usize + 1;
            if n > 200 {
                return usage(format!("--ramp: {n} steps; at most 200"));
            }
            if end > search::MAX_RATE {
                return usage("--ramp: END is above 10M requests/s");
            }
            let rates = (0..n).map(|i| start + step * i as f64).collect();
            let slo = match &cli.ramp_slo {
                Some(t) => {
                    Some(Slo::parse(t).map_err(|e| Error::usage(format!("--ramp-slo: {e}")))?)
                }
                None => None,
            };
            return Ok(Some(Plan::Ramp {
                rates,
                shuffled,
                slo,
            }));
        }
        Ok(None)
    }

    /// A rate for `Config::build` when the command line and the file give none:
    /// the steps set every rate themselves.
    pub fn nominal_rate(&self) -> f64 {
        match self {
            Plan::Search { start, params, .. } => {
                start.unwrap_or((params.min_rate * params.max_rate).sqrt())
            }
            Plan::Ramp { rates, .. } => rates[0],
            Plan::Profile { floor_rate, .. } => *floor_rate,
        }
    }
}

/// The configuration of one step at `rate` (the window's mean offered rate); the `n`-th
/// run draws its own arrivals and requests (seed + n), so that runs again at one rate
/// are independent samples.
fn at_rate(base: &Config, rate: f64, preload: bool, n: u64) -> Config {
    let mut c = base.clone();
    c.seed = base.seed.wrapping_add(n);
    let spans = phase_spans(&base.phases, base.duration_ns);
    let mean: f64 = base
        .phases
        .iter()
        .zip(&spans)
        .map(|(p, &s)| p.rate.unwrap_or(0.0) * s as f64)
        .sum::<f64>()
        / base.duration_ns as f64;
    let factor = if mean > 0.0 { rate / mean } else { 1.0 };
    for p in &mut c.phases {
        p.rate = Some(p.rate.map_or(rate, |r| r * factor));
    }
    c.rate = Some(rate);
    c.preload = preload;
    c
}

/// One engine run at `cfg`: its verdict, its windows judged against `slo` (the SLO's
/// latency, and whether the host disturbed them) and its document (without the
/// configuration echo, written once at the top).
fn measure(cfg: &Config, slo: Option<&Slo>) -> Result<Measured, Error> {
    let result = engine::run(cfg.clone())?;
    let report = Report::new(cfg, &result);
    let verdict = match report.verdict {
        Verdict::Ok => RunVerdict::Ok,
        Verdict::Saturated => RunVerdict::Saturated,
        Verdict::ClientBound => RunVerdict::ClientBound,
    };
    let windows = match slo {
        Some(s) => result
            .metrics
            .windows
            .iter()
            .enumerate()
            .map(|(i, w)| {
                // The requests kvload's own lateness put over the bound: over it from the
                // intended send time but not from the actual one.
                let n = w.corrected.len();
                let late = if n == 0 {
                    0.0
                } else {
                    search::over_bound(s, &w.corrected)
                        .saturating_sub(search::over_bound(s, &w.service))
                        as f64
                        / n as f64
                };
                let host = result.host.get(i);
                let zero = |x: f64| if x.is_finite() { x } else { 0.0 };
                let facts = WindowFacts {
                    late_share: late,
                    steal: host.map_or(0.0, |h| zero(h.steal_server).max(zero(h.steal_client))),
                    others: host.map_or(0.0, |h| zero(h.others_server)),
                };
                WindowSample {
                    latency: if s.service {
                        w.service.clone()
                    } else {
                        w.corrected.clone()
                    },
                    disturbed: search::judge_window(s, &facts),
                    scheduled: w.scheduled,
                    skipped: w.skipped,
                }
            })
            .collect(),
        None => Vec::new(),
    };
    let mut figures = doc::document(&report);
    if let Some(o) = figures.as_object_mut() {
        o.remove("config");
        o.remove("schema");
        o.remove("kvload_version");
        // Per-second series are for single runs; a step's windows say more.
        o.remove("series");
    }
    Ok(Measured {
        verdict,
        windows,
        figures,
    })
}

/// The closed-loop burst's throughput (req/s), the search's first estimate of
/// the server's peak; the first step runs at `START_FRACTION` of it.
fn burst(base: &Config) -> Result<f64, Error> {
    let mut c = base.clone();
    c.mode = Mode::Closed;
    // Enough requests in flight to keep the server busy: with a few connections and no
    // pipeline a closed loop measures the round trip, not the server's peak.
    c.pipeline = c
        .pipeline
        .max(BURST_DEPTH.div_ceil(c.connections))
        .min(c.max_outstanding);
    c.duration_ns = base.duration_ns.min(1_000_000_000);
    c.warmup_ns = base.warmup_ns.min(500_000_000);
    for p in &mut c.phases {
        p.duration_ns = c.duration_ns;
    }
    c.phases.truncate(1);
    let result = engine::run(c.clone())?;
    let report = Report::new(&c, &result);
    if report.achieved_rate <= 0.0 {
        return Err(Error::runtime(
            "the closed-loop burst completed no request: cannot estimate a first rate",
        ));
    }
    Ok(report.achieved_rate)
}

fn say(cfg: &Config, line: &str) {
    if cfg.quiet {
        return;
    }
    if cfg.json.as_deref() == Some("-") {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

fn step_line(cfg: &Config, n: usize, s: &Step, slo: Option<&Slo>) {
    let achieved = s
        .figures
        .get("achieved_rate")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let util = s
        .figures
        .pointer("/client_cpu/utilization")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let mut line = format!(
        "step {n:>2}: {:>9.0} req/s offered, {:>9.0} achieved",
        s.rate, achieved
    );
    if let Some(slo) = slo {
        let _ = write!(
            line,
            ", {} {:>8.1} us (95% CI {:.0} … {:.0})",
            slo.label, s.latency_us, s.ci.0, s.ci.1
        );
    } else {
        let p99 = s
            .figures
            .pointer("/latency/total/corrected/p99_us")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        let _ = write!(line, ", p99 {p99:>8.1} us");
    }
    let dropped: usize = s.dropped.iter().sum();
    let _ = write!(
        line,
        ", client CPU {:>3.0}%: {}",
        util * 100.0,
        s.outcome.name()
    );
    if s.doubtful {
        line.push_str(" (in doubt: decided by the estimate)");
    }
    if s.run > 1 {
        let _ = write!(line, " (run {} at this rate)", s.run);
    }
    if s.purpose == Purpose::Reference {
        line.push_str(" [host watch]");
    }
    if dropped > 0 {
        let _ = write!(line, " [{dropped} of {} windows disturbed]", s.windows);
    }
    say(cfg, &line);
}

fn emit(cfg: &Config, body: &Value) -> Result<(), Error> {
    if let Some(dest) = &cfg.json {
        let mut text = serde_json::to_string_pretty(body).expect("JSON serializes");
        text.push('\n');
        if dest == "-" {
            std::io::stdout()
                .write_all(text.as_bytes())
                .map_err(|e| Error::runtime(format!("--json -: {e}")))?;
        } else {
            std::fs::write(dest, text)
                .map_err(|e| Error::runtime(format!("--json {dest}: {e}")))?;
        }
    }
    Ok(())
}

/// One profile step's figures: the SLO's percentile with its interval over the good
/// windows, p50, the client's CPU and the windows dropped.
fn profile_step(cfg: &Config, slo: &Slo, m: &Measured) -> Value {
    // The floor is what the host shows with kvload's own delays in it: only the host's
    // disturbances (steal, other tasks) are dropped here; the send delay is reported.
    let windows: Vec<WindowSample> = m
        .windows
        .iter()
        .map(|w| WindowSample {
            disturbed: w
                .disturbed
                .filter(|d| *d != search::Disturbance::ClientLate),
            ..w.clone()
        })
        .collect();
    let search::RunFigures {
        latency_us: est,
        ci,
        good,
        dropped,
        ..
    } = search::run_figures(slo, &windows, cfg.seed);
    let fin = |x: f64| if x.is_finite() { json!(x) } else { Value::Null };
    let f = &m.figures;
    let mut d = serde_json::Map::new();
    for x in search::Disturbance::ALL {
        d.insert(x.name().into(), json!(dropped[x as usize]));
    }
    json!({
        "rate": cfg.rate,
        "achieved_rate": f.get("achieved_rate"),
        "verdict": f.get("verdict"),
        "latency_us": fin(est),
        "ci": [fin(ci.0), fin(ci.1)],
        "p50_us": f.pointer("/latency/total/corrected/p50_us"),
        "schedule_lag_p99_us": f.pointer("/schedule_lag/p99_us"),
        "client_utilization": f.pointer("/client_cpu/utilization"),
        "windows": m.windows.len(),
        "good_windows": good,
        "dropped": d,
    })
}

/// `--profile`: what the host can show for `slo` before a search (docs/kvload.md).
fn profile(base: &Config, slo: &Slo, floor_rate: f64, preload: bool) -> Result<(), Error> {
    let t0 = Instant::now();
    let x = burst(base)?;
    let mut floor_cfg = at_rate(base, floor_rate, false, 1);
    floor_cfg.duration_ns = floor_cfg.duration_ns.max(PROFILE_FLOOR_NS);
    for p in &mut floor_cfg.phases {
        p.duration_ns = floor_cfg.duration_ns;
    }
    let _ = preload; // the burst preloaded the keyspace
    let floor = measure(&floor_cfg, Some(slo))?;
    let mid_rate = 0.5 * x;
    let mid_cfg = at_rate(base, mid_rate, false, 2);
    let mid = measure(&mid_cfg, Some(slo))?;
    let floor_j = profile_step(&floor_cfg, slo, &floor);
    let mid_j = profile_step(&mid_cfg, slo, &mid);
    // The client's CPU cost of one request in the open loop at half the peak, and the
    // rate its CPUs would reach at 90% busy.
    let util = mid_j["client_utilization"].as_f64().unwrap_or(f64::NAN);
    let achieved = mid_j["achieved_rate"].as_f64().unwrap_or(f64::NAN);
    let cpus = base.threads as f64;
    let cost_us = util * cpus * 1e6 / achieved;
    let limit = if cost_us > 0.0 && cost_us.is_finite() {
        crate::output::CLIENT_BOUND_UTILIZATION * cpus * 1e6 / cost_us
    } else {
        f64::NAN
    };
    let fin = |x: f64| if x.is_finite() { json!(x) } else { Value::Null };
    let seconds = t0.elapsed().as_secs_f64();
    say(
        base,
        &format!(
            "profile: peak {x:.0} req/s (closed loop); {} floor {} us (95% CI {} … {}) at \
             {floor_rate:.0} req/s; {} {} us at {mid_rate:.0} req/s; client {:.1} us of CPU per \
             request, limit about {limit:.0} req/s ({seconds:.0} s)",
            slo.label,
            fmt_us(&floor_j["latency_us"]),
            fmt_us(&floor_j["ci"][0]),
            fmt_us(&floor_j["ci"][1]),
            slo.label,
            fmt_us(&mid_j["latency_us"]),
            cost_us
        ),
    );
    emit(
        base,
        &json!({
            "schema": crate::PROFILE_SCHEMA,
            "kvload_version": crate::VERSION,
            "kind": "profile",
            "config": doc::config_echo(base),
            "slo": {"text": slo.text(), "quantile": slo.quantile, "label": slo.label,
                    "latency": if slo.service { "service" } else { "corrected" },
                    "bound_us": slo.bound_us, "strict": slo.strict},
            "burst_rate": x,
            "floor": floor_j,
            "mid": mid_j,
            "client": {"cpus": base.threads, "cost_us_per_request": fin(cost_us),
                       "limit_rate": fin(limit)},
            "seconds": seconds,
        }),
    )
}

fn fmt_us(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{x:.0}"))
}

/// The `knee` object of a search document: the answer, its interval, the shape of the
/// curve, the host watch and the windows dropped.
pub fn knee_json(k: &Knee) -> Value {
    let (n, d) = k.windows();
    let mut dropped = serde_json::Map::new();
    for x in search::Disturbance::ALL {
        dropped.insert(x.name().into(), json!(d[x as usize]));
    }
    json!({
        "verdict": k.verdict,
        "reason": k.reason,
        "knee": k.knee,
        "ci": k.ci.map(|(a, b)| json!([a, b])),
        "ci_level": search::LEVEL,
        "bracket": {"highest_pass": k.highest_pass, "lowest_fail": k.lowest_fail},
        "shape": {
            "monotone": k.dips.is_empty(),
            "dips": k.dips,
        },
        "reference": k.reference.iter().map(|v| json!({
            "when": v.when,
            "latency_us": v.latency_us,
            "ci": [v.ci.0, v.ci.1],
            "moved": v.moved,
        })).collect::<Vec<_>>(),
        "windows": {"total": n, "dropped": dropped},
    })
}

/// Runs the plan against the server of `base` and reports it.
pub fn run(plan: &Plan, base: &Config) -> Result<(), Error> {
    if base.mode != Mode::Open {
        return usage("--search and --ramp run open-loop steps: not with --mode closed");
    }
    let t0 = Instant::now();
    let mut base = base.clone();
    if base.window_ns.is_none() {
        // Equal windows of about DEFAULT_WINDOW_NS: no short last window.
        let n = ((base.duration_ns as f64 / DEFAULT_WINDOW_NS as f64).round() as u64).max(1);
        base.window_ns = Some((base.duration_ns / n).max(crate::config::MIN_WINDOW_NS));
    }
    let base = &base;
    let mut preload = base.preload;
    let mut runs = 0u64;
    match plan {
        Plan::Search {
            slo,
            params,
            start,
            ranged,
            reference,
        } => {
            let (first, estimate) = match start {
                Some(r) => (*r, None),
                None if *ranged => ((params.min_rate * params.max_rate).sqrt(), None),
                None => {
                    let x = burst(base)?;
                    preload = false;
                    say(
                        base,
                        &format!(
                            "closed-loop burst: {x:.0} req/s; the first step runs at {:.0}",
                            search::START_FRACTION * x
                        ),
                    );
                    (search::START_FRACTION * x, Some(x))
                }
            };
            // Without --search-range, rates below a tenth of the burst's throughput are not
            // searched: a capacity that low is not the server's (the range says so).
            let mut params = params.clone();
            if let Some(x) = estimate
                && !*ranged
            {
                params.min_rate = params.min_rate.max(search::LOW_FRACTION * x);
            }
            params.reference = match reference {
                Some(r) => *r,
                None => Some(
                    (search::REFERENCE_FRACTION * first).clamp(params.min_rate, params.max_rate),
                ),
            };
            let params = &params;
            let mut n = 0usize;
            let k: Knee = search::knee(
                slo,
                params,
                first,
                |rate, _purpose| {
                    let m = measure(&at_rate(base, rate, preload, runs), Some(slo))?;
                    preload = false;
                    runs += 1;
                    Ok::<Measured, Error>(m)
                },
                &mut |s| {
                    n += 1;
                    step_line(base, n, s, Some(slo));
                },
            )?;
            let seconds = t0.elapsed().as_secs_f64();
            let steps: Vec<Value> = k
                .steps
                .iter()
                .enumerate()
                .map(|(i, s)| search::step_json(i + 1, s))
                .collect();
            let (windows, dropped) = k.windows();
            let dropped: usize = dropped.iter().sum();
            match (k.knee, k.ci) {
                (Some(knee), Some((lo, hi))) => say(
                    base,
                    &format!(
                        "capacity: {knee:.0} req/s (95% CI {lo:.0} … {hi:.0}) at {} ({}; {} runs, {dropped} of {windows} windows disturbed, {seconds:.0} s)",
                        slo.text(),
                        k.reason,
                        k.steps.len()
                    ),
                ),
                _ => say(base, &format!("no capacity: {} ({seconds:.0} s)", k.reason)),
            }
            if !k.dips.is_empty() {
                say(
                    base,
                    &format!(
                        "the curve is not monotone: rates below the capacity missed the SLO ({})",
                        k.dips
                            .iter()
                            .map(|r| format!("{r:.0}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
            let mut body = json!({
                "schema": crate::SEARCH_SCHEMA,
                "kvload_version": crate::VERSION,
                "kind": "search",
                "config": doc::config_echo(base),
                "slo": {"text": slo.text(), "quantile": slo.quantile, "label": slo.label,
                        "latency": if slo.service { "service" } else { "corrected" },
                        "bound_us": slo.bound_us, "strict": slo.strict},
                "precision": params.precision,
                "range": [params.min_rate, params.max_rate],
                "max_steps": params.max_steps,
                "runs_per_rate": params.runs_per_rate,
                "estimate": {"closed_loop_rate": estimate, "first_rate": first,
                             "reference_rate": params.reference},
                "seconds": seconds,
                "steps": steps,
            });
            if let (Some(o), Value::Object(kj)) = (body.as_object_mut(), knee_json(&k)) {
                for (key, v) in kj {
                    o.insert(key, v);
                }
            }
            emit(base, &body)
        }
        Plan::Profile { slo, floor_rate } => profile(base, slo, *floor_rate, preload),
        Plan::Ramp {
            rates,
            shuffled,
            slo,
        } => {
            let mut order = rates.clone();
            if *shuffled {
                let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(base.seed);
                order.shuffle(&mut rng);
            }
            let mut steps = Vec::with_capacity(order.len());
            for (i, &rate) in order.iter().enumerate() {
                let m = measure(&at_rate(base, rate, preload, runs), slo.as_ref())?;
                preload = false;
                runs += 1;
                let p99 = m
                    .figures
                    .pointer("/latency/total/corrected/p99_us")
                    .and_then(Value::as_f64)
                    .unwrap_or(f64::NAN);
                // With --ramp-slo the step's percentile is the pooled one of its
                // undisturbed windows, with its interval, as a search judges a rate.
                let nan2 = (f64::NAN, f64::NAN);
                let (latency, ci, exceed, exceed_ci, dropped) = match slo {
                    Some(s) => {
                        let f = search::run_figures(s, &m.windows, base.seed.wrapping_add(runs));
                        (f.latency_us, f.ci, f.exceed, f.exceed_ci, f.dropped)
                    }
                    None => (p99, nan2, f64::NAN, nan2, [0; 3]),
                };
                let s = Step {
                    rate,
                    purpose: Purpose::Search,
                    outcome: match m.verdict {
                        RunVerdict::ClientBound => search::Outcome::ClientBound,
                        RunVerdict::Saturated => search::Outcome::Saturated,
                        RunVerdict::Ok => match slo {
                            Some(s) if exceed > 1.0 - s.quantile => search::Outcome::Fail,
                            _ => search::Outcome::Pass,
                        },
                    },
                    doubtful: false,
                    run: 1,
                    run_latency_us: latency,
                    latency_us: latency,
                    ci,
                    exceed,
                    exceed_ci,
                    windows: m.windows.len(),
                    dropped,
                    figures: m.figures,
                };
                step_line(base, i + 1, &s, slo.as_ref());
                steps.push(search::step_json(i + 1, &s));
            }
            let seconds = t0.elapsed().as_secs_f64();
            say(
                base,
                &format!("ramp: {} steps in {seconds:.0} s", steps.len()),
            );
            emit(
                base,
                &json!({
                    "schema": crate::SEARCH_SCHEMA,
                    "kvload_version": crate::VERSION,
                    "kind": "ramp",
                    "config": doc::config_echo(base),
                    "order": if *shuffled { "shuffled" } else { "ascending" },
                    "slo": slo.as_ref().map(|s| s.text()),
                    "rates": rates,
                    "seconds": seconds,
                    "steps": steps,
                }),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn plan(args: &[&str]) -> Result<Option<Plan>, Error> {
        let mut v = vec!["kvload"];
        v.extend_from_slice(args);
        Plan::from_cli(&Cli::try_parse_from(v).unwrap())
    }

    #[test]
    fn flags_are_checked_before_anything_runs() {
        assert!(plan(&[]).unwrap().is_none());
        let err = |a: &[&str]| plan(a).unwrap_err().to_string();
        assert!(err(&["--precision", "2%"]).contains("--precision needs --search"));
        assert!(err(&["--search", "p99<=200us", "--ramp", "1k:2k:1k"]).contains("one of"));
        assert!(err(&["--profile", "p99<=200us", "--search", "p99<=1ms"]).contains("one of"));
        assert!(err(&["--search", "p98<=1ms"]).contains("--search:"));
        assert!(err(&["--search", "p99<=1ms", "--precision", "80%"]).contains("--precision"));
        assert!(err(&["--search", "p99<=1ms", "--search-range", "5k"]).contains("LOW:HIGH"));
        assert!(err(&["--search", "p99<=1ms", "--search-range", "5k:5k"]).contains("narrower"));
        assert!(
            err(&[
                "--search",
                "p99<=1ms",
                "--search-range",
                "5k:9k",
                "--rate",
                "1000"
            ])
            .contains("outside")
        );
        assert!(err(&["--ramp", "1k:2k"]).contains("START:END:STEP"));
        assert!(err(&["--ramp", "1k:2k:1k:sorted"]).contains("START:END:STEP"));
        assert!(err(&["--ramp", "2k:1k:1k"]).contains("below"));
        assert!(err(&["--ramp", "1:1M:1"]).contains("at most 200"));
        match plan(&[
            "--search",
            "p99.9<=1ms",
            "--precision",
            "5%",
            "--search-range",
            "10k:1M",
        ])
        .unwrap()
        {
            Some(Plan::Search {
                slo,
                params,
                start,
                ranged,
                ..
            }) => {
                assert_eq!((slo.quantile, slo.bound_us), (0.999, 1000.0));
                assert_eq!(
                    (params.precision, params.min_rate, params.max_rate),
                    (0.05, 1e4, 1e6)
                );
                assert!(start.is_none() && ranged);
            }
            other => panic!("{other:?}"),
        }
        match plan(&["--ramp", "20k:100k:20k:shuffle"]).unwrap() {
            Some(Plan::Ramp {
                rates, shuffled, ..
            }) => {
                assert_eq!(rates, vec![2e4, 4e4, 6e4, 8e4, 1e5]);
                assert!(shuffled);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_step_scales_the_phases_to_its_mean_rate() {
        let dir = std::env::temp_dir().join(format!("kvload-steps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("w.json");
        std::fs::write(
            &p,
            r#"{"phases": [{"duration": "1s", "rate": 1000}, {"duration": "1s", "rate": 3000}]}"#,
        )
        .unwrap();
        let cli = Cli::try_parse_from(["kvload", "--workload", p.to_str().unwrap()]).unwrap();
        let base = Config::build(cli).unwrap();
        let c = at_rate(&base, 4000.0, false, 0);
        let rates: Vec<f64> = c.phases.iter().map(|p| p.rate.unwrap()).collect();
        assert_eq!(rates, vec![2000.0, 6000.0]);
        assert!(!c.preload);
    }
}
