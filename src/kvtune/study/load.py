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


def load(path: str | Path) -> Loaded:
    spec, lines = load_spec(path)
    knobs = resolve_knobs(spec, lines, str(path), target_knobs(spec.target.kind))
    return Loaded(spec, knobs, Path(path))


def open_store(spec: StudySpec, base: Path | None = None) -> Store:
    return Store(spec.storage_url(base or Path.cwd()))
