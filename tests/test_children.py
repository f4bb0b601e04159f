"""kvtune's own Python children start isolated (issue 40): the debugfs probe and the
scheduler shim run with `-I` from the root directory, so a `json.py`, an `argparse.py` or a
`kvtune/` package in the caller's working directory, or a PYTHONPATH the caller set, is
never imported as root; and a `#!/usr/bin/env` interpreter is judged whatever env's
options."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvtune.host import debugfs
from kvtune.host import sched as hsched
from kvtune.safety import programs

# The children kvtune starts (probes, shims), started and audited.
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="the trust check needs root files")]

PLANTED = ("json", "argparse", "runpy", "ctypes", "platform")


def _plant(d: Path) -> Path:
    """Modules named like the ones kvtune's children import, each leaving a marker."""
    marker = d / "planted-ran"
    body = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    for name in PLANTED:
        (d / f"{name}.py").write_text(body)
    (d / "kvtune").mkdir()
    (d / "kvtune" / "__init__.py").write_text(body)
    (d / "kvtune" / "host").mkdir()
    (d / "kvtune" / "host" / "__init__.py").write_text(body)
    (d / "kvtune" / "host" / "sched.py").write_text(body)
    return marker


def test_the_children_are_isolated_by_construction() -> None:
    assert programs.python_code("pass")[:2] == ["-I", "-c"]
    assert programs.python_module("kvtune.host.sched")[:2] == ["-I", "-c"]
    assert programs.python().cwd == "/"
    argv = hsched.wrap_argv(hsched.ServerSched("other", None, None), ["/bin/true"])
    assert argv[1] == "-I" and "-m" not in argv
    with pytest.raises(ValueError, match="isolated"):
        programs.python().run(["-c", "pass"])
    with pytest.raises(ValueError, match="not a module of kvtune"):
        programs.python_module("json")


@pytest.mark.integration  # starts kvtune's Python
def test_the_debugfs_probe_imports_nothing_from_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = _plant(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    files = debugfs._probe_here(str(tmp_path / "d"))
    assert files[str(tmp_path / "d" / "f")][:3] == [True, True, "x"]
    assert not marker.exists(), marker.read_text()


@pytest.mark.integration  # starts kvtune's Python and /bin/sh
def test_the_scheduler_shim_imports_kvtune_from_its_own_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = _plant(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    argv = hsched.wrap_argv(hsched.ServerSched("other", None, None),
                            ["/bin/sh", "-c", "pwd; exit 7"])
    r = programs.python().run(argv[1:], capture_output=True, text=True, timeout=60)
    assert r.returncode == 7, r.stderr
    assert r.stdout.strip() == "/"  # the server starts from the root directory
    assert not marker.exists(), marker.read_text()


def _script(d: Path, shebang: str) -> Path:
    d.mkdir(mode=0o755, exist_ok=True)
    p = d / "tool"
    p.write_text(f"#!{shebang}\necho hi\n")
    p.chmod(0o755)
    return p


@pytest.mark.parametrize("shebang", [
    "/usr/bin/env -S -C /tmp/kvtune-evil ./tool",  # env's own chdir, then a relative name
    "/usr/bin/env -S -i sh",  # options of env's own
    "/usr/bin/env -S PATH=/tmp/kvtune-evil sh",  # a PATH env would search instead
    "/usr/bin/env -S ${X} sh",  # a variable env expands
    "/usr/bin/env -Ssh\\c",  # an escape
    "/usr/bin/env sh -x",  # more than one word without -S (env looks for 'sh -x')
    "/usr/bin/env kvtune-no-such-program",
])
def test_an_env_interpreter_kvtune_cannot_judge_is_refused(tmp_path: Path,
                                                           shebang: str) -> None:
    tool = _script(tmp_path / "bin", shebang)
    why = programs.untrusted(str(tool))
    assert why is not None and "interpreter is refused" in why, why


def test_an_env_s_interpreter_is_walked(tmp_path: Path) -> None:
    """`env -S NAME` finds NAME on PATH: an untrusted NAME refuses the script."""
    evil = tmp_path / "evil"
    evil.mkdir(mode=0o777)
    (evil / "kvtune-interp").write_text("#!/bin/sh\n")
    (evil / "kvtune-interp").chmod(0o755)
    os.chown(evil / "kvtune-interp", 65534, 65534)
    tool = _script(tmp_path / "bin", "/usr/bin/env -S kvtune-interp -x")
    old = os.environ["PATH"]
    os.environ["PATH"] = f"{evil}:{old}"
    try:
        why = programs.untrusted(str(tool))
    finally:
        os.environ["PATH"] = old
    assert why is not None and "kvtune-interp" in why, why
    ok = _script(tmp_path / "bin2", "/usr/bin/env -S sh -e")
    assert programs.untrusted(str(ok)) is None
    plain = _script(tmp_path / "bin3", "/usr/bin/env sh")
    assert programs.untrusted(str(plain)) is None
