"""redis-server: directives as `--name value` arguments, INFO over RESP."""

from __future__ import annotations

import socket
from typing import Any, ClassVar

from kvtune.knobs.appliers.base import Launch
from kvtune.safety import args as scan
from kvtune.targets.base import ServerTarget

_INT = r"[0-9]{1,12}"
_SIZE = r"[0-9]{1,12}([kmg]b?|b)?"


def resp_command(*args: str) -> bytes:
    out = f"*{len(args)}\r\n".encode()
    for a in args:
        b = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(b), b)
    return out


class RedisTarget(ServerTarget):
    kind = "redis"
    label = "Redis"  # in messages (a kind built on this one says its own)
    default_binary = "redis-server"
    protocol = "resp"
    version_args = ("--version",)
    version_banner = r"^Redis server v=\d+\.\d+"

    # target.args (`--name value` pairs) and inline redis_directive knobs: only directives
    # that change how the server serves, never where it listens, whether it daemonizes,
    # which files it reads or writes, or whom it connects to (kvtune.safety.args).
    # Directive -> pattern of its one value.
    SAFE_DIRECTIVES: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("maxmemory", "proto-max-bulk-len", "client-query-buffer-limit",
                         "active-defrag-ignore-bytes"), _SIZE),
        "maxmemory-policy": "noeviction|allkeys-lru|allkeys-lfu|allkeys-random|volatile-lru"
                            "|volatile-lfu|volatile-random|volatile-ttl",
        "appendfsync": "everysec|always|no",
        **dict.fromkeys((
            "maxmemory-samples", "maxmemory-eviction-tenacity", "hz", "io-threads",
            "maxclients", "timeout", "tcp-keepalive", "tcp-backlog", "active-expire-effort",
            "hash-max-listpack-entries", "hash-max-listpack-value", "hash-max-ziplist-entries",
            "hash-max-ziplist-value", "list-compress-depth", "set-max-intset-entries",
            "set-max-listpack-entries", "set-max-listpack-value", "zset-max-listpack-entries",
            "zset-max-listpack-value", "zset-max-ziplist-entries", "zset-max-ziplist-value",
            "stream-node-max-bytes", "stream-node-max-entries", "hll-sparse-max-bytes",
            "slowlog-max-len", "latency-monitor-threshold", "lua-time-limit",
            "busy-reply-threshold", "active-defrag-threshold-lower",
            "active-defrag-threshold-upper", "active-defrag-cycle-min",
            "active-defrag-cycle-max", "active-defrag-max-scan-fields", "lfu-log-factor",
            "lfu-decay-time"), _INT),
        **dict.fromkeys(("list-max-listpack-size", "list-max-ziplist-size",
                         "slowlog-log-slower-than"), r"-?[0-9]{1,12}"),
        **dict.fromkeys((
            "dynamic-hz", "io-threads-do-reads", "activerehashing", "activedefrag",
            "lazyfree-lazy-eviction", "lazyfree-lazy-expire", "lazyfree-lazy-server-del",
            "lazyfree-lazy-user-del", "lazyfree-lazy-user-flush", "replica-lazy-flush",
            "jemalloc-bg-thread", "disable-thp", "latency-tracking", "always-show-logo",
            "set-proc-title"), "yes|no"),
    }
    UNSAFE_DIRECTIVES: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("bind", "port", "unixsocket", "unixsocketperm", "tls-port",
                         "bind-source-addr", "protected-mode"),
                        "changes where the server listens (kvtune binds it to target.host "
                        "and target.port)"),
        **dict.fromkeys(("daemonize", "supervised"),
                        "daemonizes: the server would outlive kvtune"),
        **dict.fromkeys(("dir", "dbfilename", "logfile", "pidfile", "appendfilename",
                         "appenddirname", "save", "appendonly", "cluster-config-file",
                         "syslog-enabled"), "makes the server write files"),
        **dict.fromkeys(("include", "loadmodule", "aclfile", "tls-cert-file", "tls-key-file",
                         "tls-ca-cert-file"), "makes the server read or load files"),
        "rename-command": "renames commands kvtune and kvload use",
        **dict.fromkeys(("replicaof", "slaveof", "masterauth", "masteruser"),
                        "makes the server connect to another server"),
        **dict.fromkeys(("enable-debug-command", "enable-module-command",
                         "enable-protected-configs"),
                        "enables commands that change the server at run time"),
        **dict.fromkeys(("requirepass", "user"), "kvload cannot authenticate"),
        **dict.fromkeys(("oom-score-adj", "oom-score-adj-values"),
                        "makes the server write /proc files"),
    }

    @classmethod
    def directive_pattern(cls, name: str) -> str:
        if name in cls.SAFE_DIRECTIVES:
            return cls.SAFE_DIRECTIVES[name]
        if name in cls.UNSAFE_DIRECTIVES:
            raise ValueError(f"{cls.label} directive {name!r} is refused: it "
                             f"{cls.UNSAFE_DIRECTIVES[name]}")
        raise ValueError(f"{cls.label} directive {name!r} is not on kvtune's list of safe "
                         f"directives ({scan.listing(cls.SAFE_DIRECTIVES)})")

    @classmethod
    def check_args(cls, args: list[str]) -> None:
        i = 0
        while i < len(args):
            w = scan.word(args[i], i)
            if not w.startswith("--"):
                raise ValueError(f"item {i}: {w!r} is not a --directive (a configuration "
                                 "file or positional argument is refused)")
            try:
                pattern = cls.directive_pattern(w[2:])
            except ValueError as e:
                raise ValueError(f"item {i}: {e}") from None
            if i + 1 >= len(args):
                raise ValueError(f"item {i}: {w} needs a value")
            scan.check_value(scan.word(args[i + 1], i + 1), pattern, f"item {i + 1}: {w}")
            i += 2

    @classmethod
    def arg_names(cls, args: list[str]) -> dict[str, str]:
        """The directives `args` (already checked) set, mapped to the items that set them."""
        return {args[i][2:]: f"{args[i]} {args[i + 1]}" for i in range(0, len(args) - 1, 2)}

    def argv(self, launch: Launch) -> list[str]:
        argv = [self.binary, "--port", str(self.port), "--bind", self.host,
                "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "",
                *self.spec.args]
        if not _loopback(self.host):
            # A load host reaches it (load.host; spec.py allows no other non-loopback
            # address): protected mode would answer every client not on loopback -DENIED.
            argv += ["--protected-mode", "no"]
        for name, value in launch.options.items():
            argv += [f"--{name}", value]
        return argv

    def _call(self, *args: str, timeout: float = 2.0) -> bytes:
        with socket.create_connection((self.host, self.port), timeout=timeout) as s:
            s.sendall(resp_command(*args))
            buf = s.recv(65536)
            if buf.startswith(b"$"):
                header, _, rest = buf.partition(b"\r\n")
                need = int(header[1:])
                while len(rest) < need + 2 and need >= 0:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    rest += chunk
                return rest[:need]
            return buf

    def ping(self, timeout: float = 1.0) -> bool:
        try:
            return self._call("PING", timeout=timeout).startswith(b"+PONG")
        except OSError:
            return False

    def stats(self) -> dict[str, Any]:
        try:
            raw = self._call("INFO", "everything").decode(errors="replace")
        except OSError:
            return {}
        info: dict[str, Any] = {}
        for line in raw.splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                try:
                    info[k] = int(v)
                except ValueError:
                    try:
                        info[k] = float(v)
                    except ValueError:
                        info[k] = v
        return {"info": info}


def _loopback(host: str) -> bool:
    import ipaddress

    return host == "localhost" or ipaddress.ip_address(host).is_loopback
