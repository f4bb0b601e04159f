"""The report's "Memory and hit ratio" section: the miss-ratio curve of the study's workload
(its workload file: a captured or imported model, or the inline workload), for the
study's server kind (kvtune.mrc), with the memory the study ran at marked and the hit
ratios its repetitions measured on it.

The curve is drawn from the workload as the study file names it now (a workload file read
again at report time), on a short stream (kvtune.mrc.view.QUICK_REQUESTS requests).
"""

from __future__ import annotations

import html
import statistics
from dataclasses import dataclass, field
from typing import Any

from kvtune.analysis import StudyData
from kvtune.errors import UserError

# What a load tool's hit ratio is, beside a cache-aside curve.
_NO_FILL = ("{tool} preloads the keys (unless told not to) and sets a key only when its mix "
            "draws a set, never after a miss: the hit ratio it measures is not the "
            "cache-aside one the curve predicts (an application that sets each key it "
            "missed, from an empty cache). load.tool: cache-aside measures the curve's hit "
            "ratio.")


@dataclass
class MemoryView:
    """What the section shows: the curve (None with `why`), the measured points, the
    marked sizes, and notes."""

    curve: Any = None
    why: str = ""
    points: list[Any] = field(default_factory=list)
    marks: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def workload_doc(spec: dict[str, Any]) -> dict[str, Any] | None:
    """The study's workload as a model document: its workload file (checked as a study's
    is), else its inline workload with load.rate; None without a load."""
    load = spec.get("load")
    if not isinstance(load, dict):
        return None
    path = load.get("workload_file")
    if path:
        from kvtune.safety.workload import check_workload_file

        try:
            return check_workload_file(str(path))
        except (ValueError, OSError) as e:
            raise UserError(f"the workload file {path}: {e}") from None
    doc = dict(load.get("workload") or {})
    if load.get("rate"):
        doc["rate"] = load["rate"]
    return doc


def _memory_of(model: Any, rep: dict[str, Any]) -> int | None:
    stats = (rep.get("raw") or {}).get("server_stats")
    return model.configured(stats) if isinstance(stats, dict) else None


def _replayed(spec: dict[str, Any]) -> int | None:
    """The requests a cache-aside repetition replays: its curve is drawn on as many (a
    short stream misses on every key's first request; the curve must too)."""
    from kvtune.load.cacheaside import requests_of
    from kvtune.spec import LoadSpec

    try:
        return requests_of(LoadSpec.model_validate(spec["load"]))
    except (ValueError, UserError):
        return None


def view(data: StudyData) -> MemoryView | None:
    """The section's content, or None when the study has no workload or its target no
    memory model (the synthetic target)."""
    from kvtune.mrc.model import model_of
    from kvtune.mrc.view import Mark, Point, curve_kind, mib, quick_curve

    spec = data.spec
    kind = curve_kind((spec.get("target") or {}).get("kind"))
    if kind == "lru" or not isinstance(spec.get("load"), dict):
        return None
    out = MemoryView()
    by_memory: dict[int, list[float]] = {}
    baseline: list[int] = []
    model = model_of(kind)
    # The curve is the server at its defaults: the points are the baseline configuration's
    # (its own repetitions, and the confirmation's rounds of it).
    base_keys = {r.get("config_key") for r in data.reps if r.get("kind") == "baseline"}
    for r in data.reps:
        if r.get("status") == "failed" or r.get("config_key") not in base_keys:
            continue
        mem = _memory_of(model, r)
        hr = (r.get("metrics") or {}).get("hit_ratio")
        if mem is None:
            continue
        if r.get("kind") == "baseline":
            baseline.append(mem)
        if isinstance(hr, int | float) and 0 <= hr <= 1:
            by_memory.setdefault(mem, []).append(float(hr))
    tool = str((spec.get("load") or {}).get("tool", "kvload"))
    label = f"measured in this study ({tool}, the baseline's repetitions, median)"
    out.points = [Point(m, statistics.median(v), label) for m, v in sorted(by_memory.items())]
    if baseline:
        b = statistics.median(baseline)
        out.marks.append(Mark(int(b), f"the study ran at {mib(b)}"))
    else:
        out.notes.append("the servers' stats give no memory limit: nothing to mark")
    if out.points and tool != "cache-aside":
        out.notes.append(_NO_FILL.format(tool=tool))
    try:
        doc = workload_doc(spec)
        if doc is None:
            return None
        out.curve = quick_curve(doc, kind, requests=_replayed(spec) if tool == "cache-aside"
                                else None, extra_sizes=[m.memory for m in out.marks])
    except UserError as e:
        out.why = str(e)
    return out


def section(data: StudyData, plot: Any) -> str:
    """The section's HTML (`plot(fig, div_id)` draws a figure as the report does), or "" for
    a study without a workload."""
    from kvtune.mrc.view import figure, summary

    v = view(data)
    if v is None:
        return ""
    head = "<h2 id=memory>Memory and hit ratio</h2>"
    if v.curve is None:
        return head + f"<p class=note>No miss-ratio curve: {html.escape(v.why)}.</p>"
    lines = summary(v.curve, measured=v.points)
    notes = "".join(f"<p class=note>{html.escape(n)}</p>" for n in v.notes)
    fig = figure(v.curve, measured=v.points, marks=v.marks,
                 title=f"hit ratio by memory ({v.curve.kind}), the study's workload")
    return (head + "<p class=note>The hit ratio the study's workload reaches at each memory "
            "size at steady state, predicted by kvtune's model of the server "
            "(docs/workloads.md); <code>kvtune workload mrc</code> draws the full curve.</p>"
            + plot(fig, "plot-mrc") + f"<pre>{html.escape(chr(10).join(lines))}</pre>" + notes)


__all__ = ["MemoryView", "section", "view", "workload_doc"]
