"""Every example study file parses, resolves its knobs, and passes preflight on this host
(which applies nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtune.runner import Session
from kvtune.study import load

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_is_valid_here(path: Path, kvload_bin: str) -> None:
    loaded = load(path)
    assert loaded.knobs, "an example tunes something"
    session = Session(loaded.spec, loaded.knobs, None)
    session.preflight()
    assert set(session.baseline) == {k.name for k in session.knobs}
