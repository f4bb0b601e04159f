"""Inline host knobs (sysctl/sysfs defined in the study file) are written only with
`--allow-inline-host-knobs` on the command line, never on the study file's word."""

from __future__ import annotations

from typing import Any

from kvtune import roots
from kvtune.errors import UserError
from kvtune.spec import KnobSpec, StudySpec, where_in_file


def check_inline_host_knobs(spec: StudySpec, lines: dict[tuple[Any, ...], int] | None,
                            allowed: bool, name: str) -> None:
    """Inline sysctl/sysfs knobs need `--allow-inline-host-knobs` (a command-line flag,
    never a study-file key): a study file alone cannot make kvtune write a kernel file
    the catalog does not list."""
    if allowed:
        return
    problems = []
    for i, entry in enumerate(spec.knobs):
        if isinstance(entry, KnobSpec) and entry.applier is not None and (
                entry.applier.sysctl or entry.applier.sysfs):
            a = entry.applier
            where = (roots.sysctl_path(a.sysctl) if a.sysctl else a.sysfs)
            at = where_in_file(("knobs", i, "applier"), lines or {})
            problems.append(f"{at}: inline host knob {entry.name!r} writes {where}; kvtune "
                            "writes kernel files outside its catalog only with "
                            "--allow-inline-host-knobs on the command line")
    if problems:
        raise UserError(f"{name}: {len(problems)} inline host knob(s) need "
                        "--allow-inline-host-knobs (nothing was applied)", problems)
