"""The journal: the one place through which kvtune writes to the host.

Before the first write to a file, its original value is written to the journal on disk
(flushed and fsynced); every write is read back; `restore()` puts every original back,
removes the cgroups kvtune created and stops server processes it left behind. After a
crash (kill -9), `kvtune restore` does the same from the file alone.

Opening a journal takes the host-level lock (`kvtune.host.lock`): one study at a time
manages a host, whatever journal path it uses, and a journal left with changes by a crashed
study blocks every other journal until `kvtune restore` has put the host back.

Only files under /proc/sys and /sys (which holds the cgroup trees) may be written, never
one on the deny-list, and cgroup files only inside kvtune's own cgroups: `check_path`
enforces `kvtune.safety.hostpaths` (the one owner of those rules) for every write, the
cgroups kvtune makes, the server's move into one (`move_into_cgroup`), and `kvtune restore`
replaying a journal file. A journal file is
input too: `restore_from_file` checks every entry before it writes anything.

Changes that are not a file write (a per-process scheduler setting, a mount, ...) are
journaled as undo entries: before the change, the applier records a registered undo kind
and JSON-able arguments (`Journal.record_undo`); restore calls the kind's undo function
with them, also from the file alone after a crash. An undo kind is registered with
`register_undo` by the module of its applier; after a crash, restore imports the module
of a kind it knows from its own table (`UNDO_MODULES`), never a module a journal file
names.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvtune import roots
from kvtune.errors import HarnessError, UserError
from kvtune.host.facts import selected
from kvtune.host.lock import HostLock, needs_restore
from kvtune.host.lock import starttime as _starttime
from kvtune.host.lock import zombie as _zombie
from kvtune.safety import hostpaths

DEFAULT_PATH = Path("/var/lib/kvtune/journal.json")
ALLOWED_ROOTS: tuple[Path, ...] = tuple(Path(r) for r in hostpaths.ALLOWED_ROOTS)
MAX_JOURNAL_BYTES = 8 << 20


def default_path() -> Path:
    return Path(os.environ.get("KVTUNE_JOURNAL", str(DEFAULT_PATH)))


def _plain(text: str) -> str:
    return " ".join(text.split())


def _bracketed(text: str) -> str:
    """sysfs multiple-choice files show the selected value in brackets: 'always [madvise] never'."""
    choice = selected(text)
    return _plain(text) if choice is None else choice


def _yes_no(text: str) -> str:
    """A kernel module's bool parameter: it reads Y or N and takes 1, 0, y, n."""
    t = text.strip()
    return {"y": "1", "n": "0"}.get(t.lower(), t)


READERS: dict[str, Callable[[str], str]] = {"plain": _plain, "bracketed": _bracketed,
                                            "yn": _yes_no}


def read_value(path: Path, reader: str = "plain") -> str:
    return READERS[reader](path.read_text())


UndoFn = Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class _Undo:
    fn: UndoFn
    module: str
    check: Callable[[dict[str, Any]], object] | None = None


_UNDO: dict[str, _Undo] = {}


def register_undo(kind: str, fn: UndoFn,
                  check: Callable[[dict[str, Any]], object] | None = None) -> None:
    """Register how to undo changes of `kind`: `fn(args)` puts back what was changed and
    returns a detail for people ("policy SCHED_OTHER restored"); it raises OSError or
    ValueError when it cannot. It must be safe to call again (restore may be retried).
    `check(args)` raises ValueError for arguments `fn` would refuse: a journal is checked
    whole, entry by entry, before anything is put back (`check_state`)."""
    _UNDO[kind] = _Undo(fn, getattr(fn, "__module__", "") or "", check)


def undo_port(args: dict[str, Any]) -> int:
    """The TCP port of an undo's arguments (a journal is input: int() took '1_1211' and
    6379.9); ValueError unless an integer from 1 to 65535."""
    port = args.get("port")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"port {str(port)[:20]!r} is not a TCP port")
    return port


def undo_value(args: dict[str, Any]) -> str:
    """The setting an undo puts back: text or an integer of at most 1,024 characters
    without control characters (it becomes one argument of a server's command)."""
    value = args.get("value")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError("the value to put back is not text")
    if isinstance(value, int) and abs(value) >= 10**100:
        raise ValueError("the value to put back is a number of more than 100 digits")
    text = str(value)  # may be empty: Redis's `save ""`
    if len(text) > 1024 or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError("the value to put back is not one line of at most 1,024 characters")
    return text


# Where each undo kind is registered: after a crash the restoring process has not imported
# the applier yet, and imports it from here, or a server kind's canary module (the kind
# registry names it). The `module` a journal file records is never imported (a crafted
# one named kvtune.__main__, which re-entered the CLI).
UNDO_MODULES = {
    "pm_qos": "kvtune.knobs.appliers.idle",
    "sched-feature": "kvtune.knobs.appliers.sched",
    "debugfs-mount": "kvtune.host.debugfs",
}


def undo_modules() -> list[str]:
    """Every module that may register an undo kind: UNDO_MODULES's and the kinds'."""
    from kvtune import kind_registry as kinds

    return [*UNDO_MODULES.values(),
            *dict.fromkeys(k.canary.split(":", 1)[0] for k in kinds.every() if k.canary)]


def _undo_fn(kind: str, module: str = "") -> UndoFn | None:
    """The undo function of `kind` (`module`, as a journal records it, is not used)."""
    if kind not in _UNDO:
        for name in ([UNDO_MODULES[kind]] if kind in UNDO_MODULES else undo_modules()):
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
    entry = _UNDO.get(kind)
    return entry.fn if entry else None


def check_path(path: Path, allowed_roots: tuple[Path, ...] = ALLOWED_ROOTS) -> Path:
    """`path` resolved (symlinks followed), when it lies under one of `allowed_roots` and,
    on the host's own trees, is not on kvtune.safety.hostpaths' deny-list (cgroup files
    only inside kvtune's cgroups); raises HarnessError otherwise. Every host write, and
    every restore, passes here."""
    real = Path(os.path.realpath(path))
    # cgroup and sysfs entries are often symlinks inside /sys; judge the resolved path.
    if not any(real == r or r in real.parents for r in allowed_roots):
        raise HarnessError(f"refusing to write {path}: only /proc/sys and /sys may be written")
    if any(real == r or r in real.parents for r in ALLOWED_ROOTS):
        why = hostpaths.write_refusal(str(real))
        if why:
            shown = f"{path} (resolved to {real})" if str(real) != str(path) else str(path)
            raise HarnessError(f"refusing to write {shown}: writing it {why}")
    return real


@dataclass
class RestoreResult:
    what: str
    ok: bool
    detail: str


class Journal:
    """A journal bound to one file. Use as a context manager for a study: it takes an
    exclusive lock, refuses to start over a journal left by a crashed study, and
    restores everything on exit."""

    def __init__(
        self,
        path: Path | None = None,
        allowed_roots: tuple[Path, ...] = ALLOWED_ROOTS,
        study: str = "",
    ) -> None:
        self.path = path or default_path()
        self.allowed_roots = tuple(Path(r) for r in allowed_roots)
        self.study = study
        self._lock_fd: int | None = None
        self._host_lock: HostLock | None = None
        self._state: dict[str, Any] = {
            "version": 1,
            "owner_pid": os.getpid(),
            "study": study,
            "started": time.time(),
            "entries": [],
            "created_dirs": [],
            "processes": [],
        }

    # -- life cycle -------------------------------------------------------------------------

    def __enter__(self) -> Journal:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            failures = [r for r in self.restore() if not r.ok]
        finally:
            self.close()
        if failures and exc[0] is None:
            raise HarnessError(
                "could not restore every host value: "
                + "; ".join(f"{r.what}: {r.detail}" for r in failures)
                + f" (the journal {self.path} is kept; fix the cause and run `kvtune restore`)"
            )

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        host_lock = HostLock(self.study, self.path)
        host_lock.acquire()  # UserError naming the study that manages this host
        self._host_lock = host_lock
        try:
            self._lock_fd = _take_lock(self.path)
            if self.path.exists() and _load(self.path).get("entries") is not None:
                left = _load(self.path)
                if needs_restore(left):
                    raise UserError(
                        f"an earlier study ({left.get('study') or 'unnamed'}, pid "
                        f"{left.get('owner_pid')}) left host changes in {self.path}; "
                        "run `kvtune restore` first"
                    )
            others = host_lock.other_journals_with_changes(self.path)
            if others:
                raise UserError(
                    "an earlier study left host changes in another journal; restore them "
                    "first so that no original value is recorded twice: "
                    + "; ".join(f"`kvtune restore --journal {o['path']}` (study "
                                f"{o['study'] or 'unnamed'}, pid {o['pid']})" for o in others))
            host_lock.add_journal(self.path)
            self._flush()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._host_lock is not None:
            self._host_lock.release()
            self._host_lock = None

    # -- writes -----------------------------------------------------------------------------

    def check_allowed(self, path: Path) -> Path:
        return check_path(path, self.allowed_roots)

    def original(self, path: Path) -> str | None:
        for e in self._state["entries"]:
            if e.get("path") == str(path):
                return str(e["original"])
        return None

    def record_undo(self, kind: str, args: dict[str, Any], key: str | None = None) -> None:
        """Record, before an applier changes something that is not a file, how to undo it:
        the registered undo `kind` and JSON-able `args`. With `key`, only the first record
        under that key is kept (the original state, as for files). Restore undoes entries
        in the reverse order of recording, files and undo entries alike."""
        if kind not in _UNDO:
            raise HarnessError(f"undo kind {kind!r} is not registered (journal.register_undo)")
        if key is not None and any(e.get("key") == key for e in self._state["entries"]):
            return
        json.dumps(args)  # JSON-able, or TypeError now rather than an unreadable journal
        self._state["entries"].append({"undo": kind, "module": _UNDO[kind].module,
                                       "args": args, "key": key})
        self._flush()

    def write(self, path: Path, value: str, reader: str = "plain") -> None:
        """Write `value` to `path`, recording the original first, and verify by read-back.
        Raises OSError when the kernel refuses the write and ValueError when the value
        read back differs (the write did not take)."""
        path = Path(path)
        self.check_allowed(path)
        if self.original(path) is None and not self._created(path):
            current = read_value(path, reader)
            self._state["entries"].append(
                {"path": str(path), "original": current, "reader": reader})
            self._flush()
        _write_file(path, value)
        got = read_value(path, reader)
        if got != READERS[reader](value):
            raise ValueError(f"{path}: wrote {value!r} but read back {got!r}")

    def make_dir(self, path: Path) -> None:
        """Create a directory (a cgroup) and record it so restore removes it."""
        path = Path(path)
        self.check_allowed(path)
        if str(path) not in self._state["created_dirs"]:
            self._state["created_dirs"].append(str(path))
            self._flush()
        path.mkdir(exist_ok=True)

    def move_into_cgroup(self, directory: Path, pid: int) -> None:
        """Move process `pid` into the cgroup `directory`: a write of its cgroup.procs, checked
        as every host write is (the resolved path, kvtune's own cgroups only), and only into
        a cgroup this journal created. Nothing is recorded to put back: a pid cannot be
        moved back out meaningfully (the process is kvtune's server, started for this
        trial), it leaves the cgroup when it ends (stopped by the runner, or by restore from
        `processes`), and restore removes the cgroup itself (`created_dirs`, after killing
        whatever still runs in it)."""
        directory = Path(directory)
        procs = self.check_allowed(directory / "cgroup.procs")
        if str(directory) not in self._state["created_dirs"]:
            raise HarnessError(f"refusing to move process {pid} into {directory}: not a "
                               "cgroup this study created (restore could not remove it)")
        _write_file(procs, str(pid))

    def add_process(self, pid: int, name: str) -> None:
        self._state["processes"].append({"pid": pid, "starttime": _starttime(pid), "name": name})
        self._flush()

    def forget_process(self, pid: int) -> None:
        self._state["processes"] = [p for p in self._state["processes"] if p["pid"] != pid]
        self._flush()

    def settle(self) -> None:
        """The changes recorded so far are meant to stay (a canary's rollback, read back):
        forget them, so that neither the exit nor `kvtune restore` undoes them. Processes
        and created cgroups are kept: they are never meant to outlive the journal."""
        self._state["entries"] = []
        self._flush()

    def _created(self, path: Path) -> bool:
        return any(Path(d) in path.parents for d in self._state["created_dirs"])

    # -- restore ----------------------------------------------------------------------------

    def restore(self) -> list[RestoreResult]:
        results = restore_state(self._state)
        if all(r.ok for r in results):
            self._state.update(entries=[], created_dirs=[], processes=[])
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            if self._host_lock is not None:
                self._host_lock.remove_journal(self.path)
        else:
            # Restoring is idempotent: keep every entry so `kvtune restore` can try again.
            self._flush()
        return results

    def _flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(self._state, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


def _write_file(path: Path, value: str) -> None:
    # A plain open/write: the kernel validates the value and answers EINVAL/EPERM itself.
    with open(path, "w") as f:
        f.write(value)


def _take_lock(journal_path: Path) -> int:
    fd = os.open(str(journal_path) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UserError(
            f"another kvtune study holds {journal_path}.lock; wait for it or stop it first"
        ) from None
    return fd


def _load(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    except (OSError, ValueError):
        return {}


def _comm(pid: int) -> str:
    try:
        return roots.proc(pid, "comm").read_text().strip()
    except OSError:
        return ""


def restore_state(state: dict[str, Any], servers: dict[str, str] | None = None
                  ) -> list[RestoreResult]:
    results: list[RestoreResult] = []
    for proc in state.get("processes", []):
        pid = int(proc["pid"])
        comm = None if servers is None else servers.get(str(proc.get("name")), "")[:15]
        if proc.get("starttime") is not None and _starttime(pid) == proc["starttime"] \
                and (comm is None or _comm(pid) == comm):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            for _ in range(250):
                if _starttime(pid) != proc["starttime"]:
                    break
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                time.sleep(0.02)
            gone = _starttime(pid) != proc["starttime"] or _zombie(pid)
            results.append(RestoreResult(f"process {pid} ({proc.get('name')})", gone,
                                         "stopped" if gone else "still running after "
                                         "SIGKILL (5 s)"))
    for entry in reversed(state.get("entries", [])):
        if "undo" in entry:
            results.append(_replay_undo(entry))
            continue
        path = Path(entry["path"])
        reader = entry.get("reader", "plain")
        try:
            _write_file(path, entry["original"])
            got = read_value(path, reader)
            ok = got == READERS[reader](entry["original"])
            results.append(RestoreResult(str(path), ok, f"restored {entry['original']!r}"
                                         if ok else f"read back {got!r}"))
        except FileNotFoundError:
            # A file inside a cgroup that no longer exists has nothing left to restore.
            results.append(RestoreResult(str(path), True, "gone"))
        except OSError as e:
            results.append(RestoreResult(str(path), False, e.strerror or str(e)))
    for d in reversed(state.get("created_dirs", [])):
        path = Path(d)
        try:
            _drain_cgroup(path)
            path.rmdir()
            results.append(RestoreResult(str(path), True, "removed"))
        except FileNotFoundError:
            results.append(RestoreResult(str(path), True, "gone"))
        except OSError as e:
            results.append(RestoreResult(str(path), False, e.strerror or str(e)))
    return results


def _replay_undo(entry: dict[str, Any]) -> RestoreResult:
    kind = str(entry["undo"])
    what = f"{kind} {json.dumps(entry.get('args'), sort_keys=True)}"
    fn = _undo_fn(kind, str(entry.get("module", "")))
    if fn is None:
        return RestoreResult(what, False, f"no undo registered for {kind!r} in this kvtune")
    try:
        return RestoreResult(what, True, fn(dict(entry.get("args") or {})))
    except (OSError, ValueError) as e:
        return RestoreResult(what, False, getattr(e, "strerror", None) or str(e))
    except (LookupError, TypeError, AttributeError):
        # A journal file's args are input: a registered kind with args it does not take (a
        # missing key, a value of another type) is a failed entry, not a traceback.
        return RestoreResult(what, False, "its args are not what this undo takes (the "
                             "journal was changed?)")


def _drain_cgroup(path: Path) -> None:
    """Kill whatever still runs in a cgroup kvtune created, so it can be removed."""
    procs = path / "cgroup.procs"
    for _ in range(50):
        try:
            pids = [int(p) for p in procs.read_text().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def read_journal_file(path: Path) -> dict[str, Any]:
    """A journal file as untrusted input: a regular file of bounded size holding one JSON
    object. UserError (exit 2) naming what is wrong; nothing is written."""
    import stat

    try:
        st = path.lstat()
    except OSError as e:
        raise UserError(f"journal {path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"journal {path} is not a regular file")
    if st.st_size > MAX_JOURNAL_BYTES:
        raise UserError(f"journal {path}: {st.st_size} bytes; a journal holds at most "
                        f"{MAX_JOURNAL_BYTES >> 20} MiB")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        raise UserError(f"journal {path} is not a kvtune journal (JSON)") from None
    if not isinstance(data, dict):
        raise UserError(f"journal {path} is not a kvtune journal (a JSON object)")
    return data


def check_state(state: dict[str, Any], allowed_roots: tuple[Path, ...] = ALLOWED_ROOTS,
                servers: dict[str, str] | None = None) -> list[str]:
    """Every problem of a journal's content, one per entry: what restore would write must
    lie inside the writable roots and off the deny-list, created directories must be
    kvtune's cgroups, undo kinds registered by kvtune, processes plausible."""
    problems: list[str] = []
    lists = {k: state.get(k, []) for k in ("entries", "created_dirs", "processes")}
    for k, v in lists.items():
        if not isinstance(v, list):
            problems.append(f"{k}: not a list")
    if problems:
        return problems
    for i, e in enumerate(lists["entries"]):
        at = f"entries[{i}]"
        if not isinstance(e, dict):
            problems.append(f"{at}: not an object")
        elif "undo" in e:
            kind, module, args = e.get("undo"), e.get("module", ""), e.get("args", {})
            if not isinstance(kind, str) or not isinstance(module, str) or \
                    not isinstance(args, dict):
                problems.append(f"{at}: an undo entry needs a kind, a module and args")
            elif _undo_fn(kind) is None:  # imports only the modules of UNDO_MODULES
                problems.append(f"{at}: undo kind {kind!r} is not one kvtune registers")
            elif (check := _UNDO[kind].check) is not None:
                try:
                    check(args)
                except ValueError as err:
                    problems.append(f"{at} ({kind}): {str(err)[:200]}")
        else:
            p, original, reader = e.get("path"), e.get("original"), e.get("reader", "plain")
            if not isinstance(p, str) or not isinstance(original, str) or \
                    reader not in READERS:
                problems.append(f"{at}: a file entry needs a path, its original text and a "
                                "known reader")
                continue
            if len(original) > 65536 or "\x00" in original:
                problems.append(f"{at}: the original value of {p} is not a kernel setting")
                continue
            try:
                check_path(Path(p), allowed_roots)
            except HarnessError as err:
                problems.append(f"{at}: {err}")
    for i, d in enumerate(lists["created_dirs"]):
        at = f"created_dirs[{i}]"
        real = os.path.realpath(d) if isinstance(d, str) else ""
        if not isinstance(d, str) or not any(
                Path(real) == r or r in Path(real).parents for r in allowed_roots):
            problems.append(f"{at}: {d!r} is outside the writable roots")
        elif any(Path(real) == r or r in Path(real).parents for r in ALLOWED_ROOTS) and (
                not real.startswith(hostpaths.CGROUP_ROOT)
                or not hostpaths.KVTUNE_CGROUP.fullmatch(Path(real).name)):
            problems.append(f"{at}: {d} is not a cgroup kvtune creates (kvtune-PID under "
                            f"{hostpaths.CGROUP_ROOT})")
    for i, proc in enumerate(lists["processes"]):
        at = f"processes[{i}]"
        if not isinstance(proc, dict) or not isinstance(proc.get("pid"), int) or \
                isinstance(proc.get("pid"), bool) or not 1 < proc["pid"] < 1 << 22 or \
                not isinstance(proc.get("starttime"), int | None):
            problems.append(f"{at}: not a process kvtune started (pid > 1, its start time)")
        elif servers is not None and proc.get("name") not in servers:
            problems.append(f"{at}: {proc.get('name')!r} is not a server kvtune starts "
                            f"({', '.join(sorted(servers))})")
    return problems


def restore_from_file(path: Path | None = None,
                      allowed_roots: tuple[Path, ...] = ALLOWED_ROOTS,
                      servers: dict[str, str] | None = None) -> list[RestoreResult]:
    """`kvtune restore`: undo what a crashed or killed study left, verified by read-back.
    The file is checked whole first (`check_state`): a bad one is refused with a
    UserError naming each bad entry, and nothing is written. `servers` (target kind ->
    the server's process name) says which recorded processes may be stopped: one is
    signalled only while its start time and its name both match."""
    path = path or default_path()
    if not path.exists():
        return []
    with HostLock("kvtune restore", path) as host_lock:
        problems = check_state(read_journal_file(path), allowed_roots, servers)
        if problems:  # refused before anything is written, a lock file beside it included
            raise UserError(f"journal {path} holds entries kvtune never writes; nothing was "
                            "restored", problems)
        lock = _take_lock(path)
        try:
            state = read_journal_file(path)
            if check_state(state, allowed_roots, servers):
                raise UserError(f"journal {path} changed while it was read; nothing was "
                                "restored")
            results = restore_state(state, servers)
            if all(r.ok for r in results):
                path.unlink()
                host_lock.remove_journal(path)
            return results
        finally:
            os.close(lock)
