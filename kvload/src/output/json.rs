//! The versioned JSON document (schema `kvload/1.1`, documented in docs/kvload.md).

use serde_json::{Map, Value, json};

use super::Report;
use crate::config::Config;
use crate::metrics::Percentiles;

fn pct(p: &Percentiles) -> Value {
    serde_json::to_value(p).expect("percentiles serialize")
}

/// Every effective option.
pub fn config_echo(cfg: &Config) -> Value {
    let mut offset_ns = 0u64;
    let phases: Vec<Value> = cfg
        .phases
        .iter()
        .map(|p| {
            let start_ns = offset_ns;
            offset_ns += p.duration_ns;
            json!({
                "start_s": start_ns as f64 / 1e9,
                "duration_s": p.duration_ns as f64 / 1e9,
                "rate": p.rate,
                "value_size": p.value_size.to_string(),
                "popularity": p.popularity.to_string(),
                "mix": p.mix.to_string(),
            })
        })
        .collect();
    let mut echo = json!({
        "server": match &cfg.simulate {
            Some(sim) => format!("simulated: {}", sim.text()),
            None => cfg.server.to_string(),
        },
        "protocol": cfg.protocol.name(),
        "mode": cfg.mode.name(),
        "rate": cfg.rate,
        "arrival": cfg.arrival.name(),
        "connections": cfg.connections,
        "pipeline": cfg.pipeline,
        "max_outstanding": cfg.max_outstanding,
        "duration_s": cfg.duration_ns as f64 / 1e9,
        "warmup_s": cfg.warmup_ns as f64 / 1e9,
        "cpus": cfg.cpus,
        "threads": cfg.threads,
        "keys": cfg.keys,
        "key_size": cfg.key_size.to_string(),
        "value_size": cfg.value_size.to_string(),
        "popularity": cfg.popularity.to_string(),
        "mix": cfg.mix.to_string(),
        "ttl": cfg.ttl.to_string(),
        "key_buckets": cfg.key_buckets.len(),
        "per_key_sizes": cfg.phases.iter().any(|p| p.per_key_values),
        "rate_scale": cfg.rate_scale,
        "mget_size": cfg.mget_size,
        "seed": cfg.seed,
        "preload": cfg.preload,
        "timeout_s": cfg.timeout_ns as f64 / 1e9,
        "spin_us": cfg.spin_ns / 1000,
        "realtime": cfg.realtime,
        "max_item_size": cfg.max_item_size,
        "workload_file": cfg.workload_file.as_ref().map(|p| p.display().to_string()),
        "trace": cfg.trace.as_ref().map(|t| json!({
            "file": t.path.display().to_string(),
            "requests": t.recs.len(),
            "keys": t.keys(),
            "span_s": t.span_ns as f64 / 1e9,
            "speed": t.speed,
        })),
        "phases": phases,
        "window_s": cfg.window_ns.map(|w| w as f64 / 1e9),
        "watch": json!({"pid": cfg.watch_pid, "cpus": cfg.watch_cpus}),
    });
    if let (Some(sim), Some(o)) = (&cfg.simulate, echo.as_object_mut()) {
        // The service rate of this run's simulated server (drawn from --seed).
        o.insert(
            "simulated_service_rate".into(),
            json!(sim.server_rate(cfg.seed)),
        );
    }
    echo
}

pub fn document(r: &Report) -> Value {
    let cfg = r.cfg;
    let m = &r.run.metrics;
    let c = &m.counters;
    let (total_c, total_s) = r.total();
    let mut per_verb = Map::new();
    for (v, pc, ps) in r.per_verb() {
        per_verb.insert(
            v.name().into(),
            json!({"corrected": pct(&pc), "service": pct(&ps)}),
        );
    }
    let series: Vec<Value> = r
        .series
        .iter()
        .map(|s| {
            json!({
                "t": s.t,
                "completed": s.completed,
                "rate": s.rate,
                "p50_us": s.p50_us,
                "p99_us": s.p99_us,
                "lag_mean_us": s.lag_mean_us,
                "errors": s.errors,
            })
        })
        .collect();
    // Closed mode has no schedule: the lag histogram is empty (count 0), which
    // keeps the key's type stable for consumers.
    let schedule_lag = pct(&Percentiles::of(&m.lag));
    json!({
        "schema": crate::SCHEMA,
        "kvload_version": crate::VERSION,
        "config": config_echo(cfg),
        "placement": {"cpus": cfg.cpus, "threads": cfg.threads, "pinned": !cfg.cpus.is_empty()},
        "duration_s": r.duration_s,
        "offered_rate": r.offered_rate,
        "achieved_rate": r.achieved_rate,
        "requests": {
            "scheduled": c.scheduled,
            "sent": c.sent,
            "completed": c.completed,
            "skipped": c.skipped,
            "timeouts": c.timeouts,
        },
        "hits": c.hits,
        "misses": c.misses,
        "hit_ratio": r.hit_ratio(),
        "errors": serde_json::to_value(c.errors).expect("errors serialize"),
        "latency": {
            "total": {"corrected": pct(&total_c), "service": pct(&total_s)},
            "per_verb": per_verb,
        },
        "schedule_lag": schedule_lag,
        "timeline": {
            "clock": "monotonic",
            "start_ns": r.run.timeline.0,
            "window_start_ns": r.run.timeline.1,
            "window_end_ns": r.run.timeline.2,
        },
        "client_cpu": {
            "user_s": r.run.user_ns as f64 / 1e9,
            "sys_s": r.run.sys_ns as f64 / 1e9,
            "spin_s": r.run.spin_ns as f64 / 1e9,
            "utilization": r.utilization,
        },
        "preload": r.run.preload.map(|p| json!({
            "keys": p.keys,
            "verified": p.verified,
            "sampled": p.sampled,
            "errors": p.errors,
            "seconds": p.seconds,
        })),
        "series": series,
        "windows": windows(r),
        "verdict": r.verdict.name(),
        "verdict_reason": r.verdict_reason,
    })
}

/// `--window`: one object per window (null without): its requests, schedule lag,
/// latency percentiles and what the host did (engine/watch.rs; null where unmeasured).
fn windows(r: &Report) -> Value {
    let m = &r.run.metrics;
    if m.window_ns == 0 {
        return Value::Null;
    }
    let fin = |x: f64| if x.is_finite() { json!(x) } else { Value::Null };
    let q = |h: &hdrhistogram::Histogram<u64>, q: f64| {
        if h.is_empty() {
            Value::Null
        } else {
            json!(h.value_at_quantile(q) as f64 / 1000.0)
        }
    };
    Value::Array(
        m.windows
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let h = r.run.host.get(i);
                json!({
                    "t_s": (i as u64 * m.window_ns) as f64 / 1e9,
                    "scheduled": w.scheduled,
                    "sent": w.sent,
                    "skipped": w.skipped,
                    "completed": w.completed,
                    "errors": w.errors,
                    "lag_mean_us": w.lag_mean_us(),
                    "lag_max_us": w.lag_max_ns as f64 / 1000.0,
                    "lag_p99_us": q(&w.lag, 0.99),
                    "lag_p999_us": q(&w.lag, 0.999),
                    "p50_us": q(&w.corrected, 0.5),
                    "p99_us": q(&w.corrected, 0.99),
                    "p999_us": q(&w.corrected, 0.999),
                    "service_p99_us": q(&w.service, 0.99),
                    "host": h.map(|h| json!({
                        "steal_server": fin(h.steal_server),
                        "steal_client": fin(h.steal_client),
                        "others_server": fin(h.others_server),
                        "server_busy": fin(h.server_busy),
                    })),
                })
            })
            .collect(),
    )
}
