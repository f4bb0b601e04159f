//! The workload file: JSON (or TOML) with the long option names as keys and an
//! optional list of phases.

use serde::Deserialize;
use std::path::Path;

use crate::Error;

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
    /// What wrote the file and how (a captured or imported model's provenance
    /// and fit): kvload carries it and does not read it.
    pub about: Option<serde_json::Value>,
}

impl WorkloadFile {
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::usage(format!("--workload {}: {e}", path.display())))?;
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
