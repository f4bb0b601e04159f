//! Request encoders and incremental response parsers, one module per protocol.
//!
//! Responses are matched to requests in FIFO order. A parser is given the verb
//! and key count of the oldest outstanding request and the unconsumed bytes; it
//! returns `Ok(None)` until the whole response is there (responses may be split
//! across reads at any byte), then the bytes it consumed and the outcome.

pub mod memcache;
pub mod meta;
pub mod resp;

use crate::config::{Protocol, Verb};
use crate::workload::{KeyFormat, Request};

/// Server-reported error classes (counted by kind in the JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// SERVER_ERROR (memcached) or a Redis error other than OOM/ERR/WRONGTYPE.
    ServerError,
    /// memcached "SERVER_ERROR out of memory ..." or Redis "-OOM".
    OutOfMemory,
    /// memcached CLIENT_ERROR or Redis -WRONGTYPE.
    ClientError,
    /// memcached ERROR or Redis -ERR.
    Error,
}

/// What one response said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outcome {
    pub hits: u32,
    pub misses: u32,
    pub error: Option<ErrorKind>,
}

impl Outcome {
    pub fn ok() -> Self {
        Outcome::default()
    }

    pub fn err(kind: ErrorKind) -> Self {
        Outcome {
            error: Some(kind),
            ..Outcome::default()
        }
    }
}

/// A response that does not follow the protocol (fatal for the run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// `Ok(None)` means "need more bytes"; `Ok(Some((consumed, outcome)))` a complete response.
pub type ParseResult = Result<Option<(usize, Outcome)>, ProtocolError>;

/// Appends the encoding of `req` to `buf`. `value` must hold at least `req.value_len` bytes.
#[inline]
pub fn encode(proto: Protocol, buf: &mut Vec<u8>, req: &Request, keys: &KeyFormat, value: &[u8]) {
    match proto {
        Protocol::Memcache => memcache::encode(buf, req, keys, value),
        Protocol::Meta => meta::encode(buf, req, keys, value),
        Protocol::Resp => resp::encode(buf, req, keys, value),
    }
}

/// Parses the response to a request of `verb` over `nkeys` keys at the start of `buf`.
#[inline]
pub fn parse(proto: Protocol, verb: Verb, nkeys: usize, buf: &[u8]) -> ParseResult {
    match proto {
        Protocol::Memcache => memcache::parse(verb, nkeys, buf),
        Protocol::Meta => meta::parse(verb, nkeys, buf),
        Protocol::Resp => resp::parse(verb, nkeys, buf),
    }
}

/// Appends the decimal digits of `n`.
#[inline]
pub(crate) fn put_uint(buf: &mut Vec<u8>, mut n: usize) {
    let mut d = [0u8; 20];
    let mut i = d.len();
    loop {
        i -= 1;
        d[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&d[i..]);
}

/// The line starting at `pos` without its CRLF, and the offset after it.
#[inline]
pub(crate) fn line_at(buf: &[u8], pos: usize) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    match memchr::memchr(b'\n', &buf[pos..]) {
        None => {
            if buf.len() - pos > 8192 {
                Err(ProtocolError(format!(
                    "response line longer than 8 KiB: {}",
                    show(&buf[pos..pos + 64])
                )))
            } else {
                Ok(None)
            }
        }
        Some(i) => {
            let end = pos + i;
            if i == 0 || buf[end - 1] != b'\r' {
                return Err(ProtocolError(format!(
                    "response line not terminated by CRLF: {}",
                    show(&buf[pos..=end])
                )));
            }
            Ok(Some((&buf[pos..end - 1], end + 1)))
        }
    }
}

/// Parses an unsigned decimal.
#[inline]
/// The end of a data block of `len` bytes that starts at `start` and must be followed by
/// CRLF (a memcached VALUE, a meta VA, a RESP bulk string): `Ok(None)` until the block
/// and its CRLF are there; `what` names the block in the error.
pub(crate) fn data_block(
    buf: &[u8],
    start: usize,
    len: usize,
    what: impl FnOnce() -> String,
) -> Result<Option<usize>, ProtocolError> {
    let end = start + len + 2;
    if buf.len() < end {
        return Ok(None);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Err(ProtocolError(format!(
            "{} of {len} bytes not followed by CRLF",
            what()
        )));
    }
    Ok(Some(end))
}

/// Appends `data` and its CRLF (the data block of a set, in every protocol).
#[inline]
pub(crate) fn put_block(buf: &mut Vec<u8>, data: &[u8]) {
    buf.extend_from_slice(data);
    buf.extend_from_slice(b"\r\n");
}

pub(crate) fn parse_uint(s: &[u8]) -> Option<usize> {
    if s.is_empty() || s.len() > 18 {
        return None;
    }
    let mut n = 0usize;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + (b - b'0') as usize;
    }
    Some(n)
}

/// A short printable rendering of bytes for error messages.
/// The error for a reply that does not answer `request` (e.g. "get", "meta mg").
pub fn unexpected(line: &[u8], request: &str) -> ProtocolError {
    ProtocolError(format!("unexpected reply {} to {request}", show(line)))
}

pub fn show(b: &[u8]) -> String {
    let b = &b[..b.len().min(60)];
    format!("{:?}", String::from_utf8_lossy(b))
}

/// memcached error lines shared by the text and meta protocols.
pub(crate) fn memcached_error(line: &[u8]) -> Option<ErrorKind> {
    if line.starts_with(b"SERVER_ERROR") {
        let oom = memchr::memmem::find(line, b"out of memory").is_some();
        Some(if oom {
            ErrorKind::OutOfMemory
        } else {
            ErrorKind::ServerError
        })
    } else if line.starts_with(b"CLIENT_ERROR") {
        Some(ErrorKind::ClientError)
    } else if line == b"ERROR" || line.starts_with(b"ERROR ") {
        Some(ErrorKind::Error)
    } else {
        None
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::*;

    /// Feeds `wire` to the parser in every two-piece split and checks that each
    /// prefix is incomplete and the whole parses to `want`.
    pub fn check_splits(proto: Protocol, verb: Verb, nkeys: usize, wire: &[u8], want: Outcome) {
        for cut in 0..wire.len() {
            assert_eq!(
                parse(proto, verb, nkeys, &wire[..cut]),
                Ok(None),
                "prefix of {} bytes of {}",
                cut,
                show(wire)
            );
        }
        assert_eq!(
            parse(proto, verb, nkeys, wire),
            Ok(Some((wire.len(), want))),
            "{}",
            show(wire)
        );
    }

    /// Parses a stream of pipelined responses to `verbs` in order.
    pub fn parse_all(proto: Protocol, verbs: &[(Verb, usize)], wire: &[u8]) -> Vec<Outcome> {
        let mut pos = 0;
        let mut out = Vec::new();
        for &(v, n) in verbs {
            let (used, o) = parse(proto, v, n, &wire[pos..]).unwrap().unwrap();
            pos += used;
            out.push(o);
        }
        assert_eq!(pos, wire.len());
        out
    }
}
