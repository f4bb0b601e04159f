"""One fleet worker of a synthetic study, as a process (used by tests/test_fleet.py and
bench/fleet/run.py):

    python bench/fleet/worker.py STUDY.yaml WORKER-NAME [--sleep SECONDS] [--fast-first N]
        [--no-confirm] [--plain] [--fingerprint FIELD=VALUE ...]

The synthetic target is registered here with a fixed sleep per repetition (a bench-only
target: the sleep stands for a real measurement, and sleeping workers do not compete for
the CPUs). `--plain` runs a plain `kvtune tune` (StudyRun) instead of a fleet worker;
`--fingerprint kernel=X` makes the worker report another host fingerprint (the tests of
heterogeneous fleets run their "hosts" on one machine); `--fast-first N`: the worker's
first N repetitions take no sleep (a plain run's baseline: a test that needs a search trial
measured for long gets to it at once). Prints one JSON line: the worker, its result, and
its wall time.

`main(argv)` is the whole worker: tests/test_fleet.py forks it from a process that has
imported kvtune already (a fresh interpreter spends seconds importing Optuna, SQLAlchemy
and SciPy before it measures anything).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
from rich.console import Console

from kvtune import documents, targets
from kvtune.errors import KvtuneError
from kvtune.study.loader import load_study as load
from kvtune.study.progress import jsonable
from kvtune.study.run import StudyRun
from kvtune.study.worker import FleetWorker
from kvtune.targets.synthetic import SyntheticTarget

SLEEP = 0.0
FAST_FIRST = 0  # repetitions measured without the sleep, first


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


def faked(cls: type[StudyRun], fields: dict[str, str]) -> type[StudyRun]:
    """`cls` reporting a host fingerprint with `fields` replaced."""

    class Faked(cls):  # type: ignore[valid-type,misc]
        def host_fingerprint(self) -> dict[str, Any]:
            return {**super().host_fingerprint(), **fields}

    return Faked


def main(argv: list[str] | None = None) -> int:
    global SLEEP, FAST_FIRST
    ap = argparse.ArgumentParser()
    ap.add_argument("study")
    ap.add_argument("worker")
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--fast-first", type=int, default=0)
    ap.add_argument("--no-confirm", action="store_true")
    ap.add_argument("--plain", action="store_true")
    ap.add_argument("--fingerprint", action="append", default=[])
    a = ap.parse_args(argv)
    SLEEP, FAST_FIRST = a.sleep, a.fast_first
    targets.register("synthetic", SleepySynthetic)
    t0 = time.monotonic()
    try:
        cls = faked(StudyRun, dict(f.split("=", 1) for f in a.fingerprint))
        run = cls(load(a.study), Console(stderr=True, quiet=True), worker=a.worker,
                  strategy=None if a.plain else FleetWorker)
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
