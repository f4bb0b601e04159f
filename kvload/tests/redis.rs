//! Integration tests against a real redis-server started on loopback.

mod common;
use common::*;

#[test]
fn resp_open_loop_all_verbs() {
    let s = redis(&[]);
    let d = run_json(&[
        "--server",
        &s.addr,
        "--protocol",
        "resp",
        "--rate",
        "4000",
        "--duration",
        "1500ms",
        "--warmup",
        "300ms",
        "--mix",
        "get:6,mget:2,set:2,delete:1",
        "--mget-size",
        "5",
        "--popularity",
        "hotset:0.1:0.9",
        "--value-size",
        "list:100:3,4K:1",
    ]);
    assert_schema(&d);
    for v in ["get", "mget", "set", "delete"] {
        assert!(
            d["latency"]["per_verb"][v]["service"]["count"]
                .as_u64()
                .unwrap()
                > 0,
            "{v}"
        );
    }
    let achieved = f(&d, &["achieved_rate"]);
    assert!(
        (achieved / 4000.0 - 1.0).abs() < 0.08,
        "achieved {achieved}"
    );
    assert!(u(&d, &["hits"]) > 0);
    assert!(u(&d, &["misses"]) > 0, "deletes must cause misses");
    assert_eq!(u(&d, &["errors", "total"]), 0);
    assert_eq!(d["preload"]["verified"], 1000);
}

#[test]
fn resp_closed_loop_pipelined() {
    let s = redis(&[]);
    let d = run_json(&[
        "--server",
        &s.addr,
        "--protocol",
        "resp",
        "--mode",
        "closed",
        "--connections",
        "4",
        "--pipeline",
        "16",
        "--duration",
        "1s",
        "--warmup",
        "200ms",
        "--mix",
        "get:1",
    ]);
    assert_schema(&d);
    assert!(f(&d, &["achieved_rate"]) > 10_000.0);
    assert_eq!(d["hit_ratio"], 1.0);
    assert_eq!(d["config"]["pipeline"], 16);
}

#[test]
fn redis_oom_is_counted_as_out_of_memory() {
    let s = redis(&["--maxmemory", "2mb", "--maxmemory-policy", "noeviction"]);
    let d = run_json(&[
        "--server",
        &s.addr,
        "--protocol",
        "resp",
        "--rate",
        "2000",
        "--duration",
        "1s",
        "--warmup",
        "100ms",
        "--mix",
        "set:1",
        "--value-size",
        "10K",
        "--keys",
        "5000",
        "--no-preload",
    ]);
    assert!(u(&d, &["errors", "out_of_memory"]) > 0, "{}", d["errors"]);
    assert_eq!(u(&d, &["errors", "server_error"]), 0);
}
