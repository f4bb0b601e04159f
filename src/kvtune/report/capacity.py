"""The latency–throughput curve of a capacity study: every step of the knee searches of
the baseline and of the compared configuration (the recommendation, or the best
candidate), the SLO as a line and each configuration's capacity (the median knee of its
repetitions) marked. Data only and the figure; html.py places it on the page."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from kvtune.analysis.data import StudyData
from kvtune.load.kvload import search_steps
from kvtune.present import number
from kvtune.report.compare import load_raw
from kvtune.spec import parse_slo
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
        knees = sorted(float(r["metrics"]["capacity"]) for r in reps
                       if r["status"] != "failed"
                       and isinstance((r.get("metrics") or {}).get("capacity"), int | float))
        if not steps:
            continue
        mid = len(knees) // 2
        capacity = (knees[mid] if len(knees) % 2 else (knees[mid - 1] + knees[mid]) / 2) \
            if knees else None
        out.append({"name": name, "steps": steps, "capacity": capacity, "n": len(reps)})
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
        steps = sorted(c["steps"], key=lambda s: s["rate"] or 0)
        fig.add_trace(go.Scatter(
            x=[s["rate"] for s in steps], y=[s["latency_us"] for s in steps],
            mode="markers", name=f"{c['name']}: steps of {c['n']} searches",
            marker={"color": color, "size": 8,
                    "symbol": ["circle" if s["outcome"] == "pass" else "x" for s in steps]},
            text=[f"{s['outcome']}, {number(s['rate'])} req/s offered, "
                  f"{number(s['achieved_rate'])} achieved" for s in steps],
            hovertemplate="%{text}<br>%{y:.1f} µs<extra></extra>"))
        if c["capacity"] is not None:
            fig.add_vline(x=c["capacity"], line={"color": color, "dash": "dot"},
                          annotation_text=f"{c['name']}: {number(c['capacity'])} req/s",
                          annotation_position="top left" if i == 0 else "top right")
    fig.add_hline(y=slo.bound_us, line={"color": "#c33", "dash": "dash"},
                  annotation_text=f"SLO {slo_text}", annotation_position="bottom right")
    fig.update_layout(xaxis_title="offered rate (req/s)",
                      yaxis_title=f"{slo.metric} (µs)", yaxis_type="log", height=440)
    note = (f"Every step of the knee searches (circles met the SLO, crosses missed it or "
            f"saturated the server); the dotted lines are the capacities, the median knee "
            f"of each configuration's repetitions; the dashed line is the SLO, {slo_text}.")
    return fig, note
