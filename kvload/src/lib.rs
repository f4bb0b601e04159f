//! kvload: an open-loop, coordinated-omission-corrected load generator for
//! memcached (text and meta protocols) and Redis (RESP2).
//!
//! Layers, from the outside in:
//! - [`config`]: command line, workload file, validation into one [`config::Config`];
//! - [`workload`]: seeded request streams (verbs, keys, sizes, arrival times);
//! - [`protocol`]: request encoders and incremental response parsers;
//! - [`engine`]: one pinned thread per client CPU running an epoll loop;
//! - [`metrics`]: histograms and counters owned by each thread, merged at the end;
//! - [`output`]: the terminal summary and the versioned JSON document;
//! - [`search`]: the knee search at an SLO (pure), driven by [`steps`] with real runs.

pub mod app;
pub mod config;
pub mod engine;
pub mod error;
pub mod metrics;
pub mod output;
pub mod protocol;
pub mod search;
pub mod steps;
pub mod workload;

pub use error::Error;

/// The version written into every JSON document.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The JSON schema identifier (see docs/kvload.md).
pub const SCHEMA: &str = "kvload/1.1";
/// The JSON schema of a --search or --ramp document (see docs/kvload.md).
pub const SEARCH_SCHEMA: &str = "kvload/search/2";
/// The JSON schema of `--profile`.
pub const PROFILE_SCHEMA: &str = "kvload/profile/1";
