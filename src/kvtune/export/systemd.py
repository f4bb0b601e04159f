"""A systemd drop-in for the server's unit with its placement: CPUAffinity (pinning),
AllowedCPUs (cpuset), CPUQuota and CPUQuotaPeriodSec (CFS bandwidth)."""

from __future__ import annotations

from kvtune.export.base import Exporter, ExportFile, Recommendation, comment
from kvtune.knobs.domain import Value

UNITS = {"memcached": "memcached.service", "redis": "redis-server.service"}


def _affinity(v: Value | None) -> str:
    # systemd takes CPU lists with ranges ("0-1 3"); empty resets to every CPU.
    return "" if v is None else str(v).replace(",", " ")


def _quota(pct: Value | None) -> str:
    return "" if pct is None or int(pct) < 0 else f"{int(pct)}%"


def _period(us: Value | None) -> str:
    return "" if us is None else f"{int(us) / 1000:g}ms"


SETTINGS = {
    "placement.server_cpus": ("CPUAffinity", _affinity),
    "placement.cpuset": ("AllowedCPUs", _affinity),
    "placement.cpu_quota_pct": ("CPUQuota", _quota),
    "placement.cpu_period_us": ("CPUQuotaPeriodSec", _period),
}


class SystemdExporter(Exporter):
    name = "systemd"
    help = "a systemd drop-in with CPUAffinity and CPUQuota for the server's unit"

    def files(self, rec: Recommendation) -> list[ExportFile]:
        rows = [(k, v) for k, v, _ in rec.knobs() if k.name in SETTINGS]
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
            for knob, value in rows:
                key, fmt = SETTINGS[knob.name]
                text += f"{key}={fmt(None if rollback else value)}\n"
            return text

        d = f"systemd/{unit}.d"
        return [ExportFile(f"{d}/90-kvtune.conf", render(False),
                           f"{d}/90-kvtune.rollback.conf", render(True),
                           f"cp {d}/90-kvtune.conf /etc/systemd/system/{unit}.d/ && systemctl "
                           f"daemon-reload; roll back: install the rollback file in its place")]
