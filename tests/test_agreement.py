"""Issue 34, "one source for every word and colour": the HTML report (`kvtune report`) and
the terminal (`kvtune show`, and the last screen of `kvtune tune`) agree on every change
they both show: the same figures, the same "better / worse / no significant change", the
report's colour the colour of that word, and the verdict's colour the same on both.

Checked on a fast synthetic study that recommends something (its `tune` output, `show`
and report), on one that is only searched (no confirmation: no claim, no word), and on
every stored real result shipped in results/ with its study file in
examples/case-studies/ (opened on copies, as tests/test_case_studies.py does)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from screens import Page, TermTable, colour_of, norm, term_lines, term_table, word, words

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

_PCT = re.compile(r"[+\u2212-]\d[\d,]*(?:\.\d+)?%")
_CI = re.compile(r"\(95% CI [^)]*\)")


def _env(tmp: Path) -> dict[str, str]:
    """Colours on (rich honours FORCE_COLOR when the output is a pipe), a private journal
    and run directory (a module-scoped study runs before conftest's per-test ones)."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    env.update(FORCE_COLOR="1", TERM="xterm-256color",
               KVTUNE_JOURNAL=str(tmp / "journal.json"), KVTUNE_RUN_DIR=str(tmp / "run"))
    (tmp / "run").mkdir(exist_ok=True)
    return env


def kvtune(*args: str, cwd: Path, env: dict[str, str],
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "kvtune", *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    assert "Traceback" not in r.stdout + r.stderr, r.stderr[-3000:]
    return r


# -- what the two screens say ---------------------------------------------------------------


@dataclass
class Agreement:
    problems: list[str] = field(default_factory=list)
    compared: dict[str, int] = field(default_factory=dict)  # what was compared, how often

    def same(self, what: str, term: object, report: object) -> None:
        self.expect(what, term, report, f"terminal {term!r}, report {report!r}")

    def expect(self, what: str, want: object, got: object, text: str = "") -> None:
        self.compared[what.split(":")[0]] = self.compared.get(what.split(":")[0], 0) + 1
        if want != got:
            self.problems.append(f"{what}: {text or f'expected {want!r}, shown {got!r}'}")


def _word_colour(agree: Agreement, where: str, text: str, colour: str | None,
                 required: bool) -> None:
    """A coloured word is green when better and red when worse, and no other word is
    green or red; `required`: this screen colours every better and worse (the report)."""
    w = word(text)
    want = {"better": "green", "worse": "red"}.get(w or "")
    if colour in ("green", "red") or (want and required):
        agree.expect(f"colour: {where} ({text!r})", want, colour)


def _trial_of(label: str) -> str | None:
    m = re.search(r"trial (\d+)", label)
    return m.group(1) if m else None


def _report_comparison(page: Page) -> tuple[str, dict[str, list[str]], dict[str, dict]]:
    """The before/after table: its label, its knob rows and its metric rows (counters in
    the <details> tables included), each {"base", "new", "change", "class"}."""
    label, knobs, metrics = "", {}, {}
    for t in page.in_section("before-after"):
        head = [c["text"] for c in t.rows[0]["cells"]] if t.rows else []
        if not head or head[-1] != "change":
            continue
        label = label or head[3]
        group = "metrics"
        for r in t.rows[1:]:
            cells = r["cells"]
            if "group" in r["class"].split():
                group = "knobs" if cells[0]["text"] == "knobs" else "metrics"
                continue
            if len(cells) != 5:
                continue
            name = cells[0]["text"].strip()
            if group == "knobs":
                knobs[name] = [cells[2]["text"], cells[3]["text"], cells[4]["text"]]
            else:
                metrics[name] = {"base": cells[2]["text"], "new": cells[3]["text"],
                                 "change": norm(cells[4]["text"]),
                                 "class": cells[4]["class"]}
    return label, knobs, metrics


def _figure(text: str) -> str:
    return "-" if text in ("-", "\u2013", "") else text


def compare_tables(agree: Agreement, term: TermTable | None, page: Page) -> dict[str, str]:
    """The comparison table of both screens, row by row; returns each metric's word."""
    label, knobs, metrics = _report_comparison(page)
    if term is None:
        agree.same("comparison table shown", False, bool(metrics))
        return {}
    t_label = term.header[2]
    agree.same("label: the compared trial", _trial_of(t_label), _trial_of(label))
    agree.same("label: recommended", t_label.startswith("recommended"),
               label.startswith("recommended"))
    out: dict[str, str] = {}
    for row in term.rows:
        name, base, new, change = (c.text for c in row[:4])
        if name in knobs:
            agree.same(f"knob: {name}", [base, new, change], knobs[name])
            continue
        rep = metrics.get(name)
        if rep is None:
            continue
        agree.same(f"figure: {name} baseline", _figure(base), _figure(rep["base"]))
        agree.same(f"figure: {name} compared", _figure(new), _figure(rep["new"]))
        t_word, r_word = word(change), word(rep["change"])
        agree.same(f"word: {name}", t_word, r_word)
        if t_word or r_word:  # a claim: the same change, the same interval, the same words
            agree.same(f"change: {name}", norm(change), rep["change"])
        else:  # figures, not claims: the same percentage
            tp, rp = _PCT.findall(change), _PCT.findall(rep["change"])
            if tp and rp:
                agree.same(f"change: {name} percentage", tp[0], rp[0])
        _word_colour(agree, f"report {name}", rep["change"], colour_of(rep["class"]), True)
        _word_colour(agree, f"terminal {name}", change, row[3].colour, False)
        if t_word:
            out[name] = t_word
    return out


def _first_word_after(text: str, metric: str) -> str | None:
    i = text.find(f"{metric} ")
    if i < 0:
        return None
    found = words(text[i:])
    return found[0] if found else None


def compare_verdicts(agree: Agreement, raw: str, page: Page, table_words: dict[str, str],
                     metric: str, compared_trial: str | None) -> None:
    """The verdict: its colour on both screens; the objective's word in each verdict (and
    the report's "every other metric" list) the word of the comparison tables."""
    lines = term_lines(raw)
    conf = next((c for t, c in lines if t.startswith("Confirmation")), None)
    t_colour = conf.colour if conf is not None else "yellow"
    agree.same("verdict colour", t_colour, colour_of(page.verdict["class"]))
    for box in page.boxes:  # no green box on a page whose verdict is not green
        if colour_of(box["class"]) == "green":
            agree.same(f"colour: the report's box {box['text'][:60]!r}", t_colour, "green")
    if metric not in table_words:
        return
    want = table_words[metric]
    joined = norm(" ".join(t for t, _ in lines))
    if compared_trial is not None:
        # The compared trial's line: the verdict (recommended) or the candidate's.
        for m in re.finditer(rf"trial {compared_trial}: ", joined):
            rest = joined[m.end():]
            end = min((i for i in (rest.find(" trial "), rest.find("Confirmation"))
                       if i > 0), default=len(rest))
            agree.same(f"word: {metric} in the terminal's line for trial {compared_trial}",
                       _first_word_after(rest[:end], metric), want)
    text = norm(page.verdict["text"])
    if _first_word_after(text, metric):
        agree.same(f"word: {metric} in the report's verdict", want,
                   _first_word_after(text, metric))
    other = text.split("Every other metric over the same rounds: ", 1)
    if len(other) == 2:
        for clause in other[1].rstrip(".").split("; "):
            name = clause.split(" ", 1)[0]
            if name in table_words:
                agree.same(f"word: {name} in the report's verdict", table_words[name],
                           word(clause))


def compare_trials(agree: Agreement, term: TermTable | None, page: Page) -> None:
    """Each search trial's change against the baseline, in both trial tables."""
    tables = page.in_section("trials")
    if term is None or not tables:
        return
    col = next(i for i, h in enumerate(term.header) if h.endswith("vs baseline"))
    t_rows = {r[0].text: r for r in term.rows if r[1].text == "trial"}
    rows = tables[0].rows
    r_col = next(i for i, c in enumerate(rows[0]["cells"]) if c["text"].endswith(
        "vs baseline"))
    for r in rows[1:]:
        cells = r["cells"]
        t = t_rows.get(cells[0]["text"])
        if t is None or not t[col].text or cells[r_col]["text"] in ("", "-"):
            continue
        agree.same(f"trial: {cells[0]['text']} vs baseline", norm(t[col].text),
                   norm(cells[r_col]["text"]))


def compare_ablation(agree: Agreement, raw: str, page: Page) -> None:
    """Each change the ablation reverted: what reverting it did, the words, its share."""
    joined = norm(" ".join(t for t, _ in term_lines(raw)))
    tables = [t for t in page.in_section("ablation") if t.rows
              and t.rows[0]["cells"][0]["text"] == "change"]
    if not tables:
        return
    for r in tables[0].rows[1:]:
        change, share, revert, _p, effect = (c["text"] for c in r["cells"])
        knob = change.split(":", 1)[0]
        m = re.search(re.escape(knob) + r" \S+ → \S+: share of the gain (.*?); reverting "
                      r"it: (.*?); (carries|hurts|does not carry|ambiguous|noise)", joined)
        if m is None:
            agree.same(f"ablation: {knob} shown", False, True)
            continue
        agree.same(f"ablation: {knob} reverting it", norm(m.group(2)), norm(revert))
        agree.same(f"ablation: {knob} effect", m.group(3), effect)
        agree.same(f"ablation: {knob} share", norm(m.group(1)), norm(share))
        cls = r["cells"][4]["class"]
        agree.expect(f"colour: ablation {knob} ({effect})",
                     {"carries": "green", "hurts": "red"}.get(effect), colour_of(cls))


def compare_sweeps(agree: Agreement, raw: str, page: Page) -> None:
    """A sweep's findings are the same sentences on both screens."""
    joined = norm(" ".join(t for t, _ in term_lines(raw)))
    for item in page.items:
        if words(item) and ("vs the default" in item or "best " in item):
            agree.same(f"sweep: {item[:70]}", True, item in joined)
    for sentence in re.findall(r"vs the default .*?\)\)?(?=\s|$)", joined):
        agree.same(f"sweep: {sentence[:70]} in the report", True,
                   any(sentence in item for item in page.items))


def agreement(raw: str, html: str) -> Agreement:
    """Everything the terminal output `raw` and the report `html` both show, compared."""
    page = Page(html)
    agree = Agreement()
    head = re.search(r"\((?:maximize|minimize) (\S+),", norm(" ".join(
        t for t, _ in term_lines(raw))))
    if head is None:  # a study that only swept
        compare_sweeps(agree, raw, page)
        return agree
    metric = head.group(1)
    comparison = term_table(raw, "Best configuration beside the baseline")
    table_words = compare_tables(agree, comparison, page)
    compared = _trial_of(comparison.header[2]) if comparison else None
    compare_verdicts(agree, raw, page, table_words, metric, compared)
    compare_trials(agree, term_table(raw, "Trials"), page)
    compare_ablation(agree, raw, page)
    compare_sweeps(agree, raw, page)
    return agree


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
    return {"tune": tune.stdout, "show": show.stdout, "html": (d / "r.html").read_text()}


@pytest.mark.parametrize("screen", ["tune", "show"])
def test_a_recommendation_reads_the_same_in_the_terminal_and_the_report(
        synthetic: dict[str, str], screen: str) -> None:
    raw = synthetic[screen]
    assert "\x1b[" in raw, "no colours: FORCE_COLOR was not honoured"
    page = Page(synthetic["html"])
    assert colour_of(page.verdict["class"]) == "green", page.verdict  # it recommends
    agree = agreement(raw, synthetic["html"])
    _assert_agree(agree, "word", "change", "figure", "verdict colour", "trial",
                  "ablation")
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
    assert "Not confirmed" in Page(html).verdict["text"]


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
    _assert_agree(agree, *(("word", "change", "verdict colour", "trial") if confirmed
                           else ("sweep",)))
