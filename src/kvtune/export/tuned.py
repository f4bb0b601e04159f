"""A TuneD profile (tuned.conf with [main] include=, [sysctl], [vm], [scheduler], [sysfs])
for the host knobs the recommendation changes, done as TuneD users expect:

- it includes the host's recommended profile (`tuned-adm recommend`; `--tuned-include`
  overrides it), so activating it keeps what that profile sets;
- options are gated by the installed TuneD version (`sched_base_slice_ns` needs 2.25; an
  older TuneD takes it for a process-name pattern and ignores it): left out, with a note;
- no rollback profile: TuneD undoes a profile when it switches, so the rollback is
  `tuned-adm profile <previous>` (a "rollback profile" would pin study-time values);
- with `reapply_sysctl = 1` (TuneD's default) TuneD applies /etc/sysctl.d after the profile:
  a sysctl.d file with the same keys wins over the profile's [sysctl] (warned).

TuneD's scheduler plugin resolves /proc/sys vs debugfs itself, so scheduler knobs are
written by their TuneD names."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from kvtune import roots
from kvtune.export.base import Exporter, ExportFile, Recommendation, comment
from kvtune.safety import programs

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
# TuneD options newer than TuneD 2.20 (Debian bookworm's), with the release that added them.
SINCE: dict[str, tuple[int, ...]] = {"sched_base_slice_ns": (2, 25)}
SECTIONS = ("sysctl", "vm", "scheduler", "cpu", "sysfs")
MAIN_CONF = Path("/etc/tuned/tuned-main.conf")
ACTIVE = Path("/etc/tuned/active_profile")


def _run(*argv: str) -> str | None:
    """What `argv` prints, or None: absent, refused (kvtune.safety.programs) or failed."""
    prog, _why = programs.lookup(argv[0])
    if prog is None:
        return None
    try:
        out = prog.run(argv[1:], capture_output=True, text=True, timeout=30)
    except (OSError, programs.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


@functools.cache
def installed_version() -> tuple[int, ...] | None:
    """TuneD's version (`tuned-adm --version`), None when TuneD is not installed."""
    text = _run("tuned-adm", "--version")
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


@functools.cache
def recommended_profile() -> str | None:
    """The profile `tuned-adm recommend` names for this host (works without the daemon)."""
    text = _run("tuned-adm", "recommend")
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines and re.fullmatch(r"[\w.,-]+", lines[-1]) else None


def active_profile() -> str | None:
    try:
        return ACTIVE.read_text().strip() or None
    except OSError:
        return None


def reapply_sysctl() -> bool:
    """TuneD's reapply_sysctl (default 1): /etc/sysctl.d is applied after the profile."""
    try:
        for ln in MAIN_CONF.read_text().splitlines():
            m = re.fullmatch(r"\s*reapply_sysctl\s*=\s*(\S+)\s*", ln)
            if m:
                return m.group(1).lower() in ("1", "true", "yes", "on")
    except OSError:
        pass
    return True


def _v(t: tuple[int, ...]) -> str:
    return ".".join(map(str, t))


class TunedExporter(Exporter):
    name = "tuned"
    help = ("a TuneD profile including the host's recommended one (rollback: `tuned-adm "
            "profile <previous>`)")

    def files(self, rec: Recommendation) -> list[ExportFile]:
        entries: dict[str, list[tuple[str, str]]] = {s: [] for s in SECTIONS}
        notes: list[str] = []
        version = installed_version()
        for row in rec.entries("host"):
            if row.entry is None:
                continue
            if row.knob.name in TUNED_NAMES:
                section, option = TUNED_NAMES[row.knob.name]
            elif row.entry.family == "pm_qos":
                # TuneD's cpu plugin holds /dev/cpu_dma_latency open while the profile runs.
                section, option = "cpu", "force_latency"
            elif row.entry.family in ("sysctl", "sysfs"):
                section, option = row.entry.family, row.entry.key
            else:
                continue
            need = SINCE.get(option)
            if need and version is not None and version < need:
                notes.append(f"left out {option}={row.entry.value}: needs TuneD >= {_v(need)} "
                             f"(installed {_v(version)} would ignore it)")
                continue
            if need and version is None:
                notes.append(f"{option} needs TuneD >= {_v(need)}")
            entries[section].append((option, row.entry.value))
        if not any(entries.values()):
            return []
        if any(roots.under(o, roots.HALTPOLL) for o, _ in entries["sysfs"]):
            notes.append("guest halt-polling is set at run time by [sysfs]; to set it from "
                         "boot instead, add haltpoll.guest_halt_poll_ns=... to the kernel "
                         "command line ([bootloader] cmdline=)")
        profile = f"kvtune-{rec.study}"
        include = rec.tuned_include if rec.tuned_include is not None else recommended_profile()
        previous = active_profile() or include or "<your previous profile>"
        warnings = []
        if entries["sysctl"] and reapply_sysctl():
            warnings.append(
                "TuneD's reapply_sysctl = 1 (/etc/tuned/tuned-main.conf): /etc/sysctl.d is "
                "applied after the profile, so a sysctl.d file setting the same keys (such as "
                "kvtune's sysctl export) overrides the profile's [sysctl]; install one of them")
        head = rec.header(
            f"TuneD profile {profile}",
            f"Install: cp -r {profile} /etc/tuned/ && tuned-adm profile {profile}",
            f"Roll back: tuned-adm profile {previous} (TuneD undoes this profile on switch).",
            ("Includes " + include + ", the host's recommended profile (`tuned-adm "
             "recommend`)" if rec.tuned_include is None else f"Includes {include}")
            if include else "No profile included (`tuned-adm recommend` gave none).",
            *notes, *(f"WARNING: {w}" for w in warnings))
        text = comment(head) + "\n[main]\n" + f"summary=kvtune study {rec.study}\n"
        if include:
            text += f"include={include}\n"
        for section in SECTIONS:
            if entries[section]:
                text += f"\n[{section}]\n" + "".join(f"{o}={v}\n" for o, v in entries[section])
        return [ExportFile(f"tuned/{profile}/tuned.conf", text, None, None,
                           f"cp -r tuned/{profile} /etc/tuned/ && tuned-adm profile {profile}; "
                           f"roll back: tuned-adm profile {previous}", tuple(warnings))]
