//! Typed specifications of the workload knobs, parsed from the strings users
//! write on the command line or in a workload file. Each type prints back to the
//! same syntax it parses (used in the JSON config echo).

use std::fmt;

use fundu::{CustomDurationParserBuilder, CustomTimeUnit, TimeUnit};

/// The wire protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// memcached text protocol: get, multi-get, set, delete.
    Memcache,
    /// memcached meta protocol: mg, ms, md.
    Meta,
    /// Redis RESP2: GET, MGET, SET, DEL.
    Resp,
}

impl Protocol {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "memcache" | "memcached" | "text" => Ok(Protocol::Memcache),
            "meta" => Ok(Protocol::Meta),
            "resp" | "redis" | "resp2" => Ok(Protocol::Resp),
            _ => Err(format!(
                "unknown protocol '{s}' (expected memcache, meta or resp)"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Memcache => "memcache",
            Protocol::Meta => "meta",
            Protocol::Resp => "resp",
        }
    }

    /// Whether the memcached key (250 B) and item size limits apply.
    pub fn is_memcached(self) -> bool {
        !matches!(self, Protocol::Resp)
    }
}

/// How requests are issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Arrivals follow a seeded schedule; latency is measured from the intended send time.
    Open,
    /// Every connection keeps `pipeline` requests outstanding.
    Closed,
}

impl Mode {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "open" => Ok(Mode::Open),
            "closed" => Ok(Mode::Closed),
            _ => Err(format!("unknown mode '{s}' (expected open or closed)")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Open => "open",
            Mode::Closed => "closed",
        }
    }
}

/// The inter-arrival distribution of the open-loop schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Exponential inter-arrivals.
    Poisson,
    /// A constant interval.
    Fixed,
    /// Facebook ETC: generalized Pareto, shape 0.154971, scaled to the rate.
    Etc,
}

impl Arrival {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "poisson" | "exponential" => Ok(Arrival::Poisson),
            "fixed" | "uniform" => Ok(Arrival::Fixed),
            "etc" | "fb_ia" => Ok(Arrival::Etc),
            _ => Err(format!(
                "unknown arrival '{s}' (expected poisson, fixed or etc)"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arrival::Poisson => "poisson",
            Arrival::Fixed => "fixed",
            Arrival::Etc => "etc",
        }
    }
}

/// Key length in bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum KeySize {
    Fixed(usize),
    /// Facebook ETC GEV(30.7984, 8.20449, 0.078688), deterministic per key.
    Etc,
    /// Weighted list of lengths (a captured distribution), deterministic per key.
    List(Vec<(usize, f64)>),
}

impl KeySize {
    pub fn parse(s: &str) -> Result<Self, String> {
        if s == "etc" || s == "fb_key" {
            return Ok(KeySize::Etc);
        }
        if let Some(rest) = s.strip_prefix("list:") {
            let items = parse_weighted(rest, s, "key size")?;
            if items.iter().any(|i| i.0 == 0) {
                return Err(format!("key size list '{s}' has a length of 0"));
            }
            return Ok(KeySize::List(items));
        }
        parse_size(s).map(KeySize::Fixed).map_err(|_| {
            format!("invalid key size '{s}' (expected a byte count, etc or list:SIZE:WEIGHT,...)")
        })
    }

    /// The longest length this specification names, if bounded.
    pub fn max(&self) -> Option<usize> {
        match self {
            KeySize::Fixed(n) => Some(*n),
            KeySize::Etc => None,
            KeySize::List(l) => l.iter().filter(|i| i.1 > 0.0).map(|i| i.0).max(),
        }
    }
}

impl fmt::Display for KeySize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySize::Fixed(n) => write!(f, "{n}"),
            KeySize::Etc => f.write_str("etc"),
            KeySize::List(l) => write_weighted(f, "list:", l),
        }
    }
}

/// `SIZE:WEIGHT,SIZE:WEIGHT` (sizes accept K and M suffixes) with a positive total weight.
fn parse_weighted(rest: &str, whole: &str, what: &str) -> Result<Vec<(usize, f64)>, String> {
    let form = if whole.starts_with("table:") {
        "table:KEYS:MASS,KEYS:MASS"
    } else {
        "list:SIZE:WEIGHT,SIZE:WEIGHT"
    };
    let bad = || format!("invalid {what} '{whole}' (expected {form})");
    let mut items = Vec::new();
    for part in rest.split(',') {
        let (size, weight) = part.split_once(':').ok_or_else(bad)?;
        let size = parse_size(size).map_err(|_| bad())?;
        let weight: f64 = weight.trim().parse().map_err(|_| bad())?;
        if !(weight.is_finite() && weight >= 0.0) {
            return Err(bad());
        }
        items.push((size, weight));
    }
    if items.iter().map(|i| i.1).sum::<f64>() <= 0.0 {
        return Err(format!("{what} list '{whole}' has no positive weight"));
    }
    Ok(items)
}

fn write_weighted<T: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    prefix: &str,
    l: &[(T, f64)],
) -> fmt::Result {
    f.write_str(prefix)?;
    for (i, (s, w)) in l.iter().enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        write!(f, "{s}:{w}")?;
    }
    Ok(())
}

/// The longest TTL memcached takes as relative seconds; larger values are absolute Unix times.
pub const MAX_RELATIVE_TTL: usize = 30 * 24 * 3600;

/// Expiration time of a set, in seconds (0: never), drawn per request.
#[derive(Debug, Clone, PartialEq)]
pub enum Ttl {
    Fixed(usize),
    List(Vec<(usize, f64)>),
}

impl Ttl {
    pub fn parse(s: &str) -> Result<Self, String> {
        let t = if let Some(rest) = s.strip_prefix("list:") {
            Ttl::List(parse_weighted(rest, s, "TTL")?)
        } else {
            Ttl::Fixed(s.trim().parse().map_err(|_| {
                format!("invalid TTL '{s}' (expected seconds or list:SECONDS:WEIGHT,...)")
            })?)
        };
        let max = match &t {
            Ttl::Fixed(n) => *n,
            Ttl::List(l) => l.iter().map(|i| i.0).max().unwrap_or(0),
        };
        if max > MAX_RELATIVE_TTL {
            return Err(format!(
                "TTL {max} s in '{s}' is beyond 30 days, which memcached reads as an absolute time"
            ));
        }
        Ok(t)
    }

    /// As a value-size specification, so the same weighted sampler draws it.
    pub fn as_sizes(&self) -> ValueSize {
        match self {
            Ttl::Fixed(n) => ValueSize::Fixed(*n),
            Ttl::List(l) => ValueSize::List(l.clone()),
        }
    }
}

impl fmt::Display for Ttl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ttl::Fixed(n) => write!(f, "{n}"),
            Ttl::List(l) => write_weighted(f, "list:", l),
        }
    }
}

/// Value length in bytes (drawn per set request).
#[derive(Debug, Clone, PartialEq)]
pub enum ValueSize {
    Fixed(usize),
    /// Uniform over the inclusive range.
    Range(usize, usize),
    /// Weighted list of sizes.
    List(Vec<(usize, f64)>),
    /// Facebook ETC: discrete head for 0-14 B, then GPD(15, 214.476, 0.348238).
    Etc,
}

impl ValueSize {
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "invalid value size '{s}' (expected N, A-B, etc or list:SIZE:WEIGHT,SIZE:WEIGHT)"
            )
        };
        if s == "etc" || s == "fb_value" {
            return Ok(ValueSize::Etc);
        }
        if let Some(rest) = s.strip_prefix("list:") {
            return parse_weighted(rest, s, "value size").map(ValueSize::List);
        }
        if let Some((a, b)) = s.split_once('-') {
            let a = parse_size(a).map_err(|_| bad())?;
            let b = parse_size(b).map_err(|_| bad())?;
            if a > b {
                return Err(format!("value size range '{s}' is empty"));
            }
            return Ok(ValueSize::Range(a, b));
        }
        parse_size(s).map(ValueSize::Fixed).map_err(|_| bad())
    }

    /// The largest size this specification can produce, if bounded.
    pub fn max(&self) -> Option<usize> {
        match self {
            ValueSize::Fixed(n) => Some(*n),
            ValueSize::Range(_, b) => Some(*b),
            ValueSize::List(l) => l.iter().filter(|i| i.1 > 0.0).map(|i| i.0).max(),
            ValueSize::Etc => None,
        }
    }
}

impl fmt::Display for ValueSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueSize::Fixed(n) => write!(f, "{n}"),
            ValueSize::Range(a, b) => write!(f, "{a}-{b}"),
            ValueSize::Etc => f.write_str("etc"),
            ValueSize::List(l) => write_weighted(f, "list:", l),
        }
    }
}

/// The most popularity buckets a workload file may give sizes for.
pub const MAX_KEY_BUCKETS: usize = 4096;

/// What belongs to the keys of one popularity bucket (`key_buckets` of a workload
/// file): `keys` consecutive popularity ranks (hottest bucket first; the counts are
/// scaled to the keyspace as a popularity table's are), each key drawing its value
/// size and its TTL once, from these distributions, for every set and the preload.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyBucket {
    pub keys: u64,
    pub value_size: Option<ValueSize>,
    pub ttl: Option<Ttl>,
}

/// Key popularity over the keyspace.
#[derive(Debug, Clone, PartialEq)]
pub enum Popularity {
    Uniform,
    /// Zipf with exponent s, ranks scrambled over the keyspace.
    Zipf(f64),
    /// A fraction of the keys receives a fraction of the requests.
    HotSet {
        keys: f64,
        requests: f64,
    },
    /// An empirical rank-frequency table: consecutive rank buckets of KEYS keys
    /// carrying MASS of the requests (uniform within a bucket), hottest first.
    /// The key counts are scaled to the keyspace when --keys differs from their sum.
    Table(Vec<(u64, f64)>),
}

impl Popularity {
    /// The keys a table describes, if it is one.
    pub fn table_keys(&self) -> Option<u64> {
        match self {
            Popularity::Table(t) => Some(t.iter().map(|i| i.0).sum()),
            _ => None,
        }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        if s == "uniform" {
            return Ok(Popularity::Uniform);
        }
        if let Some(e) = s.strip_prefix("zipf:") {
            let e: f64 = e
                .parse()
                .map_err(|_| format!("invalid zipf exponent in '{s}'"))?;
            if !(e.is_finite() && e >= 0.0) {
                return Err(format!("zipf exponent in '{s}' must be >= 0"));
            }
            return Ok(Popularity::Zipf(e));
        }
        if let Some(rest) = s.strip_prefix("hotset:") {
            let (k, r) = rest.split_once(':').ok_or_else(|| {
                format!("invalid hot set '{s}' (expected hotset:FRACTION_KEYS:FRACTION_REQS)")
            })?;
            let k: f64 = k
                .parse()
                .map_err(|_| format!("invalid key fraction in '{s}'"))?;
            let r: f64 = r
                .parse()
                .map_err(|_| format!("invalid request fraction in '{s}'"))?;
            if !(k > 0.0 && k < 1.0 && (0.0..=1.0).contains(&r)) {
                return Err(format!(
                    "hot set '{s}': the key fraction must be in (0,1) and the request fraction in [0,1]"
                ));
            }
            return Ok(Popularity::HotSet {
                keys: k,
                requests: r,
            });
        }
        if let Some(rest) = s.strip_prefix("table:") {
            let items = parse_weighted(rest, s, "popularity table")?;
            if items.iter().any(|i| i.0 == 0) {
                return Err(format!("popularity table '{s}' has a bucket of 0 keys"));
            }
            return Ok(Popularity::Table(
                items.into_iter().map(|(k, m)| (k as u64, m)).collect(),
            ));
        }
        Err(format!(
            "unknown popularity '{s}' (expected uniform, zipf:S, hotset:FRACTION_KEYS:FRACTION_REQS or table:KEYS:MASS,...)"
        ))
    }
}

impl fmt::Display for Popularity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Popularity::Uniform => f.write_str("uniform"),
            Popularity::Zipf(s) => write!(f, "zipf:{s}"),
            Popularity::HotSet { keys, requests } => write!(f, "hotset:{keys}:{requests}"),
            Popularity::Table(t) => write_weighted(f, "table:", t),
        }
    }
}

/// The verbs kvload issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Verb {
    Get = 0,
    Mget = 1,
    Set = 2,
    Delete = 3,
}

impl Verb {
    pub const ALL: [Verb; 4] = [Verb::Get, Verb::Mget, Verb::Set, Verb::Delete];

    pub fn name(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Mget => "mget",
            Verb::Set => "set",
            Verb::Delete => "delete",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// Whether responses to this verb count as hits or misses.
    pub fn is_read(self) -> bool {
        matches!(self, Verb::Get | Verb::Mget)
    }
}

/// A weighted verb mix, e.g. `get:9,set:1`.
#[derive(Debug, Clone, PartialEq)]
pub struct Mix {
    /// Weight per verb, indexed by `Verb::index`.
    pub weights: [f64; 4],
}

impl Mix {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut weights = [0.0; 4];
        for part in s.split(',') {
            let (verb, w) = part.split_once(':').unwrap_or((part, "1"));
            let v = match verb.trim() {
                "get" => Verb::Get,
                "mget" | "multiget" => Verb::Mget,
                "set" => Verb::Set,
                "delete" | "del" => Verb::Delete,
                other => {
                    return Err(format!(
                        "unknown verb '{other}' in mix '{s}' (expected get, mget, set, delete)"
                    ));
                }
            };
            let w: f64 = w
                .trim()
                .parse()
                .map_err(|_| format!("invalid weight '{w}' in mix '{s}'"))?;
            if !(w.is_finite() && w >= 0.0) {
                return Err(format!("weight '{w}' in mix '{s}' must be >= 0"));
            }
            weights[v.index()] += w;
        }
        if weights.iter().sum::<f64>() <= 0.0 {
            return Err(format!("mix '{s}' has no positive weight"));
        }
        Ok(Mix { weights })
    }

    pub fn has(&self, v: Verb) -> bool {
        self.weights[v.index()] > 0.0
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for v in Verb::ALL {
            let w = self.weights[v.index()];
            if w > 0.0 {
                if !first {
                    f.write_str(",")?;
                }
                first = false;
                write!(f, "{}:{}", v.name(), w)?;
            }
        }
        Ok(())
    }
}

/// kvload's largest open-loop rate, req/s.
pub const MAX_RATE: f64 = 1e7;

/// Whether `t` is a plain decimal number: digits, at most one point with digits on both
/// sides (no sign, exponent, blanks, `inf` or `nan`). The number of every quantity below,
/// as kvtune's Python reads it too (`tests/grammar.json`).
pub fn plain_number(t: &str) -> bool {
    let mut parts = t.splitn(2, '.');
    let whole = parts.next().unwrap_or("");
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    digits(whole) && parts.next().is_none_or(digits)
}

/// A rate in requests/s: 150000, 150k, 1.5M.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix(['k', 'K']) {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix('M') {
        (n, 1e6)
    } else {
        (t, 1.0)
    };
    match num.parse::<f64>() {
        Ok(v) if plain_number(num) && v.is_finite() && v > 0.0 => Ok(v * scale),
        _ => Err(format!(
            "'{s}' is not a positive rate such as 50000, 50k or 1.5M"
        )),
    }
}

/// The units of a duration: kvtune's Python grammar (`kvtune/durations.py`) is the same,
/// both checked against one table of cases (`tests/grammar.json`).
const DURATION_UNITS: [CustomTimeUnit<'static>; 6] = [
    CustomTimeUnit::with_default(TimeUnit::NanoSecond, &["ns"]),
    CustomTimeUnit::with_default(TimeUnit::MicroSecond, &["us", "µs"]),
    CustomTimeUnit::with_default(TimeUnit::MilliSecond, &["ms"]),
    CustomTimeUnit::with_default(TimeUnit::Second, &["s"]),
    CustomTimeUnit::with_default(TimeUnit::Minute, &["m"]),
    CustomTimeUnit::with_default(TimeUnit::Hour, &["h"]),
];

/// Parses `500ms`, `3s`, `1m`, `250us`, `2.5s`, `5 s` or a bare number of seconds into
/// nanoseconds (fundu: exact decimal arithmetic, no exponent, no infinity, no sign).
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let bad = || format!("invalid duration '{s}' (expected e.g. 500ms, 3s, 1m)");
    // Digits on both sides of a point, as kvtune writes them ('.5s' and '5.s' are refused).
    if !plain_number(s.trim_end_matches(|c: char| c.is_alphabetic() || c.is_whitespace())) {
        return Err(bad());
    }
    let parser = CustomDurationParserBuilder::new()
        .time_units(&DURATION_UNITS)
        .default_unit(TimeUnit::Second)
        .allow_time_unit_delimiter()
        .disable_exponent()
        .disable_infinity()
        .build();
    let d: std::time::Duration = parser
        .parse(s)
        .map_err(|_| bad())?
        .try_into()
        .map_err(|_| bad())?;
    u64::try_from(d.as_nanos()).map_err(|_| bad())
}

/// Parses a byte count: digits, then K, M or G (powers of 1024) or B: `100`, `100B`,
/// `10K`, `1M`.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let bad = || format!("invalid size '{s}'");
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1 << 10),
        Some((i, 'm' | 'M')) => (&s[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&s[..i], 1 << 30),
        Some((i, 'b' | 'B')) => (&s[..i], 1),
        _ => (s, 1),
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let v: usize = num.parse().map_err(|_| bad())?;
    v.checked_mul(mult).ok_or_else(bad)
}

/// The CPUs a CPU list may name (the kernel's CPU_SETSIZE): every CPU is checked against
/// it before a range is expanded, so `0-3000000000` is refused, never allocated.
pub const MAX_CPUS: usize = libc::CPU_SETSIZE as usize;

/// Parses a CPU list such as `1`, `0-1,3` (CPUs 0 to MAX_CPUS - 1). Whitespace around the
/// whole list (a line read from a file); inside it, spaces and tabs only around a part or
/// a range's ends, never a line break ("0,\n1" would be two lines of a systemd drop-in):
/// kvtune's parser (kvtune.cpulist) has the same grammar, tests/grammar.json checks both.
pub fn parse_cpus(s: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    let bad = || {
        format!(
            "invalid CPU list '{}' (expected e.g. 1 or 0-1,3)",
            s.escape_debug()
        )
    };
    let blank = |c: char| c == ' ' || c == '\t';
    let cpu = |t: &str| -> Result<usize, String> {
        let t = t.trim_matches(blank);
        if t.is_empty() || t.len() > 10 || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let c: usize = t.parse().map_err(|_| bad())?;
        if c >= MAX_CPUS {
            return Err(format!(
                "CPU {c} in '{}' is out of range (CPUs 0 to {})",
                s.escape_debug(),
                MAX_CPUS - 1
            ));
        }
        Ok(c)
    };
    for part in s.trim().split(',') {
        if let Some((a, b)) = part.split_once('-') {
            let (a, b) = (cpu(a)?, cpu(b)?);
            if a > b {
                return Err(bad());
            }
            cpus.extend(a..=b);
        } else {
            cpus.push(cpu(part)?);
        }
        if cpus.len() > MAX_CPUS {
            return Err(format!(
                "CPU list '{}' names more than {MAX_CPUS} CPUs",
                s.escape_debug()
            ));
        }
    }
    let mut sorted = cpus.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != cpus.len() {
        return Err(format!("CPU list '{s}' names a CPU twice"));
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One table of cases for kvload's parsers and kvtune's Python ones
    /// (tests/test_durations.py reads it too): each text with what it parses to, or null
    /// when both refuse it.
    #[test]
    fn the_grammar_table() {
        let table: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/grammar.json")).unwrap();
        for case in table["duration"].as_array().unwrap() {
            let (text, want) = (case[0].as_str().unwrap(), &case[1]);
            let got = parse_duration(text).ok();
            assert_eq!(got, want.as_u64(), "duration {text:?}");
        }
        for case in table["rate"].as_array().unwrap() {
            let (text, want) = (case[0].as_str().unwrap(), &case[1]);
            let got = parse_rate(text).ok();
            assert_eq!(got, want.as_f64(), "rate {text:?}");
        }
        for case in table["size"].as_array().unwrap() {
            let (text, want) = (case[0].as_str().unwrap(), &case[1]);
            let got = parse_size(text).ok().map(|v| v as u64);
            assert_eq!(got, want.as_u64(), "size {text:?}");
        }
        for case in table["cpus"].as_array().unwrap() {
            let (text, want) = (case[0].as_str().unwrap(), &case[1]);
            let got = parse_cpus(text).ok().map(|mut v| {
                v.sort_unstable();
                v.into_iter().map(|c| c as u64).collect::<Vec<_>>()
            });
            let want = want
                .as_array()
                .map(|a| a.iter().map(|c| c.as_u64().unwrap()).collect::<Vec<_>>());
            assert_eq!(got, want, "cpus {text:?}");
        }
        assert_eq!(
            table["max_relative_ttl"].as_u64(),
            Some(MAX_RELATIVE_TTL as u64)
        );
        assert_eq!(table["max_rate"].as_f64(), Some(MAX_RATE));
        assert_eq!(table["kvload_max_cpu"].as_u64(), Some(MAX_CPUS as u64 - 1));
        for case in table["slo_bound_us"].as_array().unwrap() {
            let (text, want) = (case[0].as_str().unwrap(), &case[1]);
            let got = crate::search::Slo::parse(&format!("p99<={text}"))
                .ok()
                .map(|s| s.bound_us);
            assert_eq!(got, want.as_f64(), "SLO bound {text:?}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), 500_000_000);
        assert_eq!(parse_duration("3s").unwrap(), 3_000_000_000);
        assert_eq!(parse_duration("1m").unwrap(), 60_000_000_000);
        assert_eq!(parse_duration("2").unwrap(), 2_000_000_000);
        assert_eq!(parse_duration("250us").unwrap(), 250_000);
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn sizes_and_specs() {
        assert_eq!(parse_size("10K").unwrap(), 10240);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(
            ValueSize::parse("100-200").unwrap(),
            ValueSize::Range(100, 200)
        );
        assert_eq!(
            ValueSize::parse("list:100:3,1K:1").unwrap(),
            ValueSize::List(vec![(100, 3.0), (1024, 1.0)])
        );
        assert!(ValueSize::parse("200-100").is_err());
        assert_eq!(
            Popularity::parse("zipf:0.99").unwrap(),
            Popularity::Zipf(0.99)
        );
        assert!(Popularity::parse("hotset:1.5:0.9").is_err());
        let m = Mix::parse("get:9,set:1").unwrap();
        assert_eq!(m.weights, [9.0, 0.0, 1.0, 0.0]);
        assert_eq!(m.to_string(), "get:9,set:1");
        assert!(Mix::parse("put:1").is_err());
        assert_eq!(parse_cpus("0-1,3").unwrap(), vec![0, 1, 3]);
        assert!(parse_cpus("1,1").is_err());
        assert!(
            parse_cpus("0-3000000000")
                .unwrap_err()
                .contains("out of range")
        );
        assert!(parse_cpus("1024").unwrap_err().contains("out of range"));
        assert!(parse_cpus("0-1023,0-1023").is_err());
    }
}
