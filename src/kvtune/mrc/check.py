"""The curve checked on the real server: the same request stream replayed, cache-aside,
to a memcached, Redis or Valkey on loopback, and the hit ratio read from the server's own
counters (memcached `get_hits`/`get_misses`, Redis and Valkey `keyspace_hits`/
`keyspace_misses`).

kvload replays a trace request by request (`kvload --trace`), but a get that misses is not
followed by a set: its hit ratio is that of the recorded sets, not of a cache filled on
demand. This client is: each get that misses is followed by the set of that item (its
key's length, its value's length, its TTL), as the application behind the cache does.
Requests go out in pipelined batches of distinct keys (a batch ends before a key repeats),
paced to the stream's timestamps (TTLs and Redis's one-second LRU clock run on wall time).
The first `warm` requests fill the cache; the counters are reset (`stats reset`,
`CONFIG RESETSTAT`) and the rest are measured.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

import numpy as np

from kvtune.errors import UserError
from kvtune.mrc.requests import DELETE, GET, SET, Requests

BATCH = 64


@dataclass(frozen=True)
class Measured:
    """The server's hits and misses over the measured part; `times` the wall time of
    each request of the stream (seconds from the replay's start) as it was sent, for the
    simulator to see the clock the server saw (TTLs, Redis's LRU clock)."""

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


class _Conn:
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


def _resp(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class _Memcached:
    def __init__(self, port: int) -> None:
        self.c = _Conn(port)

    def gets(self, keys: list[bytes]) -> list[bool]:
        self.c.send(b"get " + b" ".join(keys) + b"\r\n")
        found: set[bytes] = set()
        while True:
            ln = self.c.line()
            if ln == b"END":
                break
            if not ln.startswith(b"VALUE "):
                raise UserError(f"memcached answered {ln[:60]!r} to a get")
            parts = ln.split()
            self.c.exact(int(parts[3]) + 2)
            found.add(parts[1])
        return [k in found for k in keys]

    def sets(self, items: list[tuple[bytes, int, int]]) -> None:
        out = []
        for k, v, ttl in items:
            out.append(b"set %s 0 %d %d noreply\r\n%s\r\n" % (k, ttl, v, b"x" * v))
        out.append(b"mn\r\n")
        self.c.send(b"".join(out))
        ln = self.c.line()
        if ln != b"MN":
            raise UserError(f"memcached answered {ln[:60]!r} to a set")

    def deletes(self, keys: list[bytes]) -> None:
        self.c.send(b"".join(b"delete %s noreply\r\n" % k for k in keys) + b"mn\r\n")
        self.c.line()

    def reset(self) -> None:
        self.c.send(b"stats reset\r\n")
        self.c.line()

    def counts(self) -> tuple[int, int]:
        self.c.send(b"stats\r\n")
        st = {}
        while (ln := self.c.line()) != b"END":
            p = ln.split()
            st[p[1]] = p[2]
        return int(st[b"get_hits"]), int(st[b"get_misses"])  # expired gets included

    def close(self) -> None:
        self.c.close()


class _Redis:
    def __init__(self, port: int) -> None:
        self.c = _Conn(port)

    def _reply(self) -> bytes | None:
        ln = self.c.line()
        if ln[:1] == b"$":
            n = int(ln[1:])
            return None if n < 0 else self.c.exact(n + 2)[:-2]
        if ln[:1] == b"-":
            raise UserError(f"the server answered {ln[:80]!r}")
        return ln

    def gets(self, keys: list[bytes]) -> list[bool]:
        self.c.send(b"".join(_resp(b"GET", k) for k in keys))
        return [self._reply() is not None for _ in keys]

    def sets(self, items: list[tuple[bytes, int, int]]) -> None:
        self.c.send(b"".join(
            _resp(b"SET", k, b"x" * v, b"EX", b"%d" % ttl) if ttl > 0 else
            _resp(b"SET", k, b"x" * v) for k, v, ttl in items))
        for _ in items:
            self._reply()

    def deletes(self, keys: list[bytes]) -> None:
        self.c.send(b"".join(_resp(b"DEL", k) for k in keys))
        for _ in keys:
            self._reply()

    def reset(self) -> None:
        self.c.send(_resp(b"CONFIG", b"RESETSTAT"))
        self._reply()

    def counts(self) -> tuple[int, int]:
        self.c.send(_resp(b"INFO", b"stats"))
        text = self._reply() or b""
        st = dict(ln.split(b":", 1) for ln in text.split(b"\r\n") if b":" in ln)
        return int(st[b"keyspace_hits"]), int(st[b"keyspace_misses"])

    def close(self) -> None:
        self.c.close()


def replay(req: Requests, kind: str, port: int, warm: int, speed: float = 1.0) -> Measured:
    """Replays `req` cache-aside to the server of `kind` on 127.0.0.1:`port` at `speed`
    times the stream's pace (0: as fast as it goes); the hit ratio of the gets after the
    first `warm` requests, from the server's counters."""
    cli: _Memcached | _Redis = _Memcached(port) if kind == "memcached" else _Redis(port)
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


def per_key_bytes(port: int, req: Requests) -> tuple[float, float]:
    """(used_memory per key, bytes of key plus value per key) of a Redis or Valkey server
    with no maxmemory, once every distinct key of `req` is stored (measured, not guessed:
    `INFO memory`'s used_memory before and after)."""
    cli = _Redis(port)
    try:
        def used() -> int:
            cli.c.send(_resp(b"INFO", b"memory"))
            text = cli._reply() or b""
            st = dict(ln.split(b":", 1) for ln in text.split(b"\r\n") if b":" in ln)
            return int(st[b"used_memory"])

        before = used()
        _, first = np.unique(req.key, return_index=True)
        items = [(key_name(int(req.key[x]), int(req.klen[x])), int(req.vlen[x]), 0)
                 for x in first.tolist()]
        for a in range(0, len(items), 256):
            cli.sets(items[a:a + 256])
        after = used()
        payload = float(np.mean([len(k) + v for k, v, _ in items]))
        return (after - before) / len(items), payload
    finally:
        cli.close()
