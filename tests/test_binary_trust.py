"""kvtune runs as root: it executes a server binary (even only for its version probe) or a
peer load tool only when the file and its directory are owned by root and writable by
nobody else (issue 22). A study naming another file is refused with exit 2 and the file is
never executed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvtune.safety.binary import untrusted

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")


def _fake_server(d: Path, marker: Path) -> Path:
    """A 'memcached' that leaves a marker when anything executes it."""
    d.mkdir(mode=0o755)
    exe = d / "memcached"
    exe.write_text(f"#!/bin/sh\ntouch {marker}\necho 'memcached 1.6.18'\n")
    exe.chmod(0o755)
    return exe


@pytest.mark.parametrize("how", ["group-writable", "other-writable", "not-root-owned",
                                 "directory-writable"])
def test_an_untrusted_server_binary_is_refused_and_never_executed(tmp_path: Path,
                                                                  how: str) -> None:
    marker = tmp_path / "executed"
    exe = _fake_server(tmp_path / "bin", marker)
    if how == "group-writable":
        exe.chmod(0o775)
    elif how == "other-writable":
        exe.chmod(0o757)
    elif how == "not-root-owned":
        os.chown(exe, 65534, 65534)
    else:
        exe.parent.chmod(0o777)
    assert untrusted(str(exe)) is not None
    study = tmp_path / "s.yaml"
    study.write_text(f"study: trust\ntarget: {{kind: memcached, binary: {exe}}}\n"
                     "load: {rate: 1000, duration: 1s}\n")
    for cmd in (["check", str(study)], ["run", str(study)]):
        r = subprocess.run([sys.executable, "-m", "kvtune", *cmd], capture_output=True,
                           text=True, timeout=120, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(REPO / "src")})
        out = r.stdout + r.stderr
        assert r.returncode == 2, out
        assert "not root" in out or "writable by group or others" in out, out
        assert "Traceback" not in out
    assert not marker.exists()


def test_the_packaged_servers_are_trusted() -> None:
    for name in ("memcached", "redis-server"):
        path = subprocess.run(["sh", "-c", f"command -v {name}"], capture_output=True,
                              text=True).stdout.strip()
        if path:
            assert untrusted(path) is None, untrusted(path)
