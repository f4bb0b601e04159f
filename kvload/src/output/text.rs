//! The terminal summary.

use std::fmt::Write;

use super::Report;
use crate::config::Mode;
use crate::metrics::Percentiles;

fn row(out: &mut String, name: &str, p: &Percentiles) {
    let _ = writeln!(
        out,
        "  {:<18} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>10.1}",
        name, p.count, p.p50_us, p.p90_us, p.p99_us, p.p999_us, p.p9999_us, p.max_us
    );
}

pub fn summary(r: &Report) -> String {
    let cfg = r.cfg;
    let c = &r.run.metrics.counters;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "kvload {} | {} {} | {} mode | {} connections x pipeline {} | {} thread(s) on CPUs {}",
        crate::VERSION,
        cfg.protocol.name(),
        cfg.server,
        cfg.mode.name(),
        cfg.connections,
        cfg.pipeline,
        cfg.threads,
        if cfg.cpus.is_empty() {
            "any".to_string()
        } else {
            format!("{:?}", cfg.cpus)
        }
    );
    if let Some(p) = &r.run.preload {
        let _ = writeln!(
            o,
            "preload: {} keys in {:.2}s, {}/{} sampled keys verified",
            p.keys, p.seconds, p.verified, p.sampled
        );
    }
    let offered = r
        .offered_rate
        .map(|x| format!("{x:.0}"))
        .unwrap_or_else(|| "-".into());
    let _ = writeln!(
        o,
        "window {:.1}s: offered {} req/s, achieved {:.0} req/s; scheduled {} sent {} completed {} skipped {} timeouts {}",
        r.duration_s,
        offered,
        r.achieved_rate,
        c.scheduled,
        c.sent,
        c.completed,
        c.skipped,
        c.timeouts
    );
    let hr = r
        .hit_ratio()
        .map(|h| format!("{:.2}%", h * 100.0))
        .unwrap_or_else(|| "-".into());
    let e = &c.errors;
    let _ = writeln!(
        o,
        "hits {} misses {} (hit ratio {}); errors {} (server {}, out of memory {}, client {}, error {})",
        c.hits, c.misses, hr, e.total, e.server_error, e.out_of_memory, e.client_error, e.error
    );
    let _ = writeln!(
        o,
        "latency (us)         {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "count", "p50", "p90", "p99", "p99.9", "p99.99", "max"
    );
    let (tc, ts) = r.total();
    if cfg.mode == Mode::Open {
        row(&mut o, "total corrected", &tc);
    }
    row(&mut o, "total service", &ts);
    for (v, pc, ps) in r.per_verb() {
        if cfg.mode == Mode::Open {
            row(&mut o, &format!("{} corrected", v.name()), &pc);
        }
        row(&mut o, &format!("{} service", v.name()), &ps);
    }
    if cfg.mode == Mode::Open {
        row(&mut o, "schedule lag", &Percentiles::of(&r.run.metrics.lag));
    }
    let _ = writeln!(
        o,
        "client CPU: user {:.2}s sys {:.2}s (busy-polling {:.2}s), utilization {:.1}%",
        r.run.user_ns as f64 / 1e9,
        r.run.sys_ns as f64 / 1e9,
        r.run.spin_ns as f64 / 1e9,
        r.utilization * 100.0
    );
    let _ = write!(o, "verdict: {}", r.verdict.name());
    if !r.verdict_reason.is_empty() {
        let _ = write!(o, " ({})", r.verdict_reason);
    }
    o.push('\n');
    o
}
