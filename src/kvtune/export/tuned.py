"""A TuneD profile (tuned.conf with [sysctl], [vm], [scheduler] and [sysfs]) for the host
knobs of the recommendation. TuneD's scheduler plugin resolves /proc/sys vs debugfs itself,
so scheduler knobs are written by their TuneD names."""

from __future__ import annotations

from kvtune.export.base import Exporter, ExportFile, Recommendation, comment

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
        entries: dict[str, list[tuple[str, str, str | None]]] = {s: [] for s in SECTIONS}
        for row in rec.entries("host"):
            if row.entry is None:
                continue
            if row.knob.name in TUNED_NAMES:
                section, option = TUNED_NAMES[row.knob.name]
            elif row.entry.family in ("sysctl", "sysfs"):
                section, option = row.entry.family, row.entry.key
            else:
                continue
            entries[section].append((option, row.entry.value,
                                     row.rollback.value if row.rollback else None))
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
                        if (base if rollback else value) is not None:
                            text += f"{option}={base if rollback else value}\n"
            return text

        return [ExportFile(f"tuned/{profile}/tuned.conf", render(False),
                           f"tuned/{profile}-rollback/tuned.conf", render(True),
                           f"cp -r tuned/{profile} /etc/tuned/ && tuned-adm profile {profile}; "
                           f"roll back: the same with {profile}-rollback, or your previous "
                           "profile")]
