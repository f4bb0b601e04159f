"""A systemd drop-in for the server's unit with the placement the configuration was measured
with: the target's pinning (`target.cpus`, `placement.server_cpus`) as CPUAffinity, a
cpuset as AllowedCPUs, a quota as CPUQuota (and CPUQuotaPeriodSec). Its rollback is its
removal (a script under rollback/): a drop-in that sets values would also override an
admin's own drop-ins."""

from __future__ import annotations

from kvtune.export.base import Exporter, ExportFile, Recommendation, comment, rollback_path
from kvtune.knobs import catalog
from kvtune.knobs.appliers.base import ExportEntry

UNITS = {"memcached": "memcached.service", "redis": "redis-server.service"}
DROP_IN = "90-kvtune.conf"


def placement_entries(rec: Recommendation) -> list[ExportEntry]:
    rows = [r.entry for r in rec.entries() if r.entry and r.entry.family == "systemd"]
    pin = catalog.lookup("placement.server_cpus")
    if rec.target_cpus and "placement.server_cpus" not in rec.config and pin is not None:
        e = pin.applier.export_entry(rec.target_cpus, rec.ctx)
        if e is not None:
            rows.insert(0, e)
    # An empty value would reset a setting: the recommendation sets only what it measured.
    return [e for e in rows if e.value != ""]


class SystemdExporter(Exporter):
    name = "systemd"
    help = "a systemd drop-in with the measured placement (CPUAffinity, AllowedCPUs, CPUQuota)"

    def files(self, rec: Recommendation) -> list[ExportFile]:
        rows = placement_entries(rec)
        if not rows or rec.target not in UNITS:
            return []
        unit = UNITS[rec.target or ""]
        d = f"/etc/systemd/system/{unit}.d"
        head = rec.header(f"systemd drop-in for {unit}",
                          f"Install: mkdir -p {d} && cp {DROP_IN} {d}/ && systemctl "
                          f"daemon-reload && systemctl restart {unit}",
                          "Roll back: remove the drop-in (the script under rollback/).",
                          "AllowedCPUs needs cgroup v2 (systemd >= 244); CPUQuotaPeriodSec "
                          "systemd >= 242.")
        text = comment(head) + "\n[Service]\n" + "".join(f"{e.key}={e.value}\n" for e in rows)
        name = f"systemd/{unit}.d/{DROP_IN}"
        back = rollback_path(f"systemd/{unit}.d/{DROP_IN}", ".remove.sh")
        rb = ("#!/bin/sh\n" + comment(rec.rollback_header(
            f"{d}/{DROP_IN}", f"{unit} without kvtune's drop-in (your own drop-ins stay)"))
              + f"set -e\nrm -f {d}/{DROP_IN}\nsystemctl daemon-reload\n"
              f"systemctl restart {unit}\n")
        return [ExportFile(name, text, back, rb,
                           f"cp {name} {d}/ && systemctl daemon-reload && systemctl restart "
                           f"{unit}; roll back: sh {back} (removes the drop-in)")]
