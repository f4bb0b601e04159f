"""A systemd drop-in for the server's unit with its placement: CPUAffinity (pinning),
AllowedCPUs (cpuset), CPUQuota and CPUQuotaPeriodSec (CFS bandwidth)."""

from __future__ import annotations

from kvtune.export.base import Exporter, ExportFile, Recommendation, comment

UNITS = {"memcached": "memcached.service", "redis": "redis-server.service"}


class SystemdExporter(Exporter):
    name = "systemd"
    help = "a systemd drop-in with CPUAffinity and CPUQuota for the server's unit"

    def files(self, rec: Recommendation) -> list[ExportFile]:
        rows = [r.entry for r in rec.entries() if r.entry and r.entry.family == "systemd"]
        if not rows:
            return []
        unit = UNITS.get(rec.target or "", "memcached.service")

        def render(rollback: bool) -> str:
            head = rec.header(f"systemd drop-in for {unit}", rollback,
                f"Install: copy to /etc/systemd/system/{unit}.d/ and run `systemctl "
                f"daemon-reload && systemctl restart {unit}`.",
                "An empty value resets a setting to systemd's default (every CPU, no quota);",
                "the rollback resets every setting this drop-in makes (the unit's own state",
                "before kvtune, not the study's fixed benchmark placement).",
                "AllowedCPUs needs cgroup v2 (systemd >= 244); CPUQuotaPeriodSec systemd >= 242.")
            text = comment(head) + "\n[Service]\n"
            for e in rows:
                text += f"{e.key}={'' if rollback else e.value}\n"
            return text

        d = f"systemd/{unit}.d"
        return [ExportFile(f"{d}/90-kvtune.conf", render(False),
                           f"{d}/90-kvtune.rollback.conf", render(True),
                           f"cp {d}/90-kvtune.conf /etc/systemd/system/{unit}.d/ && systemctl "
                           f"daemon-reload; roll back: install the rollback file in its place")]
