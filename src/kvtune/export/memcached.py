"""memcached options in Debian's /etc/memcached.conf form: one option per line, `#`
comments. Version traps are the appliers' (slab_chunk_max unit, worker_logbuf_size)."""

from __future__ import annotations

from kvtune.export.base import Exporter, ExportFile, Recommendation, comment
from kvtune.knobs.appliers.memcached import MemcachedFlag, MemcachedOption
from kvtune.knobs.domain import Value
from kvtune.knobs.knob import Knob

# The service lines of Debian's default /etc/memcached.conf, kept so the file is complete.
SERVICE_LINES = ["-p 11211", "-u memcache", "-l 127.0.0.1", "-P /var/run/memcached/memcached.pid"]


def option_lines(rows: list[tuple[Knob, Value]], rec: Recommendation) -> tuple[list[str],
                                                                               list[str]]:
    """The option lines for (knob, value) pairs, and notes on what was left out."""
    lines: list[str] = []
    options: list[str] = []
    notes: list[str] = []
    for knob, value in rows:
        applier = knob.applier
        gate = applier.check(rec.ctx)
        if not gate.ok:
            notes.append(f"left out {knob.name} ({applier.where()}): {gate.reason}")
            continue
        if isinstance(applier, MemcachedOption):
            opt = applier.option(value, rec.ctx)
            if opt is not None:
                options.append(opt[0] if opt[1] == "" else f"{opt[0]}={opt[1]}")
        elif isinstance(applier, MemcachedFlag):
            words = applier.argv(value, rec.ctx)
            if words:
                lines.append(" ".join(words))
    if options:
        lines.append("-o " + ",".join(options))
    return lines, notes


class MemcachedExporter(Exporter):
    name = "memcached"
    help = "memcached options in /etc/memcached.conf form (and the defaults to roll back)"

    def files(self, rec: Recommendation) -> list[ExportFile]:
        rows = [(k, v, b) for k, v, b in rec.knobs("app") if k.target == "memcached"]
        if not rows:
            return []

        def render(rollback: bool) -> str:
            chosen: list[tuple[Knob, Value]] = []
            for k, v, b in rows:
                value = b if rollback else v
                if value is not None:
                    chosen.append((k, value))
            lines, notes = option_lines(chosen, rec)
            head = rec.header("memcached configuration (Debian /etc/memcached.conf form)",
                              rollback,
                "Install: merge into /etc/memcached.conf and restart memcached "
                "(every memcached option needs a restart).", *notes)
            return (comment(head) + "\n# service options (Debian's defaults)\n"
                    + "".join(f"{ln}\n" for ln in SERVICE_LINES)
                    + "\n# tuned options\n" + "".join(f"{ln}\n" for ln in lines))

        return [ExportFile("memcached/memcached.conf", render(False),
                           "memcached/memcached.rollback.conf", render(True),
                           "merge memcached/memcached.conf into /etc/memcached.conf and "
                           "restart memcached; roll back with memcached.rollback.conf")]
