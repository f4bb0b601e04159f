"""The canary's verdict at one look: the goal and the guardrails, each judged on its
metric's paired per-interval differences (canary - control, watch.difference) with an
interval valid at every look (canary/sequence.py: an asymptotic confidence sequence with
the series' long-run variance, AR(1)-prewhitened, for looks correlated with each other;
Bonferroni over the rules: each at alpha / rules, so the chance that any rule is wrongly
decided at any look stays at most alpha).

    "p99 not worse than +5%"        a guardrail: breached when the interval of the change
                                    lies wholly beyond +5% worse, held when wholly within
    "hit_ratio not worse than 0.01" on a "diff" metric the margin is in its own unit
    "errors not worse"              margin 0
    "cpu_per_request better"        the goal: met when the interval is wholly better,
                                    failed when wholly worse

Outcomes: roll back (a guardrail breached, or the goal significantly worse), promote (the
goal met, or none given, and every guardrail held), keep watching (with the looks the
deciding rule needs at the present estimate), inconclusive (at the time limit)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from kvtune import present
from kvtune.canary import sequence
from kvtune.canary.watch import METRICS, Metric
from kvtune.errors import UserError
from kvtune.stats import Sequential

PROMOTE, ROLL_BACK, WATCH, INCONCLUSIVE = "promote", "roll back", "keep watching", \
    "inconclusive"
# Guardrails kvtune watches when the operator names none (margins in each metric's terms).
# A zero margin is held only while neither side has any (an interval of a count that is
# not always 0 straddles 0 for ever): the defaults allow one error in 10,000 requests and
# one refused connection in 10 s.
DEFAULT_GUARDRAILS = ("cpu_per_request not worse than +10%", "hit_ratio not worse than 0.01",
                      "errors not worse than 0.1", "refused not worse than 0.1")
LATENCY_GUARDRAIL = "p99 not worse than +10%"
PROBE_GUARDRAIL = "probe_p99 not worse than +10%"

_RULE = re.compile(r"^\s*(?P<metric>[a-z_0-9]+)\s+(?P<what>better|not worse"
                   r"(?:\s+than\s+(?P<margin>\S+))?)\s*$")


@dataclass(frozen=True)
class Rule:
    """A goal ("better") or a guardrail ("not worse [than MARGIN]") on one metric; `margin`
    is the worsening allowed on the judged scale (log of 1 + the fraction, or the metric's
    unit), >= 0."""

    metric: Metric
    goal: bool
    margin: float
    text: str


def parse_rule(text: str, where: str, metrics: Sequence[str] | None = None,
               goal: bool | None = None) -> Rule:
    """A rule as written (`where` names the option or key for the message)."""
    m = _RULE.match(text)
    if not m:
        raise UserError(f"{where} {text!r}: write METRIC better, METRIC not worse or METRIC "
                        "not worse than MARGIN (\"p99 not worse than +5%\")")
    name, what, margin = m.group("metric"), m.group("what"), m.group("margin")
    known = list(metrics) if metrics is not None else list(METRICS)
    if name not in known:
        raise UserError(f"{where} {text!r}: unknown metric {name!r}; watched here: "
                        f"{', '.join(known)}")
    metric = METRICS[name]
    is_goal = what == "better"
    if goal is not None and is_goal != goal:
        raise UserError(f"{where} {text!r}: " + ("a goal says METRIC better" if goal else
                                                 "a guardrail says METRIC not worse [than "
                                                 "MARGIN]; the goal is --goal"))
    value = 0.0
    if margin is not None:
        pct = margin.endswith("%")
        if pct != (metric.scale == "log"):
            unit = ("a percentage (+5%)" if metric.scale == "log" else
                    f"a number in {metric.name}'s unit ({metric.unit}), no %")
            raise UserError(f"{where} {text!r}: the margin of {name} is {unit}")
        try:
            value = abs(float(margin.rstrip("%")))
        except ValueError:
            raise UserError(f"{where} {text!r}: {margin!r} is not a number") from None
        if not math.isfinite(value):
            raise UserError(f"{where} {text!r}: {margin!r} is not a finite margin")
        if pct:
            value = math.log1p(value / 100)
    return Rule(metric, is_goal, value, text.strip())


def _display(metric: Metric, x: float) -> float:
    """A judged-scale value as the change people read: relative on the log scale."""
    if metric.scale != "log":
        return x
    return math.expm1(x) if x < 700 else math.inf  # an early interval can be that wide


def change_text(metric: Metric, x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return present.pct(None) if metric.scale == "log" else "-"
    if metric.scale == "log":  # beyond 10,000 times the control's: not worth the digits
        return present.pct(math.expm1(x)) if x < math.log(1e4) else "> " + present.pct(1e4)
    unit = "" if metric.unit == "fraction" else f" {metric.unit}"
    return (present.number(x).replace("-", present.MINUS) if x < 0
            else "+" + present.number(x)) + unit


@dataclass(frozen=True)
class RuleState:
    """One rule at one look: the change (canary against control, on the metric's own
    scale: relative or in its unit), its interval valid at every look, and its state:
    held / breached / open for a guardrail, met / worse / open for the goal."""

    rule: Rule
    looks: int
    change: float | None
    low: float | None
    high: float | None
    state: str
    looks_to_decide: int | None  # at the present estimate and spread, None: not foreseen
    lag1: float | None

    def line(self) -> str:
        m = self.rule.metric
        if self.low is None or self.high is None:
            ci = "(interval after more looks)"
        else:
            lo, hi = sorted((self.low, self.high))
            ci = f"[{change_text(m, _judged(m, lo))} … {change_text(m, _judged(m, hi))}]"
        return (f"{m.name} {change_text(m, _judged(m, self.change))} {ci} "
                f"{self.rule.text}: {self.state}")

    def record(self) -> dict[str, object]:
        return {"metric": self.rule.metric.name, "rule": self.rule.text,
                "goal": self.rule.goal, "looks": self.looks, "change": self.change,
                "low": self.low, "high": self.high, "state": self.state,
                "looks_to_decide": self.looks_to_decide, "lag1": self.lag1}


def _judged(metric: Metric, change: float | None) -> float | None:
    if change is None:
        return None
    if metric.scale == "log":
        return math.log1p(change) if change > -1 else -math.inf
    return change


@dataclass(frozen=True)
class Verdict:
    """The outcome at one look, the rule that decides it, and every rule's state."""

    outcome: str
    why: RuleState | str  # the deciding rule (its line is written when read) or the words
    looks: int
    rules: list[RuleState] = field(default_factory=list)
    looks_to_decide: int | None = None

    @property
    def deciding(self) -> str:
        """The words of the deciding rule (a simulation's looks seldom read them)."""
        return self.why if isinstance(self.why, str) else self.why.line()

    def record(self) -> dict[str, object]:
        return {"outcome": self.outcome, "deciding": self.deciding, "looks": self.looks,
                "looks_to_decide": self.looks_to_decide,
                "rules": [r.record() for r in self.rules]}


def judge_rule(rule: Rule, diffs: Sequence[float], alpha: float, t_opt: float,
               min_looks: int, forecast: bool = True) -> RuleState:
    """One rule on its paired differences (judged scale, canary - control)."""
    return _rule_state(rule, sequence.confidence_sequence(diffs, alpha, t_opt, min_looks),
                       alpha, t_opt, forecast)


def _rule_state(rule: Rule, cs: Sequential, alpha: float, t_opt: float,
                forecast: bool) -> RuleState:
    """judge_rule on the rule's confidence sequence at this look."""
    m = rule.metric
    worse = 1.0 if m.direction.sign < 0 else -1.0  # the judged difference's worse side
    if not math.isfinite(cs.estimate):
        return RuleState(rule, cs.looks, None, None, None, "open", None, None)
    est_w = worse * cs.estimate
    lag1 = None if math.isnan(cs.lag1) else cs.lag1
    if not cs.ready:
        return RuleState(rule, cs.looks, _display(m, cs.estimate), None, None, "open", None,
                         lag1)
    lo_w, hi_w = sorted((worse * cs.low, worse * cs.high))
    threshold = 0.0 if rule.goal else rule.margin
    flat = cs.sd == 0
    if rule.goal:
        state = "met" if hi_w < 0 else "worse" if lo_w > 0 else "open"
    else:
        state = "breached" if lo_w > threshold else \
            "held" if hi_w < threshold or (flat and hi_w <= threshold) else "open"
    need = None
    if state == "open" and forecast:
        at = sequence.looks_to_exclude(est_w - threshold, cs.sd, alpha, t_opt,
                                       rho=float(sequence.rho_corrected(cs.lag1, cs.looks)))
        need = None if at is None else max(at - cs.looks, 1)
    return RuleState(rule, cs.looks, _display(m, cs.estimate), _display(m, cs.low),
                     _display(m, cs.high), state, need, lag1)


def judge(diffs: Mapping[str, Sequence[float]], rules: Sequence[Rule], alpha: float = 0.05,
          t_opt: float = 30, min_looks: int = 5, final: bool = False,
          forecast: bool = True) -> Verdict:
    """The verdict on the paired differences of each metric (judged scale, one per look),
    every rule at alpha / len(rules). `final`: the time limit is reached. Without
    `forecast`, no rule's looks to a decision are estimated (the same states, faster)."""
    each = alpha / max(len(rules), 1)
    # every rule's sequence in one pass (judge_rule's, rule by rule, costs 4-6 times more)
    seqs = sequence.confidence_sequences([diffs.get(r.metric.name, ()) for r in rules], each,
                                         t_opt, min_looks)
    states = [_rule_state(r, cs, each, t_opt, forecast) for r, cs in zip(rules, seqs,
                                                                         strict=True)]
    looks = max((s.looks for s in states), default=0)
    bad = [s for s in states if s.state in ("breached", "worse")]
    if bad:
        return Verdict(ROLL_BACK, bad[0], looks, states)
    goals = [s for s in states if s.rule.goal]
    guards = [s for s in states if not s.rule.goal]
    if all(s.state == "met" for s in goals) and all(s.state == "held" for s in guards) \
            and looks >= min_looks:
        why: RuleState | str = goals[0] if goals else "every guardrail held"
        return Verdict(PROMOTE, why, looks, states)
    open_ = [s for s in states if s.state == "open"]
    if final:
        return Verdict(INCONCLUSIVE, "; ".join(s.line() for s in open_), looks, states)
    # Foreseen: a rule leaning to a breach decides first; else promotion needs every rule.
    leaning = [s for s in open_ if s.change is not None and s.looks_to_decide is not None
               and _leans_bad(s)]
    if leaning:
        need: int | None = min(s.looks_to_decide or 0 for s in leaning)
        deciding = min(leaning, key=lambda s: s.looks_to_decide or 0)
    else:
        needs = [s.looks_to_decide for s in open_]
        need = None if any(n is None for n in needs) else max(n or 0 for n in needs)
        deciding = max(open_, key=lambda s: s.looks_to_decide or math.inf) if open_ \
            else states[0]
    if looks < min_looks:
        need = min_looks - looks
    return Verdict(WATCH, deciding, looks, states, need)


def _leans_bad(s: RuleState) -> bool:
    m, r = s.rule.metric, s.rule
    x = _judged(m, s.change)
    if x is None:
        return False
    worse = 1.0 if m.direction.sign < 0 else -1.0
    return worse * x > (0.0 if r.goal else r.margin)


# judge's rule states and outcomes as the codes of the array verdict (states_at_every_look)
STATES = ("open", "held", "breached", "met", "worse")
OPEN, HELD, BREACHED, MET, WORSE = range(len(STATES))
OUTCOMES = (WATCH, PROMOTE, ROLL_BACK)


def states_at_every_look(diffs: Mapping[str, np.ndarray], rules: Sequence[Rule],
                         alpha: float = 0.05, t_opt: float = 30, min_looks: int = 5
                         ) -> np.ndarray:
    """judge's rule states at every look of many sessions at once, for simulations of
    hundreds of sessions (the A/A checks of tests/test_canary_stats.py): `diffs` holds each
    metric's paired differences, sessions x looks, without NaNs. Returns codes into STATES,
    rules x sessions x looks: at look N, the states judge gives on the first N looks of
    each session. The intervals are sequence.prefixes' (confidence_sequence's figures to
    float rounding, 1e-6 relative); a session whose looks so far are all the same value
    has a zero-width interval at that value, as in judge."""
    each = alpha / max(len(rules), 1)
    shapes = {np.shape(x) for x in diffs.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"differences of one shape, sessions x looks, not {shapes or 'none'}")
    shape = next(iter(shapes))
    out = np.full((len(rules), *shape), OPEN, dtype=np.int8)
    for i, rule in enumerate(rules):
        if rule.metric.name not in diffs:
            continue  # no figures: open for ever, as judge has it
        x = np.asarray(diffs[rule.metric.name], dtype=float)
        if np.isnan(x).any():
            raise ValueError(f"{rule.metric.name}: NaN differences (judge them look by look)")
        m, r = sequence.prefixes(x, each, t_opt)
        flat = np.maximum.accumulate(x, axis=1) == np.minimum.accumulate(x, axis=1)
        m = np.where(flat, x[:, :1], m)
        r = np.where(flat, 0.0, r)
        worse = 1.0 if rule.metric.direction.sign < 0 else -1.0
        lo, hi = worse * (m - r), worse * (m + r)
        lo_w, hi_w = np.minimum(lo, hi), np.maximum(lo, hi)
        if rule.goal:
            state = np.where(hi_w < 0, MET, np.where(lo_w > 0, WORSE, OPEN))
        else:
            held = (hi_w < rule.margin) | (flat & (hi_w <= rule.margin))
            state = np.where(lo_w > rule.margin, BREACHED, np.where(held, HELD, OPEN))
        state[~(np.isfinite(lo) & np.isfinite(hi))] = OPEN
        state[:, :max(min_looks, 2) - 1] = OPEN  # no interval before min_looks looks
        out[i] = state
    return out


def outcomes_at_every_look(states: np.ndarray, rules: Sequence[Rule], min_looks: int = 5
                           ) -> np.ndarray:
    """judge's outcome at every look from states_at_every_look's states: codes into
    OUTCOMES (keep watching, promote, roll back; the time limit's "inconclusive" is the
    last look's keep watching), sessions x looks."""
    bad = ((states == BREACHED) | (states == WORSE)).any(axis=0)
    goal = np.array([r.goal for r in rules], dtype=bool)[:, None, None]
    settled = np.where(goal, states == MET, states == HELD).all(axis=0)
    settled[:, :min_looks - 1] = False
    return np.where(bad, OUTCOMES.index(ROLL_BACK),
                    np.where(settled, OUTCOMES.index(PROMOTE), OUTCOMES.index(WATCH)))


def false_alarm(verdicts: Sequence[Verdict]) -> bool:
    """Whether an A/A run (the same configuration on both sides) said anything at any
    look: a guardrail breached or a goal met or worse."""
    return any(s.state in ("breached", "worse", "met") for v in verdicts for s in v.rules)


def rules_for(guardrails: Sequence[str], goal: str | None, metrics: Sequence[str],
              latency: bool, where: tuple[str, str] = ("--goal", "--guardrail")
              ) -> list[Rule]:
    """The session's rules: the goal (if any) and the guardrails (the defaults when none is
    given, with the latency one for kinds with latency figures); `where` names the goal's
    and the guardrails' source in messages."""
    texts = list(guardrails) or [*DEFAULT_GUARDRAILS, *([LATENCY_GUARDRAIL] if latency
                                                        else []), PROBE_GUARDRAIL]
    # the defaults name metrics every kind has; the latency one only where it has latency
    texts = [t for t in texts if guardrails or t.split()[0] in metrics]
    out = [parse_rule(goal, where[0], metrics, goal=True)] if goal else []
    given = bool(guardrails)
    for t in texts:
        r = parse_rule(t, where[1], metrics, goal=False)
        if given or not out or r.metric != out[0].metric:  # a default yields to the goal
            out.append(r)
    names = [r.metric.name for r in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"{where[0]}/{where[1]}: {', '.join(twice)} named twice; one rule a "
                        "metric")
    return out

