"""The request stream a miss-ratio curve is computed from, as numpy arrays.

Three sources, all read through kvtune's own readers of untrusted input:

- a normalized trace (`kvtune-trace/1`, what `--keep-trace` writes and `kvload --trace`
  replays): keys are already salted 64-bit hashes;
- a public trace (`twitter`, `meta`), read by kvtune.workload.traces (its bounds and its
  messages), each request collected as the importer sees it;
- a workload model (kvtune.workload.model), from which a request stream is drawn: its
  popularity (`zipf:S`, `uniform`, `hotset:`, `table:`), its mix, and each key's own size and
  TTL (`key_buckets` when the model has them, else `value_size` and `ttl`).

The cache is assumed to be filled on demand (cache-aside): a get that misses is followed by
the application's set of that item, so a get of a key that is not cached stores it. Sets
store, deletes remove.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass

import numpy as np

from kvtune import present
from kvtune.errors import UserError
from kvtune.quantities import parse_size
from kvtune.safety.files import ReadRefused, note_input, open_input

GET, SET, DELETE = 0, 1, 2
MAX_TRACE_REQUESTS = 20_000_000  # about 1 GB of arrays and simulator state; cut or sample
# a longer trace (kvload --trace itself loads at most 50 million)
MAX_MODEL_REQUESTS = 20_000_000
TRACE_HEADER = "# kvtune-trace/1"


@dataclass(frozen=True)
class Requests:
    """One request per index: `key` (64-bit key hash), `op` (GET, SET, DELETE), `klen`,
    `vlen` (a set's value length; for a get the item's length when known, else the key's
    last known length, else 0), `ttl` (seconds, 0 never expires), `t` (seconds from the
    first request). `source` names where it came from."""

    key: np.ndarray
    op: np.ndarray
    klen: np.ndarray
    vlen: np.ndarray
    ttl: np.ndarray
    t: np.ndarray
    source: str

    def __len__(self) -> int:
        return int(self.key.shape[0])

    @property
    def gets(self) -> int:
        return int(np.count_nonzero(self.op == GET))

    def take(self, mask: np.ndarray) -> Requests:
        return Requests(self.key[mask], self.op[mask], self.klen[mask], self.vlen[mask],
                        self.ttl[mask], self.t[mask], self.source)


def _fill_sizes(vlen: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Every request's item length: a request with none known (0) takes the key's length
    from its nearest request that knows it (its last before, else its first after)."""
    out = vlen.astype(np.int64).copy()
    if len(out) == 0:
        return out
    order = np.argsort(key, kind="stable")
    k, v = key[order], out[order]
    idx = np.where(v > 0, np.arange(len(v)), -1)
    start = np.r_[True, k[1:] != k[:-1]]
    # forward fill within each key: the last known index, reset at each key's start
    grp = np.cumsum(start) - 1
    firsts = np.flatnonzero(start)
    filled = np.maximum.accumulate(np.where(idx >= 0, idx, -1) + 0)
    last_known = np.where(filled >= firsts[grp], filled, -1)
    fwd = np.where(last_known >= 0, v[np.maximum(last_known, 0)], 0)
    # backward fill for requests before the key's first known length
    rev = idx[::-1].copy()
    rev[rev < 0] = len(v)
    nxt = np.minimum.accumulate(rev)[::-1]
    ends = np.r_[firsts[1:], len(v)]
    nxt_ok = nxt < ends[grp]
    bwd = np.where(nxt_ok, v[np.minimum(nxt, len(v) - 1)], 0)
    v2 = np.where(fwd > 0, fwd, bwd)
    out[order] = v2
    return out


def from_arrays(key: np.ndarray, op: np.ndarray, klen: np.ndarray, vlen: np.ndarray,
                ttl: np.ndarray, t: np.ndarray, source: str) -> Requests:
    key = np.asarray(key, dtype=np.uint64)
    t = np.asarray(t, dtype=np.float64)
    if len(t) and t[0] != 0:
        t = t - t[0]
    return Requests(key, np.asarray(op, dtype=np.uint8), np.asarray(klen, dtype=np.int32),
                    _fill_sizes(np.asarray(vlen, dtype=np.int64), key),
                    np.asarray(ttl, dtype=np.int64), t, source)


def read_trace(path: str, limit: int = MAX_TRACE_REQUESTS) -> Requests:
    """A normalized trace (`# kvtune-trace/1`), read with kvload's bounds; a bad line is
    an error naming FILE:LINE (exit 2)."""
    try:
        fd = open_input(path, "trace")
    except ReadRefused as e:
        raise UserError(str(e)) from None
    f = os.fdopen(fd, "rb")
    note_input(f.fileno())
    # typed arrays: 8 bytes a field, not a Python int's 28
    keys, ops, kl = array("Q"), array("B"), array("q")
    vl, tl, ts = array("q"), array("q"), array("q")
    verbs = {b"g": GET, b"s": SET, b"d": DELETE}
    with f:
        first = f.readline(64)
        if not first.startswith(TRACE_HEADER.encode()):
            raise UserError(f"{path}:1: not a kvtune trace (its first line is not "
                            f"'{TRACE_HEADER}')")
        n = 1
        for raw in f:
            n += 1
            if len(raw) > 256:
                raise UserError(f"{path}:{n}: longer than any trace line")
            line = raw.strip()
            if not line or line.startswith(b"#"):
                continue
            parts = line.split(b",")
            if len(parts) != 6:
                raise UserError(f"{path}:{n}: {len(parts)} fields (a trace line has 6: "
                                "t_us,verb,key,key_len,value_len,ttl)")
            try:
                t_us, k = int(parts[0]), int(parts[2], 16)
                klen, vlen, ttl = int(parts[3]), int(parts[4]), int(parts[5])
            except ValueError:
                raise UserError(f"{path}:{n}: a field is not a number") from None
            v = verbs.get(parts[1])
            if v is None:
                raise UserError(f"{path}:{n}: verb {parts[1][:8]!r} (g, s or d)")
            if not (0 <= k < 1 << 64 and 1 <= klen <= 65535 and 0 <= vlen <= 0xFFFF_FFFF
                    and 0 <= ttl <= 1 << 31 and 0 <= t_us < 1 << 62):
                raise UserError(f"{path}:{n}: a field is out of range (key a 64-bit hex "
                                "hash, key_len 1-65535, value_len < 4 GiB, ttl and t_us ≥ 0)")
            if len(keys) >= limit:
                raise UserError(f"{path}: more than {present.figure(limit)} requests: cut "
                                "the trace (a time window) before computing its curve")
            keys.append(k)
            ops.append(v)
            kl.append(klen)
            vl.append(vlen)
            tl.append(ttl)
            ts.append(t_us)
    if not keys:
        raise UserError(f"{path}: no request in the trace")
    return from_arrays(np.frombuffer(keys, dtype=np.uint64), np.frombuffer(ops, np.uint8),
                       np.frombuffer(kl, np.int64), np.frombuffer(vl, np.int64),
                       np.frombuffer(tl, np.int64),
                       np.frombuffer(ts, np.int64).astype(np.float64) / 1e6,
                       f"trace {os.path.basename(path)}")


class _Collector:
    """Stands in for a TraceWriter under kvtune.workload.traces.import_trace: every
    request the importer accepts, kept as arrays."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.rows: list[tuple[float, int, int, int, int, int]] = []
        self.truncated = False

    def write(self, t: float | None, verb: str, keys: list[tuple[int, int]],
              value_size: int | None, ttl: int | None, count: int = 1,
              item_sizes: list[int | None] | None = None) -> None:
        op = {"get": GET, "mget": GET, "set": SET, "delete": DELETE}[verb]
        for _ in range(count):
            for i, (h, klen) in enumerate(keys):
                if len(self.rows) >= self.limit:
                    self.truncated = True
                    return
                size = value_size if op == SET else (
                    item_sizes[i] if item_sizes else value_size)
                self.rows.append((t or 0.0, op, h & 0xFFFF_FFFF_FFFF_FFFF, klen, size or 0,
                                  (ttl or 0) if op == SET else 0))


def import_public(fmt: str, path: str, limit: int = MAX_TRACE_REQUESTS,
                  key_sample: float = 1.0) -> Requests:
    """A public trace (`twitter`, `meta`) read by kvtune.workload.traces.import_trace."""
    from kvtune.workload.traces import import_trace

    c = _Collector(limit)
    import_trace(fmt, path, trace=c, key_sample=key_sample)
    if not c.rows:
        raise UserError(f"{path}: no request to compute a curve from")
    a = np.array(c.rows, dtype=np.float64)
    return from_arrays(np.array([r[2] for r in c.rows], dtype=np.uint64),
                       a[:, 1], a[:, 3], a[:, 4], a[:, 5], spread_seconds(a[:, 0]),
                       f"{fmt} trace {os.path.basename(path)}"
                       + (" (truncated)" if c.truncated else ""))


def spread_seconds(t: np.ndarray) -> np.ndarray:
    """Whole-second stamps spread evenly over their second, in microseconds from the
    first request, as the normalized trace writes them (kvtune.workload.trace): a public
    trace and the trace its import keeps give the same stream."""
    us = np.maximum(np.round((t - t[0]) * 1e6).astype(np.int64), 0)
    sec = us // 1_000_000
    starts = np.r_[0, np.flatnonzero(sec[1:] != sec[:-1]) + 1]
    sizes = np.diff(np.r_[starts, len(sec)])
    grp = np.repeat(np.arange(len(starts)), sizes)
    pos = np.arange(len(sec)) - starts[grp]
    return (sec * 1_000_000 + pos * 1_000_000 // sizes[grp]) / 1e6


# ---- a request stream drawn from a workload model ----

def _weighted(spec: object, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, probabilities) of N, A-B (uniform, as 64 points) or list:V:W,..."""
    s = str(spec).strip()
    try:
        if s.startswith("list:"):
            pairs = [p.split(":") for p in s[5:].split(",") if p]
            v = np.array([_size(a) for a, _ in pairs], dtype=np.float64)
            w = np.array([float(b) for _, b in pairs], dtype=np.float64)
        elif "-" in s and not s.startswith("-"):
            lo, hi = (_size(x) for x in s.split("-", 1))
            v = np.linspace(lo, hi, 64)
            w = np.ones(64)
        else:
            v, w = np.array([_size(s)], dtype=np.float64), np.ones(1)
    except (ValueError, TypeError):
        raise UserError(f"workload model: {what} {s[:40]!r}: a size (N, A-B or "
                        "list:SIZE:WEIGHT,...) is needed to compute a curve") from None
    if len(v) == 0 or np.any(v < 0) or np.any(w < 0) or not np.isfinite(w).all() \
            or w.sum() <= 0:
        raise UserError(f"workload model: {what} {s[:40]!r}: no positive weight")
    return v, w / w.sum()


def _size(x: str) -> float:
    """A size in kvload's grammar (kvtune.quantities: N, NK, NM, NG, NB): the one the
    workload file was checked with (this took K and M only, so a checked 1G or 100B had
    no curve)."""
    return float(parse_size(x))


def popularity_weights(spec: str, keys: int) -> np.ndarray:
    """Request share of each key rank (hottest first) for kvload's popularity spec."""
    s = str(spec).strip()
    if keys < 1:
        raise UserError("workload model: keys must be at least 1")
    try:
        if s == "uniform":
            w = np.ones(keys)
        elif s.startswith("zipf:"):
            w = np.arange(1, keys + 1, dtype=np.float64) ** -float(s[5:])
        elif s.startswith("hotset:"):
            fk, fr = (float(x) for x in s[7:].split(":"))
            hot = max(1, min(keys, round(fk * keys)))
            w = np.full(keys, (1 - fr) / max(keys - hot, 1))
            w[:hot] = fr / hot
        elif s.startswith("table:"):
            parts = [p.split(":") for p in s[6:].split(",") if p]
            counts = [parse_size(a) for a, _ in parts]
            masses = [float(b) for _, b in parts]
            if sum(counts) > MAX_MODEL_REQUESTS * 5:
                raise UserError("workload model: popularity table of "
                                f"{present.figure(sum(counts))} keys is too large to draw "
                                "from")
            w = np.concatenate([np.full(c, m / c) for c, m in zip(counts, masses, strict=True)
                                if c > 0])
        else:
            raise ValueError
    except (ValueError, TypeError, ZeroDivisionError, OverflowError):
        raise UserError(f"workload model: popularity {s[:40]!r}: uniform, zipf:S, "
                        "hotset:K:R or table:KEYS:MASS,... is needed") from None
    if not np.isfinite(w).all() or w.sum() <= 0:
        raise UserError(f"workload model: popularity {s[:40]!r} gives no request")
    return w / w.sum()


def from_model(doc: dict[str, object], requests: int | None = None, seed: int = 1,
               rate: float | None = None) -> Requests:
    """A request stream drawn from a workload model (or any kvload workload file with
    `keys`/`popularity`): `requests` key operations (default: 20 per key, at least 1
    million, at most MAX_MODEL_REQUESTS; a multiget counts `mget_size` of them, one get per
    key at the same time), at `rate` requests/s (default: the model's, else 10,000)."""
    rng = np.random.default_rng(seed)
    try:
        keys = int(doc.get("keys", 10_000))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise UserError("workload model: keys is not a count") from None
    if not 1 <= keys <= 20_000_000:
        raise UserError(f"workload model: keys {keys}: 1 to 20,000,000 to compute a curve")
    w = popularity_weights(str(doc.get("popularity", "uniform")), keys)
    keys = len(w)
    n = requests or min(MAX_MODEL_REQUESTS, max(1_000_000, 20 * keys))
    if not 1 <= n <= MAX_MODEL_REQUESTS:
        raise UserError(f"requests {n}: 1 to {present.figure(MAX_MODEL_REQUESTS)}")
    # each key's own sizes and TTL
    klen_v, klen_p = _weighted(doc.get("key_size", 16), "key_size")
    key_len = rng.choice(klen_v, size=keys, p=klen_p).astype(np.int32)
    val = np.zeros(keys, dtype=np.int64)
    ttl = np.zeros(keys, dtype=np.int64)
    buckets = doc.get("key_buckets")
    if isinstance(buckets, list) and buckets:
        at = 0
        for i, b in enumerate(buckets):
            if not isinstance(b, dict) or "keys" not in b:
                raise UserError(f"workload model: key_buckets[{i}] has no keys")
            c = min(int(b["keys"]), keys - at)
            if c <= 0:
                break
            vv, vp = _weighted(b.get("value_size", doc.get("value_size", 100)),
                               f"key_buckets[{i}].value_size")
            val[at:at + c] = rng.choice(vv, size=c, p=vp)
            tv, tp = _weighted(b.get("ttl", doc.get("ttl", 0)), f"key_buckets[{i}].ttl")
            ttl[at:at + c] = rng.choice(tv, size=c, p=tp)
            at += c
        if at < keys:
            vv, vp = _weighted(doc.get("value_size", 100), "value_size")
            val[at:] = rng.choice(vv, size=keys - at, p=vp)
    else:
        vv, vp = _weighted(doc.get("value_size", 100), "value_size")
        val[:] = rng.choice(vv, size=keys, p=vp)
        tv, tp = _weighted(doc.get("ttl", 0), "ttl")
        ttl[:] = rng.choice(tv, size=keys, p=tp)
    # the request stream: ranks by popularity, verbs by the mix
    mix = _mix(str(doc.get("mix", "get:9,set:1")))
    ranks = rng.choice(keys, size=n, p=w)  # drawn first: the streams of bench/mrc stay
    verb = rng.choice(4, size=n, p=[mix["get"], mix["mget"], mix["set"], mix["delete"]])
    # a multiget asks for mget_size keys at once: one get per key, at the same time
    try:
        fan = int(doc.get("mget_size", 10))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise UserError("workload model: mget_size is not a count") from None
    if not 1 <= fan <= 1024:
        raise UserError(f"workload model: mget_size {fan}: 1 to 1024")
    per = np.where(verb == 1, fan, 1)
    op = np.repeat(np.array([GET, GET, SET, DELETE], dtype=np.uint8)[verb], per)[:n]
    r = float(rate or doc.get("rate") or 10_000)  # type: ignore[arg-type]
    t = np.repeat(np.arange(n, dtype=np.float64) / max(r, 1e-9), per)[:n]
    # hashes of ranks: a fixed scramble (what a hash of the key name would give)
    with np.errstate(over="ignore"):
        key = _mix64(ranks.astype(np.uint64)
                     + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15))
    return Requests(key, op, key_len[ranks], val[ranks], ttl[ranks], t,
                    f"model {doc.get('popularity', 'uniform')}, {present.figure(keys)} keys")


def _mix(spec: str) -> dict[str, float]:
    out = {"get": 0.0, "mget": 0.0, "set": 0.0, "delete": 0.0}
    try:
        for part in spec.split(","):
            v, w = part.split(":")
            if v.strip() not in out:
                raise ValueError
            out[v.strip()] += float(w)
    except ValueError:
        raise UserError(f"workload model: mix {spec[:40]!r}: get:W,mget:W,set:W,"
                        "delete:W") from None
    tot = sum(out.values())
    if tot <= 0 or any(x < 0 for x in out.values()):
        raise UserError(f"workload model: mix {spec[:40]!r} has no positive weight")
    return {k: v / tot for k, v in out.items()}


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a bijective scramble of 64-bit integers."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def salted_hash(key: np.ndarray, salt: int) -> np.ndarray:
    """A hash of the key hashes under `salt`, uniform on 64 bits (for spatial sampling)."""
    return _mix64(key ^ _mix64(np.array([salt], dtype=np.uint64))[0])
