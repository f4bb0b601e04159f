//! The baseline for kvload's client-CPU benchmark: a bare epoll (mio) client
//! that keeps `depth` fixed gets outstanding on each of `conns` connections,
//! parses just enough to count responses, and records nothing.
//!
//! Usage: bare_client ADDR memcache|resp CONNS DEPTH SECONDS [KEY]
//!
//! Like redis-benchmark, a connection sends its next DEPTH requests when all
//! DEPTH replies of the previous batch are in (one write and few reads per batch).
//! Prints: `requests=N cpu_s=X us_per_request=Y`.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};

/// Counts complete responses at the start of `buf`; returns (responses, bytes consumed).
fn count(resp: bool, buf: &[u8]) -> (usize, usize) {
    let mut pos = 0;
    let mut n = 0;
    loop {
        let Some(nl) = buf[pos..].iter().position(|&b| b == b'\n') else {
            return (n, pos);
        };
        let line = &buf[pos..pos + nl - 1];
        let mut next = pos + nl + 1;
        if resp {
            // $len\r\n<data>\r\n or $-1\r\n
            if line != b"$-1" {
                let len: usize = std::str::from_utf8(&line[1..]).unwrap().parse().unwrap();
                next += len + 2;
            }
        } else if line.starts_with(b"VALUE ") {
            let len: usize = std::str::from_utf8(line.rsplit(|&b| b == b' ').next().unwrap())
                .unwrap()
                .parse()
                .unwrap();
            next += len + 2 + 5; // data, CRLF, "END\r\n"
        } else {
            assert_eq!(line, b"END", "unexpected reply");
        }
        if next > buf.len() {
            return (n, pos);
        }
        n += 1;
        pos = next;
    }
}

fn main() -> io::Result<()> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 6 {
        eprintln!("usage: bare_client ADDR memcache|resp CONNS DEPTH SECONDS [KEY]");
        std::process::exit(2);
    }
    let resp = a[2] == "resp";
    let conns: usize = a[3].parse().unwrap();
    let depth: usize = a[4].parse().unwrap();
    let secs: f64 = a[5].parse().unwrap();
    let key = a
        .get(6)
        .cloned()
        .unwrap_or_else(|| "0000000000000001".into());
    let req = if resp {
        format!("*2\r\n$3\r\nGET\r\n${}\r\n{}\r\n", key.len(), key)
    } else {
        format!("get {key}\r\n")
    };
    let batch: Vec<u8> = req.as_bytes().repeat(depth);
    let mut poll = Poll::new()?;
    let mut socks = Vec::new();
    for i in 0..conns {
        let s = TcpStream::connect(&a[1])?;
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        let mut s = mio::net::TcpStream::from_std(s);
        poll.registry()
            .register(&mut s, Token(i), Interest::READABLE)?;
        socks.push((s, vec![0u8; 256 * 1024], 0usize, 0usize));
    }
    let t0 = Instant::now();
    for (s, _, _, _) in socks.iter_mut() {
        s.write_all(&batch)?;
    }
    let mut total = 0u64;
    let mut events = Events::with_capacity(256);
    let end = Duration::from_secs_f64(secs);
    while t0.elapsed() < end {
        poll.poll(&mut events, Some(Duration::from_millis(100)))?;
        for ev in events.iter() {
            let (s, buf, fill, got) = &mut socks[ev.token().0];
            loop {
                match s.read(&mut buf[*fill..]) {
                    Ok(0) => panic!("server closed"),
                    Ok(n) => {
                        *fill += n;
                        let (done, used) = count(resp, &buf[..*fill]);
                        buf.copy_within(used..*fill, 0);
                        *fill -= used;
                        total += done as u64;
                        *got += done;
                        if *got == depth {
                            *got = 0;
                            s.write_all(&batch)?;
                        }
                        if *fill < buf.len() && n < buf.len() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let cpu = ru.ru_utime.tv_sec as f64
        + ru.ru_utime.tv_usec as f64 / 1e6
        + ru.ru_stime.tv_sec as f64
        + ru.ru_stime.tv_usec as f64 / 1e6;
    println!(
        "requests={total} cpu_s={cpu:.3} us_per_request={:.3}",
        cpu * 1e6 / total as f64
    );
    Ok(())
}
