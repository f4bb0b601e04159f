"""Two views the case studies need, for `kvtune show` (text) and `kvtune report` (HTML):

- a one-knob sweep (analysis/sweep.py): the metric against the value, every repetition a
  point, the interval per value, the default and the best marked, the plateau shaded, and
  the findings in sentences (case study 000's chart);
- server stats over time (telemetry/sampler.py): per phase of the workload, slab pages per
  class and what changed (case study 004's table), and a plot over time with the phases
  marked.
"""

from __future__ import annotations

import html
import math
from typing import Any

import plotly.graph_objects as go

from kvtune import present
from kvtune.analysis.sweep import SweepView, analyse, summary_lines
from kvtune.report import figures
from kvtune.telemetry.sampler import phase_table

BLUE, ORANGE, GREY, GREEN = "#1f77b4", "#ff7f0e", "#9e9e9e", "#2ca02c"


# -- text ----------------------------------------------------------------------------------


def _g(v: float) -> str:
    from kvtune.present import number

    return number(v)


def sweep_text(view: SweepView, width: int = 40) -> str:
    """The sweep as a text chart: one line per value, its repetitions as dots on a common
    axis, its interval as a bar, the median as |."""
    allv = [x for p in view.points for x in p.values]
    lines = [f"Sweep of {view.knob}: {view.metric} ({view.direction}), every repetition a "
             "point (·), interval [ ], median |"]
    if not allv:
        return "\n".join([*lines, *summary_lines(view)])
    lo, hi = min(allv), max(allv)
    span = (hi - lo) or 1.0

    def col(x: float) -> int:
        return round((x - lo) / span * (width - 1))

    label_w = max(len(str(p.value)) for p in view.points)
    for p in view.points:
        row = [" "] * width
        if p.values and not math.isnan(p.ci[0]):
            for c in range(col(p.ci[0]), col(p.ci[1]) + 1):
                row[c] = "-"
            row[col(p.ci[0])], row[col(p.ci[1])] = "[", "]"
        for x in p.values:
            row[col(x)] = "·"
        if p.values:
            row[col(p.median)] = "|"
        marks = []
        if p.is_default:
            marks.append("default")
        if view.best is p:
            marks.append("best")
        if p.value in view.plateau and len(view.plateau) > 1:
            marks.append("plateau")
        fail = f" {p.failed} failed" if p.failed else ""
        lines.append(f"  {p.value!s:>{label_w}} {''.join(row)} {_g(p.median):>9} "
                     f"n={p.n}{fail} {' '.join(marks)}")
    lines.append(f"  {'':>{label_w}} {_g(lo):<{width // 2}}{_g(hi):>{width - width // 2}}")
    lines += [f"  {s}" for s in summary_lines(view)]
    return "\n".join(lines)


# -- figures -------------------------------------------------------------------------------


def sweep_figure(view: SweepView) -> go.Figure:
    fig = figures.new_figure(template="plotly_white", height=400,
                             title=f"{view.metric} against {view.knob} (sweep, others at "
                                   "their defaults)",
                             xaxis_title=view.knob, yaxis_title=view.metric,
                             margin={"l": 70, "r": 30, "t": 60, "b": 60})
    xs = [p.value if view.numeric else str(p.value) for p in view.points]
    if view.plateau and len(view.plateau) > 1 and view.numeric:
        fig.add_vrect(x0=view.plateau[0], x1=view.plateau[-1], fillcolor=GREEN, opacity=0.08,
                      line_width=0, annotation_text="plateau (within noise of the best)",
                      annotation_position="top left")
    px, py = [], []
    for x, p in zip(xs, view.points, strict=True):
        px += [x] * len(p.values)
        py += p.values
    fig.add_trace(go.Scatter(x=px, y=py, mode="markers", name="repetition",
                             marker={"color": GREY, "size": 7, "opacity": 0.7}))
    med = [p.median for p in view.points]
    err_hi = [p.ci[1] - p.median if not math.isnan(p.ci[1]) else 0 for p in view.points]
    err_lo = [p.median - p.ci[0] if not math.isnan(p.ci[0]) else 0 for p in view.points]
    fig.add_trace(go.Scatter(
        x=xs, y=med, mode="lines+markers", name="median (interval: 95% CI from n≥6, "
        "else range)", marker={"color": BLUE, "size": 9}, line={"color": BLUE},
        error_y={"type": "data", "array": err_hi, "arrayminus": err_lo, "visible": True}))
    for p, x in zip(view.points, xs, strict=True):
        if p.is_default and p.values:
            fig.add_trace(go.Scatter(x=[x], y=[p.median], mode="markers", name="default",
                                     marker={"color": ORANGE, "size": 15, "symbol": "diamond"}))
        if view.best is p:
            fig.add_trace(go.Scatter(x=[x], y=[p.median], mode="markers", name="best",
                                     marker={"color": GREEN, "size": 15, "symbol": "star"}))
    return fig


def _bucket(chunk: int) -> str:
    """The case study's columns: 100 B, 1 KB, 10 KB, 100 KB classes (by chunk size)."""
    if chunk <= 512:
        return "≤512 B"
    if chunk <= 4096:
        return "≤4 KB"
    if chunk <= 40960:
        return "≤40 KB"
    return ">40 KB"


BUCKETS = ("≤512 B", "≤4 KB", "≤40 KB", ">40 KB")


def bucketed_pages(row: dict[str, Any]) -> dict[str, int]:
    out = dict.fromkeys(BUCKETS, 0)
    for key, n in (row.get("pages") or {}).items():
        chunk = int(str(key).split(":", 1)[1]) if ":" in str(key) else 0
        out[_bucket(chunk)] += int(n)
    return out


def _slabs(rec: dict[str, Any]) -> bool:
    """Whether the sampled server's kind has slab classes (its stats have a slab table)."""
    from kvtune import kind_registry as kinds

    kind = kinds.find(rec.get("kind"))
    return kind is not None and kind.slab_table is not None


def timeline_figure(rec: dict[str, Any]) -> go.Figure | None:
    """Slab pages per size bucket (a server with slab classes) or used memory over time, one sample
    a second, with the phase boundaries marked."""
    samples = [s for s in rec.get("samples", []) if s.get("t_s") is not None]
    if not samples:
        return None
    t = [s["t_s"] for s in samples]
    lines = [figures.vline(float(ph.get("start_s") or 0), {"color": GREY, "dash": "dash"},
                           f"phase {i}: {ph.get('value_size')} B {ph.get('mix') or ''}")
             for i, ph in enumerate(rec.get("phases") or [])]
    slabs = _slabs(rec)
    fig = figures.new_figure(template="plotly_white", height=400,
                             xaxis_title="seconds after the window start",
                             yaxis_title="1 MB slab pages" if slabs else "MB",
                             title="Server stats over time (1 s samples), phases marked",
                             margin={"l": 70, "r": 70, "t": 60, "b": 60},
                             shapes=[shape for shape, _ in lines],
                             annotations=[note for _, note in lines if note is not None])
    if slabs:
        for b in BUCKETS:
            ys = []
            for s in samples:
                ys.append(sum(int(v.get("total_pages", 0)) for v in s.get("slabs", {}).values()
                              if _bucket(int(v.get("chunk_size", 0))) == b))
            fig.add_trace(go.Scatter(x=t, y=ys, mode="lines+markers", name=f"pages {b}"))
        ev = [s["stats"].get("evictions", 0) for s in samples]
        fig.add_trace(go.Scatter(x=t, y=ev, mode="lines", name="evictions (total)",
                                 yaxis="y2", line={"dash": "dot", "color": GREY}))
        fig.update_layout(yaxis2={"overlaying": "y", "side": "right", "title": "evictions"})
    else:
        fig.add_trace(go.Scatter(x=t, y=[s["stats"].get("used_memory", 0) / 2**20
                                         for s in samples], mode="lines+markers",
                                 name="used_memory (MB)"))
    return fig


# -- HTML ----------------------------------------------------------------------------------


def _e(v: Any) -> str:
    return html.escape(str(v))


def _plot(fig: go.Figure | None, div_id: str) -> str:
    if fig is None:
        return ""
    return figures.to_html(fig, div_id)


def phase_rows_html(rec: dict[str, Any], load_raw: dict[str, Any] | None) -> str:
    rows = phase_table(rec, load_raw)
    if not rows:
        return ""
    mc = _slabs(rec)
    head = ["phase", "start s", "value size", "mix"]
    head += ([f"pages {b}" for b in BUCKETS] + ["evictions", "pages moved", "hit ratio",
                                                 "out of memory", "load errors"]
             if mc else ["evicted keys", "hits", "misses", "used memory MB", "load errors"])
    # The hit ratios one column, the memory used another (one scale, one decimal count).
    ratios = iter(present.column([r.get("hit_ratio") for r in rows], "ratio").cells)
    memory = present.column([r.get("used_memory") for r in rows], "B")
    used = iter(memory.cells)
    if not mc:
        head[head.index("used memory MB")] = f"used memory ({memory.unit})"
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        cells = [r["phase"], r.get("start_s"), r.get("value_size"), r.get("mix")]
        ratio, mem = next(ratios), next(used)
        if mc:
            bp = bucketed_pages(r)
            cells += [bp[b] for b in BUCKETS] + [
                _num(r.get("evictions")), _num(r.get("slabs_moved")),
                ratio, _num(r.get("out_of_memory")), _num(r.get("load_errors"))]
        else:
            cells += [_num(r.get("evicted_keys")), _num(r.get("keyspace_hits")),
                      _num(r.get("keyspace_misses")), mem, _num(r.get("load_errors"))]
        out.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    return "".join(out) + "</table>"


def _num(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and v.is_integer():
        return present.figure(int(v))
    return present.figure(v) if isinstance(v, int) else str(v)


def html_section(data: Any) -> str:
    """The sweep charts and the server-stats-over-time view of a study (`StudyData`), or ""
    when it has neither. Called once by report/html.py."""
    from kvtune.study.stored import sweep_knob

    parts: list[str] = []
    for knob in [*(getattr(data, "sweeps", {}) or {}), *(getattr(data, "sweep_reps", {}) or {})]:
        sweep_knob(f"sweep:{knob}", str(getattr(data, "name", "?")),
                   str(getattr(data, "storage", "the results")))
    # A plot's id is made of indices, never of a stored name or value (Plotly writes it
    # into the page unescaped).
    for i, (knob, res) in enumerate((getattr(data, "sweeps", {}) or {}).items()):
        if not res:
            continue
        view = analyse(res)
        parts.append(f"<h3>Sweep of {_e(knob)}</h3>")
        parts.append("<ul>" + "".join(f"<li>{_e(s)}</li>" for s in summary_lines(view))
                     + "</ul>")
        parts.append(_plot(sweep_figure(view), f"plot-sweep-{i}"))
    for i, (knob, reps) in enumerate((getattr(data, "sweep_reps", {}) or {}).items()):
        by_value: dict[str, list[dict[str, Any]]] = {}
        for r in reps:
            by_value.setdefault(str((r.get("params") or {}).get(knob)), []).append(r)
        for j, (value, group) in enumerate(by_value.items()):
            last = _last_with_samples(group)
            if last is None:
                continue
            rec = last["raw"]["telemetry"]["samples"]
            parts.append(f"<h3>Server stats by phase: {_e(knob)} = {_e(value)} (last of "
                         f"{len(group)} repetitions)</h3>")
            parts.append(phase_rows_html(rec, last["raw"].get("load") or {}))
            parts.append(_plot(timeline_figure(rec), f"plot-timeline-{i}-{j}"))
    rep = _last_with_samples(getattr(data, "reps", []) or [])
    if rep is not None:
        rec = rep["raw"]["telemetry"]["samples"]
        load_raw = (rep["raw"].get("load") or {})
        parts.append("<h3>Server stats by phase (last repetition with samples)</h3>"
                     "<p class=note>State at the end of each phase of the workload (the last "
                     "1 s sample taken in it); changes are counted over the phase.</p>")
        parts.append(phase_rows_html(rec, load_raw))
        parts.append(_plot(timeline_figure(rec), "plot-server-timeline"))
    if not parts:
        return ""
    return "<h2 id=sweep>Sweeps and server stats over time</h2>" + "".join(parts)


def _last_with_samples(reps: list[dict[str, Any]]) -> dict[str, Any] | None:
    for r in reversed(reps):
        s = ((r.get("raw") or {}).get("telemetry") or {}).get("samples")
        if s and s.get("samples"):
            return r
    return None


def sweep_only_page(store: Any, name: str) -> str | None:
    """A self-contained page for a study that only ran `kvtune sweep` (no search), or None
    when it has no sweep either."""
    import types

    import plotly.offline
    import sqlalchemy as sa

    from kvtune.store import RESULTS

    q = sa.select(RESULTS.c.key).where(RESULTS.c.study == name).distinct()
    with store.engine.connect() as c:
        keys = sorted(r[0] for r in c.execute(q) if str(r[0]).startswith("sweep:"))
    if not keys:
        return None
    knobs = [k.split(":", 1)[1] for k in keys]
    data = types.SimpleNamespace(
        name=name, storage=store.url,
        sweeps={k: store.last_result(name, f"sweep:{k}") for k in knobs}, reps=[],
        sweep_reps={k: store.repetitions(f"{name}.sweep.{k}") for k in knobs})
    body = html_section(data)
    js = plotly.offline.get_plotlyjs()
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            f"<title>kvtune report: {_e(name)}</title><script>{js}</script>"
            "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table{"
            "border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}</style>"
            f"</head><body><h1>kvtune report: {_e(name)} (sweeps)</h1>{body}</body></html>")
