//! `--search` and `--ramp` against a real memcached: the document's shape, the steps and
//! the verdicts that do not depend on the host's speed.

mod common;

use common::{memcached_tcp, run_json};
use serde_json::Value;

fn steps(doc: &Value) -> &Vec<Value> {
    doc["steps"].as_array().expect("steps")
}

#[test]
fn a_search_whose_range_meets_the_slo_says_so_without_a_knee() {
    let mc = memcached_tcp(&[]);
    // 2000..4000 req/s with a 50 ms p99 bound: every step passes, so the capacity is above
    // the range (range_top), and no knee is claimed. (A p99 needs a few hundred requests
    // to be shown within a bound: fewer than 300 leave the share over it in doubt.)
    let doc = run_json(&[
        "--server",
        &mc.addr,
        "--search",
        "p99<=50ms",
        "--search-range",
        "2000:4000",
        "--duration",
        "500ms",
        "--window",
        "100ms",
        "--warmup",
        "100ms",
        "--connections",
        "2",
        "--keys",
        "100",
    ]);
    assert_eq!(doc["schema"], "kvload/search/2");
    assert_eq!(doc["kind"], "search");
    // A host busy with other work moves the reference rate's latency: said, no knee.
    if doc["verdict"].as_str().unwrap().starts_with("host_") {
        assert!(doc["knee"].is_null() && doc["reason"].as_str().unwrap().contains("host"));
        return;
    }
    assert_eq!(doc["verdict"], "range_top", "{}", doc["reason"]);
    assert!(doc["knee"].is_null() && doc["ci"].is_null());
    assert_eq!(doc["slo"]["bound_us"], 50_000.0);
    assert_eq!(doc["slo"]["latency"], "corrected");
    let all = steps(&doc);
    assert!(!all.is_empty() && all.iter().all(|x| x["outcome"] == "pass"));
    // The host watch's reference (half the first rate, within the range) runs first and
    // last; the search's first step is the geometric middle of the range and each later
    // one is higher.
    assert_eq!(all[0]["purpose"], "reference");
    assert_eq!(all[0]["rate"].as_f64().unwrap(), 2000.0);
    assert_eq!(all.last().unwrap()["purpose"], "reference");
    // Start and end; the end looked at again when it seemed to move (a busy host).
    let looks = doc["reference"].as_array().unwrap();
    assert!(looks.len() == 2 || (looks.len() == 3 && looks[1]["moved"] == true));
    let s: Vec<&Value> = all.iter().filter(|x| x["purpose"] == "search").collect();
    let first = s[0]["rate"].as_f64().unwrap();
    assert!(
        (first - (2000.0f64 * 4000.0).sqrt()).abs() < 1e-6,
        "{first}"
    );
    assert_eq!(s.last().unwrap()["rate"].as_f64().unwrap(), 4000.0);
    // Each run is judged by its windows (--window; about 250 ms by default).
    for x in all {
        assert!(x["windows"].as_u64().unwrap() >= 1);
        let w = x["figures"]["windows"].as_array().unwrap();
        assert_eq!(w.len() as u64, x["windows"].as_u64().unwrap());
        assert!(x["ci"][0].as_f64().unwrap() <= x["latency_us"].as_f64().unwrap());
    }
    let s = all;
    // Each step carries a whole run's figures (not the config, echoed once at the top).
    let f = &s[0]["figures"];
    assert!(f["achieved_rate"].as_f64().unwrap() > 1000.0);
    assert!(
        f["latency"]["total"]["corrected"]["p99_us"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert!(f.get("config").is_none() && doc["config"]["mode"] == "open");
    // The keyspace is preloaded before the first step only.
    assert!(!f["preload"].is_null());
    assert!(s[1..].iter().all(|x| x["figures"]["preload"].is_null()));
}

#[test]
fn a_bound_no_rate_meets_is_no_pass() {
    let mc = memcached_tcp(&[]);
    // A 1 µs p99 of the service time is below any loopback round trip.
    let doc = run_json(&[
        "--server",
        &mc.addr,
        "--search",
        "service.p99<=1us",
        "--search-range",
        "300:1000",
        "--duration",
        "200ms",
        "--warmup",
        "100ms",
        "--connections",
        "2",
        "--keys",
        "100",
    ]);
    assert_eq!(doc["verdict"], "no_pass", "{}", doc["reason"]);
    assert!(doc["knee"].is_null() && doc["bracket"]["highest_pass"].is_null());
    // Said only after the rates from the range's bottom up to its top were tried.
    let rates: Vec<f64> = steps(&doc)
        .iter()
        .map(|x| x["rate"].as_f64().unwrap())
        .collect();
    assert!(
        rates.contains(&300.0) && rates.iter().any(|&r| r >= 1000.0 * 0.98),
        "{rates:?}"
    );
}

#[test]
fn a_search_converges_between_a_pass_and_a_fail() {
    let mc = memcached_tcp(&[]);
    // The mean latency crosses a p50 bound set between the unloaded latency and a
    // saturated server's; any host converges somewhere: the bracket is what is checked.
    let doc = run_json(&[
        "--server",
        &mc.addr,
        "--search",
        "p50<=20ms",
        "--precision",
        "10%",
        "--search-range",
        "1k:10M",
        "--rate",
        "2000",
        "--duration",
        "300ms",
        "--window",
        "100ms",
        "--warmup",
        "100ms",
        "--connections",
        "4",
        "--keys",
        "1000",
        "--max-steps",
        "30",
    ]);
    let verdict = doc["verdict"].as_str().unwrap();
    // On a host where the client runs out first, the search must say so instead.
    if verdict == "client_bound" {
        assert!(doc["knee"].is_null());
        assert!(doc["reason"].as_str().unwrap().contains("no knee"));
        return;
    }
    // A host busy with other work may disturb it: said, never a knee.
    if verdict.starts_with("host_") {
        assert!(doc["knee"].is_null());
        return;
    }
    // Near the client's limit a window's verdict can flip from run to run: the search
    // re-measures and may run out of runs first. It says so, with the bracket it holds
    // and a knee inside it, never a precision it did not reach.
    let converged = verdict == "ok";
    assert!(
        converged || verdict == "imprecise",
        "{verdict}: {}",
        doc["reason"]
    );
    let (lo, hi) = (
        doc["bracket"]["highest_pass"].as_f64().unwrap(),
        doc["bracket"]["lowest_fail"].as_f64().unwrap(),
    );
    if !converged {
        let reason = doc["reason"].as_str().unwrap();
        assert!(reason.contains("30 runs ran out"), "{reason}");
        assert!(
            hi / lo - 1.0 > 0.1,
            "imprecise, yet {lo}…{hi} is within 10%"
        );
        assert!(steps(&doc).len() >= 30, "{reason}");
    }
    // The knee is interpolated inside the bracket, within its interval.
    let knee = doc["knee"].as_f64().unwrap();
    assert!(lo <= knee && knee <= hi, "{lo} {knee} {hi}");
    let (clo, chi) = (
        doc["ci"][0].as_f64().unwrap(),
        doc["ci"][1].as_f64().unwrap(),
    );
    assert!(clo <= knee && knee <= chi, "{clo} {knee} {chi}");
    assert!(
        hi > lo && (!converged || hi / lo - 1.0 <= 0.1 + 1e-9),
        "{lo} {hi}"
    );
    let s = steps(&doc);
    assert!(
        s.iter()
            .any(|x| x["rate"].as_f64() == Some(lo) && x["outcome"] == "pass")
    );
    assert!(
        s.iter()
            .any(|x| x["rate"].as_f64() == Some(hi) && x["outcome"] != "pass")
    );
}

#[test]
fn a_ramp_runs_every_rate_in_the_order_asked() {
    let mc = memcached_tcp(&[]);
    let doc = run_json(&[
        "--server",
        &mc.addr,
        "--ramp",
        "500:2000:500:shuffle",
        "--seed",
        "7",
        "--duration",
        "200ms",
        "--warmup",
        "100ms",
        "--connections",
        "2",
        "--keys",
        "100",
    ]);
    assert_eq!(doc["kind"], "ramp");
    assert_eq!(doc["order"], "shuffled");
    let mut rates: Vec<f64> = steps(&doc)
        .iter()
        .map(|x| x["rate"].as_f64().unwrap())
        .collect();
    let ran = rates.clone();
    rates.sort_by(f64::total_cmp);
    assert_eq!(rates, vec![500.0, 1000.0, 1500.0, 2000.0]);
    assert_ne!(ran, rates, "shuffled with seed 7");
    for s in steps(&doc) {
        let achieved = s["figures"]["achieved_rate"].as_f64().unwrap();
        let offered = s["rate"].as_f64().unwrap();
        assert!(
            (achieved / offered - 1.0).abs() < 0.3,
            "{achieved} vs {offered}"
        );
    }
}

#[test]
fn a_cpu_hog_on_the_servers_cpu_ends_the_search_as_host_disturbed() {
    // memcached on CPU 0 shares it with a busy loop: every window sees another task on
    // the server's CPU, so the search must end "host disturbed", never with a knee.
    let mc = memcached_tcp(&[]);
    let pin = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", "0", &mc.pid().to_string()])
        .output()
        .expect("taskset");
    assert!(pin.status.success(), "{pin:?}");
    let mut hog = std::process::Command::new("taskset")
        .args(["-c", "0", "sh", "-c", "while :; do :; done"])
        .spawn()
        .expect("a busy loop");
    let doc = run_json(&[
        "--server",
        &mc.addr,
        "--search",
        "p99<=50ms",
        "--search-range",
        "500:2000",
        "--duration",
        "500ms",
        "--warmup",
        "100ms",
        "--connections",
        "2",
        "--keys",
        "100",
        "--cpus",
        "1",
        "--watch-cpus",
        "0",
        "--watch-pid",
        &mc.pid().to_string(),
    ]);
    let _ = hog.kill();
    let _ = hog.wait();
    assert_eq!(doc["verdict"], "host_disturbed", "{}", doc["reason"]);
    assert!(doc["knee"].is_null());
    assert!(
        doc["reason"]
            .as_str()
            .unwrap()
            .contains("another task ran on the server's CPUs"),
        "{}",
        doc["reason"]
    );
    assert!(doc["windows"]["dropped"]["others"].as_u64().unwrap() > 0);
}

#[test]
fn a_corrected_bound_below_any_round_trip_is_no_pass() {
    // A 1 µs corrected p99: every request is over it by its service time alone, so no
    // window is the client's doing (kvload's lateness puts no request over the bound that
    // the server did not): no rate meets it, said after the rates up to the range's top.
    let mc = memcached_tcp(&[]);
    let doc = run_json(&[
        "--server",
        &mc.addr,
        "--search",
        "p99<=1us",
        "--search-range",
        "300:1000",
        "--duration",
        "200ms",
        "--warmup",
        "100ms",
        "--connections",
        "2",
        "--keys",
        "100",
    ]);
    if doc["verdict"].as_str().unwrap().starts_with("host_") {
        assert!(doc["knee"].is_null());
        return;
    }
    assert_eq!(doc["verdict"], "no_pass", "{}", doc["reason"]);
    assert!(doc["knee"].is_null());
}
