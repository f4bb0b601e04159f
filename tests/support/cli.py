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

import atexit
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from support.forkserver import ForkServer

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


BOOT = """\
import runpy, sys
sys.argv[0] = "kvtune"
runpy.run_module("kvtune", run_name="__main__", alter_sys=True)
"""
_SERVER: ForkServer | None = None


def _server() -> ForkServer:
    global _SERVER
    if _SERVER is None or _SERVER.proc.poll() is not None:
        _SERVER = ForkServer(SRC, Path(tempfile.mkdtemp(prefix="test-kvtune-forks-")))
        atexit.register(_SERVER.close)
    return _SERVER


def kvtune(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
           timeout: float = 300, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m kvtune ARGS` as a process of its own (this checkout's kvtune first on its
    path); `env` replaces the environment when given. The process is forked from a fork
    server that has kvtune's libraries imported already (support.forkserver): what it runs,
    and what it can change, are a fresh `python -m kvtune`'s, without the seconds of
    importing SciPy, Optuna and Plotly again. A test that needs the process itself (to
    signal it, or to run two at once) starts `python -m kvtune` with subprocess.Popen."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    argv = [sys.executable, "-m", "kvtune", *args]
    if input is not None:
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout, input=input)
    # The start is the test's, as a Popen would be (conftest's audit hook sees it: a unit
    # test that calls this fails).
    sys.audit("subprocess.Popen", sys.executable, argv, str(cwd) if cwd else None, env)
    ran = _server().run(BOOT, list(args), Path(cwd) if cwd else Path.cwd(), env,
                        timeout=timeout)
    return subprocess.CompletedProcess(argv, ran.returncode, ran.stdout, ran.stderr)


def show(spec: Path, cwd: Path) -> dict[str, Any]:
    """`kvtune show SPEC --json`, parsed (in process: reading a study starts nothing)."""
    r = cli("show", str(spec), "--json", cwd=cwd)
    assert r.returncode == 0, r.stderr + r.stdout
    return dict(json.loads(r.stdout))
