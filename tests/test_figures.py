"""The report's figures are built and written without plotly's per-call update machinery
and its deep copy (kvtune.report.figures: new_figure, vline, to_html...), on plotly's own
figure objects and its private parts (`Figure._data`, `_layout`, `_plotly_utils`'s base64
conversion). These tests hold them to what plotly's public path gives, so that a plotly
release that changes it fails here, not in a user's report."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import plotly.graph_objects as go

from kvtune.report import figures


def _newplot(html: str) -> tuple[list[Any], str]:
    """The Plotly.newPlot arguments after the div id (data, layout, config) parsed, and the
    page with them cut out."""
    start = html.index("Plotly.newPlot(")
    i = html.index(",", start) + 1
    decoder = json.JSONDecoder()
    args = []
    for _ in range(3):
        while html[i] in " \n,":
            i += 1
        value, i = decoder.raw_decode(html, i)
        args.append(value)
    return args, html[:start] + html[i:]


def _public(data: Any, **layout: Any) -> go.Figure:
    fig = go.Figure(data)
    fig.update_layout(**layout)
    return fig


def test_a_new_figure_is_the_figure_update_layout_and_add_vline_build() -> None:
    data = [go.Scatter(x=[1, 2, 3], y=[3, 1, 2], mode="lines+markers", name="p99")]
    layout = {"template": "plotly_white", "height": 380, "title_text": "p99 by threads",
              "xaxis_title": "threads", "xaxis_type": "log", "yaxis_title_text": "µs",
              "margin": {"l": 60, "r": 20}, "legend_orientation": "h"}
    line = {"color": "#555", "dash": "dot"}
    shape, note = figures.vline(2, line, "default", "top right")
    left, left_note = figures.vline(3, line, "best", "top left")
    plain, _ = figures.vline(1, line)
    hline = figures._hline(1.5, {"color": "grey", "dash": "dash"})
    band, band_note = figures._hrect_top_left(1.2, 1.8, "baseline 95% CI", fillcolor="grey",
                                              opacity=0.18, line={"width": 0})
    ours = figures.new_figure(data, shapes=[band, hline, shape, left, plain],
                              annotations=[band_note, note, left_note], **layout)

    theirs = _public(data, **layout)
    theirs.add_hrect(y0=1.2, y1=1.8, fillcolor="grey", opacity=0.18, line_width=0,
                     annotation_text="baseline 95% CI", annotation_position="top left")
    theirs.add_hline(y=1.5, line={"color": "grey", "dash": "dash"})
    theirs.add_vline(x=2, line=line, annotation_text="default",
                     annotation_position="top right")
    theirs.add_vline(x=3, line=line, annotation_text="best", annotation_position="top left")
    theirs.add_vline(x=1, line=line)
    got, want = ours.to_plotly_json(), theirs.to_plotly_json()
    # plotly adds shapes and annotations in call order; ours are given in that order too
    assert json.dumps(got, sort_keys=True, default=str) == \
        json.dumps(want, sort_keys=True, default=str)


def test_to_html_writes_what_plotlys_to_html_writes() -> None:
    fig = figures.new_figure(
        [go.Scatter(x=np.arange(5), y=np.linspace(0.5, 2.5, 5), name="a"),
         go.Bar(x=["x", "y"], y=[1, 2], name="b")],
        template="plotly_white", height=300, title_text="t", xaxis_title="n")
    ours = figures.to_html(fig, "plot-curve-1")
    theirs = fig.to_html(full_html=False, include_plotlyjs=False, div_id="plot-curve-1")
    (o_data, o_layout, o_config), o_page = _newplot(ours)
    (t_data, t_layout, t_config), t_page = _newplot(theirs)
    assert o_data == t_data and o_layout == t_layout and o_config == t_config
    assert o_page == t_page
    # The arrays went as plotly sends them (its base64 typed arrays), and the figure was
    # not changed by writing it.
    assert isinstance(o_data[0]["x"], dict) and "bdata" in o_data[0]["x"], o_data[0]["x"]
    assert isinstance(fig.data[0].x, np.ndarray) and fig.layout.template is not None
    assert re.search(r'id="plot-curve-1"', ours)
