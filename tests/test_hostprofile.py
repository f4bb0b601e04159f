"""The host profile's judgement of a capacity study, from kvload/profile/1 documents."""

from __future__ import annotations

from typing import Any

from kvtune.measure.hostprofile import HostProfile, judge

IDLE: dict[str, Any] = {"driver": "haltpoll", "guest_halt_poll_ns": "0"}


def doc(floor: float, mid: float, bound: float, peak: float = 40000.0,
        limit: float = 90000.0, ci: float = 0.2) -> dict[str, Any]:
    def step(rate: float, lat: float) -> dict[str, Any]:
        return {"rate": rate, "latency_us": lat, "ci": [lat * (1 - ci), lat * (1 + ci)],
                "windows": 12, "good_windows": 12, "schedule_lag_p99_us": 50.0}

    return {"slo": {"label": "p99", "bound_us": bound}, "burst_rate": peak,
            "floor": step(1000, floor), "mid": step(peak / 2, mid),
            "client": {"cost_us_per_request": 20.0, "cpus": 1, "limit_rate": limit}}


def test_a_bound_below_the_floor_is_refused_with_the_figures() -> None:
    j = judge(HostProfile(doc(700, 500, 200), IDLE))
    assert j.refuse and "cannot show p99 <= 200 µs" in j.refuse and "700" in j.refuse
    assert "guest_halt_poll_ns 0" in j.refuse


def test_a_bound_within_twice_the_floor_is_a_warning() -> None:
    j = judge(HostProfile(doc(700, 500, 900), IDLE))
    assert j.refuse is None and j.warn and "within twice this host's floor" in j.warn


def test_a_client_limit_near_the_peak_is_said() -> None:
    j = judge(HostProfile(doc(300, 300, 2000, peak=23275, limit=23655), IDLE))
    assert j.refuse is None and j.warn and "kvload's CPUs reach their limit near 23,655" in j.warn
    assert "placement.cpu_quota_pct" in j.warn
    far = judge(HostProfile(doc(300, 300, 2000, peak=23275, limit=60000), IDLE))
    assert far.warn is None
