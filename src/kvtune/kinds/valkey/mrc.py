"""Valkey's memory under `maxmemory`: Redis's model (kinds/redis/mrc.py) and eviction;
Valkey 8.0 stores a small key in fewer bytes (measured here: 139.8 against Redis 7.0's
155.4 bytes per key for 24-byte keys with values of 16-100 bytes, docs/evaluation.md), so
the per-key bytes are scaled by that ratio."""

from __future__ import annotations

from kvtune.kinds.redis.mrc import model

MODEL = model("valkey", bytes_scale=0.90, notes=(
    "per-key bytes: Redis 7.0's layout scaled by 0.90, as measured on Valkey 8.0.1 for "
    "small items (docs/evaluation.md); measure them on your server for larger ones",))
