"""`target.binary` must be the target's server: a regular executable file whose name is
the server's, owned by root and writable by nobody else (nor its directory), answering its
version probe with the server's banner. A study file naming /bin/sh, a script, a directory
or a file another user could have replaced is refused before anything is executed, the
version probe included (`untrusted` is checked before every server or peer tool runs)."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

from kvtune.errors import UserError

PROBE_TIMEOUT = 5.0


def _refuse(msg: str) -> UserError:
    return UserError(f"target.binary: {msg}")


def untrusted(path: str) -> str | None:
    """Why kvtune, running as root, must not execute `path`, or None: the file (symlinks
    followed) must be owned by root and not writable by group or others, and so must the
    directory that holds it (whoever may write there may replace the file)."""
    real = os.path.realpath(path)
    for p, what in ((real, "the file"), (os.path.dirname(real) or "/", "its directory")):
        try:
            st = os.stat(p)
        except OSError as e:
            return f"{path}: {e.strerror}"
        if st.st_uid != 0:
            return (f"{path}: {what} ({p}) is owned by uid {st.st_uid}, not root: another "
                    "user could change what kvtune executes as root")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return (f"{path}: {what} ({p}) is writable by group or others (mode "
                    f"{stat.S_IMODE(st.st_mode):o}): another user could change what kvtune "
                    "executes as root")
    return None


def trusted(path: str, what: str) -> str:
    """`path` when kvtune may execute it (`untrusted` is None); UserError naming `what`
    and why otherwise."""
    why = untrusted(path)
    if why:
        raise UserError(f"{what}: refused: {why}")
    return path


def find_server_binary(name: str, kind: str, server_name: str, version_args: tuple[str, ...],
                       banner: str) -> str:
    """The absolute path of the server binary `name` (a path, or a name on PATH), after
    checking that it is `kind`'s server. Raises UserError (exit 2) otherwise."""
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
        found = str(p.absolute())
    else:
        which = shutil.which(name)
        if which is None:
            raise _refuse(f"{name!r} not found on PATH; install it (`make setup` installs "
                          "memcached and redis-server) or give a path")
        found = which
    if not os.path.basename(name).startswith(server_name):
        raise _refuse(f"{name!r} is not a {kind} server: kvtune runs only the target's "
                      f"server, whose file name begins with {server_name!r}")
    why = untrusted(found)
    if why:
        raise _refuse(why)
    _probe(found, kind, version_args, banner)
    return found


def _probe(path: str, kind: str, version_args: tuple[str, ...], banner: str) -> None:
    if not banner:
        return
    argv = [path, *version_args]
    try:
        out = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    except subprocess.TimeoutExpired:
        raise _refuse(f"{path} {' '.join(version_args)} did not answer within "
                      f"{PROBE_TIMEOUT:g}s; it is not the {kind} server") from None
    except OSError as e:
        raise _refuse(f"cannot run {path}: {e.strerror}") from None
    text = (out.stdout + out.stderr).decode(errors="replace")
    first = text.strip().splitlines()[0] if text.strip() else ""
    if not re.match(banner, first):
        shown = first[:80] or "nothing"
        raise _refuse(f"{path} answered `{' '.join(version_args)}` with {shown!r}, not the "
                      f"{kind} server's version banner")
