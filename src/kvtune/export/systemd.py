"""A systemd drop-in for the server's unit with the placement the configuration was measured
with: the target's pinning (`target.cpus`, `placement.server_cpus`) as CPUAffinity, a
cpuset as AllowedCPUs, a quota as CPUQuota (and CPUQuotaPeriodSec). Its rollback is its
removal (a script under rollback/): a drop-in that sets values would also override an
admin's own drop-ins."""

from __future__ import annotations

from kvtune import kind_registry as kinds
from kvtune.export.base import Exporter, ExportFile, Recommendation, comment, rollback_path
from kvtune.knobs import catalog
from kvtune.knobs.appliers.base import ExportEntry

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


PM_QOS_UNIT = "kvtune-pm-qos.service"


def pm_qos_unit(rec: Recommendation) -> list[ExportFile]:
    """A unit that holds the recommendation's PM QoS CPU latency request: the request lasts
    while /dev/cpu_dma_latency is open, so a process must keep it open (what TuneD's
    force_latency does inside the tuned daemon, for hosts without TuneD)."""
    e = next((r.entry for r in rec.entries("host") if r.entry and r.entry.family == "pm_qos"),
             None)
    if e is None:
        return []
    v = int(e.value)
    head = rec.header(f"systemd unit holding a PM QoS CPU latency request of {v} µs",
                      f"Install: cp {PM_QOS_UNIT} /etc/systemd/system/ && systemctl "
                      f"daemon-reload && systemctl enable --now {PM_QOS_UNIT}",
                      "Or use the TuneD profile ([cpu] force_latency), not both.",
                      "Roll back: systemctl disable --now " + PM_QOS_UNIT + " (the request "
                      "ends with the process).")
    # The 32-bit value as printf's octal escapes; systemd unescapes "\\" to "\" first.
    packed = "".join(f"\\\\{b:03o}" for b in v.to_bytes(4, "little", signed=True))
    text = comment(head) + (
        "\n[Unit]\nDescription=kvtune: CPU latency request of " + str(v) + " µs "
        "(/dev/cpu_dma_latency)\n\n[Service]\nType=simple\n"
        f"ExecStart=/bin/sh -c 'exec 3>/dev/cpu_dma_latency; printf \"{packed}\" >&3; "
        "exec sleep infinity'\n\n[Install]\nWantedBy=multi-user.target\n")
    name = f"systemd/{PM_QOS_UNIT}"
    back = rollback_path(name, ".remove.sh")
    rb = ("#!/bin/sh\n" + comment(rec.rollback_header(
        f"/etc/systemd/system/{PM_QOS_UNIT}", "no CPU latency request")) +
        f"set -e\nsystemctl disable --now {PM_QOS_UNIT} || true\n"
        f"rm -f /etc/systemd/system/{PM_QOS_UNIT}\nsystemctl daemon-reload\n")
    return [ExportFile(name, text, back, rb,
                       f"cp {name} /etc/systemd/system/ && systemctl enable --now "
                       f"{PM_QOS_UNIT}; roll back: sh {back}")]


class SystemdExporter(Exporter):
    name = "systemd"
    help = ("a systemd drop-in with the measured placement (CPUAffinity, AllowedCPUs, "
            "CPUQuota), and a unit holding a PM QoS CPU latency request")

    def files(self, rec: Recommendation) -> list[ExportFile]:
        qos = pm_qos_unit(rec)
        rows = placement_entries(rec)
        kind = kinds.find(rec.target)
        if not rows or kind is None:
            return qos
        unit = kind.systemd_unit
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
                           f"{unit}; roll back: sh {back} (removes the drop-in)"), *qos]
