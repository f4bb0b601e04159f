"""`load.workload_file`, which kvload reads: a regular file of bounded size that parses as
a kvload workload file (JSON, or TOML by its name) with known keys only, checked before any
server starts. Its `server` key is refused: load goes to the server kvtune started."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

from kvtune import durations
from kvtune.durations import is_duration, parse_duration
from kvtune.quantities import MAX_RELATIVE_TTL, SIZE, parse_size
from kvtune.safety.files import ReadRefused, read_input

MAX_BYTES = 1 << 20
TOP_KEYS = {
    "protocol", "mode", "rate", "arrival", "connections", "pipeline", "max_outstanding",
    "duration", "warmup", "cpus", "keys", "key_size", "value_size", "popularity", "mix",
    "mget_size", "seed", "preload", "timeout", "spin_us", "realtime", "max_item_size",
    "phases", "ttl", "rate_scale", "about", "key_buckets",
}
PHASE_KEYS = {"duration", "rate", "value_size", "popularity", "mix"}
MAX_PHASES = 1000
BUCKET_KEYS = {"keys", "value_size", "ttl"}
MAX_KEY_BUCKETS = 4096  # kvload's bound (kvload/src/config/spec.rs)


class NotKvloadJson(ValueError):
    """JSON that Python's parser takes and kvload's (serde_json) refuses."""


def _no_constant(word: str) -> Any:
    raise NotKvloadJson(f"{word} is not a JSON number")


def _no_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise NotKvloadJson(f"key {k[:40]!r} given twice")
        out[k] = v
    return out


def strict_json(text: str) -> Any:
    """JSON as kvload's parser (serde_json) reads it: NaN and Infinity are not JSON, and a
    key given twice is refused (Python's json took both, the last winning; serde refuses
    the file). ValueError otherwise."""
    return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_twice)


def check_workload_file(name: str) -> dict[str, Any]:
    """The workload file `name`, parsed, when kvload may read it: a regular file outside
    /proc, /sys and /dev of at most MAX_BYTES (read with that bound), with known keys and
    values kvload reads within their bounds. Raises ValueError naming what is wrong (never
    the file's content)."""
    if not name or any(c in name for c in "\x00\n\r") or len(name) > 4096:
        raise ValueError("not a file name")
    p = Path(name)
    try:
        data = read_input(name, MAX_BYTES, "workload file")
    except ReadRefused as e:
        raise ValueError(str(e).removeprefix("workload file: ")) from None
    try:
        text = data.decode("utf-8")
        doc: Any = tomllib.loads(text) if p.suffix == ".toml" else strict_json(text)
    except NotKvloadJson as e:
        raise ValueError(f"{name}: {e} (kvload's JSON parser refuses the file)") from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        kind = "TOML" if p.suffix == ".toml" else "JSON"
        raise ValueError(f"{name} is not a {kind} workload file (see docs/kvload.md)") \
            from None
    if not isinstance(doc, dict):
        raise ValueError(f"{name}: a workload file is a JSON object of kvload settings")
    if "server" in doc:
        raise ValueError(f"{name}: key 'server' is refused: kvtune sends the load to the "
                         "server it started")
    unknown = sorted(str(k) for k in doc if k not in TOP_KEYS)
    if unknown:
        raise ValueError(f"{name}: unknown key(s) {', '.join(unknown)[:200]}")
    for key, value in doc.items():
        problem = value_problem(str(key), value)
        if problem:
            raise ValueError(f"{name}: {key}: {problem}")
    phases = doc.get("phases", [])
    if not isinstance(phases, list) or len(phases) > MAX_PHASES:
        raise ValueError(f"{name}: phases must be a list of at most {MAX_PHASES} phases")
    for i, ph in enumerate(phases):
        if not isinstance(ph, dict):
            raise ValueError(f"{name}: phases[{i}] is not an object")
        bad = sorted(str(k) for k in ph if k not in PHASE_KEYS)
        if bad:
            raise ValueError(f"{name}: phases[{i}]: unknown key(s) {', '.join(bad)[:200]}")
        for key, value in ph.items():
            problem = value_problem(str(key), value)
            if problem:
                raise ValueError(f"{name}: phases[{i}].{key}: {problem}")
        # kvload's own rules for a phase (kvload/src/config): its duration is required and
        # positive (the run budget is the sum of them).
        if "duration" not in ph or parse_duration(ph["duration"], zero=True) == 0:
            raise ValueError(f"{name}: phases[{i}].duration: a phase needs a positive "
                             "duration")
    return doc


# The values kvload reads, each to the grammar kvload parses (docs/kvload.md), so that a bad
# captured or hand-edited model stops a study before a server starts.
_NUM = r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?"
_SIZE = SIZE
_LIST = rf"list:{_SIZE}:{_NUM}(,{_SIZE}:{_NUM}){{0,4095}}"
_GRAMMAR = {
    "protocol": r"memcache|meta|resp",
    "mode": r"open|closed",
    "arrival": r"poisson|fixed|etc",
    "popularity": rf"uniform|zipf:{_NUM}|hotset:{_NUM}:{_NUM}|"
                  rf"table:{_SIZE}:{_NUM}(,{_SIZE}:{_NUM}){{0,4095}}",
    "key_size": rf"{_SIZE}|etc|fb_key|{_LIST}",
    "value_size": rf"{_SIZE}|{_SIZE}-{_SIZE}|etc|fb_value|{_LIST}",
    "ttl": rf"[0-9]{{1,7}}|{_LIST}",
    "mix": rf"(get|mget|set|delete):{_NUM}(,(get|mget|set|delete):{_NUM}){{0,3}}",
    "cpus": r"[0-9]{1,4}(-[0-9]{1,4})?(,[0-9]{1,4}(-[0-9]{1,4})?){0,255}",
    "max_item_size": _SIZE,
}
_DURATIONS = ("duration", "warmup", "timeout")
_INTS = {"connections": (1, 100_000), "pipeline": (1, 65536), "max_outstanding": (1, 65536),
         "keys": (1, 10**12), "mget_size": (1, 1024), "seed": (0, 2**64 - 1),
         "spin_us": (0, 10**6)}
# Sizes kvload allocates from (its value buffer, its keys): the same bounds kvload checks
# before it allocates (kvload/src/config, MAX_ITEM_BYTES and MAX_KEY_BYTES).
MAX_ITEM_BYTES = 1 << 30  # memcached's -I tops out at 1 GiB; Redis bulk strings at 512 MiB
MAX_KEY_BYTES = 65535
MAX_TABLE_KEYS = 10**12


def size_problem(key: str, text: str) -> str | None:
    """A size out of its bound in a value kvload reads (`value_size`, `key_size`,
    `max_item_size`, a popularity table's key counts), named with the bound; None when
    every size is within it. `text` already matches the grammar."""
    if key in ("value_size", "max_item_size"):
        bound, what = MAX_ITEM_BYTES, "1 GiB (kvload's item bound)"
    elif key == "key_size":
        bound, what = MAX_KEY_BYTES, f"{MAX_KEY_BYTES} bytes (kvload's key bound)"
    elif key == "popularity" and text.startswith("table:"):
        total = sum(parse_size(p.split(":")[0]) for p in text[6:].split(","))
        if total > MAX_TABLE_KEYS:
            return f"a table of {total} keys: more than kvload's bound of {MAX_TABLE_KEYS}"
        return None
    else:
        return None
    if text in ("etc", "fb_key", "fb_value"):
        return None
    body = text[5:] if text.startswith("list:") else text
    sizes = [parse_size(p.split(":")[0]) for p in body.split(",")] if text.startswith("list:") \
        else [parse_size(p) for p in body.split("-")]
    top = max(sizes)
    if top > bound:
        return f"{top} bytes: more than {what}"
    return None


def value_problem(key: str, value: Any) -> str | None:
    """What is wrong with one value of a workload file, or None. Never quotes the value."""
    import re

    if key in ("about", "phases"):
        return None if key == "phases" or isinstance(value, dict) else "not an object"
    if key == "key_buckets":
        return _buckets_problem(value)
    if key in ("preload", "realtime"):
        return None if isinstance(value, bool) else "not true or false"
    if key in _INTS:
        lo, hi = _INTS[key]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            return f"not an integer between {lo} and {hi}"
        return None
    if key in _DURATIONS:  # kvload's duration grammar, owned by kvtune.durations
        if isinstance(value, bool) or not isinstance(value, str | int | float) or (
                isinstance(value, str) and len(value) > 100) or \
                not is_duration(value, zero=True):
            return f"not {durations.FORMS}"
        return None
    if key in ("rate", "rate_scale"):
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not 0 < value <= 1e9:
            return "not a positive number"
        return None
    if key in _GRAMMAR:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            return "not a string or a number"
        text = _as_kvload_reads(value)
        if text is None or len(text) > 200_000 or not re.fullmatch(_GRAMMAR[key], text):
            return "not in the form kvload reads (docs/kvload.md)"
        problem = _weights_problem(key, text)
        if problem:
            return problem
        if text.startswith("table:") and any(
                parse_size(p.split(":")[0]) == 0 for p in text[6:].split(",")):
            return "a bucket of 0 keys"
        if key == "ttl":
            top = max((parse_size(p.split(":")[0]) for p in text[5:].split(",")) if
                      text.startswith("list:") else [int(text)])
            if top > MAX_RELATIVE_TTL:
                return "a TTL beyond 30 days (the memcache protocol reads it as an absolute time)"
        return size_problem(key, text)
    return None


def _as_kvload_reads(value: str | int | float) -> str | None:
    """A value as the text kvload parses from it (kvload's `Scalar::as_string`: a number
    with no fraction as an integer, another as written), None for no number kvload reads
    (NaN, an infinity, an integer beyond 64 bits)."""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        if value.is_integer():
            value = int(value)
        else:
            return repr(value)
    return str(value) if abs(value) < 2**63 else None


def _weights_problem(key: str, text: str) -> str | None:
    """kvload's rules for the numbers inside a value that matches its grammar
    (kvload/src/config/spec.rs: Mix::parse, Popularity::parse, parse_weighted): every
    weight finite (1e999 is infinite), a mix and a list with a positive total, a Zipf
    exponent finite, a hot set's key fraction inside (0, 1) and its request fraction in
    [0, 1]. None when kvload takes it."""
    if key == "mix" or text.startswith(("list:", "table:")):
        body = text if key == "mix" else text.split(":", 1)[1]
        weights = [float(p.split(":")[1]) for p in body.split(",")]
        if not all(math.isfinite(w) for w in weights):
            return "a weight beyond any number (kvload reads it as infinite)"
        if sum(weights) <= 0:
            return "no positive weight"
    elif text.startswith("zipf:"):
        if not math.isfinite(float(text[5:])):
            return "a Zipf exponent beyond any number"
    elif text.startswith("hotset:"):
        k, r = (float(x) for x in text[7:].split(":"))
        if not (0 < k < 1 and 0 <= r <= 1):
            return "a hot set's key fraction must be inside (0, 1) and its request " \
                   "fraction in [0, 1]"
    return None


def _buckets_problem(value: Any) -> str | None:
    """What is wrong with `key_buckets` (sizes and TTLs per popularity bucket), or None."""
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_KEY_BUCKETS:
        return f"not a list of 1 to {MAX_KEY_BUCKETS} buckets"
    total = 0
    for i, b in enumerate(value):
        if not isinstance(b, dict):
            return f"[{i}] is not an object"
        bad = sorted(str(k) for k in b if k not in BUCKET_KEYS)
        if bad:
            return f"[{i}]: unknown key(s) {', '.join(bad)[:200]}"
        if "keys" not in b:
            return f"[{i}]: keys is missing"
        for k in ("keys", "value_size", "ttl"):
            if k in b:
                problem = value_problem(k, b[k])
                if problem:
                    return f"[{i}].{k}: {problem}"
        total += int(b["keys"])
    if total > MAX_TABLE_KEYS:
        return f"{total} keys: more than kvload's bound of {MAX_TABLE_KEYS}"
    return None
