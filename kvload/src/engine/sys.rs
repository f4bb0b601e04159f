//! Thin wrappers over the Linux calls the engine needs: the monotonic clock,
//! an absolute-deadline timerfd, timer slack, CPU pinning and per-thread rusage.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// CLOCK_MONOTONIC in nanoseconds (vDSO, no system call).
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A per-thread clock on the CPU's invariant TSC, anchored to CLOCK_MONOTONIC:
/// a read costs about a third of `clock_gettime` on a KVM guest. The engine
/// re-anchors it every few milliseconds, so its offset from CLOCK_MONOTONIC
/// (which timerfd deadlines use) stays in the nanoseconds. Falls back to
/// `clock_gettime` unless the kernel's clocksource is `tsc`.
pub struct Clock {
    base_tsc: u64,
    base_ns: u64,
    ns_per_tick: f64,
    tsc: bool,
}

static NS_PER_TICK: std::sync::OnceLock<Option<f64>> = std::sync::OnceLock::new();

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86_64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn rdtsc() -> u64 {
    0
}

/// TSC ticks per ns, measured against CLOCK_MONOTONIC over 20 ms, when usable.
fn calibrate() -> Option<f64> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let src =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .ok()?;
    if src.trim() != "tsc" {
        return None;
    }
    // Both clocks are read at the same instants, so sleeping in between is fine.
    let (t0, c0) = (now_ns(), rdtsc());
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (t1, c1) = (now_ns(), rdtsc());
    (c1 > c0).then(|| (t1 - t0) as f64 / (c1 - c0) as f64)
}

impl Clock {
    pub fn new() -> Self {
        let cal = *NS_PER_TICK.get_or_init(calibrate);
        let mut c = Clock {
            base_tsc: 0,
            base_ns: 0,
            ns_per_tick: cal.unwrap_or(0.0),
            tsc: cal.is_some(),
        };
        c.reanchor();
        c
    }

    /// Re-reads CLOCK_MONOTONIC so that drift never accumulates.
    pub fn reanchor(&mut self) {
        self.base_ns = now_ns();
        self.base_tsc = rdtsc();
    }

    /// CLOCK_MONOTONIC nanoseconds.
    #[inline]
    pub fn now(&self) -> u64 {
        if !self.tsc {
            return now_ns();
        }
        let d = rdtsc().wrapping_sub(self.base_tsc);
        self.base_ns + (d as f64 * self.ns_per_tick) as u64
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// A timerfd armed with absolute CLOCK_MONOTONIC deadlines (ns resolution),
/// registered with the event loop so that pacing never depends on epoll's
/// millisecond timeout.
pub struct Timer {
    fd: OwnedFd,
    armed: u64,
}

impl Timer {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(Timer {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            armed: 0,
        })
    }

    /// Arms the timer for `deadline` unless it is already armed for it.
    /// Re-arming resets the expiry count, so the fd never needs to be read.
    #[inline]
    pub fn arm_at(&mut self, deadline: u64) -> io::Result<()> {
        if deadline == self.armed {
            return Ok(());
        }
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (deadline / 1_000_000_000) as libc::time_t,
                tv_nsec: (deadline % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: valid fd and itimerspec; the old value is not requested.
        let r = unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        self.armed = deadline;
        Ok(())
    }

    /// Forgets the armed deadline after the timer fired, so that it is re-armed
    /// even for the same deadline (the clocks may disagree by nanoseconds).
    pub fn fired(&mut self) {
        self.armed = 0;
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Sets this thread's timer slack to 1 ns so that wake-ups are not deferred by
/// the default 50 µs.
pub fn set_min_timer_slack() {
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET is bounds-checked by the caller's validation.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Switches the calling thread to SCHED_FIFO at priority 1.
pub fn set_realtime() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: valid sched_param; 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's user and system CPU time in nanoseconds.
pub fn thread_cpu_ns() -> (u64, u64) {
    // SAFETY: `ru` is a valid, writable rusage.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
        (ns(ru.ru_utime), ns(ru.ru_stime))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsc_clock_tracks_monotonic() {
        let mut c = Clock::new();
        for _ in 0..5 {
            std::thread::sleep(std::time::Duration::from_millis(3));
            let (a, b, d) = (now_ns(), c.now(), now_ns());
            assert!(b + 2_000 >= a && b <= d + 2_000, "{a} {b} {d}");
            c.reanchor();
        }
    }

    #[test]
    fn timer_fires_at_absolute_deadline() {
        let mut t = Timer::new().unwrap();
        let start = now_ns();
        t.arm_at(start + 2_000_000).unwrap();
        let mut pfd = libc::pollfd {
            fd: t.raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, 1000) };
        let waited = now_ns() - start;
        assert_eq!(r, 1);
        assert!(waited >= 2_000_000, "woke after {waited} ns");
    }
}
