//! memcached text protocol: `get`, multi-key `get`, `set`, `delete`.

use super::{
    Outcome, ParseResult, ProtocolError, data_block, line_at, memcached_error, parse_uint,
    put_block, put_uint, show, unexpected,
};
use crate::config::Verb;
use crate::workload::{KeyFormat, Request};

pub fn encode(buf: &mut Vec<u8>, req: &Request, keys: &KeyFormat, value: &[u8]) {
    match req.verb {
        Verb::Get | Verb::Mget => {
            buf.extend_from_slice(b"get");
            for &k in &req.keys {
                buf.push(b' ');
                keys.write(k, buf);
            }
            buf.extend_from_slice(b"\r\n");
        }
        Verb::Set => {
            buf.extend_from_slice(b"set ");
            keys.write(req.keys[0], buf);
            buf.extend_from_slice(b" 0 ");
            put_uint(buf, req.ttl as usize);
            buf.push(b' ');
            put_uint(buf, req.value_len);
            buf.extend_from_slice(b"\r\n");
            put_block(buf, &value[..req.value_len]);
        }
        Verb::Delete => {
            buf.extend_from_slice(b"delete ");
            keys.write(req.keys[0], buf);
            buf.extend_from_slice(b"\r\n");
        }
    }
}

pub fn parse(verb: Verb, nkeys: usize, buf: &[u8]) -> ParseResult {
    match verb {
        Verb::Get | Verb::Mget => parse_get(nkeys, buf),
        Verb::Set => single_line(
            buf,
            verb,
            &[b"STORED", b"NOT_STORED", b"EXISTS", b"NOT_FOUND"],
        ),
        Verb::Delete => single_line(buf, verb, &[b"DELETED", b"NOT_FOUND"]),
    }
}

fn parse_get(nkeys: usize, buf: &[u8]) -> ParseResult {
    let mut pos = 0;
    let mut hits = 0u32;
    loop {
        let Some((line, next)) = line_at(buf, pos)? else {
            return Ok(None);
        };
        if line == b"END" {
            let misses = (nkeys as u32).saturating_sub(hits);
            return Ok(Some((
                next,
                Outcome {
                    hits,
                    misses,
                    error: None,
                },
            )));
        }
        if line.starts_with(b"VALUE ") {
            // VALUE <key> <flags> <bytes> [<cas>]
            let bytes = line
                .split(|&b| b == b' ')
                .nth(3)
                .and_then(parse_uint)
                .ok_or_else(|| ProtocolError(format!("malformed VALUE line {}", show(line))))?;
            let Some(end) = data_block(buf, next, bytes, || format!("value after {}", show(line)))?
            else {
                return Ok(None);
            };
            hits += 1;
            pos = end;
            continue;
        }
        if let Some(kind) = memcached_error(line) {
            return Ok(Some((next, Outcome::err(kind))));
        }
        return Err(unexpected(line, "get"));
    }
}

fn single_line(buf: &[u8], verb: Verb, ok: &[&[u8]]) -> ParseResult {
    let Some((line, next)) = line_at(buf, 0)? else {
        return Ok(None);
    };
    if ok.contains(&line) {
        return Ok(Some((next, Outcome::ok())));
    }
    if let Some(kind) = memcached_error(line) {
        return Ok(Some((next, Outcome::err(kind))));
    }
    Err(unexpected(line, verb.name()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{KeySize, Protocol};
    use crate::protocol::ErrorKind;
    use crate::protocol::testutil::{check_splits, parse_all};

    const P: Protocol = Protocol::Memcache;

    #[test]
    fn encodes_requests() {
        let kf = KeyFormat::new(&KeySize::Fixed(4), 1, 250);
        let mut b = Vec::new();
        let req = Request {
            verb: Verb::Set,
            keys: vec![7],
            value_len: 3,
            ttl: 0,
        };
        encode(&mut b, &req, &kf, b"xyzw");
        assert_eq!(b, b"set 0007 0 0 3\r\nxyz\r\n");
        b.clear();
        encode(
            &mut b,
            &Request {
                ttl: 3600,
                ..req.clone()
            },
            &kf,
            b"xyzw",
        );
        assert_eq!(b, b"set 0007 0 3600 3\r\nxyz\r\n");
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
        assert_eq!(b, b"get 0001 0002\r\n");
        b.clear();
        encode(
            &mut b,
            &Request {
                verb: Verb::Delete,
                keys: vec![9],
                value_len: 0,
                ttl: 0,
            },
            &kf,
            b"",
        );
        assert_eq!(b, b"delete 0009\r\n");
    }

    #[test]
    fn get_split_anywhere() {
        check_splits(
            P,
            Verb::Get,
            1,
            b"VALUE k 0 5\r\nhello\r\nEND\r\n",
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
            b"END\r\n",
            Outcome {
                hits: 0,
                misses: 1,
                error: None,
            },
        );
        // A value containing CRLF and "END" is skipped by length.
        check_splits(
            P,
            Verb::Get,
            1,
            b"VALUE k 0 7\r\nEND\r\n\r\n\r\nEND\r\n",
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
            b"VALUE a 0 1\r\nx\r\nVALUE c 0 0 99\r\n\r\nEND\r\n",
            Outcome {
                hits: 2,
                misses: 1,
                error: None,
            },
        );
    }

    #[test]
    fn pipelined_replies() {
        let wire = b"STORED\r\nVALUE k 0 2\r\nhi\r\nEND\r\nNOT_FOUND\r\nEND\r\nSERVER_ERROR out of memory storing object\r\n";
        let out = parse_all(
            P,
            &[
                (Verb::Set, 1),
                (Verb::Get, 1),
                (Verb::Delete, 1),
                (Verb::Get, 1),
                (Verb::Set, 1),
            ],
            wire,
        );
        assert_eq!(out[1].hits, 1);
        assert_eq!(out[3].misses, 1);
        assert_eq!(out[4].error, Some(ErrorKind::OutOfMemory));
    }

    #[test]
    fn errors() {
        check_splits(
            P,
            Verb::Set,
            1,
            b"SERVER_ERROR object too large for cache\r\n",
            Outcome::err(ErrorKind::ServerError),
        );
        check_splits(
            P,
            Verb::Get,
            1,
            b"CLIENT_ERROR bad command line format\r\n",
            Outcome::err(ErrorKind::ClientError),
        );
        check_splits(
            P,
            Verb::Delete,
            1,
            b"ERROR\r\n",
            Outcome::err(ErrorKind::Error),
        );
        assert!(parse(Verb::Set, 1, b"HD\r\n").is_err());
        assert!(parse(Verb::Get, 1, b"VALUE k 0 x\r\n").is_err());
        assert!(parse(Verb::Get, 1, b"VALUE k 0 2\r\nhiXX").is_err());
        assert!(parse(Verb::Get, 1, b"END\n").is_err());
    }
}
