"""`load.workload_file`, which kvload reads: a regular file of bounded size that parses as
a kvload workload file (JSON, or TOML by its name) with known keys only, checked before any
server starts. Its `server` key is refused: load goes to the server kvtune started."""

from __future__ import annotations

import json
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

MAX_BYTES = 1 << 20
TOP_KEYS = {
    "protocol", "mode", "rate", "arrival", "connections", "pipeline", "max_outstanding",
    "duration", "warmup", "cpus", "keys", "key_size", "value_size", "popularity", "mix",
    "mget_size", "seed", "preload", "timeout", "spin_us", "realtime", "max_item_size",
    "phases", "ttl", "rate_scale", "about",
}
PHASE_KEYS = {"duration", "rate", "value_size", "popularity", "mix"}
MAX_PHASES = 1000


def check_workload_file(name: str) -> None:
    """Raises ValueError naming what is wrong (never the file's content)."""
    if not name or any(c in name for c in "\x00\n\r") or len(name) > 4096:
        raise ValueError("not a file name")
    p = Path(name)
    try:
        st = p.stat()
    except OSError as e:
        raise ValueError(f"{name}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{name} is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{name} is not a regular file")
    if st.st_size > MAX_BYTES:
        raise ValueError(f"{name}: {st.st_size} bytes; a workload file may hold at most "
                         f"{MAX_BYTES // 1024} KiB")
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ValueError(f"{name}: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
        doc: Any = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        kind = "TOML" if p.suffix == ".toml" else "JSON"
        raise ValueError(f"{name} is not a {kind} workload file (see docs/kvload.md)") \
            from None
    if not isinstance(doc, dict):
        raise ValueError(f"{name}: a workload file is a JSON object of kvload settings")
    if "server" in doc:
        raise ValueError(f"{name}: key 'server' is refused: kvtune sends the load to the "
                         "server it started")
    unknown = sorted(str(k) for k in doc if k not in TOP_KEYS)
    if unknown:
        raise ValueError(f"{name}: unknown key(s) {', '.join(unknown)[:200]}")
    phases = doc.get("phases", [])
    if not isinstance(phases, list) or len(phases) > MAX_PHASES:
        raise ValueError(f"{name}: phases must be a list of at most {MAX_PHASES} phases")
    for i, ph in enumerate(phases):
        if not isinstance(ph, dict):
            raise ValueError(f"{name}: phases[{i}] is not an object")
        bad = sorted(str(k) for k in ph if k not in PHASE_KEYS)
        if bad:
            raise ValueError(f"{name}: phases[{i}]: unknown key(s) {', '.join(bad)[:200]}")
