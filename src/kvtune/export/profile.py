"""`kvtune profiles export CATEGORY`: a category's profile as the study exports write it
(a TuneD profile, the server's config drop-in, the systemd drop-in where placement
matters), through the same exporters (kvtune.export) with their rollbacks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvtune.errors import UserError
from kvtune.export import ExportFile, Recommendation, exporters, write
from kvtune.knobs import catalog
from kvtune.library.profiles import Category, spread
from kvtune.targets.synthetic import synthetic_knob
from kvtune.workload.features import describe


def formats() -> list[str]:
    """The export formats a profile is written in: the host's (TuneD), each server kind's,
    the placement's (systemd)."""
    from kvtune import kind_registry as kinds

    return ["tuned", *(k.export_family for k in kinds.every() if k.export_family), "systemd"]


@dataclass
class ProfileRecommendation(Recommendation):
    """A category's profile: the headers say which category and which studies."""

    category: str = ""

    def workload(self) -> str:
        return self.category


def recommendation(cat: Category) -> Recommendation:
    held = cat.held()
    baseline = cat.baseline()
    studies = ", ".join(sorted({e.study for e in cat.members}))[:300]
    gains = spread([p for k in cat.knobs() if k.holds for p in k.gains] or cat.gains())
    source = (f"profile {cat.id} of the kvtune library: the changes confirmed in most of "
              f"its {len(cat.members)} studies ({studies}); their gains in "
              f"{cat.metric}: {gains}")
    server_cpus = {e.host.server_cpus for e in cat.members}
    spec: dict[str, Any] = {"target": {"kind": cat.target}}
    if len(server_cpus) == 1 and None not in server_cpus:
        spec["target"]["cpus"] = next(iter(server_cpus))
    return ProfileRecommendation(
        study=f"profile-{cat.id}", target=cat.target, config={**baseline, **held},
        baseline=baseline, source=source, spec=spec,
        category=f"category {cat.id}, {cat.name} ({describe(cat.centre)}), "
                 f"{cat.target} {cat.target_version or ''}".strip())


def export(cat: Category, out_dir: Path) -> list[tuple[str, ExportFile]]:
    """The category's profile written into `out_dir` (nothing when no format has a file
    for its changes). A library is input: a held change of a knob this kvtune does not
    know (not in the catalog; the synthetic target's own knobs aside) is refused, naming
    it, before anything is written."""
    unknown = [k for k in cat.held() if catalog.lookup(k) is None
               and not (cat.target == "synthetic" and synthetic_knob(k) is not None)]
    if unknown:
        raise UserError(f"category {cat.id} ({cat.name}) holds changes of knobs this kvtune "
                        "does not know (a library written by another version, or changed?); "
                        "nothing was written", [f"{k}: not a knob of the catalog"
                                                for k in unknown])
    rec = recommendation(cat)
    table = exporters()
    chosen = [f for f in formats() if f in table and table[f].files(rec)]
    if not chosen:
        return []
    return write(rec, chosen, out_dir)
