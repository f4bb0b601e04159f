"""The study: preflight, baseline and noise floor, search, drift checks, confirmation.

    kvtune tune FILE     -> StudyRun(load(FILE)).run()     (run.py)
    kvtune sweep FILE    -> sweep()                         (commands.py)
    kvtune run FILE      -> run_config()                    (commands.py)

One unit per part: `search` (the loop), `noise` (the baseline's noise floor), `drift`,
`confirm` (the interleaved confirmation), `record` (trials told to and read from Optuna).
"""

from __future__ import annotations

import optuna

from kvtune.study.commands import run_config, sweep
from kvtune.study.load import Loaded, load, open_store
from kvtune.study.run import StudyRun

optuna.logging.set_verbosity(optuna.logging.WARNING)

__all__ = ["Loaded", "StudyRun", "load", "open_store", "run_config", "sweep"]
