//! One connection: its socket, write and read buffers, and the FIFO of
//! outstanding requests that responses are matched against.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use mio::event::Source;
use mio::{Interest, Registry, Token};

use crate::Error;
use crate::config::{ServerAddr, Verb};

/// A blocking stream (connect, preload), converted to a non-blocking one for the engine.
pub enum StdStream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl StdStream {
    /// Connects with TCP_NODELAY; the error names the server and the cause.
    pub fn connect(addr: &ServerAddr, timeout_ns: u64) -> Result<Self, Error> {
        let timeout = Duration::from_nanos(timeout_ns.max(1_000_000));
        let fail = |e: io::Error| {
            let hint = match e.kind() {
                io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound => {
                    " (is the server running?)"
                }
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
                    " (no answer within --timeout)"
                }
                _ => "",
            };
            Error::runtime(format!("cannot connect to {addr}: {e}{hint}"))
        };
        match addr {
            ServerAddr::Tcp(a) => {
                let s = TcpStream::connect_timeout(a, timeout).map_err(fail)?;
                s.set_nodelay(true).map_err(fail)?;
                Ok(StdStream::Tcp(s))
            }
            ServerAddr::Unix(p) => Ok(StdStream::Unix(UnixStream::connect(p).map_err(fail)?)),
        }
    }

    pub fn set_read_timeout(&self, d: Duration) -> io::Result<()> {
        match self {
            StdStream::Tcp(s) => s.set_read_timeout(Some(d)),
            StdStream::Unix(s) => s.set_read_timeout(Some(d)),
        }
    }

    /// The non-blocking form used by the event loop.
    pub fn into_mio(self) -> io::Result<Stream> {
        Ok(match self {
            StdStream::Tcp(s) => {
                s.set_nonblocking(true)?;
                Stream::Tcp(mio::net::TcpStream::from_std(s))
            }
            StdStream::Unix(s) => {
                s.set_nonblocking(true)?;
                Stream::Unix(mio::net::UnixStream::from_std(s))
            }
        })
    }
}

impl Read for StdStream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            StdStream::Tcp(s) => s.read(b),
            StdStream::Unix(s) => s.read(b),
        }
    }
}

impl Write for StdStream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            StdStream::Tcp(s) => s.write(b),
            StdStream::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A non-blocking socket registered with mio.
pub enum Stream {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
}

impl Stream {
    #[inline]
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) => s.read(b),
        }
    }

    #[inline]
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
        }
    }

    pub fn register(&mut self, reg: &Registry, token: Token) -> io::Result<()> {
        let i = Interest::READABLE | Interest::WRITABLE;
        match self {
            Stream::Tcp(s) => s.register(reg, token, i),
            Stream::Unix(s) => s.register(reg, token, i),
        }
    }
}

/// A request on the wire, waiting for its response.
#[derive(Debug, Clone, Copy)]
pub struct InFlight {
    /// Intended send time (open mode) or the send time (closed mode), ns.
    pub intended: u64,
    /// Actual send time, ns; 0 until the request is written.
    pub sent: u64,
    pub verb: Verb,
    pub nkeys: u16,
    /// Whether it belongs to the measured window.
    pub measured: bool,
    /// Already counted as a timeout.
    pub timed_out: bool,
}

/// Outcome of a read attempt.
pub enum ReadStatus {
    /// New bytes are in the buffer.
    Data,
    /// Nothing more to read now.
    Drained,
}

pub struct Conn {
    pub stream: Stream,
    pub wbuf: Vec<u8>,
    wpos: usize,
    pub rbuf: Vec<u8>,
    pub rstart: usize,
    pub rend: usize,
    pub inflight: VecDeque<InFlight>,
    /// Entries at the back of `inflight` encoded but not yet stamped and written.
    pub unstamped: usize,
    /// Listed in the thread's dirty list.
    pub dirty: bool,
}

impl Conn {
    pub fn new(stream: Stream, max_outstanding: usize) -> Self {
        Conn {
            stream,
            wbuf: Vec::with_capacity(64 * 1024),
            wpos: 0,
            rbuf: vec![0; 64 * 1024],
            rstart: 0,
            rend: 0,
            inflight: VecDeque::with_capacity(max_outstanding),
            unstamped: 0,
            dirty: false,
        }
    }

    /// Writes as much pending data as the socket takes; `Ok(true)` when all is written.
    #[inline]
    pub fn flush(&mut self) -> io::Result<bool> {
        while self.wpos < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0")),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        Ok(true)
    }

    pub fn has_pending_writes(&self) -> bool {
        self.wpos < self.wbuf.len()
    }

    /// One read into the buffer, growing it when a response does not fit.
    #[inline]
    pub fn read_some(&mut self) -> io::Result<ReadStatus> {
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        }
        if self.rend == self.rbuf.len() {
            if self.rstart > 0 {
                self.rbuf.copy_within(self.rstart..self.rend, 0);
                self.rend -= self.rstart;
                self.rstart = 0;
            } else {
                let n = self.rbuf.len() * 2;
                self.rbuf.resize(n, 0);
            }
        }
        loop {
            match self.stream.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the server closed the connection",
                    ));
                }
                Ok(n) => {
                    let full = self.rend + n == self.rbuf.len();
                    self.rend += n;
                    // A short read emptied the socket buffer: later data raises a new edge.
                    return Ok(if full {
                        ReadStatus::Data
                    } else {
                        ReadStatus::Drained
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(ReadStatus::Drained),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}
