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
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_BYTES = 1 << 20
MAX_INCLUDES = 16

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


def read_text(path: Path) -> str:
    """A configuration file's text, as untrusted input: a regular file, at most 1 MiB,
    UTF-8. ValueError naming the problem."""
    try:
        if not path.is_file():
            raise ValueError(f"{path} is not a regular file")
        if path.stat().st_size > MAX_BYTES:
            raise ValueError(f"{path} is larger than 1 MiB: not a server configuration")
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror or e}") from None


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
                shown = " ".join(words[i:i + (2 if takes and attached is None else 1)])
                cfg.replaced.append(f"{where}: `{shown}` replaced: {MEMCACHED_REPLACED[flag]}")
                i += 2 if takes and attached is None else 1
                continue
            if not flag.startswith("-"):
                cfg.problems.append(f"{where}: not a memcached option (each line is a flag "
                                    "and its value, such as -m 64)")
                break
            try:
                pattern = tc.flag_pattern(flag)
            except ValueError as e:
                cfg.problems.append(f"{where}: {e}")
                i += 1 if not flag.startswith("-") else 2
                continue
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
                        tc.check_options_list(part, f"-o {part.partition('=')[0]}")
                    except ValueError as e:
                        cfg.problems.append(f"{where}: {e}")
                        continue
                    key, _, v = part.partition("=")
                    settings.append(Setting(f"-o {key}", ["-o", part], v, where, raw))
            else:
                try:
                    tc.check_args([flag, value])
                except ValueError as e:
                    cfg.problems.append(f"{where}: {flag}: {e}")
                else:
                    settings.append(Setting(tc.setting_name(flag), [flag, value], value,
                                            where, raw))
            i += 1 if attached is not None else 2
    return settings


# -- redis ----------------------------------------------------------------------------------


def _redis_lines(path: Path, cfg: ServerConfig, seen: set[Path], depth: int = 0
                 ) -> list[tuple[list[str], str, str]]:
    """(words, where, line) of every directive, `include`s followed in place (a later
    directive wins, as in Redis)."""
    real = path.resolve()
    if real in seen:
        cfg.problems.append(f"{path}: included twice (an include cycle)")
        return []
    if depth > MAX_INCLUDES:
        cfg.problems.append(f"{path}: includes nested deeper than {MAX_INCLUDES}")
        return []
    seen.add(real)
    try:
        text = read_text(path)
    except ValueError as e:
        cfg.problems.append(str(e))
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
        if words[0] == "include" and len(words) == 2:
            inc = Path(words[1])
            inc = inc if inc.is_absolute() else path.parent / inc
            out += _redis_lines(inc, cfg, seen, depth + 1)
            continue
        out.append((words, where, raw))
    return out


def _redis_settings(path: Path, tc: Any, cfg: ServerConfig) -> list[Setting]:
    settings: dict[str, Setting] = {}
    for words, where, raw in _redis_lines(path, cfg, set()):
        name = words[0]
        if name in REDIS_REPLACED:
            cfg.replaced.append(f"{where}: `{name}` replaced: {REDIS_REPLACED[name]}")
            continue
        if name in tc.UNSAFE_DIRECTIVES:
            cfg.problems.append(f"{where}: Redis directive {name!r} is refused: it "
                                f"{tc.UNSAFE_DIRECTIVES[name]}")
            continue
        if name not in tc.SAFE_DIRECTIVES:
            cfg.left_out.append(f"{where}: `{name}` left out (not a directive kvtune "
                                "passes to the measured server)")
            continue
        if len(words) != 2:
            cfg.problems.append(f"{where}: {name} takes one value")
            continue
        try:
            tc.check_args([f"--{name}", words[1]])
        except ValueError as e:
            cfg.problems.append(f"{where}: {e}")
            continue
        settings[name] = Setting(name, [f"--{name}", words[1]], words[1], where, raw)
    return list(settings.values())


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
    raise ValueError(f"none of the knob's values writes `{' '.join(setting.words)}`")


def place(kind: str, path: Path, tc: Any, study_knobs: dict[str, Any], ctx: Any
          ) -> ServerConfig:
    """Read `path` (a `kind` server's configuration) and place every setting: the study's
    searched knobs (`study_knobs`, name -> Knob) take the operator's values as their
    baseline; other safe settings become fixed arguments."""
    cfg = ServerConfig(str(path))
    if kind == "memcached":
        try:
            text = read_text(path)
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
            cfg.problems.append(f"{s.where}: `{s.text.strip()}` sets what knob {knob.name} "
                                f"searches, but {e}: give the knob a default, or remove it")
    return cfg
