"""A redis.conf include with the Redis directives of the recommendation, grouped by
whether they can be applied live (CONFIG SET) or need a restart."""

from __future__ import annotations

from kvtune.export.base import Exporter, ExportFile, Recommendation, comment
from kvtune.knobs.appliers.redis import RedisDirective


class RedisExporter(Exporter):
    name = "redis"
    help = "a redis.conf include (and its rollback)"

    def files(self, rec: Recommendation) -> list[ExportFile]:
        rows = []
        notes = []
        for knob, value, base in rec.knobs("app"):
            if not isinstance(knob.applier, RedisDirective):
                continue
            gate = knob.applier.check(rec.ctx)
            if not gate.ok:
                notes.append(f"left out {knob.name}: {gate.reason}")
                continue
            rows.append((knob.applier, value, base))
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
                group = [(a, b if rollback else v) for a, v, b in rows if a.live == live]
                if group:
                    text += f"\n# {title}\n" + "".join(
                        f"{a.conf_line(val)}\n" for a, val in group if val is not None)
            return text

        return [ExportFile(name, render(False), name.replace(".conf", ".rollback.conf"),
                           render(True),
                           f"include {name.split('/')[-1]} at the end of redis.conf and "
                           "restart redis (or CONFIG SET the live ones); roll back with the "
                           ".rollback.conf include")]
