//! The two kinds of failure kvload reports, mapped to exit codes by `main`.

use std::fmt;

/// A failure that ends the program with a one-line message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Bad arguments or a bad workload file (exit code 2). The message names the flag or key.
    Usage(String),
    /// The run could not be completed (exit code 1): unreachable server, reset
    /// connection, malformed response, failed preload verification.
    Runtime(String),
}

impl Error {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => 2,
            Error::Runtime(_) => 1,
        }
    }

    pub fn usage(msg: impl Into<String>) -> Self {
        Error::Usage(msg.into())
    }

    pub fn runtime(msg: impl Into<String>) -> Self {
        Error::Runtime(msg.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m) | Error::Runtime(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}
