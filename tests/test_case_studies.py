"""The case-study study files (examples/case-studies/): each names its case study on its
first line and passes `kvtune check` here (or fails naming only unavailable knobs); the 004
phases run through kvtune against a real memcached with the workload file's own keys, and
the slab pages of each phase are stored with the repetition."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import cli
from support.cli import kvtune as run_kvtune

from kvtune.load.kvload import build_argv
from kvtune.store import Store
from kvtune.study.loader import load_study as load
from kvtune.telemetry.sampler import phase_table

REPO = Path(__file__).resolve().parents[1]
CASES = sorted((REPO / "examples" / "case-studies").glob("*.yaml"))
# This host's own case studies, one folder each (the idle path, issue 31): checked and their
# stored results opened like the five originals'.
OWN = sorted((REPO / "examples" / "case-studies").glob("*/*.yaml"))
SHARED = REPO.parent / "shared" / "case-studies"


def test_there_is_a_file_for_each_case_study() -> None:
    named = {f.read_text().splitlines()[0] for f in CASES}
    for n in ("000", "001", "002", "004"):
        assert any(f"case-studies/{n}_" in line for line in named), n
    for f in CASES:
        first = f.read_text().splitlines()[0]
        assert first.startswith("# ") and "../shared/case-studies/" in first, f.name
        name = first.split("case-studies/", 1)[1].split()[0].rstrip(":")
        if SHARED.exists():
            assert (SHARED / name).exists(), f"{f.name} names {name}, which does not exist"


@pytest.mark.parametrize("path", CASES + OWN, ids=[p.name for p in CASES + OWN])
def test_case_study_passes_check(path: Path) -> None:
    out = cli("check", str(path), "--json", cwd=REPO)
    plan = json.loads(out.stdout)
    assert plan["valid"], plan["problems"]
    unavailable = [k["name"] for k in plan["knobs"] if not k["available"]]
    if out.returncode == 0:
        assert plan["runnable"] and not plan["problems"] and not unavailable
        assert plan["estimate"]["low_s"] > 0
    else:  # only the named unavailable knobs may stop it
        assert out.returncode == 2 and unavailable, plan["problems"]
        assert all(any(n in p for n in unavailable) for p in plan["problems"]), plan["problems"]


def _stored(path: Path) -> Path | None:
    study = yaml.safe_load(path.read_text())["study"]
    db = REPO / "results" / f"{study}.db"
    return db if db.exists() else None


STORED = [p for p in CASES + OWN if _stored(p)]


@pytest.mark.parametrize("path", STORED, ids=[p.name for p in STORED])
def test_stored_case_study_result_opens_on_current_code(path: Path, tmp_path: Path) -> None:
    """docs/case-studies.md cites results/<study>.db: `kvtune show` and `kvtune report` must
    still read each one (a schema change that breaks them fails here). They run on copies:
    the shipped databases stay as they were measured."""
    cases = tmp_path / "examples" / "case-studies"  # workload files are relative to the cwd
    shutil.copytree(path.parent, cases)
    (tmp_path / "results").mkdir()
    db = _stored(path)
    assert db is not None
    shutil.copy2(db, tmp_path / "results" / db.name)
    path = cases / path.name
    show = cli("show", str(path), cwd=tmp_path)
    assert show.returncode == 0, show.stdout[-2000:] + show.stderr[-2000:]
    assert "Traceback" not in show.stderr
    html = tmp_path / "r.html"
    rep = cli("report", str(path), "-o", str(html), cwd=tmp_path)
    assert rep.returncode == 0, rep.stdout[-2000:] + rep.stderr[-2000:]
    assert html.stat().st_size > 10_000


def test_workload_file_keys_are_not_overridden_by_kvtune_defaults() -> None:
    loaded = load(REPO / "examples" / "case-studies" / "004-slab-rebalancer.yaml")
    argv = build_argv("kvload", loaded.spec.load, "127.0.0.1:1", "memcache", 1, "/tmp/x.json")
    for flag in ("--mix", "--keys", "--value-size", "--popularity", "--rate", "--duration",
                 "--preload", "--no-preload", "--connections"):
        assert flag not in argv, flag
    assert argv[argv.index("--warmup") + 1] == "0s"  # set by the study file itself
    assert "--workload" in argv


def _sets_gets(raw: dict[str, Any]) -> tuple[int, int]:
    st = raw["server_stats"]["stats"]
    return int(st["cmd_set"]), int(st["cmd_get"])


def test_004_phases_through_kvtune_on_real_memcached(in_tmp: Path, memcached_bin: str,
                                                     kvload_bin: str) -> None:
    wl = in_tmp / "phases.json"
    wl.write_text(json.dumps({
        "keys": 400000, "mix": "set:1", "connections": 2, "warmup": "0s", "preload": False,
        "phases": [{"duration": "2s", "value_size": 100, "rate": 20000},
                   {"duration": "2s", "value_size": "100K", "rate": 300}]}))
    spec = yaml.safe_load((REPO / "examples" / "case-studies" /
                           "004-slab-rebalancer.yaml").read_text())
    spec["load"]["workload_file"] = str(wl)
    spec["study"] = "cs004-test"
    (in_tmp / "s.yaml").write_text(yaml.safe_dump(spec))
    out = run_kvtune("run", "s.yaml", "--repetitions", "1", "--set",
                     "memcached.slab_automove=2", "--json", cwd=in_tmp,
                     env={"KVLOAD": kvload_bin, **_env()}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    reps = Store(f"sqlite:///{in_tmp / 'results' / 'cs004-test.db'}").repetitions(
        "cs004-test.runs")
    # A flagged attempt (saturated, steal) is re-run on a fresh server and each attempt is
    # stored: the last one is the repetition kept.
    assert 1 <= len(reps) <= 3 and reps[-1]["status"] != "failed", reps[-1]["raw"].get("stderr")
    raw = reps[-1]["raw"]
    # The file's mix (set:1), not kvtune's default get:9,set:1: memcached counted no get.
    sets, gets = _sets_gets(raw)
    assert gets == 0 and sets > 10000
    assert "--mix" not in raw["load"]["argv"]
    rec = raw["telemetry"]["samples"]
    assert [p["start_s"] for p in rec["phases"]] == [0.0, 2.0]
    rows = phase_table(rec, raw["load"])
    assert len(rows) == 2 and all(r["pages"] for r in rows)  # per-phase slab pages stored

    def big(s: dict[str, Any]) -> int:
        return sum(int(v.get("total_pages", 0)) for v in s["slabs"].values()
                   if int(v.get("chunk_size", 0)) > 40960)

    # The 100 KB class appears only after its phase starts.
    assert all(big(s) == 0 for s in rec["samples"] if s["t_s"] is not None and s["t_s"] < 2.0)
    assert any(int(k.split(":")[1]) > 40960 for k in rows[1]["pages"])


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "KVLOAD"}


def test_sweep_view_names_best_change_and_plateau() -> None:
    """The 000 chart: a sweep's best value, its change from the default with a CI, and the
    plateau of values within noise of the best (and not beyond it)."""
    from kvtune.analysis.sweep import analyse, summary_lines, view_from_dict
    from kvtune.report.sweep import sweep_text

    def reps(centre: float) -> list[float]:
        return [centre * (1 + d) for d in (-0.02, -0.01, 0.0, 0.01, 0.02, 0.015)]

    rows = [{"value": v, "values": reps(c)} for v, c in
            ((0, 1000.0), (100, 900.0), (200, 780.0), (300, 775.0), (400, 772.0))]
    view = analyse({"knob": "k", "metric": "p99_us", "direction": "minimize",
                    "baseline_value": 0, "rows": rows})
    assert view.best is not None and view.best.value == 400
    assert view.change is not None and -0.25 < view.change["change"] < -0.2
    assert view.change["change_ci_high"] < 0 and view.change["p_value"] < 0.05
    assert view.plateau == [200, 300, 400]
    assert all(p.ci_kind == "95% CI" for p in view.points)  # n = 6
    text = "\n".join(summary_lines(view))
    assert "plateau: k in 200 … 400" in text and "better" in text
    assert "default" in sweep_text(view_from_dict(view.as_dict()))


def test_sweep_view_of_ties_and_single_repetitions() -> None:
    """Stored 004 sweeps: every value 0 server errors (a tie with the default is no change,
    not '+inf %'), and one repetition per value (no 'nan' interval, no plateau claimed)."""
    from kvtune.analysis.sweep import analyse, summary_lines

    zeros = analyse({"knob": "a", "metric": "server_errors", "direction": "minimize",
                     "baseline_value": 1,
                     "rows": [{"value": v, "values": [0.0, 0.0]} for v in (0, 1, 2)]})
    assert zeros.best is not None and zeros.best.value == 1 and zeros.change is None
    text = "\n".join(summary_lines(zeros))
    assert "the default is the best value swept" in text and "inf" not in text
    assert "∞" not in text and zeros.plateau == [0, 1, 2]
    single = analyse({"knob": "a", "metric": "hit_ratio", "direction": "maximize",
                      "baseline_value": 1,
                      "rows": [{"value": v, "values": [h]} for v, h in
                               ((0, 0.174), (1, 0.175), (2, 0.140))]})
    text = "\n".join(summary_lines(single))
    assert "nan" not in text and "n=1" in text
    assert "no plateau can be judged" in text and "differs from the best" not in text
