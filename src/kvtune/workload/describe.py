"""`kvtune workload describe FILE`: a workload model in words, and as plots (HTML); the
command adds its miss-ratio curve (kvtune.mrc.view)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from kvtune import present
from kvtune.errors import UserError
from kvtune.safety.workload import check_workload_file
from kvtune.workload.model import parse_weighted


def load_model(path: str) -> dict[str, Any]:
    """The workload model `path`, read once, with the bounds and checks of a study's
    load.workload_file (kvtune.safety.workload)."""
    try:
        return check_workload_file(path)
    except ValueError as e:
        raise UserError(f"workload file: {e}") from None


def _mean(spec: str) -> float | None:
    try:
        items = parse_weighted(spec)
    except ValueError:
        return None
    tot = sum(w for _, w in items)
    return sum(v * w for v, w in items) / tot if tot else None


def _quantile(spec: str, q: float) -> float | None:
    try:
        items = sorted(parse_weighted(spec))
    except ValueError:
        return None
    tot = sum(w for _, w in items)
    acc = 0.0
    for v, w in items:
        acc += w / tot
        if acc >= q:
            return v
    return items[-1][0] if items else None


def lines(doc: dict[str, Any]) -> list[str]:
    about = doc.get("about") or {}
    out = [f"source: {about.get('source', 'typed by hand (no about)')}"]
    if "captured" in about:
        c = about["captured"]
        out.append(f"captured {c.get('at', '?')} by {c.get('method')}: stopped by "
                   f"{c.get('stopped_by', '-')}, {about.get('window_s', '?')} s")
        if c.get("seen_fraction") is not None:
            out.append(f"  seen {present.share(c['seen_fraction'], 1)} of the requests the "
                       f"server counted; {c.get('skipped_lines', 0)} watcher lines dropped")
        cost = c.get("capture_cost") or {}
        if "increase_pct" in cost:
            out.append(f"  capture cost: server CPU per request "
                       f"{cost['cpu_us_per_request_before']} µs before, "
                       f"{cost['cpu_us_per_request_during']} µs during "
                       f"({present.pct(_fraction(cost['increase_pct']))})")
        if c.get("server_hit_ratio") is not None:
            out.append("  hit ratio (server stats): "
                       f"{present.value(c['server_hit_ratio'], 'ratio')}")
    if "imported" in about:
        i = about["imported"]
        out.append(f"imported {i.get('format')} ({i.get('layout') or 'default layout'}) "
                   f"{i.get('file')}: {i.get('rows')} rows, {i.get('requests')} requests, "
                   f"{i.get('malformed_lines_skipped')} malformed lines skipped")
    out.append(f"verb mix: {doc.get('mix', 'get:9,set:1 (kvload default)')}")
    rate = doc.get("rate")
    arr = about.get("arrival") or {}
    disp = (f", gap CV² {arr['gap_cv2']}" if "gap_cv2" in arr else
            f", 1 s index of dispersion {arr['index_of_dispersion_1s']}"
            if "index_of_dispersion_1s" in arr else "")
    out.append(f"rate: {present.figure(rate)} req/s, arrivals {doc.get('arrival', 'poisson')}{disp}"
               if isinstance(rate, int | float) else
               "rate: not in the model (give load.rate or kvload --rate)")
    pop = about.get("popularity") or {}
    fit = (f" (Zipf fit s={pop['zipf_s']}, KS distance {pop['ks_distance']})"
           if "zipf_s" in pop else "")
    spec = str(doc.get("popularity", "uniform"))
    shown = spec if len(spec) < 60 else spec[:40] + f"... ({spec.count(',') + 1} buckets)"
    out.append(f"keys: {present.figure(doc.get('keys', 10000))}; popularity {shown}{fit}")
    if pop.get("why"):
        out.append(f"  {pop['why']}: the empirical table is used")
    for name, field in (("key size", "key_size"), ("value size", "value_size"),
                        ("TTL", "ttl")):
        spec = str(doc.get(field, ""))
        if spec:
            m, p50, p99 = _mean(spec), _quantile(spec, 0.5), _quantile(spec, 0.99)
            if m is not None:
                out.append(f"{name}: mean {present.figure(m, 1)}, median {present.figure(p50)}, "
                           f"p99 {present.figure(p99)}")
    per_key = about.get("per_key") or {}
    if doc.get("key_buckets") and per_key.get("mean_value_per_key") is not None:
        out.append(f"value sizes per key: {len(doc['key_buckets'])} popularity buckets, "
                   f"mean {present.figure(per_key['mean_value_per_key'], 1)} per key (per request "
                   f"{present.figure(per_key['mean_value_per_request'], 1)}): each key is replayed "
                   f"at its "
                   "own size")
    out.append(f"connections: {doc.get('connections', 4)}"
               + (f" (seen {about['connections_seen']})" if "connections_seen" in about
                  else "") + (f"; multiget fan-out {doc['mget_size']}"
                              if "mget" in str(doc.get("mix", "")) and doc.get("mget_size")
                              else ""))
    if about.get("hit_ratio") is not None:
        out.append(f"hit ratio of the gets seen: {about['hit_ratio']:.3f}")
    if about.get("other_commands"):
        oc = ", ".join(f"{k} {v}" for k, v in sorted(about["other_commands"].items())[:8])
        out.append(f"not replayed (kvload sends get, mget, set, delete): {oc}")
    for n in about.get("notes", []):
        out.append(f"note: {n}")
    return out


EXACT_TERMS = 1_000_000


def harmonic(n: int, s: float) -> float:
    """The generalized harmonic number sum_{k=1..n} k^-s, in bounded memory and time for
    any n (a model may name 10^12 keys): the first EXACT_TERMS terms summed, the rest by
    the midpoint integral (relative error far below what a plot shows)."""
    import numpy as np

    m = min(n, EXACT_TERMS)
    h = float((np.arange(1, m + 1, dtype=float) ** -s).sum())
    if n > m:
        a, b = m + 0.5, n + 0.5
        h += math.log(b / a) if s == 1 else (b ** (1 - s) - a ** (1 - s)) / (1 - s)
    return h


def html(doc: dict[str, Any], path: Path, extra: str = "") -> None:
    """Popularity (rank-frequency), sizes and rate, then `extra` (the miss-ratio curve's
    block, kvtune.mrc.view.page_block): one self-contained page."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=2, subplot_titles=(
        "key popularity (share of requests by rank)", "value sizes (CDF)",
        "key sizes (CDF)", "requests per second"))
    pop = str(doc.get("popularity", "uniform"))
    keys = int(doc.get("keys", 10000))
    about = doc.get("about") or {}
    if pop.startswith("table:"):
        ranks, shares, r = [], [], 0
        for part in pop[6:].split(","):
            k, m = part.split(":")
            r += int(k)
            ranks.append(r)
            shares.append(float(m) / int(k))
        fig.add_trace(go.Scatter(x=ranks, y=shares, mode="lines+markers",
                                 name="table (per key)"), 1, 1)
    elif pop.startswith("zipf:"):
        import numpy as np

        s = float(pop[5:])
        rr = np.unique(np.geomspace(1, max(keys, 1), 200).astype(np.int64))
        h = harmonic(keys, s)
        fig.add_trace(go.Scatter(x=rr, y=rr.astype(float) ** -s / h, name=f"Zipf s={s}"),
                      1, 1)
    top = (about.get("popularity") or {}).get("top_shares")
    if top:
        fig.add_trace(go.Scatter(x=list(range(1, len(top) + 1)), y=top, mode="markers",
                                 name="seen (hottest keys)"), 1, 1)
    fig.update_xaxes(type="log", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=1)
    for (row, col), field in (((1, 2), "value_size"), ((2, 1), "key_size")):
        spec = str(doc.get(field, ""))
        try:
            items = sorted(parse_weighted(spec))
        except ValueError:
            continue
        tot = sum(w for _, w in items)
        acc, xs, ys = 0.0, [], []
        for v, w in items:
            acc += w / tot
            xs.append(v)
            ys.append(acc)
        fig.add_trace(go.Scatter(x=xs, y=ys, line_shape="hv", name=field), row, col)
    series = about.get("rate_per_second") or []
    if series:
        fig.add_trace(go.Scatter(x=[s for s, _ in series], y=[c for _, c in series],
                                 name="requests/s"), 2, 2)
    fig.update_layout(title=f"workload model: {about.get('source', '')}", height=800)
    text = "<br>".join(lines(doc))
    page = fig.to_html(include_plotlyjs=True, full_html=True)
    page = page.replace("<body>", f"<body><pre style='font-size:13px'>{_esc(text)}</pre>", 1)
    if extra:
        page = page.replace("</body>", extra + "</body>", 1)
    page = page.replace("<body>", "<body><main>", 1).replace("</body>", "</main></body>", 1)
    from kvtune.safety.files import write_file

    write_file(path, page, what="--html")


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace(
        "&lt;br&gt;", "\n")


def _fraction(percent: object) -> float | None:
    """A stored percentage (`increase_pct`) as the fraction `present` formats."""
    x = present.as_number(percent)
    return None if x is None else x / 100
