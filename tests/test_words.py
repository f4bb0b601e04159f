"""Words follow the interval (issue: a candidate 95% worse was printed as "no significant
change"), and confirmation rounds go to contenders."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from kvtune.present import NO_SIGNIFICANT_CHANGE, describe_change, judge
from kvtune.study.confirm import MetricChange, candidates, clearly_worse


@pytest.mark.parametrize(("direction", "ci", "word"), [
    ("maximize", (0.02, 0.09), "better"),
    ("maximize", (-0.947, -0.946), "worse"),
    ("maximize", (-0.03, 0.04), NO_SIGNIFICANT_CHANGE),
    ("minimize", (0.02, 0.09), "worse"),
    ("minimize", (-0.30, -0.10), "better"),
    ("minimize", (-0.03, 0.04), NO_SIGNIFICANT_CHANGE),
    ("maximize", (0.0, 0.05), NO_SIGNIFICANT_CHANGE),  # an interval that touches zero
])
def test_the_interval_decides_the_words(direction: str, ci: tuple[float, float],
                                        word: str) -> None:
    change = (ci[0] + ci[1]) / 2
    # Whatever the test's verdict says, the printed words follow the CI.
    for significant in (True, False, None):
        assert judge(change, direction, significant, ci) == word
    text = describe_change("ops_per_sec", change, direction, ci, False)
    assert text.endswith(", " + word) and "95% CI" in text


def test_without_an_interval_the_test_decides() -> None:
    assert judge(-0.2, "maximize", False) == NO_SIGNIFICANT_CHANGE
    assert judge(-0.2, "maximize", True) == "worse"
    assert judge(0.2, "minimize") == "worse"
    assert judge(0.0, "maximize") == "no change"
    assert judge(0.1, None, True) is None


def test_the_redis_example_reads_worse() -> None:
    """The reported case: −94.7% … −94.6% was printed as no significant change."""
    mc = MetricChange("ops_per_sec", "maximize", 390_000.0, 21_593.0, -0.9465,
                      (-0.947, -0.946), 0.2, False, (5, 5))
    assert mc.text().endswith("worse"), mc.text()
    assert mc.as_dict()["verdict"] == "worse"


def test_no_other_module_writes_the_verdict_words() -> None:
    src = Path(__file__).resolve().parents[1] / "src" / "kvtune"
    makers = [p.relative_to(src).as_posix() for p in src.rglob("*.py")
              if '"no significant change"' in p.read_text()
              or '"within noise"' in p.read_text()]
    assert makers == ["present.py"], makers


def _trial(number: int, kind: str, value: float, ci: tuple[float, float],
           config: dict[str, int]) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        value=value, params={}, distributions={},
        user_attrs={"kind": kind, "config": config, "violations": [0.0],
                    "eval": {"value": value, "ci": list(ci)}})


def test_a_candidate_measured_clearly_worse_is_not_confirmed() -> None:
    base = _trial(0, "baseline", 390_000, (385_000, 396_000), {"x": 0})
    bad = _trial(1, "trial", 21_593, (21_000, 22_000), {"x": 1})
    close = _trial(2, "trial", 380_000, (370_000, 390_000), {"x": 2})
    better = _trial(3, "trial", 420_000, (410_000, 430_000), {"x": 3})
    assert clearly_worse(bad, base, "maximize")
    assert not clearly_worse(close, base, "maximize")  # intervals overlap: a contender
    assert not clearly_worse(bad, base, "minimize")
    picked = candidates([base, bad, close, better], {"x": 0}, "maximize", top=3)
    assert [c["config"]["x"] for c in picked] == [3, 2]


def test_an_interval_given_high_end_first_is_said_low_end_first_and_judged_right() -> None:
    """A minimized metric's change interval maps an improvement's (lo, hi) to (hi', lo'):
    the words and the interval must not depend on the order a caller gave (the demo's
    "−6.2% (95% CI +11.0% … −20.8%), worse" for a change that is not significant)."""
    from kvtune.present import change_record

    r = change_record("p99_us", -0.062, "minimize", ci=(0.11, -0.208), significant=False)
    assert r["verdict"] == "no significant change"
    assert "(95% CI −20.8% … +11.0%)" in r["text"], r["text"]
    r = change_record("p99_us", -0.62, "minimize", ci=(-0.509, -0.706), significant=True)
    assert r["verdict"] == "better" and "(95% CI −70.6% … −50.9%)" in r["text"], r["text"]


def test_every_figure_formatter_writes_one_minus_sign() -> None:
    """Issue 44, item 5: `present`'s formatters disagreed on the minus sign (number() wrote
    "-5", figure() "−5")."""
    from kvtune import present

    for text in (present.number(-5), present.number(-1234.5), present.number(-0.00012),
                 present.figure(-5), present.pct(-0.05), present.share(-0.05)):
        assert text.startswith(present.MINUS) and "-" not in text, text
    assert present.number(-0.0) == "0" and present.p_value(None) == "-"
