"""The HTML page of a canary session (`kvtune canary --report FILE`): self-contained, no
script. Per rule, the canary's change against its control at each look with the interval
valid at every look (narrowing as looks accrue), the rule's margin, and the look at which
the session decided; the outcome and the guardrails above."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from kvtune import present
from kvtune.canary import verdict as vd
from kvtune.canary import watch
from kvtune.canary.session import seconds

W, H, PAD = 640, 180, 40


def _y(v: float, lo: float, hi: float) -> float:
    return H - PAD / 2 - (v - lo) / (hi - lo) * (H - PAD)


def _chart(rows: list[dict[str, Any]], metric: watch.Metric, margin: float | None,
           goal: bool) -> str:
    pts = [(i + 1, r) for i, r in enumerate(rows)]
    vals = [x for _, r in pts for x in (r.get("change"), r.get("low"), r.get("high"))
            if x is not None and math.isfinite(x)]
    shown_margin = None
    if margin is not None:
        worse = 1.0 if metric.direction.sign < 0 else -1.0
        shown_margin = worse * (math.expm1(margin) if metric.scale == "log" else margin)
        vals.append(shown_margin)
    vals.append(0.0)
    # the view: the changes, 0, the margin and the last interval, and up to twice their span
    # either side; an early interval wider than that (the first looks of a series that
    # seems correlated can be tens of SDs wide) runs off the chart's edge
    last = rows[-1] if rows else {}
    core = [x for x in [0.0, shown_margin, last.get("low"), last.get("high"),
                        *(r.get("change") for r in rows)]
            if x is not None and math.isfinite(x)]
    reach = 2 * max(max(core) - min(core), 1e-12)
    lo, hi = max(min(vals), min(core) - reach), min(max(vals), max(core) + reach)
    if hi - lo < 1e-12:
        lo, hi = lo - 1, hi + 1
    span = hi - lo
    lo, hi = lo - span * 0.05, hi + span * 0.05
    n = max(len(pts), 2)

    def x(i: int) -> float:
        return PAD + (i - 1) / (n - 1) * (W - 2 * PAD)

    def y(v: float) -> float:
        return _y(min(max(v, lo), hi), lo, hi)

    band_top = [(x(i), y(r["high"])) for i, r in pts if r.get("high") is not None]
    band_bot = [(x(i), y(r["low"])) for i, r in pts if r.get("low") is not None]
    line = [(x(i), y(r["change"])) for i, r in pts if r.get("change") is not None]
    svg = [f'<svg width="{W}" height="{H}" xmlns="http://www.w3.org/2000/svg">',
           f'<rect width="{W}" height="{H}" fill="#fff" stroke="#ccc"/>']
    if band_top:
        poly = band_top + band_bot[::-1]
        svg.append('<polygon fill="#9cc3e6" opacity="0.6" points="'
                   + " ".join(f"{a:.1f},{b:.1f}" for a, b in poly) + '"/>')
    y0 = _y(0.0, lo, hi)
    svg.append(f'<line x1="{PAD}" x2="{W - PAD}" y1="{y0:.1f}" y2="{y0:.1f}" stroke="#555"/>')
    if shown_margin is not None and not goal:
        ym = _y(shown_margin, lo, hi)
        svg.append(f'<line x1="{PAD}" x2="{W - PAD}" y1="{ym:.1f}" y2="{ym:.1f}" '
                   'stroke="#c00" stroke-dasharray="4 3"/>')
    if line:
        svg.append('<polyline fill="none" stroke="#1f5f99" stroke-width="2" points="'
                   + " ".join(f"{a:.1f},{b:.1f}" for a, b in line) + '"/>')
    for v in (lo, hi):
        label = vd.change_text(metric, _judged(metric, v))
        svg.append(f'<text x="2" y="{_y(v, lo, hi) + 4:.1f}" font-size="10">'
                   f"{html.escape(label)}</text>")
    svg.append(f'<text x="{W - PAD}" y="{H - 4}" font-size="10" text-anchor="end">look '
               f"{len(pts)}</text></svg>")
    return "".join(svg)


def _judged(metric: watch.Metric, change: float) -> float:
    if metric.scale == "log":
        return math.log1p(change) if change > -1 else -math.inf
    return change


def page(record: dict[str, Any]) -> str:
    """The page's HTML text."""
    e = html.escape
    looks = record.get("looks") or []
    title = f"kvtune canary ({record.get('kind')}): {record.get('outcome')}"
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
             "<style>body{font-family:sans-serif;max-width:760px;margin:2em auto}"
             "td,th{padding:2px 8px;text-align:left}</style></head><body>",
             f"<h1>{e(title)}</h1>",
             f"<p><b>{e(str(record.get('outcome')))}</b>: {e(str(record.get('deciding')))} "
             f"(after {e(seconds(record.get('decided_at_s')))}, "
             f"{len(looks)} judged looks of {e(seconds(record.get('interval_s')))})"
             "</p>",
             f"<p>Canary {e(', '.join(record.get('canaries') or []))} against control "
             f"{e(', '.join(record.get('controls') or []))}. Method: "
             f"{e(str(record.get('method')))}, alpha {e(present.number(record.get('alpha')))}"
             "; the shaded band is the interval at each look, valid at every look at once."
             "</p>"]
    if record.get("warning"):
        parts.append(f"<p><b>Warning:</b> {e(record['warning'])}</p>")
    parts.append("<h2>Verify</h2><pre>" + e("\n".join(record.get("verified") or []))
                 + "</pre>")
    parts.append("<h2>Rules</h2><table><tr><th>rule</th><th>change</th><th>interval</th>"
                 "<th>state</th></tr>")
    finals = record.get("rules_final") or []
    for s in finals:
        m = watch.METRICS[s["metric"]]
        ci = "-" if s.get("low") is None else (
            f"{vd.change_text(m, _judged(m, min(s['low'], s['high'])))} … "
            f"{vd.change_text(m, _judged(m, max(s['low'], s['high'])))}")
        ch = "-" if s.get("change") is None else vd.change_text(m, _judged(m, s["change"]))
        parts.append(f"<tr><td>{e(s['rule'])}</td><td>{e(ch)}</td><td>{e(ci)}</td>"
                     f"<td>{e(s['state'])}</td></tr>")
    parts.append("</table>")
    for k, s in enumerate(finals):
        m = watch.METRICS[s["metric"]]
        rule = vd.parse_rule(s["rule"], "record")
        rows = [lk["verdict"]["rules"][k] for lk in looks
                if len(lk["verdict"]["rules"]) > k]
        parts.append(f"<h3>{e(s['rule'])}</h3><p>{e(m.about)} ({e(m.unit)}); the canary's "
                     + ("change" if m.scale == "log" else "difference")
                     + " against its control"
                     + ("" if rule.goal else "; dashed: the guardrail's margin") + "</p>")
        parts.append(_chart(rows, m, None if rule.goal else rule.margin, rule.goal))
    if record.get("rollback"):
        rb = record["rollback"]
        parts.append("<h2>Rollback</h2><p>from " + e(str(rb.get("file"))) + "</p><pre>"
                     + e("\n".join(ln for s in rb.get("servers", []) for ln in s["lines"]))
                     + "</pre>")
    if record.get("dropped"):
        parts.append("<h2>Dropped intervals</h2><pre>" + e("\n".join(record["dropped"]))
                     + "</pre>")
    parts.append("</body></html>\n")
    return "".join(parts)


def write(record: dict[str, Any], path: Path) -> None:
    from kvtune.safety.files import write_file

    write_file(path, page(record), what="--report")
