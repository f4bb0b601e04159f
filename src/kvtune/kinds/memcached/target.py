"""memcached: argv built structurally (flags, one combined `-o`), stats over the text protocol."""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any, ClassVar

from kvtune.kinds.memcached.appliers import memcached_argv_options
from kvtune.knobs.appliers.base import Launch
from kvtune.safety import args as scan
from kvtune.targets.base import ServerTarget
from kvtune.telemetry.sampler import parse_number

_INT = r"[0-9]{1,12}"
_FLOAT = r"[0-9]{1,12}(\.[0-9]{1,12})?"
_SIZE = r"[0-9]{1,12}[kKmMgG]?"


class MemcachedTarget(ServerTarget):
    kind = "memcached"
    default_binary = "memcached"
    protocol = "memcache"
    version_args = ("-V",)
    version_banner = r"^memcached \d+\.\d+"
    # memcached 1.6 exits on SIGTERM only when its background threads next wake: about 0.9 s
    # after a measurement's load (4 ms when it served nothing), a second of every
    # repetition spent waiting. Its items are thrown away with it either way.
    stop_grace_s = 0.1

    # target.args and inline memcached_flag knobs: only flags that change how the server
    # serves, never where it listens, whether it daemonizes or which files it reads or
    # writes (kvtune.safety.args). Flag -> pattern of its value (None: takes no value).
    SAFE_FLAGS: ClassVar[dict[str, str | None]] = {
        "-m": _INT, "--memory-limit": _INT, "-c": _INT, "--conn-limit": _INT,
        "-t": _INT, "--threads": _INT, "-R": _INT, "--max-reqs-per-event": _INT,
        "-I": _SIZE, "--max-item-size": _SIZE, "-n": _INT, "--slab-min-size": _INT,
        "-f": _FLOAT, "--slab-growth-factor": _FLOAT, "-b": _INT, "--listen-backlog": _INT,
        "-B": "auto|ascii|binary", "--protocol": "auto|ascii|binary",
        "-C": None, "--disable-cas": None, "-M": None, "--disable-evictions": None,
        "-L": None, "--enable-largepages": None, "-X": None, "--disable-dumping": None,
        "-W": None, "--disable-watch": None, "-o": "options", "--extended": "options",
    }
    # A long flag's short form: one name per setting (how the catalog's knobs name them).
    FLAG_ALIASES: ClassVar[dict[str, str]] = {
        "--memory-limit": "-m", "--conn-limit": "-c", "--threads": "-t",
        "--max-reqs-per-event": "-R", "--max-item-size": "-I", "--slab-min-size": "-n",
        "--slab-growth-factor": "-f", "--listen-backlog": "-b", "--protocol": "-B",
        "--disable-cas": "-C", "--disable-evictions": "-M", "--enable-largepages": "-L",
        "--disable-dumping": "-X", "--disable-watch": "-W", "--extended": "-o",
    }
    UNSAFE_FLAGS: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("-l", "--listen", "-p", "--port", "-U", "--udp-port", "-s",
                         "--unix-socket", "-a", "--unix-mask"),
                        "changes where the server listens (kvtune binds it to target.host "
                        "and target.port)"),
        **dict.fromkeys(("-d", "--daemon"), "daemonizes: the server would outlive kvtune"),
        **dict.fromkeys(("-P", "--pidfile", "-e", "--memory-file", "-r",
                         "--enable-coredumps"), "makes the server write files"),
        **dict.fromkeys(("-Y", "--auth-file", "-S", "--enable-sasl", "-Z", "--enable-ssl"),
                        "makes the server read credential files"),
        **dict.fromkeys(("-u", "--user"), "changes the user the server runs as"),
        **dict.fromkeys(("-k", "--lock-memory"), "locks all of the server's memory"),
        **dict.fromkeys(("-A", "--enable-shutdown"), "lets a client shut the server down"),
        **dict.fromkeys(("-v", "-vv", "-vvv", "--verbose"),
                        "logs every request (the log grows without bound)"),
        **dict.fromkeys(("-h", "--help", "-V", "--version", "-i", "--license"),
                        "prints and exits instead of serving"),
    }
    # `-o` extended options (also inline memcached_option knobs): name -> value pattern.
    SAFE_OPTIONS: ClassVar[dict[str, str | None]] = {
        **dict.fromkeys(("hashpower", "slab_automove", "slab_automove_window",
                         "lru_crawler_sleep", "lru_crawler_tocrawl", "hot_lru_pct",
                         "warm_lru_pct", "temporary_ttl", "idle_timeout", "tail_repair_time",
                         "worker_logbuf_size", "watcher_logbuf_size", "slab_chunk_max",
                         "read_buf_mem_limit", "resp_obj_mem_limit"), _INT),
        **dict.fromkeys(("slab_automove_ratio", "hot_max_factor", "warm_max_factor"), _FLOAT),
        "hash_algorithm": "murmur3|jenkins|xxh3",
        "slab_sizes": r"[0-9]+(-[0-9]+){0,63}",
        **dict.fromkeys(("no_hashexpand", "maxconns_fast", "no_maxconns_fast", "slab_reassign",
                         "no_slab_reassign", "lru_crawler", "no_lru_crawler", "lru_maintainer",
                         "no_lru_maintainer", "modern", "no_modern", "lru_segmented",
                         "no_lru_segmented", "track_sizes", "inline_ascii_resp",
                         "no_inline_ascii_resp"), None),
    }
    UNSAFE_OPTIONS: ClassVar[dict[str, str]] = {
        "ext_": "extstore writes files", "memory_file": "makes the server write files",
        "proxy_": "the proxy loads and runs Lua files", "ssl_": "TLS reads key files",
        "drop_privileges": "changes the server's privileges",
        "no_drop_privileges": "changes the server's privileges",
    }

    def argv(self, launch: Launch) -> list[str]:
        argv = [self.binary, "-l", self.host, "-p", str(self.port), "-U", "0"]
        if os.geteuid() == 0:
            argv += ["-u", "root"]  # memcached refuses to run as root without it
        argv += list(self.spec.args)
        argv += launch.flags
        argv += memcached_argv_options(launch.options)
        return argv

    # -- what a study file may pass (target.args, inline knobs) ------------------------------

    @classmethod
    def flag_pattern(cls, flag: str) -> str | None:
        """The value pattern of a safe memcached flag (None: takes no value); raises
        ValueError naming the reason for any other flag."""
        if flag in cls.SAFE_FLAGS:
            return cls.SAFE_FLAGS[flag]
        if flag in cls.UNSAFE_FLAGS:
            raise ValueError(f"memcached {flag} is refused: it {cls.UNSAFE_FLAGS[flag]}")
        raise ValueError(
            f"memcached flag {flag!r} is not on kvtune's list of safe flags "
            f"({scan.listing(f for f in cls.SAFE_FLAGS if f.startswith('--'))} and their "
            "short forms)")

    @classmethod
    def option_pattern(cls, key: str) -> str | None:
        """The value pattern of a safe `-o` option (None: a bare option); ValueError else."""
        if key in cls.SAFE_OPTIONS:
            return cls.SAFE_OPTIONS[key]
        for prefix, why in cls.UNSAFE_OPTIONS.items():
            if key.startswith(prefix):
                raise ValueError(f"memcached -o {key} is refused: {why}")
        raise ValueError(f"memcached -o option {key!r} is not on kvtune's list of safe "
                         f"options ({scan.listing(cls.SAFE_OPTIONS)})")

    @classmethod
    def check_options_list(cls, value: str, what: str) -> None:
        """A `-o a=b,c` value: every option safe, every value its pattern."""
        for part in value.split(","):
            key, sep, v = part.partition("=")
            try:
                pattern = cls.option_pattern(key)
            except ValueError as e:
                raise ValueError(f"{what}: {e}") from None
            if pattern is None:
                if sep:
                    raise ValueError(f"{what}: -o {key} takes no value")
            else:
                scan.check_value(v, pattern, f"{what}: -o {key}")

    @classmethod
    def check_args(cls, args: list[str]) -> None:
        def options(value: str, pattern: str, what: str) -> bool:
            if pattern != "options":
                return False
            cls.check_options_list(value, what)
            return True

        scan.check_flag_list(args, cls.flag_pattern, options,
                             positional="memcached takes no positional arguments")

    @classmethod
    def setting_name(cls, flag: str) -> str:
        return cls.FLAG_ALIASES.get(flag, flag)

    @classmethod
    def arg_names(cls, args: list[str]) -> dict[str, str]:
        """The settings `args` (already checked) set: a flag's canonical long name, and
        `-o name` for each option, mapped to the item that sets it."""
        out: dict[str, str] = {}
        i = 0
        while i < len(args):
            flag, attached = scan.split_long(args[i])
            name = cls.setting_name(flag)
            pattern = cls.SAFE_FLAGS.get(flag)
            takes = pattern is not None and attached is None
            value = attached if attached is not None else (
                args[i + 1] if takes and i + 1 < len(args) else None)
            if pattern == "options" and value is not None:
                for part in value.split(","):
                    out[f"-o {part.partition('=')[0]}"] = f"{flag} {value}"
            else:
                out[name] = args[i] + (f" {value}" if takes and value is not None else "")
            i += 2 if takes else 1
        return out

    def _request(self, cmd: bytes, end: tuple[bytes, ...] = (b"END\r\n",),
                 timeout: float = 2.0) -> bytes:
        with socket.create_connection((self.host, self.port), timeout=timeout) as s:
            s.sendall(cmd)
            buf = b""
            while not buf.endswith(end):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            return buf

    def ping(self, timeout: float = 1.0) -> bool:
        try:
            return self._request(b"version\r\n", (b"\r\n",), timeout).startswith(b"VERSION")
        except OSError:
            return False

    def raw_stats(self, group: str = "") -> dict[str, str]:
        """One `stats [group]` answer as the server wrote it (values as text)."""
        cmd = f"stats {group}".strip().encode() + b"\r\n"
        out: dict[str, str] = {}
        for line in self._request(cmd).decode(errors="replace").splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[0] == "STAT":
                out[parts[1]] = parts[2]
        return out

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for group, key in (("", "stats"), ("settings", "settings"), ("slabs", "slabs"),
                           ("items", "items")):
            with contextlib.suppress(OSError):
                out[key] = {k: parse_number(v) for k, v in self.raw_stats(group).items()}
        return out
