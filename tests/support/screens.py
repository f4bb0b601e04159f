"""What a user reads, parsed back: the terminal's rich tables and lines (`kvtune show`, the
end of `kvtune tune`, with their colours when FORCE_COLOR is set) and the HTML report's
tables, verdict boxes and list items (stdlib html.parser). Used by test_agreement.py and
test_walkthrough.py to check that the two screens say the same thing about each change."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

# The words a change is judged with (kvtune.present.judge), longest first so that "no
# significant change" is never read as "change".
WORDS = ("no significant change", "no change", "better", "worse")
_WORD = re.compile(r"\b(" + "|".join(WORDS) + r")\b")
_PCT = re.compile(r"[+\u2212-]\d[\d,]*(?:\.\d+)?%")
_ANSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")
GREEN, RED, YELLOW = {"32", "92"}, {"31", "91"}, {"33", "93"}


def words(text: str) -> list[str]:
    """Every judging word in `text`, in order."""
    return _WORD.findall(text)


def word(text: str) -> str | None:
    """The word a change cell ends with ("+4.0% (95% CI …), better"), or None."""
    found = words(text)
    return found[-1] if found else None


def norm(text: str) -> str:
    return " ".join(text.split())


# -- the terminal ---------------------------------------------------------------------------


def plain(raw: str) -> str:
    """The terminal text without its escape sequences."""
    return _ANSI.sub("", raw)


def _styled(raw: str) -> tuple[str, list[frozenset[str]]]:
    """A line without escapes, and the SGR codes in effect at each of its characters."""
    text: list[str] = []
    codes: list[frozenset[str]] = []
    active: set[str] = set()
    pos = 0
    for m in _ANSI.finditer(raw):
        chunk = raw[pos:m.start()]
        text.append(chunk)
        codes += [frozenset(active)] * len(chunk)
        if m.group(2) == "m":
            params = [p for p in m.group(1).split(";") if p]
            if not params or "0" in params:
                active = set()
            active |= {p for p in params if p != "0"}
        pos = m.end()
    text.append(raw[pos:])
    codes += [frozenset(active)] * len(raw[pos:])
    return "".join(text), codes


@dataclass
class Cell:
    text: str
    codes: frozenset[str] = frozenset()  # the SGR codes on its non-blank characters

    @property
    def colour(self) -> str | None:
        if self.codes & GREEN:
            return "green"
        if self.codes & RED:
            return "red"
        if self.codes & YELLOW:
            return "yellow"
        return None


@dataclass
class TermTable:
    header: list[str]
    rows: list[list[Cell]] = field(default_factory=list)


def term_table(raw: str, title: str) -> TermTable | None:
    """The rich table titled `title` (rows that wrap are joined back into one), or None."""
    lines = [_styled(ln) for ln in raw.splitlines()]
    start = next((i for i, (t, _) in enumerate(lines) if t.strip() == title), None)
    if start is None:
        return None
    header: list[list[str]] = []
    rows: list[list[Cell]] = []
    for text, codes in lines[start + 1:]:
        if text.startswith("└"):
            break
        bar = "┃" if text.startswith("┃") else "│" if text.startswith("│") else None
        if bar is None:
            continue
        cuts = [i for i, ch in enumerate(text) if ch == bar]
        cells = [Cell(text[a + 1:b].strip(),
                      frozenset().union(*(codes[i] for i in range(a + 1, b)
                                          if text[i].strip())))
                 for a, b in itertools.pairwise(cuts)]
        if bar == "┃":
            header.append([c.text for c in cells])
        elif rows and not cells[0].text:  # a wrapped row goes on under an empty first cell
            rows[-1] = [Cell(f"{p.text} {c.text}".strip(), p.codes | c.codes)
                        for p, c in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    head = [" ".join(h[i] for h in header if h[i]).strip() for i in range(len(header[0]))] \
        if header else []
    return TermTable(head, rows)


def term_lines(raw: str) -> list[tuple[str, Cell]]:
    """Every line outside tables: (its text, a Cell with its colours)."""
    out = []
    for ln in raw.splitlines():
        text, codes = _styled(ln)
        if text[:1] in ("│", "┃", "┏", "┡", "└", "┗", "┌"):
            continue
        out.append((text, Cell(text.strip(), frozenset().union(
            *(c for c, ch in zip(codes, text, strict=True) if ch.strip())))))
    return out


# -- the HTML report -------------------------------------------------------------------------


@dataclass
class HtmlTable:
    section: str
    rows: list[dict[str, Any]] = field(default_factory=list)  # {"class", "cells": [...]}


class Page(HTMLParser):
    """Tables (each with the h2 section it is in), verdict boxes and list items."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.section = ""
        self.tables: list[HtmlTable] = []
        self.boxes: list[dict[str, str]] = []  # <div class="verdict ..."> in order
        self.items: list[str] = []
        self.paragraphs: list[str] = []
        self._cell: dict[str, str] | None = None
        self._row: list[dict[str, str]] | None = None
        self._box: dict[str, str] | None = None
        self._item: list[str] | None = None
        self._para: list[str] | None = None
        self._skip = 0
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "h2":
            self.section = a.get("id", "")
        elif tag == "table":
            self.tables.append(HtmlTable(self.section))
        elif tag == "tr" and self.tables:
            self._row = []
            self.tables[-1].rows.append({"class": a.get("class", ""), "cells": self._row})
        elif tag in ("td", "th") and self._row is not None:
            self._cell = {"tag": tag, "class": a.get("class", ""), "text": ""}
            self._row.append(self._cell)
        elif tag == "div" and "verdict" in a.get("class", "").split():
            self._box = {"class": a.get("class", ""), "text": "", "section": self.section}
            self.boxes.append(self._box)
        elif tag == "li":
            self._item = []
        elif tag == "p":
            self._para = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip -= 1
        elif tag in ("td", "th"):
            self._cell = None
        elif tag == "tr":
            self._row = None
        elif tag == "div":
            self._box = None
        elif tag == "li" and self._item is not None:
            self.items.append(norm("".join(self._item)))
            self._item = None
        elif tag == "p" and self._para is not None:
            self.paragraphs.append(norm("".join(self._para)))
            self._para = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        for sink in (self._cell, self._box):
            if sink is not None:
                sink["text"] += data
        for acc in (self._item, self._para):
            if acc is not None:
                acc.append(data)

    def in_section(self, section: str) -> list[HtmlTable]:
        return [t for t in self.tables if t.section == section]

    @property
    def verdict(self) -> dict[str, str]:
        """The page's verdict box (the first, above every section)."""
        return next(b for b in self.boxes if b["section"] == "")


def colour_of(html_class: str) -> str | None:
    """The colour a report cell's class gives its words (report/html.py's CSS)."""
    cls = set(html_class.split())
    if "better" in cls or "good" in cls:
        return "green"
    if "worse" in cls or "bad" in cls:
        return "red"
    if "none" in cls:
        return "yellow"
    return None


# -- what the two screens say, compared----------------------------------------------------------


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


HEADLINE = re.compile(r"^(Ship |Keep the defaults: |Not decided: |Pick from the confirmed "
                      r"front|The study failed: )")


def compare_headline(agree: Agreement, raw: str, page: Page) -> None:
    """The study's headline (what to ship or keep): the terminal's last verdict line is the
    report's verdict, word for word, and a study says it once on each screen."""
    said = [norm(t) for t, _ in term_lines(raw) if HEADLINE.match(norm(t))]
    agree.same("headline: said once in the terminal", 1, len(said))
    text = norm(page.verdict["text"])
    if said:
        agree.same("headline: the report's verdict", said[0], text[:len(said[0])])


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
    compare_headline(agree, raw, page)
    compare_ablation(agree, raw, page)
    compare_sweeps(agree, raw, page)
    return agree
