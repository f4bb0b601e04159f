//! Microbenchmark of kvload's per-request bookkeeping, timed over 10M requests:
//! advancing the seeded arrival schedule, drawing the request (verb, key, size),
//! two clock reads (send and receive stamps), and recording the schedule lag,
//! corrected and service latency per verb and in total, and the per-second
//! series. Everything except the socket I/O the engine does per request.
//!
//! Usage: record_overhead [ITERATIONS]

use std::hint::black_box;

use clap::Parser;
use kvload::config::{Cli, Config};
use kvload::engine::sys::{Clock, now_ns};
use kvload::metrics::Metrics;
use kvload::protocol::Outcome;
use kvload::workload::{Request, Schedule, Workload};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("iterations"))
        .unwrap_or(10_000_000);
    let cli = Cli::parse_from([
        "kvload",
        "--rate",
        "1000000",
        "--mix",
        "get:9,set:1",
        "--popularity",
        "zipf:0.99",
        "--value-size",
        "etc",
        "--duration",
        "10s",
    ]);
    let cfg = Config::build(cli).expect("config");
    let start = now_ns();
    let mut sched = Schedule::new(&cfg, 0, start, start);
    let mut wl = Workload::new(&cfg, 0);
    let mut req = Request::with_capacity(cfg.mget_size);
    let mut m = Metrics::new(10);
    let ok = Outcome {
        hits: 1,
        misses: 0,
        error: None,
    };

    let per = |t0: u64| (now_ns() - t0) as f64 / n as f64;

    // 1. The schedule: next intended send time (Poisson).
    let t0 = now_ns();
    let mut acc = 0u64;
    for _ in 0..n {
        acc = acc.wrapping_add(sched.peek());
        sched.advance();
    }
    black_box(acc);
    let schedule_ns = per(t0);

    // 2. Timestamps: one read of the engine's clock (the engine reads the clock once per batch
    // for sends and once per read for receives, so this is an upper bound per stamp).
    let clock = Clock::new();
    let t0 = now_ns();
    for _ in 0..n {
        acc = acc.wrapping_add(clock.now());
    }
    black_box(acc);
    let clock_ns = per(t0);
    let t0 = now_ns();
    for _ in 0..n {
        acc = acc.wrapping_add(now_ns());
    }
    black_box(acc);
    let gettime_ns = per(t0);

    // 3. Histograms and counters: lag, corrected and service per verb and total, series.
    let t0 = now_ns();
    for i in 0..n {
        let lag = (i * 7919) % 5_000;
        let service = 20_000 + ((i * 104_729) % 50_000);
        let corrected = service + lag;
        let sec = ((i >> 20) % 10) as usize;
        let verb = if i % 10 == 0 {
            kvload::config::Verb::Set
        } else {
            kvload::config::Verb::Get
        };
        m.record_lag(sec, lag);
        m.record_response(verb, corrected, Some(service), &ok);
        m.record_second(sec, corrected, false);
    }
    black_box(&m);
    let record_ns = per(t0);

    // 4. Not recording but reported for context: drawing the request (verb, Zipf key, ETC size).
    let t0 = now_ns();
    for _ in 0..n {
        wl.next(0, &mut req);
        acc = acc.wrapping_add(req.keys[0]);
    }
    black_box(acc);
    let request_ns = per(t0);

    let overhead = schedule_ns + 2.0 * clock_ns + record_ns;
    println!(
        "iterations={n} schedule_ns={schedule_ns:.1} clock_read_ns={clock_ns:.1} histograms_ns={record_ns:.1} recording_overhead_ns={overhead:.1} (schedule + 2 clock reads + histograms) request_generation_ns={request_ns:.1} clock_gettime_ns={gettime_ns:.1}"
    );
}
