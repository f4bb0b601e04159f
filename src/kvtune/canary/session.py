"""A canary session: check the canary (`kvtune verify`, when the study is named), watch the
canary and control servers look by look, judge at every look (verdict.py), and on a breach
roll the canary back through the export's own rollback file, journalled.

    plan = Plan(kind, canaries, controls, rules, interval_s=10, max_time_s=1800, ...)
    record = run(plan, say=print)       # one line per look through `say`
    record["outcome"]                   # promote, roll back, keep watching, inconclusive

Nothing is written to a server while watching: each server is read through its own stats
connection. The only change a session makes is the rollback: each setting the export
changed is put to the value its rollback file gives it (on a kind that can change it live:
Redis and Valkey `CONFIG SET`, memcached's memory limit), after the value found is
journalled (the kind's undo); once every
value reads back as the rollback says, the journal lets go of them (the rollback is meant to
stay). A session killed in the middle of it leaves them in the journal, and `kvtune
restore` puts back what the canary ran before."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kvtune import kind_registry as kinds
from kvtune import present
from kvtune.canary import sequence, watch
from kvtune.canary import verdict as vd
from kvtune.errors import HarnessError, UserError

Say = Callable[[str], None]


@dataclass(frozen=True)
class Rollback:
    """The export's own rollback for the canary's settings: the change's file and its
    rollback file (paths for people), and the settings the rollback puts back."""

    change_file: Path
    rollback_file: Path
    settings: dict[str, str]


def rollback_from_export(export_dir: Path, kind: str, reader: watch.Reader) -> Rollback:
    """The server kind's file of an export directory (`kvtune export -o DIR`) and its
    rollback under DIR/rollback/: the settings to put back (UserError when the directory
    has no such pair, or the kind cannot roll back live)."""
    family = kinds.get(kind).export_family or kind
    where = f"--export {export_dir}"
    if not export_dir.is_dir():
        raise UserError(f"{where}: not a directory (give the directory `kvtune export -o` "
                        "wrote)")
    changes = sorted(p for p in (export_dir / family).glob("*") if p.is_file()) \
        if (export_dir / family).is_dir() else []
    backs = sorted(p for p in (export_dir / "rollback" / family).glob("*") if p.is_file()) \
        if (export_dir / "rollback" / family).is_dir() else []
    if len(changes) != 1 or len(backs) != 1:
        raise UserError(f"{where}: expected one {family}/ file and its rollback under "
                        f"rollback/{family}/, found {len(changes)} and {len(backs)}")
    from kvtune.targets.server_config import read_text

    try:  # judged before they are opened (a link to a FIFO or a device), bounded
        change, back = read_text(changes[0]), read_text(backs[0])
    except ValueError as e:
        raise UserError(f"{where}: {e}") from None
    settings = reader.rollback_settings(change, back)
    if not settings:
        raise UserError(f"{where}: {changes[0]} changes no setting the rollback could put "
                        "back")
    return Rollback(changes[0], backs[0], settings)


@dataclass(frozen=True)
class Change:
    """A change from the operator's own config files: the canary's file, the control's (the
    current configuration; None when not given) and each setting they give differently:
    name -> (the canary's value, the current one or None)."""

    file: Path
    current: Path | None
    settings: dict[str, tuple[str, str | None]]


@dataclass
class Plan:
    """What a session watches and how it decides."""

    kind: str
    canaries: list[watch.Server]
    controls: list[watch.Server]
    rules: list[vd.Rule]
    interval_s: float = 10.0
    max_time_s: float = 1800.0
    warmup_looks: int = 1
    alpha: float = 0.05
    min_looks: int = 5
    aa: bool = False
    rollback: Rollback | None = None  # the export's (--export) or --current-config's
    rollback_on_breach: bool = False  # apply it on "roll back"
    verified: list[str] = field(default_factory=list)  # the verify lines, for the record
    probe_rate: float | None = None  # requests/s of the probe against each server (probe.py)
    change: Change | None = None  # the operator's config file as the change (--config)

    @property
    def planned_looks(self) -> int:
        return max(int(self.max_time_s / self.interval_s), 1)

    @property
    def t_opt(self) -> float:
        """The look at which the intervals are tightest: half the planned session."""
        return max(self.planned_looks / 2, float(self.min_looks))


def _pair_figures(reader: watch.Reader, plan: Plan, prev: list[dict[str, Any]]
                  ) -> tuple[list[dict[str, Any]], list[dict[str, float | None]]]:
    """A snapshot of every server (canary and control of each pair one after the other) and
    each server's figures since `prev` (watch.Reset when a counter went back)."""
    servers = [s for pair in zip(plan.canaries, plan.controls, strict=True) for s in pair]
    now = [watch.snapshot(reader, s) for s in servers]
    figs = [watch.interval_figures(a, b) for a, b in zip(prev, now, strict=True)] \
        if prev else []
    return now, figs


def _mean(values: list[float | None]) -> float | None:
    xs = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(xs)) if xs else None


def look_line(n: int, elapsed: float, verdict: vd.Verdict, aa: bool,
              interval_s: float) -> str:
    """The terminal line of one look: the outcome so far, how long until a decision at the
    present estimates, and what decides (its change and interval)."""
    outcome = aa_outcome(verdict) if aa else verdict.outcome
    eta = ""
    if verdict.outcome == vd.WATCH:
        k = verdict.looks_to_decide
        eta = (f" (a decision foreseen in about {k} more looks, "
               f"{seconds(k * interval_s)})" if k
               else " (no decision foreseen at the present estimates)")
    return f"look {n} at {seconds(elapsed)}: {outcome}{eta}: {verdict.deciding}"


def seconds(x: float | None) -> str:
    """A session's time for people: "2.5 s" below a minute, present.duration above."""
    if x is None or x >= 60:
        return present.duration(x)
    return f"{present.number(round(x, 1))} s"


AA_DIFFERS, AA_AGREES = "A/A: the pair differs", "A/A: the pair agrees"


def aa_outcome(verdict: vd.Verdict) -> str:
    """An A/A session's words: any rule decided other than "held" means the two servers
    differ on the same configuration, and a canary on this pair would mislead."""
    if any(s.state in ("breached", "worse", "met") for s in verdict.rules):
        return AA_DIFFERS
    if verdict.outcome in (vd.PROMOTE, vd.INCONCLUSIVE):
        return AA_AGREES
    return vd.WATCH


def run(plan: Plan, say: Say, sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Watch until a decision or the time limit; the record of the session (every look's
    figures, differences and verdict). Rolls back on a breach when the plan has a
    rollback."""
    reader = watch.reader_of(plan.kind)
    names = watch.metrics_for(reader, probe=plan.probe_rate is not None)
    servers = [s for pair in zip(plan.canaries, plan.controls, strict=True) for s in pair]
    probe = None
    if plan.probe_rate is not None:
        from kvtune.canary.probe import Probe

        probe = Probe(plan.kind, plan.probe_rate, plan.interval_s)
    diffs: dict[str, list[float]] = {n: [] for n in names}
    looks: list[dict[str, Any]] = []
    record: dict[str, Any] = {
        "kind": plan.kind, "aa": plan.aa, "alpha": plan.alpha, "interval_s": plan.interval_s,
        "max_time_s": plan.max_time_s, "canaries": [s.address for s in plan.canaries],
        "controls": [s.address for s in plan.controls],
        "rules": [r.text for r in plan.rules], "method": sequence.METHOD,
        "verified": plan.verified, "looks": looks, "dropped": [],
        "change": ({"config": str(plan.change.file), "current": str(plan.change.current)
                    if plan.change.current else None,
                    "settings": {n: list(v) for n, v in plan.change.settings.items()}}
                   if plan.change is not None else None),
        "probe_rate": plan.probe_rate}
    try:
        prev, _ = _pair_figures(reader, plan, [])
    except ConnectionError as e:
        raise UserError(f"{e}: not a {plan.kind} server answering its stats") from None
    # the t quantiles the first interval needs, now (the servers answer): importing SciPy
    # takes seconds on a busy host, which stalled the first look due an interval (and the
    # looks after it ran back to back to catch up, each measuring next to nothing)
    sequence.radius(max(plan.min_looks, 2), 1.0, plan.alpha / max(len(plan.rules), 1),
                    plan.t_opt)
    start = time.monotonic()
    deadline = start
    verdict = vd.judge(diffs, plan.rules, plan.alpha, plan.t_opt, plan.min_looks)
    n = 0
    try:
        if probe is not None:
            probe.start(servers, 0)
        while True:
            # a look that came late (a stalled host) moves the next: each interval at least
            # half of --interval, never a burst of near-empty intervals catching up
            deadline = max(deadline + plan.interval_s, time.monotonic() + plan.interval_s / 2)
            sleep(max(deadline - time.monotonic(), 0.0))
            try:
                p99s = probe.collect() if probe is not None else []
                now, figs = _pair_figures(reader, plan, prev)
                if probe is not None:
                    probe.start(servers, n + 1)
                    for f, v in zip(figs, p99s, strict=False):
                        f["probe_p99"] = v
            except ConnectionError as e:
                raise HarnessError(f"{e}: the server stopped answering its stats; the session "
                                   "ends undecided and changed nothing") from None
            except watch.Reset as e:
                prev, _ = _pair_figures(reader, plan, [])
                record["dropped"].append(f"{seconds(time.monotonic() - start)}: {e}")
                say(f"interval dropped: {e} (a server restarted or its stats were reset)")
                continue
            prev = now
            n += 1
            elapsed = time.monotonic() - start
            final = elapsed + plan.interval_s > plan.max_time_s
            if n <= plan.warmup_looks:
                say(f"look {n} at {seconds(elapsed)}: warm-up, not counted")
                if not final:
                    continue
            else:
                canary_figs, control_figs = figs[0::2], figs[1::2]
                row: dict[str, Any] = {"t_s": round(elapsed, 3), "canary": {},
                                       "control": {}, "diff": {}}
                for name in names:
                    metric = watch.METRICS[name]
                    pair_d = [watch.difference(metric, c.get(name), b.get(name))
                              for c, b in zip(canary_figs, control_figs, strict=True)]
                    d = _mean([x for x in pair_d if not math.isnan(x)])
                    diffs[name].append(math.nan if d is None else d)
                    row["canary"][name] = _mean([c.get(name) for c in canary_figs])
                    row["control"][name] = _mean([b.get(name) for b in control_figs])
                    row["diff"][name] = d
                row["requests_per_s"] = {
                    "canary": _mean([c.get("requests_per_s") for c in canary_figs]),
                    "control": _mean([b.get("requests_per_s") for b in control_figs])}
                verdict = vd.judge(diffs, plan.rules, plan.alpha, plan.t_opt,
                                   plan.min_looks, final=final)
                row["verdict"] = verdict.record()
                looks.append(row)
                say(look_line(n, elapsed, verdict, plan.aa, plan.interval_s))
            words = aa_outcome(verdict) if plan.aa else verdict.outcome
            if words in (vd.PROMOTE, vd.ROLL_BACK, AA_DIFFERS) or final:
                break
    finally:
        if probe is not None:
            probe.stop()
        watch.close_all(plan.canaries + plan.controls)
    record["outcome"] = (aa_outcome(verdict) if plan.aa else verdict.outcome)
    if record["outcome"] == vd.WATCH:  # ended by the time limit before a judged look
        record["outcome"] = vd.INCONCLUSIVE
    record["deciding"] = verdict.deciding
    if record["outcome"] == AA_AGREES:
        record["deciding"] = (f"no rule decided at any of {len(looks)} looks (each "
                              "guardrail's interval within its margin, or still open)")
    record["decided_at_s"] = looks[-1]["t_s"] if looks else 0.0
    record["rules_final"] = [s.record() for s in verdict.rules]
    if plan.probe_rate is not None and looks:
        rates = [lk["requests_per_s"][side] for lk in looks for side in ("canary", "control")
                 if lk["requests_per_s"][side]]
        share = plan.probe_rate / float(np.mean(rates)) if rates else None
        record["probe_share"] = share
        say(f"the probe sent {present.number(plan.probe_rate)} requests/s to each server: "
            f"{present.share(share, 1)} of its requests")
    lag = [s.lag1 for s in verdict.rules if s.lag1 is not None and s.looks >= 20
           and s.lag1 > sequence.STRONG_LAG1]
    if lag:
        record["warning"] = (f"lag-1 autocorrelation up to {present.number(round(max(lag), 2))} "
                             "between looks: the intervals allow for correlated looks at the "
                             "price of many more looks to a decision; a longer --interval "
                             "decides sooner")
        say(f"warning: {record['warning']}")
    if record["outcome"] == vd.ROLL_BACK and plan.rollback is not None \
            and plan.rollback_on_breach and not plan.aa:
        record["rollback"] = apply_rollback(plan, reader, say)
    return record


def apply_rollback(plan: Plan, reader: watch.Reader, say: Say) -> dict[str, Any]:
    """Put every canary's changed settings to the rollback file's values, each value found
    journalled first; read back. Raises HarnessError when a value does not read back (the
    journal is then restored: the canary is as it was, and `kvtune restore` is not
    needed)."""
    from kvtune.host.journal import Journal

    rb = plan.rollback
    assert rb is not None
    out: dict[str, Any] = {"file": str(rb.rollback_file), "servers": []}
    say(f"rolling back {len(plan.canaries)} canary server(s) from {rb.rollback_file}")
    with Journal(study="kvtune canary rollback") as journal:
        for server in plan.canaries:
            conn = server.connect()
            try:
                before = reader.settings(conn, list(rb.settings))
                for name, value in rb.settings.items():
                    journal.record_undo(reader.undo_kind, {"port": server.port,
                                                          "directive": name,
                                                          "value": before.get(name, "")})
                    reader.set_setting(conn, name, value)
                after = reader.settings(conn, list(rb.settings))
            except (OSError, ConnectionError, ValueError) as e:
                raise HarnessError(f"rollback of {server.address}: {e}") from None
            finally:
                server.close()
            lines, ok = [], True
            for name, value in rb.settings.items():
                got = after.get(name)
                same = got is not None and reader.same(value, got)
                ok &= same
                lines.append(f"{'ok     ' if same else 'DIFFERS'} {server.address} {name}: "
                             f"rollback {value!r}" + ("" if same else f", found {got!r}"))
            for ln in lines:
                say(ln)
            out["servers"].append({"address": server.address, "before": before,
                                   "after": after, "ok": ok, "lines": lines})
            if not ok:
                raise HarnessError(f"the rollback of {server.address} did not take: "
                                   + "; ".join(ln for ln in lines if "DIFFERS" in ln))
        journal.settle()
    out["ok"] = True
    say("rolled back: every changed setting reads back as the rollback file gives it")
    return out


def write_record(record: dict[str, Any], path: Path) -> None:
    from kvtune.safety.files import write_file

    write_file(path, json.dumps(record, indent=1, default=str) + "\n", what="--json")
