"""A study file, loaded: the spec and its knobs (the catalog's, inline ones, and the
target's own)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvtune.knobs.knob import Knob
from kvtune.knobs.resolve import resolve_knobs
from kvtune.spec import StudySpec, load_spec
from kvtune.store import Store
from kvtune.targets import target_knobs


@dataclass
class Loaded:
    spec: StudySpec
    knobs: list[Knob]
    path: Path


def load(path: str | Path, allow_inline_host_knobs: bool = False) -> Loaded:
    """Parse and validate a study file; inline host knobs need the command-line flag."""
    from kvtune.safety.inline import check_inline_host_knobs

    spec, lines = load_spec(path)
    knobs = resolve_knobs(spec, lines, str(path), target_knobs(spec.target.kind))
    check_inline_host_knobs(spec, lines, allow_inline_host_knobs, str(path))
    return Loaded(spec, knobs, Path(path))


def open_store(spec: StudySpec, base: Path | None = None, heartbeat: bool = False) -> Store:
    if spec.storage is None:  # kvtune's own default, BASE/results/STUDY.db
        (base or Path.cwd()).joinpath("results").mkdir(parents=True, exist_ok=True)
    return Store(spec.storage_url(base or Path.cwd()), heartbeat=heartbeat)
