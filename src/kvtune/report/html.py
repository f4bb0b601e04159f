"""One self-contained HTML file per study: works offline (plotly.js is inlined once, no
CDN, no fonts or images fetched), opens in any browser, and can be mailed or attached to a
ticket.

Sections: the recommendation and its confirmed improvement with CI; the before/after
table of every tuned knob and every metric; convergence; importance and optimizable
zones; sensitivity curves; telemetry correlations; for memcached, pages per slab class and
server errors; the trials; host facts and the commands to reproduce.
"""

from __future__ import annotations

import datetime as _dt
import html
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.offline
import yaml

from kvtune import kind_registry as kinds
from kvtune import present
from kvtune.analysis import Analysis, StudyData, analyse
from kvtune.documents import Confirmation
from kvtune.metrics import NAMES as METRICS
from kvtune.metrics import guess_direction
from kvtune.present import (
    CHANGE,
    MISSING,
    SHARE,
    change_fraction,
    column,
    number,
    p_value,
    signed,
)
from kvtune.report import figures
from kvtune.report import sweep as sweep_view
from kvtune.report.capacity import figure as capacity_curve
from kvtune.report.compare import (
    VERB_KEYS,
    comparison,
    latency_by_verb,
    load_raw,
    slab_tables,
)
from kvtune.report.memory import section as memory_section
from kvtune.report.summary import change_cell, change_word, trial_columns
from kvtune.report.workers import html_section as workers_section
from kvtune.store import config_key
from kvtune.study.headline import Headline
from kvtune.study.record import stored_eval

_CSS = """
html{overflow-y:scroll}
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#222;
background:#fafafa}
main{max-width:1180px;margin:0 auto;padding:24px 32px 64px;background:#fff}
h1{margin:0 0 4px;font-size:26px}h2{margin-top:40px;border-bottom:2px solid #eee;
padding-bottom:4px;font-size:20px}h3{font-size:16px;margin:20px 0 6px}
.sub{color:#666;margin:0 0 16px}
.verdict{padding:14px 18px;border-radius:6px;margin:18px 0;font-size:17px}
.good{background:#e8f5e9;border-left:6px solid #2ca02c}
.none{background:#fff8e1;border-left:6px solid #f9a825}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13.5px}
th,td{padding:4px 10px;border-bottom:1px solid #eee;text-align:right;vertical-align:top}
th{background:#f5f5f5}td:first-child,th:first-child{text-align:left}
td.cfg{text-align:left;font-family:ui-monospace,monospace;font-size:12px}
tr.group td{background:#fafafa;font-weight:600;text-align:left;padding-top:10px}
.verdict.bad{border-color:#c62828;background:#fdecea}.better{color:#1b7f1b;font-weight:600}.worse{color:#c62828;font-weight:600}
.changed{background:#fffde7}
pre{background:#f6f8fa;padding:10px 12px;overflow-x:auto;font-size:12.5px;border-radius:4px}
.note{color:#666;font-size:13px}
.plot{margin:10px 0 18px;min-height:200px;min-width:0}
details{margin:6px 0}summary{cursor:pointer;font-weight:600;font-size:13.5px}
nav a{margin-right:12px;font-size:13.5px}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:0 16px}
.grid>*{min-width:0}
"""

_GROUPS = (
    ("perf_", "perf stat on the server process"),
    ("proc_", "the server process (/proc)"),
    ("server_", "the server process (runner)"),
    ("sys_", "the host (/proc/stat)"),
    ("steal", "the host (/proc/stat)"),
    ("throttle_", "CFS throttling (cgroup with a CPU quota)"),
    ("cgroup_", "kvtune's cgroup (cpu.stat)"),
)


def _groups() -> tuple[tuple[str, str], ...]:
    """The telemetry groups: the host's collectors', then each server kind's stats."""
    return _GROUPS + tuple((k.metric_prefix, k.stats_label) for k in kinds.every())




def _e(v: Any) -> str:
    return html.escape(str(v))


def _f(v: Any) -> str:
    """A knob's value as the terminal shows it (kvtune.present.number), escaped."""
    return _e(number(v))


def _dir(data: StudyData, metric: str) -> str | None:
    """The good direction of a figure: the objective's, else known by its name."""
    return data.direction if metric == data.metric else guess_direction(metric)


# -- what is compared ----------------------------------------------------------------------








# -- sections ------------------------------------------------------------------------------


def _confirmed_changes(conf: Confirmation) -> str:
    """The confirmation's verdict line (trade-offs named, constraints not settled) and every
    other shown metric with its CI from the same rounds (issue 16)."""
    rec = conf.recommended
    if rec is not None and rec.text:
        others = [ch.text for m, ch in rec.changes.items() if m != conf.metric]
        return (f" Verdict: {rec.text}. Every other metric over the same rounds: "
                + "; ".join(others) + ".")
    return f" {conf.verdict}." if rec is None and "violated" in conf.verdict else ""


def _pareto(conf: Confirmation | None) -> str:
    """A Pareto study's confirmed front (issue 16): the baseline at the origin and each
    candidate at its change in the two first objectives, with the 95% CIs of the
    interleaved rounds as error bars; the user picks one (`kvtune export --trial N`)."""
    if conf is None or not conf.multi or not conf.candidates:
        return ""
    names = [o.metric for o in conf.objectives][:2]
    if len(names) < 2:
        return ""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0], y=[0], mode="markers+text", text=["baseline"],
                             textposition="top center", name="baseline (defaults)",
                             marker={"size": 12, "color": "#555"}))
    for on in (True, False):
        rows = [c.stored() for c in conf.candidates if c.significant == on]
        if not rows:
            continue
        xs, ys, ex_lo, ex_hi, ey_lo, ey_hi, labels = [], [], [], [], [], [], []
        for c in rows:
            a, b = c["changes"][names[0]], c["changes"][names[1]]
            xa, yb = a.get("change") or 0.0, b.get("change") or 0.0
            xs.append(xa)
            ys.append(yb)
            ca, cb = a.get("ci") or [xa, xa], b.get("ci") or [yb, yb]
            ex_lo.append(xa - ca[0])
            ex_hi.append(ca[1] - xa)
            ey_lo.append(yb - cb[0])
            ey_hi.append(cb[1] - yb)
            labels.append(f"trial {c['trial']}")
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="markers+text", text=labels, textposition="top center",
            name="on the confirmed front" if on else "not confirmed",
            marker={"size": 10, "color": "#2a7" if on else "#bbb"},
            error_x={"type": "data", "symmetric": False, "array": ex_hi, "arrayminus": ex_lo},
            error_y={"type": "data", "symmetric": False, "array": ey_hi,
                     "arrayminus": ey_lo}))
    fig.update_layout(xaxis_title=f"{names[0]} change vs baseline",
                      yaxis_title=f"{names[1]} change vs baseline", height=420,
                      xaxis_tickformat="+.0%", yaxis_tickformat="+.0%")
    rows_html = "".join(f"<li>{_e(c.text)}</li>" for c in conf.candidates)
    return ("<h2 id=pareto>The confirmed front</h2><p class=note>"
            f"{_e(conf.verdict)}. Changes and 95% CIs from "
            f"{_e(conf.rounds)} interleaved rounds.</p>" + _plot(fig, "plot-pareto")
            + f"<ul>{rows_html}</ul>")


def headline_of(data: StudyData) -> Headline:
    """The study's headline from what it stored: the same call as `kvtune tune`'s and
    `show`'s (kvtune.study.result.study_headline), so that the report says what they say."""
    from kvtune.study.result import study_headline

    trials = [{"kind": t.user_attrs.get("kind"), "state": t.state.name,
               "value": t.values[0] if t.values else None,
               "failed": t.user_attrs.get("failed")} for t in data.trials]
    return study_headline(trials, data.confirmation, data.ablation, metric=data.metric,
                          direction=data.direction, study=data.name, engine=data.engine)


def _verdict(data: StudyData) -> str:
    conf = data.confirmation
    if conf is not None and conf.multi:  # a Pareto study: the user picks from the front
        cls = "good" if conf.front else "none"
        return (f'<div class="verdict {cls}"><b>Pareto study:</b> '
                f"{_e(conf.verdict)}.</div>")
    # The study's headline (kvtune.study.headline), the same words as every screen.
    head = headline_of(data)
    cls = {"ship": "good", "ship_smaller": "good", "failed": "bad"}.get(head.action, "none")
    more = "".join(f" <span class=\"muted\">{label}: {_e(v)}.</span>"
                   for label, v in (("Why", head.why), ("Next", head.settle)) if v)
    return (f'<div class="verdict {cls}"><b>{_e(head.text)}</b>{more}'
            f"{_e(_confirmed_changes(conf)) if conf is not None else ''}</div>")


def _load_tool(data: StudyData) -> str:
    """The study's load generator (the spec's load.tool; kvload by default)."""
    return str((data.spec.get("load") or {}).get("tool") or "kvload")




def _group_of(metric: str, tool: str) -> str:
    for prefix, name in _groups():
        if metric.startswith(prefix):
            return name
    return f"load ({tool})"


def _before_after(data: StudyData, cmp: dict[str, Any]) -> str:
    if not cmp["new_config"]:
        return '<p class="note">No feasible trial finished yet.</p>'
    bm, nm = cmp["base_metrics"] or {}, cmp["new_metrics"] or {}
    rows = [f'<table><tr><th></th><th>baseline (defaults)</th><th>{_e(cmp["label"])}</th>'
            "<th>change</th></tr>", '<tr class="group"><td colspan="5">knobs</td></tr>']
    for k in sorted(set(cmp["base_config"]) | set(cmp["new_config"])):
        b, n = cmp["base_config"].get(k), cmp["new_config"].get(k)
        ch = "changed" if b != n else ""
        rows.append(f'<tr class="{ch}"><td>{_e(k)}</td><td></td><td>{_f(b)}</td>'
                    f"<td>{_f(n)}</td><td>{ch}</td></tr>")
    keys = [m for m in (data.metric, *METRICS) if m in bm or m in nm]
    keys = list(dict.fromkeys(keys))
    rest = sorted(k for k in set(bm) | set(nm) if k not in keys
                  and isinstance(bm.get(k, nm.get(k)), int | float | None))
    tool = _load_tool(data)
    groups: dict[str, list[str]] = {}
    for k in rest:
        groups.setdefault(_group_of(k, tool), []).append(k)

    def row(m: str) -> str:
        b, n = bm.get(m), nm.get(m)
        figures = present.pair(b, n, m)  # the two figures together, as `kvtune show`
        r = change_fraction(b, n) if isinstance(b, int | float) and isinstance(
            n, int | float) else None
        # The words and their colour come from the confirmation's interval of the change,
        # the same the verdict says; a change without one is a figure, not a claim.
        rec = (cmp.get("changes") or {}).get(m)
        if rec and rec.get("change") is not None:
            # The same cell `kvtune show` prints (report/summary.py), from the stored
            # change and its interval.
            word = change_word(rec)
            change = _e(change_cell(rec))
        else:
            word = None
            change = (_e(present.pct(r)) + (" <span class=note>(no interval: not a claim)</span>"
                                     if cmp.get("changes") or cmp["status"] == "unconfirmed"
                                     else "")) if r is not None else ""
        cls = word if word in ("better", "worse") else ""
        name = f"<b>{_e(m)}</b>" if m == data.metric else _e(m)
        cb, cn = figures.cells
        return (f"<tr><td>{name}</td><td class=note>{_e(figures.unit)}</td>"
                f"<td>{_e(cb)}</td><td>{_e(cn)}</td><td class=\"{cls}\">{change}</td></tr>")

    rows.append(f'<tr class="group"><td colspan="4">metrics: load ({_e(tool)})</td></tr>')
    rows += [row(m) for m in keys]
    rows.append("</table>")
    counters = []
    for g, ms in groups.items():
        counters.append(f"<details><summary>counters: {_e(g)} ({len(ms)})</summary><table>"
                        "<tr><th></th><th>unit</th><th>baseline</th><th>"
                        f"{_e(cmp['label'])}</th><th>change</th></tr>"
                        + "".join(row(m) for m in ms) + "</table></details>")
    test = ((cmp.get("comparison") or {}).get("test") if isinstance(
        cmp.get("comparison"), dict) else None)
    return (f'<p class="note">Figures from {_e(cmp["source"])}. Changes are the metric\'s '
            "own (new / baseline − 1); better, worse or no significant change is said only "
            "where the confirmation measured the change's 95% CI (the verdict's interval"
            + (f"; {_e(test)}" if isinstance(test, str) else "") + ").</p>"
            + "".join(rows).replace("<th></th><th>baseline", "<th></th><th>unit</th>"
                                           "<th>baseline", 1) + "".join(counters))


def _zones(a: Analysis) -> str:
    if not a.zones:
        return ""
    rows = ["<table><tr><th>knob</th><th>importance (95% interval)</th><th>within "
            f"{present.share(a.within)} of the best at</th></tr>"]
    shown = present.share_cells([a.importance.values.get(z.knob) for z in a.zones],
                                     [a.importance.intervals.get(z.knob) for z in a.zones])
    for z, imp_s in zip(a.zones, shown, strict=True):
        rows.append(f"<tr><td>{_e(z.knob)}</td><td>{imp_s}"
                    f'</td><td class="cfg">{_e(z.describe())}</td></tr>')
    rows.append("</table>")
    return ("<h3>Optimizable zones</h3><p class=note>Values of each important knob at which "
            f"a trial reached within {present.share(a.within)} of the best value found; inside a "
            f"zone the "
            "knob can be set for other reasons at little cost, as far as the trials show.</p>"
            + "".join(rows))


def _corr_table(a: Analysis, top: int = 20) -> str:
    rows = [c for c in a.correlations if c.telemetry][:top]
    load = [c for c in a.correlations if not c.telemetry][:8]
    if not rows and not load:
        return '<p class="note">Too few repetitions for correlations.</p>'
    def tr(c: Any) -> str:
        lead = "lead" if c.lead() else "chance?"
        return (f"<tr><td>{_e(c.metric)}</td><td class=note>{_e(c.unit)}</td>"
                f"<td>{signed(c.rho)}</td><td>{_e(p_value(c.p_value, 2))}</td>"
                f"<td>{_e(p_value(c.q_value, 2))}</td>"
                f"<td>{c.n}</td><td>{lead}</td></tr>")

    out = ["<table><tr><th>counter</th><th>unit</th><th>Spearman ρ</th><th>p</th>"
           "<th>BH q</th><th>n</th><th></th></tr>"]
    out += [tr(c) for c in rows]
    if load:
        out.append('<tr class="group"><td colspan="7">the load generator\'s own figures</td>'
                   "</tr>")
        out += [tr(c) for c in load]
    out.append("</table>")
    return ("<p class=note>q is the Benjamini–Hochberg adjusted p over every figure tested; "
            "a counter with q ≥ 0.05 may correlate by chance among so many.</p>"
            + "".join(out))






def _verbs_table(series: dict[str, dict[str, dict[str, float]]]) -> str:
    if not series:
        return ('<p class="note">The load driver recorded no latency percentiles per '
                "request type for these configurations.</p>")
    counts = {n: int(d.get("_n", {}).get("repetitions", 0)) for n, d in series.items()}
    series = {n: {v: x for v, x in d.items() if v != "_n"} for n, d in series.items()}
    verbs = list(dict.fromkeys(v for d in series.values() for v in d))
    names = list(series)
    head = "".join(f"<th>{_e(n)}</th>" for n in names)
    shown = [(verb, k, [series[n].get(verb, {}).get(k) for n in names])
             for verb in verbs for k in VERB_KEYS]
    shown = [(verb, k, vals) for verb, k, vals in shown if any(v is not None for v in vals)]
    # The table's latencies are one column of one unit (one scale, one number of
    # decimals), its changes another.
    lat = column([v for _, _, vals in shown for v in vals], "µs")
    cells = iter(lat.cells)
    chg = iter(column([change_fraction(vals[0], vals[-1]) if len(vals) > 1 else None
                       for _, _, vals in shown], CHANGE).cells)
    out = [f"<table><tr><th>verb</th><th>percentile ({_e(lat.unit)})</th>{head}"
           "<th>change</th></tr>"]
    for verb in verbs:
        out.append(f'<tr class="group"><td colspan="{3 + len(names)}">'
                   f'{"all requests" if verb == "all" else _e(verb.upper())}</td></tr>')
        for v_, k, vals in shown:
            if v_ != verb:
                continue
            txt = next(chg)
            out.append(f"<tr><td></td><td>{_e(k.removesuffix('_us'))}</td>"
                       + "".join(f"<td>{_e(next(cells))}</td>" for _ in vals)
                       + f"<td>{_e(txt) if txt != MISSING else ''}</td></tr>")
    only = [v for v in verbs if v != "all"]
    note = ("" if len(only) > 1 else
            '<p class="note">The workload has one request type: per-verb and total agree.</p>')
    which = ", ".join(f"{_e(n)}: {c}" for n, c in counts.items())
    note += ('<p class="note">Each figure is the median over repetitions of that '
             f"repetition's own percentile for the request type ({which} repetitions, "
             "confirmation ones when there are any): a different quantity from the "
             "before/after table's medians when the repetitions differ, and no interval: "
             "changes here are figures, not claims.</p>")
    return "".join(out) + "</table>" + note


def _ablation(data: StudyData, a: Analysis) -> str:
    """The ablation's verdict and table, with the telemetry leads beside it."""
    doc = data.ablation
    if doc is None:
        if data.confirmation is not None and data.confirmation.recommended is not None:
            return ('<p class="note">No ablation was measured for this study (studies '
                    "before kvtune 0.x, or evaluation.ablation: false / --no-ablation).</p>")
        return ""
    from kvtune.study.ablation import lines, share_texts

    head = lines(doc)[0]  # the terminal's lines read the same document
    # The share's interval at its own level (Bonferroni over the open changes), as the
    # terminal says it (`share_texts`: the ablation's shares formatted together).
    shares = share_texts(doc)
    rows = ["<table><tr><th>change</th><th>share of the gain (its interval)</th>"
            "<th>reverting it</th><th>p (Bonferroni)</th><th>verdict</th></tr>"]
    for r in doc.knobs:
        cls = {"carries": "better", "hurts": "worse"}.get(r.effect or "", "")
        rows.append(f"<tr><td>{_e(r.knob)}: {_f(r.baseline)} → {_f(r.recommended)}"
                    f"</td><td>{_e(shares[r.knob])}</td>"
                    f"<td>{_e(r.revert.text if r.revert else MISSING)}</td>"
                    f"<td>{_e(p_value(r.p_adjusted))}</td>"
                    f'<td class="{cls}">{_e(r.effect)}</td></tr>')
    rows.append("</table>")
    choice = doc.choice
    if choice is not None:
        headline = headline_of(data)
        left = choice.left_out
        left_shares = column([x.share for x in left], SHARE).cells
        mini = (f"<p><b>{_e(headline.text)}</b></p>"
                + ("<p>Left out of it: " + "; ".join(
                    f"{_e(x.knob)} {_f(x.baseline)} → {_f(x.recommended)} (share "
                    f"{_e(s)}, {_e(x.effect)})" for x, s in zip(left, left_shares, strict=True))
                   + "</p>" if left and headline.chosen == "minimal" else ""))
    else:
        mini = ("<p>Minimal configuration (only the changes that carry the gain): <code>"
                + _e(", ".join(f"{k}={v}" for k, v in doc.minimal_changes.items()) or "none")
                + "</code></p>")
    leads = [c for c in a.correlations if c.telemetry and c.lead()][:6]
    lead_txt = ""
    if leads:
        lead_txt = ("<p class=note>Leads beside it (telemetry that moves with the objective, "
                    "BH q &lt; 0.05): " + "; ".join(
                        f"{_e(c.metric)} ({_e(c.unit)}) ρ={signed(c.rho)}" for c in leads)
                    + ".</p>")
    # Green only for an ablation that measured something (a skipped one says why, in the
    # verdict's own yellow when nothing was recommended).
    cls = "none" if doc.skipped else "good"
    return (f'<div class="verdict {cls}">{_e(head)}</div>' + "".join(rows) + mini + lead_txt)


def _slabs(data: StudyData, tables: dict[str, list[dict[str, float]]],
           cmp: dict[str, Any]) -> str:
    if not tables:
        return ""
    names = list(tables)
    classes = sorted({int(r["class"]) for t in tables.values() for r in t
                      if r.get("total_pages", 0) > 0 or r.get("number", 0) > 0})
    head = "".join(f'<th colspan="4">{_e(n)}</th>' for n in names)
    sub = "".join("<th>pages</th><th>items</th><th>evicted</th><th>out of memory</th>"
                  for _ in names)
    fields = ("total_pages", "number", "evicted", "outofmemory")
    found = {(n, c): next((x for x in tables[n] if int(x["class"]) == c), {})
             for n in names for c in classes}
    # Each column of counts formatted together; the chunk sizes one column of bytes.
    cols = {(n, k): iter(column([found[n, c].get(k) for c in classes], "count").cells)
            for n in names for k in fields}
    chunks = column([next((found[n, c].get("chunk_size") for n in names
                           if found[n, c].get("chunk_size")), None) for c in classes], "B")
    out = [f"<table><tr><th>class</th><th>chunk size ({_e(chunks.unit)})</th>{head}</tr>"
           f"<tr><th></th><th></th>{sub}</tr>"]
    for c, chunk in zip(classes, chunks.cells, strict=True):
        cells = [next(cols[n, k]) for n in names for k in fields]
        out.append(f"<tr><td>{c}</td><td>{_e(chunk)}</td>"
                   + "".join(f"<td>{_e(x)}</td>" for x in cells) + "</tr>")
    out.append("</table>")
    err = ["<table><tr><th>server errors</th>" + "".join(f"<th>{_e(n)}</th>" for n in names)
           + "</tr>"]
    ms = (cmp["base_metrics"] or {}, cmp["new_metrics"] or {})
    for key, what in (("server_errors", "SERVER_ERROR replies seen by the load generator"),
                      ("errors", "all errors seen by the load generator"),
                      ("mc_outofmemory", "out-of-memory (stats items)"),
                      ("mc_store_no_memory", "store_no_memory"),
                      ("mc_store_too_large", "store_too_large"),
                      ("mc_evictions", "evictions"), ("mc_slabs_moved", "slab pages moved")):
        vals = [ms[i].get(key) if i < len(ms) else None for i in range(len(names))]
        if all(v is None for v in vals):
            continue
        err.append(f"<tr><td>{_e(what)}</td>"
                   + "".join(f"<td>{_e(x)}</td>" for x in column(vals, "count").cells)
                   + "</tr>")
    err.append("</table>")
    return ("<h2 id=slabs>Slab classes</h2><p class=note>Median over the "
            "repetitions of each configuration, read at the end of each repetition (fresh "
            "server: preload, warm-up and measured window).</p>" + "".join(out)
            + "".join(err))


def _trials(data: StudyData) -> str:
    base = next((t.value for t in data.trials if t.user_attrs.get("kind") == "baseline"
                 and t.value is not None), None)
    # The columns as `kvtune show` formats them (report/summary.py): each search trial
    # against the baseline, the objective's figures and intervals together.
    evals = [stored_eval(t) for t in data.trials]
    rows = [{"value": t.value, "ci": ev.get("ci"), "ci_kind": ev.get("ci_kind"),
             "n": ev.get("n") if present.as_number(ev.get("n")) is not None else None,
             "baseline_ref": base if t.user_attrs.get("kind") == "trial"
             and t.value is not None else None} for t, ev in zip(data.trials, evals,
                                                                 strict=True)]
    values, intervals, counts, vs = trial_columns(rows, data.metric)
    name = f"{data.metric} ({values.unit})" if values.unit else data.metric
    out = ["<table><tr><th>#</th><th>kind</th><th>state</th><th>"
           f"{_e(name)}</th><th>interval</th><th>n</th><th>{_e(data.metric)} vs "
           "baseline</th><th>configuration</th></tr>"]
    for i, t in enumerate(data.trials):
        state = t.state.name
        if state == "FAIL":
            state = f"failed: {t.user_attrs.get('failed', '')}"
        elif not all(v <= 0 for v in t.user_attrs.get("violations", [0])):
            state = "infeasible"
        cfg = ", ".join(f"{k.split('.', 1)[-1]}={_f(v)}" for k, v in
                        (t.user_attrs.get("config") or t.params).items())
        # Each trial's interval says what it is, as the terminal does: a 95% CI from
        # enough repetitions, else the range of the few there are (stats.ci_kind).
        out.append(f"<tr><td>{t.number}</td><td>{_e(t.user_attrs.get('kind', ''))}</td>"
                   f"<td>{_e(state)}</td><td>{_e(values.cells[i])}</td>"
                   f"<td>{_e(intervals[i])}</td><td>{_e(counts.cells[i])}</td>"
                   f"<td>{_e(vs[i])}</td><td class=cfg>{_e(cfg)}</td></tr>")
    out.append("</table>")
    return "".join(out)


def _reproduce(data: StudyData, cmp: dict[str, Any]) -> str:
    host = data.host or {}
    rows = "".join(f"<tr><td>{_e(k)}</td><td class=cfg>{_e(v)}</td></tr>"
                   for k, v in host.items() if k != "extra")
    nf = data.noise_floor
    if nf is not None and nf.cov:
        rows += ("<tr><td>noise floor (CoV of the baseline)</td><td class=cfg>"
                 + _e(present.named_shares(nf.cov)) + "</td></tr>")
    fname = f"{data.name}.yaml"
    # The configuration measured again is the one the headline ships; with nothing to
    # ship, the one the before/after table shows, said for what it is.
    head = headline_of(data)
    if head.action in ("ship", "ship_smaller"):
        changes = dict(head.changes)
        what = ("the smaller change the headline ships" if head.chosen == "minimal"
                else "the configuration the headline ships")
    else:
        changes = {k: v for k, v in cmp["new_config"].items()
                   if cmp["base_config"].get(k) != v}
        what = {"not significant": "the best candidate, not shown better than the defaults",
                "unconfirmed": "the search's best trial, unconfirmed"}.get(
                    cmp["status"], "the configuration compared")
    sets = " ".join(f"--set {k}={str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in changes.items())
    cmds = ([f"kvtune run {fname} {sets}   # {what}"] if changes else []) + [
            f"kvtune run {fname}   # the defaults, to compare",
            f"kvtune report {data.name} --storage '{data.storage}' -o report.html"]
    key = config_key(cmp["new_config"]) if cmp["new_config"] else None
    rep = next((r for r in reversed(data.ok_reps()) if r["config_key"] == key), None)
    exact = ""
    if rep:
        argv = rep["raw"].get("argv")
        load_doc = load_raw(rep["raw"])
        kv = load_doc.get("argv")
        if argv:
            exact += "# the server, as started for this configuration\n" + " ".join(
                map(str, argv)) + "\n"
        if kv:
            exact += (f"# the load ({load_doc.get('tool') or _load_tool(data)}), as run "
                      "against it\n" + " ".join(map(str, kv)) + "\n")
    spec_title = f"The study file ({_e(fname)}), as written"
    if data.spec_text:
        spec = data.spec_text
    elif data.spec:
        spec = yaml.safe_dump(_without_defaults(data.spec), sort_keys=False)
        spec_title = (f"The study file ({_e(fname)}): this study did not store the file as "
                      "written; its settings other than kvtune's defaults")
    else:
        spec = ""
    return ("<h2 id=reproduce>Host and reproduction</h2><table>" + rows + "</table>"
            f"<h3>Commands</h3><pre>{_e(chr(10).join(cmds))}</pre>"
            + (f"<h3>Exact command lines of one repetition</h3><pre>{_e(exact)}</pre>"
               if exact else "")
            + (f"<h3>{spec_title}</h3><pre>{_e(spec)}</pre>" if spec else ""))


def _without_defaults(spec: dict[str, Any]) -> dict[str, Any]:
    """The normalised spec without the values that are kvtune's defaults (no
    synthetic-only keys on a memcached study)."""
    from kvtune.spec import StudySpec

    try:
        return StudySpec.model_validate(spec).model_dump(mode="json", exclude_defaults=True)
    except Exception:
        return spec


def _host_noise(data: StudyData) -> str:
    """Host facts that make measurements noisy, beside the noise floor (as `pyperf system
    show`): stored by the study since issue 13 under the noise floor's "host"."""
    from kvtune.measure.host_noise import render_html

    return render_html(data.noise_floor, data.host, data.host_noise)


def _plot(fig: go.Figure | None, div_id: str) -> str:
    if fig is None:
        return ""
    figures.tidy(fig)
    body = figures.to_html(fig, div_id, config={"displaylogo": False, "responsive": True})
    return f'<div class="plot">{body}</div>'


# -- the page ------------------------------------------------------------------------------


def render(data: StudyData, a: Analysis | None = None, within: float = 0.05) -> str:
    """The whole page as one string. What the study stored is checked first, as a study
    file is (kvtune.study.stored): a results database is input."""
    from kvtune.study.stored import stored_spec

    stored_spec(data.study.user_attrs, data.name, data.storage)
    a = a or analyse(data, within)
    cmp = comparison(data)
    target = (data.spec.get("target") or {}).get("kind", "")
    kind = kinds.find(target)
    slabs = slab_tables(data, cmp, kind.slab_table) \
        if kind is not None and kind.slab_table is not None else {}
    figs = figures.all_figures(data, a, slabs)
    n_trials = sum(1 for t in data.trials if t.user_attrs.get("kind") == "trial")
    n_reps = len(data.reps)
    when = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    imp_txt = ""
    if a.importance.values:
        imp_txt = (f"<p><b>{_e(a.importance.verdict())}</b> ({_e(a.importance.method)}, "
                   f"{_e(a.importance.trials_text())}).</p>")
        if a.importance.note and a.importance.ranked:
            imp_txt += f'<p class="note">{_e(a.importance.note)}.</p>'
    elif a.importance.note:
        imp_txt = f'<p class="note">Importance: {_e(a.importance.note)}.</p>'
    verbs = latency_by_verb(data, cmp)
    cap_fig, cap_note = capacity_curve(data, cmp)
    cap_html = ("<h2 id=capacity>Latency against throughput</h2>"
                f"<p class=note>{_e(cap_note)}</p>" + _plot(cap_fig, "plot-capacity")
                if cap_fig is not None else "")
    spec_fig = figures.spectrum(verbs)
    mem_html = memory_section(data, _plot)
    sens = "".join(_plot(figs.get(f"sensitivity-{c.knob}"), f"plot-sensitivity-{i}")
                   for i, c in enumerate(a.curves))
    parts = [
        f"<h1>kvtune report: {_e(data.name)}</h1>",
        f'<p class="sub">{_e(target)} · {_e(data.direction)} <b>{_e(data.metric)}</b> · '
        f"{n_trials} trials + baseline · {n_reps} repetitions · generated {when}</p>",
        "<nav><a href=#before-after>before/after</a><a href=#ablation>ablation</a>"
        "<a href=#latency>latency</a><a href=#convergence>convergence</a>"
        "<a href=#importance>importance</a><a href=#sensitivity>sensitivity</a>"
        "<a href=#telemetry>telemetry</a>" + ("<a href=#slabs>slabs</a>" if slabs else "")
        + ("<a href=#memory>memory</a>" if mem_html else "")
        + "<a href=#trials>trials</a><a href=#workers>workers</a>"
        "<a href=#reproduce>reproduce</a></nav>",
        _verdict(data), _pareto(data.confirmation),
        "<h2 id=before-after>Before and after</h2>", _before_after(data, cmp), cap_html,
        _host_noise(data),
        "<h2 id=ablation>Which change made the gain</h2>", _ablation(data, a),
        _plot(figs.get("ablation"), "plot-ablation"),
        "<h2 id=latency>Latency by request type and percentile</h2>",
        _plot(spec_fig, "plot-spectrum"), _verbs_table(verbs),
        "<h2 id=convergence>Convergence</h2>", _plot(figs["convergence"], "plot-convergence"),
        "<h2 id=importance>What mattered</h2>", imp_txt,
        _plot(figs["importance"], "plot-importance"), _zones(a),
        "<h2 id=sensitivity>Sensitivity</h2><p class=note>The objective against each knob's "
        "values: medians of the raw repetitions with bootstrap 95% CIs; the default is "
        "marked.</p>", f'<div class="grid">{sens}</div>',
        "<h2 id=telemetry>Why: telemetry</h2><p class=note>Rank correlation of each counter "
        "with the objective across repetitions — leads to read beside the sensitivity "
        "curves, not proof of cause.</p>",
        _plot(figs["correlations"], "plot-correlations"),
        _plot(figs["telemetry-scatter"], "plot-telemetry-scatter"), _corr_table(a),
        _slabs(data, slabs, cmp), _plot(figs.get("slab-pages"), "plot-slab-pages"),
        mem_html,
        sweep_view.html_section(data),  # sweeps; server stats by phase and over time
        "<h2 id=trials>Trials</h2>", _trials(data),
        workers_section(data),  # fleet workers and hosts (report/workers.py)
        _reproduce(data, cmp),
    ]
    js = plotly.offline.get_plotlyjs()
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            f"<title>kvtune report: {_e(data.name)}</title>"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<style>{_CSS}</style><script>{js}</script></head><body><main>"
            + "\n".join(p for p in parts if p) + "</main>" + _RESIZE + "</body></html>")


# Plots are sized when drawn; once the page has its final layout (fonts, scrollbar), each is
# fitted to its container again so that none overflows its grid cell.
_RESIZE = ("<script>window.addEventListener('load',()=>document.querySelectorAll("
           "'.js-plotly-plot').forEach(p=>Plotly.Plots.resize(p)));</script>")


def write(data: StudyData, path: str | Path, within: float = 0.05,
          a: Analysis | None = None) -> Path:
    from kvtune.safety.files import write_file

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    # Atomic, no link followed, never over an input (kvtune.safety.files).
    write_file(p, render(data, a, within), what="-o")
    return p


__all__ = ["comparison", "render", "slab_tables", "write"]
