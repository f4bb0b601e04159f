"""The operator's server as `kvtune init` finds it: a running process (`--pid`, or the one
listening on `--port`) or a configuration file alone (`--config`).

A running server is identified as `kvtune verify` identifies one: by the binary it runs
(/proc/PID/exe is a registered kind's trusted server binary), never by a name the process
gives itself. Its argv, its affinity and the CPU it last ran on come from /proc/PID
(cmdline, status, stat); its port from its listening sockets. The configuration file it was
started with is `--config`, else the one its argv names, else the one it says it read (its
kind asks it on loopback, read-only), else its package's file when that file holds the
settings the server runs with; else (memcached, whose options are its argv) the argv
itself becomes the study's configuration.

Everything read is untrusted input (kvtune runs as root): files through
`kvtune.safety.files` with a bound, /proc text bounded, and no word of a file or an argv is
echoed before the kind's reader has judged it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvtune import kind_registry as kinds
from kvtune import roots
from kvtune.errors import UserError
from kvtune.initcmd.cpus import process_cpus
from kvtune.quantities import is_count

MAX_PROC_TEXT = 1 << 16  # /proc/PID/cmdline and status are far smaller


@dataclass
class Server:
    """What init knows of the operator's server."""

    kind: str
    pid: int | None = None
    port: int | None = None
    argv: list[str] = field(default_factory=list)
    user: str | None = None
    exe: str | None = None
    cpus: tuple[int, ...] | None = None  # its affinity
    running_on: int | None = None  # the CPU it last ran on
    config: Path | None = None  # the file that is the study's baseline
    config_how: str = ""  # how that file was found, for the study's comment
    notes: list[str] = field(default_factory=list)


def _proc_text(pid: int, name: str) -> str:
    path = roots.proc(pid, name)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PROC_TEXT)
    except FileNotFoundError:
        raise UserError(f"--pid {pid}: no such process") from None
    except OSError as e:
        raise UserError(f"--pid {pid}: cannot read {path}: {e.strerror} (kvtune init reads "
                        "another user's process as root)") from None
    return data.decode(errors="replace")


def read_argv(pid: int) -> list[str]:
    """The process's argv (/proc/PID/cmdline), bounded."""
    return [a for a in _proc_text(pid, "cmdline").split("\0") if a]


def _uid_name(status: str) -> str | None:
    import pwd

    for line in status.splitlines():
        if line.startswith("Uid:"):
            try:
                uid = int(line.split()[1])
                return pwd.getpwuid(uid).pw_name
            except (ValueError, IndexError, KeyError):
                return None
    return None


def _last_cpu(stat: str) -> int | None:
    """Field 39 of /proc/PID/stat (the CPU it last ran on); the command name, which may
    hold spaces and parentheses, ends at the last ')'."""
    fields = stat.rpartition(")")[2].split()
    try:
        return int(fields[36])
    except (IndexError, ValueError):
        return None


def kind_of(pid: int) -> str:
    """The kind whose trusted server binary process `pid` runs (its /proc/PID/exe, by
    device and inode). UserError naming the binary otherwise."""
    from kvtune.safety import programs
    from kvtune.verify import runs_binary

    for k in kinds.every():
        if k.init is None or not k.comm:
            continue
        binary, _why = programs.lookup(k.comm[0])
        if binary is not None and runs_binary(pid, binary):
            return k.name
    try:
        exe = os.readlink(roots.proc(pid, "exe"))
    except OSError as e:
        exe = f"(its binary cannot be read: {e.strerror})"
    known = ", ".join(k.comm[0] for k in kinds.every() if k.init is not None and k.comm)
    raise UserError(f"--pid {pid} runs {exe}, not a server binary kvtune trusts ({known} "
                    "on PATH)")


def listening_ports(pid: int) -> list[int]:
    """The TCP ports process `pid` listens on (its sockets against /proc/net/tcp{,6})."""
    from kvtune.verify import socket_inodes

    try:
        mine = socket_inodes(pid)
    except OSError:
        return []
    ports = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = roots.proc("net", name).read_text().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            f = ln.split()
            if len(f) > 9 and f[3] == "0A" and is_count(f[9]) and int(f[9]) in mine:
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def pid_on_port(port: int) -> int:
    """The server process listening on TCP `port`. UserError when none is, or when the
    process cannot be read (another user's: root is needed)."""
    from kvtune.verify import listening_inodes, socket_inodes

    inodes = listening_inodes(port)
    if not inodes:
        raise UserError(f"--port {port}: nothing listens on TCP port {port} here")
    found = []
    denied = False
    for d in Path(roots.PROC).iterdir():
        if not is_count(d.name):
            continue
        try:
            if socket_inodes(int(d.name)) & inodes:
                found.append(int(d.name))
        except PermissionError:
            denied = True
        except OSError:
            continue
    if not found:
        raise UserError(f"--port {port}: the process listening on it cannot be read"
                        + (" (run kvtune init as root, or give --pid)" if denied else ""))
    return min(found)  # a forking server's parent holds the socket first


def from_process(pid: int) -> Server:
    """The running server `pid`: its kind, argv, user, affinity and port."""
    if pid <= 0:
        raise UserError(f"--pid {pid}: not a process id")
    if not roots.proc(pid).is_dir():
        raise UserError(f"--pid {pid}: no such process")
    kind = kind_of(pid)
    status = _proc_text(pid, "status")
    s = Server(kind, pid=pid, argv=read_argv(pid), user=_uid_name(status),
               cpus=process_cpus(status), running_on=_last_cpu(_proc_text(pid, "stat")))
    try:
        s.exe = os.readlink(roots.proc(pid, "exe"))
    except OSError:
        s.exe = None
    ports = listening_ports(pid)
    s.port = ports[0] if ports else None
    return s


def init_part(kind: str) -> Any:
    """The kind's part of kvtune init (kinds/<kind>/init.py)."""
    k = kinds.get(kind)
    if k.init is None:
        raise UserError(f"kvtune init does not write studies of the {k.label} kind")
    return kinds.load(k.init)


def reader(kind: str) -> Any:
    k = kinds.get(kind)
    if k.config_reader is None:
        raise UserError(f"the {k.label} kind reads no configuration file")
    return kinds.load(k.config_reader)


def guess_kind(path: Path, text: str) -> str:
    """The kind whose configuration `text` (the file `path`) is: the one kind whose init part
    recognizes it, or among several the one the file is named after. UserError otherwise
    (naming the kinds: say which with --kind)."""
    fits = [k.name for k in kinds.every() if k.init is not None
            and kinds.load(k.init).recognizes(text)]
    if len(fits) > 1:
        named = [n for n in fits if n in path.name.lower()]
        fits = named if len(named) == 1 else fits
    if len(fits) == 1:
        return fits[0]
    names = ", ".join(k.name for k in kinds.every() if k.init is not None)
    if not fits:
        raise UserError(f"--config {path}: not a configuration file of a server kvtune "
                        f"tunes ({names}); say which with --kind")
    raise UserError(f"--config {path}: it reads as the configuration of {' or '.join(fits)}: "
                    "say which with --kind")


def settings_of(kind: str, path: Path) -> tuple[dict[str, str], list[str]]:
    """The settings of the configuration file `path` as the kind's reader judges them
    (name -> value), and the notes of the settings kvtune replaces. UserError (exit 2)
    naming the file, the line and the setting for a file kvtune cannot run."""
    from kvtune.targets import target_class
    from kvtune.targets.server_config import ServerConfig

    cfg = ServerConfig(str(path))
    found = reader(kind).settings(path, target_class(kind), cfg)
    if cfg.problems:
        raise UserError(f"{path}: {len(cfg.problems)} setting(s) kvtune cannot run (nothing "
                        "was written)", shortened(cfg.problems))
    return {s.name: s.value for s in found}, cfg.replaced


def shortened(problems: list[str], most: int = 10) -> list[str]:
    """The first `most` problems, and how many more there are."""
    if len(problems) <= most:
        return problems
    return [*problems[:most], f"... and {len(problems) - most} more: is it the server's "
            "configuration file?"]
