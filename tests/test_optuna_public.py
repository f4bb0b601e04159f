"""Optuna is driven through its public API (issue 44, item 4): no private attribute of an
Optuna object is read (`_trial_id`, `_storage`, `_backend`, `_study_id`...), no method of a
study or a storage is replaced on an instance (`study.ask = ...`): kvtune's ask and tell are
a subclass built with Optuna's public constructor (`kvtune.study.tracked.TrackedStudy`),
and the check of a study's stored attributes a storage subclass (`kvtune.store.CheckedStorage`)."""

from __future__ import annotations

import ast
from pathlib import Path

import optuna
import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "kvtune"
# Attributes of Optuna's objects kvtune once read although they are private.
PRIVATE = {"_trial_id", "_storage", "_backend", "_study_id", "_cached_frozen_trial",
           "_trial", "_values"}


# Methods of Optuna's study and storage: none is replaced on an instance (a subclass
# overrides them: kvtune.study.tracked.TrackedStudy, kvtune.store.CheckedStorage).
METHODS = {n for cls in (optuna.Study, optuna.storages.RDBStorage) for n in dir(cls)
           if not n.startswith("__") and callable(getattr(cls, n, None))}


def test_no_private_optuna_attribute_and_no_method_replaced_on_a_study() -> None:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE and not (
                    isinstance(node.value, ast.Name) and node.value.id == "self"):
                found.append(f"{path.relative_to(PKG)}:{node.lineno}: .{node.attr}")
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and t.attr in METHODS and not (
                            isinstance(t.value, ast.Name) and t.value.id == "self"):
                        found.append(f"{path.relative_to(PKG)}:{node.lineno}: "
                                     f"{ast.unparse(t)} replaced")
    assert not found, found


def test_the_tracked_study_tags_beats_and_tolerates_a_trial_failed_meanwhile(
        tmp_path: Path) -> None:
    """ask tags the trial and gives it a heartbeat at once (its id in `live`); tell on a
    trial another worker failed meanwhile says so (the trial stays failed), a normal tell
    returns the finished trial and clears `live`."""
    from kvtune.study.tracked import TrackedStudy

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 's.db'}",
                                         heartbeat_interval=60, grace_period=120)
    base = optuna.create_study(study_name="t", storage=storage)
    asked, lost = [], []
    study = TrackedStudy(base, storage, lambda tr: asked.append(tr.number), lost.append)
    t = study.ask()
    assert asked == [0] and list(study.live) == [0]
    tid = storage.get_trial_id_from_study_id_trial_number(
        storage.get_study_id_from_name("t"), 0)
    assert study.live[0] == tid and storage.get_trial(tid).state.name == "RUNNING"
    # Another worker fails it as stale meanwhile.
    storage.set_trial_state_values(tid, optuna.trial.TrialState.FAIL)
    told = study.tell(t, 1.0)
    assert told.state.name == "FAIL" and lost == [0] and not study.live
    t2 = study.ask()
    frozen = study.tell(t2, 2.0)
    assert frozen is not None and frozen.value == 2.0 and lost == [0]
    # A multi-objective trial read as its first objective keeps its identity.
    from kvtune.analysis.data import _first_objective

    m = optuna.create_study(directions=["minimize", "minimize"])
    m.optimize(lambda tr: (tr.suggest_float("x", 0, 1), 1.0), n_trials=1)
    first = _first_objective(m.trials[0], 7)
    assert first.value == m.trials[0].values[0] and first.number == 0
    assert len(m.trials[0].values) == 2  # the original untouched


pytestmark = pytest.mark.unit
