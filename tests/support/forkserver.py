"""Many short `kvtune` command lines in few processes, each still a process of its own.

A fork server is one Python that imports kvtune's heavy third-party libraries once (optuna
and its RDB storage's SQLAlchemy and Alembic, pydantic, NumPy, SciPy, Plotly, rich, typer),
kvtune's study-file schema and its typed results (kvtune.documents) and its command line
(kvtune.cli, its click command built), and then, per job, forks a child that takes the job's
working directory, environment and standard streams and runs a given boot script (which
imports the rest of kvtune afresh: the knob catalog and its probes, and caches such as the
binaries found on PATH start in every child as in a new process; kvtune's two consoles,
made when kvtune.cli was imported, are made again by `main` for each invocation from the
child's environment and streams). A job costs a fork and kvtune's own import
instead of a whole interpreter start: the bad-inputs corpus (hundreds of command lines)
runs in two processes.

The child is what `python -c BOOT ARGS...` would be, with these differences, none of which
the corpus depends on: the libraries above are already imported; `sys.path` is the server's
(the checkout's src first, no working directory); a job that outlives `timeout` is killed
with SIGALRM (its exit code is then -14)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

SERVER = r"""
import json, os, signal, sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
for name in ("optuna", "sqlalchemy", "pydantic", "numpy", "scipy.stats", "plotly.graph_objects",
             "yaml", "rich.console", "typer", "zstandard",
             # what Optuna's RDB storage imports when a command opens a study (0.4 s a child)
             "optuna.storages._rdb.models", "alembic.command", "alembic.config",
             "alembic.migration", "alembic.script", "sqlalchemy.orm",
             "sqlalchemy.dialects.sqlite",
             # what a command that gets past the study file imports (kvtune.study.run and
             # the report): rich's progress bars, plotly's subplots and narwhals
             "rich.progress", "plotly.subplots",
             # kvtune's study-file schema and loader: pure definitions (no console, no cache
             # filled, nothing started, no environment read at import)
             "kvtune.spec", "kvtune.study.loader",
             # kvtune's typed results (pydantic models over kvtune.stats and kvtune.metrics):
             # definitions too
             "kvtune.documents"):
    try:
        __import__(name)
    except Exception:
        pass
# kvtune's command line, built: its click command from every command's signature (a tenth of
# a second a child), its few modules (nothing started or cached at import; the consoles,
# made at import, are set up again for each invocation by kvtune.cli.main).
try:
    import kvtune.cli
    kvtune.cli.command()
except Exception:
    pass
reply = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nothing of the server's own reaches the reply
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            signal.alarm(int(job["timeout"]))
            os.chdir(job["cwd"])
            os.environ.clear()
            os.environ.update(job["env"])
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
            sys.stdin = open(0, closefd=False)
            sys.stdout = open(1, "w", closefd=False, buffering=1)
            sys.stderr = open(2, "w", closefd=False, buffering=1)
            sys.argv = ["-c", *job["argv"]]
            code = 0
            exec(compile(job["boot"], "<boot>", "exec"), {"__name__": "__main__"})
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    reply.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
    reply.flush()
"""


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


class ForkServer:
    """One server process; `run` is safe to call from one thread at a time (a lock)."""

    def __init__(self, src: Path, scratch: Path) -> None:
        self.scratch = scratch
        scratch.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(src)}
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env, cwd="/")
        self.lock = threading.Lock()
        self.n = 0

    def run(self, boot: str, argv: list[str], cwd: Path, env: dict[str, str],
            timeout: float = 60) -> Ran:
        with self.lock:
            self.n += 1
            out, err = self.scratch / f"{self.n}.out", self.scratch / f"{self.n}.err"
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(json.dumps({
                "boot": boot, "argv": argv, "cwd": str(cwd), "env": env, "timeout": timeout,
                "stdout": str(out), "stderr": str(err)}) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the fork server died ({self.proc.poll()})")
            rc = json.loads(line)["rc"]
            return Ran(rc, out.read_text(errors="replace"), err.read_text(errors="replace"))

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
