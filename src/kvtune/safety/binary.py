"""`target.binary` must be the target's server: a regular executable file whose name is
the server's, which kvtune may execute (`kvtune.safety.programs`: the file, every link and
every directory up to `/` owned by root and writable by nobody else), answering its
version probe with the server's banner. A study file naming /bin/sh, a script, a directory
or a file another user could have replaced is refused before anything is executed, the
version probe included."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from kvtune.errors import UserError
from kvtune.safety import programs
from kvtune.safety.programs import Program

PROBE_TIMEOUT = 5.0


def _refuse(msg: str) -> UserError:
    return UserError(f"target.binary: {msg}")


def untrusted(path: str) -> str | None:
    """Why kvtune, running as root, must not execute `path`, or None
    (`kvtune.safety.programs.check`)."""
    return programs.untrusted(path)


def trusted(path: str, what: str) -> Program:
    """`path` as a Program when kvtune may execute it; UserError naming `what` and why
    otherwise."""
    return programs.find(path, what)


def find_server(name: str, kind: str, server_name: str, version_args: tuple[str, ...],
                banner: str) -> Program:
    """The server binary `name` (a path, or a name on PATH), after checking that it is
    `kind`'s server. Raises UserError (exit 2) otherwise; nothing runs before the trust
    check."""
    if not name or any(c in name for c in "\x00\n\r") or len(name) > 4096:
        raise _refuse(f"{name!r} is not a file name")
    if "/" in name:
        p = Path(name)
        try:
            st = p.stat()
        except FileNotFoundError:
            raise _refuse(f"{name} does not exist") from None
        except OSError as e:
            raise _refuse(f"{name}: {e.strerror}") from None
        if stat.S_ISDIR(st.st_mode):
            raise _refuse(f"{name} is a directory, not the {kind} server")
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(f"{name} is not a regular file")
        if not os.access(p, os.X_OK):
            raise _refuse(f"{name} is not executable")
    elif programs.which(name) is None:
        raise _refuse(f"{name!r} not found on PATH; install it (`make setup` installs "
                      "every server kvtune tunes) or give a path")
    if not os.path.basename(name).startswith(server_name):
        raise _refuse(f"{name!r} is not a {kind} server: kvtune runs only the target's "
                      f"server, whose file name begins with {server_name!r}")
    try:
        prog = programs.find(name, "target.binary")
    except programs.Untrusted as e:
        raise _refuse(str(e).removeprefix("target.binary: ")) from None
    _probe(prog, kind, version_args, banner)
    return prog


def find_server_binary(name: str, kind: str, server_name: str,
                       version_args: tuple[str, ...], banner: str) -> str:
    """The absolute path of the server binary `name` (`find_server`)."""
    return find_server(name, kind, server_name, version_args, banner).path


# The binaries that answered their kind's banner in this process, by what identifies the
# file's content (device, inode, size, modification and change times): a study builds its
# target more than once, and the same unchanged file is not asked again. A file replaced or
# modified since has another key (its change time moves) and is probed afresh.
_ANSWERED: set[tuple[object, ...]] = set()


def _probe(prog: Program, kind: str, version_args: tuple[str, ...], banner: str) -> None:
    if not banner:
        return
    try:
        st = os.stat(prog.path)
        key: tuple[object, ...] | None = (prog.path, st.st_dev, st.st_ino, st.st_size,
                                          st.st_mtime_ns, st.st_ctime_ns, version_args, banner)
    except OSError:
        key = None
    if key is not None and key in _ANSWERED:
        return
    try:
        out = prog.run(version_args, capture_output=True, timeout=PROBE_TIMEOUT,
                       start_new_session=True)
    except programs.TimeoutExpired:
        raise _refuse(f"{prog.path} {' '.join(version_args)} did not answer within "
                      f"{PROBE_TIMEOUT:g}s; it is not the {kind} server") from None
    except OSError as e:
        raise _refuse(f"cannot run {prog.path}: {e.strerror}") from None
    text = (out.stdout + out.stderr).decode(errors="replace")
    first = text.strip().splitlines()[0] if text.strip() else ""
    if not re.match(banner, first):
        shown = "something else" if first else "nothing"
        raise _refuse(f"{prog.path} answered `{' '.join(version_args)}` with {shown}, not "
                      f"the {kind} server's version banner")
    if key is not None:
        _ANSWERED.add(key)
