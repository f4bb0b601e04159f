"""The study file's checks, run by the CLI before it imports the search and statistics
stack (Optuna, SciPy): a refused file fails in well under a second."""

from __future__ import annotations

from pathlib import Path


def check_study_file(path: str | Path, allow_inline_host_knobs: bool) -> None:
    """Parse and validate the study file and its knobs; raises UserError (exit 2)."""
    from kvtune.knobs.resolve import resolve_knobs
    from kvtune.safety.inline import check_inline_host_knobs
    from kvtune.spec import load_spec
    from kvtune.targets import target_knobs

    spec, lines = load_spec(path)
    resolve_knobs(spec, lines, str(path), target_knobs(spec.target.kind))
    check_inline_host_knobs(spec, lines, allow_inline_host_knobs, str(path))
