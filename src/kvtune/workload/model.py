"""The workload model: what `kvtune workload capture` and `kvtune workload import` write,
a kvload workload file (docs/kvload.md, "Workload models") that kvload replays with
`--workload FILE`.

A `ModelBuilder` takes one request at a time and keeps bounded state whatever the length
of the traffic: counters of sizes and TTLs, per-second request counts, and the request
counts of a hash-sampled subset of keys (the sample rate halves whenever the subset
outgrows its bound, so every key kept is counted exactly from its first request). Keys
arrive already hashed: no key and no value is ever held by the builder.

`build()` fits the model:
- the verb mix (get, mget, set, delete) over requests;
- popularity: a Zipf exponent fitted by maximum likelihood on the head of the rank-frequency
  curve, kept when the whole curve is within a KS distance of 0.05 of it, else the empirical
  table (rank buckets, hottest first, each with its share of requests);
- key sizes (one per distinct key counted: kvload gives each key one length), item sizes
  of sets (and of get hits), TTLs of sets: weighted lists of at most
  64 entries (exact when fewer sizes occur, quantile buckets otherwise);
- what belongs to a key (`key_buckets`): the value size and the TTL of each counted key
  (its last set, else the size its gets found), per popularity bucket (the HEAD_KEYS
  hottest keys one bucket each, then at most KEY_BUCKETS log-spaced rank buckets, each a
  weighted list over its keys),
  which kvload replays so that each key keeps its own size: the replay stores the
  source's bytes per key, where the per-request list (dominated by the hot keys) would
  give every key a hot key's size;
- the arrival process: mean rate, and the dispersion of inter-arrival gaps (squared
  coefficient of variation) or, for traces with coarse timestamps, of per-second counts;
- connections and the multiget fan-out.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvtune.quantities import MAX_RELATIVE_TTL

SCHEMA = "kvtune/workload-model/1"
MAX_TRACKED_KEYS = 200_000  # keys whose requests are counted exactly (hash-sampled)
MAX_TIMES = 2_000_000  # request times kept for the inter-arrival dispersion
ARRIVAL_BIN = 0.01  # seconds per bin of the index of dispersion
MAX_SECONDS = 10_000_000  # per-second counts kept
MAX_CONNECTIONS = 100_000
LIST_ENTRIES = 64  # entries of a weighted list in the model
TABLE_BUCKETS = 48  # rank buckets of an empirical popularity table
KEY_BUCKETS = 16  # log-spaced rank buckets of the per-key sizes and TTLs, after ...
HEAD_KEYS = 64  # ... the hottest keys, one bucket each (they carry most of the requests)
ZIPF_KS_LIMIT = 0.05  # above this the table replaces the Zipf fit
HEAD_MIN_COUNT = 10  # ranks with at least this many requests enter the Zipf fit
KVLOAD_MAX_CONNECTIONS = 256
VERBS = ("get", "mget", "set", "delete")


@dataclass
class ModelBuilder:
    """Streaming accumulator of requests (see the module docstring)."""

    source: str
    verbs: Counter[str] = field(default_factory=Counter)
    other: Counter[str] = field(default_factory=Counter)  # commands kvload does not send
    key_sizes: Counter[int] = field(default_factory=Counter)
    key_sizes_by_verb: dict[str, Counter[int]] = field(default_factory=dict)
    set_sizes: Counter[int] = field(default_factory=Counter)
    hit_sizes: Counter[int] = field(default_factory=Counter)
    ttls: Counter[int] = field(default_factory=Counter)
    fanout: Counter[int] = field(default_factory=Counter)
    per_second: Counter[int] = field(default_factory=Counter)
    gets: int = 0
    hits: float = 0.0
    key_counts: dict[int, int] = field(default_factory=dict)
    key_lens: dict[int, int] = field(default_factory=dict)  # of the counted keys
    key_values: dict[int, int] = field(default_factory=dict)  # their value sizes
    key_ttls: dict[int, int] = field(default_factory=dict)  # their TTLs (of sets)
    threshold: int = 1 << 64  # keys whose hash is below this are counted
    connections: set[Any] = field(default_factory=set)
    connections_capped: bool = False
    times: list[float] = field(default_factory=list)
    first: float | None = None
    last: float | None = None
    requests: int = 0
    trace: Any = None  # a workload.trace.TraceWriter when --keep-trace asks for one

    def request(self, t: float | None, verb: str, keys: list[tuple[int, int]],
                value_size: int | None = None, ttl: int | None = None,
                conn: Any = None, hits: float | None = None, count: int = 1,
                item_sizes: list[int | None] | None = None) -> None:
        """One request (`count` identical ones, as a trace row's op_count says) at time
        `t` in seconds: `keys` are (64-bit key hash, key length) pairs, one per key of a
        multiget; `hits` how many of a get's keys were found (a mean over `count`);
        `item_sizes` the size of each item a get found (None: a miss), for the trace."""
        if verb not in VERBS:
            raise ValueError(verb)
        if self.trace is not None:
            self.trace.write(t, verb, keys, value_size, ttl, count, item_sizes)
        if verb == "get" and len(keys) > 1:
            verb = "mget"
        self.verbs[verb] += count
        self.requests += count
        if verb in ("get", "mget"):
            self.fanout[len(keys)] += count
            self.gets += len(keys) * count
            if hits is not None:
                self.hits += hits * count
        by_verb = self.key_sizes_by_verb.setdefault(
            "get" if verb == "mget" else verb, Counter())
        for i, (h, klen) in enumerate(keys):
            self.key_sizes[klen] += count
            by_verb[klen] += count
            if h < self.threshold:
                if h not in self.key_counts:
                    self.key_lens[h] = klen
                self.key_counts[h] = self.key_counts.get(h, 0) + count
                # What belongs to the key: a set's size and TTL (the latest), else the
                # size a get found.
                if verb == "set":
                    if value_size is not None:
                        self.key_values[h] = value_size
                    self.key_ttls[h] = min(max(ttl or 0, 0), MAX_RELATIVE_TTL)
                elif (verb in ("get", "mget") and item_sizes is not None
                      and i < len(item_sizes) and item_sizes[i] is not None
                      and h not in self.key_values):
                    self.key_values[h] = int(item_sizes[i] or 0)
                if len(self.key_counts) > MAX_TRACKED_KEYS:
                    self._halve()
        if verb == "set" and value_size is not None:
            self.set_sizes[value_size] += count
        if verb == "set":
            self.ttls[min(max(ttl or 0, 0), MAX_RELATIVE_TTL)] += count
        if conn is not None:
            if len(self.connections) < MAX_CONNECTIONS:
                self.connections.add(conn)
            else:
                self.connections_capped = True
        if t is not None:
            self.first = t if self.first is None else min(self.first, t)
            self.last = t if self.last is None else max(self.last, t)
            if len(self.per_second) < MAX_SECONDS:
                self.per_second[int(t)] += count
            if count == 1 and len(self.times) < MAX_TIMES:
                self.times.append(t)

    def hit_size(self, size: int, count: int = 1) -> None:
        """The size of an item a get found."""
        self.hit_sizes[size] += count

    def _halve(self) -> None:
        self.threshold //= 2
        self.key_counts = {h: c for h, c in self.key_counts.items() if h < self.threshold}
        self.key_lens = {h: n for h, n in self.key_lens.items() if h < self.threshold}
        self.key_values = {h: n for h, n in self.key_values.items() if h < self.threshold}
        self.key_ttls = {h: n for h, n in self.key_ttls.items() if h < self.threshold}

    @property
    def key_sample_rate(self) -> float:
        return self.threshold / (1 << 64)

    def build(self, *, duration: float | None = None, rate: float | None = None,
              about: dict[str, Any] | None = None) -> dict[str, Any]:
        """The kvload workload file of what was seen. `duration`: the window in seconds
        (else first to last request); `rate`: the true request rate when the source knows
        it better than the requests seen (a capture that lost lines)."""
        if self.requests == 0:
            raise ValueError("no request was seen")
        window = duration or ((self.last - self.first) if self.first is not None
                              and self.last is not None else 0.0)
        if rate is None:
            rate = self.requests / window if window > 0 else None
        total = sum(self.verbs[v] for v in VERBS)
        mix = ",".join(f"{v}:{round(self.verbs[v] / total, 6):g}" for v in VERBS
                       if self.verbs[v])
        pop = fit_popularity(self.key_counts, self.key_sample_rate)
        mget_sizes = {k: c for k, c in self.fanout.items() if k > 1}
        mget_size = round(sum(k * c for k, c in mget_sizes.items())
                          / sum(mget_sizes.values())) if mget_sizes else 10
        arrival, dispersion = self._arrival()
        items = self.set_sizes or self.hit_sizes
        doc: dict[str, Any] = {
            "mode": "open",
            "mix": mix,
            "keys": pop["keys"],
            "popularity": pop["spec"],
            # Per distinct key, as kvload gives each key one length (the requests' own
            # key sizes, weighted by popularity, are in about.key_size_by_verb).
            "key_size": weighted_list(Counter(self.key_lens.values())) if self.key_lens
            else weighted_list(self.key_sizes) if self.key_sizes else "16",
            "value_size": weighted_list(items) if items else "100",
            "ttl": weighted_list(self.ttls) if self.ttls else "0",
            "mget_size": max(1, min(mget_size, 1024)),
            "arrival": arrival,
            "connections": max(1, min(len(self.connections) or 4, KVLOAD_MAX_CONNECTIONS)),
            "preload": True,
        }
        buckets, per_key = self._key_buckets()
        if buckets:
            doc["key_buckets"] = buckets
        if rate is not None:
            doc["rate"] = round(rate, 3)
        if window > 0:
            doc["duration"] = f"{max(window, 0.1):.3f}s"
        doc["about"] = {
            "schema": SCHEMA,
            "source": self.source,
            "requests": self.requests,
            "window_s": round(window, 3),
            "verbs": dict(self.verbs),
            "other_commands": dict(self.other),
            "hit_ratio": round(self.hits / self.gets, 4) if self.gets and self.hits else None,
            "popularity": pop["about"],
            "key_size_by_verb": {v: weighted_list(c) for v, c in
                                 sorted(self.key_sizes_by_verb.items()) if c},
            "item_size_by_verb": {k: weighted_list(c) for k, c in
                                  (("set", self.set_sizes), ("get_hit", self.hit_sizes)) if c},
            "mget_fanout": {str(k): c for k, c in sorted(self.fanout.items())},
            "per_key": per_key,
            "connections_seen": len(self.connections),
            "connections_capped": self.connections_capped,
            "arrival": dispersion,
            "rate_per_second": self._rate_series(),
            **(about or {}),
        }
        return doc

    def _key_buckets(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """`key_buckets` (value sizes and TTLs of the counted keys per popularity bucket,
        hottest first; key counts scaled by 1 / the sample rate) and what they say in
        `about.per_key`; ([], {...}) when no key's size is known. A bucket none of whose
        keys has a known size takes the sizes of all keys."""
        if not self.key_values:
            return [], {"keys_with_size": 0}
        ranked = sorted(self.key_counts, key=lambda h: (-self.key_counts[h], h))
        n = len(ranked)
        head = min(n, HEAD_KEYS)
        edges = np.arange(head + 1)
        if n > head:
            tail = np.unique(np.round(np.geomspace(head + 1, n, KEY_BUCKETS + 1)).astype(int))
            edges = np.concatenate([edges, tail])
            edges[-1] = n
        every = Counter(self.key_values.values())
        every_ttl = Counter(self.key_ttls.values())
        rate = self.key_sample_rate
        out: list[dict[str, Any]] = []
        for a, b in itertools.pairwise(edges):
            if b <= a:
                continue
            keys = ranked[int(a):int(b)]
            sizes = Counter(self.key_values[h] for h in keys if h in self.key_values)
            ttls = Counter(self.key_ttls[h] for h in keys if h in self.key_ttls)
            bucket: dict[str, Any] = {"keys": max(1, round(len(keys) / rate)),
                                      "value_size": weighted_list(sizes or every)}
            if ttls or every_ttl:
                bucket["ttl"] = weighted_list(ttls or every_ttl)
            out.append(bucket)
        sized = [self.key_values[h] for h in ranked if h in self.key_values]
        weights = [self.key_counts[h] for h in ranked if h in self.key_values]
        about = {"buckets": len(out), "keys_with_size": len(sized), "keys_counted": n,
                 "mean_value_per_key": round(float(np.mean(sized)), 1),
                 "mean_value_per_request": round(float(np.average(sized, weights=weights)),
                                                 1)}
        return out, about

    def _arrival(self) -> tuple[str, dict[str, Any]]:
        """kvload's arrival process closest to what was seen: the squared coefficient of
        variation of the gaps (1 for Poisson, 1.45 for ETC's generalized Pareto, 0 for
        fixed), measured on fine timestamps; per-second counts' index of dispersion when
        the timestamps are coarse (a trace's whole seconds)."""
        info: dict[str, Any] = {}
        if len(self.times) >= 1000:
            t = np.sort(np.asarray(self.times))
            gaps = np.diff(t)
            span = t[-1] - t[0]
            if np.count_nonzero(gaps) > 0.5 * len(gaps) and span >= 100 * ARRIVAL_BIN:
                # Counts per 10 ms: a server's timestamps bunch requests it serves together
                # (its own batching, µs apart) but not at this scale. For a renewal
                # process the index of dispersion tends to the gaps' CV².
                counts = np.histogram(t, bins=int(span / ARRIVAL_BIN))[0].astype(float)
                iod = float(counts.var() / counts.mean())
                cv2 = float(np.var(gaps) / np.mean(gaps) ** 2)
                info = {"index_of_dispersion_10ms": round(iod, 3),
                        "gap_cv2": round(cv2, 3), "gaps": len(gaps)}
                kind = "fixed" if iod < 0.5 else "etc" if iod > 1.25 else "poisson"
                return kind, info | {"chosen": kind}
        counts = np.asarray(list(self.per_second.values()), dtype=float)
        if len(counts) >= 5 and counts.mean() > 0:
            info = {"index_of_dispersion_1s": round(float(counts.var() / counts.mean()), 3)}
        return "poisson", info | {"chosen": "poisson"}

    def _rate_series(self) -> list[list[int]]:
        """Requests per second of the window (per minute for a long trace). The first and
        the last second are partial (the window starts and ends inside them): left out
        when there are more, so the series shows no dip that is only the window's edge."""
        if not self.per_second:
            return []
        start = min(self.per_second)
        items = sorted(self.per_second.items())
        if len(items) > 3:
            items = items[1:-1]
        if len(items) > 3600:  # a long trace: per minute
            per_min: Counter[int] = Counter()
            for s, c in items:
                per_min[(s - start) // 60 * 60] += c
            return [[s, c // 60] for s, c in sorted(per_min.items())]
        return [[s - start, c] for s, c in items]


def weighted_list(c: Counter[int]) -> str:
    """`list:SIZE:WEIGHT,...` of at most LIST_ENTRIES entries: every size when few occur,
    else the midpoints of equal-mass quantile buckets (KS distance below 1/LIST_ENTRIES)."""
    items = sorted((k, v) for k, v in c.items() if v > 0)
    total = sum(v for _, v in items)
    if len(items) <= LIST_ENTRIES:
        return "list:" + ",".join(f"{k}:{v / total:.6g}" for k, v in items)
    sizes = np.array([k for k, _ in items], dtype=float)
    cum = np.cumsum([v for _, v in items]) / total
    qs = (np.arange(LIST_ENTRIES) + 0.5) / LIST_ENTRIES
    picks = sizes[np.searchsorted(cum, qs, side="left").clip(0, len(sizes) - 1)]
    merged: Counter[int] = Counter(int(p) for p in picks)
    return "list:" + ",".join(f"{k}:{v / LIST_ENTRIES:.6g}" for k, v in sorted(merged.items()))


def parse_weighted(spec: str) -> list[tuple[float, float]]:
    """(value, weight) pairs of a `list:` spec, or of a single number."""
    if spec.startswith("list:"):
        out = []
        for part in spec[5:].split(","):
            v, w = part.split(":")
            out.append((float(v), float(w)))
        return out
    return [(float(spec), 1.0)]


def zipf_mle(counts: np.ndarray) -> float:
    """Maximum-likelihood Zipf exponent of requests over ranks 1..len(counts) (counts in
    rank order): maximises -s sum f_r ln r - F ln H(R, s)."""
    from scipy.optimize import minimize_scalar

    ranks = np.arange(1, len(counts) + 1, dtype=float)
    logr = np.log(ranks)
    total = counts.sum()
    weighted = float((counts * logr).sum())

    def nll(s: float) -> float:
        return s * weighted + total * math.log(float(np.exp(-s * logr).sum()))

    res = minimize_scalar(nll, bounds=(0.0, 4.0), method="bounded",
                          options={"xatol": 1e-5})
    return float(res.x)


def zipf_shares(n: int, s: float) -> np.ndarray:
    w = np.arange(1, n + 1, dtype=float) ** -s
    return w / w.sum()


def fit_popularity(key_counts: dict[int, int], sample_rate: float) -> dict[str, Any]:
    """kvload's `popularity` and `keys` for the counted keys (a hash sample at
    `sample_rate` of all keys: ranks among them stand for ranks / sample_rate)."""
    counts = np.sort(np.fromiter(key_counts.values(), dtype=float))[::-1]
    n_seen = len(counts)
    keys = max(1, round(n_seen / sample_rate))
    if n_seen < 2:
        return {"keys": keys, "spec": "uniform",
                "about": {"model": "uniform", "why": "fewer than two keys seen"}}
    head = counts[counts >= HEAD_MIN_COUNT]
    if len(head) < 10:
        head = counts[: max(10, len(head))]
    s = zipf_mle(head)
    emp = np.cumsum(counts) / counts.sum()
    fit = np.cumsum(zipf_shares(n_seen, s))
    ks = float(np.max(np.abs(emp - fit)))
    about: dict[str, Any] = {
        "zipf_s": round(s, 4), "ks_distance": round(ks, 4), "head_ranks": len(head),
        "keys_seen": int(n_seen), "key_sample_rate": sample_rate,
        "singletons": int(np.count_nonzero(counts == 1)),
        "top_shares": [round(float(x), 5) for x in (counts[:10] / counts.sum())],
    }
    if ks <= ZIPF_KS_LIMIT:
        return {"keys": keys, "spec": f"zipf:{s:.4f}", "about": about | {"model": "zipf"}}
    return {"keys": keys, "spec": table(counts, sample_rate),
            "about": about | {"model": "table",
                              "why": f"KS distance {ks:.3f} to the Zipf fit exceeds "
                                     f"{ZIPF_KS_LIMIT}"}}


def table(counts: np.ndarray, sample_rate: float) -> str:
    """`table:KEYS:MASS,...`: log-spaced rank buckets (hottest first) of the counts in
    rank order, key counts scaled by 1 / sample_rate."""
    n = len(counts)
    edges = np.unique(np.round(np.geomspace(1, n, TABLE_BUCKETS + 1)).astype(int))
    edges = np.concatenate([[0], edges])
    edges[-1] = n
    total = counts.sum()
    parts = []
    for a, b in itertools.pairwise(edges):
        if b <= a:
            continue
        k = max(1, round((b - a) / sample_rate))
        parts.append(f"{k}:{counts[a:b].sum() / total:.6g}")
    return "table:" + ",".join(parts)


def extend_key_buckets(doc: dict[str, Any], extra_keys: int) -> None:
    """A model whose keyspace grew by `extra_keys` keys nobody requested (a capture's
    server holds more than the window touched): its `key_buckets` gain a coldest bucket
    of them with the sizes and TTLs of all keys, as its popularity table gains one."""
    buckets = doc.get("key_buckets")
    if not buckets or extra_keys <= 0:
        return
    sizes: Counter[int] = Counter()
    ttls: Counter[int] = Counter()
    for b in buckets:
        for v, w in parse_weighted(str(b.get("value_size", "0"))):
            sizes[int(v)] += round(w * b["keys"] * 1000)
        if "ttl" in b:
            for v, w in parse_weighted(str(b["ttl"])):
                ttls[int(v)] += round(w * b["keys"] * 1000)
    cold: dict[str, Any] = {"keys": int(extra_keys)}
    if sizes:
        cold["value_size"] = weighted_list(sizes)
    if ttls:
        cold["ttl"] = weighted_list(ttls)
    buckets.append(cold)
