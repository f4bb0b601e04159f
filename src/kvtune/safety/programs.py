"""The one way kvtune runs a program (issue 29). kvtune runs as root: whoever can change a
file it executes, or any directory on the way to it, runs code as root. Every program it
starts — the servers and their version and build probes, kvload, the peer load tools, perf,
tuned-adm, taskset, ssh, its own Python for the scheduler shim and the debugfs probe — is
found and started here, and nowhere else (tests/test_architecture.py fails on a module that
imports `subprocess` or calls `os.exec*`, `os.spawn*`, `os.system`, `os.popen` or
`shutil.which` outside this one):

- `find(name, what)` resolves a name (on PATH) or a path once, walking it component by
  component from `/`: every directory, every symbolic link (and what it points to) and the
  file itself must be owned by root (or, when kvtune runs as another user, by that user)
  and writable by nobody else, and the file must be a regular executable file. A `#!`
  script's interpreter is checked the same way. A directory writable by others is accepted
  only with its sticky bit (as /tmp), whose entries owned by root nobody else may rename or
  remove;
- `Program.run` / `Program.popen` check the path again before every start and execute the
  resolved file (as `argv[0]` the name it was found under, which multi-call binaries read:
  Debian's redis-server is a link to redis-check-rdb). A program handed to another one
  (taskset's command, the scheduler shim's) is checked again by `Program.argv` just before
  the start, and the shim checks it once more before its exec (`exec_checked`).

Arguments are always an argv list; no shell ever runs.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from kvtune.errors import HarnessError, UserError

# What callers need of subprocess, so that no other module imports it.
DEVNULL = subprocess.DEVNULL
PIPE = subprocess.PIPE
TimeoutExpired = subprocess.TimeoutExpired
SubprocessError = subprocess.SubprocessError
CompletedProcess = subprocess.CompletedProcess
Popen = subprocess.Popen

MAX_LINKS = 40  # as the kernel's path walk (ELOOP)
MAX_INTERPRETERS = 4  # as the kernel's #! recursion limit


class Untrusted(UserError):
    """A program kvtune must not run (exit 2): not found, not a regular executable file,
    or a file or directory on its path another user could change."""


def trusted_uids() -> frozenset[int]:
    """Owners whose files kvtune may execute: root, and the user kvtune runs as (a user
    may run their own files; another user's would run with this user's rights)."""
    return frozenset({0, os.geteuid()})


def _owner() -> str:
    return "root" if trusted_uids() == {0} else f"root or uid {os.geteuid()}"


def _judge(path: str, st: os.stat_result, kind: str) -> str | None:
    if st.st_uid not in trusted_uids():
        return (f"{kind} {path} is owned by uid {st.st_uid}, not {_owner()}: "
                "another user could change what kvtune executes")
    if stat.S_ISLNK(st.st_mode):
        return None  # a link's own mode means nothing; its directory was judged
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
            return None  # sticky: only an entry's owner (judged next) may replace it
        return (f"{kind} {path} is writable by group or others (mode "
                f"{stat.S_IMODE(st.st_mode):o}): another user could change what kvtune "
                "executes")
    return None


def _walk(path: str) -> str:
    """The real path of `path` after judging every component (UserError-free: ValueError
    naming the first problem)."""
    if "\x00" in path or not path or len(path) > 4096:
        raise ValueError(f"{path!r} is not a file name")
    todo = [p for p in os.path.abspath(path).split("/") if p]
    cur = "/"
    st = os.lstat("/")
    why = _judge("/", st, "directory")
    if why:
        raise ValueError(why)
    links = 0
    while todo:
        name = todo.pop(0)
        if name == ".":
            continue
        if name == "..":
            cur = os.path.dirname(cur) or "/"  # an ancestor already judged on the way
            continue
        nxt = os.path.join(cur, name)
        try:
            st = os.lstat(nxt)
        except OSError as e:
            raise ValueError(f"{nxt}: {e.strerror}") from None
        if stat.S_ISLNK(st.st_mode):
            why = _judge(nxt, st, "symbolic link")
            if why:
                raise ValueError(why)
            links += 1
            if links > MAX_LINKS:
                raise ValueError(f"{path}: more than {MAX_LINKS} symbolic links")
            target = os.readlink(nxt)
            if target.startswith("/"):
                cur = "/"
            todo[:0] = [p for p in target.split("/") if p]
            continue
        if stat.S_ISDIR(st.st_mode):
            why = _judge(nxt, st, "directory")
            if why:
                raise ValueError(why)
            cur = nxt
            continue
        if todo:
            raise ValueError(f"{nxt} is not a directory")
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{nxt} is not a regular file")
        why = _judge(nxt, st, "file")
        if why:
            raise ValueError(why)
        if not st.st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH):
            raise ValueError(f"{nxt} is not executable")
        return nxt
    raise ValueError(f"{path} is a directory, not a program")


def _interpreter(real: str) -> list[str]:
    """A `#!` script's interpreter (the kernel runs it with the script) and, for
    `#!/usr/bin/env NAME` or `#!/usr/bin/env -S NAME ARGS`, the NAME env will find on PATH;
    [] for a binary. ValueError for an env line kvtune cannot judge: options of env's own
    (`-i`, `-u`, `-C`, `-P`, a `VAR=value`, `${VAR}`, escapes) change what it runs or the
    PATH it searches; a NAME not on PATH."""
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return []
    try:
        head = os.read(fd, 256)
    finally:
        os.close(fd)
    if not head.startswith(b"#!"):
        return []
    line = head[2:].split(b"\n", 1)[0].decode(errors="replace")
    words = line.split()
    if not words:
        return []
    out = [words[0]]
    if "env" not in (os.path.basename(words[0]),
                     os.path.basename(os.path.realpath(words[0]))):
        return out
    # The kernel passes the rest of the line as one argument; only -S makes env split it.
    rest = line.split(None, 1)[1].strip() if len(words) > 1 else ""
    if rest.startswith("-S"):
        rest = rest[2:].strip()
    elif rest.startswith("--split-string"):
        rest = rest.removeprefix("--split-string").lstrip("= ").strip()
    elif len(rest.split()) > 1:
        raise ValueError("its #! line gives env more than one word without -S")
    split = rest.split()
    name = split[0] if split else ""
    if not name or name.startswith("-") or "=" in name or any(
            c in rest for c in "$\\'\"`"):
        raise ValueError("its #! line runs env in a form kvtune cannot judge (only "
                         "`env NAME` and `env -S NAME ARGS`: no option, variable or escape "
                         "of env's own)")
    found = which(name)
    if found is None:
        raise ValueError("the program its #! line names through env is not on PATH")
    out.append(found)
    return out


def check(path: str) -> str:
    """The real path of the program `path` when kvtune may execute it; ValueError naming
    the first file, link or directory another user could change otherwise."""
    real = _walk(path)
    todo, depth = [real], 0
    while todo:
        depth += 1
        if depth > MAX_INTERPRETERS * 2:
            raise ValueError(f"{path}: scripts nested more than {MAX_INTERPRETERS} deep")
        try:
            interps = _interpreter(todo.pop())
        except ValueError as e:
            raise ValueError(f"{path} is a script whose interpreter is refused: {e}") \
                from None
        for interp in interps:
            try:
                todo.append(_walk(interp))
            except ValueError as e:
                raise ValueError(f"{path} is a script whose interpreter is refused: {e}") \
                    from None
    return real


def untrusted(path: str) -> str | None:
    """Why kvtune must not execute `path`, or None (`check`)."""
    try:
        check(path)
    except ValueError as e:
        return str(e)
    return None


def which(name: str) -> str | None:
    """`name` on PATH as an absolute path (nothing judged yet), or None."""
    found = shutil.which(name)
    return os.path.abspath(found) if found else None


@dataclass(frozen=True)
class Program:
    """A program found and judged by `find`: `path` as found (its whole chain checked),
    `real` the file executed."""

    what: str  # for messages: "target.binary", "kvload ($KVLOAD)", "perf", ...
    path: str
    real: str
    cwd: str | None = None  # where it starts (None: kvtune's working directory)
    isolated: bool = False  # kvtune's Python: its arguments must begin with -I

    def _args(self, args: Sequence[str]) -> list[str]:
        out = [str(a) for a in args]
        if self.isolated and out[:1] != ["-I"]:
            raise ValueError("kvtune's Python runs only isolated (-I): python_code or "
                             "python_module")
        return out

    def recheck(self) -> str:
        """The real path again, checked now; HarnessError when it changed or is no longer
        trusted (someone replaced it during the study)."""
        try:
            real = check(self.path)
        except ValueError as e:
            raise HarnessError(f"{self.what}: refused since it was checked: {e}") from None
        if real != self.real:
            raise HarnessError(f"{self.what}: {self.path} now resolves to {real}, not the "
                               f"{self.real} kvtune checked")
        return real

    def argv(self, args: Sequence[str] = ()) -> list[str]:
        """`[path, *args]`, checked just now: for a program another program starts
        (taskset's command, the scheduler shim's)."""
        self.recheck()
        return [self.path, *self._args(args)]

    def _kw(self, kw: dict[str, Any]) -> dict[str, Any]:
        if kw.pop("shell", False):
            raise ValueError("kvtune never runs a shell")
        kw.pop("executable", None)
        kw.setdefault("stdin", DEVNULL)
        if self.cwd is not None:
            kw["cwd"] = self.cwd
        return kw

    def run(self, args: Sequence[str] = (), **kw: Any) -> subprocess.CompletedProcess[Any]:
        """subprocess.run of the checked file with `args` (never a shell)."""
        real = self.recheck()
        return subprocess.run([self.path, *self._args(args)], executable=real,
                              **self._kw(kw))

    def popen(self, args: Sequence[str] = (), **kw: Any) -> subprocess.Popen[Any]:
        """subprocess.Popen of the checked file with `args` (never a shell)."""
        real = self.recheck()
        return subprocess.Popen([self.path, *self._args(args)], executable=real,
                                **self._kw(kw))


def find(name: str, what: str) -> Program:
    """The program `name` (a path, or a name on PATH), judged (module docstring).
    Untrusted (exit 2) naming `what` and why otherwise; nothing has been executed."""
    if not name or any(c in name for c in "\x00\n\r") or len(name) > 4096:
        raise Untrusted(f"{what}: {name!r} is not a file name")
    path = os.path.abspath(name) if "/" in name else which(name)
    if path is None:
        raise Untrusted(f"{what}: {name!r} not found on PATH")
    try:
        real = check(path)
    except ValueError as e:
        raise Untrusted(f"{what}: refused: {e}") from None
    return Program(what, path, real)


def lookup(name: str, what: str | None = None) -> tuple[Program | None, str]:
    """An optional tool on PATH: (the program, "") when present and trusted, else (None,
    why not) — a tool that is absent or refused is not run."""
    path = which(name)
    if path is None:
        return None, f"{name} is not installed"
    try:
        return find(path, what or name), ""
    except Untrusted as e:
        return None, str(e)


def python() -> Program:
    """The interpreter running kvtune (for its own helpers: the scheduler shim, the
    debugfs probe), judged like any program. Run through the path it was started by, so
    that a virtual environment stays in effect. Its arguments come from `python_code` or
    `python_module` (isolated), and it starts in `ISOLATED_CWD`."""
    prog = find(sys.executable, "kvtune's Python interpreter")
    return Program(prog.what, prog.path, prog.real, cwd=ISOLATED_CWD, isolated=True)


# kvtune's own Python children run isolated (`-I`: no PYTHON* variable, no user site
# directory, neither the working directory nor a script's directory on sys.path) and start
# in the root directory: a `json.py` or a `kvtune/` in the caller's directory, or a
# PYTHONPATH the caller set, is never imported as root. A module of kvtune's is found
# where the running kvtune was imported from, passed as an argument.
ISOLATED_CWD = "/"
_RUN_MODULE = ("import runpy, sys; sys.path.insert(0, sys.argv[1]); m = sys.argv[2]; "
               "del sys.argv[1:3]; runpy.run_module(m, run_name='__main__', alter_sys=True)")


def package_root() -> str:
    """The directory the running kvtune package was imported from (its parent)."""
    import kvtune

    return os.path.dirname(os.path.dirname(os.path.abspath(kvtune.__file__)))


def python_code(code: str, *args: str) -> list[str]:
    """kvtune's Python's arguments (after its path) to run `code` isolated."""
    return ["-I", "-c", code, *args]


def python_module(module: str, *args: str) -> list[str]:
    """kvtune's Python's arguments (after its path) to run kvtune's `module` isolated, as
    `python -m module args...` would, imported from `package_root()` only."""
    if not module.startswith("kvtune."):
        raise ValueError(f"{module}: not a module of kvtune")
    return ["-I", "-c", _RUN_MODULE, package_root(), module, *args]


def run(argv: Sequence[str], what: str, **kw: Any) -> subprocess.CompletedProcess[Any]:
    """`find(argv[0], what).run(argv[1:], **kw)`."""
    return find(argv[0], what).run(list(argv[1:]), **kw)


def exec_checked(argv: Sequence[str], what: str) -> NoReturn:
    """Replace this process with `argv` after checking argv[0] (the scheduler shim's
    exec). Raises UserError when refused, OSError when the exec fails."""
    prog = find(argv[0], what)
    os.execv(prog.real, [prog.path, *argv[1:]])
