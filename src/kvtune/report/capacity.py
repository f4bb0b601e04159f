"""The latency–throughput curve of a capacity study: every run of the knee searches of
the baseline and of the compared configuration (the recommendation, or the best
candidate) with its rate's 95% interval, the SLO as a line and each configuration's
capacity (its searches' knees pooled with their intervals) marked with its interval.
Data only and the figure; html.py places it on the page."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from kvtune.analysis.data import StudyData
from kvtune.load.kvload import search_ci, search_steps
from kvtune.present import number
from kvtune.report.compare import load_raw
from kvtune.spec import parse_slo
from kvtune.stats import pool_intervals
from kvtune.store import config_key

COLORS = {"baseline": "#777", "other": "#2a7"}


def slo_of(spec: dict[str, Any]) -> str | None:
    """The SLO a study's capacity objective keeps (its text), or None."""
    obj = spec.get("objective") or {}
    for o in [obj, *(obj.get("also") or [])] if isinstance(obj, dict) else []:
        if isinstance(o, dict) and o.get("metric") == "capacity" and o.get("slo"):
            return str(o["slo"])
    return None


def curves(data: StudyData, cmp: dict[str, Any]) -> list[dict[str, Any]]:
    """For the baseline and the compared configuration: {name, steps (every step of every
    repetition: rate, latency at the SLO's percentile, outcome), capacity (median knee),
    n (repetitions)}; confirmation repetitions are preferred. [] when no step was stored."""
    out = []
    for name, cfg in (("baseline", cmp.get("base_config")),
                      (cmp.get("label") or "best", cmp.get("new_config"))):
        if not cfg:
            continue
        key = config_key(cfg)
        reps = [r for r in data.reps if r["config_key"] == key]
        reps = [r for r in reps if r["kind"] == "confirm"] or reps
        steps = [s for r in reps for s in search_steps(load_raw(r["raw"]))]
        knees, cis = [], []
        for r in reps:
            v = (r.get("metrics") or {}).get("capacity")
            ci = search_ci(load_raw(r["raw"]))
            if r["status"] != "failed" and isinstance(v, int | float) and ci is not None:
                knees.append(float(v))
                cis.append(ci)
        if not steps:
            continue
        pooled = pool_intervals(knees, cis) if knees else None
        capacity = pooled.value if pooled else None
        # A configuration whose evaluation failed (the study says FAIL) has no capacity to
        # draw, whatever a lucky search found.
        trial = next((t for t in data.trials
                      if config_key(t.user_attrs.get("config") or {}) == key
                      and t.user_attrs.get("kind") in ("baseline", "trial")), None)
        if trial is not None and trial.value is None:
            capacity, pooled, name = None, None, f"{name} (failed)"
        out.append({"name": name, "steps": steps, "capacity": capacity,
                    "ci": pooled.ci if pooled else None, "n": len(reps)})
    return out


def figure(data: StudyData, cmp: dict[str, Any]) -> tuple[go.Figure | None, str]:
    """The curve and a line saying what it shows; (None, "") for other studies."""
    slo_text = slo_of(data.spec)
    if slo_text is None:
        return None, ""
    found = curves(data, cmp)
    if not found:
        return None, ""
    slo = parse_slo(slo_text)
    fig = go.Figure()
    for i, c in enumerate(found):
        color = COLORS["baseline"] if i == 0 else COLORS["other"]
        # Runs with a latency (a disturbed or saturated run has none to draw).
        steps = sorted((s for s in c["steps"] if isinstance(s.get("latency_us"), int | float)),
                       key=lambda s: s["rate"] or 0)

        def ci(s: dict[str, Any], side: int) -> float:
            b = (s.get("ci") or [None, None])[side]
            return abs(float(b) - float(s["latency_us"])) if isinstance(b, int | float) else 0.0

        fig.add_trace(go.Scatter(
            x=[s["rate"] for s in steps], y=[s["latency_us"] for s in steps],
            mode="markers", name=f"{c['name']}: runs of {c['n']} searches",
            error_y={"type": "data", "symmetric": False, "array": [ci(s, 1) for s in steps],
                     "arrayminus": [ci(s, 0) for s in steps], "thickness": 1,
                     "color": color},
            marker={"color": color, "size": 8,
                    "symbol": ["circle" if s["outcome"] == "pass" else "x" for s in steps]},
            text=[f"{s['outcome']}{' (host watch)' if s.get('purpose') == 'reference' else ''}"
                  f", {number(s['rate'])} req/s offered, {number(s['achieved_rate'])} "
                  "achieved" for s in steps],
            hovertemplate="%{text}<br>%{y:.1f} µs<extra></extra>"))
        if c["capacity"] is not None:
            band = c.get("ci")
            if band:
                fig.add_vrect(x0=band[0], x1=band[1], fillcolor=color, opacity=0.12,
                              line_width=0)
            fig.add_vline(x=c["capacity"], line={"color": color, "dash": "dot"},
                          annotation_text=f"{c['name']}: {number(c['capacity'])} req/s",
                          annotation_position="top left" if i == 0 else "top right")
    fig.add_hline(y=slo.bound_us, line={"color": "#c33", "dash": "dash"},
                  annotation_text=f"SLO {slo_text}", annotation_position="bottom right")
    fig.update_layout(xaxis_title="offered rate (req/s)",
                      yaxis_title=f"{slo.metric} (µs)", yaxis_type="log", height=440)
    note = (f"Every run of the knee searches with its rate's 95% interval over undisturbed "
            f"windows (circles met the SLO, crosses missed it); the dotted lines are the "
            f"capacities, each configuration's searches pooled, the shaded bands their 95% "
            f"intervals; the dashed line is the SLO, {slo_text}.")
    return fig, note
