"""The normalized trace `--keep-trace` writes next to a model, which `kvload --trace FILE`
replays request by request (docs/kvload.md, "Traces"):

    # kvtune-trace/1
    # t_us,verb,key,key_len,value_len,ttl
    0,g,9f3a0c7e11d2b854,24,310,0

one line per request: microseconds from the first request, `g`/`s`/`d`, the key's salted
64-bit hash in hex (the salt lives only in the capturing process: no key in clear, none
recoverable by hashing guesses), the key's length, the value's length (a set's, or the
item a get found; 0 when unknown), a set's TTL in seconds. A multiget is one `g` per key.
No value is ever written.

Traces stamped in whole seconds (Twitter's, Meta's) are spread evenly over each second:
replayed as stamped, every second would start with a burst of its whole traffic.
"""

from __future__ import annotations

import os
from typing import IO, Any

from kvtune.errors import UserError
from kvtune.quantities import MAX_RELATIVE_TTL
from kvtune.safety.files import AtomicFile

HEADER = "# kvtune-trace/1\n# t_us,verb,key,key_len,value_len,ttl\n"
MAX_RECORDS = 50_000_000  # what kvload --trace loads (16 bytes each in its memory)
MAX_SECOND_BUFFER = 1_000_000  # requests of one whole second held to spread them
_VERB = {"get": "g", "mget": "g", "set": "s", "delete": "d"}


class TraceWriter:
    """Streams requests to the trace file; `abandon()` removes it when the capture or the
    import fails, so that a failure leaves nothing behind."""

    def __init__(self, path: str, whole_seconds: bool = False) -> None:
        self.path = path
        self.whole_seconds = whole_seconds
        self.second: int | None = None
        self.pending: list[str] = []  # the current second's lines, without their time
        # A temporary file beside `path`, renamed over it by close(): no link followed, no
        # half trace left, never over an input (kvtune.safety.files).
        self._out: AtomicFile | None = AtomicFile(path, what="--keep-trace",
                                                  buffering=1 << 20)
        self.f: IO[str] | None = self._out.file  # type: ignore[assignment]
        assert self.f is not None
        self.f.write(HEADER)
        self.base: float | None = None
        self.records = 0
        self.before_start = 0  # requests stamped before the first one (reordered lines)
        self.truncated = False

    def write(self, t: float | None, verb: str, keys: list[tuple[int, int]],
              value_size: int | None, ttl: int | None, count: int = 1,
              item_sizes: list[int | None] | None = None) -> None:
        if self.f is None or self.truncated:
            return
        if t is None:
            raise UserError("--keep-trace: this trace layout has no request times, so there "
                            "is nothing to replay request by request")
        if self.base is None:
            self.base = t
        us = round((t - self.base) * 1e6)
        if us < 0:
            self.before_start += count
            us = 0
        if self.whole_seconds and (self.second is None or us // 1_000_000 != self.second
                                   or len(self.pending) >= MAX_SECOND_BUFFER):
            self._flush_second()
            self.second = us // 1_000_000
        v = _VERB[verb]
        ttl_s = min(max(ttl or 0, 0), MAX_RELATIVE_TTL) if v == "s" else 0
        lines = []
        for i, (h, klen) in enumerate(keys):
            size = value_size if v == "s" else (item_sizes[i] if item_sizes else value_size)
            lines.append(f",{v},{h & 0xFFFF_FFFF_FFFF_FFFF:x},{max(1, min(klen, 65535))},"
                         f"{max(0, min(size or 0, 0xFFFF_FFFF))},{ttl_s}\n")
        for _ in range(count):
            if self.records + len(lines) > MAX_RECORDS:
                self.truncated = True
                return
            if self.whole_seconds:
                self.pending.extend(lines)
            else:
                self.f.writelines(f"{us}{ln}" for ln in lines)
            self.records += len(lines)

    def _flush_second(self) -> None:
        if self.f is None or not self.pending or self.second is None:
            self.pending = []
            return
        n, base = len(self.pending), self.second * 1_000_000
        self.f.writelines(f"{base + i * 1_000_000 // n}{ln}" for i, ln in
                          enumerate(self.pending))
        self.pending = []

    def close(self) -> dict[str, Any]:
        if self.f is not None and self._out is not None:
            self._flush_second()
            self.f = None
            self._out.commit()
            self._out = None
        about: dict[str, Any] = {"file": os.path.basename(self.path), "requests": self.records}
        if self.before_start:
            about["stamped_before_the_first"] = self.before_start
        if self.truncated:
            about["truncated_at"] = MAX_RECORDS
        if self.whole_seconds:
            about["times"] = "whole seconds, spread evenly over each second"
        return about

    def abandon(self) -> None:
        self.f = None
        if self._out is not None:
            self._out.abandon()
            self._out = None
