"""What `kvtune canary` reads from a running memcached, through its own stats connection and
without touching the traffic: one `stats` request per look, reduced to the counters the
canary compares (kvtune/canary/watch.py turns two of them into an interval's figures).

memcached has no latency figures of its own (1.6 core), so a snapshot has none; its
settings need a restart to change (no live rollback: `settings` reads `stats settings`
for the read-back only)."""

from __future__ import annotations

from typing import Any

from kvtune.errors import UserError
from kvtune.telemetry.sampler import StatsConn, parse_number

# the requests a server answered: every verb's counter (cmd_get counts each key of a multiget)
REQUESTS = ("cmd_get", "cmd_set", "cmd_touch", "delete_hits", "delete_misses", "incr_hits",
            "incr_misses", "decr_hits", "decr_misses", "cas_hits", "cas_misses", "cas_badval")
# requests the server could not serve for lack of memory or size, and allocation failures
ERRORS = ("store_too_large", "store_no_memory", "malloc_fails", "response_obj_oom",
          "read_buf_oom")
REFUSED = ("rejected_connections", "listen_disabled_num")


def _lines(raw: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for line in raw.decode(errors="replace").split("\r\n"):
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == "STAT":
            out[parts[1]] = parse_number(parts[2])
    return out


def _num(stats: dict[str, Any], key: str) -> float:
    v = stats.get(key, 0)
    return float(v) if isinstance(v, int | float) else 0.0


class Reader:
    """The canary's reader of memcached (kinds/base.py, Kind.canary)."""

    latency = False  # no latency figures of its own
    live_settings = False  # every option needs a restart

    def snapshot(self, conn: StatsConn) -> dict[str, Any]:
        conn.s.sendall(b"stats\r\n")
        s = _lines(conn.until(b"END\r\n"))
        return {"uptime_s": _num(s, "uptime"),
                "cpu_s": _num(s, "rusage_user") + _num(s, "rusage_system"),
                "requests": sum(_num(s, k) for k in REQUESTS),
                "hits": _num(s, "get_hits"), "misses": _num(s, "get_misses"),
                "evictions": _num(s, "evictions"),
                "errors": sum(_num(s, k) for k in ERRORS),
                "refused": sum(_num(s, k) for k in REFUSED),
                "memory_bytes": _num(s, "bytes"), "latency": {}}

    def settings(self, conn: StatsConn, names: list[str]) -> dict[str, str]:
        conn.s.sendall(b"stats settings\r\n")
        s = _lines(conn.until(b"END\r\n"))
        return {n: str(s[n]) for n in names if n in s}

    def set_setting(self, conn: StatsConn, name: str, value: str) -> None:
        raise UserError(f"memcached {name}: memcached options need a restart; kvtune canary "
                        "does not restart a server it did not start")

    def same(self, expected: str, found: str) -> bool:
        return expected.strip() == found.strip()

    def rollback_settings(self, change: str, rollback: str) -> dict[str, str]:
        raise UserError("memcached's rollback (rollback/memcached/memcached.conf) needs a "
                        "restart of the canary with that file: install it as the export's "
                        "install line says; kvtune canary applies live rollbacks only")


READER = Reader()
