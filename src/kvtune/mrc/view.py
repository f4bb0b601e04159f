"""The miss-ratio curve where other screens show it: `kvtune workload describe` (terminal
and its --html page), a study's HTML report, and `kvtune workload mrc -o`.

- `quick_curve(doc, kind)`: the curve of a workload model, drawn short enough for a screen
  (QUICK_REQUESTS requests, QUICK_POINTS sizes): seconds, not tens of seconds; a pure
  function of its arguments (the stream is seeded), so a process remembers its last few
  curves and draws a workload's curve once however many screens show it;
- `figure(curve, ...)`: the Plotly figure, with measured points and marked memory sizes;
- `summary(curve, ...)`: a few lines for the terminal.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from kvtune import present
from kvtune.mrc import curve as curves
from kvtune.mrc import requests as rq

QUICK_REQUESTS = (100_000, 400_000)  # 10 per key, within these
QUICK_POINTS = 10


@dataclass(frozen=True)
class Point:
    """A hit ratio measured on a server at `memory` bytes of its memory setting."""

    memory: int
    hit_ratio: float
    label: str = "measured on the server"


@dataclass(frozen=True)
class Mark:
    """A memory size to mark on the curve (the size a study ran at)."""

    memory: int
    label: str


def mib(n: float | None) -> str:
    """A memory size for people: MiB from 1 MiB on, else KiB."""
    if n is None:
        return "-"
    return f"{present.figure(n / (1 << 20), 1)} MiB" if n >= 1 << 20 else \
        f"{present.figure(n / 1024)} KiB"


def curve_kind(kind: str | None) -> str:
    """`kind` when it has a memory model, else the byte-LRU cache."""
    from kvtune.mrc.model import kinds_with_a_model

    return kind if kind in kinds_with_a_model() else curves.LRU


def default_kind(doc: dict[str, Any]) -> str:
    """The kind of server a captured model came from (its `about.source`,
    KIND://HOST:PORT) when that kind has a memory model, else the byte-LRU cache."""
    source = str((doc.get("about") or {}).get("source", ""))
    return curve_kind(source.split("://", 1)[0] if "://" in source else None)


def describe_curve(doc: dict[str, Any], kind: str, sizes: Sequence[int] = ()
                   ) -> tuple[curves.Curve | None, str]:
    """(the model's quick curve for `kind`, computed at `sizes` too, "") or (None, why it
    is not drawn)."""
    from kvtune.errors import UserError

    try:
        return quick_curve(doc, kind, extra_sizes=sizes), ""
    except UserError as e:
        return None, str(e)


def page_block(c: curves.Curve, measured: Sequence[Point] = ()) -> str:
    """The curve for a page that already holds plotly.js: its summary and its plot."""
    import html

    mrc = figure(c, measured=measured, title=f"miss-ratio curve ({c.kind}): hit ratio by "
                                             "memory")
    note = html.escape("\n".join(summary(c, measured=measured)))
    return (f"<pre style='font-size:13px'>{note}</pre>"
            + mrc.to_html(full_html=False, include_plotlyjs=False, div_id="plot-mrc"))


def quick_requests(doc: dict[str, Any]) -> int:
    """Requests drawn for a quick curve: 10 per key of the model, within QUICK_REQUESTS (a
    stream much shorter than that misses on keys requested for the first time)."""
    try:
        keys = int(doc.get("keys", 10_000))
    except (TypeError, ValueError):
        keys = 10_000
    lo, hi = QUICK_REQUESTS
    return max(lo, min(hi, 10 * keys))


_REMEMBERED: OrderedDict[str, curves.Curve] = OrderedDict()
REMEMBER = 8  # curves a process keeps (a few KB each)


def quick_curve(doc: dict[str, Any], kind: str = curves.LRU,
                requests: int | None = None, seed: int = 1,
                extra_sizes: Sequence[int] = ()) -> curves.Curve:
    """The curve of the workload model `doc` for `kind` on `requests` requests drawn from
    it (default: `quick_requests`; UserError for a model the stream cannot be drawn from).
    `extra_sizes` are computed too (a study's memory, so that its mark sits on a computed
    point). The same arguments give the same curve: the last REMEMBER are kept (copies
    handed out), so a workload's curve is simulated once a process."""
    try:
        key = json.dumps([doc, kind, requests, seed, [int(s) for s in extra_sizes]],
                         sort_keys=True, allow_nan=True)
    except (TypeError, ValueError):  # a value JSON cannot say: not remembered
        key = None
    if key is not None and key in _REMEMBERED:
        _REMEMBERED.move_to_end(key)
        return _copy(_REMEMBERED[key])
    c = _quick_curve(doc, kind, requests, seed, extra_sizes)
    if key is not None:
        _REMEMBERED[key] = _copy(c)
        while len(_REMEMBERED) > REMEMBER:
            _REMEMBERED.popitem(last=False)
    return c


def _copy(c: curves.Curve) -> curves.Curve:
    return replace(c, sizes=list(c.sizes), hit_ratio=list(c.hit_ratio), low=list(c.low),
                   high=list(c.high), notes=list(c.notes))


def _quick_curve(doc: dict[str, Any], kind: str, requests: int | None, seed: int,
                 extra_sizes: Sequence[int]) -> curves.Curve:
    req = rq.from_model(doc, requests=requests or quick_requests(doc), seed=seed)
    sizes = curves.default_sizes(req, kind, QUICK_POINTS)
    if extra_sizes:
        sizes = sorted({*sizes, *(int(s) for s in extra_sizes if s > 0)})
        if kind != curves.LRU:
            from kvtune.mrc.model import model_of

            sizes = model_of(kind).round_sizes(sizes)
    return curves.build(req, kind, sizes=sizes)


def figure(c: curves.Curve, target: float | None = None,
           measured: Sequence[Point] = (), marks: Sequence[Mark] = (),
           title: str | None = None) -> Any:
    """The curve as a Plotly figure: the predicted hit ratio by memory (MiB), the band of
    the sampling's salts, the measured points (×) and the marked sizes (dotted lines)."""
    import plotly.graph_objects as go

    x = [s / (1 << 20) for s in c.sizes]
    fig = go.Figure()
    if c.low != c.high:
        fig.add_trace(go.Scatter(x=x + x[::-1], y=c.high + c.low[::-1], fill="toself",
                                 line={"width": 0}, fillcolor="rgba(31,119,180,0.2)",
                                 name="range over salts", hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=x, y=c.hit_ratio, mode="lines+markers",
                             name=f"predicted ({c.kind})", line={"color": "#1f77b4"}))
    for label in dict.fromkeys(p.label for p in measured):
        pts = [p for p in measured if p.label == label]
        fig.add_trace(go.Scatter(x=[p.memory / (1 << 20) for p in pts],
                                 y=[p.hit_ratio for p in pts], mode="markers",
                                 marker={"symbol": "x", "size": 11, "color": "#d62728"},
                                 name=label))
    for m in marks:
        at = m.memory / (1 << 20)
        fig.add_vline(x=at, line={"dash": "dot", "color": "#555"})
        # an annotation on a log axis is placed by the log of its value
        fig.add_annotation(x=math.log10(at), y=1.0, yref="y", text=m.label,
                           showarrow=False, xanchor="right", yanchor="bottom",
                           font={"size": 11})
    if target is not None:
        fig.add_hline(y=target, line={"dash": "dash", "color": "#9e9e9e"},
                      annotation_text=f"target {target:g}")
    fig.update_layout(template="plotly_white",
                      title=title if title is not None else f"hit ratio by memory: {c.source}",
                      xaxis_title="memory (MiB, log scale)",
                      yaxis_title="hit ratio (steady state)", xaxis={"type": "log"},
                      yaxis={"range": [0, 1.02]}, height=460)
    return fig


def predicted_at(c: curves.Curve, memory: int) -> float:
    """The curve's hit ratio at `memory` (linear between computed sizes, flat beyond)."""
    return float(np.interp(memory, c.sizes, c.hit_ratio))


def summary(c: curves.Curve, targets: Sequence[float] = (0.8, 0.9, 0.95),
            measured: Sequence[Point] = (), rows: int = 6) -> list[str]:
    """A few lines: how it was computed, the hit ratio at a few sizes, the memory each
    target needs, and each measured point beside the prediction."""
    out = [f"miss-ratio curve ({c.kind}, {c.method}; {present.figure(c.requests)} requests "
           "drawn, the first half warming up; `kvtune workload mrc` for the full one):"]
    idx = np.unique(np.linspace(0, len(c.sizes) - 1, min(rows, len(c.sizes))).astype(int))
    out.append("  " + ", ".join(f"{mib(c.sizes[i])} {c.hit_ratio[i]:.3f}" for i in idx))
    needs = []
    for t in targets:
        est, _, _ = c.smallest_memory(t)
        needs.append(f"{t:g} needs {mib(est)}" if est is not None else
                     f"{t:g} is not reached (cold misses, expiry)")
    out.append("  hit ratio " + "; ".join(needs))
    for p in measured:
        pred = predicted_at(c, p.memory)
        out.append(f"  {p.label} at {mib(p.memory)}: {p.hit_ratio:.3f} (predicted "
                   f"{pred:.3f}, {present.figure((p.hit_ratio - pred) * 100, 1)} points)")
    return out


__all__ = ["Mark", "Point", "curve_kind", "default_kind", "describe_curve", "figure", "mib",
           "page_block", "predicted_at", "quick_curve", "summary"]
