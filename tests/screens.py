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
