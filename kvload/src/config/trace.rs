//! Request-by-request replay of a normalized trace, as `kvtune workload capture` and
//! `kvtune workload import` keep it with `--keep-trace` (docs/kvload.md, "Traces").
//!
//! ```text
//! # kvtune-trace/1
//! # t_us,verb,key,key_len,value_len,ttl
//! 0,g,9f3a0c7e11d2b854,24,310,0
//! 12,s,03be77a2c1f05e19,31,1200,3600
//! ```
//!
//! `t_us` is the offset from the trace's first request in microseconds, `verb` one of
//! `g` (get), `s` (set), `d` (delete), `key` the key's 64-bit hash in hex (no trace holds
//! a key in clear), `key_len` and `value_len` bytes (a get's value length is the size of
//! the item it read, 0 when unknown), `ttl` a set's expiry in seconds. Keys become
//! indices in the order they first appear; each keeps its length, and the preload gives
//! each the first value length the trace shows for it.

use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use super::Verb;
use super::spec::MAX_RELATIVE_TTL;

/// The most requests a trace may hold (16 bytes each in memory).
pub const MAX_RECORDS: usize = 50_000_000;
/// The longest line accepted.
const MAX_LINE: usize = 256;
/// The most lines read, comments and blank lines included (a file of newlines ends too).
const MAX_LINES: usize = 2 * MAX_RECORDS;
pub const HEADER: &str = "# kvtune-trace/1";

/// One request of the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceRec {
    /// Offset from the first request, already divided by the speed factor.
    pub t_ns: u64,
    pub key: u32,
    pub value_len: u32,
    pub ttl: u32,
    pub verb: Verb,
}

/// A loaded trace: its requests in time order and what each key looks like.
pub struct Trace {
    pub path: PathBuf,
    pub recs: Vec<TraceRec>,
    /// Per key index: its length in bytes.
    pub key_lens: Vec<u16>,
    /// Per key index: the first value length the trace shows for it (0: none).
    pub value_lens: Vec<u32>,
    /// Last request's offset (after the speed factor).
    pub span_ns: u64,
    pub speed: f64,
}

impl fmt::Debug for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Trace({}: {} requests, {} keys, {:.3} s at speed {})",
            self.path.display(),
            self.recs.len(),
            self.key_lens.len(),
            self.span_ns as f64 / 1e9,
            self.speed
        )
    }
}

impl Trace {
    /// Reads a trace file; `speed` divides its times. Errors name the line.
    pub fn load(path: &Path, speed: f64) -> Result<Trace, String> {
        let f = crate::config::file::open_regular(path)?;
        Trace::read(f, path, speed)
    }

    pub fn read<R: Read>(r: R, path: &Path, speed: f64) -> Result<Trace, String> {
        let mut rd = BufReader::with_capacity(1 << 20, r);
        let mut line = Vec::with_capacity(MAX_LINE);
        let mut index: HashMap<u64, u32> = HashMap::new();
        let mut key_lens = Vec::new();
        let mut value_lens: Vec<u32> = Vec::new();
        let mut recs = Vec::new();
        let mut n = 0usize;
        let mut sorted = true;
        let mut last = 0u64;
        let name = path.display();
        loop {
            line.clear();
            let got = (&mut rd)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut line)
                .map_err(|e| format!("{name}: {e}"))?;
            if got == 0 {
                break;
            }
            n += 1;
            if n > MAX_LINES {
                return Err(format!(
                    "{name}: more than {MAX_LINES} lines (a trace holds at most {MAX_RECORDS} requests)"
                ));
            }
            if line.len() > MAX_LINE && line.last() != Some(&b'\n') {
                return Err(format!("{name}:{n}: a line longer than {MAX_LINE} bytes"));
            }
            let text = std::str::from_utf8(&line)
                .map_err(|_| format!("{name}:{n}: not text"))?
                .trim_end();
            if n == 1 {
                if text != HEADER {
                    return Err(format!(
                        "{name}:1: not a kvtune trace (the first line must be '{HEADER}'; \
                         `kvtune workload capture/import --keep-trace` write them)"
                    ));
                }
                continue;
            }
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            if recs.len() >= MAX_RECORDS {
                return Err(format!(
                    "{name}: more than {MAX_RECORDS} requests (cut the trace with a time window or a key sample)"
                ));
            }
            let bad = |what: &str| {
                format!("{name}:{n}: {what} (expected t_us,verb,key,key_len,value_len,ttl)")
            };
            let mut f = text.split(',');
            let mut field = |what: &str| f.next().ok_or_else(|| bad(&format!("no {what}")));
            let t_us: u64 = field("time")?.parse().map_err(|_| bad("a bad time"))?;
            let verb = match field("verb")? {
                "g" => Verb::Get,
                "s" => Verb::Set,
                "d" => Verb::Delete,
                _ => return Err(bad("a verb other than g, s or d")),
            };
            let key_s = field("key")?;
            if key_s.is_empty() || key_s.len() > 16 {
                return Err(bad("a key that is not a 64-bit hash in hex"));
            }
            let hash = u64::from_str_radix(key_s, 16)
                .map_err(|_| bad("a key that is not a 64-bit hash in hex"))?;
            let key_len: u16 = field("key length")?
                .parse()
                .ok()
                .filter(|&l| (1..=65535).contains(&l))
                .ok_or_else(|| bad("a key length outside 1..65535"))?;
            let value_len: u32 = field("value length")?
                .parse()
                .map_err(|_| bad("a bad value length"))?;
            let ttl: u64 = field("ttl")?.parse().map_err(|_| bad("a bad TTL"))?;
            if ttl > MAX_RELATIVE_TTL as u64 {
                return Err(bad("a TTL beyond 30 days"));
            }
            if f.next().is_some() {
                return Err(bad("more than six fields"));
            }
            let next = index.len() as u32;
            let key = *index.entry(hash).or_insert(next);
            if key == next {
                key_lens.push(key_len);
                value_lens.push(0);
            }
            if value_lens[key as usize] == 0 {
                value_lens[key as usize] = value_len;
            }
            let t_ns = ((t_us as f64) * 1e3 / speed) as u64;
            sorted &= t_ns >= last;
            last = t_ns;
            recs.push(TraceRec {
                t_ns,
                key,
                value_len,
                ttl: ttl as u32,
                verb,
            });
        }
        if n == 0 {
            return Err(format!("{name}: empty (the first line must be '{HEADER}')"));
        }
        if recs.is_empty() {
            return Err(format!("{name}: no request"));
        }
        if !sorted {
            recs.sort_by_key(|r| r.t_ns); // stable: ties keep the file's order
        }
        let first = recs[0].t_ns;
        for r in &mut recs {
            r.t_ns -= first;
        }
        let span_ns = recs.last().map(|r| r.t_ns).unwrap_or(0);
        Ok(Trace {
            path: path.to_path_buf(),
            recs,
            key_lens,
            value_lens,
            span_ns,
            speed,
        })
    }

    pub fn keys(&self) -> u64 {
        self.key_lens.len() as u64
    }

    /// Requests per second over the trace (after the speed factor).
    pub fn rate(&self) -> f64 {
        self.recs.len() as f64 / (self.span_ns.max(1_000_000) as f64 / 1e9)
    }

    /// `(length, count)` pairs of the key lengths, for the configuration's limits.
    pub fn key_len_list(&self) -> Vec<(usize, f64)> {
        histogram(self.key_lens.iter().map(|&l| l as usize))
    }

    /// `(length, count)` pairs of the values the trace sets or reads.
    pub fn value_len_list(&self) -> Vec<(usize, f64)> {
        let h = histogram(
            self.value_lens
                .iter()
                .filter(|&&l| l > 0)
                .map(|&l| l as usize),
        );
        if h.is_empty() { vec![(100, 1.0)] } else { h }
    }
}

fn histogram(it: impl Iterator<Item = usize>) -> Vec<(usize, f64)> {
    let mut m: HashMap<usize, f64> = HashMap::new();
    for v in it {
        *m.entry(v).or_default() += 1.0;
    }
    let mut v: Vec<(usize, f64)> = m.into_iter().collect();
    v.sort_unstable_by_key(|a| a.0);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(s: &str) -> Result<Trace, String> {
        Trace::read(s.as_bytes(), Path::new("t.csv"), 2.0)
    }

    #[test]
    fn a_trace_maps_hashes_to_indices_and_divides_its_times() {
        let t = read(
            "# kvtune-trace/1\n# t_us,verb,key,key_len,value_len,ttl\n\
             10,g,ff,12,0,0\n30,s,a0,20,500,60\n20,g,ff,12,300,0\n50,d,a0,20,0,0\n",
        )
        .unwrap();
        assert_eq!(t.keys(), 2);
        assert_eq!(t.key_lens, vec![12, 20]);
        assert_eq!(t.value_lens, vec![300, 500]);
        let times: Vec<u64> = t.recs.iter().map(|r| r.t_ns).collect();
        assert_eq!(times, vec![0, 5_000, 10_000, 20_000]);
        assert_eq!(t.recs[2].verb, Verb::Set);
        assert_eq!(t.recs[2].ttl, 60);
        assert_eq!(t.span_ns, 20_000);
    }

    #[test]
    fn bad_traces_name_the_line() {
        for (text, says) in [
            ("t_us,verb\n", ":1: not a kvtune trace"),
            ("# kvtune-trace/1\n1,x,ff,1,0,0\n", ":2: a verb"),
            ("# kvtune-trace/1\n1,g,zz,1,0,0\n", ":2: a key"),
            ("# kvtune-trace/1\n1,g,ff,0,0,0\n", ":2: a key length"),
            ("# kvtune-trace/1\n1,s,ff,3,1,9999999\n", ":2: a TTL"),
            ("# kvtune-trace/1\n1,g,ff\n", ":2: no key length"),
            ("# kvtune-trace/1\n1,g,ff,3,0,0,7\n", ":2: more than six"),
            ("# kvtune-trace/1\n", "no request"),
            ("", "empty"),
        ] {
            let e = read(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
        let long = format!("# kvtune-trace/1\n1,g,ff,3,0,{}\n", "0".repeat(300));
        assert!(read(&long).unwrap_err().contains(":2: a line longer"));
    }
}
