//! Test harness: starts real servers on free loopback ports, runs the kvload
//! binary, and parses its JSON.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A server process killed when dropped.
pub struct Server {
    child: Child,
    pub port: u16,
    pub addr: String,
    pub dir: PathBuf,
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The server binary on PATH; a missing one fails the test (as the Python tests do), since
/// `make setup` installs it.
pub fn require_binary(name: &str) -> PathBuf {
    find_binary(name).unwrap_or_else(|| {
        panic!("{name} is not installed: run `make setup` (make test installs it)")
    })
}

pub fn scratch_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "kvload-test-{tag}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Whether a server answers on 127.0.0.1:`port`: `ask` sent, a reply that starts with
/// `reply` read back. A bare connect is not enough: a port another process holds (ours
/// then failing to bind and exiting), or a connect to a port nothing listens on that Linux
/// pairs with itself (its source port the same), would look ready.
fn answers(port: u16, ask: &[u8], reply: &[u8]) -> bool {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    exchange(s, ask, reply)
}

/// `answers` on a unix socket (memcached with -s listens there only).
fn answers_unix(path: &Path, ask: &[u8], reply: &[u8]) -> bool {
    let Ok(s) = std::os::unix::net::UnixStream::connect(path) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    exchange(s, ask, reply)
}

/// `ask` written on a connected stream, and whether the answer starts with `reply`.
fn exchange(mut s: impl std::io::Read + std::io::Write, ask: &[u8], reply: &[u8]) -> bool {
    if s.write_all(ask).is_err() {
        return false;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while got.len() < reply.len() {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got.starts_with(reply)
}

/// Starts a server on a free port (`command` given the port) and waits until `ready`:
/// another port when it exits first (the free port was taken in between), up to 5 times.
fn start(
    what: &str,
    command: impl Fn(u16) -> Command,
    ready: impl Fn(u16) -> bool,
) -> (Child, u16) {
    for _ in 0..5 {
        let port = free_port();
        let mut child = command(port)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = child.try_wait() {
                break; // exited: its port was taken; another one
            }
            if ready(port) {
                return (child, port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("{what} did not start and answer on a free port in 5 tries");
}

fn memcached_command(port: u16, extra: &[&str], sock: Option<&Path>) -> Command {
    let mut cmd = Command::new(require_binary("memcached"));
    cmd.args([
        "-l",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-U",
        "0",
        "-t",
        "1",
    ]);
    if let Some(sock) = sock {
        cmd.arg("-s").arg(sock).args(["-a", "0700"]);
    }
    // memcached refuses to run as root without -u.
    if unsafe { libc::geteuid() } == 0 {
        cmd.args(["-u", "root"]);
    }
    cmd.args(extra);
    cmd
}

/// Starts memcached listening on a unix socket (`-s`; memcached then listens on no TCP port).
pub fn memcached_unix(extra: &[&str]) -> Server {
    let dir = scratch_dir("mc");
    let sock = dir.join("mc.sock");
    let (child, port) = start(
        "memcached",
        |port| memcached_command(port, extra, Some(&sock)),
        |_| answers_unix(&sock, b"version\r\n", b"VERSION "),
    );
    Server {
        child,
        port,
        addr: format!("unix:{}", sock.display()),
        dir,
    }
}

/// Starts memcached on a TCP port.
pub fn memcached_tcp(extra: &[&str]) -> Server {
    let dir = scratch_dir("mct");
    let (child, port) = start(
        "memcached",
        |port| memcached_command(port, extra, None),
        |port| answers(port, b"version\r\n", b"VERSION "),
    );
    Server {
        child,
        port,
        addr: format!("127.0.0.1:{port}"),
        dir,
    }
}

/// Starts redis-server without persistence.
pub fn redis(extra: &[&str]) -> Server {
    let dir = scratch_dir("redis");
    let (child, port) = start(
        "redis-server",
        |port| {
            let mut cmd = Command::new(require_binary("redis-server"));
            cmd.args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ]);
            cmd.arg("--dir").arg(&dir);
            cmd.args(extra);
            cmd
        },
        |port| answers(port, b"PING\r\n", b"+PONG"),
    );
    Server {
        child,
        port,
        addr: format!("127.0.0.1:{port}"),
        dir,
    }
}

pub fn kvload(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvload"))
        .args(args)
        .output()
        .expect("run kvload")
}

/// Runs kvload with `--json -` and returns the document, asserting exit 0.
pub fn run_json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend_from_slice(&["--json", "-", "--quiet"]);
    let out = kvload(&a);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kvload {args:?} failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {stderr}"))
}

/// Asserts a one-line `kvload: error: ...` message, the exit code, and a substring.
pub fn assert_error(out: &Output, code: i32, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {stderr}");
    assert!(lines[0].starts_with("kvload: error: "), "{stderr}");
    assert!(
        lines[0].contains(needle),
        "expected '{needle}' in: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Checks the keys every kvload/1.1 document has.
pub fn assert_schema(d: &Value) {
    assert_eq!(d["schema"], "kvload/1.1");
    for k in [
        "kvload_version",
        "config",
        "placement",
        "duration_s",
        "offered_rate",
        "achieved_rate",
        "requests",
        "hits",
        "misses",
        "hit_ratio",
        "errors",
        "latency",
        "schedule_lag",
        "client_cpu",
        "preload",
        "series",
        "timeline",
        "verdict",
        "verdict_reason",
    ] {
        assert!(d.get(k).is_some(), "missing key {k}");
    }
    // kvload/1.1: the window's absolute times; the window is `duration_s` long and
    // starts `warmup_s` after the first send; phases start back to back from 0.
    let tl = &d["timeline"];
    let (s, ws, we) = (
        tl["start_ns"].as_u64().expect("start_ns"),
        tl["window_start_ns"].as_u64().expect("window_start_ns"),
        tl["window_end_ns"].as_u64().expect("window_end_ns"),
    );
    assert_eq!(tl["clock"], "monotonic");
    let warm = (d["config"]["warmup_s"].as_f64().unwrap() * 1e9).round() as u64;
    let dur = (d["config"]["duration_s"].as_f64().unwrap() * 1e9).round() as u64;
    assert_eq!(ws - s, warm, "window start = start + warm-up");
    assert_eq!(we - ws, dur, "window end = window start + duration");
    let mut off = 0.0;
    for p in d["config"]["phases"].as_array().expect("phases") {
        assert!(
            (p["start_s"].as_f64().unwrap() - off).abs() < 1e-9,
            "phase start_s"
        );
        off += p["duration_s"].as_f64().unwrap();
    }
    for k in ["scheduled", "sent", "completed", "skipped", "timeouts"] {
        assert!(d["requests"][k].is_u64(), "requests.{k}");
    }
    for k in [
        "total",
        "server_error",
        "out_of_memory",
        "client_error",
        "error",
        "protocol",
        "connection",
    ] {
        assert!(d["errors"][k].is_u64(), "errors.{k}");
    }
    for k in [
        "count", "mean_us", "p50_us", "p90_us", "p99_us", "p999_us", "p9999_us", "max_us",
    ] {
        assert!(
            d["latency"]["total"]["corrected"][k].is_number(),
            "latency pct {k}"
        );
        assert!(
            d["latency"]["total"]["service"][k].is_number(),
            "latency pct {k}"
        );
    }
    for k in ["user_s", "sys_s", "utilization"] {
        assert!(d["client_cpu"][k].is_number(), "client_cpu.{k}");
    }
    for k in [
        "seed",
        "server",
        "protocol",
        "mode",
        "rate",
        "arrival",
        "connections",
        "pipeline",
        "duration_s",
        "warmup_s",
        "keys",
        "key_size",
        "value_size",
        "popularity",
        "mix",
        "phases",
    ] {
        assert!(d["config"].get(k).is_some(), "config.{k}");
    }
    let v = d["verdict"].as_str().unwrap();
    assert!(["ok", "saturated", "client_bound"].contains(&v), "{v}");
}

pub fn u(d: &Value, path: &[&str]) -> u64 {
    let mut v = d;
    for p in path {
        v = &v[*p];
    }
    v.as_u64()
        .unwrap_or_else(|| panic!("{path:?} is not an integer: {v}"))
}

pub fn f(d: &Value, path: &[&str]) -> f64 {
    let mut v = d;
    for p in path {
        v = &v[*p];
    }
    v.as_f64()
        .unwrap_or_else(|| panic!("{path:?} is not a number: {v}"))
}

pub fn write_file(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}
