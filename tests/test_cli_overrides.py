"""Command-line options that change the study (`kvtune run --capacity`, `--load-tool`,
`kvtune tune --trials`) pass the loader's checks as the study file's own text does
(issue 32): a value or a combination the loader refuses in a file is refused the same way,
exit 2, naming the option, before anything starts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from support.cli import cli

REPO = Path(__file__).resolve().parents[1]

OPEN_MEMASLAP = """\
study: cap-x
target: {kind: memcached, cpus: "0"}
load:
  tool: memaslap
  mode: open
  rate: 1000
  duration: 1s
  cpus: "1"
knobs: []
repetitions: 1
"""

PEER = """\
study: peer-x
target: {kind: redis, cpus: "0"}
load:
  mode: closed
  duration: 1s
  cpus: "1"
  extra_args: ["--realtime"]
knobs: []
repetitions: 1
"""

GRID = """\
study: grid-x
target: {kind: synthetic}
knobs: [synthetic.threads, synthetic.mode, synthetic.flag]
sampler: grid
budget: {trials: 100}
repetitions: 1
storage: sqlite:///grid-x.db
"""


def kvtune(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli(*args, cwd=cwd, env={"COLUMNS": "200"})


def _refused(r: subprocess.CompletedProcess[str], *words: str) -> None:
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
    assert not Path(os.environ["KVTUNE_JOURNAL"]).exists()  # nothing was started


def test_capacity_is_checked_as_the_files_objective(tmp_path: Path) -> None:
    slo = "p99_us <= 200"
    (tmp_path / "o.yaml").write_text(OPEN_MEMASLAP)
    (tmp_path / "f.yaml").write_text(OPEN_MEMASLAP + f'objective: {{metric: capacity, '
                                                     f'slo: "{slo}"}}\n')
    in_file = kvtune(tmp_path, "run", "f.yaml")
    _refused(in_file, "load.tool, line 4: memaslap cannot measure capacity")
    given = kvtune(tmp_path, "run", "o.yaml", "--capacity", slo)
    _refused(given, "o.yaml (with --capacity 'p99_us <= 200')",
             "load.tool, line 4: memaslap cannot measure capacity")
    # The value itself, as the file's objective.slo is checked (64 characters at most).
    long = "p99_us <= " + "0" * 60 + "200"
    _refused(kvtune(tmp_path, "run", "o.yaml", "--capacity", long),
             "(--capacity)", "at most 64 characters")
    _refused(kvtune(tmp_path, "run", "o.yaml", "--capacity", "p99_us <= 2x"),
             "objective (--capacity): 'p99_us <= 2x' is not an SLO")


def test_load_tool_is_checked_as_the_files_tool(tmp_path: Path) -> None:
    """load.extra_args were vetted for kvload; another tool takes none: refused, never
    handed to redis-benchmark."""
    (tmp_path / "s.yaml").write_text(PEER)
    _refused(kvtune(tmp_path, "run", "s.yaml", "--load-tool", "redis-benchmark"),
             "(with --load-tool redis-benchmark)",
             "load.extra_args, line 7: load.extra_args: redis-benchmark takes none")
    _refused(kvtune(tmp_path, "run", "s.yaml", "--load-tool", "nope"),
             "load.tool (--load-tool): unknown load tool 'nope'")
    (tmp_path / "g.yaml").write_text(GRID)
    _refused(kvtune(tmp_path, "run", "g.yaml", "--load-tool", "kvload"),
             "--load-tool: study 'grid-x' has no load section")


def test_trials_are_checked_as_the_files_budget(tmp_path: Path) -> None:
    (tmp_path / "g.yaml").write_text(GRID)
    _refused(kvtune(tmp_path, "tune", "g.yaml", "--trials", "2", "--no-confirm"),
             "g.yaml (with --trials 2)", "the grid of 3 knob(s) has 24 points and "
             "budget.trials is 2")
    _refused(kvtune(tmp_path, "tune", "g.yaml", "--trials", "0", "--no-confirm"),
             "budget.trials (--trials): Input should be greater than or equal to 1")
    assert not (tmp_path / "grid-x.db").exists()
