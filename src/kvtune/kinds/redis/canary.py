"""What `kvtune canary` reads from a running Redis (and Valkey, which speaks the same
commands), through its own connection and without touching the traffic: per look `INFO`
(CPU, hits, misses, evictions, errors, refused connections, memory), `INFO commandstats`
(calls and microseconds per command) and `LATENCY HISTOGRAM` (each command's cumulative
power-of-two microsecond buckets), reduced to the counters kvtune/canary/watch.py compares.

The administrative commands kvtune itself sends (INFO, LATENCY, CONFIG, ...) are left out
of the requests and the latency. A live rollback is `CONFIG SET` of each directive the
export changed, to the value its rollback file names, read back with `CONFIG GET`; each
value is journalled first (undo kind `canary-config`), so `kvtune restore` puts back what
a killed session had changed."""

from __future__ import annotations

import re
from typing import Any

from kvtune.errors import UserError
from kvtune.host.journal import register_undo, undo_port, undo_value
from kvtune.kinds.redis.export import read_conf
from kvtune.telemetry.sampler import StatsConn, parse_number

# commands an operator's tooling (and kvtune) sends, not the traffic's
ADMIN = frozenset({"info", "latency", "config", "ping", "client", "hello", "command",
                   "slowlog", "memory", "debug", "monitor", "auth", "select", "quit",
                   "cluster", "role", "time", "dbsize", "lastsave"})
# directives naming files or sockets: never set by a rollback or an undo
NEVER = frozenset({"dir", "dbfilename", "logfile", "appendfilename", "appenddirname",
                   "unixsocket", "pidfile", "aclfile", "include", "loadmodule", "bind",
                   "port", "requirepass", "masterauth", "rename-command"})
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,63}$")
_SIZE = re.compile(r"^([0-9]+)(k|kb|m|mb|g|gb)?$")
_UNITS = {None: 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3,
          "gb": 1024**3}


def _resp(conn: StatsConn) -> Any:
    """One RESP2/RESP3 reply: strings, integers, arrays (maps as flat lists); an error
    reply raises ValueError."""
    line = conn.until(b"\r\n")[:-2]
    t, rest = line[:1], line[1:]
    if t in (b"+", b"("):
        return rest.decode(errors="replace")
    if t == b"-":
        raise ValueError(rest.decode(errors="replace"))
    if t == b":":
        return int(rest)
    if t in (b"$", b"="):
        n = int(rest)
        return None if n < 0 else conn.exact(n + 2)[:-2].decode(errors="replace")
    if t in (b"*", b"%", b"~"):
        n = int(rest) * (2 if t == b"%" else 1)
        return None if n < 0 else [_resp(conn) for _ in range(max(n, 0))]
    raise ValueError(f"unexpected reply {line[:60]!r}")


def command(conn: StatsConn, *words: str) -> Any:
    """Send one command (each word a bulk string) and read its reply."""
    out = [f"*{len(words)}\r\n".encode()]
    for w in words:
        b = w.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    conn.s.sendall(b"".join(out))
    return _resp(conn)


def _info(conn: StatsConn, *sections: str) -> dict[str, str]:
    text = command(conn, "INFO", *sections)
    out: dict[str, str] = {}
    for line in str(text).splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out


def _f(info: dict[str, str], key: str) -> float:
    v = parse_number(info.get(key, "0"))
    return float(v) if isinstance(v, int | float) else 0.0


def _commandstats(info: dict[str, str]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for k, v in info.items():
        if not k.startswith("cmdstat_"):
            continue
        name = k[len("cmdstat_"):].lower()
        fields = dict(p.split("=", 1) for p in v.split(",") if "=" in p)
        out[name] = {f: float(x) for f, x in fields.items() if f in ("calls", "usec",
                                                                      "failed_calls")}
    return out


def _histograms(reply: Any) -> dict[str, list[list[float]]]:
    """LATENCY HISTOGRAM's reply: command -> [[bucket upper bound µs, cumulative count]]."""
    out: dict[str, list[list[float]]] = {}
    if not isinstance(reply, list):
        return out
    for name, body in zip(reply[::2], reply[1::2], strict=False):
        if not isinstance(body, list):
            continue
        fields = dict(zip(body[::2], body[1::2], strict=False))
        h = fields.get("histogram_usec") or []
        out[str(name).lower()] = [[float(b), float(c)] for b, c in zip(h[::2], h[1::2],
                                                                        strict=False)]
    return out


def normal(value: str) -> str:
    """A directive's value as CONFIG GET shows it: sizes in bytes, words lower-case."""
    v = " ".join(value.strip().strip('"').split()).lower()
    m = _SIZE.fullmatch(v)
    if m:
        return str(int(m.group(1)) * _UNITS[m.group(2)])
    return v


def _check_directive(name: str) -> None:
    if not _NAME.fullmatch(name) or name in NEVER or name.startswith("tls-"):
        raise ValueError(f"directive {name!r} is not one a canary rollback sets")


class Reader:
    """The canary's reader of an INFO-speaking server (kinds/base.py, Kind.canary)."""

    latency = True
    live_settings = True
    undo_kind = "canary-config"

    def snapshot(self, conn: StatsConn) -> dict[str, Any]:
        info = _info(conn, "default", "commandstats")
        hist = _histograms(command(conn, "LATENCY", "HISTOGRAM"))
        cmds = {c: s for c, s in _commandstats(info).items()
                if c.split("|")[0] not in ADMIN}
        latency = {c: {"calls": s.get("calls", 0.0), "usec": s.get("usec", 0.0),
                       "hist": hist.get(c, [])} for c, s in cmds.items()}
        return {"uptime_s": _f(info, "uptime_in_seconds"),
                "cpu_s": _f(info, "used_cpu_user") + _f(info, "used_cpu_sys"),
                "requests": sum(s.get("calls", 0.0) for s in cmds.values()),
                "hits": _f(info, "keyspace_hits"), "misses": _f(info, "keyspace_misses"),
                "evictions": _f(info, "evicted_keys"),
                "errors": _f(info, "total_error_replies"),
                "refused": _f(info, "rejected_connections"),
                "memory_bytes": _f(info, "used_memory"), "latency": latency}

    def settings(self, conn: StatsConn, names: list[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for n in names:
            reply = command(conn, "CONFIG", "GET", n)
            if isinstance(reply, list) and len(reply) >= 2:
                out[n] = str(reply[1])
        return out

    def set_setting(self, conn: StatsConn, name: str, value: str) -> None:
        _check_directive(name)
        try:
            command(conn, "CONFIG", "SET", name, value)
        except ValueError as e:
            raise UserError(f"CONFIG SET {name} {value!r} refused: {e} (a directive that "
                            "needs a restart is rolled back by installing the rollback "
                            "file and restarting)") from None

    def same(self, expected: str, found: str) -> bool:
        """Whether a directive read back (CONFIG GET) is the value written."""
        return normal(expected) == normal(found)

    def rollback_settings(self, change: str, rollback: str) -> dict[str, str]:
        """directive -> value: each directive the export's file sets, to the value its
        rollback file gives it (UserError naming those it does not give)."""
        changed, back = read_conf(change), read_conf(rollback)
        missing = [d for d in changed if d not in back]
        if missing:
            raise UserError(f"the rollback file does not set {', '.join(missing)}: they "
                            "can only be rolled back by a restart without the include")
        for d in changed:
            try:
                _check_directive(d)
            except ValueError as e:
                raise UserError(f"the export's file: {e}") from None
        return {d: back[d] for d in changed}

    def changes(self, change: str, current: str) -> dict[str, tuple[str, str | None]]:
        """directive -> (its value in `change`, in `current`, None when that file does not
        set it): each directive the two config files set differently, the ones that name
        an instance's own files, port or address (two servers on one host differ there)
        left out."""
        new, old = read_conf(change), read_conf(current)
        out: dict[str, tuple[str, str | None]] = {}
        for d in sorted(set(new) | set(old)):
            if d in NEVER or d.startswith("tls-") or not _NAME.fullmatch(d):
                continue
            a, b = new.get(d), old.get(d)
            if a is None:
                continue  # the change's file leaves it at the server's default
            if b is None or normal(a) != normal(b):
                out[d] = (a, b)
        return out


READER = Reader()


def _undo_args(args: dict[str, Any]) -> tuple[int, str, str]:
    """(port, directive, value) of a journaled undo, checked (a journal is input)."""
    name = args.get("directive")
    if not isinstance(name, str):
        raise ValueError("the directive to put back is not text")
    _check_directive(name)
    return undo_port(args), name, undo_value(args)


def _undo(args: dict[str, Any]) -> str:
    """Put back a directive a killed canary session had changed (journal undo)."""
    port, name, value = _undo_args(args)
    conn = StatsConn("127.0.0.1", port)
    try:
        command(conn, "CONFIG", "SET", name, value)
        got = READER.settings(conn, [name]).get(name)
    except (OSError, ConnectionError) as e:
        raise ValueError(f"127.0.0.1:{port}: {e}") from None
    finally:
        conn.close()
    if got is None or normal(got) != normal(value):
        raise ValueError(f"{name} reads back {got!r}, not {value!r}")
    return f"{name} {value!r} put back on 127.0.0.1:{port}"


register_undo("canary-config", _undo, _undo_args)
