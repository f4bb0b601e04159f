"""/etc/sysctl.d drop-in: `key = value` lines for the sysctls of the recommendation."""

from __future__ import annotations

from kvtune.export.base import Exporter, ExportFile, Recommendation, comment


class SysctlExporter(Exporter):
    name = "sysctl"
    help = "an /etc/sysctl.d file (and its rollback)"

    def files(self, rec: Recommendation) -> list[ExportFile]:
        rows: list[tuple[str, str, str | None]] = []
        skipped = []
        for row in rec.entries("host"):
            if row.entry is None or row.entry.family != "sysctl":
                skipped.append(f"{row.knob.name} ({row.knob.applier.where()}) is not a sysctl; "
                               "see the tuned profile")
                continue
            key = row.entry.key
            if not rec.ctx.fs.exists("/proc/sys/" + key.replace(".", "/")):
                skipped.append(f"{key} does not exist on this host")
                continue
            rows.append((key, row.entry.value, row.rollback.value if row.rollback else None))
        if not rows:
            return []
        name = f"sysctl.d/90-kvtune-{rec.study}.conf"
        notes = [f"left out: {s}" for s in skipped]

        def render(rollback: bool) -> str:
            head = rec.header(f"sysctl.d file for {rec.study}", rollback,
                "Install: copy to /etc/sysctl.d/ and run `sysctl --system`.", *notes)
            body = "".join(f"{key} = {base if rollback else value}\n"
                           for key, value, base in rows if (base if rollback else value)
                           is not None)
            return comment(head) + body

        return [ExportFile(name, render(False),
                           name.replace(".conf", ".rollback.conf"), render(True),
                           f"cp {name} /etc/sysctl.d/ && sysctl --system; roll back: replace "
                           "it with the .rollback.conf file, run `sysctl --system`, then "
                           "delete both")]
