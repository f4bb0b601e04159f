"""`target.config`: the operator's own server configuration as the study's baseline.

Read (untrusted, like a study file): memcached's Debian `/etc/memcached.conf` (one option per
line), RHEL's `/etc/sysconfig/memcached` (PORT, USER, MAXCONN, CACHESIZE, OPTIONS) or a
`redis.conf` (with its `include`s). Each setting lands in one of four places:

- *replaced*: where the server listens, who it runs as, its files and daemonizing (`-l`,
  `-p`, `-u`, `-d`, `-P`, `logfile`; `bind`, `port`, `dir`, `daemonize`, `save`, ...):
  kvtune's own placement instead, said in `kvtune check`;
- *refused*: what kvtune cannot run safely (a memory file, TLS material, SASL, modules,
  replication, renamed commands): one problem per setting, exit 2, nothing started;
- *a knob's baseline*: a setting a knob of the study searches (`-t 4` for memcached.threads):
  the knob's default becomes the operator's value, so the baseline is what they run and
  exports are diffs against it;
- *fixed*: every other safe setting is passed as it is, as `target.args` would be.

A Redis directive kvtune does not pass (not on its list of safe directives: logging levels,
replication and persistence details of no effect without persistence) is left out, and said.

The file is untrusted input read by root (issue 29): every message names the file, the line
and a setting kvtune knows — never an unknown word, nor a value kvtune has not validated
(a line of /etc/shadow, an include of /proc/self/environ, a password). Each file is read
with a bound (a regular file outside /proc, /sys and /dev, at most MAX_BYTES), all of them
together at most MAX_TOTAL_BYTES, and an `include` must stay inside the configuration's own
directory tree or a system directory of the server's own (INCLUDE_ROOTS).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvtune.safety.files import ReadRefused, read_input

MAX_BYTES = 1 << 20  # one file
MAX_TOTAL_BYTES = 4 << 20  # every file of one configuration, includes together
MAX_INCLUDES = 16
# Where an `include` may lead besides the configuration's own directory tree.
INCLUDE_ROOTS = ("/etc/redis", "/etc/redis-*", "/etc/memcached*", "/usr/share/redis")

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

# memcached: where it listens, who it runs as, its files, daemonizing, verbosity (kvtune
# runs it in the foreground on target.host:target.port with no log).
MEMCACHED_REPLACED = {
    **dict.fromkeys(("-l", "--listen"), "kvtune listens on target.host"),
    **dict.fromkeys(("-p", "--port"), "kvtune's own port (target.port)"),
    **dict.fromkeys(("-U", "--udp-port"), "kvtune turns UDP off (-U 0)"),
    **dict.fromkeys(("-s", "--unix-socket", "-a", "--unix-mask"),
                    "kvtune serves over TCP on target.host"),
    **dict.fromkeys(("-u", "--user"), "kvtune runs the server itself"),
    **dict.fromkeys(("-d", "--daemon"), "kvtune runs the server in the foreground"),
    **dict.fromkeys(("-P", "--pidfile"), "kvtune tracks the server's PID itself"),
    **dict.fromkeys(("-v", "-vv", "-vvv", "--verbose"), "kvtune runs the server without a "
                    "request log"),
    "logfile": "kvtune keeps the server's output itself",
}
# RHEL /etc/sysconfig/memcached variables -> the flag they give.
SYSCONFIG = {"PORT": "-p", "USER": "-u", "MAXCONN": "-c", "CACHESIZE": "-m"}

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


@dataclass
class Setting:
    """One setting of the file: its name as the target's `arg_names` says it (`-t`,
    `-o hashpower`, `hz`), the argv words that pass it, its value text, and where it is."""

    name: str
    words: list[str]
    value: str
    where: str  # "path, line N"
    text: str  # the line as written


@dataclass
class ServerConfig:
    """The file's settings, placed (see the module's docstring)."""

    path: str
    args: list[str] = field(default_factory=list)
    defaults: dict[str, Any] = field(default_factory=dict)  # knob -> the operator's value
    replaced: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def notes(self) -> list[str]:
        """What `kvtune check` says of the file: each substitution, in one line each."""
        out = [f"target.config: {n}" for n in self.replaced]  # each names its file and line
        out += [f"target.config {self.path}: {k} baseline {v!r} (the operator's value)"
                for k, v in self.defaults.items()]
        if self.fixed:
            out.append(f"target.config {self.path}: fixed as in the file: "
                       + " ".join(self.fixed))
        out += [f"target.config: {n}" for n in self.left_out]
        return out


class Budget:
    """The bytes left for one configuration and its includes together."""

    def __init__(self, total: int = MAX_TOTAL_BYTES) -> None:
        self.left = total

    def take(self, n: int, path: Path) -> None:
        self.left -= n
        if self.left < 0:
            raise ValueError(f"{path}: the configuration and its includes hold more than "
                             f"{MAX_TOTAL_BYTES >> 20} MiB together: not a server "
                             "configuration")


def read_text(path: Path, budget: Budget | None = None, what: str = "target.config") -> str:
    """A configuration file's text, as untrusted input: a regular file outside /proc, /sys
    and /dev, at most MAX_BYTES read with that bound (and within `budget`), UTF-8 without
    NUL bytes. ValueError naming the file and the problem, never its content."""
    try:
        data = read_input(path, MAX_BYTES, "server configuration")
    except ReadRefused as e:
        raise ValueError(str(e).removeprefix("server configuration: ")) from None
    if budget is not None:
        budget.take(len(data), path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ValueError(f"{path}, line {line}: not UTF-8 text: not a server "
                         "configuration") from None
    if "\x00" in text:
        line = text[:text.index("\x00")].count("\n") + 1
        raise ValueError(f"{path}, line {line}: a NUL byte: not a server configuration")
    return text


def include_allowed(target: Path, top_dir: Path) -> bool:
    """Whether an `include` may read `target` (resolved): inside the top configuration's
    own directory tree, or under one of INCLUDE_ROOTS."""
    real = os.path.realpath(target)
    roots = [os.path.realpath(top_dir)]
    for pattern in INCLUDE_ROOTS:
        roots += [os.path.realpath(p) for p in glob.glob(pattern)]
    return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)


def known_memcached_flag(tc: Any, flag: str) -> bool:
    return flag in tc.SAFE_FLAGS or flag in tc.UNSAFE_FLAGS or flag in MEMCACHED_REPLACED


def _memcached_flag_problem(tc: Any, flag: str) -> str:
    """Why `flag` (a word of the file) is refused, naming it only when kvtune knows it."""
    if flag in tc.UNSAFE_FLAGS:
        return f"memcached {flag} is refused: it {tc.UNSAFE_FLAGS[flag]}"
    return ("an unknown memcached option, refused (kvtune passes only the flags on its list "
            "of safe flags)")


def _option_problem(tc: Any, part: str) -> str:
    """Why the `-o` option `part` is refused, naming the option only when kvtune knows it
    and never its value."""
    key = part.partition("=")[0]
    try:
        pattern = tc.option_pattern(key)
    except ValueError as e:
        known = key in tc.SAFE_OPTIONS or any(key.startswith(p) for p in tc.UNSAFE_OPTIONS)
        return f"-o {key}: {e}" if known else "an unknown -o option, refused"
    if pattern is None:
        return f"-o {key} takes no value"
    return f"-o {key}: its value is not one kvtune passes (expected {pattern})"


# -- memcached ------------------------------------------------------------------------------


def _memcached_words(text: str, path: Path) -> list[tuple[list[str], str, str]]:
    """(argv words, where, line) of each line that sets something: Debian's one option per
    line, or RHEL's shell variables."""
    out = []
    sysconfig = any(re.match(r"^\s*[A-Z_]+=", ln) for ln in text.splitlines())
    for n, raw in enumerate(text.splitlines(), 1):
        where = f"{path}, line {n}"
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if sysconfig:
            m = re.match(r"^([A-Z_]+)=(.*)$", line)
            if not m:
                out.append(([line.split()[0]], where, raw))
                continue
            var, value = m.group(1), m.group(2)
            try:
                words = shlex.split(value, comments=True)
            except ValueError:
                out.append(([f"{var}="], where, raw))
                continue
            if var in SYSCONFIG:
                out.append(([SYSCONFIG[var], *words[:1]], where, raw))
            elif var == "OPTIONS":  # the quoted value is memcached's argv words
                out.append((" ".join(words).split(), where, raw))
            else:
                out.append(([f"{var}="], where, raw))
            continue
        words = line.split("#", 1)[0].split()
        if words and words[0] == "logfile":  # Debian's wrapper reads it, memcached does not
            out.append((["logfile"], where, raw))
        elif words:
            out.append((words, where, raw))
    return out


def _memcached_settings(text: str, path: Path, tc: Any, cfg: ServerConfig) -> list[Setting]:
    settings: list[Setting] = []
    for words, where, raw in _memcached_words(text, path):
        i = 0
        while i < len(words):
            w = words[i]
            flag, attached = w.split("=", 1) if w.startswith("--") and "=" in w else (w, None)
            if flag in MEMCACHED_REPLACED:
                takes = flag not in ("-d", "--daemon", "-v", "-vv", "-vvv", "--verbose",
                                     "logfile")
                cfg.replaced.append(f"{where}: `{flag}` replaced: {MEMCACHED_REPLACED[flag]}")
                i += 2 if takes and attached is None else 1
                continue
            if not flag.startswith("-"):
                cfg.problems.append(f"{where}: not a memcached option (each line is a flag "
                                    "and its value, such as -m 64)")
                break
            if flag not in tc.SAFE_FLAGS:
                cfg.problems.append(f"{where}: {_memcached_flag_problem(tc, flag)}")
                i += 2
                continue
            pattern = tc.flag_pattern(flag)
            if pattern is None:
                settings.append(Setting(tc.setting_name(flag), [flag], "", where, raw))
                i += 1
                continue
            value = attached if attached is not None else (
                words[i + 1] if i + 1 < len(words) else None)
            if value is None:
                cfg.problems.append(f"{where}: {flag} needs a value")
                break
            if pattern == "options":
                for part in value.split(","):
                    try:
                        tc.check_options_list(part, "-o")
                    except ValueError:
                        cfg.problems.append(f"{where}: {_option_problem(tc, part)}")
                        continue
                    key, _, v = part.partition("=")
                    settings.append(Setting(f"-o {key}", ["-o", part], v, where, raw))
            else:
                try:
                    tc.check_args([flag, value])
                except ValueError:
                    cfg.problems.append(f"{where}: {flag}: its value is not one kvtune "
                                        f"passes (expected {pattern})")
                else:
                    settings.append(Setting(tc.setting_name(flag), [flag, value], value,
                                            where, raw))
            i += 1 if attached is not None else 2
    return settings


# -- redis ----------------------------------------------------------------------------------


def _redis_lines(path: Path, cfg: ServerConfig, seen: set[str], budget: Budget,
                 top_dir: Path, depth: int = 0, at: str = "") -> list[tuple[list[str], str,
                                                                        str]]:
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
            if not include_allowed(inc, top_dir):
                cfg.problems.append(
                    f"{where}: `include` refused: it names a file outside the "
                    f"configuration's directory ({top_dir}) and the server's system "
                    f"directories ({', '.join(INCLUDE_ROOTS)})")
                continue
            out += _redis_lines(inc, cfg, seen, budget, top_dir, depth + 1, where)
            if budget.left < 0:
                break
            continue
        out.append((words, where, raw))
    return out


def _redis_settings(path: Path, tc: Any, cfg: ServerConfig) -> list[Setting]:
    settings: dict[str, Setting] = {}
    budget = Budget()
    try:
        lines = _redis_lines(path, cfg, set(), budget, Path(os.path.realpath(path)).parent)
    except ValueError as e:  # the total bound: one problem, nothing more read
        cfg.problems.append(str(e))
        return []
    if lines and not any(w[0] in REDIS_DIRECTIVES for w, _, _ in lines):
        cfg.problems.append(f"{path}: not a redis.conf: none of its lines is a Redis "
                            "directive")
        return []
    for words, where, raw in lines:
        name = words[0]
        if name in REDIS_REPLACED:
            cfg.replaced.append(f"{where}: `{name}` replaced: {REDIS_REPLACED[name]}")
            continue
        if name in tc.UNSAFE_DIRECTIVES:
            cfg.problems.append(f"{where}: Redis directive {name!r} is refused: it "
                                f"{tc.UNSAFE_DIRECTIVES[name]}")
            continue
        if name not in tc.SAFE_DIRECTIVES:
            cfg.left_out.append(
                f"{where}: `{name}` left out (not a directive kvtune passes to the measured "
                "server)" if name in REDIS_DIRECTIVES else
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


# -- a file that claims to be a server's configuration (export --from) ---------------------


def check_config(kind: str | None, path: Path, what: str = "--from") -> str:
    """The text of `path` when it parses as a `kind` server's configuration file in the
    form the exports merge into: Debian's memcached.conf (every line an option, `logfile`
    or a comment) or a redis.conf (every line a Redis directive or a comment). Read like
    target.config (bounded, regular, outside /proc, /sys and /dev, UTF-8). UserError
    (exit 2) naming the file and the first line that is not, never its content."""
    from kvtune.errors import UserError

    if kind not in ("memcached", "redis"):
        raise UserError(f"{what} {path}: the study's target ({kind}) has no server "
                        "configuration file to merge into")
    try:
        text = read_text(path, Budget(), what)
    except ValueError as e:
        raise UserError(f"{what}: {e}") from None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if kind == "memcached":
            if not (line.startswith("-") or line.split()[0] == "logfile"):
                raise UserError(f"{what} {path}, line {n}: not a memcached.conf line (each "
                                "is an option such as -m 64, or a # comment): not the "
                                "memcached configuration file")
        else:
            try:
                words = shlex.split(line)
            except ValueError:
                words = []
            if not words or words[0].lower() not in REDIS_DIRECTIVES:
                raise UserError(f"{what} {path}, line {n}: not a Redis directive: not a "
                                "redis.conf")
    return text


# -- placing the settings -------------------------------------------------------------------


def _knob_value(knob: Any, setting: Setting, ctx: Any) -> Any:
    """The knob value that reproduces `setting`, or ValueError when none of the knob's
    values writes it (a unit or spelling the knob does not use)."""
    dom = knob.domain
    negate = getattr(knob.applier, "negate", None)
    if negate and setting.name == f"-o {negate}":
        candidates: list[Any] = [False]
    elif dom.type == "bool" and setting.value == "":
        candidates = [True]
    elif dom.type == "bool":
        candidates = [True, False]
    elif dom.type == "categorical":
        candidates = list(dom.choices)
    else:
        candidates = [dom.coerce(setting.value)]
    for v in candidates:
        e = knob.applier.export_entry(v, ctx)
        if e is None:
            continue
        if setting.name.startswith("-o "):
            text = e.key + (f"={e.value}" if e.value else "")
            if text == setting.words[1]:
                return v
        elif e.value.lower() == setting.value.lower() or (
                e.value == "" and setting.value == ""):
            return v
        else:
            try:
                if float(e.value) == float(setting.value):
                    return v
            except ValueError:
                pass
    raise ValueError("none of the knob's values writes the file's value")


def place(kind: str, path: Path, tc: Any, study_knobs: dict[str, Any], ctx: Any
          ) -> ServerConfig:
    """Read `path` (a `kind` server's configuration) and place every setting: the study's
    searched knobs (`study_knobs`, name -> Knob) take the operator's values as their
    baseline; other safe settings become fixed arguments."""
    cfg = ServerConfig(str(path))
    if kind == "memcached":
        try:
            text = read_text(path, Budget())
        except ValueError as e:
            cfg.problems.append(str(e))
            return cfg
        settings = _memcached_settings(text, path, tc, cfg)
    elif kind == "redis":
        settings = _redis_settings(path, tc, cfg)
    else:
        cfg.problems.append(f"target.config: the {kind} target reads no server configuration")
        return cfg
    by_setting = {s: k for k in study_knobs.values() for s in k.applier.sets()}
    for s in settings:
        knob = by_setting.get(s.name)
        if knob is None:
            cfg.args += s.words
            cfg.fixed.append(" ".join(s.words))
            continue
        try:
            cfg.defaults[knob.name] = _knob_value(knob, s, ctx)
        except ValueError as e:
            cfg.problems.append(f"{s.where}: `{s.name}` sets what knob {knob.name} "
                                f"searches, but {e}: give the knob a default, or remove it")
    return cfg
