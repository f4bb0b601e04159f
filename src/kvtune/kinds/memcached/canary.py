"""What `kvtune canary` reads from a running memcached, through its own stats connection and
without touching the traffic: one `stats` request per look, reduced to the counters the
canary compares (kvtune/canary/watch.py turns two of them into an interval's figures).

memcached has no latency figures of its own (1.6 core), so a snapshot has none. Of its
options only the memory limit (`-m`) can change while it runs (`cache_memlimit`, read back
from `stats settings`): a rollback that puts back `-m` alone is applied live, journalled
first (undo kind `canary-memcached`); any other changed option needs a restart, which
kvtune canary does not do."""

from __future__ import annotations

from typing import Any

from kvtune.errors import UserError
from kvtune.host.journal import register_undo, undo_port, undo_value
from kvtune.quantities import is_count
from kvtune.telemetry.sampler import StatsConn, parse_number

# the requests a server answered: every verb's counter (cmd_get counts each key of a multiget)
REQUESTS = ("cmd_get", "cmd_set", "cmd_touch", "delete_hits", "delete_misses", "incr_hits",
            "incr_misses", "decr_hits", "decr_misses", "cas_hits", "cas_misses", "cas_badval")
# requests the server could not serve for lack of memory or size, and allocation failures
ERRORS = ("store_too_large", "store_no_memory", "malloc_fails", "response_obj_oom",
          "read_buf_oom")
REFUSED = ("rejected_connections", "listen_disabled_num")
MB = 1 << 20
DEFAULT_MEMORY_MB = "64"  # memcached's -m when its file does not say


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
    live_settings = True  # -m alone (cache_memlimit)
    undo_kind = "canary-memcached"

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
        """The live settings named, from `stats settings` ("-m": the memory limit in MB;
        -t, -c, -R, -b, -n, -f as given); the others are not reported."""
        conn.s.sendall(b"stats settings\r\n")
        s = _lines(conn.until(b"END\r\n"))
        out = {}
        if "-m" in names and isinstance(s.get("maxbytes"), int):
            out["-m"] = str(int(s["maxbytes"]) // MB)
        for flag, key in _LIVE.items():
            if flag in names and key in s:
                out[flag] = str(s[key])
        return out

    def set_setting(self, conn: StatsConn, name: str, value: str) -> None:
        mb = _memory_mb(name, value)
        conn.s.sendall(f"cache_memlimit {mb}\r\n".encode())
        reply = conn.until(b"\r\n").strip()
        if reply != b"OK":
            raise UserError(f"memcached cache_memlimit {mb} refused: {reply[:80]!r}")

    def same(self, expected: str, found: str) -> bool:
        a, b = expected.strip(), found.strip()
        try:
            return a == b or float(a) == float(b)
        except ValueError:
            return False

    def rollback_settings(self, change: str, rollback: str) -> dict[str, str]:
        """{"-m": MB} when the export changed memcached's memory limit alone (the one
        option it changes live); UserError naming the options that need a restart."""
        ours, back = _conf(change), _conf(rollback)
        changed = sorted(f for f in set(ours) | set(back) if ours.get(f) != back.get(f))
        restart = [f for f in changed if f != "-m"]
        if restart:
            raise UserError(f"the export changes memcached {', '.join(restart)}: options that "
                            "need a restart of the canary with the rollback file (install it "
                            "as the export's install line says); kvtune canary applies live "
                            "rollbacks only (memcached: -m, by cache_memlimit)")
        if not changed:
            return {}
        value = back.get("-m", DEFAULT_MEMORY_MB)
        _memory_mb("-m", value)
        return {"-m": value}

    def changes(self, change: str, current: str) -> dict[str, tuple[str, str | None]]:
        """option -> (its words in `change`, in `current`, None when that file does not
        give it): each option the two memcached.conf files give differently, the ones that
        name an instance's own port, address, user or files left out."""
        new, old = _conf(change), _conf(current)
        out: dict[str, tuple[str, str | None]] = {}
        for f in sorted(set(new) | set(old)):
            if f in _INSTANCE:
                continue
            a, b = new.get(f), old.get(f)
            if f == "-m":  # memcached's 64 MB when a file does not say
                a, b = a or DEFAULT_MEMORY_MB, b or DEFAULT_MEMORY_MB
            if a is None:
                continue
            if a != b:
                out[f] = (a, b)
        return out


# options that name one instance (two servers on one host differ there): not a change
_INSTANCE = frozenset({"-p", "-U", "-l", "-s", "-a", "-u", "-P", "-d", "-v", "-vv", "-vvv"})
# options `stats settings` reports as they were given (a read-back for kvtune canary)
_LIVE = {"-t": "num_threads", "-c": "maxconns", "-R": "reqs_per_event", "-b": "tcp_backlog",
         "-n": "chunk_size", "-f": "growth_factor"}


def _conf(text: str) -> dict[str, str]:
    """A memcached.conf's options: flag -> its words ("-o" lines merged, by option)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        words = line.split()
        if not words or not words[0].startswith("-"):
            continue
        if words[0] == "-o":
            for opt in " ".join(words[1:]).split(","):
                key, _, val = opt.partition("=")
                out[f"-o {key}"] = val
        else:
            out[words[0]] = " ".join(words[1:])
    return out


def _memory_mb(name: str, value: str) -> int:
    if name != "-m":
        raise UserError(f"memcached {name}: only -m changes while memcached runs")
    v = value.strip()
    if not is_count(v) or not 0 < int(v) <= 1 << 20:
        raise UserError(f"memcached -m {value!r}: not a memory limit in MB")
    return int(v)


READER = Reader()


def _undo_args(args: dict[str, Any]) -> tuple[int, int]:
    """(port, memory limit in MB) of a journaled undo, checked (a journal is input)."""
    port, value = undo_port(args), undo_value(args)
    try:
        return port, _memory_mb(str(args.get("directive")), value)
    except UserError as e:
        raise ValueError(str(e)) from None


def _undo(args: dict[str, Any]) -> str:
    """Put back the memory limit a killed canary session had changed (journal undo)."""
    port, mb = _undo_args(args)
    conn = StatsConn("127.0.0.1", port)
    try:
        READER.set_setting(conn, "-m", str(mb))
        got = READER.settings(conn, ["-m"]).get("-m")
    except (OSError, ConnectionError, UserError) as e:
        raise ValueError(f"127.0.0.1:{port}: {e}") from None
    finally:
        conn.close()
    if got != str(mb):
        raise ValueError(f"-m reads back {got!r}, not {mb}")
    return f"-m {mb} put back on 127.0.0.1:{port}"


register_undo("canary-memcached", _undo, _undo_args)
