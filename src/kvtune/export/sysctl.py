"""/etc/sysctl.d drop-in: `key = value` lines for the sysctls the recommendation changes.
The rollback holds this host's values at export time, under rollback/ with a `.rollback`
suffix (sysctl.d reads *.conf only): remove the drop-in, then `sysctl -p` the rollback."""

from __future__ import annotations

from kvtune import roots
from kvtune.export.base import Exporter, ExportFile, Recommendation, comment, rollback_path


def sysctl_rows(rec: Recommendation) -> tuple[list[tuple[str, str, str | None]], list[str]]:
    """(key, recommended value, value on this host now) for each sysctl of the
    recommendation, and why others were left out."""
    rows: list[tuple[str, str, str | None]] = []
    skipped = []
    for row in rec.entries("host"):
        if row.entry is None or row.entry.family != "sysctl":
            skipped.append(f"{row.knob.name} ({row.knob.applier.where()}) is not a sysctl; "
                           "see the tuned profile")
            continue
        key = row.entry.key
        if not rec.ctx.fs.exists(roots.sysctl_path(key)):
            skipped.append(f"{key} does not exist on this host")
            continue
        now = rec.host_entry(row)
        rows.append((key, row.entry.value, now.value if now else None))
    return rows, skipped


class SysctlExporter(Exporter):
    name = "sysctl"
    help = "an /etc/sysctl.d file (rollback: this host's values, then remove the file)"

    def files(self, rec: Recommendation) -> list[ExportFile]:
        rows, skipped = sysctl_rows(rec)
        if not rows:
            return []
        base = f"90-kvtune-{rec.study}.conf"
        name = f"sysctl.d/{base}"
        back = rollback_path(name, ".rollback")
        notes = [f"left out: {s}" for s in skipped]
        head = rec.header(f"sysctl.d file for {rec.study}",
                          f"Install: cp {base} /etc/sysctl.d/ && sysctl -p /etc/sysctl.d/{base}",
                          f"Roll back: rm /etc/sysctl.d/{base} && sysctl -p {back}", *notes)
        text = comment(head) + "".join(f"{k} = {v}\n" for k, v, _ in rows)
        rb_head = rec.rollback_header(f"sysctl.d/{base}", "this host's sysctl values",
                                      f"Apply after `rm /etc/sysctl.d/{base}`: sysctl -p {back}")
        rb = comment(rb_head) + "".join(f"{k} = {now}\n" for k, _, now in rows
                                        if now is not None)
        return [ExportFile(name, text, back, rb,
                           f"cp {name} /etc/sysctl.d/ && sysctl -p /etc/sysctl.d/{base}; "
                           f"roll back: rm /etc/sysctl.d/{base} && sysctl -p {back}")]
