"""The report's figures, as plotly figures (the HTML module embeds them).

Every function returns a `go.Figure` (or None when the study holds nothing to draw), so a
figure can be tested, shown in a notebook, or written on its own.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from _plotly_utils.utils import convert_to_base64
from plotly.subplots import make_subplots

from kvtune import present
from kvtune.analysis import Analysis, Correlation, Curve, Importance, StudyData
from kvtune.documents import AblatedKnob, Ablation
from kvtune.study.record import stored_eval

BLUE, ORANGE, GREY, GREEN, RED = "#1f77b4", "#ff7f0e", "#9e9e9e", "#2ca02c", "#d62728"
_LAYOUT: dict[str, Any] = {"template": "plotly_white", "height": 380,
                           "margin": {"l": 70, "r": 30, "t": 60, "b": 60},
                           "font": {"size": 13}}


@functools.cache
def _template(name: str) -> go.layout.Template:
    """A registered template as plotly's validation leaves it (its keys in plotly's order),
    built once."""
    return go.layout.Template(pio.templates[name])


def update_layout(fig: go.Figure, **layout: Any) -> go.Figure:
    """`fig.update_layout(**layout)`, with its `template` (a registered template's name)
    validated once a process and set as plotly sets its default template on every new
    figure: without validating it again. Through update_layout, each figure copied the
    whole template twice and checked every property of it (dozens of figures a report);
    the figure's JSON is the same, byte for byte."""
    name = layout.pop("template", None)
    if name is not None:
        lay = fig.layout
        lay._validate = False
        try:
            lay.template = _template(name)
        finally:
            lay._validate = fig._validate
    return fig.update_layout(**layout)


def _merge(into: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """`more` merged into `into` key by key, nested dicts merged (as plotly's update does),
    `more`'s dicts copied (the module's shared ones, such as _LAYOUT's margin, stay as
    they are)."""
    for key, value in more.items():
        if isinstance(value, dict):
            node = into.get(key)
            into[key] = _merge(node if isinstance(node, dict) else {}, value)
        else:
            into[key] = value
    return into


def _nested(layout: dict[str, Any]) -> dict[str, Any]:
    """plotly's layout keywords (its "magic underscores": xaxis_title="x" is xaxis.title)
    as one nested dict, merged in their order."""
    out: dict[str, Any] = {}
    for key, value in layout.items():
        *path, last = key.split("_")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        _merge(node, {last: value})
    return out


def new_figure(data: Any = None, *, shapes: Sequence[dict[str, Any]] = (),
               annotations: Sequence[dict[str, Any]] = (), **layout: Any) -> go.Figure:
    """`go.Figure(data)` with `layout` (update_layout's keywords, a template by its
    registered name), its `shapes` and `annotations` (dicts, as `vline` and `hrect` give
    them) given to the constructor: the figure `go.Figure(data)`, `update_layout(...)` and
    add_vline/add_hrect... would build, property for property (its JSON the same but for
    the order of the layout's keys), without plotly's per-call update machinery (about
    5 ms a figure; add_vline about 8 ms a line)."""
    name = layout.pop("template", None)
    lay = _nested(layout)
    if shapes:
        lay["shapes"] = list(shapes)
    if annotations:
        lay["annotations"] = list(annotations)
    fig = go.Figure(data, layout=lay)
    if name is not None:
        update_layout(fig, template=name)
    return fig


def vline(x: Any, line: dict[str, Any], text: str | None = None,
          position: str = "top right") -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The shape and annotation `fig.add_vline(x=x, line=line, annotation_text=text,
    annotation_position=position)` adds to a figure without subplots ("top right" and
    "top left" only)."""
    shape = {"type": "line", "x0": x, "x1": x, "xref": "x", "y0": 0, "y1": 1,
             "yref": "y domain", "line": line}
    if text is None:
        return shape, None
    anchor = {"top right": "left", "top left": "right"}[position]
    return shape, {"showarrow": False, "text": text, "x": x, "xanchor": anchor, "xref": "x",
                   "y": 1, "yanchor": "top", "yref": "y domain"}


def _hline(y: Any, line: dict[str, Any]) -> dict[str, Any]:
    """The shape `fig.add_hline(y=y, line=line)` adds to a figure without subplots."""
    return {"type": "line", "x0": 0, "x1": 1, "xref": "x domain", "y0": y, "y1": y,
            "yref": "y", "line": line}


def _hrect_top_left(y0: Any, y1: Any, text: str, **style: Any) -> tuple[dict[str, Any],
                                                                        dict[str, Any]]:
    """The shape and annotation `fig.add_hrect(y0=y0, y1=y1, annotation_text=text,
    annotation_position="top left", **style)` adds to a figure without subplots."""
    return ({"type": "rect", "x0": 0, "x1": 1, "xref": "x domain", "y0": y0, "y1": y1,
             "yref": "y", **style},
            {"showarrow": False, "text": text, "x": 0, "xanchor": "left", "xref": "x domain",
             "y": y1, "yanchor": "top", "yref": "y"})


def to_html(fig: go.Figure, div_id: str, **options: Any) -> str:
    """`fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, **options)`,
    the same text, without deep-copying the figure first (`Figure.to_dict` copies every
    value, the template's hundreds included, with copy.deepcopy): its dicts and lists are
    copied here (what plotly's base64 conversion of arrays may replace in them), its
    values shared. The layout's template, a registered one (`update_layout`) read from
    plotly's JSON, holds lists only, never an array to convert: it is neither copied nor
    walked."""
    layout = dict(fig._layout)
    template = layout.pop("template", None)
    fig_dict = {"data": _containers(fig._data), "layout": _containers(layout)}
    convert_to_base64(fig_dict)
    if template is not None:
        fig_dict["layout"]["template"] = template
    return str(pio.to_html(fig_dict, validate=False, full_html=False,
                           include_plotlyjs=False, div_id=plot_id(div_id), **options))


def _containers(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _containers(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_containers(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_containers(x) for x in v)
    return v


def _short(knob: str) -> str:
    return knob.split(".", 1)[-1]


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def convergence(data: StudyData) -> go.Figure | None:
    """Every trial's value, the best feasible value so far, and the baseline's 95% CI band."""
    rows = []
    for t in data.trials:
        if t.user_attrs.get("kind") not in ("baseline", "trial") or not t.state.is_finished():
            continue
        feasible = all(v <= 0 for v in t.user_attrs.get("violations", [0]))
        rows.append((t.number, t.value, feasible, t.state.name, t.user_attrs.get("config", {})))
    done = [r for r in rows if _finite(r[1])]
    if not done:
        return None
    shapes, notes = [], []
    base = next((t for t in data.trials if t.user_attrs.get("kind") == "baseline"
                 and _finite(t.value)), None)
    if base is not None:
        ci = stored_eval(base).get("ci") or [None, None]
        if _finite(ci[0]) and _finite(ci[1]):
            band, note = _hrect_top_left(ci[0], ci[1], "baseline 95% CI", fillcolor=GREY,
                                         opacity=0.18, line={"width": 0})
            shapes.append(band)
            notes.append(note)
        shapes.append(_hline(base.value, {"color": GREY, "dash": "dash"}))
    fig = new_figure(**_LAYOUT, title=f"Convergence: {data.metric} ({data.direction})",
                     xaxis_title="trial", yaxis_title=data.metric, shapes=shapes,
                     annotations=notes)

    def hover(cfg: dict[str, Any]) -> str:
        return "<br>".join(f"{_short(k)}={v}" for k, v in cfg.items())

    for feasible, name, color, symbol in ((True, "trial", BLUE, "circle"),
                                          (False, "infeasible", RED, "x")):
        pts = [r for r in done if r[2] == feasible]
        if pts:
            fig.add_trace(go.Scatter(
                x=[r[0] for r in pts], y=[r[1] for r in pts], mode="markers", name=name,
                marker={"color": color, "symbol": symbol, "size": 8},
                text=[hover(r[4]) for r in pts],
                hovertemplate="trial %{x}: %{y:,.4r}<br>%{text}<extra></extra>"))
    best_x, best_y = [], []
    best = math.nan
    for n, v, feasible, _, _ in sorted(done):
        if feasible and v is not None and (math.isnan(best) or data.better(float(v), best)):
            best = float(v)
        if not math.isnan(best):
            best_x.append(n)
            best_y.append(best)
    fig.add_trace(go.Scatter(x=best_x, y=best_y, mode="lines", name="best so far",
                             line={"color": ORANGE, "width": 3, "shape": "hv"}))
    fig.update_xaxes(tickformat="d", dtick=1 if len(done) <= 20 else None)
    return fig


def importance(imp: Importance) -> go.Figure | None:
    """Each knob's share with its bootstrap 95% interval; knobs the trials rank in blue,
    the others grey, and the title says when the trials do not support a ranking."""
    if not imp.values:
        return None
    names = list(imp.values)[::-1]
    lo = [imp.values[k] - imp.intervals[k][0] if k in imp.intervals else 0 for k in names]
    hi = [imp.intervals[k][1] - imp.values[k] if k in imp.intervals else 0 for k in names]
    colors = [BLUE if k in imp.ranking else GREY for k in names]
    bar = go.Bar(x=[imp.values[k] for k in names], y=names, orientation="h",
                           marker_color=colors, text=[present.share(imp.values[k]) for k in names],
                           textposition="inside", insidetextanchor="start",
                           error_x={"type": "data", "symmetric": False, "array": hi,
                                    "arrayminus": lo, "color": "#444"})
    sub = ("ranked: the blue knobs' effects stand out of the noise (grey: no measurable "
           "effect)" if imp.ranked else "not enough trials to rank: the bars are not a "
                                        "ranking")
    of = (f"{imp.n_trials} of {imp.n_searched}" if imp.n_searched > imp.n_trials
          else str(imp.n_trials))
    return new_figure(bar, **{**_LAYOUT, "height": max(240, 90 + 40 * len(names)),
                              "margin": {"l": 200, "r": 30, "t": 80, "b": 60}},
                      title=f"Knob importance ({imp.method}, {of} trials, bootstrap "
                            f"95% intervals)<br><sup>{sub}</sup>",
                      xaxis_title="share of importance", xaxis_tickformat=".0%",
                      xaxis_range=[0, 1.05])


def sensitivity(curve: Curve, metric: str) -> go.Figure | None:
    """The objective against one knob: medians of repetitions with bootstrap 95% CIs."""
    pts = curve.points
    if not pts:
        return None
    lo = [p.median - p.ci_low if _finite(p.ci_low) else 0 for p in pts]
    hi = [p.ci_high - p.median if _finite(p.ci_high) else 0 for p in pts]
    base = curve.baseline_value
    xs: list[Any] = [p.x for p in pts] if curve.numeric else [p.label for p in pts]
    colors = [ORANGE if (not curve.numeric and str(base) == p.label) else BLUE for p in pts]
    trace = go.Scatter(
        x=xs, y=[p.median for p in pts], mode="lines+markers" if curve.numeric else "markers",
        marker={"size": 10, "color": colors}, line={"color": BLUE},
        error_y={"type": "data", "symmetric": False, "array": hi, "arrayminus": lo},
        text=[f"{p.label}: n={p.n_reps} repetitions of {p.n_configs} configuration(s)"
              for p in pts], name=metric,
        hovertemplate="%{text}<br>median %{y:,.4r}<extra></extra>")
    shapes, notes = [], []
    if curve.numeric and _finite(base) and not (curve.log and float(base) <= 0):
        # A shape's x is in data coordinates, also on a log axis (plotly.js converts it);
        # an annotation's x on a log axis is the exponent.
        shapes.append({"type": "line", "x0": float(base), "x1": float(base), "y0": 0, "y1": 1,
                       "xref": "x", "yref": "paper", "line": {"color": GREY, "dash": "dash"},
                       "name": "default"})
        notes.append({"x": math.log10(float(base)) if curve.log else float(base), "y": 1,
                      "yref": "paper", "text": "default", "showarrow": False,
                      "yanchor": "bottom", "font": {"color": "#555"}})
    how = ("one-knob sweep, others at defaults" if curve.source == "sweep"
           else "over the search, other knobs varying")
    axis = ({"xaxis_type": "log"} if curve.numeric and curve.log else
            {"xaxis_type": "category"} if not curve.numeric else {})
    return new_figure(trace, **{**_LAYOUT, "margin": {"l": 70, "r": 20, "t": 70, "b": 60}},
                      title=f"{metric} against {_short(curve.knob)}<br><sup>{how}</sup>",
                      xaxis_title=curve.knob, yaxis_title=f"{metric} (median, 95% CI)",
                      showlegend=False, **axis, shapes=shapes, annotations=notes)


def correlations(corrs: list[Correlation], metric: str, top: int = 15) -> go.Figure | None:
    """The strongest telemetry correlates; those that do not survive Benjamini–Hochberg
    (q ≥ 0.05) are drawn pale: chance among many counters."""
    rows = [c for c in corrs if c.telemetry][:top]
    if not rows:
        return None
    rows = rows[::-1]
    bar = go.Bar(
        x=[c.rho for c in rows], y=[f"{c.metric} ({c.unit})" for c in rows], orientation="h",
        marker_color=[GREEN if c.rho > 0 else RED for c in rows],
        marker_opacity=[1.0 if c.lead() else 0.3 for c in rows],
        text=[f"ρ={present.signed(c.rho)}" + ("" if c.lead() else " (q≥0.05)") for c in rows],
        textposition="auto",
        customdata=[[c.p_value, c.n, c.q_value] for c in rows],
        hovertemplate="%{y}: ρ=%{x:.3f}, p=%{customdata[0]:.2g}, BH q=%{customdata[2]:.2g}, "
                      "n=%{customdata[1]}<extra></extra>")
    return new_figure(bar, **{**_LAYOUT, "height": max(260, 80 + 28 * len(rows)),
                              "margin": {"l": 230, "r": 30, "t": 60, "b": 60}},
                      title=f"Telemetry correlated with {metric} (Spearman, per repetition)",
                      xaxis_title="Spearman ρ", xaxis_range=[-1, 1])


def telemetry_scatter(data: StudyData, corrs: list[Correlation], top: int = 3
                      ) -> go.Figure | None:
    """The objective against the most correlated telemetry counters, one dot per repetition."""
    rows = [c for c in corrs if c.telemetry][:top]
    reps = data.ok_reps()
    if not rows or not reps:
        return None
    fig = make_subplots(rows=1, cols=len(rows), subplot_titles=[c.metric for c in rows],
                        shared_yaxes=True)
    kinds = sorted({r["kind"] for r in reps})
    palette = [BLUE, ORANGE, GREEN, RED, "#9467bd", "#8c564b"]
    for i, c in enumerate(rows, start=1):
        for j, kind in enumerate(kinds):
            pts = [r for r in reps if r["kind"] == kind and _finite(r["metrics"].get(c.metric))]
            fig.add_trace(go.Scatter(
                x=[r["metrics"][c.metric] for r in pts], y=[r["value"] for r in pts],
                mode="markers", name=kind, legendgroup=kind, showlegend=i == 1,
                marker={"color": palette[j % len(palette)], "size": 7, "opacity": 0.75},
                hovertemplate=f"{c.metric}=%{{x:,.4r}}<br>{data.metric}=%{{y:,.4r}}"
                              "<extra>" + kind + "</extra>"), row=1, col=i)
    update_layout(fig, **_LAYOUT, title=f"{data.metric} against its strongest telemetry "
                                        "correlates (one dot per repetition)")
    fig.update_yaxes(title_text=data.metric, row=1, col=1)
    return fig


def slab_pages(tables: dict[str, list[dict[str, float]]]) -> go.Figure | None:
    """Pages per slab class, one bar group per configuration (the slab case study's table)."""
    classes = sorted({int(r["class"]) for rows in tables.values() for r in rows
                      if r.get("total_pages", 0) > 0})
    if not classes:
        return None
    fig = new_figure(**_LAYOUT, barmode="group", title="pages per slab class",
                     xaxis_title="slab class", yaxis_title="total_pages", xaxis_type="category")
    for (name, rows), color in zip(tables.items(), (GREY, BLUE, ORANGE), strict=False):
        by = {int(r["class"]): r for r in rows}
        fig.add_trace(go.Bar(
            x=[str(c) for c in classes], y=[by.get(c, {}).get("total_pages", 0) for c in classes],
            name=name, marker_color=color,
            text=[f"{int(by[c]['chunk_size'])} B chunks" if c in by and "chunk_size" in by[c]
                  else "" for c in classes],
            hovertemplate="class %{x}: %{y} pages<br>%{text}<extra>" + name + "</extra>"))
    return fig


PERCENTILES = (("p50_us", 50.0), ("p90_us", 90.0), ("p99_us", 99.0), ("p999_us", 99.9),
               ("p9999_us", 99.99))


def spectrum(series: dict[str, dict[str, dict[str, float]]]) -> go.Figure | None:
    """The latency percentile spectrum (p50 … p99.99, HDR style: x is the number of nines,
    both axes log), one line per configuration and verb. `series`: {configuration:
    {verb: {"p50_us": median, ...}}}."""
    if not series:
        return None
    palette = {0: GREY, 1: BLUE, 2: ORANGE}
    dashes = {"all": "solid", "get": "dot", "set": "dash"}
    ticks = [-math.log10(1 - q / 100) for _, q in PERCENTILES]
    fig = new_figure(**{**_LAYOUT, "height": 420, "legend": {"orientation": "h", "y": -0.25}},
                     title="Latency percentile spectrum (median over repetitions)",
                     yaxis_title="latency (µs, log)", yaxis_type="log",
                     xaxis={"tickvals": ticks, "ticktext": ["p50", "p90", "p99", "p99.9",
                                                            "p99.99"],
                            "title": "percentile"})
    for i, (cfg, verbs) in enumerate(series.items()):
        for verb, pts in verbs.items():
            if verb == "_n":  # how many repetitions (compare.latency_by_verb), not a verb
                continue
            xs = [t for (k, _), t in zip(PERCENTILES, ticks, strict=True) if _finite(pts.get(k))]
            ys = [pts[k] for k, _ in PERCENTILES if _finite(pts.get(k))]
            if not xs:
                continue
            fig.add_trace(go.Scatter(
                x=xs, y=ys, mode="lines+markers", name=f"{cfg}: {verb.upper()}"
                if verb != "all" else f"{cfg}: all requests",
                line={"color": palette.get(i, GREEN), "dash": dashes.get(verb, "dashdot")},
                hovertemplate="%{y:,.0f} µs<extra>" + f"{cfg} {verb}" + "</extra>"))
    if not fig.data:
        return None
    return fig


def ablation(res: Ablation | None) -> go.Figure | None:
    """Each changed knob's share of the gain with its 95% CI (the ablation)."""
    if res is None or not res.knobs or res.skipped:
        return None
    rows = [r for r in res.knobs if r.share is not None and math.isfinite(r.share)][::-1]
    if not rows:
        return None
    color = {"carries": GREEN, "hurts": RED, "does not carry": GREY, "ambiguous": GREY,
             "noise": GREY}

    def bound(r: AblatedKnob, i: int) -> float:
        b = (r.share_ci or [None, None])[i]
        return b if b is not None and math.isfinite(b) else math.nan

    from kvtune.study.ablation import shares

    points = shares(res)  # the shares as the ablation's table prints them, together
    share = [r.share or 0.0 for r in rows]
    lo = [s - bound(r, 0) if math.isfinite(bound(r, 0)) else 0
          for s, r in zip(share, rows, strict=True)]
    hi = [bound(r, 1) - s if math.isfinite(bound(r, 1)) else 0
          for s, r in zip(share, rows, strict=True)]
    bar = go.Bar(
        x=share, y=[f"{r.knob} → {present.fmt(r.recommended)}" for r in rows],
        orientation="h", marker_color=[color.get(r.effect or "", GREY) for r in rows],
        text=[f"{points[r.knob][0]} ({r.effect})" for r in rows], textposition="inside",
        insidetextanchor="start",
        error_x={"type": "data", "symmetric": False, "array": hi, "arrayminus": lo,
                 "color": "#444"})
    zero, _ = vline(0, {"color": "#888"})
    return new_figure(bar, **{**_LAYOUT, "height": max(240, 100 + 45 * len(rows)),
                              "margin": {"l": 260, "r": 30, "t": 70, "b": 60}},
                      title="Ablation: each change's share of the gain (the interval its "
                            "verdict was decided by)<br><sup>green carries the gain, grey does "
                            "not carry it or is still ambiguous, red hurts it</sup>",
                      xaxis_title="share of the gain", xaxis_tickformat=".0%", shapes=[zero])


def all_figures(data: StudyData, a: Analysis,
                slab_tables: dict[str, list[dict[str, float]]] | None = None
                ) -> dict[str, go.Figure | None]:
    """Every figure of the report by id (sensitivity figures as `sensitivity-<knob>`)."""
    figs: dict[str, go.Figure | None] = {
        "convergence": convergence(data), "importance": importance(a.importance)}
    for c in a.curves:
        figs[f"sensitivity-{c.knob}"] = sensitivity(c, data.metric)
    figs["ablation"] = ablation(data.ablation)
    figs["correlations"] = correlations(a.correlations, data.metric)
    figs["telemetry-scatter"] = telemetry_scatter(data, a.correlations)
    if slab_tables:
        figs["slab-pages"] = slab_pages(slab_tables)
    return figs


def tidy(fig: go.Figure) -> go.Figure:
    """Every axis's figures for people, one rule for the whole report: ticks without float
    artifacts (4 significant digits, thousands separators, trailing zeros dropped) where
    the figure sets no format of its own, and an axis whose data are all at or above zero
    (counts, rates, latencies) never runs below zero."""
    layout = fig.layout
    lows: dict[str, float] = {}
    words: set[str] = set()
    for tr in fig.data:
        for axis, key in (("xaxis", "x"), ("yaxis", "y")):
            vals = getattr(tr, key, None)
            if vals is None:
                continue
            ref = getattr(tr, f"{key}axis", None) or key
            name = axis + (ref[1:] if len(ref) > 1 else "")
            if any(isinstance(v, str) for v in vals):
                words.add(name)
                continue
            nums = [float(v) for v in vals if isinstance(v, int | float)
                    and not isinstance(v, bool) and math.isfinite(v)]
            if not nums:
                continue
            lows[name] = min(lows.get(name, math.inf), min(nums))
    for name in [k for k in layout if k.startswith(("xaxis", "yaxis"))] or ["xaxis", "yaxis"]:
        ax = layout[name]
        if ax.tickformat is None and ax.type != "category" and name not in words:
            ax.tickformat = ",.4~r"
        if ax.type in (None, "-", "linear") and lows.get(name, -1) >= 0 and not ax.range:
            ax.rangemode = "nonnegative"
    return fig


_PLOT_ID = re.compile(r"^plot-[a-z]+(-[a-z]+)*(-[0-9]+)*$")


def plot_id(div_id: str) -> str:
    """`div_id` for Plotly's `to_html`, which writes it into the page unescaped: a fixed
    word and indices only (never a stored knob name or value). ValueError otherwise."""
    if not _PLOT_ID.fullmatch(div_id):
        raise ValueError(f"plot id {div_id!r} is not a fixed name with indices")
    return div_id
