"""memcached options in Debian's /etc/memcached.conf form: one option per line, `#`
comments. Version traps are the appliers' (slab_chunk_max unit, worker_logbuf_size)."""

from __future__ import annotations

from kvtune.export.base import Exporter, ExportFile, Recommendation, Row, comment
from kvtune.knobs.appliers.base import ExportEntry

# The service lines of Debian's default /etc/memcached.conf, kept so the file is complete.
SERVICE_LINES = ["-p 11211", "-u memcache", "-l 127.0.0.1", "-P /var/run/memcached/memcached.pid"]
FAMILIES = ("memcached-flag", "memcached-option")


def option_lines(entries: list[ExportEntry]) -> list[str]:
    """The lines for memcached's export entries: one per flag, the options joined into one
    `-o a=b,c` line at the end."""
    lines = [f"{e.key} {e.value}".rstrip() for e in entries if e.family == "memcached-flag"]
    options = [e.key if e.value == "" else f"{e.key}={e.value}" for e in entries
               if e.family == "memcached-option"]
    if options:
        lines.append("-o " + ",".join(options))
    return lines


class MemcachedExporter(Exporter):
    name = "memcached"
    help = "memcached options in /etc/memcached.conf form (and the defaults to roll back)"

    def files(self, rec: Recommendation) -> list[ExportFile]:
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
        if not rows and not notes:
            return []

        def render(rollback: bool) -> str:
            chosen = [e for r in rows
                      if (e := r.rollback if rollback else r.entry) is not None
                      and e.family in FAMILIES]
            head = rec.header("memcached configuration (Debian /etc/memcached.conf form)",
                              rollback,
                "Install: merge into /etc/memcached.conf and restart memcached "
                "(every memcached option needs a restart).", *notes)
            return (comment(head) + "\n# service options (Debian's defaults)\n"
                    + "".join(f"{ln}\n" for ln in SERVICE_LINES)
                    + "\n# tuned options\n"
                    + "".join(f"{ln}\n" for ln in option_lines(chosen)))

        return [ExportFile("memcached/memcached.conf", render(False),
                           "memcached/memcached.rollback.conf", render(True),
                           "merge memcached/memcached.conf into /etc/memcached.conf and "
                           "restart memcached; roll back with memcached.rollback.conf")]
