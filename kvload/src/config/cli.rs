//! The command line. Every option is optional here so that a workload file can
//! supply it; defaults are applied in [`super::Config::build`].

use clap::Parser;
use std::path::PathBuf;

const ABOUT: &str =
    "Open-loop, coordinated-omission-corrected load generator for memcached and Redis.";

const LONG_ABOUT: &str = "\
Open-loop, coordinated-omission-corrected load generator for memcached (text and
meta protocols) and Redis (RESP2).

In open mode (the default) requests arrive on a seeded schedule (Poisson, fixed
or Facebook ETC inter-arrivals) at --rate requests/s in total. Each request's
latency is measured from its intended send time (\"corrected\") and from its
actual send time (\"service\"); the lag between the two is the schedule lag. A
run whose lag keeps growing is reported as saturated. In closed mode every
connection keeps --pipeline requests outstanding.

One thread runs per CPU given with --cpus, pinned to it, owning its connections,
schedule, random generator and histograms. The keyspace is preloaded with
pipelined sets and verified before the warm-up window, which is discarded.

Exit codes: 0 the run completed (its verdict may still be saturated or
client_bound); 1 runtime failure (server unreachable, connection reset,
malformed response, preload verification failed); 2 bad arguments or workload
file. Errors are one line on stderr: 'kvload: error: ...'.

With --search SLO, kvload runs open-loop steps and reports the capacity: the
highest rate whose latency meets the SLO, with its bracket (highest pass,
lowest fail) and every step; with --ramp, one step per rate. A step where the
client is the limit ends the search without a knee (verdict client_bound).

The JSON schemas (kvload/1.1 for a run, kvload/search/2 for --search and
--ramp) and the workload file format are documented in docs/kvload.md.";

const AFTER: &str = "\
Examples:
  kvload --server 127.0.0.1:11211 --rate 50000 --duration 10s --cpus 1 --json out.json
  kvload --server unix:/tmp/mc.sock --protocol meta --mix get:9,set:1 --popularity zipf:0.99
  kvload --server 127.0.0.1:6379 --protocol resp --mode closed --connections 16 --pipeline 16
  kvload --server 127.0.0.1:11211 --workload phases.json --json -
  kvload --server 127.0.0.1:11211 --search 'p99<=200us' --duration 3s --warmup 1s --json knee.json
  kvload --server 127.0.0.1:11211 --ramp 20k:200k:20k:shuffle --duration 3s --json curve.json";

#[derive(Parser, Debug, Default, Clone)]
#[command(name = "kvload", version, about = ABOUT, long_about = LONG_ABOUT, after_help = AFTER)]
pub struct Cli {
    /// Server address: HOST:PORT (TCP, TCP_NODELAY) or unix:PATH [default: 127.0.0.1:11211]
    #[arg(long, value_name = "HOST:PORT|unix:PATH")]
    pub server: Option<String>,

    /// Wire protocol: memcache (text), meta (memcached meta commands) or resp (Redis RESP2) [default: memcache]
    #[arg(long, value_name = "memcache|meta|resp")]
    pub protocol: Option<String>,

    /// open: seeded arrival schedule at --rate; closed: connections x pipeline depth [default: open]
    #[arg(long, value_name = "open|closed")]
    pub mode: Option<String>,

    /// Total request rate in requests/s across all threads (open mode; required there): 50000, 50k or 1.5M
    #[arg(long, value_name = "N", value_parser = super::spec::parse_rate)]
    pub rate: Option<f64>,

    /// Inter-arrival distribution: poisson (exponential), fixed, or etc (Facebook ETC generalized Pareto, shape 0.154971, scaled to the rate) [default: poisson]
    #[arg(long, value_name = "poisson|fixed|etc")]
    pub arrival: Option<String>,

    /// Total connections, spread over the threads [default: 4]
    #[arg(long, value_name = "N")]
    pub connections: Option<usize>,

    /// Closed mode: requests outstanding per connection. Open mode: the default cap on outstanding requests per connection is max(pipeline, 64) [default: 1]
    #[arg(long, value_name = "N")]
    pub pipeline: Option<usize>,

    /// Open mode: maximum outstanding requests per connection; an arrival finding every connection full is skipped and counted [default: max(pipeline, 64)]
    #[arg(long, value_name = "N")]
    pub max_outstanding: Option<usize>,

    /// Measured window, e.g. 500ms, 3s, 1m [default: 10s, or the sum of the phases]
    #[arg(long, value_name = "DURATION")]
    pub duration: Option<String>,

    /// Warm-up before the measured window, discarded [default: 2s]
    #[arg(long, value_name = "DURATION")]
    pub warmup: Option<String>,

    /// CPUs to run on, e.g. 1 or 0-1,3: one thread per CPU, each pinned [default: one unpinned thread]
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,

    /// Keyspace size (keys are zero-padded decimal indices) [default: 10000]
    #[arg(long, value_name = "N")]
    pub keys: Option<u64>,

    /// Key size in bytes, etc (Facebook ETC GEV), or list:SIZE:WEIGHT,... (a captured distribution); each key keeps its length [default: 16]
    #[arg(long, value_name = "N|etc|list:...")]
    pub key_size: Option<String>,

    /// Value size: N, A-B (uniform), etc (Facebook ETC), or list:SIZE:WEIGHT,SIZE:WEIGHT; sizes accept K and M suffixes [default: 100]
    #[arg(long, value_name = "SPEC")]
    pub value_size: Option<String>,

    /// Key popularity: uniform, zipf:S (ranks scrambled over the keyspace), hotset:FRACTION_KEYS:FRACTION_REQS, or table:KEYS:MASS,... (rank buckets, hottest first; its key count is the keyspace unless --keys is given) [default: uniform]
    #[arg(long, value_name = "SPEC")]
    pub popularity: Option<String>,

    /// Weighted verb mix of get, mget, set, delete [default: get:9,set:1]
    #[arg(long, value_name = "VERB:W,...")]
    pub mix: Option<String>,

    /// Expiration of sets in seconds, or list:SECONDS:WEIGHT,... drawn per set; 0 never expires; at most 30 days [default: 0]
    #[arg(long, value_name = "SECONDS|list:...")]
    pub ttl: Option<String>,

    /// Replay a normalized trace (kvtune workload capture/import --keep-trace) request by request, open loop at its recorded times divided by --rate-scale; its keys, verbs, sizes and TTLs replace --keys, --mix, --popularity, --key-size, --value-size, --ttl and --rate, and its span is the default --duration (minus --warmup)
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,

    /// Multiplies every rate given on the command line or in the workload file (a captured model at 2x its traffic: --rate-scale 2) [default: 1]
    #[arg(long, value_name = "X")]
    pub rate_scale: Option<f64>,

    /// Keys per mget request [default: 10]
    #[arg(long, value_name = "N")]
    pub mget_size: Option<usize>,

    /// Seed of the request stream and arrival schedule [default: 1]
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,

    /// Preload every key with pipelined sets before the warm-up and verify a sample (default)
    #[arg(long, overrides_with = "no_preload")]
    pub preload: bool,

    /// Skip the preload
    #[arg(long, overrides_with = "preload")]
    pub no_preload: bool,

    /// Workload file (JSON, or TOML when the name ends in .toml) with the same keys as the long options (dashes as underscores) plus phases; command-line options override its top-level keys, a phase's own keys win
    #[arg(long, value_name = "FILE")]
    pub workload: Option<PathBuf>,

    /// Per-request timeout: a response later than this counts as a timeout; also the drain time after the window [default: 1s]
    #[arg(long, value_name = "DURATION")]
    pub timeout: Option<String>,

    /// Busy-poll when the next deadline is within N microseconds; 0 always blocks (never spin on a CPU shared with the server) [default: 0]
    #[arg(long, value_name = "N")]
    pub spin_us: Option<u64>,

    /// Run the engine threads under SCHED_FIFO (priority 1) so that other processes on the client CPUs cannot delay sends by a scheduler slice (needs root or CAP_SYS_NICE)
    #[arg(long)]
    pub realtime: bool,

    /// Largest item the server accepts, in bytes (memcached -I); larger fixed sizes are rejected, ETC tails are clamped [default: 1M for memcached, 512M for Redis]
    #[arg(long, value_name = "SIZE")]
    pub max_item_size: Option<String>,

    /// Write the JSON document to FILE, or to stdout with -
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<String>,

    /// Write every request's intended and actual send time (ns since the window start; open mode) to FILE as 'thread intended_ns sent_ns' lines
    #[arg(long, value_name = "FILE")]
    pub dump_arrivals: Option<PathBuf>,

    /// No terminal summary
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// Capacity at an SLO: open-loop steps (each with its own warm-up and window) converge on the highest rate whose latency meets SLO, e.g. p99<=200us, p99.9<=1ms, service.p99<=200us (the corrected latency unless service. is given). --rate, when given, is the first step; otherwise a short closed-loop burst estimates it
    #[arg(long, value_name = "SLO")]
    pub search: Option<String>,

    /// What this host can show for SLO (e.g. p99<=1ms), before a search: a closed-loop burst (the server's peak), the latency floor at a low rate (--rate, default 1000 req/s) and the latency and the client's CPU cost per request at half the peak, each judged by its windows; JSON schema kvload/profile/1
    #[arg(long, value_name = "SLO")]
    pub profile: Option<String>,

    /// --search: stop when the highest pass and the lowest fail are this close, e.g. 2% or 0.02 [default: 2%]
    #[arg(long, value_name = "PCT")]
    pub precision: Option<String>,

    /// --search: the rates searched, LOW:HIGH in requests/s (k and M suffixes) [default: 1k:10M]
    #[arg(long, value_name = "LOW:HIGH")]
    pub search_range: Option<String>,

    /// --search: at most this many runs (runs again at a rate in doubt and the host watch's included) [default: 24]
    #[arg(long, value_name = "N")]
    pub max_steps: Option<usize>,

    /// --search: runs at one rate whose percentile's interval straddles the bound, at most; then the estimate decides [default: 2]
    #[arg(long, value_name = "N")]
    pub runs_per_rate: Option<usize>,

    /// --search: the host watch's reference rate, measured at the start, halfway and at the end (a move beyond its interval ends the search "host changed"), or off [default: half the first rate]
    #[arg(long, value_name = "RATE|off")]
    pub reference: Option<String>,

    /// A simulated server in place of --server, for tests of the search against a known knee: an M/M/1 queue, service=RATE (its mean service rate), base=LATENCY (added to every response), jitter=SIGMA (the service rate's run-to-run log-normal spread), client=RATE (where kvload's own CPUs would be the limit). Nothing connects
    #[arg(
        long,
        value_name = "service=RATE[,base=50us][,jitter=0.03][,client=RATE]"
    )]
    pub simulate: Option<String>,

    /// Also measure the window in short windows of this length (by intended send time): per-window latency, schedule lag and host activity in the JSON's `windows`. --search and --ramp judge a rate by its windows [default: off; 250ms with --search and --ramp]
    #[arg(long, value_name = "DURATION")]
    pub window: Option<String>,

    /// Watch the server process PID during the run: the CPU time others used on --watch-cpus (a task other than the server on its CPUs) marks a window as disturbed
    #[arg(long, value_name = "PID")]
    pub watch_pid: Option<u32>,

    /// The server's CPUs, watched for steal time and for other tasks (with --watch-pid) in each window [default: none]
    #[arg(long, value_name = "LIST")]
    pub watch_cpus: Option<String>,

    /// --ramp: judge each step's windows against SLO (e.g. p99<=1ms) and report its percentile over the undisturbed windows with a 95% interval, as a search does
    #[arg(long, value_name = "SLO")]
    pub ramp_slo: Option<String>,

    /// The latency-throughput curve: one open-loop step per rate from START to END by STEP (k and M suffixes), in shuffled order with :shuffle
    #[arg(long, value_name = "START:END:STEP[:shuffle]")]
    pub ramp: Option<String>,
}
