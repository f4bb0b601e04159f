"""The one way kvtune writes a file of its own (exports, workload models, traces, reports):
no write follows a link, every write is atomic, and no write replaces one of the run's
inputs (issue 29).

- The output directory is opened once; every component below it is opened with
  O_NOFOLLOW|O_DIRECTORY relative to its parent's descriptor (`openat`), created when
  missing, so a link planted at `o/memcached` or `o/memcached/memcached.conf` is refused,
  never followed.
- The data goes to a new temporary file in the same directory (O_CREAT|O_EXCL|O_NOFOLLOW),
  is flushed and fsynced, and is renamed over the name: a reader sees the old file or the
  new one, never half of one, and a failure leaves nothing behind.
- An existing name must be a regular file, and not one of the run's inputs: every file
  kvtune reads as input is noted (`note_input`) by its device and inode, and a write that
  would replace one is refused however it is spelled (`sub/../x.csv`, a link, a hard link).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from kvtune import roots
from kvtune.errors import UserError

_INPUTS: dict[tuple[int, int], str] = {}
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def note_input(path: str | Path | int) -> None:
    """Remember `path` (or an open descriptor) as one of this run's inputs: no write of
    kvtune's may replace it. A file that cannot be stat'ed is not an input."""
    try:
        st = os.fstat(path) if isinstance(path, int) else os.stat(path)
    except OSError:
        return
    if stat.S_ISREG(st.st_mode):
        _INPUTS.setdefault((st.st_dev, st.st_ino), str(path))


def is_input(st: os.stat_result) -> str | None:
    """The name the input with this identity was read by, or None."""
    return _INPUTS.get((st.st_dev, st.st_ino))


def forget_inputs() -> None:
    """For tests: a new run."""
    _INPUTS.clear()


class WriteRefused(UserError):
    """A write kvtune refuses (exit 2): a link on the way, not a regular file, an input."""


def _parts(rel: str | Path) -> list[str]:
    parts = [p for p in Path(rel).parts if p not in ("", ".")]
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise ValueError(f"{rel}: not a plain relative path")
    return parts


def _open_dir(base: Path, parts: list[str], create: bool, what: str) -> int:
    """A descriptor of base/parts..., each component below `base` opened without following
    a link (created with mode 0755 when `create`)."""
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise WriteRefused(f"{what}: {base}: {e.strerror}") from None
    shown = base
    try:
        for part in parts:
            shown = shown / part
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise WriteRefused(f"{what}: the directory {shown} does not exist") \
                        from None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise WriteRefused(f"{what}: {shown} is a symbolic link or not a "
                                       "directory; kvtune never writes through a link") \
                        from None
                raise WriteRefused(f"{what}: {shown}: {e.strerror}") from None
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_name(dfd: int, name: str, shown: Path, what: str) -> None:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise WriteRefused(f"{what}: {shown} is a symbolic link; kvtune never writes through "
                           "a link (remove it, or name another file)")
    if not stat.S_ISREG(st.st_mode):
        raise WriteRefused(f"{what}: {shown} exists and is not a regular file")
    source = is_input(st)
    if source is not None:
        raise WriteRefused(f"{what}: {shown} is {source}, an input of this run: kvtune "
                           "never overwrites what it reads (name another file)")


class AtomicFile:
    """A file being written: data goes to a temporary file beside its name, `commit()`
    renames it over the name (after checking the name again), `abandon()` removes it."""

    def __init__(self, path: str | Path, *, base: str | Path | None = None,
                 mode: int = 0o644, what: str = "output", create_dirs: bool = False,
                 text: bool = True, buffering: int = -1) -> None:
        path = Path(path)
        if base is None:
            base_dir, rel = Path(os.path.abspath(path)).parent, Path(path.name)
        else:
            base_dir, rel = Path(base), path
        parts = _parts(rel)
        self.what = what
        self.path = base_dir.joinpath(*parts)
        self.name = parts[-1]
        self._dfd = _open_dir(base_dir, parts[:-1], create_dirs, what)
        try:
            _check_name(self._dfd, self.name, self.path, what)
            self._tmp = f".{self.name}.kvtune-{os.getpid()}-{id(self):x}"
            fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, mode, dir_fd=self._dfd)
        except BaseException:
            os.close(self._dfd)
            raise
        os.fchmod(fd, mode)  # whatever the umask
        self.file: IO[str] | IO[bytes] | None = (
            os.fdopen(fd, "w", encoding="utf-8", buffering=buffering) if text
            else os.fdopen(fd, "wb", buffering=buffering))

    def commit(self) -> Path:
        f, self.file = self.file, None
        if f is None:
            raise ValueError("committed or abandoned already")
        try:
            f.flush()
            os.fsync(f.fileno())
            f.close()
            _check_name(self._dfd, self.name, self.path, self.what)
            os.rename(self._tmp, self.name, src_dir_fd=self._dfd, dst_dir_fd=self._dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                f.close()
            with contextlib.suppress(OSError):
                os.unlink(self._tmp, dir_fd=self._dfd)
            os.close(self._dfd)
            raise
        os.close(self._dfd)
        return self.path

    def abandon(self) -> None:
        f, self.file = self.file, None
        if f is None:
            return
        with contextlib.suppress(OSError):
            f.close()
        with contextlib.suppress(OSError):
            os.unlink(self._tmp, dir_fd=self._dfd)
        os.close(self._dfd)


@contextlib.contextmanager
def atomic(path: str | Path, **kw: object) -> Iterator[AtomicFile]:
    """`with atomic(path) as a: a.file.write(...)`: committed at the end of the block,
    abandoned (nothing left behind) when it raises."""
    a = AtomicFile(path, **kw)  # type: ignore[arg-type]
    try:
        yield a
    except BaseException:
        a.abandon()
        raise
    a.commit()


def write_file(path: str | Path, data: str | bytes, *, base: str | Path | None = None,
               mode: int = 0o644, what: str = "output", create_dirs: bool = False) -> Path:
    """Write `data` to `path` (relative to `base`, the output directory, when given; else
    in its own directory) as this module promises. Returns the path written. WriteRefused
    (exit 2) naming `what` and why when it may not be written."""
    a = AtomicFile(path, base=base, mode=mode, what=what, create_dirs=create_dirs,
                   text=isinstance(data, str))
    try:
        assert a.file is not None
        a.file.write(data)  # type: ignore[arg-type]
    except BaseException:
        a.abandon()
        raise
    return a.commit()


# -- reading an input ------------------------------------------------------------------------

# Kernel and device trees: never read as a configuration, a workload or a trace (their files
# report size 0, may block, or hold secrets: /proc/self/environ, /proc/kmsg, /dev/zero).
SPECIAL_ROOTS = roots.SPECIAL_TREES


class ReadRefused(UserError):
    """An input kvtune refuses to read (exit 2), named with the bound or the reason."""


def _special(real: str) -> str | None:
    """The kernel or device tree `real` (a resolved path) lies under, or None."""
    for r in SPECIAL_ROOTS:
        if roots.under(real, r):
            return "/" + real.split("/")[1]
    return None


def open_input(path: str | Path, what: str) -> int:
    """A read-only descriptor of the input file `path`, opened only after it was judged:
    a regular file (links followed) outside /proc, /sys and /dev, judged by `stat` and by
    its resolved path before anything is opened; then held by an O_PATH descriptor (which
    opens nothing: no device's open runs, no FIFO waits), judged again on that descriptor
    (the same file, still regular, still outside those trees) and reopened read-only
    through it. A device, a FIFO, a socket or a kernel file is never opened (a watchdog is
    not armed by a `check`). The caller closes it. ReadRefused (exit 2) naming `what`."""
    name = str(path)
    if not name or "\x00" in name or len(name) > 4096:
        raise ReadRefused(f"{what}: not a file name")
    try:
        st = os.stat(name)
    except FileNotFoundError:  # a mistyped path is said to be missing
        raise ReadRefused(f"{what}: {name} does not exist") from None
    except OSError as e:
        raise ReadRefused(f"{what}: {name}: {e.strerror}") from None
    _judge_input(name, st, os.path.realpath(name), what)
    try:
        pfd = os.open(name, os.O_PATH | os.O_CLOEXEC)
    except OSError as e:
        raise ReadRefused(f"{what}: {name}: {e.strerror}") from None
    try:
        pst = os.fstat(pfd)
        fd_link = str(roots.proc("self", "fd", str(pfd)))
        try:
            real = os.readlink(fd_link)
        except OSError:
            real = os.path.realpath(name)
        _judge_input(name, pst, real, what)
        if (pst.st_dev, pst.st_ino) != (st.st_dev, st.st_ino):
            raise ReadRefused(f"{what}: {name} changed while kvtune checked it")
        try:
            fd = os.open(fd_link, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as e:
            raise ReadRefused(f"{what}: {name}: {e.strerror}") from None
    finally:
        os.close(pfd)
    rst = os.fstat(fd)
    if (rst.st_dev, rst.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(rst.st_mode):
        os.close(fd)
        raise ReadRefused(f"{what}: {name} changed while kvtune checked it")
    return fd


def _judge_input(name: str, st: os.stat_result, real: str, what: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise ReadRefused(f"{what}: {name} is a directory")
    top = _special(real)
    if top is not None:
        raise ReadRefused(f"{what}: {name} is under {top}, not a regular file kvtune reads: "
                          "kvtune reads no kernel or device file as input")
    if not stat.S_ISREG(st.st_mode):
        raise ReadRefused(f"{what}: {name} is not a regular file")


def read_input(path: str | Path, limit: int, what: str) -> bytes:
    """The bytes of the input file `path`, opened by `open_input` (judged before it is
    opened), of at most `limit` bytes, read with that bound (a size the file reports is
    not trusted). Notes it as an input (`note_input`). ReadRefused (exit 2) naming
    `what`, the file and the bound otherwise."""
    name = str(path)
    fd = open_input(name, what)
    try:
        st = os.fstat(fd)
        if st.st_size > limit:
            raise ReadRefused(f"{what}: {name} holds {st.st_size} bytes, more than the "
                              f"{_bytes(limit)} a {what} may hold")
        chunks, left = [], limit + 1
        while left > 0:
            try:
                b = os.read(fd, min(left, 1 << 20))
            except BlockingIOError:
                break
            except OSError as e:
                raise ReadRefused(f"{what}: {name}: {e.strerror}") from None
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
        if len(data) > limit:
            raise ReadRefused(f"{what}: {name} holds more than the {_bytes(limit)} a {what} "
                              "may hold")
        note_input(fd)
        return data
    finally:
        os.close(fd)


def _bytes(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else (
        f"{n >> 10} KiB" if n >= 1 << 10 and not n % (1 << 10) else f"{n} bytes")
