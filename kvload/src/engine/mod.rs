//! The engine: connects, preloads, starts one pinned thread per CPU on a common
//! timeline, and merges what the threads measured.

pub mod conn;
pub mod preload;
pub mod sim;
pub mod sys;
pub mod watch;
pub mod worker;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::Error;
use crate::config::Config;
use crate::metrics::Metrics;
use conn::StdStream;
pub use preload::PreloadReport;
use worker::{Timeline, Worker};

/// Everything a run measured, merged over threads.
pub struct RunResult {
    pub metrics: Metrics,
    /// CPU time of all threads during the window.
    pub user_ns: u64,
    pub sys_ns: u64,
    /// Part of that CPU time spent busy-polling without events (--spin-us).
    pub spin_ns: u64,
    pub window_ns: u64,
    pub preload: Option<PreloadReport>,
    /// (thread, intended, sent) in ns since the window start, when requested.
    pub arrivals: Vec<(usize, i64, i64)>,
    /// The run's absolute times (CLOCK_MONOTONIC ns): first send, window start, window end.
    pub timeline: (u64, u64, u64),
    /// `--window`: what the host did in each window (engine/watch.rs); empty without.
    pub host: Vec<watch::HostWindow>,
}

/// The bytes that values are cut from (printable, so captures stay readable).
pub fn value_bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Lead time between the last thread start and the common start.
const START_LEAD_NS: u64 = 20_000_000;

pub fn run(cfg: Config) -> Result<RunResult, Error> {
    if let Some(sim) = &cfg.simulate {
        return sim::run(&cfg, sim);
    }
    let cfg = Arc::new(cfg);
    // Connect everything first so that an unreachable server fails fast.
    let mut streams = Vec::with_capacity(cfg.connections);
    for _ in 0..cfg.connections {
        streams.push(StdStream::connect(&cfg.server, cfg.timeout_ns)?);
    }
    let value = Arc::new(value_bytes(cfg.value_buffer_len()));
    let preload = if cfg.preload {
        Some(preload::run(&cfg, &value)?)
    } else {
        None
    };
    let threads = cfg.threads;
    let mut per_thread: Vec<Vec<StdStream>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, s) in streams.into_iter().enumerate() {
        per_thread[i % threads].push(s);
    }
    let start = sys::now_ns() + START_LEAD_NS;
    let tl = Timeline {
        start,
        window_start: start + cfg.warmup_ns,
        window_end: start + cfg.warmup_ns + cfg.duration_ns,
    };
    let abort = Arc::new(AtomicBool::new(false));
    let watch = watch::start(&cfg, tl.window_start);
    let mut handles = Vec::with_capacity(threads);
    for (t, streams) in per_thread.into_iter().enumerate() {
        let w = Worker::new(
            cfg.clone(),
            t,
            cfg.cpus.get(t).copied(),
            streams,
            tl,
            abort.clone(),
            value.clone(),
        );
        let h = std::thread::Builder::new()
            .name(format!("kvload-{t}"))
            .spawn(move || w.run())
            .map_err(|e| Error::runtime(format!("cannot start a thread: {e}")))?;
        handles.push(h);
    }
    let mut results = Vec::with_capacity(threads);
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(r)) => results.push(r),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(Error::runtime("an engine thread panicked"));
            }
        }
    }
    let host = match watch {
        Some(w) => w.finish(
            cfg.window_ns
                .map_or(0, |w| cfg.duration_ns.div_ceil(w) as usize),
            first_err.is_some(),
        ),
        None => Vec::new(),
    };
    if let Some(e) = first_err {
        return Err(e);
    }
    let mut it = results.into_iter().enumerate();
    let (_, first) = it.next().expect("at least one thread");
    let ws = tl.window_start as i64;
    let mut arrivals: Vec<(usize, i64, i64)> = first
        .arrivals
        .iter()
        .map(|&(i, s)| (0, i as i64 - ws, s as i64 - ws))
        .collect();
    let mut metrics = first.metrics;
    let (mut user_ns, mut sys_ns, mut spin_ns) = (first.user_ns, first.sys_ns, first.spin_ns);
    for (t, r) in it {
        metrics.merge(&r.metrics);
        user_ns += r.user_ns;
        sys_ns += r.sys_ns;
        spin_ns += r.spin_ns;
        arrivals.extend(
            r.arrivals
                .iter()
                .map(|&(i, s)| (t, i as i64 - ws, s as i64 - ws)),
        );
    }
    if cfg.mode == crate::config::Mode::Closed {
        metrics.service_from_corrected();
    }
    Ok(RunResult {
        metrics,
        user_ns,
        sys_ns,
        spin_ns,
        window_ns: cfg.duration_ns,
        preload,
        arrivals,
        timeline: (tl.start, tl.window_start, tl.window_end),
        host,
    })
}
