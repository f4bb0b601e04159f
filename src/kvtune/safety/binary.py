"""`target.binary` must be the target's server: a regular executable file whose name is
the server's, answering its version probe with the server's banner. A study file naming
/bin/sh, a script or a directory is refused before anything is started with its args."""

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
