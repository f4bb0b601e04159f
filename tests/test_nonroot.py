"""Not root (issue 22): a command that manages the host says in one line what needs root
and why, exit 2, never a traceback; `check` of an app-only study, `show`, `report` and
`export` work without root. Run as the user nobody (setpriv), with the system's Python
and the project's virtual environment on PYTHONPATH (the venv's own interpreter may sit
in a directory only root can enter)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PY = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"

# kvtune as another user (setpriv). Parallel-safe: what it runs is refused before it touches
# the host, or reads stored studies, or tunes the synthetic target.
pytestmark = [pytest.mark.integration, pytest.mark.parallel,
              pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists(PY),
    reason="needs root, setpriv and the system Python of the venv's version")]


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="kvtune-nonroot-"))
    d.chmod(0o777)
    try:
        yield d
    finally:
        shutil.rmtree(d)


def as_nobody(cwd: Path, *args: str, path: str = "/usr/bin:/bin"
              ) -> subprocess.CompletedProcess[str]:
    site = sysconfig.get_paths()["purelib"]
    env = {"PATH": path, "HOME": str(cwd), "PYTHONPATH": f"{REPO / 'src'}:{site}"}
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           PY, "-m", "kvtune", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def test_commands_that_manage_the_host_say_why_they_need_root(shared_dir: Path) -> None:
    shutil.copy(REPO / "examples" / "memcached.yaml", shared_dir / "mc.yaml")
    for cmd in (["tune", "mc.yaml"], ["run", "mc.yaml"],
                ["sweep", "mc.yaml", "--knob", "memcached.threads"]):
        r = as_nobody(shared_dir, *cmd)
        out = r.stdout + r.stderr
        assert r.returncode == 2, out
        assert f"kvtune {cmd[0]} needs root" in out and "journal" in out, out
        assert "Traceback" not in out and len(out.strip().splitlines()) == 1, out
    journal = shared_dir / "j.json"
    journal.write_text('{"entries": []}')
    r = as_nobody(shared_dir, "restore", "--journal", str(journal))
    assert r.returncode == 2 and "kvtune restore needs root" in r.stderr, r.stderr


def test_the_root_refusal_comes_before_anything_runs(shared_dir: Path) -> None:
    """tune/run/sweep as another user stop at the study file: no server binary is probed
    (a memcached first on PATH that records being run stays unrun)."""
    shutil.copy(REPO / "examples" / "memcached.yaml", shared_dir / "mc.yaml")
    bindir = shared_dir / "bin"
    bindir.mkdir()
    marker = shared_dir / "ran"
    fake = bindir / "memcached"
    fake.write_text(f"#!/bin/sh\necho \"$*\" >> {marker}\necho 'memcached 1.6.18'\n")
    fake.chmod(0o755)
    os.chown(bindir, 65534, 65534)
    os.chown(fake, 65534, 65534)
    for cmd in ("tune", "run"):
        r = as_nobody(shared_dir, cmd, "mc.yaml", path=f"{bindir}:/usr/bin:/bin")
        assert r.returncode == 2 and "need" in r.stderr and "root" in r.stderr, r.stderr
    assert not marker.exists(), marker.read_text()


def test_check_show_report_export_need_no_root(shared_dir: Path) -> None:
    shutil.copy(REPO / "examples" / "memcached.yaml", shared_dir / "mc.yaml")
    r = as_nobody(shared_dir, "check", "mc.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    # ... and says in one line what needs root (issue 29: it said "runnable" only).
    needs = [ln for ln in r.stdout.splitlines() if ln.startswith("needs root:")]
    assert len(needs) == 1 and "kvtune tune, run and sweep need root" in needs[0], r.stdout
    study = shared_dir / "syn.yaml"
    study.write_text("study: nonroot\ntarget: {kind: synthetic, noise_cov: 0.02}\n"
                     "knobs: [synthetic.x, synthetic.mode]\nbudget: {trials: 6}\n"
                     "repetitions: 2\nevaluation: {noise_floor_runs: 3, confirm_top: 1, "
                     "confirm_rounds: 4, ablation: false}\n")
    r = as_nobody(shared_dir, "tune", "syn.yaml")  # the synthetic target touches no host
    assert r.returncode in (0, 1), r.stdout + r.stderr
    for cmd in (["show", "syn.yaml"], ["report", "syn.yaml", "-o", "r.html"],
                ["export", "syn.yaml", "--best-in-search"]):
        r = as_nobody(shared_dir, *cmd)
        out = r.stdout + r.stderr
        assert r.returncode in (0, 1) and "Traceback" not in out, (cmd, out)
    assert (shared_dir / "r.html").stat().st_size > 10_000
