"""kvtune's command line, two ways, one result type (`subprocess.CompletedProcess[str]`):

- `cli(...)`: in this process, through typer's test runner (`CliRunner.isolation`) around
  `kvtune.cli.main`, so kvtune's own error handling and exit codes are the ones tested. The
  unit tier uses it: no interpreter start, no optuna/scipy import per call.
- `kvtune(...)`: a fresh `python -m kvtune`, for what needs a process of its own (a study
  that starts servers and kvload, signals, a worker killed mid-run, the installed entry
  point). That puts the test in the integration tier (the audit hook in conftest.py sees
  the process start).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"


def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    """`kvtune ARGS` in process: its exit code, standard output and standard error."""
    from kvtune.cli import main

    old = Path.cwd()
    runner = CliRunner()
    code = 0
    with runner.isolation(input=input, env=env) as (out, err, _):
        if cwd is not None:
            os.chdir(cwd)
        try:
            main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            os.chdir(old)
            sys.stdout.flush()
            sys.stderr.flush()
        stdout = out.getvalue().decode(errors="replace")
        stderr = err.getvalue().decode(errors="replace")
    return subprocess.CompletedProcess(["kvtune", *args], code, stdout, stderr)


def kvtune(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
           timeout: float = 300, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m kvtune ARGS` in a fresh interpreter (this checkout's kvtune first on its
    path); `env` replaces the environment when given."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", "kvtune", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout,
                          input=input, stdin=None if input is not None else subprocess.DEVNULL)


def show(spec: Path, cwd: Path) -> dict[str, Any]:
    """`kvtune show SPEC --json`, parsed (in process: reading a study starts nothing)."""
    r = cli("show", str(spec), "--json", cwd=cwd)
    assert r.returncode == 0, r.stderr + r.stdout
    return dict(json.loads(r.stdout))
