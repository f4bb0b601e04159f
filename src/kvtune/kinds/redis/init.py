"""What `kvtune init` needs of Redis: where the package keeps redis.conf, the file a running
server was started with (its argv when the process title still shows it, else `INFO
server`'s config_file, asked on loopback), and the knobs a first study searches. Valkey's
part builds on it with its own names."""

from __future__ import annotations

from kvtune.errors import HarnessError


class Init:
    """kvtune init's part of the Redis kind (kinds/base.py, Kind.init)."""

    config_paths: tuple[str, ...] = ("/etc/redis/redis.conf",)
    prefix = "redis"  # the catalog's knob family
    scheme = "redis"  # the capture URL's scheme (workload/capture.py)

    def recognizes(self, text: str) -> bool:
        """Whether `text` reads as a redis.conf: its kind's reader takes every line."""
        from kvtune.kind_registry import get, load

        reader = load(get(self.scheme).config_reader or "")
        lines = [ln.strip() for ln in text.splitlines()]
        lines = [ln for ln in lines if ln and not ln.startswith("#")]
        return bool(lines) and all(reader.line_problem(ln) is None for ln in lines)

    def config_path_in_argv(self, argv: list[str]) -> str | None:
        """`redis-server /etc/redis/redis.conf ...`: the file, when the process title has not
        replaced argv (it does unless `set-proc-title no`)."""
        if len(argv) > 1 and argv[1].endswith(".conf") and not argv[1].startswith("-"):
            return argv[1]
        return None

    def argv_config(self, argv: list[str]) -> str | None:
        """Redis's argv is its process title, not its settings."""
        return None

    def live_config_path(self, host: str, port: int) -> str | None:
        """The file the server says it was started with (`INFO server`, config_file), or
        None when it was started without one or does not answer."""
        from kvtune.kinds.redis.capture import redis_info
        from kvtune.workload.capture import Conn, Target

        try:
            conn = Conn(Target(self.scheme, host, port))
        except HarnessError:
            return None
        try:
            info = redis_info(conn, "server")
        except HarnessError:
            return None
        finally:
            conn.close()
        path = info.get("config_file", "").strip()
        return path or None

    def knobs(self, settings: dict[str, str], server_cpus: int) -> list[str]:
        """The `knobs:` entries of a first study: I/O threads when the server has more than
        one CPU (the operator's io-threads always inside the range), the event loop's
        frequency, active rehashing."""
        p = self.prefix
        out = []
        try:
            io = int(settings.get("io-threads", "1"))
        except ValueError:
            io = 1
        top = min(8, max(server_cpus, io))
        if top >= 2:
            out.append(f"- {{name: {p}.io_threads, range: [1, {top}]}}  # I/O threads "
                       f"(the server has {server_cpus} CPU(s) here)")
        out += [f"- {p}.hz                        # the event loop's background tasks per second",
                f"- {p}.activerehashing           # incremental rehashing of the main table"]
        return out


INIT = Init()
