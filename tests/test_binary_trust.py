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
from support.cli import kvtune as run_kvtune

from kvtune.safety.binary import untrusted

REPO = Path(__file__).resolve().parents[1]

# kvtune as a process of its own, with untrusted programs first on PATH. Parallel: files
# in the test's own directories judged and refused, nothing measured, no host knob.
pytestmark = [pytest.mark.integration, pytest.mark.parallel,
              pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")]


@pytest.fixture(autouse=True)
def _piped_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """kvtune's width when piped (160), as in a serial run: the messages checked here are
    not wrapped at the 80 columns pytest-xdist's workers set (the tests marked parallel)."""
    monkeypatch.delenv("COLUMNS", raising=False)


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
        r = run_kvtune(*cmd, cwd=tmp_path, timeout=120)
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


# -- issue 29: every component of the path, every program kvtune runs ------------------------

from kvtune.errors import HarnessError  # noqa: E402
from kvtune.safety import programs  # noqa: E402

NOBODY = 65534


def _script(path: Path, marker: Path, banner: str = "memcached 1.6.18") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {marker}\necho '{banner}'\n")
    path.chmod(0o755)
    return path


def _kvtune(*args: str, cwd: Path, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return run_kvtune(*args, cwd=cwd, env={**os.environ, **(env or {})}, timeout=120)


def test_a_link_or_an_ancestor_another_user_controls_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    # A nobody-owned symlink in a nobody-owned directory, pointing at the real server.
    evil = tmp_path / "evil"
    evil.mkdir()
    link = evil / "memcached"
    link.symlink_to("/usr/bin/memcached")
    os.lchown(link, NOBODY, NOBODY)
    os.chown(evil, NOBODY, NOBODY)
    why = untrusted(str(link))
    assert why is not None and "owned by uid 65534" in why, why
    # A root-owned link in a root-owned directory: its target is judged, then accepted.
    good = tmp_path / "good"
    good.mkdir()
    (good / "memcached").symlink_to("/usr/bin/memcached")
    assert untrusted(str(good / "memcached")) is None
    # A root-owned binary under a nobody-owned ancestor (two levels up).
    top = tmp_path / "top"
    exe = _script(top / "mid" / "bin" / "memcached", marker)
    os.chown(top, NOBODY, NOBODY)
    why = untrusted(str(exe))
    assert why is not None and str(top) in why, why
    # A link that leads through a nobody-owned directory, however it is spelled.
    hop = tmp_path / "hop"
    hop.mkdir()
    (hop / "memcached").symlink_to(exe)
    assert untrusted(str(hop / "memcached")) is not None
    assert untrusted(str(good / ".." / "top" / "mid" / "bin" / "memcached")) is not None
    assert not marker.exists()


def test_sticky_directories_and_script_interpreters(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    exe = _script(sticky / "memcached", marker)
    assert untrusted(str(exe)) is None  # root's entry in a sticky directory: only root moves it
    os.chown(exe, NOBODY, NOBODY)
    assert untrusted(str(exe)) is not None
    # A root-owned script whose #! interpreter another user controls.
    interp_dir = tmp_path / "interp"
    interp = _script(interp_dir / "sh", marker)
    os.chown(interp_dir, NOBODY, NOBODY)
    script = tmp_path / "bin" / "memcached"
    script.parent.mkdir()
    script.write_text(f"#!{interp}\necho memcached 1.6.18\n")
    script.chmod(0o755)
    why = untrusted(str(script))
    assert why is not None and "interpreter" in why, why


def test_the_checked_program_is_checked_again_before_each_start(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    exe = _script(tmp_path / "bin" / "tool", marker)
    prog = programs.find(str(exe), "a tool")
    assert prog.run([], capture_output=True).returncode == 0
    assert marker.read_text().count("tool") == 1
    exe.chmod(0o777)  # made writable by anyone after it was found
    with pytest.raises(HarnessError, match="writable by group or others"):
        prog.run([], capture_output=True)
    with pytest.raises(HarnessError):
        prog.argv(["x"])
    assert marker.read_text().count("tool") == 1


def test_an_untrusted_redis_server_first_on_path_is_never_run(tmp_path: Path) -> None:
    """The redis.activedefrag build probe, the version probe of the host context and the
    target's own banner probe all go through the runner: nothing of a nobody-owned
    redis-server first on PATH runs, for check, knobs or export."""
    marker = tmp_path / "ran"
    evil = tmp_path / "evil"
    exe = _script(evil / "redis-server", marker, "Redis server v=7.0.15 sha=0")
    exe.chmod(0o777)
    os.chown(exe, NOBODY, NOBODY)
    os.chown(evil, NOBODY, NOBODY)
    env = {"PATH": f"{evil}:{os.environ['PATH']}"}
    r = _kvtune("check", str(REPO / "examples" / "redis.yaml"), cwd=tmp_path, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "owned by uid 65534" in out and "Traceback" not in out, out
    r = _kvtune("knobs", "--target", "redis", cwd=tmp_path, env=env)
    assert r.returncode == 0 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert not marker.exists(), marker.read_text()


def test_an_untrusted_kvload_or_perf_is_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    evil = tmp_path / "evil"
    kvload = _script(evil / "kvload", marker, "kvload 0.1.0")
    perf = _script(evil / "perf", marker, "perf 6")
    for f in (kvload, perf):
        f.chmod(0o777)
        os.chown(f, NOBODY, NOBODY)
    env = {"KVLOAD": str(kvload), "KVTUNE_PERF": str(perf)}
    r = _kvtune("--version", cwd=tmp_path, env=env)
    assert r.returncode == 0 and "kvload not run" in r.stdout and "65534" in r.stdout, r.stdout
    r = _kvtune("check", str(REPO / "examples" / "memcached.yaml"), cwd=tmp_path, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "NOT runnable" in out and "$KVLOAD" in out, out
    from kvtune.telemetry.perf import PerfStat

    ps = PerfStat(os.getpid(), perf=str(perf))
    ps.start()
    assert ps.stop().error and "65534" in str(ps.result.error)
    assert not marker.exists(), marker.read_text()


SYSTEM_PY = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"


@pytest.mark.skipif(not os.path.exists(SYSTEM_PY), reason="the system Python of this version")
def test_as_another_user_the_owners_trusted_are_root_and_that_user() -> None:
    """Run as uid 65534: root's programs and the user's own are trusted (the user could run
    them anyway); another user's are not."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="kvtune-trust-"))
    try:
        base.chmod(0o755)
        mine = _script(base / "mine" / "tool", base / "m")
        theirs = _script(base / "theirs" / "tool", base / "m")
        for p in (mine, mine.parent):
            os.chown(p, NOBODY, NOBODY)
        for p in (theirs, theirs.parent):
            os.chown(p, 12345, 12345)
        _check_as_nobody(mine, theirs)
    finally:
        shutil.rmtree(base)


def _check_as_nobody(mine: Path, theirs: Path) -> None:
    code = ("import sys; from kvtune.safety.programs import untrusted; "
            "print([untrusted(p) for p in sys.argv[1:]])")
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        SYSTEM_PY, "-c", code, str(mine), str(theirs), "/usr/bin/memcached"],
                       capture_output=True, text=True, timeout=60,
                       env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    got = eval(r.stdout)  # our own repr of a list of str | None
    assert got[0] is None, got
    assert got[1] is not None and "uid 12345" in got[1] and "root or uid 65534" in got[1], got
    assert got[2] is None, got


def test_an_env_script_judges_the_program_env_would_find(tmp_path: Path) -> None:
    """`#!/usr/bin/env NAME` runs the NAME first on PATH: that one is judged too."""
    marker = tmp_path / "ran"
    evil = tmp_path / "evil"
    _script(evil / "python9", marker)
    os.chown(evil, NOBODY, NOBODY)
    script = tmp_path / "bin" / "tool"
    script.parent.mkdir()
    script.write_text("#!/usr/bin/env python9\nprint('hi')\n")
    script.chmod(0o755)
    old = os.environ["PATH"]
    os.environ["PATH"] = f"{evil}:{old}"
    try:
        why = untrusted(str(script))
    finally:
        os.environ["PATH"] = old
    assert why is not None and "interpreter" in why and "65534" in why, why
    # python9 found nowhere else: env would fail, and a script whose interpreter cannot be
    # judged is refused (kvtune.safety.programs), not let through.
    why = untrusted(str(script))
    assert why is not None and "not on PATH" in why, why
