"""Issue 34, "one source for every word and colour": the HTML report (`kvtune report`) and
the terminal (`kvtune show`, and the last screen of `kvtune tune`) agree on every change
they both show: the same figures, the same "better / worse / no significant change", the
report's colour the colour of that word, and the verdict's colour the same on both.

Checked on a fast synthetic study that recommends something (its `tune` output, `show`
and report), on one that is only searched (no confirmation: no claim, no word), and on
every stored real result shipped in results/ with its study file in
examples/case-studies/ (opened on copies, as tests/test_case_studies.py does)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from support.cli import kvtune as run_kvtune
from support.screens import (
    Agreement,
    Page,
    agreement,
    colour_of,
    term_lines,
    term_table,
    word,
    words,
)

from kvtune.cli_options import PIPED_WIDTH

# kvtune as a process (colours forced through the environment), on stored and fresh studies
# (the synthetic target's and the shipped results: nothing measured on this host, no host
# knob): beside the unit tier (docs/testing.md).
pytestmark = [pytest.mark.integration, pytest.mark.parallel]

REPO = Path(__file__).resolve().parents[1]
CASES = sorted((REPO / "examples" / "case-studies").glob("*.yaml")) + sorted(
    (REPO / "examples" / "case-studies").glob("*/*.yaml"))

SYNTHETIC = """\
study: {name}
target: {{kind: synthetic, noise_cov: 0.05}}
knobs: [synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]
objective: {{metric: ops_per_sec}}
budget: {{trials: 8}}
repetitions: 2
evaluation: {{noise_floor_runs: 3, confirm_top: 2, confirm_rounds: 4, drift_every: 0}}
seed: 3
"""


def _env(tmp: Path) -> dict[str, str]:
    """Colours on (rich honours FORCE_COLOR when the output is a pipe), the width kvtune
    writes at when piped (pytest-xdist's workers set COLUMNS=80, which cuts the tables'
    headers), a private journal and run directory (a module-scoped study runs before
    conftest's per-test ones)."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM", "LINES")}
    env.update(FORCE_COLOR="1", TERM="xterm-256color", COLUMNS=str(PIPED_WIDTH),
               KVTUNE_JOURNAL=str(tmp / "journal.json"), KVTUNE_RUN_DIR=str(tmp / "run"))
    (tmp / "run").mkdir(exist_ok=True)
    return env


def kvtune(*args: str, cwd: Path, env: dict[str, str],
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
    r = run_kvtune(*args, cwd=cwd, env=env, timeout=timeout)
    assert "Traceback" not in r.stdout + r.stderr, r.stderr[-3000:]
    return r


def _assert_agree(agree: Agreement, *must: str) -> None:
    assert not agree.problems, "the screens disagree:\n  " + "\n  ".join(agree.problems)
    for what in must:  # never a pass because nothing was compared
        assert agree.compared.get(what), (what, agree.compared)


# -- a synthetic study, its `tune` output, `show` and report --------------------------------


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("synthetic")
    env = _env(d)
    (d / "s.yaml").write_text(SYNTHETIC.format(name="agree"))
    tune = kvtune("tune", "s.yaml", cwd=d, env=env)
    assert tune.returncode == 0, tune.stdout[-3000:] + tune.stderr[-3000:]
    show = kvtune("show", "s.yaml", cwd=d, env=env)
    assert show.returncode == 0, show.stderr[-3000:]
    rep = kvtune("report", "s.yaml", "-o", "r.html", cwd=d, env=env)
    assert rep.returncode == 0, rep.stderr[-3000:]
    return {"tune": tune.stdout, "show": show.stdout, "html": (d / "r.html").read_text(),
            "dir": str(d)}


def test_a_recommendations_headline_is_one_on_every_screen(
        synthetic: dict[str, str]) -> None:
    d = Path(synthetic["dir"])
    _headline_agrees_everywhere(d / "s.yaml", synthetic["show"], d, _env(d))


@pytest.mark.parametrize("screen", ["tune", "show"])
def test_a_recommendation_reads_the_same_in_the_terminal_and_the_report(
        synthetic: dict[str, str], screen: str) -> None:
    raw = synthetic[screen]
    assert "\x1b[" in raw, "no colours: FORCE_COLOR was not honoured"
    page = Page(synthetic["html"])
    assert colour_of(page.verdict["class"]) == "green", page.verdict  # it recommends
    agree = agreement(raw, synthetic["html"])
    _assert_agree(agree, "word", "change", "figure", "verdict colour", "trial",
                  "ablation", "headline")
    # The objective's better is green in the report, its verdict green in the terminal.
    assert "better" in page.verdict["text"]


def test_a_search_without_confirmation_claims_nothing_on_either_screen(
        tmp_path: Path) -> None:
    env = _env(tmp_path)
    (tmp_path / "s.yaml").write_text(SYNTHETIC.format(name="unconfirmed").replace(
        "trials: 8", "trials: 3"))
    tune = kvtune("tune", "s.yaml", "--no-confirm", cwd=tmp_path, env=env)
    assert tune.returncode == 0, tune.stderr[-3000:]
    rep = kvtune("report", "s.yaml", "-o", "r.html", cwd=tmp_path, env=env)
    assert rep.returncode == 0, rep.stderr[-3000:]
    html = (tmp_path / "r.html").read_text()
    agree = agreement(tune.stdout, html)
    _assert_agree(agree, "figure", "verdict colour", "trial")
    table = term_table(tune.stdout, "Best configuration beside the baseline")
    assert table is not None and "NOT confirmed" in table.header[2]
    for row in table.rows:  # a search has no interval of a change: no word, no colour
        assert word(row[3].text) is None and row[3].colour is None, row
    assert Page(html).verdict["text"].startswith("Not decided: nothing is confirmed yet")


# -- the stored real results ---------------------------------------------------------------


def _stored(path: Path) -> Path | None:
    study = yaml.safe_load(path.read_text())["study"]
    db = REPO / "results" / f"{study}.db"
    return db if db.exists() else None


STORED = [p for p in CASES if _stored(p)]


@pytest.mark.parametrize("path", STORED, ids=[p.stem for p in STORED])
def test_stored_results_read_the_same_in_show_and_the_report(path: Path,
                                                             tmp_path: Path) -> None:
    cases = tmp_path / "examples" / "case-studies"
    shutil.copytree(path.parent, cases)
    (tmp_path / "results").mkdir()
    db = _stored(path)
    assert db is not None
    shutil.copy2(db, tmp_path / "results" / db.name)
    study = cases / path.name
    env = _env(tmp_path)
    show = kvtune("show", str(study), cwd=tmp_path, env=env)
    assert show.returncode == 0, show.stderr[-3000:]
    shown = [t for t, _ in term_lines(show.stdout)]
    confirmed = any(t.startswith("Confirmation (") for t in shown)
    swept = any("vs the default" in t for t in shown)  # a sweep that claims a change
    if not confirmed and not swept:  # sweeps whose default was their best: no change
        assert not any(words(t) for t in shown), shown
        return
    rep = kvtune("report", str(study), "-o", "r.html", cwd=tmp_path, env=env)
    assert rep.returncode == 0, rep.stderr[-3000:]
    agree = agreement(show.stdout, (tmp_path / "r.html").read_text())
    _assert_agree(agree, *(("word", "change", "verdict colour", "trial", "headline")
                           if confirmed else ("sweep",)))
    if confirmed:
        _headline_agrees_everywhere(study, show.stdout, tmp_path, env)


def _headline_agrees_everywhere(study: Path, shown: str, cwd: Path,
                                env: dict[str, str]) -> None:
    """One headline (issue 44): `show --json` carries the words the terminal printed, and
    export ships what it says (exit 0 with its changes) or says it back (exit 1), as
    verify does when there is nothing to verify."""
    js = kvtune("show", str(study), "--json", cwd=cwd, env=env)
    assert js.returncode == 0, js.stderr[-3000:]
    head = json.loads(js.stdout)["headline"]
    joined = " ".join(" ".join(t.split()) for t, _ in term_lines(shown))
    assert " ".join(head["text"].split()) in joined, (head["text"], joined[-2000:])
    out = kvtune("export", str(study), "-o", str(cwd / "x"), cwd=cwd, env=env)
    if head["action"] in ("ship", "ship_smaller") and out.returncode == 1:
        # The synthetic target's knobs have no file format: said, and nothing else.
        assert "changes nothing any format exports" in out.stderr, out.stderr[-3000:]
    elif head["action"] in ("ship", "ship_smaller"):
        assert out.returncode == 0, out.stderr[-3000:]
        written = " ".join(p.read_text() for p in (cwd / "x").rglob("*") if p.is_file()
                           and "rollback" not in p.parts)
        for knob, value in head["changes"].items():
            assert knob.split(".", 1)[-1] in written or str(value) in written, knob
    else:
        assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
        assert " ".join(head["text"].split()) in " ".join(out.stderr.split()), out.stderr
        assert not (cwd / "x").exists()
        # verify has nothing to check, and says the same headline back.
        ver = kvtune("verify", str(study), cwd=cwd, env=env)
        assert ver.returncode == 1, ver.stdout[-2000:] + ver.stderr[-2000:]
        assert " ".join(head["text"].split()) in " ".join(ver.stderr.split()), ver.stderr
