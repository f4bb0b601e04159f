//! The workload file: JSON (or TOML) with the long option names as keys and an
//! optional list of phases.

use serde::Deserialize;
use std::io::Read;
use std::path::Path;

use crate::Error;

/// The most bytes a workload file may hold (kvtune's own files hold at most 1 MiB).
pub const MAX_WORKLOAD_BYTES: u64 = 16 << 20;

/// Opens `path` for reading when it is a regular file (never a device, a FIFO or a
/// directory: /dev/zero would never end). Errors start with the path.
pub fn open_regular(path: &Path) -> Result<std::fs::File, String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let meta = f
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.file_type().is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    // /proc and /sys files call themselves regular (of size 0): judged by where they are.
    let real = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .or_else(|_| std::fs::canonicalize(path))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if ["/proc", "/sys", "/dev"]
        .iter()
        .any(|r| real.starts_with(r))
    {
        return Err(format!(
            "{}: a kernel or device file, not a workload or a trace",
            path.display()
        ));
    }
    Ok(f)
}

/// The bytes of the regular file `path`, read with the bound `max` (a size the file
/// reports is not trusted); an error naming the bound when it holds more.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    let f = open_regular(path)?;
    let mut bytes = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() as u64 > max {
        return Err(format!(
            "{}: more than {} MiB (a workload file's bound)",
            path.display(),
            max >> 20
        ));
    }
    Ok(bytes)
}

/// A number or a string, so that `"value_size": 100` and `"value_size": "100-200"` both work.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Scalar {
    Num(f64),
    Str(String),
}

impl Scalar {
    pub fn as_string(&self) -> String {
        match self {
            Scalar::Num(n) if n.fract() == 0.0 => format!("{}", *n as i64),
            Scalar::Num(n) => format!("{n}"),
            Scalar::Str(s) => s.clone(),
        }
    }
}

/// One workload segment; unset fields inherit the top-level values.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PhaseFile {
    pub duration: Option<Scalar>,
    pub rate: Option<f64>,
    pub value_size: Option<Scalar>,
    pub popularity: Option<String>,
    pub mix: Option<String>,
}

/// One popularity bucket's keys and what belongs to them (spec::KeyBucket).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyBucketFile {
    pub keys: u64,
    pub value_size: Option<Scalar>,
    pub ttl: Option<Scalar>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct WorkloadFile {
    pub server: Option<String>,
    pub protocol: Option<String>,
    pub mode: Option<String>,
    pub rate: Option<f64>,
    pub arrival: Option<String>,
    pub connections: Option<usize>,
    pub pipeline: Option<usize>,
    pub max_outstanding: Option<usize>,
    pub duration: Option<Scalar>,
    pub warmup: Option<Scalar>,
    pub cpus: Option<Scalar>,
    pub keys: Option<u64>,
    pub key_size: Option<Scalar>,
    pub value_size: Option<Scalar>,
    pub popularity: Option<String>,
    pub mix: Option<String>,
    pub ttl: Option<Scalar>,
    pub rate_scale: Option<f64>,
    pub mget_size: Option<usize>,
    pub seed: Option<u64>,
    pub preload: Option<bool>,
    pub timeout: Option<Scalar>,
    pub spin_us: Option<u64>,
    pub realtime: Option<bool>,
    pub max_item_size: Option<Scalar>,
    pub phases: Option<Vec<PhaseFile>>,
    /// Value sizes and TTLs per popularity bucket: each key keeps its own.
    pub key_buckets: Option<Vec<KeyBucketFile>>,
    /// What wrote the file and how (a captured or imported model's provenance
    /// and fit): kvload carries it and does not read it.
    pub about: Option<serde_json::Value>,
}

impl WorkloadFile {
    pub fn load(path: &Path) -> Result<Self, Error> {
        let bytes = read_bounded(path, MAX_WORKLOAD_BYTES)
            .map_err(|e| Error::usage(format!("--workload {e}")))?;
        let text = String::from_utf8(bytes).map_err(|_| {
            Error::usage(format!(
                "--workload {}: not UTF-8 text (a workload file is JSON or TOML)",
                path.display()
            ))
        })?;
        let is_toml = path.extension().is_some_and(|e| e == "toml");
        let parsed = if is_toml {
            toml::from_str(&text).map_err(|e| one_line(&e.to_string()))
        } else {
            serde_json::from_str(&text).map_err(|e| e.to_string())
        };
        parsed.map_err(|e| Error::usage(format!("workload file {}: {e}", path.display())))
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
