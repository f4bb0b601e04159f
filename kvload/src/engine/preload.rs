//! Preload: a pipelined `set` of every key in the keyspace before the warm-up,
//! then a `get` of a sample of keys to verify that the data is readable.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::conn::StdStream;
use crate::Error;
use crate::config::{Config, Verb};
use crate::protocol::{self, Outcome};
use crate::workload::{self, Request, ValueSizeGen};

/// Requests per pipelined batch, and the byte budget of one batch.
const BATCH: usize = 1024;
const BATCH_BYTES: usize = 4 << 20;
/// Keys read back for verification, and the fraction that must be there.
const VERIFY_SAMPLE: u64 = 1000;
const VERIFY_MIN_FRACTION: f64 = 0.99;
const PRELOAD_READ_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PreloadReport {
    pub keys: u64,
    /// Sampled keys found by the verification.
    pub verified: u64,
    pub sampled: u64,
    /// Sets answered with an error (e.g. out of memory).
    pub errors: u64,
    pub seconds: f64,
}

pub fn run(cfg: &Config, value: &[u8]) -> Result<PreloadReport, Error> {
    let t0 = Instant::now();
    let s = StdStream::connect(&cfg.server, cfg.timeout_ns)?;
    s.set_read_timeout(PRELOAD_READ_TIMEOUT)
        .map_err(|e| Error::runtime(format!("preload: {e}")))?;
    let kf = workload::key_format(cfg);
    let sizes = ValueSizeGen::new(
        &cfg.phases[0].value_size,
        cfg.value_cap(&cfg.phases[0].value_size),
    );
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(workload::derive_seed(
        cfg.seed,
        workload::STREAM_PRELOAD,
        0,
    ));
    let mut p = Pipe {
        cfg,
        stream: s,
        wbuf: Vec::with_capacity(BATCH_BYTES + (2 << 20)),
        rbuf: vec![0; 256 * 1024],
        rstart: 0,
        rend: 0,
    };
    // Each key's own size (`key_buckets`) when phase 0 sends them.
    let own = workload::per_key(cfg).filter(|_| cfg.phases[0].per_key_values);
    let mut req = Request::with_capacity(1);
    let mut errors = 0u64;
    let mut first_error = None;
    let mut next = 0u64;
    while next < cfg.keys {
        let mut n = 0;
        while next < cfg.keys && n < BATCH && p.wbuf.len() < BATCH_BYTES {
            req.verb = Verb::Set;
            req.keys.clear();
            req.keys.push(next);
            req.value_len = match &cfg.trace {
                // The first length the trace shows for the key, else one of its lengths.
                Some(t) => match t.value_lens.get(next as usize) {
                    Some(&l) if l > 0 => (l as usize).min(cfg.max_value_size()),
                    _ => sizes.sample(&mut rng),
                },
                None => match own.as_ref().and_then(|k| k.value_len(next)) {
                    Some(l) => l,
                    None => sizes.sample(&mut rng),
                },
            };
            protocol::encode(cfg.protocol, &mut p.wbuf, &req, &kf, value);
            next += 1;
            n += 1;
        }
        p.send()?;
        for _ in 0..n {
            let o = p.response(Verb::Set, 1)?;
            if let Some(kind) = o.error {
                errors += 1;
                first_error.get_or_insert(kind);
            }
        }
    }
    // Verify a sample (every key when the keyspace is small).
    let sampled = cfg.keys.min(VERIFY_SAMPLE);
    let mut verified = 0u64;
    let mut done = 0u64;
    while done < sampled {
        let n = (sampled - done).min(100);
        for i in 0..n {
            let k = if cfg.keys <= VERIFY_SAMPLE {
                done + i
            } else {
                rng.random_range(0..cfg.keys)
            };
            req.verb = Verb::Get;
            req.keys.clear();
            req.keys.push(k);
            req.value_len = 0;
            protocol::encode(cfg.protocol, &mut p.wbuf, &req, &kf, value);
        }
        p.send()?;
        for _ in 0..n {
            verified += p.response(Verb::Get, 1)?.hits as u64;
        }
        done += n;
    }
    if (verified as f64) < (sampled as f64 * VERIFY_MIN_FRACTION).ceil() {
        let why = match first_error {
            Some(k) => format!("{errors} sets failed (first: {k:?}); "),
            None => String::new(),
        };
        return Err(Error::runtime(format!(
            "preload verification failed: only {verified} of {sampled} sampled keys are readable after setting {} keys ({why}is the server's memory large enough for the keyspace?)",
            cfg.keys
        )));
    }
    Ok(PreloadReport {
        keys: cfg.keys,
        verified,
        sampled,
        errors,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

struct Pipe<'a> {
    cfg: &'a Config,
    stream: StdStream,
    wbuf: Vec<u8>,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
}

impl Pipe<'_> {
    fn fail(&self, e: io::Error) -> Error {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Error::runtime(format!(
                "preload: no response from {} within {}s",
                self.cfg.server,
                PRELOAD_READ_TIMEOUT.as_secs()
            )),
            io::ErrorKind::UnexpectedEof => Error::runtime(format!(
                "preload: {} closed the connection",
                self.cfg.server
            )),
            _ => Error::runtime(format!("preload: connection to {}: {e}", self.cfg.server)),
        }
    }

    fn send(&mut self) -> Result<(), Error> {
        let r = self.stream.write_all(&self.wbuf);
        self.wbuf.clear();
        r.map_err(|e| self.fail(e))
    }

    fn response(&mut self, verb: Verb, nkeys: usize) -> Result<Outcome, Error> {
        loop {
            match protocol::parse(
                self.cfg.protocol,
                verb,
                nkeys,
                &self.rbuf[self.rstart..self.rend],
            ) {
                Ok(Some((used, o))) => {
                    self.rstart += used;
                    return Ok(o);
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(Error::runtime(format!(
                        "preload: malformed response from {}: {}",
                        self.cfg.server, e.0
                    )));
                }
            }
            if self.rstart > 0 {
                self.rbuf.copy_within(self.rstart..self.rend, 0);
                self.rend -= self.rstart;
                self.rstart = 0;
            }
            if self.rend == self.rbuf.len() {
                let n = self.rbuf.len() * 2;
                self.rbuf.resize(n, 0);
            }
            match self.stream.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => return Err(self.fail(io::ErrorKind::UnexpectedEof.into())),
                Ok(n) => self.rend += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(e)),
            }
        }
    }
}
