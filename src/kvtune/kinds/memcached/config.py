"""Reading memcached's configuration (`target.config`, `export --from`): Debian's
/etc/memcached.conf (one option per line) or RHEL's /etc/sysconfig/memcached (PORT, USER,
MAXCONN, CACHESIZE, OPTIONS), each setting placed as targets/server_config.py says."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from kvtune.targets.server_config import Budget, ServerConfig, Setting, read_text

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


class Reader:
    """A memcached.conf reader."""

    conf = "memcached.conf"

    def settings(self, path: Path, tc: Any, cfg: ServerConfig) -> list[Setting]:
        """The file's settings, each checked as target.args are."""
        try:
            text = read_text(path, Budget())
        except ValueError as e:
            cfg.problems.append(str(e))
            return []
        return _memcached_settings(text, path, tc, cfg)

    def line_problem(self, line: str) -> str | None:
        """Why `line` (not blank, no comment) is not a line of Debian's memcached.conf, or
        None."""
        if line.startswith("-") or line.split()[0] == "logfile":
            return None
        return ("not a memcached.conf line (each is an option such as -m 64, or a # "
                "comment): not the memcached configuration file")


READER = Reader()
