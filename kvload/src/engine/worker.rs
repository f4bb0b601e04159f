//! One engine thread: pinned, owning its connections, schedule, workload
//! generator and metrics, running an epoll loop (mio) until the window and the
//! drain are over. Nothing on the per-request path allocates, locks or logs.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use super::conn::{Conn, InFlight, ReadStatus, StdStream};
use super::sys::{
    Clock, Timer, now_ns, pin_to_cpu, set_min_timer_slack, set_realtime, thread_cpu_ns,
};
use crate::Error;
use crate::config::{Config, Mode};
use crate::metrics::Metrics;
use crate::protocol::{self, Outcome};
use crate::workload::{Request, Schedule, Workload, phase_at};

const TIMER: Token = Token(usize::MAX);
/// How often outstanding requests are checked for timeouts.
const HOUSEKEEPING_NS: u64 = 10_000_000;

/// Absolute times shared by all threads (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    /// First send (warm-up starts).
    pub start: u64,
    pub window_start: u64,
    pub window_end: u64,
}

impl Timeline {
    #[inline]
    fn in_window(&self, t: u64) -> bool {
        t >= self.window_start && t < self.window_end
    }

    #[inline]
    fn second(&self, t: u64) -> usize {
        ((t - self.window_start) / 1_000_000_000) as usize
    }
}

/// What a thread hands back.
pub struct WorkerResult {
    pub metrics: Metrics,
    /// CPU time of this thread during the window.
    pub user_ns: u64,
    pub sys_ns: u64,
    /// (intended, sent) of window requests, when --dump-arrivals is set.
    pub arrivals: Vec<(u64, u64)>,
    /// Time spent busy-polling without events during the window (--spin-us).
    pub spin_ns: u64,
}

pub struct Worker {
    cfg: Arc<Config>,
    thread: usize,
    cpu: Option<usize>,
    streams: Vec<StdStream>,
    tl: Timeline,
    abort: Arc<AtomicBool>,
    value: Arc<Vec<u8>>,
}

impl Worker {
    pub fn new(
        cfg: Arc<Config>,
        thread: usize,
        cpu: Option<usize>,
        streams: Vec<StdStream>,
        tl: Timeline,
        abort: Arc<AtomicBool>,
        value: Arc<Vec<u8>>,
    ) -> Self {
        Worker {
            cfg,
            thread,
            cpu,
            streams,
            tl,
            abort,
            value,
        }
    }

    /// Runs the thread's share of the load. On error the other threads are told to stop.
    pub fn run(self) -> Result<WorkerResult, Error> {
        let abort = self.abort.clone();
        let r = self.run_inner();
        if r.is_err() {
            abort.store(true, Ordering::Relaxed);
        }
        r
    }

    fn run_inner(self) -> Result<WorkerResult, Error> {
        if let Some(cpu) = self.cpu {
            pin_to_cpu(cpu)
                .map_err(|e| Error::usage(format!("--cpus: cannot run on CPU {cpu}: {e}")))?;
        }
        set_min_timer_slack();
        let cfg = self.cfg.clone();
        if cfg.realtime {
            set_realtime().map_err(|e| {
                Error::usage(format!(
                    "--realtime: cannot switch to SCHED_FIFO: {e} (needs root or CAP_SYS_NICE)"
                ))
            })?;
        }
        let io_err = |e: io::Error| Error::runtime(format!("event loop setup failed: {e}"));
        let poll = Poll::new().map_err(io_err)?;
        let max_out = match cfg.mode {
            Mode::Open => cfg.max_outstanding,
            Mode::Closed => cfg.pipeline,
        };
        let mut conns = Vec::with_capacity(self.streams.len());
        for (i, s) in self.streams.into_iter().enumerate() {
            let mut st = s.into_mio().map_err(io_err)?;
            st.register(poll.registry(), Token(i)).map_err(io_err)?;
            conns.push(Conn::new(st, max_out));
        }
        let timer = Timer::new().map_err(io_err)?;
        let tfd: RawFd = timer.raw_fd();
        poll.registry()
            .register(&mut SourceFd(&tfd), TIMER, Interest::READABLE)
            .map_err(io_err)?;
        let seconds = cfg.duration_ns.div_ceil(1_000_000_000) as usize;
        let arrivals_cap = match (&cfg.dump_arrivals, cfg.mode) {
            (Some(_), Mode::Open) => {
                let rate = cfg.phases.iter().filter_map(|p| p.rate).fold(0.0, f64::max);
                ((rate / cfg.threads as f64) * (cfg.duration_ns as f64 / 1e9) * 1.2) as usize + 1024
            }
            _ => 0,
        };
        let mut lp = Loop {
            schedule: Schedule::new(&cfg, self.thread, self.tl.start, self.tl.window_start),
            workload: Workload::new(&cfg, self.thread),
            req: Request::with_capacity(cfg.mget_size),
            metrics: match cfg.window_ns {
                Some(w) => Metrics::new(seconds.max(1))
                    .with_windows(cfg.duration_ns.div_ceil(w).max(1) as usize, w),
                None => Metrics::new(seconds.max(1)),
            },
            conns,
            dirty: Vec::new(),
            rr: 0,
            all_full: false,
            spin_ns: 0,
            max_out,
            tl: self.tl,
            value: self.value,
            arrivals: Vec::with_capacity(arrivals_cap),
            dump: arrivals_cap > 0,
            cfg,
            poll,
            timer,
            clock: Clock::new(),
            abort: self.abort,
        };
        lp.dirty.reserve(lp.conns.len());
        lp.run()
    }
}

struct Loop {
    cfg: Arc<Config>,
    schedule: Schedule,
    workload: Workload,
    req: Request,
    metrics: Metrics,
    conns: Vec<Conn>,
    dirty: Vec<usize>,
    rr: usize,
    /// Every connection was at `max_out` at the last dispatch and no response
    /// has arrived since: skip without scanning the connections.
    all_full: bool,
    /// Time spent in empty busy polls during the window.
    spin_ns: u64,
    max_out: usize,
    tl: Timeline,
    value: Arc<Vec<u8>>,
    arrivals: Vec<(u64, u64)>,
    dump: bool,
    poll: Poll,
    timer: Timer,
    clock: Clock,
    abort: Arc<AtomicBool>,
}

impl Loop {
    fn conn_error(&self, e: io::Error) -> Error {
        let what = match e.kind() {
            io::ErrorKind::ConnectionReset => "connection reset by the server".to_string(),
            io::ErrorKind::UnexpectedEof => "the server closed the connection".to_string(),
            io::ErrorKind::BrokenPipe => {
                "the server closed the connection (broken pipe)".to_string()
            }
            _ => format!("connection error: {e}"),
        };
        Error::runtime(format!("{} during the run: {what}", self.cfg.server))
    }

    fn run(mut self) -> Result<WorkerResult, Error> {
        let mut events = Events::with_capacity(256);
        let open = self.cfg.mode == Mode::Open;
        let drain_end = self.tl.window_end + self.cfg.timeout_ns;
        let spin = self.cfg.spin_ns;
        let mut cpu_start: Option<(u64, u64)> = None;
        let mut cpu_end: Option<(u64, u64)> = None;
        let mut next_housekeeping = self.clock.now() + HOUSEKEEPING_NS;
        // Wait for the common start so that all threads share one timeline.
        self.sleep_until(self.tl.start)?;
        if !open {
            for c in 0..self.conns.len() {
                self.refill(c, self.tl.start);
            }
        }
        loop {
            let now = self.clock.now();
            if self.abort.load(Ordering::Relaxed) {
                break;
            }
            if cpu_start.is_none() && now >= self.tl.window_start {
                cpu_start = Some(thread_cpu_ns());
            }
            // Sends due before the window's end go out even when the loop wakes after it.
            if open {
                while self.schedule.peek() <= now && self.schedule.peek() < self.tl.window_end {
                    self.dispatch_open();
                    self.schedule.advance();
                }
            }
            if now >= self.tl.window_end {
                if cpu_end.is_none() {
                    cpu_end = Some(thread_cpu_ns());
                }
                if now >= drain_end || self.conns.iter().all(|c| c.inflight.is_empty()) {
                    break;
                }
            }
            self.flush_dirty()?;
            if now >= next_housekeeping {
                self.clock.reanchor();
                self.check_timeouts(now);
                next_housekeeping = now + HOUSEKEEPING_NS;
            }
            // The next moment something must happen without a socket event.
            let mut deadline = next_housekeeping.min(drain_end);
            if cpu_start.is_none() {
                deadline = deadline.min(self.tl.window_start);
            }
            if cpu_end.is_none() {
                deadline = deadline.min(self.tl.window_end);
            }
            // With --spin-us, the wait for an arrival ends `spin` early on the
            // timer and the rest is busy-polled, hiding the wake-up latency.
            let mut wake = deadline;
            let mut spin_until = 0;
            if open && self.schedule.peek() < self.tl.window_end && self.schedule.peek() < deadline
            {
                deadline = self.schedule.peek();
                wake = deadline.saturating_sub(spin);
                spin_until = deadline;
            }
            let now = self.clock.now();
            let timeout = if deadline <= now || (spin > 0 && now >= wake && now < spin_until) {
                Some(Duration::ZERO)
            } else {
                self.timer
                    .arm_at(wake)
                    .map_err(|e| Error::runtime(format!("timerfd: {e}")))?;
                None
            };
            let polled_at = now;
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::runtime(format!("epoll_wait failed: {e}"))),
            }
            // Busy-polling that found nothing is waiting, not work: it is
            // reported apart so that it does not make the run look client-bound.
            if spin > 0
                && timeout.is_some()
                && events.is_empty()
                && cpu_start.is_some()
                && cpu_end.is_none()
            {
                self.spin_ns += self.clock.now().saturating_sub(polled_at);
            }
            for ev in events.iter() {
                let tok = ev.token();
                if tok == TIMER {
                    self.timer.fired();
                    continue;
                }
                let c = tok.0;
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    self.on_readable(c)?;
                    let now = self.clock.now();
                    if !open {
                        self.refill(c, now);
                    } else if self.schedule.peek() <= now {
                        // Arrivals that fell due while responses were being
                        // handled go out now, not after the whole event batch.
                        while self.schedule.peek() <= now
                            && self.schedule.peek() < self.tl.window_end
                        {
                            self.dispatch_open();
                            self.schedule.advance();
                        }
                        self.flush_dirty()?;
                    }
                }
                if ev.is_writable() && self.conns[c].has_pending_writes() {
                    self.conns[c].flush().map_err(|e| self.conn_error(e))?;
                }
            }
        }
        let cpu_start = cpu_start.unwrap_or_else(thread_cpu_ns);
        let cpu_end = cpu_end.unwrap_or_else(thread_cpu_ns);
        // Whatever is still outstanding never answered in time.
        for c in &self.conns {
            for e in &c.inflight {
                if e.measured && !e.timed_out {
                    self.metrics.counters.timeouts += 1;
                }
            }
        }
        Ok(WorkerResult {
            metrics: self.metrics,
            user_ns: cpu_end.0.saturating_sub(cpu_start.0),
            sys_ns: cpu_end.1.saturating_sub(cpu_start.1),
            arrivals: self.arrivals,
            spin_ns: self.spin_ns,
        })
    }

    fn sleep_until(&mut self, t: u64) -> Result<(), Error> {
        let mut events = Events::with_capacity(16);
        while now_ns() < t {
            self.timer
                .arm_at(t)
                .map_err(|e| Error::runtime(format!("timerfd: {e}")))?;
            match self.poll.poll(&mut events, None) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::runtime(format!("epoll_wait failed: {e}"))),
            }
        }
        Ok(())
    }

    /// Issues the schedule's next arrival on a connection with room, or skips it.
    #[inline]
    fn dispatch_open(&mut self) {
        let t = self.schedule.peek();
        let measured = self.tl.in_window(t);
        let ws = self.tl.window_start;
        if measured {
            self.metrics.counters.scheduled += 1;
            if let Some(w) = self.metrics.window_of(t - ws) {
                w.scheduled += 1;
            }
        }
        let n = self.conns.len();
        let mut chosen = None;
        if self.all_full {
            if measured {
                self.metrics.counters.skipped += 1;
                if let Some(w) = self.metrics.window_of(t - ws) {
                    w.skipped += 1;
                }
            }
            return;
        }
        for i in 0..n {
            let c = (self.rr + i) % n;
            if self.conns[c].inflight.len() < self.max_out {
                chosen = Some(c);
                break;
            }
        }
        self.rr = if self.rr + 1 == n { 0 } else { self.rr + 1 };
        let Some(c) = chosen else {
            self.all_full = true;
            if measured {
                self.metrics.counters.skipped += 1;
                if let Some(w) = self.metrics.window_of(t - ws) {
                    w.skipped += 1;
                }
            }
            return;
        };
        self.workload.next(self.schedule.phase(), &mut self.req);
        self.enqueue(c, t, measured);
    }

    /// Encodes `self.req` on connection `c`.
    #[inline]
    fn enqueue(&mut self, c: usize, intended: u64, measured: bool) {
        let conn = &mut self.conns[c];
        protocol::encode(
            self.cfg.protocol,
            &mut conn.wbuf,
            &self.req,
            &self.workload.key_format,
            &self.value,
        );
        conn.inflight.push_back(InFlight {
            intended,
            sent: 0,
            verb: self.req.verb,
            nkeys: self.req.keys.len() as u16,
            measured,
            timed_out: false,
        });
        conn.unstamped += 1;
        if !conn.dirty {
            conn.dirty = true;
            self.dirty.push(c);
        }
    }

    /// Closed mode: once every reply of connection `c`'s previous batch is in,
    /// sends the next batch of `pipeline` requests in one write (as
    /// redis-benchmark's -P does). Topping up after every partial read instead
    /// costs markedly more kernel time per request on loopback.
    #[inline]
    fn refill(&mut self, c: usize, now: u64) {
        if now >= self.tl.window_end || !self.conns[c].inflight.is_empty() {
            return;
        }
        let phase = phase_at(&self.cfg, self.tl.window_start, now);
        while self.conns[c].inflight.len() < self.max_out {
            self.workload.next(phase, &mut self.req);
            self.enqueue(c, 0, false);
        }
    }

    /// Stamps the send time of newly encoded requests and writes them.
    #[inline]
    fn flush_dirty(&mut self) -> Result<(), Error> {
        if self.dirty.is_empty() {
            return Ok(());
        }
        let open = self.cfg.mode == Mode::Open;
        for i in 0..self.dirty.len() {
            let c = self.dirty[i];
            // One stamp per connection write, right before it: later writes of
            // the same flush are stamped after the earlier ones returned.
            let now = self.clock.now();
            let in_window = self.tl.in_window(now);
            let conn = &mut self.conns[c];
            conn.dirty = false;
            let len = conn.inflight.len();
            for e in conn.inflight.range_mut(len - conn.unstamped..) {
                e.sent = now;
                if open {
                    if e.measured {
                        let lag = now.saturating_sub(e.intended);
                        self.metrics
                            .record_lag(self.tl.second(now.max(self.tl.window_start)), lag);
                        if let Some(w) = self
                            .metrics
                            .window_of(e.intended.saturating_sub(self.tl.window_start))
                        {
                            w.sent += 1;
                            w.lag_sum_ns += lag;
                            w.lag_max_ns = w.lag_max_ns.max(lag);
                            w.lag.saturating_record(lag);
                        }
                        if self.dump {
                            self.arrivals.push((e.intended, now));
                        }
                    }
                } else {
                    e.intended = now;
                    e.measured = in_window;
                    if in_window {
                        self.metrics.counters.scheduled += 1;
                        self.metrics.counters.sent += 1;
                        if let Some(w) = self.metrics.window_of(now - self.tl.window_start) {
                            w.scheduled += 1;
                            w.sent += 1;
                        }
                    }
                }
            }
            conn.unstamped = 0;
            if let Err(e) = conn.flush() {
                self.dirty.clear();
                return Err(self.conn_error(e));
            }
        }
        self.dirty.clear();
        Ok(())
    }

    /// Reads and parses everything available on connection `c`.
    fn on_readable(&mut self, c: usize) -> Result<(), Error> {
        loop {
            let status = match self.conns[c].read_some() {
                Ok(s) => s,
                Err(e) => return Err(self.conn_error(e)),
            };
            let now = self.clock.now();
            self.parse_responses(c, now)?;
            if let ReadStatus::Drained = status {
                return Ok(());
            }
        }
    }

    #[inline]
    fn parse_responses(&mut self, c: usize, now: u64) -> Result<(), Error> {
        let proto = self.cfg.protocol;
        let timeout = self.cfg.timeout_ns;
        let open = self.cfg.mode == Mode::Open;
        let in_window = self.tl.in_window(now);
        let sec = if in_window { self.tl.second(now) } else { 0 };
        loop {
            let conn = &mut self.conns[c];
            let Some(head) = conn.inflight.front().copied() else {
                break;
            };
            if head.sent == 0 {
                break;
            }
            let parsed = protocol::parse(
                proto,
                head.verb,
                head.nkeys as usize,
                &conn.rbuf[conn.rstart..conn.rend],
            );
            let (used, outcome): (usize, Outcome) = match parsed {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    return Err(Error::runtime(format!(
                        "malformed response from {}: {}",
                        self.cfg.server, e.0
                    )));
                }
            };
            conn.rstart += used;
            conn.inflight.pop_front();
            self.all_full = false;
            let corrected = now.saturating_sub(head.intended);
            let service = now.saturating_sub(head.sent);
            if head.measured {
                let svc = if open { Some(service) } else { None };
                self.metrics
                    .record_response(head.verb, corrected, svc, &outcome);
                if let Some(w) = self
                    .metrics
                    .window_of(head.intended.saturating_sub(self.tl.window_start))
                {
                    w.completed += 1;
                    w.errors += outcome.error.is_some() as u64;
                    w.corrected.saturating_record(corrected);
                    if open {
                        w.service.saturating_record(service);
                    }
                }
                if !head.timed_out && service > timeout {
                    self.metrics.counters.timeouts += 1;
                }
            }
            if in_window {
                self.metrics
                    .record_second(sec, corrected, outcome.error.is_some());
            }
        }
        let conn = &self.conns[c];
        if conn.rstart < conn.rend && conn.inflight.is_empty() {
            return Err(Error::runtime(format!(
                "malformed response from {}: {} unexpected bytes with no request outstanding: {}",
                self.cfg.server,
                conn.rend - conn.rstart,
                protocol::show(&conn.rbuf[conn.rstart..conn.rend])
            )));
        }
        Ok(())
    }

    /// Marks requests outstanding for longer than --timeout (FIFO: oldest first).
    fn check_timeouts(&mut self, now: u64) {
        let timeout = self.cfg.timeout_ns;
        for conn in &mut self.conns {
            for e in conn.inflight.iter_mut() {
                if e.sent == 0 || now.saturating_sub(e.sent) <= timeout {
                    break;
                }
                if !e.timed_out {
                    e.timed_out = true;
                    if e.measured {
                        self.metrics.counters.timeouts += 1;
                    }
                }
            }
        }
    }
}
