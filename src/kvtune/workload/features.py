"""Workload features: what the library keys a study by, and the distance between two
workloads.

A study's workload is its load's model (`load.workload_file`, captured, imported or
written by hand) or its inline `load.workload` settings. Its features (`FEATURES`) are
numbers a person can check against the model:

- read_share: get + mget share of requests (scale 0.2);
- write_share: set share (0.2); delete_share: delete share (0.1);
- mget_share: mget share (0.2); log2_fanout: log2 of the keys per mget, 0 without
  mgets (1.0: a factor of 2);
- log10_value: log10 of the mean value size in bytes, per key when the model keeps sizes
  per key (0.5: a factor of about 3.2);
- zipf: the popularity's Zipf exponent (uniform: 0; a table or a hot set: the exponent
  whose hottest 1% of keys get the same share of requests) (0.3);
- ttl_share: share of sets with a TTL (0.5);
- log10_keys: log10 of the keyspace (1.0: a factor of 10);
- log10_rate: log10 of the offered rate, open loop only (0.5).

**Distance**: the Euclidean distance of the features each divided by its scale (a scale
is the difference that matters about as much as another feature's scale); a feature
present in one workload only counts one scale. Two workloads are **alike** when their
distance is at most `ALIKE` (1.5): e.g. read shares 0.9 and 0.6 alone, or values of 100 B
and 1 KB (2.0) are not alike. The scales are fixed, not fitted to the library, so a
distance means the same whatever the library holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvtune import present
from kvtune.quantities import parse_size

FEATURES = ("read_share", "write_share", "delete_share", "mget_share", "log2_fanout",
            "log10_value", "zipf", "ttl_share", "log10_keys", "log10_rate")
SCALES: dict[str, float] = {
    "read_share": 0.2, "write_share": 0.2, "delete_share": 0.1, "mget_share": 0.2,
    "log2_fanout": 1.0, "log10_value": 0.5, "zipf": 0.3, "ttl_share": 0.5,
    "log10_keys": 1.0, "log10_rate": 0.5,
}
ALIKE = 1.5  # workloads within this distance are alike (warm start, categories)
HOT_FRACTION = 0.01  # a table's or hot set's exponent matches this head's share


class NoFeatures(ValueError):
    """The workload's features cannot be known (a message for people)."""


def distance(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """The distance between two workloads' features (see the module docstring)."""
    total = 0.0
    for f in FEATURES:
        if f in a and f in b:
            total += ((float(a[f]) - float(b[f])) / SCALES[f]) ** 2
        elif f in a or f in b:
            total += 1.0
    return math.sqrt(total)


def nearest_differences(a: Mapping[str, float], b: Mapping[str, float],
                        top: int = 2) -> list[str]:
    """The features that set two workloads apart most, for people: 'read_share 0.90 vs
    0.60'."""
    parts = []
    for f in FEATURES:
        if f in a and f in b:
            parts.append((abs(float(a[f]) - float(b[f])) / SCALES[f],
                          f"{f} {_show(f, a[f])} vs {_show(f, b[f])}"))
        elif f in a or f in b:
            parts.append((1.0, f"{f} only in one"))
    parts.sort(key=lambda p: -p[0])
    return [t for d, t in parts[:top] if d > 0.05]


def _show(f: str, v: float) -> str:
    if f == "log10_value":
        return f"{present.figure(10 ** v)} B"
    if f == "log10_keys":
        return f"{present.figure(10 ** v)} keys"
    if f == "log10_rate":
        return f"{present.figure(10 ** v)}/s"
    if f == "log2_fanout":
        return f"{2 ** v:.0f} keys/mget"
    return f"{v:.2f}"


def describe(feat: Mapping[str, float]) -> str:
    """A workload's features in a few words: 'reads 90%, values 1.2 KB, zipf 0.99, mget
    share 0.10 × 10 keys'."""
    out = []
    if "read_share" in feat:
        out.append(f"reads {present.share(feat['read_share'])}")
    if feat.get("mget_share", 0) > 0.005:
        out.append(f"mgets {present.share(feat['mget_share'])} × "
                   f"{2 ** feat.get('log2_fanout', 0):.0f}"
                   " keys")
    if "log10_value" in feat:
        out.append(f"values {_bytes(10 ** feat['log10_value'])}")
    if "zipf" in feat:
        out.append(f"zipf {feat['zipf']:.2f}")
    if feat.get("ttl_share", 0) > 0.005:
        out.append(f"TTLs on {present.share(feat['ttl_share'])} of sets")
    if "log10_rate" in feat:
        out.append(f"{present.figure(10 ** feat['log10_rate'])} req/s")
    return ", ".join(out)


def label(feat: Mapping[str, float]) -> str:
    """A category's name from its centre: 'read-heavy small values', 'write-heavy large
    values, multiget-heavy'..."""
    words = []
    read = feat.get("read_share", 0.9)
    words.append("read-heavy" if read >= 0.75 else "write-heavy" if read < 0.45 else
                 "mixed read/write")
    v = 10 ** feat.get("log10_value", 2.0)
    words.append("small values" if v < 512 else "medium values" if v < 4096 else
                 "large values")
    tail = []
    if feat.get("mget_share", 0) >= 0.25:
        tail.append("multiget-heavy")
    if feat.get("zipf", 1.0) < 0.5:
        tail.append("flat popularity")
    if feat.get("ttl_share", 0) >= 0.5:
        tail.append("expiring")
    return " ".join(words) + (", " + ", ".join(tail) if tail else "")


def _bytes(v: float) -> str:
    return f"{present.figure(v)} B" if v < 1024 else f"{present.figure(v / 1024, 1)} KB"


# -- from a workload --------------------------------------------------------------------------


def of_spec(spec: Any, base_dir: Path | None = None) -> tuple[dict[str, float], str]:
    """The features of a study's workload and where they come from ("model FILE" or "the
    study's load.workload"). `spec` is a StudySpec; a load.workload_file is read (bounded,
    checked as the load reads it). Raises NoFeatures."""
    load = spec.load
    if load is None:
        raise NoFeatures(f"the {spec.target.kind} target runs no load: no workload to key "
                         "the library by")
    settings = load.workload.model_dump()
    given = set(load.workload.model_fields_set)
    doc: dict[str, Any] = {}
    source = "the study's load.workload"
    if load.workload_file:
        doc = _read_model(load, base_dir)
        source = f"model {Path(load.workload_file).name}"
    # The study's own settings win over the file's (kvload's command line does).
    merged: dict[str, Any] = dict(doc)
    for k in ("keys", "value_size", "popularity", "mix", "mget_size"):
        if k in given or k not in doc:
            merged[k] = settings[k]
    rate: float | None = None
    if load.mode == "open":
        if load.rate is not None:
            rate = float(load.rate)
        elif isinstance(doc.get("rate"), int | float):
            rate = float(doc["rate"])
        if rate is not None and load.rate_scale:
            rate *= load.rate_scale
    return of_model(merged, rate), source


def summary(spec: Any) -> str:
    """A study's workload in a few words, where it comes from first ("model m.json: reads
    90%, values 1.2 KB, ..."): what an export says it was tuned for."""
    try:
        features, source = of_spec(spec)
    except NoFeatures as e:
        return f"workload ({e})"
    return f"{source}: {describe(features)}"


def _read_model(load: Any, base_dir: Path | None) -> dict[str, Any]:
    """The load's workload document: the one the loader read (`LoadSpec.workload_document`),
    or, for a stored study's relative path, the file beside `base_dir`."""
    from kvtune.safety.workload import check_workload_file

    p = Path(load.workload_file)
    try:
        if not p.is_absolute() and base_dir is not None:
            return check_workload_file(str(base_dir / p))
        return dict(load.workload_document() or {})
    except ValueError as e:
        raise NoFeatures(f"load.workload_file: {e}") from None


def of_model(doc: Mapping[str, Any], rate: float | None = None) -> dict[str, float]:
    """The features of a kvload workload document (a model, or the study's settings in its
    keys: mix, value_size, popularity, keys, mget_size, ttl, key_buckets). Raises
    NoFeatures when a value cannot be read."""
    try:
        mix = _mix(str(doc.get("mix", "get:9,set:1")))
        keys = int(doc.get("keys") or 10_000)
        out = {
            "read_share": mix.get("get", 0.0) + mix.get("mget", 0.0),
            "write_share": mix.get("set", 0.0),
            "delete_share": mix.get("delete", 0.0),
            "mget_share": mix.get("mget", 0.0),
            "log2_fanout": math.log2(max(1, int(doc.get("mget_size") or 10)))
            if mix.get("mget", 0.0) > 0 else 0.0,
            "log10_value": math.log10(max(1.0, _mean_value(doc))),
            "zipf": zipf_equivalent(str(doc.get("popularity", "uniform")), keys),
            "ttl_share": _ttl_share(doc) if mix.get("set", 0.0) > 0 else 0.0,
            "log10_keys": math.log10(max(1, keys)),
        }
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as e:
        raise NoFeatures(f"the workload cannot be read into features: {e}") from None
    if rate is not None and rate > 0:
        out["log10_rate"] = math.log10(rate)
    return {k: round(float(v), 6) for k, v in out.items() if math.isfinite(v)}


def _mix(text: str) -> dict[str, float]:
    items: dict[str, float] = {}
    for part in text.split(","):
        verb, _, w = part.partition(":")
        verb = {"multiget": "mget", "del": "delete"}.get(verb.strip(), verb.strip())
        items[verb] = items.get(verb, 0.0) + float(w or 1)
    total = sum(items.values())
    if total <= 0:
        raise ValueError(f"mix {text!r} has no positive weight")
    return {k: v / total for k, v in items.items()}


def _spec_mean(spec: Any) -> float:
    text = str(spec)
    if text in ("etc", "fb_value"):
        return 330.0  # the ETC distribution's mean (GPD tail, capped at 1 MiB), about
    if text.startswith("list:"):
        pairs = [p.split(":") for p in text[5:].split(",")]
        total = sum(float(w) for _, w in pairs)
        return sum(parse_size(v) * float(w) for v, w in pairs) / total
    if "-" in text:
        a, b = text.split("-", 1)
        return (parse_size(a) + parse_size(b)) / 2
    return parse_size(text)


def _mean_value(doc: Mapping[str, Any]) -> float:
    """The mean value size per key: over the key buckets when the model keeps sizes per
    key (each bucket's mean weighted by its keys), else the per-request sizes' mean."""
    buckets = doc.get("key_buckets")
    if isinstance(buckets, list) and buckets and all(
            isinstance(b, dict) and "value_size" in b for b in buckets):
        keys = sum(float(b["keys"]) for b in buckets)
        return sum(_spec_mean(b["value_size"]) * float(b["keys"]) for b in buckets) / keys
    return _spec_mean(doc.get("value_size", 100))


def _ttl_share(doc: Mapping[str, Any]) -> float:
    text = str(doc.get("ttl", "0"))
    if text.startswith("list:"):
        pairs = [p.split(":") for p in text[5:].split(",")]
        total = sum(float(w) for _, w in pairs)
        return sum(float(w) for v, w in pairs if float(v) > 0) / total
    return 1.0 if float(text) > 0 else 0.0


def zipf_equivalent(popularity: str, keys: int) -> float:
    """The Zipf exponent of a popularity: its own for `zipf:S`, 0 for uniform, else the
    exponent whose hottest HOT_FRACTION of `keys` keys get the share of requests the
    table or hot set gives them."""
    if popularity == "uniform":
        return 0.0
    if popularity.startswith("zipf:"):
        return float(popularity[5:])
    head = max(1, round(HOT_FRACTION * keys))
    if popularity.startswith("hotset:"):
        kf, rf = (float(x) for x in popularity[7:].split(":"))
        hot = max(1.0, kf * keys)
        share = rf * min(1.0, head / hot)
    elif popularity.startswith("table:"):
        pairs = [(float(k), float(m)) for k, m in
                 (p.split(":") for p in popularity[6:].split(","))]
        total_k = sum(k for k, _ in pairs)
        total_m = sum(m for _, m in pairs)
        want = head * total_k / keys
        share, seen = 0.0, 0.0
        for k, m in pairs:
            take = min(k, max(0.0, want - seen))
            share += m / total_m * (take / k if k else 0.0)
            seen += k
        if not total_k:
            return 0.0
    else:
        raise ValueError(f"popularity {popularity!r}")
    return _solve_zipf(share, keys, head)


def _solve_zipf(share: float, keys: int, head: int) -> float:
    import numpy as np
    from scipy.optimize import brentq

    n = min(keys, 1_000_000)  # a larger keyspace changes the head's share little
    head = max(1, round(head * n / keys))
    ranks = np.arange(1, n + 1, dtype=float)
    uniform = head / n
    if share <= uniform:
        return 0.0

    def f(s: float) -> float:
        w = ranks ** -s
        return float(w[:head].sum() / w.sum()) - share

    if f(4.0) < 0:
        return 4.0
    return float(brentq(f, 0.0, 4.0, xtol=1e-4))

