"""A redis.conf include with the Redis directives of the recommendation, grouped by
whether they can be applied live (CONFIG SET) or need a restart."""

from __future__ import annotations

from kvtune.export.base import Exporter, ExportFile, Recommendation, comment
from kvtune.knobs.appliers.base import ExportEntry


def _conf_line(e: ExportEntry) -> str:
    """The directive as a redis.conf line (an empty value is written as "")."""
    return f"{e.key} {e.value if e.value else chr(34) * 2}"


class RedisExporter(Exporter):
    name = "redis"
    help = "a redis.conf include (and its rollback)"

    def files(self, rec: Recommendation) -> list[ExportFile]:
        rows: list[tuple[ExportEntry, ExportEntry | None]] = []
        notes = []
        for row in rec.entries("app"):
            if row.entry is None or row.entry.family != "redis":
                continue
            gate = row.knob.applier.check(rec.ctx)
            if not gate.ok:
                notes.append(f"left out {row.knob.name}: {gate.reason}")
                continue
            rows.append((row.entry, row.rollback))
        if not rows:
            return []
        name = f"redis/kvtune-{rec.study}.conf"

        def render(rollback: bool) -> str:
            head = rec.header(f"redis.conf include for {rec.study}", rollback,
                f"Install: copy to /etc/redis/ and add `include /etc/redis/"
                f"{name.split('/')[-1]}` at the END of redis.conf (the last value wins).", *notes)
            text = comment(head)
            for live, title in ((True, "live: also applicable with CONFIG SET, no restart"),
                                (False, "needs a restart")):
                group = [b if rollback else e for e, b in rows if e.live == live]
                if group:
                    text += f"\n# {title}\n" + "".join(
                        f"{_conf_line(e)}\n" for e in group if e is not None)
            return text

        return [ExportFile(name, render(False), name.replace(".conf", ".rollback.conf"),
                           render(True),
                           f"include {name.split('/')[-1]} at the end of redis.conf and "
                           "restart redis (or CONFIG SET the live ones); roll back with the "
                           ".rollback.conf include")]
