"""One fleet worker of a synthetic study, as a process (used by tests/test_fleet.py and
bench/fleet/run.py):

    python bench/fleet/worker.py STUDY.yaml WORKER-NAME [--sleep SECONDS] [--fast-first N]
        [--confirm-sleep SECONDS] [--no-confirm] [--plain] [--fingerprint FIELD=VALUE ...]

The synthetic target is registered here with a fixed sleep per repetition (a bench-only
target: the sleep stands for a real measurement, and sleeping workers do not compete for
the CPUs). `--plain` runs a plain `kvtune tune` (StudyRun) instead of a fleet worker;
`--fingerprint kernel=X` makes the worker report another host fingerprint (the tests of
heterogeneous fleets run their "hosts" on one machine); `--fast-first N`: the worker's
first N repetitions take no sleep (a plain run's baseline: a test that needs a search trial
measured for long gets to it at once); `--confirm-sleep S`: a fleet worker's repetitions
take S from its confirmation on (the sleep makes workers' search trials overlap; the
confirmation and its ablation are one worker's). Prints one JSON line: the worker, its
result, and its wall time.

`main(argv)` is the whole worker: tests/test_fleet.py forks it from a process that has
imported kvtune already (a fresh interpreter spends seconds importing Optuna, SQLAlchemy
and SciPy before it measures anything).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import time
from typing import Any

import numpy as np
import optuna
from rich.console import Console

from kvtune import documents, targets
from kvtune.documents import Confirmation
from kvtune.errors import KvtuneError
from kvtune.study.loader import load_study as load
from kvtune.study.phases import PhaseContext
from kvtune.study.progress import jsonable
from kvtune.study.run import StudyRun
from kvtune.study.worker import FleetWorker
from kvtune.targets.synthetic import SyntheticTarget

# What a worker's run imports on its way (SciPy's statistics for the noise floor, Alembic for
# the storage's schema, the PostgreSQL driver, the library's warm start...): `preload()`
# imports them in a process that forks workers, so that each does not import them again
# (about 7 s of a 12 s worker on a loaded 2-CPU host).
PRELOAD = ("scipy.stats", "alembic.command", "alembic.config", "alembic.migration",
           "alembic.script", "optuna.storages._rdb.models", "sqlalchemy.orm",
           "sqlalchemy.dialects.postgresql", "psycopg", "rich._emoji_codes",
           "kvtune.study.inline", "kvtune.library", "kvtune.library.entry",
           "kvtune.library.nearest", "kvtune.library.record", "kvtune.library.store",
           "kvtune.library.warm", "kvtune.measure.host_noise", "kvtune.knobs.resolve",
           "kvtune.safety.storage", "kvtune.safety.workload")


def preload() -> None:
    """Import `PRELOAD` (one missing, e.g. the PostgreSQL driver, is the worker's to name)."""
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


SLEEP = 0.0
FAST_FIRST = 0  # repetitions measured without the sleep, first
CONFIRM_SLEEP: float | None = None  # the sleep from the confirmation on (None: SLEEP)


class SleepySynthetic(SyntheticTarget):
    """The synthetic surface, taking `SLEEP` seconds per repetition (after the first
    `FAST_FIRST`)."""

    def measure(self, params: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        global FAST_FIRST
        if FAST_FIRST > 0:
            FAST_FIRST -= 1
        else:
            time.sleep(SLEEP)
        return super().measure(params, rng)


class BenchWorker(FleetWorker):
    """A fleet worker whose repetitions take `CONFIRM_SLEEP` from its confirmation on."""

    def confirm(self, context: PhaseContext, study: optuna.Study) -> Confirmation | None:
        global SLEEP
        if CONFIRM_SLEEP is not None:
            SLEEP = CONFIRM_SLEEP
        return super().confirm(context, study)


def faked(cls: type[StudyRun], fields: dict[str, str]) -> type[StudyRun]:
    """`cls` reporting a host fingerprint with `fields` replaced."""

    class Faked(cls):  # type: ignore[valid-type,misc]
        def host_fingerprint(self) -> dict[str, Any]:
            return {**super().host_fingerprint(), **fields}

    return Faked


def main(argv: list[str] | None = None) -> int:
    global SLEEP, FAST_FIRST, CONFIRM_SLEEP
    ap = argparse.ArgumentParser()
    ap.add_argument("study")
    ap.add_argument("worker")
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--fast-first", type=int, default=0)
    ap.add_argument("--confirm-sleep", type=float, default=None)
    ap.add_argument("--no-confirm", action="store_true")
    ap.add_argument("--plain", action="store_true")
    ap.add_argument("--fingerprint", action="append", default=[])
    a = ap.parse_args(argv)
    SLEEP, FAST_FIRST, CONFIRM_SLEEP = a.sleep, a.fast_first, a.confirm_sleep
    targets.register("synthetic", SleepySynthetic)
    t0 = time.monotonic()
    try:
        cls = faked(StudyRun, dict(f.split("=", 1) for f in a.fingerprint))
        run = cls(load(a.study), Console(stderr=True, quiet=True), worker=a.worker,
                  strategy=None if a.plain else BenchWorker)
        result = run.run(confirm=not a.no_confirm)
    except KvtuneError as e:
        print(json.dumps({"worker": a.worker, "error": str(e)}), flush=True)
        return e.exit_code
    # The confirmation when this worker ran it (None: another did, `confirmed_by`).
    print(json.dumps({"worker": a.worker, "wall_s": time.monotonic() - t0,
                      "result": jsonable(documents.jsonable(result)),
                      "confirmed_by": getattr(run.strategy, "confirmed_by", None)}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
