"""`kvtune verify STUDY`: is a study's recommendation in effect on this host? Read-only, as
`tuned-adm verify` is: every host knob the recommendation changes (sysctls, THP and the
other sysfs files) is read back, and the running server (found by its process name, or
`--pid`) is checked for the recommended flags and options on its command line, its CPU
affinity and its CPU quota. Each check is one line; exit 0 when all hold, 1 when any
differs or cannot be checked (a server that is not running is not verified).

The server is identified by what it is, not by its name: the process whose /proc/PID/exe is
the server binary kvtune trusts, owned by root or the service's user, listening on the port
the study names (/proc/net/tcp{,6} and the process's socket descriptors); `--pid` is checked
the same way, and a process that fails a check is named, its flags not verified.

Nothing is written and no server is started: the values come from /proc/sys, /sys,
/proc/PID/cmdline, /proc/PID/exe, /proc/PID/fd, /proc/net/tcp, sched_getaffinity and the
process's cgroup files."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvtune import kind_registry as kinds
from kvtune import roots
from kvtune.cpulist import parse_cpus
from kvtune.errors import UserError
from kvtune.export.base import Recommendation
from kvtune.export.systemd import placement_entries
from kvtune.quantities import is_count
from kvtune.safety import programs
from kvtune.safety.programs import Program


def _comm(kind: str | None) -> tuple[str, ...]:
    """The process names of a server kind's server (its default binary first)."""
    k = kinds.find(kind)
    return k.comm if k is not None else ()


@dataclass(frozen=True)
class Check:
    """One line of the verification."""

    what: str  # "sysctl net.core.somaxconn", "memcached -t", "CPU affinity"
    expected: str
    found: str | None  # None: could not be read
    ok: bool
    note: str = ""

    def line(self) -> str:
        mark = "ok     " if self.ok else "DIFFERS"
        found = "(not readable)" if self.found is None else self.found
        text = f"{mark} {self.what}: recommended {self.expected}"
        if not self.ok:
            text += f", found {found}"
        return text + (f" ({self.note})" if self.note else "")


def host_checks(rec: Recommendation) -> list[Check]:
    """Every host knob the recommendation changes, read back through its applier."""
    out = []
    for row in rec.entries("host"):
        if row.entry is None:
            continue
        what = f"{row.entry.family} {row.entry.key}"
        try:
            now = row.knob.applier.current(rec.ctx)
        except (OSError, ValueError) as e:
            out.append(Check(what, row.entry.value, None, False, str(e)))
            continue
        found = None if now is None else row.knob.applier.export_entry(now, rec.ctx)
        text = None if found is None else found.value
        out.append(Check(what, row.entry.value, text, text == row.entry.value))
    return out




def trusted_binary(rec: Recommendation) -> Program:
    """The server binary the study ran (target.binary, else the kind's on PATH), when kvtune
    trusts it (kvtune.safety.programs): what a verified process must be running."""
    target = rec.spec.get("target") or {}
    name = str(target.get("binary") or (_comm(rec.target) or ("",))[0])
    if not name:
        raise UserError(f"the {rec.target} target has no server binary to verify")
    return programs.find(name, f"the {rec.target} server binary")


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def runs_binary(pid: int, binary: Program, proc: Path = Path(roots.PROC)) -> bool | None:
    """Whether process `pid` runs `binary` (its /proc/PID/exe is that file, by device and
    inode); None when that cannot be read."""
    try:
        return _identity(os.stat(proc / str(pid) / "exe")) == _identity(os.stat(binary.real))
    except OSError:
        return None


def server_pids(kind: str | None, binary: Program | None = None,
                proc: Path = Path(roots.PROC)) -> list[int]:
    """The processes running the target kind's trusted server binary (by /proc/PID/exe,
    never by a name a process may give itself)."""
    if binary is None:
        names = _comm(kind)
        binary = programs.lookup(names[0])[0] if names else None
        if binary is None:
            return []
    pids = []
    for d in proc.iterdir():
        if is_count(d.name) and runs_binary(int(d.name), binary, proc):
            pids.append(int(d.name))
    return sorted(pids)


def listening_inodes(port: int, proc: Path = Path(roots.PROC)) -> set[int]:
    """The socket inodes listening on TCP `port` (IPv4 and IPv6), from /proc/net/tcp{,6}."""
    out: set[int] = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            f = ln.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                out.add(int(f[9]))
    return out


def socket_inodes(pid: int, proc: Path = Path(roots.PROC)) -> set[int]:
    """The socket inodes process `pid` holds (OSError when its fds cannot be read)."""
    out = set()
    fd_dir = proc / str(pid) / "fd"
    for fd in os.listdir(fd_dir):
        try:
            link = os.readlink(fd_dir / fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(int(link[8:-1]))
    return out


def _uid(pid: int) -> int:
    for ln in roots.proc(pid, "status").read_text().splitlines():
        if ln.startswith("Uid:"):
            return int(ln.split()[1])
    raise OSError(f"{roots.proc(pid, 'status')} has no Uid line")


def expected_owners(kind: str | None, argv: list[str]) -> dict[int, str]:
    """uid -> name of the owners a verified server may have: root, the kind's packaged
    service accounts, and the user its argv names (memcached -u USER) when that is a
    system account or nobody (a login user can start the trusted binary as itself with
    `-u` naming itself: that proves nothing)."""
    import pwd

    k = kinds.find(kind)
    # The accounts the packaged services run as (Debian, RHEL), and the user the server's
    # own argv names (memcached -u), when its kind reads one.
    names = list(k.service_users) if k is not None else []
    user = k.argv_user(argv) if k is not None and k.argv_user is not None else None
    if user:
        names.append(user)
    out = {0: "root"}
    for n in names:
        try:
            uid = pwd.getpwnam(n).pw_uid
        except KeyError:
            continue
        if n == user and n not in names[:-1] and not _system_account(uid):
            continue  # a login user running the server binary as itself, naming itself
        out[uid] = n
    return out


def _system_account(uid: int) -> bool:
    """A system account (below login.defs' UID_MIN of 1000) or nobody: not one a login
    user can run a process as."""
    return uid < 1000 or uid == 65534


def expected_port(rec: Recommendation, port: int | None) -> int:
    """The port the server must listen on: --port, else the study's target.port, else the
    port the operator's config (--from / target.config) names, else the kind's standard
    one."""
    if port:
        return port
    target = rec.spec.get("target") or {}
    if target.get("port"):
        return int(target["port"])
    for line in (rec.previous_text or "").splitlines():
        words = line.split()
        if len(words) == 2 and words[0] in ("-p", "port") and is_count(words[1]):
            return int(words[1])
    k = kinds.find(rec.target)
    return k.default_port if k is not None else 0


def identity_checks(rec: Recommendation, pid: int, binary: Program,
                    port: int) -> list[Check]:
    """Is process `pid` the server: running the trusted binary, owned as the service is,
    listening on `port`? One Check each."""
    out = []
    exe = runs_binary(pid, binary)
    found_exe: str | None
    try:
        found_exe = os.readlink(roots.proc(pid, "exe"))
    except OSError as e:
        found_exe = None if exe is None else f"({e.strerror})"
    out.append(Check("server binary", binary.real, found_exe, bool(exe),
                     "" if exe else "not the server binary kvtune trusts; "
                     "/proc/PID/exe is what runs, whatever the process calls itself"))
    owners = expected_owners(rec.target, _argv(pid))
    try:
        uid = _uid(pid)
        out.append(Check("server owner", " or ".join(sorted(set(owners.values()))),
                         owners.get(uid, f"uid {uid}"), uid in owners))
    except OSError as e:
        out.append(Check("server owner", "root or the service user", None, False, str(e)))
    try:
        listening = socket_inodes(pid) & listening_inodes(port)
        out.append(Check("server port", f"listening on TCP port {port}",
                         f"listening on TCP port {port}" if listening else "not listening "
                         "on it", bool(listening)))
    except OSError as e:
        out.append(Check("server port", f"listening on TCP port {port}", None, False,
                         f"cannot read {roots.proc(pid, 'fd')}: {e.strerror} (kvtune verify needs "
                         "root to read another user's process)"))
    return out


def _argv(pid: int) -> list[str]:
    raw = roots.proc(pid, "cmdline").read_bytes()
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def flag_checks(rec: Recommendation, pid: int, port: int | None = None) -> list[Check]:
    """The recommended application settings on the running server's command line, as its
    kind reads them (kinds/<kind>/verify.py); settings a kind reads from its own config file
    are read back from the server itself on 127.0.0.1:`port` when its kind can (its canary
    reader's live settings: CONFIG GET, read-only), else said unchecked."""
    argv = _argv(pid)
    out: list[Check] = []
    kind = kinds.find(rec.target)
    if kind is not None and kind.argv_checks is not None:
        out += kind.argv_checks(rec, argv)
    rest = []
    for row in rec.entries("app"):
        e = row.entry
        if e is None:
            continue
        if kind is not None and kind.argv_checks is not None and \
                e.family in kind.argv_families:
            continue  # checked by the kind, on the command line
        rest.append(e)
    live = _live_settings(kind, port, [e.key for e in rest]) if rest else None
    for e in rest:
        if live is not None and e.key in live:
            found = live[e.key]
            out.append(Check(f"{rec.target} {e.key}", e.value, found,
                             _same_setting(kind, e.value, found), "read back from the server"))
            continue
        out.append(Check(f"{rec.target} {e.key}", e.value, None, False,
                             f"{e.family} settings are read from the server's own config, "
                             "not its command line: check with the server's CONFIG GET"))
    return out


def _live_settings(kind: Any, port: int | None, names: list[str]) -> dict[str, str] | None:
    """The settings a running server reports for `names` (on 127.0.0.1:`port`, through its
    kind's canary reader), or None when its kind cannot say or it cannot be reached."""
    if kind is None or kind.canary is None or not port:
        return None
    from kvtune.telemetry.sampler import StatsConn

    reader = kinds.load(kind.canary)
    if not reader.live_settings:
        return None
    try:
        conn = StatsConn("127.0.0.1", port)
    except OSError:
        return None
    try:
        return dict(reader.settings(conn, names))
    except (OSError, ConnectionError, ValueError):
        return None
    finally:
        conn.close()


def _same_setting(kind: Any, expected: str, found: str) -> bool:
    return bool(kinds.load(kind.canary).same(expected, found))


def _cgroup_quota(pid: int) -> str | None:
    """The process's CPU quota as systemd writes it ("50%"), "" for none; None unreadable."""
    try:
        lines = roots.proc(pid, "cgroup").read_text().splitlines()
    except OSError:
        return None
    for ln in lines:
        hier, controllers, path = ln.split(":", 2)
        if hier == "0" and controllers == "":
            for root in (Path(roots.CGROUP_UNIFIED), Path(roots.CGROUP)):
                f = root / path.lstrip("/") / "cpu.max"
                if f.exists():
                    quota, period = f.read_text().split()
                    return "" if quota == "max" else f"{int(quota) * 100 // int(period)}%"
        if "cpu" in controllers.split(","):
            d = Path(roots.CGROUP, "cpu") / path.lstrip("/")
            try:
                q_us = int((d / "cpu.cfs_quota_us").read_text())
                p_us = int((d / "cpu.cfs_period_us").read_text())
            except (OSError, ValueError):
                continue
            return "" if q_us < 0 else f"{q_us * 100 // p_us}%"
    return None


def placement_checks(rec: Recommendation, pid: int) -> list[Check]:
    """The recommended CPU affinity and CPU quota of the running server."""
    out = []
    for e in placement_entries(rec):
        if e.key == "CPUAffinity":
            want = sorted(parse_cpus(e.value.replace(" ", ",")))
            try:
                have = sorted(os.sched_getaffinity(pid))
            except OSError as err:
                out.append(Check("CPU affinity", e.value, None, False, str(err)))
                continue
            out.append(Check("CPU affinity", ",".join(map(str, want)),
                             ",".join(map(str, have)), want == have))
        elif e.key == "CPUQuota":
            have_q = _cgroup_quota(pid)
            out.append(Check("CPU quota", e.value, have_q if have_q else "(none)",
                             have_q == e.value))
        else:
            out.append(Check(f"placement {e.key}", e.value, None, False,
                             "not checked by kvtune verify; see the systemd drop-in"))
    return out


def verify(rec: Recommendation, pid: int | None = None, host_only: bool = False,
           port: int | None = None) -> tuple[list[Check], list[str]]:
    """Every check of the recommendation on this host, and notes (which server process
    was checked, or why none). The server is the process that runs the trusted server
    binary and listens on the study's port (`expected_port`), or `pid`, checked the same
    way; its flags and placement are verified only when it is (issue 29: a script named
    memcached, run by anyone, with the recommended flags in its argv, proved nothing).
    UserError (exit 2) when `pid` is no process."""
    checks = host_checks(rec)
    notes: list[str] = []
    server_side = [r for r in rec.entries("app") if r.entry is not None] \
        or placement_entries(rec)
    if host_only or not server_side:
        return checks, notes
    if pid is not None and (pid <= 0 or not roots.proc(pid).is_dir()):
        raise UserError(f"--pid {pid}: no such process on this host")
    try:
        binary = trusted_binary(rec)
    except UserError as e:
        checks.append(Check(f"{rec.target} server", "the trusted server binary", None,
                            False, f"{e}; the server is not verified"))
        return checks, notes
    want_port = expected_port(rec, port)
    if pid is None:
        pids = server_pids(rec.target, binary)
        on_port = [p for p in pids if _listens(p, want_port)]
        if not pids:
            checks.append(Check(f"{rec.target} server", "running", None, False,
                                f"no {rec.target} process on this host runs {binary.path}: "
                                "its flags and placement are not verified (start it, or "
                                "--host-only)"))
            return checks, notes
        chosen = on_port or pids
        if len(chosen) > 1:
            notes.append(f"{len(chosen)} {rec.target} processes "
                         f"({', '.join(map(str, chosen))}); checking {chosen[0]} (choose one "
                         "with --pid)")
        pid = chosen[0]
    try:
        argv = _argv(pid)
        ident = identity_checks(rec, pid, binary, want_port)
    except OSError as e:
        raise UserError(f"server pid {pid}: {e.strerror or e} (did it exit?)") from None
    checks += ident
    notes.append(f"server: {rec.target} pid {pid}: {' '.join(argv)}")
    failed = [c.what for c in ident if not c.ok]
    if failed:
        notes.append(f"pid {pid} is not verified as the {rec.target} server ("
                     f"{', '.join(failed)} differ): its flags and placement are not checked")
        return checks, notes
    checks += flag_checks(rec, pid, want_port) + placement_checks(rec, pid)
    return checks, notes


def _listens(pid: int, port: int) -> bool:
    try:
        return bool(socket_inodes(pid) & listening_inodes(port))
    except OSError:
        return False
