"""`kvtune workload import FORMAT FILE`: public cache traces to a workload model.

- `twitter`: Twitter's cache traces (OSDI 2020), CSV without header:
  `timestamp,anonymized key,key size,value size,client id,operation,TTL`.
- `meta`: Meta's kvcache traces, CSV with a header naming the columns; the layouts
  `key,op,size,op_count,key_size` and
  `op_time,key,key_size,op,op_count,size,cache_hits,ttl` are read (by their header, or
  by the field count when there is none). Each row counts `op_count` requests.

Plain or zstd-compressed (by the `.zst` suffix or the zstd magic), read as a stream: the
memory used does not grow with the trace (kvtune.workload.model keeps bounded state).
Every size is bounded (issue 29): the trace is a regular file outside /proc, /sys and
/dev; at most MAX_BYTES are read (decompressed) and MAX_LINES lines; a zstd stream that
expands more than MAX_RATIO times its compressed size is a decompression bomb, refused; a
row's value size beyond MAX_VALUE, key size beyond MAX_KEY or op_count beyond MAX_OP_COUNT
is malformed.
A time window (`--start`, `--end`, seconds from the trace's first request) and a sample
of keys (`--key-sample`, by key hash, so a key is in or out for all its requests) narrow
it. A malformed line is skipped and counted; too many (more than `max_bad` of the lines,
after the first 1,000, or all of the first 1,000) fail the import with exit 2, naming the
first bad line.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from kvtune import present
from kvtune.errors import UserError
from kvtune.quantities import is_count
from kvtune.safety.files import ReadRefused, note_input, open_input
from kvtune.workload.model import ModelBuilder

FORMATS = ("twitter", "meta")
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
CHECK_AFTER = 1000
MAX_LINE = 1 << 16
MAX_BYTES = 1 << 40  # 1 TiB of CSV, decompressed: the largest public traces are smaller
MAX_LINES = 10_000_000_000
MAX_RATIO = 200  # CSV traces compress 5-20x; a bomb expands thousands of times
RATIO_AFTER = 16 << 20  # judged once this much has been decompressed
MAX_VALUE = 1 << 30  # kvload's item bound (memcached's -I tops out at 1 GiB)
MAX_KEY = 65535
MAX_OP_COUNT = 1_000_000  # requests one row of a Meta trace may stand for

TWITTER_SET = {"set", "add", "replace", "cas", "append", "prepend", "incr", "decr"}
META_LAYOUTS = {
    ("key", "op", "size", "op_count", "key_size"): "kv1",
    ("op_time", "key", "key_size", "op", "op_count", "size", "cache_hits", "ttl"): "kv2",
}


@dataclass
class ImportStats:
    lines: int = 0
    bad: int = 0
    first_bad: int | None = None
    first_bad_why: str = ""
    rows: int = 0
    requests: int = 0
    outside_window: int = 0
    sampled_out: int = 0
    other_ops: int = 0


class _Bounded(io.RawIOBase):
    """The trace's bytes (decompressed), counted: at most MAX_BYTES, and for a compressed
    stream at most MAX_RATIO times the compressed bytes read (judged after RATIO_AFTER)."""

    def __init__(self, inner: IO[bytes], raw: IO[bytes] | None, path: str) -> None:
        self.inner, self.raw, self.path, self.n = inner, raw, path, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self.inner.read(len(b))
        n = len(data)
        b[:n] = data
        self.n += n
        if self.n > MAX_BYTES:
            raise UserError(f"{self.path}: more than {MAX_BYTES >> 40} TiB of trace: cut it "
                            "(a time window of its own) before importing")
        if self.raw is not None and self.n > RATIO_AFTER:
            packed = max(self.raw.tell(), 1)
            if self.n > MAX_RATIO * packed:
                raise UserError(f"{self.path}: expands more than {MAX_RATIO} times its "
                                "compressed size (a decompression bomb?); refused")
        return n

    def close(self) -> None:
        self.inner.close()
        super().close()


def _open(path: str) -> IO[bytes]:
    try:  # judged before it is opened: no device, FIFO or kernel file is ever opened
        fd = open_input(path, "trace")
    except ReadRefused as e:
        raise UserError(str(e)) from None
    f = os.fdopen(fd, "rb")
    note_input(f.fileno())  # no output of this run may replace it
    head = f.read(4)
    f.seek(0)
    if head == ZSTD_MAGIC or path.endswith(".zst"):
        import zstandard

        if head != ZSTD_MAGIC:
            f.close()
            raise UserError(f"{path}: named .zst but not zstd-compressed")
        try:
            _judge_ratio(f, path)
        except BaseException:
            f.close()
            raise
        return _Bounded(zstandard.ZstdDecompressor().stream_reader(f, closefd=True), f,
                        path)  # type: ignore[return-value]
    return _Bounded(f, None, path)  # type: ignore[return-value]


def _judge_ratio(f: IO[bytes], path: str) -> None:
    """A decompression bomb refused before any line of it is parsed: the stream's first
    RATIO_AFTER bytes and a chunk more are decompressed and dropped, judged as _Bounded
    judges them while the lines are read (which goes on judging the rest), and `f` is
    rewound. A few milliseconds, memory of one chunk; without it, a bomb's first 16 MiB
    (some 600,000 rows) were parsed before the ratio was judged. A damaged stream is left
    to the line reader, which names the line it fails at."""
    import zstandard

    probe = _Bounded(zstandard.ZstdDecompressor().stream_reader(f, closefd=False), f, path)
    chunk = bytearray(1 << 20)
    try:
        while probe.n <= RATIO_AFTER and probe.readinto(chunk):
            pass
    except UserError:
        raise
    except Exception:  # a damaged stream: the line reader names the line it fails at
        pass
    f.seek(0)


def _lines(raw: IO[bytes], path: str) -> Iterator[tuple[int, str]]:
    text = io.TextIOWrapper(io.BufferedReader(raw),  # type: ignore[type-var]
                            encoding="utf-8", errors="replace",
                            newline="")
    n = 0
    try:
        while True:
            line = text.readline(MAX_LINE)
            if not line:
                return
            n += 1
            if n > MAX_LINES:
                raise UserError(f"{path}: more than {present.figure(MAX_LINES)} lines: cut the "
                                f"trace "
                                "before importing")
            if not line.endswith("\n") and len(line) >= MAX_LINE:
                # A line longer than any trace row: skip the rest of it.
                while (more := text.readline(MAX_LINE)) and not more.endswith("\n"):
                    pass
                yield n, "\x00too long"
                continue
            yield n, line.rstrip("\r\n")
    except UserError:
        raise
    except Exception as e:  # zstd stream errors and the like: bad input, named
        raise UserError(f"{path}: cannot read past line {n}: {type(e).__name__}") from None


def check_import_options(fmt: str, start: float | None, end: float | None,
                         key_sample: float, max_bad: float) -> None:
    """UserError naming the option `import_trace` cannot take; `kvtune workload import`
    asks before it creates anything."""
    if fmt not in FORMATS:
        raise UserError(f"unknown trace format {fmt!r} (known: {', '.join(FORMATS)})")
    if not 0 < key_sample <= 1:
        raise UserError(f"--key-sample {key_sample}: a fraction in (0, 1]")
    for name, v in (("--start", start), ("--end", end)):
        # NaN compares false with everything (it passed `end <= start`: a model with a
        # rate of NaN, which kvload's JSON parser refuses); an infinity is no window.
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise UserError(f"{name} {v}: seconds from the trace's start, a number >= 0")
    if not 0 <= max_bad < 1:  # NaN too
        raise UserError(f"--max-bad {max_bad}: a fraction in [0, 1)")
    if start is not None and end is not None and end <= start:
        raise UserError(f"--end {end} is not after --start {start}")


def import_trace(fmt: str, path: str, *, start: float | None = None,
                 end: float | None = None, key_sample: float = 1.0,
                 max_bad: float = 0.01, trace: Any = None,
                 progress: Callable[[ImportStats], None] | None = None
                 ) -> tuple[dict[str, Any], ImportStats]:
    check_import_options(fmt, start, end, key_sample, max_bad)
    b = ModelBuilder(source=f"{fmt} trace {os.path.basename(path)}", trace=trace)
    st = ImportStats()
    cut = int(key_sample * (1 << 64))
    salt = os.urandom(16)

    def h(key: str) -> int:
        return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8, key=salt).digest(),
                              "little")

    def bad(n: int, why: str) -> None:
        st.bad += 1
        if st.first_bad is None:
            st.first_bad, st.first_bad_why = n, why

    layout: str | None = None
    t_first: float | None = None
    raw = _open(path)
    try:
        for n, line in _lines(raw, path):
            st.lines = n
            if progress and n % 1_000_000 == 0:
                progress(st)
            if st.lines == CHECK_AFTER and st.bad == st.lines:
                break
            if st.lines > CHECK_AFTER and st.bad > max_bad * st.lines:
                break
            if not line:
                continue
            if line == "\x00too long":
                bad(n, "longer than any trace row")
                continue
            f = line.split(",")
            if fmt == "meta" and layout is None:
                cols = tuple(c.strip() for c in f)
                if cols in META_LAYOUTS:
                    layout = META_LAYOUTS[cols]
                    continue
                layout = {5: "kv1", 8: "kv2"}.get(len(f))
                if layout is None:
                    bad(n, f"{len(f)} fields, and no header names a known Meta layout")
                    continue
            try:
                row = _twitter(f) if fmt == "twitter" else _meta(f, layout or "kv1")
            except (ValueError, IndexError) as e:
                bad(n, str(e) or "malformed")
                continue
            t, key, klen, vlen, verb, ttl, count, conn, hits = row
            st.rows += 1
            if verb is None:
                st.other_ops += count
                b.other[str(f[5] if fmt == "twitter" else "")[:16] or "other"] += count
                continue
            if t is not None:
                if t_first is None:
                    t_first = t
                rel = t - t_first
                if (start is not None and rel < start) or (end is not None and rel >= end):
                    st.outside_window += count
                    continue
            kh = h(key)
            if kh >= cut:
                st.sampled_out += count
                continue
            st.requests += count
            b.request(t, verb, [(kh, klen)], value_size=vlen if verb == "set" else None,
                      ttl=ttl, conn=conn, hits=hits, count=count,
                      item_sizes=[vlen] if verb == "get" else None)
            if verb == "get" and vlen:
                b.hit_size(vlen, count)
    finally:
        raw.close()
    too_many = (st.lines >= CHECK_AFTER and st.bad == min(st.lines, CHECK_AFTER)) or \
        (st.lines > CHECK_AFTER and st.bad > max_bad * st.lines)
    if too_many or (st.rows == 0 and st.bad):
        raise UserError(f"{path}: too many malformed lines for the {fmt} format ({st.bad} of "
                        f"the first {st.lines}); the first is line {st.first_bad}: "
                        f"{st.first_bad_why}")
    if st.requests == 0:
        raise UserError(f"{path}: no request to model (rows {st.rows}, outside the window "
                        f"{st.outside_window}, sampled out {st.sampled_out})")
    span = (end - (start or 0)) if end is not None else None
    about = {"imported": {"format": fmt, "layout": layout, "file": os.path.basename(path),
                          "lines": st.lines, "malformed_lines_skipped": st.bad,
                          "first_malformed_line": st.first_bad, "rows": st.rows,
                          "requests": st.requests, "outside_window": st.outside_window,
                          "key_sample": key_sample, "sampled_out": st.sampled_out,
                          "other_operations": st.other_ops,
                          "window": [start, end]}}
    duration = None
    if b.first is not None and b.last is not None:
        # Whole-second timestamps: the last second counts whole.
        duration = span or (b.last - b.first + 1)
    rate = None
    if duration:
        # The trace's rate in the window: the sampled-out keys' requests count too.
        rate = (st.requests + st.sampled_out) / duration
    doc = b.build(duration=duration, rate=rate, about=about)
    if key_sample < 1:
        doc["keys"] = max(1, round(doc["keys"] / key_sample))
    if rate is None:
        doc.pop("rate", None)
    return doc, st


def _int(v: str, what: str, top: int | None = None) -> int:
    """A field as a count of at most 18 ASCII digits (a timestamp in seconds or
    microseconds, a size, a TTL), bounded by `top`; the message names the field, never its
    text. (int() alone took '1_000', '+5', any script's digits and 400-digit numbers, which
    a float of the timestamp then overflowed.)"""
    t = v.strip()
    if t.startswith("-") and is_count(t[1:]):
        raise ValueError(f"{what} is negative")
    if not is_count(t) or len(t) > 18:
        raise ValueError(f"{what} is not an integer (at most 18 digits 0-9)")
    x = int(t)
    if top is not None and x > top:
        raise ValueError(f"{what} {x} is more than {present.figure(top)}")
    return x


Row = tuple[float | None, str, int, int, str | None, int, int, Any, float | None]


def _twitter(f: list[str]) -> Row:
    if len(f) != 7:
        raise ValueError(f"{len(f)} fields (the Twitter layout has 7)")
    t = float(_int(f[0], "timestamp"))
    key = f[1]
    if not key:
        raise ValueError("an empty key")
    klen, vlen = _int(f[2], "key size", MAX_KEY), _int(f[3], "value size", MAX_VALUE)
    op = f[5].strip().lower()
    ttl = _int(f[6], "TTL") if f[6].strip() else 0
    if op in ("get", "gets"):
        verb: str | None = "get"
    elif op in TWITTER_SET:
        verb = "set"
    elif op == "delete":
        verb = "delete"
    else:
        verb = None
    hits = (1 if vlen > 0 else 0) if verb == "get" else None
    return t, key, max(klen, 1), vlen, verb, ttl, 1, f[4], hits


def _meta(f: list[str], layout: str) -> Row:
    if layout == "kv1":
        if len(f) != 5:
            raise ValueError(f"{len(f)} fields (this Meta layout has 5)")
        key, op, size, count, klen = f
        t: float | None = None
        ttl, hits = 0, None
    else:
        if len(f) != 8:
            raise ValueError(f"{len(f)} fields (this Meta layout has 8)")
        ts, key, klen, op, count, size, cache_hits, ttl_s = f
        t = float(ts)
        if not math.isfinite(t):
            raise ValueError("op_time is not a finite number")
        ttl = _int(ttl_s, "ttl") if ttl_s.strip() else 0
        hits = _int(cache_hits, "cache_hits") if cache_hits.strip() else None
    n = _int(count, "op_count", MAX_OP_COUNT)
    if n == 0:
        raise ValueError("op_count 0")
    op = op.strip().upper()
    verb = "get" if op.startswith("GET") else "set" if op.startswith(
        ("SET", "ADD", "REPLACE", "CAS", "APPEND", "PREPEND")) else \
        "delete" if op.startswith("DEL") else None
    if not key:
        raise ValueError("an empty key")
    hit_share = None if hits is None else min(1.0, hits / n)
    return t, key, max(_int(klen, "key_size", MAX_KEY), 1), _int(size, "size", MAX_VALUE), \
        verb, ttl, n, None, hit_share
