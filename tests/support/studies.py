"""Stored studies made without measuring (optuna's create_trial into a results database),
the configurations they hold, and small helpers around the exported files: what the export,
verify, library and bad-input tests start from."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

from kvtune.cli import main
from kvtune.host.journal import default_path
from kvtune.knobs import catalog
from kvtune.store import Store
from kvtune.targets import host_context

SYSCTLS = ("net.core.somaxconn", "net.ipv4.tcp_autocorking", "kernel.sched_autogroup_enabled",
           "vm.swappiness")
HOST_NOW = {name: catalog.CATALOG[name].applier.current(host_context())
            for name in (*SYSCTLS, "thp.enabled", "thp.defrag")}


def _other(name: str, value: Any, choices: tuple[Any, ...]) -> Any:
    return next(c for c in choices if c != value)


MC_BASE = {"memcached.threads": 4, "memcached.reqs_per_event": 20, "memcached.backlog": 1024,
           "memcached.slab_chunk_max": 512, "memcached.max_item_size": "1m",
           "memcached.lru_crawler": True, "memcached.large_pages": False,
           "memcached.worker_logbuf_size": 64, "memcached.hashpower": 16,
           "net.core.somaxconn": HOST_NOW["net.core.somaxconn"],
           "net.ipv4.tcp_autocorking": bool(HOST_NOW["net.ipv4.tcp_autocorking"]),
           "kernel.sched_autogroup_enabled": bool(HOST_NOW["kernel.sched_autogroup_enabled"]),
           "vm.swappiness": HOST_NOW["vm.swappiness"],
           "thp.enabled": HOST_NOW["thp.enabled"], "thp.defrag": HOST_NOW["thp.defrag"],
           "placement.cpu_quota_pct": -1}
MC_REC = {**MC_BASE, "memcached.threads": 2, "memcached.reqs_per_event": 64,
          "memcached.backlog": 2048, "memcached.slab_chunk_max": 256,
          "memcached.max_item_size": "2m", "memcached.lru_crawler": False,
          "memcached.worker_logbuf_size": 32,
          "memcached.hashpower": 20,
          "net.core.somaxconn": 8192 if HOST_NOW["net.core.somaxconn"] != 8192 else 4096,
          "net.ipv4.tcp_autocorking": not HOST_NOW["net.ipv4.tcp_autocorking"],
          "kernel.sched_autogroup_enabled": not HOST_NOW["kernel.sched_autogroup_enabled"],
          "vm.swappiness": 10 if HOST_NOW["vm.swappiness"] != 10 else 20,
          "thp.enabled": _other("thp", HOST_NOW["thp.enabled"], ("madvise", "always")),
          "thp.defrag": _other("d", HOST_NOW["thp.defrag"], ("defer+madvise", "madvise")),
          "placement.cpu_quota_pct": 150}

REDIS_BASE = {"redis.io_threads": 1, "redis.hz": 10, "redis.maxmemory_mb": 0,
              "redis.maxmemory_policy": "noeviction", "redis.lazyfree_lazy_eviction": False,
              "redis.save": "", "redis.jemalloc_bg_thread": True, "redis.disable_thp": True,
              "redis.activedefrag": False}
REDIS_REC = {**REDIS_BASE, "redis.io_threads": 2, "redis.hz": 50, "redis.maxmemory_mb": 64,
             "redis.maxmemory_policy": "allkeys-lru", "redis.lazyfree_lazy_eviction": True,
             "redis.save": "900 1 300 10", "redis.jemalloc_bg_thread": False,
             "redis.disable_thp": False}
LOAD = {"tool": "kvload", "mode": "closed", "connections": 16, "pipeline": 1,
        "workload": {"mix": "get:9,set:1", "keys": 10000, "popularity": "zipf:0.99",
                     "value_size": 100}}


def make_study(tmp: Path, name: str, target: str, base: dict[str, Any], rec: dict[str, Any],
               confirmed: bool, args: list[str] | None = None, cpus: str | None = "0",
               ablation: dict[str, Any] | None = None,
               space: dict[str, Any] | None = None) -> str:
    url = f"sqlite:///{tmp / 'results' / (name + '.db')}"
    store = Store(url)
    study = optuna.create_study(study_name=name, storage=store.storage, direction="maximize")
    study.set_user_attr("spec", {"study": name, "target": {"kind": target, "args": args or [],
                                                          "cpus": cpus}, "load": LOAD})
    study.set_user_attr("baseline", base)
    if space is not None:
        study.set_user_attr("space", space)
    for i, (kind, cfg, value) in enumerate((("baseline", base, 100.0), ("trial", rec, 120.0))):
        study.add_trial(optuna.trial.create_trial(
            value=value, user_attrs={"kind": kind, "config": cfg,
                                     "eval": {"metrics": {"ops_per_sec": value}, "n": 3}},
            params={}, distributions={}))
        assert study.trials[i].user_attrs["kind"] == kind
    conf: dict[str, Any] = {"metric": "ops_per_sec", "baseline": {"config": base, "metrics": {}},
                            "candidates": []}
    if confirmed:
        conf.update(recommended={"name": "trial 1", "config": rec, "metrics": {},
                                 "comparison": {"change": 0.2, "change_ci_low": 0.12,
                                                "change_ci_high": 0.27}},
                    verdict="trial 1 improves ops_per_sec by +20.0%")
    else:
        conf.update(recommended=None, verdict="no significant improvement found")
    store.put_result(name, "confirmation", conf)
    if ablation is not None:
        store.put_result(name, "ablation", ablation)
    return url


def run_cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as e:
        main(args)
        raise SystemExit(0)
    return int(e.value.code or 0)


def files_under(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())




# -- study files for real servers (memcached, Redis, Valkey on loopback) -----------------

STUDY = """\
study: {name}
target: {{kind: {kind}, cpus: "0", port: {port}}}
load:
  mode: open
  rate: {rate}
  connections: 4
  duration: {duration}
  warmup: 200ms
  cpus: "1"
  workload: {{keys: 2000, value_size: 100, mix: "get:9,set:1"}}
knobs:
{knobs}
objective: {{metric: p99_us}}
constraints: ["hit_ratio >= 0.5"]
budget: {{trials: {trials}}}
repetitions: 1
# steal_threshold: these tests are about the harness, not host noise; a busy hypervisor's
# steal must not stop them. ablation_max_rounds = confirm_rounds: the ablation's fixed design
# (its sequential rounds are tested in test_ablation.py), so the test's time stays bounded.
# intensify: false: a trial that may beat the incumbent is not measured again and again (that
# racing is the search loop's: the unit tier's synthetic studies run it, test_study_units.py
# checks its policy); here it doubled a 2-trial study's repetitions (20 instead of 10).
evaluation: {{noise_floor_runs: 2, confirm_top: 1, confirm_rounds: 3, alpha: 0.1, drift_every: 0,
              max_reruns: 1, steal_threshold: 0.5, ablation_max_rounds: 3, intensify: false}}
sampler: {sampler}
seed: 1
"""


def study_file(tmp: Path, name: str, kind: str = "memcached", knobs: str = "",
               trials: int = 2, rate: int = 5000, duration: str = "500ms", port: int = 0,
               sampler: str = "tpe") -> Path:
    p = tmp / f"{name}.yaml"
    p.write_text(STUDY.format(name=name, kind=kind, knobs=knobs or "  []", trials=trials,
                              rate=rate, duration=duration, port=port, sampler=sampler))
    return p



def wait_for(cond, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def journal_has_process() -> bool:
    try:
        state = json.loads(default_path().read_text())
    except (OSError, ValueError):
        return False
    return bool(state.get("processes"))




def fleet_study(tmp: Path, url: str, name: str = "fleet", trials: int = 8, seed: int = 3,
               hosts: str | None = None, **evaluation: object) -> Path:
    """The synthetic fleet study of the tests and of bench/fleet: 4 knobs, one repetition
    per trial, a 2-repetition noise floor, no intensification or drift checks;
    `evaluation` adds or overrides evaluation keys (e.g. confirm_rounds=5)."""
    ev = {"noise_floor_runs": 2, "intensify": False, "drift_every": 0, **evaluation}
    lines = "".join(f"  {k}: {str(v).lower() if isinstance(v, bool) else v}\n"
                    for k, v in ev.items())
    p = tmp / f"{name}.yaml"
    p.write_text(f"""study: {name}
target:
  kind: synthetic
  noise_cov: 0.05
knobs: [synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]
objective:
  metric: ops_per_sec
budget:
  trials: {trials}
repetitions: 1
evaluation:
{lines}seed: {seed}
storage: {url}
""" + (f"hosts: {hosts}\n" if hosts else ""))
    return p


# A capacity study of the synthetic target (kvload --simulate's M/M/1 server: a known knee),
# of tests/test_capacity_synthetic.py and tests/test_capacity.py.
SYNTHETIC_CAPACITY = """\
study: syn-cap
target: {kind: synthetic, noise_cov: 0.03}
knobs: [synthetic.x, synthetic.threads, synthetic.mode, synthetic.flag]
objective: {metric: capacity, slo: "p99_us <= 500"}
budget: {trials: 6}
repetitions: 3
# One candidate confirmed, no ablation: the loop, the confirmation and the report's curve
# are what this checks (the ablation and confirm_top's Holm correction have tests of their own).
evaluation: {noise_floor_runs: 3, confirm_top: 1, confirm_rounds: 4, ablation: false}
seed: 3
storage: sqlite:///syn-cap.db
"""
