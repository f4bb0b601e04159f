//! The host under the measurement, window by window (`--window` with `--watch-cpus` and
//! `--watch-pid`): a thread on the load's CPUs samples `/proc/stat` and the server's
//! `/proc/PID/stat` at every window boundary, so that a window the host disturbed (steal
//! time on the server's or the load's CPUs, another task running on the server's CPUs)
//! can be told apart from a window the server was slow in. It reads a few small files
//! four times a second and writes nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use crate::config::Config;
use crate::engine::sys;

/// CPU time counters of one CPU, in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct CpuTicks {
    /// user + nice + system (task time; interrupts are not a task).
    busy: u64,
    steal: u64,
    /// Every field: the CPU's accounted time.
    total: u64,
}

#[derive(Debug, Clone, Default)]
struct Sample {
    at_ns: u64,
    /// Per CPU of interest, None when the line was missing.
    cpus: Vec<Option<CpuTicks>>,
    /// utime + stime of the watched process, None when it could not be read.
    server: Option<u64>,
}

/// What the host did during one window, as fractions of the window's time on the CPUs
/// concerned. NaN where it could not be measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostWindow {
    /// Steal time on the server's CPUs (`--watch-cpus`): the hypervisor ran something else.
    pub steal_server: f64,
    /// Steal time on the load's CPUs (`--cpus`).
    pub steal_client: f64,
    /// CPU time on the server's CPUs used by tasks other than the server (`--watch-pid`).
    pub others_server: f64,
    /// CPU time the server used, over its CPUs' time.
    pub server_busy: f64,
}

impl HostWindow {
    pub const UNKNOWN: HostWindow = HostWindow {
        steal_server: f64::NAN,
        steal_client: f64::NAN,
        others_server: f64::NAN,
        server_busy: f64::NAN,
    };
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf with a valid name.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// Parses the per-CPU lines of /proc/stat for `cpus`.
fn parse_stat(text: &str, cpus: &[usize]) -> Vec<Option<CpuTicks>> {
    let mut out = vec![None; cpus.len()];
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cpu") else {
            continue;
        };
        let mut f = rest.split_ascii_whitespace();
        let Some(Ok(n)) = f.next().map(str::parse::<usize>) else {
            continue; // the aggregate "cpu" line
        };
        let Some(slot) = cpus.iter().position(|&c| c == n) else {
            continue;
        };
        let v: Vec<u64> = f.filter_map(|x| x.parse().ok()).collect();
        if v.len() < 8 {
            continue;
        }
        // user nice system idle iowait irq softirq steal [guest guest_nice]
        out[slot] = Some(CpuTicks {
            busy: v[0] + v[1] + v[2],
            steal: v[7],
            total: v[..8].iter().sum(),
        });
    }
    out
}

/// utime + stime (ticks) from the text of /proc/PID/stat (the fields after the command
/// name, which may itself hold spaces and parentheses).
fn parse_pid_stat(text: &str) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    // Fields 14 and 15 of proc(5); `rest` starts at field 3 (state).
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn sample(cpus: &[usize], pid: Option<u32>) -> Sample {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let server = pid.and_then(|p| {
        std::fs::read_to_string(format!("/proc/{p}/stat"))
            .ok()
            .and_then(|t| parse_pid_stat(&t))
    });
    Sample {
        at_ns: sys::now_ns(),
        cpus: parse_stat(&stat, cpus),
        server,
    }
}

/// The host watch of one run: started before the window, joined after it.
pub struct Watch {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<Sample>>,
    server_cpus: Vec<usize>,
    client_cpus: Vec<usize>,
    has_pid: bool,
}

/// Starts the watch when the run keeps windows; samples at `window_start + k ×
/// window_ns` for every boundary of the window.
pub fn start(cfg: &Config, window_start: u64) -> Option<Watch> {
    let w = cfg.window_ns?;
    if cfg.simulate.is_some() {
        return None;
    }
    let n = cfg.duration_ns.div_ceil(w);
    let server_cpus = cfg.watch_cpus.clone();
    let client_cpus = cfg.cpus.clone();
    let mut all: Vec<usize> = server_cpus.iter().chain(&client_cpus).copied().collect();
    all.sort_unstable();
    all.dedup();
    let pid = cfg.watch_pid;
    let pin = cfg.cpus.first().copied();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let handle = std::thread::Builder::new()
        .name("kvload-watch".into())
        .spawn(move || {
            if let Some(c) = pin {
                let _ = sys::pin_to_cpu(c);
            }
            let mut out = Vec::with_capacity(n as usize + 1);
            for k in 0..=n {
                let at = window_start + k * w;
                loop {
                    if stop2.load(Ordering::Relaxed) {
                        return out;
                    }
                    let now = sys::now_ns();
                    if now >= at {
                        break;
                    }
                    // Sleep in slices so that an aborted run is not held up.
                    let left = (at - now).min(50_000_000);
                    std::thread::sleep(std::time::Duration::from_nanos(left));
                }
                out.push(sample(&all, pid));
            }
            out
        })
        .ok()?;
    Some(Watch {
        stop,
        handle,
        server_cpus,
        client_cpus,
        has_pid: pid.is_some(),
    })
}

impl Watch {
    /// The windows' host figures (one per window; UNKNOWN where a sample is missing).
    pub fn finish(self, windows: usize, abort: bool) -> Vec<HostWindow> {
        if abort {
            self.stop.store(true, Ordering::Relaxed);
        }
        let samples = self.handle.join().unwrap_or_default();
        let mut all: Vec<usize> = self
            .server_cpus
            .iter()
            .chain(&self.client_cpus)
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        let hz = clock_ticks();
        let idx = |c: usize| all.iter().position(|&x| x == c);
        (0..windows)
            .map(|i| match (samples.get(i), samples.get(i + 1)) {
                (Some(a), Some(b)) => {
                    let secs = (b.at_ns.saturating_sub(a.at_ns)) as f64 / 1e9;
                    window_figures(
                        a,
                        b,
                        secs * hz,
                        &self
                            .server_cpus
                            .iter()
                            .filter_map(|&c| idx(c))
                            .collect::<Vec<_>>(),
                        &self
                            .client_cpus
                            .iter()
                            .filter_map(|&c| idx(c))
                            .collect::<Vec<_>>(),
                        self.has_pid,
                    )
                }
                _ => HostWindow::UNKNOWN,
            })
            .collect()
    }
}

fn window_figures(
    a: &Sample,
    b: &Sample,
    ticks_per_cpu: f64,
    server: &[usize],
    client: &[usize],
    has_pid: bool,
) -> HostWindow {
    let delta = |slots: &[usize], f: fn(&CpuTicks) -> u64| -> Option<f64> {
        if slots.is_empty() {
            return None;
        }
        let mut sum = 0u64;
        for &s in slots {
            let (x, y) = (a.cpus.get(s)?.as_ref()?, b.cpus.get(s)?.as_ref()?);
            sum += f(y).saturating_sub(f(x));
        }
        Some(sum as f64)
    };
    let frac = |v: Option<f64>, n: usize| match v {
        Some(v) if ticks_per_cpu > 0.0 => v / (ticks_per_cpu * n as f64),
        _ => f64::NAN,
    };
    let server_busy_ticks = match (has_pid, a.server, b.server) {
        (true, Some(x), Some(y)) => Some(y.saturating_sub(x) as f64),
        _ => None,
    };
    let cpu_busy = delta(server, |t| t.busy);
    let others = match (cpu_busy, server_busy_ticks) {
        (Some(c), Some(s)) => Some((c - s).max(0.0)),
        _ => None,
    };
    HostWindow {
        steal_server: frac(delta(server, |t| t.steal), server.len()),
        steal_client: frac(delta(client, |t| t.steal), client.len()),
        others_server: frac(others, server.len()),
        server_busy: frac(server_busy_ticks, server.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_stat_and_pid_stat() {
        let stat = "cpu  10 0 5 100 0 0 0 0 0 0\ncpu0 4 1 2 50 0 1 1 3 0 0\ncpu1 6 0 3 50 0 0 0 0 0 0\nintr 1\n";
        let v = parse_stat(stat, &[1, 0, 7]);
        assert_eq!(
            v[1],
            Some(CpuTicks {
                busy: 7,
                steal: 3,
                total: 62
            })
        );
        assert_eq!(v[0].unwrap().busy, 9);
        assert!(v[2].is_none());
        let pid = "42 (mem cached) (x) S 1 42 42 0 -1 4194560 300 0 0 0 17 5 0 0 20 0 4 0";
        assert_eq!(parse_pid_stat(pid), Some(22));
        assert_eq!(parse_pid_stat("garbage"), None);
    }

    #[test]
    fn others_are_the_cpus_busy_time_less_the_servers() {
        let s = |busy: u64, steal: u64, server: u64| Sample {
            at_ns: 0,
            cpus: vec![Some(CpuTicks {
                busy,
                steal,
                total: 0,
            })],
            server: Some(server),
        };
        let h = window_figures(&s(100, 0, 50), &s(120, 5, 60), 25.0, &[0], &[], true);
        assert!((h.others_server - 10.0 / 25.0).abs() < 1e-9, "{h:?}");
        assert!((h.steal_server - 5.0 / 25.0).abs() < 1e-9);
        assert!((h.server_busy - 10.0 / 25.0).abs() < 1e-9);
        assert!(h.steal_client.is_nan());
        let h = window_figures(&s(100, 0, 50), &s(120, 5, 60), 25.0, &[0], &[], false);
        assert!(h.others_server.is_nan());
    }

    #[test]
    fn the_watch_sees_this_process_use_its_cpu() {
        // A busy loop on this test's CPU, watched as if it were the server's: its time is
        // the server's (our own pid), so others stay near zero; a window is measured.
        let me = std::process::id();
        let mut cfg = crate::config::Config::build(
            <crate::config::Cli as clap::Parser>::try_parse_from([
                "kvload",
                "--rate",
                "1000",
                "--duration",
                "300ms",
                "--window",
                "100ms",
                "--watch-cpus",
                "0",
            ])
            .unwrap(),
        )
        .unwrap();
        cfg.watch_pid = Some(me);
        let ws = sys::now_ns() + 10_000_000;
        let w = start(&cfg, ws).expect("a watch");
        while sys::now_ns() < ws + 310_000_000 {
            std::hint::spin_loop();
        }
        let h = w.finish(3, false);
        assert_eq!(h.len(), 3);
        assert!(h.iter().all(|x| x.others_server.is_finite()), "{h:?}");
    }
}
