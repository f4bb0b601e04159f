"""The report's workers section: every process that measured the study (fleet workers, and
plain `kvtune tune` runs), its host, state and trials, and, when the workers' hosts differ
(`hosts: heterogeneous`), each host fingerprint's own baseline and confirmation."""

from __future__ import annotations

import html
from typing import Any

import optuna

from kvtune.analysis.data import StudyData
from kvtune.present import MISSING, number


def _engine(data: StudyData) -> Any:
    return data.engine


def workers(data: StudyData) -> list[dict[str, Any]]:
    """The study's workers (kvtune.fleet.workers_of), each with its trials' numbers."""
    from kvtune.fleet.claims import workers_of

    engine = _engine(data)
    if engine is None:
        return []
    ws = workers_of(engine, data.name)
    for w in ws:
        w["trials"] = [t.number for t in data.trials if t.user_attrs.get("worker") == w["worker"]]
    return ws


def _e(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def _value(t: optuna.trial.FrozenTrial | None) -> str:
    return MISSING if t is None or t.value is None else number(t.value)


def html_section(data: StudyData) -> str:
    """The section's HTML, empty when no worker is recorded (studies before the fleet)."""
    ws = workers(data)
    if not ws:
        return ""
    conf = data.confirmation
    rows = []
    for w in ws:
        note = w.get("note") or ""
        if conf is not None and conf.confirmed_by == w["worker"]:
            note = ("confirmed; " + note).rstrip("; ")
        trials = ", ".join(str(n) for n in w["trials"])
        rows.append(f"<tr><td>{_e(w['worker'])}</td><td>{_e(w['host'])}</td>"
                    f"<td>{_e(w['pid'])}</td><td>{_e(w['state'])}</td>"
                    f"<td>{_e(w['fingerprint_key'])}</td><td>{len(w['trials'])}: {_e(trials)}"
                    f"</td><td>{_e(note)}</td></tr>")
    out = ["<h2 id=workers>Workers</h2><p class=note>Every process that measured this study "
           "(docs/fleet.md): its host, its state (<i>lost</i>: it stopped beating without "
           "ending) and its trials.</p><table><tr><th>worker</th><th>host</th><th>pid</th>"
           "<th>state</th><th>fingerprint</th><th>trials</th><th>note</th></tr>",
           *rows, "</table>"]
    fps = list(dict.fromkeys(w["fingerprint_key"] for w in ws))
    if len(fps) > 1:
        out.append(_hosts(data, ws, fps))
    return "".join(out)


def _hosts(data: StudyData, ws: list[dict[str, Any]], fps: list[str]) -> str:
    from kvtune.documents import Confirmation, latest
    from kvtune.host.fingerprint import FIELDS
    from kvtune.store import documents_in

    engine = _engine(data)
    confirmations: list[Confirmation] = [
        d for d in (documents_in(engine, data.name, "confirmation") if engine else [])
        if isinstance(d, Confirmation)]
    prints = {w["fingerprint_key"]: w["fingerprint"] for w in ws}
    varying = [f for f in FIELDS if len({str(p.get(f)) for p in prints.values()}) > 1]
    head = "".join(f"<th>{_e(f)}</th>" for f in varying)
    out = ["<h3>Hosts</h3><p class=note>Each host fingerprint has its own baseline and "
           "confirmation; a trial is only compared with its own host's baseline.</p>"
           f"<table><tr><th>fingerprint</th>{head}<th>workers</th><th>baseline</th>"
           "<th>best trial</th><th>confirmation</th></tr>"]
    for fp in fps:
        own = [t for t in data.trials if t.user_attrs.get("fingerprint") == fp
               and t.state == optuna.trial.TrialState.COMPLETE]
        base = next((t for t in own if t.user_attrs.get("kind") == "baseline"), None)
        search = [t for t in own if t.user_attrs.get("kind") == "trial"
                  and all(v <= 0 for v in t.user_attrs.get("violations", [0.0]))
                  and t.value is not None]
        best = (max if data.maximize else min)(search, key=lambda t: float(t.value or 0)) \
            if search else None
        conf = latest(confirmations, fp)
        verdict = conf.verdict if conf is not None else MISSING
        who = ", ".join(w["worker"] for w in ws if w["fingerprint_key"] == fp)
        cells = "".join(f"<td>{_e(prints[fp].get(f))}</td>" for f in varying)
        out.append(f"<tr><td>{_e(fp)}</td>{cells}<td>{_e(who)}</td><td>{_value(base)}</td>"
                   f"<td>{'–' if best is None else '#' + str(best.number) + ' '}"
                   f"{_value(best) if best else ''}</td><td>{_e(verdict)}</td></tr>")
    out.append("</table>")
    return "".join(out)
