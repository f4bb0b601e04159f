//! Failure paths: bad arguments (exit 2), unreachable servers, reset
//! connections and malformed responses (exit 1), always one line on stderr.

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;

#[test]
fn bad_arguments_exit_2_with_one_line() {
    assert_error(&kvload(&["--rate", "abc"]), 2, "--rate");
    assert_error(&kvload(&["--bogus"]), 2, "--bogus");
    assert_error(
        &kvload(&["--server", "127.0.0.1:1"]),
        2,
        "--rate is required",
    );
    assert_error(&kvload(&["--rate", "10", "--mix", "put:1"]), 2, "--mix");
    assert_error(&kvload(&["--rate", "10", "--key-size", "251"]), 2, "250");
    assert_error(
        &kvload(&["--rate", "10", "--value-size", "2M"]),
        2,
        "item size limit",
    );
    assert_error(
        &kvload(&["--rate", "10", "--duration", "soon"]),
        2,
        "--duration",
    );
    assert_error(&kvload(&["--rate", "10", "--cpus", "1-0"]), 2, "--cpus");
    assert_error(
        &kvload(&["--rate", "10", "--cpus", "1000"]),
        2,
        "not available",
    );
    assert_error(
        &kvload(&["--rate", "10", "--workload", "/nonexistent/w.json"]),
        2,
        "--workload",
    );
    let dir = scratch_dir("cli");
    let w = write_file(
        &dir,
        "w.json",
        r#"{"rate": 10, "phases": [{"duration": "1s", "value_sise": 3}]}"#,
    );
    assert_error(
        &kvload(&["--workload", w.to_str().unwrap()]),
        2,
        "value_sise",
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn help_is_the_manual() {
    let out = kvload(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--server",
        "--protocol",
        "--mode",
        "--rate",
        "--arrival",
        "--connections",
        "--pipeline",
        "--max-outstanding",
        "--duration",
        "--warmup",
        "--cpus",
        "--keys",
        "--key-size",
        "--value-size",
        "--popularity",
        "--mix",
        "--mget-size",
        "--seed",
        "--preload",
        "--no-preload",
        "--workload",
        "--timeout",
        "--spin-us",
        "--json",
        "--quiet",
        "--dump-arrivals",
        "Exit codes",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}

#[test]
fn unreachable_server_exits_1() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    assert_error(
        &kvload(&["--server", &addr, "--rate", "10"]),
        1,
        "Connection refused",
    );
    assert_error(
        &kvload(&["--server", "unix:/nonexistent/kvload.sock", "--rate", "10"]),
        1,
        "cannot connect",
    );
}

/// A fake server: accepts `conns` connections and hands each to `f`.
fn fake_server(conns: usize, f: fn(std::net::TcpStream)) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    thread::spawn(move || {
        for s in l.incoming().take(conns) {
            let s = s.unwrap();
            thread::spawn(move || f(s));
        }
    });
    addr
}

#[test]
fn malformed_response_exits_1() {
    let addr = fake_server(1, |mut s| {
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        let _ = s.write_all(b"HELLO THERE\r\n");
        thread::sleep(std::time::Duration::from_secs(3));
    });
    let out = kvload(&[
        "--server",
        &addr,
        "--rate",
        "100",
        "--connections",
        "1",
        "--no-preload",
        "--duration",
        "1s",
        "--warmup",
        "0s",
    ]);
    assert_error(&out, 1, "malformed response");
}

#[test]
fn connection_closed_mid_run_exits_1() {
    let addr = fake_server(1, |mut s| {
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        // Drop the connection without answering.
    });
    let out = kvload(&[
        "--server",
        &addr,
        "--rate",
        "100",
        "--connections",
        "1",
        "--no-preload",
        "--duration",
        "1s",
        "--warmup",
        "0s",
    ]);
    // The server's close reads as an end of stream, or as a reset when a request
    // it never read was still in its socket (the kernel then sends RST): both say
    // that the server ended the connection.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let needle = if stderr.contains("connection reset by the server") {
        "connection reset by the server"
    } else {
        "closed the connection"
    };
    assert_error(&out, 1, needle);
}

#[test]
fn slow_server_is_saturated_not_a_p99() {
    // Answers every get with a miss, 5 ms after reading it: capacity ~200 req/s
    // per connection; offered 2000 req/s with at most 2 outstanding.
    let addr = fake_server(1, |mut s| {
        let mut buf = vec![0u8; 65536];
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_secs(5) {
            let n = match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let reqs = buf[..n].windows(2).filter(|w| w == b"\r\n").count();
            for _ in 0..reqs {
                thread::sleep(std::time::Duration::from_millis(5));
                if s.write_all(b"END\r\n").is_err() {
                    return;
                }
            }
        }
    });
    let d = run_json(&[
        "--server",
        &addr,
        "--rate",
        "2000",
        "--connections",
        "1",
        "--max-outstanding",
        "2",
        "--no-preload",
        "--mix",
        "get:1",
        "--duration",
        "1s",
        "--warmup",
        "0s",
        "--timeout",
        "100ms",
    ]);
    assert_eq!(d["verdict"], "saturated", "{}", d["verdict_reason"]);
    assert!(u(&d, &["requests", "skipped"]) > 1000);
    assert_eq!(u(&d, &["misses"]), u(&d, &["requests", "completed"]));
}

#[test]
fn connection_reset_mid_run_exits_1() {
    let addr = fake_server(1, |mut s| {
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        // SO_LINGER with a zero timeout makes close() send a RST.
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        use std::os::fd::AsRawFd;
        // SAFETY: valid socket and option struct.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                &linger as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
    });
    let out = kvload(&[
        "--server",
        &addr,
        "--rate",
        "100",
        "--connections",
        "1",
        "--no-preload",
        "--duration",
        "1s",
        "--warmup",
        "0s",
    ]);
    assert_error(&out, 1, "reset");
}
