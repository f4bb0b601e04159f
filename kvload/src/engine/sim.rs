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
//!
//! Three more keys model what a noisy VM does to a measurement, so that the search's
//! windows, intervals and host watch are tested against a known truth:
//! `wnoise=SIGMA` draws the service rate again for every `--window` (a host whose speed
//! wanders within a run); `stall=P:MS[:SEEN]` stops the server for MS ms at a random
//! time of a window with probability P per window, a share SEEN of the stalls being
//! visible to the host watch (as steal time: those windows are disturbed);
//! `lnoise=SIGMA` stretches every latency of a window by a log-normal factor drawn per
//! window (delays a host adds whatever the load);
//! `wake=US` is the idle path: a request that finds the server idle for more than
//! `HALT_NS` waits an exponential wake-up of mean US µs first, so low rates can be slower
//! than moderate ones (the curve falls before it rises).

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::RunResult;
use crate::Error;
use crate::config::{Config, Mode, Verb, phase_spans};
use crate::metrics::Metrics;
use crate::protocol::Outcome;

/// An idle server halts after this long without work (`wake=`).
pub const HALT_NS: f64 = 500_000.0;

pub use crate::config::sim::SimServer;

impl SimServer {
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
    // Each run draws from its own --seed (a search's runs get seed + n): reproducible.
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(cfg.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let z: f64 = StandardNormal.sample(&mut rng);
    let mu = sim.server_rate(cfg.seed) * (sim.noise * z).exp();
    let service = Exp::new(mu).map_err(|e| Error::runtime(format!("--simulate: {e}")))?;
    let base_ns = (sim.base_us * 1e3) as u64;
    let seconds = cfg.duration_ns.div_ceil(1_000_000_000).max(1) as usize;
    let mut metrics = Metrics::new(seconds);
    let (ws, we) = (cfg.warmup_ns, cfg.warmup_ns + cfg.duration_ns);
    // --window: each window's speed (wnoise) and stalls, drawn up front.
    let win_ns = cfg.window_ns.unwrap_or(cfg.duration_ns).max(1);
    let n_win = cfg.duration_ns.div_ceil(win_ns).max(1) as usize;
    if cfg.window_ns.is_some() {
        metrics = metrics.with_windows(n_win, win_ns);
    }
    let speed: Vec<f64> = (0..n_win)
        .map(|_| {
            let z: f64 = StandardNormal.sample(&mut rng);
            (sim.wnoise * z).exp()
        })
        .collect();
    let stretch: Vec<f64> = (0..n_win)
        .map(|_| {
            let z: f64 = StandardNormal.sample(&mut rng);
            (sim.lnoise * z).exp()
        })
        .collect();
    let mut stalls: Vec<(f64, f64)> = Vec::new();
    let mut host = Vec::new();
    for k in 0..n_win {
        let mut seen = false;
        if sim.stall.0 > 0.0 && rng.random::<f64>() < sim.stall.0 {
            let at = ws as f64 + (k as f64 + rng.random::<f64>()) * win_ns as f64;
            stalls.push((at, at + sim.stall.1 as f64));
            seen = rng.random::<f64>() < sim.stall.2;
        }
        if cfg.window_ns.is_some() {
            host.push(super::watch::HostWindow {
                steal_server: if seen { 0.5 } else { 0.0 },
                steal_client: 0.0,
                others_server: 0.0,
                server_busy: f64::NAN,
            });
        }
    }
    let window_of = |a: u64| (((a - ws) / win_ns) as usize).min(n_win - 1);
    let wake = Exp::new(1.0 / sim.wake_us.max(1e-9) * 1e-3).ok();
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
                let wi = in_window.then(|| window_of(a));
                if in_window {
                    metrics.counters.scheduled += 1;
                    if let Some(w) = wi.and_then(|i| metrics.windows.get_mut(i)) {
                        w.scheduled += 1;
                    }
                }
                if in_flight.len() >= limit {
                    if in_window {
                        metrics.counters.skipped += 1;
                        if let Some(w) = wi.and_then(|i| metrics.windows.get_mut(i)) {
                            w.skipped += 1;
                        }
                    }
                    continue;
                }
                let mut start = t.max(last_done);
                // The idle path: a server idle for long has halted and wakes up first.
                if sim.wake_us > 0.0
                    && t > last_done + HALT_NS
                    && let Some(w) = &wake
                {
                    start = t + w.sample(&mut rng);
                }
                if let Some(&(_, end)) = stalls.iter().find(|&&(s0, s1)| start >= s0 && start < s1)
                {
                    start = end;
                }
                let k = wi.unwrap_or_else(|| if a >= ws { window_of(a) } else { 0 });
                let factor = if a >= ws { speed[k] } else { 1.0 };
                last_done = start + service.sample(&mut rng) * 1e9 / factor;
                let done = last_done as u64 + base_ns;
                in_flight.push_back(done);
                if !in_window {
                    continue;
                }
                metrics.record_lag(sec_of(a), 0);
                if let Some(w) = wi.and_then(|i| metrics.windows.get_mut(i)) {
                    w.sent += 1;
                    w.lag.saturating_record(0);
                }
                if done > drain_end {
                    metrics.counters.timeouts += 1;
                    continue;
                }
                let lat = ((done - a) as f64 * stretch[k]) as u64;
                metrics.record_response(Verb::Get, lat, Some(lat), &ok);
                if let Some(w) = wi.and_then(|i| metrics.windows.get_mut(i)) {
                    w.completed += 1;
                    w.corrected.saturating_record(lat);
                    w.service.saturating_record(lat);
                }
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
        host,
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

    /// One search against the simulated server, as `steps` runs it (windows judged by
    /// `search::judge_window`, the host watch at half the first rate).
    pub fn sim_search(
        sim: &SimServer,
        slo: &Slo,
        p: &Params,
        start: f64,
        seed: u64,
    ) -> search::Knee {
        let c = cfg(&[
            "--rate",
            "80000",
            "--duration",
            "1500ms",
            "--warmup",
            "300ms",
            "--window",
            "250ms",
            "--seed",
            &seed.to_string(),
        ]);
        let mut n = 0u64;
        search::knee(
            slo,
            p,
            start,
            |rate, _| {
                let mut c = c.clone();
                c.seed = seed.wrapping_add(n);
                n += 1;
                c.rate = Some(rate);
                for ph in &mut c.phases {
                    ph.rate = Some(rate);
                }
                let r = run(&c, sim)?;
                let rep = Report::new(&c, &r);
                let v = match rep.verdict {
                    Verdict::Ok => RunVerdict::Ok,
                    Verdict::Saturated => RunVerdict::Saturated,
                    Verdict::ClientBound => RunVerdict::ClientBound,
                };
                let windows = r
                    .metrics
                    .windows
                    .iter()
                    .zip(&r.host)
                    .map(|(w, h)| search::WindowSample {
                        scheduled: w.scheduled,
                        skipped: w.skipped,
                        latency: w.corrected.clone(),
                        disturbed: search::judge_window(
                            slo,
                            &search::WindowFacts {
                                late_share: 0.0,
                                steal: h.steal_server,
                                others: 0.0,
                            },
                        ),
                    })
                    .collect();
                Ok::<Measured, Error>(Measured {
                    verdict: v,
                    windows,
                    figures: serde_json::Value::Null,
                })
            },
            &mut |_| {},
        )
        .unwrap()
    }

    #[test]
    fn the_search_recovers_the_known_knee() {
        // The same search kvload runs against a server, against windows of the
        // simulated queue: the knee within a few % and its interval holding the truth.
        // (With a speed that varies from window to window the pooled curve is no longer
        // the median speed's: bench/capacity/truth.py finds that truth by dense sweeps.)
        let sim = SimServer::parse("service=100k,base=50us").unwrap();
        let slo = Slo::parse("p99<=500us").unwrap();
        let truth = sim.knee(0.99, 500.0).unwrap();
        let mut p = Params::new(1000.0, search::MAX_RATE);
        p.reference = Some(40_000.0);
        // The interval's coverage is checked where the truth is the pooled curve itself
        // (search::tests, bench/capacity/truth.py); here the truth is the steady state of
        // an infinite run, which short windows of a queue at 90% load estimate 0.5% low.
        let mut errs = Vec::new();
        for seed in 0..20 {
            p.seed = seed;
            let k = sim_search(&sim, &slo, &p, 80_000.0, seed * 1000);
            assert!(
                matches!(k.verdict, "ok" | "imprecise"),
                "{} {}",
                k.verdict,
                k.reason
            );
            let est = k.knee.unwrap();
            let (lo, hi) = k.ci.unwrap();
            assert!(lo <= est && est <= hi && hi / lo < 1.1, "{lo} {est} {hi}");
            errs.push((est / truth - 1.0).abs());
        }
        errs.sort_by(f64::total_cmp);
        assert!(errs[17] < 0.02, "{errs:?}");
    }

    #[test]
    fn seen_stalls_are_dropped_and_a_stalling_host_ends_the_search() {
        let slo = Slo::parse("p99<=500us").unwrap();
        let mut p = Params::new(1000.0, search::MAX_RATE);
        p.reference = Some(40_000.0);
        // Every window stalls for 20 ms and the host watch sees it: no knee.
        let sim = SimServer::parse("service=100k,base=50us,stall=1:20:1").unwrap();
        let k = sim_search(&sim, &slo, &p, 80_000.0, 7);
        assert_eq!(k.verdict, "host_disturbed", "{}", k.reason);
        assert!(
            k.knee.is_none() && k.reason.contains("steal"),
            "{}",
            k.reason
        );
        // One window in ten stalls, always seen: dropped, the knee is the server's.
        let sim = SimServer::parse("service=100k,base=50us,stall=0.1:20:1").unwrap();
        let truth = sim.knee(0.99, 500.0).unwrap();
        let k = sim_search(&sim, &slo, &p, 80_000.0, 9);
        assert!(
            (k.knee.unwrap() / truth - 1.0).abs() < 0.05,
            "{:?} vs {truth}",
            k.knee
        );
        assert!(k.windows().1[1] > 0);
    }

    #[test]
    fn the_idle_path_makes_low_rates_fail_and_the_search_still_finds_the_knee() {
        // A 3 ms wake-up for requests finding the server idle: p99 misses 1 ms at low
        // rates, meets it at moderate ones, misses it again near saturation.
        let sim = SimServer::parse("service=50k,base=50us,wake=3000us").unwrap();
        let slo = Slo::parse("p99<=1ms").unwrap();
        let mut p = Params::new(1000.0, search::MAX_RATE);
        p.reference = Some(4_000.0);
        // Started low, in the region the idle path fails.
        let k = sim_search(&sim, &slo, &p, 5_000.0, 3);
        assert!(
            matches!(k.verdict, "ok" | "imprecise"),
            "{} {}",
            k.verdict,
            k.reason
        );
        let knee = k.knee.unwrap();
        assert!(knee > 40_000.0 && knee < 50_000.0, "{knee}");
        assert!(!k.dips.is_empty() && k.dips[0] < 10_000.0, "{:?}", k.dips);
    }
}
