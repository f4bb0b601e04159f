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
directory tree or a system directory of the server's own (its reader's `include_roots`).

Each kind reads its own file (kinds/<kind>/config.py, its Kind's `config_reader`); this
module places what the reader found.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvtune.safety.files import ReadRefused, read_input

MAX_BYTES = 1 << 20  # one file
MAX_TOTAL_BYTES = 4 << 20  # every file of one configuration, includes together
MAX_INCLUDES = 16

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


def include_allowed(target: Path, top_dir: Path, include_roots: tuple[str, ...] = ()) -> bool:
    """Whether an `include` may read `target` (resolved): inside the top configuration's
    own directory tree, or under one of `include_roots` (the server's system directories,
    glob patterns)."""
    real = os.path.realpath(target)
    roots = [os.path.realpath(top_dir)]
    for pattern in include_roots:
        roots += [os.path.realpath(p) for p in glob.glob(pattern)]
    return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)


# -- a file that claims to be a server's configuration (export --from) ---------------------


def _reader(kind: str | None) -> Any:
    """The configuration reader of a server kind (kinds/<kind>/config.py), or None."""
    from kvtune import kind_registry as kinds

    k = kinds.find(kind)
    if k is None or k.config_reader is None:
        return None
    return kinds.load(k.config_reader)


def check_config(kind: str | None, path: Path, what: str = "--from") -> str:
    """The text of `path` when it parses as a `kind` server's configuration file in the
    form the exports merge into (its kind's reader says: Debian's memcached.conf, every line
    an option, `logfile` or a comment; a redis.conf, every line a directive or a comment).
    Read like target.config (bounded, regular, outside /proc, /sys and /dev, UTF-8).
    UserError (exit 2) naming the file and the first line that is not, never its content."""
    from kvtune.errors import UserError

    reader = _reader(kind)
    if reader is None:
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
        problem = reader.line_problem(line)
        if problem:
            raise UserError(f"{what} {path}, line {n}: {problem}")
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
    reader = _reader(kind)
    if reader is None:
        cfg.problems.append(f"target.config: the {kind} target reads no server configuration")
        return cfg
    settings = reader.settings(path, tc, cfg)
    if cfg.problems and not settings:
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
