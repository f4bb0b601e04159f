"""Capturing a running Valkey's traffic (`kvtune workload capture valkey://...`): Redis's
MONITOR and keyspace sampling, which Valkey 8 answers alike."""

from __future__ import annotations

from kvtune.kinds.redis.capture import Capturer


class ValkeyCapturer(Capturer):
    max_note = " (MONITOR costs Valkey much of its throughput)"


CAPTURER = ValkeyCapturer()
