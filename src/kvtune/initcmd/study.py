"""The study file `kvtune init` writes: commented, one decision a comment, every value one
the loader accepts (the text is parsed by the loader before it is written)."""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass, field

from kvtune.initcmd.cpus import Placement, cpu_list


@dataclass
class Plan:
    """What the study file says."""

    name: str
    kind: str
    label: str
    placement: Placement
    knobs: list[str]  # YAML lines of the knobs section (kinds/<kind>/init.py)
    objective: str  # a metric
    slo: str | None  # "p99_us <= 1000"
    config: str | None = None  # target.config, as the study file writes it
    config_how: str = ""
    binary: str | None = None
    source: list[str] = field(default_factory=list)  # where the server was read from
    workload_file: str | None = None  # a captured model, relative to the study
    rate: float | None = None  # an open-loop rate for a non-capacity objective
    quick: bool = False


def _q(text: str) -> str:
    """A YAML scalar in double quotes (JSON's escaping is YAML's)."""
    return json.dumps(text, ensure_ascii=False)


def _comment(text: str) -> str:
    """A comment's text: control characters out (a path or a user name may hold them)."""
    return re.sub(r"[\x00-\x1f\x7f]", "?", text)


def _wrapped(text: str, indent: str = "") -> list[str]:
    """`text` as comment lines of at most 92 columns."""
    return textwrap.wrap(_comment(text), 92, initial_indent=f"{indent}# ",
                         subsequent_indent=f"{indent}#   ", break_on_hyphens=False,
                         break_long_words=False)


def render(p: Plan) -> str:
    """The study file's text."""
    quick = p.quick
    out = [f"# kvtune study of your own {p.label} server, written by `kvtune init`.",
           "# Read it, change what you know better, then: kvtune check FILE, kvtune run FILE"
           " (its",
           "# capacity now), kvtune tune FILE (README.md, \"Your own server\").",
           *[ln for s in p.source for ln in _wrapped(s)],
           f"study: {p.name}",
           "target:",
           f"  kind: {p.kind}"]
    if p.binary:
        out.append(f"  binary: {_q(p.binary)}")
    if p.config:
        out += [f"  config: {_q(p.config)}",
                *_wrapped(f"^ {p.config_how}: the baseline (trial 0 is what you run) "
                          "and the file `kvtune export` merges the recommendation into; "
                          "where it listens, its user and its files are replaced by "
                          "kvtune's own (kvtune check lists each)", "  ")]
    out += [f"  cpus: \"{cpu_list(p.placement.server)}\"",
            *[ln for w in p.placement.why for ln in _wrapped(w, "  ")]]
    out += ["load:"]
    if p.objective == "capacity" or p.rate is None:
        out.append("  mode: open                      # open-loop steps of a knee search")
    else:
        out += ["  mode: open", f"  rate: {p.rate:g}                     # requests/s"]
    if quick:
        out += ["  connections: 4",
                "  duration: 400ms                 # --quick: short windows, to try the steps",
                "  warmup: 100ms",
                "  window: 100ms"]
    else:
        out += ["  connections: 16",
                "  duration: 1500ms                # each step's measured window ...",
                "  warmup: 500ms                   # ... after its own warm-up"]
    out.append(f"  cpus: \"{cpu_list(p.placement.load)}\"                       "
               "# the load's CPUs: never the server's")
    if p.workload_file:
        out += [f"  workload_file: {_q(p.workload_file)}",
                "  # ^ your live traffic, captured by kvtune init --capture (kvtune workload "
                "describe shows it)"]
    else:
        out += ["  # A stand-in for your traffic: capture it (kvtune init --capture 60s, or",
                "  # kvtune workload capture) or write your mix, sizes and popularity here.",
                "  workload:",
                f"    keys: {2000 if quick else 20000}",
                "    value_size: 200",
                "    popularity: \"zipf:0.99\"",
                "    mix: \"mget:9,set:1\"            # multi-gets keep the server, not the "
                "client, the limit",
                "    mget_size: 16"]
    out += ["knobs:                            # names from `kvtune knobs`",
            *[f"  {k}" for k in p.knobs]]
    if p.objective == "capacity":
        assert p.slo is not None
        out += ["objective:",
                "  metric: capacity                # requests/s within the SLO, higher is "
                "better",
                f"  slo: {_q(p.slo)}",
                f"  precision: {0.25 if quick else 0.03}"]
        constraints = ["errors <= 0"]
    else:
        out.append(f"objective: {p.objective}")
        constraints = ["errors <= 0", *([p.slo] if p.slo else [])]
    out += ["constraints:", *[f"  - {_q(c)}" for c in constraints]]
    if quick:
        out += ["budget: {trials: 1}                # --quick: the steps, not an answer",
                "repetitions: 1",
                "evaluation: {noise_floor_runs: 2, intensify: false, confirm_top: 1, "
                "confirm_rounds: 2,",
                "             alpha: 0.2, ablation: false, drift_every: 0}"
                "   # the one trial measured once"]
    else:
        out += ["budget:",
                "  trials: 8",
                "  time: 1h",
                "repetitions: 2                    # per trial, each on a fresh server",
                "evaluation:",
                "  noise_floor_runs: 3             # the baseline measured 3 times first",
                "  confirm_top: 1                  # then the best candidate and the "
                "baseline,",
                "  confirm_rounds: 4               # interleaved, 4 rounds",
                "  drift_every: 0"]
    out.append("seed: 1")
    return "\n".join(out) + "\n"
