"""The host profile of a capacity study: what this host can show before any search.

On a fresh server at the baseline, `kvload --profile SLO` measures the server's peak
(a closed-loop burst), the latency floor at a low rate (1,000 req/s, or the bottom of
`objective.rates`), the latency at half the peak, and kvload's CPU cost per request and
the rate at which its CPUs would be the limit, each latency with its 95% interval over
undisturbed windows. The idle path (cpuidle driver, guest halt-polling) is read from
sysfs, since on a VM it is what sets the floor at low rates.

`judge` compares the SLO with the floor: an SLO within twice the floor is said with the
figures (a warning); an SLO below the floor at both rates, beyond their intervals, cannot
be shown on this host and the study is refused (exit 2) before any search. It also says
when kvload's own limit is near the server's peak (the server may not be the limit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvtune import present, roots
from kvtune.present import number

CPUIDLE = Path(roots.CPUIDLE)
HALTPOLL = Path(roots.HALTPOLL)
# kvload's limit within this factor of the server's peak: the peak may be the client's.
CLIENT_MARGIN = 1.25


def idle_path() -> dict[str, Any]:
    """The cpuidle driver and governor, and the guest halt-polling settings when the
    haltpoll driver is loaded (None where a file is absent)."""

    def read(p: Path) -> str | None:
        try:
            return p.read_text().strip()[:64]
        except OSError:
            return None

    out: dict[str, Any] = {"driver": read(CPUIDLE / "current_driver"),
                           "governor": read(CPUIDLE / "current_governor_ro")
                           or read(CPUIDLE / "current_governor")}
    if HALTPOLL.is_dir():
        for name in ("guest_halt_poll_ns", "guest_halt_poll_grow", "guest_halt_poll_shrink",
                     "guest_halt_poll_allow_shrink"):
            out[name] = read(HALTPOLL / name)
    return out


@dataclass
class HostProfile:
    """What `kvload --profile` measured (its kvload/profile/1 document) and the idle path."""

    doc: dict[str, Any]
    idle: dict[str, Any] = field(default_factory=idle_path)

    def step(self, which: str) -> dict[str, Any]:
        v = self.doc.get(which)
        return v if isinstance(v, dict) else {}

    @property
    def label(self) -> str:
        return str((self.doc.get("slo") or {}).get("label") or "p99")

    @property
    def bound_us(self) -> float:
        return float((self.doc.get("slo") or {}).get("bound_us") or math.nan)

    def latency(self, which: str) -> tuple[float, float, float]:
        """(estimate, CI low, CI high) of the SLO's percentile at `which` (floor | mid)."""
        s = self.step(which)
        ci = s.get("ci") or [None, None]

        def f(x: Any) -> float:
            return float(x) if isinstance(x, int | float) else math.nan

        return f(s.get("latency_us")), f(ci[0]), f(ci[1])

    def lines(self) -> list[str]:
        """The profile for people, a line each."""
        est, lo, hi = self.latency("floor")
        mid, mlo, mhi = self.latency("mid")
        client = self.doc.get("client") or {}
        out = [
            f"peak {number(self.doc.get('burst_rate'))} req/s (closed-loop burst)",
            f"{self.label} floor {number(est)} µs (95% CI {number(lo)} … {number(hi)}) at "
            f"{number(self.step('floor').get('rate'))} req/s; {number(mid)} µs (95% CI "
            f"{number(mlo)} … {number(mhi)}) at {number(self.step('mid').get('rate'))} req/s",
            f"kvload: {number(client.get('cost_us_per_request'))} µs of CPU per request, its "
            f"{number(client.get('cpus'))} CPU(s) the limit near "
            f"{number(client.get('limit_rate'))} req/s",
        ]
        idle = self.idle
        if idle.get("driver"):
            poll = idle.get("guest_halt_poll_ns")
            extra = f", guest_halt_poll_ns {poll}" if poll is not None else ""
            out.append(f"idle path: cpuidle driver {idle['driver']}{extra} (knobs "
                       "cpu.halt_poll_ns, cpu.idle_max_latency_us, cpu.idle_disable)")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"kvload": self.doc, "idle": self.idle}


@dataclass
class Judgement:
    refuse: str | None = None
    warn: str | None = None


def judge(profile: HostProfile) -> Judgement:
    """The SLO against the host's floor (module docstring)."""
    bound = profile.bound_us
    est, lo, _ = profile.latency("floor")
    mid, mlo, _ = profile.latency("mid")
    rate = number(profile.step("floor").get("rate"))
    mid_rate = number(profile.step("mid").get("rate"))
    label = profile.label
    idle = profile.idle
    hint = ""
    if idle.get("driver") == "haltpoll" and str(idle.get("guest_halt_poll_ns")) == "0":
        hint = (" The idle path may set that floor: this VM halts its vCPUs between requests "
                "(cpuidle driver haltpoll, guest_halt_poll_ns 0); the knobs cpu.halt_poll_ns "
                "and cpu.idle_max_latency_us tune it (docs/knobs.md, \"The idle path\").")
    if all(x == x for x in (lo, mlo, bound)) and lo > bound and mlo > bound:
        return Judgement(refuse=(
            f"this host cannot show {label} <= {number(bound)} µs: its {label} is "
            f"{number(est)} µs at {rate} req/s and {number(mid)} µs at {mid_rate} req/s, both "
            "above the bound beyond their 95% intervals; choose a bound above the floor" + hint))
    warnings = []
    for which in ("floor", "mid"):
        st = profile.step(which)
        n, good = st.get("windows"), st.get("good_windows")
        if isinstance(n, int) and isinstance(good, int) and n and good * 2 < n:
            warnings.append(f"the host disturbed {n - good} of {n} windows of the profile at "
                            f"{number(st.get('rate'))} req/s (steal time or another task on "
                            "the server's CPUs): its figures are the host's")
    floor = min(x for x in (est, mid) if x == x) if (est == est or mid == mid) else math.nan
    if floor == floor and bound == bound and bound < 2 * floor:
        warnings.append(
            f"the SLO {label} <= {number(bound)} µs is within twice this host's floor "
            f"({number(est)} µs at {rate} req/s, {number(mid)} µs at {mid_rate} req/s): "
            "searches will be slow to decide and may not agree" + hint)
    peak = profile.doc.get("burst_rate")
    limit = (profile.doc.get("client") or {}).get("limit_rate")
    if (isinstance(peak, int | float) and isinstance(limit, int | float) and peak > 0
            and limit < CLIENT_MARGIN * peak):
        warnings.append(
            f"kvload's CPUs reach their limit near {number(limit)} req/s, within "
            f"{present.share(CLIENT_MARGIN - 1)} of the server's peak ({number(peak)} req/s, "
            "itself measured with kvload): knees near it may be the client's, and a search "
            "that meets its limit ends 'client bound'; to keep the server the limit, give it "
            "a CPU quota (placement.cpu_quota_pct), more work per request (multi-gets), or "
            "kvload more CPUs or another host")
    lag = profile.step("mid").get("schedule_lag_p99_us")
    slo = profile.doc.get("slo") or {}
    if (isinstance(lag, int | float) and bound == bound and slo.get("latency") != "service"
            and lag > 0.25 * bound):
        warnings.append(
            f"kvload's own send delay (p99 {number(lag)} µs at {mid_rate} req/s) is more than "
            f"a quarter of the bound: a search drops such windows as the client's, and may "
            "end 'host disturbed'; a looser bound or a service. latency leaves it out")
    return Judgement(warn="; ".join(warnings) or None)
