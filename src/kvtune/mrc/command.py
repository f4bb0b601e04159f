"""`kvtune workload mrc`: how much memory for a hit ratio, from the operator's traffic.

Reads a normalized trace (`--keep-trace`), a public trace (`--format twitter|meta`) or a
workload model; prints the curve as a table, the smallest memory for the target hit ratio
with its range over the sampling's salts, and what the kind's other settings (memcached's
slab growth factor and rebalancer) change at the current memory; `--json` prints the same
as JSON, `-o PAGE` plots it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from kvtune import present
from kvtune.cli_options import err, json_flag, out
from kvtune.errors import UserError
from kvtune.mrc import curve as curves
from kvtune.mrc import requests as rq
from kvtune.mrc import view
from kvtune.quantities import parse_size
from kvtune.safety.files import ReadRefused, open_input, read_input
from kvtune.safety.text import for_markup as escape

FORMATS = ("auto", "trace", "model", "twitter", "meta")
MAX_MEASURED = 1 << 20  # bytes of a --measured file


def load(path: str, fmt: str = "auto", requests: int | None = None,
         seed: int = 1) -> rq.Requests:
    """The request stream of `path` in `fmt` (auto: a kvtune trace by its first line, a
    model by its .json/.toml name)."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt}: one of {', '.join(FORMATS)}")
    if fmt == "auto":
        if path.endswith((".json", ".toml")):
            fmt = "model"
        else:
            try:
                fd = open_input(path, "trace")
            except ReadRefused as e:
                raise UserError(str(e)) from None
            try:
                head = os.read(fd, 32)
            finally:
                os.close(fd)
            if not head.startswith(rq.TRACE_HEADER.encode()):
                raise UserError(f"{path}: neither a kvtune trace ('{rq.TRACE_HEADER}') nor a "
                                "workload model (.json, .toml): give --format twitter or meta "
                                "for a public trace")
            fmt = "trace"
    if fmt == "trace":
        return rq.read_trace(path)
    if fmt == "model":
        from kvtune.workload.describe import load_model

        return rq.from_model(load_model(path), requests=requests, seed=seed)
    return rq.import_public(fmt, path)


def _mib(n: float | None) -> str:
    return view.mib(n)


def _number(v: Any) -> float:
    """A JSON number (float() alone took the text '1_0' as 10); ValueError otherwise."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError("not a number")
    return float(v)


def read_measured(path: str, model: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Measured points (bench/mrc/check_real.py's --json: rows with memory_mb and
    measured, and the server kind), to put on the plot of the curve of their kind. With
    `model`, only the rows of the file's workloads that `model` is (each key the file's
    `workloads` gives it has the same value in `model`)."""
    data = read_input(path, MAX_MEASURED, "--measured")
    try:
        doc = json.loads(data)
        rows = doc["rows"] if isinstance(doc, dict) else doc
        pts: list[dict[str, Any]] = [{"memory": int(_number(r["memory_mb"]) * (1 << 20)),
                "measured": _number(r["measured"]), "kind": str(r.get("kind", "")),
                "workload": str(r.get("workload", ""))} for r in rows]
        named = doc.get("workloads") if isinstance(doc, dict) else None
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
        raise UserError(f"--measured {path}: not the JSON of bench/mrc/check_real.py (rows "
                        "with memory_mb and measured)") from None
    if not all(0 < p["memory"] <= 1 << 50 for p in pts):
        raise UserError(f"--measured {path}: a memory_mb that is not a size above 0")
    if not all(0 <= float(p["measured"]) <= 1 for p in pts):
        raise UserError(f"--measured {path}: a measured hit ratio outside [0, 1]")
    if model is not None and isinstance(named, dict):
        same = {n for n, w in named.items()
                if isinstance(w, dict) and all(model.get(k) == v for k, v in w.items())}
        pts = [p for p in pts if p["workload"] in same]
    return pts


def plot(c: curves.Curve, path: Path, target: float | None,
         measured: list[dict[str, Any]] | None = None) -> None:
    from kvtune.safety.files import write_file

    pts = [view.Point(int(p["memory"]), float(p["measured"])) for p in measured or []]
    fig = view.figure(c, target, pts)
    write_file(path, fig.to_html(include_plotlyjs=True, full_html=True), what="-o")


def mrc_command(
    workload: Annotated[str, typer.Argument(help="a trace (--keep-trace), a workload "
                                                 "model, or a public trace with --format")],
    kind: Annotated[str, typer.Option(help="a server kind (as a study's target.kind), or "
                                           "lru (a byte-LRU cache)")] = "lru",
    target_hit_ratio: Annotated[float, typer.Option(
        "--target-hit-ratio", help="the hit ratio to size memory for")] = 0.9,
    memory: Annotated[str | None, typer.Option(
        help="the current memory setting, e.g. 64M: the kind's other settings are compared "
             "there (default: the memory the target needs)")] = None,
    fmt: Annotated[str, typer.Option("--format", help="auto, trace, model, twitter, meta")]
    = "auto",
    requests: Annotated[int | None, typer.Option(
        help="requests drawn from a workload model (default: 20 per key, at least 1M)")]
    = None,
    sample_rate: Annotated[float | None, typer.Option(
        help="SHARDS sampling rate (default: exact for small streams, else chosen)")] = None,
    measured: Annotated[str | None, typer.Option(
        help="measured points to plot (bench/mrc/check_real.py --json)")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output",
                                                help="write the plot (HTML) here")] = None,
    as_json: Annotated[bool, json_flag()] = False,
) -> None:
    """Compute how much memory a hit ratio needs (a miss-ratio curve).

    The hit ratio as a function of memory for the traffic given, for a server kind as it
    holds items (its memory setting, allocation, eviction, TTLs; docs/workloads.md) or a
    byte-LRU cache; the smallest memory for the target, with its range."""
    if not 0 < target_hit_ratio < 1:
        raise UserError(f"--target-hit-ratio {target_hit_ratio}: a fraction in (0, 1)")
    if sample_rate is not None and not 0 < sample_rate <= 1:
        raise UserError(f"--sample-rate {sample_rate}: a fraction in (0, 1]")
    if requests is not None and not 1_000 <= requests <= rq.MAX_MODEL_REQUESTS:
        raise UserError(f"--requests {requests}: 1,000 to "
                        f"{present.figure(rq.MAX_MODEL_REQUESTS)}")
    current = None
    if memory is not None:
        try:
            current = parse_size(memory)
        except ValueError as e:
            raise UserError(f"--memory: {e}") from None
        if current <= 0:
            raise UserError("--memory: above 0")
    pts = read_measured(measured) if measured else None
    if pts:  # the points of this kind, when the file says which
        pts = [p for p in pts if p["kind"] in ("", kind)]
    req = load(workload, fmt, requests)
    c = curves.build(req, kind, sample_rate=sample_rate)
    est, lo, hi = c.smallest_memory(target_hit_ratio)
    at = current or est
    title, alts = curves.alternatives(req, kind, at) if at else ("", [])
    doc = {"curve": c.to_json(), "target_hit_ratio": target_hit_ratio,
           "smallest_memory": {"estimate": est, "low": lo, "high": hi},
           "current_memory": current, "other_settings": alts}
    if as_json:
        print(json.dumps(doc, indent=1, default=str))
    else:
        for line in lines(c, target_hit_ratio, (est, lo, hi), at, title, alts):
            out.print(line, highlight=False, markup=False)
    if output is not None:
        plot(c, output, target_hit_ratio, pts)
        (err if as_json else out).print(f"wrote {escape(output)}", highlight=False)


def lines(c: curves.Curve, target: float, smallest: tuple[int | None, int | None, int | None],
          at: int | None, title: str, alts: list[dict[str, Any]]) -> list[str]:
    est, lo, hi = smallest
    out_ = [f"{c.source}: {present.figure(c.requests)} requests, "
            f"{present.figure(c.gets_measured)} gets measured "
            "(the first half warms the cache up)",
            f"{c.kind}: {c.method}", "", "     memory   hit ratio   (range)"]
    for s, h, a, b in zip(c.sizes, c.hit_ratio, c.low, c.high, strict=True):
        rng = f"({a:.3f}-{b:.3f})" if a != b else ""
        out_.append(f"{_mib(s):>11}   {h:9.3f}   {rng}")
    out_.append("")
    if est is None:
        out_.append(f"hit ratio {target:g}: not reached at {_mib(c.sizes[-1])} (the most the "
                    f"traffic's keys fill); the largest computed gives "
                    f"{max(c.hit_ratio):.3f} (misses on first requests and after expiry)")
    else:
        rng = "" if lo == hi else f" (range {_mib(lo)} to {_mib(hi)})"
        out_.append(f"hit ratio {target:g} needs {_mib(est)}{rng}")
    for n in c.notes:
        out_.append(f"note: {n}")
    if alts and at:
        out_.append("")
        out_.append(f"{title} at {_mib(at)}:")
        width = max(len(str(a["setting"])) for a in alts)
        for alt in alts:
            extra = "".join(f"   {k.replace('_', ' ')} {v}" for k, v in alt.items()
                            if k not in ("setting", "hit_ratio"))
            out_.append(f"  {alt['setting']:<{width}}   hit ratio {alt['hit_ratio']:.3f}"
                        f"{extra}")
    return out_
