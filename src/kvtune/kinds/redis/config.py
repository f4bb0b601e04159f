"""Reading a redis.conf (`target.config`, `export --from`): every directive, its `include`s
followed inside the configuration's own tree or the server's system directories, each
setting placed as targets/server_config.py says. A kind whose server reads the same
directives (Valkey) subclasses the reader with its own names."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any, ClassVar

from kvtune.targets.server_config import (
    MAX_INCLUDES,
    Budget,
    ServerConfig,
    Setting,
    include_allowed,
    read_text,
)

# Where an `include` may lead besides the configuration's own directory tree.
INCLUDE_ROOTS = ("/etc/redis", "/etc/redis-*", "/usr/share/redis")

# Every directive of redis.conf (Redis 6 and 7, with their older spellings): a directive
# named in a message is one of these; any other first word is "an unknown directive".
_REDIS_DIRECTIVE_NAMES = """
acl-pubsub-default aclfile acllog-max-len active-defrag-cycle-max active-defrag-cycle-min
active-defrag-ignore-bytes active-defrag-max-scan-fields active-defrag-threshold-lower
active-defrag-threshold-upper active-expire-effort activedefrag activerehashing
always-show-logo aof-load-truncated aof-rewrite-incremental-fsync aof-timestamp-enabled
aof-use-rdb-preamble appenddirname appendfilename appendfsync appendonly
auto-aof-rewrite-min-size auto-aof-rewrite-percentage bind bind-source-addr
busy-reply-threshold client-output-buffer-limit client-query-buffer-limit
cluster-allow-pubsubshard-when-down cluster-allow-reads-when-down
cluster-allow-replica-migration cluster-announce-bus-port cluster-announce-hostname
cluster-announce-human-nodename cluster-announce-ip cluster-announce-port
cluster-announce-tls-port cluster-config-file cluster-enabled cluster-link-sendbuf-limit
cluster-migration-barrier cluster-node-timeout cluster-port cluster-preferred-endpoint-type
cluster-replica-no-failover cluster-replica-validity-factor cluster-require-full-coverage
cluster-slave-no-failover cluster-slave-validity-factor crash-log-enabled
crash-memcheck-enabled daemonize databases dbfilename dir disable-thp dynamic-hz
enable-debug-command enable-module-command enable-protected-configs
hash-max-listpack-entries hash-max-listpack-value hash-max-ziplist-entries
hash-max-ziplist-value hide-user-data-from-log hll-sparse-max-bytes hz ignore-warnings
include io-threads io-threads-do-reads jemalloc-bg-thread latency-monitor-threshold
latency-tracking latency-tracking-info-percentiles lazyfree-lazy-eviction
lazyfree-lazy-expire lazyfree-lazy-server-del lazyfree-lazy-user-del
lazyfree-lazy-user-flush lfu-decay-time lfu-log-factor list-compress-depth
list-max-listpack-size list-max-ziplist-entries list-max-ziplist-size
list-max-ziplist-value loadmodule locale-collate logfile loglevel lua-replicate-commands
lua-time-limit masterauth masteruser max-new-connections-per-cycle
max-new-tls-connections-per-cycle maxclients maxmemory maxmemory-clients
maxmemory-eviction-tenacity maxmemory-policy maxmemory-samples min-replicas-max-lag
min-replicas-to-write min-slaves-max-lag min-slaves-to-write no-appendfsync-on-rewrite
notify-keyspace-events oom-score-adj oom-score-adj-values pidfile port proc-title-template
propagation-error-behavior protected-mode proto-max-bulk-len rdb-del-sync-files
rdb-key-save-delay rdb-save-incremental-fsync rdbchecksum rdbcompression rename-command
repl-backlog-size repl-backlog-ttl repl-disable-tcp-nodelay repl-diskless-load
repl-diskless-sync repl-diskless-sync-delay repl-diskless-sync-max-replicas
repl-ping-replica-period repl-ping-slave-period repl-timeout replica-announce-ip
replica-announce-port replica-announced replica-ignore-disk-write-errors
replica-ignore-maxmemory replica-lazy-flush replica-priority replica-read-only
replica-serve-stale-data replicaof requirepass sanitize-dump-payload save
set-max-intset-entries set-max-listpack-entries set-max-listpack-value set-proc-title
shutdown-on-sigint shutdown-on-sigterm shutdown-timeout slave-announce-ip
slave-announce-port slave-lazy-flush slave-priority slave-read-only slave-serve-stale-data
slaveof slowlog-log-slower-than slowlog-max-len socket-mark-id stop-writes-on-bgsave-error
stream-node-max-bytes stream-node-max-entries supervised syslog-enabled syslog-facility
syslog-ident tcp-backlog tcp-keepalive timeout tls-auth-clients tls-ca-cert-dir
tls-ca-cert-file tls-cert-file tls-ciphers tls-ciphersuites tls-client-cert-file
tls-client-key-file tls-client-key-file-pass tls-cluster tls-dh-params-file tls-key-file
tls-key-file-pass tls-port tls-prefer-server-ciphers tls-protocols tls-replication
tls-session-cache-size tls-session-cache-timeout tls-session-caching
tracking-table-max-keys unixsocket unixsocketperm user vm-enabled
zset-max-listpack-entries zset-max-listpack-value zset-max-ziplist-entries
zset-max-ziplist-value
"""
REDIS_DIRECTIVES = frozenset(_REDIS_DIRECTIVE_NAMES.split())

REDIS_REPLACED = {
    **dict.fromkeys(("bind", "bind-source-addr"), "kvtune listens on target.host"),
    "port": "kvtune's own port (target.port)",
    **dict.fromkeys(("unixsocket", "unixsocketperm"), "kvtune serves over TCP"),
    "protected-mode": "kvtune sets it for its own address",
    **dict.fromkeys(("daemonize", "supervised"), "kvtune runs the server in the foreground"),
    **dict.fromkeys(("pidfile", "logfile", "syslog-enabled", "syslog-ident",
                     "syslog-facility", "loglevel"), "kvtune keeps the server's output itself"),
    **dict.fromkeys(("dir", "dbfilename", "appendfilename", "appenddirname"),
                    "the measured server writes no files"),
    **dict.fromkeys(("save", "appendonly"), "the measured server runs without persistence "
                    "(--save '' --appendonly no): a persistent production server also pays "
                    "for its snapshots or its AOF"),
}


class Reader:
    """A redis.conf reader."""

    label = "Redis"
    conf = "redis.conf"
    include_roots: tuple[str, ...] = INCLUDE_ROOTS
    directives = REDIS_DIRECTIVES
    replaced: ClassVar[dict[str, str]] = REDIS_REPLACED

    def lines(self, path: Path, cfg: ServerConfig, seen: set[str], budget: Budget,
              top_dir: Path, depth: int = 0, at: str = "") -> list[tuple[list[str], str, str]]:
        """(words, where, line) of every directive, `include`s followed in place (a later
        directive wins, as in Redis). `at`: the include line that names `path` (messages about
        an included file that cannot be read name that line, not the file it names)."""
        real = os.path.realpath(path)
        if real in seen:
            cfg.problems.append(f"{at or path}: `include` names a file already included "
                                "(included twice: an include cycle)")
            return []
        if depth > MAX_INCLUDES:
            cfg.problems.append(f"{at or path}: includes nested deeper than {MAX_INCLUDES}")
            return []
        seen.add(real)
        try:
            text = read_text(path, budget)
        except ValueError as e:
            cfg.problems.append(f"{at}: `include`: {e}" if at else str(e))
            return []
        out = []
        for n, raw in enumerate(text.splitlines(), 1):
            where = f"{path}, line {n}"
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            try:
                words = shlex.split(line, comments=False)
            except ValueError:
                cfg.problems.append(f"{where}: unbalanced quotes")
                continue
            if not words:
                continue
            words[0] = words[0].lower()
            if words[0] == "include":
                if len(words) != 2:
                    cfg.problems.append(f"{where}: `include` takes one file")
                    continue
                inc = Path(words[1])
                inc = inc if inc.is_absolute() else path.parent / inc
                if not include_allowed(inc, top_dir, self.include_roots):
                    cfg.problems.append(
                        f"{where}: `include` refused: it names a file outside the "
                        f"configuration's directory ({top_dir}) and the server's system "
                        f"directories ({', '.join(self.include_roots)})")
                    continue
                out += self.lines(inc, cfg, seen, budget, top_dir, depth + 1, where)
                if budget.left < 0:
                    break
                continue
            out.append((words, where, raw))
        return out

    def settings(self, path: Path, tc: Any, cfg: ServerConfig) -> list[Setting]:
        """The file's settings (its includes followed), each checked as target.args are."""
        settings: dict[str, Setting] = {}
        budget = Budget()
        try:
            lines = self.lines(path, cfg, set(), budget,
                               Path(os.path.realpath(path)).parent)
        except ValueError as e:  # the total bound: one problem, nothing more read
            cfg.problems.append(str(e))
            return []
        if lines and not any(w[0] in self.directives for w, _, _ in lines):
            cfg.problems.append(f"{path}: not a {self.conf}: none of its lines is a "
                                f"{self.label} directive")
            return []
        for words, where, raw in lines:
            name = words[0]
            if name in self.replaced:
                cfg.replaced.append(f"{where}: `{name}` replaced: {self.replaced[name]}")
                continue
            if name in tc.UNSAFE_DIRECTIVES:
                cfg.problems.append(f"{where}: {self.label} directive {name!r} is refused: it "
                                    f"{tc.UNSAFE_DIRECTIVES[name]}")
                continue
            if name not in tc.SAFE_DIRECTIVES:
                cfg.left_out.append(
                    f"{where}: `{name}` left out (not a directive kvtune passes to the measured "
                    "server)" if name in self.directives else
                    f"{where}: an unknown directive, left out")
                continue
            if len(words) != 2:
                cfg.problems.append(f"{where}: {name} takes one value")
                continue
            try:
                tc.check_args([f"--{name}", words[1]])
            except ValueError:
                cfg.problems.append(f"{where}: {name}: its value is not one kvtune passes "
                                    f"(expected {tc.SAFE_DIRECTIVES[name]})")
                continue
            settings[name] = Setting(name, [f"--{name}", words[1]], words[1], where, raw)
        return list(settings.values())

    def line_problem(self, line: str) -> str | None:
        """Why `line` (not blank, no comment) is not a line of this file, or None."""
        try:
            words = shlex.split(line)
        except ValueError:
            words = []
        if not words or words[0].lower() not in self.directives:
            return f"not a {self.label} directive: not a {self.conf}"
        return None


READER = Reader()
