"""The study report: one self-contained HTML file (`kvtune report STUDY -o report.html`).

`html` builds the page; `figures` builds its plotly figures."""

from __future__ import annotations

from kvtune.report.compare import comparison
from kvtune.report.html import render, write

__all__ = ["comparison", "render", "write"]
