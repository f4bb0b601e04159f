"""A TuneD profile (tuned.conf with [sysctl], [vm], [scheduler] and [sysfs]) for the host
knobs of the recommendation. TuneD's scheduler plugin resolves /proc/sys vs debugfs itself,
so scheduler knobs are written by their TuneD names."""

from __future__ import annotations

from kvtune.export.base import Exporter, ExportFile, Recommendation, comment
from kvtune.export.sysctl import sysctl_value
from kvtune.knobs.appliers.hostfile import HostFile, Sysctl

# kvtune knob → (section, TuneD option)
TUNED_NAMES: dict[str, tuple[str, str]] = {
    "thp.enabled": ("vm", "transparent_hugepages"),
    "thp.defrag": ("vm", "transparent_hugepage.defrag"),
    "sched.migration_cost_ns": ("scheduler", "sched_migration_cost_ns"),
    "sched.nr_migrate": ("scheduler", "sched_nr_migrate"),
    "sched.latency_ns": ("scheduler", "sched_latency_ns"),
    "sched.min_granularity_ns": ("scheduler", "sched_min_granularity_ns"),
    "sched.wakeup_granularity_ns": ("scheduler", "sched_wakeup_granularity_ns"),
    "sched.tunable_scaling": ("scheduler", "sched_tunable_scaling"),
    "sched.base_slice_ns": ("scheduler", "sched_base_slice_ns"),
}
SECTIONS = ("sysctl", "vm", "scheduler", "sysfs")


class TunedExporter(Exporter):
    name = "tuned"
    help = "a TuneD profile directory with tuned.conf (and a rollback profile)"

    def files(self, rec: Recommendation) -> list[ExportFile]:
        entries: dict[str, list[tuple[str, object, object]]] = {s: [] for s in SECTIONS}
        for knob, value, base in rec.knobs("host"):
            if knob.name in TUNED_NAMES:
                section, option = TUNED_NAMES[knob.name]
            elif isinstance(knob.applier, Sysctl):
                section, option = "sysctl", knob.applier.key
            elif isinstance(knob.applier, HostFile):
                path = knob.applier.resolve(rec.ctx)
                if path is None:
                    continue
                section, option = "sysfs", path
            else:
                continue
            entries[section].append((option, value, base))
        if not any(entries.values()):
            return []
        profile = f"kvtune-{rec.study}"

        def render(rollback: bool) -> str:
            head = rec.header(f"TuneD profile {profile}" + ("-rollback" if rollback else ""),
                              rollback,
                f"Install: copy the directory to /etc/tuned/ and run `tuned-adm profile "
                f"{profile}{'-rollback' if rollback else ''}`.")
            text = comment(head) + "\n[main]\n"
            text += f"summary=kvtune study {rec.study}" + (" (rollback)" if rollback else "") \
                + "\n"
            for section in SECTIONS:
                if entries[section]:
                    text += f"\n[{section}]\n"
                    for option, value, base in entries[section]:
                        text += f"{option}={sysctl_value(base if rollback else value)}\n"
            return text

        return [ExportFile(f"tuned/{profile}/tuned.conf", render(False),
                           f"tuned/{profile}-rollback/tuned.conf", render(True),
                           f"cp -r tuned/{profile} /etc/tuned/ && tuned-adm profile {profile}; "
                           f"roll back: the same with {profile}-rollback, or your previous "
                           "profile")]
