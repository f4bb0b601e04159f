//! Seeded request streams. Each engine thread owns one [`Workload`] (what to
//! send) and one [`Schedule`] (when to send it), each with its own generator, so
//! the sequence of requests does not depend on timing.

pub mod buckets;
pub mod dist;
pub mod keys;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use std::sync::Arc;

use crate::config::trace::{self, Trace};
use crate::config::{Config, Verb};
use buckets::PerKey;
pub use dist::{ArrivalGen, KeyGen, MixGen, ValueSizeGen};
pub use keys::KeyFormat;

/// Derives an independent seed for a stream (SplitMix64 finaliser).
pub fn derive_seed(seed: u64, stream: u64, thread: u64) -> u64 {
    let mut z = seed
        .wrapping_add(stream.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_add(thread.wrapping_mul(0xbf58_476d_1ce4_e5b9));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Random streams a thread owns.
pub const STREAM_REQUESTS: u64 = 1;
pub const STREAM_ARRIVALS: u64 = 2;
pub const STREAM_PRELOAD: u64 = 3;

/// One request to encode; `keys` is reused between requests.
#[derive(Debug, Clone)]
pub struct Request {
    pub verb: Verb,
    pub keys: Vec<u64>,
    pub value_len: usize,
    /// Expiration of a set in seconds; 0 never expires.
    pub ttl: u32,
}

impl Request {
    pub fn with_capacity(n: usize) -> Self {
        Request {
            verb: Verb::Get,
            keys: Vec::with_capacity(n),
            value_len: 0,
            ttl: 0,
        }
    }
}

struct PhaseGen {
    mix: MixGen,
    keys: KeyGen,
    values: ValueSizeGen,
    /// Sets send the key's own size (`key_buckets`).
    per_key: bool,
}

/// A thread's share of a trace: every `step`-th request from `first`.
struct TraceCursor {
    trace: Arc<Trace>,
    next: usize,
    step: usize,
    first: usize,
}

impl TraceCursor {
    fn new(trace: &Arc<Trace>, thread: usize, threads: usize) -> Self {
        TraceCursor {
            trace: trace.clone(),
            next: thread,
            step: threads.max(1),
            first: thread,
        }
    }

    /// The current request, if any is left.
    #[inline]
    fn peek(&self) -> Option<&trace::TraceRec> {
        self.trace.recs.get(self.next)
    }

    #[inline]
    fn advance(&mut self) {
        self.next += self.step;
    }
}

/// What a thread sends: verbs, keys and value sizes per phase.
pub struct Workload {
    trace: Option<TraceCursor>,
    value_max: usize,
    phases: Vec<PhaseGen>,
    pub key_format: KeyFormat,
    mget_size: usize,
    ttl: ValueSizeGen,
    /// Each key's own size and TTL (`key_buckets`), when the workload file gives them.
    per_key: Option<PerKey>,
    per_key_ttl: bool,
    rng: Xoshiro256PlusPlus,
}

impl Workload {
    pub fn new(cfg: &Config, thread: usize) -> Self {
        let phases = cfg
            .phases
            .iter()
            .map(|p| PhaseGen {
                mix: MixGen::new(&p.mix),
                keys: KeyGen::new(&p.popularity, cfg.keys),
                values: ValueSizeGen::new(&p.value_size, cfg.value_cap(&p.value_size)),
                per_key: p.per_key_values,
            })
            .collect();
        Workload {
            trace: cfg
                .trace
                .as_ref()
                .map(|t| TraceCursor::new(t, thread, cfg.threads)),
            value_max: cfg.max_value_size(),
            phases,
            key_format: key_format(cfg),
            mget_size: cfg.mget_size,
            ttl: ValueSizeGen::new(&cfg.ttl.as_sizes(), crate::config::spec::MAX_RELATIVE_TTL),
            per_key: per_key(cfg),
            per_key_ttl: cfg.per_key_ttl,
            rng: Xoshiro256PlusPlus::seed_from_u64(derive_seed(
                cfg.seed,
                STREAM_REQUESTS,
                thread as u64,
            )),
        }
    }

    /// Fills `req` with the next request of `phase`.
    #[inline]
    pub fn next(&mut self, phase: usize, req: &mut Request) {
        if let Some(tc) = &mut self.trace {
            // The trace's next request; a closed loop that outruns it starts over.
            if tc.peek().is_none() {
                tc.next = tc.first;
            }
            if let Some(r) = tc.peek() {
                req.verb = r.verb;
                req.keys.clear();
                req.keys.push(r.key as u64);
                (req.value_len, req.ttl) = if r.verb == Verb::Set {
                    ((r.value_len as usize).min(self.value_max), r.ttl)
                } else {
                    (0, 0)
                };
                tc.advance();
                return;
            }
        }
        let p = &self.phases[phase.min(self.phases.len() - 1)];
        req.verb = p.mix.sample(&mut self.rng);
        req.keys.clear();
        let n = if req.verb == Verb::Mget {
            self.mget_size
        } else {
            1
        };
        for _ in 0..n {
            req.keys.push(p.keys.sample(&mut self.rng));
        }
        (req.value_len, req.ttl) = if req.verb == Verb::Set {
            let key = req.keys[0];
            let own = self.per_key.as_ref();
            let size = own
                .filter(|_| p.per_key)
                .and_then(|k| k.value_len(key))
                .unwrap_or_else(|| p.values.sample(&mut self.rng));
            let ttl = own
                .filter(|_| self.per_key_ttl)
                .and_then(|k| k.ttl(key))
                .unwrap_or_else(|| self.ttl.sample(&mut self.rng) as u32);
            (size, ttl)
        } else {
            (0, 0)
        };
    }
}

/// Each key's own size and TTL for `cfg` (`key_buckets`), None without them.
pub fn per_key(cfg: &Config) -> Option<PerKey> {
    if cfg.key_buckets.is_empty() || cfg.trace.is_some() {
        return None;
    }
    Some(PerKey::new(
        &cfg.key_buckets,
        cfg.keys,
        cfg.max_value_size(),
    ))
}

/// The key format of a configuration.
pub fn key_format(cfg: &Config) -> KeyFormat {
    let max = if cfg.protocol.is_memcached() {
        crate::config::MEMCACHED_MAX_KEY
    } else {
        cfg.max_key_len()
    };
    match &cfg.trace {
        Some(t) => KeyFormat::per_key(t.key_lens.clone(), cfg.min_key_len(), max),
        None => KeyFormat::new(&cfg.key_size, cfg.min_key_len(), max),
    }
}

/// When a thread sends: absolute intended send times in CLOCK_MONOTONIC ns.
pub struct Schedule {
    trace: Option<(TraceCursor, u64)>,
    next: f64,
    gens: Vec<ArrivalGen>,
    /// Absolute end of each phase; phase 0 also covers the warm-up.
    phase_ends: Vec<u64>,
    phase: usize,
    rng: Xoshiro256PlusPlus,
}

impl Schedule {
    /// The schedule of `thread` among `threads`, starting at `start` (absolute ns)
    /// with the measured window starting at `window_start`. Each thread carries
    /// 1/threads of every phase's rate.
    pub fn new(cfg: &Config, thread: usize, start: u64, window_start: u64) -> Self {
        let threads = cfg.threads as f64;
        let gens: Vec<ArrivalGen> = cfg
            .phases
            .iter()
            .map(|p| ArrivalGen::new(cfg.arrival, p.rate.unwrap_or(1.0) / threads))
            .collect();
        let mut end = window_start;
        let phase_ends = cfg
            .phases
            .iter()
            .map(|p| {
                end += p.duration_ns;
                end
            })
            .collect();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(derive_seed(
            cfg.seed,
            STREAM_ARRIVALS,
            thread as u64,
        ));
        // Fixed arrivals of several threads interleave evenly; random ones start with one gap.
        let first = match cfg.arrival {
            crate::config::Arrival::Fixed => gens[0].mean_ns() * (thread as f64 / threads),
            _ => gens[0].next_gap(&mut rng),
        };
        Schedule {
            trace: cfg
                .trace
                .as_ref()
                .map(|t| (TraceCursor::new(t, thread, cfg.threads), start)),
            next: start as f64 + first,
            gens,
            phase_ends,
            phase: 0,
            rng,
        }
    }

    /// The next intended send time.
    #[inline]
    pub fn peek(&self) -> u64 {
        match &self.trace {
            Some((tc, start)) => tc.peek().map_or(u64::MAX, |r| start + r.t_ns),
            None => self.next as u64,
        }
    }

    /// The phase of the next arrival.
    #[inline]
    pub fn phase(&self) -> usize {
        self.phase
    }

    /// Moves to the following arrival.
    #[inline]
    pub fn advance(&mut self) {
        if let Some((tc, _)) = &mut self.trace {
            tc.advance();
            return;
        }
        while self.phase + 1 < self.phase_ends.len()
            && self.next >= self.phase_ends[self.phase] as f64
        {
            self.phase += 1;
        }
        self.next += self.gens[self.phase].next_gap(&mut self.rng);
        while self.phase + 1 < self.phase_ends.len()
            && self.next >= self.phase_ends[self.phase] as f64
        {
            self.phase += 1;
        }
    }
}

/// The phase in force at absolute time `t` for a window starting at `window_start`.
pub fn phase_at(cfg: &Config, window_start: u64, t: u64) -> usize {
    let mut end = window_start;
    for (i, p) in cfg.phases.iter().enumerate() {
        end += p.duration_ns;
        if t < end {
            return i;
        }
    }
    cfg.phases.len() - 1
}
