"""memcached options in Debian's /etc/memcached.conf form (one option per line, `#`
comments), read by Debian's systemd-memcached-wrapper and start-memcached. The file holds
the configuration that was measured: the target's fixed arguments (`target.args`, such as
`-m 256`) and every changed memcached knob, merged into the host's file when one is given
(`--from /etc/memcached.conf`). The pinning is the systemd drop-in's.

The rollback (rollback/memcached/memcached.conf) is the host's previous file, or, without
one, Debian's service lines alone: memcached's own defaults for everything else. Version
traps are the appliers' (slab_chunk_max unit, worker_logbuf_size)."""

from __future__ import annotations

from kvtune.export.base import Exporter, ExportFile, Recommendation, Row, comment, rollback_path
from kvtune.knobs.appliers.base import ExportEntry

# The service lines of Debian's default /etc/memcached.conf, kept so the file is complete.
SERVICE_LINES = ["-p 11211", "-u memcache", "-l 127.0.0.1", "-P /var/run/memcached/memcached.pid"]
FAMILIES = ("memcached-flag", "memcached-option")


def arg_lines(args: list[str]) -> list[str]:
    """memcached argv words as conf lines: each flag with the words that follow it."""
    lines: list[str] = []
    for a in args:
        if a.startswith("-") or not lines:
            lines.append(a)
        else:
            lines[-1] += f" {a}"
    return lines


def option_lines(entries: list[ExportEntry]) -> list[str]:
    """The lines for memcached's export entries: one per flag, the options joined into one
    `-o a=b,c` line at the end."""
    lines = [f"{e.key} {e.value}".rstrip() for e in entries if e.family == "memcached-flag"]
    options = [e.key if e.value == "" else f"{e.key}={e.value}" for e in entries
               if e.family == "memcached-option"]
    if options:
        lines.append("-o " + ",".join(options))
    return lines


def _flag(line: str) -> str:
    return line.split(None, 1)[0].split("=", 1)[0]


def _o_keys(line: str) -> set[str]:
    return {o.split("=", 1)[0] for o in line.split(None, 1)[1].split(",")} \
        if " " in line else set()


def merge(previous: list[str], ours: list[str]) -> list[str]:
    """`previous` conf lines (comments kept) without the options `ours` sets, then `ours`."""
    flags = {_flag(ln) for ln in ours if _flag(ln) != "-o"}
    okeys = set().union(*(_o_keys(ln) for ln in ours if _flag(ln) == "-o"))
    kept = []
    for ln in previous:
        s = ln.strip()
        if not s.startswith("-"):
            kept.append(ln)
        elif _flag(s) == "-o":
            rest = [o for o in s.split(None, 1)[1].split(",") if o.split("=", 1)[0] not in okeys] \
                if " " in s else []
            if rest:
                kept.append("-o " + ",".join(rest))
        elif _flag(s) not in flags:
            kept.append(ln)
    return kept


def kept_lines(previous: list[str], fixed: list[str], tuned: list[str],
               where: str) -> list[str]:
    """The export's notes on the operator's settings it kept: each of the study's fixed
    arguments (`target.args`) the operator's file sets otherwise, and each it does not set
    at all (memcached's default applies there, as before)."""
    ours = {_flag(ln) for ln in tuned}
    theirs = {_flag(ln.strip()): ln.strip() for ln in previous
              if ln.strip().startswith("-") and _flag(ln.strip()) != "-o"}
    out = []
    for ln in fixed:
        f = _flag(ln)
        if f in ours or f == "-o":
            continue
        if f in theirs and theirs[f] != ln:
            out.append(f"kept from {where}: {theirs[f]} (the study measured with {ln}, a "
                       "test setting)")
        elif f not in theirs:
            out.append(f"not written: {ln} (a test setting of the study; {where} does not "
                       "set it)")
    return out


class MemcachedExporter(Exporter):
    name = "memcached"
    help = ("memcached's measured options in /etc/memcached.conf form (rollback: the "
            "previous file or memcached's defaults)")

    def files(self, rec: Recommendation) -> list[ExportFile]:
        if rec.target not in (None, "memcached"):
            return []
        rows: list[Row] = []
        notes: list[str] = []
        for row in rec.entries("app"):
            if row.knob.target != "memcached":
                continue
            gate = row.knob.applier.check(rec.ctx)
            if not gate.ok:
                notes.append(f"left out {row.knob.name} ({row.knob.applier.where()}): "
                             f"{gate.reason}")
                continue
            rows.append(row)
        fixed = arg_lines(rec.target_args) if rec.target == "memcached" else []
        if not rows and not fixed and not notes:
            return []
        tuned = option_lines([e for r in rows if (e := r.entry) is not None
                              and e.family in FAMILIES])
        fixed = merge(fixed, tuned)
        if rec.target_cpus:
            notes.append(f"measured pinned to CPUs {rec.target_cpus}: install the systemd "
                         "drop-in too (CPUAffinity)")
        prev = rec.previous_text.splitlines() if rec.previous_text is not None else None
        if prev is not None:
            # Production keeps its own settings: only what the recommendation changed
            # replaces the operator's lines; the study's scaffolding (target.args: memory,
            # ports, listen addresses...) is never written over them.
            notes += kept_lines(prev, fixed, tuned, str(rec.previous))
        # The operator's own file is replaced where it lives (a path given relative to
        # where kvtune ran says nothing of where the server reads it: Debian's then).
        dest = (str(rec.previous) if prev is not None and rec.previous is not None
                and rec.previous.is_absolute() else "/etc/memcached.conf")
        how = (f"Install: replace {dest} with this file (it is the operator's file "
               "with only the recommended changes merged in)"
               if prev is not None else
               "Install: merge into /etc/memcached.conf (the service lines are Debian's "
               "defaults)") + " and restart memcached (every option needs a restart)."
        head = comment(rec.header("memcached configuration (Debian /etc/memcached.conf form)",
                                  how, *notes))
        if prev is not None:
            body = "".join(f"{ln}\n" for ln in merge(prev, tuned))
        else:
            body = ("\n# service options (Debian's defaults)\n"
                    + "".join(f"{ln}\n" for ln in SERVICE_LINES))
            if fixed:
                body += ("\n# fixed server arguments of the study (target.args): test "
                         "settings, review them\n" + "".join(f"{ln}\n" for ln in fixed))
        if tuned:
            body += "\n# tuned options\n" + "".join(f"{ln}\n" for ln in tuned)
        if prev is not None:
            rb = rec.previous_text or ""
            restores = f"the host's previous {rec.previous} (byte for byte)"
        else:
            restores = "memcached's own defaults (Debian's service lines only)"
            rb = comment(rec.rollback_header("memcached.conf", restores)) + "".join(
                f"{ln}\n" for ln in SERVICE_LINES)
        back = rollback_path("memcached/memcached.conf")
        return [ExportFile("memcached/memcached.conf", head + body, back, rb,
                           f"install memcached/memcached.conf as {dest} and restart "
                           f"memcached; roll back: install {back} ({restores})")]
