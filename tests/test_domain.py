from __future__ import annotations

import optuna
import pytest

from kvtune.knobs.domain import Domain, values_from_params


def test_int_step_contains_and_coerce() -> None:
    d = Domain("int", 8, 256, step=8)
    assert d.contains(48) and not d.contains(50) and not d.contains(264)
    assert d.coerce("64") == 64
    with pytest.raises(ValueError, match="outside"):
        d.coerce("7")


def test_bool_and_categorical_coerce() -> None:
    assert Domain("bool").coerce("yes") is True
    assert Domain("bool").coerce("off") is False
    c = Domain("categorical", choices=(0, 1, 2))
    assert c.coerce("2") == 2
    with pytest.raises(ValueError):
        c.coerce("3")


def test_special_values_round_trip_through_optuna() -> None:
    d = Domain("int", 10, 800, step=10, special=(-1,))
    assert d.contains(-1) and d.contains(200) and not d.contains(-2)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    study.enqueue_trial(d.fixed_params("q", -1))
    study.enqueue_trial(d.fixed_params("q", 300))
    t0, t1 = study.ask(), study.ask()
    assert d.suggest(t0, "q") == -1
    assert d.suggest(t1, "q") == 300
    study.tell(t0, 1.0)
    study.tell(t1, 2.0)
    assert values_from_params(d, "q", study.trials[0].params) == -1
    assert values_from_params(d, "q", study.trials[1].params) == 300
    seen = set()
    for _ in range(60):
        t = study.ask()
        v = d.suggest(t, "q")
        assert d.contains(v)
        seen.add(v == -1)
        study.tell(t, 0.0)
    assert seen == {True, False}


def test_grid() -> None:
    assert Domain("int", 1, 4).grid() == [1, 2, 3, 4]
    g = Domain("int", 1, 200, log=True).grid(5)
    assert g[0] == 1 and g[-1] == 200 and len(g) == 5
    assert Domain("bool").grid() == [False, True]
    assert Domain("int", 10, 800, step=10, special=(-1,)).grid(3) == [-1, 10, 410, 800]


def test_invalid_domains() -> None:
    with pytest.raises(ValueError):
        Domain("int", 5, 1)
    with pytest.raises(ValueError):
        Domain("float", 0, 1, log=True)
    with pytest.raises(ValueError):
        Domain("categorical")
