//! Integration tests against a real memcached started on loopback.

mod common;
use common::*;

#[test]
fn open_loop_text_protocol_hits_the_rate_and_reports_everything() {
    let s = memcached_tcp(&[]);
    let d = run_json(&[
        "--server",
        &s.addr,
        "--rate",
        "4000",
        "--duration",
        "2s",
        "--warmup",
        "300ms",
        "--connections",
        "4",
        "--mix",
        "get:9,set:1",
        "--keys",
        "5000",
        "--cpus",
        "1",
    ]);
    assert_schema(&d);
    assert_eq!(d["config"]["protocol"], "memcache");
    assert_eq!(d["placement"]["cpus"][0], 1);
    let achieved = f(&d, &["achieved_rate"]);
    assert!(
        (achieved / 4000.0 - 1.0).abs() < 0.06,
        "achieved {achieved}"
    );
    assert_eq!(u(&d, &["preload", "keys"]), 5000);
    assert_eq!(u(&d, &["preload", "verified"]), 1000);
    // Every key was preloaded, so every get hits.
    assert!(u(&d, &["hits"]) > 5000);
    assert_eq!(u(&d, &["misses"]), 0);
    assert_eq!(d["hit_ratio"], 1.0);
    assert_eq!(u(&d, &["errors", "total"]), 0);
    assert_eq!(u(&d, &["requests", "skipped"]), 0);
    let sched = u(&d, &["requests", "scheduled"]);
    assert_eq!(u(&d, &["requests", "completed"]), sched);
    assert!(
        d["latency"]["per_verb"]["set"]["corrected"]["count"]
            .as_u64()
            .unwrap()
            > 100
    );
    let c = &d["latency"]["total"]["corrected"];
    let sv = &d["latency"]["total"]["service"];
    // Corrected latency includes the schedule lag, so it is never below service time.
    assert!(c["p50_us"].as_f64().unwrap() >= sv["p50_us"].as_f64().unwrap());
    assert!(c["p50_us"].as_f64().unwrap() > 0.0);
    assert_eq!(d["series"].as_array().unwrap().len(), 2);
    assert_eq!(d["verdict"], "ok", "{}", d["verdict_reason"]);
}

#[test]
fn meta_protocol_mixed_verbs_zipf_and_etc_sizes() {
    let s = memcached_tcp(&[]);
    let d = run_json(&[
        "--server",
        &s.addr,
        "--protocol",
        "meta",
        "--rate",
        "3000",
        "--duration",
        "1s",
        "--warmup",
        "200ms",
        "--mix",
        "get:6,mget:2,set:2,delete:1",
        "--mget-size",
        "4",
        "--popularity",
        "zipf:0.99",
        "--key-size",
        "etc",
        "--value-size",
        "etc",
        "--arrival",
        "etc",
    ]);
    assert_schema(&d);
    for v in ["get", "mget", "set", "delete"] {
        assert!(
            d["latency"]["per_verb"][v]["corrected"]["count"]
                .as_u64()
                .unwrap()
                > 0,
            "{v} missing"
        );
    }
    assert!(u(&d, &["hits"]) > 0);
    // Deletes of hot keys cause misses.
    assert!(u(&d, &["misses"]) > 0);
    assert_eq!(u(&d, &["errors", "total"]), 0);
}

#[test]
fn closed_loop_over_unix_socket() {
    let s = memcached_unix(&[]);
    let d = run_json(&[
        "--server",
        &s.addr,
        "--mode",
        "closed",
        "--connections",
        "2",
        "--pipeline",
        "8",
        "--duration",
        "1s",
        "--warmup",
        "200ms",
        "--mix",
        "get:1",
    ]);
    assert_schema(&d);
    assert!(d["offered_rate"].is_null());
    assert_eq!(d["schedule_lag"]["count"], 0);
    assert!(f(&d, &["achieved_rate"]) > 1000.0);
    let c = &d["latency"]["total"]["corrected"];
    assert_eq!(c, &d["latency"]["total"]["service"]);
    assert_eq!(d["hit_ratio"], 1.0);
}

#[test]
fn phases_shift_value_sizes_and_out_of_memory_is_counted_apart() {
    // -M: return errors instead of evicting; 8 MB cannot hold 100 KB values for long.
    let s = memcached_tcp(&["-m", "8", "-M"]);
    let dir = scratch_dir("phases");
    let w = write_file(
        &dir,
        "w.json",
        r#"{"mix": "set:1", "rate": 2000, "keys": 2000, "preload": false,
            "phases": [{"duration": "400ms", "value_size": 100},
                       {"duration": "400ms", "value_size": "1K"},
                       {"duration": "400ms", "value_size": "10K"},
                       {"duration": "800ms", "value_size": "100K"}]}"#,
    );
    let d = run_json(&[
        "--server",
        &s.addr,
        "--workload",
        w.to_str().unwrap(),
        "--warmup",
        "100ms",
    ]);
    assert_schema(&d);
    assert_eq!(d["config"]["phases"].as_array().unwrap().len(), 4);
    assert_eq!(d["config"]["phases"][3]["value_size"], "102400");
    assert!((f(&d, &["duration_s"]) - 2.0).abs() < 1e-9);
    let oom = u(&d, &["errors", "out_of_memory"]);
    assert!(oom > 0, "no out-of-memory errors: {}", d["errors"]);
    assert_eq!(
        u(&d, &["errors", "total"]),
        oom + u(&d, &["errors", "server_error"])
    );
    // The early phases fit, so not everything failed.
    assert!(oom < u(&d, &["requests", "completed"]));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn preload_verification_failure_is_a_clear_runtime_error() {
    let s = memcached_tcp(&["-m", "8", "-M"]);
    let out = kvload(&[
        "--server",
        &s.addr,
        "--rate",
        "100",
        "--duration",
        "1s",
        "--keys",
        "2000",
        "--value-size",
        "100K",
    ]);
    assert_error(&out, 1, "preload verification failed");
}

#[test]
fn overload_is_reported_saturated() {
    // One connection with at most 4 outstanding cannot carry 200k req/s through
    // a server that needs a few µs per request: arrivals are skipped.
    let s = memcached_tcp(&[]);
    let d = run_json(&[
        "--server",
        &s.addr,
        "--rate",
        "400000",
        "--connections",
        "1",
        "--max-outstanding",
        "1",
        "--duration",
        "1s",
        "--warmup",
        "200ms",
        "--no-preload",
    ]);
    assert_schema(&d);
    assert!(u(&d, &["requests", "skipped"]) > 0);
    assert_ne!(d["verdict"], "ok");
    assert!(!d["verdict_reason"].as_str().unwrap().is_empty());
}

#[test]
fn same_seed_same_schedule_different_seed_different_schedule() {
    let s = memcached_tcp(&[]);
    let dir = scratch_dir("seed");
    let run = |seed: &str, name: &str| {
        let p = dir.join(name);
        let _ = run_json(&[
            "--server",
            &s.addr,
            "--rate",
            "2000",
            "--duration",
            "500ms",
            "--warmup",
            "100ms",
            "--seed",
            seed,
            "--no-preload",
            "--dump-arrivals",
            p.to_str().unwrap(),
        ]);
        let text = std::fs::read_to_string(p).unwrap();
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(' ').nth(1).unwrap().parse::<i64>().unwrap())
            .collect::<Vec<_>>()
    };
    let a = run("7", "a");
    let b = run("7", "b");
    let c = run("8", "c");
    assert!(a.len() > 800, "{}", a.len());
    assert!(
        a == b,
        "same seed, different schedules ({} vs {} arrivals)",
        a.len(),
        b.len()
    );
    assert!(a != c, "different seeds, same schedule");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn two_pinned_threads_share_the_rate_and_merge() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(
        cpus >= 2,
        "needs 2 CPUs (kvtune's own placement does too), found {cpus}"
    );
    let s = memcached_tcp(&[]);
    let d = run_json(&[
        "--server",
        &s.addr,
        "--rate",
        "4000",
        "--arrival",
        "fixed",
        "--duration",
        "1s",
        "--warmup",
        "200ms",
        "--cpus",
        "0-1",
        "--connections",
        "4",
        "--mix",
        "get:1",
    ]);
    assert_schema(&d);
    assert_eq!(d["placement"]["threads"], 2);
    let sched = u(&d, &["requests", "scheduled"]);
    // Two fixed-interval streams of 2000/s, interleaved: 4000 arrivals in 1 s.
    assert!(sched.abs_diff(4000) <= 2, "scheduled {sched}");
    assert_eq!(u(&d, &["requests", "completed"]), sched);
    let series: u64 = d["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["completed"].as_u64().unwrap())
        .sum();
    assert!(series.abs_diff(4000) <= 50, "series {series}");
    assert_eq!(u(&d, &["latency", "total", "corrected", "count"]), sched);
}
