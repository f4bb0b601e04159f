"""`kvtune verify STUDY`: is a study's recommendation in effect on this host? Read-only, as
`tuned-adm verify` is: every host knob the recommendation changes (sysctls, THP and the
other sysfs files) is read back, and the running server (found by its process name, or
`--pid`) is checked for the recommended flags and options on its command line, its CPU
affinity and its CPU quota. Each check is one line; exit 0 when all hold, 1 when any
differs or cannot be checked (a server that is not running is not verified).

Nothing is written and no server is started: the values come from /proc/sys, /sys,
/proc/PID/cmdline, sched_getaffinity and the process's cgroup files."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kvtune.cpulist import parse_cpus
from kvtune.export.base import Recommendation
from kvtune.export.systemd import placement_entries

# The process names of each target kind's server (/proc/PID/comm).
SERVER_COMM = {"memcached": ("memcached",), "redis": ("redis-server",)}


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


def server_pids(kind: str | None, proc: Path = Path("/proc")) -> list[int]:
    """The processes of the target kind's server on this host, by /proc/PID/comm."""
    names = SERVER_COMM.get(kind or "", ())
    pids = []
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            if (d / "comm").read_text().strip() in names:
                pids.append(int(d.name))
        except OSError:
            continue
    return sorted(pids)


def _argv(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _flag_value(argv: list[str], flag: str) -> str | None:
    """The value memcached's argv gives `flag` ("-t 4", "-t4", "--threads=4"); "" for a
    bare flag that is present; None when absent. The last occurrence wins, as in getopt."""
    found = None
    for i, a in enumerate(argv):
        if a == flag:
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            found = "" if nxt.startswith("-") else nxt
        elif flag.startswith("--") and a.startswith(flag + "="):
            found = a.split("=", 1)[1]
        elif not flag.startswith("--") and len(flag) == 2 and a.startswith(flag) \
                and len(a) > 2:
            found = a[2:]
    return found


def _options(argv: list[str]) -> dict[str, str]:
    """memcached's `-o a=b,c` options (every -o, later ones win)."""
    out: dict[str, str] = {}
    for i, a in enumerate(argv):
        text = None
        if a in ("-o", "--extended") and i + 1 < len(argv):
            text = argv[i + 1]
        elif a.startswith("--extended="):
            text = a.split("=", 1)[1]
        if text:
            for item in text.split(","):
                k, _, v = item.partition("=")
                out[k.strip()] = v.strip()
    return out


def flag_checks(rec: Recommendation, pid: int) -> list[Check]:
    """The recommended memcached flags and options on the running server's command line."""
    argv = _argv(pid)
    opts = _options(argv)
    out = []
    if rec.target == "memcached":  # the fixed arguments it was measured with (-m 256, ...)
        from kvtune.export.memcached import arg_lines

        for ln in arg_lines(rec.target_args):
            flag, _, value = ln.partition(" ")
            if flag in ("-o", "--extended"):
                for item in value.split(","):
                    k, _, v = item.partition("=")
                    got = opts.get(k)
                    out.append(Check(f"memcached -o {k} (target.args)", v or "(set)",
                                     "(absent)" if got is None else (got or "(set)"),
                                     got == v))
                continue
            found = _flag_value(argv, flag)
            out.append(Check(f"memcached {flag} (target.args)", value or "(set)",
                             "(absent)" if found is None else (found or "(set)"),
                             found == value))
    for row in rec.entries("app"):
        e = row.entry
        if e is None:
            continue
        if e.family == "memcached-flag":
            found = _flag_value(argv, e.key)
            out.append(Check(f"{rec.target} {e.key}", e.value or "(set)",
                             "(absent)" if found is None else (found or "(set)"),
                             found == e.value if e.value else found is not None))
        elif e.family == "memcached-option":
            got = opts.get(e.key)
            out.append(Check(f"{rec.target} -o {e.key}", e.value or "(set)",
                             "(absent)" if got is None else (got or "(set)"),
                             got is not None and got == e.value))
        else:
            out.append(Check(f"{rec.target} {e.key}", e.value, None, False,
                             f"{e.family} settings are read from the server's own config, "
                             "not its command line: check with the server's CONFIG GET"))
    return out


def _cgroup_quota(pid: int) -> str | None:
    """The process's CPU quota as systemd writes it ("50%"), "" for none; None unreadable."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for ln in lines:
        hier, controllers, path = ln.split(":", 2)
        if hier == "0" and controllers == "":
            for root in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
                f = root / path.lstrip("/") / "cpu.max"
                if f.exists():
                    quota, period = f.read_text().split()
                    return "" if quota == "max" else f"{int(quota) * 100 // int(period)}%"
        if "cpu" in controllers.split(","):
            d = Path("/sys/fs/cgroup/cpu") / path.lstrip("/")
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


def verify(rec: Recommendation, pid: int | None = None, host_only: bool = False
           ) -> tuple[list[Check], list[str]]:
    """Every check of the recommendation on this host, and notes (which server process
    was checked, or why none)."""
    checks = host_checks(rec)
    notes: list[str] = []
    server_side = [r for r in rec.entries("app") if r.entry is not None] \
        or placement_entries(rec)
    if host_only or not server_side:
        return checks, notes
    if pid is None:
        pids = server_pids(rec.target)
        if not pids:
            checks.append(Check(f"{rec.target} server", "running", None, False,
                                f"no {rec.target} process on this host: its flags and "
                                "placement are not verified (start it, or --host-only)"))
            return checks, notes
        if len(pids) > 1:
            notes.append(f"{len(pids)} {rec.target} processes ({', '.join(map(str, pids))}); "
                         f"checking {pids[0]} (choose one with --pid)")
        pid = pids[0]
    notes.append(f"server: {rec.target} pid {pid}: {' '.join(_argv(pid))}")
    checks += flag_checks(rec, pid) + placement_checks(rec, pid)
    return checks, notes
