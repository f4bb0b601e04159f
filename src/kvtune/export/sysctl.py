"""/etc/sysctl.d drop-in: `key = value` lines for the sysctls of the recommendation."""

from __future__ import annotations

from kvtune.export.base import Exporter, ExportFile, Recommendation, comment
from kvtune.knobs.appliers.hostfile import Sysctl


def sysctl_value(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class SysctlExporter(Exporter):
    name = "sysctl"
    help = "an /etc/sysctl.d file (and its rollback)"

    def files(self, rec: Recommendation) -> list[ExportFile]:
        rows = []
        skipped = []
        for knob, value, base in rec.knobs("host"):
            applier = knob.applier
            if not isinstance(applier, Sysctl):
                skipped.append(f"{knob.name} ({applier.where()}) is not a sysctl; see the "
                               "tuned profile")
                continue
            if not rec.ctx.fs.exists(applier.locations[0].path):
                skipped.append(f"{applier.key} does not exist on this host")
                continue
            rows.append((applier.key, value, base))
        if not rows:
            return []
        name = f"sysctl.d/90-kvtune-{rec.study}.conf"
        notes = [f"left out: {s}" for s in skipped]

        def render(rollback: bool) -> str:
            head = rec.header(f"sysctl.d file for {rec.study}", rollback,
                "Install: copy to /etc/sysctl.d/ and run `sysctl --system`.", *notes)
            body = "".join(f"{key} = {sysctl_value(base if rollback else value)}\n"
                           for key, value, base in rows)
            return comment(head) + body

        return [ExportFile(name, render(False),
                           name.replace(".conf", ".rollback.conf"), render(True),
                           f"cp {name} /etc/sysctl.d/ && sysctl --system; roll back: replace "
                           "it with the .rollback.conf file, run `sysctl --system`, then "
                           "delete both")]
