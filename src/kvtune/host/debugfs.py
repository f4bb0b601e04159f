"""debugfs, where the scheduler's features live: is it mounted, could it be, what can be
read and written there, and mounting it for a study through the journal.

When it is not mounted, `debugfs_file` and `debugfs_status` probe it in a private mount
namespace (kvtune's own Python calling unshare(2) and mount(2): nothing changes on the
host, and no mount or unshare program runs) to learn whether the scheduler's files could
be read and written, so `kvtune check` and preflight say the truth on an
unmounted host. A study whose knobs live there mounts it through the journal before
anything is applied (`mount_debugfs`, undo kind `debugfs-mount`, called for the study's
host plan, `kvtune.host.plan`): the end of the study unmounts it, and so does
`kvtune restore` after a crash. Under kernel lockdown the scheduler's files answer EPERM
and `features_status` says so.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvtune import roots
from kvtune.safety import programs

if TYPE_CHECKING:
    from kvtune.host.journal import Journal

FEATURES = f"{roots.DEBUGFS}/sched/features"


@dataclass(frozen=True)
class DebugfsStatus:
    mounted: bool
    mountable: bool
    features_readable: bool
    features_writable: bool
    features: tuple[str, ...]  # this kernel's feature names (NO_ prefix = off), when readable
    reason: str  # why features cannot be tuned, for people ("" when they can)


@dataclass(frozen=True)
class DebugfsFile:
    """One file under debugfs as kvtune could open it (mounted now, or in a probe)."""

    path: str
    readable: bool
    writable: bool
    text: str  # what it read ("" when not readable)
    reason: str  # why it cannot be written, for people ("" when it can)


def _mounted(mounts: str = f"{roots.PROC}/self/mounts") -> bool:
    try:
        return any(line.split()[1:3] == [roots.DEBUGFS, "debugfs"]
                   for line in Path(mounts).read_text().splitlines() if line.strip())
    except OSError:
        return False


def debugfs_mounted() -> bool:
    """Whether debugfs is mounted at /sys/kernel/debug now."""
    return _mounted()


def _why(err: str, op: str, probed: bool) -> str:
    if err == "EPERM":
        err = "EPERM (kernel lockdown restricts debugfs)"
    return f"{err} on {op}" + (" (probed with debugfs mounted in a private mount namespace)"
                               if probed else "")


# Opens each file under a directory as kvtune would (read, then O_WRONLY without writing),
# in whichever mount namespace it runs; prints {path: [readable, writable, text, error]}.
_PROBE = r"""
import errno, json, os, stat, sys
out = {}
for d, _, names in os.walk(sys.argv[1]):
    for n in names:
        p = os.path.join(d, n); r = w = False; text = ""; why = ""
        try:
            with open(p) as f:
                text = f.read(65536)
            r = True
            if not os.stat(p).st_mode & 0o222:
                why = "read-only"
            else:
                os.close(os.open(p, os.O_WRONLY)); w = True
        except OSError as e:
            why = "EPERM" if e.errno == errno.EPERM else (e.strerror or str(e))
        out[p] = [r, w, text, why]
print(json.dumps(out))
"""

# Before the probe: a private mount namespace (unshare(CLONE_NEWNS), every mount made
# private) with debugfs mounted in it; it ends with the probe's process.
_NAMESPACE = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def must(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        sys.stderr.write(f"{what}: {os.strerror(e)}\n"); sys.exit(1)
must(libc.unshare(0x00020000), "unshare(CLONE_NEWNS)")
must(libc.mount(b"none", b"/", None, 16384 | 262144, None), "mount --make-rprivate /")
must(libc.mount(b"none", sys.argv[2].encode(), b"debugfs", 0, None), "mount debugfs")
sys.argv[1:] = [sys.argv[2] + "/sched"]
"""


def _python(script: str, *args: str) -> programs.CompletedProcess[str]:
    return programs.python().run(programs.python_code(script, *args), capture_output=True,
                                 text=True, timeout=10)


def _probe_here(root: str) -> dict[str, list[Any]]:
    out = _python(_PROBE, root)
    if out.returncode != 0:
        raise ValueError(f"exit {out.returncode}: {out.stderr.strip()[-200:]}")
    data: dict[str, list[Any]] = json.loads(out.stdout)
    return data


def _libc_call(name: str, *args: Any) -> None:
    """A mount(2)/umount2(2) call through libc; OSError with its errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{name}: {os.strerror(e)}")


@functools.cache
def _namespace_probe() -> tuple[bool, dict[str, list[Any]], str]:
    """(mountable, files under sched/ as opened with debugfs mounted in a private mount
    namespace, why not mountable). The host's mounts do not change."""
    try:
        known = "debugfs" in Path(roots.PROC, "filesystems").read_text()
    except OSError:
        known = False
    if not known:
        return False, {}, "this kernel has no debugfs (not in /proc/filesystems)"
    if os.geteuid() != 0:
        return False, {}, (f"debugfs is not mounted at {roots.DEBUGFS}, and probing it needs root")
    try:
        out = _python(_NAMESPACE + _PROBE, "-", roots.DEBUGFS)
    except (OSError, programs.TimeoutExpired, programs.Untrusted) as e:
        return False, {}, f"debugfs probe failed: {e}"
    if out.returncode != 0:
        return False, {}, f"mounting debugfs failed: {out.stderr.strip()[-200:]}"
    try:
        return True, json.loads(out.stdout), ""
    except ValueError:
        return True, {}, f"debugfs probe: unreadable answer {out.stdout[:80]!r}"


def debugfs_file(path: str) -> DebugfsFile:
    """`path` (under /sys/kernel/debug) as kvtune can open it: directly when debugfs is
    mounted, else as probed in a private mount namespace (cached until kvtune mounts or
    unmounts debugfs)."""
    if _mounted():
        try:
            files = _probe_here(str(Path(path).parent))
        except (OSError, ValueError, programs.SubprocessError, programs.Untrusted) as e:
            return DebugfsFile(path, False, False, "", f"{path}: probe failed: {e}")
        probed = False
    else:
        mountable, files, why = _namespace_probe()
        if not mountable:
            return DebugfsFile(path, False, False, "", why)
        probed = True
    if path not in files:
        return DebugfsFile(path, False, False, "", f"{path} does not exist"
                           + (" (probed with debugfs mounted in a private mount namespace)"
                              if probed else ""))
    r, w, text, err = files[path]
    reason = "" if w else f"{path}: {_why(err, 'write' if r else 'read', probed)}"
    return DebugfsFile(path, bool(r), bool(w), str(text), reason)


@functools.cache
def debugfs_status() -> DebugfsStatus:
    """Whether the scheduler's features can be tuned here. When debugfs is not mounted,
    the probe runs in a private mount namespace, so the host's mounts do not change."""
    mounted = _mounted()
    mountable = mounted or _namespace_probe()[0]
    f = debugfs_file(FEATURES)
    return DebugfsStatus(mounted, mountable, f.readable, f.writable, tuple(f.text.split()),
                         f.reason)


def _forget() -> None:
    """Forget what was probed (debugfs was mounted or unmounted)."""
    debugfs_status.cache_clear()
    _namespace_probe.cache_clear()


def features_status() -> tuple[bool, str]:
    """(available, reason) for the scheduler-feature knobs."""
    st = debugfs_status()
    return st.features_writable, st.reason


def _umount(args: dict[str, Any]) -> str:
    path = str(args["path"])
    if path != roots.DEBUGFS:  # replayed from a journal file: kvtune mounts debugfs there only
        raise ValueError(f"refusing to unmount {path}: kvtune mounts only debugfs at "
                         f"{roots.DEBUGFS}")
    if not _mounted():
        return f"{path} already unmounted"
    try:
        _libc_call("umount2", path.encode(), 0)
    except OSError as e:
        raise OSError(e.errno or errno.EBUSY, f"umount {path}: {e.strerror}") from None
    _forget()
    return f"debugfs unmounted from {path}"


def mount_debugfs(journal: Journal) -> bool:
    """Mount debugfs for the study when it is not mounted, journaled (unmounted on
    restore). Returns True when it mounted it."""
    if _mounted():
        return False
    journal.record_undo("debugfs-mount", {"path": roots.DEBUGFS}, key="debugfs-mount")
    try:
        _libc_call("mount", b"none", roots.DEBUGFS.encode(), b"debugfs", 0, None)
    except OSError as e:
        raise OSError(e.errno or errno.EPERM, f"mount debugfs: {e.strerror}") from None
    _forget()
    return True


def needs_debugfs(where: str) -> bool:
    return roots.DEBUGFS in where


def _register_undo() -> None:
    from kvtune.host.journal import register_undo

    register_undo("debugfs-mount", _umount)


_register_undo()
