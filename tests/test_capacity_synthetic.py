"""Capacity at an SLO on the synthetic target (issues 20 and 35; tests/test_capacity.py has
the real servers): kvload's `--simulate` searches an M/M/1 server whose knee is known
exactly, and a capacity study of the synthetic target runs end to end on it. Nothing is
measured on this host (the simulated server has no clock) and no host knob is set: these run
beside the unit tier (marker `parallel`, docs/testing.md)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.cli import kvtune as run_kvtune
from support.studies import SYNTHETIC_CAPACITY

from kvtune.errors import UserError

pytestmark = pytest.mark.parallel


def _kvtune(*args: str, cwd: Path, kvload: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KVLOAD": kvload, "COLUMNS": "200"}
    return run_kvtune(*args, cwd=cwd, env=env, timeout=900)


def test_kvload_simulate_searches_a_known_knee(kvload_bin: str) -> None:
    """`kvload --simulate`: the real search against an M/M/1 server recovers the knee its
    formula gives for the server drawn (config.simulated_service_rate), in a
    kvload/search/2 document that names the server as simulated."""
    import math

    errors = []
    for seed in range(8):
        r = subprocess.run([kvload_bin, "--simulate", "service=50k,base=100us,jitter=0.02",
                            "--search", "p99.9<=2ms", "--duration", "3s", "--warmup",
                            "200ms", "--seed", str(seed), "--json", "-", "--quiet"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["config"]["server"].startswith("simulated: service=50000")
        truth = doc["config"]["simulated_service_rate"] - math.log(1000) / 1.9e-3
        lo, hi = doc["ci"]
        assert lo <= doc["knee"] <= hi
        errors.append(abs(doc["knee"] / truth - 1))
    errors.sort()
    assert errors[len(errors) // 2] < 0.03, errors


@pytest.mark.parametrize("argv,words", [
    (["--simulate", "base=5us"], "service=RATE is required"),
    (["--simulate", "service=1k,color=red"], "unknown key 'color'"),
    (["--simulate", "service=1k", "--server", "127.0.0.1:1"], "not with --server"),
    (["--simulate", "service=1k", "--arrival", "fixed"], "Poisson"),
])
def test_kvload_simulate_refuses_bad_specs(kvload_bin: str, argv: list[str],
                                           words: str) -> None:
    r = subprocess.run([kvload_bin, *argv, "--rate", "100", "--duration", "1s"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and words in r.stderr, r.stderr


def test_the_synthetic_target_measures_capacity_against_its_truth(tmp_path: Path,
                                                                  kvload_bin: str) -> None:
    """`kvtune run --capacity` on the synthetic target: each repetition is a real knee
    search of the simulated server, its steps are kept, and the capacity is the known
    knee of the configuration within the search's precision and the noise."""
    from kvtune.spec import parse_slo
    from kvtune.targets.synthetic import true_capacity

    (tmp_path / "s.yaml").write_text(SYNTHETIC_CAPACITY)
    r = _kvtune("run", "s.yaml", "--repetitions", "5", "--json", cwd=tmp_path,
                kvload=kvload_bin)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads(r.stdout)
    truth = true_capacity({}, parse_slo("p99_us <= 500"))
    assert abs(doc["metrics"]["capacity"] / truth - 1) < 0.05, (doc["metrics"], truth)
    rep = doc["repetitions"][0]
    assert rep["steps"] and any(s["outcome"] == "pass" for s in rep["steps"])
    # The terminal says the same, search by search.
    r = _kvtune("run", "s.yaml", "--repetitions", "1", cwd=tmp_path, kvload=kvload_bin)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Capacity at p99_us <= 500" in r.stdout, r.stdout[-2000:]
    assert "search 1:" in r.stdout and "from 1 of 1 search(es)" in r.stdout, r.stdout[-2000:]


def test_a_synthetic_capacity_study_finds_more_capacity(tmp_path: Path,
                                                        kvload_bin: str) -> None:
    """A capacity study of the synthetic target end to end: the search loop, the
    confirmation and the report's curve, in seconds; the recommendation's true capacity is
    above the baseline's."""
    from kvtune.spec import parse_slo
    from kvtune.targets.synthetic import true_capacity

    (tmp_path / "s.yaml").write_text(SYNTHETIC_CAPACITY)
    r = _kvtune("tune", "s.yaml", cwd=tmp_path, kvload=kvload_bin)
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "FAIL: None" not in r.stdout
    assert "req/s at p99_us <= 500" in r.stdout, r.stdout[-3000:]
    rep = _kvtune("report", "s.yaml", "-o", str(tmp_path / "r.html"), cwd=tmp_path,
                  kvload=kvload_bin)
    assert rep.returncode == 0, rep.stderr[-2000:]
    assert 'id="plot-capacity"' in (tmp_path / "r.html").read_text()
    show = _kvtune("show", "s.yaml", "--json", cwd=tmp_path, kvload=kvload_bin)
    assert show.returncode == 0, show.stderr[-2000:]
    best = json.loads(show.stdout)["best"]
    slo = parse_slo("p99_us <= 500")
    # The best trial's capacity is its known knee (within the noise of 3 searches), and
    # that knee is above the baseline's.
    assert abs(best["value"] / true_capacity(best["config"], slo) - 1) < 0.08, best
    assert true_capacity(best["config"], slo) > true_capacity({}, slo)


def test_a_simulated_target_that_cannot_search_is_refused_capacity(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The class, not the example: a target without a knee search is refused a capacity
    objective by the loader, naming the objective's line (nothing runs)."""
    from kvtune.study.loader import load_text
    from kvtune.targets.synthetic import SyntheticTarget

    load_text(SYNTHETIC_CAPACITY)  # the synthetic target searches
    monkeypatch.setattr(SyntheticTarget, "searches", False)
    with pytest.raises(UserError) as e:
        load_text(SYNTHETIC_CAPACITY)
    assert "cannot measure capacity" in str(e.value) and "line" in str(e.value), e.value
