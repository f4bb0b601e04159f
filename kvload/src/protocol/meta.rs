//! memcached meta protocol: `mg` (with `v`), `ms`, `md`. A multi-get is a run of
//! quiet `mg ... v q` commands closed by `mn`, so misses are implicit.

use super::{
    Outcome, ParseResult, ProtocolError, data_block, line_at, memcached_error, parse_uint,
    put_block, put_uint, show, unexpected,
};
use crate::config::Verb;
use crate::workload::{KeyFormat, Request};

pub fn encode(buf: &mut Vec<u8>, req: &Request, keys: &KeyFormat, value: &[u8]) {
    match req.verb {
        Verb::Get => {
            buf.extend_from_slice(b"mg ");
            keys.write(req.keys[0], buf);
            buf.extend_from_slice(b" v\r\n");
        }
        Verb::Mget => {
            for &k in &req.keys {
                buf.extend_from_slice(b"mg ");
                keys.write(k, buf);
                buf.extend_from_slice(b" v q\r\n");
            }
            buf.extend_from_slice(b"mn\r\n");
        }
        Verb::Set => {
            buf.extend_from_slice(b"ms ");
            keys.write(req.keys[0], buf);
            buf.push(b' ');
            put_uint(buf, req.value_len);
            if req.ttl > 0 {
                buf.extend_from_slice(b" T");
                put_uint(buf, req.ttl as usize);
            }
            buf.extend_from_slice(b"\r\n");
            put_block(buf, &value[..req.value_len]);
        }
        Verb::Delete => {
            buf.extend_from_slice(b"md ");
            keys.write(req.keys[0], buf);
            buf.extend_from_slice(b"\r\n");
        }
    }
}

/// Skips a `VA <size> ...` data block; `None` if incomplete.
fn value_block(buf: &[u8], line: &[u8], next: usize) -> Result<Option<usize>, ProtocolError> {
    let size = line
        .split(|&b| b == b' ')
        .nth(1)
        .and_then(parse_uint)
        .ok_or_else(|| ProtocolError(format!("malformed VA line {}", show(line))))?;
    data_block(buf, next, size, || format!("value after {}", show(line)))
}

fn code(line: &[u8]) -> &[u8] {
    &line[..line.len().min(2)]
}

pub fn parse(verb: Verb, nkeys: usize, buf: &[u8]) -> ParseResult {
    match verb {
        Verb::Get => {
            let Some((line, next)) = line_at(buf, 0)? else {
                return Ok(None);
            };
            match code(line) {
                b"VA" if line.len() == 2 || line[2] == b' ' => Ok(value_block(buf, line, next)?
                    .map(|end| {
                        (
                            end,
                            Outcome {
                                hits: 1,
                                misses: 0,
                                error: None,
                            },
                        )
                    })),
                b"HD" => Ok(Some((
                    next,
                    Outcome {
                        hits: 1,
                        misses: 0,
                        error: None,
                    },
                ))),
                b"EN" => Ok(Some((
                    next,
                    Outcome {
                        hits: 0,
                        misses: 1,
                        error: None,
                    },
                ))),
                _ => other(line, next, verb),
            }
        }
        Verb::Mget => {
            let mut pos = 0;
            let mut hits = 0u32;
            let mut error = None;
            loop {
                let Some((line, next)) = line_at(buf, pos)? else {
                    return Ok(None);
                };
                match code(line) {
                    b"MN" => {
                        let misses = (nkeys as u32).saturating_sub(hits);
                        return Ok(Some((
                            next,
                            Outcome {
                                hits,
                                misses,
                                error,
                            },
                        )));
                    }
                    b"VA" => match value_block(buf, line, next)? {
                        Some(end) => {
                            hits += 1;
                            pos = end;
                        }
                        None => return Ok(None),
                    },
                    b"HD" => {
                        hits += 1;
                        pos = next;
                    }
                    b"EN" => pos = next,
                    _ => match memcached_error(line) {
                        Some(kind) => {
                            error.get_or_insert(kind);
                            pos = next;
                        }
                        None => {
                            return Err(unexpected(line, "mg"));
                        }
                    },
                }
            }
        }
        Verb::Set | Verb::Delete => {
            let Some((line, next)) = line_at(buf, 0)? else {
                return Ok(None);
            };
            match code(line) {
                b"HD" | b"NS" | b"EX" | b"NF" => Ok(Some((next, Outcome::ok()))),
                _ => other(line, next, verb),
            }
        }
    }
}

fn other(line: &[u8], next: usize, verb: Verb) -> ParseResult {
    match memcached_error(line) {
        Some(kind) => Ok(Some((next, Outcome::err(kind)))),
        None => Err(unexpected(line, &format!("meta {}", verb.name()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{KeySize, Protocol};
    use crate::protocol::ErrorKind;
    use crate::protocol::testutil::{check_splits, parse_all};

    const P: Protocol = Protocol::Meta;

    #[test]
    fn encodes_requests() {
        let kf = KeyFormat::new(&KeySize::Fixed(3), 1, 250);
        let mut b = Vec::new();
        encode(
            &mut b,
            &Request {
                verb: Verb::Set,
                keys: vec![5],
                value_len: 2,
                ttl: 0,
            },
            &kf,
            b"ab",
        );
        encode(
            &mut b,
            &Request {
                verb: Verb::Mget,
                keys: vec![1, 2],
                value_len: 0,
                ttl: 0,
            },
            &kf,
            b"",
        );
        encode(
            &mut b,
            &Request {
                verb: Verb::Delete,
                keys: vec![3],
                value_len: 0,
                ttl: 0,
            },
            &kf,
            b"",
        );
        assert_eq!(
            b,
            b"ms 005 2\r\nab\r\nmg 001 v q\r\nmg 002 v q\r\nmn\r\nmd 003\r\n"
        );
        let mut t = Vec::new();
        let with_ttl = Request {
            verb: Verb::Set,
            keys: vec![5],
            value_len: 2,
            ttl: 60,
        };
        encode(&mut t, &with_ttl, &kf, b"ab");
        assert_eq!(t, b"ms 005 2 T60\r\nab\r\n");
    }

    #[test]
    fn split_anywhere() {
        check_splits(
            P,
            Verb::Get,
            1,
            b"VA 5 f0\r\nhello\r\n",
            Outcome {
                hits: 1,
                misses: 0,
                error: None,
            },
        );
        check_splits(
            P,
            Verb::Get,
            1,
            b"EN\r\n",
            Outcome {
                hits: 0,
                misses: 1,
                error: None,
            },
        );
        check_splits(
            P,
            Verb::Mget,
            3,
            b"VA 2\r\nab\r\nVA 0\r\n\r\nMN\r\n",
            Outcome {
                hits: 2,
                misses: 1,
                error: None,
            },
        );
        check_splits(P, Verb::Set, 1, b"HD\r\n", Outcome::ok());
        check_splits(P, Verb::Delete, 1, b"NF\r\n", Outcome::ok());
    }

    #[test]
    fn pipelined_and_errors() {
        let wire = b"HD\r\nVA 1\r\nx\r\nMN\r\nSERVER_ERROR out of memory storing object\r\nCLIENT_ERROR bad data chunk\r\nEN\r\n";
        let out = parse_all(
            P,
            &[
                (Verb::Set, 1),
                (Verb::Mget, 2),
                (Verb::Set, 1),
                (Verb::Set, 1),
                (Verb::Get, 1),
            ],
            wire,
        );
        assert_eq!(
            out[1],
            Outcome {
                hits: 1,
                misses: 1,
                error: None
            }
        );
        assert_eq!(out[2].error, Some(ErrorKind::OutOfMemory));
        assert_eq!(out[3].error, Some(ErrorKind::ClientError));
        assert_eq!(out[4].misses, 1);
        assert!(parse(Verb::Get, 1, b"STORED\r\n").is_err());
        assert!(parse(Verb::Get, 1, b"VA x\r\n").is_err());
    }
}
