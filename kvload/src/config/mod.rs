//! Configuration: command line and workload file merged into one validated
//! [`Config`]. Precedence: command line, then workload file, then defaults.

pub mod cli;
pub mod file;
pub mod sim;
pub mod spec;
pub mod trace;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;

pub use cli::Cli;
pub use spec::{
    Arrival, KeyBucket, KeySize, Mix, Mode, Popularity, Protocol, Ttl, ValueSize, Verb,
};

use crate::Error;
use file::{KeyBucketFile, PhaseFile, Scalar, WorkloadFile};

/// memcached's maximum key length.
pub const MEMCACHED_MAX_KEY: usize = 250;
/// Bytes of an item that are not value: memcached's item header, key and suffix.
pub const ITEM_OVERHEAD: usize = 64;
/// Bounds checked before anything is allocated from them (docs/kvload.md, "Bounds"): the
/// item size (memcached's -I tops out at 1 GiB) sizes the value buffer, connections the
/// stream table, keys the preload.
pub const MAX_ITEM_BYTES: usize = 1 << 30;
pub const MAX_CONNECTIONS: usize = 100_000;
pub const MAX_KEYS: u64 = 1_000_000_000_000;
pub const MAX_KEY_BYTES: usize = 65_535;

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerAddr::Tcp(a) => write!(f, "{a}"),
            ServerAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// One workload segment of the measured window.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    pub duration_ns: u64,
    /// Total requests/s (open mode).
    pub rate: Option<f64>,
    pub value_size: ValueSize,
    pub popularity: Popularity,
    pub mix: Mix,
    /// Sets draw each key's own size from `Config::key_buckets` (the phase inherits the
    /// file's sizes and the command line gives none).
    pub per_key_values: bool,
}

/// Every effective option of a run.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerAddr,
    pub protocol: Protocol,
    pub mode: Mode,
    pub rate: Option<f64>,
    pub arrival: Arrival,
    pub connections: usize,
    pub pipeline: usize,
    pub max_outstanding: usize,
    pub duration_ns: u64,
    pub warmup_ns: u64,
    /// CPUs to pin threads to; empty means one unpinned thread.
    pub cpus: Vec<usize>,
    pub threads: usize,
    pub keys: u64,
    pub key_size: KeySize,
    pub value_size: ValueSize,
    pub popularity: Popularity,
    pub mix: Mix,
    /// Expiration time of sets.
    pub ttl: Ttl,
    /// A workload file's value sizes and TTLs per popularity bucket (empty: none, or a
    /// trace): each key keeps the size and the TTL it draws from its bucket.
    pub key_buckets: Vec<KeyBucket>,
    /// Sets draw each key's own TTL from `key_buckets` (the command line gives no --ttl).
    pub per_key_ttl: bool,
    /// The factor applied to every rate the command line or the file gives.
    pub rate_scale: f64,
    pub mget_size: usize,
    pub seed: u64,
    pub preload: bool,
    pub timeout_ns: u64,
    pub spin_ns: u64,
    pub realtime: bool,
    pub max_item_size: usize,
    /// Always at least one; phase 0 also drives the warm-up and the preload.
    pub phases: Vec<Phase>,
    /// Whether the phases came from the workload file (echoed in the JSON).
    pub explicit_phases: bool,
    pub json: Option<String>,
    pub dump_arrivals: Option<PathBuf>,
    pub quiet: bool,
    pub workload_file: Option<PathBuf>,
    /// --trace: the requests to replay in place of the generated ones.
    pub trace: Option<Arc<trace::Trace>>,
    /// --simulate: a simulated server in place of `server` (engine/sim.rs).
    pub simulate: Option<sim::SimServer>,
    /// --window: the measured window is also kept in windows of this length.
    pub window_ns: Option<u64>,
    /// --watch-pid and --watch-cpus: the server watched for host disturbance per window.
    pub watch_pid: Option<u32>,
    pub watch_cpus: Vec<usize>,
}

/// The shortest and longest `--window`.
pub const MIN_WINDOW_NS: u64 = 50_000_000;
pub const MAX_WINDOW_NS: u64 = 60_000_000_000;
/// At most this many windows in one run.
pub const MAX_WINDOWS: u64 = 10_000;

fn pick<T>(cli: Option<T>, file: Option<T>) -> Option<T> {
    cli.or(file)
}

fn scalar(s: Option<Scalar>) -> Option<String> {
    s.map(|s| s.as_string())
}

fn flag<T>(name: &str, r: Result<T, String>) -> Result<T, Error> {
    r.map_err(|e| Error::usage(format!("--{name}: {e}")))
}

impl Config {
    /// Builds and validates the configuration. Errors name the flag or key at fault.
    pub fn build(cli: Cli) -> Result<Config, Error> {
        Config::build_with_rate(cli, None)
    }

    /// As [`Config::build`], with `default_rate` where neither the command line
    /// nor the file gives a rate (--search and --ramp set each step's rate).
    pub fn build_with_rate(cli: Cli, default_rate: Option<f64>) -> Result<Config, Error> {
        let file = match &cli.workload {
            Some(p) => WorkloadFile::load(p)?,
            None => WorkloadFile::default(),
        };
        // The command line's sizes and TTLs win over the file's per-key ones.
        let (cli_value_size, cli_ttl) = (cli.value_size.is_some(), cli.ttl.is_some());
        let simulate = match &cli.simulate {
            Some(t) => {
                if cli.server.is_some() || file.server.is_some() {
                    return Err(Error::usage(
                        "--simulate is a server of its own: not with --server",
                    ));
                }
                if cli.trace.is_some() {
                    return Err(Error::usage("--simulate does not replay a --trace"));
                }
                Some(
                    sim::SimServer::parse(t)
                        .map_err(|e| Error::usage(format!("--simulate: {e}")))?,
                )
            }
            None => None,
        };
        let server_s = pick(cli.server, file.server).unwrap_or_else(|| "127.0.0.1:11211".into());
        let server = parse_server(&server_s)?;
        let protocol = flag(
            "protocol",
            Protocol::parse(
                &pick(cli.protocol, file.protocol).unwrap_or_else(|| "memcache".into()),
            ),
        )?;
        let mode = flag(
            "mode",
            Mode::parse(&pick(cli.mode, file.mode).unwrap_or_else(|| "open".into())),
        )?;
        let rate_scale = pick(cli.rate_scale, file.rate_scale).unwrap_or(1.0);
        if !(rate_scale.is_finite() && rate_scale > 0.0) {
            return Err(Error::usage(format!(
                "--rate-scale {rate_scale} must be a positive number"
            )));
        }
        let trace = match &cli.trace {
            Some(p) => Some(Arc::new(
                trace::Trace::load(p, rate_scale)
                    .map_err(|e| Error::usage(format!("--trace {e}")))?,
            )),
            None => None,
        };
        let rate = match &trace {
            Some(t) => Some(t.rate()),
            None => pick(cli.rate, file.rate)
                .map(|r| r * rate_scale)
                .or(default_rate),
        };
        let arrival = flag(
            "arrival",
            Arrival::parse(&pick(cli.arrival, file.arrival).unwrap_or_else(|| "poisson".into())),
        )?;
        if simulate.is_some() && !matches!(arrival, Arrival::Poisson) {
            return Err(Error::usage(
                "--simulate models Poisson arrivals (its knee is known for them): not with --arrival fixed or etc",
            ));
        }
        let connections = pick(cli.connections, file.connections).unwrap_or(4);
        let pipeline = pick(cli.pipeline, file.pipeline).unwrap_or(1);
        let max_outstanding =
            pick(cli.max_outstanding, file.max_outstanding).unwrap_or(pipeline.max(64));
        let duration_s = pick(cli.duration, scalar(file.duration.clone()));
        let warmup_ns = flag(
            "warmup",
            spec::parse_duration(
                &pick(cli.warmup, scalar(file.warmup)).unwrap_or_else(|| "2s".into()),
            ),
        )?;
        let cpus = match pick(cli.cpus, scalar(file.cpus)) {
            Some(s) => flag("cpus", spec::parse_cpus(&s))?,
            None => Vec::new(),
        };
        let threads = cpus.len().max(1);
        let key_size = match &trace {
            Some(t) => KeySize::List(t.key_len_list()),
            None => flag(
                "key-size",
                KeySize::parse(
                    &pick(cli.key_size, scalar(file.key_size)).unwrap_or_else(|| "16".into()),
                ),
            )?,
        };
        let value_size = match &trace {
            Some(t) => ValueSize::List(t.value_len_list()),
            None => flag(
                "value-size",
                ValueSize::parse(
                    &pick(cli.value_size.clone(), scalar(file.value_size))
                        .unwrap_or_else(|| "100".into()),
                ),
            )?,
        };
        let popularity = flag(
            "popularity",
            Popularity::parse(
                &pick(cli.popularity.clone(), file.popularity).unwrap_or_else(|| "uniform".into()),
            ),
        )?;
        // A popularity table names its keyspace unless --keys says otherwise.
        let keys = match &trace {
            Some(t) => t.keys(),
            None => pick(cli.keys, file.keys)
                .or(popularity.table_keys())
                .unwrap_or(10_000),
        };
        let ttl = flag(
            "ttl",
            Ttl::parse(&pick(cli.ttl, scalar(file.ttl)).unwrap_or_else(|| "0".into())),
        )?;
        let mix = flag(
            "mix",
            Mix::parse(&pick(cli.mix.clone(), file.mix).unwrap_or_else(|| "get:9,set:1".into())),
        )?;
        let mget_size = pick(cli.mget_size, file.mget_size).unwrap_or(10);
        let seed = pick(cli.seed, file.seed).unwrap_or(1);
        let preload = if cli.no_preload {
            false
        } else if cli.preload {
            true
        } else {
            file.preload.unwrap_or(true)
        };
        let timeout_ns = flag(
            "timeout",
            spec::parse_duration(
                &pick(cli.timeout, scalar(file.timeout)).unwrap_or_else(|| "1s".into()),
            ),
        )?;
        let spin_ns = pick(cli.spin_us, file.spin_us)
            .unwrap_or(0)
            .saturating_mul(1000);
        let max_item_size = match pick(cli.max_item_size.clone(), scalar(file.max_item_size)) {
            Some(s) => flag("max-item-size", spec::parse_size(&s))?,
            None if protocol.is_memcached() => 1 << 20,
            None => 512 << 20,
        };

        // Phases come from the file. A phase's own keys win; the others inherit
        // the top-level values (command line over file over defaults). The
        // window is --duration (or the file's duration) when given, else the sum
        // of the phases: a shorter window cuts the sequence, a longer one keeps
        // the last phase running.
        let key_buckets = match (&trace, file.key_buckets) {
            (None, Some(b)) => key_buckets(b)?,
            _ => Vec::new(),
        };
        let bucket_values = key_buckets.iter().any(|b| b.value_size.is_some()) && !cli_value_size;
        let per_key_ttl = key_buckets.iter().any(|b| b.ttl.is_some()) && !cli_ttl;
        let explicit_phases =
            trace.is_none() && file.phases.as_ref().is_some_and(|p| !p.is_empty());
        let phases = if explicit_phases {
            let list = file.phases.unwrap_or_default();
            let mut phases = Vec::with_capacity(list.len());
            for (i, p) in list.into_iter().enumerate() {
                let own_rate = p.rate.is_some();
                let own_size = p.value_size.is_some();
                let mut phase = build_phase(i, p, rate, &value_size, &popularity, &mix)?;
                phase.per_key_values = bucket_values && !own_size;
                if own_rate {
                    phase.rate = phase.rate.map(|r| r * rate_scale);
                }
                phases.push(phase);
            }
            phases
        } else {
            vec![Phase {
                duration_ns: 0,
                rate,
                value_size: value_size.clone(),
                popularity: popularity.clone(),
                mix: mix.clone(),
                per_key_values: bucket_values,
            }]
        };
        let duration_ns = match duration_s {
            Some(d) => flag("duration", spec::parse_duration(&d))?,
            None if explicit_phases => phases.iter().map(|p| p.duration_ns).sum(),
            // The trace's span, its first --warmup replayed as the warm-up.
            None => match &trace {
                Some(t) => (t.span_ns + 1).saturating_sub(warmup_ns).max(100_000_000),
                None => 10_000_000_000,
            },
        };
        let mut phases = phases;
        if !explicit_phases {
            phases[0].duration_ns = duration_ns;
        }

        let cfg = Config {
            server,
            protocol,
            mode,
            rate,
            arrival,
            connections,
            pipeline,
            max_outstanding,
            duration_ns,
            warmup_ns,
            cpus,
            threads,
            keys,
            key_size,
            value_size,
            popularity,
            mix,
            ttl,
            key_buckets,
            per_key_ttl,
            rate_scale,
            mget_size,
            seed,
            preload,
            timeout_ns,
            spin_ns,
            realtime: cli.realtime || file.realtime.unwrap_or(false),
            max_item_size,
            phases,
            explicit_phases,
            json: cli.json,
            dump_arrivals: cli.dump_arrivals,
            quiet: cli.quiet,
            workload_file: cli.workload,
            trace,
            simulate,
            window_ns: match cli.window {
                Some(w) => Some(flag("window", spec::parse_duration(&w))?),
                None => None,
            },
            watch_pid: cli.watch_pid,
            watch_cpus: match cli.watch_cpus {
                Some(s) => flag("watch-cpus", spec::parse_cpus(&s))?,
                None => Vec::new(),
            },
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The largest value that fits the server's item limit with the longest key.
    pub fn max_value_size(&self) -> usize {
        self.max_item_size
            .saturating_sub(ITEM_OVERHEAD + self.max_key_len())
    }

    /// Where ETC value sizes (an unbounded tail) are clamped: the item limit, at most 1 MiB.
    pub fn etc_value_cap(&self) -> usize {
        self.max_value_size()
            .min((1 << 20) - ITEM_OVERHEAD - self.max_key_len())
    }

    /// The clamp applied to sizes drawn from `spec`.
    pub fn value_cap(&self, spec: &ValueSize) -> usize {
        match spec {
            ValueSize::Etc => self.etc_value_cap(),
            _ => self.max_value_size(),
        }
    }

    /// The longest value any phase (or any key's own size) can send.
    pub fn value_buffer_len(&self) -> usize {
        let buckets = self
            .key_buckets
            .iter()
            .filter_map(|b| b.value_size.as_ref())
            .map(|v| v.max().unwrap_or_else(|| self.etc_value_cap()));
        self.phases
            .iter()
            .map(|p| p.value_size.max().unwrap_or_else(|| self.etc_value_cap()))
            .chain(buckets)
            .max()
            .unwrap_or(0)
    }

    /// The shortest key that can hold every index of the keyspace.
    pub fn min_key_len(&self) -> usize {
        digits(self.keys.saturating_sub(1))
    }

    /// The longest key the run can produce.
    pub fn max_key_len(&self) -> usize {
        match self.key_size {
            KeySize::Fixed(n) => n.max(self.min_key_len()),
            KeySize::Etc => MEMCACHED_MAX_KEY.max(self.min_key_len()),
            KeySize::List(_) => self.key_size.max().unwrap_or(0).max(self.min_key_len()),
        }
    }

    fn validate(&self) -> Result<(), Error> {
        let u = |m: String| Err(Error::usage(m));
        if self.connections == 0 {
            return u("--connections must be at least 1".into());
        }
        if self.connections > MAX_CONNECTIONS {
            return u(format!(
                "--connections {} is more than kvload's bound of {MAX_CONNECTIONS}",
                self.connections
            ));
        }
        if self.max_item_size > MAX_ITEM_BYTES {
            return u(format!(
                "--max-item-size {} bytes is more than kvload's bound of 1 GiB ({MAX_ITEM_BYTES} bytes)",
                self.max_item_size
            ));
        }
        if self.keys > MAX_KEYS {
            return u(format!(
                "--keys {} is more than kvload's bound of {MAX_KEYS}",
                self.keys
            ));
        }
        if let Some(n) = self.key_size.max()
            && n > MAX_KEY_BYTES
        {
            return u(format!(
                "--key-size {n} bytes is more than kvload's bound of {MAX_KEY_BYTES}"
            ));
        }
        if self.connections < self.threads {
            return u(format!(
                "--connections {} is fewer than the {} threads of --cpus (each thread needs a connection)",
                self.connections, self.threads
            ));
        }
        if self.pipeline == 0 || self.pipeline > 65536 {
            return u("--pipeline must be between 1 and 65536".into());
        }
        if self.max_outstanding == 0 || self.max_outstanding > 65536 {
            return u("--max-outstanding must be between 1 and 65536".into());
        }
        if self.keys == 0 {
            return u("--keys must be at least 1".into());
        }
        if self.mget_size == 0 || self.mget_size > 1024 {
            return u("--mget-size must be between 1 and 1024".into());
        }
        if self.duration_ns < 100_000_000 {
            return u("--duration must be at least 100ms".into());
        }
        if self.timeout_ns < 1_000_000 {
            return u("--timeout must be at least 1ms".into());
        }
        if let Some(w) = self.window_ns {
            if !(MIN_WINDOW_NS..=MAX_WINDOW_NS).contains(&w) {
                return u("--window must be between 50ms and 60s".into());
            }
            if self.duration_ns.div_ceil(w) > MAX_WINDOWS {
                return u(format!(
                    "--window: --duration holds more than {MAX_WINDOWS} windows of it"
                ));
            }
        }
        if self.watch_pid == Some(0) {
            return u("--watch-pid must be a process id (1 or more)".into());
        }
        if let Some(r) = self.rate
            && !(r.is_finite() && r > 0.0)
        {
            return u("--rate must be a positive number of requests/s".into());
        }
        if self.mode == Mode::Open {
            for (i, p) in self.phases.iter().enumerate() {
                match p.rate {
                    None => {
                        return u(if self.explicit_phases {
                            format!("--rate is required in open mode (phase {i} has no rate)")
                        } else {
                            "--rate is required in open mode (or use --mode closed)".into()
                        });
                    }
                    Some(r) if !(r.is_finite() && r > 0.0) => {
                        return u(format!("phases[{i}].rate must be a positive number"));
                    }
                    Some(r) if r / (self.threads as f64) > 20e6 => {
                        return u(format!("--rate {r} is beyond 20M requests/s per thread"));
                    }
                    _ => {}
                }
            }
        }
        if let KeySize::List(_) = &self.key_size
            && let Some(n) = self.key_size.max()
            && self.protocol.is_memcached()
            && n > MEMCACHED_MAX_KEY
        {
            return u(format!(
                "--key-size: a length of {n} exceeds memcached's key limit of {MEMCACHED_MAX_KEY} bytes"
            ));
        }
        if let KeySize::Fixed(n) = self.key_size {
            if n == 0 {
                return u("--key-size must be at least 1".into());
            }
            if n < self.min_key_len() {
                return u(format!(
                    "--key-size {n} is too short for --keys {} (keys are zero-padded indices of at least {} bytes)",
                    self.keys,
                    self.min_key_len()
                ));
            }
            if self.protocol.is_memcached() && n > MEMCACHED_MAX_KEY {
                return u(format!(
                    "--key-size {n} exceeds memcached's key limit of {MEMCACHED_MAX_KEY} bytes"
                ));
            }
        }
        if self.protocol.is_memcached() && self.min_key_len() > MEMCACHED_MAX_KEY {
            return u("--keys is too large for memcached's 250-byte keys".into());
        }
        let maxv = self.max_value_size();
        for (i, p) in self.phases.iter().enumerate() {
            if let Some(m) = p.value_size.max()
                && m > maxv
            {
                let what = if self.explicit_phases {
                    format!("phases[{i}].value_size")
                } else {
                    "--value-size".into()
                };
                return u(format!(
                    "{what}: {m} bytes exceeds the server's item size limit ({} B including key and header; set --max-item-size if the server allows larger items, e.g. memcached -I)",
                    self.max_item_size
                ));
            }
            if p.duration_ns == 0 {
                return u(format!("phases[{i}].duration must be positive"));
            }
        }
        for (i, b) in self.key_buckets.iter().enumerate() {
            if let Some(m) = b.value_size.as_ref().and_then(|v| v.max())
                && m > maxv
            {
                return u(format!(
                    "key_buckets[{i}].value_size: {m} bytes exceeds the server's item size limit ({} B including key and header; set --max-item-size if the server allows larger items, e.g. memcached -I)",
                    self.max_item_size
                ));
            }
        }
        if let Some(cpu) = self.cpus.iter().find(|&&c| c >= libc::CPU_SETSIZE as usize) {
            return u(format!("--cpus: CPU {cpu} is out of range"));
        }
        if let Some(allowed) = allowed_cpus()
            && let Some(cpu) = self.cpus.iter().find(|c| !allowed.contains(c))
        {
            return u(format!(
                "--cpus: CPU {cpu} is not available to this process (allowed: {allowed:?})"
            ));
        }
        Ok(())
    }
}

fn build_phase(
    i: usize,
    p: PhaseFile,
    rate: Option<f64>,
    value_size: &ValueSize,
    popularity: &Popularity,
    mix: &Mix,
) -> Result<Phase, Error> {
    let key = |k: &str| format!("phases[{i}].{k}");
    let err = |k: &str, e: String| Error::usage(format!("{}: {e}", key(k)));
    let duration_ns = match p.duration {
        Some(d) => spec::parse_duration(&d.as_string()).map_err(|e| err("duration", e))?,
        None => return Err(Error::usage(format!("{} is required", key("duration")))),
    };
    let value_size = match p.value_size {
        Some(v) => ValueSize::parse(&v.as_string()).map_err(|e| err("value_size", e))?,
        None => value_size.clone(),
    };
    let popularity = match p.popularity {
        Some(v) => Popularity::parse(&v).map_err(|e| err("popularity", e))?,
        None => popularity.clone(),
    };
    let mix = match p.mix {
        Some(v) => Mix::parse(&v).map_err(|e| err("mix", e))?,
        None => mix.clone(),
    };
    Ok(Phase {
        duration_ns,
        rate: p.rate.or(rate),
        value_size,
        popularity,
        mix,
        per_key_values: false,
    })
}

/// A workload file's `key_buckets`, parsed and bounded (errors name the bucket).
fn key_buckets(list: Vec<KeyBucketFile>) -> Result<Vec<KeyBucket>, Error> {
    if list.is_empty() || list.len() > spec::MAX_KEY_BUCKETS {
        return Err(Error::usage(format!(
            "key_buckets: between 1 and {} buckets (got {})",
            spec::MAX_KEY_BUCKETS,
            list.len()
        )));
    }
    let mut total: u64 = 0;
    let mut out = Vec::with_capacity(list.len());
    for (i, b) in list.into_iter().enumerate() {
        let err = |k: &str, e: String| Error::usage(format!("key_buckets[{i}].{k}: {e}"));
        if b.keys == 0 {
            return Err(err("keys", "a bucket holds at least one key".into()));
        }
        total = total.saturating_add(b.keys);
        if total > MAX_KEYS {
            return Err(err(
                "keys",
                format!("the buckets hold more than kvload's bound of {MAX_KEYS} keys"),
            ));
        }
        let value_size = match b.value_size {
            Some(v) => Some(ValueSize::parse(&v.as_string()).map_err(|e| err("value_size", e))?),
            None => None,
        };
        let ttl = match b.ttl {
            Some(v) => Some(Ttl::parse(&v.as_string()).map_err(|e| err("ttl", e))?),
            None => None,
        };
        out.push(KeyBucket {
            keys: b.keys,
            value_size,
            ttl,
        });
    }
    Ok(out)
}

/// The time each phase is in force within a window of `window_ns`: phases run
/// in order for their durations, the last one until the window ends.
pub fn phase_spans(phases: &[Phase], window_ns: u64) -> Vec<u64> {
    let mut left = window_ns;
    let n = phases.len();
    phases
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let d = if i + 1 == n {
                left
            } else {
                p.duration_ns.min(left)
            };
            left -= d;
            d
        })
        .collect()
}

/// The CPUs this process may run on, from sched_getaffinity.
fn allowed_cpus() -> Option<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data, filled by the kernel.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some(
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect(),
        )
    }
}

/// Number of decimal digits of `n` (at least 1).
pub fn digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

fn parse_server(s: &str) -> Result<ServerAddr, Error> {
    if let Some(path) = s.strip_prefix("unix:") {
        if path.is_empty() {
            return Err(Error::usage("--server unix: needs a socket path"));
        }
        return Ok(ServerAddr::Unix(PathBuf::from(path)));
    }
    let addr = s
        .to_socket_addrs()
        .map_err(|e| {
            Error::usage(format!(
                "--server '{s}': {e} (expected HOST:PORT or unix:PATH)"
            ))
        })?
        .next()
        .ok_or_else(|| Error::usage(format!("--server '{s}': no address found")))?;
    Ok(ServerAddr::Tcp(addr))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn build(args: &[&str]) -> Result<Config, Error> {
        let mut v = vec!["kvload"];
        v.extend_from_slice(args);
        Config::build(Cli::try_parse_from(v).unwrap())
    }

    #[test]
    fn every_size_is_bounded_before_allocation() {
        let err = |args: &[&str]| match build(args) {
            Err(Error::Usage(m)) => m,
            other => panic!("{args:?} was accepted: {other:?}"),
        };
        assert!(
            err(&["--rate", "1", "--connections", "100000000000000"]).contains("bound of 100000")
        );
        assert!(err(&["--rate", "1", "--max-item-size", "999999999999M"]).contains("1 GiB"));
        assert!(
            err(&[
                "--rate",
                "1",
                "--keys",
                "2000000000000",
                "--protocol",
                "resp"
            ])
            .contains("bound")
        );
        assert!(err(&["--rate", "1", "--cpus", "0-3000000000"]).contains("out of range"));
        assert!(err(&["--rate", "1", "--workload", "/dev/zero"]).contains("not a regular file"));
        assert!(err(&["--rate", "1", "--trace", "/dev/zero"]).contains("not a regular file"));
        let dir = std::env::temp_dir().join(format!("kvload-bounds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big.json");
        std::fs::write(&big, vec![b' '; (file::MAX_WORKLOAD_BYTES + 1) as usize]).unwrap();
        assert!(err(&["--rate", "1", "--workload", big.to_str().unwrap()]).contains("MiB"));
        let item = dir.join("item.json");
        std::fs::write(&item, r#"{"rate": 1000, "max_item_size": "999999999999M"}"#).unwrap();
        assert!(err(&["--workload", item.to_str().unwrap()]).contains("1 GiB"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            build(&[
                "--rate",
                "1",
                "--max-item-size",
                "1024M",
                "--protocol",
                "resp"
            ])
            .is_ok()
        );
    }

    #[test]
    fn defaults_and_errors() {
        let c = build(&["--rate", "1000"]).unwrap();
        assert_eq!(c.connections, 4);
        assert_eq!(c.max_outstanding, 64);
        assert_eq!(c.phases.len(), 1);
        assert!(matches!(build(&[]), Err(Error::Usage(m)) if m.contains("--rate")));
        assert!(
            matches!(build(&["--rate", "1", "--key-size", "300"]), Err(Error::Usage(m)) if m.contains("250"))
        );
        assert!(
            matches!(build(&["--rate", "1", "--value-size", "2M"]), Err(Error::Usage(m)) if m.contains("item size"))
        );
        assert!(build(&["--rate", "1", "--protocol", "resp", "--value-size", "2M"]).is_ok());
        assert!(
            matches!(build(&["--rate", "1", "--keys", "1000000", "--key-size", "3"]), Err(Error::Usage(m)) if m.contains("too short"))
        );
        assert!(matches!(
            build(&["--mode", "closed", "--cpus", "0-3", "--connections", "2"]),
            Err(Error::Usage(_))
        ));
    }

    #[test]
    fn workload_file_phases() {
        let dir = std::env::temp_dir().join(format!("kvload-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("w.json");
        std::fs::write(
            &p,
            r#"{"rate": 1000, "mix": "set:1", "phases": [
                {"duration": "1s", "value_size": 100},
                {"duration": "2s", "value_size": "1K", "rate": 500}]}"#,
        )
        .unwrap();
        let c = build(&["--workload", p.to_str().unwrap()]).unwrap();
        assert_eq!(c.duration_ns, 3_000_000_000);
        assert_eq!(c.phases[1].value_size, ValueSize::Fixed(1024));
        assert_eq!(c.phases[1].rate, Some(500.0));
        assert_eq!(c.phases[0].rate, Some(1000.0));
        // The command line sets the window and the top level; a phase's own keys win.
        let c = build(&[
            "--workload",
            p.to_str().unwrap(),
            "--duration",
            "5s",
            "--value-size",
            "7",
            "--rate",
            "9",
        ])
        .unwrap();
        assert_eq!(c.duration_ns, 5_000_000_000);
        assert_eq!(c.phases[0].value_size, ValueSize::Fixed(100));
        assert_eq!(c.phases[1].rate, Some(500.0));
        assert_eq!(c.phases[0].rate, Some(9.0));
        assert_eq!(
            phase_spans(&c.phases, c.duration_ns),
            vec![1_000_000_000, 4_000_000_000]
        );
        assert_eq!(phase_spans(&c.phases, 500_000_000), vec![500_000_000, 0]);
        std::fs::write(&p, r#"{"rate": 1000, "valu_size": 3}"#).unwrap();
        let e = build(&["--workload", p.to_str().unwrap()]).unwrap_err();
        assert!(e.to_string().contains("valu_size"), "{e}");
        let t = dir.join("w.toml");
        std::fs::write(
            &t,
            "rate = 10\nkeys = 5\n[[phases]]\nduration = \"1s\"\nvalue_size = \"etc\"\n",
        )
        .unwrap();
        let c = build(&["--workload", t.to_str().unwrap()]).unwrap();
        assert_eq!(c.keys, 5);
        assert_eq!(c.phases[0].value_size, ValueSize::Etc);
    }

    #[test]
    fn a_captured_model_file_sets_ttls_key_sizes_a_table_and_scales_its_rates() {
        let dir = std::env::temp_dir().join(format!("kvload-model-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("model.json");
        std::fs::write(
            &p,
            r#"{"rate": 1000, "mix": "get:9,set:1", "popularity": "table:10:0.6,990:0.4",
                "key_size": "list:20:1,40:1", "value_size": "list:100:1,2000:1",
                "ttl": "list:0:1,3600:3", "phases": [{"duration": "1s"}, {"duration": "1s", "rate": 10}],
                "about": {"source": "memcached://127.0.0.1:11211", "zipf": {"s": 0.9}}}"#,
        )
        .unwrap();
        let c = build(&["--workload", p.to_str().unwrap(), "--rate-scale", "2"]).unwrap();
        assert_eq!(c.keys, 1000, "the table names the keyspace");
        assert_eq!(c.ttl, Ttl::List(vec![(0, 1.0), (3600, 3.0)]));
        assert_eq!(c.phases[0].rate, Some(2000.0));
        assert_eq!(c.phases[1].rate, Some(20.0));
        assert_eq!(c.max_key_len(), 40);
        let c = build(&["--workload", p.to_str().unwrap(), "--keys", "5000"]).unwrap();
        assert_eq!(c.keys, 5000);
        assert_eq!(c.rate, Some(1000.0));
        for (flag, value, says) in [
            ("--ttl", "2592001", "30 days"),
            ("--ttl", "soon", "invalid TTL"),
            ("--rate-scale", "0", "--rate-scale"),
            ("--key-size", "list:300:1", "key limit"),
            ("--popularity", "table:10", "popularity table"),
        ] {
            let e = build(&["--rate", "1", flag, value]).unwrap_err();
            assert!(e.to_string().contains(says), "{flag} {value}: {e}");
        }
    }

    #[test]
    fn key_buckets_give_each_key_its_size_unless_the_command_line_says_otherwise() {
        let dir = std::env::temp_dir().join(format!("kvload-buckets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("m.json");
        std::fs::write(
            &f,
            r#"{"rate": 1000, "keys": 1000, "popularity": "zipf:1", "value_size": "100",
                "ttl": "0",
                "key_buckets": [{"keys": 10, "value_size": "list:8000:1", "ttl": "list:60:1"},
                                {"keys": 990, "value_size": "list:100:3,1000:1"}],
                "phases": [{"duration": "1s"}, {"duration": "1s", "value_size": "50"}]}"#,
        )
        .unwrap();
        let w = f.to_str().unwrap();
        let c = build(&["--workload", w]).unwrap();
        assert_eq!(c.key_buckets.len(), 2);
        assert!(c.per_key_ttl);
        assert!(c.phases[0].per_key_values && !c.phases[1].per_key_values);
        assert_eq!(c.value_buffer_len(), 8000);
        let c = build(&["--workload", w, "--value-size", "200", "--ttl", "5"]).unwrap();
        assert!(!c.per_key_ttl && !c.phases[0].per_key_values);
        let bad = |text: &str| {
            std::fs::write(&f, text).unwrap();
            match build(&["--workload", w]) {
                Err(Error::Usage(m)) => m,
                other => panic!("{text} was accepted: {other:?}"),
            }
        };
        assert!(bad(r#"{"rate": 1, "key_buckets": []}"#).contains("between 1 and"));
        assert!(
            bad(r#"{"rate": 1, "key_buckets": [{"keys": 0}]}"#).contains("key_buckets[0].keys")
        );
        assert!(
            bad(r#"{"rate": 1, "key_buckets": [{"keys": 5, "value_size": "9M"}]}"#)
                .contains("key_buckets[0].value_size")
        );
        assert!(
            bad(r#"{"rate": 1, "key_buckets": [{"keys": 5, "ttl": "99999999"}]}"#)
                .contains("key_buckets[0].ttl")
        );
        assert!(bad(r#"{"rate": 1, "key_buckets": [{"keys": 5, "size": 1}]}"#).contains("size"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
