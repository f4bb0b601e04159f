"""The study's headline: the one thing a person can act on, decided once, from the stored
confirmation and ablation, and rendered by every screen (the terminal after `tune` and
`show`, `show --json`, the HTML report, `export`'s default choice and its header, and the
"Next:" commands). Screens render it; none decides its own words.

One of:

- **ship**: the confirmed configuration, whose comparison with the defaults is
  significant (its change and interval are quoted);
- **ship_smaller**: only the changes that carry the gain (the ablation measured them alone
  against the defaults: significant, and the rest added nothing measurable);
- **keep_defaults**: nothing was confirmed better than the defaults, and a change large
  enough to matter would have shown;
- **not_decided**: the best candidate leans better but its interval still spans no change,
  or nothing was confirmed yet, or no confirmation round measured the defaults (the host
  spoiled them): what more measuring would settle it, and about how long;
- **pick** (a Pareto study: the person picks from the confirmed front), **failed** (the
  defaults themselves could not be measured).

The rule that removes the contradiction of earlier screens: a smaller change is headlined
only when its own comparison with the defaults is significant. When the ablation chose it
but its own rounds could not show it better than the defaults, the headline ships the
confirmed configuration (which was shown better) and says in one sentence why the smaller
one is not shipped yet.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from kvtune import present
from kvtune.documents import Ablation, ChangeRecord, Confirmation, StoredComparison
from kvtune.metrics import Direction

# The headline when no confirmation round measured the defaults (tests read it too).
DEFAULTS_UNMEASURED = ("Not decided: the confirmation could not measure the defaults (every "
                       "round of theirs failed or was spoiled by the host); nothing was "
                       "compared with them.")

Action = Literal["ship", "ship_smaller", "keep_defaults", "not_decided", "pick", "failed"]

# A best candidate whose interval spans no change is "not decided" while the rounds that
# would settle it stay within this many per arm; beyond, the defaults are kept (a change
# that small is not worth shipping on this host's noise).
MAX_ROUNDS_TO_SETTLE = 40


def rounds_to_show(gain: float, lo: float, hi: float, n: int, df: int | None,
                   level: float | None, limit: int = 10_000) -> float:
    """Rounds per arm at which an interval like this one (`lo` … `hi` around `gain`,
    relative changes, from `n` rounds) would no longer span no change, the per-round
    spread staying what these rounds showed: what more measuring would take to show
    `gain` if it is real (about half the time: at that many rounds the interval's lower
    end sits at no change). math.inf when the gain is not positive or beyond `limit`.

    The comparisons are of ratios: the interval is symmetric on the log scale, and its
    half-width is q·sd/√n, q the normal quantile or, for a t interval (`df`, rounds − 1),
    Student's t at df — which falls fast from few rounds on (12.7 at 1 degree of freedom,
    4.3 at 2, 2.0 at 40 for a 95% interval), so projecting with 1/√n alone would ask up to
    40 times the rounds."""
    from scipy import special

    if not gain > 0 or not lo > -1 or not hi > -1 or n < 1:
        return math.inf
    centre = math.log1p(gain)
    half = (math.log1p(hi) - math.log1p(lo)) / 2
    if not half > 0:
        return float(n)
    p = 0.5 + (level if level is not None and 0 < level < 1 else 0.95) / 2
    if df is None:  # a normal (or bootstrap) interval: q stays, the width goes as 1/√n
        need = n * (half / centre) ** 2
        return float(max(n, math.ceil(need))) if need <= limit else math.inf
    lost = n - 1 - df  # rounds the t's degrees of freedom do not count (0: df = n − 1)
    sd = half * math.sqrt(n) / float(special.stdtrit(df, p))

    def width(m: int) -> float:
        return float(special.stdtrit(max(m - 1 - lost, 1), p)) * sd / math.sqrt(m)

    if width(limit) >= centre:
        return math.inf
    if width(n) < centre:
        return float(n)
    # The half-width falls with m: the first m where it is below the gain (bisection).
    a, b = n, limit
    while b - a > 1:
        mid = (a + b) // 2
        a, b = (a, mid) if width(mid) < centre else (mid, b)
    return float(b)


@dataclass(frozen=True)
class Headline:
    """What to do, in one sentence (`text`), with what backs it."""

    action: Action
    text: str
    # knob → value to ship (only what differs from the defaults); empty when nothing is
    # shipped.
    changes: dict[str, Any] = field(default_factory=dict)
    # "full" (the confirmed configuration), "minimal" (the ablation's), or None.
    chosen: Literal["full", "minimal"] | None = None
    # The comparison with the defaults that backs it (present.change_record's fields).
    comparison: dict[str, Any] | None = None
    why: str = ""
    # What more measuring would settle it, and about how long (not_decided).
    settle: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _record(comp: StoredComparison | ChangeRecord | None, metric: str,
            direction: Direction | None) -> dict[str, Any] | None:
    """A stored comparison (a candidate's, or an ablation's change record) as one change
    record: metric, change, interval, the word the interval decides."""
    if comp is None:
        return None
    if isinstance(comp, ChangeRecord):  # already a change record
        return comp.stored()
    ci = (comp.change_ci_low, comp.change_ci_high)
    return present.change_record(metric, comp.change, direction,
                                 ci if None not in ci else None)


def _changes(config: Mapping[str, Any], baseline: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if baseline.get(k) != v}


def _names(changes: Mapping[str, Any], baseline: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {present.fmt(baseline.get(k))} → {present.fmt(v)}"
                     for k, v in changes.items()) or "no change"


def _duration(rounds: int, arms: int, seconds_per_rep: float | None) -> str:
    what = f"about {rounds} more {'round' if rounds == 1 else 'rounds'} of {arms} arms"
    if not seconds_per_rep or seconds_per_rep <= 0:
        return what
    return f"{what}, {present.duration(rounds * arms * seconds_per_rep)}"


def decide(confirmation: Confirmation | None, ablation: Ablation | None,
           *, metric: str, direction: Direction | None, study: str,
           baseline_failed: str | None = None, measured: bool = True,
           seconds_per_rep: float | None = None) -> Headline:
    """The headline of a study from its stored confirmation and ablation (module
    docstring; the typed documents `kvtune.store` reads). `measured`: whether any trial of
    the search finished; `seconds_per_rep`: how long one repetition took (for "about how
    long")."""
    conf = confirmation
    if baseline_failed:
        return Headline("failed", "The study failed: the defaults could not be measured "
                        f"({baseline_failed}); nothing was compared.",
                        why=str(baseline_failed))
    if conf is None and not measured:
        return Headline("not_decided", "Not decided: no trial of the search finished, so "
                        "nothing was compared with the defaults.",
                        why="a study decides only by comparing with the defaults",
                        settle="running `kvtune tune` on the study file again resumes it")
    if conf is None:
        return Headline("not_decided", "Not decided: nothing is confirmed yet; the search's "
                        "best is one noisy estimate.",
                        why="only the interleaved confirmation against the defaults decides",
                        settle="`kvtune tune` on the study file (without --no-confirm) "
                               "confirms the best candidates against the defaults")
    if conf.multi:
        trials = ", ".join(str(t) for t in conf.front)
        return Headline("pick", ("Pick from the confirmed front: trials " + trials
                                 + f" (`kvtune export {study} --trial N`)." if trials else
                                 "Keep the defaults: no candidate of the front was "
                                 "confirmed against them."),
                        why="a study of several objectives has no single best")
    base_cfg = dict(conf.baseline.config) if conf.baseline else {}
    rec = conf.recommended
    if rec is not None:
        full = _changes(dict(rec.config), base_cfg)
        full_cmp = _record(rec.comparison, metric, direction)
        if rec.text:  # trade-offs and constraints named by the confirmation
            full_cmp = {**(full_cmp or {}), "text": rec.text}
        choice = ablation.chosen if ablation is not None else None
        full_text = (full_cmp or {}).get("text") or conf.verdict
        if choice is not None and choice.chosen == "minimal":
            small = dict(choice.changes)
            gain = choice.minimal_gain
            if gain is not None and gain.verdict == "better":
                left = [x.knob for x in choice.left_out]
                extra = choice.extra.text if choice.extra else present.NO_SIGNIFICANT_CHANGE
                return Headline(
                    "ship_smaller",
                    f"Ship only {_names(small, base_cfg)}: {gain.text} against the "
                    f"defaults; the rest ({', '.join(left) or 'none'}) adds "
                    "nothing measurable.",
                    changes=small, chosen="minimal", comparison=gain.stored(),
                    why=("the ablation measured these changes alone, in their own rounds "
                         "against the defaults and the whole: the whole was not better "
                         f"({extra})"))
            gtxt = gain.text if gain is not None else "not measured"
            return Headline(
                "ship",
                f"Ship {_names(full, base_cfg)}: {full_text}.",
                changes=full, chosen="full", comparison=full_cmp,
                why=(f"the ablation found that {', '.join(small)} carries most of the gain, "
                     f"but alone it was not shown better than the defaults in its "
                     f"{choice.rounds or 0} rounds ({gtxt}); the whole configuration was"),
                settle=f"`kvtune export {study} --minimal` writes the smaller change "
                       "(unconfirmed alone)")
        return Headline("ship", f"Ship {_names(full, base_cfg)}: {full_text}.",
                        changes=full, chosen="full", comparison=full_cmp,
                        why="confirmed against the defaults in interleaved rounds, "
                            "Holm-adjusted across the candidates")
    if conf.candidates and conf.baseline is not None and not conf.baseline.samples \
            and all(c.comparison is None or not c.comparison.n_baseline
                    for c in conf.candidates):
        # No round measured the defaults (each failed, or the host spoiled it): nothing was
        # compared, so nothing can be kept or shipped for what a candidate measured.
        return Headline("not_decided", DEFAULTS_UNMEASURED,
                        why="the confirmation compares each candidate with the defaults "
                            "measured in the same rounds, and none of the defaults' rounds "
                            "counted (its lines above say why)",
                        settle="measuring again when the host is quieter (its noise facts "
                               "are below; `kvtune run` on the study file measures the "
                               "defaults alone)")
    # Nothing recommended: the best candidate's lean and the rounds that would settle it.
    best, best_gain = None, -math.inf
    for c in conf.candidates:
        g = c.comparison.improvement if c.comparison else None
        if g is not None and g > best_gain:
            best, best_gain = c, g
    if best is None or best_gain <= 0:
        return Headline("keep_defaults", "Keep the defaults: no candidate measured better "
                        "than them in the confirmation.",
                        comparison=_record(best.comparison if best else None, metric,
                                           direction),
                        why="every confirmed candidate measured the same or worse")
    comp = best.comparison
    assert comp is not None  # it has the best gain
    rec_c = _record(comp, metric, direction)
    lo, hi, n = comp.ci_low, comp.ci_high, comp.n_candidate
    name = best.label
    text = (rec_c or {}).get("text", "")
    if lo is None or hi is None or n < 2:
        return Headline("keep_defaults", f"Keep the defaults: {name} was not measured in "
                        "enough rounds to compare.", comparison=rec_c,
                        why="its confirmation rounds failed")
    if lo > 0:
        # Its interval excludes no change, yet it is not recommended: a constraint it
        # breaks, the study's own test (Holm at its alpha), or its smallest gain worth
        # shipping — said as such, never "more rounds" for an interval that spans nothing.
        violated = [k.text or k.constraint for k in best.constraints
                    if k.status == "violated"]
        if violated:
            return Headline("keep_defaults",
                            f"Keep the defaults: the best candidate, {name}, measured {text}, "
                            f"but {'; '.join(violated)}.",
                            comparison=rec_c,
                            why="a candidate that breaks a constraint of the study is not "
                                "shipped, whatever it gains")
        p_adj, alpha = best.p_adjusted, conf.alpha
        if p_adj is not None and alpha is not None and p_adj >= alpha:
            return Headline("not_decided",
                            f"Not decided: the best candidate, {name}, measured {text}, but "
                            f"its Holm-adjusted p ({present.p_value(p_adj)}) is not below the "
                            f"study's alpha ({alpha:g}).",
                            comparison=rec_c,
                            why="the study asks for its alpha across the candidates (Holm); "
                                "an interval that excludes no change is not that test",
                            settle="more confirmation rounds (evaluation.confirm_rounds) or "
                                   "fewer candidates (evaluation.confirm_top)")
        return Headline("keep_defaults",
                        f"Keep the defaults: the best candidate, {name}, measured {text}, "
                        "below the smallest gain the study ships (evaluation.min_improvement).",
                        comparison=rec_c,
                        why="its interval does not clear evaluation.min_improvement")
    # What more measuring would take to show this gain, if it is real.
    need = rounds_to_show(best_gain, lo, hi, n, comp.df, comp.ci_level)
    more = max(1, int(need) - n) if need != math.inf else None
    if more is None or more > MAX_ROUNDS_TO_SETTLE:
        return Headline("keep_defaults",
                        f"Keep the defaults: the best candidate, {name}, measured {text}; a "
                        "gain that small is below what this host's noise can show.",
                        comparison=rec_c,
                        why=(f"showing it would take about {int(need)} rounds per arm"
                             if need != math.inf else
                             "no number of rounds at this spread would show it"),
                        settle=None)
    arms = 1 + len(conf.candidates)
    return Headline("not_decided",
                    f"Not decided: the best candidate, {name}, measured {text}; more rounds "
                    "would settle it.",
                    comparison=rec_c,
                    why="its interval still spans no change",
                    settle=(f"{_duration(more, arms, seconds_per_rep)}: a confirmation of "
                            f"{n + more} rounds (evaluation.confirm_rounds) would show this "
                            "gain if it is real"))
