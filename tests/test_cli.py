"""CLI conventions: --version, -h as --help, boolean options shown as flags (no `<bool>`),
the exit codes (1: ran, no significant recommendation or nothing to export in the formats
asked; 2: bad input; 3: a harness fault), and `kvtune export` naming the formats that
have content when the ones asked have none."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from support.cli import cli
from support.studies import MC_BASE, make_study

from kvtune import __version__
from kvtune.errors import HarnessError, UserError
from kvtune.export import NoRecommendation


def kvtune(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return cli(*args, cwd=cwd, env={"COLUMNS": "200"})


@pytest.mark.integration  # `--version` runs kvload to say which kvload it found
def test_version_and_short_help() -> None:
    r = kvtune("--version")
    # The version, then the kvload it found (or that none was found).
    assert r.returncode == 0 and r.stdout.startswith(f"kvtune {__version__} ("), r.stdout
    assert "kvload" in r.stdout
    h = kvtune("-h")
    assert h.returncode == 0 and h.stdout == kvtune("--help").stdout and "export" in h.stdout
    assert kvtune("export", "-h").returncode == 0


def test_boolean_options_are_flags() -> None:
    for cmd in ("tune", "run", "export", "show", "knobs"):
        text = kvtune(cmd, "--help").stdout
        assert "<bool>" not in text, cmd
        assert not re.search(r"--no-(json|minimal|best-in-search)\b", text), cmd
    assert "--minimal" in kvtune("export", "--help").stdout


def test_exit_codes_are_distinct() -> None:
    assert NoRecommendation("x").exit_code == 1
    assert UserError("x").exit_code == 2
    assert HarnessError("x").exit_code == 3
    assert kvtune("run", "/nonexistent.yaml").returncode == 2


@pytest.mark.integration  # export asks tuned-adm which profile the host runs
def test_export_with_nothing_in_the_formats_asked(in_tmp: Path) -> None:
    # Only memcached knobs change: no sysctl; the message names what has content.
    rec = {**MC_BASE, "memcached.threads": 2}
    url = make_study(in_tmp, "only", "memcached", MC_BASE, rec, confirmed=True)
    r = kvtune("export", "only", "--storage", url, "--format", "sysctl", cwd=in_tmp)
    assert r.returncode == 1
    msg = " ".join(r.stderr.split())
    assert "Nothing to export for --format sysctl" in msg
    assert "content for memcached, systemd" in msg
    r = kvtune("export", "only", "--storage", url, cwd=in_tmp)
    assert r.returncode == 0 and "rollback/memcached/memcached.conf" in " ".join(
        r.stdout.split())


def test_run_tables_print_figures_for_people(tmp_path: Path) -> None:
    """`kvtune run` and `kvtune sweep` print figures with thousands separators, never in
    exponent notation (a capacity of 55,090 req/s once read "5.509e+04")."""
    study = tmp_path / "s.yaml"
    study.write_text((Path(__file__).parents[1] / "examples" / "synthetic.yaml").read_text()
                     .replace("storage: sqlite:///results/synthetic-demo.db", ""))
    r = kvtune("run", str(study), "--repetitions", "6", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ops_per_sec" in r.stdout and not re.search(r"\de[+-]\d", r.stdout), r.stdout
    # The median with its unit, its interval in the same unit (issue 44: one formatter a unit).
    assert re.search(r"ops_per_sec\s*│\s*\d{1,3},\d{3} req/s\s*│\s*95% CI \d{1,3},\d{3} … "
                     r"\d{1,3},\d{3}", r.stdout), r.stdout


def test_each_invocation_writes_in_its_own_environments_colours_and_width(
        tmp_path: Path) -> None:
    """The consoles are set up for each invocation (kvtune.cli_options.fit_consoles): one
    process running kvtune's main several times (these tests, the tests' fork server's
    children) colours and sizes each run's output as a fresh kvtune in that environment."""
    missing = str(tmp_path / "missing.yaml")
    forced = cli("check", missing, env={"FORCE_COLOR": "1", "TERM": "xterm-256color",
                                        "NO_COLOR": None, "COLUMNS": "200"})
    plain = cli("check", missing, env={"FORCE_COLOR": None, "NO_COLOR": "1",
                                       "COLUMNS": "200"})
    again = cli("check", missing, env={"FORCE_COLOR": "1", "TERM": "xterm-256color",
                                       "NO_COLOR": None, "COLUMNS": "200"})
    assert forced.returncode == plain.returncode == again.returncode == 2
    said = {k: r.stdout + r.stderr for k, r in (("forced", forced), ("plain", plain),
                                                  ("again", again))}
    assert "\x1b[" in said["forced"] and "\x1b[" in said["again"], said
    assert "\x1b[" not in said["plain"] and "missing.yaml" in said["plain"], said
    narrow = cli("check", missing, env={"COLUMNS": "40", "FORCE_COLOR": None})
    wide = cli("check", missing, env={"COLUMNS": "300", "FORCE_COLOR": None})
    n_lines = (narrow.stdout + narrow.stderr).splitlines()
    w_lines = (wide.stdout + wide.stderr).splitlines()
    assert max(map(len, n_lines)) <= 40 < len(missing) + 20, n_lines
    assert len(w_lines) < len(n_lines), (w_lines, n_lines)
    # A COLUMNS that is not a width in ASCII digits is as good as none (it was a traceback:
    # "\u00b2".isdigit() holds, int() refuses it).
    for odd in ("\u00b2", "\u0664\u0660", "-1", "wide"):
        r = cli("check", missing, env={"COLUMNS": odd, "LINES": odd, "FORCE_COLOR": None})
        assert r.returncode == 2 and "Traceback" not in r.stderr, (odd, r.stderr)
