"""The curve checked on the real server: the same request stream replayed, cache-aside,
to a server on loopback in its own protocol (the kind's `MemoryModel.client`), and the
hit ratio read from the server's own counters.

kvload replays a trace request by request (`kvload --trace`), but a get that misses is not
followed by a set: its hit ratio is that of the recorded sets, not of a cache filled on
demand. This client is: each get that misses is followed by the set of that item (its
key's length, its value's length, its TTL), as the application behind the cache does.
Requests go out in pipelined batches of distinct keys (a batch ends before a key repeats),
paced to the stream's timestamps (TTLs and LRU clocks run on wall time), and the time each
was sent is kept for the simulator. The first `warm` requests fill the cache; the
counters are reset and the rest are measured.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

import numpy as np

from kvtune.errors import UserError
from kvtune.mrc.model import model_of
from kvtune.mrc.requests import DELETE, GET, SET, Requests

BATCH = 64


@dataclass(frozen=True)
class Measured:
    """The server's hits and misses over the measured part; `times` the wall time of
    each request of the stream (seconds from the replay's start) as it was sent, for the
    simulator to see the clock the server saw (TTLs, LRU clocks)."""

    hits: int
    misses: int
    seconds: float
    behind_s: float  # how far the replay fell behind the stream's times, at most
    times: np.ndarray

    @property
    def hit_ratio(self) -> float:
        return self.hits / (self.hits + self.misses) if self.hits + self.misses else 0.0


def key_name(k: int, klen: int) -> bytes:
    """The key sent for hash `k`: 16 hex digits, padded to its length with 'k' (keys
    shorter than 16 bytes keep 16)."""
    h = b"%016x" % k
    return h + b"k" * (klen - 16) if klen > 16 else h


class Conn:
    """A TCP connection to 127.0.0.1 (only): lines and exact byte counts."""

    def __init__(self, port: int) -> None:
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.s.sendall(data)

    def _fill(self) -> None:
        chunk = self.s.recv(1 << 20)
        if not chunk:
            raise UserError("the server closed the connection during the replay")
        self.buf += chunk

    def line(self) -> bytes:
        while (i := self.buf.find(b"\r\n")) < 0:
            self._fill()
        out, self.buf = self.buf[:i], self.buf[i + 2:]
        return out

    def exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def close(self) -> None:
        self.s.close()


def replay(req: Requests, kind: str, port: int, warm: int, speed: float = 1.0) -> Measured:
    """Replays `req` cache-aside to the server of `kind` on 127.0.0.1:`port` at `speed`
    times the stream's pace (0: as fast as it goes); the hit ratio of the gets after the
    first `warm` requests, from the server's counters."""
    cli = model_of(kind).client(port)
    keys, ops = req.key.tolist(), req.op.tolist()
    kl, vl, tl, ts = req.klen.tolist(), req.vlen.tolist(), req.ttl.tolist(), req.t.tolist()
    key_ttl: dict[int, int] = {}
    n = len(keys)
    sent = np.zeros(n, dtype=np.float64)
    start = time.monotonic()
    behind = 0.0
    i = 0
    measured_at = 0.0
    reset_done = warm <= 0
    if reset_done:
        cli.reset()
    try:
        while i < n:
            if not reset_done and i >= warm:
                cli.reset()
                reset_done = True
                measured_at = time.monotonic()
            # a batch of distinct keys, not crossing the warm-up's end
            seen: set[int] = set()
            j = i
            end = min(n, i + BATCH, warm if not reset_done else n)
            while j < end and keys[j] not in seen:
                seen.add(keys[j])
                j += 1
            if speed > 0:
                due = start + ts[i] / speed
                now = time.monotonic()
                if due > now:
                    time.sleep(due - now)
                else:
                    behind = max(behind, now - due)
            sent[i:j] = time.monotonic() - start
            names = [key_name(keys[x], kl[x]) for x in range(i, j)]
            get_idx = [x for x in range(i, j) if ops[x] == GET]
            found = dict(zip(get_idx, cli.gets([names[x - i] for x in get_idx]), strict=True)
                         ) if get_idx else {}
            stores, dels = [], []
            for x in range(i, j):
                if ops[x] == SET:
                    key_ttl[keys[x]] = tl[x]
                if ops[x] == DELETE:
                    dels.append(names[x - i])
                elif ops[x] == SET or not found.get(x, True):
                    stores.append((names[x - i], vl[x], key_ttl.get(keys[x], tl[x])))
            if stores:
                cli.sets(stores)
            if dels:
                cli.deletes(dels)
            i = j
        hits, misses = cli.counts()
    finally:
        cli.close()
    return Measured(hits, misses, time.monotonic() - (measured_at or start), behind, sent)
