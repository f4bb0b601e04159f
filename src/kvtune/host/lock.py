"""One host, one study: the host-level lock.

A study that manages host state (host knobs, the server's cgroup, server processes: anything
that goes through a journal) holds `/run/kvtune/host.lock` (an exclusive `flock`, or
`$KVTUNE_RUN_DIR/host.lock`) for as long as its journal is open. The file holds the owner's
PID, study name, journal path and start time, so a second study on the same host is refused
with a message that names the running one — whatever journal path either of them uses.

The same directory keeps the list of journals opened on this host and not yet restored
(`journals.json`). A study refuses to start while another journal still holds host changes
(a crashed study's), so two journals can never record the same file's original one after the
other (original 100, study A writes 200, study B records 200 as "original" and writes 300;
restoring both leaves 200). /run is a tmpfs: the lock and the list go away at reboot, as the
kernel's runtime values do.

Studies with no host state (the synthetic target) take no lock, so several of them, like
several fleet workers of one synthetic study, run side by side.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

from kvtune import roots
from kvtune.errors import UserError

DEFAULT_RUN_DIR = Path("/run/kvtune")


def run_dir() -> Path:
    return Path(os.environ.get("KVTUNE_RUN_DIR", str(DEFAULT_RUN_DIR)))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def describe_owner(owner: dict[str, Any] | None) -> str:
    if not owner:
        return "another kvtune process (it did not say which)"
    started = owner.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if started else "?"
    return (f"study {owner.get('study') or 'unnamed'!r} (pid {owner.get('pid')}, "
            f"started {when}, journal {owner.get('journal')})")


class HostLock:
    """The host-level lock. `acquire` raises UserError naming the holder when another
    process has it; `release` gives it up. A context manager as well."""

    def __init__(self, study: str = "", journal: Path | None = None,
                 directory: Path | None = None) -> None:
        self.study = study
        self.journal = journal
        self.dir = directory or run_dir()
        self.path = self.dir / "host.lock"
        self.index = self.dir / "journals.json"
        self._fd: int | None = None

    def __enter__(self) -> HostLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            owner = holder(self.dir)
            if owner and self.study and owner.get("study") == self.study:
                # The same study twice on one host (two fleet workers, say): not "another".
                raise UserError(
                    f"this study already manages this host: {describe_owner(owner)}. One "
                    f"process at a time manages a host's knobs, cgroups and servers "
                    f"({self.path}): a fleet runs one worker per server host; wait for it "
                    "to end, or stop it (kill -TERM its PID: it restores the host)") from None
            raise UserError(
                f"another study manages this host: {describe_owner(owner)}. One "
                f"study at a time manages a host's knobs, cgroups and servers ({self.path}); "
                "wait for it to end, or stop it (kill -TERM its PID: it restores the host)"
            ) from None
        owner = {"pid": os.getpid(), "study": self.study, "started": time.time(),
                 "journal": str(self.journal) if self.journal else None}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(owner).encode(), 0)
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._fd = None

    # -- journals opened on this host -------------------------------------------------------

    def journals(self) -> list[str]:
        data = _read_json(self.index)
        return [str(p) for p in data] if isinstance(data, list) else []

    def _write_index(self, paths: list[str]) -> None:
        tmp = self.index.with_suffix(".tmp")
        tmp.write_text(json.dumps(sorted(set(paths))))
        os.replace(tmp, self.index)

    def add_journal(self, path: Path) -> None:
        """Record that `path` may hold host changes (call with the lock held)."""
        assert self.held, "add_journal needs the host lock"
        self._write_index([*self.journals(), str(Path(path).resolve())])

    def remove_journal(self, path: Path) -> None:
        """`path` holds nothing any more (restored): forget it (call with the lock held)."""
        assert self.held, "remove_journal needs the host lock"
        p = str(Path(path).resolve())
        self._write_index([j for j in self.journals() if j != p])

    def other_journals_with_changes(self, path: Path) -> list[dict[str, Any]]:
        """The journals other than `path` that still record host changes; those that no
        longer exist or are empty are forgotten."""
        mine = str(Path(path).resolve())
        keep: list[str] = []
        left: list[dict[str, Any]] = []
        for j in self.journals():
            if j == mine:
                keep.append(j)
                continue
            state = _read_json(Path(j))
            if isinstance(state, dict) and needs_restore(state):
                keep.append(j)
                left.append({"path": j, "study": state.get("study"),
                             "pid": state.get("owner_pid")})
        if keep != self.journals():
            self._write_index(keep)
        return left


def zombie(pid: int) -> bool:
    """A process that has exited but is not reaped yet (state Z): it runs nothing."""
    try:
        return roots.proc(pid, "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def starttime(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks since boot), None when there is none."""
    try:
        return int(roots.proc(pid, "stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _process_gone(proc: Any) -> bool:
    """A journal's process record whose process no longer runs: the pid is gone, reused by
    another process (other start time) or a zombie. Anything unreadable counts as running."""
    if not isinstance(proc, dict) or not isinstance(proc.get("pid"), int) \
            or not isinstance(proc.get("starttime"), int):
        return False
    pid = proc["pid"]
    return starttime(pid) != proc["starttime"] or zombie(pid)


def needs_restore(state: dict[str, Any]) -> bool:
    """Whether a journal's state records anything `kvtune restore` would still repair: a
    host change, a directory it created, or a server process that still runs. A journal
    left by a study killed between starting a server and changing anything, whose server
    has since exited, has nothing left to repair."""
    if state.get("entries") or state.get("created_dirs"):
        return True
    procs = state.get("processes") or []
    if not isinstance(procs, list):
        return True
    return not all(_process_gone(p) for p in procs)


def holder(directory: Path | None = None) -> dict[str, Any] | None:
    """Who holds the host lock now (its JSON), or None when nobody does. A stale record
    (the process is gone, so the kernel released its flock) reads as nobody."""
    d = directory or run_dir()
    path = d / "host.lock"
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            data = _read_json(path)
            return data if isinstance(data, dict) else {}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


__all__ = ["HostLock", "describe_owner", "holder", "run_dir"]
