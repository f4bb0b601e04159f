//! `--simulate`: a simulated server in place of a real one, so that the knee
//! search (and kvtune's synthetic target) are checked against a latency curve
//! whose knee is known exactly. Nothing connects anywhere.
//!
//! The server is an M/M/1 queue: one FIFO server whose service times are
//! exponential with mean `1/service` seconds, fed by the run's Poisson
//! arrivals, plus a constant `base` latency (the network and the client) on
//! every response. In a steady state the response time above `base` is
//! exponential with rate `service − λ`, so the q-quantile of the latency at
//! rate λ is `base + ln(1/(1−q)) / (service − λ)` and the highest rate that
//! keeps it within a bound B is
//!
//! ```text
//!     knee = service − ln(1/(1−q)) / (B − base)
//! ```
//!
//! ([`SimServer::knee`]). The server is drawn once per `--seed`: its service
//! rate is `service × exp(jitter × z)` with z standard normal (a fresh server is
//! a little faster or slower than the last; the JSON's config gives the rate
//! drawn). Each run then draws its own rate around it with `noise` (a VM's
//! stalls and neighbours) and its latencies from a finite window, so a step's
//! percentile carries both the run-to-run and the sampling noise of a real one. `client=RATE` makes kvload's own CPUs the limit: a run's
//! client utilization is its offered rate over RATE, so the verdict is
//! `client_bound` from 90% of it (as on a real host).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::RunResult;
use crate::Error;
use crate::config::{Config, Mode, Verb, phase_spans};
use crate::metrics::Metrics;
use crate::protocol::Outcome;

/// The simulated server of `--simulate`.
#[derive(Debug, Clone, PartialEq)]
pub struct SimServer {
    /// Mean service rate, requests/s.
    pub service: f64,
    /// Constant latency added to every response, µs.
    pub base_us: f64,
    /// Log-normal spread of the service rate from server to server: drawn once per
    /// `--seed` (one search is one server).
    pub jitter: f64,
    /// Log-normal spread of the service rate from run to run of one server (each step
    /// of a search draws its own).
    pub noise: f64,
    /// The rate at which kvload's own CPUs would be saturated (None: never).
    pub client: Option<f64>,
}

/// Distinct runs of one process draw distinct noise (the steps of a search share
/// `--seed`).
static RUNS: AtomicU64 = AtomicU64::new(0);

fn rate(key: &str, v: &str) -> Result<f64, String> {
    crate::steps::parse_rate(v).map_err(|e| format!("{key}: {e}"))
}

impl SimServer {
    /// `service=100k[,base=50us][,jitter=0.03][,client=170k]`. Err names what is wrong.
    pub fn parse(text: &str) -> Result<SimServer, String> {
        let mut s = SimServer {
            service: f64::NAN,
            base_us: 0.0,
            jitter: 0.0,
            noise: 0.0,
            client: None,
        };
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| {
                format!("'{part}' is not KEY=VALUE (service=, base=, jitter=, noise=, client=)")
            })?;
            match k.trim() {
                "service" => s.service = rate(k, v)?,
                "client" => s.client = Some(rate(k, v)?),
                "base" => {
                    let t = v.trim();
                    let (n, scale) = if let Some(n) = t.strip_suffix("us") {
                        (n, 1.0)
                    } else if let Some(n) = t.strip_suffix("ms") {
                        (n, 1000.0)
                    } else {
                        (t, 1.0)
                    };
                    let b: f64 = n
                        .parse()
                        .map_err(|_| format!("base: '{v}' is not a latency such as 50us"))?;
                    if !(b.is_finite() && (0.0..=1e6).contains(&(b * scale))) {
                        return Err(format!("base: '{v}' is outside 0..1 s"));
                    }
                    s.base_us = b * scale;
                }
                "jitter" | "noise" => {
                    let j: f64 = v
                        .trim()
                        .parse()
                        .map_err(|_| format!("{k}: '{v}' is not a number such as 0.03"))?;
                    if !(j.is_finite() && (0.0..=1.0).contains(&j)) {
                        return Err(format!("{k}: {v} is outside 0..1"));
                    }
                    if k.trim() == "jitter" {
                        s.jitter = j;
                    } else {
                        s.noise = j;
                    }
                }
                other => {
                    return Err(format!(
                        "unknown key '{other}' (service=, base=, jitter=, noise=, client=)"
                    ));
                }
            }
        }
        if s.service.is_nan() {
            return Err("service=RATE is required, e.g. service=100k".into());
        }
        if s.service > crate::search::MAX_RATE {
            return Err("service: above 10M requests/s".into());
        }
        Ok(s)
    }

    pub fn text(&self) -> String {
        let mut t = format!(
            "service={},base={}us,jitter={},noise={}",
            self.service, self.base_us, self.jitter, self.noise
        );
        if let Some(c) = self.client {
            t.push_str(&format!(",client={c}"));
        }
        t
    }

    /// This server's median service rate: `service` drawn with `jitter` from `seed`
    /// (the same for every run of one `--seed`).
    pub fn server_rate(&self, seed: u64) -> f64 {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5EED_5E4E_u64);
        let z: f64 = StandardNormal.sample(&mut rng);
        self.service * (self.jitter * z).exp()
    }

    /// The q-quantile of the steady-state latency at `rate` (µs) with the median
    /// service rate; infinite at or above it.
    pub fn quantile_us(&self, q: f64, rate: f64) -> f64 {
        if rate >= self.service {
            return f64::INFINITY;
        }
        self.base_us + (1.0 / (1.0 - q)).ln() / (self.service - rate) * 1e6
    }

    /// The highest rate whose steady-state q-quantile is within `bound_us` (the
    /// median run's knee); None when even an idle server misses it.
    pub fn knee(&self, q: f64, bound_us: f64) -> Option<f64> {
        if bound_us <= self.base_us {
            return None;
        }
        let k = self.service - (1.0 / (1.0 - q)).ln() / ((bound_us - self.base_us) * 1e-6);
        (k > 0.0).then_some(k)
    }
}

/// One run against the simulated server: the same result a real run gives, so
/// the report, the verdict and the search treat it alike. Instant: no clock is
/// waited for.
pub fn run(cfg: &Config, sim: &SimServer) -> Result<RunResult, Error> {
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(
        cfg.seed ^ n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    let z: f64 = StandardNormal.sample(&mut rng);
    let mu = sim.server_rate(cfg.seed) * (sim.noise * z).exp();
    let service = Exp::new(mu).map_err(|e| Error::runtime(format!("--simulate: {e}")))?;
    let base_ns = (sim.base_us * 1e3) as u64;
    let seconds = cfg.duration_ns.div_ceil(1_000_000_000).max(1) as usize;
    let mut metrics = Metrics::new(seconds);
    let (ws, we) = (cfg.warmup_ns, cfg.warmup_ns + cfg.duration_ns);
    let drain_end = we + cfg.timeout_ns;
    let sec_of = |t: u64| ((t - ws) / 1_000_000_000) as usize;
    let ok = Outcome::ok();
    let offered;
    match cfg.mode {
        Mode::Open => {
            // Poisson arrivals at each phase's rate; phase 0 also drives the warm-up.
            let spans = phase_spans(&cfg.phases, cfg.duration_ns);
            let mut edges = vec![(0u64, cfg.phases[0].rate.unwrap_or(0.0))];
            let mut at = ws;
            for (p, span) in cfg.phases.iter().zip(&spans) {
                edges.push((at, p.rate.unwrap_or(0.0)));
                at += span;
            }
            offered = cfg
                .phases
                .iter()
                .zip(&spans)
                .map(|(p, &s)| p.rate.unwrap_or(0.0) * s as f64)
                .sum::<f64>()
                / cfg.duration_ns as f64;
            let limit = (cfg.connections * cfg.max_outstanding).max(1);
            // Response times of requests in flight (FIFO: in order).
            let mut in_flight: VecDeque<u64> = VecDeque::new();
            let mut t = 0.0f64; // ns
            let mut last_done = 0.0f64;
            let mut phase = 0usize;
            loop {
                while phase + 1 < edges.len() && t >= edges[phase + 1].0 as f64 {
                    phase += 1;
                }
                let r = edges[phase].1;
                if r <= 0.0 {
                    // No arrivals in this phase: on to the next one.
                    match edges.get(phase + 1) {
                        Some(&(next, _)) => {
                            t = next as f64;
                            continue;
                        }
                        None => break,
                    }
                }
                t += rng.sample::<f64, _>(rand_distr::Exp1) / r * 1e9;
                if t >= we as f64 {
                    break;
                }
                let a = t as u64;
                while in_flight.front().is_some_and(|&d| d <= a) {
                    in_flight.pop_front();
                }
                let in_window = a >= ws;
                if in_window {
                    metrics.counters.scheduled += 1;
                }
                if in_flight.len() >= limit {
                    if in_window {
                        metrics.counters.skipped += 1;
                    }
                    continue;
                }
                let start = t.max(last_done);
                last_done = start + service.sample(&mut rng) * 1e9;
                let done = last_done as u64 + base_ns;
                in_flight.push_back(done);
                if !in_window {
                    continue;
                }
                metrics.record_lag(sec_of(a), 0);
                if done > drain_end {
                    metrics.counters.timeouts += 1;
                    continue;
                }
                let lat = done - a;
                metrics.record_response(Verb::Get, lat, Some(lat), &ok);
                if done < we {
                    metrics.record_second(sec_of(done), lat, false);
                }
            }
        }
        Mode::Closed => {
            // Every connection keeps `pipeline` requests in flight: the server is never
            // idle, so completions come at the service rate.
            offered = 0.0;
            let n_out = (cfg.connections * cfg.pipeline).max(1);
            let mut sent: VecDeque<f64> = (0..n_out).map(|_| 0.0).collect();
            let mut t = 0.0f64;
            while t < we as f64 {
                t += service.sample(&mut rng) * 1e9;
                let s = sent.pop_front().expect("requests in flight");
                let done = t + base_ns as f64;
                sent.push_back(done);
                let (s, d) = (s as u64, done as u64);
                if s >= ws && d < we {
                    let lat = d - s;
                    metrics.counters.scheduled += 1;
                    metrics.record_lag(sec_of(s), 0);
                    metrics.record_response(Verb::Get, lat, Some(lat), &ok);
                    metrics.record_second(sec_of(d), lat, false);
                }
            }
        }
    }
    let utilization = match (sim.client, cfg.mode) {
        (Some(c), Mode::Open) => (offered / c).min(1.0),
        (Some(c), Mode::Closed) => (mu / c).min(1.0),
        (None, _) => 0.05,
    };
    let user_ns = (utilization * cfg.duration_ns as f64 * cfg.threads as f64) as u64;
    Ok(RunResult {
        metrics,
        user_ns,
        sys_ns: 0,
        spin_ns: 0,
        window_ns: cfg.duration_ns,
        preload: None,
        arrivals: Vec::new(),
        timeline: (0, ws, we),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Cli;
    use crate::output::{Report, Verdict};
    use crate::search::{self, Measured, Params, RunVerdict, Slo};
    use clap::Parser;

    fn cfg(args: &[&str]) -> Config {
        let mut v = vec!["kvload", "--simulate", "service=100k,base=50us"];
        v.extend_from_slice(args);
        Config::build(Cli::try_parse_from(v).unwrap()).unwrap()
    }

    #[test]
    fn parses_the_spec_and_refuses_the_rest() {
        let s = SimServer::parse("service=100k, base=0.05ms, jitter=0.03, noise=0.1, client=170k")
            .unwrap();
        assert_eq!(
            (s.service, s.base_us, s.jitter, s.noise, s.client),
            (1e5, 50.0, 0.03, 0.1, Some(1.7e5))
        );
        for bad in [
            "",
            "base=50us",
            "service=-1",
            "service=100k,color=red",
            "service=100k,jitter=2",
            "service=100k,base=2s",
            "service",
            "service=20M",
        ] {
            assert!(SimServer::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_window_matches_the_queue_it_simulates() {
        // At 80k of a 100k server the steady-state p99 is 50 + ln(100)/20k s = 280 µs.
        let c = cfg(&["--rate", "80000", "--duration", "5s", "--warmup", "200ms"]);
        let sim = SimServer::parse("service=100k,base=50us").unwrap();
        let r = run(&c, &sim).unwrap();
        let rep = Report::new(&c, &r);
        assert_eq!(rep.verdict, Verdict::Ok, "{}", rep.verdict_reason);
        let p99 = r.metrics.total_corrected().value_at_quantile(0.99) as f64 / 1e3;
        let truth = sim.quantile_us(0.99, 80_000.0);
        assert!((p99 / truth - 1.0).abs() < 0.1, "{p99} vs {truth}");
        assert!((rep.achieved_rate / 80_000.0 - 1.0).abs() < 0.03);
        // Above the service rate the server falls behind: saturated.
        let c = cfg(&["--rate", "120000", "--duration", "2s"]);
        let r = run(&c, &sim).unwrap();
        assert_eq!(Report::new(&c, &r).verdict, Verdict::Saturated);
        // The client limit: client_bound from 90% of it.
        let sim = SimServer::parse("service=100k,client=60k").unwrap();
        let c = cfg(&["--rate", "58000", "--duration", "1s"]);
        let r = run(&c, &sim).unwrap();
        assert_eq!(Report::new(&c, &r).verdict, Verdict::ClientBound);
        // Closed loop: the burst measures the service rate.
        let c = cfg(&["--mode", "closed", "--duration", "1s"]);
        let r = run(&c, &sim).unwrap();
        let x = Report::new(&c, &r).achieved_rate;
        assert!((x / 1e5 - 1.0).abs() < 0.03, "{x}");
    }

    #[test]
    fn the_search_recovers_the_known_knee() {
        // The same search kvload runs against a server, against windows of the
        // simulated queue: within the precision plus the window's sampling noise.
        let sim = SimServer::parse("service=100k,base=50us,noise=0.02").unwrap();
        let slo = Slo::parse("p99<=500us").unwrap();
        let truth = sim.knee(0.99, 500.0).unwrap();
        let c = cfg(&["--rate", "80000", "--duration", "1s", "--warmup", "200ms"]);
        let p = Params {
            precision: 0.02,
            max_steps: search::DEFAULT_MAX_STEPS,
            min_rate: 1000.0,
            max_rate: search::MAX_RATE,
        };
        let mut errs = Vec::new();
        for _ in 0..20 {
            let k = search::knee(&slo, &p, 80_000.0, |rate| {
                let mut c = c.clone();
                c.rate = Some(rate);
                for ph in &mut c.phases {
                    ph.rate = Some(rate);
                }
                let r = run(&c, &sim)?;
                let rep = Report::new(&c, &r);
                let v = match rep.verdict {
                    Verdict::Ok => RunVerdict::Ok,
                    Verdict::Saturated => RunVerdict::Saturated,
                    Verdict::ClientBound => RunVerdict::ClientBound,
                };
                let lat = r.metrics.total_corrected().value_at_quantile(0.99) as f64 / 1e3;
                Ok::<Measured, Error>(Measured {
                    verdict: v,
                    latency_us: lat,
                    figures: serde_json::Value::Null,
                })
            })
            .unwrap();
            errs.push((k.knee.unwrap() / truth - 1.0).abs());
        }
        errs.sort_by(f64::total_cmp);
        assert!(errs[17] < 0.05, "{errs:?}");
    }
}
