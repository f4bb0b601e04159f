"""Host noise facts beside the noise floor, in the terminal and the report — as
`pyperf system show` lists them: CPU governor, turbo, isolated CPUs, irqbalance, steal and
other busy processes. Each check says whether it only adds noise or could change the
study's verdict (steal above the study's threshold, another process busy on the CPUs).

    facts = record(store, study, console, ev)   # at the noise floor: measured, stored
    render_html(noise_floor, host)              # the report's section
"""

from __future__ import annotations

import html
from typing import Any

from rich.console import Console

from kvtune import present
from kvtune.documents import NoiseFloor
from kvtune.store import Store

BUSY = 0.2  # another process using this share of a CPU can change a verdict
KEY = "host_noise"


def checks(facts: dict[str, Any], steal_threshold: float = 0.05) -> list[dict[str, Any]]:
    """[{"fact", "value", "ok", "risk": "none"|"noise"|"verdict", "note"}]."""
    out: list[dict[str, Any]] = []

    def add(fact: str, value: str, risk: str, note: str) -> None:
        out.append({"fact": fact, "value": value, "ok": risk == "none", "risk": risk,
                    "note": note})

    gov = facts.get("governor")
    vm = facts.get("virtualized")
    if gov is None:
        add("CPU governor", "not exposed", "none" if vm else "noise",
            "a VM: frequency is the hypervisor's" if vm else
            "no cpufreq: the frequency policy is unknown")
    else:
        add("CPU governor", gov, "none" if gov == "performance" else "noise",
            "" if gov == "performance" else "frequency scaling adds variance; "
            "`cpupower frequency-set -g performance` for benchmarks")
    turbo = facts.get("turbo")
    add("turbo", "unknown" if turbo is None else "on" if turbo else "off",
        "noise" if turbo else "none",
        "turbo frequency depends on temperature and load: more variance" if turbo else "")
    iso = facts.get("isolated_cpus")
    add("isolated CPUs", iso or "none", "none",
        "" if iso else "the server and load share CPUs with the rest of the system")
    if facts.get("nohz_full"):
        add("nohz_full", str(facts["nohz_full"]), "none", "")
    irq = facts.get("irqbalance")
    add("irqbalance", "running" if irq else "not running", "noise" if irq else "none",
        "moves interrupts between CPUs during the study" if irq else "")
    steal = present.as_number(facts.get("steal"))
    if steal is not None:
        high = steal > steal_threshold
        add("steal", f"{present.share(steal, 1)} over {present.number(facts.get('window_s'))} s",
            "verdict" if high else "none",
            f"above the study's steal threshold ({present.share(steal_threshold)}): repetitions "
            f"are "
            "flagged and re-run, and a noisy neighbour can change the verdict" if high else "")
    during = facts.get("during")
    if during and during.get("n"):
        high = during["max"] > steal_threshold
        add("steal during the study",
            f"median {present.share(during['median'], 1)}, most {present.share(during['max'], 1)} "
            f"over "
            f"{during['n']} repetitions",
            "verdict" if high else "none",
            f"some repetitions saw more than the study's steal threshold "
            f"({present.share(steal_threshold)}): the host's neighbours were busy while it measured"
            if high else "")
    busy = [b for b in facts.get("busy_processes") or []
            if isinstance(b, dict) and (present.as_number(b.get("cpu")) or 0) >= 0.05]
    heavy = [b for b in busy if (present.as_number(b.get("cpu")) or 0) >= BUSY]
    add("other busy processes",
        ", ".join(f"{b.get('comm')} ({b.get('pid')}) {present.share(b.get('cpu'))} of a CPU"
                  for b in busy) or "none",
        "verdict" if heavy else "noise" if busy else "none",
        "they compete with the server or the load for CPU: this can change the verdict"
        if heavy else "")
    return out


def with_study(facts: dict[str, Any] | None, reps: list[dict[str, Any]],
               steal_threshold: float = 0.05) -> dict[str, Any] | None:
    """The facts of the noise floor's half second and the steal every repetition of the
    study measured (its telemetry's `steal`): a host can be quiet when the study starts
    and busy while it measures, and the summary then says both."""
    steal = sorted(float(m["steal"]) for r in reps
                   if isinstance(m := r.get("metrics") or {}, dict)
                   and isinstance(m.get("steal"), int | float))
    if facts is None and not steal:
        return None
    out = dict(facts or {})
    if steal:
        out["during"] = {"n": len(steal), "median": steal[len(steal) // 2],
                         "max": steal[-1]}
    out["checks"] = checks(out, steal_threshold)
    return out


def record(store: Store, study: str, console: Console | None, steal_threshold: float = 0.05,
           ignore: tuple[int, ...] = ()) -> dict[str, Any]:
    """Measure the facts (0.5 s), store them as "host_noise"; print them when given a
    console (a study run does not: its summary prints them, once)."""
    from kvtune.host.facts import noise_facts

    facts = noise_facts(ignore=ignore)
    facts["checks"] = checks(facts, steal_threshold)
    store.put_result(study, KEY, facts)
    if console is not None:
        for line in lines(facts):
            console.print(line, markup=False, highlight=False)
    return facts


class Opened:
    """The facts of `record` with their window open from now until `record()` stores them
    (`kvtune.host.facts.NoiseWindow`): for a study whose target is simulated in kvtune's own
    process (nothing else is started, and kvtune is left out of the busy processes), the
    window spans the search instead of 0.5 s of sleep after the baseline."""

    def __init__(self, store: Store, study: str, steal_threshold: float = 0.05) -> None:
        from kvtune.host.facts import NoiseWindow

        self.store, self.study, self.steal_threshold = store, study, steal_threshold
        self.window = NoiseWindow()

    def record(self) -> dict[str, Any]:
        facts = self.window.close()
        facts["checks"] = checks(facts, self.steal_threshold)
        self.store.put_result(self.study, KEY, facts)
        return facts


def lines(facts: dict[str, Any] | None) -> list[str]:
    if not facts:
        return []
    out = ["Host noise facts (as pyperf system show):"]
    for c in facts.get("checks") or checks(facts):
        mark = {"none": "ok", "noise": "adds noise", "verdict": "CAN CHANGE THE VERDICT"}
        out.append(f"  {c['fact']}: {c['value']} [{mark[c['risk']]}]"
                   + (f" — {c['note']}" if c["note"] else ""))
    return out


def render_html(noise_floor: NoiseFloor | None, host: dict[str, Any] | None,
                facts: dict[str, Any] | None = None) -> str:
    """The noise floor and the host facts beside it (a table); "" with neither."""
    rows = []
    nf = noise_floor
    if nf is not None and nf.cov:
        covs = present.named_shares(nf.cov)  # the metrics' CoVs, one column of shares
        rows.append(f"<tr><td>noise floor (CoV of the baseline, {nf.n or '?'} "
                    f"repetitions)</td><td>{html.escape(covs)}</td><td></td></tr>")
    for c in (facts or {}).get("checks") or (checks(facts) if facts else []):
        cls = {"none": "", "noise": "", "verdict": "worse"}[c["risk"]]
        what = {"none": "ok", "noise": "adds noise", "verdict": "can change the verdict"}
        rows.append(f"<tr><td>{html.escape(c['fact'])}</td><td>{html.escape(c['value'])}"
                    f'</td><td class="{cls}">{what[c["risk"]]}'
                    + (f" — {html.escape(c['note'])}" if c["note"] else "") + "</td></tr>")
    if not rows:
        return ""
    if not facts:
        rows.append('<tr><td colspan="3" class="note">Host noise facts were not recorded for '
                    "this study (studies before issue 13).</td></tr>")
    vm = (host or {}).get("virtualized")
    return ("<h3 id=noise>Noise floor and host noise facts</h3>"
            + ("<p class=note>This host is a VM.</p>" if vm else "")
            + "<table><tr><th>fact</th><th>value</th><th>effect</th></tr>" + "".join(rows)
            + "</table>")
