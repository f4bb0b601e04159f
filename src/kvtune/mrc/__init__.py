"""Miss-ratio curves: the hit ratio a cache reaches as a function of its memory, from the
operator's traffic (a trace, a capture's trace, a workload model), for a byte-LRU cache,
for memcached as it allocates (slab classes, per-class segmented LRU, pages, TTLs) and for
Redis and Valkey under `maxmemory` (sampled LRU/LFU eviction, per-key bytes).

- `requests`: the request stream, read from untrusted files by kvtune's readers;
- `lru`: exact stack distances and SHARDS sampling (fixed rate, fixed size);
- `model`: what a server kind gives (kinds/<kind>/mrc.py: its allocation and eviction,
  simulated, and its protocol for the check);
- `curve`: the curve record, the smallest memory for a target hit ratio;
- `check`: the same stream replayed to a real server on loopback, its hit ratio measured;
- `command`: `kvtune workload mrc`.
"""
