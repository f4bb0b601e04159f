//! Redis RESP2: `GET`, `MGET`, `SET`, `DEL`.

use super::{
    ErrorKind, Outcome, ParseResult, ProtocolError, data_block, line_at, parse_uint, put_block,
    put_uint, show, unexpected,
};
use crate::config::Verb;
use crate::workload::{KeyFormat, Request};

fn bulk_key(buf: &mut Vec<u8>, keys: &KeyFormat, k: u64) {
    buf.push(b'$');
    put_uint(buf, keys.len(k));
    buf.extend_from_slice(b"\r\n");
    keys.write(k, buf);
    buf.extend_from_slice(b"\r\n");
}

/// A bulk string: `$<len>` CRLF, the data block.
fn put_bulk(buf: &mut Vec<u8>, data: &[u8]) {
    buf.push(b'$');
    put_uint(buf, data.len());
    buf.extend_from_slice(b"\r\n");
    put_block(buf, data);
}

pub fn encode(buf: &mut Vec<u8>, req: &Request, keys: &KeyFormat, value: &[u8]) {
    match req.verb {
        Verb::Get => {
            buf.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
            bulk_key(buf, keys, req.keys[0]);
        }
        Verb::Mget => {
            buf.push(b'*');
            put_uint(buf, req.keys.len() + 1);
            buf.extend_from_slice(b"\r\n$4\r\nMGET\r\n");
            for &k in &req.keys {
                bulk_key(buf, keys, k);
            }
        }
        Verb::Set => {
            buf.extend_from_slice(if req.ttl > 0 {
                b"*5\r\n$3\r\nSET\r\n"
            } else {
                b"*3\r\n$3\r\nSET\r\n"
            });
            bulk_key(buf, keys, req.keys[0]);
            put_bulk(buf, &value[..req.value_len]);
            if req.ttl > 0 {
                let mut digits = Vec::with_capacity(10);
                put_uint(&mut digits, req.ttl as usize);
                put_bulk(buf, b"EX");
                put_bulk(buf, &digits);
            }
        }
        Verb::Delete => {
            buf.extend_from_slice(b"*2\r\n$3\r\nDEL\r\n");
            bulk_key(buf, keys, req.keys[0]);
        }
    }
}

/// Redis error prefixes to kvload's error kinds.
fn classify(line: &[u8]) -> ErrorKind {
    if line.starts_with(b"-OOM") {
        ErrorKind::OutOfMemory
    } else if line.starts_with(b"-ERR") {
        ErrorKind::Error
    } else if line.starts_with(b"-WRONGTYPE") {
        ErrorKind::ClientError
    } else {
        ErrorKind::ServerError
    }
}

fn signed(s: &[u8]) -> Option<i64> {
    match s.strip_prefix(b"-") {
        Some(rest) => parse_uint(rest).map(|n| -(n as i64)),
        None => parse_uint(s).map(|n| n as i64),
    }
}

/// One bulk string at `pos`: `Some((end, hit))`.
fn bulk(buf: &[u8], pos: usize) -> Result<Option<(usize, bool)>, ProtocolError> {
    let Some((line, next)) = line_at(buf, pos)? else {
        return Ok(None);
    };
    if line.first() != Some(&b'$') {
        return Err(ProtocolError(format!(
            "expected a bulk string, got {}",
            show(line)
        )));
    }
    match signed(&line[1..]) {
        Some(-1) => Ok(Some((next, false))),
        Some(n) if n >= 0 => {
            let end = data_block(buf, next, n as usize, || "bulk string".to_string())?;
            Ok(end.map(|e| (e, true)))
        }
        _ => Err(ProtocolError(format!(
            "malformed bulk length {}",
            show(line)
        ))),
    }
}

pub fn parse(verb: Verb, nkeys: usize, buf: &[u8]) -> ParseResult {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    if first == b'-' {
        let Some((line, next)) = line_at(buf, 0)? else {
            return Ok(None);
        };
        return Ok(Some((next, Outcome::err(classify(line)))));
    }
    match verb {
        Verb::Get => Ok(bulk(buf, 0)?.map(|(end, hit)| {
            (
                end,
                Outcome {
                    hits: hit as u32,
                    misses: !hit as u32,
                    error: None,
                },
            )
        })),
        Verb::Mget => {
            let Some((line, mut pos)) = line_at(buf, 0)? else {
                return Ok(None);
            };
            let n = match (line.first(), signed(&line[1..])) {
                (Some(b'*'), Some(n)) if n >= 0 => n as usize,
                _ => {
                    return Err(unexpected(line, "MGET"));
                }
            };
            if n != nkeys {
                return Err(ProtocolError(format!(
                    "MGET of {nkeys} keys answered with {n} elements"
                )));
            }
            let mut hits = 0;
            for _ in 0..n {
                match bulk(buf, pos)? {
                    Some((end, hit)) => {
                        hits += hit as u32;
                        pos = end;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((
                pos,
                Outcome {
                    hits,
                    misses: n as u32 - hits,
                    error: None,
                },
            )))
        }
        Verb::Set | Verb::Delete => {
            let Some((line, next)) = line_at(buf, 0)? else {
                return Ok(None);
            };
            let ok = match verb {
                Verb::Set => line == b"+OK",
                _ => first == b':' && signed(&line[1..]).is_some(),
            };
            if ok {
                Ok(Some((next, Outcome::ok())))
            } else {
                Err(unexpected(line, verb.name()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{KeySize, Protocol};
    use crate::protocol::testutil::{check_splits, parse_all};

    const P: Protocol = Protocol::Resp;

    #[test]
    fn encodes_requests() {
        let kf = KeyFormat::new(&KeySize::Fixed(2), 1, 250);
        let mut b = Vec::new();
        encode(
            &mut b,
            &Request {
                verb: Verb::Set,
                keys: vec![1],
                value_len: 3,
                ttl: 0,
            },
            &kf,
            b"abc",
        );
        assert_eq!(b, b"*3\r\n$3\r\nSET\r\n$2\r\n01\r\n$3\r\nabc\r\n");
        b.clear();
        let with_ttl = Request {
            verb: Verb::Set,
            keys: vec![1],
            value_len: 3,
            ttl: 300,
        };
        encode(&mut b, &with_ttl, &kf, b"abc");
        assert_eq!(
            b,
            b"*5\r\n$3\r\nSET\r\n$2\r\n01\r\n$3\r\nabc\r\n$2\r\nEX\r\n$3\r\n300\r\n"
        );
        b.clear();
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
        assert_eq!(b, b"*3\r\n$4\r\nMGET\r\n$2\r\n01\r\n$2\r\n02\r\n");
    }

    #[test]
    fn split_anywhere() {
        check_splits(
            P,
            Verb::Get,
            1,
            b"$5\r\nhello\r\n",
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
            b"$-1\r\n",
            Outcome {
                hits: 0,
                misses: 1,
                error: None,
            },
        );
        check_splits(
            P,
            Verb::Get,
            1,
            b"$4\r\n\r\n\r\n\r\n",
            Outcome {
                hits: 1,
                misses: 0,
                error: None,
            },
        );
        check_splits(
            P,
            Verb::Mget,
            3,
            b"*3\r\n$1\r\na\r\n$-1\r\n$0\r\n\r\n",
            Outcome {
                hits: 2,
                misses: 1,
                error: None,
            },
        );
        check_splits(P, Verb::Set, 1, b"+OK\r\n", Outcome::ok());
        check_splits(P, Verb::Delete, 1, b":1\r\n", Outcome::ok());
    }

    #[test]
    fn pipelined_and_errors() {
        let wire = b"+OK\r\n$2\r\nhi\r\n-OOM command not allowed when used memory > 'maxmemory'.\r\n:0\r\n-ERR unknown command\r\n";
        let out = parse_all(
            P,
            &[
                (Verb::Set, 1),
                (Verb::Get, 1),
                (Verb::Set, 1),
                (Verb::Delete, 1),
                (Verb::Get, 1),
            ],
            wire,
        );
        assert_eq!(out[1].hits, 1);
        assert_eq!(out[2].error, Some(ErrorKind::OutOfMemory));
        assert_eq!(out[4].error, Some(ErrorKind::Error));
        assert!(parse(Verb::Set, 1, b"$3\r\nabc\r\n").is_err());
        assert!(parse(Verb::Get, 1, b"+OK\r\n").is_err());
        assert!(parse(Verb::Mget, 2, b"*3\r\n").is_err());
        assert!(parse(Verb::Get, 1, b"$x\r\n").is_err());
    }
}
